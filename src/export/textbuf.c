/* textbuf — a growable text buffer (see textbuf.h). */
#include "textbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/grow.h"
#include "utf8.h"

void textbuf_init(struct textbuf *tb)
{
	tb->s = NULL;
	tb->len = tb->cap = 0;
	tb->oom = false;
}

/* Makes room for `n` more bytes and the NUL. 0 or -1 (sticky). */
static int reserve(struct textbuf *tb, size_t n)
{
	char *s;

	if (tb->oom)
		return -1;
	if (tb->len + n + 1 <= tb->cap)
		return 0;
	s = grow_array(tb->s, &tb->cap, tb->len + n + 1, 1, 256);
	if (!s) {
		tb->oom = true;
		return -1;
	}
	tb->s = s;
	return 0;
}

void textbuf_add(struct textbuf *tb, const char *s, size_t n)
{
	if (reserve(tb, n) != 0)
		return;
	memcpy(tb->s + tb->len, s, n);
	tb->len += n;
	tb->s[tb->len] = '\0';
}

void textbuf_puts(struct textbuf *tb, const char *s)
{
	textbuf_add(tb, s, strlen(s));
}

void textbuf_put_html(struct textbuf *tb, const char *s)
{
	struct textbuf shown;
	const char *p;

	textbuf_init(&shown);
	textbuf_put_name(&shown, s, strlen(s));
	if (shown.oom) {
		tb->oom = true;
		textbuf_free(&shown);
		return;
	}
	for (p = shown.s; p && *p; p++) {
		switch (*p) {
		case '&': textbuf_puts(tb, "&amp;"); break;
		case '<': textbuf_puts(tb, "&lt;"); break;
		case '>': textbuf_puts(tb, "&gt;"); break;
		case '"': textbuf_puts(tb, "&quot;"); break;
		case '\'': textbuf_puts(tb, "&#39;"); break;
		default: textbuf_add(tb, p, 1);
		}
	}
	textbuf_free(&shown);
}

void textbuf_printf(struct textbuf *tb, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || reserve(tb, (size_t)n) != 0)
		return;
	va_start(ap, fmt);
	vsnprintf(tb->s + tb->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	tb->len += (size_t)n;
}

void textbuf_fill(struct textbuf *tb, char c, size_t n)
{
	if (reserve(tb, n) != 0)
		return;
	memset(tb->s + tb->len, c, n);
	tb->len += n;
	tb->s[tb->len] = '\0';
}

/* The next character of s[*i..len) as a table shows it, into cp (4
 * bytes): a control character becomes '?', a maximal ill-formed UTF-8
 * subpart U+FFFD. Advances *i; returns the bytes written. */
static size_t next_char(const unsigned char *s, size_t len, size_t *i, char *cp)
{
	size_t k, bad;

	if (s[*i] < 0x80) {
		cp[0] = s[*i] < 0x20 || s[*i] == 0x7f ? '?' : (char)s[*i];
		++*i;
		return 1;
	}
	k = utf8_seq(s + *i, len - *i, &bad);
	if (!k) {
		memcpy(cp, UTF8_REPLACEMENT, UTF8_REPLACEMENT_LEN);
		*i += bad;
		return UTF8_REPLACEMENT_LEN;
	}
	memcpy(cp, s + *i, k);
	*i += k;
	return k;
}

size_t textbuf_cols(const char *s)
{
	size_t len = strlen(s), i = 0, n = 0;
	char cp[4];

	while (i < len) {
		next_char((const unsigned char *)s, len, &i, cp);
		n++;
	}
	return n;
}

void textbuf_put_name(struct textbuf *tb, const char *s, size_t len)
{
	size_t i = 0, k;
	char cp[4];

	while (i < len) {
		k = next_char((const unsigned char *)s, len, &i, cp);
		textbuf_add(tb, cp, k);
	}
}

void textbuf_field(struct textbuf *tb, const char *s, size_t width, bool right)
{
	size_t cols = textbuf_cols(s), pad = cols < width ? width - cols : 0;

	if (right)
		textbuf_fill(tb, ' ', pad);
	textbuf_puts(tb, s);
	if (!right)
		textbuf_fill(tb, ' ', pad);
}

void textbuf_name_fit(const char *name, size_t max_cols, char *out, size_t size)
{
	const unsigned char *s = (const unsigned char *)name;
	size_t len = strlen(name), keep = max_cols >= 3 ? max_cols - 3 : 0;
	size_t i = 0, o = 0, seen = 0, k;
	bool cut = max_cols > 0 && textbuf_cols(name) >= keep;
	char cp[4];

	while (i < len && !(cut && seen == keep)) {
		k = next_char(s, len, &i, cp);
		if (o + k + 4 > size) { /* no room for it and "...": stop here */
			cut = true;
			break;
		}
		memcpy(out + o, cp, k);
		o += k;
		seen++;
	}
	if (cut) {
		memcpy(out + o, "...", 3);
		o += 3;
	}
	out[o] = '\0';
}

char *textbuf_take(struct textbuf *tb)
{
	char *s;

	if (tb->oom) {
		textbuf_free(tb);
		return NULL;
	}
	if (reserve(tb, 0) != 0) { /* an empty text still gets its NUL */
		textbuf_free(tb);
		return NULL;
	}
	tb->s[tb->len] = '\0'; /* nothing appended: the buffer is fresh */
	s = tb->s;
	textbuf_init(tb);
	return s;
}

void textbuf_free(struct textbuf *tb)
{
	free(tb->s);
	textbuf_init(tb);
}

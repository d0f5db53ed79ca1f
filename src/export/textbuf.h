/*
 * textbuf — a growable text buffer for the table and summary writers.
 *
 * Text is appended to a malloc'd, always NUL-terminated buffer. Allocation
 * failure is sticky: later appends do nothing, textbuf_take() returns NULL.
 * One thread at a time per textbuf.
 */
#ifndef PROFHOST_TEXTBUF_H
#define PROFHOST_TEXTBUF_H

#include <stdbool.h>
#include <stddef.h>

struct textbuf {
	char *s;
	size_t len, cap;
	bool oom;
};

/* Empties *tb (no allocation yet). */
void textbuf_init(struct textbuf *tb);

/* Appends `n` bytes / a string / printf-formatted text. */
void textbuf_add(struct textbuf *tb, const char *s, size_t n);
void textbuf_puts(struct textbuf *tb, const char *s);
void textbuf_printf(struct textbuf *tb, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Appends `n` copies of byte `c`. */
void textbuf_fill(struct textbuf *tb, char c, size_t n);

/* Appends `s` right-aligned (right = true) or left-aligned in a field of
 * `width` columns, counting UTF-8 code points; a longer `s` is written
 * whole, like Python's '{: >N}'. */
void textbuf_field(struct textbuf *tb, const char *s, size_t width, bool right);

/* Columns `s` takes once shown as a name (textbuf_put_name): one per
 * character, an ill-formed UTF-8 subpart counting as its U+FFFD. (Wide
 * East Asian characters count one too.) */
size_t textbuf_cols(const char *s);

/* Appends len bytes of a name from the program as text shows it: control characters
 * become '?', each maximal ill-formed UTF-8 subpart U+FFFD, so the text
 * stays valid UTF-8 whatever bytes the name held. */
void textbuf_put_name(struct textbuf *tb, const char *s, size_t len);

/* Appends `s` for HTML text or a quoted attribute: shown as
 * textbuf_put_name() does, with &, <, >, " and ' as entities. */
void textbuf_put_html(struct textbuf *tb, const char *s);

/* Writes a name as a table shows it into out[size]: shown as
 * textbuf_put_name() does, and a name of max_cols - 3 characters or more is
 * cut to its first max_cols - 3 followed by "..." (torch's rule); max_cols
 * 0: no cut (but a name that does not fit out[] is cut there, with "...").
 * Always NUL-terminates (size >= 4). */
void textbuf_name_fit(const char *name, size_t max_cols, char *out, size_t size);

/* Hands the text over (caller frees) and empties *tb; NULL if an
 * allocation failed (the buffer is freed then). */
char *textbuf_take(struct textbuf *tb);

/* Frees the text. */
void textbuf_free(struct textbuf *tb);

#endif

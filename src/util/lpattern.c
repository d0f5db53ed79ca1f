/* lpattern — Lua 5.4 patterns matched in C (see lpattern.h). A
 * backtracking recursion over the pattern, written from the manual's
 * description. */
#include "lpattern.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LP_SPECIALS "^$*+?.([%-"

/* Reports a malformed pattern: calls m->fail, which does not return. */
static void lp_fail(struct lpattern *m, const char *msg)
{
	m->fail(m->ctx, msg);
	abort(); /* a fail that returned: a bug of the caller's */
}

static void lp_fail_index(struct lpattern *m, int index)
{
	char msg[48];

	snprintf(msg, sizeof msg, "invalid capture index %%%d", index);
	lp_fail(m, msg);
}

/* Counts one step; every LPATTERN_CHECK_STEPS, the check (which may not
 * return). */
static void lp_step(struct lpattern *m)
{
	if (--m->steps > 0)
		return;
	m->steps = LPATTERN_CHECK_STEPS;
	if (m->check)
		m->check(m->ctx);
}

void lpattern_init(struct lpattern *m, const char *s, size_t ls, const char *p,
		   size_t lp, void (*fail)(void *ctx, const char *msg),
		   void (*check)(void *ctx), void *ctx)
{
	m->s0 = s;
	m->s_end = s + ls;
	m->p_end = p + lp;
	m->fail = fail;
	m->check = check;
	m->ctx = ctx;
	m->steps = LPATTERN_CHECK_STEPS;
	m->ncap = 0;
	m->depth = LPATTERN_MAX_DEPTH;
}

bool lpattern_plain(const char *p, size_t lp)
{
	size_t i;

	for (i = 0; i < lp; i++)
		if (p[i] != '\0' && strchr(LP_SPECIALS, p[i]))
			return false;
	return true;
}

/* Whether byte c is in class %cl (cl a letter of the class, or any other
 * byte standing for itself). */
static int class_has(int c, int cl)
{
	int r;

	switch (tolower(cl)) {
	case 'a': r = isalpha(c); break;
	case 'c': r = iscntrl(c); break;
	case 'd': r = isdigit(c); break;
	case 'g': r = isgraph(c); break;
	case 'l': r = islower(c); break;
	case 'p': r = ispunct(c); break;
	case 's': r = isspace(c); break;
	case 'u': r = isupper(c); break;
	case 'w': r = isalnum(c); break;
	case 'x': r = isxdigit(c); break;
	default: return cl == c;
	}
	return isupper(cl) ? !r : r != 0;
}

/* Whether byte c is in the set that starts at '[' (p) and ends at ']'
 * (close). */
static int set_has(int c, const char *p, const char *close)
{
	int in = 1;

	if (p[1] == '^') {
		in = 0;
		p++;
	}
	while (++p < close) {
		if (*p == '%') {
			p++;
			if (class_has(c, (unsigned char)*p))
				return in;
		} else if (p[1] == '-' && p + 2 < close) {
			p += 2;
			if ((unsigned char)p[-2] <= c && c <= (unsigned char)*p)
				return in;
		} else if ((unsigned char)*p == c) {
			return in;
		}
	}
	return !in;
}

/* The end of the single-character item at p (just past it). Raises on a
 * malformed item. */
static const char *item_end(struct lpattern *m, const char *p)
{
	char c = *p++;

	if (c == '%') {
		if (p >= m->p_end)
			lp_fail(m, "malformed pattern (ends with '%')");
		return p + 1;
	}
	if (c != '[')
		return p;
	if (p < m->p_end && *p == '^')
		p++;
	/* the first byte of a set is taken as it is, even a ']' */
	do {
		if (p >= m->p_end)
			lp_fail(m, "malformed pattern (missing ']')");
		c = *p++;
		if (c == '%' && p < m->p_end)
			p++;
	} while (p >= m->p_end || *p != ']');
	return p + 1;
}

/* Whether the item p..ep matches the byte at s. */
static int single(const struct lpattern *m, const char *s, const char *p, const char *ep)
{
	int c;

	if (s >= m->s_end)
		return 0;
	c = (unsigned char)*s;
	switch (*p) {
	case '.': return 1;
	case '%': return class_has(c, (unsigned char)p[1]);
	case '[': return set_has(c, p, ep - 1);
	default: return (unsigned char)*p == c;
	}
}

static const char *do_match(struct lpattern *m, const char *s, const char *p);

/* %bxy at s (p just past "%b"). */
static const char *balance(struct lpattern *m, const char *s, const char *p)
{
	int depth = 1;

	if (p + 1 >= m->p_end)
		lp_fail(m, "malformed pattern (missing arguments to '%b')");
	if (s >= m->s_end || *s != *p)
		return NULL;
	while (++s < m->s_end) {
		lp_step(m);
		if (*s == p[1]) {
			if (--depth == 0)
				return s + 1;
		} else if (*s == p[0]) {
			depth++;
		}
	}
	return NULL;
}

/* Back reference %<digit> at s. */
static const char *back_ref(struct lpattern *m, const char *s, int digit)
{
	int i = digit - '1';
	size_t len;

	if (i < 0 || i >= m->ncap || m->cap[i].len == LPATTERN_CAP_OPEN)
		lp_fail_index(m, i + 1);
	len = (size_t)m->cap[i].len; /* a position capture never matches */
	if ((size_t)(m->s_end - s) >= len && memcmp(m->cap[i].at, s, len) == 0)
		return s + len;
	return NULL;
}

static const char *open_capture(struct lpattern *m, const char *s, const char *p,
				ptrdiff_t what)
{
	const char *r;

	if (m->ncap >= LPATTERN_MAX_CAPTURES)
		lp_fail(m, "too many captures");
	m->cap[m->ncap].at = s;
	m->cap[m->ncap].len = what;
	m->ncap++;
	r = do_match(m, s, p);
	if (!r)
		m->ncap--;
	return r;
}

static const char *close_capture(struct lpattern *m, const char *s, const char *p)
{
	const char *r;
	int i;

	for (i = m->ncap - 1; i >= 0 && m->cap[i].len != LPATTERN_CAP_OPEN; i--)
		;
	if (i < 0)
		lp_fail(m, "invalid pattern capture");
	m->cap[i].len = s - m->cap[i].at;
	r = do_match(m, s, p);
	if (!r)
		m->cap[i].len = LPATTERN_CAP_OPEN;
	return r;
}

/* item* (longest first). */
static const char *expand_max(struct lpattern *m, const char *s, const char *p,
			      const char *ep)
{
	ptrdiff_t i = 0;
	const char *r;

	while (single(m, s + i, p, ep)) {
		lp_step(m);
		i++;
	}
	for (; i >= 0; i--)
		if ((r = do_match(m, s + i, ep + 1)) != NULL)
			return r;
	return NULL;
}

/* item- (shortest first). */
static const char *expand_min(struct lpattern *m, const char *s, const char *p,
			      const char *ep)
{
	const char *r;

	for (;;) {
		if ((r = do_match(m, s, ep + 1)) != NULL)
			return r;
		if (!single(m, s, p, ep))
			return NULL;
		s++;
	}
}

/* Matches the pattern from p against the subject from s: the end of the
 * match, or NULL. Raises on a malformed pattern, too deep a recursion, or
 * when the check says so. */
static const char *do_match(struct lpattern *m, const char *s, const char *p)
{
	const char *ep;

	if (m->depth-- == 0)
		lp_fail(m, "pattern too complex");
	lp_step(m);
	while (s && p < m->p_end) {
		switch (*p) {
		case '(':
			if (p + 1 < m->p_end && p[1] == ')')
				s = open_capture(m, s, p + 2, LPATTERN_CAP_POSITION);
			else
				s = open_capture(m, s, p + 1, LPATTERN_CAP_OPEN);
			goto out;
		case ')':
			s = close_capture(m, s, p + 1);
			goto out;
		case '$':
			if (p + 1 == m->p_end) {
				s = s == m->s_end ? s : NULL;
				goto out;
			}
			break;
		case '%':
			if (p + 1 >= m->p_end)
				break; /* item_end reports it */
			if (p[1] == 'b') {
				s = balance(m, s, p + 2);
				p += 4;
				continue;
			}
			if (p[1] == 'f') {
				char prev, cur;

				p += 2;
				if (p >= m->p_end || *p != '[')
					lp_fail(m, "missing '[' after '%f' in pattern");
				ep = item_end(m, p);
				prev = s == m->s0 ? '\0' : s[-1];
				cur = s < m->s_end ? *s : '\0';
				if (set_has((unsigned char)prev, p, ep - 1) ||
				    !set_has((unsigned char)cur, p, ep - 1))
					s = NULL;
				p = ep;
				continue;
			}
			if (isdigit((unsigned char)p[1])) {
				s = back_ref(m, s, (unsigned char)p[1]);
				p += 2;
				continue;
			}
			break;
		default:
			break;
		}
		/* a single-character item, maybe with a repetition */
		ep = item_end(m, p);
		if (!single(m, s, p, ep)) {
			if (ep < m->p_end && (*ep == '*' || *ep == '?' || *ep == '-')) {
				p = ep + 1; /* zero repetitions */
				continue;
			}
			s = NULL;
			goto out;
		}
		switch (ep < m->p_end ? *ep : '\0') {
		case '?': {
			const char *r = do_match(m, s + 1, ep + 1);

			if (r) {
				s = r;
				goto out;
			}
			p = ep + 1;
			continue;
		}
		case '+':
			s = expand_max(m, s + 1, p, ep);
			goto out;
		case '*':
			s = expand_max(m, s, p, ep);
			goto out;
		case '-':
			s = expand_min(m, s, p, ep);
			goto out;
		default:
			s++;
			p = ep;
		}
	}
out:
	m->depth++;
	return s;
}

const char *lpattern_match(struct lpattern *m, const char *s, const char *p)
{
	m->ncap = 0;
	m->depth = LPATTERN_MAX_DEPTH;
	return do_match(m, s, p);
}

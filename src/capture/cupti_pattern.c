/*
 * cupti_pattern — Lua patterns for kernel names, matched in C (see
 * cupti_internal.h). Written from the Lua 5.4 manual's description of
 * patterns (§6.4.1); the subset without captures, %b and %f.
 */
#include "cupti_internal.h"

#include <ctype.h>

/* Does character c belong to class `cl` (the letter after '%')? */
static bool in_class(int c, int cl)
{
	bool r;

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
	default: return cl == c; /* %<non-letter>: that character */
	}
	return isupper(cl) ? !r : r;
}

/* The end of the single-character class starting at p (p < the pattern's
 * end; checked patterns only). */
static const char *class_end(const char *p)
{
	if (*p == '%')
		return p + 2;
	if (*p == '[') {
		p++;
		if (*p == '^')
			p++;
		do { /* the first ']' after '[' or '[^' is literal */
			if (*p == '%')
				p++;
			p++;
		} while (*p != ']');
		return p + 1;
	}
	return p + 1;
}

/* Does c match the set [..] from p ('[') to ep (after ']')? */
static bool in_set(int c, const char *p, const char *ep)
{
	bool neg = false;

	p++;
	if (*p == '^') {
		neg = true;
		p++;
	}
	ep--; /* the closing ']' */
	while (p < ep) {
		if (*p == '%' && p + 1 < ep) {
			if (in_class(c, (unsigned char)p[1]))
				return !neg;
			p += 2;
		} else if (p + 2 < ep && p[1] == '-') {
			if ((unsigned char)p[0] <= c && c <= (unsigned char)p[2])
				return !neg;
			p += 3;
		} else {
			if ((unsigned char)*p == c)
				return !neg;
			p++;
		}
	}
	return neg;
}

static bool single(int c, const char *p, const char *ep)
{
	if (c == '\0')
		return false;
	switch (*p) {
	case '.': return true;
	case '%': return in_class(c, (unsigned char)p[1]);
	case '[': return in_set(c, p, ep);
	default: return (unsigned char)*p == c;
	}
}

static const char *match(const char *s, const char *p);

static const char *max_expand(const char *s, const char *p, const char *ep)
{
	size_t i = 0;
	const char *r;

	while (single((unsigned char)s[i], p, ep))
		i++;
	for (;;) {
		r = match(s + i, ep + 1);
		if (r || i == 0)
			return r;
		i--;
	}
}

static const char *min_expand(const char *s, const char *p, const char *ep)
{
	const char *r;

	for (;;) {
		r = match(s, ep + 1);
		if (r)
			return r;
		if (!single((unsigned char)*s, p, ep))
			return NULL;
		s++;
	}
}

/* Matches pattern p at s; returns the end of the match or NULL. */
static const char *match(const char *s, const char *p)
{
	const char *ep, *r;

	if (*p == '\0')
		return s;
	if (*p == '$' && p[1] == '\0')
		return *s == '\0' ? s : NULL;
	ep = class_end(p);
	switch (*ep) {
	case '?':
		if (single((unsigned char)*s, p, ep) && (r = match(s + 1, ep + 1)))
			return r;
		return match(s, ep + 1);
	case '*':
		return max_expand(s, p, ep);
	case '+':
		return single((unsigned char)*s, p, ep) ? max_expand(s + 1, p, ep) : NULL;
	case '-':
		return min_expand(s, p, ep);
	default:
		return single((unsigned char)*s, p, ep) ? match(s + 1, ep) : NULL;
	}
}

const char *cupti_pattern_check(const char *pat)
{
	const char *p = pat;

	if (*p == '^')
		p++;
	while (*p) {
		if (*p == '(' || *p == ')')
			return "captures are not supported in kernel patterns";
		if (*p == '%') {
			if (!p[1])
				return "the pattern ends with '%'";
			if (p[1] == 'b' || p[1] == 'f')
				return "%b and %f are not supported in kernel patterns";
			if (p[1] >= '0' && p[1] <= '9')
				return "back-references are not supported in kernel patterns";
			p += 2;
			continue;
		}
		if (*p == '[') {
			p++;
			if (*p == '^')
				p++;
			do {
				if (!*p)
					return "missing ']' in the pattern";
				if (*p == '%') {
					if (!p[1])
						return "missing ']' in the pattern";
					p++;
				}
				p++;
			} while (*p != ']');
		}
		p++;
	}
	return NULL;
}

bool cupti_pattern_find(const char *pat, const char *s)
{
	if (*pat == '^')
		return match(s, pat + 1) != NULL;
	do {
		if (match(s, pat))
			return true;
	} while (*s++);
	return false;
}

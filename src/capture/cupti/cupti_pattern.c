/*
 * cupti_pattern — Lua patterns for kernel names, matched in C (see
 * cupti_internal.h) by src/util/lpattern.c; the subset without captures,
 * %b and %f.
 */
#include "cupti_internal.h"

#include <setjmp.h>
#include <string.h>

#include "../../util/lpattern.h"

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

/* The matcher's failure: only "pattern too complex" can get here for a
 * checked pattern; the name then does not match. Leaves through ctx, the
 * jmp_buf of cupti_pattern_find. */
static void find_failed(void *ctx, const char *msg)
{
	(void)msg;
	longjmp(*(jmp_buf *)ctx, 1);
}

/* string.find(s, pat) ~= nil; `jb` is where a failure leaves to. */
static bool find_in(const char *pat, const char *s, jmp_buf *jb)
{
	struct lpattern m;
	size_t ls = strlen(s);
	bool anchor = *pat == '^';
	const char *s1 = s;

	if (anchor)
		pat++;
	lpattern_init(&m, s, ls, pat, strlen(pat), find_failed, NULL, jb);
	do {
		if (lpattern_match(&m, s1, pat))
			return true;
	} while (s1++ < s + ls && !anchor);
	return false;
}

bool cupti_pattern_find(const char *pat, const char *s)
{
	jmp_buf jb;

	if (setjmp(jb) != 0)
		return false;
	return find_in(pat, s, &jb);
}

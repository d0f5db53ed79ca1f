/*
 * lpattern — Lua 5.4's patterns matched in C (libc only), with a step
 * check.
 *
 * The patterns of the Lua 5.4 manual (section 6.4.1): single character
 * classes ('.', %a %c %d %g %l %p %s %u %w %x and their upper-case
 * complements, %<punct>, sets [...] with ranges and classes), each maybe
 * followed by *, +, - or ?; %1-%9 back references; %bxy; %f[set];
 * captures and position captures (); $ at the end. The results, the limits
 * (32 captures, 200 nested calls) and the error messages are those of Lua's
 * string library. The caller handles a leading '^' (an anchor for find,
 * match and gsub; a plain character for gmatch).
 *
 * Two users: the policy sandbox's string.find & co. (src/policy/
 * pattern.c), which Lua's own matcher would let run for minutes inside one
 * C call, and kernel-name patterns (src/capture/cupti/cupti_pattern.c), matched
 * in CUDA's launch callback without Lua. The state lives on the caller's
 * stack and holds no memory, so `fail` and `check` may leave by longjmp.
 * One thread per state.
 */
#ifndef PROFHOST_UTIL_LPATTERN_H
#define PROFHOST_UTIL_LPATTERN_H

#include <stdbool.h>
#include <stddef.h>

#define LPATTERN_MAX_CAPTURES 32
#define LPATTERN_MAX_DEPTH 200    /* nested match calls: "pattern too complex" */
#define LPATTERN_CHECK_STEPS 4096 /* matching steps between two checks */
#define LPATTERN_CAP_OPEN (-1)    /* a capture whose ')' was not reached */
#define LPATTERN_CAP_POSITION (-2)

/* `fail` (required) gets Lua's message for a malformed pattern, "pattern
 * too complex" or "too many captures", and must not return; `check` (may
 * be NULL), called every LPATTERN_CHECK_STEPS steps, may leave too (a
 * budget). */
struct lpattern {
	const char *s0, *s_end;   /* the subject */
	const char *p_end;        /* the end of the pattern */
	void (*fail)(void *ctx, const char *msg);
	void (*check)(void *ctx);
	void *ctx;
	int depth;                /* nested match calls left */
	int steps;                /* until the next check */
	int ncap;                 /* captures of the last match */
	struct {
		const char *at;
		ptrdiff_t len;    /* bytes, or LPATTERN_CAP_OPEN / _POSITION */
	} cap[LPATTERN_MAX_CAPTURES];
};

/* Prepares matching pattern p[0..lp) against subject s[0..ls). */
void lpattern_init(struct lpattern *m, const char *s, size_t ls, const char *p,
		   size_t lp, void (*fail)(void *ctx, const char *msg),
		   void (*check)(void *ctx), void *ctx);

/* Matches the pattern from p (inside the one given to lpattern_init, after
 * any '^') at subject position s: the end of the match, or NULL. The
 * captures are in m->cap[0..m->ncap). */
const char *lpattern_match(struct lpattern *m, const char *s, const char *p);

/* Whether p[0..lp) has none of the special characters ^$*+?.([%- (Lua's
 * string.find then searches for it as plain text). */
bool lpattern_plain(const char *p, size_t lp);

#endif

/*
 * check — the unit tests' tiny harness.
 *
 * CHECK(cond) records a failure with file:line and goes on; CHECK_EQ_INT and
 * CHECK_EQ_STR print both sides. check_done() prints "N passed, N failed"
 * and returns the exit status for main().
 */
#ifndef PROFHOST_TEST_CHECK_H
#define PROFHOST_TEST_CHECK_H

#include <stdio.h>
#include <string.h>

static int check_passed, check_failed;

#define CHECK(cond)                                                          \
	do {                                                                 \
		if (cond) {                                                  \
			check_passed++;                                      \
		} else {                                                     \
			check_failed++;                                      \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, \
				__LINE__, #cond);                            \
		}                                                            \
	} while (0)

#define CHECK_EQ_INT(a, b)                                                   \
	do {                                                                 \
		long long check_a_ = (long long)(a), check_b_ = (long long)(b); \
		if (check_a_ == check_b_) {                                  \
			check_passed++;                                      \
		} else {                                                     \
			check_failed++;                                      \
			fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n", \
				__FILE__, __LINE__, #a, #b, check_a_, check_b_); \
		}                                                            \
	} while (0)

#define CHECK_EQ_STR(a, b)                                                   \
	do {                                                                 \
		const char *check_a_ = (a), *check_b_ = (b);                 \
		if (check_a_ && check_b_ && strcmp(check_a_, check_b_) == 0) { \
			check_passed++;                                      \
		} else {                                                     \
			check_failed++;                                      \
			fprintf(stderr, "%s:%d: %s == %s failed: \"%s\" != \"%s\"\n", \
				__FILE__, __LINE__, #a, #b,                  \
				check_a_ ? check_a_ : "(null)",              \
				check_b_ ? check_b_ : "(null)");             \
		}                                                            \
	} while (0)

static inline int check_done(void)
{
	printf("%d passed, %d failed\n", check_passed, check_failed);
	return check_failed ? 1 : 0;
}

#endif

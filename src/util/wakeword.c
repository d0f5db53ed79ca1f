/* wakeword — see wakeword.h. */
#include "wakeword.h"

#include <errno.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

void wakeword_post(_Atomic uint32_t *w, uint32_t bits)
{
	atomic_fetch_or_explicit(w, bits, memory_order_release);
	syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* Nanoseconds of CLOCK_MONOTONIC. */
static int64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

uint32_t wakeword_take(_Atomic uint32_t *w, int64_t timeout_ns)
{
	int64_t end = timeout_ns >= 0 ? mono_ns() + timeout_ns : 0;

	for (;;) {
		uint32_t bits = atomic_exchange_explicit(w, 0, memory_order_acquire);
		struct timespec rel, *until = NULL;

		if (bits)
			return bits;
		if (timeout_ns >= 0) {
			int64_t left = end - mono_ns();

			if (left <= 0)
				return 0;
			rel.tv_sec = left / 1000000000;
			rel.tv_nsec = left % 1000000000;
			until = &rel;
		}
		/* Sleeps only while the word is still 0: a post in between
		 * makes the wait return at once. */
		syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT_PRIVATE, 0, until, NULL, 0);
	}
}

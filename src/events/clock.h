/*
 * clock — the one clock every profhost timestamp is read from.
 *
 * CLOCK_MONOTONIC in nanoseconds. CPU events, step boundaries and (through
 * CUPTI's timestamp callback) GPU records all use it, so they share a
 * timeline. clock_wall_offset_ns() converts it to the Unix epoch for the
 * trace's baseTimeNanoseconds.
 */
#ifndef PROFHOST_CLOCK_H
#define PROFHOST_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Current monotonic time in ns. Async-signal-safe; any thread. */
static inline int64_t clock_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Realtime minus monotonic, in ns: add it to a clock_now_ns() value to get
 * nanoseconds since the Unix epoch. Any thread. */
static inline int64_t clock_wall_offset_ns(void)
{
	struct timespec rt, mono;
	clock_gettime(CLOCK_MONOTONIC, &mono);
	clock_gettime(CLOCK_REALTIME, &rt);
	return ((int64_t)rt.tv_sec - mono.tv_sec) * 1000000000 +
	       (rt.tv_nsec - mono.tv_nsec);
}

#endif

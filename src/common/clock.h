/*
 * clock — the one clock every profhost timestamp is read from.
 *
 * CLOCK_MONOTONIC in nanoseconds. CPU events, step boundaries and (through
 * CUPTI's timestamp callback) GPU records all use it, so they share a
 * timeline. clock_wall_offset_ns() converts it to the Unix epoch for the
 * trace's baseTimeNanoseconds.
 *
 * Fast path. On x86-64, when the kernel itself keeps time with the TSC
 * (its clocksource is "tsc", so the TSC is invariant and synchronized
 * across CPUs), clock_now_ns() reads the TSC (~10 ns here, against ~24 ns
 * for clock_gettime) and scales it with parameters that clock_calibrate()
 * derives from CLOCK_MONOTONIC: a line through the last calibration point
 * whose slope is the TSC rate measured against CLOCK_MONOTONIC, corrected
 * so that any difference accumulated since is slewed away within about a
 * second (at most 500 ppm). The clock stays continuous and monotonic, and
 * within microseconds of CLOCK_MONOTONIC. Until the first calibration
 * pairs are 50 ms apart, and wherever the TSC is not used (other
 * clocksources, other architectures, PROF_CLOCK=monotonic), clock_now_ns()
 * is clock_gettime(CLOCK_MONOTONIC).
 *
 * One set of parameters per process: the shim owns it, the core points
 * clock_params at the shim's (clock_share()) at start-up, so both libraries
 * read the same clock. Any other program (tests, tools) has its own, which
 * stays on clock_gettime unless it calls clock_calibrate().
 */
#ifndef PROFHOST_CLOCK_H
#define PROFHOST_CLOCK_H

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

/* Calibrate at most this often (clock_calibrate's callers may call it at
 * every step). */
#define CLOCK_CALIBRATE_NS 1000000000LL

/* TSC scaling, published under a sequence lock: ns = ns0 + ((tsc - tsc0) *
 * mult >> 32). Written by clock_calibrate() only. */
struct clock_params {
	_Atomic int on;           /* 0: clock_gettime */
	_Atomic uint32_t seq;     /* odd while being written */
	_Atomic int64_t tsc0, ns0;
	_Atomic uint64_t mult;    /* nanoseconds per tick, times 2^32 */
	/* The calibrating thread's own state. */
	int usable;               /* 0 unknown, 1 TSC usable, -1 not */
	int64_t last_tsc, last_mono; /* the previous calibration pair */
	int64_t last_now;         /* clock_now_ns() at the last calibration */
};

/* The process's parameters (see above). */
extern struct clock_params *clock_params;

/* CLOCK_MONOTONIC through the system call (vDSO). Any thread. */
static inline int64_t clock_mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Current monotonic time in ns. Async-signal-safe (a signal handler that
 * interrupts clock_calibrate() would spin: only the host's stepping
 * thread calibrates, and never from a handler). Any thread. */
static inline int64_t clock_now_ns(void)
{
#if defined(__x86_64__)
	struct clock_params *c = clock_params;

	if (atomic_load_explicit(&c->on, memory_order_acquire)) {
		for (;;) {
			uint32_t s = atomic_load_explicit(&c->seq, memory_order_acquire);
			int64_t tsc0 = atomic_load_explicit(&c->tsc0, memory_order_relaxed);
			int64_t ns0 = atomic_load_explicit(&c->ns0, memory_order_relaxed);
			uint64_t mult = atomic_load_explicit(&c->mult, memory_order_relaxed);
			int64_t d = (int64_t)__rdtsc() - tsc0;

			atomic_thread_fence(memory_order_acquire);
			if (!(s & 1) && atomic_load_explicit(&c->seq, memory_order_relaxed) == s)
				return ns0 + (int64_t)(((__int128)d * (__int128)mult) >> 32);
		}
	}
#endif
	return clock_mono_ns();
}

/* As clock_now_ns(), for signal handlers that may interrupt
 * clock_calibrate() on their own thread (the CPU sampler's): it never waits
 * for the parameters; while they are being written it reads
 * CLOCK_MONOTONIC instead (microseconds apart at most). Any thread. */
static inline int64_t clock_now_ns_signal(void)
{
#if defined(__x86_64__)
	struct clock_params *c = clock_params;

	if (atomic_load_explicit(&c->on, memory_order_acquire)) {
		uint32_t s = atomic_load_explicit(&c->seq, memory_order_acquire);
		int64_t tsc0 = atomic_load_explicit(&c->tsc0, memory_order_relaxed);
		int64_t ns0 = atomic_load_explicit(&c->ns0, memory_order_relaxed);
		uint64_t mult = atomic_load_explicit(&c->mult, memory_order_relaxed);
		int64_t d = (int64_t)__rdtsc() - tsc0;

		atomic_thread_fence(memory_order_acquire);
		if (!(s & 1) && atomic_load_explicit(&c->seq, memory_order_relaxed) == s)
			return ns0 + (int64_t)(((__int128)d * (__int128)mult) >> 32);
	}
#endif
	return clock_mono_ns();
}

/*
 * Takes a (TSC, CLOCK_MONOTONIC) pair and updates the parameters: the first
 * call decides whether the TSC is used and anchors; a later call at least
 * 50 ms on switches the TSC on; later calls at least CLOCK_CALIBRATE_NS
 * apart re-measure the rate and slew. `now` is a clock_now_ns() value the
 * caller read (to skip the work cheaply). One thread at a time (the host
 * calls it under its window lock); never from a signal handler.
 */
void clock_calibrate(int64_t now);

/* Makes this library read `shared` (the shim's parameters). Start-up, before
 * other threads of this library read the clock. */
void clock_share(struct clock_params *shared);

/* Realtime minus monotonic, in ns: add it to a clock_now_ns() value to get
 * nanoseconds since the Unix epoch. The realtime read is bracketed by two
 * clock_now_ns() reads, five times, and the tightest bracket is kept, so a
 * thread preempted between the reads does not skew it. Any thread. */
static inline int64_t clock_wall_offset_ns(void)
{
	int64_t best = INT64_MAX, off = 0;
	int i;

	for (i = 0; i < 5; i++) {
		struct timespec rt;
		int64_t a = clock_now_ns(), b;

		clock_gettime(CLOCK_REALTIME, &rt);
		b = clock_now_ns();
		if (b - a < best) {
			best = b - a;
			off = ((int64_t)rt.tv_sec * 1000000000 + rt.tv_nsec) - (a + (b - a) / 2);
		}
	}
	return off;
}

#endif

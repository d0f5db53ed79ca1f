/* clock — TSC calibration against CLOCK_MONOTONIC (see clock.h). */
#include "clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIRST_NS 50000000LL     /* first rate measurement: after 50 ms */
#define PAIR_MAX_TICKS 20000    /* a pair read more loosely (preempted) is
				 * not used: its error would skew the rate */
#define SLEW_MAX 5e-4           /* slewing changes the rate by at most 500 ppm */

static struct clock_params own;
/* hidden: each library has its own pointer, aimed by clock_share() */
struct clock_params *clock_params = &own;

void clock_share(struct clock_params *shared)
{
	if (shared)
		clock_params = shared;
}

#if defined(__x86_64__)
/* The TSC is safe to read as a clock when the kernel keeps time with it
 * (it then checked that it is invariant and synchronized) and the user did
 * not say otherwise. */
static int tsc_usable(void)
{
	const char *env = getenv("PROF_CLOCK");
	char buf[32] = "";
	FILE *f;

	if (env && strcmp(env, "monotonic") == 0)
		return -1;
	f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
	if (!f)
		return -1;
	if (!fgets(buf, sizeof buf, f))
		buf[0] = '\0';
	fclose(f);
	return strncmp(buf, "tsc", 3) == 0 && (buf[3] == '\n' || buf[3] == '\0') ? 1 : -1;
}

/* A close (TSC, CLOCK_MONOTONIC) pair: the TSC read is the midpoint of the
 * two around the fastest of a few tries. Returns 0, or -1 when every try
 * was interrupted (the pair would be too loose to calibrate with). */
static int read_pair(int64_t *tsc, int64_t *mono)
{
	int64_t best = INT64_MAX;
	int i;

	for (i = 0; i < 5; i++) {
		int64_t t1 = (int64_t)__rdtsc();
		int64_t m = clock_mono_ns();
		int64_t t2 = (int64_t)__rdtsc();

		if (t2 - t1 < best) {
			best = t2 - t1;
			*tsc = t1 + (t2 - t1) / 2;
			*mono = m;
		}
	}
	return best < PAIR_MAX_TICKS ? 0 : -1;
}

/* Publishes new parameters under the sequence lock. */
static void publish(struct clock_params *c, int64_t tsc0, int64_t ns0, uint64_t mult)
{
	uint32_t s = atomic_load_explicit(&c->seq, memory_order_relaxed);

	atomic_store_explicit(&c->seq, s + 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	atomic_store_explicit(&c->tsc0, tsc0, memory_order_relaxed);
	atomic_store_explicit(&c->ns0, ns0, memory_order_relaxed);
	atomic_store_explicit(&c->mult, mult, memory_order_relaxed);
	atomic_store_explicit(&c->seq, s + 2, memory_order_release);
	atomic_store_explicit(&c->on, 1, memory_order_release);
}

void clock_calibrate(int64_t now)
{
	struct clock_params *c = clock_params;
	int64_t tsc, mono, dt;
	double rate, slope, err, adj;

	if (c->usable < 0)
		return;
	if (c->usable == 0) {
		c->usable = tsc_usable();
		if (c->usable < 0)
			return;
		if (read_pair(&c->last_tsc, &c->last_mono) != 0)
			c->usable = 0; /* try again next time */
		c->last_now = now;
		return;
	}
	if (now - c->last_now < (atomic_load(&c->on) ? CLOCK_CALIBRATE_NS : FIRST_NS))
		return;
	if (read_pair(&tsc, &mono) != 0)
		return; /* interrupted: next time */
	dt = tsc - c->last_tsc;
	if (dt <= 0 || mono <= c->last_mono)
		return; /* the TSC went backwards: keep what we have */
	rate = (double)(mono - c->last_mono) / (double)dt; /* ns per tick */
	if (!atomic_load(&c->on)) {
		publish(c, tsc, mono, (uint64_t)(rate * 4294967296.0));
	} else {
		/* Continue from where our clock is now, on a slope that brings it
		 * back to CLOCK_MONOTONIC by the time the next calibration is
		 * expected (as far away as the last one, at least 1 s): if that
		 * comes later, the overshoot is at most the offset removed. */
		int64_t ours = c->ns0 + (int64_t)(((__int128)(tsc - c->tsc0) *
						   (__int128)c->mult) >> 32);
		double horizon = (double)(mono - c->last_mono);

		if (horizon < (double)CLOCK_CALIBRATE_NS)
			horizon = (double)CLOCK_CALIBRATE_NS;
		err = (double)(ours - mono);
		adj = err / horizon;
		if (adj > SLEW_MAX)
			adj = SLEW_MAX;
		if (adj < -SLEW_MAX)
			adj = -SLEW_MAX;
		slope = rate * (1.0 - adj);
		publish(c, tsc, ours, (uint64_t)(slope * 4294967296.0));
	}
	c->last_tsc = tsc;
	c->last_mono = mono;
	c->last_now = now;
}
#else
void clock_calibrate(int64_t now)
{
	(void)now;
}
#endif

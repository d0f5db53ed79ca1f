/*
 * test_pyclock — Python's timestamps on the host's clock
 * (src/capture/python/pyclock.c), against a host clock made to run 1 ms
 * ahead of CLOCK_MONOTONIC and 1000 ppm fast (the TSC scaled by a rate
 * measured here, then skewed), so that each calibration point's offset
 * differs from the last. Checks what the bridge relies on: a timestamp
 * just after a point takes that point's offset; one converted late (a
 * step's phases, handed over at its end) the offset on the line between
 * the points around it, not the newer one's; one timestamp converted
 * twice gives one host time; one older than every point the oldest's;
 * and all of that still after the ring of points has wrapped around.
 * Where the test reads a time and converts it, a preemption in between
 * moves the point taken for it by the delay (`lat`), and the offset the
 * test reads back by 1000 ppm of it: the tolerances allow for that.
 */
#include "check.h"

#include <stdlib.h>
#include <time.h>

#include "capture/python/pyclock.h"
#include "common/clock.h"

#define POINTS 4096 /* pyclock.c's PYCLOCK_POINTS */

static void sleep_us(long us)
{
	struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };

	nanosleep(&ts, NULL);
}

#if defined(__x86_64__)
static struct clock_params fake;

/* Points the host clock at `fake`: 1 ms ahead, 1000 ppm fast. */
static void skew_host_clock(void)
{
	int64_t m0 = clock_mono_ns(), r0 = (int64_t)__rdtsc(), m1, r1;
	double ns_per_tick;

	sleep_us(20000);
	m1 = clock_mono_ns();
	r1 = (int64_t)__rdtsc();
	ns_per_tick = (double)(m1 - m0) / (double)(r1 - r0);
	atomic_store(&fake.tsc0, r1);
	atomic_store(&fake.ns0, m1 + 1000000);
	atomic_store(&fake.mult, (uint64_t)(ns_per_tick * 1.001 * 4294967296.0));
	atomic_store(&fake.on, 1);
	clock_params = &fake;
}

/* The offset host - mono that the line through (ta, oa) and (tb, ob)
 * gives at t. */
static int64_t on_line(int64_t ta, int64_t oa, int64_t tb, int64_t ob, int64_t t)
{
	return oa + (int64_t)((double)(ob - oa) * (double)(t - ta) / (double)(tb - ta));
}

/* The tolerance beside offsets read back after conversions that took
 * lat1 and lat2 ns: 500 ns, and 1000 ppm of the delays, twice. */
static int64_t slack(int64_t lat1, int64_t lat2)
{
	return 500 + (lat1 + lat2) / 500;
}

int main(void)
{
	static int64_t t[POINTS + 200], off[POINTS + 200], lat[POINTS + 200];
	int64_t ta, tb, oa, ob, tm, hm, drift, lat_b;
	int i, n;

	skew_host_clock();

	/* The first conversion takes a point; 4 ms later the next. */
	ta = clock_mono_ns();
	oa = pyclock_host_time(ta) - ta;
	CHECK(oa > 900000 && oa < 1100000); /* the host clock is ~1 ms ahead */
	sleep_us(4000);
	tb = clock_mono_ns();
	ob = pyclock_host_time(tb) - tb;
	lat_b = clock_mono_ns() - tb;
	drift = ob - oa;
	CHECK(drift > 3000 && drift < 100000); /* 1000 ppm of >= 4 ms */

	/* Converted late, halfway: on the line between the two points (the
	 * newer point's offset would be drift / 2 off). */
	tm = ta + (tb - ta) / 2;
	hm = pyclock_host_time(tm);
	CHECK(llabs(hm - (tm + on_line(ta, oa, tb, ob, tm))) < slack(0, lat_b));
	CHECK(llabs(hm - (tm + ob)) > drift / 4);
	CHECK_EQ_INT(pyclock_host_time(tm), hm); /* twice: one time */

	/* Just after a point: that point's offset; before every point: the
	 * oldest's. */
	CHECK_EQ_INT(pyclock_host_time(ta + 10000) - (ta + 10000), oa);
	CHECK_EQ_INT(pyclock_host_time(ta - 1000000000) - (ta - 1000000000), oa);

	/* Past the ring's size: a point every 60 us or more. */
	n = POINTS + 200;
	for (i = 0; i < n; i++) {
		sleep_us(60);
		t[i] = clock_mono_ns();
		off[i] = pyclock_host_time(t[i]) - t[i];
		lat[i] = clock_mono_ns() - t[i];
	}
	for (i = 1; i < n; i++)
		CHECK(off[i] >= off[i - 1] - slack(lat[i - 1], lat[i])); /* the drift grows */
	/* between two recent points, and two of the oldest still kept */
	for (i = n - 50; i < n; i += 7) {
		tm = t[i - 1] + (t[i] - t[i - 1]) / 2;
		CHECK(llabs(pyclock_host_time(tm) - tm -
			    on_line(t[i - 1], off[i - 1], t[i], off[i], tm)) <
		      slack(lat[i - 1], lat[i]));
	}
	i = n - POINTS + 20;
	tm = t[i - 1] + (t[i] - t[i - 1]) / 2;
	CHECK(llabs(pyclock_host_time(tm) - tm -
		    on_line(t[i - 1], off[i - 1], t[i], off[i], tm)) < slack(lat[i - 1], lat[i]));
	/* older than every point kept (the first 200 and ta's are gone) */
	CHECK(llabs((pyclock_host_time(ta) - ta) - off[n - POINTS]) < slack(lat[n - POINTS], 0));
	CHECK(llabs((pyclock_host_time(ta) - ta) - oa) > 1000);
	return check_done();
}
#else
int main(void)
{
	printf("skipped: the skewed host clock needs the x86-64 TSC\n");
	return 0;
}
#endif

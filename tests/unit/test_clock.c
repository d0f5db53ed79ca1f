/*
 * test_clock — the one clock: once calibrated (through the TSC where the
 * kernel's clocksource is tsc), clock_now_ns() never goes backwards on a
 * thread and stays within 50 us of CLOCK_MONOTONIC, before and after a
 * recalibration; durations agree with CLOCK_MONOTONIC's to 0.1 %.
 */
#include <stdio.h>
#include <time.h>

#include "check.h"
#include "common/clock.h"

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };
	while (nanosleep(&ts, &ts) != 0)
		;
}

/* Reads both clocks n times: checks monotonicity and the largest gap. */
static void check_close(long n)
{
	int64_t prev = clock_now_ns(), worst = 0;
	long back = 0, i;

	for (i = 0; i < n; i++) {
		int64_t m0 = clock_mono_ns();
		int64_t c = clock_now_ns();
		int64_t m1 = clock_mono_ns();
		int64_t gap = c < m0 ? m0 - c : c > m1 ? c - m1 : 0;

		if (c < prev)
			back++;
		prev = c;
		if (gap > worst)
			worst = gap;
	}
	CHECK_EQ_INT(back, 0);
	CHECK(worst < 50000);
	if (worst >= 50000)
		fprintf(stderr, "clock_now_ns is %lld ns away from CLOCK_MONOTONIC\n",
			(long long)worst);
}

int main(void)
{
	int64_t c0, m0, c1, m1;
	double ratio;

	CHECK(clock_params->on == 0); /* clock_gettime until calibrated */
	clock_calibrate(clock_now_ns());
	sleep_ms(60);
	clock_calibrate(clock_now_ns());
	printf("TSC clock %s\n", atomic_load(&clock_params->on) ? "on" : "off (not a tsc clocksource)");
	check_close(200000);

	c0 = clock_now_ns();
	m0 = clock_mono_ns();
	sleep_ms(1100);
	clock_calibrate(clock_now_ns()); /* a recalibration a second later */
	sleep_ms(200);
	c1 = clock_now_ns();
	m1 = clock_mono_ns();
	ratio = (double)(c1 - c0) / (double)(m1 - m0);
	CHECK(ratio > 0.999 && ratio < 1.001);
	check_close(200000);
	return check_done();
}

/*
 * recorder_app — a steady loop for the flight recorder's end-to-end tests.
 *
 *   recorder_app [--steps N] [--sleep-us U] [--slow-at S] [--slow-ms M]
 *                [--ranges R] [--rss-at S]
 *
 * Pushes "train" around the whole loop; each step pushes "work" (with R
 * ranges "r" inside it, default 1), marks "tick", sleeps U microseconds
 * (default 1000) and calls prof_step(). Step S sleeps M more ms (default
 * 30). --rss-at prints "rss S KB" (VmRSS) after step S and at the end
 * ("rss end KB"). Prints "done N". Binds profhost only through dlsym, so it
 * runs the same without the host.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "prof_dl.h"

static void sleep_us(long us)
{
	struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };

	while (nanosleep(&ts, &ts) != 0)
		;
}

/* VmRSS of this process in KiB, or -1. */
static long rss_kb(void)
{
	char line[256];
	long kb = -1;
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "VmRSS: %ld", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

int main(int argc, char **argv)
{
	long steps = 60, us = 1000, slow_at = -1, slow_ms = 30, ranges = 1, rss_at = -1;
	long s, r;
	int i;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atol(argv[++i]);
		else if (!strcmp(argv[i], "--sleep-us") && i + 1 < argc) us = atol(argv[++i]);
		else if (!strcmp(argv[i], "--slow-at") && i + 1 < argc) slow_at = atol(argv[++i]);
		else if (!strcmp(argv[i], "--slow-ms") && i + 1 < argc) slow_ms = atol(argv[++i]);
		else if (!strcmp(argv[i], "--ranges") && i + 1 < argc) ranges = atol(argv[++i]);
		else if (!strcmp(argv[i], "--rss-at") && i + 1 < argc) rss_at = atol(argv[++i]);
		else {
			fprintf(stderr, "recorder_app: unknown argument '%s'\n", argv[i]);
			return 2;
		}
	}
	bind();
	p_push("train");
	for (s = 0; s < steps; s++) {
		p_push("work");
		for (r = 0; r < ranges; r++) {
			p_push("r");
			p_pop();
		}
		p_mark("tick");
		if (us > 0)
			sleep_us(us);
		if (s == slow_at)
			sleep_us(slow_ms * 1000);
		p_pop();
		p_step();
		if (s == rss_at)
			printf("rss %ld %ld\n", s, rss_kb());
	}
	p_pop();
	if (rss_at >= 0)
		printf("rss end %ld\n", rss_kb());
	printf("done %ld\n", steps);
	return 0;
}

/*
 * recorder_app — a steady loop for the flight recorder's end-to-end tests.
 *
 *   recorder_app [--steps N] [--sleep-us U] [--slow-at S] [--slow-ms M]
 *                [--ranges R] [--rss-at S] [--dump N] [--dump-times K]
 *                [--crash-at S --crash segv|bus|fpe|ill|abort|term|int]
 *                [--big N]
 *
 * Pushes "train" around the whole loop; each step pushes "work" (with R
 * ranges "r" inside it, default 1), marks "tick", sleeps U microseconds
 * (default 1000) and calls prof_step(). Step S sleeps M more ms (default
 * 30). --rss-at prints "rss S KB" (VmRSS) after step S and at the end
 * ("rss end KB"). --dump N: right after the slow step's prof_step(), calls
 * prof_dump(N, "slow step") K times (default 1) and prints "dump RC" for
 * each ("dump none" without the host). --crash-at S: in step S+1, inside
 * "work", dies of the named signal (a real fault for segv, fpe and ill;
 * abort(); kill() of itself for the others). --big N: the slow step
 * pushes N ranges "early" before its sleep and 100 ranges "late" after
 * it (a step larger than the recorder's pools). Prints "done N". Binds
 * profhost only through dlsym, so it runs the same without the host.
 */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

/* Dies of the signal named `how`, the way a real program would. */
static void crash(const char *how)
{
	static volatile int zero, seven = 7;
	static const struct { const char *name; int sig; } kills[] = {
		{ "bus", SIGBUS }, { "term", SIGTERM }, { "int", SIGINT },
	};
	size_t i;

	fflush(stdout);
	if (!strcmp(how, "segv"))
		*(volatile int *)(long)zero = 1;
	else if (!strcmp(how, "fpe"))
		zero = seven / zero; /* not 1 / x: GCC turns that into a compare */
	else if (!strcmp(how, "ill"))
		__builtin_trap();
	else if (!strcmp(how, "abort"))
		abort();
	for (i = 0; i < sizeof kills / sizeof kills[0]; i++)
		if (!strcmp(how, kills[i].name))
			kill(getpid(), kills[i].sig);
	fprintf(stderr, "recorder_app: unknown --crash '%s'\n", how);
	exit(2);
}

int main(int argc, char **argv)
{
	long steps = 60, us = 1000, slow_at = -1, slow_ms = 30, ranges = 1, rss_at = -1;
	long dump = -1, dump_times = 1, crash_at = -1, big = 0;
	const char *how = "segv";
	long s, r, k;
	int i;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atol(argv[++i]);
		else if (!strcmp(argv[i], "--sleep-us") && i + 1 < argc) us = atol(argv[++i]);
		else if (!strcmp(argv[i], "--slow-at") && i + 1 < argc) slow_at = atol(argv[++i]);
		else if (!strcmp(argv[i], "--slow-ms") && i + 1 < argc) slow_ms = atol(argv[++i]);
		else if (!strcmp(argv[i], "--ranges") && i + 1 < argc) ranges = atol(argv[++i]);
		else if (!strcmp(argv[i], "--rss-at") && i + 1 < argc) rss_at = atol(argv[++i]);
		else if (!strcmp(argv[i], "--dump") && i + 1 < argc) dump = atol(argv[++i]);
		else if (!strcmp(argv[i], "--dump-times") && i + 1 < argc) dump_times = atol(argv[++i]);
		else if (!strcmp(argv[i], "--crash-at") && i + 1 < argc) crash_at = atol(argv[++i]);
		else if (!strcmp(argv[i], "--crash") && i + 1 < argc) how = argv[++i];
		else if (!strcmp(argv[i], "--big") && i + 1 < argc) big = atol(argv[++i]);
		else {
			fprintf(stderr, "recorder_app: unknown argument '%s'\n", argv[i]);
			return 2;
		}
	}
	bind();
	p_push("train");
	for (s = 0; s < steps; s++) {
		p_push("work");
		if (crash_at >= 0 && s == crash_at + 1)
			crash(how);
		for (r = 0; r < ranges; r++) {
			p_push("r");
			p_pop();
		}
		p_mark("tick");
		if (us > 0)
			sleep_us(us);
		if (s == slow_at)
			for (r = 0; r < big; r++) {
				p_push("early");
				p_pop();
			}
		if (s == slow_at)
			sleep_us(slow_ms * 1000);
		if (s == slow_at && big > 0)
			for (r = 0; r < 100; r++) {
				p_push("late");
				p_pop();
			}
		p_pop();
		p_step();
		if (s == slow_at && dump >= 0)
			for (k = 0; k < dump_times; k++) {
				if (p_dump)
					printf("dump %d\n", p_dump((unsigned)dump, "slow step"));
				else
					printf("dump none\n");
			}
		if (s == rss_at)
			printf("rss %ld %ld\n", s, rss_kb());
	}
	p_pop();
	if (rss_at >= 0)
		printf("rss end %ld\n", rss_kb());
	printf("done %ld\n", steps);
	return 0;
}

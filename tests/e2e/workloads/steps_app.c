/*
 * steps_app — a C workload for the end-to-end tests.
 *
 *   steps_app [--steps N] [--sleep-us U] [--ranges R] [--exit CODE]
 *             [--term-at STEP] [--segv-at STEP] [--unbalanced] [--wall]
 *
 * Runs N steps; each step opens R nested ranges "outer"/"inner<i>", marks
 * "tick", sleeps U microseconds inside, and calls prof_step() at its end.
 * --wall prints "outer S A B" for each step S: the Unix time in ns
 * (CLOCK_REALTIME) just before and just after it pushed "outer".
 * --term-at sends itself SIGTERM during that step; --segv-at faults there.
 * Prints "done N" and exits with CODE. It links libprofhost.so only through
 * dlsym, so it runs the same without the host.
 */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "prof_dl.h"

static long long wall_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void sleep_us(long us)
{
	struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
	while (nanosleep(&ts, &ts) != 0)
		;
}

int main(int argc, char **argv)
{
	long steps = 40, us = 1000, ranges = 1, code = 0, term_at = -1, segv_at = -1;
	int unbalanced = 0, wall = 0, i;
	long s, r;
	char name[32];

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atol(argv[++i]);
		else if (!strcmp(argv[i], "--sleep-us") && i + 1 < argc) us = atol(argv[++i]);
		else if (!strcmp(argv[i], "--ranges") && i + 1 < argc) ranges = atol(argv[++i]);
		else if (!strcmp(argv[i], "--exit") && i + 1 < argc) code = atol(argv[++i]);
		else if (!strcmp(argv[i], "--term-at") && i + 1 < argc) term_at = atol(argv[++i]);
		else if (!strcmp(argv[i], "--segv-at") && i + 1 < argc) segv_at = atol(argv[++i]);
		else if (!strcmp(argv[i], "--unbalanced")) unbalanced = 1;
		else if (!strcmp(argv[i], "--wall")) wall = 1;
		else {
			fprintf(stderr, "steps_app: unknown argument '%s'\n", argv[i]);
			return 2;
		}
	}
	bind();
	for (s = 0; s < steps; s++) {
		long long before = wall_ns();

		p_push("outer");
		if (wall)
			printf("outer %ld %lld %lld\n", s, before, wall_ns());
		for (r = 0; r < ranges; r++) {
			snprintf(name, sizeof name, "inner%ld", r);
			p_push(name);
		}
		p_mark("tick");
		sleep_us(us);
		if (s == term_at) {
			kill(getpid(), SIGTERM);
			sleep(5); /* must not get here */
		}
		if (s == segv_at)
			*(volatile int *)0 = 1;
		for (r = 0; r < ranges; r++)
			p_pop();
		p_pop();
		if (unbalanced)
			p_pop();
		p_step();
	}
	printf("done %ld\n", steps);
	fflush(stdout);
	return (int)code;
}

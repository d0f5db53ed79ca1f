/*
 * hang_app — a loop that stalls, for the hang watchdog's end-to-end tests.
 *
 *   hang_app [--steps N] [--step-ms T] [--hang-at S] [--hang-ms M] [--helper]
 *            [--burst R] [--burst-steps K]
 *
 * Each step pushes "work", sleeps T ms (default 2), pops it and calls
 * prof_step().
 * Step S (default 5) pushes "allreduce" inside "work" and sleeps M ms
 * (default 3000) there: no step boundary comes meanwhile. With --helper a
 * second thread ("loader") sits inside range "fetch" the whole time. The
 * stall is in a function of its own, stall_here(), so its stack names it.
 * With --burst R each of the K steps before S (default 1) pushes and pops R
 * ranges (64 names, "burst0".."burst63") inside "work": a window of those
 * steps holds K x (R + 1) ranges, which the host takes seconds to write
 * while step S stalls. Before
 * stalling, step S prints "hang_app: stall after the boundary at <ns>": the
 * Unix time (CLOCK_REALTIME, ns) read just before the prof_step() call that
 * began step S, so the stall is timed from no later than its true start.
 * Prints "done N". Binds profhost only through dlsym.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "prof_dl.h"

static atomic_int stop;

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) != 0)
		;
}

__attribute__((noinline, visibility("default"))) void stall_here(long ms)
{
	sleep_ms(ms);
	__asm__ volatile("" ::: "memory"); /* not a tail call */
}

static void *loader(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "loader");
	p_push("fetch");
	while (!stop)
		sleep_ms(5);
	p_pop();
	return NULL;
}

int main(int argc, char **argv)
{
	long steps = 10, step_ms = 2, hang_at = 5, hang_ms = 3000, burst = 0, burst_steps = 1, s, k;
	int i, helper = 0;
	pthread_t t;
	struct timespec boundary = { 0, 0 };
	char name[32];

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atol(argv[++i]);
		else if (!strcmp(argv[i], "--step-ms") && i + 1 < argc) step_ms = atol(argv[++i]);
		else if (!strcmp(argv[i], "--hang-at") && i + 1 < argc) hang_at = atol(argv[++i]);
		else if (!strcmp(argv[i], "--hang-ms") && i + 1 < argc) hang_ms = atol(argv[++i]);
		else if (!strcmp(argv[i], "--helper")) helper = 1;
		else if (!strcmp(argv[i], "--burst") && i + 1 < argc) burst = atol(argv[++i]);
		else if (!strcmp(argv[i], "--burst-steps") && i + 1 < argc)
			burst_steps = atol(argv[++i]);
		else {
			fprintf(stderr, "hang_app: unknown argument '%s'\n", argv[i]);
			return 2;
		}
	}
	bind();
	if (helper && pthread_create(&t, NULL, loader, NULL) != 0)
		return 1;
	for (s = 0; s < steps; s++) {
		p_push("work");
		sleep_ms(step_ms);
		if (s < hang_at && s + burst_steps >= hang_at) {
			for (k = 0; k < burst; k++) {
				snprintf(name, sizeof name, "burst%ld", k % 64);
				p_push(name);
				p_pop();
			}
		}
		if (s == hang_at) {
			printf("hang_app: stall after the boundary at %lld\n",
			       (long long)boundary.tv_sec * 1000000000LL + boundary.tv_nsec);
			fflush(stdout);
			p_push("allreduce");
			stall_here(hang_ms);
			p_pop();
		}
		p_pop();
		if (s + 1 == hang_at)
			clock_gettime(CLOCK_REALTIME, &boundary);
		p_step();
	}
	stop = 1;
	if (helper)
		pthread_join(t, NULL);
	printf("done %ld\n", steps);
	return 0;
}

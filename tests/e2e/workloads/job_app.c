/*
 * job_app — one rank of a made-up data-parallel job, for the job-wide
 * tests (tests/e2e/test_job.py): light (it sleeps), so 64 of them share
 * two cores.
 *
 *   job_app [--steps N] [--step-ms M] [--start-at UNIX_MS]
 *           [--slow-rank R --slow-at S --slow-ms X] [--sync] [--kill-at S]
 *
 * Its rank is $RANK (0 without). Step k ends at T0 + (k + 1) x M ms, T0
 * being --start-at (every rank of the job gets the same, so their steps
 * line up as if they met in a collective each step) or the process's
 * start; a rank behind catches up. Each step is the phases "data" (5 %),
 * "forward" (40 %), "backward" (20 %) holding "allreduce" (until 10 %
 * before the step's end) and "optimizer" (the rest), as ranges. Rank R's
 * forward in step S lasts X ms more (--slow-*); with --sync every other
 * rank's allreduce in step S waits those X ms for it, as a collective
 * would. --kill-at S: SIGKILL of itself inside step S's forward. Prints
 * "done N". Binds profhost through dlsym only.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "prof_dl.h"

static long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Sleeps until Unix time `ns` (at once when it passed). */
static void sleep_until(long long ns)
{
	struct timespec ts = { ns / 1000000000LL, ns % 1000000000LL };

	while (clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, NULL) != 0)
		;
}

int main(int argc, char **argv)
{
	long steps = 100, step_ms = 20, slow_rank = -1, slow_at = -1, slow_ms = 0, kill_at = -1;
	long long t0 = 0, m, k;
	const char *env = getenv("RANK");
	long rank = env ? atol(env) : 0;
	int sync = 0, i;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atol(argv[++i]);
		else if (!strcmp(argv[i], "--step-ms") && i + 1 < argc) step_ms = atol(argv[++i]);
		else if (!strcmp(argv[i], "--start-at") && i + 1 < argc)
			t0 = atoll(argv[++i]) * 1000000LL;
		else if (!strcmp(argv[i], "--slow-rank") && i + 1 < argc) slow_rank = atol(argv[++i]);
		else if (!strcmp(argv[i], "--slow-at") && i + 1 < argc) slow_at = atol(argv[++i]);
		else if (!strcmp(argv[i], "--slow-ms") && i + 1 < argc) slow_ms = atol(argv[++i]);
		else if (!strcmp(argv[i], "--sync")) sync = 1;
		else if (!strcmp(argv[i], "--kill-at") && i + 1 < argc) kill_at = atol(argv[++i]);
		else {
			fprintf(stderr, "job_app: unknown argument '%s'\n", argv[i]);
			return 2;
		}
	}
	bind();
	m = step_ms * 1000000LL;
	if (!t0)
		t0 = now_ns();
	sleep_until(t0);
	for (k = 0; k < steps; k++) {
		long long start = t0 + k * m, end = start + m, extra = 0;

		if (k == slow_at)
			extra = slow_ms * 1000000LL;
		p_push("data");
		sleep_until(start + m / 20);
		p_pop();
		p_push("forward");
		if (k == kill_at)
			kill(getpid(), SIGKILL);
		sleep_until(start + m / 20 + 4 * m / 10 + (rank == slow_rank ? extra : 0));
		p_pop();
		p_push("backward");
		sleep_until(now_ns() + 2 * m / 10);
		p_push("allreduce");
		sleep_until(end - m / 10 + (sync || rank == slow_rank ? extra : 0));
		p_pop();
		p_pop();
		p_push("optimizer");
		sleep_until(end + (sync || rank == slow_rank ? extra : 0));
		p_pop();
		p_step();
	}
	printf("done %ld\n", steps);
	return 0;
}

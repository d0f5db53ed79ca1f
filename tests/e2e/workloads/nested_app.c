/*
 * nested_app — a C workload with known timings, for the table tests.
 *
 *   nested_app [--steps N | --no-steps N]
 *
 * Each step: push "outer"; sleep 2 ms; push "inner"; sleep 3 ms; pop; pop;
 * prof_step() (--no-steps: the same N times, never a step: a program
 * without steps). So per step outer owns 2 ms itself and lasts 5 ms, inner
 * owns and lasts 3 ms — at least: on a busy machine a sleep can overrun, so
 * the program also measures what each step really took and prints
 * "timing <step> <outer total ns> <inner ns>" per step, the truth a test
 * compares the profiler's table with. Prints "done N". Binds the host's C
 * ABI through dlsym, so it also runs without the host.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "prof_dl.h"

static long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) != 0)
		;
}

int main(int argc, char **argv)
{
	long steps = 10, s;
	int stepping = 1;

	if (argc == 3 && strcmp(argv[1], "--steps") == 0) {
		steps = atol(argv[2]);
	} else if (argc == 3 && strcmp(argv[1], "--no-steps") == 0) {
		steps = atol(argv[2]);
		stepping = 0;
	} else if (argc != 1) {
		fprintf(stderr, "usage: nested_app [--steps N | --no-steps N]\n");
		return 2;
	}
	bind();
	for (s = 0; s < steps; s++) {
		long long t0, t1, t2, t3;

		t0 = now_ns();
		p_push("outer");
		sleep_ms(2);
		p_push("inner");
		t1 = now_ns();
		sleep_ms(3);
		t2 = now_ns();
		p_pop();
		p_pop();
		t3 = now_ns();
		printf("timing %ld %lld %lld\n", s, t3 - t0, t2 - t1);
		if (stepping)
			p_step();
	}
	printf("done %ld\n", steps);
	fflush(stdout);
	return 0;
}

/*
 * host_app — hostile and timing workloads for the host's end-to-end tests
 * (tests/e2e/test_host.py). It finds profhost's C ABI through dlsym, so it
 * runs the same without the host.
 *
 *   host_app threads N MS       N threads call prof_step() in a tight loop
 *                               for MS milliseconds; prints "steps <total>"
 *   host_app churn N            N short-lived threads, one after another,
 *                               each records a range "work" and exits (a
 *                               step between each); prints "threads N"
 *   host_app daemon DIR STEPS [FILES]
 *                               closes descriptors 3-1023 as a daemon does,
 *                               then opens DIR/data0..FILES-1 (3 files
 *                               unless said, at most 16) and writes a line
 *                               to each every step; then sleeps, and
 *                               prints "idle_cpu_ms <n>", the process's
 *                               CPU time over the last 500 ms of sleep
 *   host_app steady STEPS US    STEPS steps of US microseconds of busy work
 *                               inside a range "train_step" (steps from
 *                               NVTX or prof_step, as the policy says);
 *                               prints "step <n>" after each (buffered)
 *   host_app sleep MS           one step, then sleeps MS milliseconds in
 *                               the next one (for signal tests)
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "prof_dl.h"

static long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static long long deadline;

static void *stepper(void *arg)
{
	long long n = 0;

	while (now_ns() < deadline) {
		p_step();
		n++;
	}
	*(long long *)arg = n;
	return NULL;
}

static int run_threads(int n, long ms)
{
	pthread_t th[64];
	long long counts[64] = { 0 }, total = 0;
	int i;

	if (n < 1 || n > 64)
		return 2;
	deadline = now_ns() + ms * 1000000LL;
	for (i = 0; i < n; i++)
		pthread_create(&th[i], NULL, stepper, &counts[i]);
	for (i = 0; i < n; i++) {
		pthread_join(th[i], NULL);
		total += counts[i];
	}
	printf("steps %lld\n", total);
	return 0;
}

static void *short_lived(void *arg)
{
	(void)arg;
	p_push("work");
	p_pop();
	return NULL;
}

static int run_churn(int n)
{
	int i;

	for (i = 0; i < n; i++) {
		pthread_t th;

		if (pthread_create(&th, NULL, short_lived, NULL) != 0)
			return 1;
		pthread_join(th, NULL);
		p_step();
	}
	printf("threads %d\n", n);
	return 0;
}

/* The process's CPU time (all threads), in milliseconds. */
static long cpu_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int run_daemon(const char *dir, int steps, int nfiles)
{
	FILE *f[16];
	char path[4096];
	long cpu0;
	int i, s;

	if (nfiles < 1 || nfiles > 16)
		return 2;
	for (i = 3; i < 1024; i++)
		close(i);
	for (i = 0; i < nfiles; i++) {
		snprintf(path, sizeof path, "%s/data%d", dir, i);
		f[i] = fopen(path, "w");
		if (!f[i])
			return 1;
		setvbuf(f[i], NULL, _IONBF, 0); /* every write reaches the fd */
	}
	for (s = 0; s < steps; s++) {
		for (i = 0; i < nfiles; i++)
			fprintf(f[i], "step %d file %d\n", s, i);
		p_push("work");
		usleep(2000);
		p_pop();
		p_step();
	}
	/* A spinning profhost thread would burn CPU while this one sleeps. */
	usleep(500000);
	cpu0 = cpu_ms();
	usleep(500000);
	for (i = 0; i < nfiles; i++)
		fclose(f[i]);
	printf("idle_cpu_ms %ld\n", cpu_ms() - cpu0);
	return 0;
}

static int run_steady(int steps, long us)
{
	volatile unsigned long sink = 0;
	int s;

	for (s = 0; s < steps; s++) {
		long long end = now_ns() + us * 1000LL;

		p_push("train_step");
		while (now_ns() < end)
			sink++;
		p_pop();
		printf("step %d\n", s); /* buffered: lost by an _exit */
		p_step();
	}
	printf("done %d\n", steps);
	return 0;
}

int main(int argc, char **argv)
{
	int rc = 2;

	bind();
	if (argc == 4 && !strcmp(argv[1], "threads"))
		rc = run_threads(atoi(argv[2]), atol(argv[3]));
	else if (argc == 3 && !strcmp(argv[1], "churn"))
		rc = run_churn(atoi(argv[2]));
	else if ((argc == 4 || argc == 5) && !strcmp(argv[1], "daemon"))
		rc = run_daemon(argv[2], atoi(argv[3]), argc == 5 ? atoi(argv[4]) : 3);
	else if (argc == 4 && !strcmp(argv[1], "steady"))
		rc = run_steady(atoi(argv[2]), atol(argv[3]));
	else if (argc == 3 && !strcmp(argv[1], "sleep")) {
		p_step();
		usleep((useconds_t)atol(argv[2]) * 1000);
		p_step();
		rc = 0;
	} else
		fprintf(stderr, "host_app: bad arguments\n");
	fflush(stdout);
	return rc;
}

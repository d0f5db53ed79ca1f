/*
 * stacks_app — a workload with known call chains for the CPU-stacks tests.
 * Built with -O2 and without frame pointers, so names must come from the
 * unwinder's DWARF rules and the ELF symbol table.
 *
 *   stacks_app [--steps N] [--step-ms MS] [--late STEP] [--brief STEP]
 *              [--deep N] [--own-sigprof] [--ranges] [--churn N [--churn-us US]]
 *
 * Thread "burner" spins in a -> b -> c; thread "sleeper" sleeps in d
 * (100 ms at a time; "sleeper interrupted N" at the end counts the sleeps
 * a signal cut short, "sleeper cpu_us N" the CPU time its wake-ups used).
 * The main thread runs N steps of MS milliseconds each (prof_step() at
 * each end). --late starts thread "late" at that step, which spins in
 * late_work. --brief starts thread "brief" at that step; it spins in
 * brief_work for three steps' time and exits. --deep starts thread "deep",
 * which recurses N levels in
 * recurse() and spins in deep_leaf. --own-sigprof installs the program's
 * own SIGPROF handler and ITIMER_PROF (10 ms) before the first step and
 * prints "sigprof N timer M" at the end: N signals from its itimer, M
 * signals that were timer_create signals (which would be profhost's, and
 * must be 0). --ranges pushes a range "ranged" around each step's sleep
 * from ranged_caller. --churn N makes each step, in place of its sleep,
 * create N threads "churn" (each spins for up to --churn-us microseconds,
 * default 2000, allocates, frees and exits) and join them, again and again
 * for the step's time: threads exiting all the time, with
 * the allocator's per-thread state to free. Prints "done N".
 */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#define NOINLINE __attribute__((noinline, noipa))

#include "prof_dl.h"

static atomic_int stop;
static volatile double sink;
static atomic_long sigprof_itimer, sigprof_timer;
static atomic_long sleeper_eintr;

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };
	while (nanosleep(&ts, &ts) != 0)
		;
}

/* Spins for a while; never returns early, never calls anything. */
NOINLINE static double spin(double x)
{
	int i;

	for (i = 0; i < 20000; i++)
		x = x * 1.0000001 + 0.5;
	return x;
}

NOINLINE double c(double x)
{
	while (!atomic_load_explicit(&stop, memory_order_relaxed))
		x = spin(x);
	return x + 1;
}

NOINLINE double b(double x)
{
	return c(x) * 2;
}

NOINLINE double a(double x)
{
	return b(x) + 3;
}

/* Sleeps until told to stop, waking rarely: it uses next to no CPU.
 * Counts the sleeps a signal cut short. */
NOINLINE void d(void)
{
	while (!atomic_load(&stop)) {
		struct timespec ts = { 0, 100000000 };

		while (nanosleep(&ts, &ts) != 0)
			atomic_fetch_add(&sleeper_eintr, 1);
	}
	sink += 1;
}

NOINLINE double late_work(double x)
{
	while (!atomic_load_explicit(&stop, memory_order_relaxed))
		x = spin(x);
	return x + 1;
}

NOINLINE double brief_work(double x, double seconds)
{
	struct timespec t0, t;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		x = spin(x);
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) * 1e-9 < seconds);
	return x;
}

NOINLINE double deep_leaf(double x)
{
	while (!atomic_load_explicit(&stop, memory_order_relaxed))
		x = spin(x);
	return x;
}

NOINLINE double recurse(int n, double x)
{
	if (n <= 1)
		return deep_leaf(x) + 1;
	return recurse(n - 1, x) + 1;
}

static void *burner(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "burner");
	sink += a(1.0);
	return NULL;
}

static atomic_llong sleeper_cpu_us;

static void *sleeper(void *arg)
{
	struct timespec cpu;

	(void)arg;
	pthread_setname_np(pthread_self(), "sleeper");
	d();
	if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu) == 0)
		atomic_store(&sleeper_cpu_us, (long long)cpu.tv_sec * 1000000 +
			     cpu.tv_nsec / 1000);
	return NULL;
}

static void *late(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "late");
	sink += late_work(2.0);
	return NULL;
}

static void *brief(void *arg)
{
	pthread_setname_np(pthread_self(), "brief");
	sink += brief_work(4.0, (double)(long)arg * 3 / 1000);
	return NULL;
}

static void *deep(void *arg)
{
	pthread_setname_np(pthread_self(), "deep");
	sink += recurse((int)(long)arg, 3.0);
	return NULL;
}

/* A short-lived thread: uses the allocator (so its exit has a thread
 * cache and an arena to hand back) and exits. */
static void *churn_one(void *arg)
{
	char *p[8];
	int i;

	pthread_setname_np(pthread_self(), "churn");
	sink += brief_work(5.0, (double)(long)arg * 1e-6);
	for (i = 0; i < 8; i++) {
		p[i] = malloc(64 + 512 * (size_t)i);
		if (p[i])
			p[i][0] = (char)i;
	}
	for (i = 0; i < 8; i++)
		free(p[i]);
	return NULL;
}

/* Creates and joins `n` threads at a time, each living about `us`
 * microseconds, for `ms` milliseconds. */
NOINLINE static void churn(long n, long us, long ms)
{
	pthread_t t[64];
	struct timespec t0, now;
	long i, k;

	if (n > 64)
		n = 64;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		for (i = k = 0; i < n; i++)
			if (pthread_create(&t[k], NULL, churn_one, (void *)(us * (1 + i % 4) / 4)) == 0)
				k++;
		for (i = 0; i < k; i++)
			pthread_join(t[i], NULL);
		clock_gettime(CLOCK_MONOTONIC, &now);
	} while ((now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000 < ms);
}

static void on_sigprof(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)uc;
	if (si->si_code == SI_TIMER)
		atomic_fetch_add(&sigprof_timer, 1);
	else
		atomic_fetch_add(&sigprof_itimer, 1);
}

NOINLINE static void ranged_caller(long ms)
{
	p_push("ranged");
	sleep_ms(ms);
	p_pop();
}

int main(int argc, char **argv)
{
	long steps = 12, step_ms = 50, late_at = -1, brief_at = -1, depth = 0, s;
	long churners = 0, churn_us = 2000;
	int own_sigprof = 0, ranges = 0, i;
	pthread_t t1, t2, t3, t4, t5;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atol(argv[++i]);
		else if (!strcmp(argv[i], "--step-ms") && i + 1 < argc) step_ms = atol(argv[++i]);
		else if (!strcmp(argv[i], "--late") && i + 1 < argc) late_at = atol(argv[++i]);
		else if (!strcmp(argv[i], "--deep") && i + 1 < argc) depth = atol(argv[++i]);
		else if (!strcmp(argv[i], "--brief") && i + 1 < argc) brief_at = atol(argv[++i]);
		else if (!strcmp(argv[i], "--own-sigprof")) own_sigprof = 1;
		else if (!strcmp(argv[i], "--ranges")) ranges = 1;
		else if (!strcmp(argv[i], "--churn") && i + 1 < argc) churners = atol(argv[++i]);
		else if (!strcmp(argv[i], "--churn-us") && i + 1 < argc) churn_us = atol(argv[++i]);
		else {
			fprintf(stderr, "stacks_app: unknown argument '%s'\n", argv[i]);
			return 2;
		}
	}
	bind();
	if (own_sigprof) {
		struct sigaction sa;
		struct itimerval it = { { 0, 10000 }, { 0, 10000 } };

		memset(&sa, 0, sizeof sa);
		sa.sa_sigaction = on_sigprof;
		sa.sa_flags = SA_SIGINFO | SA_RESTART;
		sigemptyset(&sa.sa_mask);
		sigaction(SIGPROF, &sa, NULL);
		setitimer(ITIMER_PROF, &it, NULL);
	}
	pthread_create(&t1, NULL, burner, NULL);
	pthread_create(&t2, NULL, sleeper, NULL);
	if (depth > 0)
		pthread_create(&t4, NULL, deep, (void *)depth);
	for (s = 0; s < steps; s++) {
		if (s == late_at)
			pthread_create(&t3, NULL, late, NULL);
		if (s == brief_at)
			pthread_create(&t5, NULL, brief, (void *)step_ms);
		if (churners > 0)
			churn(churners, churn_us, step_ms);
		else if (ranges)
			ranged_caller(step_ms);
		else
			sleep_ms(step_ms);
		p_step();
	}
	atomic_store(&stop, 1);
	pthread_join(t1, NULL);
	pthread_join(t2, NULL);
	if (late_at >= 0 && late_at < steps)
		pthread_join(t3, NULL);
	if (depth > 0)
		pthread_join(t4, NULL);
	if (brief_at >= 0 && brief_at < steps)
		pthread_join(t5, NULL);
	if (own_sigprof) {
		struct itimerval off = { { 0, 0 }, { 0, 0 } };

		setitimer(ITIMER_PROF, &off, NULL);
		printf("sigprof %ld timer %ld\n", atomic_load(&sigprof_itimer),
		       atomic_load(&sigprof_timer));
	}
	printf("sleeper interrupted %ld\n", atomic_load(&sleeper_eintr));
	printf("sleeper cpu_us %lld\n", atomic_load(&sleeper_cpu_us));
	printf("done %ld\n", steps);
	return 0;
}

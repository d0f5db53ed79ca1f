/*
 * bench_sampler — what CPU sampling costs (docs/performance.md).
 *
 *   bench_sampler [SECONDS]        (default 3: each overhead run's length)
 *
 * 1. Handler cost. From a 30-frame stack, sends itself 20000 sampler
 *    signals (rt_tgsigqueueinfo with a timer's si_code, so the real handler
 *    takes the real path: unw_backtrace, frame skip, one evbuf record) and
 *    times the inside of the handler, warm, plus the first (step-by-step,
 *    checked) sample of a thread, and the whole round trip with the kernel.
 * 2. Overhead. Two threads do a fixed amount of CPU-bound work below a
 *    30-frame stack, first without sampling, then with the real sampler
 *    (its thread, per-thread timers, the handler) at 999 Hz on the CPU-time
 *    clock, then on the wall clock; alternated, 5 rounds, medians. Reports
 *    the slowdown in wall time and in the workers' CPU time, and the
 *    samples per second each thread actually got (CPU-time timers are
 *    checked at the kernel's tick: 250 Hz here).
 *
 * Links the sampler and the event buffers directly, with a minimal host.
 * Not a test: it asserts nothing about time.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "capture/cpu/sampler.h"
#include "shim/evbuf.h"
#include "capture/source.h"
#include "common/log.h"

#define HANDLER_REPS 20000
#define STACK_FRAMES 30
#define ROUNDS 5

static double now_s(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* ------------------------------------------------------------ handler cost */

static struct sampler_slot slot;
static double in_handler[HANDLER_REPS];
static int rep;

static void timed_handler(int sig, siginfo_t *si, void *uc)
{
	double t0 = now_s(CLOCK_MONOTONIC);

	unwind_handler(sig, si, uc);
	if (rep < HANDLER_REPS)
		in_handler[rep] = now_s(CLOCK_MONOTONIC) - t0;
}

/* Sends this thread one sampler signal naming `slot`. */
static void self_signal(void)
{
	siginfo_t si;

	memset(&si, 0, sizeof si);
	si.si_signo = SIGPROF;
	si.si_code = SI_TIMER;
	si.si_value.sival_ptr = &slot;
	syscall(SYS_rt_tgsigqueueinfo, getpid(), syscall(SYS_gettid), SIGPROF, &si);
}

struct handler_result {
	double median_us, mean_us, p99_us, first_us, round_trip_us;
	uint64_t records, frames;
};

static void visit_count(void *ctx, int32_t tid, const char *name,
			const struct evbuf_rec *r)
{
	struct handler_result *res = ctx;

	(void)tid;
	(void)name;
	if (r->kind == EVBUF_SAMPLE) {
		res->records++;
		res->frames += r->len / sizeof(uint64_t);
	}
}

__attribute__((noinline)) static void measure_at_depth(int depth,
							struct handler_result *res)
{
	double sum = 0, t0;
	int i;

	if (depth > 1) {
		measure_at_depth(depth - 1, res);
		__asm__ volatile("" ::: "memory"); /* not a tail call */
		return;
	}
	/* The first sample of a thread: checked with the slow unwinder. */
	rep = 0;
	atomic_store(&slot.epoch, 0);
	self_signal();
	res->first_us = in_handler[0] * 1e6;
	/* Warm. */
	for (i = 0; i < 1000; i++)
		self_signal();
	t0 = now_s(CLOCK_MONOTONIC);
	for (rep = 0; rep < HANDLER_REPS; rep++)
		self_signal();
	res->round_trip_us = (now_s(CLOCK_MONOTONIC) - t0) / HANDLER_REPS * 1e6;
	for (i = 0; i < HANDLER_REPS; i++)
		sum += in_handler[i];
	res->mean_us = sum / HANDLER_REPS * 1e6;
	qsort(in_handler, HANDLER_REPS, sizeof in_handler[0], cmp_double);
	res->median_us = in_handler[HANDLER_REPS / 2] * 1e6;
	res->p99_us = in_handler[HANDLER_REPS * 99 / 100] * 1e6;
}

static void bench_handler(void)
{
	struct unwind_config cfg = { evbuf_append_raw, &slot, 1, 128 };
	struct handler_result res = { 0 };
	struct sigaction sa;
	struct evbuf_stats st;
	uint64_t gen;

	if (unwind_setup(&cfg) != 0) {
		fprintf(stderr, "bench_sampler: unwind_setup failed\n");
		exit(2);
	}
	atomic_store(&slot.tid, (int32_t)syscall(SYS_gettid));
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = timed_handler;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigaction(SIGPROF, &sa, NULL);
	gen = evbuf_open((size_t)64 << 20);
	unwind_set_recording(true);
	/* With main, bench_handler, libc's start-up and the sampled
	 * instruction itself, recurse to a 30-frame stack at the handler. */
	measure_at_depth(STACK_FRAMES - 7, &res);
	unwind_set_recording(false);
	evbuf_close();
	evbuf_drain(gen, visit_count, &res, &st);
	evbuf_release(gen);
	signal(SIGPROF, SIG_DFL);
	printf("handler, %d-frame stack (%.1f frames recorded on average), %d samples:\n",
	       STACK_FRAMES, res.records ? (double)res.frames / (double)res.records : 0.0,
	       HANDLER_REPS);
	printf("  in the handler, warm: median %.3f us, mean %.3f us, p99 %.3f us\n",
	       res.median_us, res.mean_us, res.p99_us);
	printf("  first sample of a thread (checked, step-by-step unwind): %.1f us\n",
	       res.first_us);
	printf("  round trip with the kernel (send, deliver, handle, return): %.3f us\n",
	       res.round_trip_us);
}

/* ------------------------------------------------------------ overhead */

static volatile double sink;

__attribute__((noinline)) static double burn(long iters)
{
	double x = 1.0;
	long i;

	for (i = 0; i < iters; i++)
		x = x * 1.0000001 + 0.5;
	return x;
}

__attribute__((noinline)) static double deep_work(int depth, long iters)
{
	if (depth > 1)
		return deep_work(depth - 1, iters) + 1;
	return burn(iters);
}

struct worker {
	pthread_t thread;
	long iters;
	double cpu_s;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	double c0 = now_s(CLOCK_THREAD_CPUTIME_ID);

	sink += deep_work(STACK_FRAMES - 3, w->iters); /* + start_thread, clone3 */
	w->cpu_s = now_s(CLOCK_THREAD_CPUTIME_ID) - c0;
	return NULL;
}

struct run_result {
	double wall_s, cpu_s;  /* wall time; the workers' CPU time */
	uint64_t samples, periods, slow;
};

static void visit_samples(void *ctx, int32_t tid, const char *name,
			  const struct evbuf_rec *r)
{
	struct run_result *rr = ctx;

	(void)tid;
	(void)name;
	if (r->kind == EVBUF_SAMPLE) {
		rr->samples++;
		rr->periods += r->id;
	}
}

static struct capture_host host;

/* The host has no threads of its own here. */
static bool no_own_thread(void *ctx, int32_t tid)
{
	(void)ctx;
	(void)tid;
	return false;
}
static struct policy_config cfg;
static const struct shim_api shim = {
	.version = SHIM_API_VERSION,
	.evbuf_open = evbuf_open,
	.evbuf_close = evbuf_close,
	.evbuf_drain = evbuf_drain,
	.evbuf_release = evbuf_release,
	.evbuf_append_raw = evbuf_append_raw,
};

/* Runs the two workers with `iters` each; with `sampling`, inside a window
 * of the sampler set up for `wall` or CPU time. */
static struct run_result run_workload(long iters, bool sampling)
{
	struct worker w[2];
	struct run_result rr = { 0 };
	struct evbuf_stats st;
	uint64_t gen = 0;
	double t0;
	int i;

	if (sampling) {
		gen = evbuf_open((size_t)256 << 20);
		sampler_capture.window_open(gen);
	}
	t0 = now_s(CLOCK_MONOTONIC);
	for (i = 0; i < 2; i++) {
		w[i].iters = iters;
		pthread_create(&w[i].thread, NULL, worker_main, &w[i]);
	}
	for (i = 0; i < 2; i++)
		pthread_join(w[i].thread, NULL);
	rr.wall_s = now_s(CLOCK_MONOTONIC) - t0;
	rr.cpu_s = w[0].cpu_s + w[1].cpu_s;
	if (sampling) {
		struct unwind_counts uc;

		unwind_counts(&uc);
		rr.slow = uc.slow;
		evbuf_close();
		sampler_capture.window_close(gen);
		evbuf_drain(gen, visit_samples, &rr, &st);
		evbuf_release(gen);
	}
	return rr;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	return v[n / 2];
}

/* Sets the sampler up for the CPU-time (`wall` false) or wall clock. */
static void sampler_start(bool wall)
{
	struct err e;

	cfg.capture.cpu_wall_clock = wall;
	if (sampler_capture.init(&host, &e) != 0) {
		fprintf(stderr, "bench_sampler: %s\n", e.msg);
		exit(2);
	}
}

static void bench_overhead(double seconds)
{
	struct run_result rr[3][ROUNDS];
	double t0, wall[3][ROUNDS], cpu[3][ROUNDS], rate[ROUNDS];
	static const char *const label[3] = { "no sampling:   ", "CPU-time clock:",
					      "wall clock:    " };
	long iters;
	int r, k;

	/* Calibrate: iterations for `seconds` of one thread's CPU. */
	t0 = now_s(CLOCK_THREAD_CPUTIME_ID);
	sink += burn(20000000);
	iters = (long)(20000000 * seconds / (now_s(CLOCK_THREAD_CPUTIME_ID) - t0));

	host.shim = &shim;
	host.cfg = &cfg;
	host.own_thread = no_own_thread;
	cfg.capture.cpu_hz = 999;
	cfg.capture.cpu_depth = 128;
	cfg.capture.cpu_signal = 0; /* auto */
	log_set_level(LOG_WARN);
	/* Alternate the three so drifting load on the machine hits all. */
	for (r = 0; r < ROUNDS; r++) {
		rr[0][r] = run_workload(iters, false);
		for (k = 1; k <= 2; k++) {
			sampler_start(k == 2);
			rr[k][r] = run_workload(iters, true);
			sampler_capture.fini();
		}
	}
	for (k = 0; k < 3; k++)
		for (r = 0; r < ROUNDS; r++) {
			wall[k][r] = rr[k][r].wall_s;
			cpu[k][r] = rr[k][r].cpu_s;
		}
	printf("overhead, 2 threads x %.1f s of CPU-bound work under a %d-frame stack, "
	       "999 Hz asked, %d rounds (medians):\n", seconds, STACK_FRAMES, ROUNDS);
	for (k = 0; k < 3; k++) {
		double s = 0, p = 0, slow = 0;

		printf("  %s wall %.3f s", label[k], median(wall[k], ROUNDS));
		if (k)
			printf(" (%+.2f %%)", (median(wall[k], ROUNDS) / median(wall[0], ROUNDS) - 1) * 100);
		printf(", workers' CPU %.3f s", median(cpu[k], ROUNDS));
		if (k) {
			for (r = 0; r < ROUNDS; r++) {
				rate[r] = (double)rr[k][r].samples / rr[k][r].cpu_s;
				s += (double)rr[k][r].samples;
				p += (double)rr[k][r].periods;
				slow += (double)rr[k][r].slow;
			}
			printf(" (%+.2f %%), %.0f samples per thread-CPU-second, "
			       "%.2f timer periods per sample, %.0f of %.0f samples "
			       "unwound step by step",
			       (median(cpu[k], ROUNDS) / median(cpu[0], ROUNDS) - 1) * 100,
			       median(rate, ROUNDS), s ? p / s : 0, slow, s);
		}
		printf("\n");
	}
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 3.0;

	if (seconds <= 0)
		seconds = 3.0;
	bench_handler();
	bench_overhead(seconds);
	return 0;
}

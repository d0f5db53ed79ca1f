/*
 * cuda_fake_app — a "CUDA program" for the GPU-capture end-to-end tests,
 * running on the CUPTI fake's simulated GPU (tests/fake/cupti_fake.h).
 *
 *   cuda_fake_app [--steps N] [--kernels K] [--kernel-us U] [--graph]
 *                 [--memory] [--no-ranges] [--threads] [--inject-twice]
 *                 [--burst N] [--late] [--no-prof-step] [--sync-us U]
 *                 [--hang-at S] [--hang-ms M] [--rss-at S]
 *                 [--die-at S [--how kill|exit]]
 *
 * Each step: range "forward" launching K kernels "gemm_kernel" (U µs each,
 * stream 7) and one "relu_kernel" through the driver API; range "copy"
 * with a 1 MiB HtoD cudaMemcpyAsync (50 µs) and a 256 KiB DtoH cudaMemcpy
 * (20 µs); a 4 KiB memset; with --memory a 1 MiB cudaMalloc, freeing the
 * previous step's block (and a 4 MiB block held for the middle third of
 * the run); with --graph a cudaGraphLaunch of three kernels; --burst N
 * launches N tiny kernels more per step; --sync-us U adds 4 rounds of: a
 * U µs "reduce_kernel" on stream 7, cudaStreamSynchronize(7), and U µs of
 * CPU time (a sleep) in range "postprocess", so CPU and GPU take turns.
 * Then cudaDeviceSynchronize and prof_step(); --late launches a 2 s kernel
 * at the very end of the last step, before prof_step(), and does not wait
 * for it. With --threads
 * the kernels of "forward" are launched from a second thread.
 * --inject-twice calls InitializeInjection twice more (it must be a no-op).
 * --no-prof-step leaves step counting to the policy (prof.steps{cuda=...}).
 * --hang-at S: step S, inside range "allreduce", launches "stuck_kernel"
 * (M ms, default 3000) on stream 5 of device 0 and waits for it
 * (cudaStreamSynchronize): the step stalls with that kernel in flight.
 * --rss-at S prints "rss S KB" (VmRSS) after step S and "rss end KB" at
 * the end.
 * --die-at S: step S ends, after its "forward" kernels and a 300 ms pause
 * (the fake's worker thread hands back the buffers it completed, even on
 * a loaded machine), in SIGKILL (or with --how exit in _exit(3)): nothing
 * of profhost's exit path runs.
 * Prints "pid P" first and "done N" at the end.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cupti_fake.h"

static void (*p_step)(void);
static void (*p_push)(const char *);
static void (*p_pop)(void);

static void nop(void) {}
static void nop_s(const char *s) { (void)s; }

static long kernels = 3, kernel_us = 100;
static int use_ranges = 1;

/* --sync-us: rounds of kernel, stream synchronize, CPU work. */
static void sync_rounds(long us)
{
	struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
	int r;

	for (r = 0; r < 4; r++) {
		cupti_fake_launch("reduce_kernel", 7, (uint32_t)us);
		cupti_fake_sync_stream(7);
		if (use_ranges)
			p_push("postprocess");
		nanosleep(&ts, NULL);
		if (use_ranges)
			p_pop();
	}
}

/* The process's resident set (VmRSS) in KiB, -1 if unknown. */
static long rss_kb(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kb = -1;

	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "VmRSS: %ld", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb;
}

static void *forward_kernels(void *arg)
{
	long k;

	(void)arg;
	if (use_ranges)
		p_push("forward");
	for (k = 0; k < kernels; k++)
		cupti_fake_launch("gemm_kernel", 7, (uint32_t)kernel_us);
	cupti_fake_launch_driver("relu_kernel", 7, 10);
	if (use_ranges)
		p_pop();
	return NULL;
}

int main(int argc, char **argv)
{
	long steps = 10, s, burst = 0, sync_us = 0, i, hang_at = -1, hang_ms = 3000, rss_at = -1;
	long die_at = -1;
	int die_exit = 0;
	int graph = 0, memory = 0, threads = 0, twice = 0, late = 0, no_step = 0;
	uint64_t prev = 0, big = 0;
	static const char *const graph_kernels[] = { "graph_k0", "graph_k1", "graph_k2" };

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atol(argv[++i]);
		else if (!strcmp(argv[i], "--kernels") && i + 1 < argc) kernels = atol(argv[++i]);
		else if (!strcmp(argv[i], "--kernel-us") && i + 1 < argc) kernel_us = atol(argv[++i]);
		else if (!strcmp(argv[i], "--burst") && i + 1 < argc) burst = atol(argv[++i]);
		else if (!strcmp(argv[i], "--sync-us") && i + 1 < argc) sync_us = atol(argv[++i]);
		else if (!strcmp(argv[i], "--rss-at") && i + 1 < argc) rss_at = atol(argv[++i]);
		else if (!strcmp(argv[i], "--graph")) graph = 1;
		else if (!strcmp(argv[i], "--memory")) memory = 1;
		else if (!strcmp(argv[i], "--no-ranges")) use_ranges = 0;
		else if (!strcmp(argv[i], "--threads")) threads = 1;
		else if (!strcmp(argv[i], "--inject-twice")) twice = 1;
		else if (!strcmp(argv[i], "--late")) late = 1;
		else if (!strcmp(argv[i], "--no-prof-step")) no_step = 1;
		else if (!strcmp(argv[i], "--hang-at") && i + 1 < argc) hang_at = atol(argv[++i]);
		else if (!strcmp(argv[i], "--hang-ms") && i + 1 < argc) hang_ms = atol(argv[++i]);
		else if (!strcmp(argv[i], "--die-at") && i + 1 < argc) die_at = atol(argv[++i]);
		else if (!strcmp(argv[i], "--how") && i + 1 < argc) die_exit = !strcmp(argv[++i], "exit");
		else {
			fprintf(stderr, "cuda_fake_app: unknown argument '%s'\n", argv[i]);
			return 2;
		}
	}
	p_step = (void (*)(void))dlsym(RTLD_DEFAULT, "prof_step");
	p_push = (void (*)(const char *))dlsym(RTLD_DEFAULT, "prof_range_push");
	p_pop = (void (*)(void))dlsym(RTLD_DEFAULT, "prof_range_pop");
	if (!p_step) p_step = nop;
	if (!p_push) p_push = nop_s;
	if (!p_pop) p_pop = nop;

	if (die_at >= 0) {
		printf("pid %d\n", (int)getpid());
		fflush(stdout);
	}
	if (cupti_fake_init() != 0)
		printf("no driver\n");
	if (twice) {
		int (*inject)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "InitializeInjection");

		if (inject) {
			inject();
			inject();
		}
	}
	for (s = 0; s < steps; s++) {
		if (threads) {
			pthread_t t;

			pthread_create(&t, NULL, forward_kernels, NULL);
			pthread_join(t, NULL);
		} else {
			forward_kernels(NULL);
		}
		if (s == die_at) {
			struct timespec pause = { 0, 300 * 1000000L };

			nanosleep(&pause, NULL);
			if (die_exit)
				_exit(3);
			kill(getpid(), SIGKILL);
		}
		if (use_ranges)
			p_push("copy");
		cupti_fake_memcpy(CUPTI_FAKE_HTOD, 1 << 20, 7, 50, 1);
		cupti_fake_memcpy(CUPTI_FAKE_DTOH, 256 << 10, 7, 20, 0);
		if (use_ranges)
			p_pop();
		cupti_fake_memset(4096, 7, 5);
		for (i = 0; i < burst; i++)
			cupti_fake_launch("tiny_kernel", 9, 1);
		if (memory) {
			uint64_t a = cupti_fake_malloc(1 << 20);

			if (prev)
				cupti_fake_free(prev);
			prev = a;
			if (s == steps / 3)
				big = cupti_fake_malloc(4 << 20);
			if (s == 2 * steps / 3 && big) {
				cupti_fake_free(big);
				big = 0;
			}
		}
		if (graph && cupti_fake_graph_launch(7, 3, graph_kernels, 20) ==
				     CUPTI_FAKE_LAUNCH_FAILED) {
			fprintf(stderr, "cuda_fake_app: cudaGraphLaunch: unspecified launch "
				"failure (step %ld)\n", s);
			return 1;
		}
		if (sync_us > 0)
			sync_rounds(sync_us);
		cupti_fake_sync_device();
		if (s == hang_at) {
			p_push("allreduce");
			cupti_fake_launch("stuck_kernel", 5, (uint32_t)(hang_ms * 1000));
			cupti_fake_sync_stream(5);
			p_pop();
		}
		if (late && s == steps - 1)
			cupti_fake_launch("late_kernel", 11, 2000000);
		if (!no_step)
			p_step();
		if (s == rss_at)
			printf("rss %ld %ld\n", s, rss_kb());
	}
	if (rss_at >= 0)
		printf("rss end %ld\n", rss_kb());
	if (prev)
		cupti_fake_free(prev);
	printf("done %ld\n", steps);
	fflush(stdout);
	return 0;
}

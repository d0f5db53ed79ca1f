/*
 * bench_nvtx — what an NVTX push+pop pair costs the program: with no tool
 * attached, with profhost attached outside a capture window, and inside
 * one (both also with an NVTX step range configured, and inside also with
 * the TSC clock turned off, to show what it buys).
 *
 *   bench_nvtx [--pairs N] [--window-pairs M] [--reps R] [--lib PATH]
 *
 * Runs each configuration R times (default 5) in a child process of its
 * own, interleaved, and prints the median CPU ns per pair of the calling
 * thread (and the kernel's part of it) and the ratio to the no-tool case. Names are 16 strings of 8 to 32 bytes, as a framework's
 * operator names; profhost copies them (they could be temporaries). Not a
 * test: it asserts nothing about time. scripts/bench.sh runs it.
 */
#include <nvtx3/nvToolsExt.h>

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_REPS 99

static const char *const names[16] = {
	"aten::mm", "aten::add_", "aten::linear", "aten::softmax",
	"aten::layer_norm", "aten::scaled_dot", "forward/block.07", "backward/block.07",
	"optimizer.step", "nccl:all_reduce", "dataloader.__next__", "aten::_to_copy",
	"forward/block.11/attention.qkv", "aten::native_layer_norm_bwd", "aten::embedding_dense",
	"forward/block.11/mlp/gelu_fused",
};

/* CPU time of the calling thread, and the kernel's share of it, in ns.
 * CPU time rather than wall time: the 2-core machines these numbers are
 * for are shared, and a thread waiting for a core costs the program
 * nothing it could blame on profhost. */
static void thread_cpu(double *total, double *sys)
{
	struct rusage ru;

	getrusage(RUSAGE_THREAD, &ru);
	*total = ((double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec) * 1e9 +
		 ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) * 1e3;
	*sys = (double)ru.ru_stime.tv_sec * 1e9 + (double)ru.ru_stime.tv_usec * 1e3;
}

/* CPU ns per pair over n pairs (after a warm-up), and the kernel's part
 * (page faults of fresh buffer memory) in *sys. With `step` (not NULL), a
 * step boundary every STEP_PAIRS pairs, its own cost included. */
#define STEP_PAIRS 20000
static double time_pairs(long n, void (*step)(void), double *sys)
{
	double t0, s0, t1, s1;
	long i;

	for (i = 0; i < 100000; i++) {
		nvtxRangePushA(names[i & 15]);
		nvtxRangePop();
	}
	thread_cpu(&t0, &s0);
	for (i = 0; i < n; i++) {
		nvtxRangePushA(names[i & 15]);
		nvtxRangePop();
		if (step && i % STEP_PAIRS == STEP_PAIRS - 1)
			step();
	}
	thread_cpu(&t1, &s1);
	*sys = (s1 - s0) / (double)n;
	return (t1 - t0) / (double)n;
}

/* The child: in "inside" mode, steps into the policy's window first and
 * out of it after; in "recorder" mode the same three steps start the
 * flight recorder's clock, then a step every STEP_PAIRS pairs rotates its
 * segments as a training loop would. The steps are 30 ms apart: the host
 * measures the TSC's rate between step boundaries at least 50 ms apart
 * (src/common/clock.h), so the window (step 3, 60 ms after step 1) reads
 * the clock a profiled program reads once it has run for 50 ms. Prints ns
 * per pair. */
static int child(const char *mode, long n)
{
	void (*step)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "prof_step");
	struct timespec pause = { 0, 30000000 };
	double ns, sys;

	nvtxInitialize(NULL);
	if (strcmp(mode, "inside") == 0 || strcmp(mode, "recorder") == 0) {
		if (!step) {
			fprintf(stderr, "bench_nvtx: profhost is not loaded\n");
			return 1;
		}
		step();
		nanosleep(&pause, NULL);
		step();
		nanosleep(&pause, NULL);
		step(); /* step 3: the window (prof.schedule{skip_first = 3}) */
	}
	ns = time_pairs(n, strcmp(mode, "recorder") == 0 ? step : NULL, &sys);
	if (step)
		step();
	printf("%.3f %.3f\n", ns, sys);
	return 0;
}

struct config {
	const char *label;
	const char *mode;    /* child mode */
	int tool;            /* preload profhost and attach NVTX to it */
	const char *policy;  /* policy file name in the temporary directory */
	int mono;            /* PROF_CLOCK=monotonic */
	double ns[MAX_REPS], sys[MAX_REPS];
};

/* Runs one child; returns its ns per pair (and the kernel's part in *sys),
 * or -1. */
static double run_child(const char *self, const struct config *c, const char *lib,
			const char *dir, long pairs, double *sys)
{
	char out[64] = "", policy[PATH_MAX], npairs[32];
	int fd[2], status;
	double ns;
	ssize_t got;
	pid_t pid;

	snprintf(policy, sizeof policy, "%s/%s", dir, c->policy ? c->policy : "");
	snprintf(npairs, sizeof npairs, "%ld", pairs);
	if (pipe(fd) != 0)
		return -1;
	pid = fork();
	if (pid == 0) {
		dup2(fd[1], 1);
		close(fd[0]);
		unsetenv("LD_PRELOAD");
		unsetenv("NVTX_INJECTION64_PATH");
		unsetenv("PROF_CLOCK");
		if (c->tool) {
			setenv("LD_PRELOAD", lib, 1);
			setenv("NVTX_INJECTION64_PATH", lib, 1);
			setenv("PROF_SCRIPT", policy, 1);
			setenv("PROF_OUTPUT_DIR", dir, 1);
			setenv("PROF_LOG", "quiet", 1);
		}
		if (c->mono)
			setenv("PROF_CLOCK", "monotonic", 1);
		execl(self, self, "--child", c->mode, npairs, (char *)NULL);
		_exit(127);
	}
	close(fd[1]);
	got = read(fd[0], out, sizeof out - 1);
	close(fd[0]);
	waitpid(pid, &status, 0);
	if (got <= 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return -1;
	return sscanf(out, "%lf %lf", &ns, sys) == 2 ? ns : -1;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(double *v, long n)
{
	qsort(v, (size_t)n, sizeof *v, cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int write_file(const char *dir, const char *name, const char *text)
{
	char path[PATH_MAX];
	FILE *f;

	snprintf(path, sizeof path, "%s/%s", dir, name);
	f = fopen(path, "w");
	if (!f)
		return -1;
	fputs(text, f);
	return fclose(f);
}

int main(int argc, char **argv)
{
	long pairs = 20000000, window_pairs = 2000000, reps = 5, r;
	char self[PATH_MAX], lib[PATH_MAX], dir[] = "/tmp/bench_nvtx.XXXXXX", *slash;
	char policy[256];
	struct config cfg[] = {
		{ "no tool (NVTX calls are no-ops)", "outside", 0, NULL, 0, { 0 }, { 0 } },
		{ "profhost, outside a window", "outside", 1, "outside.lua", 0, { 0 }, { 0 } },
		{ "  the same, NVTX step range set", "outside", 1, "outside_steps.lua", 0, { 0 }, { 0 } },
		{ "  the same, prof.watchdog{} on", "outside", 1, "outside_watchdog.lua", 0, { 0 }, { 0 } },
		{ "profhost, inside a window", "inside", 1, "inside.lua", 0, { 0 }, { 0 } },
		{ "  the same, NVTX step range set", "inside", 1, "inside_steps.lua", 0, { 0 }, { 0 } },
		{ "  the same, clock_gettime clock", "inside", 1, "inside.lua", 1, { 0 }, { 0 } },
		{ "profhost, flight recorder on", "recorder", 1, "recorder.lua", 0, { 0 }, { 0 } },
	};
	size_t ncfg = sizeof cfg / sizeof cfg[0], i;
	double base = 0;
	int a;

	if (argc == 4 && strcmp(argv[1], "--child") == 0)
		return child(argv[2], atol(argv[3]));
	lib[0] = '\0';
	for (a = 1; a < argc; a++) {
		if (!strcmp(argv[a], "--pairs") && a + 1 < argc) pairs = atol(argv[++a]);
		else if (!strcmp(argv[a], "--window-pairs") && a + 1 < argc) window_pairs = atol(argv[++a]);
		else if (!strcmp(argv[a], "--reps") && a + 1 < argc) reps = atol(argv[++a]);
		else if (!strcmp(argv[a], "--lib") && a + 1 < argc) snprintf(lib, sizeof lib, "%s", argv[++a]);
		else {
			fprintf(stderr, "usage: bench_nvtx [--pairs N] [--window-pairs M] [--reps R] [--lib PATH]\n");
			return 2;
		}
	}
	if (reps < 1 || reps > MAX_REPS)
		reps = 5;
	if (!realpath("/proc/self/exe", self))
		return 1;
	if (!lib[0]) { /* build tree: bin/bench_nvtx next to lib/libprofhost.so */
		snprintf(lib, sizeof lib, "%s", self);
		slash = strrchr(lib, '/');
		*slash = '\0';
		slash = strrchr(lib, '/');
		snprintf(slash, sizeof lib - (size_t)(slash - lib), "/lib/libprofhost.so");
	}
	if (access(lib, R_OK) != 0) {
		fprintf(stderr, "bench_nvtx: %s: %s (use --lib)\n", lib, strerror(errno));
		return 1;
	}
	if (!mkdtemp(dir))
		return 1;
	/* Outside: a policy with no schedule never opens a window. Inside:
	 * one window from step 3, big enough for every pair, writing nothing. */
	write_file(dir, "outside.lua", "prof.export{ chrome = false, key_averages = false, summary = false }\n");
	snprintf(policy, sizeof policy,
		 "prof.schedule{ skip_first = 3, active = 1, cycles = 1 }\n"
		 "prof.capture{ buffer_mb = %ld }\n"
		 "prof.export{ chrome = false, key_averages = false, summary = false }\n",
		 window_pairs * 96 / 1000000 + 64);
	write_file(dir, "inside.lua", policy);
	/* The same with steps counted on an NVTX range (none of the benchmark's
	 * names): every push compares its name with the trigger's. */
	write_file(dir, "outside_steps.lua", "prof.steps{ nvtx = \"train_step\" }\n"
		   "prof.export{ chrome = false, key_averages = false, summary = false }\n");
	/* The hang watchdog: pushes keep their names and push times. */
	write_file(dir, "outside_watchdog.lua", "prof.watchdog{}\n"
		   "prof.export{ chrome = false, key_averages = false, summary = false }\n");
	strcat(policy, "prof.steps{ nvtx = \"train_step\" }\n");
	write_file(dir, "inside_steps.lua", policy);
	/* The recorder between windows: 20 steps of STEP_PAIRS pairs kept,
	 * segments of 10 steps (about 19 MB of records) in 64 MiB pools. */
	write_file(dir, "recorder.lua", "prof.recorder{ steps = 20, mb = 256 }\n"
		   "prof.export{ chrome = false, key_averages = false, summary = false }\n");

	for (r = 0; r < reps; r++)
		for (i = 0; i < ncfg; i++) {
			long n = strcmp(cfg[i].mode, "outside") != 0 ? window_pairs : pairs;
			cfg[i].ns[r] = run_child(self, &cfg[i], lib, dir, n, &cfg[i].sys[r]);
			if (cfg[i].ns[r] < 0) {
				fprintf(stderr, "bench_nvtx: the '%s' run failed\n", cfg[i].label);
				return 1;
			}
		}
	printf("NVTX push+pop pair: CPU ns of the calling thread, median of %ld runs\n"
	       "(%ld pairs; %ld inside a window or with the recorder; kernel: page faults\n"
	       "of fresh buffers)\n",
	       reps, pairs, window_pairs);
	printf("  %-36s %10s %8s %12s\n", "configuration", "ns/pair", "ratio", "kernel part");
	for (i = 0; i < ncfg; i++) {
		double med, sys;

		med = median(cfg[i].ns, reps);
		sys = median(cfg[i].sys, reps);
		if (i == 0)
			base = med;
		printf("  %-36s %10.2f %7.1fx %12.2f\n", cfg[i].label, med,
		       base > 0 ? med / base : 0, sys);
	}
	/* The children wrote nothing but an empty run directory. */
	snprintf(policy, sizeof policy, "rm -rf '%s'", dir);
	if (system(policy) != 0)
		fprintf(stderr, "bench_nvtx: could not remove %s\n", dir);
	return 0;
}

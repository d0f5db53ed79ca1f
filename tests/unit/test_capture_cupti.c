/*
 * test_capture_cupti — GPU capture (src/capture/cupti/cupti.c) as a capture
 * source against a fake host (struct capture_host) and the CUPTI fake
 * (libcupti-fake.so, linked for its "CUDA calls" and named by
 * PROF_CUPTI_LIB for the source's loader): init subscribes from the
 * configuration it is given; window_open turns the kernel records on and
 * window_close off; a kernel launched in a window is in that window's
 * collect and no other; a kernel matching prof.steps{kernel} calls the
 * host's step; collect finalizes CUPTI only once the host's ahead()
 * says no window lies ahead.
 */
#include "check.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "capture/cupti/cupti.h"
#include "cupti_fake.h"
#include "common/clock.h"
#include "capture/source.h"
#include "common/log.h"

/* ---- the fake host */

static _Atomic int steps;            /* step() calls */
static _Atomic int ahead = 1;        /* what ahead() answers */
static _Atomic int failures;         /* fail() calls */
static _Atomic int armed;            /* arm_exit() calls */

static void fake_step(void *ctx)
{
	(void)ctx;
	atomic_fetch_add(&steps, 1);
}

static bool fake_ahead(void *ctx)
{
	(void)ctx;
	return atomic_load(&ahead) != 0;
}

static void fake_fail(void *ctx, const struct err *e)
{
	(void)ctx;
	fprintf(stderr, "fail: %s\n", e->msg);
	atomic_fetch_add(&failures, 1);
}

static void fake_arm_exit(void)
{
	atomic_fetch_add(&armed, 1);
}

static const struct shim_api fake_shim = {
	.version = SHIM_API_VERSION,
};

/* How many kernel events named `name` the trace holds. */
static int kernels(const struct trace *t, const char *name)
{
	size_t i;
	int n = 0;

	for (i = 0; i < t->nev; i++)
		if (t->ev[i].cat == TRACE_CAT_KERNEL &&
		    strcmp(trace_str(t, t->ev[i].name), name) == 0)
			n++;
	return n;
}

/* Window `gen`: opened, `name` launched (and a kernel between windows,
 * before it opens), closed, collected. Fills *t. */
static void window(uint64_t gen, const char *name, struct trace *t)
{
	struct capture_window w;
	struct err e;

	cupti_fake_launch("between_windows", 0, 20);
	CHECK(cupti_fake_sync_device() != 0);
	memset(&w, 0, sizeof w);
	w.gen = gen;
	w.window = (uint32_t)gen - 1;
	w.start_ts = clock_now_ns();
	cupti_capture.window_open(gen);
	CHECK(cupti_fake_launch(name, 0, 50) != 0);
	CHECK(cupti_fake_sync_device() != 0);
	cupti_capture.window_close(gen);
	w.end_ts = clock_now_ns();
	CHECK_EQ_INT(trace_init(t), 0);
	t->meta.pid = getpid();
	CHECK_EQ_INT(cupti_capture.collect(&w, t, &e), 0);
}

int main(int argc, char **argv)
{
	/* "steps": prof.steps{kernel = "^step_"} (steps come from CUDA, so
	 * CUPTI stays on after the last window) */
	bool kernel_steps = argc > 1 && strcmp(argv[1], "steps") == 0;
	static char pattern[] = "^step_";
	struct policy_config cfg;
	struct capture_host ch;
	struct cupti_fake_stats st;
	struct trace t;
	struct err e;

	log_set_level(LOG_WARN);
	setenv("PROF_CUPTI_LIB", PROFHOST_CUPTI_FAKE, 1);
	unsetenv("CUDA_INJECTION64_PATH");
	unsetenv("NSYS_PROFILING_SESSION_ID");
	CHECK_EQ_INT(cupti_fake_init(), 0);
	memset(&cfg, 0, sizeof cfg);
	cfg.capture.cuda_kernels = true;
	cfg.capture.buffer_bytes = (size_t)8 << 20;
	if (kernel_steps)
		cfg.steps.kernel = pattern;
	memset(&ch, 0, sizeof ch);
	ch.cfg = &cfg;
	ch.shim = &fake_shim;
	ch.pid = getpid();
	ch.step = fake_step;
	ch.ahead = fake_ahead;
	ch.fail = fake_fail;
	ch.arm_exit = fake_arm_exit;

	/* init: subscribed, the host's clock registered, nothing on yet */
	CHECK_EQ_INT(cupti_capture.init(&ch, &e), 0);
	cupti_fake_get_stats(&st);
	CHECK_EQ_INT(st.subscribed, 1);
	CHECK(st.ts_callbacks >= 1);
	CHECK_EQ_INT(st.enabled_now, 0);

	/* a kernel whose name matches prof.steps{kernel}: one step (none
	 * without the pattern) */
	CHECK(cupti_fake_launch("step_marker", 0, 10) != 0);
	CHECK(cupti_fake_launch("not_a_step", 0, 10) != 0);
	CHECK_EQ_INT(atomic_load(&steps), kernel_steps ? 1 : 0);

	/* window 1, more windows ahead: its kernel, CUPTI stays */
	window(1, "first_kernel", &t);
	/* the driver is up (the fake's first CUDA call ran): the host's exit
	 * path was armed to run before the runtime's exit handler, once */
	CHECK_EQ_INT(atomic_load(&armed), 1);
	CHECK_EQ_INT(kernels(&t, "first_kernel"), 1);
	CHECK_EQ_INT(kernels(&t, "between_windows"), 0);
	trace_free(&t);
	cupti_fake_get_stats(&st);
	CHECK(st.enables > 0);
	CHECK_EQ_INT(st.enabled_now, 0); /* off again between windows */
	CHECK_EQ_INT(st.finalizes, 0);

	/* window 2, the last: only its own kernel; then CUPTI is finalized,
	 * unless it still counts steps */
	atomic_store(&ahead, 0);
	window(2, "second_kernel", &t);
	CHECK_EQ_INT(kernels(&t, "second_kernel"), 1);
	CHECK_EQ_INT(kernels(&t, "first_kernel"), 0);
	CHECK_EQ_INT(kernels(&t, "between_windows"), 0);
	trace_free(&t);
	cupti_fake_get_stats(&st);
	CHECK_EQ_INT(st.finalizes, kernel_steps ? 0 : 1);
	if (kernel_steps) {
		CHECK(cupti_fake_launch("step_again", 0, 10) != 0);
		CHECK_EQ_INT(atomic_load(&steps), 2);
	}

	cupti_capture.fini();
	CHECK_EQ_INT(atomic_load(&armed), 1);
	CHECK_EQ_INT(atomic_load(&failures), 0);
	return check_done();
}

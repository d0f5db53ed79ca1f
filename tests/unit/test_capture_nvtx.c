/*
 * test_capture_nvtx — the NVTX capture source (src/capture/nvtx/nvtx_host.c)
 * against a fake host: what it hands the shim at init comes from the
 * struct capture_host it is given (the policy's triggers, and the host's
 * own step and capture-range callbacks with the host's ctx), and its
 * collect names only this process's threads after nvtxNameOsThread.
 */
#include "check.h"

#include <stdlib.h>
#include <string.h>

#include "shim/nvtx.h"
#include "events/trace.h"
#include "capture/nvtx/nvtx_host.h"

/* ---- the fake host */

struct fake_host {
	int steps, begins, ends, fails;
	int range_answer;          /* what range_begin returns */
	int64_t end_ts;            /* what range_end got */
};

static void fake_step(void *ctx)
{
	((struct fake_host *)ctx)->steps++;
}

static int fake_range_begin(void *ctx)
{
	struct fake_host *f = ctx;

	f->begins++;
	return f->range_answer;
}

static void fake_range_end(void *ctx, int64_t end_ts)
{
	((struct fake_host *)ctx)->end_ts = end_ts;
	((struct fake_host *)ctx)->ends++;
}

/* ---- the fake shim */

static struct nvtx_config configured;
static int configure_calls, name_calls;
static char step_range[64], capture_range[64];

static void fake_nvtx_configure(const struct nvtx_config *c)
{
	configure_calls++;
	configured = *c;
	/* The shim copies the strings; so does the fake. */
	snprintf(step_range, sizeof step_range, "%s", c->step_range ? c->step_range : "");
	snprintf(capture_range, sizeof capture_range, "%s",
		 c->capture_range ? c->capture_range : "");
}

static int fake_nvtx_attached(void)
{
	return 1; /* attached: no hint to give */
}

static const char *fake_nvtx_thread_name(int32_t tid)
{
	name_calls++;
	return tid == 42 ? "data loader" : NULL;
}

static const struct shim_api fake_shim = {
	.version = SHIM_API_VERSION,
	.shim_path = "/nonexistent/libprofhost.so",
	.nvtx_configure = fake_nvtx_configure,
	.nvtx_attached = fake_nvtx_attached,
	.nvtx_thread_name = fake_nvtx_thread_name,
};

/* The name trace `t` gives thread pid/tid, or NULL. */
static const char *thread_name(const struct trace *t, int32_t pid, int32_t tid)
{
	size_t i;

	for (i = 0; i < t->nthreads; i++)
		if (t->threads[i].pid == pid && t->threads[i].tid == tid)
			return t->threads[i].name == STRTAB_NONE ? NULL
								: trace_str(t, t->threads[i].name);
	return NULL;
}

static void test_init_and_triggers(struct fake_host *f, struct capture_host *ch)
{
	struct err e;

	CHECK_EQ_INT(nvtx_capture.init(ch, &e), 0);
	CHECK_EQ_INT(configure_calls, 1);
	CHECK(configured.record);
	CHECK_EQ_STR(step_range, "train_step");
	CHECK_EQ_STR(capture_range, "capture me");
	/* The shim calls the host's callbacks with the host's ctx. */
	CHECK(configured.ctx == f);
	CHECK(configured.step && configured.capture_begin && configured.capture_end);
	configured.step(configured.ctx);
	configured.step(configured.ctx);
	CHECK_EQ_INT(f->steps, 2);
	f->range_answer = 1;
	CHECK_EQ_INT(configured.capture_begin(configured.ctx), 1);
	f->range_answer = -1; /* prof.capture_range{count} used up */
	CHECK_EQ_INT(configured.capture_begin(configured.ctx), -1);
	configured.capture_end(configured.ctx, 12345);
	CHECK_EQ_INT(f->begins, 2);
	CHECK_EQ_INT(f->ends, 1);
	CHECK(f->end_ts == 12345); /* the range's end time, passed through */
	CHECK_EQ_INT(f->fails, 0);
}

static void test_collect_names_threads(void)
{
	struct trace t;
	struct capture_window w = { .gen = 1, .first = 0, .last = 3, .start_ts = 100, .end_ts = 200 };
	struct err e;

	CHECK_EQ_INT(trace_init(&t), 0);
	CHECK_EQ_INT(trace_add_thread(&t, 1000, 42, "python"), 0);
	CHECK_EQ_INT(trace_add_thread(&t, 1000, 43, "worker"), 0);
	CHECK_EQ_INT(trace_add_thread(&t, 2000, 42, "other process"), 0);
	name_calls = 0;
	CHECK_EQ_INT(nvtx_capture.collect(&w, &t, &e), 0);
	CHECK_EQ_STR(thread_name(&t, 1000, 42), "data loader");
	CHECK_EQ_STR(thread_name(&t, 1000, 43), "worker");
	/* Another process's thread 42 is not this process's. */
	CHECK_EQ_STR(thread_name(&t, 2000, 42), "other process");
	CHECK_EQ_INT(name_calls, 2);
	trace_free(&t);
}

int main(void)
{
	struct fake_host f = { 0 };
	struct policy_config cfg;
	struct capture_host ch;

	memset(&cfg, 0, sizeof cfg);
	cfg.capture.nvtx = true;
	cfg.steps.nvtx = "train_step";
	cfg.capture_range.nvtx = "capture me";
	memset(&ch, 0, sizeof ch);
	ch.cfg = &cfg;
	ch.shim = &fake_shim;
	ch.pid = 1000;
	ch.ctx = &f;
	ch.step = fake_step;
	ch.range_begin = fake_range_begin;
	ch.range_end = fake_range_end;
	test_init_and_triggers(&f, &ch);
	test_collect_names_threads();
	nvtx_capture.fini();
	return check_done();
}

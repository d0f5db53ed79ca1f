/*
 * test_op_stacks — operator_stacks.txt, torch's export_stacks of a
 * window: one line an event with a call stack, its entries outermost
 * first with torch's translation of ' ', ';', '\t', '\n' to '_', weighted
 * by its self CPU time in microseconds carried from line to line (the
 * weights sum to the events' self time, floored), or by its self CUDA
 * time; events without a stack or a weight are left out.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "export/op_stacks.h"
#include "testdir.h"

#define US 1000LL

static char dir[256];

/* Adds a complete event on thread 1 (a kernel: device 0, stream 9) with a
 * "Call stack" (NULL: none) and correlation id `corr`. */
static void add(struct trace *t, const char *name, uint8_t cat, int64_t ts, int64_t dur,
		const char *stack, uint64_t corr)
{
	struct trace_event e = { 0 };

	e.ts = ts;
	e.dur = dur;
	e.tid = cat == TRACE_CAT_KERNEL ? 9 : 1;
	e.pid = cat == TRACE_CAT_KERNEL ? 0 : 1;
	e.id = (uint32_t)corr;
	e.name = trace_intern(t, name, strlen(name));
	e.cat = cat;
	e.ph = TRACE_PH_COMPLETE;
	CHECK(trace_add_event(t, &e) != NULL);
	if (stack)
		CHECK(trace_arg_str(t, TRACE_ARG_CALL_STACK, stack, strlen(stack)) == 0);
}

/* op_stacks_write's text for `t` and `metric`. */
static char *written(const struct trace *t, enum op_stacks_metric metric)
{
	char path[300], *text;
	struct outfile *f;
	struct err e;
	FILE *in;
	long n;

	snprintf(path, sizeof path, "%s/operator_stacks.txt", dir);
	f = outfile_open(path, false, &e);
	CHECK(f != NULL);
	if (!f)
		return strdup("");
	CHECK_EQ_INT(op_stacks_write(t, metric, f, &e), 0);
	CHECK_EQ_INT(outfile_commit(f, &e), 0);
	in = fopen(path, "r");
	text = calloc(1, 65536);
	n = in ? (long)fread(text, 1, 65535, in) : 0;
	text[n > 0 ? n : 0] = '\0';
	if (in)
		fclose(in);
	return text;
}

/*
 * linear [0, 10.6) us holds addmm [1, 4.2) and t [5, 6.6); a label
 * [20, 21.6) with a stack whose entry holds a tab; relu [30, 31.6) with
 * none; zero [40, 40) with no time. Self times: linear 10.6 - 3.2 - 1.6 =
 * 5.8, addmm 3.2, t 1.6, label 1.6: 12.2 us in all.
 */
static void build(struct trace *t)
{
	CHECK(trace_init(t) == 0);
	t->meta.pid = 1;
	add(t, "aten::linear", TRACE_CAT_CPU_OP, 0, 10600, "<built-in function linear>;"
	    "torch/nn/modules/linear.py(113): forward;nn.Module: Linear_0;m.py(3): step", 0);
	add(t, "aten::addmm", TRACE_CAT_CPU_OP, 1 * US, 3200, "<built-in function linear>;"
	    "torch/nn/modules/linear.py(113): forward;nn.Module: Linear_0;m.py(3): step", 0);
	add(t, "aten::t", TRACE_CAT_CPU_OP, 5 * US, 1600, "<built-in function linear>;"
	    "torch/nn/modules/linear.py(113): forward;nn.Module: Linear_0;m.py(3): step", 0);
	add(t, "label", TRACE_CAT_USER_ANNOTATION, 20 * US, 1600, "a\tb.py(1): f;m.py(4): step", 0);
	add(t, "aten::relu", TRACE_CAT_CPU_OP, 30 * US, 1600, NULL, 0);
	add(t, "aten::zero", TRACE_CAT_CPU_OP, 40 * US, 0, "m.py(5): step", 0);
}

static void test_self_cpu(void)
{
	static const char *const want =
		"m.py(3):_step;nn.Module:_Linear_0;torch/nn/modules/linear.py(113):_forward;"
		"<built-in_function_linear> 3\n"
		"m.py(3):_step;nn.Module:_Linear_0;torch/nn/modules/linear.py(113):_forward;"
		"<built-in_function_linear> 1\n"
		"m.py(3):_step;nn.Module:_Linear_0;torch/nn/modules/linear.py(113):_forward;"
		"<built-in_function_linear> 6\n"
		"m.py(4):_step;a_b.py(1):_f 2\n";
	struct trace t;
	char *text;

	build(&t);
	CHECK(op_stacks_any(&t));
	text = written(&t, OP_STACKS_SELF_CPU);
	/* addmm 3.2 -> 3, t 1.6 (4.8) -> 1, linear 5.8 (10.6) -> 6, label
	 * 1.6 (12.2) -> 2: 12 us, the 12.2 us floored */
	CHECK_EQ_STR(text, want);
	free(text);
	trace_free(&t);
}

/* With the CUDA metric: a kernel of 7.5 us launched (cudaLaunchKernel)
 * inside addmm is addmm's self CUDA time; nothing else has any. */
static void test_self_cuda(void)
{
	struct trace t;
	char *text;

	build(&t);
	add(&t, "cudaLaunchKernel", TRACE_CAT_CUDA_RUNTIME, 2 * US, 500, NULL, 77);
	add(&t, "gemm", TRACE_CAT_KERNEL, 3 * US, 7500, NULL, 77);
	text = written(&t, OP_STACKS_SELF_CUDA);
	CHECK_EQ_STR(text, "m.py(3):_step;nn.Module:_Linear_0;"
		     "torch/nn/modules/linear.py(113):_forward;<built-in_function_linear> 7\n");
	free(text);
	trace_free(&t);
}

static void test_none_and_metric_names(void)
{
	struct trace t;
	enum op_stacks_metric m;
	struct err e;

	CHECK(trace_init(&t) == 0);
	add(&t, "aten::relu", TRACE_CAT_CPU_OP, 0, 1600, NULL, 0);
	CHECK(!op_stacks_any(&t));
	trace_free(&t);
	CHECK_EQ_INT(op_stacks_parse_metric("self_cuda_time_total", &m, &e), 0);
	CHECK_EQ_INT(m, OP_STACKS_SELF_CUDA);
	CHECK_EQ_INT(op_stacks_parse_metric("cpu_time_total", &m, &e), -1);
	CHECK_EQ_STR(e.msg, "unknown stacks metric 'cpu_time_total' (one of "
		     "self_cpu_time_total, self_cuda_time_total)");
}

int main(void)
{
	testdir_make(dir, sizeof dir, "profhost-test-opstacks", false);
	test_self_cpu();
	test_self_cuda();
	test_none_and_metric_names();
	testdir_remove(dir);
	return check_done();
}

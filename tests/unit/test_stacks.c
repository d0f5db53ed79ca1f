/*
 * test_stacks — the CPU-sample writers and the stack model: folded lines
 * (thread root, [truncated], outermost first, counts, sorted, names made
 * safe for the format), the per-function self/total table, frames shared
 * between stacks, return addresses moved into their call, and stacks taken
 * for ranges kept out of the sample outputs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "export/outfile.h"
#include "export/stacks.h"

/* Adds a sample of `n` frames (innermost first) named by `names`; the
 * frames' addresses are 0x1000 * (index of the name in `all`) + 0x10. */
static const char *const all[] = { "a", "b", "c", "x", "odd;name\n", NULL };

static uint64_t pc_of(const char *name)
{
	size_t i;

	for (i = 0; all[i]; i++)
		if (strcmp(all[i], name) == 0)
			return 0x1000 * (i + 1) + 0x10;
	return 0;
}

static void add(struct trace *t, int32_t tid, int kind, int flags,
		uint32_t weight, const char *const *names)
{
	struct trace_stack s = { 0 };
	uint64_t ips[8];
	size_t n;

	for (n = 0; names[n]; n++)
		/* Callers' frames (and every frame of a stack that is not a
		 * sample) are return addresses: just past the call. */
		ips[n] = pc_of(names[n]) + (n > 0 || kind != TRACE_STACK_SAMPLE);
	s.tid = tid;
	s.kind = (uint8_t)kind;
	s.flags = (uint8_t)flags;
	s.weight = weight;
	CHECK(trace_add_stack(t, &s, ips, n, kind == TRACE_STACK_SAMPLE) >= 0);
}

/* Names every frame as the symbolizer would. */
static void name_frames(struct trace *t)
{
	size_t i, k;

	for (i = 0; i < t->nframes; i++)
		for (k = 0; all[k]; k++)
			if (t->frames[i].pc == pc_of(all[k])) {
				t->frames[i].name = trace_intern(t, all[k], strlen(all[k]));
				t->frames[i].module = trace_intern(t, "app", 3);
			}
}

/* Writes with `fn` into a temporary file and returns its content. */
static char *write_to_string(const struct trace *t,
			     int (*fn)(const struct trace *, struct outfile *, struct err *))
{
	char path[] = "/tmp/test_stacks.XXXXXX";
	struct outfile *f;
	struct err e;
	char *buf = NULL;
	long n;
	FILE *in;
	int fd = mkstemp(path);

	CHECK(fd >= 0);
	close(fd);
	f = outfile_open(path, false, &e);
	CHECK(f != NULL);
	if (!f)
		return NULL;
	CHECK_EQ_INT(fn(t, f, &e), 0);
	CHECK_EQ_INT(outfile_commit(f, &e), 0);
	in = fopen(path, "rb");
	if (in) {
		fseek(in, 0, SEEK_END);
		n = ftell(in);
		rewind(in);
		buf = calloc(1, (size_t)n + 1);
		if (buf && fread(buf, 1, (size_t)n, in) != (size_t)n)
			buf[0] = '\0';
		fclose(in);
	}
	unlink(path);
	return buf;
}

static void build(struct trace *t)
{
	static const char *const cba[] = { "c", "b", "a", NULL };
	static const char *const ba[] = { "b", "a", NULL };
	static const char *const x[] = { "x", NULL };
	static const char *const odd[] = { "odd;name\n", "a", NULL };

	trace_init(t);
	t->meta.window = 2;
	t->meta.first_step = 5;
	t->meta.last_step = 7;
	t->sampling.hz = 100;
	t->sampling.period_ns = 10000000;
	trace_add_thread(t, 1, 1, "main");
	trace_add_thread(t, 1, 2, "work;er");
	add(t, 1, TRACE_STACK_SAMPLE, 0, 1, cba);
	add(t, 1, TRACE_STACK_SAMPLE, 0, 2, cba);
	add(t, 1, TRACE_STACK_SAMPLE, 0, 1, ba);
	add(t, 1, TRACE_STACK_SAMPLE, 0, 1, cba);
	add(t, 2, TRACE_STACK_SAMPLE, TRACE_STACK_TRUNCATED, 1, x);
	add(t, 2, TRACE_STACK_SAMPLE, TRACE_STACK_TRUNCATED, 3, x);
	add(t, 3, TRACE_STACK_SAMPLE, 0, 1, odd);
	add(t, 1, TRACE_STACK_RANGE, 0, 1, cba); /* not a sample */
}

static void test_model(void)
{
	struct trace t;

	build(&t);
	/* c, b, a, x, odd: five distinct addresses... */
	CHECK_EQ_INT(t.nframes, 5);
	CHECK_EQ_INT(t.nstacks, 8);
	/* ...stored inside their function: the leaf as sampled, callers'
	 * return addresses minus one. */
	CHECK_EQ_INT(t.frames[t.stack_frames[t.stacks[0].first]].pc, pc_of("c"));
	CHECK_EQ_INT(t.frames[t.stack_frames[t.stacks[0].first + 1]].pc, pc_of("b"));
	CHECK_EQ_INT(t.stacks[0].depth, 3);
	trace_free(&t);
}

static void test_folded(void)
{
	struct trace t;
	char *out, unnamed[128];

	build(&t);
	/* Before symbolization, frames read as addresses. */
	CHECK_EQ_INT(trace_stack_fold(&t, &t.stacks[2], unnamed, sizeof unnamed), 13);
	CHECK_EQ_STR(unnamed, "0x1010;0x2010");
	name_frames(&t);
	out = write_to_string(&t, stacks_write_folded);
	/* Outermost first, the thread as root, most frequent first, then by
	 * text; ';' and control characters in names replaced. */
	CHECK_EQ_STR(out,
		     "main;a;b;c 3\n"
		     "work:er;[truncated];x 2\n"
		     "[tid 3];a;odd:name? 1\n"
		     "main;a;b 1\n");
	free(out);
	trace_free(&t);
}

/* The row of function `fn` in a cpu_functions.txt text, or NULL. */
static const char *row_of(const char *text, const char *fn)
{
	char want[64];
	const char *p;

	snprintf(want, sizeof want, "  %s  [app]\n", fn);
	p = strstr(text, want);
	if (!p)
		return NULL;
	while (p > text && p[-1] != '\n')
		p--;
	return p;
}

static void test_functions(void)
{
	struct trace t;
	char *out;
	const char *r;
	unsigned long long self, total;
	double self_pct, self_ms, total_pct, total_ms;

	build(&t);
	name_frames(&t);
	out = write_to_string(&t, stacks_write_functions);
	/* 7 samples over 10 timer periods: the clock gave 70 of 100 Hz. */
	CHECK(out && strstr(out, "window 2 (steps 5-7): 7 samples, CPU-time clock, "
			    "100 Hz asked, 70 Hz given") != NULL);
	/* 7 samples of weight 1+2+1+1+1+3+1 = 10 periods of 10 ms. */
	CHECK(out && strstr(out, "100.0 CPU ms in all") != NULL);
	r = out ? row_of(out, "c") : NULL;
	CHECK(r && sscanf(r, "%llu %lf%% %lf ms %llu %lf%% %lf ms", &self, &self_pct,
			  &self_ms, &total, &total_pct, &total_ms) == 6);
	if (r) {
		CHECK_EQ_INT(self, 3);
		CHECK_EQ_INT(total, 3);
		CHECK(self_ms > 39.99 && self_ms < 40.01); /* weights 1 + 2 + 1 */
		CHECK(self_pct > 42.855 && self_pct < 42.865);
	}
	r = out ? row_of(out, "a") : NULL;
	CHECK(r && sscanf(r, "%llu %lf%% %lf ms %llu %lf%% %lf ms", &self, &self_pct,
			  &self_ms, &total, &total_pct, &total_ms) == 6);
	if (r) {
		CHECK_EQ_INT(self, 0);
		CHECK_EQ_INT(total, 5);
		CHECK(total_ms > 59.99 && total_ms < 60.01);
	}
	/* Sorted by self samples: c (3) before x (2). */
	CHECK(out && row_of(out, "c") < row_of(out, "x"));
	free(out);
	trace_free(&t);
}

/* A sample of Python frames (innermost first), each "name" of module
 * "python", as the Python merge adds them. */
static void add_python(struct trace *t, const char *const *names)
{
	struct trace_stack s = { 0 };
	uint32_t frames[8], py = trace_intern(t, "python", 6);
	uint64_t ip = 0x10;
	long k;
	size_t n;

	s.tid = 1;
	s.kind = TRACE_STACK_SAMPLE;
	s.weight = 1;
	k = trace_add_stack(t, &s, &ip, 1, 1);
	CHECK(k >= 0);
	for (n = 0; names[n]; n++) {
		uint32_t name = trace_intern(t, names[n], strlen(names[n]));

		frames[n] = (uint32_t)trace_add_frame(t, 0xffff800000000000ull | name, name, py);
	}
	CHECK_EQ_INT(trace_set_stack_frames(t, (size_t)k, frames, n), 0);
}

/* One row a function: a Python function's samples on different lines are
 * one row, its lines listed after it, most samples first. */
static void test_python_rows(void)
{
	static const char *const a[] = { "collate (c.py:120)", "loop (t.py:9)", NULL };
	static const char *const b[] = { "collate (c.py:143)", "loop (t.py:9)", NULL };
	static const char *const rec[] = { "collate (c.py:120)", "collate (c.py:143)",
					   "loop (t.py:9)", NULL };
	struct trace t;
	char *out;
	const char *r;

	trace_init(&t);
	t.sampling.hz = 100;
	t.sampling.period_ns = 10000000;
	add_python(&t, a);
	add_python(&t, a);
	add_python(&t, b);
	add_python(&t, rec);
	out = write_to_string(&t, stacks_write_functions);
	r = out ? strstr(out, "collate (c.py)  [python]  lines 120 (3), 143 (2)\n") : NULL;
	CHECK(r != NULL);
	/* Self and total 4, though the recursing sample has it twice: once
	 * per sample. */
	while (r && r > out && r[-1] != '\n')
		r--;
	CHECK(r && strncmp(r, "       4 100.00%   40.000 ms        4 100.00%   40.000 ms", 57) == 0);
	CHECK(out && strstr(out, "loop (t.py)  [python]  lines 9 (4)\n") != NULL);
	CHECK(out && !strstr(out, "c.py:"));
	free(out);
	trace_free(&t);
}

int main(void)
{
	test_model();
	test_folded();
	test_functions();
	test_python_rows();
	return check_done();
}

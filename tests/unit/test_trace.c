/*
 * test_trace — the string table and the drained trace model: interning,
 * events with arguments, steps, threads, sorting, category names.
 */
#include "check.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "events/strtab.h"
#include "events/trace.h"

static void test_intern_basic(void)
{
	struct strtab st;
	uint32_t a, b, c, ab, e, n1, n2, n3;

	CHECK_EQ_INT(strtab_init(&st), 0);
	a = strtab_intern(&st, "abc", 3);
	b = strtab_intern(&st, "abd", 3);
	c = strtab_intern(&st, "abc", 3);
	CHECK_EQ_INT(a, 0); /* dense from 0 */
	CHECK_EQ_INT(b, 1);
	CHECK_EQ_INT(c, a);
	CHECK_EQ_STR(strtab_get(&st, a), "abc");
	CHECK_EQ_STR(strtab_get(&st, b), "abd");

	/* Different lengths of the same bytes are different strings; the
	 * input need not be NUL-terminated. */
	ab = strtab_intern(&st, "abcdef", 2);
	CHECK(ab != a);
	CHECK_EQ_INT(ab, 2);
	CHECK_EQ_STR(strtab_get(&st, ab), "ab");
	CHECK_EQ_INT(strtab_len(&st, ab), 2);
	CHECK_EQ_INT(strtab_intern(&st, "abcdef", 3), a);
	CHECK(strtab_intern(&st, "abcd", 4) != a);

	/* The empty string is a string. */
	e = strtab_intern(&st, "", 0);
	CHECK(e != STRTAB_NONE);
	CHECK_EQ_STR(strtab_get(&st, e), "");
	CHECK_EQ_INT(strtab_len(&st, e), 0);
	CHECK_EQ_INT(strtab_intern(&st, "xyz", 0), e);

	/* Embedded NULs: part of the identity and the length, cut the C
	 * string. */
	n1 = strtab_intern(&st, "a\0b", 3);
	n2 = strtab_intern(&st, "a\0c", 3);
	n3 = strtab_intern(&st, "a", 1);
	CHECK(n1 != n2);
	CHECK(n1 != n3);
	CHECK(n2 != n3);
	CHECK_EQ_INT(strtab_intern(&st, "a\0b", 3), n1);
	CHECK_EQ_INT(strtab_len(&st, n1), 3);
	CHECK_EQ_STR(strtab_get(&st, n1), "a");
	CHECK(memcmp(strtab_get(&st, n2), "a\0c", 4) == 0);

	/* High bytes. */
	CHECK(strtab_intern(&st, "\xff\xfe", 2) != strtab_intern(&st, "\xfe\xff", 2));

	/* Unknown ids. */
	CHECK_EQ_STR(strtab_get(&st, STRTAB_NONE), "");
	CHECK_EQ_STR(strtab_get(&st, st.n), "");
	CHECK_EQ_INT(strtab_len(&st, STRTAB_NONE), 0);
	strtab_free(&st);
	CHECK_EQ_INT(st.n, 0);
	strtab_free(NULL);
}

/* 100k strings: ids stay dense and stable across growth, every string
 * reads back, and the hash table stays at most half full. */
static void test_intern_many(void)
{
	enum { N = 100000 };
	struct strtab st;
	char buf[32];
	uint32_t i, id;
	int ok_new = 1, ok_again = 1, ok_get = 1;

	CHECK_EQ_INT(strtab_init(&st), 0);
	for (i = 0; i < N; i++) {
		int len = snprintf(buf, sizeof buf, "kernel_%u", i * 7919u);

		id = strtab_intern(&st, buf, (size_t)len);
		if (id != i)
			ok_new = 0;
	}
	CHECK(ok_new);
	CHECK_EQ_INT(st.n, N);
	CHECK((st.nslots & (st.nslots - 1)) == 0);
	CHECK((uint64_t)st.n * 2 <= st.nslots);
	for (i = 0; i < N; i++) {
		int len = snprintf(buf, sizeof buf, "kernel_%u", i * 7919u);

		if (strtab_intern(&st, buf, (size_t)len) != i)
			ok_again = 0;
		if (strcmp(strtab_get(&st, i), buf) != 0 ||
		    strtab_len(&st, i) != (uint32_t)len)
			ok_get = 0;
	}
	CHECK(ok_again);
	CHECK(ok_get);
	CHECK_EQ_INT(st.n, N); /* nothing added twice */
	strtab_free(&st);
}

static void test_cat_names(void)
{
	CHECK_EQ_STR(trace_cat_name(TRACE_CAT_USER_ANNOTATION), "user_annotation");
	CHECK_EQ_STR(trace_cat_name(TRACE_CAT_CPU_OP), "cpu_op");
	CHECK_EQ_STR(trace_cat_name(TRACE_CAT_GPU_USER_ANNOTATION), "gpu_user_annotation");
	CHECK_EQ_STR(trace_cat_name(TRACE_CAT_KERNEL), "kernel");
	CHECK_EQ_STR(trace_cat_name(TRACE_CAT_GPU_MEMCPY), "gpu_memcpy");
	CHECK_EQ_STR(trace_cat_name(TRACE_CAT_GPU_MEMSET), "gpu_memset");
	CHECK_EQ_STR(trace_cat_name(TRACE_CAT_CUDA_RUNTIME), "cuda_runtime");
	CHECK_EQ_STR(trace_cat_name(TRACE_CAT_CUDA_DRIVER), "cuda_driver");
	CHECK_EQ_STR(trace_cat_name(TRACE_CAT_CUDA_SYNC), "cuda_sync");
	CHECK_EQ_STR(trace_cat_name(TRACE_CAT_AC2G), "ac2g");
	CHECK_EQ_STR(trace_cat_name(TRACE_CAT_MARK), "user_annotation");
	CHECK_EQ_STR(trace_cat_name(TRACE_CAT_SAMPLE), "cpu_sample");
	CHECK_EQ_STR(trace_cat_name(TRACE_CAT_COUNT), "unknown");
}

/* Builds an event on (pid, tid) at ts with dur and name `name`. */
static struct trace_event mk(struct trace *t, int32_t pid, int32_t tid,
			     int64_t ts, int64_t dur, const char *name)
{
	struct trace_event e;

	memset(&e, 0, sizeof e);
	e.pid = pid;
	e.tid = tid;
	e.ts = ts;
	e.dur = dur;
	e.name = trace_intern(t, name, strlen(name));
	e.cat = TRACE_CAT_CPU_OP;
	e.ph = TRACE_PH_COMPLETE;
	return e;
}

static void test_events_args(void)
{
	struct trace t;
	struct trace_event e, *p;
	const struct trace_arg *a;
	uint32_t i;

	CHECK_EQ_INT(trace_init(&t), 0);
	/* No event yet: nothing to attach to. */
	CHECK_EQ_INT(trace_arg_int(&t, "k", 1), -1);
	CHECK_EQ_INT(t.nargs, 0);
	CHECK_EQ_INT(t.oom, 0);

	e = mk(&t, 100, 101, 1000, 50, "aten::mm");
	e.args = 77; /* ignored: args are attached afterwards */
	e.nargs = 9;
	e.id = 42;
	e.cat = TRACE_CAT_KERNEL;
	e.flags = TRACE_F_CLIPPED_START;
	p = trace_add_event(&t, &e);
	CHECK(p == &t.ev[0]);
	CHECK_EQ_INT(p->nargs, 0);
	CHECK_EQ_INT(p->args, 0);
	CHECK_EQ_INT(trace_arg_int(&t, "signed", -5), 0);
	CHECK_EQ_INT(trace_arg_uint(&t, "unsigned", UINT64_MAX), 0);
	CHECK_EQ_INT(trace_arg_double(&t, "ratio", 0.25), 0);
	CHECK_EQ_INT(trace_arg_str(&t, "shape", "[[2, 3]]xyz", 8), 0);

	e = mk(&t, 100, 101, 2000, 0, "no args");
	CHECK(trace_add_event(&t, &e) != NULL);

	e = mk(&t, 100, 102, 3000, 10, "aten::add");
	CHECK(trace_add_event(&t, &e) != NULL);
	CHECK_EQ_INT(trace_arg_str(&t, "signed", "same key", 8), 0);

	CHECK_EQ_INT(t.nev, 3);
	CHECK_EQ_INT(t.counters.events, 3);
	CHECK_EQ_INT(t.nargs, 5);

	/* Event 0 round trip. */
	p = &t.ev[0];
	CHECK_EQ_STR(trace_str(&t, p->name), "aten::mm");
	CHECK_EQ_INT(p->ts, 1000);
	CHECK_EQ_INT(p->dur, 50);
	CHECK_EQ_INT(p->id, 42);
	CHECK_EQ_INT(p->pid, 100);
	CHECK_EQ_INT(p->tid, 101);
	CHECK_EQ_INT(p->cat, TRACE_CAT_KERNEL);
	CHECK_EQ_INT(p->ph, 'X');
	CHECK_EQ_INT(p->flags, TRACE_F_CLIPPED_START);
	CHECK_EQ_INT(p->nargs, 4);
	a = &t.args[p->args];
	CHECK_EQ_STR(trace_str(&t, a[0].key), "signed");
	CHECK_EQ_INT(a[0].type, TRACE_ARG_INT);
	CHECK_EQ_INT(a[0].v.i, -5);
	CHECK_EQ_STR(trace_str(&t, a[1].key), "unsigned");
	CHECK_EQ_INT(a[1].type, TRACE_ARG_UINT);
	CHECK(a[1].v.u == UINT64_MAX);
	CHECK_EQ_STR(trace_str(&t, a[2].key), "ratio");
	CHECK_EQ_INT(a[2].type, TRACE_ARG_DOUBLE);
	CHECK(a[2].v.d == 0.25);
	CHECK_EQ_STR(trace_str(&t, a[3].key), "shape");
	CHECK_EQ_INT(a[3].type, TRACE_ARG_STR);
	CHECK_EQ_STR(trace_str(&t, a[3].v.str), "[[2, 3]]");

	/* Event 1 has none, event 2 one; keys are interned once. */
	CHECK_EQ_INT(t.ev[1].nargs, 0);
	CHECK_EQ_INT(t.ev[2].nargs, 1);
	a = &t.args[t.ev[2].args];
	CHECK_EQ_INT(a->key, t.args[t.ev[0].args].key);
	CHECK_EQ_STR(trace_str(&t, a->v.str), "same key");

	/* Many events with a varying number of args, through growth. */
	for (i = 0; i < 20000; i++) {
		uint32_t k;

		e = mk(&t, 1, (int32_t)(i % 7), (int64_t)i, 1, "loop");
		e.id = i;
		CHECK(trace_add_event(&t, &e) != NULL);
		for (k = 0; k < i % 5; k++)
			trace_arg_uint(&t, "k", (uint64_t)i * 10 + k);
	}
	{
		int ok = 1;

		for (i = 0; i < 20000; i++) {
			const struct trace_event *q = &t.ev[3 + i];
			uint32_t k;

			if (q->id != i || q->nargs != i % 5)
				ok = 0;
			for (k = 0; k < q->nargs; k++)
				if (t.args[q->args + k].v.u != (uint64_t)i * 10 + k)
					ok = 0;
		}
		CHECK(ok);
	}
	CHECK_EQ_INT(t.nev, 20003);
	CHECK_EQ_INT(t.counters.events, 20003);
	CHECK_EQ_INT(t.oom, 0);

	/* Metadata strings are the trace's: trace_free releases them (the
	 * address sanitizer build reports a leak otherwise). */
	t.meta.program = strdup("train.py");
	t.meta.hostname = strdup("node1");
	t.meta.run = strdup("run1");
	t.meta.reason = strdup("schedule");
	trace_free(&t);
	CHECK_EQ_INT(t.nev, 0);
	CHECK(t.ev == NULL);
	CHECK(t.meta.program == NULL);
	trace_free(NULL);
}

/* Once an allocation failed, nothing more is added. (Simulated by setting
 * the flag: the trace must refuse further additions.) */
/* trace_reserve: what was reserved is added without the arrays moving;
 * more than reserved still works. */
static void test_reserve(void)
{
	struct trace t;
	struct trace_event e = { 0 };
	struct trace_arg a = { 0 };
	const struct trace_event *ev;
	const struct trace_arg *args;
	int i;

	CHECK_EQ_INT(trace_init(&t), 0);
	e.ph = TRACE_PH_COMPLETE;
	trace_add_event(&t, &e);
	CHECK_EQ_INT(trace_reserve(&t, 5000, 20000), 0);
	CHECK(t.cap_ev >= 5001 && t.cap_args >= 20000);
	ev = t.ev;
	args = t.args;
	a.key = trace_intern(&t, "k", 1);
	a.type = TRACE_ARG_INT;
	for (i = 0; i < 5000; i++) {
		e.ts = i;
		CHECK(trace_add_event(&t, &e) != NULL);
		a.v.i = i;
		CHECK_EQ_INT(trace_args_add(&t, &a, 1), 0);
		CHECK_EQ_INT(trace_args_add(&t, &a, 1), 0);
		CHECK_EQ_INT(trace_args_add(&t, &a, 1), 0);
		CHECK_EQ_INT(trace_args_add(&t, &a, 1), 0);
	}
	CHECK(t.ev == ev && t.args == args);
	CHECK(trace_add_event(&t, &e) != NULL); /* past the reservation */
	CHECK_EQ_INT(trace_args_add(&t, &a, 1), 0);
	CHECK_EQ_INT(t.nev, 5002);
	CHECK_EQ_INT(t.nargs, 20001);
	CHECK_EQ_INT(t.args[t.ev[4000].args + 3].v.i, 3999);
	CHECK_EQ_INT(trace_reserve(&t, (size_t)-1, 0), -1); /* overflow refused */
	CHECK_EQ_INT(t.oom, 0);
	trace_free(&t);
}

static void test_oom_sticky(void)
{
	struct trace t;
	struct trace_event e;
	struct trace_step s = { 1, 0, 10, 5, 0 };

	CHECK_EQ_INT(trace_init(&t), 0);
	e = mk(&t, 1, 1, 0, 1, "before");
	CHECK(trace_add_event(&t, &e) != NULL);
	t.oom = 1;
	CHECK(trace_add_event(&t, &e) == NULL);
	CHECK_EQ_INT(trace_arg_int(&t, "k", 1), -1);
	CHECK_EQ_INT(trace_arg_str(&t, "k", "v", 1), -1);
	CHECK_EQ_INT(trace_add_step(&t, &s), -1);
	CHECK_EQ_INT(trace_add_thread(&t, 1, 1, "x"), -1);
	CHECK_EQ_INT(trace_intern(&t, "new", 3), STRTAB_NONE);
	CHECK_EQ_INT(t.nev, 1);
	CHECK_EQ_INT(t.ev[0].nargs, 0);
	CHECK_EQ_INT(t.nsteps, 0);
	CHECK_EQ_INT(t.nthreads, 0);
	CHECK_EQ_INT(t.oom, 1);
	trace_free(&t);
}

static void test_steps(void)
{
	struct trace t;
	struct trace_step s;
	uint64_t i;
	int ok = 1;

	CHECK_EQ_INT(trace_init(&t), 0);
	for (i = 0; i < 100; i++) {
		s.step = 16 + i;
		s.ts = (int64_t)i * 1000;
		s.dur = 900 + (int64_t)i;
		s.tid = 4242;
		s.partial = i == 99;
		CHECK_EQ_INT(trace_add_step(&t, &s), 0);
	}
	CHECK_EQ_INT(t.nsteps, 100);
	for (i = 0; i < 100; i++) {
		const struct trace_step *p = &t.steps[i];

		if (p->step != 16 + i || p->ts != (int64_t)i * 1000 ||
		    p->dur != 900 + (int64_t)i || p->tid != 4242 ||
		    p->partial != (i == 99))
			ok = 0;
	}
	CHECK(ok);
	trace_free(&t);
}

static void test_threads(void)
{
	struct trace t;
	int i;

	CHECK_EQ_INT(trace_init(&t), 0);
	CHECK_EQ_INT(trace_add_thread(&t, 7, 70, "main"), 0);
	CHECK_EQ_INT(trace_add_thread(&t, 7, 71, "dataloader"), 0);
	CHECK_EQ_INT(trace_add_thread(&t, 7, 70, "python"), 0); /* rename */
	CHECK_EQ_INT(trace_add_thread(&t, 7, 72, NULL), 0);
	CHECK_EQ_INT(t.nthreads, 3);
	CHECK_EQ_INT(t.threads[0].tid, 70);
	CHECK_EQ_INT(t.threads[0].pid, 7);
	CHECK_EQ_STR(trace_str(&t, t.threads[0].name), "python");
	CHECK_EQ_INT(t.threads[1].tid, 71);
	CHECK_EQ_STR(trace_str(&t, t.threads[1].name), "dataloader");
	CHECK_EQ_STR(trace_str(&t, t.threads[2].name), "");
	CHECK_EQ_INT(trace_add_thread(&t, 7, 71, "worker"), 0);
	CHECK_EQ_STR(trace_str(&t, t.threads[1].name), "worker");
	CHECK_EQ_INT(t.nthreads, 3);

	/* Growth past the first allocation. */
	for (i = 0; i < 200; i++)
		CHECK_EQ_INT(trace_add_thread(&t, 7, 1000 + i, "pool"), 0);
	CHECK_EQ_INT(t.nthreads, 203);
	CHECK_EQ_INT(t.threads[202].tid, 1199);
	trace_free(&t);
}

/* A small hand-made case: order by pid, tid, ts, longer first, the same
 * spans by name id (here the order the names were first seen); arguments
 * stay with their events. */
static void test_sort_small(void)
{
	static const struct {
		int32_t pid, tid;
		int64_t ts, dur;
		const char *name;
	} in[] = {
		{ 2, 1, 10, 5, "p2" },
		{ 1, 9, 50, 1, "t9" },
		{ 1, 5, 30, 1, "c-short" },
		{ 1, 5, 30, 100, "b-outer" },
		{ 1, 5, 20, 1, "a-first" },
		{ 1, 5, 30, 10, "tie1" },
		{ 1, 5, 30, 10, "tie2" },
		{ -1, 5, 99, 1, "negpid" },
		{ 1, 5, 30, 10, "tie3" },
	};
	static const char *const want[] = {
		"negpid", "a-first", "b-outer", "tie1", "tie2", "tie3",
		"c-short", "t9", "p2",
	};
	struct trace t;
	size_t i, n = sizeof in / sizeof in[0];

	CHECK_EQ_INT(trace_init(&t), 0);
	for (i = 0; i < n; i++) {
		struct trace_event e = mk(&t, in[i].pid, in[i].tid, in[i].ts,
					  in[i].dur, in[i].name);

		CHECK(trace_add_event(&t, &e) != NULL);
		CHECK_EQ_INT(trace_arg_str(&t, "orig", in[i].name,
					   strlen(in[i].name)), 0);
		CHECK_EQ_INT(trace_arg_int(&t, "index", (int64_t)i), 0);
	}
	trace_sort(&t);
	CHECK_EQ_INT(t.nev, n);
	for (i = 0; i < n; i++) {
		const struct trace_event *e = &t.ev[i];

		CHECK_EQ_STR(trace_str(&t, e->name), want[i]);
		CHECK_EQ_INT(e->nargs, 2);
		CHECK_EQ_STR(trace_str(&t, t.args[e->args].v.str), want[i]);
	}
	trace_free(&t);
}

/* Many pseudo-random events, many of the same span: the result is
 * ordered, a permutation of the input, and the same spans are ordered by
 * id (here the insertion order). */
static void test_sort_many(void)
{
	enum { N = 30000 };
	struct trace t;
	struct trace_event e;
	uint32_t seed = 12345, i;
	int ordered = 1, stable = 1;
	unsigned char *seen;

	CHECK_EQ_INT(trace_init(&t), 0);
	memset(&e, 0, sizeof e);
	for (i = 0; i < N; i++) {
		seed = seed * 1103515245u + 12345u;
		e.pid = (int32_t)((seed >> 16) % 3);
		e.tid = (int32_t)((seed >> 8) % 4);
		e.ts = (int64_t)((seed >> 4) % 50);
		e.dur = (int64_t)(seed % 3);
		e.id = i; /* insertion order */
		CHECK(trace_add_event(&t, &e) != NULL);
	}
	trace_sort(&t);
	seen = calloc(N, 1);
	CHECK(seen != NULL);
	for (i = 0; seen && i < N; i++) {
		const struct trace_event *a = &t.ev[i];
		const struct trace_event *b = &t.ev[i ? i - 1 : 0];

		if (a->id < N)
			seen[a->id]++;
		if (i == 0)
			continue;

		if (b->pid > a->pid ||
		    (b->pid == a->pid && b->tid > a->tid) ||
		    (b->pid == a->pid && b->tid == a->tid && b->ts > a->ts) ||
		    (b->pid == a->pid && b->tid == a->tid && b->ts == a->ts &&
		     b->dur < a->dur))
			ordered = 0;
		if (b->pid == a->pid && b->tid == a->tid && b->ts == a->ts &&
		    b->dur == a->dur && b->id > a->id)
			stable = 0;
	}
	CHECK(ordered);
	CHECK(stable);
	for (i = 0; seen && i < N; i++)
		if (seen[i] != 1)
			ordered = 0;
	CHECK(ordered); /* a permutation */
	free(seen);
	trace_free(&t);
}

/* Events of one span: the step first (it holds the others), then by
 * category, whatever order they came in; a sorted trace says so until an
 * event is added. */
static void test_sort_same_span(void)
{
	struct trace t;
	struct trace_event op, range, step;

	CHECK_EQ_INT(trace_init(&t), 0);
	op = mk(&t, 1, 1, 100, 50, "aten::mm");
	range = mk(&t, 1, 1, 100, 50, "train_step");
	range.cat = TRACE_CAT_USER_ANNOTATION;
	step = mk(&t, 1, 1, 100, 50, "ProfilerStep#1");
	step.cat = TRACE_CAT_USER_ANNOTATION;
	step.flags = TRACE_F_STEP;
	CHECK(trace_add_event(&t, &op) && trace_add_event(&t, &range) &&
	      trace_add_event(&t, &step));
	CHECK(!t.nested);
	trace_sort(&t);
	CHECK(t.nested);
	CHECK_EQ_STR(trace_str(&t, t.ev[0].name), "ProfilerStep#1");
	CHECK_EQ_STR(trace_str(&t, t.ev[1].name), "train_step");
	CHECK_EQ_STR(trace_str(&t, t.ev[2].name), "aten::mm");
	CHECK(trace_add_event(&t, &op) != NULL);
	CHECK(!t.nested);
	trace_free(&t);
}

/* External ids are 32 bits, never 0: a counter past 2^32 wraps to 1, so
 * what profhost pushes to CUPTI is what an event's id holds. */
static void test_ext_id_wraps(void)
{
	struct trace_event e = { 0 };

	CHECK_EQ_INT(trace_ext_id(1), 1);
	CHECK_EQ_INT(trace_ext_id(0xffffffffu), 0xffffffffu);
	CHECK_EQ_INT(trace_ext_id((uint64_t)1 << 32), 1);
	CHECK_EQ_INT(trace_ext_id(((uint64_t)1 << 32) + 7), 7);
	e.id = trace_ext_id(((uint64_t)3 << 32) + 42);
	CHECK_EQ_INT(e.id, 42);
	CHECK_EQ_INT(sizeof e, 40);
}

int main(void)
{
	test_intern_basic();
	test_intern_many();
	test_cat_names();
	test_events_args();
	test_reserve();
	test_oom_sticky();
	test_steps();
	test_threads();
	test_sort_small();
	test_sort_many();
	test_sort_same_span();
	test_ext_id_wraps();
	return check_done();
}

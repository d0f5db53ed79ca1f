/*
 * test_assemble — several generations drained into one trace (a flight
 * recorder dump): a range open across a generation boundary comes out
 * once, its replayed push recognized; with clip_start, records before the
 * trace's start are left out and ranges begun before it are cut there.
 * Records of capture sources the assembler does not convert (the
 * recorder's CUPTI records) are handed over whole in trace.raw. torch's
 * allocation records become Kineto's "[memory]" events. A torch
 * operator's call stack node becomes its "Call stack" text from the
 * EVBUF_OPSTACK records of any thread.
 */
#include "check.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "events/assemble.h"
#include "events/memrec.h"
#include "events/oprec.h"
#include "events/trace.h"
#include "events/pymodrec.h"

/* One fake record: kind, ts, name, flags (EVBUF_A_EARLY). */
struct fake {
	uint16_t kind;
	int64_t ts;
	const char *name;
	uint32_t flags;
};

/* Generations 1..3 of the fake evbuf. */
static const struct fake gen1[] = {
	{ EVBUF_RANGE_PUSH, 10, "train", 0 },
	{ EVBUF_RANGE_PUSH, 20, "work", 0 },
	{ EVBUF_MARK, 25, "tick", 0 },
	{ EVBUF_RANGE_POP, 30, NULL, 0 },
};
static const struct fake gen2[] = {
	{ EVBUF_RANGE_PUSH, 40, "train", EVBUF_A_EARLY }, /* the replay */
	{ EVBUF_RANGE_PUSH, 50, "work", 0 },
	{ EVBUF_MARK, 55, "tick", 0 },
	{ EVBUF_RANGE_POP, 60, NULL, 0 },
};
static const struct fake gen3[] = {
	{ EVBUF_RANGE_PUSH, 65, "train", EVBUF_A_EARLY },
	{ EVBUF_RANGE_PUSH, 70, "work", 0 },
	{ EVBUF_RANGE_POP, 80, NULL, 0 },
	{ EVBUF_RANGE_POP, 90, NULL, 0 },               /* train ends */
};

static int fake_drain(uint64_t gen, evbuf_visit_fn fn, void *ctx,
		      struct evbuf_stats *stats)
{
	const struct fake *f = gen == 1 ? gen1 : gen == 2 ? gen2 : gen3;
	size_t n = 4, i;
	char buf[sizeof(struct evbuf_rec) + 64];
	struct evbuf_rec *r = (struct evbuf_rec *)buf;

	memset(stats, 0, sizeof *stats);
	for (i = 0; i < n; i++) {
		size_t len = f[i].name ? strlen(f[i].name) : 0;

		memset(buf, 0, sizeof buf);
		r->kind = f[i].kind;
		r->len = (uint32_t)len;
		r->size = (uint16_t)((sizeof *r + len + 7) & ~7u);
		r->ts = f[i].ts;
		r->a = evbuf_nvtx_a(0, 0, f[i].flags);
		if (len)
			memcpy(buf + sizeof *r, f[i].name, len);
		fn(ctx, 7, "main", r);
		stats->records++;
	}
	return 0;
}

/* Events named `name` (complete ones), and the first of them in *first. */
static int count_named(const struct trace *t, const char *name,
		       const struct trace_event **first)
{
	size_t i;
	int n = 0;

	for (i = 0; i < t->nev; i++)
		if (strcmp(trace_str(t, t->ev[i].name), name) == 0) {
			if (!n && first)
				*first = &t->ev[i];
			n++;
		}
	return n;
}

static void assemble(struct trace *t, bool clip, int64_t start, int64_t end)
{
	static const uint64_t gens[] = { 1, 2, 3 };
	struct assemble_source src = { .drain = fake_drain, .gens = gens, .ngens = 3,
				       .clip_start = clip };

	CHECK(trace_init(t) == 0);
	t->meta.pid = 1;
	t->meta.start_ts = start;
	t->meta.end_ts = end;
	CHECK_EQ_INT(assemble_window(t, &src, NULL, 0), 0);
}

static void test_carried_range_comes_out_once(void)
{
	struct trace t;
	const struct trace_event *e = NULL;

	assemble(&t, false, 10, 100);
	CHECK_EQ_INT(count_named(&t, "train", &e), 1);
	CHECK(e && e->ts == 10 && e->dur == 80);
	CHECK(e && !(e->flags & (TRACE_F_CLIPPED_START | TRACE_F_CLIPPED_END)));
	CHECK_EQ_INT(count_named(&t, "work", NULL), 3);
	CHECK_EQ_INT(count_named(&t, "tick", NULL), 2);
	CHECK_EQ_INT(t.counters.unbalanced_pops, 0);
	trace_free(&t);
}

static void test_clip_start_leaves_out_the_earlier_records(void)
{
	struct trace t;
	const struct trace_event *e = NULL;

	assemble(&t, true, 45, 100);
	CHECK_EQ_INT(count_named(&t, "train", &e), 1);
	CHECK(e && e->ts == 45 && e->dur == 45);
	CHECK(e && (e->flags & TRACE_F_CLIPPED_START));
	/* work 20-30 and the mark at 25 are before the start */
	CHECK_EQ_INT(count_named(&t, "work", NULL), 2);
	CHECK_EQ_INT(count_named(&t, "tick", NULL), 1);
	trace_free(&t);
}

/* A window that ended at 68 while its buffer took records until 90 (a
 * capture range's pop, then other threads before the close): the push at
 * 70 and the pops at 80 and 90 are left out, and "train" is cut at 68. */
static void test_records_after_the_end_are_left_out(void)
{
	struct trace t;
	const struct trace_event *e = NULL;

	assemble(&t, false, 10, 68);
	CHECK_EQ_INT(count_named(&t, "train", &e), 1);
	CHECK(e && e->ts == 10 && e->dur == 58);
	CHECK(e && (e->flags & TRACE_F_CLIPPED_END));
	CHECK_EQ_INT(count_named(&t, "work", NULL), 2);
	CHECK_EQ_INT(count_named(&t, "tick", NULL), 2);
	CHECK_EQ_INT(t.counters.unbalanced_pops, 0);
	trace_free(&t);
}

/* A segment with a range on the main thread and three EVBUF_CUPTI records
 * of CUPTI's thread (tid 99), payloads of 8, 13 and 200 bytes. */
static int cupti_drain(uint64_t gen, evbuf_visit_fn fn, void *ctx,
		       struct evbuf_stats *stats)
{
	static const uint32_t lens[] = { 8, 13, 200 };
	uint64_t buf[(sizeof(struct evbuf_rec) + 256) / 8];
	struct evbuf_rec *r = (struct evbuf_rec *)buf;
	size_t i;

	(void)gen;
	memset(stats, 0, sizeof *stats);
	memset(buf, 0, sizeof buf);
	r->kind = EVBUF_RANGE_PUSH;
	r->len = 4;
	r->size = (uint16_t)(sizeof *r + 8);
	r->ts = 50;
	memcpy(buf + sizeof *r / 8, "step", 4);
	fn(ctx, 7, "main", r);
	/* a Python snapshot appended by the bridge's thread (tid 55): for a
	 * salvage only, no event and no track */
	memset(buf, 0, sizeof buf);
	r->kind = EVBUF_PYSTACK;
	r->len = 10;
	r->size = (uint16_t)(sizeof *r + 16);
	r->ts = 60;
	r->id = 7;
	memcpy(buf + sizeof *r / 8, "f (a.py:1)", 10);
	fn(ctx, 55, "profhost-pystk", r);
	for (i = 0; i < 3; i++) {
		memset(buf, 0, sizeof buf);
		r->kind = EVBUF_CUPTI;
		r->len = lens[i];
		r->size = (uint16_t)((sizeof *r + lens[i] + 7) & ~7u);
		r->ts = 10 + 30 * (int64_t)i; /* the first before the clip */
		memset((char *)buf + sizeof *r, 'a' + (int)i, lens[i]);
		fn(ctx, 99, "cupti worker", r);
	}
	memset(buf, 0, sizeof buf);
	r->kind = EVBUF_RANGE_POP;
	r->size = sizeof *r;
	r->ts = 80;
	fn(ctx, 7, "main", r);
	return 0;
}

static void test_cupti_records_are_handed_over_whole(void)
{
	static const uint64_t gens[] = { 4 };
	struct assemble_source src = { .drain = cupti_drain, .gens = gens, .ngens = 1,
				       .clip_start = true };
	const struct trace_raw *r;
	struct trace t;
	size_t off = 0, i, k;

	CHECK(trace_init(&t) == 0);
	t.meta.pid = 1;
	t.meta.start_ts = 20;
	t.meta.end_ts = 100;
	CHECK_EQ_INT(assemble_window(&t, &src, NULL, 0), 0);
	/* the range is an event; the CUPTI records are not, and CUPTI's
	 * thread gets no track */
	CHECK_EQ_INT(count_named(&t, "step", NULL), 1);
	CHECK_EQ_INT((int)t.nev, 1);
	for (i = 0; i < t.nthreads; i++)
		CHECK(t.threads[i].tid != 99 && t.threads[i].tid != 55);
	/* all three, in order, whole, 8-aligned, the clip left to the source */
	for (i = 0; (r = trace_raw_next(&t, &off)) != NULL; i++) {
		static const uint32_t lens[] = { 8, 13, 200 };
		const unsigned char *p = (const void *)(r + 1);

		CHECK(i < 3);
		if (i >= 3)
			break;
		CHECK_EQ_INT(r->kind, EVBUF_CUPTI);
		CHECK_EQ_INT((int)r->len, (int)lens[i]);
		CHECK_EQ_INT((int)r->ts, 10 + 30 * (int)i);
		CHECK(((uintptr_t)p & 7) == 0);
		for (k = 0; k < r->len; k++)
			if (p[k] != 'a' + i)
				break;
		CHECK_EQ_INT((int)k, (int)r->len);
	}
	CHECK_EQ_INT((int)i, 3);
	trace_raw_free(&t);
	off = 0;
	CHECK(trace_raw_next(&t, &off) == NULL);
	trace_free(&t);
}

/* One record of a phase test: thread, kind, ts, name, range id, flags. */
struct prec {
	int32_t tid;
	uint16_t kind;
	int64_t ts;
	const char *name;
	uint64_t id;
	uint32_t flags;
};

/* The program's ranges (pushes: prof_range_push, NVTX) and the bridge's
 * own phases (starts flagged EVBUF_A_PHASE, written once ended). */
static const struct prec phase_recs[] = {
	{ 7, EVBUF_RANGE_PUSH, 100, "forward", 0, 0 },       /* the program's */
	{ 7, EVBUF_RANGE_POP, 200, NULL, 0, 0 },
	{ 7, EVBUF_RANGE_START, 110, "forward", 1, EVBUF_A_PHASE }, /* inside it */
	{ 7, EVBUF_RANGE_END, 190, NULL, 1, 0 },
	{ 7, EVBUF_RANGE_START, 210, "backward", 2, EVBUF_A_PHASE }, /* alone */
	{ 7, EVBUF_RANGE_END, 300, NULL, 2, 0 },
	{ 7, EVBUF_RANGE_START, 400, "forward", 3, EVBUF_A_PHASE }, /* alone */
	{ 7, EVBUF_RANGE_END, 450, NULL, 3, 0 },
	{ 7, EVBUF_RANGE_PUSH, 500, "optimizer", 0, 0 },     /* the program's */
	{ 7, EVBUF_RANGE_POP, 520, NULL, 0, 0 },
	{ 7, EVBUF_RANGE_START, 505, "optimizer", 4, EVBUF_A_PHASE }, /* overlaps */
	{ 7, EVBUF_RANGE_END, 525, NULL, 4, 0 },
	{ 7, EVBUF_RANGE_START, 530, "forward", 5, EVBUF_A_PYTHON }, /* a module */
	{ 7, EVBUF_RANGE_END, 540, NULL, 5, 0 },
	{ 8, EVBUF_RANGE_START, 210, "backward", 6, EVBUF_A_PHASE }, /* thread 8 */
	{ 8, EVBUF_RANGE_END, 300, NULL, 6, 0 },
	{ 8, EVBUF_RANGE_PUSH, 600, "backward", 0, 0 },      /* after it */
	{ 8, EVBUF_RANGE_POP, 700, NULL, 0, 0 },
	{ 8, EVBUF_RANGE_PUSH, 250, "forward", 0, 0 },       /* another name */
	{ 8, EVBUF_RANGE_POP, 260, NULL, 0, 0 },
};

static int phase_drain(uint64_t gen, evbuf_visit_fn fn, void *ctx,
		       struct evbuf_stats *stats)
{
	char buf[sizeof(struct evbuf_rec) + 64];
	struct evbuf_rec *r = (struct evbuf_rec *)buf;
	size_t i;

	(void)gen;
	memset(stats, 0, sizeof *stats);
	for (i = 0; i < sizeof phase_recs / sizeof phase_recs[0]; i++) {
		const struct prec *f = &phase_recs[i];
		size_t len = f->name ? strlen(f->name) : 0;

		memset(buf, 0, sizeof buf);
		r->kind = f->kind;
		r->len = (uint32_t)len;
		r->size = (uint16_t)((sizeof *r + len + 7) & ~7u);
		r->ts = f->ts;
		r->id = f->id;
		r->a = evbuf_nvtx_a(0, 0, f->flags);
		if (len)
			memcpy(buf + sizeof *r, f->name, len);
		fn(ctx, f->tid, f->tid == 7 ? "main" : "worker", r);
		stats->records++;
	}
	return 0;
}

/* Whether the trace has a complete user_annotation `name` on `tid` at
 * [ts, ts + dur). */
static bool has_range(const struct trace *t, int32_t tid, const char *name, int64_t ts,
		      int64_t dur)
{
	size_t i;

	for (i = 0; i < t->nev; i++)
		if (t->ev[i].tid == tid && t->ev[i].ts == ts && t->ev[i].dur == dur &&
		    t->ev[i].cat == TRACE_CAT_USER_ANNOTATION &&
		    strcmp(trace_str(t, t->ev[i].name), name) == 0)
			return true;
	return false;
}

/* A recorder segment with torch's records on thread 7: an operator
 * [20,30) (before the dump's first step at 40), one [50,70), and three
 * allocations or frees (profile_memory) at 25, 55 and 60, the last on
 * GPU 2. */
static int mem_drain(uint64_t gen, evbuf_visit_fn fn, void *ctx, struct evbuf_stats *stats)
{
	uint64_t buf[(sizeof(struct evbuf_rec) + 128) / 8];
	struct evbuf_rec *r = (struct evbuf_rec *)buf;
	static const struct {
		int64_t ts, bytes;
		int32_t type, index;
	} mem[] = { { 25, 4096, 0, -1 }, { 55, -4096, 0, -1 }, { 60, 1 << 20, 1, 2 } };
	struct oprec_hdr h;
	struct memrec m;
	size_t i;

	(void)gen;
	memset(stats, 0, sizeof *stats);
	for (i = 0; i < 2; i++) {
		memset(buf, 0, sizeof buf);
		memset(&h, 0, sizeof h);
		h.end = i ? 70 : 30;
		h.name_len = 9;
		r->kind = EVBUF_TORCH_OP;
		r->len = (uint32_t)(sizeof h + 9);
		r->size = (uint16_t)((sizeof *r + r->len + 7) & ~7u);
		r->ts = i ? 50 : 20;
		r->id = 5 + i;
		memcpy((char *)buf + sizeof *r, &h, sizeof h);
		memcpy((char *)buf + sizeof *r + sizeof h, "aten::mul", 9);
		fn(ctx, 7, "main", r);
	}
	for (i = 0; i < 3; i++) {
		memset(buf, 0, sizeof buf);
		m.addr = 0x5000;
		m.bytes = mem[i].bytes;
		m.total_allocated = 8192 + mem[i].bytes;
		m.total_reserved = mem[i].type ? 2 << 20 : 0;
		r->kind = EVBUF_TORCH_MEM;
		r->len = sizeof m;
		r->size = (uint16_t)(sizeof *r + sizeof m);
		r->ts = mem[i].ts;
		r->a = memrec_a(mem[i].type, mem[i].index);
		memcpy((char *)buf + sizeof *r, &m, sizeof m);
		fn(ctx, 7, "main", r);
	}
	return 0;
}

static int64_t int_arg(const struct trace *t, const struct trace_event *e, const char *key)
{
	size_t i;

	for (i = e->args; i < (size_t)e->args + e->nargs; i++)
		if (strcmp(trace_str(t, t->args[i].key), key) == 0)
			return t->args[i].v.i;
	return INT64_MIN;
}

/* torch's allocations become Kineto's "[memory]" instants on their thread
 * (cpu_instant_event, its six args, the device unpacked); in a dump,
 * those and the operators that ended before its first step are left
 * out. */
static void test_memory_records_become_memory_events(void)
{
	static const uint64_t gens[] = { 4 };
	struct assemble_source src = { .drain = mem_drain, .gens = gens, .ngens = 1,
				       .clip_start = true };
	static const char *const keys[] = { "Total Reserved", "Total Allocated", "Bytes",
					    "Addr", "Device Id", "Device Type" };
	const struct trace_event *e = NULL;
	struct trace t;
	size_t i;

	CHECK(trace_init(&t) == 0);
	t.meta.pid = 1;
	t.meta.start_ts = 40;
	t.meta.end_ts = 100;
	CHECK_EQ_INT(assemble_window(&t, &src, NULL, 0), 0);
	CHECK_EQ_INT(count_named(&t, "aten::mul", &e), 1);
	CHECK(e && e->ts == 50 && e->dur == 20 && e->cat == TRACE_CAT_CPU_OP);
	CHECK_EQ_INT(count_named(&t, "[memory]", &e), 2);
	CHECK(e && e->ts == 55 && e->tid == 7 && e->pid == 1);
	CHECK(e && e->ph == TRACE_PH_INSTANT && e->cat == TRACE_CAT_CPU_INSTANT);
	CHECK_EQ_STR(trace_cat_name(TRACE_CAT_CPU_INSTANT), "cpu_instant_event");
	CHECK(e && e->nargs == 6);
	for (i = 0; e && i < 6; i++)
		CHECK_EQ_STR(trace_str(&t, t.args[e->args + i].key), keys[i]);
	CHECK_EQ_INT(int_arg(&t, e, "Bytes"), -4096);
	CHECK_EQ_INT(int_arg(&t, e, "Total Allocated"), 4096);
	CHECK_EQ_INT(int_arg(&t, e, "Addr"), 0x5000);
	CHECK_EQ_INT(int_arg(&t, e, "Device Type"), 0);
	CHECK_EQ_INT(int_arg(&t, e, "Device Id"), -1);
	e++; /* the GPU's */
	CHECK_EQ_INT(int_arg(&t, e, "Device Type"), 1);
	CHECK_EQ_INT(int_arg(&t, e, "Device Id"), 2);
	CHECK_EQ_INT(int_arg(&t, e, "Total Reserved"), 2 << 20);
	trace_free(&t);
}

/* The program's own labels win (#26.4): a phase the bridge timed that a
 * range of the program's with its name overlaps on its thread is left
 * out, the others stay; the program's ranges all stay. A label a capture
 * source adds later (torch's profiler's) wins the same way at the second
 * call, with the list of own phases kept right. */
static void test_program_ranges_win_over_own_phases(void)
{
	struct assemble_source src = { .drain = phase_drain, .gen = 1 };
	struct trace_event e = { 0 };
	struct trace t;
	size_t i;

	CHECK(trace_init(&t) == 0);
	t.meta.pid = 1;
	t.meta.start_ts = 0;
	t.meta.end_ts = 1000;
	CHECK_EQ_INT(assemble_window(&t, &src, NULL, 0), 0);
	/* the program's ranges */
	CHECK(has_range(&t, 7, "forward", 100, 100));
	CHECK(has_range(&t, 7, "optimizer", 500, 20));
	CHECK(has_range(&t, 8, "backward", 600, 100));
	CHECK(has_range(&t, 8, "forward", 250, 10));
	/* the phases they overlap are gone */
	CHECK(!has_range(&t, 7, "forward", 110, 80));
	CHECK(!has_range(&t, 7, "optimizer", 505, 20));
	/* the others stay: no label there, another thread, another name */
	CHECK(has_range(&t, 7, "backward", 210, 90));
	CHECK(has_range(&t, 7, "forward", 400, 50));
	CHECK(has_range(&t, 8, "backward", 210, 90));
	CHECK_EQ_INT(count_named(&t, "forward", NULL), 4); /* the module too */
	CHECK_EQ_INT((int)t.nev, 8);
	CHECK_EQ_INT((int)t.counters.events, 8);
	CHECK_EQ_INT((int)t.nown_phases, 3);
	for (i = 0; i < t.nown_phases && t.own_phases[i] < t.nev; i++)
		CHECK(t.ev[t.own_phases[i]].ts == 210 || t.ev[t.own_phases[i]].ts == 400);

	/* torch's profiler's label "backward" on thread 7, added at collect */
	e.ts = 205;
	e.dur = 100;
	e.pid = 1;
	e.tid = 7;
	e.name = trace_intern(&t, "backward", 8);
	e.cat = TRACE_CAT_USER_ANNOTATION;
	e.ph = TRACE_PH_COMPLETE;
	CHECK(trace_add_event(&t, &e) != NULL);
	CHECK_EQ_INT(assemble_phases_yield(&t), 0);
	CHECK(!has_range(&t, 7, "backward", 210, 90));
	CHECK(has_range(&t, 7, "backward", 205, 100));
	CHECK(has_range(&t, 8, "backward", 210, 90));
	CHECK_EQ_INT((int)t.nev, 8);
	CHECK_EQ_INT((int)t.nown_phases, 2);
	for (i = 0; i < t.nown_phases && t.own_phases[i] < t.nev; i++) {
		const struct trace_event *p = &t.ev[t.own_phases[i]];

		CHECK((p->tid == 7 && p->ts == 400) || (p->tid == 8 && p->ts == 210));
	}
	trace_sort(&t);
	CHECK_EQ_INT((int)t.nown_phases, 0);
	trace_free(&t);
}

/* Appends one record of `kind` with payload p[0..len) for thread `tid`. */
static void feed(evbuf_visit_fn fn, void *ctx, int32_t tid, uint16_t kind, int64_t ts,
		 const void *p, uint32_t len, uint64_t id, uint64_t a)
{
	uint64_t buf[(sizeof(struct evbuf_rec) + 512) / 8];
	struct evbuf_rec *r = (struct evbuf_rec *)buf;

	memset(buf, 0, sizeof buf);
	r->kind = kind;
	r->len = len;
	r->size = (uint16_t)((sizeof *r + len + 7) & ~7u);
	r->ts = ts;
	r->id = id;
	r->a = a;
	memcpy((char *)buf + sizeof *r, p, len);
	fn(ctx, tid, "main", r);
}

/* An operator record: `name` [ts, end) with call stack node `node` (0:
 * none) and, when `dims`, its shapes. */
static void feed_op(evbuf_visit_fn fn, void *ctx, int32_t tid, const char *name, int64_t ts,
		    int64_t end, uint32_t node, const char *dims)
{
	char p[256];
	struct oprec_hdr h;
	size_t used;

	memset(&h, 0, sizeof h);
	h.end = end;
	h.seq = -1;
	h.name_len = (uint16_t)strlen(name);
	if (dims) {
		h.flags |= OPREC_SHAPES;
		h.dims_len = (uint16_t)strlen(dims);
		h.types_len = 2;
	}
	if (node)
		h.flags |= OPREC_STACK;
	memcpy(p, &h, sizeof h);
	used = sizeof h;
	memcpy(p + used, name, h.name_len);
	used += h.name_len;
	if (dims) {
		memcpy(p + used, dims, h.dims_len);
		used += h.dims_len;
		memcpy(p + used, "[]", 2);
		used += 2;
	}
	if (node) {
		memcpy(p + used, &node, sizeof node);
		used += sizeof node;
	}
	feed(fn, ctx, tid, EVBUF_TORCH_OP, ts, p, (uint32_t)used, 1, 0);
}

/* Thread 7 runs two operators under stack node 3 (module -> train ->
 * "<built-in function linear>") and one under node 4, whose record the
 * buffer lost; thread 8 defines node 3's entries (its operator came
 * first in the pool) and runs one operator at node 2. */
static int opstack_drain(uint64_t gen, evbuf_visit_fn fn, void *ctx,
			 struct evbuf_stats *stats)
{
	(void)gen;
	memset(stats, 0, sizeof *stats);
	feed(fn, ctx, 8, EVBUF_OPSTACK, 10, "m.py(9): <module>", 17, 1, 0);
	feed(fn, ctx, 8, EVBUF_OPSTACK, 10, "m.py(3): train", 14, 2, 1);
	feed(fn, ctx, 8, EVBUF_OPSTACK, 10, "<built-in function linear>", 26, 3, 2);
	feed_op(fn, ctx, 8, "aten::relu", 10, 20, 2, NULL);
	feed_op(fn, ctx, 7, "aten::linear", 30, 60, 3, "[[2, 3]]");
	feed_op(fn, ctx, 7, "aten::addmm", 40, 50, 3, NULL);
	feed_op(fn, ctx, 7, "aten::t", 70, 80, 4, NULL);
	feed_op(fn, ctx, 7, "aten::empty", 90, 95, 0, NULL);
	return 0;
}

/* The event named `name`'s "Call stack", or NULL when it has none. */
static const char *call_stack_of(const struct trace *t, const char *name)
{
	const struct trace_event *ev = NULL;
	size_t i;

	if (count_named(t, name, &ev) != 1)
		return "(not one event)";
	for (i = ev->args; i < (size_t)ev->args + ev->nargs; i++)
		if (strcmp(trace_str(t, t->args[i].key), TRACE_ARG_CALL_STACK) == 0)
			return t->args[i].type == TRACE_ARG_STR ? trace_str(t, t->args[i].v.str)
								: "(not a string)";
	return NULL;
}

static void test_operator_call_stacks(void)
{
	static const uint64_t gens[] = { 5 };
	struct assemble_source src = { .drain = opstack_drain, .gens = gens, .ngens = 1 };
	struct trace t;
	size_t i;
	int notes = 0;

	CHECK(trace_init(&t) == 0);
	t.meta.pid = 1;
	t.meta.start_ts = 0;
	t.meta.end_ts = 100;
	CHECK_EQ_INT(assemble_window(&t, &src, NULL, 0), 0);
	CHECK_EQ_STR(call_stack_of(&t, "aten::linear"),
		     "<built-in function linear>;m.py(3): train;m.py(9): <module>");
	CHECK_EQ_STR(call_stack_of(&t, "aten::addmm"),
		     "<built-in function linear>;m.py(3): train;m.py(9): <module>");
	CHECK_EQ_STR(call_stack_of(&t, "aten::relu"), "m.py(3): train;m.py(9): <module>");
	CHECK_EQ_STR(call_stack_of(&t, "aten::t"), ""); /* its records were lost */
	CHECK(call_stack_of(&t, "aten::empty") == NULL);
	/* the shapes before the node are still read */
	{
		const struct trace_event *ev = NULL;
		size_t len;
		int found = 0;

		count_named(&t, "aten::linear", &ev);
		for (i = ev->args; i < (size_t)ev->args + ev->nargs; i++)
			if (strcmp(trace_str(&t, t.args[i].key), TRACE_ARG_INPUT_DIMS) == 0) {
				len = strtab_len(&t.names, t.args[i].v.str);
				found = len == 8 && memcmp(trace_str(&t, t.args[i].v.str),
							   "[[2, 3]]", 8) == 0;
			}
		CHECK(found);
	}
	notes = t.meta.notes && strstr(t.meta.notes, "1 torch operators lost their call stacks");
	CHECK_EQ_INT(notes, 1);
	/* the definitions are no events and no track of their own */
	CHECK_EQ_INT((int)t.nev, 5);
	trace_free(&t);
}

/* Module call records (EVBUF_PY_MODULE) of test_module_calls: a root,
 * a submodule called in it, and two that do not add up. */
struct mrec {
	int64_t ts, end;
	uint64_t id, parent, module_id;
	const char *name, *path;
	uint32_t len_cut; /* bytes taken off the payload (a damaged record) */
};

static const struct mrec mod_recs[] = {
	{ 120, 180, 12, 11, 3, "nn.Module: Linear_3", "encoder.layers.0.ff", 0 },
	{ 100, 200, 11, 0, 0, "nn.Module: Model_0", "", 0 },
	{ 300, 310, 13, 0, 0, "nn.Module: Cut_0", "a.b", 2 },   /* path cut short */
	{ 400, 410, 0, 0, 0, "nn.Module: NoId_0", "", 0 },      /* no Python id */
};

static int mod_drain(uint64_t gen, evbuf_visit_fn fn, void *ctx, struct evbuf_stats *stats)
{
	char buf[sizeof(struct evbuf_rec) + 256];
	struct evbuf_rec *r = (struct evbuf_rec *)buf;
	struct pymodrec_hdr h;
	size_t i;

	(void)gen;
	memset(stats, 0, sizeof *stats);
	for (i = 0; i < sizeof mod_recs / sizeof mod_recs[0]; i++) {
		const struct mrec *m = &mod_recs[i];
		size_t nl = strlen(m->name), pl = strlen(m->path);

		memset(buf, 0, sizeof buf);
		memset(&h, 0, sizeof h);
		h.end = m->end;
		h.parent_id = m->parent;
		h.module_id = m->module_id;
		h.name_len = (uint16_t)nl;
		h.path_len = (uint16_t)pl;
		memcpy(buf + sizeof *r, &h, sizeof h);
		memcpy(buf + sizeof *r + sizeof h, m->name, nl);
		memcpy(buf + sizeof *r + sizeof h + nl, m->path, pl);
		r->kind = EVBUF_PY_MODULE;
		r->len = (uint32_t)(sizeof h + nl + pl - m->len_cut);
		r->size = (uint16_t)((sizeof *r + r->len + 7) & ~7u);
		r->ts = m->ts;
		r->id = m->id;
		fn(ctx, 7, "main", r);
		stats->records++;
	}
	return 0;
}

/* The args of `ev` as "key=value;" text (raw args as written). */
static void args_text(const struct trace *t, const struct trace_event *ev, char *out,
		      size_t size)
{
	size_t i, o = 0;

	out[0] = '\0';
	for (i = 0; i < ev->nargs; i++) {
		const struct trace_arg *a = &t->args[ev->args + i];

		if (a->type == TRACE_ARG_UINT)
			o += (size_t)snprintf(out + o, size - o, "%s=%llu;", trace_str(t, a->key),
					      (unsigned long long)a->v.u);
		else
			o += (size_t)snprintf(out + o, size - o, "%s=%s;", trace_str(t, a->key),
					      trace_str(t, a->v.str));
		if (o >= size)
			return;
	}
}

/* An nn.Module call of the Python bridge is a python_function event as
 * torch's with_modules writes one: named "nn.Module: <class>_<n>", with its
 * Python id, its parent's (null for a root, written raw) and its module id,
 * and profhost's "module path" when it has one; a record that does not add
 * up (its strings past its payload, no Python id) is left out. */
static void test_module_calls(void)
{
	struct assemble_source src = { .drain = mod_drain, .gen = 1 };
	const struct trace_event *e = NULL;
	struct trace t;
	char args[512];

	CHECK(trace_init(&t) == 0);
	t.meta.pid = 1;
	t.meta.start_ts = 0;
	t.meta.end_ts = 1000;
	CHECK_EQ_INT(assemble_window(&t, &src, NULL, 0), 0);
	CHECK_EQ_INT(count_named(&t, "nn.Module: Linear_3", &e), 1);
	if (e) {
		CHECK(e->cat == TRACE_CAT_PYTHON_FUNCTION && e->ph == TRACE_PH_COMPLETE);
		CHECK(e->ts == 120 && e->dur == 60 && e->tid == 7);
		args_text(&t, e, args, sizeof args);
		CHECK_EQ_STR(args, "Python id=12;Python parent id=11;Python module id=3;"
			     "module path=encoder.layers.0.ff;");
	}
	CHECK_EQ_INT(count_named(&t, "nn.Module: Model_0", &e), 1);
	if (e) {
		CHECK(e->ts == 100 && e->dur == 100);
		args_text(&t, e, args, sizeof args);
		CHECK_EQ_STR(args, "Python id=11;Python parent id=null;Python module id=0;");
		CHECK(t.args[e->args + 1].type == TRACE_ARG_RAW);
	}
	CHECK_EQ_INT(count_named(&t, "nn.Module: Cut_0", NULL), 0);
	CHECK_EQ_INT(count_named(&t, "nn.Module: NoId_0", NULL), 0);
	trace_free(&t);
}

int main(void)
{
	test_carried_range_comes_out_once();
	test_clip_start_leaves_out_the_earlier_records();
	test_memory_records_become_memory_events();
	test_records_after_the_end_are_left_out();
	test_cupti_records_are_handed_over_whole();
	test_program_ranges_win_over_own_phases();
	test_operator_call_stacks();
	test_module_calls();
	return check_done();
}

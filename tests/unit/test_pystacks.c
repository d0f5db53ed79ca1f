/*
 * test_pystacks — Python stack snapshots merged into CPU samples and the
 * stacks taken at range pushes: the span from the innermost to the
 * outermost interpreter frame becomes the nearest snapshot's frames, named
 * and kept through symbolization; stacks that ran no Python, and snapshots
 * too far away or of another thread, stay as they were; snapshots outside a
 * window are dropped. Between windows, the flight recorder's segments keep
 * snapshots too, bounded: a full segment keeps its newest, only the newest
 * PYSTACKS_REC_KEEP segments' stores are kept, and a dump merges its
 * segments' snapshots together.
 */
#include "check.h"

#include <stdlib.h>
#include <string.h>

#include "capture/python/pystacks.h"
#include "events/trace.h"

#define MS 1000000LL
#define EVAL 0x5000 /* the fake interpreter loop: [0x5000, 0x6000) */

/* Adds a sample of `tid` at `ts`; pcs[] are raw addresses, leaf first. */
static long add_sample(struct trace *t, int32_t tid, int64_t ts,
		       const uint64_t *pcs, size_t n, int kind)
{
	struct trace_stack s = { 0 };

	s.ts = ts;
	s.tid = tid;
	s.kind = (uint8_t)kind;
	s.weight = 1;
	return trace_add_stack(t, &s, pcs, n, 1);
}

/* The stack's frames as "name|name|..." (leaf first); unnamed frames as
 * their pc in hex. */
static void frames_of(const struct trace *t, long k, char *buf, size_t size)
{
	const struct trace_stack *s = &t->stacks[k];
	size_t i, n = 0;

	buf[0] = '\0';
	for (i = 0; i < s->depth; i++) {
		const struct trace_frame *f = &t->frames[t->stack_frames[s->first + i]];
		const char *name = f->name != STRTAB_NONE ? trace_str(t, f->name) : NULL;

		if (name)
			n += (size_t)snprintf(buf + n, size - n, "%s%s", i ? "|" : "", name);
		else
			n += (size_t)snprintf(buf + n, size - n, "%s%llx", i ? "|" : "",
					      (unsigned long long)f->pc);
	}
}

static void add(int32_t tid, int64_t ts, const char *frames)
{
	pystacks_add(tid, ts, frames, (uint32_t)strlen(frames));
}

static void test_merge(void)
{
	/* leaf 0x100, 0x200, eval, 0x300 (C calling back into Python), eval,
	 * 0x400 (main). The leaf is exact; others are return addresses, which
	 * the trace stores minus one. */
	const uint64_t pcs[] = { 0x100, 0x201, EVAL + 0x11, 0x301, EVAL + 0x21, 0x401 };
	const uint64_t native[] = { 0x100, 0x201, 0x301 };
	struct trace t;
	struct err e;
	char buf[1024];
	long a, b, c, d, r, x;

	pystacks_set_eval_range(EVAL, EVAL + 0x1000);
	CHECK_EQ_INT(trace_init(&t), 0);
	a = add_sample(&t, 7, 100 * MS, pcs, 6, TRACE_STACK_SAMPLE);
	b = add_sample(&t, 7, 200 * MS, pcs, 6, TRACE_STACK_SAMPLE);     /* far */
	c = add_sample(&t, 8, 100 * MS, pcs, 6, TRACE_STACK_SAMPLE);     /* no snapshot */
	d = add_sample(&t, 7, 101 * MS, native, 3, TRACE_STACK_SAMPLE);  /* no Python */
	r = add_sample(&t, 7, 100 * MS, pcs, 6, TRACE_STACK_RANGE);      /* a range's */
	x = add_sample(&t, 7, 130 * MS, pcs, 6, TRACE_STACK_SAMPLE);     /* nearest: 2nd */

	add(7, 50 * MS, "dropped (before the window)");
	pystacks_open(3, false);
	add(7, 99 * MS, "inner (m.py:3)\nmiddle (m.py:2)\n<module> (m.py:1)");
	add(7, 128 * MS, "other (m.py:9)\n<module> (m.py:1)");
	pystacks_close(3);
	add(7, 131 * MS, "dropped (after the window)");

	CHECK_EQ_INT(pystacks_merge(&(uint64_t){ 3 }, 1, 100, &t, &e), 0); /* tolerance 15 ms */
	frames_of(&t, a, buf, sizeof buf);
	CHECK_EQ_STR(buf, "100|200|inner (m.py:3)|middle (m.py:2)|<module> (m.py:1)|400");
	frames_of(&t, x, buf, sizeof buf);
	CHECK_EQ_STR(buf, "100|200|other (m.py:9)|<module> (m.py:1)|400");
	frames_of(&t, b, buf, sizeof buf);
	CHECK_EQ_STR(buf, "100|200|5010|300|5020|400");
	frames_of(&t, c, buf, sizeof buf);
	CHECK_EQ_STR(buf, "100|200|5010|300|5020|400");
	frames_of(&t, d, buf, sizeof buf);
	CHECK_EQ_STR(buf, "100|200|300");
	/* A stack taken at a range push gets its Python frames too. */
	frames_of(&t, r, buf, sizeof buf);
	CHECK_EQ_STR(buf, "100|200|inner (m.py:3)|middle (m.py:2)|<module> (m.py:1)|400");

	/* Python frames belong to module "python"; one frame per name. */
	{
		const struct trace_stack *s = &t.stacks[a];
		const struct trace_frame *f = &t.frames[t.stack_frames[s->first + 2]];
		const struct trace_stack *s2 = &t.stacks[x];

		CHECK_EQ_STR(trace_str(&t, f->module), "python");
		CHECK_EQ_INT(t.stack_frames[s->first + 4], t.stack_frames[s2->first + 3]);
	}
	/* The window's snapshots are gone once merged. */
	CHECK_EQ_INT(pystacks_merge(&(uint64_t){ 3 }, 1, 100, &t, &e), 0);
	trace_free(&t);
}

static void test_nothing_to_merge(void)
{
	const uint64_t pcs[] = { 0x100, EVAL + 1, 0x401 };
	struct trace t;
	struct err e;
	char buf[256];
	long a;

	CHECK_EQ_INT(trace_init(&t), 0);
	a = add_sample(&t, 7, 100 * MS, pcs, 3, TRACE_STACK_SAMPLE);
	CHECK_EQ_INT(pystacks_merge(&(uint64_t){ 99 }, 1, 100, &t, &e), 0); /* unknown window */
	pystacks_open(4, false);
	pystacks_close(4);
	CHECK_EQ_INT(pystacks_merge(&(uint64_t){ 4 }, 1, 100, &t, &e), 0);   /* no snapshot */
	frames_of(&t, a, buf, sizeof buf);
	CHECK_EQ_STR(buf, "100|5000|400");
	trace_free(&t);
}

static void test_named_frames_are_kept(void)
{
	struct trace t;
	uint32_t name;
	long f, g;

	CHECK_EQ_INT(trace_init(&t), 0);
	name = trace_intern(&t, "f (a.py:1)", 10);
	f = trace_add_frame(&t, 0xffff800000000001ull, name, STRTAB_NONE);
	g = trace_add_frame(&t, 0xffff800000000001ull, trace_intern(&t, "g", 1), STRTAB_NONE);
	CHECK(f >= 0);
	CHECK_EQ_INT(f, g);
	CHECK_EQ_STR(trace_str(&t, t.frames[f].name), "f (a.py:1)");
	trace_free(&t);
}

static void test_recorder_segments_merge_together(void)
{
	const uint64_t pcs[] = { 0x100, EVAL + 1, 0x401 };
	const uint64_t gens[] = { 10, 11 };
	struct trace t;
	struct err e;
	char buf[256];
	long a, b;

	pystacks_set_eval_range(EVAL, EVAL + 0x1000);
	CHECK_EQ_INT(trace_init(&t), 0);
	a = add_sample(&t, 7, 100 * MS, pcs, 3, TRACE_STACK_SAMPLE);
	b = add_sample(&t, 7, 200 * MS, pcs, 3, TRACE_STACK_SAMPLE);
	pystacks_open(10, true);
	add(7, 99 * MS, "first (r.py:1)");
	pystacks_open(11, true); /* a rotation: the next segment takes them */
	add(7, 199 * MS, "second (r.py:2)");
	pystacks_open(12, true);
	add(7, 101 * MS, "third (r.py:3)"); /* in a segment the dump leaves */
	pystacks_close(12);
	CHECK_EQ_INT(pystacks_merge(gens, 2, 100, &t, &e), 0);
	frames_of(&t, a, buf, sizeof buf);
	CHECK_EQ_STR(buf, "100|first (r.py:1)|400");
	frames_of(&t, b, buf, sizeof buf);
	CHECK_EQ_STR(buf, "100|second (r.py:2)|400");
	trace_free(&t);
	pystacks_fini();
}

/* A snapshot of `bytes` bytes naming `i`, for thread `tid` at `ts`. */
static void add_big(int32_t tid, int64_t ts, size_t i, size_t bytes)
{
	static char frames[8192];
	int n = snprintf(frames, sizeof frames, "f%zu (big.py:1)\n", i);

	memset(frames + n, 'x', bytes - (size_t)n);
	pystacks_add(tid, ts, frames, (uint32_t)bytes);
}

static void test_recorder_segment_is_bounded(void)
{
	const uint64_t pcs[] = { 0x100, EVAL + 1, 0x401 };
	size_t per = 4096, total = 3 * (PYSTACKS_SEG_TEXT_MAX / per), i, rec, held;
	uint64_t gen;
	struct trace t;
	struct err e;
	char buf[256], want[64];
	long oldest, newest;

	pystacks_set_eval_range(EVAL, EVAL + 0x1000);
	/* Three times what a segment holds, each snapshot different: the
	 * memory stays within the bound, and the newest are kept. */
	pystacks_open(20, true);
	for (i = 0; i < total; i++)
		add_big(7, (int64_t)i * MS, i, per);
	held = pystacks_held_bytes(&rec);
	CHECK_EQ_INT(rec, 1);
	CHECK(held <= PYSTACKS_SEG_TEXT_MAX + PYSTACKS_SEG_SNAPS_MAX * 24);
	CHECK(held >= PYSTACKS_SEG_TEXT_MAX / 2);
	CHECK_EQ_INT(trace_init(&t), 0);
	oldest = add_sample(&t, 7, 0, pcs, 3, TRACE_STACK_SAMPLE);
	newest = add_sample(&t, 7, (int64_t)(total - 1) * MS, pcs, 3, TRACE_STACK_SAMPLE);
	CHECK_EQ_INT(pystacks_merge(&(uint64_t){ 20 }, 1, 1000, &t, &e), 0);
	frames_of(&t, oldest, buf, sizeof buf);
	CHECK_EQ_STR(buf, "100|5000|400");
	frames_of(&t, newest, buf, sizeof buf);
	snprintf(want, sizeof want, "100|f%zu (big.py:1)|", total - 1);
	CHECK(strncmp(buf, want, strlen(want)) == 0);
	trace_free(&t);

	/* A waiting thread's snapshots, all the same, share one text: many
	 * more than the text bound would hold fit. */
	pystacks_open(21, true);
	for (i = 0; i < PYSTACKS_SEG_SNAPS_MAX / 2; i++)
		add_big(8, (int64_t)i * MS, 0, per);
	held = pystacks_held_bytes(&rec);
	CHECK(held < 2 * per + PYSTACKS_SEG_SNAPS_MAX * 24);
	CHECK_EQ_INT(trace_init(&t), 0);
	oldest = add_sample(&t, 8, 0, pcs, 3, TRACE_STACK_SAMPLE);
	CHECK_EQ_INT(pystacks_merge(&(uint64_t){ 21 }, 1, 1000, &t, &e), 0);
	frames_of(&t, oldest, buf, sizeof buf);
	CHECK(strncmp(buf, "100|f0 (big.py:1)|", 18) == 0);
	trace_free(&t);

	/* Segments the recorder gave back go: only the newest
	 * PYSTACKS_REC_KEEP stores stay, each within its bound. */
	for (gen = 30; gen < 30 + 3 * PYSTACKS_REC_KEEP; gen++) {
		pystacks_open(gen, true);
		for (i = 0; i < PYSTACKS_SEG_TEXT_MAX / per + 10; i++)
			add_big(9, (int64_t)i * MS, i, per);
	}
	pystacks_close(gen - 1);
	held = pystacks_held_bytes(&rec);
	CHECK_EQ_INT(rec, PYSTACKS_REC_KEEP);
	CHECK(held <= PYSTACKS_REC_KEEP * (PYSTACKS_SEG_TEXT_MAX +
					   PYSTACKS_SEG_SNAPS_MAX * 24));
	CHECK_EQ_INT(trace_init(&t), 0);
	oldest = add_sample(&t, 9, 5 * MS, pcs, 3, TRACE_STACK_SAMPLE);
	CHECK_EQ_INT(pystacks_merge(&(uint64_t){ 30 }, 1, 1000, &t, &e), 0);
	frames_of(&t, oldest, buf, sizeof buf);
	CHECK_EQ_STR(buf, "100|5000|400"); /* given back: nothing merged */
	trace_free(&t);

	/* The recorder stops (a pause, a window): its segments' stores go,
	 * but those a dump took, kept for its collect. */
	pystacks_fini();
	pystacks_open(50, true);
	add(9, 1 * MS, "dumped (r.py:1)");
	pystacks_rec_dumped();
	pystacks_open(51, true);
	add(9, 2 * MS, "not dumped (r.py:2)");
	pystacks_rec_stop();
	CHECK_EQ_INT(pystacks_held_bytes(&rec) > 0, 1);
	CHECK_EQ_INT(rec, 1);
	CHECK_EQ_INT(trace_init(&t), 0);
	oldest = add_sample(&t, 9, 1 * MS, pcs, 3, TRACE_STACK_SAMPLE);
	newest = add_sample(&t, 9, 2 * MS, pcs, 3, TRACE_STACK_SAMPLE);
	CHECK_EQ_INT(pystacks_merge(&(uint64_t){ 51 }, 1, 1000, &t, &e), 0);
	frames_of(&t, newest, buf, sizeof buf);
	CHECK_EQ_STR(buf, "100|5000|400");
	CHECK_EQ_INT(pystacks_merge(&(uint64_t){ 50 }, 1, 1000, &t, &e), 0);
	frames_of(&t, oldest, buf, sizeof buf);
	CHECK_EQ_STR(buf, "100|dumped (r.py:1)|400");
	trace_free(&t);
	CHECK_EQ_INT(pystacks_held_bytes(&rec), 0);
	pystacks_fini();
}

/* A dump's segments keep their snapshots until its collect, however many
 * segments the recorder opens meanwhile (a collect may take seconds while
 * short steps rotate segments); stores a dump marked but did not take go
 * at the next collect. */
static void test_dump_outlives_rotations(void)
{
	const uint64_t pcs[] = { 0x100, EVAL + 1, 0x401 };
	const uint64_t dump1[] = { 61, 62 }, dump2[] = { 200 };
	struct trace t;
	struct err e;
	char buf[256];
	uint64_t gen;
	size_t rec;
	long a;

	pystacks_set_eval_range(EVAL, EVAL + 0x1000);
	pystacks_open(60, true); /* given back before the dump */
	add(9, 1 * MS, "stale (r.py:1)");
	pystacks_open(61, true);
	add(9, 2 * MS, "dumped (r.py:2)");
	pystacks_open(62, true);
	pystacks_rec_dumped(); /* marks 60 too: pystacks does not know */
	for (gen = 100; gen < 100 + 3 * PYSTACKS_REC_KEEP; gen++) {
		pystacks_open(gen, true);
		add(9, (int64_t)gen * MS, "later (r.py:3)");
	}
	pystacks_held_bytes(&rec);
	CHECK_EQ_INT(rec, PYSTACKS_REC_KEEP + 3); /* the newest + 60, 61, 62 */
	CHECK_EQ_INT(trace_init(&t), 0);
	a = add_sample(&t, 9, 2 * MS, pcs, 3, TRACE_STACK_SAMPLE);
	CHECK_EQ_INT(pystacks_merge(dump1, 2, 1000, &t, &e), 0);
	frames_of(&t, a, buf, sizeof buf);
	CHECK_EQ_STR(buf, "100|dumped (r.py:2)|400");
	trace_free(&t);
	/* 60 is an ordinary given-back store again: the next rotation
	 * frees it. */
	pystacks_open(200, true);
	pystacks_held_bytes(&rec);
	CHECK_EQ_INT(rec, PYSTACKS_REC_KEEP);
	CHECK_EQ_INT(trace_init(&t), 0);
	CHECK_EQ_INT(pystacks_merge(dump2, 1, 1000, &t, &e), 0);
	trace_free(&t);
	pystacks_fini();
}

int main(void)
{
	test_dump_outlives_rotations();
	test_recorder_segments_merge_together();
	test_recorder_segment_is_bounded();
	test_merge();
	test_nothing_to_merge();
	test_named_frames_are_kept();
	pystacks_fini();
	return check_done();
}

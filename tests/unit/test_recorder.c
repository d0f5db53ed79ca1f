/*
 * test_recorder — the flight recorder's segment bookkeeping: rotation keeps
 * at least `steps` complete steps in at most REC_SEGMENTS generations,
 * given back oldest first; a dump takes the asked steps (the last one
 * included) and skips generations that hold none of them; a request
 * before another step completes merges into the last dump.
 */
#include "check.h"

#include <stdint.h>
#include <stdlib.h>

#include "schedule/recorder.h"

/* Plays the caller of window.c: `nsteps` steps from step 0, rotating when
 * told. Records what was given back in released[] (in order). */
struct player {
	struct recorder r;
	uint64_t next_gen;
	uint64_t released[256];
	int nreleased;
	uint64_t step;
};

/* Opens a segment at `ts` (mid: inside the current step). */
static void open_seg_at(struct player *p, int64_t ts, bool mid)
{
	uint64_t rel;

	if (rec_opened(&p->r, ++p->next_gen, p->step, ts, mid, &rel) == 1)
		if (p->nreleased < 256)
			p->released[p->nreleased++] = rel;
}

static void open_seg(struct player *p)
{
	open_seg_at(p, (int64_t)p->step * 100, false);
}

/* Ends the current step (1 unit long per step, 100 ns). */
static void end_step(struct player *p)
{
	struct rec_step s = { p->step, (int64_t)p->step * 100, 100, 7 };

	p->step++;
	if (rec_step(&p->r, &s)) {
		rec_closed(&p->r);
		open_seg(p);
	}
}

static void test_config(void)
{
	struct rec_config c = { true, 20, 256u << 20, 10 };

	CHECK(rec_config_check(&c) == NULL);
	c.steps = 0;
	CHECK(rec_config_check(&c) != NULL);
	c.steps = REC_STEPS_MAX + 1;
	CHECK(rec_config_check(&c) != NULL);
	c.steps = 5;
	c.bytes = 1000;
	CHECK(rec_config_check(&c) != NULL);
	c.enabled = false;
	CHECK(rec_config_check(&c) == NULL);
}

static void test_rotation_keeps_steps(void)
{
	static const uint32_t steps_cases[] = { 1, 2, 3, 10, 11, 20 };
	size_t k;

	for (k = 0; k < sizeof steps_cases / sizeof *steps_cases; k++) {
		struct rec_config c = { true, steps_cases[k], 64u << 20, 10 };
		struct player p = { 0 };
		uint64_t i;
		int held_ok = 1, nseg_ok = 1;

		CHECK_EQ_INT(rec_init(&p.r, &c), 0);
		CHECK_EQ_INT(p.r.pool_bytes, (64u << 20) / REC_POOLS);
		open_seg(&p);
		for (i = 0; i < 200; i++) {
			end_step(&p);
			/* Once `steps` steps ran, at least that many are held. */
			if (p.step >= c.steps && rec_held_steps(&p.r) < c.steps)
				held_ok = 0;
			if (p.r.nseg > REC_SEGMENTS || !p.r.open)
				nseg_ok = 0;
		}
		CHECK(held_ok);
		CHECK(nseg_ok);
		/* Released oldest first, each generation once, in order. */
		CHECK(p.nreleased > 0);
		for (i = 0; i < (uint64_t)p.nreleased; i++)
			CHECK_EQ_INT(p.released[i], i + 1);
		/* Never more than three segments of ceil(steps/2) complete
		 * steps, so memory is bounded too. */
		CHECK(rec_held_steps(&p.r) <= REC_SEGMENTS * ((c.steps + 1) / 2));
		rec_free(&p.r);
	}
}

static void test_dump_takes_last_steps(void)
{
	struct rec_config c = { true, 10, 64u << 20, 10 };
	struct player p = { 0 };
	struct rec_dump d;
	int i;

	CHECK_EQ_INT(rec_init(&p.r, &c), 0);
	open_seg(&p);
	/* Steps 0..37 end: segments of 5 steps; step 37 just ended. */
	for (i = 0; i <= 37; i++)
		end_step(&p);
	rec_closed(&p.r);
	/* No dump yet: nothing merges. */
	CHECK(!rec_merges(&p.r, 37));
	CHECK_EQ_INT(rec_take(&p.r, 3, &d), 0);
	CHECK_EQ_INT(d.first, 35);
	CHECK_EQ_INT(d.last, 37);
	CHECK_EQ_INT(d.nsteps, 3);
	CHECK_EQ_INT(d.steps[2].step, 37);
	CHECK_EQ_INT(d.start_ts, 3500);
	CHECK_EQ_INT(d.index, 0);
	/* Segments: 25-29, 30-34 (all before 35: skipped), 35-37 (open). */
	CHECK_EQ_INT(d.ngens, 3);
	CHECK_EQ_INT(d.nskip, 2);
	CHECK_EQ_INT(d.gens[2], p.next_gen);
	free(d.steps);
	/* Emptied: nothing more to dump until steps end again. */
	CHECK_EQ_INT(rec_held_steps(&p.r), 0);
	CHECK_EQ_INT(rec_take(&p.r, 3, &d), -1);
	/* A request before another step completes holds only dumped steps:
	 * merged; once step 38 completes it is not. */
	CHECK(rec_merges(&p.r, 37));
	CHECK(rec_merges(&p.r, 36));
	CHECK(!rec_merges(&p.r, 38));

	/* A new segment after the dump; a dump asking more than held. */
	open_seg(&p);
	end_step(&p);
	end_step(&p);
	rec_closed(&p.r);
	CHECK_EQ_INT(rec_take(&p.r, 8, &d), 0);
	CHECK_EQ_INT(d.first, 38);
	CHECK_EQ_INT(d.last, 39);
	CHECK_EQ_INT(d.ngens, 1);
	CHECK_EQ_INT(d.nskip, 0);
	CHECK_EQ_INT(d.index, 1);
	CHECK(rec_merges(&p.r, 39));
	CHECK(!rec_merges(&p.r, 40));
	free(d.steps);
	rec_free(&p.r);
}

static void test_dump_right_after_rotation(void)
{
	struct rec_config c = { true, 4, 64u << 20, 10 };
	struct player p = { 0 };
	struct rec_dump d;
	int i;

	CHECK_EQ_INT(rec_init(&p.r, &c), 0);
	open_seg(&p);
	/* Segments of 2 steps: steps 0..5 end; the segment 6.. just opened
	 * holds no complete step; the one before holds 4-5. */
	for (i = 0; i <= 5; i++)
		end_step(&p);
	CHECK_EQ_INT(p.r.seg[p.r.nseg - 1].nsteps, 0);
	rec_closed(&p.r);
	CHECK_EQ_INT(rec_take(&p.r, 1, &d), 0);
	CHECK_EQ_INT(d.first, 5);
	CHECK_EQ_INT(d.last, 5);
	/* Held: 2-3, 4-5, 6- (empty, but the current step's events). */
	CHECK_EQ_INT(d.ngens, 3);
	CHECK_EQ_INT(d.nskip, 1);
	free(d.steps);
	rec_free(&p.r);
}

static void test_take_all(void)
{
	struct rec_config c = { true, 2, 64u << 20, 10 };
	struct player p = { 0 };
	uint64_t gens[REC_SEGMENTS];
	int i;

	CHECK_EQ_INT(rec_init(&p.r, &c), 0);
	open_seg(&p);
	for (i = 0; i < 10; i++)
		end_step(&p);
	rec_closed(&p.r);
	CHECK_EQ_INT(rec_take_all(&p.r, gens), 3);
	CHECK_EQ_INT(gens[0] + 2, gens[2]);
	CHECK_EQ_INT(rec_held_steps(&p.r), 0);
	CHECK_EQ_INT(p.r.nseg, 0);
	rec_free(&p.r);
}

/* A step that alone outgrows the segments: each time its pool fills the
 * caller opens a segment inside it (mid); the oldest parts are given back,
 * the step's newest part stays, and a dump says from when it holds it. A
 * step whose oldest part is still held is not cut. */
static void test_step_larger_than_the_ring(void)
{
	struct rec_config c = { true, 4, 64u << 20, 10 };
	struct player p = { 0 };
	struct rec_dump d;
	int i;

	CHECK_EQ_INT(rec_init(&p.r, &c), 0);
	open_seg(&p);
	end_step(&p);
	end_step(&p); /* steps 0, 1; a segment opened at step 2 (ts 200) */
	/* Step 2 runs long: its pool fills once, at ts 250. */
	rec_closed(&p.r);
	open_seg_at(&p, 250, true);
	rec_closed(&p.r);
	open_seg_at(&p, 260, true);
	{
		struct rec_step s = { 2, 200, 100, 7 };

		rec_step(&p.r, &s);
	}
	rec_closed(&p.r);
	CHECK_EQ_INT(rec_take(&p.r, 1, &d), 0);
	CHECK_EQ_INT(d.first, 2);
	CHECK_EQ_INT(d.cut_ts, 0); /* its first part (from ts 200) is held */
	free(d.steps);

	/* Again, filling four times: the segments holding steps 3's oldest
	 * parts are given back. */
	p.step = 3;
	open_seg_at(&p, 300, false);
	for (i = 1; i <= 4; i++) {
		rec_closed(&p.r);
		open_seg_at(&p, 300 + 10 * i, true);
	}
	{
		struct rec_step s = { 3, 300, 100, 7 };

		rec_step(&p.r, &s);
	}
	rec_closed(&p.r);
	CHECK_EQ_INT(p.r.nseg, REC_SEGMENTS);
	CHECK_EQ_INT(rec_take(&p.r, 1, &d), 0);
	CHECK_EQ_INT(d.first, 3);
	CHECK_EQ_INT(d.nskip, 0);
	CHECK_EQ_INT(d.cut_ts, 320); /* held from the third fill on */
	free(d.steps);
	rec_free(&p.r);
}

/* The hang watchdog's dump of the first step after a window: no complete
 * step is held, the segments hold that step's records; it alone is taken
 * (the caller adds it, partial), and a request before it ends merges. With
 * a complete step held, rec_take is the one. A step that outgrew the pools
 * says from when its records are held. */
static void test_take_running(void)
{
	struct rec_config c = { true, 4, 64u << 20, 10 };
	struct player p = { 0 };
	struct rec_dump d;
	int i;

	CHECK_EQ_INT(rec_init(&p.r, &c), 0);
	CHECK_EQ_INT(rec_take_running(&p.r, 0, 0, &d), -1); /* nothing held */
	p.step = 20; /* a window wrote steps up to 19 */
	open_seg(&p);
	rec_closed(&p.r);
	CHECK_EQ_INT(rec_take(&p.r, 4, &d), -1); /* no complete step */
	CHECK_EQ_INT(rec_take_running(&p.r, 20, 2000, &d), 0);
	CHECK_EQ_INT(d.first, 20);
	CHECK_EQ_INT(d.last, 20);
	CHECK_EQ_INT(d.nsteps, 0);
	CHECK_EQ_INT(d.start_ts, 2000);
	CHECK_EQ_INT(d.cut_ts, 0);
	CHECK_EQ_INT(d.ngens, 1);
	CHECK_EQ_INT(d.gens[0], p.next_gen);
	CHECK_EQ_INT(d.nskip, 0);
	CHECK_EQ_INT(d.index, 0);
	CHECK_EQ_INT(p.r.nseg, 0);
	/* asked again before step 20 ends: merged; not once it ended */
	CHECK(rec_merges(&p.r, 19));
	CHECK(!rec_merges(&p.r, 20));

	/* Step 21 runs long: its pool fills four times, the oldest parts
	 * go back. */
	p.step = 21;
	open_seg_at(&p, 2100, false);
	for (i = 1; i <= 4; i++) {
		rec_closed(&p.r);
		open_seg_at(&p, 2100 + 10 * i, true);
	}
	rec_closed(&p.r);
	CHECK_EQ_INT(rec_take_running(&p.r, 21, 2100, &d), 0);
	CHECK_EQ_INT(d.ngens, REC_SEGMENTS);
	CHECK_EQ_INT(d.cut_ts, 2120);
	CHECK_EQ_INT(d.index, 1);

	/* A complete step held: not this one's to take. */
	open_seg(&p);
	end_step(&p);
	rec_closed(&p.r);
	CHECK_EQ_INT(rec_take_running(&p.r, 22, 2200, &d), -1);
	CHECK_EQ_INT(rec_held_steps(&p.r), 1);
	rec_free(&p.r);
}

/* A job-wide dump takes another rank's steps: the held ones from `first`
 * on (the first it holds says which were gone), up to `last`, or up to
 * the step before the running one; a range held nowhere is refused and
 * leaves the recorder as it was. */
static void test_take_range(void)
{
	struct rec_config c = { true, 10, 64u << 20, 10 };
	struct player p = { 0 };
	struct rec_dump d;
	uint64_t lo, hi;
	int i;

	CHECK_EQ_INT(rec_init(&p.r, &c), 0);
	CHECK(!rec_held_span(&p.r, &lo, &hi));
	open_seg(&p);
	for (i = 0; i <= 37; i++) /* segments of 5: 25-29, 30-34, 35-37 */
		end_step(&p);
	rec_closed(&p.r);
	CHECK(rec_held_span(&p.r, &lo, &hi));
	CHECK_EQ_INT(lo, 25);
	CHECK_EQ_INT(hi, 37);
	/* none of them held: refused, nothing taken */
	CHECK_EQ_INT(rec_take_range(&p.r, 10, 20, 0, &d), -1);
	CHECK_EQ_INT(rec_take_range(&p.r, 40, 45, 0, &d), -1);
	CHECK_EQ_INT(rec_held_steps(&p.r), 13);
	CHECK_EQ_INT(p.r.dumps, 0);
	/* 20-31: 25-31 held (20-24 gone), the first segment holds its start */
	CHECK_EQ_INT(rec_take_range(&p.r, 20, 31, 0, &d), 0);
	CHECK_EQ_INT(d.first, 25);
	CHECK_EQ_INT(d.last, 31);
	CHECK_EQ_INT(d.nsteps, 7);
	CHECK_EQ_INT(d.steps[6].step, 31);
	CHECK_EQ_INT(d.start_ts, 2500);
	CHECK_EQ_INT(d.ngens, 3);
	CHECK_EQ_INT(d.nskip, 0);
	CHECK_EQ_INT(d.index, 0);
	CHECK_EQ_INT(rec_held_steps(&p.r), 0);
	CHECK(rec_merges(&p.r, 31));
	free(d.steps);

	/* steps 38-41 end; the asked range 39-42 has 42 running: 39-41 and
	 * the running step (the caller adds it) */
	open_seg(&p);
	for (i = 38; i <= 41; i++)
		end_step(&p);
	rec_closed(&p.r);
	CHECK_EQ_INT(rec_take_range(&p.r, 39, 42, 4200, &d), 0);
	CHECK_EQ_INT(d.first, 39);
	CHECK_EQ_INT(d.last, 41);
	CHECK_EQ_INT(d.nsteps, 3);
	CHECK_EQ_INT(d.start_ts, 3900);
	CHECK_EQ_INT(d.index, 1);
	CHECK(rec_merges(&p.r, 41));
	CHECK(!rec_merges(&p.r, 42));
	free(d.steps);

	/* only the running step asked (42-42): no complete step, first = last
	 * = 42 from its start */
	open_seg(&p);
	rec_closed(&p.r);
	CHECK_EQ_INT(rec_take_range(&p.r, 42, 42, 4250, &d), 0);
	CHECK_EQ_INT(d.nsteps, 0);
	CHECK_EQ_INT(d.first, 42);
	CHECK_EQ_INT(d.last, 42);
	CHECK_EQ_INT(d.start_ts, 4250);
	CHECK(d.steps == NULL);
	rec_free(&p.r);
}

int main(void)
{
	test_config();
	test_rotation_keeps_steps();
	test_dump_takes_last_steps();
	test_dump_right_after_rotation();
	test_take_all();
	test_step_larger_than_the_ring();
	test_take_running();
	test_take_range();
	return check_done();
}

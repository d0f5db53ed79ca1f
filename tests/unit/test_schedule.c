/*
 * test_schedule — the schedule state machine against hand-written step
 * sequences (torch.profiler.schedule semantics), capture_now, finish,
 * configuration checks and live reconfiguration.
 */
#include "check.h"

#include <stdint.h>
#include <stdlib.h>

#include "schedule/schedule.h"

/*
 * One configuration and what it must do, written out by hand: `actions`
 * has one letter per step from step 0 (N = NONE, W = WARMUP, R = RECORD,
 * S = RECORD_AND_SAVE), spaces ignored (groups of ten steps); `saves` lists
 * the saved windows "first-last" in order; `finish` is the partial window
 * sched_finish() reports after the last step ("" = none).
 */
struct sched_case {
	const char *name;
	struct sched_config cfg;
	const char *actions;
	const char *saves;
	const char *finish;
};

/* Config shorthand: skip_first, wait, warmup, active, cycles, enabled,
 * whole. */
#define CFG(sf, w, wu, a, c) { (sf), (w), (wu), (a), (c), true, false }
/* prof.schedule{ whole = true }: the other fields are not used. */
#define WHOLE { 0, 0, 0, 0, 0, true, true }

static const struct sched_case cases[] = {
	{ "wait1 warmup1 active3 forever", CFG(0, 1, 1, 3, 0),
	  "NWRRSNWRRS NWRRSNWRRS NWRRSNWRRS NWRRSNWRRS N",
	  "2-4 7-9 12-14 17-19 22-24 27-29 32-34 37-39", "" },
	{ "design example: skip10 wait5 warmup1 active3 x2", CFG(10, 5, 1, 3, 2),
	  "NNNNNNNNNN NNNNNWRRSN NNNNWRRSNN NNNNNNNNNN N",
	  "16-18 25-27", "" },
	{ "wait=0", CFG(0, 0, 2, 2, 0),
	  "WWRSWWRSWW RSWWRSWWRS WWRSWWRSWW RSWWRSWWRS W",
	  "2-3 6-7 10-11 14-15 18-19 22-23 26-27 30-31 34-35 38-39", "" },
	{ "warmup=0", CFG(0, 3, 0, 2, 0),
	  "NNNRSNNNRS NNNRSNNNRS NNNRSNNNRS NNNRSNNNRS N",
	  "3-4 8-9 13-14 18-19 23-24 28-29 33-34 38-39", "" },
	{ "active=1 three cycles after skip2", CFG(2, 1, 0, 1, 3),
	  "NNNSNSNSNN NNNNNNNNNN NNNNNNNNNN NNNNNNNNNN N",
	  "3-3 5-5 7-7", "" },
	{ "skip_first larger than a cycle", CFG(7, 1, 1, 1, 0),
	  "NNNNNNNNWS NWSNWSNWSN WSNWSNWSNW SNWSNWSNWS N",
	  "9-9 12-12 15-15 18-18 21-21 24-24 27-27 30-30 33-33 36-36 39-39", "" },
	{ "everything zero but active=1", CFG(0, 0, 0, 1, 0),
	  "SSSSSSSSSS SSSSSSSSSS SSSSSSSSSS SSSSSSSSSS S",
	  "0-0 1-1 2-2 3-3 4-4 5-5 6-6 7-7 8-8 9-9 10-10 11-11 12-12 13-13 "
	  "14-14 15-15 16-16 17-17 18-18 19-19 20-20 21-21 22-22 23-23 24-24 "
	  "25-25 26-26 27-27 28-28 29-29 30-30 31-31 32-32 33-33 34-34 35-35 "
	  "36-36 37-37 38-38 39-39",
	  "40-40" },
	{ "everything zero but active=3 (back to back)", CFG(0, 0, 0, 3, 0),
	  "RRSRRSRRSR RSRRSRRSRR SRRSRRSRRS RRSRRSRRSR R",
	  "0-2 3-5 6-8 9-11 12-14 15-17 18-20 21-23 24-26 27-29 30-32 33-35 36-38",
	  "39-40" },
	{ "back to back, three cycles", CFG(0, 0, 0, 2, 3),
	  "RSRSRSNNNN NNNNNNNNNN NNNNNNNNNN NNNNNNNNNN N",
	  "0-1 2-3 4-5", "" },
	{ "skip3 active4 x2", CFG(3, 0, 0, 4, 2),
	  "NNNRRRSRRR SNNNNNNNNN NNNNNNNNNN NNNNNNNNNN N",
	  "3-6 7-10", "" },
	{ "disabled", { 0, 0, 0, 1, 0, false, false },
	  "NNNNNNNNNN NNNNNNNNNN NNNNNNNNNN NNNNNNNNNN N",
	  "", "" },
	{ "disabled with active=0", { 0, 0, 0, 0, 0, false, false },
	  "NNNNNNNNNN NNNNNNNNNN NNNNNNNNNN NNNNNNNNNN N",
	  "", "" },
	{ "one cycle: wait2 warmup2 active2", CFG(0, 2, 2, 2, 1),
	  "NNWWRSNNNN NNNNNNNNNN NNNNNNNNNN NNNNNNNNNN N",
	  "4-5", "" },
	{ "skip25 warmup1 active5 once", CFG(25, 0, 1, 5, 1),
	  "NNNNNNNNNN NNNNNNNNNN NNNNNWRRRR SNNNNNNNNN N",
	  "26-30", "" },
	{ "long cycle: skip1 wait4 warmup3 active6", CFG(1, 4, 3, 6, 0),
	  "NNNNNWWWRR RRRSNNNNWW WRRRRRSNNN NWWWRRRRRS N",
	  "8-13 21-26 34-39", "" },
	{ "warmup without wait, active=1, skip4", CFG(4, 0, 3, 1, 0),
	  "NNNNWWWSWW WSWWWSWWWS WWWSWWWSWW WSWWWSWWWS W",
	  "7-7 11-11 15-15 19-19 23-23 27-27 31-31 35-35 39-39", "" },
	{ "wait5 active5 forever", CFG(0, 5, 0, 5, 0),
	  "NNNNNRRRRS NNNNNRRRRS NNNNNRRRRS NNNNNRRRRS N",
	  "5-9 15-19 25-29 35-39", "" },
	{ "window longer than the run", CFG(0, 0, 0, 50, 1),
	  "RRRRRRRRRR RRRRRRRRRR RRRRRRRRRR RRRRRRRRRR R",
	  "", "0-40" },
	{ "skip2 wait3 warmup1 active2 x4", CFG(2, 3, 1, 2, 4),
	  "NNNNNWRSNN NWRSNNNWRS NNNWRSNNNN NNNNNNNNNN N",
	  "6-7 12-13 18-19 24-25", "" },
	{ "skip0 wait1 active2 x2, then idle", CFG(0, 1, 0, 2, 2),
	  "NRSNRSNNNN NNNNNNNNNN NNNNNNNNNN NNNNNNNNNN NNNNN",
	  "1-2 4-5", "" },
	/* one window from step 0 to the end, never saved before it */
	{ "whole process", WHOLE,
	  "RRRRRRRRRR RRRRRRRRRR RRRRRRRRRR RRRRRRRRRR R",
	  "", "0-40" },
};

/* Letter of an action, as in the tables. */
static char action_letter(enum sched_action a)
{
	switch (a) {
	case SCHED_NONE:
		return 'N';
	case SCHED_WARMUP:
		return 'W';
	case SCHED_RECORD:
		return 'R';
	case SCHED_RECORD_AND_SAVE:
		return 'S';
	}
	return '?';
}

/* Parses the next "a-b" from *p; returns 0 at the end of the list. */
static int next_range(const char **p, uint64_t *a, uint64_t *b)
{
	char *end;

	while (**p == ' ')
		(*p)++;
	if (!**p)
		return 0;
	*a = strtoull(*p, &end, 10);
	*b = strtoull(end + 1, &end, 10);
	*p = end;
	return 1;
}

/* Checks one result against the expected letters: cur (this step's) and
 * prev (the previous step's, 0 at step 0). A window opens when a recording
 * step follows anything but RECORD; a warm-up starts on the first W. */
static void check_step(const struct sched_case *c, const struct sched_result *r,
		       uint64_t step, char cur, char prev, uint32_t *opened)
{
	bool rec = cur == 'R' || cur == 'S';
	bool want_open = rec && prev != 'R';

	if (action_letter(r->action) != cur || r->step != step ||
	    r->open_window != want_open ||
	    r->warmup_start != (cur == 'W' && prev != 'W'))
		fprintf(stderr, "case \"%s\": step %llu: got %c open=%d warm=%d\n",
			c->name, (unsigned long long)step,
			action_letter(r->action), r->open_window, r->warmup_start);
	CHECK_EQ_INT(action_letter(r->action), cur);
	CHECK_EQ_INT(r->step, step);
	CHECK_EQ_INT(r->open_window, want_open);
	CHECK_EQ_INT(r->warmup_start, cur == 'W' && prev != 'W');
	CHECK(!r->partial);
	if (r->open_window) {
		const char *why = c->cfg.whole ? "whole process" : "schedule";

		CHECK_EQ_INT(r->open_index, *opened);
		CHECK_EQ_STR(r->open_reason, why);
		if (!r->save) {
			CHECK_EQ_INT(r->window, *opened);
			CHECK_EQ_STR(r->reason, why);
		}
		(*opened)++;
	}
}

/* Runs one table case: init, then a boundary per remaining letter, then
 * finish; checks every step's action and every saved window. */
static void run_case(const struct sched_case *c)
{
	struct sched s;
	struct sched_result r;
	const char *a = c->actions, *sv = c->saves, *fin = c->finish;
	char prev = 0;
	uint64_t step = 0, first, last;
	uint32_t opened = 0, saved = 0, nsteps = 0;
	const char *q;

	for (q = c->actions; *q; q++)
		nsteps += *q != ' ';
	CHECK(nsteps >= 41); /* at least 40 boundaries */
	CHECK(sched_config_check(&c->cfg) == NULL);
	for (; *a; a++) {
		if (*a == ' ')
			continue;
		if (step == 0) {
			sched_init(&s, &c->cfg, &r);
			CHECK(!r.save);
		} else {
			sched_on_step(&s, &r);
			if (r.save) {
				if (next_range(&sv, &first, &last)) {
					CHECK_EQ_INT(r.first, first);
					CHECK_EQ_INT(r.last, last);
					CHECK_EQ_INT(r.last, step - 1);
				} else {
					fprintf(stderr, "case \"%s\": unexpected save at %llu\n",
						c->name, (unsigned long long)step);
					CHECK(!"unexpected save");
				}
				CHECK_EQ_INT(r.window, saved);
				CHECK_EQ_STR(r.reason, "schedule");
				saved++;
			} else if (prev == 'S') {
				fprintf(stderr, "case \"%s\": no save at %llu\n",
					c->name, (unsigned long long)step);
				CHECK(!"missing save");
			}
		}
		check_step(c, &r, step, *a, prev, &opened);
		CHECK_EQ_INT(r.action, sched_action_at(&c->cfg, step));
		prev = *a;
		step++;
	}
	CHECK(!next_range(&sv, &first, &last)); /* every listed window saved */
	sched_finish(&s, &r);
	CHECK_EQ_INT(r.step, step - 1);
	if (next_range(&fin, &first, &last)) {
		CHECK(r.save);
		CHECK(r.partial);
		CHECK_EQ_INT(r.first, first);
		CHECK_EQ_INT(r.last, last);
		CHECK_EQ_INT(r.window, opened - 1);
		CHECK_EQ_STR(r.reason, c->cfg.whole ? "whole process" : "schedule");
	} else {
		CHECK(!r.save);
		CHECK(!r.partial);
		CHECK_EQ_INT(opened, saved);
	}
}

static void test_table(void)
{
	size_t i, n = sizeof cases / sizeof cases[0];

	CHECK(n >= 15);
	for (i = 0; i < n; i++)
		run_case(&cases[i]);
}

/* sched_action_at with step numbers and lengths past 32 bits. */
static void test_action_at_large(void)
{
	struct sched_config c = CFG(0, UINT32_MAX - 1, 0, 1, 0);
	struct sched_config d = CFG(UINT32_MAX, 0, 0, 2, 0);
	struct sched_config e = CFG(0, 0, 0, UINT32_MAX, UINT32_MAX);

	CHECK_EQ_INT(sched_action_at(&c, 0), SCHED_NONE);
	CHECK_EQ_INT(sched_action_at(&c, 4294967293ull), SCHED_NONE);
	CHECK_EQ_INT(sched_action_at(&c, 4294967294ull), SCHED_RECORD_AND_SAVE);
	CHECK_EQ_INT(sched_action_at(&c, 4294967295ull), SCHED_NONE);
	CHECK_EQ_INT(sched_action_at(&c, 2 * 4294967295ull - 1), SCHED_RECORD_AND_SAVE);
	CHECK_EQ_INT(sched_action_at(&d, 4294967294ull), SCHED_NONE);
	CHECK_EQ_INT(sched_action_at(&d, 4294967295ull), SCHED_RECORD);
	CHECK_EQ_INT(sched_action_at(&d, 4294967296ull), SCHED_RECORD_AND_SAVE);
	/* (2^32-1) cycles of (2^32-1) steps: the last one saves, then NONE. */
	CHECK_EQ_INT(sched_action_at(&e, 4294967295ull * 4294967295ull - 1),
		     SCHED_RECORD_AND_SAVE);
	CHECK_EQ_INT(sched_action_at(&e, 4294967295ull * 4294967295ull), SCHED_NONE);
}

static void test_names(void)
{
	CHECK_EQ_STR(sched_action_name(SCHED_NONE), "NONE");
	CHECK_EQ_STR(sched_action_name(SCHED_WARMUP), "WARMUP");
	CHECK_EQ_STR(sched_action_name(SCHED_RECORD), "RECORD");
	CHECK_EQ_STR(sched_action_name(SCHED_RECORD_AND_SAVE), "RECORD_AND_SAVE");
}

/* Steps the machine one boundary and checks the letter of the new step. */
static void step_expect(struct sched *s, struct sched_result *r, char letter)
{
	sched_on_step(s, r);
	CHECK_EQ_INT(action_letter(r->action), letter);
}

/* capture_now while nothing records (schedule disabled). */
static void test_capture_idle(void)
{
	struct sched_config cfg = { 0, 0, 0, 0, 0, false, false };
	struct sched s;
	struct sched_result r;

	sched_init(&s, &cfg, &r);
	step_expect(&s, &r, 'N');
	step_expect(&s, &r, 'N');
	step_expect(&s, &r, 'N'); /* step 3 */
	CHECK_EQ_INT(sched_capture_now(&s, 3, "slow step"), 0);
	step_expect(&s, &r, 'R'); /* step 4 */
	CHECK_EQ_INT(r.step, 4);
	CHECK(r.open_window);
	CHECK(!r.save);
	CHECK_EQ_INT(r.open_index, 0);
	CHECK_EQ_INT(r.window, 0);
	CHECK_EQ_STR(r.open_reason, "slow step");
	CHECK_EQ_STR(r.reason, "slow step");
	step_expect(&s, &r, 'R');
	CHECK(!r.open_window && !r.save);
	step_expect(&s, &r, 'S'); /* step 6 */
	CHECK(!r.open_window && !r.save);
	step_expect(&s, &r, 'N'); /* step 7 */
	CHECK(r.save);
	CHECK(!r.open_window);
	CHECK_EQ_INT(r.first, 4);
	CHECK_EQ_INT(r.last, 6);
	CHECK_EQ_INT(r.window, 0);
	CHECK_EQ_STR(r.reason, "slow step");
	step_expect(&s, &r, 'N');
	CHECK(!r.save && !r.open_window);

	/* A one-step capture, reason defaulted. */
	CHECK_EQ_INT(sched_capture_now(&s, 1, NULL), 0);
	step_expect(&s, &r, 'S'); /* step 9 */
	CHECK(r.open_window);
	CHECK_EQ_INT(r.open_index, 1);
	CHECK_EQ_STR(r.open_reason, "capture_now");
	step_expect(&s, &r, 'N');
	CHECK(r.save);
	CHECK_EQ_INT(r.first, 9);
	CHECK_EQ_INT(r.last, 9);
	CHECK_EQ_INT(r.window, 1);
	CHECK_EQ_STR(r.reason, "capture_now");
}

/* sched_capture_at: a window from a given step on (a job-wide capture).
 * Nothing is armed until the step before it; a request for a step that
 * has begun opens at the next boundary, its reason saying how late; a
 * window recording at the asked step makes it late too. */
static void test_capture_at(void)
{
	struct sched_config off = { 0, 0, 0, 0, 0, false, false };
	struct sched_config cyc = CFG(0, 1, 0, 3, 0); /* N R R S */
	struct sched s;
	struct sched_result r;
	int i;

	sched_init(&s, &off, &r);
	CHECK_EQ_INT(sched_capture_at(&s, 3, 5, "job capture x"), 0);
	CHECK_EQ_INT(sched_capture_at(&s, 1, 9, "second"), -1); /* one queued */
	CHECK(!sched_armed(&s));
	CHECK(!sched_next_active(&s));
	CHECK(sched_ahead(&s));
	for (i = 1; i <= 3; i++) {
		step_expect(&s, &r, 'N');
		CHECK(!r.open_window);
	}
	step_expect(&s, &r, 'N'); /* step 4: the next one records */
	CHECK(sched_armed(&s));
	CHECK(sched_next_active(&s));
	step_expect(&s, &r, 'R'); /* step 5 */
	CHECK(r.open_window);
	CHECK_EQ_INT(r.step, 5);
	CHECK_EQ_STR(r.open_reason, "job capture x");
	step_expect(&s, &r, 'R');
	step_expect(&s, &r, 'S');
	step_expect(&s, &r, 'N'); /* step 8 */
	CHECK(r.save);
	CHECK_EQ_INT(r.first, 5);
	CHECK_EQ_INT(r.last, 7);

	/* Asked from step 8, which is running: late, from step 9. */
	CHECK_EQ_INT(sched_capture_at(&s, 2, 8, "job capture y"), 0);
	CHECK(sched_armed(&s));
	step_expect(&s, &r, 'R'); /* step 9 */
	CHECK(r.open_window);
	CHECK_EQ_STR(r.open_reason, "job capture y (late: asked from step 8)");
	step_expect(&s, &r, 'S');
	step_expect(&s, &r, 'N');
	CHECK(r.save);
	CHECK_EQ_INT(r.first, 9);
	CHECK_EQ_INT(r.last, 10);

	/* A schedule window records at the asked step: late, after it. */
	sched_init(&s, &cyc, &r);
	step_expect(&s, &r, 'R'); /* step 1: window 0 */
	CHECK_EQ_INT(sched_capture_at(&s, 1, 2, "job capture z"), 0);
	step_expect(&s, &r, 'R'); /* step 2: still window 0 */
	CHECK(!r.open_window);
	step_expect(&s, &r, 'S');
	step_expect(&s, &r, 'S'); /* step 4: the request's one step */
	CHECK(r.save);
	CHECK(r.open_window);
	CHECK_EQ_STR(r.open_reason, "job capture z (late: asked from step 2)");

	/* sched_finish forgets a request still waiting. */
	sched_init(&s, &off, &r);
	CHECK_EQ_INT(sched_capture_at(&s, 1, 100, "far"), 0);
	sched_finish(&s, &r);
	CHECK(!r.save);
	CHECK(!sched_ahead(&s));
}

/* The schedule resumes after a capture in the middle of one of its windows:
 * that window opens there, as a schedule window. Cycle: N N R R R S. */
static void test_capture_resume_midwindow(void)
{
	struct sched_config cfg = CFG(0, 2, 0, 4, 0);
	struct sched s;
	struct sched_result r;

	sched_init(&s, &cfg, &r);
	CHECK_EQ_INT(r.action, SCHED_NONE);
	CHECK_EQ_INT(sched_capture_now(&s, 2, "early"), 0);
	step_expect(&s, &r, 'R'); /* step 1: capture */
	CHECK(r.open_window);
	CHECK_EQ_STR(r.open_reason, "early");
	step_expect(&s, &r, 'S'); /* step 2: capture's last */
	CHECK(!r.open_window && !r.save);
	step_expect(&s, &r, 'R'); /* step 3: schedule, mid-window */
	CHECK(r.save);
	CHECK_EQ_INT(r.first, 1);
	CHECK_EQ_INT(r.last, 2);
	CHECK_EQ_INT(r.window, 0);
	CHECK_EQ_STR(r.reason, "early");
	CHECK(r.open_window);
	CHECK_EQ_INT(r.open_index, 1);
	CHECK_EQ_STR(r.open_reason, "schedule");
	step_expect(&s, &r, 'R');
	step_expect(&s, &r, 'S'); /* step 5 */
	step_expect(&s, &r, 'N'); /* step 6 */
	CHECK(r.save);
	CHECK(!r.open_window);
	CHECK_EQ_INT(r.first, 3);
	CHECK_EQ_INT(r.last, 5);
	CHECK_EQ_INT(r.window, 1);
	CHECK_EQ_STR(r.reason, "schedule");
	step_expect(&s, &r, 'N');
	step_expect(&s, &r, 'R'); /* step 8: the next cycle's window */
	CHECK(r.open_window);
	CHECK_EQ_INT(r.open_index, 2);
}

/* capture_now while a schedule window records: it starts at the boundary
 * that saves that window. Cycle: N R R S. */
static void test_capture_during_window(void)
{
	struct sched_config cfg = CFG(0, 1, 0, 3, 0);
	struct sched s;
	struct sched_result r;

	sched_init(&s, &cfg, &r);
	step_expect(&s, &r, 'R'); /* step 1: window 0 opens */
	CHECK(r.open_window);
	CHECK_EQ_INT(r.open_index, 0);
	CHECK_EQ_INT(sched_capture_now(&s, 2, "x"), 0);
	step_expect(&s, &r, 'R'); /* step 2: still window 0 */
	CHECK(!r.open_window && !r.save);
	step_expect(&s, &r, 'S'); /* step 3 */
	CHECK(!r.open_window && !r.save);
	step_expect(&s, &r, 'R'); /* step 4: save 0, open the capture */
	CHECK(r.save);
	CHECK_EQ_INT(r.first, 1);
	CHECK_EQ_INT(r.last, 3);
	CHECK_EQ_INT(r.window, 0);
	CHECK_EQ_STR(r.reason, "schedule");
	CHECK(r.open_window);
	CHECK_EQ_INT(r.open_index, 1);
	CHECK_EQ_STR(r.open_reason, "x");
	step_expect(&s, &r, 'S'); /* step 5: capture's last (schedule: N) */
	CHECK(!r.open_window && !r.save);
	step_expect(&s, &r, 'R'); /* step 6: schedule resumes mid-window */
	CHECK(r.save);
	CHECK_EQ_INT(r.first, 4);
	CHECK_EQ_INT(r.last, 5);
	CHECK_EQ_INT(r.window, 1);
	CHECK_EQ_STR(r.reason, "x");
	CHECK(r.open_window);
	CHECK_EQ_INT(r.open_index, 2);
	CHECK_EQ_STR(r.open_reason, "schedule");
	step_expect(&s, &r, 'S'); /* step 7 */
	step_expect(&s, &r, 'N'); /* step 8 */
	CHECK(r.save);
	CHECK_EQ_INT(r.first, 6);
	CHECK_EQ_INT(r.last, 7);
	CHECK_EQ_INT(r.window, 2);
	step_expect(&s, &r, 'R'); /* step 9 */
	CHECK(r.open_window);
	CHECK_EQ_INT(r.open_index, 3);
}

/* Two requests: the second is refused while the first is queued, accepted
 * once the first runs, and starts right after it, with its own reason. */
static void test_capture_twice(void)
{
	struct sched_config cfg = { 0, 0, 0, 0, 0, false, false };
	struct sched s;
	struct sched_result r;
	char longr[300];

	sched_init(&s, &cfg, &r);
	CHECK_EQ_INT(sched_capture_now(&s, 0, "zero"), -1);
	CHECK_EQ_INT(sched_capture_now(&s, 2, "first"), 0);
	CHECK_EQ_INT(sched_capture_now(&s, 5, "refused"), -1);
	step_expect(&s, &r, 'R'); /* step 1 */
	CHECK(r.open_window);
	CHECK_EQ_STR(r.open_reason, "first");
	memset(longr, 'a', sizeof longr - 1);
	longr[sizeof longr - 1] = '\0';
	CHECK_EQ_INT(sched_capture_now(&s, 1, longr), 0);
	step_expect(&s, &r, 'S'); /* step 2 */
	CHECK(!r.save && !r.open_window);
	step_expect(&s, &r, 'S'); /* step 3: second capture, one step */
	CHECK(r.save);
	CHECK_EQ_INT(r.first, 1);
	CHECK_EQ_INT(r.last, 2);
	CHECK_EQ_STR(r.reason, "first");
	CHECK(r.open_window);
	CHECK_EQ_INT(r.open_index, 1);
	CHECK_EQ_INT(strlen(r.open_reason), 127);
	CHECK(strncmp(r.open_reason, longr, 127) == 0);
	step_expect(&s, &r, 'N'); /* step 4 */
	CHECK(r.save);
	CHECK_EQ_INT(r.first, 3);
	CHECK_EQ_INT(r.last, 3);
	CHECK_EQ_INT(r.window, 1);
	CHECK_EQ_INT(strlen(r.reason), 127);
	CHECK(!r.open_window);
	CHECK_EQ_INT(s.windows, 2);
}

/* A capture request while the schedule warms up takes over at once; the
 * warm-up restarts when the schedule lands on it again.
 * Cycle: N W W R S. */
static void test_capture_during_warmup(void)
{
	struct sched_config cfg = CFG(0, 1, 2, 2, 0);
	struct sched s;
	struct sched_result r;

	sched_init(&s, &cfg, &r);
	step_expect(&s, &r, 'W'); /* step 1 */
	CHECK(r.warmup_start);
	CHECK_EQ_INT(sched_capture_now(&s, 4, "w"), 0);
	step_expect(&s, &r, 'R'); /* step 2 */
	CHECK(r.open_window);
	CHECK(!r.warmup_start);
	step_expect(&s, &r, 'R');
	step_expect(&s, &r, 'R');
	step_expect(&s, &r, 'S'); /* step 5 */
	step_expect(&s, &r, 'W'); /* step 6: schedule, m = 1 */
	CHECK(r.save);
	CHECK_EQ_INT(r.first, 2);
	CHECK_EQ_INT(r.last, 5);
	CHECK(r.warmup_start);
	CHECK(!r.open_window);
	step_expect(&s, &r, 'W');
	CHECK(!r.warmup_start);
	step_expect(&s, &r, 'R'); /* step 8 */
	CHECK(r.open_window);
	CHECK_EQ_INT(r.open_index, 1);
}

static void test_finish(void)
{
	struct sched_config on = CFG(0, 0, 0, 5, 0);
	struct sched_config off = { 0, 0, 0, 0, 0, false, false };
	struct sched s;
	struct sched_result r;

	/* Partial schedule window. */
	sched_init(&s, &on, &r);
	CHECK(r.open_window);
	step_expect(&s, &r, 'R');
	step_expect(&s, &r, 'R');
	sched_finish(&s, &r);
	CHECK(r.save);
	CHECK(r.partial);
	CHECK_EQ_INT(r.first, 0);
	CHECK_EQ_INT(r.last, 2);
	CHECK_EQ_INT(r.step, 2);
	CHECK_EQ_INT(r.window, 0);
	CHECK_EQ_STR(r.reason, "schedule");

	/* Finish on the window's last step: still partial (the step was cut). */
	sched_init(&s, &on, &r);
	step_expect(&s, &r, 'R');
	step_expect(&s, &r, 'R');
	step_expect(&s, &r, 'R');
	step_expect(&s, &r, 'S');
	sched_finish(&s, &r);
	CHECK(r.save && r.partial);
	CHECK_EQ_INT(r.first, 0);
	CHECK_EQ_INT(r.last, 4);

	/* No window. */
	sched_init(&s, &off, &r);
	step_expect(&s, &r, 'N');
	sched_finish(&s, &r);
	CHECK(!r.save);
	CHECK(!r.partial);
	CHECK_EQ_INT(r.step, 1);

	/* A queued request that never started: nothing to save. */
	sched_init(&s, &off, &r);
	CHECK_EQ_INT(sched_capture_now(&s, 3, "late"), 0);
	sched_finish(&s, &r);
	CHECK(!r.save);

	/* Partial capture_now window keeps its reason. */
	sched_init(&s, &off, &r);
	CHECK_EQ_INT(sched_capture_now(&s, 3, "oom hunt"), 0);
	step_expect(&s, &r, 'R');
	step_expect(&s, &r, 'R');
	sched_finish(&s, &r);
	CHECK(r.save && r.partial);
	CHECK_EQ_INT(r.first, 1);
	CHECK_EQ_INT(r.last, 2);
	CHECK_EQ_STR(r.reason, "oom hunt");
}

static void test_config_check(void)
{
	struct sched_config c = CFG(0, 0, 0, 0, 0);
	const char *msg;

	msg = sched_config_check(&c);
	CHECK(msg != NULL);
	CHECK_EQ_STR(msg, "active must be at least 1");
	c.enabled = false;
	CHECK(sched_config_check(&c) == NULL);
	c = (struct sched_config)CFG(10, 5, 1, 3, 2);
	CHECK(sched_config_check(&c) == NULL);
	c = (struct sched_config)CFG(0, UINT32_MAX - 1, 0, 1, 0);
	CHECK(sched_config_check(&c) == NULL); /* sum = 2^32 - 1 */
	c = (struct sched_config)CFG(0, UINT32_MAX, 0, 1, 0);
	msg = sched_config_check(&c);
	CHECK(msg != NULL && strstr(msg, "wait + warmup + active") != NULL);
	c = (struct sched_config)CFG(0, 0, UINT32_MAX, 1, 0);
	CHECK(sched_config_check(&c) != NULL);
	c = (struct sched_config)CFG(0, 2147483648u, 2147483648u, 1, 0);
	CHECK(sched_config_check(&c) != NULL); /* wraps to 1 in 32 bits */
	c = (struct sched_config)CFG(UINT32_MAX, 0, 0, 1, UINT32_MAX);
	CHECK(sched_config_check(&c) == NULL);
}

static void test_reconfigure(void)
{
	struct sched_config slow = CFG(0, 10, 0, 1, 0);
	struct sched_config fast = CFG(0, 0, 0, 2, 0);
	struct sched_config four = CFG(0, 0, 0, 4, 0);
	struct sched_config off = { 0, 0, 0, 0, 0, false, false };
	struct sched_config bad = CFG(0, 1, 1, 0, 0);
	struct sched_config three = CFG(0, 0, 0, 3, 0);
	struct sched_config ns = CFG(0, 1, 0, 1, 0);
	struct sched s;
	struct sched_result r;

	/* While idle: applies from the next boundary, counter kept. */
	sched_init(&s, &slow, &r);
	step_expect(&s, &r, 'N');
	step_expect(&s, &r, 'N'); /* step 2 */
	CHECK(sched_reconfigure(&s, &fast) == NULL);
	CHECK_EQ_INT(s.step, 2);
	CHECK_EQ_INT(r.action, SCHED_NONE);
	step_expect(&s, &r, 'S'); /* step 3: 3 % 2 = 1, the window's last */
	CHECK(r.open_window);
	step_expect(&s, &r, 'R'); /* step 4 */
	CHECK(r.save);
	CHECK_EQ_INT(r.first, 3);
	CHECK_EQ_INT(r.last, 3);
	CHECK(r.open_window);
	step_expect(&s, &r, 'S');
	step_expect(&s, &r, 'R'); /* step 6 */
	CHECK(r.save);
	CHECK_EQ_INT(r.first, 4);
	CHECK_EQ_INT(r.last, 5);

	/* Invalid: refused, old configuration kept. */
	CHECK_EQ_STR(sched_reconfigure(&s, &bad), "active must be at least 1");
	step_expect(&s, &r, 'S'); /* step 7 */

	/* During a window, disabling: the window finishes first. */
	sched_init(&s, &four, &r);
	step_expect(&s, &r, 'R'); /* step 1 */
	CHECK(sched_reconfigure(&s, &off) == NULL);
	step_expect(&s, &r, 'R');
	step_expect(&s, &r, 'S'); /* step 3 */
	step_expect(&s, &r, 'N'); /* step 4 */
	CHECK(r.save);
	CHECK_EQ_INT(r.first, 0);
	CHECK_EQ_INT(r.last, 3);
	CHECK(!r.open_window);
	step_expect(&s, &r, 'N');
	step_expect(&s, &r, 'N');

	/* During a window, to another schedule: old window ends under the old
	 * one (step 2), the new one (N S) from step 3 on. */
	sched_init(&s, &three, &r);
	step_expect(&s, &r, 'R'); /* step 1 */
	CHECK(sched_reconfigure(&s, &ns) == NULL);
	step_expect(&s, &r, 'S'); /* step 2: old schedule */
	step_expect(&s, &r, 'S'); /* step 3: new, 3 % 2 = 1 */
	CHECK(r.save);
	CHECK_EQ_INT(r.first, 0);
	CHECK_EQ_INT(r.last, 2);
	CHECK(r.open_window);
	step_expect(&s, &r, 'N'); /* step 4 */
	CHECK(r.save);
	CHECK_EQ_INT(r.first, 3);
	CHECK_EQ_INT(r.last, 3);
	step_expect(&s, &r, 'S');

	/* Enabling live from a disabled start. */
	sched_init(&s, &off, &r);
	step_expect(&s, &r, 'N');
	CHECK(sched_reconfigure(&s, &ns) == NULL);
	step_expect(&s, &r, 'N'); /* step 2 */
	step_expect(&s, &r, 'S'); /* step 3 */
	CHECK(r.open_window);
	CHECK_EQ_INT(r.open_index, 0);

	/* During a capture_now window: the capture is unaffected, the new
	 * schedule decides from when it ends. */
	sched_init(&s, &off, &r);
	CHECK_EQ_INT(sched_capture_now(&s, 3, "c"), 0);
	step_expect(&s, &r, 'R'); /* step 1 */
	CHECK(sched_reconfigure(&s, &four) == NULL);
	step_expect(&s, &r, 'R');
	step_expect(&s, &r, 'S'); /* step 3 */
	step_expect(&s, &r, 'R'); /* step 4: 4 % 4 = 0, a window opens */
	CHECK(r.save);
	CHECK_EQ_INT(r.first, 1);
	CHECK_EQ_INT(r.last, 3);
	CHECK_EQ_STR(r.reason, "c");
	CHECK(r.open_window);
	CHECK_EQ_STR(r.open_reason, "schedule");
	step_expect(&s, &r, 'R');
	step_expect(&s, &r, 'R');
	step_expect(&s, &r, 'S'); /* step 7 */
	step_expect(&s, &r, 'R'); /* step 8 */
	CHECK(r.save);
	CHECK_EQ_INT(r.first, 4);
	CHECK_EQ_INT(r.last, 7);
}

/* prof.schedule{ whole = true }: one window that opens with the process,
 * records every step, and is saved only by finish, even with no step at
 * all; it is always ahead. A live change to another schedule ends it with
 * the step running then; to whole again, it goes on. */
static void test_whole(void)
{
	struct sched_config whole = WHOLE, ns = CFG(0, 1, 0, 1, 0);
	struct sched_config off = { 0, 0, 0, 0, 0, false, false };
	struct sched s;
	struct sched_result r;

	CHECK(sched_config_check(&whole) == NULL); /* active 0 is fine */
	CHECK_EQ_INT(sched_action_at(&whole, 0), SCHED_RECORD);
	CHECK_EQ_INT(sched_action_at(&whole, UINT64_MAX), SCHED_RECORD);

	/* No step at all: the window of step 0 is saved at finish. */
	sched_init(&s, &whole, &r);
	CHECK(r.open_window);
	CHECK_EQ_INT(r.open_index, 0);
	CHECK_EQ_STR(r.open_reason, "whole process");
	CHECK(sched_armed(&s) && sched_ahead(&s) && sched_next_active(&s));
	sched_finish(&s, &r);
	CHECK(r.save && r.partial);
	CHECK_EQ_INT(r.first, 0);
	CHECK_EQ_INT(r.last, 0);
	CHECK_EQ_INT(r.window, 0);
	CHECK_EQ_STR(r.reason, "whole process");

	/* Steps go on in the one window: no save, no other window. */
	sched_init(&s, &whole, &r);
	step_expect(&s, &r, 'R');
	CHECK(!r.save && !r.open_window);

	/* Live: to whole again, the window goes on, also after a change
	 * away from it in the same step; to another schedule, it ends with
	 * the step running (3) and the new one decides from step 4. */
	CHECK(sched_reconfigure(&s, &whole) == NULL);
	step_expect(&s, &r, 'R'); /* step 2 */
	CHECK(!r.save);
	CHECK(sched_reconfigure(&s, &ns) == NULL);
	CHECK(sched_reconfigure(&s, &whole) == NULL);
	CHECK_EQ_INT(s.action, SCHED_RECORD);
	step_expect(&s, &r, 'R'); /* step 3 */
	CHECK(!r.save && !r.open_window);
	CHECK(sched_reconfigure(&s, &ns) == NULL);
	CHECK_EQ_INT(s.action, SCHED_RECORD_AND_SAVE);
	step_expect(&s, &r, 'N'); /* step 4: 4 % 2 = 0, waits */
	CHECK(r.save);
	CHECK_EQ_INT(r.first, 0);
	CHECK_EQ_INT(r.last, 3);
	CHECK(!r.open_window);
	step_expect(&s, &r, 'S'); /* step 5 */
	CHECK(r.open_window);
	CHECK_EQ_INT(r.open_index, 1);

	/* Live from off to whole: a window from the next step to the end. */
	sched_init(&s, &off, &r);
	step_expect(&s, &r, 'N');
	CHECK(sched_reconfigure(&s, &whole) == NULL);
	step_expect(&s, &r, 'R'); /* step 2 */
	CHECK(r.open_window);
	step_expect(&s, &r, 'R');
	sched_finish(&s, &r);
	CHECK(r.save && r.partial);
	CHECK_EQ_INT(r.first, 2);
	CHECK_EQ_INT(r.last, 3);
}

/* capture_now tickets: each accepted request is numbered; the windows
 * carry their request's ticket and length, a schedule window none. */
static void test_tickets(void)
{
	struct sched_config cfg = CFG(4, 0, 0, 1, 1); /* window at step 4 */
	struct sched s;
	struct sched_result r;

	sched_init(&s, &cfg, &r);
	CHECK_EQ_INT(s.now_requested, 0);
	CHECK_EQ_INT(sched_capture_now(&s, 2, "a"), 0);
	CHECK_EQ_INT(s.now_requested, 1);
	CHECK_EQ_INT(sched_capture_now(&s, 2, "refused"), -1);
	CHECK_EQ_INT(s.now_requested, 1);
	step_expect(&s, &r, 'R'); /* step 1 */
	CHECK(r.open_window);
	CHECK_EQ_INT(s.ticket, 1);
	CHECK_EQ_INT(s.ticket_steps, 2);
	CHECK_EQ_INT(s.now_opened, 1);
	CHECK_EQ_INT(sched_capture_now(&s, 1, "b"), 0); /* ticket 2 */
	step_expect(&s, &r, 'S');
	step_expect(&s, &r, 'S'); /* step 3: "b" right after "a" */
	CHECK(r.save && r.open_window);
	CHECK_EQ_INT(r.ticket, 1);
	CHECK_EQ_INT(s.ticket, 2);
	CHECK_EQ_INT(s.ticket_steps, 1);
	step_expect(&s, &r, 'S'); /* step 4: the schedule's */
	CHECK(r.save && r.open_window);
	CHECK_EQ_INT(r.ticket, 2);
	CHECK_EQ_STR(r.reason, "b");
	CHECK_EQ_INT(s.ticket, 0);
	step_expect(&s, &r, 'N');
	CHECK(r.save);
	CHECK_EQ_INT(r.ticket, 0);
	CHECK_EQ_INT(r.window, 2);
	CHECK_EQ_INT(s.now_opened, 2);
}

/* A capture range opens a window at the current step and holds it past the
 * schedule's save; the schedule's window joins it; its end saves the
 * window. count = 2: the third instance is refused. */
static void test_range(void)
{
	struct sched_config cfg = CFG(3, 0, 0, 2, 1); /* R S at steps 3-4 */
	struct sched s;
	struct sched_result r;

	sched_init(&s, &cfg, &r);
	sched_range_config(&s, true, 2);
	step_expect(&s, &r, 'N'); /* step 1 */
	CHECK(sched_armed(&s)); /* a range may open a window */
	CHECK_EQ_INT(sched_range_begin(&s, "nvtx range 'r'", &r), 1);
	CHECK(r.open_window);
	CHECK_EQ_INT(r.step, 1);
	CHECK_EQ_INT(r.open_index, 0);
	CHECK_EQ_STR(r.open_reason, "nvtx range 'r'");
	CHECK(s.open && s.range_active && !s.recording);
	CHECK_EQ_INT(sched_range_begin(&s, "again", &r), 0); /* one at a time */
	CHECK(!r.open_window);
	step_expect(&s, &r, 'N');
	step_expect(&s, &r, 'R'); /* step 3: the schedule joins the window */
	CHECK(!r.open_window);
	CHECK(s.recording);
	step_expect(&s, &r, 'S');
	step_expect(&s, &r, 'N'); /* step 5: the schedule is done, the range holds */
	CHECK(!r.save);
	CHECK(s.open && !s.recording);
	sched_range_end(&s, &r);
	CHECK(r.save);
	CHECK_EQ_INT(r.first, 1);
	CHECK_EQ_INT(r.last, 5);
	CHECK_EQ_INT(r.window, 0);
	CHECK_EQ_STR(r.reason, "nvtx range 'r'");
	CHECK(!s.open && !s.range_active);
	sched_range_end(&s, &r); /* no instance: nothing */
	CHECK(!r.save);
	/* Second instance inside a schedule-less stretch, then the count is
	 * used up: no more arming for the range. */
	CHECK_EQ_INT(sched_range_begin(&s, "second", &r), 1);
	CHECK(r.open_window);
	CHECK_EQ_INT(r.open_index, 1);
	step_expect(&s, &r, 'N');
	sched_range_end(&s, &r);
	CHECK(r.save);
	CHECK_EQ_INT(r.first, 5);
	CHECK_EQ_INT(r.last, 6);
	CHECK_EQ_INT(sched_range_begin(&s, "third", &r), -1);
	CHECK(!r.open_window);
	CHECK(!sched_armed(&s));
	CHECK_EQ_INT(s.windows, 2);
}

/* A range ending while the schedule records leaves the window to the
 * schedule, which saves it (with the range's first step and reason). */
static void test_range_ends_inside_schedule(void)
{
	struct sched_config cfg = CFG(2, 0, 0, 3, 1); /* R R S at steps 2-4 */
	struct sched s;
	struct sched_result r;

	sched_init(&s, &cfg, &r);
	sched_range_config(&s, true, 0);
	CHECK_EQ_INT(sched_range_begin(&s, "rng", &r), 1); /* at step 0 */
	step_expect(&s, &r, 'N');
	step_expect(&s, &r, 'R'); /* step 2: joins */
	sched_range_end(&s, &r);
	CHECK(!r.save);
	CHECK(s.open);
	step_expect(&s, &r, 'R');
	step_expect(&s, &r, 'S');
	step_expect(&s, &r, 'N'); /* step 5 */
	CHECK(r.save);
	CHECK_EQ_INT(r.first, 0);
	CHECK_EQ_INT(r.last, 4);
	CHECK_EQ_STR(r.reason, "rng");
	/* count = 0: every instance, so a range may always open one. */
	CHECK(sched_armed(&s));
}

/* A capture_now request that starts inside a range's window joins it and
 * takes a ticket; the schedule's finish saves the window partial. */
static void test_capture_joins_range(void)
{
	struct sched_config off = { 0, 0, 0, 0, 0, false, false };
	struct sched s;
	struct sched_result r;

	sched_init(&s, &off, &r);
	sched_range_config(&s, true, 1);
	CHECK_EQ_INT(sched_range_begin(&s, "rng", &r), 1);
	CHECK_EQ_INT(sched_capture_now(&s, 5, "now"), 0);
	step_expect(&s, &r, 'R'); /* step 1: joins */
	CHECK(!r.open_window);
	CHECK_EQ_INT(s.ticket, 1);
	CHECK_EQ_INT(s.ticket_steps, 5);
	CHECK_EQ_STR(s.reason, "rng");
	sched_finish(&s, &r);
	CHECK(r.save && r.partial);
	CHECK_EQ_INT(r.first, 0);
	CHECK_EQ_INT(r.last, 1);
	CHECK_EQ_INT(r.ticket, 1);
	CHECK(!s.open && !s.range_active);
}

/* A window the caller could not open is forgotten: its index, ticket and
 * range instance go to the next one; the schedule counts its steps on and
 * its save closes nothing. */
static void test_open_failed(void)
{
	struct sched_config cfg = CFG(1, 0, 0, 2, 2); /* R S R S from step 1 */
	struct sched_config off = { 0, 0, 0, 0, 0, false, false };
	struct sched s;
	struct sched_result r;

	sched_init(&s, &cfg, &r);
	step_expect(&s, &r, 'R'); /* step 1 */
	CHECK(r.open_window);
	sched_open_failed(&s);
	CHECK(!s.open);
	CHECK_EQ_INT(s.windows, 0);
	step_expect(&s, &r, 'S');
	step_expect(&s, &r, 'R'); /* step 3: the schedule's save, then a new one */
	CHECK(!r.save);
	CHECK(r.open_window);
	CHECK_EQ_INT(r.open_index, 0);
	step_expect(&s, &r, 'S');
	step_expect(&s, &r, 'N');
	CHECK(r.save);
	CHECK_EQ_INT(r.window, 0);
	CHECK_EQ_INT(r.first, 3);

	sched_init(&s, &off, &r);
	CHECK_EQ_INT(sched_capture_now(&s, 1, "x"), 0);
	step_expect(&s, &r, 'S');
	CHECK_EQ_INT(s.ticket, 1);
	sched_open_failed(&s);
	CHECK_EQ_INT(s.now_opened, 0);
	CHECK_EQ_INT(s.ticket, 0);
	sched_open_failed(&s); /* nothing open: nothing to forget */
	CHECK_EQ_INT(s.windows, 0);

	sched_init(&s, &off, &r);
	sched_range_config(&s, true, 1);
	CHECK_EQ_INT(sched_range_begin(&s, "rng", &r), 1);
	sched_open_failed(&s);
	CHECK(!s.range_active);
	CHECK_EQ_INT(s.ranges_recorded, 0);
	CHECK_EQ_INT(sched_range_begin(&s, "rng", &r), 1); /* not used up */
}

/* sched_armed, sched_next_active, sched_ahead against a short schedule. */
static void test_predicates(void)
{
	struct sched_config cfg = CFG(0, 2, 1, 1, 1); /* N N W S, once */
	struct sched_config off = { 0, 0, 0, 0, 0, false, false };
	struct sched s;
	struct sched_result r;

	sched_init(&s, &cfg, &r);
	CHECK(!sched_armed(&s) && !sched_next_active(&s) && sched_ahead(&s));
	step_expect(&s, &r, 'N'); /* step 1: the next one warms up */
	CHECK(sched_armed(&s) && sched_next_active(&s));
	step_expect(&s, &r, 'W');
	CHECK(sched_armed(&s) && sched_next_active(&s));
	step_expect(&s, &r, 'S');
	CHECK(sched_armed(&s) && !sched_next_active(&s) && sched_ahead(&s));
	step_expect(&s, &r, 'N'); /* step 4: the one cycle is over */
	CHECK(r.save);
	CHECK(!sched_armed(&s) && !sched_ahead(&s));
	CHECK_EQ_INT(sched_capture_now(&s, 1, NULL), 0);
	CHECK(sched_armed(&s) && sched_next_active(&s) && sched_ahead(&s));

	sched_init(&s, &off, &r);
	CHECK(!sched_ahead(&s) && !sched_armed(&s));
	sched_range_config(&s, true, 0);
	CHECK(sched_armed(&s));
	CHECK(!sched_ahead(&s)); /* a range is no schedule */
	CHECK_EQ_INT(sched_range_begin(&s, "r", &r), 1);
	CHECK(sched_ahead(&s));
}

int main(void)
{
	test_names();
	test_table();
	test_action_at_large();
	test_capture_idle();
	test_capture_at();
	test_capture_resume_midwindow();
	test_capture_during_window();
	test_capture_twice();
	test_capture_during_warmup();
	test_finish();
	test_config_check();
	test_reconfigure();
	test_tickets();
	test_range();
	test_range_ends_inside_schedule();
	test_capture_joins_range();
	test_open_failed();
	test_predicates();
	test_whole();
	return check_done();
}

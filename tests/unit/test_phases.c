/*
 * test_phases — the summary's per-step phase table: phases land in the step
 * that holds them on the same thread, "other" is the rest, partial steps
 * stay out of the median, rows can be limited, a window without phases
 * renders nothing; trace notes are kept once each.
 */
#include "check.h"

#include <stdlib.h>
#include <string.h>

#include "events/trace.h"
#include "export/phases.h"

#define MS 1000000LL

static void add_range(struct trace *t, const char *name, int64_t ts,
		      int64_t dur, int32_t tid)
{
	struct trace_event e = { 0 };

	e.ts = ts;
	e.dur = dur;
	e.pid = 1;
	e.tid = tid;
	e.name = trace_intern(t, name, strlen(name));
	e.cat = TRACE_CAT_USER_ANNOTATION;
	e.ph = TRACE_PH_COMPLETE;
	trace_add_event(t, &e);
}

static void add_step(struct trace *t, uint64_t n, int64_t ts, int64_t dur,
		     int partial)
{
	struct trace_step s = { .step = n, .ts = ts, .dur = dur, .tid = 7,
				.partial = partial };
	struct trace_event e = { 0 };

	trace_add_step(t, &s);
	e.ts = ts;
	e.dur = dur;
	e.tid = 7;
	e.name = trace_intern(t, "ProfilerStep#", 13);
	e.cat = TRACE_CAT_USER_ANNOTATION;
	e.ph = TRACE_PH_COMPLETE;
	e.flags = TRACE_F_STEP;
	trace_add_event(t, &e);
}

/* Three steps of 10 ms at 100, 110, 120 ms; the last one partial. */
static void make_window(struct trace *t)
{
	int i;

	CHECK_EQ_INT(trace_init(t), 0);
	for (i = 0; i < 3; i++) {
		int64_t s = (100 + 10 * i) * MS;

		add_step(t, 5 + (uint64_t)i, s, 10 * MS, i == 2);
		add_range(t, "data", s + 0 * MS, 1 * MS, 7);
		add_range(t, "forward", s + 1 * MS, 3 * MS, 7);
		add_range(t, "forward", s + 4 * MS, 1 * MS, 7); /* the loss */
		add_range(t, "backward", s + 5 * MS, 3 * MS + i * MS, 7);
		add_range(t, "optimizer", s + 9 * MS, MS / 2, 7);
	}
	/* Not phases of these steps: another thread, before the window, other
	 * names. */
	add_range(t, "forward", 101 * MS, 5 * MS, 8);
	add_range(t, "data", 50 * MS, 5 * MS, 7);
	add_range(t, "phase:forward", 101 * MS, 1 * MS, 7);
	add_range(t, "checkpoint", 101 * MS, 1 * MS, 7);
}

static void test_render(void)
{
	struct trace t;
	struct err e;
	char *text;

	make_window(&t);
	CHECK_EQ_INT(phases_render(&t, 0, &text, &e), 0);
	CHECK(text != NULL);
	if (text) {
		CHECK(strstr(text, "    step      total       data    forward   "
			      "backward  optimizer      other\n") != NULL);
		/* step 5: total 10, data 1, forward 4, backward 3, opt 0.5 */
		CHECK(strstr(text, "      5      10.000      1.000      4.000      "
			      "3.000      0.500      1.500\n") != NULL);
		CHECK(strstr(text, "      7*") != NULL);
		/* The median of the two complete steps: backward 3 and 4. */
		CHECK(strstr(text, "  median     10.000      1.000      4.000      "
			      "3.500") != NULL);
		CHECK(strstr(text, "cut short") != NULL);
		free(text);
	}
	trace_free(&t);
}

static void test_row_limit(void)
{
	struct trace t;
	struct err e;
	char *text;

	make_window(&t);
	CHECK_EQ_INT(phases_render(&t, 1, &text, &e), 0);
	CHECK(text != NULL);
	if (text) {
		CHECK(strstr(text, "      5 ") != NULL);
		CHECK(strstr(text, "      6 ") == NULL);
		CHECK(strstr(text, "(2 more steps)") != NULL);
		/* The median still covers both complete steps. */
		CHECK(strstr(text, "3.500") != NULL);
		free(text);
	}
	trace_free(&t);
}

/* A flight recorder dump's legend says its forward was inferred between
 * windows (no module hooks there), a window's that it is the module
 * calls; a dump whose steps have no forward (no backward to infer it
 * from) says it was not timed (#29). */
static void test_recorder_legend(void)
{
	struct trace t;
	struct err e;
	char *text;

	make_window(&t);
	CHECK_EQ_INT(phases_render(&t, 0, &text, &e), 0);
	CHECK(text && strstr(text, "forward: nn.Module calls;"));
	CHECK(text && !strstr(text, "inferred"));
	free(text);
	t.meta.recorder = true;
	CHECK_EQ_INT(phases_render(&t, 0, &text, &e), 0);
	CHECK(text && strstr(text, "forward: inferred between windows, unless the program "
			     "marks it: from the end of the thread's last data fetch, backward "
			     "or step to its next backward"));
	CHECK(text && !strstr(text, "nn.Module calls"));
	free(text);
	trace_free(&t);

	CHECK_EQ_INT(trace_init(&t), 0); /* an inference loop's dump */
	t.meta.recorder = true;
	add_step(&t, 1, 0, 10 * MS, 0);
	add_range(&t, "data", 1 * MS, 1 * MS, 7);
	CHECK_EQ_INT(phases_render(&t, 0, &text, &e), 0);
	CHECK(text && strstr(text, "forward: not timed between windows, where it is inferred "
			     "from the start of a backward and these steps have none"));
	free(text);
	trace_free(&t);
}

static void test_no_phases(void)
{
	struct trace t;
	struct err e;
	char *text = (char *)&t;

	CHECK_EQ_INT(trace_init(&t), 0);
	add_step(&t, 1, 0, 10 * MS, 0);
	add_range(&t, "load", 1 * MS, 1 * MS, 7);
	add_range(&t, "forward", 1 * MS, 1 * MS, 8); /* another thread */
	CHECK_EQ_INT(phases_render(&t, 0, &text, &e), 0);
	CHECK(text == NULL);
	trace_free(&t);

	CHECK_EQ_INT(trace_init(&t), 0); /* no steps at all */
	add_range(&t, "data", 1 * MS, 1 * MS, 7);
	CHECK_EQ_INT(phases_render(&t, 0, &text, &e), 0);
	CHECK(text == NULL);
	trace_free(&t);
}

static void test_notes(void)
{
	struct trace t;

	CHECK_EQ_INT(trace_init(&t), 0);
	CHECK(t.meta.notes == NULL);
	CHECK_EQ_INT(trace_add_note(&t, "first note"), 0);
	CHECK_EQ_INT(trace_add_note(&t, "second"), 0);
	CHECK_EQ_INT(trace_add_note(&t, "first note"), 0);
	CHECK_EQ_INT(trace_add_note(&t, "note"), 0); /* a suffix of a line */
	CHECK_EQ_STR(t.meta.notes, "first note\nsecond\nnote\n");
	trace_free(&t);
}

int main(void)
{
	test_render();
	test_row_limit();
	test_recorder_legend();
	test_no_phases();
	test_notes();
	return check_done();
}

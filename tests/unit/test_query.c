/*
 * test_query — the C side of the reports (src/events/query.h) on small
 * hand-built traces whose answers are worked out in the comments; the
 * step phases and a thread's time read the same from a trace in nesting
 * order as from one that is not, and a thread of more names than
 * query_during names sums the rest in one row.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "events/query.h"
#include "events/trace.h"
#include "testtrace.h"

static const struct query_row *row_named(const struct trace *t,
					 const struct query_result *r, const char *name)
{
	size_t i;

	for (i = 0; i < r->nrows; i++)
		if (strcmp(trace_str(t, r->rows[i].name), name) == 0)
			return &r->rows[i];
	return NULL;
}

static void test_aggregate(void)
{
	struct trace t;
	struct query_agg_opts o;
	struct query_result r;
	const struct query_row *row;
	struct err e;

	testtrace_build(&t);
	memset(&o, 0, sizeof o);
	o.filter.cats = 1u << TRACE_CAT_KERNEL;
	CHECK_EQ_INT(query_aggregate(&t, &o, &r, &e), 0);
	/* gemm: 20 + 40 = 60 over 2; copyk: 20 */
	CHECK_EQ_INT(r.nrows, 2);
	CHECK_EQ_STR(trace_str(&t, r.rows[0].name), "gemm");
	CHECK(r.rows[0].total == 60 && r.rows[0].count == 2 && r.rows[0].min == 20 &&
	      r.rows[0].max == 40 && r.rows[0].med == 30 && r.rows[0].avg == 30);
	CHECK(fabs(r.rows[0].std - sqrt(200.0)) < 1e-9); /* (10² + 10²) / 1 */
	CHECK(r.total == 80 && r.count == 3);
	query_result_free(&r);

	/* by stream, sorted by count, limit 1 */
	o.by = QUERY_BY_STREAM;
	o.sort = QUERY_SORT_COUNT;
	o.limit = 1;
	CHECK_EQ_INT(query_aggregate(&t, &o, &r, &e), 0);
	CHECK(r.nrows == 1 && r.ngroups == 2 && r.rows[0].tid == 7 && r.rows[0].pid == 0 &&
	      r.rows[0].count == 2);
	query_result_free(&r);

	/* by name, limit 1: the row returned has every statistic (its values
	 * are read for it alone), the totals still count every group */
	o.by = QUERY_BY_NAME;
	o.sort = QUERY_SORT_TOTAL;
	o.limit = 1;
	CHECK_EQ_INT(query_aggregate(&t, &o, &r, &e), 0);
	CHECK(r.nrows == 1 && r.ngroups == 2);
	CHECK_EQ_STR(trace_str(&t, r.rows[0].name), "gemm");
	CHECK(r.rows[0].total == 60 && r.rows[0].count == 2 && r.rows[0].min == 20 &&
	      r.rows[0].max == 40 && r.rows[0].med == 30 && r.rows[0].dur == 60);
	CHECK(fabs(r.rows[0].std - sqrt(200.0)) < 1e-9);
	CHECK(r.total == 80 && r.count == 3);
	query_result_free(&r);
	/* sorted by median (every group's values are read): gemm (30) */
	o.sort = QUERY_SORT_MED;
	CHECK_EQ_INT(query_aggregate(&t, &o, &r, &e), 0);
	CHECK(r.nrows == 1 && r.ngroups == 2 && r.rows[0].med == 30);
	CHECK_EQ_STR(trace_str(&t, r.rows[0].name), "gemm");
	query_result_free(&r);
	o.sort = QUERY_SORT_COUNT;
	CHECK_EQ_INT(query_aggregate(&t, &o, &r, &e), 0);
	CHECK(r.nrows == 1 && r.rows[0].count == 2 && r.rows[0].med == 30);
	query_result_free(&r);
	o.sort = QUERY_SORT_MAX; /* gemm's largest (40) over copyk's (20) */
	CHECK_EQ_INT(query_aggregate(&t, &o, &r, &e), 0);
	CHECK(r.nrows == 1 && r.rows[0].max == 40 && r.rows[0].min == 20);
	query_result_free(&r);

	/* by step: kernels starting in step 0 (60 + 20), step 1 (40) */
	o.by = QUERY_BY_STEP;
	o.sort = QUERY_SORT_KEY;
	o.limit = 0;
	CHECK_EQ_INT(query_aggregate(&t, &o, &r, &e), 0);
	CHECK(r.nrows == 2 && r.rows[0].step == 0 && r.rows[0].total == 40 &&
	      r.rows[1].step == 1 && r.rows[1].total == 40);
	query_result_free(&r);

	/* sum of an argument */
	memset(&o, 0, sizeof o);
	o.filter.cats = 1u << TRACE_CAT_GPU_MEMCPY;
	o.sum_arg = "bytes";
	CHECK_EQ_INT(query_aggregate(&t, &o, &r, &e), 0);
	CHECK(r.nrows == 1 && r.rows[0].total == 1000 && r.rows[0].dur == 10);
	query_result_free(&r);

	/* self time of the ranges of step 0: data 60 - next 50 = 10 */
	memset(&o, 0, sizeof o);
	o.filter.cats = 1u << TRACE_CAT_USER_ANNOTATION;
	o.self = true;
	CHECK_EQ_INT(query_aggregate(&t, &o, &r, &e), 0);
	row = row_named(&t, &r, "data");
	CHECK(row && row->total == 10 + 10); /* step 0: 10, step 1: 10 */
	row = row_named(&t, &r, "next");
	CHECK(row && row->total == 50);
	row = row_named(&t, &r, "ProfilerStep#0");
	CHECK(row && row->total == 5); /* 100 - data 60 - forward 20 - backward 15 */
	/* dur stays the total duration with self times (the CPU report's
	 * Total column): data 60 + 10 */
	row = row_named(&t, &r, "data");
	CHECK(row && row->dur == 70);
	query_result_free(&r);

	/* clipped to a range: kernels in [65, 75): gemm 10, copyk 5 */
	memset(&o, 0, sizeof o);
	o.filter.cats = 1u << TRACE_CAT_KERNEL;
	o.filter.has_range = true;
	o.filter.from = 65;
	o.filter.to = 75;
	CHECK_EQ_INT(query_aggregate(&t, &o, &r, &e), 0);
	CHECK(r.nrows == 2 && r.rows[0].total == 10 && r.rows[1].total == 5);
	query_result_free(&r);

	/* self cannot be clipped */
	o.self = true;
	CHECK_EQ_INT(query_aggregate(&t, &o, &r, &e), -1);
	trace_free(&t);
}

/* The phases of each step: the same whether query_steps lists the phase
 * ranges itself or reads a trace in nesting order (trace_sort) as it
 * lies. */
static void check_steps_and_phases(bool nested)
{
	struct trace t;
	struct query_step *s;
	size_t n;
	struct err e;

	testtrace_build(&t);
	if (nested) {
		trace_sort(&t);
		CHECK(t.nested);
	}
	CHECK_EQ_INT(query_steps(&t, &s, &n, &e), 0);
	CHECK_EQ_INT(n, 2);
	CHECK(s[0].has_phases && s[0].phase[QUERY_PHASE_DATA] == 60 &&
	      s[0].phase[QUERY_PHASE_FORWARD] == 20 && s[0].phase[QUERY_PHASE_BACKWARD] == 15 &&
	      s[0].phase[QUERY_PHASE_OPTIMIZER] == 0 && s[0].phase[QUERY_PHASE_OTHER] == 5);
	CHECK(s[1].phase[QUERY_PHASE_DATA] == 10 && s[1].phase[QUERY_PHASE_FORWARD] == 40 &&
	      s[1].phase[QUERY_PHASE_OPTIMIZER] == 40 && s[1].phase[QUERY_PHASE_OTHER] == 10);
	/* where each phase first starts in its step */
	CHECK_EQ_INT(s[0].phase_mask, 1u << QUERY_PHASE_DATA | 1u << QUERY_PHASE_FORWARD |
		     1u << QUERY_PHASE_BACKWARD);
	CHECK(s[0].phase_start[QUERY_PHASE_DATA] == 0 &&
	      s[0].phase_start[QUERY_PHASE_FORWARD] == 60 &&
	      s[0].phase_start[QUERY_PHASE_BACKWARD] == 80);
	CHECK(s[1].phase_start[QUERY_PHASE_DATA] == 100 &&
	      s[1].phase_start[QUERY_PHASE_OPTIMIZER] == 150);
	/* where each phase's last range ends: step 0 spends [95,100) in no
	 * phase, after backward; step 1 [190,200), after optimizer */
	CHECK(s[0].phase_end[QUERY_PHASE_DATA] == 60 &&
	      s[0].phase_end[QUERY_PHASE_FORWARD] == 80 &&
	      s[0].phase_end[QUERY_PHASE_BACKWARD] == 95);
	CHECK(s[1].phase_end[QUERY_PHASE_DATA] == 110 &&
	      s[1].phase_end[QUERY_PHASE_FORWARD] == 150 &&
	      s[1].phase_end[QUERY_PHASE_OPTIMIZER] == 190);
	free(s);
	trace_free(&t);
}

static void test_steps_and_phases(void)
{
	check_steps_and_phases(false);
	check_steps_and_phases(true);
}

/* The one definition of a phase's share: its time in the counted steps
 * over their time; the shares add up to 100 %. */
static void test_phase_summary(void)
{
	struct query_step s[3] = { 0 };
	struct query_phase_sum sum;
	double all = 0;
	int p;

	s[0].dur = 100;
	s[0].has_phases = true;
	s[0].phase[QUERY_PHASE_DATA] = 60;
	s[0].phase[QUERY_PHASE_OTHER] = 40;
	s[1].dur = 300;
	s[1].has_phases = true;
	s[1].phase[QUERY_PHASE_BACKWARD] = 200;
	s[1].phase[QUERY_PHASE_OTHER] = 100;
	s[2].dur = 50;           /* partial: left out while complete ones exist */
	s[2].partial = true;
	s[2].has_phases = true;
	s[2].phase[QUERY_PHASE_DATA] = 50;
	query_phase_summary(s, 3, &sum);
	CHECK_EQ_INT(sum.steps, 2);
	CHECK(!sum.partial);
	CHECK_EQ_INT(sum.total, 400);
	CHECK_EQ_INT(sum.phase[QUERY_PHASE_DATA], 60);
	CHECK(fabs(query_phase_share(&sum, QUERY_PHASE_BACKWARD) - 0.5) < 1e-12);
	for (p = 0; p < QUERY_PHASE_COUNT; p++)
		all += query_phase_share(&sum, (enum query_phase)p);
	CHECK(fabs(all - 1.0) < 1e-12);
	CHECK(!query_phase_counts(&s[2], sum.partial));

	/* No complete step has phases: the partial ones are counted. */
	s[0].has_phases = s[1].has_phases = false;
	query_phase_summary(s, 3, &sum);
	CHECK(sum.partial && sum.steps == 1 && sum.total == 50);
	CHECK(fabs(query_phase_share(&sum, QUERY_PHASE_DATA) - 1.0) < 1e-12);

	/* None: no share. */
	query_phase_summary(s, 0, &sum);
	CHECK(sum.steps == 0 && !sum.partial && query_phase_share(&sum, QUERY_PHASE_DATA) == 0);
}

/* The phase names, and torch's name of a DataLoader fetch (what the
 * Python bridge writes its data phase as, TensorBoard's DataLoader
 * category) for data. */
static void test_phase_names(void)
{
	static const char dl[] = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__";
	static const char *const not_phases[] = {
		"enumerate(DataLoader)#_SingleProcessDataLoaderIter.__iter__",
		"enumerate(DataLoader)#.__next_", "enumerate(DataLoader)#", "Data",
		"forward ", "enumerate(DataPipe)#x.__next__",
	};
	size_t i;

	CHECK_EQ_INT(query_phase_of("data", 4), QUERY_PHASE_DATA);
	CHECK_EQ_INT(query_phase_of("optimizer", 9), QUERY_PHASE_OPTIMIZER);
	CHECK_EQ_INT(query_phase_of(dl, strlen(dl)), QUERY_PHASE_DATA);
	CHECK_EQ_INT(query_phase_of("enumerate(DataLoader)#.__next__", 31), QUERY_PHASE_DATA);
	for (i = 0; i < sizeof not_phases / sizeof not_phases[0]; i++)
		CHECK_EQ_INT(query_phase_of(not_phases[i], strlen(not_phases[i])),
			     QUERY_PHASE_COUNT);
	CHECK_EQ_STR(query_phase_name(QUERY_PHASE_DATA), "data");
}

/* GPU busy time, and what thread 1 did while the GPU idled: the same
 * answers whether query_during orders the thread's events itself or reads
 * them in a trace in nesting order (trace_sort) as they lie. */
static void check_busy_and_during(bool nested)
{
	struct trace t;
	struct query_busy_opts o = { 0 };
	struct query_busy b;
	struct query_during d;
	struct err e;
	size_t i;

	testtrace_build(&t);
	if (nested) {
		trace_sort(&t);
		CHECK(t.nested);
	}
	o.buckets = 4;
	o.max_gaps = 2;
	CHECK_EQ_INT(query_busy(&t, &o, &b, &e), 0);
	/* busy: [60,90) ∪ [110,160) = 80 of 200 */
	CHECK(b.span == 200 && b.busy == 80 && b.idle == 120 && b.events == 4);
	/* idle: [0,60) [90,110) [160,200) */
	CHECK_EQ_INT(b.nidle, 3);
	CHECK(b.ngaps == 2 && b.gaps[0].ts == 0 && b.gaps[0].dur == 60 &&
	      b.gaps[1].ts == 160 && b.gaps[1].dur == 40);
	/* buckets of 50: [0,50) 0, [50,100) 30, [100,150) 40, [150,200) 10 */
	CHECK(b.nbuckets == 4 && b.bucket_ns == 50);
	CHECK(b.bucket[0] == 0 && fabs(b.bucket[1] - 0.6) < 1e-9 &&
	      fabs(b.bucket[2] - 0.8) < 1e-9 && fabs(b.bucket[3] - 0.2) < 1e-9);

	/* thread 1 during the idle time: [0,60) data 5 + next 50 + data 5;
	 * [90,110) backward 5, (no range) 5 [95,100), data 10;
	 * [160,200) optimizer 30, (no range) 10 */
	CHECK_EQ_INT(query_during(&t, 1, 1, b.idle_iv, b.nidle, &d, &e), 0);
	CHECK_EQ_INT(d.total, 120);
	CHECK(d.nrange >= 4);
	CHECK_EQ_STR(trace_str(&t, d.by_range[0].name), "next");
	CHECK(d.by_range[0].total == 50);
	for (i = 0; i < d.nrange; i++) {
		const char *nm = d.by_range[i].name == STRTAB_NONE ? "(none)"
				 : trace_str(&t, d.by_range[i].name);

		if (strcmp(nm, "data") == 0)
			CHECK(d.by_range[i].total == 20);
		if (strcmp(nm, "optimizer") == 0)
			CHECK(d.by_range[i].total == 30);
		if (strcmp(nm, "(none)") == 0)
			CHECK(d.by_range[i].total == 15);
	}
	CHECK(d.phase[QUERY_PHASE_DATA] == 70 && d.phase[QUERY_PHASE_OPTIMIZER] == 30 &&
	      d.phase[QUERY_PHASE_BACKWARD] == 5 && d.phase[QUERY_PHASE_COUNT] == 15);
	query_during_free(&d);
	query_busy_free(&b);
	trace_free(&t);
}

static void test_busy_and_during(void)
{
	check_busy_and_during(false);
	check_busy_and_during(true);
}

/* A thread of more range names than query_during names: the first
 * QUERY_DURING_NAMES it meets are rows of their own, the time of the
 * others one "(other names)" row, and nothing is lost. */
static void test_during_many_names(void)
{
	const size_t n = QUERY_DURING_NAMES + 100;
	struct query_interval iv = { 0, (int64_t)n * 10 };
	struct query_during d;
	struct trace t;
	struct err e;
	char name[32];
	size_t i, named = 0;
	double other = -1, sum = 0;

	CHECK_EQ_INT(trace_init(&t), 0);
	for (i = 0; i < n; i++) {
		struct trace_event ev = { 0 };

		snprintf(name, sizeof name, "r%zu", i);
		ev.ts = (int64_t)i * 10;
		ev.dur = 10;
		ev.pid = ev.tid = 1;
		ev.name = trace_intern(&t, name, strlen(name));
		ev.cat = TRACE_CAT_USER_ANNOTATION;
		ev.ph = TRACE_PH_COMPLETE;
		CHECK(trace_add_event(&t, &ev) != NULL);
	}
	trace_sort(&t);
	CHECK_EQ_INT(query_during(&t, 1, 1, &iv, 1, &d, &e), 0);
	CHECK_EQ_INT(d.total, (int64_t)n * 10);
	for (i = 0; i < d.nrange; i++) {
		sum += d.by_range[i].total;
		if (d.by_range[i].name == QUERY_NAME_OTHER)
			other = d.by_range[i].total;
		else
			named++;
	}
	CHECK_EQ_INT(named, QUERY_DURING_NAMES);
	CHECK(other == 100 * 10);
	CHECK(sum == (double)n * 10);
	CHECK_EQ_INT(d.by_range[0].name == QUERY_NAME_OTHER, 1); /* the largest row */
	query_during_free(&d);
	trace_free(&t);
}

static void sample(struct trace *t, int64_t ts, const char *stack)
{
	struct trace_event e = { 0 };

	e.ts = ts;
	e.pid = 1;
	e.tid = 1;
	e.name = trace_intern(t, "s", 1);
	e.cat = TRACE_CAT_SAMPLE;
	e.ph = TRACE_PH_INSTANT;
	trace_add_event(t, &e);
	trace_arg_str(t, "stack", stack, strlen(stack));
}

static void test_sample_tree(void)
{
	struct trace t;
	struct query_filter f = { 0 };
	struct query_tree tree;
	struct err e;

	trace_init(&t);
	sample(&t, 1, "main;a;b");
	sample(&t, 2, "main;a;b");
	sample(&t, 3, "main;a");
	sample(&t, 4, "main;c");
	CHECK_EQ_INT(query_sample_tree(&t, &f, &tree, &e), 0);
	/* all(4) > main(4) > a(3, self 1) > b(2, self 2); main > c(1) */
	CHECK_EQ_INT(tree.samples, 4);
	CHECK_EQ_INT(tree.n, 5);
	CHECK(tree.nodes[0].value == 4);
	CHECK(tree.nodes[1].value == 4 && tree.nodes[1].len == 4 &&
	      memcmp(tree.nodes[1].name, "main", 4) == 0);
	CHECK(tree.nodes[2].value == 3 && tree.nodes[2].self == 1 && tree.nodes[2].depth == 2);
	CHECK(tree.nodes[3].value == 2 && tree.nodes[3].self == 2);
	CHECK(tree.nodes[4].value == 1 && tree.nodes[4].parent == 1);
	query_tree_free(&tree);

	/* only samples in [2, 4) */
	f.has_range = true;
	f.from = 2;
	f.to = 4;
	CHECK_EQ_INT(query_sample_tree(&t, &f, &tree, &e), 0);
	CHECK(tree.samples == 2 && tree.nodes[0].value == 2);
	query_tree_free(&tree);
	trace_free(&t);
}

/* Rows equal in their statistics (exact: the values are integers) and in
 * the key fields of `by`; with `all_keys`, in every key field, including
 * those taken from whichever event of the group was read first. */
static int same_rows_by(const struct query_result *a, const struct query_result *b,
			enum query_by by, bool all_keys)
{
	size_t i;

	if (a->nrows != b->nrows || a->ngroups != b->ngroups || a->count != b->count ||
	    a->total != b->total)
		return 0;
	for (i = 0; i < a->nrows; i++) {
		const struct query_row *x = &a->rows[i], *y = &b->rows[i];

		if (((all_keys || by == QUERY_BY_NAME) && x->name != y->name) ||
		    ((all_keys || by == QUERY_BY_CAT) && x->cat != y->cat) ||
		    ((all_keys || by == QUERY_BY_THREAD) && (x->pid != y->pid ||
							     x->tid != y->tid)) ||
		    x->count != y->count || x->total != y->total || x->min != y->min ||
		    x->max != y->max || x->avg != y->avg || x->med != y->med ||
		    x->std != y->std || x->dur != y->dur || x->first_ts != y->first_ts)
			return 0;
	}
	return 1;
}

/* Three threads of 400 ranges ("r0".."r59", half with a "bytes"
 * argument), each holding an operator ("c0".."c29"), some overlapping. */
static void build_random_trace(struct trace *t)
{
	char name[32];
	int tid, i;

	CHECK(trace_init(t) == 0);
	srand(11);
	for (tid = 1; tid <= 3; tid++) {
		int64_t ts = 0;

		for (i = 0; i < 400; i++) {
			struct trace_event ev = { 0 };
			int64_t d = rand() % 90 + 1;

			snprintf(name, sizeof name, "r%d", rand() % 60);
			ev.ts = ts;
			ev.dur = d;
			ev.pid = 1;
			ev.tid = tid;
			ev.name = trace_intern(t, name, strlen(name));
			ev.cat = TRACE_CAT_USER_ANNOTATION;
			ev.ph = TRACE_PH_COMPLETE;
			CHECK(trace_add_event(t, &ev) != NULL);
			if (i % 2)
				CHECK(trace_arg_int(t, "bytes", rand() % 1000) == 0);
			snprintf(name, sizeof name, "c%d", rand() % 30);
			ev.ts = ts + d / 3;
			ev.dur = d / 2;
			ev.name = trace_intern(t, name, strlen(name));
			ev.cat = TRACE_CAT_CPU_OP;
			CHECK(trace_add_event(t, &ev) != NULL);
			ts += d - (i % 7 == 0 ? d / 4 : 0); /* some overlap */
		}
	}
}

/*
 * More names than one pass groups (max_groups 8 for the 65,536 of a real
 * window): by name with a limit, the names are grouped in parts, one pass
 * each (without a limit, or sorted by the median, in one pass through a
 * map of the names kept), and the answer is the one-pass answer: the same
 * rows, statistics, totals and group count, with self times, arguments
 * and time ranges.
 */
static void test_aggregate_in_parts(void)
{
	static const enum query_sort sorts[] = { QUERY_SORT_TOTAL, QUERY_SORT_COUNT,
						 QUERY_SORT_AVG, QUERY_SORT_MIN,
						 QUERY_SORT_MAX, QUERY_SORT_KEY,
						 QUERY_SORT_MED };
	static const size_t limits[] = { 1, 5, 1000, 0 };
	struct trace t;
	struct query_agg_opts o;
	struct query_result one, parts;
	struct err e;
	int mode;
	size_t s, l;

	build_random_trace(&t);
	CHECK(t.names.n > 80);
	for (mode = 0; mode < 4; mode++)
		for (s = 0; s < sizeof sorts / sizeof sorts[0]; s++)
			for (l = 0; l < sizeof limits / sizeof limits[0]; l++) {
				memset(&o, 0, sizeof o);
				o.by = QUERY_BY_NAME;
				o.sort = sorts[s];
				o.limit = limits[l];
				o.self = mode == 1;
				o.sum_arg = mode == 2 ? "bytes" : NULL;
				if (mode == 3) {
					o.filter.has_range = true;
					o.filter.from = 500;
					o.filter.to = 9000;
					o.filter.cats = 1u << TRACE_CAT_USER_ANNOTATION;
				}
				CHECK_EQ_INT(query_aggregate(&t, &o, &one, &e), 0);
				CHECK_EQ_INT(query_aggregate_max(&t, &o, 8, &parts, &e), 0);
				CHECK(one.nrows > 0 && one.ngroups > 8);
				if (!same_rows_by(&one, &parts, QUERY_BY_NAME, true))
					fprintf(stderr, "  in parts: mode %d sort %d limit %zu differ\n",
						mode, (int)sorts[s], limits[l]);
				CHECK(same_rows_by(&one, &parts, QUERY_BY_NAME, true));
				query_result_free(&one);
				query_result_free(&parts);
			}
	trace_free(&t);
}

/*
 * A trace in nesting order (trace_sort) is swept as it lies, with no
 * order of its events kept beside it: every aggregate, by name, thread or
 * category, with self times (of every event, or of the ranges alone: the
 * operators they hold then do not nest), arguments or time ranges, is the
 * one of the same events in another order.
 */
static void test_aggregate_nested(void)
{
	static const enum query_sort sorts[] = { QUERY_SORT_TOTAL, QUERY_SORT_MED,
						 QUERY_SORT_MIN, QUERY_SORT_KEY };
	static const enum query_by bys[] = { QUERY_BY_NAME, QUERY_BY_THREAD,
					     QUERY_BY_CAT };
	static const size_t limits[] = { 1, 5, 0 };
	struct trace u, v;
	struct query_agg_opts o;
	struct query_result ru, rv;
	struct err e;
	size_t i, s, l, b, ordered = 1;
	int mode;

	build_random_trace(&u);
	build_random_trace(&v);
	/* the same events, in the same shuffled order (arguments follow
	 * their events: they are referenced by index) */
	srand(7);
	for (i = u.nev; i > 1; i--) {
		size_t j = (size_t)rand() % i;
		struct trace_event x = u.ev[i - 1];

		u.ev[i - 1] = u.ev[j];
		u.ev[j] = x;
		x = v.ev[i - 1];
		v.ev[i - 1] = v.ev[j];
		v.ev[j] = x;
	}
	CHECK(!u.nested && !v.nested);
	trace_sort(&v);
	CHECK(v.nested);
	for (i = 1; i < v.nev; i++)
		ordered &= trace_event_cmp(&v.ev[i - 1], &v.ev[i]) <= 0;
	CHECK(ordered);
	for (mode = 0; mode < 5; mode++)
		for (b = 0; b < sizeof bys / sizeof bys[0]; b++)
			for (s = 0; s < sizeof sorts / sizeof sorts[0]; s++)
				for (l = 0; l < sizeof limits / sizeof limits[0]; l++) {
					memset(&o, 0, sizeof o);
					o.by = bys[b];
					o.sort = sorts[s];
					o.limit = limits[l];
					o.self = mode == 1 || mode == 4;
					o.sum_arg = mode == 2 ? "bytes" : NULL;
					if (mode == 3) {
						o.filter.has_range = true;
						o.filter.from = 500;
						o.filter.to = 9000;
					}
					if (mode == 4) /* self times of the ranges alone */
						o.filter.cats = 1u << TRACE_CAT_USER_ANNOTATION;
					CHECK_EQ_INT(query_aggregate(&u, &o, &ru, &e), 0);
					CHECK_EQ_INT(query_aggregate(&v, &o, &rv, &e), 0);
					CHECK(ru.nrows > 0);
					if (!same_rows_by(&ru, &rv, bys[b], false))
						fprintf(stderr, "  nested: mode %d by %d sort %d "
							"limit %zu differ\n", mode, (int)bys[b],
							(int)sorts[s], limits[l]);
					CHECK(same_rows_by(&ru, &rv, bys[b], false));
					query_result_free(&ru);
					query_result_free(&rv);
				}
	trace_free(&u);
	trace_free(&v);
}

int main(void)
{
	test_aggregate();
	test_aggregate_in_parts();
	test_aggregate_nested();
	test_steps_and_phases();
	test_phase_summary();
	test_phase_names();
	test_busy_and_during();
	test_during_many_names();
	test_sample_tree();
	return check_done();
}

/*
 * query — questions asked of a drained trace: filtered aggregation, step
 * phases, GPU busy/idle time, what a thread was doing during given time
 * intervals, and the CPU sample tree.
 *
 * These are the C halves of the Lua trace object (src/policy/trace_lua.c)
 * and of the built-in reports: one pass (or a sort) over the events, so a
 * report over millions of events stays within its time budget.
 *
 * Conventions. Times are ns (clock_now_ns() values). An event "is in" a
 * step when it starts inside the step's span [ts, ts + dur). Intervals are
 * half-open [ts, ts + dur). No function modifies the trace; results are
 * malloc'd and freed with the matching *_free(). Any thread, one result at
 * a time per caller. On allocation failure a function returns -1 with *e
 * set and its result empty.
 */
#ifndef PROFHOST_QUERY_H
#define PROFHOST_QUERY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/err.h"
#include "trace.h"

/* The step phases, in the order reports show them. Phase ranges are
 * user_annotation ranges with these exact names inside a step, on the
 * step's thread; "other" is the rest of the step. A range named as torch
 * names a DataLoader fetch, "enumerate(DataLoader)#<iterator>.__next__"
 * (the name TensorBoard's plugin counts as DataLoader time), is "data"
 * too: the Python bridge names its data phase so. */
enum query_phase {
	QUERY_PHASE_DATA = 0,
	QUERY_PHASE_FORWARD,
	QUERY_PHASE_BACKWARD,
	QUERY_PHASE_OPTIMIZER,
	QUERY_PHASE_OTHER,
	QUERY_PHASE_COUNT
};

/* "data", "forward", ...; NULL outside the enum. */
const char *query_phase_name(enum query_phase p);

/* The phase named `name` (len bytes), or QUERY_PHASE_COUNT when none (the
 * one definition of the phase names: the Python bridge uses it too). */
enum query_phase query_phase_of(const char *name, size_t len);

/* A half-open time interval. */
struct query_interval {
	int64_t ts, dur;
};

/* Which events a query looks at. A zeroed filter keeps everything. */
struct query_filter {
	uint32_t cats;             /* bit (1u << enum trace_cat) per category
				      kept; 0 = all */
	const uint8_t *name_ok;    /* a bit per strtab id, set to keep the
				      name (name_ok[id / 8] >> id % 8 & 1);
				      NULL = every name; ids past name_len
				      are dropped */
	uint32_t name_len;
	bool has_tid;
	int32_t tid;               /* with has_tid: only this tid */
	bool has_pid;
	int32_t pid;
	bool has_range;            /* only events overlapping [from, to),
				      durations clipped to it */
	int64_t from, to;
	const struct query_interval *within; /* sorted, disjoint: only events
				      overlapping one, durations clipped to
				      them (instants: ts inside one) */
	size_t nwithin;
};

/* Whether `ev` passes the filter; *dur gets its duration clipped to the
 * filter's range and intervals. */
bool query_match(const struct trace *t, const struct query_filter *f,
		 const struct trace_event *ev, int64_t *dur);

/* The index in t->steps of the step containing time `ts` (steps of any
 * thread), or -1. `order` is from query_step_order(); NULL searches
 * linearly. */
long query_step_at(const struct trace *t, const size_t *order, int64_t ts);

/* Indices of t->steps sorted by start time (malloc'd, t->nsteps entries),
 * for query_step_at. NULL when there are no steps or no memory. */
size_t *query_step_order(const struct trace *t);

/* ------------------------------------------------------------ aggregate */

enum query_by {
	QUERY_BY_NAME = 0,  /* key: the event name */
	QUERY_BY_CAT,       /* key: the category */
	QUERY_BY_THREAD,    /* key: (pid, tid) */
	QUERY_BY_STREAM,    /* key: (pid, tid): device and stream for GPU
			       events */
	QUERY_BY_STEP       /* key: the step the event starts in (events
			       outside every step are left out) */
};

enum query_sort {
	QUERY_SORT_TOTAL = 0, /* all descending except KEY */
	QUERY_SORT_COUNT,
	QUERY_SORT_AVG,
	QUERY_SORT_MIN,
	QUERY_SORT_MAX,
	QUERY_SORT_MED,
	QUERY_SORT_STD,
	QUERY_SORT_KEY        /* ascending: name, or number */
};

struct query_agg_opts {
	struct query_filter filter;
	enum query_by by;
	const char *sum_arg;   /* NULL: sum durations; else the numeric
				  argument of that name (events without it
				  are left out) */
	bool self;             /* sum self time: the duration minus the time
				  covered by nested kept events on the same
				  (pid, tid) (not with sum_arg) */
	enum query_sort sort;
	size_t limit;          /* rows returned; 0 = all */
};

/* One group. Statistics are over the group's values (durations in ns, or
 * the argument's values). */
struct query_row {
	uint32_t name;       /* strtab id: BY_NAME */
	uint8_t cat;         /* BY_CAT */
	int32_t pid, tid;    /* BY_THREAD, BY_STREAM */
	uint64_t step;       /* BY_STEP: the step number */
	uint64_t count;
	double total, min, max, avg, med, std; /* std: sample standard
				  deviation (n - 1), 0 for one value */
	int64_t dur;         /* total (clipped) duration of the events */
	int64_t first_ts;    /* earliest start */
};

struct query_result {
	struct query_row *rows;
	size_t nrows;          /* rows returned (after limit) */
	size_t ngroups;        /* groups before the limit */
	double total;          /* sum over every group: the 100 % */
	uint64_t count;        /* events counted */
};

/* Groups by name that one pass holds at most: see query_aggregate. */
#define QUERY_GROUPS_MAX 131072

/*
 * Groups the filtered events and computes each group's statistics,
 * sorted by `sort` (ties: earliest first_ts, then key). Returns 0 or -1.
 *
 * Memory: no value is kept per event. With `self`, the open events of
 * one thread; the kept events' positions (4 bytes each) in parts when
 * they are 1M at most, and with `self` in a trace not in nesting order
 * (trace_sort); the
 * groups of one part (by name with a `limit`, not sorted by "med" or
 * "std", the names are split by strtab id into parts of fewer than
 * `max_groups`, one pass over the events each; 40 bytes a group); twice
 * `limit` groups; and the groups returned with their values (8 bytes an
 * event of those groups: sorting by "med" or "std", or no `limit`,
 * returns every group).
 */
int query_aggregate(const struct trace *t, const struct query_agg_opts *o,
		    struct query_result *out, struct err *e);

/* query_aggregate with `max_groups` (> 0) for QUERY_GROUPS_MAX (tests). */
int query_aggregate_max(const struct trace *t, const struct query_agg_opts *o,
			size_t max_groups, struct query_result *out, struct err *e);

void query_result_free(struct query_result *r);

/* ------------------------------------------------------------ steps */

/* One step with its phase breakdown (ns). */
struct query_step {
	uint64_t step;
	int64_t ts, dur;
	int32_t tid;
	bool partial;
	int64_t phase[QUERY_PHASE_COUNT]; /* data .. optimizer: time in those
				  ranges (overlaps counted once); other:
				  the rest of the step */
	int64_t phase_start[QUERY_PHASE_COUNT]; /* data .. optimizer: when the
				  first range of the phase starts in the
				  step (bit p of phase_mask set); other:
				  unused */
	int64_t phase_end[QUERY_PHASE_COUNT]; /* when the phase's last range
				  in the step ends, cut at the step's end
				  (bit p of phase_mask set): the time from
				  one phase's end to the next one's start
				  is `other` */
	unsigned phase_mask;
	bool has_phases;     /* some phase range was found in the step */
};

/* The steps of `t` in time order with their phases. *out is malloc'd
 * (NULL when there are no steps). Returns 0 or -1. */
int query_steps(const struct trace *t, struct query_step **out, size_t *n,
		struct err *e);

/*
 * The one definition of each phase's share, which every table showing
 * phases (summary.txt, report.txt, trace:phases(), the run report) uses.
 * The steps counted are the complete steps that have phases; when no
 * complete step has any, the steps with phases (cut short by the process
 * ending). A phase's share is its time in those steps over their time:
 * phases never overlap and `other` is the rest, so the shares add up to
 * 100 % and none is above it.
 */
struct query_phase_sum {
	size_t steps;                     /* steps counted */
	bool partial;                     /* ... they are partial steps */
	int64_t total;                    /* their time, ns: the 100 % */
	int64_t phase[QUERY_PHASE_COUNT]; /* each phase's time in them */
};

/* Whether step `s` counts, for a summary whose `partial` is as given. */
bool query_phase_counts(const struct query_step *s, bool partial);

/* Sums the phases of steps s[0..n) (from query_steps). */
void query_phase_summary(const struct query_step *s, size_t n,
			 struct query_phase_sum *out);

/* Phase p's share of the counted steps' time (0 when there are none). */
double query_phase_share(const struct query_phase_sum *sum, enum query_phase p);

/* ------------------------------------------------------------ busy / idle */

#define QUERY_GPU_CATS ((1u << TRACE_CAT_KERNEL) | (1u << TRACE_CAT_GPU_MEMCPY) | \
			(1u << TRACE_CAT_GPU_MEMSET))

struct query_busy_opts {
	uint32_t cats;        /* what counts as busy; 0 = QUERY_GPU_CATS */
	bool has_pid;         /* only events of this pid (one device) */
	int32_t pid;
	size_t buckets;       /* utilization buckets over [start, end); 0:
				 none */
	size_t max_gaps;      /* largest idle gaps returned */
	bool whole_window;    /* reference = the window, even with steps */
};

struct query_busy {
	int64_t start, end;   /* the reference's outer edges */
	int64_t span;         /* reference time: the union of the steps
				 (or the window) */
	int64_t busy;         /* busy time inside the reference */
	int64_t idle;         /* span - busy */
	uint64_t events;      /* busy events counted */
	struct query_interval *idle_iv; /* every idle interval, in time order */
	size_t nidle;
	struct query_interval *gaps;    /* the largest idle intervals, largest
				 first (ties: earlier first) */
	size_t ngaps;
	double *bucket;       /* busy fraction of each bucket, 0..1 */
	size_t nbuckets;
	int64_t bucket_ns;
};

/* Computes busy and idle time. Returns 0 or -1. */
int query_busy(const struct trace *t, const struct query_busy_opts *o,
	       struct query_busy *out, struct err *e);

void query_busy_free(struct query_busy *b);

/* ------------------------------------------------------------ during */

/* Time of a thread inside intervals, by what it was doing. */
/* query_during's rows name at most this many ranges: the names a thread
 * met past the first QUERY_DURING_NAMES are summed in one row,
 * QUERY_NAME_OTHER (a window of a name per range). */
#define QUERY_DURING_NAMES 16384
#define QUERY_NAME_OTHER (STRTAB_NONE - 1)

struct query_during {
	struct query_row *by_range;  /* innermost open range (name; "(no
				  range)" as STRTAB_NONE, "(other names)"
				  as QUERY_NAME_OTHER), total = ns */
	size_t nrange;
	int64_t phase[QUERY_PHASE_COUNT + 1]; /* by enclosing phase range;
				  [QUERY_PHASE_COUNT]: in no phase */
	int64_t total;        /* time of the intervals */
};

/*
 * Walks the CPU ranges (user_annotation, cpu_op, cuda_runtime,
 * cuda_driver, cuda_sync; not ProfilerStep spans) of thread (pid, tid) and
 * charges the time of `iv` (sorted, disjoint) to the innermost range open
 * at each instant (the one that started last). Rows are sorted by time,
 * largest first. Memory: the thread's open ranges and at most
 * QUERY_DURING_NAMES names' sums (a trace not in nesting order: 4 bytes
 * an event of the thread besides). Returns 0 or -1.
 */
int query_during(const struct trace *t, int32_t pid, int32_t tid,
		 const struct query_interval *iv, size_t niv,
		 struct query_during *out, struct err *e);

void query_during_free(struct query_during *d);

/* ------------------------------------------------------------ samples */

/* One node of the sample tree. Node 0 is the root ("all"). */
struct query_node {
	const char *name;     /* points into the trace's strings */
	uint32_t len;
	uint32_t parent;      /* node index; root: UINT32_MAX */
	uint32_t first_child, next_sibling; /* UINT32_MAX: none */
	uint32_t depth;
	double value;         /* samples (weights) at or below */
	double self;          /* samples ending here */
};

struct query_tree {
	struct query_node *nodes;
	size_t n;
	uint64_t samples;     /* samples counted */
	bool truncated;       /* node limit reached: deeper frames folded
				 into their parent's self */
};

/* Node cap of a sample tree. */
#define QUERY_TREE_MAX 200000

/*
 * Builds the tree of the sample events (cat cpu_sample) that pass `f` (its
 * cats are ignored). A sample's stack is its string argument "stack"
 * (frames outermost first, separated by ';'), else its name as the only
 * frame; its weight is its numeric argument "weight", else 1. Children are
 * in first-seen order. Returns 0 or -1.
 */
int query_sample_tree(const struct trace *t, const struct query_filter *f,
		      struct query_tree *out, struct err *e);

void query_tree_free(struct query_tree *tree);

/* The first argument of `ev` named `key` (of any type), or NULL. The
 * pointer is into t->args, valid while the trace is not changed. */
const struct trace_arg *query_arg(const struct trace *t, const struct trace_event *ev,
				  const char *key);

/* The numeric value of argument `key` of `ev` into *v. Returns true when
 * the event has it (int, uint or double). */
bool query_arg_num(const struct trace *t, const struct trace_event *ev,
		   const char *key, double *v);

/* The string argument `key` of `ev`, or NULL (with *len set when found). */
const char *query_arg_str(const struct trace *t, const struct trace_event *ev,
			  const char *key, size_t *len);

#endif

/*
 * key_averages — the operator table, like torch's key_averages().table().
 *
 * Rows come from the CPU-side complete events of a trace (categories
 * user_annotation, cpu_op, cuda_runtime, cuda_driver), grouped by name
 * ("ProfilerStep#N" spans all fall under "ProfilerStep*") or by the
 * `domain` argument ("(none)" when absent); with torch's
 * group_by_input_shape also by the events' input shapes (their
 * "Input Dims" argument; "[]" when they have none), and with torch's
 * group_by_stack_n = N also by the first N entries of their Python call
 * stack (their "Call stack" argument: entries innermost first, separated
 * by ';', as Kineto writes it; none when they have none). The table then
 * shows torch's "Input Shapes" and "Source Location" columns.
 *
 * Self time. On each (pid, tid), at every instant the innermost open event
 * (the one that started last) owns the time; an event's self time is the
 * time it owned. For properly nested events this is its duration minus the
 * durations of its direct children; a child that overhangs its parent's end
 * takes over from the parent at its start, zero-length events own nothing,
 * and no self time is ever negative. Total time is the duration.
 *
 * GPU time. A kernel, copy or memset belongs to the cuda_runtime /
 * cuda_driver call with its correlation id (the event's `id`). That GPU
 * time is the Self CUDA of the innermost range holding the call (ProfilerStep
 * spans aside), or of the call itself when no range holds it, and counts in
 * the CUDA total of the call and of every event holding it.
 *
 * Memory (prof.capture{profile_memory}: torch's "[memory]" instants, cat
 * cpu_instant_event). An allocation or free belongs to the innermost
 * counted event open on its thread at its time (one that ends exactly
 * then is closed: TensorBoard's rule): its bytes count in that event's
 * Self CPU Mem (Self CUDA Mem on a GPU) and in the CPU Mem of it and of
 * every event holding it, torch's self_cpu_memory_usage and
 * cpu_memory_usage (torch 2.x's Kineto path counts any thread's within an
 * operator's span; on one thread the two agree). Those no event holds are
 * the row "[memory]", as in torch's table (grouped by name, with no input
 * shapes and no call stack; by domain they are in no row). A trace with
 * such events gets the columns CPU Mem and Self CPU Mem, and CUDA Mem and
 * Self CUDA Mem when a row has Self CUDA Mem above 0 (torch's rules), in
 * torch's order: after the CUDA times, before "# of Calls".
 *
 * key_averages_build() computes the table once; the writer, the summary and
 * the Lua reports all read it. No shared state: any thread, one table each.
 */
#ifndef PROFHOST_KEY_AVERAGES_H
#define PROFHOST_KEY_AVERAGES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../events/trace.h"
#include "../util/err.h"

/* Rows a table holds at most (88 bytes each, and 32 more, struct
 * key_avg_mem, when the trace has "[memory]" events): a window with more distinct
 * keys keeps the first KEY_AVG_ROWS_MAX in the sort order and folds the
 * others into one row, "(N other names)" (see key_averages_build). Also
 * the keys one pass over the events groups: a window of N keys takes
 * N / KEY_AVG_ROWS_MAX passes (rounded up to a power of two). */
#define KEY_AVG_ROWS_MAX 131072

/* torch's max_name_column_width: the name column is at most this wide. */
#define KEY_AVG_NAME_MAX 55

enum key_avg_group {
	KEY_AVG_BY_NAME = 0,
	KEY_AVG_BY_DOMAIN
};

/* The most call stack entries a row may be keyed by (group_by_stack_n). */
#define KEY_AVG_STACK_N_MAX 128

/* How rows are keyed: torch's key_averages(group_by_input_shape,
 * group_by_stack_n) beside the name or domain. */
struct key_avg_opts {
	enum key_avg_group group;
	bool by_input_shape;  /* also by the events' input shapes */
	uint32_t stack_n;     /* also by the first stack_n entries of their
				 call stack (0: not; at most
				 KEY_AVG_STACK_N_MAX) */
};

/* torch's sort_by keys; every sort is descending. */
enum key_avg_sort {
	KEY_AVG_SORT_SELF_CPU_TIME_TOTAL = 0, /* "self_cpu_time_total" */
	KEY_AVG_SORT_CPU_TIME_TOTAL,          /* "cpu_time_total" */
	KEY_AVG_SORT_CPU_TIME,                /* "cpu_time" (average) */
	KEY_AVG_SORT_COUNT,                   /* "count" */
	KEY_AVG_SORT_SELF_CUDA_TIME_TOTAL,    /* "self_cuda_time_total" */
	KEY_AVG_SORT_CUDA_TIME_TOTAL,         /* "cuda_time_total" */
	KEY_AVG_SORT_CUDA_TIME,               /* "cuda_time" (average) */
	KEY_AVG_SORT_CPU_MEM,                 /* "cpu_memory_usage" */
	KEY_AVG_SORT_SELF_CPU_MEM,            /* "self_cpu_memory_usage" */
	KEY_AVG_SORT_CUDA_MEM,                /* "cuda_memory_usage" */
	KEY_AVG_SORT_SELF_CUDA_MEM            /* "self_cuda_memory_usage" */
};

/* A row's memory (see "Memory" above), bytes: [KEY_AVG_CPU] the CPU's,
 * [KEY_AVG_CUDA] the GPUs'. */
enum { KEY_AVG_CPU = 0, KEY_AVG_CUDA = 1 };

struct key_avg_mem {
	int64_t mem[2];         /* CPU Mem, CUDA Mem: torch's
				   cpu_memory_usage, cuda_memory_usage */
	int64_t self_mem[2];    /* Self CPU Mem, Self CUDA Mem */
};

/* One row: the events of one key. Times in ns. Its memory is apart, in
 * the table's row_mem (a trace without "[memory]" events, most, costs
 * nothing for it). */
struct key_avg_row {
	const char *key;        /* points into the trace's strings or a
				   literal: valid while the trace lives */
	uint64_t count;
	int64_t self_cpu_ns;    /* sum of self times */
	int64_t cpu_total_ns;   /* sum of durations */
	int64_t self_cuda_ns;   /* GPU time the row's own events launched
				   (see GPU time above) */
	int64_t cuda_total_ns;  /* ... including the events nested in them */
	int64_t first_ts;       /* earliest start: breaks sort ties */
	uint64_t flops;         /* sum of the events' "flops" args (torch
				   operators with with_flops) */
	const char *shapes;     /* by input shape: the events' "Input Dims"
				   as the trace holds them (shapes_len bytes;
				   "[]" when they have none); else NULL */
	const char *stack;      /* by stack: the first stack_n entries of the
				   events' "Call stack" (stack_len bytes,
				   ';'-separated, innermost first; len 0:
				   none); else NULL. Both point into the
				   trace's strings or a literal. */
	uint32_t shapes_len, stack_len;
};

struct key_avg_table {
	struct key_avg_row *rows; /* sorted; malloc'd */
	size_t nrows;
	struct key_avg_mem *row_mem; /* row_mem[i]: the memory of rows[i];
					malloc'd when `memory`, else NULL
					(key_averages_row_mem reads it) */
	enum key_avg_group group;
	bool by_input_shape;      /* the keys' options (struct key_avg_opts) */
	uint32_t stack_n;
	uint64_t nfolded;         /* keys beyond the rows the table holds */
	struct key_avg_row folded; /* their sums (key NULL; first_ts
				      INT64_MAX when none) */
	struct key_avg_mem folded_mem; /* ... and of their memory */
	size_t key_cols;          /* columns of the widest key, the folded
				     ones included (0 when none folded) */
	size_t shapes_cols;       /* ... of the widest input shapes, and of
				     the widest stack entry, of the folded
				     rows (0 when none folded) */
	size_t src_cols;
	int64_t self_cpu_sum_ns;  /* sum of self CPU over all rows: the 100 % */
	int64_t self_cuda_sum_ns; /* sum of self CUDA over all rows */
	uint64_t min_flops;       /* the smallest nonzero row FLOPs, 0 = none:
				     the table then shows torch's "Total
				     <prefix>FLOPs" column, scaled by it */
	bool memory;              /* the trace has "[memory]" events: the
				     table shows the memory columns */
};

/* Parses a torch sort key (torch 2.4's device_* names are taken for the
 * cuda_* ones) / a group name. Return 0, or -1 with *e listing
 * the accepted values. */
int key_averages_parse_sort(const char *s, enum key_avg_sort *out, struct err *e);
int key_averages_parse_group(const char *s, enum key_avg_group *out, struct err *e);

/*
 * Builds the table of `t` (which is not modified and need not be sorted),
 * sorted by `sort` descending, ties by earliest start then key. Returns 0,
 * or -1 with *e set (out of memory, or a bad enum value); *out is empty
 * then. Free with key_averages_free().
 *
 * Memory: the open events of one thread, and at most 3 x KEY_AVG_ROWS_MAX
 * rows (with their map and, with "[memory]" events, their row_mem),
 * however many names the window has; in a trace not in nesting order
 * (trace_sort) 4 bytes more a counted event, their order by thread and
 * time. With more distinct keys than KEY_AVG_ROWS_MAX, the keys are split
 * by their string id into parts of at most KEY_AVG_ROWS_MAX, one pass over
 * the events each (self times are recomputed), and the table keeps the
 * first KEY_AVG_ROWS_MAX rows in the sort order; the others are summed in
 * tab->folded (and tab->folded_mem). Every kept row and every total is
 * exact.
 */
int key_averages_build(const struct trace *t, enum key_avg_group group,
		       enum key_avg_sort sort, struct key_avg_table *out,
		       struct err *e);

/* key_averages_build for a caller that shows at most `keep` rows (0: all):
 * in a window of more than KEY_AVG_ROWS_MAX keys, the table then holds the
 * first `keep` rows, the others folded (and 2 x `keep` + KEY_AVG_ROWS_MAX
 * rows while it is built); otherwise every row, as key_averages_build. */
int key_averages_build_top(const struct trace *t, enum key_avg_group group,
			   enum key_avg_sort sort, size_t keep,
			   struct key_avg_table *out, struct err *e);

/* key_averages_build with `max_rows` for KEY_AVG_ROWS_MAX and `keep`
 * (0 < keep <= max_rows) rows kept (tests). */
int key_averages_build_max(const struct trace *t, enum key_avg_group group,
			   enum key_avg_sort sort, size_t max_rows, size_t keep,
			   struct key_avg_table *out, struct err *e);

/*
 * key_averages_build_top with rows keyed as `o` says (by input shapes, by
 * call stack). Grouping by them, a window's keys are not known before its
 * rows are: a pass whose part of the keys outgrows KEY_AVG_ROWS_MAX rows
 * is done again with the keys split in twice as many parts (by a hash of
 * the whole key), so the memory bound above holds.
 */
int key_averages_build_with(const struct trace *t, const struct key_avg_opts *o,
			    enum key_avg_sort sort, size_t keep,
			    struct key_avg_table *out, struct err *e);

/* key_averages_build_with with `max_rows` for KEY_AVG_ROWS_MAX and
 * `keep` (0 < keep <= max_rows) rows kept (tests). */
int key_averages_build_with_max(const struct trace *t, const struct key_avg_opts *o,
				enum key_avg_sort sort, size_t max_rows, size_t keep,
				struct key_avg_table *out, struct err *e);

/* What key_averages_each hands each event: its index in t->ev, its self
 * CPU time and its self CUDA time (ns), as the table sums them. */
typedef void (*key_avg_visit_fn)(void *ctx, size_t ev, int64_t self_cpu_ns,
				 int64_t self_cuda_ns);

/* Calls `fn` for each event the table counts, thread by thread, each as
 * it ends (an event after those nested in it). One sweep, no rows: its
 * memory is the open events of one thread (and 4 bytes an event in a
 * trace not in nesting order). Returns 0, or -1 with *e set (out of
 * memory). */
int key_averages_each(const struct trace *t, key_avg_visit_fn fn, void *ctx,
		      struct err *e);

/* The number of ';'-separated entries of a "Call stack" argument, and the
 * bytes its first `n` take (without the ';' after them). */
size_t key_averages_stack_prefix(const char *stack, size_t len, uint32_t n,
				 size_t *entries);

/* Re-sorts an existing table (the folded row stays apart). */
void key_averages_sort(struct key_avg_table *tab, enum key_avg_sort sort);

/* Frees the rows; leaves the table empty. NULL-safe. */
void key_averages_free(struct key_avg_table *tab);

/* True when any row has self CUDA time: the table then shows the CUDA
 * columns (torch's rule). */
bool key_averages_has_cuda(const struct key_avg_table *tab);

/* The memory of tab->rows[i] (i < tab->nrows): all 0 in a table without
 * memory (no "[memory]" events). */
struct key_avg_mem key_averages_row_mem(const struct key_avg_table *tab, size_t i);

/* True when any row has Self CUDA Mem above 0: the table then shows the
 * CUDA memory columns (torch's rule). */
bool key_averages_has_cuda_mem(const struct key_avg_table *tab);

/* torch's _format_memory: "0 b", "-576.00 Kb", "1.50 Mb", "2.00 Gb"
 * (1024-based). Returns buf. */
char *key_averages_format_memory(int64_t bytes, char buf[32]);

/*
 * Renders the table in torch's layout into a malloc'd string (caller frees):
 * dashed lines, a header, at most `row_limit` rows (0 = all) and the
 * "Self CPU time total: ..." footer. Grouped by input shape, an "Input
 * Shapes" column (as Python prints the list: "[[8, 16], []]"), shown when
 * some row has a shape; by stack, a "Source Location" column: a row's
 * first entry beside it, its next ones (up to 5 in all) on lines of their
 * own below it, and an empty line after each row, as torch prints it. When every row is asked for
 * (row_limit 0) and the table folded keys, their sums follow as one last
 * row named "(N other names)" ("domains" by domain). An empty table renders as "". Returns
 * NULL on allocation failure.
 */
char *key_averages_format(const struct key_avg_table *tab, size_t row_limit);

/* Writes key_averages_format()'s text to `path` atomically. 0, or -1 with
 * *e set. */
int key_averages_write(const struct key_avg_table *tab, size_t row_limit,
		       const char *path, struct err *e);

/* A row's input shapes as the table shows them, uncut (Python's
 * str(input_shapes): "[[8, 16], []]"), malloc'd; "" when the row has none.
 * NULL when out of memory. */
char *key_averages_row_shapes(const struct key_avg_row *r);

/* torch's _format_time: "%.3fus" under 1 ms, "%.3fms" under 1 s, else
 * "%.3fs" (of microseconds ns / 1000). Writes into buf[32]; returns buf. */
char *key_averages_format_time(int64_t ns, char buf[32]);

/* torch's _format_time_share: "%.2f%%" of part / total, "NaN" when total
 * is 0. Writes into buf[32]; returns buf. */
char *key_averages_format_share(int64_t part_ns, int64_t total_ns, char buf[32]);

#endif

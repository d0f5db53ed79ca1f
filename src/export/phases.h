/*
 * phases — where each captured step's time went: the per-step breakdown
 * into data loading, forward, backward, optimizer and other.
 *
 * Input: the window's ProfilerStep#N spans and the `phase:<name>` ranges the
 * Python bridge writes (src/capture/python.c). A phase belongs to the step
 * that contains its start on the same thread; "other" is the step's time
 * not covered by any phase. Pure functions over a trace; any one thread.
 */
#ifndef PROFHOST_PHASES_H
#define PROFHOST_PHASES_H

#include <stddef.h>
#include <stdint.h>

#include "../events/trace.h"
#include "../util/err.h"

#define PHASES_N 4

/* "data", "forward", "backward", "optimizer": the column names; the ranges
 * are called "phase:<name>". */
extern const char *const phases_names[PHASES_N];

/* One captured step. Times in ns. */
struct phases_row {
	uint64_t step;
	int64_t total;              /* the step's duration */
	int64_t phase[PHASES_N];    /* summed time of each phase */
	int64_t other;              /* total minus the phases (may be < 0 only
				       if phases overlap, which the bridge
				       never writes) */
	int partial;                /* cut short by process exit */
};

/*
 * Computes one row per step of `t` (in t->steps order) into *rows
 * (malloc'd, caller frees) and *n. Returns 1 when the window has phase
 * ranges, 0 when it has none (*rows = NULL, *n = 0), -1 with *e set when out
 * of memory.
 */
int phases_compute(const struct trace *t, struct phases_row **rows, size_t *n,
		   struct err *e);

/*
 * Renders the breakdown table (a row per step, at most `max_rows` of them
 * (0 = all) with a line saying how many were left out, then the median over
 * the complete steps and each column's share of their total) into a
 * malloc'd string in *out. Returns 0 (with *out = NULL when the window has
 * no phases), or -1 with *e set when out of memory.
 */
int phases_render(const struct trace *t, size_t max_rows, char **out,
		  struct err *e);

#endif

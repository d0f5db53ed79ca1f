/*
 * phases — the summary's "where does my step time go" table: each captured
 * step split into data loading, forward, backward, optimizer and other.
 *
 * The numbers are query_steps()'s (src/events/query.h): phase ranges are
 * user_annotation ranges named data, forward, backward, optimizer (the
 * Python bridge writes them; any program may) that start inside a step on
 * the step's thread; "other" is the rest of the step. Pure function over a
 * trace; any one thread.
 */
#ifndef PROFHOST_PHASES_H
#define PROFHOST_PHASES_H

#include <stddef.h>

#include "../events/trace.h"
#include "../common/err.h"

/*
 * Renders the table (a row per step, at most `max_rows` of them (0 = all)
 * with a line saying how many were left out, then the median over the
 * complete steps and each column's share of their total) into a malloc'd
 * string in *out. Returns 0 (with *out = NULL when no step has a phase), or
 * -1 with *e set when out of memory.
 */
int phases_render(const struct trace *t, size_t max_rows, char **out,
		  struct err *e);

#endif

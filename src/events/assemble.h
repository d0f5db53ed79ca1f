/*
 * assemble — turns one closed capture generation into a struct trace.
 *
 * Walks the generation's raw records (evbuf_drain), pairs range pushes with
 * pops per thread and starts with ends by id, turns marks into instants,
 * adds one ProfilerStep#N span per captured step, names the threads, and
 * fills the trace's counters. Ranges still open at the window's end are
 * clipped there and flagged; pops with no open range are counted.
 *
 * Host thread only.
 */
#ifndef PROFHOST_ASSEMBLE_H
#define PROFHOST_ASSEMBLE_H

#include <stddef.h>
#include <stdint.h>

#include "evbuf.h"
#include "trace.h"

/* The raw source: a drain function and the generation to drain. */
struct assemble_source {
	int (*drain)(uint64_t gen, evbuf_visit_fn fn, void *ctx,
		     struct evbuf_stats *stats);
	uint64_t gen;   /* 0: no records (the generation could not open) */
};

/*
 * Fills `t` (already trace_init'ed, meta set by the caller: pid, start_ts,
 * end_ts, ...) from the source and the window's steps. Returns 0, or -1
 * when memory ran out (t->oom; the trace holds what fit).
 */
int assemble_window(struct trace *t, const struct assemble_source *src,
		    const struct trace_step *steps, size_t nsteps);

#endif

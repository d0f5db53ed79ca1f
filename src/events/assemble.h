/*
 * assemble — turns one closed capture generation into a struct trace.
 *
 * Walks the generation's raw records (evbuf_drain), pairs range pushes with
 * pops per thread and domain and starts with ends by id, turns marks into
 * instants, adds one ProfilerStep#N span per captured step, names the
 * threads, and fills the trace's counters. Ranges still open at the
 * window's end are clipped there and flagged; pops and ends of ranges that
 * began before the window (EVBUF_A_EARLY) are clipped at its start and
 * flagged; other pops with no open range are counted. Ranges and marks of
 * a non-default NVTX domain get args "domain" (its name); a category gets
 * "category" (its name, else its number). The Python bridge's nn.Module
 * calls (EVBUF_PY_MODULE records; before them, starts flagged
 * EVBUF_A_PYTHON) are python_function events, with torch's args for them
 * (pymodrec.h).
 *
 * Host thread only.
 */
#ifndef PROFHOST_ASSEMBLE_H
#define PROFHOST_ASSEMBLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/evformat.h"
#include "trace.h"

/* The raw source: a drain function and the generation to drain. */
struct assemble_source {
	int (*drain)(uint64_t gen, evbuf_visit_fn fn, void *ctx,
		     struct evbuf_stats *stats);
	uint64_t gen;   /* 0: no records (the generation could not open) */
	/* Names of NVTX domains (id 0 is the default domain) and categories
	 * for the events' args; either may be NULL, and may return NULL for
	 * an unknown id. */
	const char *(*domain_name)(uint32_t id);
	const char *(*category_name)(uint32_t domain, uint32_t category);
	/* Several generations drained in order into one trace (a recorder
	 * dump), used instead of `gen` when ngens > 0. A range open at the
	 * end of one continues into the next: its replayed push there
	 * (EVBUF_A_EARLY) is the same range, its pop ends it. */
	const uint64_t *gens;
	size_t ngens;
	/* true: records before the trace's meta.start_ts are left out and
	 * ranges begun before it clipped there (flagged), as at a window's
	 * start */
	bool clip_start;
	/* 0, or what the trace may take (trace_bytes) of the records it is
	 * built from, plus ASSEMBLE_SLACK: a window's prof.capture{buffer_mb},
	 * a dump's prof.recorder{mb}. Records that would take the trace past
	 * it are left out, counted in counters.dropped_buffer and
	 * dropped_memory: the drain's newest chunks, cut as soon as what is
	 * left of the pool and the trace so far would not fit in it together,
	 * so their pages go back before the trace grows into their room
	 * (evbuf_stats.keep_bytes): the pool and the trace never hold more
	 * than this together.
	 * Ranges open at the cut end at the window's end (flagged), as when
	 * the pool fills. */
	size_t budget;
};

/* Room for the trace beyond assemble_source.budget: its threads, steps and
 * the first names a window's records cost before their events. */
#define ASSEMBLE_SLACK ((size_t)4 << 20)

/*
 * Fills `t` (already trace_init'ed, meta set by the caller: pid, start_ts,
 * end_ts, ...) from the source and the window's steps. Records stamped
 * after meta.end_ts (when set) are left out and ranges still open there
 * are cut at it, flagged: the window ends at end_ts even when other
 * threads recorded a little longer. Returns 0, or -1 when memory ran out
 * (t->oom; the trace holds what fit).
 */
int assemble_window(struct trace *t, const struct assemble_source *src,
		    const struct trace_step *steps, size_t nsteps);

/*
 * The program's own labels win over profhost's step phases: each step
 * phase the Python bridge timed itself (a start flagged EVBUF_A_PHASE,
 * listed in t->own_phases) that a user_annotation range of the program's
 * with the same name overlaps on the same thread (a record_function
 * label, an NVTX range, a prof_range_push: `forward` around the model
 * call) is taken out of the trace, so that phase is the program's range,
 * counted once (key_averages.txt, the step phases). assemble_window()
 * does it for the ranges it assembled; the host calls it again once the
 * capture sources added theirs (torch's profiler's labels). Events keep
 * their order; t->own_phases lists the phases that stay. Host thread.
 * Returns 0, or -1 when out of memory (the trace is left as it was).
 */
int assemble_phases_yield(struct trace *t);

#endif

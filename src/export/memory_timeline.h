/*
 * memory_timeline — GPU memory allocated over a window, per device, from
 * the trace's "[memory]" events (category gpu_memory: CUDA allocations and
 * frees from CUPTI's MEMORY2 records, with their running "Total Allocated").
 *
 * Two files with the same series: memory_timeline.json, and
 * memory_timeline.html, one self-contained page (inline SVG, no script, no
 * network) with a step chart per device and its peak marked and labelled.
 * Totals count what was allocated during the window: frees of blocks
 * allocated before it are listed but do not lower the total.
 * Any one thread at a time; no shared state.
 */
#ifndef PROFHOST_MEMORY_TIMELINE_H
#define PROFHOST_MEMORY_TIMELINE_H

#include <stddef.h>
#include <stdint.h>

#include "../events/trace.h"
#include "../util/err.h"
#include "outdir.h"

#define MEMORY_TIMELINE_DEVICES 16

struct memory_point {
	int64_t ts;      /* clock_now_ns */
	int64_t bytes;   /* allocated after this event */
};

struct memory_series {
	int32_t device;
	struct memory_point *p;   /* in time order; malloc'd */
	size_t n, cap;
	int64_t peak, peak_ts;
	uint64_t allocs, frees;
};

struct memory_timeline {
	int64_t start, end;       /* the window */
	struct memory_series dev[MEMORY_TIMELINE_DEVICES];
	size_t ndev;              /* 0: the window has no allocation or free */
};

/* Builds the series of `t`. Returns 0, or -1 with *e (no memory). */
int memory_timeline_build(const struct trace *t, struct memory_timeline *m,
			  struct err *e);

/* Writes memory_timeline.json / .html as `name` in `dir` (atomically). 0
 * or -1. */
int memory_timeline_write_json(const struct memory_timeline *m, const struct trace *t,
			       const struct outdir *dir, const char *name, struct err *e);
int memory_timeline_write_html(const struct memory_timeline *m, const struct trace *t,
			       const struct outdir *dir, const char *name, struct err *e);

void memory_timeline_free(struct memory_timeline *m);

#endif

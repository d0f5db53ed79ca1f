/*
 * memory_timeline — memory allocated over a window, per device, from the
 * trace's "[memory]" events: CUDA allocations and frees from CUPTI's
 * MEMORY2 records (category gpu_memory, with their running "Total
 * Allocated"), and torch's tensors (category cpu_instant_event,
 * prof.capture{profile_memory}: a series per device, the CPU's too, built
 * tensor by tensor in memory_tensors.c, with the operators that allocated
 * what was live at the peak and what was still allocated at the end).
 *
 * Two files with the same series: memory_timeline.json, and
 * memory_timeline.html, one self-contained page (inline SVG, no script, no
 * network) with a step chart per series and its peak marked and labelled.
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

/* Where a series comes from. */
enum memory_source {
	MEMORY_CUPTI = 0, /* CUDA's allocations (CUPTI): the caching
			     allocator's segments */
	MEMORY_TORCH = 1  /* torch's tensors (profile_memory) */
};

/* Bytes allocated at a moment by one operator: the innermost operator or
 * record_function label open on the allocating thread. */
struct memory_owner {
	uint32_t name;     /* strtab id; STRTAB_NONE: none was open */
	int64_t bytes;
	uint64_t tensors;
};

struct memory_series {
	int32_t device;           /* CUPTI: the device; torch: c10's Device Id
				     (-1: the CPU) */
	int32_t device_type;      /* c10's: 0 CPU, 1 CUDA */
	int source;               /* enum memory_source */
	struct memory_point *p;   /* in time order; malloc'd */
	size_t n, cap;
	int64_t peak, peak_ts;
	uint64_t allocs, frees;
	/* torch's series: what was live at the peak and at the window's end
	 * (allocated in it, never freed), by operator, most bytes first;
	 * malloc'd */
	struct memory_owner *at_peak, *at_end;
	size_t nat_peak, nat_end;
	int64_t end_bytes;
	uint64_t end_tensors;
};

struct memory_timeline {
	int64_t start, end;       /* the window */
	struct memory_series dev[MEMORY_TIMELINE_DEVICES];
	size_t ndev;              /* 0: the window has no allocation or free */
};

/* Builds the series of `t`. Returns 0, or -1 with *e (no memory). */
int memory_timeline_build(const struct trace *t, struct memory_timeline *m,
			  struct err *e);

/* Adds torch's series (memory_tensors.c) to `m`: one per device of the
 * trace's "[memory]" cpu_instant_event events, its points the running
 * total of the tensors allocated in the window, each allocation's owner
 * the innermost cpu_op or user_annotation (steps aside) open on its
 * thread then (one ending at that instant is over, as key_averages
 * has it), each free matched to the latest allocation of its address.
 * Returns 0, or -1 with *e (no memory). */
int memory_tensors_build(const struct trace *t, struct memory_timeline *m, struct err *e);

/* Writes memory_timeline.json / .html as `name` in `dir` (atomically). 0
 * or -1. */
int memory_timeline_write_json(const struct memory_timeline *m, const struct trace *t,
			       const struct outdir *dir, const char *name, struct err *e);
int memory_timeline_write_html(const struct memory_timeline *m, const struct trace *t,
			       const struct outdir *dir, const char *name, struct err *e);

void memory_timeline_free(struct memory_timeline *m);

#endif

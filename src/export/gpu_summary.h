/*
 * gpu_summary — the GPU part of a window's summary: how busy each GPU was,
 * its idle gaps, the top kernels, copy volume by direction and the time
 * spent waiting in synchronization. Read from the trace's GPU events
 * (kernel, gpu_memcpy, gpu_memset on pid = device; cuda_sync). Any one
 * thread at a time; no shared state.
 */
#ifndef PROFHOST_GPU_SUMMARY_H
#define PROFHOST_GPU_SUMMARY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../events/trace.h"
#include "../common/err.h"
#include "textbuf.h"

#define GPU_SUMMARY_DEVICES 16
#define GPU_SUMMARY_TOP 10
#define GPU_SUMMARY_GAP_NS 100000 /* idle stretches this long count as gaps */

/* Copy directions summed (Kineto's "copy kind" names). */
enum gpu_copy_dir { GPU_COPY_HTOD, GPU_COPY_DTOH, GPU_COPY_DTOD, GPU_COPY_OTHER,
		    GPU_COPY_NDIR };

struct gpu_summary_device {
	int32_t device;
	int64_t busy_ns;        /* union of its GPU work within the window */
	uint64_t gaps;          /* idle stretches >= GPU_SUMMARY_GAP_NS */
	int64_t gap_ns;         /* their total */
	int64_t longest_gap_ns;
};

struct gpu_summary_kernel {
	const char *name;       /* the trace's string */
	uint64_t count;
	int64_t total_ns;
};

struct gpu_summary {
	bool any;                               /* the window has GPU events */
	int64_t window_ns;
	struct gpu_summary_device dev[GPU_SUMMARY_DEVICES];
	size_t ndev;
	struct gpu_summary_kernel top[GPU_SUMMARY_TOP]; /* by total time */
	size_t ntop;
	int64_t kernel_ns;                      /* all kernels */
	uint64_t copy_bytes[GPU_COPY_NDIR], copies[GPU_COPY_NDIR];
	int64_t copy_ns[GPU_COPY_NDIR];
	uint64_t syncs;
	int64_t sync_ns;
};

/* Computes the figures of `t`. Returns 0, or -1 with *e (no memory). */
int gpu_summary_compute(const struct trace *t, struct gpu_summary *out, struct err *e);

/* Appends the "GPU:" section (nothing when !g->any). */
void gpu_summary_put(struct textbuf *tb, const struct gpu_summary *g);

#endif

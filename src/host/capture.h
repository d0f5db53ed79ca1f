/*
 * capture — how capture sources (CUPTI, the CPU sampler, ...) plug into the
 * window lifecycle.
 *
 * Each source fills in a struct capture_ops; core.c lists them in
 * capture_sources[] and calls them in order. Every callback may be NULL.
 * Contracts:
 *   init          start-up, from the shim's constructor. Returns 0, or -1
 *                 with *e set: the source is then off for the process (the
 *                 host reports *e once and carries on; PROF_STRICT=1 makes
 *                 it fatal).
 *   warmup        a warm-up phase starts (stepping thread, window lock
 *                 held: must not block; records may be discarded).
 *   window_open   a window starts recording generation `gen` (stepping
 *                 thread, window lock held: must not block).
 *   window_close  the window of generation `gen` stopped recording
 *                 (stepping thread, window lock held: must not block; heavy
 *                 work such as flushing belongs in collect).
 *   collect       the host thread assembles the window of `job`: add the
 *                 source's events to `t` (already holding the CPU events).
 *                 Returns 0, or -1 with *e set (reported, the window is
 *                 still written).
 *   fini          the process is ending, after the last window was
 *                 written (the exiting thread).
 *   prepare       a window is about to open (the step before it, its
 *                 warm-up, a capture_now request, a capture range that may
 *                 open one): do now what would otherwise slow the window's
 *                 first step (threads, first-time work on the stepping
 *                 thread). May be called again before the window opens.
 *                 Stepping thread, window lock held: must not block.
 *   step          a step boundary: `step` begins, `recording` says whether
 *                 a window records it (stepping thread, window lock held:
 *                 must not block). Also called for step 0 at start-up.
 */
#ifndef PROFHOST_CAPTURE_H
#define PROFHOST_CAPTURE_H

#include <stdbool.h>
#include <stdint.h>

#include "../events/trace.h"
#include "../util/err.h"

struct host;
struct host_job;

struct capture_ops {
	const char *name;
	int (*init)(struct host *h, struct err *e);
	void (*warmup)(struct host *h);
	void (*window_open)(struct host *h, uint64_t gen);
	void (*window_close)(struct host *h, uint64_t gen);
	int (*collect)(struct host *h, const struct host_job *job,
		       struct trace *t, struct err *e);
	void (*fini)(struct host *h);
	void (*step)(struct host *h, uint64_t step, bool recording);
	void (*prepare)(struct host *h);
};

/* Calls every source's prepare. Window lock held. */
void capture_prepare_all(struct host *h);

/* The sources compiled in, NULL-ended (capture.c). */
extern const struct capture_ops *const capture_sources[];

/* Calls every source's callback of that name, skipping sources whose init
 * failed. Threads and contracts as above. capture_init_all reports each
 * failing source itself (host_fail) and returns nothing. */
void capture_init_all(struct host *h);
void capture_warmup_all(struct host *h);
void capture_open_all(struct host *h, uint64_t gen);
void capture_close_all(struct host *h, uint64_t gen);
void capture_collect_all(struct host *h, const struct host_job *job,
			 struct trace *t);
void capture_fini_all(struct host *h);
void capture_step_all(struct host *h, uint64_t step, bool recording);

#endif

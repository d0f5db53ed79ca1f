/*
 * testtrace — small hand-built traces for the tests of the queries and of
 * the trace object (test_query.c, test_trace_lua.c).
 */
#ifndef PROFHOST_TEST_TESTTRACE_H
#define PROFHOST_TEST_TESTTRACE_H

#include <stdio.h>
#include <string.h>

#include "events/trace.h"

/* Adds an event: an instant for samples and zero-length marks, else a
 * complete event. */
static inline void testtrace_event(struct trace *t, uint8_t cat, const char *name,
				   int32_t pid, int32_t tid, int64_t ts, int64_t dur)
{
	struct trace_event e = { 0 };

	e.ts = ts;
	e.dur = dur;
	e.pid = pid;
	e.tid = tid;
	e.name = trace_intern(t, name, strlen(name));
	e.cat = cat;
	e.ph = cat == TRACE_CAT_SAMPLE || (cat == TRACE_CAT_MARK && dur == 0)
	       ? TRACE_PH_INSTANT : TRACE_PH_COMPLETE;
	trace_add_event(t, &e);
}

/* Adds step n [ts, ts + dur) of thread 1 (pid 1): the step and its
 * ProfilerStep#n span. */
static inline void testtrace_step(struct trace *t, uint64_t n, int64_t ts, int64_t dur)
{
	struct trace_step s = { n, ts, dur, 1, 0 };
	struct trace_event e = { 0 };
	char name[32];

	snprintf(name, sizeof name, "ProfilerStep#%llu", (unsigned long long)n);
	e.ts = ts;
	e.dur = dur;
	e.pid = 1;
	e.tid = 1;
	e.name = trace_intern(t, name, strlen(name));
	e.cat = TRACE_CAT_USER_ANNOTATION;
	e.ph = TRACE_PH_COMPLETE;
	e.flags = TRACE_F_STEP;
	trace_add_event(t, &e);
	trace_add_step(t, &s);
}

/*
 * Two steps of 100 on thread 1 (pid 1):
 *   step 0 [0,100):   data [0,60) with "next" [5,55) inside; forward
 *                     [60,80); backward [80,95)
 *   step 1 [100,200): data [100,110); forward [110,150); optimizer
 *                     [150,190)
 * Kernels on device 0: "gemm" [60,80) and [110,150) on stream 7, "copyk"
 * [70,90) on stream 8; memcpy [150,160) of 1000 bytes.
 */
static inline void testtrace_build(struct trace *t)
{
	trace_init(t);
	t->meta.pid = 1;
	t->meta.start_ts = 0;
	t->meta.end_ts = 200;
	testtrace_step(t, 0, 0, 100);
	testtrace_step(t, 1, 100, 100);
	testtrace_event(t, TRACE_CAT_USER_ANNOTATION, "data", 1, 1, 0, 60);
	testtrace_event(t, TRACE_CAT_USER_ANNOTATION, "next", 1, 1, 5, 50);
	testtrace_event(t, TRACE_CAT_USER_ANNOTATION, "forward", 1, 1, 60, 20);
	testtrace_event(t, TRACE_CAT_USER_ANNOTATION, "backward", 1, 1, 80, 15);
	testtrace_event(t, TRACE_CAT_USER_ANNOTATION, "data", 1, 1, 100, 10);
	testtrace_event(t, TRACE_CAT_USER_ANNOTATION, "forward", 1, 1, 110, 40);
	testtrace_event(t, TRACE_CAT_USER_ANNOTATION, "optimizer", 1, 1, 150, 40);
	testtrace_event(t, TRACE_CAT_KERNEL, "gemm", 0, 7, 60, 20);
	testtrace_event(t, TRACE_CAT_KERNEL, "gemm", 0, 7, 110, 40);
	testtrace_event(t, TRACE_CAT_KERNEL, "copyk", 0, 8, 70, 20);
	testtrace_event(t, TRACE_CAT_GPU_MEMCPY, "Memcpy HtoD", 0, 7, 150, 10);
	trace_arg_uint(t, "bytes", 1000);
}

#endif

/*
 * trace_json — reads a Chrome trace back into a struct trace.
 *
 * For `prof report` on windows that have no capture.phb: profhost's own
 * trace.json (Kineto's schema, see chrome_writer.h), the plain Trace Event
 * Format (a bare event array; "samples" + "stackFrames" become cpu_sample
 * events whose "stack" argument lists the frames), and the legacy form
 * torch's autograd profiler exports without Kineto (a bare array, "pid":
 * "CPU functions", no "cat": its events become cpu_op events, its
 * ProfilerStep#N ranges steps). The document
 * is parsed whole with cJSON, so inputs are limited to
 * TRACE_JSON_MAX_BYTES once decompressed.
 *
 * Times come back in ns (ts/dur are µs with three decimals). ProfilerStep#N
 * spans become steps; "partial"/"clipped_*" args become flags;
 * thread_name metadata names threads; the "profhost" header fills the
 * metadata and counters. Events of categories profhost does not know are
 * skipped and counted in *skipped; a trace whose events are all skipped is
 * refused ("none of its N events is one prof report reads").
 */
#ifndef PROFHOST_TRACE_JSON_H
#define PROFHOST_TRACE_JSON_H

#include <stddef.h>

#include "../events/trace.h"
#include "../common/err.h"

#define TRACE_JSON_MAX_BYTES ((size_t)512 << 20)

/*
 * Parses buf[0..len) (JSON text) into `t` (trace_init'ed, empty). `label`
 * names the input in messages. Returns 0, or -1 with *e set: "<label>: not
 * valid JSON at offset N", "<label>: not a Chrome trace (no traceEvents
 * array)", "<label>: traceEvents[12]: 'ts' is not a number". `skipped` may
 * be NULL.
 */
int trace_json_parse(const char *buf, size_t len, const char *label,
		     struct trace *t, size_t *skipped, struct err *e);

#endif

/*
 * chrome_writer — streams a struct trace as a Chrome / Perfetto trace in
 * Kineto's JSON schema (what TensorBoard's profiler plugin and Holistic Trace
 * Analysis read):
 *
 *   { "schemaVersion": 1, "deviceProperties": [...],
 *     "distributedInfo": {"backend": ..., "rank": R, "world_size": W},
 *     "baseTimeNanoseconds": ..., "displayTimeUnit": "ms",
 *     "traceName": ..., "profhost": {version, window, steps, reason,
 *     monotonic_offset_ns, counters...}, "traceEvents": [ ... ],
 *     "stackFrames": {...}, "samples": [...] }
 *
 * Event timestamps are the trace's ns (after export_unix_time(): since
 * baseTimeNanoseconds, a Unix time) written as microseconds with three
 * decimals; durations are written so that ts + dur added as doubles never
 * passes the event's end, and an event that holds another reads as ending
 * exactly at its end, so that nothing ends after what holds it (see
 * fmt_dur and cw_holders). CPU samples (cpu_sample instants)
 * are also written as the Trace Event Format's stackFrames and samples,
 * only when the trace has some. Every string is escaped: quotes,
 * backslashes, control characters, and invalid UTF-8 replaced by U+FFFD.
 * The writer streams through a fixed buffer; the trace is never formatted
 * whole in memory.
 */
#ifndef PROFHOST_CHROME_WRITER_H
#define PROFHOST_CHROME_WRITER_H

#include <stdbool.h>
#include <stddef.h>

#include "../events/trace.h"
#include "../util/err.h"
#include "outfile.h"

/* Writes the whole trace document to `out`. Returns 0, or -1 with *e set
 * (the file is then not committed by the caller). Host thread. */
int chrome_writer_write(const struct trace *t, struct outfile *out,
			struct err *e);

/* Writes `len` bytes of `s` as a JSON string literal (with the quotes) into
 * `out`, escaping as described above. Returns 0 or -1 (I/O error). */
int chrome_writer_string(struct outfile *out, const char *s, size_t len);

#endif

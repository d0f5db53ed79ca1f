/*
 * phb — capture.phb, a window's raw capture in a compact binary file: its
 * format and its writer (the reader is src/read/phb_read.h).
 *
 * The host writes it next to trace.json so that `prof report` can run the
 * reports offline without re-parsing JSON. It holds exactly what struct
 * trace holds: metadata, counters, the string table, events, arguments,
 * steps, threads, the GPUs' tracks and properties (CPU samples are events
 * of category cpu_sample). Files of version 1.0 (no GPU tracks or
 * properties) still read.
 *
 * Layout (every integer little-endian; docs/output.md has the full table):
 *
 *   header   8 bytes magic "\x89PHB\r\n\x1a\n", u16 major (1), u16 minor
 *            (1), u32 reserved (0)
 *   sections, each: 4-byte ASCII tag, u32 reserved, u64 payload length,
 *            the payload, u32 CRC-32 (zlib's) of the payload
 *            CATS category names, META metadata and counters, STRS
 *            strings, EVTS events (48 bytes each), ARGS arguments (16
 *            bytes each), STEP steps (32 bytes each), THRD threads (12
 *            bytes each); since 1.1 PROC the GPUs' tracks (12 bytes each)
 *            and DEVS their properties; END (empty, last)
 *
 * A reader of major version 1 skips sections with tags it does not know
 * (a later minor version may add some) and refuses another major version.
 * The reader validates every length, index and id before use: corrupt or
 * truncated input gives one error naming the file and the byte offset,
 * never a crash.
 */
#ifndef PROFHOST_PHB_H
#define PROFHOST_PHB_H

#include <stddef.h>

#include "../events/trace.h"
#include "../common/err.h"

struct outfile;

#define PHB_MAJOR 1
#define PHB_MINOR 1
#define PHB_MAGIC "\x89PHB\r\n\x1a\n"
#define PHB_MAGIC_LEN 8

/* The file name the host writes in each window directory. */
#define PHB_FILE "capture.phb"

/* Record sizes in the file (shared by the writer here and the reader,
 * src/read/phb_read.c). */
#define PHB_EVENT_SIZE 48
#define PHB_ARG_SIZE 16
#define PHB_STEP_SIZE 32
#define PHB_THREAD_SIZE 12
#define PHB_PROC_SIZE 12
#define PHB_DEVICE_SIZE 56 /* then the device's name as a string */
#define PHB_NULL_STR 0xffffffffu

/* The category's name in the file: Kineto's, except marks (which Kineto
 * also calls user_annotation). The writer and the reader both use it. */
static inline const char *phb_cat_name(unsigned c)
{
	return c == TRACE_CAT_MARK ? "mark" : trace_cat_name((enum trace_cat)c);
}

/* Writes `t` to `path` atomically (outfile). Returns 0, or -1 with *e
 * naming the file. Any thread (the host thread in practice). */
int phb_write(const struct trace *t, const char *path, struct err *e);

/* Writes `t` into `f` (opened by the caller, who commits or aborts it).
 * Returns 0, or -1 with *e set. */
int phb_write_to(const struct trace *t, struct outfile *f, struct err *e);

#endif

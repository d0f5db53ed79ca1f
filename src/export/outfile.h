/*
 * outfile — a buffered output file that appears atomically.
 *
 * outfile_open() creates `<path>.tmp.<pid>` next to the final name; the data
 * goes through a 256 KiB buffer, gzip-compressed when asked (zlib, level 1
 * for speed); outfile_commit() flushes, fsyncs nothing, and renames the file
 * to `path`, so a reader sees either no file or the whole file.
 * outfile_abort() removes the temporary file. Errors are sticky: after the
 * first failed write every call returns -1 and commit reports the error.
 *
 * One thread at a time per outfile.
 */
#ifndef PROFHOST_OUTFILE_H
#define PROFHOST_OUTFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../util/err.h"

struct outfile; /* opaque */

/* Opens `<path>.tmp.<pid>` for writing. Returns NULL with *e set. */
struct outfile *outfile_open(const char *path, bool gzip, struct err *e);

/* Appends bytes. Returns 0 or -1. */
int outfile_write(struct outfile *f, const void *data, size_t len);

/* Appends a NUL-terminated string. Returns 0 or -1. */
int outfile_puts(struct outfile *f, const char *s);

/* Appends printf-formatted text (at most 4 KiB per call). 0 or -1. */
int outfile_printf(struct outfile *f, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Bytes written so far (uncompressed). */
uint64_t outfile_bytes(const struct outfile *f);

/* If a write has failed, copies the (sticky) message naming the file into *e
 * and returns -1; returns 0 while all is well. Lets a writer report why it
 * stopped before its caller decides to abort. */
int outfile_error(const struct outfile *f, struct err *e);

/* Flushes, closes and renames to the final path. Frees f in all cases.
 * Returns 0, or -1 with *e naming the file and the failure. */
int outfile_commit(struct outfile *f, struct err *e);

/* Writes `text` (NUL-terminated) as the whole file `path`, atomically.
 * Returns 0, or -1 with *e naming the file. */
int outfile_write_text(const char *path, const char *text, struct err *e);

/* Closes and removes the temporary file; frees f. NULL-safe. */
void outfile_abort(struct outfile *f);

#endif

/*
 * outfile — a buffered output file that appears atomically.
 *
 * outfile_openat() creates `<name>.tmp.<pid>` next to the final name in an
 * open directory (outdir.h), exclusively and without following a symbolic
 * link (one planted there is removed, never written through); the data
 * goes through a 256 KiB buffer, gzip-compressed when asked (zlib, level 1
 * for speed); outfile_commit() flushes, fsyncs nothing, and renames the file
 * to `name` in the same directory, so a reader sees either no file or the
 * whole file. outfile_abort() removes the temporary file. Errors are
 * sticky: after the first failed write every call returns -1 and commit
 * reports the error.
 *
 * One thread at a time per outfile.
 */
#ifndef PROFHOST_OUTFILE_H
#define PROFHOST_OUTFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/err.h"
#include "outdir.h"

struct outfile; /* opaque */

/* Opens `<name>.tmp.<pid>` in directory d for writing (`name`: one
 * component). The outfile keeps its own descriptor of d. Returns NULL with
 * *e set (naming d->path/name). */
struct outfile *outfile_openat(const struct outdir *d, const char *name, bool gzip,
			       struct err *e);

/* outfile_openat() in the directory of `path`, which is opened as the user
 * named it (for destinations the user chose: prof report -o). */
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

/* As outfile_write_text, as `name` in directory d. */
int outfile_write_textat(const struct outdir *d, const char *name, const char *text,
			 struct err *e);

/* Copies the regular file `from_name` of `from` (not followed if a link)
 * to `to_name` in `to`, atomically. Returns 0, or -1 with *e set. */
int outfile_copyat(const struct outdir *from, const char *from_name,
		   const struct outdir *to, const char *to_name, struct err *e);

/* Closes and removes the temporary file; frees f. NULL-safe. */
void outfile_abort(struct outfile *f);

#endif

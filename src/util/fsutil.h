/*
 * fsutil — small file-system helpers shared by the host and the writers.
 */
#ifndef PROFHOST_FSUTIL_H
#define PROFHOST_FSUTIL_H

#include <stddef.h>

#include "err.h"

/* Creates `path` and its missing parents with `mode` (like mkdir -p).
 * Returns 0, or -1 with *e naming the directory that failed. */
int fsutil_mkdirs(const char *path, unsigned mode, struct err *e);

/* Joins `a` and `b` with one '/' into out[size]. Returns 0, or -1 with *e
 * set when the result does not fit. */
int fsutil_join(char *out, size_t size, const char *a, const char *b,
		struct err *e);

/* Copies file `src` to `dst` atomically (temporary name, then rename).
 * Returns 0, or -1 with *e set. */
int fsutil_copy(const char *src, const char *dst, struct err *e);

/* Reads a whole small file (at most `max` bytes) into a malloc'd,
 * NUL-terminated buffer. Returns NULL with *e set. */
char *fsutil_read(const char *path, size_t max, size_t *len, struct err *e);

#endif

/*
 * readfile — reads a whole input file into memory, gunzipping it on the
 * way when it is gzip-compressed (zlib reads plain files as they are).
 *
 * For the offline readers (capture.phb, trace.json[.gz]): the result is
 * one malloc'd, NUL-terminated buffer. Errors name the file and, for a
 * damaged gzip stream, the compressed byte offset where it broke. Any
 * thread.
 */
#ifndef PROFHOST_READFILE_H
#define PROFHOST_READFILE_H

#include <stdbool.h>
#include <stddef.h>

#include "../util/err.h"

/*
 * Reads `path` (at most `max` bytes after decompression). Returns the
 * buffer (caller frees; NUL-terminated) with *len set and *gz telling
 * whether it was gzip-compressed, or NULL with *e set: "<path>: cannot
 * open: ...", "<path>: truncated gzip stream at offset N (unexpected end
 * of file)", "<path>: larger than N MiB ...".
 */
char *readfile_all(const char *path, size_t max, size_t *len, bool *gz,
		   struct err *e);

#endif

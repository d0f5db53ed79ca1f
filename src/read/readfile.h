/*
 * readfile — reads a whole input file into memory, gunzipping it on the
 * way when it is gzip-compressed (zlib reads plain files as they are),
 * with memory bounded before it is spent.
 *
 * For the offline readers (capture.phb, trace.json[.gz]): the caller's
 * sniff function looks at the first bytes (decompressed) and says which
 * kind of input it is and how large that kind may be; the limit is then
 * applied before reading (a plain file's size, gzip's size field) and
 * while inflating, so a gzip bomb stops at the limit. Only regular files
 * are read, opened without blocking: a FIFO or /dev/zero is refused at
 * once. The result lives in an anonymous mapping sized by the file (or by
 * gzip's size field) that grows, when it must, by remapping its pages: no
 * copy, and nothing large reserved up front. Errors name the file and, for
 * a damaged gzip stream, the compressed byte offset where it broke. Any
 * thread.
 */
#ifndef PROFHOST_READFILE_H
#define PROFHOST_READFILE_H

#include <stdbool.h>
#include <stddef.h>

#include "../common/err.h"

/* How many leading bytes the sniff function is shown (fewer when the
 * input is shorter). */
#define READFILE_HEAD 4096

/* What the sniff function decided. */
struct readfile_kind {
	size_t max;         /* bytes this kind may hold, decompressed */
	const char *what;   /* names the kind in messages: "JSON" */
	const char *hint;   /* appended to the too-large message ("; use
			       ..."), or "" */
};

/* Looks at head[0..n) and fills *k; returns 0, or -1 with *e set (the
 * input is refused without being read further). */
typedef int (*readfile_sniff_fn)(const char *head, size_t n, const char *path,
				 struct readfile_kind *k, struct err *e);

/* A file read whole: data[len] is '\0'. */
struct readfile_buf {
	char *data;
	size_t len;
	bool gz;            /* it was gzip-compressed */
	size_t mapped;      /* bytes of the mapping (readfile_release) */
};

/*
 * Reads `path` into *out. Returns 0, or -1 with *e set and *out empty:
 * "<path>: cannot open: ...", "<path>: a FIFO (named pipe), not a regular
 * file", "<path>: truncated gzip stream at offset N (unexpected end of
 * file)", "<path>: 600 MiB of JSON, more than the 512 MiB of JSON this
 * reader takes<hint>", "<path>: more than 512 MiB of JSON once
 * decompressed, more than this reader takes<hint>", or the sniff
 * function's message.
 */
int readfile_all(const char *path, readfile_sniff_fn sniff,
		 struct readfile_buf *out, struct err *e);

/* Frees what readfile_all() read; *b becomes empty. NULL-safe. */
void readfile_release(struct readfile_buf *b);

#endif

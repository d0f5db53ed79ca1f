/*
 * export_internal — the seam between export_window() (export.c) and the
 * outputs it writes. Each output is a file, export_<output>.c, that
 * exposes one `struct export_output`: the prof.export option that turns
 * it on, a check of its settings and its writer. export.c lists the
 * descriptors in one table, in the order their files are written, and
 * walks it: a new output is its file and a line in that table, with no
 * branch of its own in export.c (the idea of Kineto's logger factory,
 * where each output registers itself). export_files.c holds what the
 * outputs share (the window's folder name, writing and listing a file).
 * Not a module contract: only src/export/export*.c and their unit tests
 * include it. Host thread only (export.h).
 */
#ifndef PROFHOST_EXPORT_INTERNAL_H
#define PROFHOST_EXPORT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "../events/trace.h"
#include "../common/err.h"
#include "export.h"
#include "outdir.h"
#include "outfile.h"

/* What a writer is given: the window, the settings, the open run
 * directory and what was written so far (res->out, the window's
 * directory, is open; res->files lists the files before this output's). */
struct export_ctx {
	const struct trace *t;
	const struct export_opts *o;
	const struct outdir *run;
	struct export_result *res;
};

/* One output of a window. */
struct export_output {
	const char *name;  /* its prof.export option */
	size_t flag;       /* offsetof(struct export_opts, <the bool that
			      turns it on>) */
	/* Checks the output's settings in *o before anything is written,
	 * whether the output is on or not (export_window()'s contract):
	 * 0, or -1 with *e naming the bad value. NULL: nothing to check. */
	int (*check)(const struct export_opts *o, struct err *e);
	/* Writes the output's files into the window's directory (or beside
	 * it) and lists each in c->res; may write none (nothing of its kind
	 * in the window). 0, or -1 with *e naming the file and the failure. */
	int (*write)(const struct export_ctx *c, struct err *e);
};

/* The outputs, each in its own file (export.c lists them in order). */
extern const struct export_output export_out_chrome;      /* export_trace.c */
extern const struct export_output export_out_tensorboard; /* export_trace.c */
extern const struct export_output export_out_raw;         /* export_raw.c */
extern const struct export_output export_out_keyavg;      /* export_keyavg.c */
extern const struct export_output export_out_stacks;      /* export_stacks.c */
extern const struct export_output export_out_memtl;       /* export_memtl.c */
extern const struct export_output export_out_summary;     /* export_summary.c */

/* Remembers the file `name` written in `d` in res->files (at most
 * EXPORT_MAX_FILES; out of memory: not listed). */
void export_note_file(struct export_result *res, const struct outdir *d,
		      const char *name);

/* Writes `name` in d with `write` (a writer into an outfile), atomically:
 * 0, or -1 with *e set and nothing left under `name`. Does not list it. */
int export_write_with(const struct trace *t, const struct outdir *d, const char *name,
		      bool gzip,
		      int (*write)(const struct trace *, struct outfile *, struct err *),
		      struct err *e);

/* export_write_with() into the window's directory, then lists the file. */
int export_write_listed(const struct export_ctx *c, const char *name, bool gzip,
			int (*write)(const struct trace *, struct outfile *, struct err *),
			struct err *e);

/* "window<K>_steps<a>-<b>" ("recorder<K>_..." for a flight recorder
 * dump; "_<suffix>" after it for a job-wide one): the window's folder
 * name, in its rank's folder and in the TensorBoard folder. */
void export_window_name(const struct trace *t, char *out, size_t size);

/* Renders the summary (listing the files in *res and itself), writes
 * summary.txt and keeps the text in res->summary (export_summary.c).
 * 0, or -1 with *e set. */
int export_write_summary(const struct trace *t, struct export_result *res,
			 struct err *e);

#endif

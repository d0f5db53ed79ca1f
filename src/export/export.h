/*
 * export — writes one window's files.
 *
 * Layout: <output dir>/<run>/rank<R>/window<K>_steps<a>-<b>/ holding
 * trace.json (or trace.json.gz), capture.phb (the raw capture, phb.h),
 * key_averages.txt, stacks.txt and cpu_functions.txt (CPU samples),
 * operator_stacks.txt (the operators' call stacks), memory_timeline.*,
 * the reports the host adds (export_text_file) and,
 * written last, summary.txt (listing every file written); with TensorBoard
 * export also <output dir>/<run>/tensorboard/window<K>_steps<a>-<b>/
 * <host>_<pid>.<ms>.pt.trace.json.gz: one folder per window, one file per
 * rank, which is also the folder Holistic Trace Analysis loads.
 * Every file appears atomically (outfile). Host thread only.
 */
#ifndef PROFHOST_EXPORT_H
#define PROFHOST_EXPORT_H

#include <stdbool.h>
#include <stddef.h>

#include "../events/trace.h"
#include "../common/err.h"
#include "outdir.h"

#define EXPORT_MAX_FILES 16

struct export_opts {
	const char *run_dir;   /* <output dir>/<run>, absolute; with out_dir,
				  only <run> */
	const struct outdir *out_dir; /* the output directory, open (a
				  salvage: its path read from a file is
				  not followed, outdir_open_untrusted);
				  NULL: run_dir's parent, followed as the
				  user gave it */
	const char *run_id;    /* this launch's PROF_RUN_ID: a run directory
				  holding another run is left alone (outdir.h);
				  NULL: no check */
	const struct outdir_job *job; /* the job this process is a rank of:
				  its ranks share a run directory (outdir.h);
				  NULL: none */
	bool chrome;           /* write the Chrome trace */
	bool chrome_gzip;      /* ... as trace.json.gz */
	bool tensorboard;      /* also under TensorBoard's naming */
	bool key_averages;     /* write key_averages.txt */
	const char *sort_by;   /* torch's sort key; NULL = "self_cpu_time_total" */
	size_t row_limit;      /* rows shown; 0 = all */
	const char *group_by;  /* "name" or "domain"; NULL = "name" */
	bool group_by_input_shape; /* rows also by input shapes (key_averages.h) */
	uint32_t group_by_stack_n; /* ... and by the first N call stack
				      entries (0: not; at most
				      KEY_AVG_STACK_N_MAX) */
	bool summary;          /* write summary.txt, return its text (a
				  caller that adds files first leaves this
				  false and calls export_summary() last) */
	bool raw;              /* write capture.phb */
	bool memory_timeline;  /* write memory_timeline.{json,html} when the
				  window has GPU allocations or frees */
	bool stacks;           /* stacks.txt + cpu_functions.txt, when the
				  window was sampled (t->sampling.hz), and
				  operator_stacks.txt, when its operators
				  have call stacks (op_stacks.h) */
	const char *stacks_metric; /* operator_stacks.txt's weight (torch's
				  export_stacks metric); NULL =
				  "self_cpu_time_total" */
};

/* What was written: the window directory and the files in it. */
struct export_result {
	char dir[4096];
	struct outdir out;     /* the window directory, open until
				  export_result_free() (files are written
				  through it) */
	char run_dir[4096];    /* the run directory used */
	bool run_moved;        /* run_dir is <run>.N: <run> holds another run */
	char *files[EXPORT_MAX_FILES + 1]; /* malloc'd absolute paths; room
					      for a NULL end */
	size_t nfiles;
	char *summary;  /* the rendered summary (malloc'd) when opts.summary
			   and it was written; else NULL */
};

/*
 * Moves every time of `t` (events, steps, stacks, the window's edges) from
 * the clock it was captured with to Unix time, in Kineto's form: ns since
 * a base, the Unix time of the window's start floored to a whole week
 * (604800 s since the epoch). t->meta.base_time_ns must hold the Unix time
 * of the capture clock's zero (one offset for the whole window, taken
 * once); it becomes the base, and t->meta.monotonic_offset_ns what takes
 * the new times back to the capture clock. Processes on hosts whose clocks
 * agree (NTP) get the same base, so their traces line up as they are
 * (Holistic Trace Analysis aligns ranks on raw ts). libkineto floors to
 * three months; a week keeps ts under 2^40 us, where doubles are 0.12 ns
 * apart, so every reader gets the exact times (see fmt_dur in
 * chrome_writer.c). Call once per window, before export_window() and the
 * reports; calling it again changes nothing. Any thread that owns `t`.
 */
void export_unix_time(struct trace *t);

/*
 * Checks every output's settings first (sort_by, group_by, stacks_metric,
 * on or not; a bad value: -1 before anything is written). Opens the run directory (outdir_open_run(), or
 * outdir_open_run_in() in o->out_dir: this user's, not
 * writable by others, this run's), creates the window directory in it (a
 * directory of that name made by another process gets a ".pid<P>" suffix
 * instead of being shared) and writes the enabled outputs of `t`, every
 * file through the directory's descriptor. Returns 0, or -1 with *e naming the file or
 * directory and the failure; what was written before the failure is listed
 * in *res either way.
 */
int export_window(const struct trace *t, const struct export_opts *o,
		  struct export_result *res, struct err *e);

/* Writes `text` to <res->dir>/<name> atomically and lists it in *res.
 * Returns 0, or -1 with *e set. Host thread. */
int export_text_file(struct export_result *res, const char *name,
		     const char *text, struct err *e);

/* Writes summary.txt (listing every file in *res and itself) and keeps its
 * text in res->summary. Returns 0, or -1 with *e set. Host thread. */
int export_summary(const struct trace *t, struct export_result *res,
		   struct err *e);

/* Frees the file names and the summary text of *res. */
void export_result_free(struct export_result *res);

#endif

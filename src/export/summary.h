/*
 * summary — a window's summary, short enough to read in a terminal.
 *
 * It names the window (index, steps, reason, rank), the steps captured and
 * their times (partial steps are marked and left out of the statistics),
 * the top ranges by self CPU time (from key_averages, grouped by name), the
 * GPU's figures when the window has GPU work (gpu_summary.h), the
 * events written, every nonzero drop counter with its fix, and the files
 * written. The host prints it on rank 0 at window end and export writes it
 * to summary.txt. Host thread (or any one thread at a time).
 */
#ifndef PROFHOST_SUMMARY_H
#define PROFHOST_SUMMARY_H

#include <stddef.h>
#include <stdint.h>

#include "../events/trace.h"
#include "../common/err.h"

/* Ranges listed in the summary. */
#define SUMMARY_TOP 10

/* Step-time statistics over the complete steps (ns). Percentiles
 * interpolate linearly between the closest ranks (numpy's default): with n
 * sorted times x[0..n), the q-quantile is at rank q * (n - 1). */
struct summary_steps {
	size_t captured;  /* steps in the window */
	size_t partial;   /* of which cut short (not in the statistics) */
	size_t n;         /* complete steps: the statistics' sample */
	int64_t min, median, p90, max; /* 0 when n == 0 */
};

/* Computes the step statistics of `t`. Returns 0, or -1 with *e set when
 * out of memory. */
int summary_step_stats(const struct trace *t, struct summary_steps *out,
		       struct err *e);

/*
 * Renders the summary of `t` into a malloc'd string (caller frees). `dir`
 * is the window directory (NULL: none) and files[0..nfiles) the files
 * written, absolute; those inside `dir` are listed by their base name.
 * Returns NULL with *e set when out of memory.
 */
char *summary_render(const struct trace *t, const char *dir,
		     const char *const *files, size_t nfiles, struct err *e);

/* Writes `text` to `path` atomically. Returns 0, or -1 with *e set. */
int summary_write(const char *path, const char *text, struct err *e);

#endif

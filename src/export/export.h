/*
 * export — writes one window's files.
 *
 * Layout: <output dir>/<run>/rank<R>/window<K>_steps<a>-<b>/ holding
 * trace.json (or trace.json.gz) and, as later writers land, the tables and
 * the summary; with TensorBoard export also
 * <output dir>/<run>/tensorboard/<host>_<pid>.<ms>.pt.trace.json.gz.
 * Every file appears atomically (outfile). Host thread only.
 */
#ifndef PROFHOST_EXPORT_H
#define PROFHOST_EXPORT_H

#include <stdbool.h>
#include <stddef.h>

#include "../events/trace.h"
#include "../util/err.h"

#define EXPORT_MAX_FILES 16

struct export_opts {
	const char *run_dir;   /* <output dir>/<run>, absolute */
	bool chrome;           /* write the Chrome trace */
	bool chrome_gzip;      /* ... as trace.json.gz */
	bool tensorboard;      /* also under TensorBoard's naming */
	bool stacks;           /* stacks.txt + cpu_functions.txt, when the
				  window was sampled (t->sampling.hz) */
};

/* What was written: the window directory and the files in it. */
struct export_result {
	char dir[4096];
	char *files[EXPORT_MAX_FILES + 1]; /* malloc'd absolute paths; room
					      for a NULL end */
	size_t nfiles;
};

/*
 * Creates the window directory (a directory of that name made by another
 * process gets a ".pid<P>" suffix instead of being shared) and writes the
 * enabled outputs of `t`. Returns 0, or -1 with *e naming the file or
 * directory and the failure; what was written before the failure is listed
 * in *res either way.
 */
int export_window(const struct trace *t, const struct export_opts *o,
		  struct export_result *res, struct err *e);

/* Frees the file names of *res. */
void export_result_free(struct export_result *res);

#endif

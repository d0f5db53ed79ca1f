/* export — writes one window's files (see export.h). */
#include "export.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../util/fsutil.h"
#include "chrome_writer.h"
#include "outfile.h"
#include "phases.h"

/* Remembers a written file in *res. */
static void note_file(struct export_result *res, const char *path)
{
	if (res->nfiles < EXPORT_MAX_FILES) {
		res->files[res->nfiles] = strdup(path);
		if (res->files[res->nfiles])
			res->nfiles++;
	}
}

/* Creates <run_dir>/rank<R>/window<K>_steps<a>-<b> in res->dir. */
static int make_window_dir(const struct trace *t, const char *run_dir,
			   struct export_result *res, struct err *e)
{
	char rank_dir[4096], name[128];
	int n;

	n = snprintf(rank_dir, sizeof rank_dir, "%s/rank%d", run_dir, t->meta.rank);
	if (n < 0 || (size_t)n >= sizeof rank_dir)
		return err_set(e, "output path '%s' is too long", run_dir);
	if (fsutil_mkdirs(rank_dir, 0755, e) != 0)
		return -1;
	snprintf(name, sizeof name, "window%u_steps%llu-%llu", t->meta.window,
		 (unsigned long long)t->meta.first_step,
		 (unsigned long long)t->meta.last_step);
	if (fsutil_join(res->dir, sizeof res->dir, rank_dir, name, e) != 0)
		return -1;
	if (mkdir(res->dir, 0755) == 0)
		return 0;
	if (errno != EEXIST)
		return err_errno(e, errno, "cannot create directory '%s'", res->dir);
	/* Another process of this rank (a parent, a sibling) took the name. */
	snprintf(name + strlen(name), sizeof name - strlen(name), ".pid%d",
		 (int)t->meta.pid);
	if (fsutil_join(res->dir, sizeof res->dir, rank_dir, name, e) != 0)
		return -1;
	if (mkdir(res->dir, 0755) != 0 && errno != EEXIST)
		return err_errno(e, errno, "cannot create directory '%s'", res->dir);
	return 0;
}

/* Writes the Chrome trace to `path`. */
static int write_chrome(const struct trace *t, const char *path, bool gzip,
			struct err *e)
{
	struct outfile *f = outfile_open(path, gzip, e);

	if (!f)
		return -1;
	if (chrome_writer_write(t, f, e) != 0) {
		outfile_abort(f);
		return -1;
	}
	return outfile_commit(f, e);
}

/* TensorBoard's profiler plugin looks for
 * <logdir>/<run>/<worker>.<timestamp>.pt.trace.json.gz. */
static int write_tensorboard(const struct trace *t, const char *run_dir,
			     const char *chrome_path, bool chrome_is_gz,
			     struct export_result *res, struct err *e)
{
	char dir[4096], path[4352];
	long long ms = (t->meta.base_time_ns + t->meta.end_ts) / 1000000;

	if (fsutil_join(dir, sizeof dir, run_dir, "tensorboard", e) != 0 ||
	    fsutil_mkdirs(dir, 0755, e) != 0)
		return -1;
	snprintf(path, sizeof path, "%s/%s_%d.%lld.pt.trace.json.gz", dir,
		 t->meta.hostname ? t->meta.hostname : "host", (int)t->meta.pid, ms);
	if (chrome_is_gz ? fsutil_copy(chrome_path, path, e)
			 : write_chrome(t, path, true, e))
		return -1;
	note_file(res, path);
	return 0;
}

/* Writes phases.txt (the per-step phase breakdown and the trace's notes)
 * when the window has phases. */
static int write_phases(const struct trace *t, struct export_result *res,
			struct err *e)
{
	char path[4352], *text;
	struct outfile *f;

	if (phases_render(t, &text, e) != 0)
		return -1;
	if (!text)
		return 0;
	snprintf(path, sizeof path, "%s/phases.txt", res->dir);
	f = outfile_open(path, false, e);
	if (!f) {
		free(text);
		return -1;
	}
	outfile_puts(f, text);
	free(text);
	if (t->meta.notes) {
		outfile_puts(f, "\nNotes:\n");
		outfile_puts(f, t->meta.notes);
	}
	if (outfile_commit(f, e) != 0)
		return -1;
	note_file(res, path);
	return 0;
}

int export_window(const struct trace *t, const struct export_opts *o,
		  struct export_result *res, struct err *e)
{
	char path[4352];
	bool gz = o->chrome_gzip;

	memset(res, 0, sizeof *res);
	if (make_window_dir(t, o->run_dir, res, e) != 0)
		return -1;
	snprintf(path, sizeof path, "%s/%s", res->dir, gz ? "trace.json.gz" : "trace.json");
	if (o->chrome) {
		if (write_chrome(t, path, gz, e) != 0)
			return -1;
		note_file(res, path);
	}
	if (o->tensorboard &&
	    write_tensorboard(t, o->run_dir, path, o->chrome && gz, res, e) != 0)
		return -1;
	if (write_phases(t, res, e) != 0)
		return -1;
	return 0;
}

void export_result_free(struct export_result *res)
{
	size_t i;

	for (i = 0; i < res->nfiles; i++)
		free(res->files[i]);
	res->nfiles = 0;
}

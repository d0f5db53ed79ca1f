/* export — writes one window's files (see export.h). */
#include "export.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../util/fsutil.h"
#include "chrome_writer.h"
#include "key_averages.h"
#include "memory_timeline.h"
#include "outfile.h"
#include "phb.h"
#include "stacks.h"
#include "summary.h"

/* What the time base is floored to: a week (export.h). */
#define BASE_PERIOD_NS (604800LL * 1000000000LL)

/* v + d, held at the int64 limits rather than wrapped. */
static int64_t add_sat(int64_t v, int64_t d)
{
	int64_t out;

	if (__builtin_add_overflow(v, d, &out))
		return d > 0 ? INT64_MAX : INT64_MIN;
	return out;
}

void export_unix_time(struct trace *t)
{
	struct trace_meta *m = &t->meta;
	int64_t wall = add_sat(m->base_time_ns, m->start_ts), base, d;
	size_t i;

	base = wall / BASE_PERIOD_NS * BASE_PERIOD_NS;
	if (base > wall)
		base -= BASE_PERIOD_NS; /* floor, not towards zero */
	d = m->base_time_ns - base;
	if (d == 0)
		return;
	for (i = 0; i < t->nev; i++)
		t->ev[i].ts = add_sat(t->ev[i].ts, d);
	for (i = 0; i < t->nsteps; i++)
		t->steps[i].ts = add_sat(t->steps[i].ts, d);
	for (i = 0; i < t->nstacks; i++)
		t->stacks[i].ts = add_sat(t->stacks[i].ts, d);
	m->start_ts = add_sat(m->start_ts, d);
	m->end_ts = add_sat(m->end_ts, d);
	m->monotonic_offset_ns -= d;
	m->base_time_ns = base;
}

/* Remembers a written file in *res. */
static void note_file(struct export_result *res, const char *path)
{
	if (res->nfiles < EXPORT_MAX_FILES) {
		res->files[res->nfiles] = strdup(path);
		if (res->files[res->nfiles])
			res->nfiles++;
	}
}

/* "window<K>_steps<a>-<b>": the window's folder name, in its rank's folder
 * and in the TensorBoard folder. */
static void window_name(const struct trace *t, char *out, size_t size)
{
	snprintf(out, size, "window%u_steps%llu-%llu", t->meta.window,
		 (unsigned long long)t->meta.first_step,
		 (unsigned long long)t->meta.last_step);
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
	window_name(t, name, sizeof name);
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

/* <run_dir>/tensorboard/window<K>_steps<a>-<b>/<host>_<pid>.<ms>.pt.trace.json.gz:
 * TensorBoard's profiler plugin takes each folder under its logdir that
 * holds *.pt.trace.json[.gz] files as a run and each file as a worker
 * (<worker>.<timestamp>); Holistic Trace Analysis wants a flat folder of
 * one file per rank (it reads the rank from distributedInfo, and a second
 * file of the same rank replaces the first). A folder per window gives
 * both: one file per rank and window. */
static int write_tensorboard(const struct trace *t, const char *run_dir,
			     const char *chrome_path, bool chrome_is_gz,
			     struct export_result *res, struct err *e)
{
	char tb[4096], dir[4096], path[4352], name[128];
	long long ms = (t->meta.base_time_ns + t->meta.end_ts) / 1000000;

	window_name(t, name, sizeof name);
	if (fsutil_join(tb, sizeof tb, run_dir, "tensorboard", e) != 0 ||
	    fsutil_join(dir, sizeof dir, tb, name, e) != 0 ||
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

/* Writes the window's CPU-sample files (stacks.h): stacks.txt and
 * cpu_functions.txt. */
static int write_stacks(const struct trace *t, struct export_result *res,
			struct err *e)
{
	static const struct {
		const char *name;
		int (*write)(const struct trace *, struct outfile *, struct err *);
	} files[] = {
		{ "stacks.txt", stacks_write_folded },
		{ "cpu_functions.txt", stacks_write_functions },
	};
	char path[4352];
	size_t i;

	for (i = 0; i < sizeof files / sizeof files[0]; i++) {
		struct outfile *f;

		snprintf(path, sizeof path, "%s/%s", res->dir, files[i].name);
		f = outfile_open(path, false, e);
		if (!f)
			return -1;
		if (files[i].write(t, f, e) != 0) {
			outfile_abort(f);
			return -1;
		}
		if (outfile_commit(f, e) != 0)
			return -1;
		note_file(res, path);
	}
	return 0;
}

/* Writes key_averages.txt into the window directory. */
static int write_key_averages(const struct trace *t, const struct export_opts *o,
			      enum key_avg_group group, enum key_avg_sort sort,
			      struct export_result *res, struct err *e)
{
	struct key_avg_table tab;
	char path[4352];
	int rc;

	snprintf(path, sizeof path, "%s/key_averages.txt", res->dir);
	if (key_averages_build(t, group, sort, &tab, e) != 0)
		return -1;
	rc = key_averages_write(&tab, o->row_limit, path, e);
	key_averages_free(&tab);
	if (rc == 0)
		note_file(res, path);
	return rc;
}

/* Writes memory_timeline.json and .html when the window has GPU
 * allocations or frees. */
static int write_memory_timeline(const struct trace *t, struct export_result *res,
				 struct err *e)
{
	struct memory_timeline m;
	char path[4352];
	int rc = 0;

	if (memory_timeline_build(t, &m, e) != 0)
		return -1;
	if (m.ndev) {
		snprintf(path, sizeof path, "%s/memory_timeline.json", res->dir);
		rc = memory_timeline_write_json(&m, t, path, e);
		if (rc == 0) {
			note_file(res, path);
			snprintf(path, sizeof path, "%s/memory_timeline.html", res->dir);
			rc = memory_timeline_write_html(&m, t, path, e);
			if (rc == 0)
				note_file(res, path);
		}
	}
	memory_timeline_free(&m);
	return rc;
}

/* Renders the summary (listing the files so far and itself), writes
 * summary.txt and keeps the text in res->summary. */
static int write_summary(const struct trace *t, struct export_result *res,
			 struct err *e)
{
	const char *files[EXPORT_MAX_FILES + 1];
	char path[4352];
	size_t i;
	char *text;

	snprintf(path, sizeof path, "%s/summary.txt", res->dir);
	for (i = 0; i < res->nfiles; i++)
		files[i] = res->files[i];
	files[i++] = path;
	text = summary_render(t, res->dir, files, i, e);
	if (!text)
		return -1;
	if (summary_write(path, text, e) != 0) {
		free(text);
		return -1;
	}
	note_file(res, path);
	res->summary = text;
	return 0;
}

int export_window(const struct trace *t, const struct export_opts *o,
		  struct export_result *res, struct err *e)
{
	char path[4352];
	bool gz = o->chrome_gzip;
	enum key_avg_sort sort = KEY_AVG_SORT_SELF_CPU_TIME_TOTAL;
	enum key_avg_group group = KEY_AVG_BY_NAME;

	memset(res, 0, sizeof *res);
	if (o->sort_by && key_averages_parse_sort(o->sort_by, &sort, e) != 0)
		return -1;
	if (o->group_by && key_averages_parse_group(o->group_by, &group, e) != 0)
		return -1;
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
	if (o->raw) {
		snprintf(path, sizeof path, "%s/%s", res->dir, PHB_FILE);
		if (phb_write(t, path, e) != 0)
			return -1;
		note_file(res, path);
	}
	if (o->key_averages && write_key_averages(t, o, group, sort, res, e) != 0)
		return -1;
	if (o->stacks && t->sampling.hz && write_stacks(t, res, e) != 0)
		return -1;
	if (o->memory_timeline && write_memory_timeline(t, res, e) != 0)
		return -1;
	if (o->summary && write_summary(t, res, e) != 0)
		return -1;
	return 0;
}

int export_text_file(struct export_result *res, const char *name,
		     const char *text, struct err *e)
{
	char path[4352];

	snprintf(path, sizeof path, "%s/%s", res->dir, name);
	if (outfile_write_text(path, text, e) != 0)
		return -1;
	note_file(res, path);
	return 0;
}

int export_summary(const struct trace *t, struct export_result *res,
		   struct err *e)
{
	return write_summary(t, res, e);
}

void export_result_free(struct export_result *res)
{
	size_t i;

	for (i = 0; i < res->nfiles; i++)
		free(res->files[i]);
	res->nfiles = 0;
	free(res->summary);
	res->summary = NULL;
}

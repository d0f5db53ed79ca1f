/* export — writes one window's files (see export.h). */
#include "export.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chrome_writer.h"
#include "key_averages.h"
#include "op_stacks.h"
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

/* Remembers the file `name` written in the window directory in *res. */
static void note_file(struct export_result *res, const struct outdir *d,
		      const char *name)
{
	size_t n = strlen(d->path) + strlen(name) + 2;

	if (res->nfiles < EXPORT_MAX_FILES) {
		res->files[res->nfiles] = malloc(n);
		if (res->files[res->nfiles]) {
			snprintf(res->files[res->nfiles], n, "%s/%s", d->path, name);
			res->nfiles++;
		}
	}
}

/* "window<K>_steps<a>-<b>" ("recorder<K>_..." for a flight recorder
 * dump; "_<suffix>" after it for a job-wide one): the window's folder name, in its rank's folder
 * and in the TensorBoard folder. */
static void window_name(const struct trace *t, char *out, size_t size)
{
	snprintf(out, size, "%s%u_steps%llu-%llu%s%s",
		 t->meta.recorder ? "recorder" : "window", t->meta.window,
		 (unsigned long long)t->meta.first_step,
		 (unsigned long long)t->meta.last_step,
		 t->meta.suffix && t->meta.suffix[0] ? "_" : "",
		 t->meta.suffix && t->meta.suffix[0] ? t->meta.suffix : "");
}

/* Creates <run>/rank<R>/window<K>_steps<a>-<b> and opens it as res->out
 * (its path in res->dir). A window name another process of this rank took
 * (a parent, a sibling) gets a ".pid<P>" suffix instead of being shared.
 * `run` is the open run directory. */
static int make_window_dir(const struct trace *t, const struct outdir *run,
			   struct export_result *res, struct err *e)
{
	struct outdir rank;
	char name[160], base[128];
	int rc, k;

	snprintf(name, sizeof name, "rank%d", t->meta.rank);
	if (outdir_sub(run, name, false, &rank, e) != 0)
		return -1;
	window_name(t, base, sizeof base);
	snprintf(name, sizeof name, "%s", base);
	rc = outdir_sub(&rank, name, true, &res->out, e);
	for (k = 1; rc == 1 && k <= 100; k++) {
		if (k == 1)
			snprintf(name, sizeof name, "%s.pid%d", base, (int)t->meta.pid);
		else
			snprintf(name, sizeof name, "%s.pid%d-%d", base, (int)t->meta.pid, k);
		rc = outdir_sub(&rank, name, true, &res->out, e);
	}
	if (rc == 1)
		rc = err_set(e, "cannot create a window directory in '%s': '%s' and 100 "
			     "variants exist", rank.path, base);
	outdir_close(&rank);
	if (rc == 0)
		snprintf(res->dir, sizeof res->dir, "%s", res->out.path);
	return rc;
}

/* Writes `name` in d with `write` (a writer into an outfile). */
static int write_with(const struct trace *t, const struct outdir *d, const char *name,
		      bool gzip,
		      int (*write)(const struct trace *, struct outfile *, struct err *),
		      struct err *e)
{
	struct outfile *f = outfile_openat(d, name, gzip, e);

	if (!f)
		return -1;
	if (write(t, f, e) != 0) {
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
static int write_tensorboard(const struct trace *t, const struct outdir *run,
			     const char *chrome_name, bool chrome_is_gz,
			     struct export_result *res, struct err *e)
{
	struct outdir tb, win;
	char name[512];
	long long ms = (t->meta.base_time_ns + t->meta.end_ts) / 1000000;
	int rc;

	if (outdir_sub(run, "tensorboard", false, &tb, e) != 0)
		return -1;
	window_name(t, name, sizeof name);
	rc = outdir_sub(&tb, name, false, &win, e);
	outdir_close(&tb);
	if (rc != 0)
		return -1;
	snprintf(name, sizeof name, "%s_%d.%lld.pt.trace.json.gz",
		 t->meta.hostname ? t->meta.hostname : "host", (int)t->meta.pid, ms);
	rc = chrome_is_gz ? outfile_copyat(&res->out, chrome_name, &win, name, e)
			  : write_with(t, &win, name, true, chrome_writer_write, e);
	if (rc == 0)
		note_file(res, &win, name);
	outdir_close(&win);
	return rc;
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
	size_t i;

	for (i = 0; i < sizeof files / sizeof files[0]; i++) {
		if (write_with(t, &res->out, files[i].name, false, files[i].write, e) != 0)
			return -1;
		note_file(res, &res->out, files[i].name);
	}
	return 0;
}

/* Writes operator_stacks.txt (op_stacks.h) into the window directory. */
static int write_op_stacks(const struct trace *t, enum op_stacks_metric metric,
			   struct export_result *res, struct err *e)
{
	static const char name[] = "operator_stacks.txt";
	struct outfile *f = outfile_openat(&res->out, name, false, e);

	if (!f)
		return -1;
	if (op_stacks_write(t, metric, f, e) != 0) {
		outfile_abort(f);
		return -1;
	}
	if (outfile_commit(f, e) != 0)
		return -1;
	note_file(res, &res->out, name);
	return 0;
}

/* Writes key_averages.txt into the window directory. */
static int write_key_averages(const struct trace *t, const struct export_opts *o,
			      enum key_avg_group group, enum key_avg_sort sort,
			      struct export_result *res, struct err *e)
{
	struct key_avg_opts ko = { group, o->group_by_input_shape, o->group_by_stack_n };
	struct key_avg_table tab;
	char *text;
	int rc;

	if (key_averages_build_with(t, &ko, sort, o->row_limit, &tab, e) != 0)
		return -1;
	text = key_averages_format(&tab, o->row_limit);
	key_averages_free(&tab);
	if (!text)
		return err_set(e, "out of memory formatting '%s/key_averages.txt'", res->dir);
	rc = outfile_write_textat(&res->out, "key_averages.txt", text, e);
	free(text);
	if (rc == 0)
		note_file(res, &res->out, "key_averages.txt");
	return rc;
}

/* Writes memory_timeline.json and .html when the window has GPU
 * allocations or frees. */
static int write_memory_timeline(const struct trace *t, struct export_result *res,
				 struct err *e)
{
	struct memory_timeline m;
	int rc = 0;

	if (memory_timeline_build(t, &m, e) != 0)
		return -1;
	if (m.ndev) {
		rc = memory_timeline_write_json(&m, t, &res->out, "memory_timeline.json", e);
		if (rc == 0) {
			note_file(res, &res->out, "memory_timeline.json");
			rc = memory_timeline_write_html(&m, t, &res->out,
							"memory_timeline.html", e);
			if (rc == 0)
				note_file(res, &res->out, "memory_timeline.html");
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
	if (outfile_write_textat(&res->out, "summary.txt", text, e) != 0) {
		free(text);
		return -1;
	}
	note_file(res, &res->out, "summary.txt");
	res->summary = text;
	return 0;
}

int export_window(const struct trace *t, const struct export_opts *o,
		  struct export_result *res, struct err *e)
{
	bool gz = o->chrome_gzip;
	const char *chrome = gz ? "trace.json.gz" : "trace.json";
	enum key_avg_sort sort = KEY_AVG_SORT_SELF_CPU_TIME_TOTAL;
	enum key_avg_group group = KEY_AVG_BY_NAME;
	enum op_stacks_metric metric = OP_STACKS_SELF_CPU;
	struct outdir run;
	int rc = -1;

	memset(res, 0, sizeof *res);
	res->out.fd = -1;
	if (o->sort_by && key_averages_parse_sort(o->sort_by, &sort, e) != 0)
		return -1;
	if (o->group_by && key_averages_parse_group(o->group_by, &group, e) != 0)
		return -1;
	if (o->stacks_metric && op_stacks_parse_metric(o->stacks_metric, &metric, e) != 0)
		return -1;
	if (o->out_dir ? outdir_open_run_in(o->out_dir, o->run_dir, o->run_id, o->job, &run,
					    &res->run_moved, e) != 0
		       : outdir_open_run(o->run_dir, o->run_id, o->job, &run, &res->run_moved,
					 e) != 0)
		return -1;
	snprintf(res->run_dir, sizeof res->run_dir, "%s", run.path);
	if (make_window_dir(t, &run, res, e) != 0)
		goto out;
	if (o->chrome) {
		if (write_with(t, &res->out, chrome, gz, chrome_writer_write, e) != 0)
			goto out;
		note_file(res, &res->out, chrome);
	}
	if (o->tensorboard &&
	    write_tensorboard(t, &run, chrome, o->chrome && gz, res, e) != 0)
		goto out;
	if (o->raw) {
		if (write_with(t, &res->out, PHB_FILE, false, phb_write_to, e) != 0)
			goto out;
		note_file(res, &res->out, PHB_FILE);
	}
	if (o->key_averages && write_key_averages(t, o, group, sort, res, e) != 0)
		goto out;
	if (o->stacks && t->sampling.hz && write_stacks(t, res, e) != 0)
		goto out;
	if (o->stacks && op_stacks_any(t) && write_op_stacks(t, metric, res, e) != 0)
		goto out;
	if (o->memory_timeline && write_memory_timeline(t, res, e) != 0)
		goto out;
	if (o->summary && write_summary(t, res, e) != 0)
		goto out;
	rc = 0;
out:
	outdir_close(&run);
	return rc;
}

int export_text_file(struct export_result *res, const char *name,
		     const char *text, struct err *e)
{
	if (outfile_write_textat(&res->out, name, text, e) != 0)
		return -1;
	note_file(res, &res->out, name);
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
	outdir_close(&res->out);
}

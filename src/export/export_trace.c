/* export_trace — the Chrome trace, in the window's directory (trace.json,
 * trace.json.gz) and under TensorBoard's naming (export_internal.h). */
#include "export_internal.h"

#include <stdio.h>

#include "chrome_writer.h"

/* The Chrome trace's name in the window's directory. */
static const char *chrome_name(const struct export_opts *o)
{
	return o->chrome_gzip ? "trace.json.gz" : "trace.json";
}

/* Writes trace.json[.gz] into the window's directory. */
static int write_chrome(const struct export_ctx *c, struct err *e)
{
	return export_write_listed(c, chrome_name(c->o), c->o->chrome_gzip,
				   chrome_writer_write, e);
}

/* <run_dir>/tensorboard/window<K>_steps<a>-<b>/<host>_<pid>.<ms>.pt.trace.json.gz:
 * TensorBoard's profiler plugin takes each folder under its logdir that
 * holds *.pt.trace.json[.gz] files as a run and each file as a worker
 * (<worker>.<timestamp>); Holistic Trace Analysis wants a flat folder of
 * one file per rank (it reads the rank from distributedInfo, and a second
 * file of the same rank replaces the first). A folder per window gives
 * both: one file per rank and window. A trace.json.gz written before
 * (export_out_chrome) is copied, not written again. */
static int write_tensorboard(const struct export_ctx *c, struct err *e)
{
	const struct trace *t = c->t;
	bool chrome_is_gz = c->o->chrome && c->o->chrome_gzip;
	struct outdir tb, win;
	char name[512];
	long long ms = (t->meta.base_time_ns + t->meta.end_ts) / 1000000;
	int rc;

	if (outdir_sub(c->run, "tensorboard", false, &tb, e) != 0)
		return -1;
	export_window_name(t, name, sizeof name);
	rc = outdir_sub(&tb, name, false, &win, e);
	outdir_close(&tb);
	if (rc != 0)
		return -1;
	snprintf(name, sizeof name, "%s_%d.%lld.pt.trace.json.gz",
		 t->meta.hostname ? t->meta.hostname : "host", (int)t->meta.pid, ms);
	rc = chrome_is_gz
		? outfile_copyat(&c->res->out, chrome_name(c->o), &win, name, e)
		: export_write_with(t, &win, name, true, chrome_writer_write, e);
	if (rc == 0)
		export_note_file(c->res, &win, name);
	outdir_close(&win);
	return rc;
}

const struct export_output export_out_chrome = {
	"chrome", offsetof(struct export_opts, chrome), NULL, write_chrome
};

const struct export_output export_out_tensorboard = {
	"tensorboard", offsetof(struct export_opts, tensorboard), NULL, write_tensorboard
};

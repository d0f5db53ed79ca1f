/* export — writes one window's files (see export.h): its folder, then
 * each output of the table below that the options turn on. */
#include "export.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export_internal.h"

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
	export_window_name(t, base, sizeof base);
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

/* The outputs, in the order their files are written: summary.txt last,
 * as it lists the others (export_internal.h). */
static const struct export_output *const outputs[] = {
	&export_out_chrome,
	&export_out_tensorboard,
	&export_out_raw,
	&export_out_keyavg,
	&export_out_stacks,
	&export_out_memtl,
	&export_out_summary,
};

#define NOUTPUTS (sizeof outputs / sizeof outputs[0])

/* True when *o turns output `out` on. */
static bool output_on(const struct export_output *out, const struct export_opts *o)
{
	return *(const bool *)((const char *)o + out->flag);
}

/* Checks every output's settings, on or not: 0, or -1 with *e set. */
static int check_outputs(const struct export_opts *o, struct err *e)
{
	size_t i;

	for (i = 0; i < NOUTPUTS; i++)
		if (outputs[i]->check && outputs[i]->check(o, e) != 0)
			return -1;
	return 0;
}

/* Writes the outputs *c->o turns on, in order: 0, or -1 with *e set at
 * the first failure (the files before it stay listed). */
static int write_outputs(const struct export_ctx *c, struct err *e)
{
	size_t i;

	for (i = 0; i < NOUTPUTS; i++)
		if (output_on(outputs[i], c->o) && outputs[i]->write(c, e) != 0)
			return -1;
	return 0;
}

int export_window(const struct trace *t, const struct export_opts *o,
		  struct export_result *res, struct err *e)
{
	struct outdir run;
	struct export_ctx c = { t, o, &run, res };
	int rc = -1;

	memset(res, 0, sizeof *res);
	res->out.fd = -1;
	if (check_outputs(o, e) != 0)
		return -1;
	if (o->out_dir ? outdir_open_run_in(o->out_dir, o->run_dir, o->run_id, o->job, &run,
					    &res->run_moved, e) != 0
		       : outdir_open_run(o->run_dir, o->run_id, o->job, &run, &res->run_moved,
					 e) != 0)
		return -1;
	snprintf(res->run_dir, sizeof res->run_dir, "%s", run.path);
	if (make_window_dir(t, &run, res, e) == 0 && write_outputs(&c, e) == 0)
		rc = 0;
	outdir_close(&run);
	return rc;
}

int export_text_file(struct export_result *res, const char *name,
		     const char *text, struct err *e)
{
	if (outfile_write_textat(&res->out, name, text, e) != 0)
		return -1;
	export_note_file(res, &res->out, name);
	return 0;
}

int export_summary(const struct trace *t, struct export_result *res,
		   struct err *e)
{
	return export_write_summary(t, res, e);
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

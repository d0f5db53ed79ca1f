/* summary — a window's summary (see summary.h). */
#include "summary.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_summary.h"
#include "key_averages.h"
#include "outfile.h"
#include "phases.h"
#include "stacks.h"
#include "textbuf.h"

#define NAME_COLS 40      /* widest range name shown */
#define MAX_RUNS 8        /* step runs listed before "..." */
#define PHASE_ROWS 8      /* steps listed in the phase table */

static int cmp_i64(const void *pa, const void *pb)
{
	int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;

	return a < b ? -1 : a > b;
}

/* The q-quantile of sorted x[0..n) (n > 0), interpolating linearly. */
static int64_t quantile(const int64_t *x, size_t n, double q)
{
	double rank = q * (double)(n - 1);
	size_t lo = (size_t)rank;
	double frac = rank - (double)lo;

	if (lo + 1 >= n)
		return x[n - 1];
	return x[lo] + (int64_t)((double)(x[lo + 1] - x[lo]) * frac + 0.5);
}

int summary_step_stats(const struct trace *t, struct summary_steps *out,
		       struct err *e)
{
	int64_t *d;
	size_t i;

	memset(out, 0, sizeof *out);
	out->captured = t->nsteps;
	if (t->nsteps == 0)
		return 0;
	d = malloc(t->nsteps * sizeof *d);
	if (!d)
		return err_set(e, "out of memory computing the step times");
	for (i = 0; i < t->nsteps; i++) {
		if (t->steps[i].partial)
			out->partial++;
		else
			d[out->n++] = t->steps[i].dur;
	}
	if (out->n > 0) {
		qsort(d, out->n, sizeof *d, cmp_i64);
		out->min = d[0];
		out->max = d[out->n - 1];
		out->median = quantile(d, out->n, 0.5);
		out->p90 = quantile(d, out->n, 0.9);
	}
	free(d);
	return 0;
}

/* Appends the step numbers of `t` (partial ones only, or all) as
 * comma-separated runs "10-13, 20", at most MAX_RUNS of them. */
static void put_step_runs(struct textbuf *tb, const struct trace *t, bool partial_only)
{
	size_t i = 0, runs = 0;

	while (i < t->nsteps) {
		uint64_t a, b;

		if (partial_only && !t->steps[i].partial) {
			i++;
			continue;
		}
		a = b = t->steps[i++].step;
		while (i < t->nsteps && t->steps[i].step == b + 1 &&
		       (!partial_only || t->steps[i].partial))
			b = t->steps[i++].step;
		if (runs++ == MAX_RUNS) {
			textbuf_puts(tb, ", ...");
			return;
		}
		textbuf_printf(tb, runs > 1 ? ", %llu" : "%llu", (unsigned long long)a);
		if (b != a)
			textbuf_printf(tb, "-%llu", (unsigned long long)b);
	}
}

/* Appends a C string from the program or the system, shown safely. */
static void put_name(struct textbuf *tb, const char *s)
{
	textbuf_put_name(tb, s, strlen(s));
}

static void put_header(struct textbuf *tb, const struct trace *t)
{
	const struct trace_meta *m = &t->meta;
	char reason[64 * 4 + 4], buf[32];

	textbuf_name_fit(m->reason ? m->reason : "schedule", 64, reason, sizeof reason);
	textbuf_printf(tb, "profhost summary: %s %u, steps %llu-%llu (%s), rank %d",
		       m->recorder ? "recorder dump" : "window", m->window, (unsigned long long)m->first_step,
		       (unsigned long long)m->last_step, reason, m->rank);
	if (m->world_size > 0)
		textbuf_printf(tb, " of %d", m->world_size);
	textbuf_puts(tb, "\n");
	put_name(tb, m->program ? m->program : "?");
	textbuf_printf(tb, " (pid %d)", (int)m->pid);
	if (m->hostname) {
		textbuf_puts(tb, " on ");
		put_name(tb, m->hostname);
	}
	if (m->run) {
		textbuf_puts(tb, ", run ");
		put_name(tb, m->run);
	}
	textbuf_printf(tb, "\n%s: %s, %llu events written\n\n", m->recorder ? "Dump" : "Window",
		       key_averages_format_time(m->end_ts - m->start_ts, buf),
		       (unsigned long long)t->counters.events);
}

static void put_steps(struct textbuf *tb, const struct trace *t,
		      const struct summary_steps *st)
{
	char a[32], b[32], c[32], d[32];

	textbuf_printf(tb, "Steps: %zu captured", st->captured);
	if (st->captured) {
		textbuf_puts(tb, " (");
		put_step_runs(tb, t, false);
		textbuf_puts(tb, ")");
	}
	if (st->partial) {
		textbuf_printf(tb, "; %zu partial (", st->partial);
		put_step_runs(tb, t, true);
		/* the hang watchdog's dump holds the stalled step so far */
		textbuf_puts(tb, t->meta.recorder && t->meta.reason &&
			     strncmp(t->meta.reason, "hang ", 5) == 0 ?
			     ", still running: stalled" : ", cut short by exit");
		textbuf_puts(tb, "), not in the step times");
	}
	textbuf_puts(tb, "\n");
	if (st->n == 0) {
		textbuf_puts(tb, "Step time: no complete step\n\n");
		return;
	}
	textbuf_printf(tb, "Step time: min %s  median %s  p90 %s  max %s  (%zu step%s)\n\n",
		       key_averages_format_time(st->min, a),
		       key_averages_format_time(st->median, b),
		       key_averages_format_time(st->p90, c),
		       key_averages_format_time(st->max, d), st->n, st->n == 1 ? "" : "s");
}

static void put_ranges(struct textbuf *tb, const struct trace *t,
		       const struct key_avg_table *tab)
{
	size_t i, n = tab->nrows < SUMMARY_TOP ? tab->nrows : SUMMARY_TOP, width = 4;
	int64_t window = t->meta.end_ts - t->meta.start_ts;
	char name[NAME_COLS * 4 + 4], a[32], b[32], c[32];

	if (n == 0) {
		textbuf_puts(tb, "Top ranges by self CPU time: none\n\n");
		return;
	}
	for (i = 0; i < n; i++) {
		textbuf_name_fit(tab->rows[i].key, NAME_COLS, name, sizeof name);
		if (textbuf_cols(name) > width)
			width = textbuf_cols(name);
	}
	textbuf_puts(tb, "Top ranges by self CPU time:\n  ");
	textbuf_field(tb, "Name", width, false);
	textbuf_puts(tb, "     Calls      Self CPU     CPU total  % of window\n");
	for (i = 0; i < n; i++) {
		const struct key_avg_row *r = &tab->rows[i];

		textbuf_name_fit(r->key, NAME_COLS, name, sizeof name);
		textbuf_puts(tb, "  ");
		textbuf_field(tb, name, width, false);
		textbuf_printf(tb, "  %8llu  %12s  %12s  %11s\n", (unsigned long long)r->count,
			       key_averages_format_time(r->self_cpu_ns, a),
			       key_averages_format_time(r->cpu_total_ns, b),
			       window > 0 ? key_averages_format_share(r->self_cpu_ns, window, c)
					  : "-");
	}
	textbuf_puts(tb, "\n");
}

static void put_counters(struct textbuf *tb, const struct trace_counters *c,
			 bool recorder)
{
	struct {
		uint64_t n;
		const char *what;
	} lines[] = {
		{ c->dropped_buffer - c->dropped_memory, recorder ?
		  "events dropped: the recorder's event buffers were full; "
		  "raise prof.recorder{mb=...} or lower its steps" :
		  "events dropped: the event buffers were full; "
		  "raise prof.capture{buffer_mb=...}" },
		{ c->dropped_memory, recorder ?
		  "events dropped: the trace built from the recorder's event "
		  "buffers would have outgrown prof.recorder{mb=...} (a name per "
		  "range, or many marks?); raise mb or give ranges names that repeat" :
		  "events dropped: the trace built from the event buffers would "
		  "have outgrown prof.capture{buffer_mb=...} (a name per range, or "
		  "many marks?); raise buffer_mb or give ranges names that repeat" },
		{ c->pool_errno ? 0 : c->dropped_noslot, recorder ?
		  "events dropped: the recorder's next event buffer was still "
		  "held by a dump being written; raise prof.recorder{mb=...} or "
		  "dump less often" :
		  "events dropped: the previous window was still being "
		  "written; space the windows out (prof.schedule{wait=...})" },
		{ c->pool_errno ? c->dropped_noslot : 0,
		  "events dropped: the window's event buffer could not be mapped "
		  "(a memory limit such as ulimit -v?); lower "
		  "prof.capture{buffer_mb=...} or raise the limit" },
		{ c->gpu_dropped, "GPU records dropped by CUPTI; raise prof.capture{buffer_mb=...}" },
		{ c->dropped_steps, "steps not recorded: more steps than the window's step "
				    "budget (one per 256 bytes of prof.capture{buffer_mb=...})" },
		{ c->windows_skipped, "earlier windows not written: the host was still "
				      "writing others; space the windows out "
				      "(prof.schedule{wait=...})" },
		{ c->unbalanced_pops, "range pops had no open range (unbalanced push/pop "
				      "in the program)" },
		{ c->clipped, "ranges cut at a window edge (begun before it or still "
			      "open at its end)" },
	};
	size_t i;
	bool any = false;

	for (i = 0; i < sizeof lines / sizeof lines[0]; i++)
		any |= lines[i].n != 0;
	if (!any) {
		textbuf_puts(tb, "Drops: none\n\n");
		return;
	}
	textbuf_puts(tb, "Drops and warnings:\n");
	for (i = 0; i < sizeof lines / sizeof lines[0]; i++)
		if (lines[i].n)
			textbuf_printf(tb, "  %llu %s\n", (unsigned long long)lines[i].n,
				       lines[i].what);
	textbuf_puts(tb, "\n");
}

/* The CPU samples, with the rate asked and the rate the clock gave. */
static void put_samples(struct textbuf *tb, const struct trace *t)
{
	uint64_t samples;
	uint32_t given = stacks_given_hz(t, &samples);

	if (!t->sampling.hz)
		return;
	textbuf_printf(tb, "CPU samples: %llu (%s clock, %u Hz asked, ",
		       (unsigned long long)samples,
		       t->sampling.wall_clock ? "wall" : "CPU-time", t->sampling.hz);
	if (samples)
		textbuf_printf(tb, "%u Hz given", given);
	else
		textbuf_puts(tb, "none taken");
	if (t->sampling.lost)
		textbuf_printf(tb, ", %llu lost", (unsigned long long)t->sampling.lost);
	textbuf_puts(tb, given && given < t->sampling.hz * 8 / 10 && !t->sampling.wall_clock ?
		     "; CPU-time timers fire at the kernel's tick: each sample stands "
		     "for the periods it covers)\n\n" : ")\n\n");
}

/* The per-step phase breakdown, when the window has phases (Python). */
static int put_phases(struct textbuf *tb, const struct trace *t, struct err *e)
{
	char *text;

	if (phases_render(t, PHASE_ROWS, &text, e) != 0)
		return -1;
	if (text) {
		textbuf_puts(tb, text);
		textbuf_puts(tb, "\n");
		free(text);
	}
	return 0;
}

/* Dense FP16/BF16 tensor-core peaks (TFLOP/s) of common GPUs, by a
 * substring of the device name; the first match wins. */
static const struct {
	const char *name;
	double tflops;
} gpu_peaks[] = {
	{ "H200", 989.0 }, { "H100 PCIe", 756.0 }, { "H100", 989.0 },
	{ "A100", 312.0 }, { "A10G", 125.0 }, { "A10", 125.0 }, { "L40S", 362.0 },
	{ "L4", 121.0 }, { "V100", 125.0 }, { "T4", 65.0 }, { "RTX 4090", 165.0 },
	{ "RTX 3090", 71.0 },
};

/* The peak for the FLOP/s share: the policy's, else the first GPU's from
 * gpu_peaks, else 0 (none: a CPU, an unknown GPU). */
static double peak_tflops(const struct trace *t)
{
	size_t i;

	if (t->meta.peak_tflops > 0)
		return t->meta.peak_tflops;
	if (!t->ndevices || !t->devices[0].name)
		return 0;
	for (i = 0; i < sizeof gpu_peaks / sizeof gpu_peaks[0]; i++)
		if (strstr(t->devices[0].name, gpu_peaks[i].name))
			return gpu_peaks[i].tflops;
	return 0;
}

/* Achieved FLOP/s per step: the "flops" of the torch operators that start
 * in each step (prof.capture{with_flops}), over the step's time. Nothing
 * when no operator has FLOPs. */
static void put_flops(struct textbuf *tb, const struct trace *t)
{
	double peak = peak_tflops(t);
	uint64_t total = 0, *per;
	size_t i, j;

	per = calloc(t->nsteps ? t->nsteps : 1, sizeof *per);
	if (!per)
		return;
	for (i = 0; i < t->nev; i++) {
		const struct trace_event *ev = &t->ev[i];

		if (ev->cat != TRACE_CAT_CPU_OP || !ev->nargs)
			continue;
		for (j = ev->args; j < (size_t)ev->args + ev->nargs && j < t->nargs; j++) {
			const struct trace_arg *a = &t->args[j];
			size_t k;

			if (a->type != TRACE_ARG_UINT || strcmp(trace_str(t, a->key), TRACE_ARG_FLOPS))
				continue;
			total += a->v.u;
			for (k = 0; k < t->nsteps; k++)
				if (ev->ts >= t->steps[k].ts &&
				    ev->ts < t->steps[k].ts + t->steps[k].dur)
					per[k] += a->v.u;
		}
	}
	if (total) {
		textbuf_printf(tb, "FLOPs (torch operators, torch's formulas): %.6f GFLOP in the "
			       "window", (double)total / 1e9);
		if (peak > 0)
			textbuf_printf(tb, "; peak %.1f TFLOP/s", peak);
		textbuf_puts(tb, "\n  step       GFLOP     GFLOP/s");
		textbuf_puts(tb, peak > 0 ? "   of peak\n" : "\n");
		for (i = 0; i < t->nsteps; i++) {
			double s = t->steps[i].dur > 0 ? (double)t->steps[i].dur / 1e9 : 0;
			double rate = s > 0 ? (double)per[i] / s / 1e9 : 0;

			textbuf_printf(tb, "  %4llu  %10.6f  %10.3f",
				       (unsigned long long)t->steps[i].step,
				       (double)per[i] / 1e9, rate);
			if (peak > 0)
				textbuf_printf(tb, "  %8.3f%%", rate / (peak * 1e3) * 100.0);
			textbuf_puts(tb, "\n");
		}
		textbuf_puts(tb, "\n");
	}
	free(per);
}

/* One-time notices the capture sources left in the trace. */
static void put_notes(struct textbuf *tb, const struct trace *t)
{
	const char *p = t->meta.notes;

	if (!p || !*p)
		return;
	textbuf_puts(tb, "Notes:\n");
	while (*p) {
		size_t n = strcspn(p, "\n");

		textbuf_puts(tb, "  ");
		textbuf_put_name(tb, p, n);
		textbuf_puts(tb, "\n");
		p += n + (p[n] == '\n');
	}
	textbuf_puts(tb, "\n");
}

/* True when `f` names a file directly inside `dir`. */
static bool in_dir(const char *f, const char *dir)
{
	size_t n = dir ? strlen(dir) : 0;

	return dir && strncmp(f, dir, n) == 0 && f[n] == '/' && !strchr(f + n + 1, '/');
}

/* Files in the window directory by base name on one line, others whole. */
static void put_files(struct textbuf *tb, const char *dir, const char *const *files,
		      size_t nfiles)
{
	size_t i;

	if (dir) {
		textbuf_puts(tb, "Directory: ");
		put_name(tb, dir);
		textbuf_puts(tb, "\n");
	}
	textbuf_puts(tb, nfiles ? "Files:" : "Files: none");
	for (i = 0; i < nfiles; i++)
		if (in_dir(files[i], dir)) {
			textbuf_puts(tb, " ");
			put_name(tb, strrchr(files[i], '/') + 1);
		}
	textbuf_puts(tb, "\n");
	for (i = 0; i < nfiles; i++)
		if (!in_dir(files[i], dir)) {
			textbuf_puts(tb, "  ");
			put_name(tb, files[i]);
			textbuf_puts(tb, "\n");
		}
}

char *summary_render(const struct trace *t, const char *dir,
		     const char *const *files, size_t nfiles, struct err *e)
{
	struct summary_steps st;
	struct key_avg_table tab;
	struct gpu_summary gpu;
	struct textbuf tb;
	char *s;

	if (summary_step_stats(t, &st, e) != 0 || gpu_summary_compute(t, &gpu, e) != 0)
		return NULL;
	if (key_averages_build_top(t, KEY_AVG_BY_NAME, KEY_AVG_SORT_SELF_CPU_TIME_TOTAL,
				   SUMMARY_TOP, &tab, e) != 0)
		return NULL;
	textbuf_init(&tb);
	put_header(&tb, t);
	put_steps(&tb, t, &st);
	if (put_phases(&tb, t, e) != 0) {
		key_averages_free(&tab);
		textbuf_free(&tb);
		return NULL;
	}
	put_ranges(&tb, t, &tab);
	put_samples(&tb, t);
	gpu_summary_put(&tb, &gpu);
	put_flops(&tb, t);
	put_counters(&tb, &t->counters, t->meta.recorder);
	put_notes(&tb, t);
	put_files(&tb, dir, files, nfiles);
	key_averages_free(&tab);
	s = textbuf_take(&tb);
	if (!s)
		err_set(e, "out of memory rendering the summary");
	return s;
}

int summary_write(const char *path, const char *text, struct err *e)
{
	return outfile_write_text(path, text, e);
}

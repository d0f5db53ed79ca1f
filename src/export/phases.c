/* phases — the per-step phase breakdown (see phases.h). */
#include "phases.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PHASE_PREFIX "phase:"
#define NCOLS (PHASES_N + 2) /* total, the phases, other */

const char *const phases_names[PHASES_N] = {
	"data", "forward", "backward", "optimizer"
};

/* The phase index of event `e`, or -1 when it is not a phase range. */
static int phase_of(const struct trace *t, const struct trace_event *e)
{
	const char *name;
	int i;

	if (e->cat != TRACE_CAT_USER_ANNOTATION || e->ph != TRACE_PH_COMPLETE ||
	    (e->flags & TRACE_F_STEP))
		return -1;
	name = trace_str(t, e->name);
	if (!name || strncmp(name, PHASE_PREFIX, sizeof PHASE_PREFIX - 1) != 0)
		return -1;
	name += sizeof PHASE_PREFIX - 1;
	for (i = 0; i < PHASES_N; i++)
		if (strcmp(name, phases_names[i]) == 0)
			return i;
	return -1;
}

/* The step of `t` whose span holds `ts` on thread `tid`, or -1. Steps of
 * one window follow each other in time. */
static long step_at(const struct trace *t, int64_t ts, int32_t tid)
{
	size_t lo = 0, hi = t->nsteps;

	while (lo < hi) { /* first step starting after ts */
		size_t mid = lo + (hi - lo) / 2;
		if (t->steps[mid].ts <= ts)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return -1;
	lo--;
	if (ts >= t->steps[lo].ts + t->steps[lo].dur || t->steps[lo].tid != tid)
		return -1;
	return (long)lo;
}

int phases_compute(const struct trace *t, struct phases_row **rows, size_t *n,
		   struct err *e)
{
	struct phases_row *r;
	size_t i;
	int any = 0, k;

	*rows = NULL;
	*n = 0;
	if (t->nsteps == 0)
		return 0;
	r = calloc(t->nsteps, sizeof *r);
	if (!r)
		return err_set(e, "out of memory computing the step phases");
	for (i = 0; i < t->nsteps; i++) {
		r[i].step = t->steps[i].step;
		r[i].total = t->steps[i].dur;
		r[i].partial = t->steps[i].partial;
	}
	for (i = 0; i < t->nev; i++) {
		const struct trace_event *ev = &t->ev[i];
		long s;

		k = phase_of(t, ev);
		if (k < 0)
			continue;
		s = step_at(t, ev->ts, ev->tid);
		if (s < 0)
			continue;
		r[s].phase[k] += ev->dur;
		any = 1;
	}
	if (!any) {
		free(r);
		return 0;
	}
	for (i = 0; i < t->nsteps; i++) {
		r[i].other = r[i].total;
		for (k = 0; k < PHASES_N; k++)
			r[i].other -= r[i].phase[k];
	}
	*rows = r;
	*n = t->nsteps;
	return 1;
}

static int cmp_i64(const void *pa, const void *pb)
{
	int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;

	return a < b ? -1 : a > b;
}

/* Column c of a row: 0 total, 1..PHASES_N the phases, then other. */
static int64_t col(const struct phases_row *r, int c)
{
	if (c == 0)
		return r->total;
	if (c <= PHASES_N)
		return r->phase[c - 1];
	return r->other;
}

/* Median of column c over the complete steps (all steps when none is
 * complete); `tmp` holds n values. */
static int64_t col_median(const struct phases_row *r, size_t n, int c, int64_t *tmp)
{
	size_t i, m = 0;
	int all = 1;

	for (i = 0; i < n; i++)
		if (!r[i].partial)
			all = 0;
	for (i = 0; i < n; i++)
		if (all || !r[i].partial)
			tmp[m++] = col(&r[i], c);
	qsort(tmp, m, sizeof *tmp, cmp_i64);
	return m % 2 ? tmp[m / 2] : (tmp[m / 2 - 1] + tmp[m / 2]) / 2;
}

static void put_ms(FILE *f, int64_t ns)
{
	fprintf(f, " %10.3f", (double)ns / 1e6);
}

int phases_render(const struct trace *t, size_t max_rows, char **out,
		  struct err *e)
{
	struct phases_row *r;
	size_t n, i, len;
	int64_t *tmp, sum[NCOLS] = { 0 };
	char *buf = NULL;
	FILE *f;
	int rc, c, all = 1;

	*out = NULL;
	rc = phases_compute(t, &r, &n, e);
	if (rc <= 0)
		return rc;
	tmp = malloc(n * sizeof *tmp);
	f = tmp ? open_memstream(&buf, &len) : NULL;
	if (!f) {
		free(tmp);
		free(r);
		return err_set(e, "out of memory rendering the step phases");
	}
	fputs("Step phases (ms): where each step's time went\n", f);
	fprintf(f, "%8s %10s", "step", "total");
	for (c = 0; c < PHASES_N; c++)
		fprintf(f, " %10s", phases_names[c]);
	fprintf(f, " %10s\n", "other");
	for (i = 0; i < n; i++) {
		if (!r[i].partial)
			all = 0;
		if (max_rows && i >= max_rows)
			continue;
		fprintf(f, "%7llu%c", (unsigned long long)r[i].step,
			r[i].partial ? '*' : ' ');
		for (c = 0; c < NCOLS; c++)
			put_ms(f, col(&r[i], c));
		fputc('\n', f);
	}
	if (max_rows && n > max_rows)
		fprintf(f, "%8s (%zu more step%s)\n", "...", n - max_rows,
			n - max_rows == 1 ? "" : "s");
	fprintf(f, "%8s", "median");
	for (c = 0; c < NCOLS; c++)
		put_ms(f, col_median(r, n, c, tmp));
	fputc('\n', f);
	for (i = 0; i < n; i++)
		for (c = 0; c < NCOLS; c++)
			if (all || !r[i].partial)
				sum[c] += col(&r[i], c);
	fprintf(f, "%8s", "share");
	for (c = 0; c < NCOLS; c++)
		fprintf(f, " %9.1f%%", sum[0] > 0 ? 100.0 * (double)sum[c] / (double)sum[0] : 0.0);
	fputc('\n', f);
	if (!all)
		for (i = 0; i < n; i++)
			if (r[i].partial) {
				fputs("* cut short by the process exit; not in the median "
				      "and share\n", f);
				break;
			}
	fputs("(data: DataLoader; forward: nn.Module calls; backward: autograd; "
	      "optimizer: optimizer.step)\n", f);
	rc = fclose(f);
	free(tmp);
	free(r);
	if (rc != 0 || !buf) {
		free(buf);
		return err_set(e, "out of memory rendering the step phases");
	}
	*out = buf;
	return 0;
}

/* phases — the summary's per-step phase table (see phases.h). */
#include "phases.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../events/query.h"

#define NCOLS (QUERY_PHASE_COUNT + 1) /* total, then the phases */

/* Column c of a step: 0 the step, then data .. other. */
static int64_t col(const struct query_step *s, int c)
{
	return c == 0 ? s->dur : s->phase[c - 1];
}

static int cmp_i64(const void *pa, const void *pb)
{
	int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;

	return a < b ? -1 : a > b;
}

/* Median of column c over the steps `use` marks; `tmp` holds n values. */
static int64_t col_median(const struct query_step *s, size_t n, const bool *use,
			  int c, int64_t *tmp)
{
	size_t i, m = 0;

	for (i = 0; i < n; i++)
		if (use[i])
			tmp[m++] = col(&s[i], c);
	if (m == 0)
		return 0;
	qsort(tmp, m, sizeof *tmp, cmp_i64);
	return m % 2 ? tmp[m / 2] : (tmp[m / 2 - 1] + tmp[m / 2]) / 2;
}

static void put_ms(FILE *f, int64_t ns)
{
	fprintf(f, " %10.3f", (double)ns / 1e6);
}

/* The line under the table saying where each column comes from. A
 * flight recorder dump's phases were timed between windows, where the
 * Python bridge hooks no module call (a hook on every module call costs
 * too much for every step: docs/python.md, "Step phases between
 * windows"): its forward is inferred, not the module calls, and without a
 * backward there is none; said here rather than passed off as a window's
 * forward (#29). */
static void legend(FILE *f, bool recorder, const struct query_step *s, size_t n)
{
	bool forward = false;
	size_t i;

	if (!recorder) {
		fputs("(data: DataLoader; forward: nn.Module calls; backward: autograd; "
		      "optimizer: optimizer.step)\n", f);
		return;
	}
	for (i = 0; i < n; i++)
		forward |= s[i].has_phases && s[i].phase[QUERY_PHASE_FORWARD] > 0;
	fputs("(data: DataLoader; forward: ", f);
	if (forward)
		fputs("inferred between windows, unless the program marks it: from the end "
		      "of the thread's last data fetch, backward or step to its next "
		      "backward, i.e. the model and the loss with what the loop does "
		      "between them (module calls are hooked only in windows)", f);
	else
		fputs("not timed between windows, where it is inferred from the start of "
		      "a backward and these steps have none (module calls are hooked only "
		      "in windows)", f);
	fputs("; backward: autograd; optimizer: optimizer.step)\n", f);
}

/* Writes the table of steps s[0..n) to f; `recorder`: a flight recorder
 * dump's (legend). */
static void render(FILE *f, const struct query_step *s, size_t n, size_t max_rows,
		   int64_t *tmp, bool *use, bool recorder)
{
	struct query_phase_sum sum;
	size_t i, shown = 0, partial = 0;
	int c;

	/* The statistics cover the steps query_phase_summary counts, and the
	 * shares are its own: the ones report.txt and trace:phases() show. */
	query_phase_summary(s, n, &sum);
	for (i = 0; i < n; i++)
		use[i] = query_phase_counts(&s[i], sum.partial);

	fputs("Step phases (ms): where each step's time went\n", f);
	fprintf(f, "%8s %10s", "step", "total");
	for (c = 0; c < QUERY_PHASE_COUNT; c++)
		fprintf(f, " %10s", query_phase_name((enum query_phase)c));
	fputc('\n', f);
	for (i = 0; i < n; i++) {
		if (!s[i].has_phases)
			continue;
		partial += s[i].partial;
		if (max_rows && shown++ >= max_rows)
			continue;
		fprintf(f, "%7llu%c", (unsigned long long)s[i].step, s[i].partial ? '*' : ' ');
		for (c = 0; c < NCOLS; c++)
			put_ms(f, col(&s[i], c));
		fputc('\n', f);
	}
	if (max_rows && shown > max_rows)
		fprintf(f, "%8s (%zu more step%s)\n", "...", shown - max_rows,
			shown - max_rows == 1 ? "" : "s");
	fprintf(f, "%8s", "median");
	for (c = 0; c < NCOLS; c++)
		put_ms(f, col_median(s, n, use, c, tmp));
	fputc('\n', f);
	fprintf(f, "%8s %9.1f%%", "share", sum.total > 0 ? 100.0 : 0.0);
	for (c = 0; c < QUERY_PHASE_COUNT; c++)
		fprintf(f, " %9.1f%%", 100.0 * query_phase_share(&sum, (enum query_phase)c));
	fputc('\n', f);
	if (partial && !sum.partial)
		fputs("* cut short by the process exit; not in the median and share\n", f);
	legend(f, recorder, s, n);
}

int phases_render(const struct trace *t, size_t max_rows, char **out,
		  struct err *e)
{
	struct query_step *s;
	size_t n, i, len;
	int64_t *tmp;
	bool *use, any = false;
	char *buf = NULL;
	FILE *f;

	*out = NULL;
	if (query_steps(t, &s, &n, e) != 0)
		return -1;
	for (i = 0; i < n; i++)
		any |= s[i].has_phases;
	if (!any) {
		free(s);
		return 0;
	}
	tmp = malloc(n * sizeof *tmp);
	use = malloc(n * sizeof *use);
	f = tmp && use ? open_memstream(&buf, &len) : NULL;
	if (f) {
		render(f, s, n, max_rows, tmp, use, t->meta.recorder);
		if (fclose(f) != 0) {
			free(buf);
			buf = NULL;
		}
	}
	free(tmp);
	free(use);
	free(s);
	if (!buf)
		return err_set(e, "out of memory rendering the step phases");
	*out = buf;
	return 0;
}

/*
 * hangs — `prof report`'s view of a hang across ranks: reads the latest
 * hang.json of each rank (written by the hang watchdog, src/host/watchdog.c,
 * through src/hang/; read back by src/hang/hangread.c)
 * and says which ranks are stuck where, which is the odd one out, the GPU
 * work each rank left in flight (its oldest kernel), and where each
 * place's hang reports are.
 *
 * Ranks are read one at a time, in rank order (rank<R> for R from 0 to the
 * highest number present), each file parsed and freed before the next, and
 * each rank's place (and its GPU state) folded into at most HANGS_GROUPS
 * groups of at most HANGS_SPANS rank spans: memory does not grow with the
 * number of ranks.
 */
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hangs.h"
#include "winload.h"
#include "../hang/hangread.h"

#define HANGS_GROUPS 16            /* distinct places kept; more: "elsewhere" */
#define HANGS_SPANS 8              /* rank spans named per group */
#define HANGS_WHERE 200

/* A set of ranks, added in rank order, as at most HANGS_SPANS spans. */
struct rank_spans {
	long count;
	long lo[HANGS_SPANS], hi[HANGS_SPANS];
	int n;
	bool more;                     /* ranks past the spans kept */
};

/* Ranks stuck at one place. */
struct hang_group {
	char where[HANGS_WHERE];       /* "inside `allreduce`", "in `f (x.py:3)`" */
	bool collective;               /* `where` looks like a collective or a
					  wait: these ranks wait for others */
	struct rank_spans ranks;
	double stalled_max;
	long long step_lo, step_hi;
	char report[PATH_MAX];         /* its first rank's hang report */
};

/* What a rank's hang.json says of its GPU work. */
enum gpu_state { GPU_UNKNOWN, GPU_IDLE, GPU_BUSY };

/* Ranks in one GPU state: busy ones grouped by their oldest kernel. */
struct gpu_group {
	enum gpu_state state;
	char name[HANGS_WHERE];        /* GPU_BUSY: the oldest kernel's name;
					  GPU_UNKNOWN: the first rank's note */
	struct rank_spans ranks;
	long long kmin, kmax;          /* kernels in flight per rank */
	double age_max;                /* the oldest kernel's age, s */
};

struct hang_view {
	struct hang_group g[HANGS_GROUPS + 1]; /* the last: everything else */
	int ngroups;
	struct gpu_group gpu[HANGS_GROUPS + 1]; /* the last: other kernels */
	int ngpu;
	bool gpu_known;                /* a rank listed its GPU work */
	long ranks;                    /* ranks with a hang report */
	long world;                    /* largest world_size seen */
};

/* Adds rank r (ranks come in order: extend the last span or start one). */
static void spans_add(struct rank_spans *s, long r)
{
	s->count++;
	if (s->n && s->hi[s->n - 1] == r - 1)
		s->hi[s->n - 1] = r;
	else if (s->n < HANGS_SPANS) {
		s->lo[s->n] = s->hi[s->n] = r;
		s->n++;
	} else
		s->more = true;
}

/* Whether a place name reads as a collective or a wait (range and
 * function names only: "(file:line)" parts are left out). */
static bool is_collective(const char *s)
{
	static const char *const words[] = {
		"allreduce", "all_reduce", "allgather", "all_gather", "reduce_scatter",
		"alltoall", "all_to_all", "broadcast", "barrier", "nccl", "gloo",
		"wait", "recv", "send", "collective", NULL
	};
	char low[HANGS_WHERE];
	size_t i, n = 0;
	int depth = 0;

	for (i = 0; s[i] && n + 1 < sizeof low; i++) {
		if (s[i] == '(')
			depth++;
		else if (s[i] == ')' && depth > 0)
			depth--;
		else if (!depth)
			low[n++] = (char)(s[i] >= 'A' && s[i] <= 'Z' ? s[i] + 32 : s[i]);
	}
	low[n] = '\0';
	for (i = 0; words[i]; i++)
		if (strstr(low, words[i]))
			return true;
	return false;
}

/* Adds rank r at `where` to the view; `report` is its hang report's
 * path, kept for the group it starts. */
static void view_add(struct hang_view *v, long r, const char *where, long long step,
		     double stalled, const char *report)
{
	struct hang_group *g = NULL;
	int i;

	for (i = 0; i < v->ngroups; i++)
		if (strcmp(v->g[i].where, where) == 0)
			g = &v->g[i];
	if (!g && v->ngroups < HANGS_GROUPS) {
		g = &v->g[v->ngroups++];
		memset(g, 0, sizeof *g);
		snprintf(g->where, sizeof g->where, "%s", where);
		g->collective = is_collective(where);
		g->step_lo = g->step_hi = step;
		snprintf(g->report, sizeof g->report, "%s", report);
	}
	if (!g) {
		g = &v->g[HANGS_GROUPS];
		if (!g->ranks.count) {
			snprintf(g->where, sizeof g->where, "elsewhere (more places than "
				 "this view tells apart)");
			g->step_lo = g->step_hi = step;
			snprintf(g->report, sizeof g->report, "%s", report);
		}
	}
	if (step < g->step_lo)
		g->step_lo = step;
	if (step > g->step_hi)
		g->step_hi = step;
	if (stalled > g->stalled_max)
		g->stalled_max = stalled;
	spans_add(&g->ranks, r);
	v->ranks++;
}

/* Rank r's GPU state, as its hang.json says it (hangread.h), into the
 * view. */
static void gpu_add(struct hang_view *v, long r, const struct hang_read *hr)
{
	enum gpu_state st = hr->gpu == HANG_READ_GPU_BUSY ? GPU_BUSY :
			    hr->gpu == HANG_READ_GPU_IDLE ? GPU_IDLE : GPU_UNKNOWN;
	const char *name = hr->gpu_name;
	struct gpu_group *g = NULL;
	long long n = hr->kernels;
	double age = hr->oldest_s;
	int i;

	if (st != GPU_UNKNOWN)
		v->gpu_known = true;
	for (i = 0; i < v->ngpu && !g; i++)
		if (v->gpu[i].state == st &&
		    (st != GPU_BUSY || strcmp(v->gpu[i].name, name) == 0))
			g = &v->gpu[i]; /* the unknown ones: one group, the first note */
	if (!g && v->ngpu < HANGS_GROUPS) {
		g = &v->gpu[v->ngpu++];
		memset(g, 0, sizeof *g);
		g->state = st;
		snprintf(g->name, sizeof g->name, "%s", name);
		g->kmin = g->kmax = n;
	}
	if (!g) {
		g = &v->gpu[HANGS_GROUPS];
		if (!g->ranks.count) {
			g->state = GPU_BUSY;
			snprintf(g->name, sizeof g->name, "(other kernels: more than this "
				 "view tells apart)");
			g->kmin = g->kmax = n;
		}
	}
	if (n < g->kmin)
		g->kmin = n;
	if (n > g->kmax)
		g->kmax = n;
	if (age > g->age_max)
		g->age_max = age;
	spans_add(&g->ranks, r);
}

/* The file to open for the hang report in folder `dir`: its report.html,
 * else its hang_report.txt, else the folder itself (cut to fit). */
static void report_path(const char *dir, char *out, size_t size)
{
	static const char *const names[] = { "report.html", "hang_report.txt" };
	struct stat st;
	size_t i;

	for (i = 0; i < 2; i++)
		if ((size_t)snprintf(out, size, "%s/%s", dir, names[i]) < size &&
		    stat(out, &st) == 0 && S_ISREG(st.st_mode))
			return;
	if ((size_t)snprintf(out, size, "%s/", dir) >= size)
		out[size - 1] = '\0';
}

/* One rank: its latest hang.json into the view; one that cannot be read
 * is left out, with a line saying why. */
static void read_rank(struct hang_view *v, const char *run, long r)
{
	char rdir[PATH_MAX], hname[256], path[PATH_MAX + 300];
	char report[PATH_MAX];
	struct hang_read hr;
	struct err e;
	int rc;

	if ((size_t)snprintf(rdir, sizeof rdir, "%s/rank%ld", run, r) >= sizeof rdir ||
	    !hang_read_latest(rdir, hname, sizeof hname))
		return;
	snprintf(path, sizeof path, "%s/%s/hang.json", rdir, hname);
	rc = hang_read(path, &hr, &e);
	if (rc < 0)
		fprintf(stderr, "prof report: %s; rank %ld left out\n", e.msg, r);
	if (rc != 0)
		return;
	if (hr.world_size > v->world)
		v->world = hr.world_size;
	gpu_add(v, r, &hr);
	snprintf(path, sizeof path, "%s/%s", rdir, hname);
	report_path(path, report, sizeof report);
	view_add(v, r, hr.where, hr.step, hr.stalled_s, report);
}

/* "ranks 0-6, 9" / "rank 7" into out. */
static void ranks_text(const struct rank_spans *s, char *out, size_t size)
{
	size_t n;
	int i;

	n = (size_t)snprintf(out, size, "%s", s->count == 1 ? "rank " : "ranks ");
	for (i = 0; i < s->n && n < size; i++) {
		if (s->lo[i] == s->hi[i])
			n += (size_t)snprintf(out + n, size - n, "%s%ld", i ? ", " : "",
					      s->lo[i]);
		else
			n += (size_t)snprintf(out + n, size - n, "%s%ld-%ld", i ? ", " : "",
					      s->lo[i], s->hi[i]);
	}
	if (s->more && n < size)
		snprintf(out + n, size - n, ", ...");
}

/* The GPU section: per group of ranks, the kernels in flight and the
 * oldest. Only when some rank could list its GPU work. */
static void gpu_text(const struct hang_view *v, FILE *out)
{
	char ranks[512], count[64];
	int i;

	if (!v->gpu_known)
		return;
	fprintf(out, "  GPU work not finished:\n");
	for (i = 0; i <= v->ngpu; i++) {
		const struct gpu_group *g = i < v->ngpu ? &v->gpu[i] : &v->gpu[HANGS_GROUPS];

		if (!g->ranks.count)
			continue;
		ranks_text(&g->ranks, ranks, sizeof ranks);
		if (g->state == GPU_UNKNOWN) {
			fprintf(out, "    %s: kernels in flight not known (%s)\n", ranks, g->name);
			continue;
		}
		if (g->state == GPU_IDLE) {
			fprintf(out, "    %s: no kernel in flight\n", ranks);
			continue;
		}
		if (g->kmin == g->kmax)
			snprintf(count, sizeof count, "%lld", g->kmax);
		else
			snprintf(count, sizeof count, "%lld-%lld", g->kmin, g->kmax);
		fprintf(out, "    %s: %s kernel%s in flight, oldest `%s` for %s%.1f s\n", ranks,
			count, g->kmax == 1 ? "" : "s", g->name,
			g->ranks.count > 1 ? "up to " : "", g->age_max);
	}
}

/* The odd group: the one place not a collective while the others wait in
 * one; else the smallest group when one place holds most ranks. -1: none. */
static int odd_group(const struct hang_view *v)
{
	int i, odd = -1, ncoll = 0, nother = 0, big = 0;

	if (v->ngroups < 2)
		return -1;
	for (i = 0; i < v->ngroups; i++) {
		if (v->g[i].collective)
			ncoll++;
		else
			nother++;
		if (v->g[i].ranks.count > v->g[big].ranks.count)
			big = i;
	}
	if (ncoll && nother) {
		for (i = 0; i < v->ngroups; i++)
			if (!v->g[i].collective &&
			    (odd < 0 || v->g[i].ranks.count < v->g[odd].ranks.count))
				odd = i;
		return odd;
	}
	if (v->g[big].ranks.count * 2 <= v->ranks)
		return -1;
	for (i = 0; i < v->ngroups; i++)
		if (i != big && (odd < 0 || v->g[i].ranks.count < v->g[odd].ranks.count))
			odd = i;
	return odd;
}

int hangs_report(const char *run, FILE *out)
{
	struct hang_view *v = calloc(1, sizeof *v);
	char ranks[512], steps[64];
	long hi, r;
	int i, odd;

	if (!v)
		return -1;
	hi = winload_highest_rank(run);
	for (r = 0; r <= hi; r++)
		read_rank(v, run, r);
	if (v->ranks == 0) {
		free(v);
		return 0;
	}
	fprintf(out, "Hang across ranks: %ld rank%s wrote a hang report", v->ranks,
		v->ranks == 1 ? "" : "s");
	if (v->world > v->ranks)
		fprintf(out, " (of %ld; the others did not)", v->world);
	fprintf(out, "\n");
	for (i = 0; i <= v->ngroups; i++) {
		/* the groups, then "elsewhere" (never the odd one) */
		const struct hang_group *g = i < v->ngroups ? &v->g[i] : &v->g[HANGS_GROUPS];

		if (!g->ranks.count)
			continue;
		ranks_text(&g->ranks, ranks, sizeof ranks);
		if (g->step_lo == g->step_hi)
			snprintf(steps, sizeof steps, "step %lld", g->step_lo);
		else
			snprintf(steps, sizeof steps, "steps %lld-%lld", g->step_lo, g->step_hi);
		fprintf(out, "  %s %s since %s (stalled up to %.1f s)\n", ranks, g->where,
			steps, g->stalled_max);
		fprintf(out, "    rank %ld's report: %s\n", g->ranks.lo[0], g->report);
	}
	odd = odd_group(v);
	if (odd >= 0) {
		ranks_text(&v->g[odd].ranks, ranks, sizeof ranks);
		fprintf(out, "  odd one out: %s, %s while the others wait\n", ranks,
			v->g[odd].where);
	} else if (v->ngroups > 1) {
		fprintf(out, "  no odd one out: no place holds most ranks\n");
	}
	gpu_text(v, out);
	fprintf(out, "  (each rank's report is rank<R>/hang<K>_step<N>/report.html, with "
		"hang_report.txt beside it: its threads' stacks, ranges and GPU work)\n\n");
	free(v);
	return 1;
}

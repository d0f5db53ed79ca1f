/*
 * hangs — `prof report`'s view of a hang across ranks: reads the latest
 * hang.json of each rank (written by the hang watchdog, src/host/watchdog.c)
 * and says which ranks are stuck where, and which is the odd one out.
 *
 * Ranks are read one at a time, in rank order (rank<R> for R from 0 to the
 * highest number present), each file parsed and freed before the next, and
 * each rank's place folded into at most HANGS_GROUPS groups of at most
 * HANGS_SPANS rank spans: memory does not grow with the number of ranks.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "../util/fsutil.h"

#define HANGS_GROUPS 16            /* distinct places kept; more: "elsewhere" */
#define HANGS_SPANS 8              /* rank spans named per group */
#define HANGS_WHERE 200
#define HANGS_FILE_MAX ((size_t)64 << 20)

/* Ranks stuck at one place. */
struct hang_group {
	char where[HANGS_WHERE];       /* "inside `allreduce`", "in `f (x.py:3)`" */
	bool collective;               /* `where` looks like a collective or a
					  wait: these ranks wait for others */
	long count;
	long span_lo[HANGS_SPANS], span_hi[HANGS_SPANS];
	int nspans;
	bool more_spans;               /* ranks past the spans kept */
	double stalled_max;
	long long step_lo, step_hi;
};

struct hang_view {
	struct hang_group g[HANGS_GROUPS + 1]; /* the last: everything else */
	int ngroups;
	long ranks;                    /* ranks with a hang report */
	long world;                    /* largest world_size seen */
};

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

/* The stepping thread's place in one hang.json: its innermost open range
 * and its innermost Python frame (file name without folders), or, with
 * neither, its innermost named native frame. */
static void rank_where(const cJSON *root, char *out, size_t size)
{
	const cJSON *threads = cJSON_GetObjectItemCaseSensitive(root, "threads");
	const cJSON *t, *pick = NULL, *a, *x;
	size_t n = 0;

	snprintf(out, size, "somewhere unknown");
	cJSON_ArrayForEach(t, threads) {
		if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(t, "steps"))) {
			pick = t;
			break;
		}
		if (!pick && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(t, "main")))
			pick = t;
	}
	if (!pick)
		return;
	a = cJSON_GetObjectItemCaseSensitive(pick, "ranges");
	if (cJSON_GetArraySize(a) > 0) {
		x = cJSON_GetObjectItemCaseSensitive(
			cJSON_GetArrayItem(a, cJSON_GetArraySize(a) - 1), "name");
		if (cJSON_IsString(x))
			n = (size_t)snprintf(out, size, "inside `%s`", x->valuestring);
	}
	a = cJSON_GetObjectItemCaseSensitive(pick, "python");
	x = cJSON_GetArrayItem(a, 0);
	if (cJSON_IsString(x) && n < size) {
		/* "func (/a/b/file.py:12)" -> "func (file.py:12)" */
		const char *s = x->valuestring, *open = strchr(s, '(');
		const char *slash = open ? strrchr(open, '/') : NULL;

		if (open && slash)
			snprintf(out + n, size - n, "%sin `%.*s(%s`", n ? ", " : "",
				 (int)(open - s), s, slash + 1);
		else
			snprintf(out + n, size - n, "%sin `%s`", n ? ", " : "", s);
		return;
	}
	if (n)
		return;
	a = cJSON_GetObjectItemCaseSensitive(pick, "native");
	cJSON_ArrayForEach(x, a) {
		/* "0x... symbol+0xoff (lib)": the first with a symbol */
		const char *sp = cJSON_IsString(x) ? strchr(x->valuestring, ' ') : NULL;

		if (sp && sp[1] != '(') {
			snprintf(out, size, "in `%s`", sp + 1);
			return;
		}
	}
}

/* Adds rank r at `where` to the view. */
static void view_add(struct hang_view *v, long r, const char *where, long long step,
		     double stalled)
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
	}
	if (!g) {
		g = &v->g[HANGS_GROUPS];
		if (!g->count) {
			snprintf(g->where, sizeof g->where, "elsewhere (more places than "
				 "this view tells apart)");
			g->step_lo = g->step_hi = step;
		}
	}
	g->count++;
	if (step < g->step_lo)
		g->step_lo = step;
	if (step > g->step_hi)
		g->step_hi = step;
	if (stalled > g->stalled_max)
		g->stalled_max = stalled;
	/* ranks come in order: extend the last span or start one */
	if (g->nspans && g->span_hi[g->nspans - 1] == r - 1)
		g->span_hi[g->nspans - 1] = r;
	else if (g->nspans < HANGS_SPANS) {
		g->span_lo[g->nspans] = g->span_hi[g->nspans] = r;
		g->nspans++;
	} else
		g->more_spans = true;
	v->ranks++;
}

/* Reads rank `r`'s hang.json at `path` (malloc'd, NUL-ended), or NULL: a
 * missing file silently, anything else (a FIFO or device, refused without
 * waiting on it; too large; unreadable) with one line saying the rank is
 * left out. */
static char *slurp(const char *path, long r)
{
	struct stat st;
	struct err e;
	char *buf;
	int fd = fsutil_open_regular(path, &st);

	if (fd == FSUTIL_NOT_REGULAR) {
		fprintf(stderr, "prof report: %s is %s, not a regular file; rank %ld "
			"left out\n", path, fsutil_file_kind(st.st_mode), r);
		return NULL;
	}
	if (fd < 0) {
		if (errno != ENOENT)
			fprintf(stderr, "prof report: cannot open %s: %s; rank %ld left "
				"out\n", path, strerror(errno), r);
		return NULL;
	}
	buf = fsutil_read_fd(fd, path, HANGS_FILE_MAX, NULL, &e);
	close(fd);
	if (!buf)
		fprintf(stderr, "prof report: %s; rank %ld left out\n", e.msg, r);
	return buf;
}

/* The latest hang report folder of rank dir `rdir` (highest K of
 * hang<K>_step<N>) into name[]; false when none. */
static bool latest_hang(const char *rdir, char *name, size_t size)
{
	DIR *d = opendir(rdir);
	struct dirent *de;
	long best = -1, k;
	char *end;

	if (!d)
		return false;
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, "hang", 4) != 0)
			continue;
		k = strtol(de->d_name + 4, &end, 10);
		if (end == de->d_name + 4 || strncmp(end, "_step", 5) != 0 || k <= best)
			continue;
		best = k;
		snprintf(name, size, "%s", de->d_name);
	}
	closedir(d);
	return best >= 0;
}

/* One rank: its latest hang.json into the view. */
static void read_rank(struct hang_view *v, const char *run, long r)
{
	char rdir[PATH_MAX], hname[256], path[PATH_MAX + 300], where[HANGS_WHERE];
	cJSON *root;
	char *text;
	const cJSON *x;
	long long step = 0;
	double stalled = 0;

	if ((size_t)snprintf(rdir, sizeof rdir, "%s/rank%ld", run, r) >= sizeof rdir ||
	    !latest_hang(rdir, hname, sizeof hname))
		return;
	snprintf(path, sizeof path, "%s/%s/hang.json", rdir, hname);
	text = slurp(path, r);
	if (!text)
		return;
	root = cJSON_Parse(text);
	free(text);
	if (!root) {
		fprintf(stderr, "prof report: %s: not valid JSON; rank %ld left out\n", path, r);
		return;
	}
	rank_where(root, where, sizeof where);
	x = cJSON_GetObjectItemCaseSensitive(root, "step");
	if (cJSON_IsNumber(x))
		step = (long long)x->valuedouble;
	x = cJSON_GetObjectItemCaseSensitive(root, "stalled_s");
	if (cJSON_IsNumber(x))
		stalled = x->valuedouble;
	x = cJSON_GetObjectItemCaseSensitive(root, "world_size");
	if (cJSON_IsNumber(x) && (long)x->valuedouble > v->world)
		v->world = (long)x->valuedouble;
	cJSON_Delete(root);
	view_add(v, r, where, step, stalled);
}

/* "ranks 0-6, 9" / "rank 7" into out. */
static void ranks_text(const struct hang_group *g, char *out, size_t size)
{
	size_t n;
	int i;

	n = (size_t)snprintf(out, size, "%s", g->count == 1 ? "rank " : "ranks ");
	for (i = 0; i < g->nspans && n < size; i++) {
		if (g->span_lo[i] == g->span_hi[i])
			n += (size_t)snprintf(out + n, size - n, "%s%ld", i ? ", " : "",
					      g->span_lo[i]);
		else
			n += (size_t)snprintf(out + n, size - n, "%s%ld-%ld", i ? ", " : "",
					      g->span_lo[i], g->span_hi[i]);
	}
	if (g->more_spans && n < size)
		snprintf(out + n, size - n, ", ...");
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
		if (v->g[i].count > v->g[big].count)
			big = i;
	}
	if (ncoll && nother) {
		for (i = 0; i < v->ngroups; i++)
			if (!v->g[i].collective && (odd < 0 || v->g[i].count < v->g[odd].count))
				odd = i;
		return odd;
	}
	if (v->g[big].count * 2 <= v->ranks)
		return -1;
	for (i = 0; i < v->ngroups; i++)
		if (i != big && (odd < 0 || v->g[i].count < v->g[odd].count))
			odd = i;
	return odd;
}

/* The highest N of the rank<N> folders in `run`; -1 when none. */
static long highest_rank(const char *run)
{
	DIR *d = opendir(run);
	struct dirent *de;
	long hi = -1, r;
	char *end;

	if (!d)
		return -1;
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, "rank", 4) != 0)
			continue;
		r = strtol(de->d_name + 4, &end, 10);
		if (end != de->d_name + 4 && !*end && r > hi && r < (1L << 30))
			hi = r;
	}
	closedir(d);
	return hi;
}

int cli_hangs_report(const char *run, FILE *out)
{
	struct hang_view *v = calloc(1, sizeof *v);
	char ranks[512], steps[64];
	long hi, r;
	int i, odd;

	if (!v)
		return -1;
	hi = highest_rank(run);
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

		if (!g->count)
			continue;
		ranks_text(g, ranks, sizeof ranks);
		if (g->step_lo == g->step_hi)
			snprintf(steps, sizeof steps, "step %lld", g->step_lo);
		else
			snprintf(steps, sizeof steps, "steps %lld-%lld", g->step_lo, g->step_hi);
		fprintf(out, "  %s %s since %s (stalled up to %.1f s)\n", ranks, g->where,
			steps, g->stalled_max);
	}
	odd = odd_group(v);
	if (odd >= 0) {
		ranks_text(&v->g[odd], ranks, sizeof ranks);
		fprintf(out, "  odd one out: %s, %s while the others wait\n", ranks,
			v->g[odd].where);
	} else if (v->ngroups > 1) {
		fprintf(out, "  no odd one out: no place holds most ranks\n");
	}
	fprintf(out, "  (each rank's hang<K>_step<N>/hang_report.txt has its threads' "
		"stacks and ranges)\n\n");
	free(v);
	return 1;
}

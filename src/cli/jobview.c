/*
 * jobview — `prof report RUN`'s view of a job-wide capture or dump
 * (docs/jobs.md): the latest one in RUN/job, each rank's folder of it side
 * by side: the step times across ranks, who was slow in those steps, in
 * which phase, and what the others were doing meanwhile (the phase, and
 * the innermost range, where they spent more than the slow rank: what
 * they waited in).
 *
 * Ranks are read one at a time, in rank order, each trace loaded, folded
 * in and freed before the next: per step a histogram of the ranks' step
 * times (its median) and the slowest ranks; per phase a histogram of the
 * ranks' phase times and the two ranks with the most, each with its
 * details; the innermost ranges' times summed by name (at most JV_NAMES
 * names); the first JV_SIDE ranks' rows for the table side by side. Its
 * memory does not grow with the number of ranks (4096 or more).
 *
 * The slow rank is the one whose phase time exceeds the ranks' median of
 * that phase by the most (summed over the steps): that finds the rank
 * that works longer whether the others wait for it in a collective (their
 * step times then equal its own, their waiting phase grows) or not.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jobview.h"
#include "winload.h"
#include "../events/query.h"
#include "../events/trace.h"
#include "../export/jobfile.h"
#include "../common/io.h"

#define JV_STEPS 64                /* steps compared, at most */
#define JV_OCT 32                  /* histogram buckets per power of two */
#define JV_BUCKETS (40 * JV_OCT)   /* from 1 us up to ~12 days */
#define JV_TOP 3                   /* slowest ranks named per step */
#define JV_NAMES 64                /* innermost ranges summed by name */
#define JV_RNAMES 8                /* a detailed rank's innermost ranges */
#define JV_SIDE 32                 /* ranks shown side by side */
#define JV_NAME 64                 /* bytes of a range name kept */
#define JV_SPANS 8                 /* spans of missing ranks named */

/* A histogram of times (ns), for medians in fixed memory. */
struct jv_hist {
	uint32_t n[JV_BUCKETS];
	int64_t sum[JV_BUCKETS];       /* of the values in each bucket */
	uint64_t count;
	int64_t min, max;
};

/* One rank's times over the compared steps, summed. */
struct jv_rank {
	long rank;
	char host[64];
	int steps;
	int64_t total;
	int64_t phase[QUERY_PHASE_COUNT];
	int64_t first_step;            /* its first step (a late rank's is
					  later) */
	struct {
		char name[JV_NAME];
		int64_t ns;
	} names[JV_RNAMES];            /* its innermost ranges, most first */
	int nnames;
	bool valid;
};

#define JV_CANDIDATES 4            /* folders of a rank tried, best first */

/* A rank's folders that may be the event's, best first. */
struct jv_cands {
	char path[JV_CANDIDATES][PATH_MAX];
	long long score[JV_CANDIDATES];
	int n;
};

struct jv_step {
	struct jv_hist hist;
	int64_t max;
	struct {
		long rank;
		int64_t ns;
	} top[JV_TOP];
	int ntop;
};

struct jv_view {
	/* the event */
	char file[160];                /* its file in RUN/job */
	bool capture;                  /* a capture (else a dump) */
	uint64_t first, last;          /* its steps */
	int trigger;                   /* a dump's rank */
	char reason[128];
	char suffix[32];               /* its folders' mark */
	/* the ranks */
	long ranks, late, missing_n;
	long missing_lo[JV_SPANS], missing_hi[JV_SPANS];
	int nmissing;
	bool missing_more;
	long noted;                    /* ranks whose folder has notes */
	char note[256];                /* the first rank's first note */
	long note_rank;
	struct jv_step step[JV_STEPS];
	struct jv_hist phase_hist[QUERY_PHASE_COUNT];
	struct jv_hist total_hist;
	struct jv_rank best[QUERY_PHASE_COUNT][2]; /* per phase, the two ranks
					  with the most of it */
	struct {
		char name[JV_NAME];
		double ns;             /* summed over the ranks */
	} names[JV_NAMES];
	int nnames;
	struct jv_rank side[JV_SIDE];
	int nside;
	int64_t step_ns_total;         /* all ranks' compared steps, summed */
	long step_count;
	struct jv_cands cands;         /* a rank's folders to try */
};

/* ------------------------------------------------------------ histograms */

static int bucket_of(int64_t ns)
{
	double us = (double)ns / 1e3;
	int b;

	if (us < 1)
		return 0;
	b = (int)(log2(us) * JV_OCT) + 1;
	return b < JV_BUCKETS ? b : JV_BUCKETS - 1;
}

static void hist_add(struct jv_hist *h, int64_t ns)
{
	int b = bucket_of(ns);

	h->n[b]++;
	h->sum[b] += ns;
	if (!h->count || ns < h->min)
		h->min = ns;
	if (!h->count || ns > h->max)
		h->max = ns;
	h->count++;
}

/* The histogram's median: the mean of the values in its bucket (within
 * about 2 %; exact when they are equal), and within the values seen. */
static int64_t hist_median(const struct jv_hist *h)
{
	uint64_t seen = 0, half = (h->count + 1) / 2;
	int64_t m = h->max;
	int b;

	if (!h->count)
		return 0;
	for (b = 0; b < JV_BUCKETS; b++) {
		seen += h->n[b];
		if (seen >= half) {
			m = h->sum[b] / h->n[b];
			break;
		}
	}
	return m < h->min ? h->min : m > h->max ? h->max : m;
}

/* ------------------------------------------------------------ the event */

/* Whether event (ns, name) comes before (bns, bname); bns < 0: no bound. */
static bool event_before(int64_t ns, const char *name, int64_t bns, const char *bname)
{
	return bns < 0 || ns < bns || (ns == bns && strcmp(name, bname) < 0);
}

/* The latest job-wide capture (with its first step known) or dump in
 * RUN/job before (bns, bname) (bns < 0: any) into *v, its time into
 * *when; false when there is none. */
static bool find_event(const char *run, int64_t bns, const char *bname, struct jv_view *v,
		       int64_t *when)
{
	char path[PATH_MAX], buf[JOBFILE_MAX + 1], fname[300];
	struct jobfile f, d;
	struct dirent *de;
	int64_t best = -1, ns;
	struct err e;
	DIR *dir;
	int dfd;

	if (snprintf(path, sizeof path, "%s/%s", run, JOBFILE_DIR) >= (int)sizeof path)
		return false;
	dfd = io_fd_above_stdio(open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
	if (dfd < 0)
		return false;
	dir = fdopendir(fcntl(dfd, F_DUPFD_CLOEXEC, 3));
	if (!dir) {
		close(dfd);
		return false;
	}
	while ((de = readdir(dir))) {
		enum jobfile_kind k = jobfile_name_kind(de->d_name, &ns);

		if ((k != JOBFILE_CAPTURE && k != JOBFILE_DUMP) || ns < best ||
		    (ns == best && strcmp(de->d_name, v->file) <= 0) ||
		    !event_before(ns, de->d_name, bns, bname))
			continue;
		if (jobfile_read_any(dfd, de->d_name, &f, buf, sizeof buf, &e) != 0 || f.kind != k)
			continue;
		if (k == JOBFILE_CAPTURE) {
			uint64_t first = f.first;

			snprintf(fname, sizeof fname, "%s.first", de->d_name);
			if (!first && jobfile_read_any(dfd, fname, &d, buf, sizeof buf, &e) == 0 &&
			    d.kind == JOBFILE_FIRST)
				first = d.first;
			if (!first)
				continue; /* no rank decided: nothing recorded */
			v->first = first;
			v->last = first + f.steps - 1;
			v->capture = true;
			v->trigger = -1;
			snprintf(v->reason, sizeof v->reason, "%.120s", f.from);
			snprintf(v->suffix, sizeof v->suffix, "job");
		} else {
			v->first = f.first;
			v->last = f.last;
			v->capture = false;
			v->trigger = f.rank;
			snprintf(v->reason, sizeof v->reason, "%.120s", f.reason);
			snprintf(v->suffix, sizeof v->suffix, "by-rank%d", f.rank);
		}
		snprintf(v->file, sizeof v->file, "%.150s", de->d_name);
		best = ns;
	}
	closedir(dir);
	close(dfd);
	*when = best;
	return best >= 0;
}

/* Parses "<prefix><K>_steps<a>-<b>_<suffix>" (or with ".pid..." after
 * it; a suffix "by-rank" takes any rank number after it); false when
 * `name` is not one. */
static bool parse_folder(const char *name, const char *prefix, const char *suffix,
			 unsigned long long *a, unsigned long long *b)
{
	size_t n = strlen(prefix), m = strlen(suffix);
	const char *p = name + n;
	char *end;

	if (strncmp(name, prefix, n) != 0)
		return false;
	strtoul(p, &end, 10);
	if (end == p || strncmp(end, "_steps", 6) != 0)
		return false;
	p = end + 6;
	*a = strtoull(p, &end, 10);
	if (end == p || *end != '-')
		return false;
	p = end + 1;
	*b = strtoull(p, &end, 10);
	if (end == p || *end != '_' || strncmp(end + 1, suffix, m) != 0)
		return false;
	p = end + 1 + m;
	if (strcmp(suffix, "by-rank") == 0) {
		strtoul(p, &end, 10);
		if (end == p)
			return false;
		p = end;
	}
	return !*p || *p == '.';
}

/* Rank r's folders that may be the event's into *c, best first: a
 * capture's windows from the event's first step on (the one starting
 * there, else the earliest after: a late rank's), a job-wide dump's
 * folders ending with its last step (or those that overlap it most): its
 * answer to the trigger, or its own dump of those steps when its own
 * policy fired on them too (every rank slow together, in a collective).
 * Which one it is, the caller tells from the trace's reason. */
static void rank_folders(const char *run, long r, const struct jv_view *v,
			 struct jv_cands *c)
{
	char rdir[PATH_MAX], path[PATH_MAX];
	unsigned long long a, b;
	long long score;
	struct dirent *de;
	DIR *d;
	int i, j;

	c->n = 0;
	snprintf(rdir, sizeof rdir, "%s/rank%ld", run, r);
	d = opendir(rdir);
	if (!d)
		return;
	while ((de = readdir(d))) {
		if (!parse_folder(de->d_name, v->capture ? "window" : "recorder",
				  v->capture ? v->suffix : "by-rank", &a, &b))
			continue;
		if (v->capture) {
			if (a < v->first)
				continue;
			score = a == v->first ? LLONG_MAX : LLONG_MAX - 1 - (long long)(a - v->first);
		} else {
			unsigned long long lo = a > v->first ? a : v->first;
			unsigned long long hi = b < v->last ? b : v->last;

			if (lo > hi)
				continue;
			score = b == v->last ? LLONG_MAX : (long long)(hi - lo);
		}
		if ((size_t)snprintf(path, sizeof path, "%s/%s", rdir, de->d_name) >= sizeof path)
			continue;
		for (i = 0; i < c->n && c->score[i] >= score; i++)
			;
		if (i >= JV_CANDIDATES)
			continue;
		for (j = (c->n < JV_CANDIDATES ? c->n : JV_CANDIDATES - 1); j > i; j--) {
			c->score[j] = c->score[j - 1];
			memcpy(c->path[j], c->path[j - 1], sizeof c->path[j]);
		}
		c->score[i] = score;
		memcpy(c->path[i], path, strlen(path) + 1);
		if (c->n < JV_CANDIDATES)
			c->n++;
	}
	closedir(d);
}

/* Whether trace t is the event's: a capture's window says its request
 * in its reason ("job capture <id>", maybe "(late: ...)" after it); a
 * dump's folder is told by its steps and mark alone. */
static bool is_event(const struct jv_view *v, const struct trace *t)
{
	char want[200];

	if (!v->capture)
		return true;
	snprintf(want, sizeof want, "job capture %s", v->file + strlen("capture-"));
	return t->meta.reason && strncmp(t->meta.reason, want, strlen(want)) == 0 &&
	       (!t->meta.reason[strlen(want)] || t->meta.reason[strlen(want)] == ' ');
}

/* ------------------------------------------------------------ folding */

/* Adds the innermost range `name` (ns in the compared steps) to rank *x's
 * list (most first) and to the view's sums. */
static void add_name(struct jv_view *v, struct jv_rank *x, const char *name, int64_t ns)
{
	int i, j;

	for (i = 0; i < v->nnames && strcmp(v->names[i].name, name) != 0; i++)
		;
	if (i == v->nnames && v->nnames < JV_NAMES) {
		snprintf(v->names[i].name, JV_NAME, "%s", name);
		v->nnames++;
	}
	if (i < v->nnames)
		v->names[i].ns += (double)ns;
	for (i = 0; i < x->nnames && x->names[i].ns >= ns; i++)
		;
	if (i >= JV_RNAMES)
		return;
	for (j = (x->nnames < JV_RNAMES ? x->nnames : JV_RNAMES - 1); j > i; j--)
		x->names[j] = x->names[j - 1];
	snprintf(x->names[i].name, JV_NAME, "%s", name);
	x->names[i].ns = ns;
	if (x->nnames < JV_RNAMES)
		x->nnames++;
}

/* Where rank x's stepping thread was in its compared steps: the innermost
 * range at each instant (query_during), summed by name. */
static void rank_places(struct jv_view *v, const struct trace *t, const struct query_step *st,
			size_t n, struct jv_rank *x)
{
	struct query_interval iv[JV_STEPS];
	struct query_during d;
	size_t i, k = 0;
	int32_t tid = 0;

	uint64_t lo = (uint64_t)x->first_step, hi = lo + (v->last - v->first);

	for (i = 0; i < n && k < JV_STEPS; i++) {
		if (st[i].step < lo || st[i].step > hi)
			continue;
		iv[k].ts = st[i].ts;
		iv[k].dur = st[i].dur;
		tid = st[i].tid;
		k++;
	}
	if (!k || query_during(t, t->meta.pid, tid, iv, k, &d, NULL) != 0)
		return;
	for (i = 0; i < d.nrange; i++) {
		uint32_t id = (uint32_t)d.by_range[i].name;
		const char *name = id == STRTAB_NONE ? "(no range)"
				   : id == QUERY_NAME_OTHER ? "(other names)"
				   : strtab_get(&t->names, id);

		if (name && d.by_range[i].total > 0)
			add_name(v, x, name, (int64_t)d.by_range[i].total);
	}
	query_during_free(&d);
}

/* Keeps *x among the two ranks with the most of phase p. */
static void keep_best(struct jv_view *v, int p, const struct jv_rank *x)
{
	struct jv_rank *b = v->best[p];

	if (!b[0].valid || x->phase[p] > b[0].phase[p]) {
		b[1] = b[0];
		b[0] = *x;
	} else if (!b[1].valid || x->phase[p] > b[1].phase[p]) {
		b[1] = *x;
	}
}

/* Adds rank r's steps (trace t) to the view. */
static void fold_rank(struct jv_view *v, long r, const struct trace *t)
{
	struct jv_rank x = { 0 };
	struct query_step *st = NULL;
	size_t n = 0, i;
	int p, k;

	if (query_steps(t, &st, &n, NULL) != 0)
		return;
	x.rank = r;
	x.valid = true;
	x.first_step = -1;
	snprintf(x.host, sizeof x.host, "%.63s", t->meta.hostname ? t->meta.hostname : "?");
	for (i = 0; i < n; i++) {
		/* a late rank's window: its steps, compared from its first */
		if (x.first_step < 0 && st[i].step >= v->first)
			x.first_step = (int64_t)st[i].step;
	}
	if (x.first_step < 0) {
		free(st);
		return;
	}
	for (i = 0; i < n; i++) {
		uint64_t j = st[i].step - (uint64_t)x.first_step;

		if (st[i].step < (uint64_t)x.first_step || j >= JV_STEPS ||
		    j > v->last - v->first)
			continue;
		x.steps++;
		x.total += st[i].dur;
		for (p = 0; p < QUERY_PHASE_COUNT; p++)
			x.phase[p] += st[i].phase[p];
		if ((uint64_t)x.first_step != v->first)
			continue; /* a late rank's steps are not the others' */
		hist_add(&v->step[j].hist, st[i].dur);
		if (st[i].dur > v->step[j].max)
			v->step[j].max = st[i].dur;
		for (k = 0; k < v->step[j].ntop && v->step[j].top[k].ns >= st[i].dur; k++)
			;
		if (k < JV_TOP) {
			int m = v->step[j].ntop < JV_TOP ? v->step[j].ntop : JV_TOP - 1;

			for (; m > k; m--)
				v->step[j].top[m] = v->step[j].top[m - 1];
			v->step[j].top[k].rank = r;
			v->step[j].top[k].ns = st[i].dur;
			if (v->step[j].ntop < JV_TOP)
				v->step[j].ntop++;
		}
		v->step_ns_total += st[i].dur;
		v->step_count++;
	}
	if (!x.steps) {
		free(st);
		return;
	}
	rank_places(v, t, st, n, &x);
	free(st);
	v->ranks++;
	if ((uint64_t)x.first_step != v->first)
		v->late++;
	hist_add(&v->total_hist, x.total);
	for (p = 0; p < QUERY_PHASE_COUNT; p++) {
		hist_add(&v->phase_hist[p], x.phase[p]);
		keep_best(v, p, &x);
	}
	if (v->nside < JV_SIDE)
		v->side[v->nside++] = x;
	if (t->meta.notes && t->meta.notes[0]) {
		if (!v->noted++) {
			v->note_rank = r;
			snprintf(v->note, sizeof v->note, "%.*s",
				 (int)strcspn(t->meta.notes, "\n"), t->meta.notes);
		}
	}
}

/* Rank r wrote no folder of the event. */
static void add_missing(struct jv_view *v, long r)
{
	v->missing_n++;
	if (v->nmissing && v->missing_hi[v->nmissing - 1] == r - 1)
		v->missing_hi[v->nmissing - 1] = r;
	else if (v->nmissing < JV_SPANS) {
		v->missing_lo[v->nmissing] = v->missing_hi[v->nmissing] = r;
		v->nmissing++;
	} else
		v->missing_more = true;
}

/* ------------------------------------------------------------ the text */

static double ms(int64_t ns)
{
	return (double)ns / 1e6;
}

/* The verdict: the rank whose phase exceeds that phase's median by the
 * most, and what the others spent more time in than it. */
static void verdict(const struct jv_view *v, FILE *out)
{
	int64_t med[QUERY_PHASE_COUNT], excess = 0, second = 0, below = 0, step_med;
	const struct jv_rank *slow = NULL;
	int p, q = -1, sp = -1, i;
	double more = 0;
	const char *where = NULL;

	for (p = 0; p < QUERY_PHASE_COUNT; p++)
		med[p] = hist_median(&v->phase_hist[p]);
	for (p = 0; p < QUERY_PHASE_COUNT; p++) {
		const struct jv_rank *b = &v->best[p][0];

		if (b->valid && b->phase[p] - med[p] > excess) {
			excess = b->phase[p] - med[p];
			slow = b;
			sp = p;
		}
	}
	step_med = hist_median(&v->total_hist);
	/* the runner-up in the same phase: one rank stands out, or several */
	if (slow && v->best[sp][1].valid)
		second = v->best[sp][1].phase[sp] - med[sp];
	if (!slow || v->ranks < 2 || excess < 1000000 || excess < step_med / 20) {
		fprintf(out, "  no rank stands out: no rank's phase took more than 1 ms and 5 %% "
			"of a step over the ranks' median\n");
		return;
	}
	fprintf(out, "  rank %ld (%s) was slow: its %s took %.1f ms more than the ranks' "
		"median (%.1f ms against %.1f ms, over %d step%s)\n", slow->rank, slow->host,
		query_phase_name((enum query_phase)sp), ms(excess), ms(slow->phase[sp]),
		ms(med[sp]), slow->steps, slow->steps == 1 ? "" : "s");
	if (second > excess / 2)
		fprintf(out, "  (rank %ld's %s took %.1f ms more as well: not rank %ld alone)\n",
			v->best[sp][1].rank, query_phase_name((enum query_phase)sp),
			ms(second), slow->rank);
	/* where the others spent more than the slow rank: waiting for it */
	for (p = 0; p < QUERY_PHASE_COUNT; p++) {
		if (p != sp && med[p] - slow->phase[p] > below) {
			below = med[p] - slow->phase[p];
			q = p;
		}
	}
	for (i = 0; i < v->nnames && v->ranks > 1; i++) {
		double own = 0, others;
		int k;

		for (k = 0; k < slow->nnames; k++)
			if (strcmp(slow->names[k].name, v->names[i].name) == 0)
				own = (double)slow->names[k].ns;
		others = (v->names[i].ns - own) / (double)(v->ranks - 1);
		if (others - own > more) {
			more = others - own;
			where = v->names[i].name;
		}
	}
	if (q >= 0 && below > excess / 4)
		fprintf(out, "  the others were waiting in %s%s%s%s: %.1f ms more than rank %ld "
			"there (median %.1f ms against %.1f ms)\n",
			query_phase_name((enum query_phase)q), where ? " (inside `" : "",
			where ? where : "", where ? "`)" : "", ms(below), slow->rank,
			ms(med[q]), ms(slow->phase[q]));
	else if (where && more > (double)excess / 4)
		fprintf(out, "  the others were waiting inside `%s`: %.1f ms more than rank "
			"%ld there, on average\n", where, more / 1e6, slow->rank);
	else
		fprintf(out, "  the others did not wait for it (no phase of theirs took "
			"longer than rank %ld's by a quarter of its extra time): they did not "
			"meet it in a collective in these steps\n", slow->rank);
}

static void print_view(const struct jv_view *v, const char *run, FILE *out)
{
	uint64_t s, n = v->last - v->first + 1;
	int p, i, k;

	if (v->capture)
		fprintf(out, "Job-wide capture of steps %llu-%llu (asked by %s): ",
			(unsigned long long)v->first, (unsigned long long)v->last,
			v->reason[0] ? v->reason : "?");
	else
		fprintf(out, "Job-wide dump of steps %llu-%llu, rank %d's (%s): ",
			(unsigned long long)v->first, (unsigned long long)v->last, v->trigger,
			v->reason[0] ? v->reason : "dump");
	fprintf(out, "%ld rank%s wrote it", v->ranks, v->ranks == 1 ? "" : "s");
	if (v->late)
		fprintf(out, " (%ld of them late: other steps, left out of the step table)",
			v->late);
	fprintf(out, "\n  %s/%s/%s; each rank's folder: rank<R>/%s<K>_steps<a>-<b>_%s\n",
		run, JOBFILE_DIR, v->file, v->capture ? "window" : "recorder",
		v->capture ? v->suffix : "by-rank<T> (T: whose dump it was)");
	if (v->missing_n) {
		fprintf(out, "  %ld rank%s wrote none: ", v->missing_n, v->missing_n == 1 ? "" : "s");
		for (i = 0; i < v->nmissing; i++) {
			if (v->missing_lo[i] == v->missing_hi[i])
				fprintf(out, "%s%ld", i ? ", " : "", v->missing_lo[i]);
			else
				fprintf(out, "%s%ld-%ld", i ? ", " : "", v->missing_lo[i],
					v->missing_hi[i]);
		}
		fprintf(out, "%s\n", v->missing_more ? ", ..." : "");
	}
	if (v->noted)
		fprintf(out, "  %ld rank%s noted something (rank %ld: %s)\n", v->noted,
			v->noted == 1 ? "" : "s", v->note_rank, v->note);
	verdict(v, out);

	fprintf(out, "\n  Step time across ranks (ms; the slowest ranks)\n");
	fprintf(out, "    %8s %6s %9s %9s  %s\n", "step", "ranks", "median", "max", "slowest");
	for (s = 0; s < n && s < JV_STEPS; s++) {
		const struct jv_step *st = &v->step[s];

		if (!st->hist.count)
			continue;
		fprintf(out, "    %8llu %6llu %9.3f %9.3f  ", (unsigned long long)(v->first + s),
			(unsigned long long)st->hist.count, ms(hist_median(&st->hist)), ms(st->max));
		for (k = 0; k < st->ntop; k++)
			fprintf(out, "%srank %ld %.3f", k ? ", " : "", st->top[k].rank,
				ms(st->top[k].ns));
		fprintf(out, "\n");
	}
	fprintf(out, "\n  Phases over the steps, summed per rank (ms): the ranks' median, the "
		"rank with the most\n");
	fprintf(out, "    %-10s %9s %9s  %s\n", "phase", "median", "most", "rank");
	for (p = 0; p < QUERY_PHASE_COUNT; p++) {
		const struct jv_rank *b = &v->best[p][0];

		fprintf(out, "    %-10s %9.3f %9.3f  %s%ld\n", query_phase_name((enum query_phase)p),
			ms(hist_median(&v->phase_hist[p])), b->valid ? ms(b->phase[p]) : 0.0,
			b->valid ? "rank " : "", b->valid ? b->rank : 0L);
	}
	if (v->nside && v->ranks <= JV_SIDE) {
		fprintf(out, "\n  Ranks side by side, over the steps (ms; where the stepping thread "
			"was most)\n");
		fprintf(out, "    %5s %-12s %9s", "rank", "host", "total");
		for (p = 0; p < QUERY_PHASE_COUNT; p++)
			fprintf(out, " %9s", query_phase_name((enum query_phase)p));
		fprintf(out, "  %s\n", "most inside");
		for (i = 0; i < v->nside; i++) {
			const struct jv_rank *x = &v->side[i];

			fprintf(out, "    %5ld %-12.12s %9.3f", x->rank, x->host, ms(x->total));
			for (p = 0; p < QUERY_PHASE_COUNT; p++)
				fprintf(out, " %9.3f", ms(x->phase[p]));
			if (x->nnames)
				fprintf(out, "  %s %.3f", x->names[0].name, ms(x->names[0].ns));
			if ((uint64_t)x->first_step != v->first)
				fprintf(out, "  (late: from step %lld)", (long long)x->first_step);
			fprintf(out, "\n");
		}
	}
	fprintf(out, "\n");
}

int jobview_report(const char *run, FILE *out)
{
	struct jv_view *v = calloc(1, sizeof *v);
	char dir[PATH_MAX], bname[160] = "", unanswered[512] = "";
	int64_t bns = -1, when;
	int tries, nun = 0;
	bool shown;
	struct trace t;
	struct err e;
	long hi, r;

	if (!v)
		return -1;
	hi = winload_highest_rank(run);
	/* the latest event some rank wrote: a later one nobody recorded (a
	 * request refused everywhere, another's still queued) is said */
	for (tries = 0; tries < 8; tries++) {
		memset(v, 0, sizeof *v);
		if (!find_event(run, bns, bname, v, &when))
			break;
		for (r = 0; r <= hi; r++) {
			bool found = false;
			int i;

			rank_folders(run, r, v, &v->cands);
			for (i = 0; i < v->cands.n && !found; i++) {
				if (trace_init(&t) != 0)
					break;
				if (winload_read(v->cands.path[i], &t, dir, sizeof dir,
							   &e) != 0) {
					fprintf(stderr, "prof report: %s; rank %ld left out\n", e.msg, r);
					found = true; /* said: not missing */
				} else if (is_event(v, &t)) {
					fold_rank(v, r, &t);
					found = true;
				}
				trace_free(&t);
			}
			if (!found)
				add_missing(v, r);
		}
		if (v->ranks > 0)
			break;
		if (strlen(unanswered) + strlen(v->file) + 3 < sizeof unanswered)
			snprintf(unanswered + strlen(unanswered), sizeof unanswered - strlen(unanswered),
				 "%s%s", nun ? ", " : "", v->file);
		nun++;
		bns = when;
		snprintf(bname, sizeof bname, "%s", v->file);
	}
	if (nun)
		fprintf(out, "Job-wide requests no rank recorded (the latest first; each rank's "
			"log says why): %s\n%s", unanswered, v->ranks ? "" : "\n");
	shown = nun || v->ranks > 0;
	if (v->ranks > 0)
		print_view(v, run, out);
	free(v);
	return shown ? 1 : 0;
}

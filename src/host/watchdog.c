/*
 * watchdog — the hang watchdog (prof.watchdog{}, docs/recorder.md).
 *
 * Runs on a thread of its own ("profhost-wd", every signal blocked), which
 * sleeps on a wake word until the running step's deadline (check()
 * returns it), so the step path does nothing more than it did
 * (window_step already keeps the step's start and the recent durations),
 * and the host thread writing a window (seconds, for millions of events)
 * does not hold a report back: the watchdog never waits for the host
 * thread, only for short locks (the window's, the stacks', a GPU flush's)
 * and, for prof.on_hang, the policy's VM. When the current step has run
 * longer than
 * max(after_s, factor x median step), it writes one report per hang into
 * <run>/rank<R>/hang<K>_step<N>/: hang_report.txt (every thread's native
 * stack, Python stacks where the bridge can give them, each thread's open
 * ranges and how long each has been open, on a GPU the kernels launched
 * and not finished, the last steps), hang.json (the same for `prof
 * report`'s view across ranks) and report.html (the same for a browser:
 * the stuck threads first: written by src/hang/ from the plain snapshot
 * this file takes, hangreport.h); with the recorder on, takes a dump of the
 * last steps and the stalled one so far (window_dump_hang: under the
 * window lock, no waiting) and hands it to the host thread once the report
 * is written, after what it is writing (the report says which dump, or
 * why none); then runs prof.on_hang. When steps resume it says how long
 * the step stalled.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../control/control.h"
#include "../common/clock.h"
#include "../export/outdir.h"
#include "../hang/hangreport.h"
#include "../util/demangle.h"
#include "../common/log.h"
#include "../util/wakeword.h"
#include "capture.h"
#include "host.h"

#define WD_RANGES_MAX 4096         /* open levels read, all threads */
#define WD_STEPS_SHOWN HANG_STEPS_SHOWN /* last steps in the report */
#define WD_PY_MAX (1u << 20)       /* Python stacks' text, at most */
#define WD_POLL_NS 1000000000LL    /* while hung: how often to look for
				      the step's end */
#define WD_MIN_WAIT_NS 10000000LL

/* What the window state says now, copied under its lock. */
struct wd_snap {
	bool finished;
	uint64_t step;                 /* the step in progress */
	int64_t start;                 /* when it began */
	int32_t tid;                   /* the thread of the last boundary */
	size_t ndur;                   /* step durations known */
	double median_ms, mean_ms;
	double last_ms[WD_STEPS_SHOWN];/* oldest first */
	size_t nlast;
	double hung_ms;                /* the duration of the hung step, once
					  it ended (-1: not known) */
};

/* Copies what the watchdog needs of the window state; `hung` is the step
 * whose duration is wanted (UINT64_MAX: none). Returns false when the
 * window lock could not be taken within a second (a thread holds it:
 * looked at again next time). The watchdog's thread. */
static bool take_snapshot(struct host *h, uint64_t hung, struct wd_snap *s)
{
	struct window_state *w = &h->win;
	struct timespec until;
	size_t i, n;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 1;
	if (pthread_mutex_timedlock(&w->lock, &until) != 0)
		return false;
	s->finished = w->finished;
	s->step = w->sched.step;
	s->start = w->step_start;
	s->tid = w->step_tid;
	s->ndur = w->ndur;
	window_step_stats(w, &s->median_ms, &s->mean_ms);
	n = w->ndur < WD_STEPS_SHOWN ? w->ndur : WD_STEPS_SHOWN;
	for (i = 0; i < n; i++)
		s->last_ms[i] = w->dur_ms[(w->dur_pos + HOST_DUR_RING - n + i) % HOST_DUR_RING];
	s->nlast = n;
	s->hung_ms = -1;
	if (hung != UINT64_MAX && s->step > hung && s->step - hung <= w->ndur)
		s->hung_ms = w->dur_ms[(w->dur_pos + HOST_DUR_RING - (s->step - hung)) %
				       HOST_DUR_RING];
	pthread_mutex_unlock(&w->lock);
	return true;
}

/* The watchdog's limit in ns for a median step of `median_ms`. */
static int64_t limit_ns(const struct policy_config *c, double median_ms)
{
	double s = c->watchdog.after_s, f = c->watchdog.factor * median_ms / 1e3;

	return (int64_t)((f > s ? f : s) * 1e9);
}

/* ------------------------------------------------------------ the report */

/* Finds thread `ptid`'s block ("Thread 0x..." or "Current thread 0x...")
 * in faulthandler's text; *len its length. NULL when not there. */
static const char *py_block(const char *text, uintptr_t ptid, size_t *len)
{
	char want[40];
	const char *p = text, *end;

	if (!text || !ptid)
		return NULL;
	snprintf(want, sizeof want, "hread 0x%016lx", (unsigned long)ptid);
	while ((p = strstr(p, want)) != NULL) {
		if (p == text || (p[-1] != 'T' && p[-1] != 't')) {
			p++;
			continue;
		}
		p = strchr(p, '\n');
		if (!p)
			return NULL;
		p++;
		end = strstr(p, "\n\n");
		if (!end)
			end = p + strlen(p);
		*len = (size_t)(end - p);
		return p;
	}
	return NULL;
}

/* ------------------------------------------------------------ the GPU */

/* What the capture sources say of the GPU work not finished, as the
 * report tells it: names made readable (C++ names demangled and
 * shortened). */
struct wd_gpu {
	struct capture_gpu_hang g;
	struct hang_gpu shown;
};

_Static_assert(CAPTURE_GPU_MAX == HANG_GPU_MAX && CAPTURE_GPU_NAME == HANG_GPU_NAME,
	       "the report lists every launch a source gives, its whole name");

/* Asks the sources (the watchdog's thread) and names the kernels. */
static void gpu_take(struct wd_gpu *w)
{
	demangle_fn dm = NULL;
	size_t i;

	w->shown.known = capture_hang_gpu_all(&w->g);
	w->shown.note = w->g.note;
	w->shown.n = w->g.n;
	w->shown.more = w->g.more;
	w->shown.forgotten = w->g.forgotten;
	for (i = 0; i < w->g.n; i++) {
		const struct capture_gpu_launch *l = &w->g.launch[i];
		struct hang_kernel *k = &w->shown.k[i];
		const char *name = l->name;

		if (!name[0])
			name = "(unnamed kernel)";
		if (demangle_is_mangled(name) && !dm)
			dm = demangle_find(false);
		if (!dm || !demangle_frame(dm, name, k->name, sizeof k->name))
			snprintf(k->name, sizeof k->name, "%s", name);
		k->launched_ns = l->launched_ns;
		k->stream = l->stream;
		k->device = l->device;
		k->tid = l->tid;
		k->corr = l->corr;
	}
}

/* The hang's recorder dump, as the report tells it. */
struct wd_dump {
	struct window_hang_dump d;     /* d.job NULL: none */
	size_t behind;                 /* jobs the host thread finishes first */
	char dir[160];                 /* its folder's usual name */
	char why[ERR_MSG_MAX];         /* why none */
};

/* Creates <run>/rank<R>/hang<K>_step<N>[_<suffix>] into *dir. Returns 0
 * or -1 with *e. */
static int make_dir(struct host *h, uint32_t k, uint64_t step, const char *suffix,
		    struct outdir *dir, struct err *e)
{
	struct outdir run, rank;
	char name[128];
	bool moved = false;
	int rc;

	if (outdir_open_run(h->run_dir, h->run_id, &h->job, &run, &moved, e) != 0)
		return -1;
	snprintf(name, sizeof name, "rank%d", h->env.rank);
	rc = outdir_sub(&run, name, false, &rank, e);
	outdir_close(&run);
	if (rc != 0)
		return -1;
	snprintf(name, sizeof name, "hang%u_step%llu%s%s", k, (unsigned long long)step,
		 suffix[0] ? "_" : "", suffix);
	rc = outdir_sub(&rank, name, true, dir, e);
	if (rc == 1) {
		snprintf(name, sizeof name, "hang%u_step%llu%s%s.pid%d", k,
			 (unsigned long long)step, suffix[0] ? "_" : "", suffix, (int)h->pid);
		rc = outdir_sub(&rank, name, true, dir, e);
		if (rc == 1)
			rc = err_set(e, "'%s/%s' exists", rank.path, name);
	}
	outdir_close(&rank);
	return rc;
}

/* Adds an entry (no stack) for each thread with open ranges that the
 * stacks left out (they could not be taken at all). Returns the count. */
static int add_range_threads(struct control_stack *st, int n,
			     const struct nvtx_open_range *rg, size_t nr)
{
	size_t j;
	int i;

	for (j = 0; j < nr && n < CONTROL_STACK_THREADS; j++) {
		for (i = 0; i < n && st[i].tid != rg[j].tid; i++)
			;
		if (i < n)
			continue;
		memset(&st[n], 0, sizeof st[n]);
		st[n].tid = rg[j].tid;
		st[n].state = CONTROL_STACK_TIMEOUT;
		snprintf(st[n].name, sizeof st[n].name, "?");
		n++;
	}
	return n;
}

/* Takes the Python stacks (faulthandler's text, malloc'd) or says why
 * not in why[]. */
static char *python_text(char *why, size_t size)
{
	char *py = malloc(WD_PY_MAX);

	if (!py) {
		snprintf(why, size, "out of memory");
		return NULL;
	}
	if (capture_hang_stacks_all(py, WD_PY_MAX, why, size) != 0) {
		free(py);
		return NULL;
	}
	return py;
}

/* Takes hang k's recorder dump (prof.recorder{} on, prof.watchdog{ dump }
 * not false) or says why none into out->why. Under the window lock only:
 * the host thread, maybe seconds into writing a window, writes it after
 * that window. The watchdog's thread. */
static void take_dump(struct host *h, const struct wd_snap *s, uint32_t k,
		      const struct hang_asked *asked, struct wd_dump *out)
{
	char reason[64];
	struct err e;

	memset(out, 0, sizeof *out);
	if (!h->cfg->recorder.enabled) {
		snprintf(out->why, sizeof out->why, "the flight recorder is off: "
			 "prof.recorder{ steps = 20 } in the policy keeps the last steps");
		return;
	}
	if (!h->cfg->watchdog.dump) {
		snprintf(out->why, sizeof out->why, "prof.watchdog{ dump = false }");
		return;
	}
	snprintf(reason, sizeof reason, "hang %u", k);
	if (window_dump_hang(h, s->step, reason, &out->d, &e) != 0) {
		snprintf(out->why, sizeof out->why, "%s", e.msg);
		log_msg(LOG_INFO, "watchdog: no recorder dump for hang %u: %s", k, e.msg);
		return;
	}
	out->behind = hostthread_backlog(h);
	if (asked) /* named after the rank whose hang it answers */
		snprintf(out->d.job->suffix, sizeof out->d.job->suffix, "by-rank%d",
			 asked->rank);
	snprintf(out->dir, sizeof out->dir, "recorder%u_steps%llu-%llu%s%s", out->d.index,
		 (unsigned long long)out->d.first, (unsigned long long)out->d.last,
		 out->d.job->suffix[0] ? "_" : "", out->d.job->suffix);
}

/* What one hang report is made of (report() and its steps). */
struct wd_report {
	const struct wd_snap *s;
	uint32_t k;                    /* its number */
	int64_t limit;
	const struct hang_asked *asked;  /* NULL: this rank's own hang */
	struct control_stack *st;      /* the threads' stacks: n of them */
	struct nvtx_open_range *rg;    /* the open ranges: nr of them */
	struct hang_thread *th;        /* per thread: its stack and ranges */
	struct wd_gpu *gpu;
	struct wd_dump dump;           /* d.job NULL: none */
	int n;
	size_t nr;
	char why[256];                 /* why no Python stacks (py NULL) */
	char *py;
	char no_stack[ERR_MSG_MAX];
	int64_t now;
	double stalled;
	struct outdir dir;
	bool have_dir;
};

/* Takes the snapshot a report is made of: the open ranges, the threads'
 * stacks, Python's, the GPU work in flight, the recorder's dump. Returns
 * 0, or -1 when memory ran out. The watchdog's thread. */
static int report_take(struct host *h, struct wd_report *r)
{
	struct err e;
	size_t j;
	int i;

	r->st = calloc(CONTROL_STACK_THREADS, sizeof *r->st);
	r->rg = calloc(WD_RANGES_MAX, sizeof *r->rg);
	r->gpu = calloc(1, sizeof *r->gpu);
	if (!r->st || !r->rg || !r->gpu)
		return -1;
	/* The ranges first: taking stacks signals the threads, and one in a
	 * call the kernel does not restart (a sleep) may move on. */
	r->nr = h->shim->nvtx_open_ranges(r->rg, WD_RANGES_MAX);
	r->n = control_stacks_take(r->st, CONTROL_STACK_THREADS, &e);
	if (r->n < 0) {
		/* no stacks (no free signal, /proc unreadable): the threads
		 * with open ranges are still told */
		snprintf(r->no_stack, sizeof r->no_stack, "%s", e.msg);
		r->n = add_range_threads(r->st, 0, r->rg, r->nr);
	}
	r->py = python_text(r->why, sizeof r->why);
	gpu_take(r->gpu);
	r->now = clock_now_ns();
	r->stalled = (double)(r->now - r->s->start) / 1e9;
	/* After the snapshot: the dump's span covers the report's time. */
	take_dump(h, r->s, r->k, r->asked, &r->dump);
	r->th = calloc((size_t)r->n + 1, sizeof *r->th);
	if (!r->th)
		return -1;
	for (i = 0; i < r->n; i++) {
		struct hang_thread *t = &r->th[i];
		const struct control_stack *st = &r->st[i];

		t->tid = st->tid;
		t->name = st->name;
		t->state = st->state == CONTROL_STACK_OK ? HANG_STACK_OK :
			   st->state == CONTROL_STACK_BLOCKED ? HANG_STACK_BLOCKED :
			   st->state == CONTROL_STACK_GONE ? HANG_STACK_GONE : HANG_STACK_TIMEOUT;
		t->self = st->self;
		t->truncated = st->truncated;
		t->ip = st->ip;
		t->nframes = st->nframes;
		for (j = 0; j < r->nr && r->rg[j].tid != r->st[i].tid; j++)
			;
		t->ranges = &r->rg[j];
		for (; j < r->nr && r->rg[j].tid == r->st[i].tid; j++)
			t->nranges++;
		t->py = py_block(r->py, r->st[i].pthread, &t->pylen);
		t->no_stack = r->no_stack[0] ? r->no_stack : NULL;
	}
	return 0;
}

/* The plain snapshot the hang module formats (src/hang/hangreport.h): r
 * and the process it is about into *out (pointers into r and h). The watchdog's
 * thread. */
static void report_fill(struct host *h, const struct wd_report *r, struct hang_report *out)
{
	const struct wd_snap *s = r->s;

	memset(out, 0, sizeof *out);
	out->rank = h->env.rank;
	out->world_size = h->env.world_size;
	out->pid = (int)h->pid;
	out->program = h->program;
	out->hostname = h->hostname;
	out->after_s = h->cfg->watchdog.after_s;
	out->factor = h->cfg->watchdog.factor;
	out->k = r->k;
	out->limit = r->limit;
	out->asked = r->asked;
	out->step = s->step;
	out->start = s->start;
	out->step_tid = s->tid;
	out->ndur = s->ndur;
	out->median_ms = s->median_ms;
	out->mean_ms = s->mean_ms;
	memcpy(out->last_ms, s->last_ms, sizeof out->last_ms);
	out->nlast = s->nlast;
	out->now = r->now;
	out->stalled = r->stalled;
	out->th = r->th;
	out->n = r->n;
	out->py = r->py;
	out->py_why = r->why;
	out->gpu = &r->gpu->shown;
	out->dump.taken = r->dump.d.job != NULL;
	out->dump.index = r->dump.d.index;
	out->dump.first = r->dump.d.first;
	out->dump.last = r->dump.d.last;
	out->dump.behind = r->dump.behind;
	out->dump.dir = r->dump.dir;
	out->dump.why = r->dump.why;
	out->frame_text = live_frame_text;
}

/* Writes the report's three files into its folder (when it has one); a
 * failure is said. The watchdog's thread. */
static void report_write(struct host *h, const struct wd_report *r)
{
	struct hang_report hr;
	struct err e;

	if (!r->have_dir)
		return;
	report_fill(h, r, &hr);
	if (hang_write(&r->dir, &hr, &e) != 0)
		log_msg(LOG_WARN, "watchdog: hang report %u: %s", r->k, e.msg);
}


/* Says the report in the log and tells the job's other ranks of this
 * rank's own hang (prof.recorder{ job = true }: they write theirs). The
 * watchdog's thread. */
static void report_tell(struct host *h, const struct wd_report *r)
{
	const struct wd_snap *s = r->s;
	const struct hang_asked *asked = r->asked;
	const char *where = r->have_dir ? r->dir.path : "(not written)";

	if (asked)
		log_msg(LOG_WARN, "watchdog: rank %d's hang (its step %llu): hang report %u of "
			"this rank's step %llu (%.1f s so far) -> %s/", asked->rank,
			(unsigned long long)asked->step, r->k, (unsigned long long)s->step,
			r->stalled, where);
	else
		log_msg(LOG_WARN, "watchdog: step %llu has not ended after %.1f s (limit %.1f s): "
			"hang report %u -> %s/", (unsigned long long)s->step, r->stalled,
			(double)r->limit / 1e9, r->k, where);
	if (!asked && h->cfg->recorder.enabled && h->cfg->recorder.job) {
		struct jobfile pub = { 0 };

		pub.kind = JOBFILE_HANG;
		pub.step = s->step;
		snprintf(pub.reason, sizeof pub.reason, "step %llu has not ended after %.1f s",
			 (unsigned long long)s->step, r->stalled);
		jobwatch_publish(h, &pub);
	}
}

/* Runs prof.on_hang with the threads that have open ranges and the
 * kernels in flight, as the report lists them; not when memory ran out.
 * The watchdog's thread. */
static void report_hook(struct host *h, const struct wd_report *r)
{
	struct policy_hang_thread *pht = calloc((size_t)r->n + 1, sizeof *pht);
	struct policy_hang_range *phr = calloc(r->nr + 1, sizeof *phr);
	struct policy_hang_kernel phk[CAPTURE_GPU_MAX];
	struct policy_hang_info info = { 0 };
	struct err e;
	size_t j, k = 0;
	int i;

	if (!pht || !phr) {
		free(pht);
		free(phr);
		return;
	}
	for (i = 0; i < r->n; i++) {
		const struct hang_thread *t = &r->th[i];

		pht[info.nthreads].tid = r->st[i].tid;
		pht[info.nthreads].name = r->st[i].name;
		pht[info.nthreads].ranges = &phr[k];
		for (j = 0; j < t->nranges; j++, k++) {
			phr[k].name = hang_range_name(&t->ranges[j]);
			phr[k].open_s = t->ranges[j].start_ns ?
				(double)(r->now - t->ranges[j].start_ns) / 1e9 : -1;
		}
		pht[info.nthreads].nranges = t->nranges;
		info.nthreads++;
	}
	info.hang = r->k;
	info.step = r->s->step;
	info.stalled_s = r->stalled;
	info.limit_s = (double)r->limit / 1e9;
	info.dir = r->have_dir ? r->dir.path : NULL;
	info.threads = pht;
	for (j = 0; j < r->gpu->g.n; j++) {
		const struct capture_gpu_launch *l = &r->gpu->g.launch[j];

		phk[j].name = r->gpu->shown.k[j].name;
		phk[j].device = l->device;
		phk[j].stream = l->stream;
		phk[j].tid = l->tid;
		phk[j].in_flight_s = (double)(r->now - l->launched_ns) / 1e9;
	}
	info.gpu = phk;
	info.ngpu = r->gpu->g.n;
	if (policy_on_hang(h->policy, &info, &e) == POLICY_ERROR)
		host_fail(h, &e);
	free(phr);
	free(pht);
}

/* Writes the report of hang `k` (step s->step, stalled since s->start),
 * takes its recorder dump and hands it to the host thread, and runs the
 * hooks; with prof.recorder{ job = true } tells the job's other ranks.
 * `asked`: another rank's hang asked for it (job-wide): written whatever
 * this rank's own limit says, named after that rank, no hooks, not told
 * on. The watchdog's thread. */
static void report(struct host *h, const struct wd_snap *s, uint32_t k, int64_t limit,
		   const struct hang_asked *asked)
{
	struct wd_report r = { .s = s, .k = k, .limit = limit, .asked = asked,
			       .dir = { -1, "" } };
	char suffix[32] = "";
	struct err e;

	if (report_take(h, &r) != 0)
		goto out;
	if (asked)
		snprintf(suffix, sizeof suffix, "by-rank%d", asked->rank);
	else if (h->cfg->recorder.enabled && h->cfg->recorder.job)
		snprintf(suffix, sizeof suffix, "by-rank%d", h->env.rank);
	r.have_dir = make_dir(h, k, s->step, suffix, &r.dir, &e) == 0;
	if (!r.have_dir)
		log_msg(LOG_WARN, "watchdog: cannot write hang report %u: %s", k, e.msg);
	report_write(h, &r);
	report_tell(h, &r);
	/* Its files are written: the dump's reports find and link them. */
	if (r.dump.d.job)
		hostthread_submit(h, r.dump.d.job);
	r.dump.d.job = NULL;
	if (h->cfg->has_on_hang && !asked)
		report_hook(h, &r);
out:
	if (r.dump.d.job) /* no memory for the report: the dump is still written */
		hostthread_submit(h, r.dump.d.job);
	outdir_close(&r.dir);
	free(r.gpu);
	free(r.py);
	free(r.th);
	free(r.rg);
	free(r.st);
}

/* ------------------------------------------------------------ the check */

/* Takes another rank's hang that asked for a report (watchdog_ask), if
 * any, into *a. The watchdog's thread. */
static bool take_ask(struct host *h, struct hang_asked *a)
{
	struct watchdog *wd = &h->wd;
	bool pending;

	pthread_mutex_lock(&wd->ask_lock);
	pending = wd->ask.pending;
	if (pending) {
		a->rank = wd->ask.rank;
		a->step = wd->ask.step;
		snprintf(a->host, sizeof a->host, "%s", wd->ask.host);
		wd->ask.pending = false;
		wd->asked_rank = a->rank;
	}
	pthread_mutex_unlock(&wd->ask_lock);
	return pending;
}

int watchdog_ask(struct host *h, int rank, uint64_t step, const char *host, struct err *e)
{
	struct watchdog *wd = &h->wd;

	if (!atomic_load(&wd->started))
		return err_set(e, "prof.watchdog{} is not on in this process");
	pthread_mutex_lock(&wd->ask_lock);
	wd->ask.pending = true;
	wd->ask.rank = rank;
	wd->ask.step = step;
	snprintf(wd->ask.host, sizeof wd->ask.host, "%s", host ? host : "");
	pthread_mutex_unlock(&wd->ask_lock);
	wakeword_post(&wd->wake, WD_WAKE_ASK);
	return 0;
}

/* Looks for a hang and, the first time the step in progress passes the
 * limit, writes its report (report()); says when a reported step ends.
 * Returns how long to sleep before the next look (ns), or -1 for ever (no
 * watchdog, or the process is ending). The watchdog's thread. */
static int64_t check(struct host *h)
{
	/* (also called once more as the thread stops: a step that resumed
	 * just before exit is said) */
	struct watchdog *wd = &h->wd;
	const struct policy_config *c = h->cfg;
	struct wd_snap s;
	struct hang_asked asked;
	int64_t now, limit, left;

	/* (h->disabled is set at exit too: a hang already reported is still
	 * followed to its end, below) */
	if (!c->watchdog.enabled || h->forked_child ||
	    (!wd->hung && atomic_load_explicit(&h->disabled, memory_order_relaxed)))
		return -1;
	if (!take_snapshot(h, wd->hung ? wd->hung_step : UINT64_MAX, &s))
		return WD_POLL_NS;
	now = clock_now_ns();
	if (wd->hung && s.step != wd->hung_step) {
		double ms = s.hung_ms >= 0 ? s.hung_ms : (double)(s.start - wd->hung_since) / 1e6;

		log_msg(LOG_WARN, "watchdog: steps resumed: step %llu ended after %.1f s "
			"(hang %u)", (unsigned long long)wd->hung_step, ms / 1e3, wd->hangs - 1);
		wd->hung = false;
	} else if (wd->hung && s.finished) {
		log_msg(LOG_WARN, "watchdog: the process is ending with step %llu stalled "
			"for %.1f s (hang %u)", (unsigned long long)wd->hung_step,
			(double)(now - wd->hung_since) / 1e9, wd->hangs - 1);
		wd->hung = false;
	}
	if (s.finished || atomic_load_explicit(&h->disabled, memory_order_relaxed))
		return -1;
	if (take_ask(h, &asked)) {
		/* another rank's hang: this rank's state now, whatever its own
		 * limit; its own watchdog does not report this step again */
		report(h, &s, wd->hangs++, limit_ns(c, s.median_ms), &asked);
		wd->asked = true;
		wd->asked_step = s.step;
	}
	if (capture_ended_any()) {
		/* No step comes after the program's end; its teardown is no
		 * hang. Looked at again in case (finished is set at exit). */
		return WD_POLL_NS;
	}
	if (s.ndur == 0) /* armed from the first step boundary on */
		return limit_ns(c, 0);
	limit = limit_ns(c, s.median_ms);
	if (wd->hung)
		return WD_POLL_NS < limit ? WD_POLL_NS : limit;
	left = s.start + limit - now;
	if (left > 0)
		return left > WD_MIN_WAIT_NS ? left : WD_MIN_WAIT_NS;
	wd->hung = true;
	wd->hung_step = s.step;
	wd->hung_since = s.start;
	if (wd->asked && wd->asked_step == s.step) {
		/* reported already, when another rank's hang asked */
		log_msg(LOG_WARN, "watchdog: step %llu has not ended after %.1f s (limit "
			"%.1f s); its hang report was written when rank %d's hang asked",
			(unsigned long long)s.step, (double)(now - s.start) / 1e9,
			(double)limit / 1e9, wd->asked_rank);
		return WD_POLL_NS < limit ? WD_POLL_NS : limit;
	}
	report(h, &s, wd->hangs++, limit, NULL);
	return WD_POLL_NS < limit ? WD_POLL_NS : limit;
}

/* The watchdog's thread: looks, then sleeps until the next deadline or
 * until watchdog_stop() wakes it. */
static void *wd_main(void *arg)
{
	struct host *h = arg;
	struct watchdog *wd = &h->wd;
	uint32_t bits = 0;

	atomic_store(&wd->tid, (int32_t)syscall(SYS_gettid));
	while (!(bits & WD_WAKE_STOP))
		bits = wakeword_take(&wd->wake, check(h));
	check(h); /* a hang that ended (or not) as the process ends */
	return NULL;
}

int watchdog_start(struct host *h, struct err *e)
{
	struct watchdog *wd = &h->wd;
	sigset_t all, old;
	int rc;

	if (!h->cfg->watchdog.enabled || h->forked_child || atomic_load(&wd->started))
		return 0;
	pthread_mutex_init(&wd->ask_lock, NULL);
	/* Every signal blocked: the stack and Python signals, SIGTERM and
	 * the sampler's land on the program's threads. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&wd->thread, NULL, wd_main, h);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0)
		return err_errno(e, rc, "prof.watchdog: no hang is reported in this "
				 "process: cannot create the watchdog's thread");
	pthread_setname_np(wd->thread, "profhost-wd");
	atomic_store(&wd->started, 1);
	return 0;
}

void watchdog_stop(struct host *h)
{
	struct watchdog *wd = &h->wd;

	if (!atomic_load(&wd->started) ||
	    atomic_load(&wd->tid) == (int32_t)syscall(SYS_gettid))
		return;
	wakeword_post(&wd->wake, WD_WAKE_STOP);
	pthread_join(wd->thread, NULL);
	atomic_store(&wd->started, 0);
}


/*
 * window — the step side of the host: step boundaries, capture_now requests
 * and the NVTX capture range drive the schedule (src/schedule/schedule.c,
 * which decides which window opens and closes, with its index, first step,
 * reason and ticket); this file holds the lock and does what the decisions
 * mean: open and close capture generations, tell the capture sources, keep
 * the steps, hand closed windows to the host thread. The window lock is
 * held only for the state machine and a few stores; policy hooks run after
 * it is released, on copies taken under it.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../common/clock.h"
#include "../common/grow.h"
#include "../common/log.h"
#include "../util/wakeword.h"
#include "host.h"

/* A window keeps at most one step record per WINDOW_STEP_BYTES of its
 * event memory (prof.capture{buffer_mb}), and at least WINDOW_STEPS_MIN:
 * a step costs its record (32 bytes), a ProfilerStep event and its text in
 * every file, so a flood of steps stays a small share of what the window
 * may use. Later steps are dropped and counted (trace counters
 * `dropped_steps`). */
#define WINDOW_STEP_BYTES 256
#define WINDOW_STEPS_MIN 1024

/* ---- the listeners (struct window_listener): each call goes to every
 * registered listener that fills the slot, in order. */

int window_listen(struct host *h, const struct window_listener *l, void *ctx,
		  struct err *e)
{
	struct window_state *w = &h->win;

	if (w->nlisten >= WINDOW_LISTENERS)
		return err_set(e, "internal: more than %d window listeners", WINDOW_LISTENERS);
	w->listen[w->nlisten].l = l;
	w->listen[w->nlisten].ctx = ctx;
	w->nlisten++;
	return 0;
}

/* What window.c tells its listeners (struct window_listener's news but
 * step, dump and the rotated_wanted question, which have their own). */
enum window_news {
	NEWS_WARMUP,
	NEWS_PREPARE,
	NEWS_OPEN,          /* with a generation */
	NEWS_CLOSE,         /* with a generation */
	NEWS_RECORDER,      /* with a generation (0: stopped) */
	NEWS_DUMP_TAKEN,
	NEWS_DUMP_DROPPED
};

/* Tells every listener that has the slot, in the order they registered;
 * `gen` for the news that carry one. Lock held. */
static void tell(struct window_state *w, enum window_news news, uint64_t gen)
{
	unsigned i;

	for (i = 0; i < w->nlisten; i++) {
		const struct window_listener *l = w->listen[i].l;
		void *ctx = w->listen[i].ctx;

		switch (news) {
		case NEWS_WARMUP:
			if (l->warmup)
				l->warmup(ctx);
			break;
		case NEWS_PREPARE:
			if (l->prepare)
				l->prepare(ctx);
			break;
		case NEWS_OPEN:
			if (l->open)
				l->open(ctx, gen);
			break;
		case NEWS_CLOSE:
			if (l->close)
				l->close(ctx, gen);
			break;
		case NEWS_RECORDER:
			if (l->recorder)
				l->recorder(ctx, gen);
			break;
		case NEWS_DUMP_TAKEN:
			if (l->dump_taken)
				l->dump_taken(ctx);
			break;
		case NEWS_DUMP_DROPPED:
			if (l->dump_dropped)
				l->dump_dropped(ctx);
			break;
		}
	}
}

/* Whether a listener wants the host thread woken for a recorder rotation
 * (window_listener.rotated_wanted). Lock held. */
static bool ask_rotated_wanted(struct window_state *w)
{
	unsigned i;

	for (i = 0; i < w->nlisten; i++)
		if (w->listen[i].l->rotated_wanted &&
		    w->listen[i].l->rotated_wanted(w->listen[i].ctx))
			return true;
	return false;
}

/* Lock NOT held. */
static void tell_dump(struct window_state *w, const struct jobfile *f)
{
	unsigned i;

	for (i = 0; i < w->nlisten; i++)
		if (w->listen[i].l->dump)
			w->listen[i].l->dump(w->listen[i].ctx, f);
}

/* ---- the flight recorder (docs/recorder.md; bookkeeping in
 * src/schedule/recorder.c). Between windows it keeps a capture generation
 * open and rotates it at step boundaries; the host thread gives old
 * generations back and writes dumps. */

/* The pre-fault lead of the recorder's first segment (evbuf_open_lead):
 * two chunks, then each segment takes what the one before used. */
#define REC_OPEN_LEAD ((size_t)2 * EVBUF_CHUNK_BYTES)

/* Gives `n` generations back now: the recorder rotates faster than the
 * host thread could be woken (a segment may last microseconds), and a
 * slot given back late drops the next segment's records. Costs an
 * madvise of what the pools used. Lock held. */
static void rec_release(struct host *h, const uint64_t *gens, uint32_t n)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		h->shim->evbuf_release(gens[i]);
}

/* Opens a recorder segment starting at step `first` (`mid`: inside it,
 * rec_opened's), in place of the open one if any (evbuf_rotate: the
 * program's other threads lose nothing in between); the oldest held one
 * goes back when three are held. The stepping thread replays its open
 * ranges into a segment opened at a boundary (rec_replay). Lock held; no
 * generation open but the recorder's. */
static void rec_open_segment(struct host *h, uint64_t first, int64_t now, bool mid)
{
	struct window_state *w = &h->win;
	uint64_t gen, rel, closed;
	struct err e;

	if (hostthread_start(h, &e) != 0) {
		w->fail = e;
		w->fail_pending = true;
		return;
	}
	salvage_ensure(h);
	if (w->rec.open) {
		gen = h->shim->evbuf_rotate(w->rec.pool_bytes, &closed);
		rec_closed(&w->rec);
		/* what the sources hold of the closed segment's steps goes
		 * into the ring (capture_recorder_ops.rotated), when one
		 * holds anything (a CPU-only loop: no wake, #29) */
		if (ask_rotated_wanted(w))
			wakeword_post(&h->ht.wake, HOST_WAKE_ROTATED);
	} else {
		/* a segment's writers take a chunk or two (evbuf_open would
		 * populate 2 MiB ahead, at each resume) */
		gen = h->shim->evbuf_open_lead(w->rec.pool_bytes, REC_OPEN_LEAD);
	}
	if (!gen)
		return; /* a generation is open: nothing for the recorder */
	salvage_check_pool(h, gen, w->rec.pool_bytes, "prof.recorder{ mb }");
	if (rec_opened(&w->rec, gen, first, now, mid, &rel) == 1)
		rec_release(h, &rel, 1);
	if (!mid)
		w->rec_replay = true;
	w->rec_told = true;
	tell(w, NEWS_RECORDER, gen);
}

/* Closes the recorder's open segment, if any. Lock held. */
static void rec_close_segment(struct host *h)
{
	struct window_state *w = &h->win;

	if (!w->rec.open)
		return;
	h->shim->evbuf_close();
	rec_closed(&w->rec);
}

/* The recorder stops keeping segments: the sources that record for it
 * stop (capture_recorder_ops.segment). Lock held; its segment closed. */
static void rec_stop(struct host *h)
{
	if (!h->win.rec_told)
		return;
	h->win.rec_told = false;
	tell(&h->win, NEWS_RECORDER, 0);
}

/* A window opens: the recorder stops and gives its segments back; it
 * starts again at the first boundary without a window. Lock held. */
static void rec_suspend(struct host *h)
{
	uint64_t gens[REC_SEGMENTS];

	rec_close_segment(h);
	rec_stop(h);
	rec_release(h, gens, rec_take_all(&h->win.rec, gens));
}

/* At a boundary without a window: the step that ended goes into the open
 * segment (rotating a full one), or a segment opens. Lock held. */
static void rec_boundary(struct host *h, uint64_t ended, int64_t start,
			 int64_t now, int32_t tid)
{
	struct window_state *w = &h->win;
	struct rec_step s = { ended, start, now - start, tid };

	if (!w->rec.cfg.enabled || w->sched.open || w->finished)
		return;
	if (w->rec_paused) {
		/* prof.recorder{ enabled = false }: the held segments go back,
		 * the sources stop, as when a window opens. */
		if (w->rec_told || w->rec.nseg) {
			rec_suspend(h);
			log_msg(LOG_DEBUG, "recorder paused from step %llu on",
				(unsigned long long)ended + 1);
		}
		return;
	}
	if (!w->rec.open) {
		rec_open_segment(h, ended + 1, now, false);
	} else if (rec_step(&w->rec, &s)) {
		rec_open_segment(h, ended + 1, now, false);
	}
}

/* The host whose recorder the pool-filling hook serves (set once, by
 * window_init: one host per process). */
static struct host *fill_host;

/* evbuf's fill hook: generation `gen`'s pool is three quarters handed out.
 * Tells the host thread (window_pool_filling). Any thread, maybe inside a
 * signal handler: an atomic store and a futex wake. */
static void pool_filling(uint64_t gen)
{
	struct host *h = fill_host;

	atomic_store(&h->ht.fill_gen, gen);
	wakeword_post(&h->ht.wake, HOST_WAKE_FILL);
}

/* Opens a capture generation for the window the schedule just opened
 * (r->open_index, r->open_reason), starting with step r->step. Without a
 * host thread to write it the window is skipped (sched_open_failed) and the
 * failure said by the caller after the lock. Lock held. */
static void open_window(struct host *h, const struct sched_result *r, int64_t now)
{
	struct window_state *w = &h->win;
	struct err e;

	if (hostthread_start(h, &e) != 0) {
		/* Said after the lock: host_fail may exit the process. */
		sched_open_failed(&w->sched);
		w->fail = e;
		w->fail_pending = true;
		return;
	}
	rec_suspend(h); /* the window records; the recorder's generation closes */
	w->prepared = false; /* the next window gets its own */
	salvage_ensure(h);
	w->gen = h->shim->evbuf_open(h->cfg->capture.buffer_bytes);
	salvage_check_pool(h, w->gen, h->cfg->capture.buffer_bytes,
			   "prof.capture{ buffer_mb }");
	tell(w, NEWS_OPEN, w->gen);
	w->start_ts = now;
	w->nsteps = 0;
	w->dropped_steps = 0;
	w->max_steps = h->cfg->capture.buffer_bytes / WINDOW_STEP_BYTES;
	if (w->max_steps < WINDOW_STEPS_MIN)
		w->max_steps = WINDOW_STEPS_MIN;
	log_msg(LOG_DEBUG, "window %u opens at step %llu (%s)", r->open_index,
		(unsigned long long)r->step, r->open_reason);
}

/* Closes the window the schedule just saved (r: its index, steps, reason
 * and ticket) into a job for the host thread; NULL when memory ran out
 * (the window is lost and said so). Lock held. */
static struct host_job *close_window(struct host *h, const struct sched_result *r,
				     int64_t now)
{
	struct window_state *w = &h->win;
	struct host_job *job;

	h->shim->evbuf_close();
	tell(w, NEWS_CLOSE, w->gen);
	job = calloc(1, sizeof *job);
	if (!job) {
		log_msg(LOG_ERROR, "out of memory: window %u (steps %llu-%llu) is lost",
			r->window, (unsigned long long)r->first,
			(unsigned long long)r->last);
		h->shim->evbuf_release(w->gen);
		return NULL;
	}
	job->gen = w->gen;
	job->window = r->window;
	job->first = r->first;
	job->last = r->last;
	snprintf(job->reason, sizeof job->reason, "%s", r->reason);
	job->start_ts = w->start_ts;
	job->end_ts = now;
	job->steps = w->steps;
	job->nsteps = w->nsteps;
	job->dropped_steps = w->dropped_steps;
	job->ticket = r->ticket;
	if (r->reason && strncmp(r->reason, HOST_JOB_CAPTURE, strlen(HOST_JOB_CAPTURE)) == 0)
		snprintf(job->suffix, sizeof job->suffix, HOST_JOB_CAPTURE_SUFFIX);
	w->steps = NULL;
	w->nsteps = w->cap_steps = 0;
	return job;
}

/* A window is about to open (see update_arm): what its opening would
 * otherwise cost the stepping thread inside the window's first step (the
 * host thread and the helpers starting, the pool's mapping and first pages,
 * the sampler's thread and the first unwind) happens now, once per window.
 * Lock held. */
static void prepare_window(struct host *h)
{
	struct window_state *w = &h->win;
	struct err e;

	if (w->prepared)
		return;
	w->prepared = true;
	if (hostthread_start(h, &e) != 0) {
		w->fail = e;
		w->fail_pending = true;
		return;
	}
	salvage_ensure(h);
	h->shim->evbuf_prepare(h->cfg->capture.buffer_bytes);
	tell(w, NEWS_PREPARE, 0);
}

/* Tells the shim whether NVTX pushes should keep their names: while a
 * window records, during warm-up, in the step before a window opens, and
 * whenever a capture range may still open one (see src/shim/nvtx.h).
 * Whenever armed and not recording, a window may open at the next
 * boundary: it is prepared. Calibrates the clock (at most once a second).
 * Lock held. */
static void update_arm(struct host *h, int64_t now)
{
	struct window_state *w = &h->win;
	bool armed = sched_armed(&w->sched) ||
		     (w->rec.cfg.enabled && !w->finished);
	/* The watchdog names each thread's open ranges and their age: NVTX
	 * pushes keep names and times (not the window's preparation). */
	bool names = armed || (h->cfg->watchdog.enabled && !w->finished);

	if (names != w->armed) {
		h->shim->nvtx_arm(names);
		w->armed = names;
	}
	if (armed && !w->sched.open)
		prepare_window(h);
	clock_calibrate(now);
}

/* The time of an event at a step boundary, read under the window lock:
 * boundaries from several threads are then ordered, and never earlier than
 * the current step's start (a clock read on another core is clamped), so
 * no step has a negative duration. Lock held. */
static int64_t lock_now(const struct window_state *w)
{
	int64_t now = clock_now_ns();

	return now < w->step_start ? w->step_start : now;
}

/* Records the step that just ended in the recording window; a step that
 * began before the window (a capture range opened it) starts with the
 * window. Lock held. */
static void keep_step(struct window_state *w, uint64_t step, int64_t start,
		      int64_t end, int32_t tid, int partial)
{
	struct trace_step *p;

	if (start < w->start_ts)
		start = w->start_ts;
	if (w->nsteps >= w->max_steps) {
		w->dropped_steps++; /* counted in the trace and its summary */
		return;
	}
	p = grow_array_max(w->steps, &w->cap_steps, w->nsteps + 1, sizeof *p, 16,
			   w->max_steps);
	if (!p) {
		w->dropped_steps++; /* the span is missing; the events are not */
		return;
	}
	w->steps = p;
	w->steps[w->nsteps].step = step;
	w->steps[w->nsteps].ts = start;
	w->steps[w->nsteps].dur = end - start;
	w->steps[w->nsteps].tid = tid;
	w->steps[w->nsteps].partial = partial;
	w->nsteps++;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

void window_step_stats(const struct window_state *w, double *median,
		       double *mean)
{
	double tmp[HOST_DUR_RING], sum = 0;
	size_t i;

	*median = *mean = 0;
	if (!w->ndur)
		return;
	memcpy(tmp, w->dur_ms, w->ndur * sizeof *tmp);
	for (i = 0; i < w->ndur; i++)
		sum += tmp[i];
	qsort(tmp, w->ndur, sizeof *tmp, cmp_double);
	*median = w->ndur % 2 ? tmp[w->ndur / 2]
			      : (tmp[w->ndur / 2 - 1] + tmp[w->ndur / 2]) / 2;
	*mean = sum / (double)w->ndur;
}

/* Tells the listeners about the step that begins (the capture sources'
 * capture_ops.step). Lock held. */
static void tell_step(const struct window_state *w)
{
	bool next = sched_next_active(&w->sched);
	unsigned i;

	for (i = 0; i < w->nlisten; i++)
		if (w->listen[i].l->step)
			w->listen[i].l->step(w->listen[i].ctx, w->sched.step,
					     w->sched.open, next);
}

/* Reports a failure open_window() left, once the lock is released. */
static void report_pending(struct host *h, bool failed, const struct err *e)
{
	if (failed)
		host_fail(h, e);
}

/* Takes the failure open_window() left, if any. Lock held. */
static bool take_failure(struct window_state *w, struct err *e)
{
	bool failed = w->fail_pending;

	if (failed)
		*e = w->fail;
	w->fail_pending = false;
	return failed;
}

/* Fills *wi for the window-start hook from the window now recording; its
 * reason is copied into `reason`, so the hook never reads the window's
 * state after the lock is released. Lock held. */
static void window_start_info(const struct window_state *w,
			      struct policy_window_info *wi,
			      char reason[HOST_REASON_MAX])
{
	memset(wi, 0, sizeof *wi);
	wi->window = w->sched.index;
	wi->first_step = wi->last_step = w->sched.window_first;
	snprintf(reason, HOST_REASON_MAX, "%s", w->sched.reason);
	wi->reason = reason;
}

/* Runs a window hook, reporting a failure. */
static void report_hook(struct host *h, enum policy_status st, const struct err *e)
{
	if (st == POLICY_ERROR)
		host_fail(h, e);
	else if (st == POLICY_BUSY)
		log_msg(LOG_DEBUG, "policy busy: a step hook was skipped");
}

void window_pool_filling(struct host *h, uint64_t gen)
{
	struct window_state *w = &h->win;
	struct recorder *r = &w->rec;

	pthread_mutex_lock(&w->lock);
	if (r->open && r->seg[r->nseg - 1].gen == gen && !w->finished &&
	    !w->sched.open) {
		rec_open_segment(h, w->sched.step, lock_now(w), true);
	}
	pthread_mutex_unlock(&w->lock);
}

void window_init(struct host *h)
{
	struct window_state *w = &h->win;
	struct sched_result r;
	struct rec_config rc;
	const char *msg;
	bool replay;
	struct err e;

	pthread_mutex_init(&w->lock, NULL);
	rc.enabled = h->cfg->recorder.enabled;
	rc.steps = h->cfg->recorder.steps;
	rc.bytes = h->cfg->recorder.bytes;
	rc.max_dumps = h->cfg->recorder.max_dumps;
	msg = rec_config_check(&rc);
	if (msg) {
		log_msg(LOG_WARN, "prof.recorder: %s; the recorder is off", msg);
		rc.enabled = false;
	}
	if (rec_init(&w->rec, &rc) != 0)
		log_msg(LOG_WARN, "prof.recorder: out of memory; the recorder is off");
	if (w->rec.cfg.enabled && h->shim->evbuf_set_fill_hook) {
		fill_host = h;
		h->shim->evbuf_set_fill_hook(pool_filling);
	}
	sched_init(&w->sched, &h->cfg->schedule, &r);
	sched_range_config(&w->sched, h->cfg->capture_range.nvtx != NULL,
			   h->cfg->capture_range.count);
	w->step_start = clock_now_ns();
	w->step_tid = (int32_t)syscall(SYS_gettid);
	if (r.warmup_start)
		tell(w, NEWS_WARMUP, 0);
	if (r.open_window)
		open_window(h, &r, w->step_start);
	/* prof.recorder{ enabled = false } in the file: set up, paused. */
	w->rec_paused = w->rec.cfg.enabled && h->cfg->recorder.start_paused;
	if (w->rec.cfg.enabled && !w->rec_paused && !w->sched.open)
		rec_open_segment(h, 0, w->step_start, false);
	update_arm(h, w->step_start);
	tell_step(w);
	replay = w->rec_replay;
	w->rec_replay = false;
	salvage_publish(h);
	atomic_store(&w->ready, 1);
	report_pending(h, take_failure(w, &e), &e);
	if (replay)
		h->shim->nvtx_replay();
}

/* The calling thread's kernel id, asked of the kernel once per thread: a
 * boundary is on the stepping thread's path and gettid is a system call,
 * a microsecond or more on a VM every step (#29). The default TLS model:
 * libprofhost-core.so may come with dlopen, and this is read once a step,
 * not per event. A forked child's thread would keep its parent's id, but
 * the host is off in a forked child (window_step returns first). */
static int32_t self_tid(void)
{
	static _Thread_local int32_t tid; /* 0: not asked yet */

	if (!tid)
		tid = (int32_t)syscall(SYS_gettid);
	return tid;
}

void window_step(struct host *h)
{
	struct window_state *w = &h->win;
	struct sched_result r;
	struct policy_step_info info;
	struct policy_window_info wi;
	char reason[HOST_REASON_MAX];
	struct host_job *job = NULL;
	int64_t now;
	int32_t tid;
	bool opened = false, hooks, failed, replay;
	double dur_ms;
	struct err e, fe;

	if (atomic_load_explicit(&h->disabled, memory_order_relaxed) ||
	    !atomic_load_explicit(&w->ready, memory_order_acquire))
		return;
	tid = self_tid();
	pthread_mutex_lock(&w->lock);
	if (w->finished) {
		pthread_mutex_unlock(&w->lock);
		return;
	}
	now = lock_now(w);
	dur_ms = (double)(now - w->step_start) / 1e6;
	w->dur_ms[w->dur_pos] = dur_ms;
	w->dur_pos = (w->dur_pos + 1) % HOST_DUR_RING;
	if (w->ndur < HOST_DUR_RING)
		w->ndur++;
	info.step = w->sched.step;
	info.action = sched_action_name(w->sched.action);
	info.duration_ms = dur_ms;
	if (w->sched.open)
		keep_step(w, w->sched.step, w->step_start, now, tid, 0);
	if (w->sched.open || w->rec.open)
		salvage_step(h, info.step, w->step_start, now - w->step_start, tid);
	/* The schedule closes the window unless a capture range holds it, and
	 * a window it opens inside one joins it (schedule.h). */
	sched_on_step(&w->sched, &r);
	if (r.save)
		job = close_window(h, &r, now);
	if (r.warmup_start)
		tell(w, NEWS_WARMUP, 0);
	if (r.open_window) {
		open_window(h, &r, now);
		opened = w->sched.open;
	}
	rec_boundary(h, info.step, w->step_start, now, tid);
	update_arm(h, now);
	tell_step(w);
	w->step_start = now;
	if (opened) {
		/* The window's first step starts once profhost has opened it
		 * (its sources armed, this thread's open ranges replayed): the
		 * opening is profhost's cost, not the program's first step. The
		 * window itself began at the boundary: what other threads (and
		 * the sampler's first tick) record meanwhile is in it. */
		h->shim->nvtx_replay();
		w->step_start = lock_now(w);
	}
	w->step_tid = tid;
	info.recording = w->sched.open;
	hooks = h->cfg->has_on_step || (opened && h->cfg->has_on_window_start);
	if (hooks)
		window_step_stats(w, &info.median_ms, &info.mean_ms);
	if (opened)
		window_start_info(w, &wi, reason);
	failed = take_failure(w, &fe);
	replay = !opened && w->rec_replay;
	w->rec_replay = false;
	salvage_publish(h);
	pthread_mutex_unlock(&w->lock);

	report_pending(h, failed, &fe);
	if (job)
		hostthread_submit(h, job);
	if (replay)
		h->shim->nvtx_replay(); /* this thread's open ranges, clipped */
	if (opened && h->cfg->has_on_window_start)
		report_hook(h, policy_on_window_start(h->policy, &wi, &e), &e);
	if (h->cfg->has_on_step)
		report_hook(h, policy_on_step(h->policy, &info, &e), &e);
}

/* Why a capture_now or dump request for `steps` steps cannot be taken in
 * this process (-1, *e set), or 0. Any thread, no lock. */
static int refuse_request(struct host *h, unsigned steps, struct err *e)
{
	if (h->forked_child)
		return err_set(e, "this is a child forked from process "
			       "%d; profiling stays with the parent", (int)h->parent_pid);
	if (atomic_load_explicit(&h->disabled, memory_order_relaxed))
		return err_set(e, "profhost is not running in this process");
	if (steps == 0)
		return err_set(e, "'steps' must be at least 1");
	return 0;
}

int window_capture_now(struct host *h, unsigned steps, const char *reason,
		       struct err *e)
{
	struct window_state *w = &h->win;
	bool whole;
	int rc;

	if (refuse_request(h, steps, e) != 0)
		return -1;
	pthread_mutex_lock(&w->lock);
	whole = w->sched.cfg.whole && w->sched.recording && !w->sched.next_cfg_pending;
	rc = w->finished || whole ? -1 : sched_capture_now(&w->sched, steps, reason);
	if (rc == 0)
		update_arm(h, clock_now_ns());
	pthread_mutex_unlock(&w->lock);
	if (whole)
		return err_set(e, "the whole process is being recorded in one window "
			       "(prof.schedule{ whole = true }): every step is in it already");
	if (rc != 0)
		return err_set(e, "a capture request is already queued");
	log_msg(LOG_DEBUG, "capture_now: %u steps (%s)", steps, reason ? reason : "");
	return 0;
}

int window_capture_at(struct host *h, unsigned steps, uint64_t first,
		      const char *reason, struct err *e)
{
	struct window_state *w = &h->win;
	bool whole;
	int rc;

	if (refuse_request(h, steps, e) != 0)
		return -1;
	pthread_mutex_lock(&w->lock);
	whole = w->sched.cfg.whole && w->sched.recording && !w->sched.next_cfg_pending;
	rc = w->finished || whole ? -1 : sched_capture_at(&w->sched, steps, first, reason);
	if (rc == 0)
		update_arm(h, clock_now_ns());
	pthread_mutex_unlock(&w->lock);
	if (whole)
		return err_set(e, "the whole process is being recorded in one window "
			       "(prof.schedule{ whole = true }): every step is in it already");
	if (rc != 0)
		return err_set(e, w->finished ? "the process is ending"
				  : "a capture request is already queued");
	return 0;
}

bool window_job_position(struct host *h, uint64_t *step, int64_t *step_ns)
{
	struct window_state *w = &h->win;
	double median, mean;
	int64_t ns;
	bool stepped;

	pthread_mutex_lock(&w->lock);
	*step = w->sched.step;
	stepped = w->ndur > 0;
	window_step_stats(w, &median, &mean);
	pthread_mutex_unlock(&w->lock);
	ns = (int64_t)(median * 1e6);
	*step_ns = ns > 1000000 ? ns : 1000000;
	return stepped;
}

/* Makes the dump job of what rec_take() took, with `partial` (may be
 * NULL: none) as its last step, the one running when the process ends;
 * NULL when memory ran out (its generations are then given back). Lock
 * held. */
static struct host_job *dump_job(struct host *h, struct rec_dump *d,
				 const struct trace_step *partial,
				 const char *reason, int64_t now)
{
	struct host_job *job = calloc(1, sizeof *job);
	struct trace_step *steps = malloc((d->nsteps + 1) * sizeof *steps);
	uint32_t i;

	if (!job || !steps) {
		free(job);
		free(steps);
		rec_release(h, d->gens, d->ngens);
		return NULL;
	}
	for (i = 0; i < d->nsteps; i++) {
		steps[i].step = d->steps[i].step;
		steps[i].ts = d->steps[i].ts;
		steps[i].dur = d->steps[i].dur;
		steps[i].tid = d->steps[i].tid;
		steps[i].partial = 0;
	}
	job->dump = true;
	memcpy(job->gens, d->gens, sizeof job->gens);
	job->ngens = d->ngens;
	job->nskip = d->nskip;
	job->window = d->index;
	job->first = d->first;
	job->last = d->last;
	snprintf(job->reason, sizeof job->reason, "%s", reason ? reason : "dump");
	job->start_ts = d->start_ts;
	job->cut_ts = d->cut_ts;
	job->end_ts = now;
	job->steps = steps;
	job->nsteps = d->nsteps;
	/* job-wide dumps are named after the rank whose dump it was: this
	 * one's own (window_dump_job renames an answer) */
	if (h->cfg->recorder.job)
		snprintf(job->suffix, sizeof job->suffix, "by-rank%d", h->env.rank);
	if (partial) {
		steps[job->nsteps++] = *partial;
		job->last = partial->step;
	}
	return job;
}

/* Whether the recorder can dump now: 0 (take it), 1 (merged: every step
 * it would hold is in the last dump, which writes them), or -1 with *e
 * saying why nothing will be written. `running`: the dump holds the step
 * now running, partial (the hang watchdog's): it is never merged, and a
 * segment holding that step's records is enough. Lock held. */
static int dump_check(struct host *h, bool running, struct err *e)
{
	struct window_state *w = &h->win;
	size_t queued;

	if (w->finished)
		return err_set(e, "the process is ending");
	if (!w->rec.cfg.enabled)
		return err_set(e, "the recorder is off: turn it on with "
			       "prof.recorder{ steps = 20 } in the policy file");
	if (w->rec_paused)
		return err_set(e, "the recorder is off (paused by prof.recorder{ "
			       "enabled = false }): resume it with prof.recorder{ "
			       "enabled = true }");
	if (w->sched.open)
		return err_set(e, "window %u is recording these steps: its own "
			       "folder will hold them", w->sched.index);
	if (!running && w->sched.step > 0 && rec_merges(&w->rec, w->sched.step - 1))
		return 1;
	if (w->rec.dumps >= w->rec.cfg.max_dumps)
		return err_set(e, "this run already wrote its %u dumps (raise "
			       "prof.recorder{ max_dumps = ... })", w->rec.cfg.max_dumps);
	/* A job handed over now would be skipped, never written. */
	queued = hostthread_full(h);
	if (queued)
		return err_set(e, "the host is still writing %zu earlier windows or "
			       "dumps: this one is not taken (dump less often)", queued);
	if (running && !w->rec.open)
		return err_set(e, "the recorder holds nothing of this step");
	if (!w->rec.open || (!running && rec_held_steps(&w->rec) == 0))
		return err_set(e, "no complete step recorded yet");
	return 0;
}

/* Takes the recorder's last `steps` (0: its own `steps`) complete steps
 * into a dump job (*job), closing its open segment; the caller reopens one
 * if the process goes on. With `ending` (the process ends: a fatal signal,
 * an uncaught exception; or a hang) the step now running is added as a
 * step marked partial, as a window's last step is at exit; with no
 * complete step held, that step alone. Returns 0, or -1 with *e
 * when memory ran out (the sources were told capture_recorder_ops.dump_taken, then
 * dump_dropped: no collect follows). Lock held; dump_check() said 0. */
static int dump_take(struct host *h, unsigned steps, const char *reason,
		     bool ending, int64_t now, struct host_job **job, struct err *e)
{
	struct window_state *w = &h->win;
	struct trace_step cur = { w->sched.step, w->step_start, now - w->step_start,
				  w->step_tid, 1 };
	struct rec_dump d;
	int rc;

	*job = NULL;
	tell(w, NEWS_DUMP_TAKEN, 0); /* before the segments close */
	rec_close_segment(h);
	if (ending && rec_held_steps(&w->rec) == 0)
		rc = rec_take_running(&w->rec, cur.step, cur.ts, &d);
	else
		rc = rec_take(&w->rec, steps ? steps : w->rec.cfg.steps, &d);
	if (rc == 0) {
		*job = dump_job(h, &d, ending ? &cur : NULL, reason, now);
		free(d.steps);
	}
	if (*job)
		return 0;
	/* No collect will follow: the sources hear the dump is over. */
	tell(w, NEWS_DUMP_DROPPED, 0);
	return err_set(e, "out of memory: the recorder dump (%s) is not written",
		       reason ? reason : "dump");
}

/* Takes the dump dump_check() allowed (dump_take: `ending` adds the
 * running step, partial) into *job, and opens a new recorder segment in
 * which the running step goes on. Window lock held. Returns 0, or -1 with
 * *e. */
static int dump_now(struct host *h, unsigned steps, const char *reason, bool ending,
		    struct host_job **job, struct err *e)
{
	struct window_state *w = &h->win;
	int64_t now = lock_now(w);
	int rc = dump_take(h, steps, reason, ending, now, job, e);

	w->rec_merge_said = false;
	rec_open_segment(h, w->sched.step, now, false);
	return rc;
}

/* Tells the job's other ranks of this rank's dump `job` (its last step
 * running when `partial`): prof.recorder{ job = true }. */
static void publish_dump(struct host *h, const struct host_job *job, bool partial)
{
	struct jobfile f = { 0 };

	f.kind = JOBFILE_DUMP;
	f.first = job->first;
	f.last = job->last;
	f.partial = partial;
	snprintf(f.reason, sizeof f.reason, "%s", job->reason);
	tell_dump(&h->win, &f);
}

/* window_dump and window_dump_ending: `ending` adds the running step,
 * partial. */
static int dump_request(struct host *h, unsigned steps, const char *reason,
			bool ending, struct err *e)
{
	struct window_state *w = &h->win;
	struct host_job *job = NULL;
	int rc;
	bool replay, say_merge = false;
	uint32_t merged_into = 0;

	if (refuse_request(h, steps ? steps : 1, e) != 0)
		return -1;
	pthread_mutex_lock(&w->lock);
	rc = dump_check(h, false, e);
	if (rc == 1) {
		/* Said once per dump: a hook may ask on every slow step. */
		merged_into = w->rec.dumps - 1;
		say_merge = !w->rec_merge_said;
		w->rec_merge_said = true;
		rc = 0;
	} else if (rc == 0) {
		rc = dump_now(h, steps, reason, ending, &job, e);
	}
	replay = w->rec_replay;
	w->rec_replay = false;
	salvage_publish(h);
	pthread_mutex_unlock(&w->lock);
	if (say_merge)
		log_msg(LOG_DEBUG, "dump (%s) merged into recorder dump %u: no step "
			"completed since it", reason ? reason : "dump", merged_into);
	if (job) {
		log_msg(LOG_DEBUG, "dump %u: steps %llu-%llu (%s)", job->window,
			(unsigned long long)job->first, (unsigned long long)job->last,
			job->reason);
		if (h->cfg->recorder.job)
			publish_dump(h, job, ending);
		hostthread_submit(h, job);
	}
	if (replay)
		h->shim->nvtx_replay();
	return rc;
}

int window_dump(struct host *h, unsigned steps, const char *reason,
		struct err *e)
{
	return dump_request(h, steps, reason, false, e);
}

int window_dump_ending(struct host *h, const char *reason, struct err *e)
{
	return dump_request(h, 0, reason, true, e);
}

int window_dump_job(struct host *h, const struct window_job_dump *req, struct err *e)
{
	struct window_state *w = &h->win;
	struct host_job *job = NULL;
	struct trace_step cur;
	struct rec_dump d;
	uint64_t lo = 0, hi = 0, first;
	int64_t now;
	bool running, held, replay;
	int rc;

	if (refuse_request(h, 1, e) != 0)
		return -1;
	pthread_mutex_lock(&w->lock);
	now = lock_now(w);
	cur = (struct trace_step){ w->sched.step, w->step_start, now - w->step_start,
				   w->step_tid, 1 };
	rc = dump_check(h, true, e);
	if (rc == 0 && w->rec.dumps > 0 && w->rec.dumped_last >= req->last)
		rc = 2; /* its own dump holds them (or held them before) */
	else if (rc == 0 && cur.step < req->last && !req->force)
		rc = 1; /* it has not got there yet */
	if (rc != 0)
		goto out;
	/* steps its own last dump took are in that dump's folder */
	first = req->first;
	if (w->rec.dumps > 0 && w->rec.dumped_last >= first)
		first = w->rec.dumped_last + 1;
	running = cur.step <= req->last;
	held = rec_held_span(&w->rec, &lo, &hi);
	if (!running && (!held || lo > req->last || hi < first)) {
		/* none of them: the recorder is left as it is */
		if (held)
			rc = err_set(e, "it no longer holds any of steps %llu-%llu (it holds "
				     "steps %llu-%llu: prof.recorder{ steps } keeps the last "
				     "%u)", (unsigned long long)req->first,
				     (unsigned long long)req->last, (unsigned long long)lo,
				     (unsigned long long)hi, w->rec.cfg.steps);
		else
			rc = err_set(e, "it holds none of steps %llu-%llu",
				     (unsigned long long)req->first, (unsigned long long)req->last);
		goto out;
	}
	tell(w, NEWS_DUMP_TAKEN, 0); /* before the segments close */
	rec_close_segment(h);
	if (rec_take_range(&w->rec, first, running ? cur.step : req->last,
			   running ? cur.ts : 0, &d) != 0) {
		tell(w, NEWS_DUMP_DROPPED, 0); /* no collect follows */
		rc = err_set(e, "out of memory: the job dump is not written");
	} else {
		job = dump_job(h, &d, running ? &cur : NULL, req->reason, now);
		free(d.steps);
		if (!job) {
			tell(w, NEWS_DUMP_DROPPED, 0);
			rc = err_set(e, "out of memory: the job dump is not written");
		}
	}
	if (job) {
		snprintf(job->suffix, sizeof job->suffix, "by-rank%d", req->rank);
		if (!running && job->nsteps)
			/* records of later steps (this rank is ahead) stay out */
			job->end_ts = job->steps[job->nsteps - 1].ts + job->steps[job->nsteps - 1].dur;
		if (job->first > req->first && first > req->first)
			snprintf(job->note, sizeof job->note, "job dump of steps %llu-%llu: "
				 "this rank no longer held steps %llu-%llu (given back with "
				 "its earlier dump)",
				 (unsigned long long)req->first, (unsigned long long)req->last,
				 (unsigned long long)req->first, (unsigned long long)job->first - 1);
		else if (job->first > req->first)
			snprintf(job->note, sizeof job->note, "job dump of steps %llu-%llu: "
				 "this rank no longer held steps %llu-%llu (prof.recorder{ "
				 "steps } keeps the last %u)",
				 (unsigned long long)req->first, (unsigned long long)req->last,
				 (unsigned long long)req->first, (unsigned long long)job->first - 1,
				 w->rec.cfg.steps);
		else if (running && cur.step < req->last)
			snprintf(job->note, sizeof job->note, "job dump of steps %llu-%llu: "
				 "this rank was still in step %llu (written so far, partial)",
				 (unsigned long long)req->first, (unsigned long long)req->last,
				 (unsigned long long)cur.step);
	}
	w->rec_merge_said = false;
	/* the current step goes on in a new segment */
	rec_open_segment(h, w->sched.step, now, false);
out:
	replay = w->rec_replay;
	w->rec_replay = false;
	salvage_publish(h);
	pthread_mutex_unlock(&w->lock);
	if (job) {
		log_msg(LOG_DEBUG, "job dump %u: steps %llu-%llu (%s)", job->window,
			(unsigned long long)job->first, (unsigned long long)job->last,
			job->reason);
		hostthread_submit(h, job);
	}
	if (replay)
		h->shim->nvtx_replay();
	return rc;
}

int window_dump_hang(struct host *h, uint64_t step, const char *reason,
		     struct window_hang_dump *out, struct err *e)
{
	struct window_state *w = &h->win;
	int rc;
	bool replay;

	memset(out, 0, sizeof *out);
	if (refuse_request(h, 1, e) != 0)
		return -1;
	pthread_mutex_lock(&w->lock);
	if (w->sched.step != step)
		rc = err_set(e, "step %llu ended meanwhile", (unsigned long long)step);
	else
		rc = dump_check(h, true, e);
	if (rc == 0)
		rc = dump_now(h, 0, reason, true, &out->job, e);
	replay = w->rec_replay;
	w->rec_replay = false;
	salvage_publish(h);
	pthread_mutex_unlock(&w->lock);
	if (out->job) {
		out->index = out->job->window;
		out->first = out->job->first;
		out->last = out->job->last;
		log_msg(LOG_DEBUG, "dump %u: steps %llu-%llu (%s), the last one running",
			out->index, (unsigned long long)out->first,
			(unsigned long long)out->last, out->job->reason);
	}
	if (replay)
		h->shim->nvtx_replay();
	return rc;
}

int window_recorder_switch(struct host *h, bool on, struct err *e)
{
	struct window_state *w = &h->win;
	uint64_t step;
	bool was_on;

	if (h->forked_child)
		return err_set(e, "this is a child forked from process %d; the "
			       "recorder stays with the parent", (int)h->parent_pid);
	if (atomic_load_explicit(&h->disabled, memory_order_relaxed) ||
	    !atomic_load_explicit(&w->ready, memory_order_acquire))
		return err_set(e, "profhost is not running in this process");
	pthread_mutex_lock(&w->lock);
	if (w->finished) {
		pthread_mutex_unlock(&w->lock);
		return err_set(e, "the process is ending");
	}
	if (!w->rec.cfg.enabled) {
		pthread_mutex_unlock(&w->lock);
		if (h->cfg->recorder.enabled)
			return err_set(e, "the recorder's settings were refused when "
				       "the process started (see its log); fix "
				       "prof.recorder{ ... } in the policy file");
		return err_set(e, "no recorder was set up when the process "
			       "started; put prof.recorder{ ... } in the policy file");
	}
	was_on = !w->rec_paused;
	w->rec_paused = !on;
	step = w->sched.step;
	pthread_mutex_unlock(&w->lock);
	if (was_on != on)
		log_msg(LOG_DEBUG, "prof.recorder{ enabled = %s } during step %llu: "
			"from its end on", on ? "true" : "false",
			(unsigned long long)step);
	return 0;
}

void window_schedule_changed(struct host *h)
{
	update_arm(h, clock_now_ns());
}

bool window_recording(struct host *h)
{
	return h->win.sched.open;
}

bool window_ahead(struct host *h)
{
	struct window_state *w = &h->win;
	bool more;

	pthread_mutex_lock(&w->lock);
	more = !w->finished && sched_ahead(&w->sched);
	pthread_mutex_unlock(&w->lock);
	return more;
}

/* The reason of an automatic dump when dying of `sig` ("crash: SIGSEGV",
 * "signal: SIGTERM"), or NULL when that signal writes none under the
 * policy's prof.recorder{dump_on_crash, dump_on_signal}. Any thread. */
static const char *exit_dump_reason(const struct host *h, int sig)
{
	const struct policy_config *c = h->cfg;

	switch (sig) {
	case SIGSEGV: return c->recorder.dump_on_crash ? "crash: SIGSEGV" : NULL;
	case SIGBUS: return c->recorder.dump_on_crash ? "crash: SIGBUS" : NULL;
	case SIGFPE: return c->recorder.dump_on_crash ? "crash: SIGFPE" : NULL;
	case SIGILL: return c->recorder.dump_on_crash ? "crash: SIGILL" : NULL;
	case SIGABRT: return c->recorder.dump_on_crash ? "crash: SIGABRT" : NULL;
	case SIGTERM: return c->recorder.dump_on_signal ? "signal: SIGTERM" : NULL;
	case SIGINT: return c->recorder.dump_on_signal ? "signal: SIGINT" : NULL;
	default: return NULL;
	}
}

bool window_exit_dump(struct host *h, int sig)
{
	const struct window_state *w = &h->win;

	return w->rec.cfg.enabled && !w->rec_paused && !w->finished &&
	       !w->sched.open && rec_held_steps(&w->rec) > 0 &&
	       exit_dump_reason(h, sig) != NULL;
}

/* Takes the window lock; from a signal's exit path, gives up after ~1 s
 * (the interrupted thread may be the holder). Returns true when held. */
static bool lock_for_finish(struct window_state *w, bool from_signal)
{
	struct timespec ts;

	if (!from_signal) {
		pthread_mutex_lock(&w->lock);
		return true;
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 1;
	return pthread_mutex_timedlock(&w->lock, &ts) == 0;
}

void window_finish(struct host *h, bool from_signal)
{
	struct window_state *w = &h->win;
	struct sched_result r;
	struct host_job *job = NULL, *dump = NULL;
	bool locked = lock_for_finish(w, from_signal);
	int64_t now = lock_now(w);
	const char *reason = from_signal ?
		exit_dump_reason(h, atomic_load(&h->exit_signal)) : NULL;
	bool whole;
	struct err e;

	if (w->finished) {
		if (locked)
			pthread_mutex_unlock(&w->lock);
		return;
	}
	/* Dying of a signal with no window recording: the recorder's steps
	 * are written as a dump (docs/recorder.md, automatic dumps). */
	if (reason && dump_check(h, false, &e) == 0 &&
	    dump_take(h, 0, reason, true, now, &dump, &e) != 0)
		log_msg(LOG_WARN, "no recorder dump at exit (%s): %s", reason, e.msg);
	w->finished = true;
	rec_close_segment(h); /* nothing more is recorded */
	rec_stop(h);
	/* A whole-process window of a program that never stepped: its one
	 * step is the process, ended by its end, not cut short. */
	whole = w->sched.open && w->sched.cfg.whole && w->sched.recording &&
		w->sched.step == 0;
	if (w->sched.open) {
		keep_step(w, w->sched.step, w->step_start, now, w->step_tid, !whole);
		sched_finish(&w->sched, &r);
		job = close_window(h, &r, now);
	}
	if (locked)
		pthread_mutex_unlock(&w->lock);
	if (job && whole) {
		log_msg(LOG_INFO, "process ending: writing window %u, the whole process "
			"as one step (it never stepped)", job->window);
		hostthread_submit(h, job);
	} else if (job) {
		log_msg(LOG_INFO, "process ending during window %u: writing steps "
			"%llu-%llu (the last one partial)", job->window,
			(unsigned long long)job->first, (unsigned long long)job->last);
		hostthread_submit(h, job);
	}
	if (dump) {
		log_msg(LOG_DEBUG, "process ending (%s): recorder dump %u of steps "
			"%llu-%llu", dump->reason, dump->window,
			(unsigned long long)dump->first, (unsigned long long)dump->last);
		/* a crash is news for the job; SIGTERM and SIGINT end every
		 * rank together (the launcher's teardown) */
		if (h->cfg->recorder.job && strncmp(dump->reason, "crash:", 6) == 0)
			publish_dump(h, dump, true);
		hostthread_submit(h, dump);
	}
}

int window_range_begin(struct host *h)
{
	struct window_state *w = &h->win;
	const struct policy_config *c = h->cfg;
	struct sched_result r;
	struct policy_window_info wi;
	int64_t now;
	char reason[HOST_REASON_MAX], wreason[HOST_REASON_MAX];
	bool opened = false, failed;
	int rc = 0;
	struct err e, fe;

	if (atomic_load_explicit(&h->disabled, memory_order_relaxed) ||
	    !atomic_load_explicit(&w->ready, memory_order_acquire))
		return 0;
	snprintf(reason, sizeof reason, "nvtx range '%s'", c->capture_range.nvtx);
	pthread_mutex_lock(&w->lock);
	now = lock_now(w);
	if (w->finished)
		goto out;
	rc = sched_range_begin(&w->sched, reason, &r);
	if (r.open_window) {
		open_window(h, &r, now);
		opened = w->sched.open;
		if (!opened) {
			rc = 0;
			goto out;
		}
		update_arm(h, now);
	}
	if (rc == 1)
		window_start_info(w, &wi, wreason);
out:
	failed = take_failure(w, &fe);
	salvage_publish(h);
	pthread_mutex_unlock(&w->lock);
	report_pending(h, failed, &fe);
	if (opened && c->has_on_window_start)
		report_hook(h, policy_on_window_start(h->policy, &wi, &e), &e);
	return rc;
}

void window_range_end(struct host *h, int64_t end_ts)
{
	struct window_state *w = &h->win;
	struct sched_result r;
	struct host_job *job = NULL;
	int64_t now;

	pthread_mutex_lock(&w->lock);
	now = lock_now(w);
	if (end_ts < now && end_ts >= w->step_start)
		now = end_ts;
	if (w->sched.range_active && !w->finished) {
		sched_range_end(&w->sched, &r);
		if (r.save)
			job = close_window(h, &r, now);
		update_arm(h, now);
		salvage_publish(h);
	}
	pthread_mutex_unlock(&w->lock);
	if (job)
		hostthread_submit(h, job);
}

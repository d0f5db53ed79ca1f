/*
 * live — what the REPL (src/control) sees of the running host and what it
 * may change: the answers to prof.status(), prof.top(), prof.stacks() and
 * capture_now's progress, and live prof.schedule{} / prof.capture{} /
 * prof.recorder{ enabled } (the last from hooks too).
 *
 * Every query copies what it needs under the window lock (and the host
 * thread's lock for the outputs), releases them, and only then builds the
 * Lua table: building may raise a Lua memory error (a longjmp), which must
 * never leave a lock held.
 */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../control/control.h"
#include "../events/clock.h"
#include "../export/export.h"
#include "../util/log.h"
#include "host.h"

/* ------------------------------------------------------------ snapshots */

/* The step side, copied under the window lock. */
struct win_snap {
	uint64_t step;
	enum sched_action action;
	bool recording, finished;
	uint32_t index;
	uint64_t first;
	size_t nsteps;
	char reason[HOST_REASON_MAX];
	uint64_t ticket;
	uint32_t ticket_steps;
	uint32_t pending;
	char pending_reason[HOST_REASON_MAX];
	struct sched_config cfg;       /* the one that decides what comes next */
	int64_t step_start;
	double dur[HOST_DUR_RING];     /* oldest first */
	size_t ndur;
	double median_ms, mean_ms;
	uint64_t now_requested, now_opened;
	struct policy_config pc;       /* only .capture is filled */
	bool rec_set_up, rec_on;       /* the flight recorder: set up, and
					  not paused */
	uint32_t rec_held;             /* complete steps it holds */
};

static void snap_window(struct host *h, struct win_snap *s)
{
	struct window_state *w = &h->win;
	size_t i, oldest;

	pthread_mutex_lock(&w->lock);
	s->step = w->sched.step;
	s->action = w->sched.action;
	s->recording = w->sched.open;
	s->finished = w->finished;
	s->index = w->sched.index;
	s->first = w->sched.window_first;
	s->nsteps = w->nsteps;
	snprintf(s->reason, sizeof s->reason, "%s", w->sched.reason);
	s->ticket = w->sched.ticket;
	s->ticket_steps = w->sched.ticket_steps;
	s->pending = w->sched.pending_steps;
	snprintf(s->pending_reason, sizeof s->pending_reason, "%s",
		 w->sched.pending_reason);
	s->cfg = w->sched.next_cfg_pending ? w->sched.next_cfg : w->sched.cfg;
	s->step_start = w->step_start;
	s->ndur = w->ndur;
	oldest = w->ndur < HOST_DUR_RING ? 0 : w->dur_pos;
	for (i = 0; i < w->ndur; i++)
		s->dur[i] = w->dur_ms[(oldest + i) % HOST_DUR_RING];
	window_step_stats(w, &s->median_ms, &s->mean_ms);
	s->now_requested = w->sched.now_requested;
	s->now_opened = w->sched.now_opened;
	s->pc.capture = h->cfg->capture;
	s->rec_set_up = w->rec.cfg.enabled;
	s->rec_on = !w->rec_paused;
	s->rec_held = rec_held_steps(&w->rec);
	pthread_mutex_unlock(&w->lock);
}

/* ------------------------------------------------------------ status */

/* The first and last step of the next schedule window that can start
 * after step `cur`; false when the schedule opens no more. */
static bool next_window(const struct sched_config *c, uint64_t cur, bool recording,
			uint64_t *first, uint64_t *last)
{
	uint64_t period = (uint64_t)c->wait + c->warmup + c->active;
	uint64_t rec = (uint64_t)c->wait + c->warmup;
	uint64_t s = cur + 1, cycle, pos;

	if (!c->enabled || c->whole || c->active == 0)
		return false; /* none, or the one window of the whole process */
	if (s < c->skip_first)
		s = c->skip_first;
	cycle = (s - c->skip_first) / period;
	pos = (s - c->skip_first) % period;
	if (pos > rec && !recording) {
		/* inside a record phase with nothing recording (the schedule
		 * changed): a window opens at the next step */
		*first = s;
	} else {
		if (pos > rec || (pos == rec && recording))
			cycle++;
		*first = c->skip_first + cycle * period + rec;
	}
	if (c->cycles && cycle >= c->cycles)
		return false;
	*last = c->skip_first + cycle * period + period - 1;
	return true;
}

static void build_schedule(struct policy_build *b, const struct sched_config *c)
{
	policy_build_open(b, "schedule");
	policy_build_bool(b, "enabled", c->enabled);
	if (c->enabled && c->whole) {
		policy_build_bool(b, "whole", true);
	} else if (c->enabled) {
		policy_build_int(b, "skip_first", c->skip_first);
		policy_build_int(b, "wait", c->wait);
		policy_build_int(b, "warmup", c->warmup);
		policy_build_int(b, "active", c->active);
		policy_build_int(b, "cycles", c->cycles);
	}
	policy_build_close(b);
}

static void build_capture(struct policy_build *b, const struct win_snap *s)
{
	policy_build_open(b, "capture");
	policy_build_bool(b, "nvtx", s->pc.capture.nvtx);
	policy_build_open(b, "cuda");
	policy_build_bool(b, "kernels", s->pc.capture.cuda_kernels);
	policy_build_bool(b, "memcpy", s->pc.capture.cuda_memcpy);
	policy_build_bool(b, "memset", s->pc.capture.cuda_memset);
	policy_build_bool(b, "runtime", s->pc.capture.cuda_runtime);
	policy_build_bool(b, "driver", s->pc.capture.cuda_driver);
	policy_build_bool(b, "sync", s->pc.capture.cuda_sync);
	policy_build_bool(b, "memory", s->pc.capture.cuda_memory);
	policy_build_close(b);
	policy_build_int(b, "cpu_hz", s->pc.capture.cpu_hz);
	if (s->pc.capture.cpu_hz)
		policy_build_str(b, "cpu_clock", s->pc.capture.cpu_wall_clock ? "wall" : "cpu");
	policy_build_int(b, "cuda_backtrace_us", s->pc.capture.cuda_backtrace_us);
	policy_build_bool(b, "modules", s->pc.capture.modules);
	policy_build_bool(b, "record_shapes", s->pc.capture.record_shapes);
	policy_build_bool(b, "with_flops", s->pc.capture.with_flops);
	policy_build_bool(b, "profile_memory", s->pc.capture.profile_memory);
	policy_build_bool(b, "with_stack", s->pc.capture.with_stack);
	policy_build_int(b, "buffer_mb", (int64_t)(s->pc.capture.buffer_bytes >> 20));
	policy_build_close(b);
}

/* Milliseconds rounded to the microsecond, for display. */
static double round_ms(double ms)
{
	return (double)(int64_t)(ms * 1000.0 + (ms < 0 ? -0.5 : 0.5)) / 1000.0;
}

/* The outputs part of the status, copied under the host thread's lock. */
struct out_snap {
	uint64_t windows, dropped, dumps;
	size_t n, ndump;
	char dirs[HOST_OUTPUTS_KEPT][PATH_MAX];
	char dump_dirs[HOST_OUTPUTS_KEPT][PATH_MAX];
};

static void snap_outputs(struct host *h, struct out_snap *o)
{
	struct host_outputs *out = &h->ht.out;
	size_t i, start;

	pthread_mutex_lock(&h->ht.lock);
	o->windows = out->windows;
	o->dropped = out->dropped;
	o->n = 0;
	start = (out->pos + HOST_OUTPUTS_KEPT - out->n) % HOST_OUTPUTS_KEPT;
	for (i = 0; i < out->n; i++) {
		const struct host_output *k = &out->kept[(start + i) % HOST_OUTPUTS_KEPT];

		if (k->dir)
			snprintf(o->dirs[o->n++], PATH_MAX, "%s", k->dir);
	}
	o->dumps = out->dumps;
	o->ndump = 0;
	start = (out->dump_pos + HOST_OUTPUTS_KEPT - out->ndump) % HOST_OUTPUTS_KEPT;
	for (i = 0; i < out->ndump; i++) {
		const char *d = out->dump_dirs[(start + i) % HOST_OUTPUTS_KEPT];

		if (d)
			snprintf(o->dump_dirs[o->ndump++], PATH_MAX, "%s", d);
	}
	pthread_mutex_unlock(&h->ht.lock);
}

static int query_status(struct host *h, struct policy_build *b)
{
	static struct win_snap s;     /* queries run one at a time (the */
	static struct out_snap o;     /* policy lock): kept off the stack */
	char sock[CONTROL_PATH_MAX], signame[32];
	uint64_t first, last;
	int sig;
	size_t i;

	snap_window(h, &s);
	snap_outputs(h, &o);
	control_describe(sock, sizeof sock, &sig);

	policy_build_int(b, "pid", h->pid);
	policy_build_str(b, "program", h->program);
	policy_build_str(b, "policy", policy_source(h->policy));
	policy_build_str(b, "run_dir", h->run_dir);
	policy_build_int(b, "rank", h->env.rank);
	if (h->forked_child)
		policy_build_str(b, "profiling", "off: a child forked from the "
				 "profiled process, which records the windows");
	else if (s.finished)
		policy_build_str(b, "profiling", "finished: the process is exiting");
	else if (atomic_load(&h->disabled))
		policy_build_str(b, "profiling", "off after a failure (see the "
				 "process's log)");
	else
		policy_build_str(b, "profiling", "on");
	policy_build_int(b, "step", (int64_t)s.step);
	policy_build_num(b, "step_running_ms",
			 round_ms((double)(clock_now_ns() - s.step_start) / 1e6));
	policy_build_str(b, "action", sched_action_name(s.action));
	policy_build_bool(b, "recording", s.recording);
	if (s.recording) {
		policy_build_open(b, "window");
		policy_build_int(b, "index", s.index);
		policy_build_int(b, "first_step", (int64_t)s.first);
		policy_build_int(b, "steps_done", (int64_t)s.nsteps);
		policy_build_str(b, "reason", s.reason);
		policy_build_close(b);
	}
	if (s.pending) {
		policy_build_open(b, "capture_now");
		policy_build_int(b, "steps", s.pending);
		policy_build_str(b, "reason", s.pending_reason);
		policy_build_str(b, "starts", s.recording ? "after the current window"
							  : "at the next step");
		policy_build_close(b);
	}
	if (!s.finished && !h->forked_child &&
	    next_window(&s.cfg, s.step, s.recording, &first, &last)) {
		policy_build_open(b, "next_window");
		policy_build_int(b, "first_step", (int64_t)first);
		policy_build_int(b, "last_step", (int64_t)last);
		policy_build_close(b);
	}
	policy_build_open(b, "step_ms");
	if (s.ndur)
		policy_build_num(b, "last", round_ms(s.dur[s.ndur - 1]));
	policy_build_num(b, "median", round_ms(s.median_ms));
	policy_build_num(b, "mean", round_ms(s.mean_ms));
	policy_build_int(b, "of_steps", (int64_t)s.ndur);
	policy_build_close(b);
	build_schedule(b, &s.cfg);
	build_capture(b, &s);
	policy_build_int(b, "windows_written", (int64_t)o.windows);
	policy_build_int(b, "dropped", (int64_t)o.dropped);
	policy_build_open(b, "outputs");
	for (i = 0; i < o.n; i++)
		policy_build_str(b, NULL, o.dirs[i]);
	policy_build_close(b);
	if (s.rec_set_up) {
		policy_build_open(b, "recorder");
		policy_build_bool(b, "enabled", s.rec_on);
		policy_build_int(b, "held_steps", s.rec_held);
		policy_build_close(b);
	}
	policy_build_int(b, "dumps_written", (int64_t)o.dumps);
	policy_build_open(b, "dumps");
	for (i = 0; i < o.ndump; i++)
		policy_build_str(b, NULL, o.dump_dirs[i]);
	policy_build_close(b);
	policy_build_open(b, "repl");
	policy_build_str(b, "signal", sig ? control_signal_name(sig, signame,
								 sizeof signame)
					  : "off");
	if (sock[0])
		policy_build_str(b, "socket", sock);
	policy_build_close(b);
	return 0;
}

/* ------------------------------------------------------------ top */

static int query_top(struct host *h, struct policy_build *b)
{
	static struct win_snap s;
	size_t i;

	snap_window(h, &s);
	policy_build_open(b, "steps");
	for (i = 0; i < s.ndur; i++) {
		policy_build_open(b, NULL);
		policy_build_int(b, "step", (int64_t)(s.step - s.ndur + i));
		policy_build_num(b, "ms", round_ms(s.dur[i]));
		policy_build_close(b);
	}
	policy_build_close(b);
	policy_build_open(b, "current");
	policy_build_int(b, "step", (int64_t)s.step);
	policy_build_num(b, "running_ms",
			 round_ms((double)(clock_now_ns() - s.step_start) / 1e6));
	policy_build_close(b);
	return 0;
}

/* ------------------------------------------------------------ capture */

/* A kept output, copied under the host thread's lock. */
struct kept_snap {
	bool found;
	uint64_t last_ticket;
	uint32_t window;
	uint64_t first, last;
	char reason[HOST_REASON_MAX];
	char dir[PATH_MAX];
	bool has_dir;
	char files[EXPORT_MAX_FILES][PATH_MAX];
	size_t nfiles;
};

static void snap_ticket(struct host *h, uint64_t ticket, struct kept_snap *k)
{
	struct host_outputs *out = &h->ht.out;
	size_t i;

	memset(k, 0, sizeof *k);
	pthread_mutex_lock(&h->ht.lock);
	k->last_ticket = out->last_ticket;
	for (i = 0; i < out->n && !k->found; i++) {
		const struct host_output *o = &out->kept[i];

		if (o->ticket != ticket)
			continue;
		k->found = true;
		k->window = o->window;
		k->first = o->first;
		k->last = o->last;
		snprintf(k->reason, sizeof k->reason, "%s", o->reason);
		if (o->dir) {
			k->has_dir = true;
			snprintf(k->dir, sizeof k->dir, "%s", o->dir);
		}
		while (o->files && o->files[k->nfiles] && k->nfiles < EXPORT_MAX_FILES) {
			snprintf(k->files[k->nfiles], PATH_MAX, "%s", o->files[k->nfiles]);
			k->nfiles++;
		}
	}
	pthread_mutex_unlock(&h->ht.lock);
}

/* Where capture_now request `ticket` (0: the latest) stands: queued,
 * recording, writing, written (with its files) or lost. 1: no such
 * request. */
static int query_capture(struct host *h, int64_t arg, struct policy_build *b)
{
	static struct win_snap s;
	static struct kept_snap k;
	uint64_t ticket;
	size_t i;

	snap_window(h, &s);
	ticket = arg > 0 ? (uint64_t)arg : s.now_requested;
	if (ticket == 0 || ticket > s.now_requested)
		return 1;
	snap_ticket(h, ticket, &k);
	policy_build_int(b, "ticket", (int64_t)ticket);
	if (k.found) {
		policy_build_str(b, "state", k.has_dir ? "written" : "lost");
		policy_build_int(b, "window", k.window);
		policy_build_int(b, "first_step", (int64_t)k.first);
		policy_build_int(b, "last_step", (int64_t)k.last);
		policy_build_int(b, "steps", (int64_t)(k.last - k.first + 1));
		policy_build_str(b, "reason", k.reason);
		if (k.has_dir) {
			policy_build_str(b, "dir", k.dir);
			policy_build_open(b, "files");
			for (i = 0; i < k.nfiles; i++)
				policy_build_str(b, NULL, k.files[i]);
			policy_build_close(b);
		} else {
			policy_build_str(b, "why", "nothing was written (see the "
					 "process's log)");
		}
	} else if (s.recording && s.ticket == ticket) {
		policy_build_str(b, "state", "recording");
		policy_build_int(b, "window", s.index);
		policy_build_int(b, "first_step", (int64_t)s.first);
		policy_build_int(b, "steps", s.ticket_steps);
		policy_build_int(b, "steps_done", (int64_t)s.nsteps);
		policy_build_str(b, "reason", s.reason);
	} else if (ticket > s.now_opened) {
		policy_build_str(b, "state", "queued");
		policy_build_int(b, "steps", s.pending);
		policy_build_str(b, "reason", s.pending_reason);
	} else if (ticket <= k.last_ticket) {
		policy_build_str(b, "state", "lost");
		policy_build_str(b, "why", "no longer among the outputs kept");
	} else {
		policy_build_str(b, "state", "writing");
	}
	return 0;
}

/* ------------------------------------------------------------ stacks */

/* One frame as text: "0x... symbol+0xoff (library)". Frames after the
 * first are return addresses: the call is the byte before. */
void live_frame_text(uintptr_t ip, bool is_return, char *out, size_t size)
{
	Dl_info info;
	uintptr_t look = is_return ? ip - 1 : ip;
	const char *lib;

	memset(&info, 0, sizeof info);
	if (!dladdr((void *)look, &info) || !info.dli_fname) {
		snprintf(out, size, "0x%016lx", (unsigned long)ip);
		return;
	}
	lib = strrchr(info.dli_fname, '/');
	lib = lib ? lib + 1 : info.dli_fname;
	if (!*lib)
		lib = "(main program)";
	if (info.dli_sname)
		snprintf(out, size, "0x%016lx %s+0x%lx (%s)", (unsigned long)ip,
			 info.dli_sname, (unsigned long)(ip - (uintptr_t)info.dli_saddr),
			 lib);
	else
		snprintf(out, size, "0x%016lx (%s+0x%lx)", (unsigned long)ip, lib,
			 (unsigned long)(ip - (uintptr_t)info.dli_fbase));
}

static const char *stack_state(enum control_stack_state st)
{
	switch (st) {
	case CONTROL_STACK_OK:
		return "ok";
	case CONTROL_STACK_BLOCKED:
		return "blocked";
	case CONTROL_STACK_GONE:
		return "gone";
	case CONTROL_STACK_TIMEOUT:
		return "timeout";
	}
	return "?";
}

static const char *stack_reason(enum control_stack_state st)
{
	switch (st) {
	case CONTROL_STACK_BLOCKED:
		return "blocks signals; its stack cannot be taken";
	case CONTROL_STACK_GONE:
		return "exited meanwhile";
	case CONTROL_STACK_TIMEOUT:
		return "did not answer in time";
	default:
		return NULL;
	}
}

static int query_stacks(struct host *h, struct policy_build *b, struct err *e)
{
	static struct control_stack st[CONTROL_STACK_THREADS];
	char text[PATH_MAX + 64];
	int n, i, f;

	n = control_stacks_take(st, CONTROL_STACK_THREADS, e);
	if (n < 0)
		return -1;
	for (i = 0; i < n; i++) {
		const struct control_stack *s = &st[i];

		policy_build_open(b, NULL);
		policy_build_int(b, "tid", s->tid);
		policy_build_str(b, "name", s->name);
		policy_build_str(b, "state", stack_state(s->state));
		policy_build_str(b, "reason", stack_reason(s->state));
		if (s->self)
			policy_build_str(b, "note", "profhost's control thread, running "
					 "this command");
		else if (s->tid == h->pid)
			policy_build_str(b, "note", "main thread");
		else if (strcmp(s->name, "profhost") == 0)
			policy_build_str(b, "note", "profhost's host thread");
		else if (strcmp(s->name, "profhost-pf") == 0)
			policy_build_str(b, "note", "profhost's pre-fault thread");
		else if (strcmp(s->name, "profhost-wd") == 0)
			policy_build_str(b, "note", "profhost's hang watchdog");
		else if (strcmp(s->name, "profhost-job") == 0)
			policy_build_str(b, "note", "profhost's job watcher");
		if (s->state == CONTROL_STACK_OK) {
			policy_build_open(b, "frames");
			for (f = 0; f < s->nframes; f++) {
				live_frame_text(s->ip[f], f > 0, text, sizeof text);
				policy_build_str(b, NULL, text);
			}
			policy_build_close(b);
			if (s->truncated)
				policy_build_bool(b, "truncated", true);
		}
		policy_build_close(b);
	}
	return 0;
}

/* ------------------------------------------------------------ the ops */

static int live_query(void *ctx, const char *what, int64_t arg,
		      struct policy_build *b, struct err *e)
{
	struct host *h = ctx;

	if (strcmp(what, "status") == 0)
		return query_status(h, b);
	if (strcmp(what, "top") == 0)
		return query_top(h, b);
	if (strcmp(what, "capture") == 0)
		return query_capture(h, arg, b);
	if (strcmp(what, "stacks") == 0)
		return query_stacks(h, b, e);
	return err_set(e, "the host has no answer to '%s'", what);
}

static int live_reconfigure(void *ctx, const struct policy_config *next,
			    unsigned sections, void (*apply)(void *apply_ctx),
			    void *apply_ctx, struct err *e)
{
	struct host *h = ctx;
	struct window_state *w = &h->win;
	const char *msg;

	if (h->forked_child)
		return err_set(e, "this is a child forked from process %d; profiling "
			       "(and its configuration) stays with the parent",
			       (int)h->parent_pid);
	if (atomic_load(&h->disabled))
		return err_set(e, "profhost is not running in this process");
	pthread_mutex_lock(&w->lock);
	if (w->finished) {
		pthread_mutex_unlock(&w->lock);
		return err_set(e, "the process is exiting");
	}
	if (sections & POLICY_LIVE_SCHEDULE) {
		msg = sched_reconfigure(&w->sched, &next->schedule);
		if (msg) {
			pthread_mutex_unlock(&w->lock);
			return err_set(e, "%s", msg);
		}
	}
	apply(apply_ctx);
	if (sections & POLICY_LIVE_SCHEDULE)
		window_schedule_changed(h);
	pthread_mutex_unlock(&w->lock);
	if (sections & POLICY_LIVE_SCHEDULE)
		log_msg(LOG_INFO, "REPL: the schedule changed (%s)",
			next->schedule.enabled ? "from the next step on" : "now off");
	if (sections & POLICY_LIVE_CAPTURE)
		log_msg(LOG_INFO, "REPL: capture settings changed (from the next "
			"window on)");
	return 0;
}

static int live_recorder(void *ctx, bool on, struct err *e)
{
	return window_recorder_switch(ctx, on, e);
}

const struct policy_live_ops live_ops = { live_query, live_reconfigure,
					  live_recorder };

/* Frees one kept output's strings. */
static void output_clear(struct host_output *o)
{
	size_t i;

	free(o->dir);
	for (i = 0; o->files && o->files[i]; i++)
		free(o->files[i]);
	free(o->files);
	memset(o, 0, sizeof *o);
}

/* A malloc'd NULL-ended copy of res's files; NULL when out of memory. */
static char **copy_files(const struct export_result *res)
{
	char **files = calloc(res->nfiles + 1, sizeof *files);
	size_t i;

	if (!files)
		return NULL;
	for (i = 0; i < res->nfiles; i++)
		if (res->files[i] && !(files[i] = strdup(res->files[i])))
			break;
	return files;
}

void live_note_window(struct host *h, const struct host_job *job,
		      const struct export_result *res, uint64_t dropped)
{
	struct host_outputs *out = &h->ht.out;
	bool wrote = res && res->dir[0];
	char *dir = wrote ? strdup(res->dir) : NULL;
	char **files = wrote ? copy_files(res) : NULL;
	struct host_output *o;

	pthread_mutex_lock(&h->ht.lock);
	o = &out->kept[out->pos];
	output_clear(o);
	o->ticket = job->ticket;
	o->window = job->window;
	o->first = job->first;
	o->last = job->last;
	snprintf(o->reason, sizeof o->reason, "%s", job->reason);
	o->dir = dir;
	o->files = files;
	out->pos = (out->pos + 1) % HOST_OUTPUTS_KEPT;
	if (out->n < HOST_OUTPUTS_KEPT)
		out->n++;
	out->windows++;
	out->dropped += dropped;
	if (job->ticket > out->last_ticket)
		out->last_ticket = job->ticket;
	pthread_mutex_unlock(&h->ht.lock);
}

void live_note_dump(struct host *h, const char *dir)
{
	struct host_outputs *out = &h->ht.out;
	char *copy = strdup(dir);

	pthread_mutex_lock(&h->ht.lock);
	free(out->dump_dirs[out->dump_pos]);
	out->dump_dirs[out->dump_pos] = copy; /* NULL when out of memory: not listed */
	out->dump_pos = (out->dump_pos + 1) % HOST_OUTPUTS_KEPT;
	if (out->ndump < HOST_OUTPUTS_KEPT)
		out->ndump++;
	out->dumps++;
	pthread_mutex_unlock(&h->ht.lock);
}

void live_fini(struct host *h)
{
	size_t i;

	pthread_mutex_lock(&h->ht.lock);
	for (i = 0; i < HOST_OUTPUTS_KEPT; i++) {
		output_clear(&h->ht.out.kept[i]);
		free(h->ht.out.dump_dirs[i]);
		h->ht.out.dump_dirs[i] = NULL;
	}
	h->ht.out.ndump = h->ht.out.dump_pos = 0;
	h->ht.out.n = h->ht.out.pos = 0;
	pthread_mutex_unlock(&h->ht.lock);
}

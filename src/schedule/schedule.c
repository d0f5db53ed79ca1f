/*
 * schedule — step counting and the capture-window state machine (see
 * schedule.h). torch.profiler.schedule's action function, plus the window
 * bookkeeping on top of it: which boundary opens a window, which saves one,
 * capture_now requests and live reconfiguration.
 */
#include "schedule.h"

#include <stdio.h>
#include <string.h>

#define SCHED_REASON_SCHEDULE "schedule"
#define SCHED_REASON_WHOLE "whole process"
#define SCHED_REASON_DEFAULT "capture_now"

/* Name of an action; "?" for a value outside the enum. Any thread. */
const char *sched_action_name(enum sched_action a)
{
	switch (a) {
	case SCHED_NONE:
		return "NONE";
	case SCHED_WARMUP:
		return "WARMUP";
	case SCHED_RECORD:
		return "RECORD";
	case SCHED_RECORD_AND_SAVE:
		return "RECORD_AND_SAVE";
	}
	return "?";
}

/* Checks a configuration; NULL when valid, else a static message. The
 * fields are unsigned, so torch's ">= 0" checks hold by construction. */
const char *sched_config_check(const struct sched_config *c)
{
	uint64_t sum;

	if (c->enabled && !c->whole && c->active < 1)
		return "active must be at least 1";
	sum = (uint64_t)c->wait + c->warmup + c->active;
	if (sum > UINT32_MAX)
		return "wait + warmup + active must be at most 4294967295 steps";
	return NULL;
}

/* torch.profiler.schedule's function for `step`, in 64-bit arithmetic so no
 * product or sum wraps. A disabled schedule (or one with no steps) gives
 * NONE everywhere. */
enum sched_action sched_action_at(const struct sched_config *c, uint64_t step)
{
	uint64_t num_steps, mod_step;

	if (c->enabled && c->whole)
		return SCHED_RECORD;
	if (!c->enabled || c->active == 0)
		return SCHED_NONE;
	if (step < c->skip_first)
		return SCHED_NONE;
	step -= c->skip_first;
	num_steps = (uint64_t)c->wait + c->warmup + c->active;
	if (c->cycles > 0 && step >= (uint64_t)c->cycles * num_steps)
		return SCHED_NONE;
	mod_step = step % num_steps;
	if (mod_step < c->wait)
		return SCHED_NONE;
	if (mod_step < (uint64_t)c->wait + c->warmup)
		return SCHED_WARMUP;
	return mod_step < num_steps - 1 ? SCHED_RECORD : SCHED_RECORD_AND_SAVE;
}

/* True for the two actions that record. */
static bool is_recording_action(enum sched_action a)
{
	return a == SCHED_RECORD || a == SCHED_RECORD_AND_SAVE;
}

/* Copies `src` (NULL: the default reason) into a 128-byte buffer, cut to
 * 127 bytes. */
static void copy_reason(char dst[128], const char *src)
{
	snprintf(dst, 128, "%s", src ? src : SCHED_REASON_DEFAULT);
}

/* Action of a capture_now step with `left` steps left, this one included. */
static enum sched_action capture_action(uint32_t left)
{
	return left == 1 ? SCHED_RECORD_AND_SAVE : SCHED_RECORD;
}

/* What an opening also did, undone by sched_open_failed. */
#define SCHED_UNDO_TICKET 1u       /* gave a capture_now ticket */
#define SCHED_UNDO_RANGE 2u        /* counted a capture range instance */

/* Opens the window with the step that now begins; `reason` is copied into
 * s->reason (NULL: the default). Fills the open_* fields of *out. */
static void open_window(struct sched *s, const char *reason,
			struct sched_result *out)
{
	if (reason != s->reason)
		copy_reason(s->reason, reason);
	s->open = true;
	s->index = s->windows++;
	s->window_first = s->step;
	s->ticket = 0;
	s->ticket_steps = 0;
	s->undo = 0;
	out->open_window = true;
	out->open_index = s->index;
	out->open_reason = s->reason;
}

/* The schedule or a capture_now request starts recording with the step
 * that now begins: in a new window, or in the one a capture range holds
 * open. A capture_now window gets the next ticket (requests open in the
 * order they were accepted, so the k-th one is ticket k). */
static void start_recording(struct sched *s, const char *reason,
			    struct sched_result *out)
{
	s->recording = true;
	if (!s->open)
		open_window(s, reason, out);
	if (s->now_left > 0 && !s->ticket) {
		s->ticket = ++s->now_opened;
		s->ticket_steps = s->now_left;
		if (out->open_window)
			s->undo |= SCHED_UNDO_TICKET;
	}
}

/* Decides the action of the step that now begins (s->step) when no
 * capture_now window continues through it: a queued request first, else
 * the schedule. Opens a window when one starts here. */
static void begin_step(struct sched *s, enum sched_action prev,
		       struct sched_result *out)
{
	if (s->pending_steps > 0 && !s->recording && s->step >= s->pending_first) {
		if (s->pending_first && s->step > s->pending_first) {
			size_t n = strlen(s->pending_reason);

			snprintf(s->pending_reason + n, sizeof s->pending_reason - n,
				 " (late: asked from step %llu)",
				 (unsigned long long)s->pending_first);
		}
		s->now_left = s->pending_steps;
		s->pending_steps = 0;
		s->pending_first = 0;
		s->action = capture_action(s->now_left);
		start_recording(s, s->pending_reason, out);
	} else {
		s->action = sched_action_at(&s->cfg, s->step);
		if (!s->recording && is_recording_action(s->action))
			start_recording(s, s->cfg.whole ? SCHED_REASON_WHOLE
						       : SCHED_REASON_SCHEDULE, out);
	}
	out->warmup_start = s->action == SCHED_WARMUP && prev != SCHED_WARMUP;
}

/* Fills the fields of *out that describe the step now beginning and picks
 * window/reason: the saved window's when one was saved, else the opened
 * one's. */
static void finish_result(const struct sched *s, struct sched_result *out)
{
	out->step = s->step;
	out->action = s->action;
	if (!out->save && out->open_window) {
		out->window = out->open_index;
		out->reason = out->open_reason;
	}
}

/* Initializes *s for step 0 (cfg must pass sched_config_check) and reports
 * what step 0 does. Caller-owned memory; no allocation. */
void sched_init(struct sched *s, const struct sched_config *cfg,
		struct sched_result *out)
{
	memset(s, 0, sizeof *s);
	memset(out, 0, sizeof *out);
	s->cfg = *cfg;
	begin_step(s, SCHED_NONE, out);
	finish_result(s, out);
}

/* Reports the window as saved, ending with the current step, and closes
 * it (a capture range holding it lets go). */
static void save_window(struct sched *s, struct sched_result *out)
{
	out->save = true;
	out->first = s->window_first;
	out->last = s->step;
	out->window = s->index;
	out->ticket = s->ticket;
	memcpy(s->saved_reason, s->reason, sizeof s->saved_reason);
	out->reason = s->saved_reason;
	s->open = false;
	s->range_active = false;
}

/* A step boundary. The step that ends is saved when it was the last of a
 * recording window; then the next step's action is decided (a capture_now
 * window going on, a queued request, or the schedule). */
void sched_on_step(struct sched *s, struct sched_result *out)
{
	enum sched_action prev = s->action;
	bool capture_running = s->now_left > 0;

	memset(out, 0, sizeof *out);
	if (s->recording && prev == SCHED_RECORD_AND_SAVE) {
		/* A capture range holding the window keeps it recording. */
		s->recording = false;
		if (s->open && !s->range_active)
			save_window(s, out);
		if (!capture_running && s->next_cfg_pending) {
			s->cfg = s->next_cfg;
			s->next_cfg_pending = false;
		}
	}
	if (capture_running)
		s->now_left--;
	s->step++;
	if (s->now_left > 0) {
		s->action = capture_action(s->now_left);
		out->warmup_start = false;
	} else {
		begin_step(s, prev, out);
	}
	finish_result(s, out);
}

/* Queues a capture_now request; see schedule.h. */
int sched_capture_now(struct sched *s, uint32_t steps, const char *reason)
{
	if (steps == 0 || s->pending_steps > 0)
		return -1;
	s->pending_steps = steps;
	s->pending_first = 0;
	copy_reason(s->pending_reason, reason);
	s->now_requested++;
	return 0;
}

/* Queues a capture_now request from step `first` on; see schedule.h. A
 * step that began already is taken as the next one: late. */
int sched_capture_at(struct sched *s, uint32_t steps, uint64_t first,
		     const char *reason)
{
	if (sched_capture_now(s, steps, reason) != 0)
		return -1;
	/* the step now running cannot be recorded whole: the next boundary
	 * opens the window, and says how late (begin_step) */
	s->pending_first = first;
	return 0;
}

/* Whether a queued request opens a window at the next boundary, or may
 * (another window records till then). */
static bool pending_next(const struct sched *s)
{
	return s->pending_steps > 0 && s->step + 1 >= s->pending_first;
}

/* The process ends during the current step: a recording window is reported
 * saved and partial. */
void sched_finish(struct sched *s, struct sched_result *out)
{
	memset(out, 0, sizeof *out);
	out->step = s->step;
	out->action = s->action;
	if (s->open) {
		save_window(s, out);
		out->partial = true;
	}
	s->recording = false;
	s->now_left = 0;
	s->pending_steps = 0;
	s->pending_first = 0;
}

/* Live configuration change. A schedule window now recording keeps the old
 * configuration until it is saved (a whole-process window: at the end of
 * the step now running, which it never reaches by itself); otherwise the
 * new one decides the next boundary on. */
const char *sched_reconfigure(struct sched *s, const struct sched_config *cfg)
{
	const char *msg = sched_config_check(cfg);

	if (msg)
		return msg;
	if (s->cfg.whole && cfg->whole && cfg->enabled) {
		/* the same: the window goes on (even when a change away
		 * from it, in this step, had made this step its last) */
		s->cfg = *cfg;
		s->next_cfg_pending = false;
		if (s->recording && s->now_left == 0 && s->action == SCHED_RECORD_AND_SAVE)
			s->action = SCHED_RECORD;
	} else if (s->recording && s->now_left == 0) {
		if (s->cfg.whole && s->action == SCHED_RECORD)
			s->action = SCHED_RECORD_AND_SAVE;
		s->next_cfg = *cfg;
		s->next_cfg_pending = true;
	} else {
		s->cfg = *cfg;
		s->next_cfg_pending = false;
	}
	return NULL;
}

/* Sets the capture range up; see schedule.h. */
void sched_range_config(struct sched *s, bool on, uint32_t count)
{
	s->range_on = on;
	s->range_count = count;
}

/* Fills the fields of *out that say where the schedule stands, for the
 * range calls. */
static void range_result(const struct sched *s, struct sched_result *out)
{
	memset(out, 0, sizeof *out);
	out->step = s->step;
	out->action = s->action;
}

/* A capture range instance began; see schedule.h. */
int sched_range_begin(struct sched *s, const char *reason,
		      struct sched_result *out)
{
	range_result(s, out);
	if (s->range_active)
		return 0;
	if (s->range_count && s->ranges_recorded >= s->range_count)
		return -1;
	if (!s->open) {
		open_window(s, reason, out);
		s->undo |= SCHED_UNDO_RANGE;
		out->window = out->open_index;
		out->reason = out->open_reason;
	}
	s->range_active = true;
	s->ranges_recorded++;
	return 1;
}

/* The capture range instance ended; see schedule.h. */
void sched_range_end(struct sched *s, struct sched_result *out)
{
	range_result(s, out);
	if (!s->range_active)
		return;
	s->range_active = false;
	if (s->open && !s->recording)
		save_window(s, out);
}

/* Forgets the window just opened; see schedule.h. */
void sched_open_failed(struct sched *s)
{
	if (!s->open)
		return;
	s->open = false;
	s->windows--;
	if (s->undo & SCHED_UNDO_TICKET) {
		s->now_opened--;
		s->ticket = 0;
		s->ticket_steps = 0;
	}
	if (s->undo & SCHED_UNDO_RANGE) {
		s->range_active = false;
		s->ranges_recorded--;
	}
	s->undo = 0;
}

/* Whether NVTX names are worth keeping; see schedule.h. */
bool sched_armed(const struct sched *s)
{
	return s->open || s->action != SCHED_NONE || pending_next(s) ||
	       sched_action_at(&s->cfg, s->step + 1) != SCHED_NONE ||
	       (s->range_on && (!s->range_count || s->ranges_recorded < s->range_count));
}

/* Whether the next step warms up or records; see schedule.h. */
bool sched_next_active(const struct sched *s)
{
	return pending_next(s) || sched_action_at(&s->cfg, s->step + 1) != SCHED_NONE;
}

/* Whether a window records or may still open; see schedule.h. The
 * schedule has windows ahead until its last cycle ends (never, with
 * cycles = 0). */
bool sched_ahead(const struct sched *s)
{
	const struct sched_config *c = &s->cfg;
	uint64_t end = (uint64_t)c->skip_first +
		       (uint64_t)c->cycles * ((uint64_t)c->wait + c->warmup + c->active);

	return s->open || s->pending_steps || s->now_left || s->next_cfg_pending ||
	       (c->enabled && c->whole) ||
	       (c->enabled && c->active && (c->cycles == 0 || s->step < end));
}

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

	if (c->enabled && c->active < 1)
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

/* Opens a window with the step that now begins; `reason` is copied into
 * s->reason. Fills the open_* fields of *out. */
static void open_window(struct sched *s, const char *reason,
			struct sched_result *out)
{
	if (reason != s->reason)
		copy_reason(s->reason, reason);
	s->recording = true;
	s->window_first = s->step;
	out->open_window = true;
	out->open_index = s->windows++;
	out->open_reason = s->reason;
}

/* Decides the action of the step that now begins (s->step) when no
 * capture_now window continues through it: a queued request first, else
 * the schedule. Opens a window when one starts here. */
static void begin_step(struct sched *s, enum sched_action prev,
		       struct sched_result *out)
{
	if (s->pending_steps > 0 && !s->recording) {
		s->now_left = s->pending_steps;
		s->pending_steps = 0;
		s->action = capture_action(s->now_left);
		open_window(s, s->pending_reason, out);
	} else {
		s->action = sched_action_at(&s->cfg, s->step);
		if (!s->recording && is_recording_action(s->action))
			open_window(s, SCHED_REASON_SCHEDULE, out);
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

/* Reports the recording window as saved, ending with the current step. */
static void save_window(struct sched *s, struct sched_result *out)
{
	out->save = true;
	out->first = s->window_first;
	out->last = s->step;
	out->window = s->windows - 1;
	memcpy(s->saved_reason, s->reason, sizeof s->saved_reason);
	out->reason = s->saved_reason;
	s->recording = false;
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
	copy_reason(s->pending_reason, reason);
	return 0;
}

/* The process ends during the current step: a recording window is reported
 * saved and partial. */
void sched_finish(struct sched *s, struct sched_result *out)
{
	memset(out, 0, sizeof *out);
	out->step = s->step;
	out->action = s->action;
	if (s->recording) {
		save_window(s, out);
		out->partial = true;
	}
	s->now_left = 0;
	s->pending_steps = 0;
}

/* Live configuration change. A schedule window now recording keeps the old
 * configuration until it is saved; otherwise the new one decides the next
 * boundary on. */
const char *sched_reconfigure(struct sched *s, const struct sched_config *cfg)
{
	const char *msg = sched_config_check(cfg);

	if (msg)
		return msg;
	if (s->recording && s->now_left == 0) {
		s->next_cfg = *cfg;
		s->next_cfg_pending = true;
	} else {
		s->cfg = *cfg;
		s->next_cfg_pending = false;
	}
	return NULL;
}

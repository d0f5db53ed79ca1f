/*
 * schedule — step counting and the capture-window state machine.
 *
 * Semantics are torch.profiler.schedule's, exactly:
 *   - steps are numbered from 0; step 0 runs from start to the first step
 *     boundary (prof_step()), step k ends at the (k+1)-th boundary;
 *   - the first `skip_first` steps do nothing; after them the schedule
 *     repeats cycles of `wait` idle steps, `warmup` warm-up steps and
 *     `active` recorded steps; the last active step of a cycle saves the
 *     window (RECORD_AND_SAVE); `cycles` cycles are run (torch's `repeat`;
 *     0 = forever).
 * On top of it, sched_capture_now() asks for an extra window of N recorded
 * steps starting at the next boundary, and sched_capture_at() for one
 * starting with a given step (a job-wide capture: every rank records the
 * same steps; one that is already past that step starts at the next
 * boundary and its reason says it was late). While such a window runs the schedule
 * is suspended; it resumes with the action the step counter then gives. If a
 * window is already recording, the request starts at the first boundary
 * after it was saved. Accepted requests are numbered (tickets 1, 2, ...) in
 * the order they are accepted; they open in that order, so the k-th
 * capture_now window carries ticket k.
 *
 * A `whole` schedule (prof.schedule{ whole = true }) records every step
 * from step 0 on and saves none: its one window opens with sched_init()
 * and is saved by sched_finish(), when the process ends, however many
 * steps (none included) it had.
 *
 * And the NVTX capture range (prof.capture_range): sched_range_begin()
 * opens a window at the current step unless one records, and holds it open
 * until sched_range_end(), past the schedule's save; a schedule or
 * capture_now window that starts meanwhile joins it. prof.capture_range's
 * count limits how many instances are recorded.
 *
 * So a window records while the schedule (or capture_now) says so *or* a
 * capture range holds it. The window is this module's: its index (windows
 * opened so far, counted from 0), first step, reason and ticket; the host
 * only opens and closes what the results tell it to.
 *
 * Pure logic: no clock, no I/O, no locks. The caller serializes calls.
 */
#ifndef PROFHOST_SCHEDULE_H
#define PROFHOST_SCHEDULE_H

#include <stdbool.h>
#include <stdint.h>

/* torch.profiler.ProfilerAction. */
enum sched_action {
	SCHED_NONE = 0,
	SCHED_WARMUP,
	SCHED_RECORD,
	SCHED_RECORD_AND_SAVE
};

/* Name of an action: "NONE", "WARMUP", "RECORD", "RECORD_AND_SAVE". */
const char *sched_action_name(enum sched_action a);

struct sched_config {
	uint32_t skip_first;
	uint32_t wait;
	uint32_t warmup;
	uint32_t active; /* must be >= 1, unless `enabled` is false */
	uint32_t cycles; /* 0 = forever */
	bool enabled;    /* false: the schedule never opens a window */
	bool whole;      /* (with enabled) one window from step 0 to the
			    process's end: every step records, none saves;
			    the other fields are not used */
};

/*
 * Checks a configuration. Returns NULL when valid, else a static English
 * message naming the field ("active must be at least 1").
 */
const char *sched_config_check(const struct sched_config *c);

/* The action torch's schedule function gives step `step` (no capture_now);
 * RECORD for every step of a `whole` schedule. */
enum sched_action sched_action_at(const struct sched_config *c, uint64_t step);

/* What happened at one step boundary, or at the start and at finish. */
struct sched_result {
	uint64_t step;             /* the step that now begins (or the last one,
				      for sched_finish) */
	enum sched_action action;  /* its action */
	bool open_window;          /* a window starts recording with `step` */
	bool warmup_start;         /* a warm-up phase starts with `step` */
	bool save;                 /* the window stopped recording: write
				      steps first..last */
	bool partial;              /* (finish) the last step was cut short */
	uint64_t first, last;      /* the saved window's steps, when `save` */
	uint32_t window;           /* the saved window's index, when `save`;
				      else the opened window's, when
				      `open_window` */
	const char *reason;        /* "schedule" ("whole process" for a
				      whole schedule) or the capture_now reason of
				      the saved (else the opened) window, NULL
				      when neither; owned by the sched, valid
				      until the next call */
	uint64_t ticket;           /* the saved window's capture_now ticket,
				      when `save` (0: none) */
	uint32_t open_index;       /* the opened window's index, when
				      `open_window` (also when `save` is set
				      at the same boundary) */
	const char *open_reason;   /* the opened window's reason, when
				      `open_window`; NULL otherwise */
};

struct sched {
	struct sched_config cfg;
	uint64_t step;             /* current step number */
	enum sched_action action;  /* current step's action */
	bool recording;            /* the schedule or a capture_now request
				      records the current step (in a window
				      it opened or joined) */
	/* capture_now state */
	uint32_t pending_steps;    /* queued request, 0 = none */
	uint64_t pending_first;    /* its first step (sched_capture_at; 0:
				      the next boundary's) */
	char pending_reason[128];
	uint32_t now_left;         /* steps left in a running capture_now window */
	uint64_t now_requested;    /* requests accepted: the latest's ticket */
	uint64_t now_opened;       /* capture_now windows opened: tickets given */
	/* the NVTX capture range (sched_range_config) */
	bool range_on;             /* prof.capture_range is set */
	uint32_t range_count;      /* instances to record; 0 = every one */
	bool range_active;         /* an instance holds the window open */
	uint32_t ranges_recorded;  /* instances recorded so far */
	/* the window now recording, whatever opened it */
	bool open;                 /* a window records */
	uint32_t windows;          /* windows opened so far */
	uint32_t index;            /* its index */
	uint64_t window_first;     /* its first step */
	char reason[128];          /* its reason */
	uint64_t ticket;           /* its capture_now ticket (0: none) */
	uint32_t ticket_steps;     /* that request's length in steps */
	unsigned undo;             /* what the last opening also did, for
				      sched_open_failed (SCHED_UNDO_* bits) */
	char saved_reason[128];    /* reason of the window saved at the last
				      boundary (sched_result.reason) */
	struct sched_config next_cfg; /* sched_reconfigure() during a schedule
				      window: applied once it is saved */
	bool next_cfg_pending;
};

/* Initializes the state for step 0 and reports what step 0 does (a window
 * may open at step 0 when skip_first = wait = warmup = 0). `cfg` must pass
 * sched_config_check(). */
void sched_init(struct sched *s, const struct sched_config *cfg,
		struct sched_result *out);

/* A step boundary: step k ends, step k+1 begins. Fills *out. */
void sched_on_step(struct sched *s, struct sched_result *out);

/* Queues a capture_now window of `steps` (>= 1) recorded steps. `reason` may
 * be NULL (stored as "capture_now"); it is copied, cut to 127 bytes.
 * Returns 0 (the request's ticket is then s->now_requested), or -1 when
 * steps is 0 or a request is already queued. */
int sched_capture_now(struct sched *s, uint32_t steps, const char *reason);

/* As sched_capture_now, for a window whose first step is `first`: it
 * opens at the boundary that starts step `first` (or, when a window
 * records then, at the first boundary after it was saved). A request for
 * a step that has begun already (first <= s->step) opens at the next
 * boundary. A window that opens past `first` has " (late: asked from step
 * <first>)" added to its reason (cut to 127 bytes). While such a request
 * waits more than one step ahead, nothing is armed for it
 * (sched_armed, sched_next_active). Same returns. */
int sched_capture_at(struct sched *s, uint32_t steps, uint64_t first,
		     const char *reason);

/* The process is ending during the current step: if a window is recording,
 * reports it as saved with `partial` set. Further calls are undefined. */
void sched_finish(struct sched *s, struct sched_result *out);

/* Sets the NVTX capture range up: `on` when prof.capture_range is set,
 * `count` instances to record (0: every one). After sched_init. */
void sched_range_config(struct sched *s, bool on, uint32_t count);

/* An instance of the capture range began. Opens a window at the current
 * step (`reason`, copied) unless one records (out->open_window says which),
 * and holds it open until sched_range_end(). Returns 1 when this instance
 * now holds the window, 0 when another one does, -1 when the count is used
 * up. */
int sched_range_begin(struct sched *s, const char *reason,
		      struct sched_result *out);

/* The instance that sched_range_begin() returned 1 for ended: the window is
 * saved (out->save, ending with the current step) unless the schedule or
 * capture_now still records it. */
void sched_range_end(struct sched *s, struct sched_result *out);

/* The window the last call reported opened could not be opened after all
 * (the caller had no way to record it): it is forgotten, and its index, its
 * ticket and the capture range instance it counted go to the next one. The
 * schedule's own step counting goes on as if it had recorded. */
void sched_open_failed(struct sched *s);

/* Whether a window may open at the next boundary or records now, so NVTX
 * names are worth keeping: a window records, the current step warms up or
 * records, a capture_now request is queued, the next step warms up or
 * records, or a capture range may still open one. */
bool sched_armed(const struct sched *s);

/* Whether the next step warms up or records: the schedule's next action,
 * or a queued capture_now request. */
bool sched_next_active(const struct sched *s);

/* Whether a window records, or the schedule or a capture request may still
 * open one. */
bool sched_ahead(const struct sched *s);

/* Replaces the configuration (live change). The step counter is kept; the
 * new schedule applies from the next boundary. A window already recording
 * finishes under the old one; a `whole` schedule's window ends with the
 * step now running. Returns NULL or sched_config_check()'s text. */
const char *sched_reconfigure(struct sched *s, const struct sched_config *cfg);

#endif

/*
 * recorder — the flight recorder's bookkeeping: which capture generations
 * (*segments*) it holds, which steps each covers, when to rotate, and what
 * a dump takes.
 *
 * Between windows the recorder keeps one capture generation open at a
 * time. A segment covers `seg_steps` = ceil(steps / 2) steps; when the open
 * one is full at a step boundary the caller closes it and opens the next.
 * At most REC_SEGMENTS segments are held (the open one included): opening
 * one more gives the oldest back. After a rotation the two closed segments
 * hold 2 * seg_steps >= steps complete steps, so the recorder always holds
 * at least the last `steps` complete steps plus the current one (fewer only
 * before that many steps ran). Each segment's pool is bytes / REC_POOLS:
 * three held plus one being given back by the host thread stay within
 * `bytes`.
 *
 * Pure logic: no clock, no I/O, no locks; the caller (src/host/window.c)
 * serializes calls under its window lock and does the evbuf calls.
 */
#ifndef PROFHOST_RECORDER_H
#define PROFHOST_RECORDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define REC_SEGMENTS 3      /* segments held at most, the open one included */
#define REC_POOLS 4         /* pools alive at most: held + one given back */
#define REC_STEPS_MAX 10000 /* largest `steps` */

struct rec_config {
	bool enabled;       /* false: no recorder (prof.recorder not called) */
	uint32_t steps;     /* complete steps always kept, 1..REC_STEPS_MAX */
	size_t bytes;       /* memory bound of all its event pools */
	uint32_t max_dumps; /* dumps a run may write */
};

/* One complete step the recorder holds. */
struct rec_step {
	uint64_t step;
	int64_t ts, dur;
	int32_t tid;
};

/* One held capture generation and the complete steps recorded in it. */
struct rec_segment {
	uint64_t gen;
	uint64_t first;     /* its first step */
	uint32_t nsteps;    /* complete steps recorded in it */
	int64_t start_ts;   /* when it opened */
	bool mid;           /* opened inside step `first`, its pool being
			       three quarters full (rec_opened's `mid`) */
};

struct recorder {
	struct rec_config cfg;
	uint32_t seg_steps;              /* steps per segment */
	size_t pool_bytes;               /* one segment's pool */
	struct rec_segment seg[REC_SEGMENTS]; /* held, oldest first */
	uint32_t nseg;
	bool open;                       /* seg[nseg - 1] is open */
	struct rec_step *ring;           /* the held segments' steps, in order */
	uint32_t ring_cap, ring_head, ring_n;
	uint32_t dumps;                  /* dumps taken so far */
	uint64_t dumped_last;            /* the last dump's last step (dumps > 0) */
};

/* What a dump takes: every held generation (oldest first; the first
 * `nskip` hold none of the asked steps and are only given back), the asked
 * steps first..last and their records. */
struct rec_dump {
	uint64_t gens[REC_SEGMENTS];
	uint32_t ngens, nskip;
	uint64_t first, last;
	int64_t start_ts;                /* the first asked step's start */
	int64_t cut_ts;                  /* 0, or when the records held of the
					    first asked step begin: it alone
					    outgrew the pools, its oldest part
					    was given back */
	struct rec_step *steps;          /* malloc'd, nsteps; caller frees */
	uint32_t nsteps;
	uint32_t index;                  /* the dump's number, from 0 */
};

/* Checks a configuration; NULL when valid, else a static message naming
 * the field. A disabled configuration is always valid. */
const char *rec_config_check(const struct rec_config *c);

/* Sets up *r for `c` (valid). Allocates the step ring when enabled.
 * Returns 0, or -1 when memory ran out (*r is then disabled). */
int rec_init(struct recorder *r, const struct rec_config *c);

/* Frees the step ring. */
void rec_free(struct recorder *r);

/* The caller opened generation `gen` for a segment starting at step
 * `first`, at `ts` (no segment may be open); `mid`: inside that step,
 * because the last segment's pool filled (a step that alone outgrows a
 * segment keeps its newest part). When REC_SEGMENTS were held, the oldest
 * is dropped and its generation stored in *release (returns 1, the caller
 * gives it back); else returns 0. */
int rec_opened(struct recorder *r, uint64_t gen, uint64_t first, int64_t ts,
	       bool mid, uint64_t *release);

/* Step `s` ended inside the open segment: records it. Returns true when
 * the segment is now full (the caller closes it and opens the next one);
 * false otherwise, or when no segment is open (nothing recorded). */
bool rec_step(struct recorder *r, const struct rec_step *s);

/* The caller closed the open segment (evbuf_close). */
void rec_closed(struct recorder *r);

/* Complete steps held. */
uint32_t rec_held_steps(const struct recorder *r);

/* Takes everything held for a dump of the last `n` (>= 1) complete steps
 * (fewer when fewer are held): fills *d, empties *r and counts the dump.
 * No segment may be open. Returns 0, or -1 when no complete step is held
 * or memory ran out (*r unchanged). */
int rec_take(struct recorder *r, uint32_t n, struct rec_dump *d);

/* Takes everything held for a dump of step `step` alone, still running
 * since `start_ts`, when no complete step is held (the hang watchdog's
 * dump of the first step after a window, or after the last dump): the
 * held segments then hold nothing but that step's records. Fills *d with
 * no step (first = last = `step`: the caller adds it, partial), empties
 * *r and counts the dump; a later request before `step` ends merges into
 * it (rec_merges). No segment may be open. Returns 0, or -1 when a
 * complete step is held (rec_take) or no segment is (*r unchanged). */
int rec_take_running(struct recorder *r, uint64_t step, int64_t start_ts,
		     struct rec_dump *d);

/* The complete steps held, first and last, into *lo and *hi; false when
 * none is. */
bool rec_held_span(const struct recorder *r, uint64_t *lo, uint64_t *hi);

/* Takes everything held for a dump of another rank's steps (a job-wide
 * dump, docs/jobs.md): the held complete steps from `first` to `last`
 * (the held steps after `last` go with it too, their records left out by
 * the caller: a request for them merges into this dump).
 * With `running_ts` (not 0), step `last` is the one running since then:
 * the complete steps taken are those from `first` to `last` - 1, and the
 * dump ends with `last`, which the caller adds (partial); it may then hold
 * no complete step. Fills *d (its `first` is the first step it holds, so
 * steps before it were no longer held), empties *r and counts the dump;
 * a later request before the dump's last complete step ended merges into
 * it (rec_merges). No segment may be open. Returns 0, or -1 when none of
 * the steps is held (nor running) or memory ran out (*r unchanged). */
int rec_take_range(struct recorder *r, uint64_t first, uint64_t last, int64_t running_ts,
		   struct rec_dump *d);

/* Whether a dump asked when step `ended` is the last complete one would
 * only hold steps the last dump took (no step completed since it): such a
 * request is merged into that dump. */
bool rec_merges(const struct recorder *r, uint64_t ended);

/* Gives every held generation to *out (oldest first; at most REC_SEGMENTS)
 * and empties *r (a window opens, or the process ends). No segment may be
 * open. Returns how many. */
uint32_t rec_take_all(struct recorder *r, uint64_t out[REC_SEGMENTS]);

#endif

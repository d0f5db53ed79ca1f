/*
 * capture — the host's side of the capture seam (src/capture/source.h):
 * the list of capture sources and the calls over them. capture.c is the
 * only file of the host that names a source (it includes their headers);
 * the others reach the sources through these calls, and window.c through
 * capture_listener, which it publishes to. A capture source never
 * includes this header (a ctest, capture_seam, checks it).
 *
 * A call over the sources skips a source whose init failed and one that
 * left the slot NULL, or the optional table (recorder, hang) unset.
 */
#ifndef PROFHOST_CAPTURE_H
#define PROFHOST_CAPTURE_H

#include <stdbool.h>
#include <stdint.h>

#include "../capture/source.h"

struct host;
struct host_job;

struct window_listener;

/* The sources as a window listener (host.h's window_listen): a window's
 * open, close, steps, the recorder's segments and dumps go to every
 * source (capture_open_all, ...). core.c registers it. */
extern const struct window_listener capture_listener;

/* The sources compiled in, NULL-ended. */
extern const struct capture_ops *const capture_sources[];

/* Keeps a copy of `host` (filled by core.c: its callbacks call window.c
 * and core.c, which this file never names) for the sources, and calls
 * every source's init, reporting each failing source itself (host_fail).
 * Start-up. */
void capture_init_all(struct host *h, const struct capture_host *host);

/* Call every source's callback of that name (the core table's, or the
 * recorder table's: capture_recorder_all calls segment, ...), skipping
 * sources whose init failed and those without the table. Threads and
 * contracts as in source.h. */
void capture_warmup_all(void);
void capture_prepare_all(void);
void capture_open_all(uint64_t gen);
void capture_close_all(uint64_t gen);
void capture_collect_all(struct host *h, const struct host_job *job,
			 struct trace *t);
void capture_fini_all(void);
void capture_step_all(const struct capture_step *s);
void capture_explicit_step_all(void);
void capture_cuda_inject_all(void);
void capture_recorder_all(uint64_t gen);
void capture_dump_taken_all(void);
void capture_dump_dropped_all(void);
void capture_recorder_rotated_all(void);
/* Whether a source wants its recorder table's rotated now (rotated_wanted):
 * the host thread is woken for a rotation then. Window lock held. */
bool capture_recorder_rotated_wanted(void);

/* The first source's stacks for a hang report (capture_hang_ops.stacks);
 * -1 with why[] when no source gives any (why: the last source's reason,
 * or "no capture source gives them"). The watchdog's thread. */
int capture_hang_stacks_all(char *out, size_t size, char *why, size_t wsize);

/* The GPU work not finished for a hang report (capture_hang_ops.gpu):
 * the first source that tracks launches (1), else 0 with g->note from the
 * last source that said why, or "no GPU capture in this build". The
 * watchdog's thread. */
int capture_hang_gpu_all(struct capture_gpu_hang *g);

/* Whether a source says the program's code has ended
 * (capture_hang_ops.ended). Any thread. */
bool capture_ended_any(void);

#endif

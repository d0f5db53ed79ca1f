/*
 * pymerge — Python frames into native stacks: the merge of Python stack
 * snapshots into a trace's stacks (its samples, the stacks taken at range
 * pushes and slow CUDA calls), for a live window's collect (the Python
 * bridge's store, src/capture/python/pystacks.c) and a salvage's
 * (src/salvage/salvage_read.c, the EVBUF_PYSTACK records of a dead
 * process's ring).
 *
 * A stack of a thread that was running Python code (it has frames in the
 * interpreter's eval code, [eval_lo, eval_hi)) takes the frames of that
 * thread's snapshot nearest in time (within pymerge_tolerance_ns): they
 * replace the span of the native stack from its outermost to its innermost
 * interpreter frame. Python frames are named "function (file:line)" in
 * module "python". See pystacks.h for how the snapshots are taken.
 *
 * Pure functions over what the caller owns; one caller per trace.
 */
#ifndef PROFHOST_PYMERGE_H
#define PROFHOST_PYMERGE_H

#include <stddef.h>
#include <stdint.h>

#include "../events/trace.h"

#define PYMERGE_MAX_HZ 100            /* snapshots per second, at most */
#define PYMERGE_MAX_BYTES (32u << 20) /* snapshots' text of a window; more is dropped */
#define PYMERGE_SHARE_LOOK 64         /* snapshots looked back for the thread's last */

/* One snapshot: thread `tid`'s Python frames at `ts` (host clock),
 * innermost first, '\n'-separated, text[off, off + len) of the text the
 * snapshots share. */
struct pymerge_snap {
	int64_t ts;
	int32_t tid;
	uint32_t off, len;
};

/* Snapshots and their text, grown by pymerge_set_add. */
struct pymerge_set {
	struct pymerge_snap *v;
	size_t n, cap;
	char *text;
	size_t tlen, tcap;
	uint64_t dropped;  /* snapshots beyond the set's text bound */
};

/* How far from a stack a snapshot may be and still be used, for snapshots
 * taken `snapshot_hz` times a second. */
int64_t pymerge_tolerance_ns(uint32_t snapshot_hz);

/* The offset in `text` of thread `tid`'s last snapshot among v[0..n) when
 * its frames are frames[0..len) too (looked for among the last
 * PYMERGE_SHARE_LOOK snapshots), else -1: a snapshot the same as the
 * thread's previous one shares that one's text. */
long pymerge_same_as_last(const struct pymerge_snap *v, size_t n, const char *text,
			  int32_t tid, const char *frames, uint32_t len);

/* Adds a snapshot to `s` (text shared with the thread's last when the
 * same), unless its text would take the set past `max_text` bytes: then
 * it is dropped and counted. Returns 0 (added or dropped), or -1 when
 * memory ran out (dropped and counted too). */
int pymerge_set_add(struct pymerge_set *s, int32_t tid, int64_t ts, const char *frames,
		    uint32_t len, size_t max_text);

/* Frees what `s` holds; *s is empty after. */
void pymerge_set_free(struct pymerge_set *s);

/*
 * Merges the snapshots v[0..n) (their frames in `text`; v is sorted by
 * thread and time here) into the stacks of `t`, not yet symbolized, with
 * [eval_lo, eval_hi) the interpreter's eval code. Returns how many stacks
 * took Python frames, or -1 when memory ran out (stacks merged before stay
 * merged). Nothing to do (0) without snapshots, stacks or eval range.
 */
long pymerge_stacks(struct pymerge_snap *v, size_t n, const char *text, uintptr_t eval_lo,
		    uintptr_t eval_hi, uint32_t snapshot_hz, struct trace *t);

#endif

/*
 * pystacks — Python stack snapshots of a window, kept per generation and
 * merged into the window's CPU samples at collect by src/stacks/pymerge.c
 * (which a salvage uses too). Internal to src/capture (python.c uses it).
 *
 * The sampler's signal handler never reads the interpreter: it could
 * interrupt it anywhere, holding any lock. Instead, while a window records,
 * the bridge's snapshot thread reads every thread's Python stack with
 * sys._current_frames() (under the GIL, as ordinary Python code) a few
 * times per sampling period and hands each snapshot here with its time and
 * the thread's kernel id. At collect, before the stacks are symbolized,
 * each stack (a sample, or one taken at a range push or a slow CUDA call)
 * of a thread that was running Python code (it has
 * _PyEval_EvalFrameDefault frames) takes the frames of that thread's
 * snapshot nearest in time (within pystacks_tolerance_ns): they replace the
 * span of the native stack from its outermost to its innermost
 * interpreter frame, so a sample reads
 *     main;Py_RunMain;...;<module> (train.py:80);train_loop (train.py:50);
 *     forward (module.py:1130);...;cfunction_call;at::addmm;...
 * Python frames are named "function (file:line)" in module "python".
 *
 * Trade-off: the Python frames are those of the nearest snapshot, not read
 * at the sample's instant; a thread that changed Python function between
 * the two shows the snapshot's. Taking a snapshot needs the GIL, so the
 * snapshot thread runs at a modest rate (at most PYSTACKS_MAX_HZ).
 *
 * A stack taken on purpose (a range push, a slow CUDA call) by a thread
 * that holds the GIL gets an exact snapshot of its own at that instant
 * (pystacks_capture_now), read with CPython's C API.
 *
 * Between windows, while the flight recorder keeps CPU samples
 * (prof.recorder{ cpu_samples }), the snapshots go into a store per
 * recorder segment (pystacks_open with `rec`), bounded: a segment keeps at
 * most PYSTACKS_SEG_TEXT_MAX bytes of frames and PYSTACKS_SEG_SNAPS_MAX
 * snapshots (a segment that outgrows them keeps its newest half and goes
 * on), and at most PYSTACKS_REC_KEEP segments' stores are kept (the
 * recorder holds REC_SEGMENTS; a dump in flight may hold as many more):
 * opening one more frees the oldest; when the recorder stops (a pause, a
 * window) the stores no dump took are freed. A dump's collect merges the
 * stores of its segments together and frees them. A snapshot the same as the
 * thread's previous one in its store shares that one's text.
 *
 * Threads: pystacks_open/close run on the stepping thread (window lock
 * held; they take only this module's short mutex), pystacks_add on the
 * bridge's snapshot thread (holding the GIL) and on threads taking stacks
 * on purpose, pystacks_merge on the host thread.
 */
#ifndef PROFHOST_CAPTURE_PYSTACKS_H
#define PROFHOST_CAPTURE_PYSTACKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../events/trace.h"
#include "../../common/err.h"
#include "../../stacks/pymerge.h"

#define PYSTACKS_MAX_HZ PYMERGE_MAX_HZ      /* snapshots per second */
#define PYSTACKS_MAX_BYTES PYMERGE_MAX_BYTES /* per window; more is dropped */
#define PYSTACKS_SEG_TEXT_MAX (4u << 20)    /* frames per recorder segment */
#define PYSTACKS_SEG_SNAPS_MAX 32768u       /* snapshots per recorder segment */
#define PYSTACKS_REC_KEEP 5                 /* recorder segments' stores kept */

/* Finds the interpreter's frame-evaluation function in the process. Returns
 * 0, or -1 when it is not there (no merge is possible then). Start-up. */
int pystacks_init(void);

/* Tests: takes [lo, hi) as the interpreter's frame-evaluation code. */
void pystacks_set_eval_range(uintptr_t lo, uintptr_t hi);

/* Snapshots go to generation `gen` from now on (`rec`: a flight recorder
 * segment's, bounded as above), no longer to the one open before. */
void pystacks_open(uint64_t gen, bool rec);

/* Generation `gen` stopped recording: later snapshots are dropped. */
void pystacks_close(uint64_t gen);

/* A recorder dump takes the recorder's segments (capture_recorder_ops.dump_taken):
 * their stores stay for its collect. Any thread; must not block long. */
void pystacks_rec_dumped(void);

/* The recorder stopped (paused, a window opens, the process ends) and gave
 * its segments back: their stores are freed, but those a dump took. */
void pystacks_rec_stop(void);

/* Keeps a snapshot: thread `tid`'s Python frames at `ts` (host clock),
 * innermost first, '\n'-separated, `len` bytes. Dropped (counted) outside a
 * recording window or recorder segment, or beyond PYSTACKS_MAX_BYTES in a
 * window. Returns true when it went to a recorder segment's store (the
 * caller also puts it in the ring for a salvage: EVBUF_PYSTACK). */
bool pystacks_add(int32_t tid, int64_t ts, const char *frames, uint32_t len);

/* The interpreter's frame-evaluation code found by pystacks_init (or set
 * by pystacks_set_eval_range): [*lo, *hi), 0 and 0 when none. */
void pystacks_eval_range(uintptr_t *lo, uintptr_t *hi);

/* Takes the calling thread's Python stack now, as a snapshot of thread
 * `tid` at `ts` (the time of a stack taken on purpose there: a range push,
 * a slow CUDA call), when the thread holds the GIL (else, or without
 * CPython's frame API, 3.9+, it does nothing: the bridge's snapshots stand
 * in). Reads frames with the C API only, runs no Python code, and keeps
 * any exception the caller has pending. Any thread, not from a signal
 * handler. */
void pystacks_capture_now(int32_t tid, int64_t ts);

/* How far from a sample a snapshot may be and still be used. */
int64_t pystacks_tolerance_ns(uint32_t snapshot_hz);

/* Merges the snapshots of generations gens[0..ngens) (a window's one, or
 * a recorder dump's segments) into the stacks of `t` (not yet symbolized)
 * and frees them. Returns 0, or -1 with *e set when out of memory (the
 * samples stay as they were). */
int pystacks_merge(const uint64_t *gens, size_t ngens, uint32_t snapshot_hz,
		   struct trace *t, struct err *e);

/* Bytes the stores hold now (allocated), and how many recorder segments'
 * stores are kept. Tests. */
size_t pystacks_held_bytes(size_t *rec_stores);

/* Frees the snapshots of every window. Exit. */
void pystacks_fini(void);

#endif

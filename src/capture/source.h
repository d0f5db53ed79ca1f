/*
 * source — the seam between the host and its capture sources (NVTX,
 * CUPTI, the Python bridge, the CPU sampler, ...). This header is all a
 * source may know of the host: no file in src/capture includes a header
 * of src/host or calls a function of the host's (a ctest, capture_seam,
 * checks both). The host's side, which lists the sources and calls them
 * (as a window listener), is src/host/capture.h.
 *
 * What the host gives a source: struct capture_host, once, at init. It
 * holds the configuration, the shim's table and the host's callbacks (a
 * step boundary, the NVTX capture range, whether a window lies ahead, a
 * failure); the pointer stays valid for the process, so a source keeps it.
 *
 * What a source gives the host: a struct capture_ops, its descriptor (the
 * host's list of sources names it; nothing else of the host names a
 * source). It holds the core table, a source's life, which every source
 * fills as far as it needs, and a pointer to each optional table, set
 * only by a source that takes part in it (NULL: it does not):
 *   recorder  struct capture_recorder_ops: the flight recorder's segments
 *             and dumps (prof.recorder{});
 *   hang      struct capture_hang_ops: what the hang watchdog asks
 *             (prof.watchdog{}).
 * Every callback may be NULL. Contracts of the core table:
 *   init          start-up, from the shim's constructor. Returns 0, or -1
 *                 with *e set: the source is then off for the process (the
 *                 host reports *e once and carries on; PROF_STRICT=1 makes
 *                 it fatal).
 *   warmup        a warm-up phase starts (stepping thread, window lock
 *                 held: must not block; records may be discarded).
 *   window_open   a window starts recording generation `gen` (stepping
 *                 thread, window lock held: must not block).
 *   window_close  the window of generation `gen` stopped recording
 *                 (stepping thread, window lock held: must not block; heavy
 *                 work such as flushing belongs in collect).
 *   collect       the host thread assembles window `w`: add the source's
 *                 events to `t` (already holding the CPU events). Returns
 *                 0, or -1 with *e set (reported, the window is still
 *                 written).
 *   fini          the process is ending, after the last window was
 *                 written (the exiting thread).
 *   step          a step boundary: `s->step` begins (stepping thread,
 *                 window lock held: must not block). Also called for step
 *                 0 at start-up.
 *   prepare       a window is about to open (the step before it, its
 *                 warm-up, a capture_now request, a capture range that may
 *                 open one): do now what would otherwise slow the window's
 *                 first step (threads, first-time work on the stepping
 *                 thread). May be called again before the window opens.
 *                 Stepping thread, window lock held: must not block.
 *   explicit_step a step boundary came through the C ABI (prof_step,
 *                 profhost.step()), before the host handles it. Any
 *                 thread, no lock held.
 *   cuda_inject   the CUDA driver called InitializeInjection on profhost's
 *                 library (CUDA_INJECTION64_PATH): a source that waits for
 *                 the driver starts now. Any thread, no lock held; not
 *                 after the process stopped profiling.
 * Contracts of the optional tables: above each.
 * New slots go at the end of their table.
 */
#ifndef PROFHOST_CAPTURE_SOURCE_H
#define PROFHOST_CAPTURE_SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "../events/trace.h"
#include "../policy/policy.h"
#include "../common/err.h"
#include "../shim/shim_api.h"

/* What the host gives every source at init. Valid for the process. The
 * callbacks take `ctx` first. */
struct capture_host {
	const struct policy_config *cfg;
	const struct shim_api *shim;
	pid_t pid;                   /* this process */
	bool python;                 /* PROF_PYTHON: the Python bridge may start */
	void *ctx;
	/* A step boundary (as prof_step). Any thread; not from a window
	 * callback (it takes the window lock). */
	void (*step)(void *ctx);
	/* An instance of the NVTX capture range (prof.capture_range) began:
	 * returns 1 when it now holds a window open (call range_end when it
	 * ends), 0 when it does not (another instance does, or the process
	 * is ending), -1 when prof.capture_range{count} is used up. Any
	 * thread; not from a window callback. range_end gets the time the
	 * range ended (its end record's timestamp). */
	int (*range_begin)(void *ctx);
	void (*range_end)(void *ctx, int64_t end_ts);
	/* Whether the schedule or a capture request may still open a window
	 * (or one is recording). Any thread; not from a window callback. */
	bool (*ahead)(void *ctx);
	/* Reports a failure outside init and collect (which return theirs):
	 * one line on stderr, fatal with PROF_STRICT=1. Any thread; not from
	 * a window callback. */
	void (*fail)(void *ctx, const struct err *e);
	/* Whether profiling is off in this process (a forked child, exiting,
	 * a fatal failure). Any thread. */
	bool (*disabled)(void *ctx);
	/* Whether the process is ending (the last window closes or closed).
	 * From a window callback only (window lock held). */
	bool (*finishing)(void *ctx);
	/* Whether kernel thread `tid` is one of the host's own (never
	 * sampled). Any thread. */
	bool (*own_thread)(void *ctx, int32_t tid);
	/* An automatic recorder dump of the recorder's `steps` steps and the
	 * step now running (marked partial: the program is about to end)
	 * with `reason` (an uncaught Python exception): 0 taken or merged, -1
	 * refused (the recorder is off, a window records, ...; said at debug
	 * level only). Any thread; not from a window callback. */
	int (*dump)(void *ctx, const char *reason);
	/* Keeps a name the flight recorder's raw GPU records use in the
	 * salvage file (enum salv_gpu_kind, src/common/salvfile.h), so that
	 * `prof salvage` can name them (host.h's salvage_gpu_name). Any
	 * thread; takes a lock of its own. NULL: names are not kept. */
	void (*salvage_gpu)(unsigned kind, uint64_t key, const void *rec, size_t rlen,
			    const char *text);
	/* The CPU sampler samples with signal `signo` now (0: none), for
	 * the salvage file (host.h's salvage_sample_signal). Any thread;
	 * never blocks. NULL: not kept. */
	void (*sample_signal)(int signo);
	/* The Python interpreter's frame-evaluation code is [lo, hi), for
	 * the salvage file (host.h's salvage_py_eval). Any thread; never
	 * blocks. NULL: not kept. */
	void (*salvage_py_eval)(uint64_t lo, uint64_t hi);
	/* The exit path is to run before the exit handlers registered so far
	 * (host.h's host_arm_exit): a GPU runtime that registered its
	 * teardown, which the source's library must not outlive. Any thread,
	 * window callbacks included. */
	void (*arm_exit)(void);
	/* The process is about to end without running its exit handlers or
	 * destructors (the Python bridge: an uncaught KeyboardInterrupt,
	 * which the interpreter ends by raising SIGINT with the default
	 * action): the exit path runs now (host.h's host_exit_now), writing
	 * what was recording. Any thread but the host's; blocks while the host
	 * thread writes. Profiling is off afterwards. */
	void (*exit_now)(void);
};

/* A step boundary, as capture_ops.step sees it. */
struct capture_step {
	uint64_t step;               /* the step that begins */
	bool recording;              /* a window records it */
	bool next_active;            /* the next step warms up or records (the
					schedule's, or a queued capture_now
					request) */
};

/* GPU work launched and not finished, as capture_hang_ops.gpu gives it. */
#define CAPTURE_GPU_NAME 160
#define CAPTURE_GPU_MAX 64

struct capture_gpu_launch {
	char name[CAPTURE_GPU_NAME]; /* the kernel's name as CUDA gives it
					(mangled), cut to fit */
	int64_t launched_ns;         /* when it was launched (clock_now_ns) */
	int64_t stream;              /* CUPTI's stream id; -1: not known */
	int32_t device;              /* -1: not known */
	int32_t tid;                 /* the launching thread */
	uint32_t corr;               /* CUPTI's correlation id */
};

struct capture_gpu_hang {
	struct capture_gpu_launch launch[CAPTURE_GPU_MAX]; /* by device, stream,
							      then launch time */
	size_t n;                    /* entries in launch[] */
	uint64_t more;               /* launches not finished beyond those */
	uint64_t forgotten;          /* launches the source's table let go
					before their record came (their
					state is unknown) */
	char note[256];              /* with return 0: why nothing is known;
					with 1: a caveat, or "" */
};

/* A closed window, as capture_ops.collect sees it. */
struct capture_window {
	uint64_t gen;                /* capture generation (0: none) */
	uint32_t window;             /* its index (a dump's number) */
	uint64_t first, last;        /* its steps */
	int64_t start_ts, end_ts;    /* when it opened and closed (a dump:
					its first step's start, its end) */
	bool dump;                   /* a recorder dump: `gen` is 0 and the
					records come from gens[0..ngens),
					the segments
					capture_recorder_ops.segment named,
					oldest first */
	const uint64_t *gens;
	uint32_t ngens;
};

/* The flight recorder's part (prof.recorder{}), for a source whose
 * records between windows go into the recorder's ring:
 *   segment       the flight recorder keeps generation `gen` between
 *                 windows: it started, or its full segment rotated into a
 *                 new one; 0: it stopped (a window opens, the process
 *                 ends). What a source appends to the threads' buffers
 *                 meanwhile lands in the open generation, as in a window,
 *                 and a dump's collect gets it (capture_window.dump).
 *                 Stepping thread (or the thread ending the process),
 *                 window lock held: must not block.
 *   dump_taken    a recorder dump is taking the recorder's segments,
 *                 before they close; its collect (or, when the dump is
 *                 skipped, a collect into a trace nobody writes)
 *                 follows on the host thread (what a source delivers into
 *                 the ring from now on lands in later segments: CUPTI
 *                 keeps its buffers for that collect). Any thread asking
 *                 for the dump, window lock held: must not block.
 *   dump_dropped  a dump that dump_taken announced will have no collect
 *                 (memory ran out taking it, or on the host thread before
 *                 its trace existed): what dump_taken set up for it is
 *                 undone (CUPTI: buffers go back to CUPTI again). Every
 *                 dump_taken is followed by exactly one collect of that
 *                 dump or one dump_dropped. Window lock held or the host
 *                 thread: must not block.
 *   rotated       the recorder rotated its segment (one call may stand
 *                 for several): hand over into the ring what the source
 *                 still holds of the steps recorded so far, so that a
 *                 SIGKILL salvage loses at most about the open segment's
 *                 worth (CUPTI: its buffers fill slowly and are delivered
 *                 only when full; it flushes them). Host thread; may
 *                 take a few milliseconds, never waits on the GPU.
 *   rotated_wanted  nonzero when `rotated` has something to do now
 *                 (CUPTI: completed buffers go into the ring): the host
 *                 thread is woken for a rotation only then (a wake per
 *                 rotation costs a loop of short steps a futex call, often
 *                 an interrupt to another CPU; #29). A source with
 *                 `rotated` and no `rotated_wanted` is always woken for.
 *                 Stepping thread, window lock held: lock-free, a load or
 *                 two. */
struct capture_recorder_ops {
	void (*segment)(uint64_t gen);
	void (*dump_taken)(void);
	void (*dump_dropped)(void);
	void (*rotated)(void);
	int (*rotated_wanted)(void);
};

/* What the hang watchdog (prof.watchdog{}) asks of a source that can tell:
 *   stacks        the stacks the source can give beyond the native ones
 *                 (the Python bridge: every Python thread's, as
 *                 faulthandler writes them) into out[size]. Returns 0, or
 *                 -1 with why[wsize] saying why not. The watchdog's
 *                 thread; may wait ~2 s.
 *   gpu           the GPU work launched and not finished (CUPTI: kernel
 *                 launches seen by its launch callbacks with no completion
 *                 record yet) into *g (its fixed array). Returns 1 when the
 *                 source tracks launches now (the list, possibly empty, is
 *                 what it knows), 0 when it cannot say (g->note says why:
 *                 GPU capture off, CUPTI not recording outside windows,
 *                 ...). The watchdog's thread, while the host thread may be
 *                 collecting a window; may flush the source's buffers,
 *                 never blocks on the GPU.
 *   ended         true once the program's own code has ended (the
 *                 interpreter finalizing): the watchdog stops looking for
 *                 hangs. Any thread. */
struct capture_hang_ops {
	int (*stacks)(char *out, size_t size, char *why, size_t wsize);
	int (*gpu)(struct capture_gpu_hang *g);
	bool (*ended)(void);
};

/* A source's descriptor: its name, the core table, and its optional
 * tables (NULL: it takes no part). */
struct capture_ops {
	const char *name;
	int (*init)(const struct capture_host *host, struct err *e);
	void (*warmup)(void);
	void (*window_open)(uint64_t gen);
	void (*window_close)(uint64_t gen);
	int (*collect)(const struct capture_window *w, struct trace *t,
		       struct err *e);
	void (*fini)(void);
	void (*step)(const struct capture_step *s);
	void (*prepare)(void);
	void (*explicit_step)(void);
	void (*cuda_inject)(void);
	const struct capture_recorder_ops *recorder;
	const struct capture_hang_ops *hang;
};

#endif

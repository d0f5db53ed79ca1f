/*
 * sampler — CPU stacks: timer samples of every thread while a window
 * records, stacks taken on purpose (range pushes, slow CUDA calls), and
 * their symbolization at export. See docs/stacks.md.
 *
 * Files:
 *   sampler.c  the capture source: configuration, signal choice, the
 *              sampler thread (thread discovery through /proc/self/task,
 *              one POSIX timer per thread), window open/close, collect.
 *   unwind.c   what runs on sampled threads: the signal handler (libunwind's
 *              unw_backtrace into a stack buffer, then one evbuf record)
 *              and the synchronous backtrace for sampler_record_stack().
 *   symbols.c  addresses to names on the host thread: per-module tables
 *              from the ELF .symtab (else .dynsym), dladdr as a fallback,
 *              C++ names demangled and shortened, module+0xoffset when
 *              nothing is known.
 *   wallclock.c  wall-clock sampling by the sampler thread's ticks.
 *
 * Threads: sampler_capture's callbacks follow src/capture/source.h. The
 * handler runs on application threads and is async-signal-safe. The
 * symbols_* functions are host-thread only (one struct symbols per user).
 */
#ifndef PROFHOST_SAMPLER_H
#define PROFHOST_SAMPLER_H

#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "../../events/trace.h"
#include "../source.h"
#include "../../stacks/symbols.h"

/* The capture source (listed in src/host/capture.c, after every source
 * that adds events a stack may be attached to: its collect symbolizes). */
extern const struct capture_ops sampler_capture;

/* Most frames one stack keeps (an evbuf record holds EVBUF_NAME_MAX bytes). */
#define SAMPLER_DEPTH_MAX 512

/*
 * Takes a stack of the calling thread now and appends it to the recording
 * window as an EVBUF_STACK record of `kind` (enum trace_stack_kind) with
 * `id` (TRACE_STACK_CUDA: the call's correlation id). Frames inside
 * profhost itself are left out. For the CUPTI capture: call it from the
 * API-exit callback of a call longer than prof.capture{cuda_backtrace};
 * the sampler's collect then attaches the stack, as a "stack" argument, to
 * the event with that correlation id (cat cuda_runtime / cuda_driver /
 * cuda_sync, trace_event.id = correlation id).
 * Any thread, not from a signal handler. Returns 0, or -1 when no window
 * records, stacks are off, or the record was dropped.
 */
int sampler_record_stack(unsigned kind, uint64_t id);

/* Fills ips[0..max) with the calling thread's return addresses, innermost
 * first, leaving out profhost's own frames; sets *truncated when deeper
 * frames did not fit. Returns how many were stored (0 on failure). Any
 * thread, not from a signal handler (the sampling signal is blocked while
 * it unwinds). */
int sampler_backtrace_now(uint64_t *ips, int max, bool *truncated);

/* ---- internal to src/capture (sampler.c, unwind.c, bench, tests) ---- */

/* One sampled thread. The handler finds it through the timer's sigev_value
 * (or, with the wall clock, the sampler thread's signal's value); only the
 * sampler thread creates and deletes slots. */
struct sampler_slot {
	_Atomic int32_t tid;       /* 0: free */
	_Atomic uint32_t epoch;    /* dl epoch this thread last unwound at */
	/* Where the thread's start_thread return address lies on its stack,
	 * and its value while the start routine runs (0: not known). */
	_Atomic uintptr_t entry_at, entry_ra;
	_Atomic int has_timer;     /* `timer` exists */
	int seen;                  /* found by the current scan */
	bool own;                  /* a thread of profhost's: never sampled */
	int blocking;              /* scans until a blocking thread is looked
				      at again (0: it is not) */
	int backoff;               /* the last such wait, in scans */
	/* Wall clock (wallclock.c): signals the sampler thread sent and the
	 * handler took; the periods the next one stands for; the time of the
	 * thread's last recorded sample (0: none yet) and its CPU time (ns)
	 * right after it; the ticker's window and last tick for the slot. */
	_Atomic uint32_t sent, handled, wall_weight;
	_Atomic int64_t last_ts, cpu_after;
	uint64_t wall_gen, wall_tick;
	timer_t timer;
	int signo;                 /* the signal `timer` was created with */
};

/* What the handler reads; set up by sampler.c (and the benchmark). */
struct unwind_config {
	int (*append)(uint16_t kind, int64_t ts, const void *payload,
		      uint32_t len, uint64_t id, uint64_t a);
	struct sampler_slot *slots;
	size_t nslots;
	uint32_t depth;            /* frames kept per stack */
};

/* Counters of the handler, reset at each window open. */
struct unwind_counts {
	uint64_t samples;  /* recorded */
	uint64_t lost;     /* taken but not recorded (buffers full, nested) */
	uint64_t slow;     /* unwound step by step: thread not known safe */
};

/* Sets the handler's configuration and computes the address ranges where a
 * thread may hold an allocator or loader lock (malloc's family of
 * functions, libc's and an interposed allocator's; the dynamic loader),
 * libc's, and those of profhost itself. Start-up, before any signal is
 * installed. 0 or -1. */
int unwind_setup(const struct unwind_config *cfg);

/* Frames the handler keeps per stack from now on (1..SAMPLER_DEPTH_MAX).
 * Between windows (the stepping thread, window lock held). */
void unwind_set_depth(uint32_t depth);

/* Turns recording on (counters reset) or off. Any thread. */
void unwind_set_recording(bool on);

/* Current counters (racy snapshot). */
void unwind_counts(struct unwind_counts *out);

/* Installs the handler on `signo`, remembering the previous action to chain
 * signals that are not the sampler's. Returns 0 or -1 (errno). */
int unwind_install(int signo);

/* True when `signo`'s current handler is the sampler's. */
bool unwind_owns(int signo);

/* Forgets `signo` (the application took it over): the handler then ignores
 * what still arrives on it. */
void unwind_disown(int signo);

/* Restores the previous action of `signo` if the handler is still ours. */
void unwind_uninstall(int signo);

/* Bumps the loader epoch when modules were loaded or unloaded since the
 * last call (each thread's next sample then checks again that it is at a
 * safe point before unw_backtrace). Sampler thread. */
void unwind_poll_loader(void);

/* The loader epoch now (1 at start, bumped by unwind_poll_loader). Any
 * thread. */
uint32_t unwind_epoch(void);

/* Warms the calling thread's unwinder outside any handler and marks `slot`
 * (may be NULL) as safe to unwind at the current epoch; returns that
 * epoch, and in *entry_at, *entry_ra what the slot needs to notice the
 * thread's exit (see struct sampler_slot). Returns 0 and marks nothing
 * before unwind_learn_entry succeeded (the first sample then checks). */
uint32_t unwind_warm_self(struct sampler_slot *slot, uintptr_t *entry_at,
			  uintptr_t *entry_ra);

/* Learns, from the calling thread's own stack, the code of the libc
 * function that calls every thread's start routine (glibc's start_thread),
 * so that the handler knows a thread starting or exiting. Call it on a
 * thread made by pthread_create, after unwind_setup and before any timer
 * exists (the sampler thread does). 0, or -1 when it was not found (then
 * exiting threads are not told apart). */
int unwind_learn_entry(void);

/* True when one of the `n` addresses lies where a thread may hold an
 * allocator or loader lock (part of the check before a thread's first fast
 * unwind). Async-signal-safe. */
bool unwind_stack_unsafe(const uint64_t *ips, int n);

/* The signal handler itself (exposed for the benchmark). */
void unwind_handler(int signo, siginfo_t *si, void *uc);

/* The signal that stacks taken on purpose must block (0: none). */
void unwind_set_block_signal(int signo);

/* ---- wallclock.c: wall-clock sampling by the sampler thread's ticks ---- */

/* The kernel's clock id for thread `tid`'s CPU time. */
clockid_t wallclock_thread_cpu_clock(int32_t tid);

/* Repeats of window `gen` are kept from now on; `rec`: `gen` is a flight
 * recorder segment's (most of them are given back unwritten, so theirs are
 * the first forgotten when every store is taken). Sampler thread. */
void wallclock_open(uint64_t gen, bool rec);

/* A recorder dump takes the recorder's segments (capture_recorder_ops.dump_taken):
 * their repeats stay until its collect, however many segments open
 * meanwhile. Any thread; must not block long. */
void wallclock_rec_dumped(void);

/*
 * One tick (number `tick` of the window, at `now`) over the slots: each
 * thread that ran since its last sample, or has none in window `gen` yet,
 * gets a sampling signal on `signo`; each other one counts its last sample
 * again, without a signal. A thread skipped (its signal still pending)
 * is weighed at the next tick it gets. Sampler thread.
 */
void wallclock_tick(struct sampler_slot *slots, size_t nslots, uint64_t gen,
		      int signo, int64_t now, uint64_t tick);

/* Adds window `gen`'s repeated samples from `from_ts` on to `t` (copies
 * of the stacks they repeat, after the Python frames were merged into
 * those) and forgets them all; adds to *lost those whose sample was not
 * recorded. Older recorder stores lose a dump's mark (they were given back
 * before it). Host thread. 0, or -1 when memory ran out. */
int wallclock_merge(uint64_t gen, int64_t from_ts, struct trace *t, uint64_t *lost);

/* Frees every window's repeats. Exit. */
void wallclock_fini(void);

/* ---- symbols.c: see symbols.h ---- */

#endif

/*
 * evbuf — per-thread event buffers: the hot path of every capture source.
 *
 * Lives in the preloaded shim (libprofhost.so) so that application threads
 * append without crossing into the core. The core reaches these functions
 * through struct shim_api (src/shim/shim_api.h).
 *
 * Model. Capture happens in *generations*: evbuf_open() starts generation g
 * with a fresh pool of fixed-size chunks, evbuf_close() ends it. While a
 * generation is open, each thread appends variable-size records to a chunk
 * it owns; a full chunk is replaced by the next free chunk of the pool (an
 * atomic bump, no lock). When the pool is exhausted the record is dropped and
 * counted ("drop and count": the buffer-exhausted policy; nothing blocks).
 * After evbuf_close(), the host thread walks the generation's chunks with
 * evbuf_drain() and then releases the pool with evbuf_release().
 *
 * Thread exit. A thread that exits leaves its chunk to the pool (a
 * pthread key's destructor) when at least EVBUF_LEAVE_MIN bytes of it are
 * free; the next thread that needs a chunk takes such a chunk first and
 * marks the switch with an EVBUF_THREAD record, so a program that starts
 * and ends many threads does not use up the pool with chunks it no longer
 * writes.
 *
 * Idle cost: evbuf_active() is one relaxed load and a predicted branch.
 * Records are stored compact when they can be (the records' and chunks'
 * format is src/common/evformat.h); the drain hands visitors full records
 * either way.
 *
 * Pools are kept in EVBUF_SLOTS slots indexed by generation; a generation can
 * open only when its slot has been released, else its records are dropped
 * (counted) until it closes. A writer that raced a close may append a record
 * to a closed generation's chunk; the drain reads only what was published
 * before it started, and a slot is reused only EVBUF_SLOTS generations later.
 */
#ifndef PROFHOST_EVBUF_H
#define PROFHOST_EVBUF_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/evformat.h"

#define EVBUF_SLOTS 4
#define EVBUF_SALV_KEEP_MIN (64u << 20) /* a salvage file's pools leave at
					* least this much of its tmpfs free
					* (and a quarter of it) */
#define EVBUF_LEAVE_MIN 8192         /* see "Thread exit" above: room for the
				      * EVBUF_THREAD record and any record */

/* The shared capture word: bit 0 = a generation is open; the rest is the
 * generation number. Read with evbuf_active(). */
extern _Atomic uint64_t evbuf_state;

/* True while a capture generation is open. Any thread, async-signal-safe. */
static inline int evbuf_active(void)
{
	return (int)(atomic_load_explicit(&evbuf_state, memory_order_relaxed) & 1);
}

/*
 * Appends a record on the calling thread if a generation is open; a no-op
 * otherwise. `name` may be NULL (no payload) and is copied, at most
 * EVBUF_NAME_MAX bytes. Any thread; async-signal-safe (no locks, no malloc:
 * a thread's first record of a generation only issues raw syscalls).
 */
void evbuf_append(uint16_t kind, const char *name, uint64_t id, uint64_t a);

/* As evbuf_append() with an explicit timestamp and a payload of `len` bytes
 * (not necessarily text). Returns 0, or -1 when dropped or inactive, and
 * also when it interrupted another append on the same thread (a signal
 * handler's record is then dropped: the interrupted one stays intact). */
int evbuf_append_raw(uint16_t kind, int64_t ts, const void *payload,
		     uint32_t len, uint64_t id, uint64_t a);

/*
 * Opens a new generation backed by a pool of `bytes` (rounded to whole
 * chunks, at least 2). Returns the generation number (>= 1), or 0 when one is
 * already open. The pool's memory is reserved with mmap, lazily backed; a
 * helper thread of evbuf's own populates it a little ahead of the writers
 * (evbuf.c), so they do not take the page faults.
 * Callers serialize open/close (the core holds its step lock).
 */
uint64_t evbuf_open(size_t bytes);

/* As evbuf_open(), the helper starting `lead` bytes ahead of the writers
 * (whole chunks, at least one; at most 2 MiB as evbuf_open), or as far as
 * the pages the slot kept from a recycled generation (evbuf.c,
 * "Recycling"), populated a chunk at a time under 2 MiB: the flight
 * recorder's first segment (at its start, after a pause or a window),
 * whose writers take a chunk or two, where evbuf_open would populate 2
 * MiB at each resume. */
uint64_t evbuf_open_lead(size_t bytes, size_t lead);

/* Readies the pool of the generation evbuf_open() will open next (a
 * window is about to open): maps it, starts the pre-fault helper and
 * populates the first writers' pages now, so the window's first step does
 * not pay for them. No-op while a generation is open or that pool's slot
 * is still held. Same caller as evbuf_open(). */
void evbuf_prepare(size_t bytes);

/* The hook evbuf_set_fill_hook() installs: generation `gen`'s pool has
 * handed out three quarters of its chunks. */
typedef void (*evbuf_fill_fn)(uint64_t gen);

/* Installs `filling` (NULL removes it), called once per generation when
 * its pool has handed out three quarters of its chunks, on the thread
 * that took the chunk: any thread, possibly inside a signal handler, so
 * it must be async-signal-safe and must not append. The flight recorder
 * starts a new segment then (docs/recorder.md). Any thread. */
void evbuf_set_fill_hook(evbuf_fill_fn filling);

/* Closes the open generation; returns its number, or 0 when none was open.
 * Appends after this return are no-ops. */
uint64_t evbuf_close(void);

/* The generation open now, 0 when none: one acquire load. A writer whose
 * append failed asks whether the generation it meant is still the one
 * open (then its record was dropped and counted) or closed meanwhile.
 * Any thread, async-signal-safe. */
uint64_t evbuf_current(void);

/* Closes the open generation (its number in *closed) and opens the next
 * with a pool of `bytes` in one step, as the flight recorder rotates its
 * segments: the new pool is mapped first, then a writer sees one
 * generation or the other, never none, so no record is lost between them.
 * Returns the new generation, or 0 (*closed 0) when none was open. Same
 * caller as evbuf_open(). */
uint64_t evbuf_rotate(size_t bytes, uint64_t *closed);

/* Visits every record of closed generation `gen` and fills *stats,
 * handing the pool's pages back to the kernel behind it (a generation is
 * drained once: the records it read are gone after the call). A visitor
 * that sets stats->keep_bytes cuts the drain there (see evbuf_stats).
 * Host thread only; `gen` must be closed and not yet released.
 * Returns 0, or -1 when `gen` is unknown or still open. */
int evbuf_drain(uint64_t gen, evbuf_visit_fn fn, void *ctx,
		struct evbuf_stats *stats);

/* Frees generation `gen`'s pool so its slot can be reused. The host
 * thread, or the core's step side under its window lock (the flight
 * recorder gives its oldest segment back as it rotates); never two
 * callers for one generation. */
void evbuf_release(uint64_t gen);

/* In a child after fork(): closes capture there and forgets the parent
 * thread's chunk. The parent's generations (and its salvage file) stay
 * the parent's. */
void evbuf_after_fork_child(void);

struct salv_header;

/*
 * Backs the event pools with a salvage file (src/common/salvfile.h) in
 * folder `dir`, which must be a tmpfs: created O_EXCL|O_NOFOLLOW, mode
 * 0600, as profhost-<pid>-<time>.salvage or, when that name is taken, with
 * a random suffix (-<8 hex digits>, a few tries: a taken name is never
 * opened), locked (flock) for the life of the process; every pool mapped
 * from now on is a region of it. Returns its header for the core to fill,
 * or NULL with why[size] saying why not (the pools stay anonymous memory).
 * Start-up, before any pool is mapped; once.
 */
struct salv_header *evbuf_salvage_open(const char *dir, char *why, size_t size);

/* The salvage file's path, or NULL when there is none. */
const char *evbuf_salvage_path(void);

/* Removes the salvage file: what it held was written, or the process ends
 * (every caller is on the way out: fini, the exit path). Only in the
 * process that created it (a forked child leaves it alone). The mappings
 * stay valid, and so does the descriptor, forgotten but not closed: a
 * thread may be mapping a slot with it. */
void evbuf_salvage_remove(void);

/* Brings the salvage file's table of loaded modules up to date (see
 * src/shim/salvmods.h): cheap when the loader's list did not change.
 * Nothing without a file. Any thread, not a signal handler. */
void evbuf_salvage_modules(void);

/*
 * ---- The shim's inline append (evbuf.c and the shim's hot paths only) ----
 *
 * It stores a record compact when it can (EVBUF_COMPACT,
 * src/common/evformat.h).
 */

/* The calling thread's chunk. initial-exec: the shim is loaded at start-up
 * by LD_PRELOAD, so its TLS sits in the static block and each access is one
 * %fs-relative load, with no __tls_get_addr call on the hot path; it is
 * small enough for glibc's static-TLS surplus when the shim is dlopen'ed. */
struct evbuf_tls {
	uint64_t st;               /* evbuf_state of `chunk`'s generation; 0 = none */
	struct evbuf_chunk *chunk; /* current chunk */
	int32_t tid;
	int32_t busy;              /* 1 while an append runs on this thread */
	int32_t exit_armed;        /* 1 once the thread-exit hook is set */
	int32_t pad;
};
extern __thread struct evbuf_tls evbuf_tls
	__attribute__((tls_model("initial-exec"), visibility("hidden")));

/* Copies n <= 48 bytes with a few overlapping moves (no call). */
__attribute__((always_inline))
static inline void evbuf_copy_small(char *d, const char *s, uint32_t n)
{
	if (n >= 16) {
		__builtin_memcpy(d, s, 16);
		if (n > 32)
			__builtin_memcpy(d + 16, s + 16, 16);
		__builtin_memcpy(d + n - 16, s + n - 16, 16);
	} else if (n >= 8) {
		__builtin_memcpy(d, s, 8);
		__builtin_memcpy(d + n - 8, s + n - 8, 8);
	} else if (n >= 4) {
		__builtin_memcpy(d, s, 4);
		__builtin_memcpy(d + n - 4, s + n - 4, 4);
	} else if (n) {
		d[0] = s[0];
		d[n / 2] = s[n / 2];
		d[n - 1] = s[n - 1];
	}
}

/*
 * evbuf_append_raw() for the hot path, inlined: `st` is the evbuf_state
 * value the caller read (a generation is open), `len` <= EVBUF_NAME_MAX.
 * When the thread's chunk belongs to that generation and has room, writes
 * the record there (compact when it can), holding the thread's `busy` flag
 * as evbuf_append_raw() does (a signal handler's append in between gives
 * up); otherwise calls evbuf_append_raw(). Returns 0, or -1 when dropped.
 */
__attribute__((always_inline))
static inline int evbuf_append_fast(uint64_t st, uint16_t kind, int64_t ts,
				    const char *payload, uint32_t len,
				    uint64_t id, uint64_t a)
{
	int compact = id == 0 && (a >> 32) == 0;
	uint32_t hdr = compact ? sizeof(struct evbuf_crec) : sizeof(struct evbuf_rec);
	uint32_t need = (hdr + len + 7) & ~7u, used;
	struct evbuf_chunk *c;
	char *p;

	if (__builtin_expect(evbuf_tls.busy, 0))
		return evbuf_append_raw(kind, ts, payload, len, id, a);
	evbuf_tls.busy = 1;
	atomic_signal_fence(memory_order_seq_cst);
	c = evbuf_tls.chunk;
	if (__builtin_expect(evbuf_tls.st != st, 0))
		goto slow;
	used = atomic_load_explicit(&c->used, memory_order_relaxed);
	if (__builtin_expect(used + need > EVBUF_CHUNK_DATA, 0))
		goto slow;
	p = (char *)(c + 1) + used;
	if (compact) {
		struct evbuf_crec *r = (struct evbuf_crec *)p;
		r->kind = (uint16_t)(kind | EVBUF_COMPACT);
		r->len = (uint16_t)len;
		r->a = (uint32_t)a;
		r->ts = ts;
	} else {
		struct evbuf_rec *r = (struct evbuf_rec *)p;
		r->kind = kind;
		r->size = (uint16_t)((sizeof *r + len + 7) & ~7u);
		r->len = len;
		r->ts = ts;
		r->id = id;
		r->a = a;
	}
	if (len <= 48)
		evbuf_copy_small(p + hdr, payload, len);
	else
		__builtin_memcpy(p + hdr, payload, len);
	atomic_store_explicit(&c->used, used + need, memory_order_release);
	atomic_signal_fence(memory_order_seq_cst);
	evbuf_tls.busy = 0;
	return 0;
slow:
	atomic_signal_fence(memory_order_seq_cst);
	evbuf_tls.busy = 0;
	return evbuf_append_raw(kind, ts, payload, len, id, a);
}

#endif

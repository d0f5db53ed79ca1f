/*
 * evbuf — per-thread event buffers (see evbuf.h for the model).
 *
 * Memory: each slot owns one mmap'ed region of whole chunks, reserved with
 * MAP_NORESERVE so untouched chunks cost no RAM. A released slot gives its
 * pages back with MADV_DONTNEED but keeps the mapping: a writer that raced a
 * close and writes late touches a zeroed page instead of unmapped memory, so
 * a race can at worst spoil a record (the drain validates every record),
 * never crash the target.
 *
 * Pre-faulting. The first write to a page of the pool makes the kernel
 * allocate and zero it, on the writing thread: with huge pages ~10 ns per
 * NVTX range, with 4 KiB pages several times that. A helper thread of
 * evbuf's own ("profhost-pf", every signal blocked) populates the open
 * generation's pool (MADV_POPULATE_WRITE) ahead of the chunks handed out,
 * so the writers find their pages there. How far ahead grows with what the
 * window used: 2 MiB, then as much as used so far, at most 32 MiB, never
 * past the pool (so a window holds at most that much more memory than it
 * wrote, until it is released). Writers ask for more (an atomic and, now
 * and then, a futex wake) when they take a chunk. A generation opened by
 * evbuf_rotate (the flight recorder's next segment, every few steps)
 * starts from what the generation before it used, plus one chunk, and is
 * populated a chunk at a time while that is under 2 MiB: a recorder
 * segment of a training loop takes a chunk or two, and populating and
 * giving back 2 MiB of the salvage file's tmpfs at every rotation cost
 * such a loop about 3 % of its CPU time (issue #29); so does one opened
 * with evbuf_open_lead (the recorder's first segment), from its lead.
 * Kernels without
 * MADV_POPULATE_WRITE (before 5.14), a helper that cannot start, or a
 * window whose populating fails (memory limits): the writers fault, as
 * they would without the helper.
 *
 * Recycling. A generation released without being drained (the flight
 * recorder's oldest segment, given back as it rotates on the stepping
 * thread) keeps what it wrote and one chunk more (at most
 * EVBUF_KEEP_BYTES, and only pages that are populated): what was written
 * in them is zeroed (memset, see zero_written), the rest goes back to the
 * kernel, and the next generation in that slot starts with those pages
 * populated (`ready`). The recorder thus reuses its few pages
 * instead of giving them back and populating fresh ones at every
 * rotation: MADV_REMOVE on the stepping thread with its TLB shootdown,
 * and the helper's wake-up and page faults, cost more than the memset.
 * A slot's kept pages are in the salvage file as zeros in a region its
 * header names no generation for.
 */
#include "evbuf.h"
#include "../common/evchunk.h"
#include "../common/salvfile.h"
#include "salvmods.h"

#include "../common/clock.h"
#include "../common/io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <linux/magic.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

_Atomic uint64_t evbuf_state;

#define CHUNK_DATA EVBUF_CHUNK_DATA

#define EVBUF_LEFT_MAX 64 /* chunks a slot keeps for other threads */
#define EVBUF_SALV_NAME_TRIES 8 /* names tried for the salvage file */
/* A left chunk takes the EVBUF_THREAD record and the largest record. */
_Static_assert(EVBUF_LEAVE_MIN >= 2 * 32 + 16 + EVBUF_NAME_MAX,
	       "EVBUF_LEAVE_MIN too small");

struct evbuf_slot {
	_Atomic uint64_t gen;      /* generation using the slot; 0 = free */
	char *mem;                 /* mapping, `mapped` bytes */
	size_t mapped;
	uint32_t nchunks;          /* chunks usable by the generation */
	_Atomic uint64_t next;     /* next chunk to hand out */
	_Atomic uint64_t dropped_full;
	_Atomic int open;
	/* Pre-faulting (see the top): the generation the helper may populate
	 * for (0: none), the bytes from the start it should have populated,
	 * the bytes it has, and whether it is populating now. */
	_Atomic uint64_t pf_gen;
	_Atomic uint64_t pf_want;
	_Atomic uint64_t pf_done;
	_Atomic int pf_busy;
	/* The helper's least lead for this generation (see the top):
	 * PF_LEAD_MIN, or less for a rotated one, populated a chunk at a
	 * time then. Set before the generation is handed out. */
	_Atomic uint64_t pf_min;
	/* Bytes from the start that are populated and zero for the next
	 * generation (0: none): what evbuf_prepare() populated, or what
	 * evbuf_release() kept of an undrained generation (see "Recycling"
	 * at the top); used up by the next open. */
	size_t ready;
	/* The generation was drained (its pages went back behind the
	 * drain): its release keeps nothing. Host thread, or the opener. */
	int drained;
	/* Chunks left by exited threads (see "Thread exit" in evbuf.h): the
	 * generation's low 32 bits << 32 | chunk index + 1; 0 or another
	 * generation's entry is a free place. */
	_Atomic uint64_t left[EVBUF_LEFT_MAX];
	/* 1 when `mem` maps the salvage file (at file offset file_off), 0
	 * when it is anonymous memory */
	int shared;
	uint64_t file_off;
};

#define PF_PIECE ((uint64_t)2 << 20)   /* populated per step: a huge page */
#define PF_LEAD_MIN ((uint64_t)2 << 20)
#define PF_LEAD_MAX ((uint64_t)32 << 20)
/* What the release of an undrained generation keeps (see "Recycling"). */
#define EVBUF_KEEP_BYTES ((uint64_t)8 * EVBUF_CHUNK_BYTES)

static struct evbuf_slot slots[EVBUF_SLOTS];
/* Records dropped because the open generation found no free slot. Reset by
 * evbuf_open, read by evbuf_close. */
static _Atomic uint64_t noslot_dropped;
/* evbuf_set_fill_hook()'s; NULL: none. */
static _Atomic(evbuf_fill_fn) fill_hook;
/* At each close, in place gen % NOSLOT_MARKS: the generation (low 24
 * bits, in bits 40-63) and its noslot count (bits 0-39), in one word so
 * the host thread never reads a count with another generation's number.
 * Several places: the flight recorder closes segments faster than the host
 * thread drains them. */
#define NOSLOT_MARKS 16
static _Atomic uint64_t noslot_mark[NOSLOT_MARKS];
#define NOSLOT_COUNT_MASK ((1ull << 40) - 1)
static uint64_t last_gen;    /* serialized by the caller of open/close */
/* The last generation whose pool could not be mapped: its low 32 bits <<
 * 32 | the mmap errno. Written by evbuf_open, read by evbuf_drain. */
static _Atomic uint64_t nomap_mark;

/* The pre-fault helper: 0 not started, 1 running, -1 off (could not start,
 * or the kernel cannot populate). Woken through pf_seq (a futex word). */
static _Atomic int pf_state;
static _Atomic uint32_t pf_seq;

/* The salvage file (salvfile.h, evbuf_salvage_open): its descriptor
 * (-1: pools are anonymous memory), its header, where its next slot
 * region may start, the process that created it and its path. Set at
 * start-up before any pool is mapped; slot regions are added by the
 * caller of open/close. */
static _Atomic int salv_fd = -1; /* the exit path forgets it: atomic */
static dev_t salv_dev;      /* the file's identity, to tell that salv_fd */
static ino_t salv_ino;      /* is still ours (see salv_fd_ours) */
/* The file's header: NULL without a file, once it was removed (its
 * mappings stay valid) or in a forked child. Read by the caller of
 * open/close, the host thread and the module table's writer (another
 * thread) while the exit path may remove the file: atomic. */
static _Atomic(struct salv_header *) salv_live;
/* The header's mapping, never cleared: a forked child maps anonymous
 * memory there (the file's pages are not inherited), even after the
 * parent removed the file, for the pointers the core keeps to it. */
static struct salv_header *salv_map;
static uint64_t salv_end;
static pid_t salv_pid;
static char salv_path[4096];

/* Thread state (evbuf.h): the inline append reads it too. */
__thread struct evbuf_tls evbuf_tls __attribute__((tls_model("initial-exec")));
#define tls evbuf_tls

/* The key whose destructor leaves an exiting thread's chunk to the pool;
 * exit_key_ok when it could be created in glibc's first block of keys
 * (PTHREAD_KEY_2NDLEVEL_SIZE, 32), where pthread_setspecific only stores
 * into the thread descriptor: no lock, no malloc, so it may run in a
 * signal handler's first append. Set once by the constructor. */
static pthread_key_t exit_key;
static int exit_key_ok;

/* Offset `off` of slot s's pool moved up to a huge-page boundary (the
 * kernel populates and faults whole huge pages), at most `end`. */
static uint64_t pf_round(const struct evbuf_slot *s, uint64_t off, uint64_t end)
{
	uintptr_t at = (uintptr_t)s->mem + off;

	off += (PF_PIECE - at % PF_PIECE) % PF_PIECE;
	return off < end ? off : end;
}

/* Offset `off` of slot s's pool moved up to where the helper's next piece
 * ends, at most `end`: a huge-page boundary (pf_round), or a chunk's end
 * for a generation whose least lead is under a huge page (its pool is
 * written a chunk or two at a time, and a huge page's worth of 4 KiB
 * pages would mostly go unused). */
static uint64_t pf_step(const struct evbuf_slot *s, uint64_t off, uint64_t end)
{
	if (atomic_load_explicit(&s->pf_min, memory_order_relaxed) >= PF_PIECE)
		return pf_round(s, off, end);
	off = (off + EVBUF_CHUNK_BYTES - 1) / EVBUF_CHUNK_BYTES * EVBUF_CHUNK_BYTES;
	return off < end ? off : end;
}

/* How far ahead of `used` bytes of slot s's pool the helper populates. */
static uint64_t pf_lead(const struct evbuf_slot *s, uint64_t used)
{
	uint64_t lo = atomic_load_explicit(&s->pf_min, memory_order_relaxed);

	return used < lo ? lo : used > PF_LEAD_MAX ? PF_LEAD_MAX : used;
}

static void pf_wake(void)
{
	atomic_fetch_add_explicit(&pf_seq, 1, memory_order_release);
	syscall(SYS_futex, &pf_seq, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* Writers have reached `used` bytes of slot s's pool: asks the helper to
 * populate further once less than half its lead is left. Any thread;
 * async-signal-safe (atomics and a raw futex wake). */
static void pf_need(struct evbuf_slot *s, uint64_t used)
{
	uint64_t want = atomic_load_explicit(&s->pf_want, memory_order_relaxed);
	uint64_t lead = pf_lead(s, used), target, size;

	if (atomic_load_explicit(&pf_state, memory_order_relaxed) != 1 ||
	    used + lead / 2 <= want ||
	    atomic_load_explicit(&s->pf_gen, memory_order_relaxed) == 0)
		return;
	size = (uint64_t)s->nchunks * EVBUF_CHUNK_BYTES;
	target = pf_step(s, used + lead, size);
	while (target > want)
		if (atomic_compare_exchange_weak_explicit(&s->pf_want, &want, target,
							  memory_order_relaxed,
							  memory_order_relaxed)) {
			pf_wake();
			return;
		}
}

/* Generation `gen`'s pool handed out three quarters of its chunks: tells
 * the fill hook, if any. Any thread; async-signal-safe when the hook is. */
static void fill_note(uint64_t gen)
{
	evbuf_fill_fn fn = atomic_load_explicit(&fill_hook, memory_order_acquire);

	if (fn)
		fn(gen);
}

void evbuf_set_fill_hook(evbuf_fill_fn filling)
{
	atomic_store_explicit(&fill_hook, filling, memory_order_release);
}

/* Populates what the open generation's pool wants populated, a piece at a
 * time, while that generation is open and its slot's (release waits for
 * the piece in progress). Helper thread. Returns 0, or -1 when the kernel
 * cannot populate at all. */
static int pf_populate(void)
{
	uint64_t st = atomic_load_explicit(&evbuf_state, memory_order_acquire);
	uint64_t gen = st >> 1;
	struct evbuf_slot *s = &slots[gen % EVBUF_SLOTS];

	if (!(st & 1))
		return 0;
	for (;;) {
		uint64_t done = atomic_load_explicit(&s->pf_done, memory_order_relaxed);
		uint64_t want = atomic_load_explicit(&s->pf_want, memory_order_relaxed);
		uint64_t len;
		int rc = 0;

		if (done >= want ||
		    atomic_load_explicit(&evbuf_state, memory_order_relaxed) != st)
			return 0;
		/* Dekker with evbuf_release(): it clears pf_gen, then waits
		 * while pf_busy; seq_cst on both sides. */
		atomic_store(&s->pf_busy, 1);
		if (atomic_load(&s->pf_gen) != gen) {
			atomic_store(&s->pf_busy, 0);
			return 0;
		}
		/* Only now is s->mem this generation's: evbuf_open() may map
		 * the slot anew once it was released. */
		len = pf_step(s, done + 1, want) - done;
		if (madvise(s->mem + done, len, MADV_POPULATE_WRITE) != 0)
			rc = errno == EINVAL || errno == ENOSYS || errno == EPERM ? -1 : 1;
		/* A salvage file's writers trust pf_done to have their pages
		 * (chunk_acquire): it covers only what was populated. */
		if (rc == 0 || !s->shared)
			atomic_store_explicit(&s->pf_done, done + len, memory_order_release);
		if (rc > 0) /* out of memory or the like: not for this window */
			atomic_store(&s->pf_gen, 0);
		atomic_store(&s->pf_busy, 0);
		if (rc)
			return rc < 0 ? -1 : 0;
	}
}

static void *pf_main(void *arg)
{
	(void)arg;
	for (;;) {
		uint32_t seq = atomic_load_explicit(&pf_seq, memory_order_acquire);

		if (pf_populate() != 0) {
			atomic_store(&pf_state, -1); /* the writers fault, as before */
			return NULL;
		}
		syscall(SYS_futex, &pf_seq, FUTEX_WAIT_PRIVATE, seq, NULL, NULL, 0);
	}
}

/* Starts the helper once (stepping thread, from evbuf_open). */
static void pf_start(void)
{
	sigset_t all, old;
	pthread_attr_t attr;
	pthread_t th;
	int rc;

	if (atomic_load(&pf_state) != 0)
		return;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 64 * 1024);
	rc = pthread_create(&th, &attr, pf_main, NULL);
	pthread_attr_destroy(&attr);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		atomic_store(&pf_state, -1);
		return;
	}
	pthread_setname_np(th, "profhost-pf");
	atomic_store(&pf_state, 1);
}

/* Takes a chunk an exited thread left in slot s for generation `gen`
 * (see "Thread exit" in evbuf.h) whose index is at least `min`, or NULL.
 * The drain visits chunks in index order, so a thread that goes on from
 * chunk k takes only a later one: its records stay in order. Async-signal-
 * safe. */
static struct evbuf_chunk *take_left(struct evbuf_slot *s, uint64_t gen,
				     uint64_t min)
{
	uint64_t want = gen & 0xffffffff;
	int i;

	for (i = 0; i < EVBUF_LEFT_MAX; i++) {
		uint64_t e = atomic_load_explicit(&s->left[i], memory_order_relaxed);

		if (e >> 32 != want || !(uint32_t)e || (uint32_t)e - 1 < min)
			continue;
		if (atomic_compare_exchange_strong_explicit(&s->left[i], &e, 0,
				memory_order_acquire, memory_order_relaxed))
			return (struct evbuf_chunk *)(s->mem + ((uint64_t)(uint32_t)e - 1) *
						      EVBUF_CHUNK_BYTES);
	}
	return NULL;
}

/* Marks the switch to the calling thread in chunk c, taken over from an
 * exited thread: an EVBUF_THREAD record with the thread's id and name. */
static void mark_thread(struct evbuf_chunk *c)
{
	uint32_t used = atomic_load_explicit(&c->used, memory_order_relaxed);
	struct evbuf_rec *r = (struct evbuf_rec *)((char *)(c + 1) + used);

	r->kind = EVBUF_THREAD;
	r->size = (uint16_t)evchunk_rec_size(16);
	r->len = 16;
	r->ts = 0;
	r->id = (uint64_t)(uint32_t)tls.tid;
	r->a = 0;
	memset(r + 1, 0, 16);
	prctl(PR_GET_NAME, (char *)(r + 1), 0, 0, 0);
	atomic_store_explicit(&c->used, used + r->size, memory_order_release);
}

/* Takes a chunk of generation `gen` for the calling thread, one an exited
 * thread left first, else a fresh one; NULL (counted) when there is none.
 * Async-signal-safe: raw syscalls only (and pthread_setspecific on a key
 * of the first block, see exit_key). */
static struct evbuf_chunk *chunk_acquire(uint64_t gen)
{
	struct evbuf_slot *s = &slots[gen % EVBUF_SLOTS];
	struct evbuf_chunk *c;
	uint64_t idx;

	if (atomic_load_explicit(&s->gen, memory_order_acquire) != gen) {
		atomic_fetch_add_explicit(&noslot_dropped, 1, memory_order_relaxed);
		return NULL;
	}
	if (tls.tid == 0)
		tls.tid = (int32_t)syscall(SYS_gettid);
	if (!tls.exit_armed && exit_key_ok) {
		pthread_setspecific(exit_key, (void *)1);
		tls.exit_armed = 1;
	}
	/* a thread going on in this generation: only a later chunk */
	idx = tls.st == (gen << 1 | 1) && tls.chunk ?
	      (uint64_t)((char *)tls.chunk - s->mem) / EVBUF_CHUNK_BYTES + 1 : 0;
	c = take_left(s, gen, idx);
	if (c) {
		mark_thread(c);
	} else {
		idx = atomic_fetch_add_explicit(&s->next, 1, memory_order_relaxed);
		if (idx >= s->nchunks) {
			atomic_fetch_add_explicit(&s->dropped_full, 1, memory_order_relaxed);
			return NULL;
		}
		/* A chunk of the salvage file has its tmpfs pages before the
		 * first write: populated by the pre-fault helper (pf_done
		 * counts only what it populated), else here, where a full
		 * tmpfs fails and the records drop (counted) instead of
		 * raising SIGBUS. Through the mapping, not the descriptor,
		 * which the program may have closed. */
		if (s->shared &&
		    atomic_load_explicit(&s->pf_done, memory_order_acquire) <
		    (idx + 1) * EVBUF_CHUNK_BYTES &&
		    madvise(s->mem + idx * EVBUF_CHUNK_BYTES, EVBUF_CHUNK_BYTES,
			    MADV_POPULATE_WRITE) != 0) {
			atomic_fetch_add_explicit(&s->dropped_full, 1, memory_order_relaxed);
			return NULL;
		}
		pf_need(s, (idx + 1) * EVBUF_CHUNK_BYTES);
		if (idx + 1 == s->nchunks - s->nchunks / 4)
			fill_note(gen);
		c = (struct evbuf_chunk *)(s->mem + idx * EVBUF_CHUNK_BYTES);
		c->tid = tls.tid;
		memset(c->thread_name, 0, sizeof c->thread_name);
		prctl(PR_GET_NAME, c->thread_name, 0, 0, 0);
		atomic_store_explicit(&c->used, 0, memory_order_relaxed);
	}
	tls.chunk = c;
	tls.st = gen << 1 | 1;
	return c;
}

/* Leaves chunk c of open generation `gen` to the pool for other threads,
 * when enough of it is free and a place is free. Exiting thread. */
static void leave_chunk(uint64_t gen, struct evbuf_chunk *c)
{
	struct evbuf_slot *s = &slots[gen % EVBUF_SLOTS];
	uint32_t used = atomic_load_explicit(&c->used, memory_order_relaxed);
	uint64_t entry, want = gen & 0xffffffff;
	int i;

	if (atomic_load_explicit(&s->gen, memory_order_acquire) != gen ||
	    used + EVBUF_LEAVE_MIN > CHUNK_DATA)
		return;
	entry = want << 32 | (uint64_t)(((char *)c - s->mem) / EVBUF_CHUNK_BYTES + 1);
	for (i = 0; i < EVBUF_LEFT_MAX; i++) {
		uint64_t e = atomic_load_explicit(&s->left[i], memory_order_relaxed);

		if ((e >> 32 != want || !(uint32_t)e) &&
		    atomic_compare_exchange_strong_explicit(&s->left[i], &e, entry,
				memory_order_release, memory_order_relaxed))
			return;
	}
}

/* exit_key's destructor: glibc runs it on a thread that exits (not the
 * main thread at exit()) after the thread's own code. Leaves the thread's
 * chunk to the pool when it belongs to the open generation. */
static void thread_exit(void *arg)
{
	uint64_t st = atomic_load_explicit(&evbuf_state, memory_order_acquire);

	(void)arg;
	tls.exit_armed = 0; /* a later append (another destructor) re-arms */
	if (tls.busy)
		return;
	tls.busy = 1;
	atomic_signal_fence(memory_order_seq_cst);
	if (tls.chunk && (st & 1) && tls.st == st)
		leave_chunk(st >> 1, tls.chunk);
	tls.chunk = NULL;
	tls.st = 0;
	atomic_signal_fence(memory_order_seq_cst);
	tls.busy = 0;
}

/* Creates exit_key early, while the process's keys are few (see there). */
__attribute__((constructor)) static void exit_key_init(void)
{
	if (pthread_key_create(&exit_key, thread_exit) != 0)
		return;
	if (exit_key < 32)
		exit_key_ok = 1;
	else
		pthread_key_delete(exit_key);
}

/* The append proper; `st` is the open evbuf_state, the caller holds the
 * thread's `busy` flag. */
static int append_owned(uint64_t st, uint16_t kind, int64_t ts,
			const void *payload, uint32_t len, uint64_t id, uint64_t a)
{
	struct evbuf_chunk *c = tls.chunk;
	uint32_t used = 0, need;
	int compact = id == 0 && (a >> 32) == 0;
	char *p;

	if (len > EVBUF_NAME_MAX)
		len = EVBUF_NAME_MAX;
	need = compact ? evchunk_crec_size(len) : evchunk_rec_size(len);
	if (c && tls.st == st) {
		used = atomic_load_explicit(&c->used, memory_order_relaxed);
		if (used + need > CHUNK_DATA)
			c = NULL;
	} else {
		c = NULL;
	}
	if (!c) {
		c = chunk_acquire(st >> 1);
		if (!c) {
			tls.chunk = NULL;
			tls.st = 0;
			return -1;
		}
		/* 0, or past what an exited thread left in it */
		used = atomic_load_explicit(&c->used, memory_order_relaxed);
	}
	p = (char *)(c + 1) + used;
	if (compact) {
		struct evbuf_crec *r = (struct evbuf_crec *)p;
		r->kind = (uint16_t)(kind | EVBUF_COMPACT);
		r->len = (uint16_t)len;
		r->a = (uint32_t)a;
		r->ts = ts;
		p += sizeof *r;
	} else {
		struct evbuf_rec *r = (struct evbuf_rec *)p;
		r->kind = kind;
		r->size = (uint16_t)need;
		r->len = len;
		r->ts = ts;
		r->id = id;
		r->a = a;
		p += sizeof *r;
	}
	if (len)
		memcpy(p, payload, len);
	atomic_store_explicit(&c->used, used + need, memory_order_release);
	return 0;
}

/* A signal handler (the CPU sampler's) may append on a thread that was
 * interrupted in the middle of an append: both would write at the same
 * offset of the same chunk. The per-thread `busy` flag makes the nested
 * append give up instead. Signal fences suffice: only the same thread
 * reads the flag. */
int evbuf_append_raw(uint16_t kind, int64_t ts, const void *payload,
		     uint32_t len, uint64_t id, uint64_t a)
{
	uint64_t st = atomic_load_explicit(&evbuf_state, memory_order_acquire);
	int rc;

	if (!(st & 1) || tls.busy)
		return -1;
	tls.busy = 1;
	atomic_signal_fence(memory_order_seq_cst);
	rc = append_owned(st, kind, ts, payload, len, id, a);
	atomic_signal_fence(memory_order_seq_cst);
	tls.busy = 0;
	return rc;
}

void evbuf_append(uint16_t kind, const char *name, uint64_t id, uint64_t a)
{
	int64_t ts;
	size_t len = 0;

	if (!evbuf_active())
		return;
	ts = clock_now_ns();
	if (name)
		len = strnlen(name, EVBUF_NAME_MAX);
	evbuf_append_raw(kind, ts, name, (uint32_t)len, id, a);
}

/* Chunks of a pool of `bytes` (at least 2). */
static uint64_t pool_chunks(size_t bytes)
{
	uint64_t nchunks = bytes / EVBUF_CHUNK_BYTES;

	if (nchunks < 2)
		nchunks = 2;
	if (nchunks > UINT32_MAX)
		nchunks = UINT32_MAX;
	return nchunks;
}

/* True when descriptor fd is the salvage file (its device and inode). */
static bool salv_is_file(int fd)
{
	struct stat st;

	return fstat(fd, &st) == 0 && st.st_dev == salv_dev && st.st_ino == salv_ino;
}

/* salv_fd when it is still the salvage file, else -1: a program may
 * close descriptors it did not open (a daemon closing 3-1023) and reuse
 * the number for a file of its own, which profhost must never truncate or
 * close. A descriptor found not ours is forgotten, not closed. The caller
 * uses the value returned, never salv_fd again: the exit path may forget
 * salv_fd meanwhile (it never closes it, see evbuf_salvage_remove). */
static int salv_fd_ours(void)
{
	int fd = atomic_load(&salv_fd);

	if (fd < 0)
		return -1;
	if (salv_is_file(fd))
		return fd;
	atomic_compare_exchange_strong(&salv_fd, &fd, -1);
	return -1;
}

/* The salvage file's descriptor, to map a region with: salv_fd while it
 * is still the file; else (the program closed its number, or reused it:
 * see salv_fd_ours) the file opened again by its path, when that is
 * still this process's file (the same device and inode), so the pools
 * mapped from now on are salvaged too. -1 when there is no file, it was
 * removed or replaced, or this is a forked child. Caller of open/close. */
static int salv_fd_for_map(void)
{
	int fd = salv_fd_ours();

	if (fd >= 0)
		return fd;
	if (!atomic_load_explicit(&salv_live, memory_order_acquire) || getpid() != salv_pid)
		return -1;
	fd = io_fd_above_stdio(open(salv_path, O_RDWR | O_NOFOLLOW | O_CLOEXEC));
	if (fd < 0)
		return -1;
	if (!salv_is_file(fd)) {
		close(fd);
		return -1;
	}
	/* Never closed, as salv_fd is not (evbuf_salvage_remove). */
	atomic_store(&salv_fd, fd);
	return fd;
}

/* The room a pool leaves free in the salvage file's tmpfs for the
 * program: a quarter of the tmpfs, at least EVBUF_SALV_KEEP_MIN bytes
 * (/dev/shm is where PyTorch's DataLoader workers hand tensors over and
 * NCCL keeps its buffers: a program that finds it full dies of SIGBUS). */
static uint64_t salv_room_kept(const struct statfs *sf)
{
	uint64_t quarter = (uint64_t)sf->f_blocks * (uint64_t)sf->f_bsize / 4;

	return quarter > EVBUF_SALV_KEEP_MIN ? quarter : EVBUF_SALV_KEEP_MIN;
}

/* Maps a region of `want` bytes at the end of the salvage file for slot
 * s; MAP_FAILED when there is no file, its tmpfs would keep less than
 * salv_room_kept() free with it, or the file cannot grow. Caller of
 * open/close. */
static void *slot_map_file(struct evbuf_slot *s, size_t want)
{
	uint64_t off = (salv_end + SALV_ALIGN - 1) / SALV_ALIGN * SALV_ALIGN;
	struct statfs sf;
	int fd = salv_fd_for_map();
	void *m;

	if (fd < 0)
		return MAP_FAILED;
	/* A pool the tmpfs has no room for (a container's 64 MiB /dev/shm
	 * against the default 128 MiB window), or that would leave the
	 * program too little of it, stays anonymous memory, as without the
	 * file: it would drop records at the tmpfs's size, or starve the
	 * program's own shared memory, and salvage is worth neither. */
	if (fstatfs(fd, &sf) != 0 ||
	    (uint64_t)sf.f_bavail * (uint64_t)sf.f_bsize < want + salv_room_kept(&sf))
		return MAP_FAILED;
	if (ftruncate(fd, (off_t)(off + want)) != 0)
		return MAP_FAILED;
	m = mmap(NULL, want, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE,
		 fd, (off_t)off);
	if (m == MAP_FAILED)
		return m;
	/* Not inherited by fork(): a child's mapping would keep the file,
	 * and its lock, alive after this process died (see
	 * evbuf_after_fork_child). */
	madvise(m, want, MADV_DONTFORK);
	salv_end = off + want;
	s->file_off = off;
	return m;
}

/* Makes free slot s's mapping at least `want` bytes: a region of the
 * salvage file when there is one, else anonymous memory. Grows by mapping
 * anew; the old mapping is kept (see the comment at the top): sizes
 * change only with the policy. Returns 0 or -1. Caller of open/close. */
static int slot_map(struct evbuf_slot *s, size_t want)
{
	struct salv_header *hd = atomic_load_explicit(&salv_live, memory_order_acquire);
	struct salv_slot *ss = hd ? &hd->slots[s - slots] : NULL;
	void *m;
	int shared = 1;

	if (s->mapped >= want)
		return 0;
	m = slot_map_file(s, want);
	if (m == MAP_FAILED) {
		shared = 0;
		m = mmap(NULL, want, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	}
	if (m == MAP_FAILED)
		return -1;
	/* Huge pages where the system allows them: a window touches its pool
	 * once, and 4 KiB page faults cost more than the records written
	 * (~1.5 us per 50 records here). Advice only; failure is fine. */
	madvise(m, want, MADV_HUGEPAGE);
	s->mem = m;
	s->mapped = want;
	s->ready = 0;
	s->shared = shared;
	if (ss) {
		/* the slot is free: no reader looks at its region now */
		ss->off = shared ? s->file_off : 0;
		ss->bytes = 0;
	}
	return 0;
}

/* Hands bytes [off, off + len) of slot s's pool back to the kernel: a
 * salvage file's pages are removed from the file (its tmpfs memory is
 * freed, later reads see zeros), anonymous ones dropped. Never
 * MADV_DONTNEED over a file pool: it frees nothing there. */
static void pool_give_back(struct evbuf_slot *s, uint64_t off, uint64_t len)
{
	if (s->shared) {
		madvise(s->mem + off, len, MADV_REMOVE);
		return;
	}
	madvise(s->mem + off, len, MADV_DONTNEED);
}

/* Tells the salvage file which generation slot s holds now (0: none) and
 * how many bytes of chunks it has. */
static void salv_slot_set(struct evbuf_slot *s, uint64_t gen, uint64_t bytes)
{
	struct salv_header *hd = atomic_load_explicit(&salv_live, memory_order_acquire);
	struct salv_slot *ss;

	if (!hd)
		return;
	ss = &hd->slots[s - slots];
	if (!s->shared) {
		/* Kept out of the file (its tmpfs had no room when the slot
		 * was mapped): the generation at offset 0, no bytes, so a
		 * reader can say its records were lost (salvfile.h). */
		ss->off = 0;
		ss->bytes = 0;
		atomic_store_explicit(&ss->gen, gen, memory_order_release);
		return;
	}
	if (gen)
		ss->bytes = bytes;
	atomic_store_explicit(&ss->gen, gen, memory_order_release);
}

/* Whether this kernel can populate a mapping of the file
 * (MADV_POPULATE_WRITE, Linux 5.14): the writers rely on it against
 * SIGBUS on a full tmpfs. 0, or -1 with errno set. */
static int madvise_probe(int fd)
{
	long page = sysconf(_SC_PAGESIZE);
	void *m = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	int rc;

	if (m == MAP_FAILED)
		return -1;
	rc = madvise(m, (size_t)page, MADV_POPULATE_WRITE);
	munmap(m, (size_t)page);
	return rc;
}

/* Removes, from folder `dir`, the salvage files of this pid that no live
 * process holds: those of the image this process was before an exec()
 * (`LD_PRELOAD=... nice prog`, `sh -c "exec prog"`: same pid, the file's
 * descriptor closed by O_CLOEXEC, so its lock is free). A file whose lock
 * is held (another pid namespace's process of the same number) or that is
 * not this user's regular file is left alone. Returns how many went.
 * Caller of evbuf_salvage_open. */
static int remove_own_stale(const char *dir)
{
	char prefix[48];
	struct dirent *d;
	struct stat st;
	size_t plen;
	DIR *dp;
	int n = 0;

	plen = (size_t)snprintf(prefix, sizeof prefix, "profhost-%d-", (int)getpid());
	dp = opendir(dir);
	if (!dp)
		return 0;
	while ((d = readdir(dp)) != NULL) {
		size_t len = strlen(d->d_name);
		int fd;

		if (len <= plen + 8 || strncmp(d->d_name, prefix, plen) != 0 ||
		    strcmp(d->d_name + len - 8, ".salvage") != 0)
			continue;
		fd = openat(dirfd(dp), d->d_name,
			    O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		if (fd < 0)
			continue;
		if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
		    st.st_uid == geteuid() && flock(fd, LOCK_EX | LOCK_NB) == 0 &&
		    unlinkat(dirfd(dp), d->d_name, 0) == 0)
			n++;
		close(fd);
	}
	closedir(dp);
	return n;
}

/* A fresh 32-bit number for a salvage file's name: from the kernel's
 * random pool, else the clock. */
static unsigned name_suffix(unsigned tries)
{
	struct timespec ts;
	unsigned x;

	if (syscall(SYS_getrandom, &x, sizeof x, 1 /* GRND_NONBLOCK */) == (long)sizeof x)
		return x;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned)ts.tv_nsec ^ (tries * 2654435761u);
}

/* Writes into salv_path the salvage file's name in folder `dir` for try
 * `tries`: profhost-<pid>-<time>.salvage, or, when that name is taken (a
 * file planted there, or left by a process of the same pid in another pid
 * namespace), profhost-<pid>-<time>-<random hex>.salvage. Returns 0, or -1
 * with why[size] set (the folder's name is too long). */
static int name_file(const char *dir, long long now, unsigned tries, char *why, size_t size)
{
	int n;

	if (tries == 0)
		n = snprintf(salv_path, sizeof salv_path, "%s/profhost-%d-%lld.salvage",
			     dir, (int)getpid(), now);
	else
		n = snprintf(salv_path, sizeof salv_path, "%s/profhost-%d-%lld-%08x.salvage",
			     dir, (int)getpid(), now, name_suffix(tries));
	if (n < 0 || (size_t)n >= sizeof salv_path) {
		snprintf(why, size, "the folder name '%s' is too long", dir);
		return -1;
	}
	return 0;
}

/* Gives the unnamed file open on `fd` (O_TMPFILE, set up and locked) its
 * name in folder `dir` (salv_path), a few names tried: a taken name is
 * never opened, followed or reused (linkat fails on it as O_EXCL would).
 * The file thus appears in the folder whole and locked, so a scan for
 * orphans (salvscan.h) never takes its lock while it is being made.
 * Returns 0, 1 when the file cannot be linked here (no /proc: the caller
 * makes it by name instead), or -1 with why[size] set. */
static int link_file(int fd, const char *dir, char *why, size_t size)
{
	long long now = (long long)time(NULL);
	char self[64];
	unsigned tries;

	snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
	for (tries = 0; tries < EVBUF_SALV_NAME_TRIES; tries++) {
		if (name_file(dir, now, tries, why, size) != 0)
			return -1;
		if (linkat(AT_FDCWD, self, AT_FDCWD, salv_path, AT_SYMLINK_FOLLOW) == 0)
			return 0;
		if (errno == ENOENT || errno == ENOTDIR)
			return 1; /* no /proc here */
		if (errno != EEXIST)
			break;
	}
	snprintf(why, size, "cannot create '%s': %s", salv_path, strerror(errno));
	return -1;
}

/* Creates the salvage file by name in folder `dir` (O_CREAT|O_EXCL|
 * O_NOFOLLOW, 0600) into salv_path, a few names tried as link_file()
 * does: where an unnamed file cannot be linked. Returns the descriptor, or
 * -1 with why[size] set. */
static int create_file(const char *dir, char *why, size_t size)
{
	long long now = (long long)time(NULL);
	unsigned tries;
	int fd = -1;

	for (tries = 0; tries < EVBUF_SALV_NAME_TRIES; tries++) {
		if (name_file(dir, now, tries, why, size) != 0)
			return -1;
		fd = open(salv_path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd >= 0 || errno != EEXIST)
			break;
	}
	if (fd < 0)
		snprintf(why, size, "cannot create '%s': %s", salv_path, strerror(errno));
	return fd;
}

/* Sets up the new salvage file open on `fd` (`named`: it has its name
 * already): checked to be this user's regular file, locked (flock: the
 * lock a reader tries, to tell a live writer), its header's tmpfs pages
 * allocated (not a SIGBUS at the first write) and mapped, the header
 * written. Returns the header, or NULL with why[size] set (fd closed, a
 * named file removed). */
static struct salv_header *setup_file(int fd, bool named, struct stat *st,
				      char *why, size_t size)
{
	const char *what = named ? salv_path : "the salvage file";
	struct salv_header *h;

	if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode) || st->st_uid != geteuid() ||
	    st->st_nlink != (named ? 1 : 0)) {
		snprintf(why, size, "'%s' is not a file of this user's", what);
		goto fail;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) != 0 ||
	    ftruncate(fd, (off_t)SALV_HEADER_BYTES) != 0 ||
	    fallocate(fd, 0, 0, (off_t)SALV_HEADER_BYTES) != 0 ||
	    madvise_probe(fd) != 0) {
		snprintf(why, size, "cannot set up '%s': %s", what, strerror(errno));
		goto fail;
	}
	h = mmap(NULL, SALV_HEADER_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (h == MAP_FAILED || madvise(h, SALV_HEADER_BYTES, MADV_DONTFORK) != 0) {
		snprintf(why, size, "cannot map '%s': %s", what, strerror(errno));
		if (h != MAP_FAILED)
			munmap(h, SALV_HEADER_BYTES);
		goto fail;
	}
	h->version = SALV_VERSION;
	h->header_bytes = (uint32_t)SALV_HEADER_BYTES;
	h->pid = (int32_t)getpid();
	h->chunk_bytes = EVBUF_CHUNK_BYTES;
	atomic_thread_fence(memory_order_release);
	memcpy(h->magic, SALV_MAGIC, sizeof h->magic);
	return h;
fail:
	if (named)
		unlink(salv_path);
	close(fd);
	return NULL;
}

struct salv_header *evbuf_salvage_open(const char *dir, char *why, size_t size)
{
	struct salv_header *h;
	struct statfs sf;
	struct stat st;
	bool named = false;
	int fd, rc = 1;

	h = atomic_load_explicit(&salv_live, memory_order_acquire);
	if (h)
		return h;
	if (statfs(dir, &sf) != 0) {
		snprintf(why, size, "cannot use '%s': %s", dir, strerror(errno));
		return NULL;
	}
	if (sf.f_type != TMPFS_MAGIC) {
		snprintf(why, size, "'%s' is not a tmpfs (its pages would be written "
			 "back to disk)", dir);
		return NULL;
	}
	/* An earlier image of this pid (before an exec) left its file: it
	 * would collide with this one's name within the same second, and
	 * leak otherwise. */
	remove_own_stale(dir);
	/* Made unnamed, set up and locked, then linked into place; by name
	 * only where that cannot be done. */
	fd = open(dir, O_RDWR | O_TMPFILE | O_CLOEXEC, 0600);
	if (fd < 0) {
		named = true;
		fd = create_file(dir, why, size);
		if (fd < 0)
			return NULL;
	}
	if ((fd = io_fd_above_stdio(fd)) < 0) {
		snprintf(why, size, "cannot keep the salvage file open: %s", strerror(errno));
		if (named)
			unlink(salv_path);
		return NULL;
	}
	h = setup_file(fd, named, &st, why, size);
	if (!h)
		return NULL;
	if (!named && (rc = link_file(fd, dir, why, size)) != 0) {
		/* no /proc: this one is dropped, one made by name instead */
		munmap(h, SALV_HEADER_BYTES);
		close(fd);
		if (rc < 0 || (fd = create_file(dir, why, size)) < 0)
			return NULL;
		if ((fd = io_fd_above_stdio(fd)) < 0) {
			snprintf(why, size, "cannot keep '%s' open: %s", salv_path,
				 strerror(errno));
			unlink(salv_path);
			return NULL;
		}
		h = setup_file(fd, true, &st, why, size);
		if (!h)
			return NULL;
	}
	if (fstat(fd, &st) != 0) { /* linked: one link now */
		snprintf(why, size, "cannot use '%s': %s", salv_path, strerror(errno));
		munmap(h, SALV_HEADER_BYTES);
		unlink(salv_path);
		close(fd);
		return NULL;
	}
	salv_fd = fd;
	salv_dev = st.st_dev;
	salv_ino = st.st_ino;
	salv_map = h;
	salv_end = SALV_HEADER_BYTES;
	salv_pid = getpid();
	atomic_store_explicit(&salv_live, h, memory_order_release);
	return h;
}

void evbuf_salvage_modules(void)
{
	struct salv_header *h = atomic_load_explicit(&salv_live, memory_order_acquire);

	if (h)
		salvmods_update(h);
}

const char *evbuf_salvage_path(void)
{
	return atomic_load_explicit(&salv_live, memory_order_acquire) ? salv_path : NULL;
}

void evbuf_salvage_remove(void)
{
	if (!atomic_load_explicit(&salv_live, memory_order_acquire) || getpid() != salv_pid)
		return;
	unlink(salv_path);
	atomic_store(&salv_live, NULL); /* unlinked once; the mappings stay valid */
	/* Forgotten, not closed: the process is ending, and another thread
	 * may be mapping a slot with the descriptor (slot_map_file) right
	 * now. Closed, its number could go to a file of the program's, which
	 * that thread would then truncate and map. The file is unlinked; its
	 * memory goes with the mappings and the descriptor, at exit. */
	atomic_store(&salv_fd, -1);
}

void evbuf_prepare(size_t bytes)
{
	uint64_t gen = last_gen + 1;
	struct evbuf_slot *s = &slots[gen % EVBUF_SLOTS];
	size_t want = (size_t)pool_chunks(bytes) * EVBUF_CHUNK_BYTES;

	if ((atomic_load_explicit(&evbuf_state, memory_order_relaxed) & 1) ||
	    atomic_load_explicit(&s->gen, memory_order_acquire) != 0 ||
	    slot_map(s, want) != 0)
		return;
	pf_start();
	/* The first writers' pages, populated now rather than faulted in by
	 * them in the window's first step. Kept until the slot's release. */
	{
		size_t first = pf_round(s, PF_LEAD_MIN, want);

		if (s->ready < first &&
		    madvise(s->mem + s->ready, first - s->ready, MADV_POPULATE_WRITE) == 0)
			s->ready = first;
	}
}

/* The next generation's number: the next whose slot is free (a
 * generation still held, a window being written or a recorder dump, is
 * stepped over, not dropped into; numbers only grow, so a slot is still
 * reused at least EVBUF_SLOTS generations later); all held: the next
 * number, whose records drop (counted). Caller of open/close. */
static uint64_t next_gen(void)
{
	uint64_t gen = last_gen + 1;
	int i;

	for (i = 0; i < EVBUF_SLOTS; i++)
		if (atomic_load_explicit(&slots[(last_gen + 1 + i) % EVBUF_SLOTS].gen,
					 memory_order_acquire) == 0) {
			gen = last_gen + 1 + i;
			break;
		}
	last_gen = gen;
	return gen;
}

/* Maps generation `gen`'s pool of `bytes` in its slot, when the slot is
 * free, and hands it to the writers (s->gen, last), the helper to keep
 * at least `lead` bytes ahead of them (see the top), and as far as the
 * slot's `ready` pages at first. Caller of open/close. */
static struct evbuf_slot *slot_ready(uint64_t gen, size_t bytes, uint64_t lead)
{
	uint64_t nchunks = pool_chunks(bytes);
	struct evbuf_slot *s = &slots[gen % EVBUF_SLOTS];
	size_t want = (size_t)nchunks * EVBUF_CHUNK_BYTES;

	if (atomic_load_explicit(&s->gen, memory_order_acquire) != 0)
		return s;
	if (slot_map(s, want) != 0) {
		atomic_store_explicit(&nomap_mark, (gen & 0xffffffff) << 32 |
				      (uint32_t)errno, memory_order_relaxed);
		return s;
	}
	s->nchunks = (uint32_t)nchunks;
	s->drained = 0;
	atomic_store_explicit(&s->next, 0, memory_order_relaxed);
	atomic_store_explicit(&s->dropped_full, 0, memory_order_relaxed);
	atomic_store_explicit(&s->open, 1, memory_order_relaxed);
	/* What evbuf_prepare() populated counts as done. */
	atomic_store_explicit(&s->pf_done, s->ready, memory_order_relaxed);
	atomic_store_explicit(&s->pf_min, lead, memory_order_relaxed);
	atomic_store_explicit(&s->pf_want, pf_step(s, lead > s->ready ? lead : s->ready, want),
			      memory_order_relaxed);
	atomic_store(&s->pf_gen, gen);
	salv_slot_set(s, gen, nchunks * EVBUF_CHUNK_BYTES);
	atomic_store_explicit(&s->gen, gen, memory_order_release);
	return s;
}

/* The pre-fault helper for slot s's new generation: started once, woken
 * only for pages evbuf_prepare() left to do (a wake costs the stepping
 * thread tens of microseconds at a window's first step on a small machine:
 * the helper may run first on its CPU). */
static void pf_follow(struct evbuf_slot *s)
{
	pf_start();
	if (atomic_load(&pf_state) == 1 &&
	    atomic_load_explicit(&s->pf_want, memory_order_relaxed) >
	    atomic_load_explicit(&s->pf_done, memory_order_relaxed))
		pf_wake();
}

uint64_t evbuf_open(size_t bytes)
{
	return evbuf_open_lead(bytes, PF_LEAD_MIN);
}

uint64_t evbuf_open_lead(size_t bytes, size_t lead)
{
	struct evbuf_slot *s;
	uint64_t gen;

	if (atomic_load_explicit(&evbuf_state, memory_order_relaxed) & 1)
		return 0;
	if (lead < PF_LEAD_MIN) /* whole chunks, at least one */
		lead = lead < EVBUF_CHUNK_BYTES ? EVBUF_CHUNK_BYTES
		       : (lead + EVBUF_CHUNK_BYTES - 1) / EVBUF_CHUNK_BYTES * EVBUF_CHUNK_BYTES;
	gen = next_gen();
	atomic_store_explicit(&noslot_dropped, 0, memory_order_relaxed);
	s = slot_ready(gen, bytes, lead);
	atomic_store_explicit(&evbuf_state, (gen << 1) | 1, memory_order_release);
	pf_follow(s);
	return gen;
}

/* Marks the open generation `gen` closed in its slot and keeps its noslot
 * count `n` for the drain. Caller of open/close, after writers stopped
 * seeing `gen` open. */
static void close_gen(uint64_t gen, uint64_t n)
{
	struct evbuf_slot *s = &slots[gen % EVBUF_SLOTS];

	if (atomic_load_explicit(&s->gen, memory_order_acquire) == gen)
		atomic_store_explicit(&s->open, 0, memory_order_release);
	atomic_store_explicit(&noslot_mark[gen % NOSLOT_MARKS], (gen & 0xffffff) << 40 |
			      (n < NOSLOT_COUNT_MASK ? n : NOSLOT_COUNT_MASK),
			      memory_order_relaxed);
}

uint64_t evbuf_close(void)
{
	uint64_t st = atomic_load_explicit(&evbuf_state, memory_order_relaxed);
	uint64_t gen = st >> 1;

	if (!(st & 1))
		return 0;
	atomic_store_explicit(&evbuf_state, gen << 1, memory_order_release);
	close_gen(gen, atomic_load_explicit(&noslot_dropped, memory_order_relaxed));
	return gen;
}

uint64_t evbuf_current(void)
{
	uint64_t st = atomic_load_explicit(&evbuf_state, memory_order_acquire);

	return st & 1 ? st >> 1 : 0;
}

/* The least lead of the generation that follows open generation `gen` in
 * a rotation: what `gen` took of its pool plus one chunk (the writers of a
 * flight recorder segment take about what the one before took), at most
 * PF_LEAD_MIN, the lead of a generation opened afresh. */
static uint64_t rotated_lead(uint64_t gen)
{
	const struct evbuf_slot *o = &slots[gen % EVBUF_SLOTS];
	uint64_t n = atomic_load_explicit(&o->next, memory_order_relaxed), lead;

	if (atomic_load_explicit(&o->gen, memory_order_acquire) != gen)
		return PF_LEAD_MIN;
	if (n > o->nchunks)
		n = o->nchunks;
	lead = (n + 1) * EVBUF_CHUNK_BYTES;
	return lead < PF_LEAD_MIN ? lead : PF_LEAD_MIN;
}

uint64_t evbuf_rotate(size_t bytes, uint64_t *closed)
{
	uint64_t st = atomic_load_explicit(&evbuf_state, memory_order_relaxed);
	struct evbuf_slot *s;
	uint64_t gen, n;

	*closed = 0;
	if (!(st & 1))
		return 0;
	/* The new pool is ready before writers see it, and they see it in
	 * place of the old one in one store: nothing is appended to neither. */
	gen = next_gen();
	s = slot_ready(gen, bytes, rotated_lead(st >> 1));
	n = atomic_exchange_explicit(&noslot_dropped, 0, memory_order_relaxed);
	atomic_store_explicit(&evbuf_state, (gen << 1) | 1, memory_order_release);
	close_gen(st >> 1, n);
	pf_follow(s);
	*closed = st >> 1;
	return gen;
}

/* The threads a drain met so far (the first 256 are remembered). */
struct thread_count {
	struct evbuf_stats *stats;
	int32_t seen[256];
	uint32_t nseen;
};

/* Counts thread `tid` in stats->threads the first time the drain meets it
 * (later threads than the 256th may count twice). */
static void count_thread(void *arg, int32_t tid)
{
	struct thread_count *tc = arg;
	uint32_t k;

	for (k = 0; k < tc->nseen && tc->seen[k] != tid; k++)
		;
	if (k == tc->nseen) {
		if (tc->nseen < 256)
			tc->seen[tc->nseen++] = tid;
		tc->stats->threads++;
	}
}

/* The drain hands the pool's pages back behind it in steps of this size
 * (whole huge pages): a window's records and its trace are not both
 * resident. */
#define DRAIN_GIVE_BACK ((uint64_t)2 << 20)

/* Hands back the pages of s->mem below `upto` (rounded down to a huge
 * page boundary, never below the pool's start: a pool need not begin on
 * one) once DRAIN_GIVE_BACK of them were read past *given. */
static void drain_give_back(struct evbuf_slot *s, uint64_t *given, uint64_t upto)
{
	uintptr_t end = (uintptr_t)s->mem + upto;

	end -= end % PF_PIECE;
	if (end <= (uintptr_t)s->mem)
		return;
	upto = end - (uintptr_t)s->mem;
	if (upto < *given + DRAIN_GIVE_BACK)
		return;
	pool_give_back(s, *given, upto - *given);
	*given = upto;
}

/* The cut's visitor: counts in *ctx (a uint64_t) the records that begin
 * an event. */
static void count_cut(void *ctx, int32_t tid, const char *name,
		      const struct evbuf_rec *rec)
{
	(void)tid;
	(void)name;
	if (!evbuf_rec_ends(rec->kind))
		++*(uint64_t *)ctx;
}

/* Cuts the drain of s at chunk k of n: counts the records of chunks k to
 * n - 1 in stats->dropped_cut (count_cut), unvisited, and hands their
 * pages back now, from the first huge page boundary at or past chunk k
 * (the one before it is the drain's) to `end`, where an earlier cut began
 * (0 at the first: the pool's end, with any pages the pre-fault helper
 * populated past its chunks). Returns where this cut began, the next
 * one's `end`. */
static uint64_t drain_cut(struct evbuf_slot *s, uint64_t k, uint64_t n, uint64_t end,
			  struct evbuf_stats *stats, struct evchunk_expanded *x)
{
	uint64_t i, start;

	for (i = k; i < n; i++) {
		struct evbuf_chunk *c = (struct evbuf_chunk *)(s->mem + i * EVBUF_CHUNK_BYTES);
		uint32_t used = atomic_load_explicit(&c->used, memory_order_acquire);
		int bad = 0;

		if (used == 0)
			continue;
		evchunk_walk(c, used, count_cut, &stats->dropped_cut, NULL, NULL, x, &bad);
	}
	if (!end) {
		end = n * EVBUF_CHUNK_BYTES;
		if (atomic_load_explicit(&s->pf_done, memory_order_relaxed) > end)
			end = atomic_load_explicit(&s->pf_done, memory_order_relaxed);
		if (end > s->mapped)
			end = s->mapped;
	}
	start = pf_round(s, k * EVBUF_CHUNK_BYTES, end);
	if (start < end)
		pool_give_back(s, start, end - start);
	return start;
}

int evbuf_drain(uint64_t gen, evbuf_visit_fn fn, void *ctx,
		struct evbuf_stats *stats)
{
	struct evbuf_slot *s = &slots[gen % EVBUF_SLOTS];
	uint64_t n, i, mark, given = 0, cut = 0;
	struct thread_count tc;
	struct evchunk_expanded x;

	memset(stats, 0, sizeof *stats);
	tc.stats = stats;
	tc.nseen = 0;
	mark = atomic_load_explicit(&noslot_mark[gen % NOSLOT_MARKS], memory_order_relaxed);
	if (mark >> 40 == (gen & 0xffffff))
		stats->dropped_noslot = mark & NOSLOT_COUNT_MASK;
	mark = atomic_load_explicit(&nomap_mark, memory_order_relaxed);
	if (mark && mark >> 32 == (gen & 0xffffffff))
		stats->pool_errno = (int)(uint32_t)mark;
	if (atomic_load_explicit(&s->gen, memory_order_acquire) != gen)
		return -1;
	if (atomic_load_explicit(&s->open, memory_order_acquire))
		return -1;
	s->drained = 1;
	stats->dropped_full = atomic_load_explicit(&s->dropped_full, memory_order_relaxed);
	n = atomic_load_explicit(&s->next, memory_order_acquire);
	if (n > s->nchunks)
		n = s->nchunks;
	stats->pool_bytes = n * EVBUF_CHUNK_BYTES;
	for (i = 0; i < n; i++) {
		struct evbuf_chunk *c = (struct evbuf_chunk *)(s->mem + i * EVBUF_CHUNK_BYTES);
		uint32_t used = atomic_load_explicit(&c->used, memory_order_acquire);
		uint64_t keep;
		int bad = 0;

		drain_give_back(s, &given, i * EVBUF_CHUNK_BYTES);
		/* Nothing published yet: the chunk may be a late writer's, its
		 * header still being written. A nonzero `used` (release) orders
		 * the header before this read. */
		if (used == 0)
			continue;
		if (used > CHUNK_DATA)
			used = CHUNK_DATA;
		stats->chunks++;
		stats->bytes += used;
		stats->pos = i * EVBUF_CHUNK_BYTES;
		count_thread(&tc, c->tid);
		/* a record spoiled by a late writer ends its chunk */
		stats->records += evchunk_walk(c, used, fn, ctx, count_thread, &tc, &x, &bad);
		if (stats->keep_bytes) {
			/* the visitor cut the drain: chunks from `keep` on */
			keep = (stats->keep_bytes + EVBUF_CHUNK_BYTES - 1) / EVBUF_CHUNK_BYTES;
			if (keep < i + 1)
				keep = i + 1;
			if (keep < n) {
				cut = drain_cut(s, keep, n, cut, stats, &x);
				n = keep;
			}
		}
	}
	return 0;
}

/* Zeroes what the released generation's writers put in the first `bytes`
 * of slot s (whole chunks): each chunk's header, its published records,
 * and a record's worth past them (one a late writer may have begun). The
 * rest of a chunk is zero already: a chunk is written from its start (a
 * fresh one's header set before use), and each generation's writes are
 * zeroed at its release. The recorder rotates every few steps on the
 * stepping thread, and a segment of a training loop writes a few KiB of
 * its 64 KiB chunk: zeroing whole chunks cost 7 us a rotation (over 100
 * us when its pages faulted) and pushed the program's data out of the
 * caches (#29). Releasing thread; the generation is closed. */
static void zero_written(struct evbuf_slot *s, uint64_t bytes)
{
	uint64_t i, len, n = bytes / EVBUF_CHUNK_BYTES;

	for (i = 0; i < n; i++) {
		struct evbuf_chunk *c = (struct evbuf_chunk *)(s->mem + i * EVBUF_CHUNK_BYTES);

		len = atomic_load_explicit(&c->used, memory_order_acquire);
		if (len > CHUNK_DATA)
			len = CHUNK_DATA;
		len += sizeof *c + evchunk_rec_size(EVBUF_NAME_MAX);
		memset(c, 0, len < EVBUF_CHUNK_BYTES ? len : EVBUF_CHUNK_BYTES);
	}
}

void evbuf_release(uint64_t gen)
{
	struct evbuf_slot *s = &slots[gen % EVBUF_SLOTS];
	uint64_t used, written, keep;

	if (atomic_load_explicit(&s->gen, memory_order_acquire) != gen ||
	    atomic_load_explicit(&s->open, memory_order_acquire))
		return;
	/* Stop the helper populating this pool (see pf_populate). */
	atomic_store(&s->pf_gen, 0);
	salv_slot_set(s, 0, 0);
	while (atomic_load(&s->pf_busy)) {
		struct timespec ts = { 0, 50000 };
		nanosleep(&ts, NULL);
	}
	written = atomic_load_explicit(&s->next, memory_order_relaxed);
	if (written > s->nchunks)
		written = s->nchunks;
	written *= EVBUF_CHUNK_BYTES;
	used = written;
	if (atomic_load_explicit(&s->pf_done, memory_order_relaxed) > used)
		used = atomic_load_explicit(&s->pf_done, memory_order_relaxed);
	/* Undrained: what it wrote and one chunk more stay, zeroed, for the
	 * next generation in this slot (see "Recycling" at the top). Only
	 * populated pages: a chunk whose populating failed (a full tmpfs)
	 * would raise SIGBUS in the memset, or in the next writer. */
	keep = written + EVBUF_CHUNK_BYTES;
	if (keep > used)
		keep = used - used % EVBUF_CHUNK_BYTES;
	if (keep > EVBUF_KEEP_BYTES || s->drained)
		keep = s->drained ? 0 : EVBUF_KEEP_BYTES;
	if (keep && s->shared &&
	    atomic_load_explicit(&s->pf_done, memory_order_relaxed) < keep &&
	    madvise(s->mem, keep, MADV_POPULATE_WRITE) != 0)
		keep = 0;
	if (keep)
		zero_written(s, written < keep ? written : keep);
	/* Whole huge pages: a write faults in all of its huge page. */
	if (used > keep)
		pool_give_back(s, keep, pf_round(s, used, s->mapped) - keep);
	s->ready = keep;
	atomic_store_explicit(&s->gen, 0, memory_order_release);
}

void evbuf_after_fork_child(void)
{
	int i, fd;

	/* The helper did not come along: a new one starts with the next
	 * window; a piece it was populating is the parent's business. */
	atomic_store(&pf_state, 0);
	for (i = 0; i < EVBUF_SLOTS; i++) {
		atomic_store(&slots[i].pf_gen, 0);
		atomic_store(&slots[i].pf_busy, 0);
	}
	atomic_store_explicit(&evbuf_state, 0, memory_order_relaxed);
	/* The salvage file stays the parent's: its lock is released with
	 * the parent alone (the file's mappings were not inherited:
	 * MADV_DONTFORK), its header is not written here. The pools that
	 * were the file's get anonymous memory at the same addresses, so
	 * every pointer to them stays valid. */
	for (i = 0; i < EVBUF_SLOTS; i++)
		if (slots[i].shared) {
			mmap(slots[i].mem, slots[i].mapped, PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
			slots[i].shared = 0;
		}
	atomic_store(&salv_live, NULL);
	salvmods_after_fork_child();
	if (salv_map)
		mmap(salv_map, SALV_HEADER_BYTES, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	/* the child is one thread: nothing maps a slot meanwhile */
	fd = salv_fd_ours();
	if (fd >= 0)
		close(fd);
	atomic_store(&salv_fd, -1);
	tls.chunk = NULL;
	tls.st = 0;
	tls.tid = 0;
	tls.busy = 0;
}

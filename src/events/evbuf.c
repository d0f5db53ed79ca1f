/*
 * evbuf — per-thread event buffers (see evbuf.h for the model).
 *
 * Memory: each slot owns one mmap'ed region of whole chunks, reserved with
 * MAP_NORESERVE so untouched chunks cost no RAM. A released slot gives its
 * pages back with MADV_DONTNEED but keeps the mapping: a writer that raced a
 * close and writes late touches a zeroed page instead of unmapped memory, so
 * a race can at worst spoil a record (the drain validates every record),
 * never crash the target.
 */
#include "evbuf.h"

#include "clock.h"

#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

_Atomic uint64_t evbuf_state;

/* A chunk: written by one thread only; `used` publishes its records. */
struct evbuf_chunk {
	int32_t tid;
	_Atomic uint32_t used;  /* bytes of records published (release) */
	char thread_name[16];
	uint64_t pad;           /* keeps the data 8-aligned at offset 32 */
};

#define CHUNK_DATA (EVBUF_CHUNK_BYTES - sizeof(struct evbuf_chunk))

struct evbuf_slot {
	_Atomic uint64_t gen;      /* generation using the slot; 0 = free */
	char *mem;                 /* mapping, `mapped` bytes */
	size_t mapped;
	uint32_t nchunks;          /* chunks usable by the generation */
	_Atomic uint64_t next;     /* next chunk to hand out */
	_Atomic uint64_t dropped_full;
	_Atomic int open;
};

static struct evbuf_slot slots[EVBUF_SLOTS];
/* Records dropped because the open generation found no free slot. Reset by
 * evbuf_open, read by evbuf_close. */
static _Atomic uint64_t noslot_dropped;
/* At the last close: the generation (low 24 bits, in bits 40-63) and its
 * noslot count (bits 0-39), in one word so the host thread never reads a
 * count with another generation's number. */
static _Atomic uint64_t noslot_mark;
#define NOSLOT_COUNT_MASK ((1ull << 40) - 1)
static uint64_t last_gen;    /* serialized by the caller of open/close */

/* Thread state. initial-exec: the shim is loaded at start-up by LD_PRELOAD,
 * so its TLS sits in the static block and each access is one %fs-relative
 * load, with no __tls_get_addr call on the hot path. It is small enough
 * (24 bytes) for glibc's static-TLS surplus when the shim is dlopen'ed. */
struct evbuf_tls {
	uint64_t gen;              /* generation of `chunk` */
	struct evbuf_chunk *chunk; /* current chunk, NULL = none */
	int32_t tid;
	int32_t busy;              /* 1 while an append runs on this thread */
};
static __thread struct evbuf_tls tls __attribute__((tls_model("initial-exec")));

static inline uint32_t rec_size(uint32_t len)
{
	return (uint32_t)((sizeof(struct evbuf_rec) + len + 7) & ~(size_t)7);
}

/* Takes a fresh chunk of generation `gen` for the calling thread, or NULL
 * (counted) when there is none. Async-signal-safe: raw syscalls only. */
static struct evbuf_chunk *chunk_acquire(uint64_t gen)
{
	struct evbuf_slot *s = &slots[gen % EVBUF_SLOTS];
	struct evbuf_chunk *c;
	uint64_t idx;

	if (atomic_load_explicit(&s->gen, memory_order_acquire) != gen) {
		atomic_fetch_add_explicit(&noslot_dropped, 1, memory_order_relaxed);
		return NULL;
	}
	idx = atomic_fetch_add_explicit(&s->next, 1, memory_order_relaxed);
	if (idx >= s->nchunks) {
		atomic_fetch_add_explicit(&s->dropped_full, 1, memory_order_relaxed);
		return NULL;
	}
	c = (struct evbuf_chunk *)(s->mem + idx * EVBUF_CHUNK_BYTES);
	if (tls.tid == 0)
		tls.tid = (int32_t)syscall(SYS_gettid);
	c->tid = tls.tid;
	memset(c->thread_name, 0, sizeof c->thread_name);
	prctl(PR_GET_NAME, c->thread_name, 0, 0, 0);
	atomic_store_explicit(&c->used, 0, memory_order_relaxed);
	tls.chunk = c;
	tls.gen = gen;
	return c;
}

/* The append proper; the caller holds the thread's `busy` flag. */
static int append_owned(uint64_t gen, uint16_t kind, int64_t ts,
			const void *payload, uint32_t len, uint64_t id, uint64_t a)
{
	struct evbuf_chunk *c = tls.chunk;
	struct evbuf_rec *r;
	uint32_t used = 0, need;

	if (len > EVBUF_NAME_MAX)
		len = EVBUF_NAME_MAX;
	need = rec_size(len);
	if (c && tls.gen == gen) {
		used = atomic_load_explicit(&c->used, memory_order_relaxed);
		if (used + need > CHUNK_DATA)
			c = NULL;
	} else {
		c = NULL;
	}
	if (!c) {
		c = chunk_acquire(gen);
		if (!c) {
			tls.chunk = NULL;
			return -1;
		}
		used = 0;
	}
	r = (struct evbuf_rec *)((char *)(c + 1) + used);
	r->kind = kind;
	r->size = (uint16_t)need;
	r->len = len;
	r->ts = ts;
	r->id = id;
	r->a = a;
	if (len)
		memcpy(r + 1, payload, len);
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
	rc = append_owned(st >> 1, kind, ts, payload, len, id, a);
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

uint64_t evbuf_open(size_t bytes)
{
	uint64_t gen, nchunks;
	struct evbuf_slot *s;

	if (atomic_load_explicit(&evbuf_state, memory_order_relaxed) & 1)
		return 0;
	gen = ++last_gen;
	nchunks = bytes / EVBUF_CHUNK_BYTES;
	if (nchunks < 2)
		nchunks = 2;
	if (nchunks > UINT32_MAX)
		nchunks = UINT32_MAX;
	s = &slots[gen % EVBUF_SLOTS];
	atomic_store_explicit(&noslot_dropped, 0, memory_order_relaxed);
	if (atomic_load_explicit(&s->gen, memory_order_acquire) == 0) {
		size_t want = (size_t)nchunks * EVBUF_CHUNK_BYTES;
		if (s->mapped < want) {
			/* Grow by mapping anew. The old mapping is kept (see the
			 * comment at the top): sizes change only with the policy. */
			void *m = mmap(NULL, want, PROT_READ | PROT_WRITE,
				       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
			if (m != MAP_FAILED) {
				/* Huge pages where the system allows them: a window
				 * touches its pool once, and 4 KiB page faults cost
				 * more than the records written (~1.5 us per 50
				 * records here). Advice only; failure is fine. */
				madvise(m, want, MADV_HUGEPAGE);
				s->mem = m;
				s->mapped = want;
			}
		}
		if (s->mapped >= want) {
			s->nchunks = (uint32_t)nchunks;
			atomic_store_explicit(&s->next, 0, memory_order_relaxed);
			atomic_store_explicit(&s->dropped_full, 0, memory_order_relaxed);
			atomic_store_explicit(&s->open, 1, memory_order_relaxed);
			atomic_store_explicit(&s->gen, gen, memory_order_release);
		}
	}
	atomic_store_explicit(&evbuf_state, (gen << 1) | 1, memory_order_release);
	return gen;
}

uint64_t evbuf_close(void)
{
	uint64_t st = atomic_load_explicit(&evbuf_state, memory_order_relaxed);
	uint64_t gen = st >> 1, n;
	struct evbuf_slot *s;

	if (!(st & 1))
		return 0;
	atomic_store_explicit(&evbuf_state, gen << 1, memory_order_release);
	s = &slots[gen % EVBUF_SLOTS];
	if (atomic_load_explicit(&s->gen, memory_order_acquire) == gen)
		atomic_store_explicit(&s->open, 0, memory_order_release);
	n = atomic_load_explicit(&noslot_dropped, memory_order_relaxed);
	atomic_store_explicit(&noslot_mark, (gen & 0xffffff) << 40 |
			      (n < NOSLOT_COUNT_MASK ? n : NOSLOT_COUNT_MASK),
			      memory_order_relaxed);
	return gen;
}

int evbuf_drain(uint64_t gen, evbuf_visit_fn fn, void *ctx,
		struct evbuf_stats *stats)
{
	struct evbuf_slot *s = &slots[gen % EVBUF_SLOTS];
	uint64_t n, i, mark;
	int32_t seen[256];
	uint32_t nseen = 0;

	memset(stats, 0, sizeof *stats);
	mark = atomic_load_explicit(&noslot_mark, memory_order_relaxed);
	if (mark >> 40 == (gen & 0xffffff))
		stats->dropped_noslot = mark & NOSLOT_COUNT_MASK;
	if (atomic_load_explicit(&s->gen, memory_order_acquire) != gen)
		return -1;
	if (atomic_load_explicit(&s->open, memory_order_acquire))
		return -1;
	stats->dropped_full = atomic_load_explicit(&s->dropped_full, memory_order_relaxed);
	n = atomic_load_explicit(&s->next, memory_order_acquire);
	if (n > s->nchunks)
		n = s->nchunks;
	for (i = 0; i < n; i++) {
		struct evbuf_chunk *c = (struct evbuf_chunk *)(s->mem + i * EVBUF_CHUNK_BYTES);
		uint32_t used = atomic_load_explicit(&c->used, memory_order_acquire);
		uint32_t off = 0, k;
		char name[17];

		if (used > CHUNK_DATA)
			used = CHUNK_DATA;
		memcpy(name, c->thread_name, 16);
		name[16] = '\0';
		stats->chunks++;
		stats->bytes += used;
		for (k = 0; k < nseen && seen[k] != c->tid; k++)
			;
		if (k == nseen) {
			if (nseen < 256)
				seen[nseen++] = c->tid;
			stats->threads++;
		}
		while (off + sizeof(struct evbuf_rec) <= used) {
			const struct evbuf_rec *r =
				(const struct evbuf_rec *)((char *)(c + 1) + off);
			/* A record spoiled by a late writer ends this chunk. */
			if (r->size < sizeof *r || off + r->size > used ||
			    rec_size(r->len) != r->size)
				break;
			fn(ctx, c->tid, name, r);
			stats->records++;
			off += r->size;
		}
	}
	return 0;
}

void evbuf_release(uint64_t gen)
{
	struct evbuf_slot *s = &slots[gen % EVBUF_SLOTS];
	uint64_t used;

	if (atomic_load_explicit(&s->gen, memory_order_acquire) != gen ||
	    atomic_load_explicit(&s->open, memory_order_acquire))
		return;
	used = atomic_load_explicit(&s->next, memory_order_relaxed);
	if (used > s->nchunks)
		used = s->nchunks;
	if (used)
		madvise(s->mem, used * EVBUF_CHUNK_BYTES, MADV_DONTNEED);
	atomic_store_explicit(&s->gen, 0, memory_order_release);
}

void evbuf_after_fork_child(void)
{
	atomic_store_explicit(&evbuf_state, 0, memory_order_relaxed);
	tls.chunk = NULL;
	tls.tid = 0;
	tls.busy = 0;
}

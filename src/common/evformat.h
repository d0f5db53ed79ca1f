/*
 * evformat — the format of the event records and of the chunks that hold
 * them: what the shim's buffers (src/shim/evbuf.h) write, and what every
 * reader reads: the drain's visitors (src/events/assemble.h), the capture
 * sources that name their records' kinds, and the salvage reader, which
 * walks a salvage file's chunks with evchunk.h as the drain does. The
 * names keep the evbuf_/EVBUF_ prefix of the buffers that write them.
 *
 * Libc only, header-only: the shim and the core both include it.
 */
#ifndef PROFHOST_EVFORMAT_H
#define PROFHOST_EVFORMAT_H

#include <stdint.h>

/* Record kinds. Values are stable: they also appear in the raw capture. */
enum evbuf_kind {
	EVBUF_RANGE_PUSH = 1, /* name = range name; id = external correlation id
			       (GPU link, 0: none); a = evbuf_nvtx_a() */
	EVBUF_RANGE_POP = 2,  /* no name (see EVBUF_A_EARLY); a = evbuf_nvtx_a() */
	EVBUF_RANGE_START = 3, /* name; id = range id (may end on another thread) */
	EVBUF_RANGE_END = 4,  /* id = range id; a = evbuf_nvtx_a() */
	EVBUF_MARK = 5,       /* name; a = evbuf_nvtx_a() */
	EVBUF_THREAD = 6,     /* evbuf's own, never visited: the chunk's later
				 records are thread `id`'s, named by the
				 payload (a chunk a thread left at its exit,
				 taken over by another) */
	EVBUF_USER = 64,      /* first kind free for capture sources */
	/* CPU sampler (src/capture/cpu/sampler.h). Payload: uint64_t instruction
	 * addresses, innermost first. */
	EVBUF_SAMPLE = 72,    /* timer sample: frame 0 is the interrupted
				 instruction, the rest return addresses;
				 id = timer periods it stands for (1 + overruns);
				 a = EVBUF_STACK_TRUNCATED or 0 */
	EVBUF_STACK = 73,     /* stack taken on purpose (range push, slow CUDA
				 call): all return addresses; id = kind-specific
				 (CUDA correlation id); a = trace stack kind << 8
				 | EVBUF_STACK_TRUNCATED or 0 */
	/* torch operators (src/capture/torch/torchops.c): payload and fields in
	 * src/events/oprec.h. */
	EVBUF_TORCH_OP = 74,
	/* CUPTI (src/capture/cupti/cupti.c), the flight recorder only: one activity
	 * record as CUPTI delivered it between windows (the CUDA 13 struct,
	 * cupti_record_size() bytes; pointers in it, a kernel's name, point
	 * into the process's libcupti). ts = when its buffer was delivered;
	 * id, a = 0. The assembler hands these over in trace.raw. */
	EVBUF_CUPTI = 75,
	/* the Python bridge (src/capture/python/python.c), the flight recorder only:
	 * one Python stack snapshot, so that a salvage has it (a live dump
	 * takes the bridge's own stores). Payload: the frames, innermost
	 * first, '\n'-separated, cut at a frame to EVBUF_NAME_MAX bytes;
	 * ts = the snapshot's time; id = the snapshot's thread (kernel tid;
	 * the appending thread takes them for every thread); a = 0. The
	 * assembler skips them. */
	EVBUF_PYSTACK = 76,
	/* torch operators' Python call stacks (src/capture/torch/opstacks.h): one
	 * node of the tree of stacks, written once a generation before the
	 * first operator that uses it. Payload: the node's entry ("file(line):
	 * function", not NUL-ended); id = the node; a = its parent (0: none);
	 * ts = when it was written. */
	EVBUF_OPSTACK = 77,
	/* the Python bridge (src/capture/python/python.c): one nn.Module call,
	 * written once it ended, as torch's with_modules writes it: payload
	 * and fields in src/events/pymodrec.h. */
	EVBUF_PY_MODULE = 78,
	/* torch's tensor allocations and frees (src/capture/torch/torchops.c,
	 * prof.capture{profile_memory}): payload and fields in
	 * src/events/memrec.h. */
	EVBUF_TORCH_MEM = 79
};

/* Flag in `a` of EVBUF_SAMPLE / EVBUF_STACK: deeper frames were cut. */
#define EVBUF_STACK_TRUNCATED 1u

/* `a` of the range and mark records: the NVTX domain id in bits 0-23 (0 is
 * NVTX's default domain, which prof_range_push also uses), flags in bits
 * 24-31, the NVTX category in bits 32-63 (0 = none). */
#define EVBUF_A_EARLY 0x01u /* The range began before the window: on a
			     * POP/END, this generation did not record its
			     * PUSH/START; on a PUSH, it was open when the
			     * window began (ts: when that was noticed). POP
			     * and PUSH then carry the range's name when the
			     * shim knew it, else no name. */
#define EVBUF_A_PYTHON 0x02u /* On a START: the range is a Python call
			      * (an nn.Module call), written as a
			      * python_function event, not a user_annotation */
#define EVBUF_A_PHASE 0x04u /* On a START: a step phase the Python bridge
			     * timed itself (forward, backward, ...), which
			     * gives way to a range of the program's of the
			     * same name (assemble_phases_yield) */

static inline uint64_t evbuf_nvtx_a(uint32_t domain, uint32_t category,
				    uint32_t flags)
{
	return (uint64_t)category << 32 | (uint64_t)(flags & 0xff) << 24 |
	       (domain & 0xffffff);
}

static inline uint32_t evbuf_a_domain(uint64_t a) { return (uint32_t)(a & 0xffffff); }
static inline uint32_t evbuf_a_flags(uint64_t a) { return (uint32_t)(a >> 24) & 0xff; }
static inline uint32_t evbuf_a_category(uint64_t a) { return (uint32_t)(a >> 32); }

/* One record. 8-byte aligned; `size` covers header and payload, rounded up
 * to a multiple of 8. The payload is `len` bytes (a name, not NUL-ended). */
struct evbuf_rec {
	uint16_t kind;
	uint16_t size;
	uint32_t len;
	int64_t ts;  /* clock_now_ns() */
	uint64_t id; /* kind-specific */
	uint64_t a;  /* kind-specific */
	/* payload follows */
};

#define EVBUF_NAME_MAX 4096           /* longer names are cut */
#define EVBUF_CHUNK_BYTES (64 * 1024) /* chunk size, header included */

/* Pointer to a record's payload. */
static inline const char *evbuf_payload(const struct evbuf_rec *r)
{
	return (const char *)(r + 1);
}

/* True for a record that ends what another began (a pop, a range's end).
 * Counts of dropped records leave these out, as a full pool drops the pop
 * of a push it dropped without counting it: they count events. */
static inline int evbuf_rec_ends(uint16_t kind)
{
	return kind == EVBUF_RANGE_POP || kind == EVBUF_RANGE_END;
}

/*
 * In the chunks, a record whose `id` is 0 and whose `a` fits in 32 bits
 * (most NVTX records: no GPU link, no category) is stored *compact*: a
 * 16-byte header, struct evbuf_crec, instead of 32. The drain hands every
 * visitor a full struct evbuf_rec either way (id 0, `size` as for a full
 * record), so the layout in the chunks is no visitor's business: the walk
 * the drain and the salvage reader share (evchunk.h) expands it.
 */
#define EVBUF_COMPACT 0x8000u /* in the stored kind: a struct evbuf_crec
			       * (record kinds stay below it) */

struct evbuf_crec {
	uint16_t kind;  /* the record's kind | EVBUF_COMPACT */
	uint16_t len;   /* payload bytes (<= EVBUF_NAME_MAX) */
	uint32_t a;     /* the record's `a` (its high 32 bits are 0) */
	int64_t ts;
	/* payload follows */
};

/* A chunk's header: written by one thread only; `used` publishes its
 * records (release). */
struct evbuf_chunk {
	int32_t tid;
	_Atomic uint32_t used;  /* bytes of records published */
	char thread_name[16];
	uint64_t pad;           /* keeps the data 8-aligned at offset 32 */
};

#define EVBUF_CHUNK_DATA (EVBUF_CHUNK_BYTES - sizeof(struct evbuf_chunk))

/* ---- What a drain of these records hands its consumer: the shim's
 * evbuf_drain (src/shim/evbuf.h) and the salvage reader's, of a salvage
 * file (src/salvage/salvage_read.c) ---- */

/* Called for each record of a drained generation, in append order per
 * thread; `tid` is the writer's kernel thread id and `thread_name` its name
 * when the thread first wrote in this generation. */
typedef void (*evbuf_visit_fn)(void *ctx, int32_t tid, const char *thread_name,
			       const struct evbuf_rec *rec);

/* Counters of one generation, read after it closed. */
struct evbuf_stats {
	uint64_t records;        /* records appended */
	int pool_errno;          /* nonzero: the generation's pool could not
				    be mapped (its records were dropped as
				    dropped_noslot); the mmap error */
	uint64_t dropped_full;   /* records dropped: pool exhausted */
	uint64_t dropped_noslot; /* records dropped: no free slot (host behind) */
	uint64_t bytes;          /* bytes used in chunks */
	uint32_t chunks;         /* chunks used */
	uint32_t threads;        /* distinct threads that appended */
	/* The drain's cut (evbuf_drain), for a consumer that bounds what it
	 * builds from the records: `pool_bytes` (the generation's chunks in
	 * use) and `pos` (where the chunk being visited begins) are set by
	 * the drain; `keep_bytes` may be set by the visitor at any record,
	 * and lowered again but never raised: the drain then visits no chunk
	 * that begins at or past it. Those chunks' records that begin an
	 * event (not evbuf_rec_ends) are counted in `dropped_cut`, and their
	 * pages handed back at once, not as the drain reaches them.
	 * 0: keep all. */
	uint64_t pool_bytes;
	uint64_t pos;
	uint64_t keep_bytes;
	uint64_t dropped_cut;
};

#endif

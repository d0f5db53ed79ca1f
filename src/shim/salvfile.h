/*
 * salvfile — the layout of a process's salvage file: the shared file
 * mapping that backs its event pools, so that a launcher (`prof run`) or
 * `prof salvage` can still read what a process recorded after it died of
 * SIGKILL or ended in _exit() (docs/recorder.md, docs/architecture.md).
 *
 * One file per process, on a tmpfs (PROF_SALVAGE_DIR, else /dev/shm):
 *
 *   [0, SALV_HEADER_BYTES)   struct salv_header: who wrote it, the slots'
 *                            regions, what records (two copies of the
 *                            state), the last SALV_STEPS steps, the
 *                            modules, NVTX names and GPU names
 *   [slots[i].off, +bytes)   slot i's pool: EVBUF_CHUNK_BYTES chunks as in
 *                            memory (struct evbuf_chunk, its records)
 *
 * Who writes what. The shim (src/shim/evbuf.c) creates the file and
 * writes magic, version, pid, chunk size and the slot table (evbuf_open,
 * evbuf_release, on the caller of open/close or the host thread); the
 * core (src/host/salvage.c) writes the identity once at start-up and, under
 * its window lock, the state and the steps; the GPU names under its own
 * lock (salvage_gpu_name, from CUPTI's thread).
 *
 * The torn-record rule: nothing a reader trusts is published before its
 * data. A chunk's records are published by its `used` word (release
 * store, after the record); a record past `used` was being written when
 * the process died and is dropped (counted when its first word is not
 * zero: the pool's pages start zeroed). A step is published by `nsteps`
 * (release, after the entry). The state is written into the copy that is
 * not current, then `state_cur` names it (release): a reader always finds
 * one whole copy. The identity is valid once `ident_ok` is 1.
 *
 * Liveness: the process holds flock(LOCK_EX) on the file for its life; a
 * reader that can take the lock knows the writer is gone.
 */
#ifndef PROFHOST_SALVFILE_H
#define PROFHOST_SALVFILE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define SALV_MAGIC "PHSALVG\n"      /* 8 bytes, no NUL */
#define SALV_VERSION 4             /* 2: sampling, modules, NVTX names;
				      3: GPU names, the sampler's signal,
				      a 1 MiB header; 4: the interpreter's
				      eval function */
#define SALV_SLOTS 4                /* EVBUF_SLOTS */
#define SALV_GENS 4                 /* generations a state names */
#define SALV_STEPS 4096             /* the last steps kept */
#define SALV_HEADER_BYTES ((uint64_t)1 << 20)
#define SALV_MODULES 1024           /* loaded modules kept for naming stacks */
#define SALV_MOD_PATHS (96 << 10)   /* bytes for their paths */
#define SALV_BUILD_ID_MAX 32
#define SALV_NAMES_BYTES (32 << 10) /* NVTX domain and category names */
#define SALV_GPU_BYTES (512 << 10)  /* kernel, CUDA API and device names */
#define SALV_GPU_NAME_MAX 4096      /* a longer name is cut */
#define SALV_ALIGN ((uint64_t)2 << 20) /* slot regions start on huge pages */

/* What a process was recording. */
enum salv_kind {
	SALV_NONE = 0,
	SALV_WINDOW = 1,   /* a window: gens[0] */
	SALV_RECORDER = 2  /* the flight recorder: its segments, oldest first */
};

/* Export settings of the policy (struct export_opts). */
enum salv_flags {
	SALV_F_CHROME = 1,
	SALV_F_GZIP = 2,
	SALV_F_KEY_AVERAGES = 4,
	SALV_F_SUMMARY = 8,
	SALV_F_RAW = 16,
	SALV_F_STACKS = 32,
	SALV_F_REPORT_TEXT = 64,
	SALV_F_REPORT_HTML = 128,
	SALV_F_MEMORY_TIMELINE = 256, /* older files lack it: no timeline */
	SALV_F_JOB = 512    /* prof.recorder{ job = true }: a salvaged
			       recorder is a dump the job's other ranks
			       answer (docs/jobs.md) */
};

/* One pool slot: where its chunks lie in the file, and which generation
 * they hold (0: none). A generation with `off` and `bytes` both 0 has its
 * pool in anonymous memory, kept out of the file (its tmpfs had less room
 * free than the pool when the slot was mapped): its records die with the
 * process. */
struct salv_slot {
	_Atomic uint64_t gen;
	uint64_t off;              /* file offset of the region */
	uint64_t bytes;            /* the generation's chunks, in bytes */
};

/* True when slot s names a generation whose pool was kept out of the file
 * (see struct salv_slot). The caller read s->gen (acquire) first. */
static inline bool salv_slot_kept_out(const struct salv_slot *s)
{
	return s->off == 0 && s->bytes == 0;
}

/* True when generation `gen`'s pool was kept out of the file: its slot in
 * slots[SALV_SLOTS] still names it (a later generation may have taken the
 * slot since) and is kept out. */
static inline bool salv_gen_kept_out(const struct salv_slot *slots, uint64_t gen)
{
	const struct salv_slot *s = &slots[gen % SALV_SLOTS];

	return gen && atomic_load_explicit(&s->gen, memory_order_acquire) == gen &&
	       salv_slot_kept_out(s);
}

/* One copy of the recording state. */
struct salv_state {
	uint32_t kind;             /* enum salv_kind */
	uint32_t index;            /* the window's index, or the dump number a
				      recorder salvage takes */
	uint64_t first_step;       /* the window's (segments') first step */
	int64_t start_ts;          /* when it opened (clock_now_ns) */
	int64_t base_time_ns;      /* Unix time of the clock's zero */
	uint32_t ngens, pad;
	uint64_t gens[SALV_GENS];
	/* CPU samples (prof.capture{cpu_samples}) of the recording; hz 0:
	 * none */
	uint32_t hz, depth;
	uint32_t wall_clock, pad2;
	char reason[128];
};

/* One completed step. */
struct salv_step {
	uint64_t step;
	int64_t ts, dur;
	int32_t tid;
	uint32_t pad;
};

/* One loaded module (a dl_iterate_phdr entry), so that a reader can name
 * the addresses of CPU stacks from its file on disk: the file must still
 * be the one the process loaded (the same build-id, else the same device,
 * inode, size and modification time). */
struct salv_module {
	uint64_t lo, hi;           /* its loaded segments' extent */
	uint64_t bias;             /* load bias (dlpi_addr) */
	uint64_t dev, ino, size;   /* stat() of the path when it was seen; */
	int64_t mtime_ns;          /* ino 0: it had none (the vDSO) */
	uint32_t path_off;         /* in mod_paths */
	uint16_t path_len;
	uint8_t build_id_len;      /* 0: none */
	uint8_t pad;
	uint8_t build_id[SALV_BUILD_ID_MAX];
};

/* One NVTX name in names[]: the record, then `len` bytes of text (no
 * NUL), the whole padded to 4 bytes. A later record for the same domain
 * (and category) renames it. */
enum salv_name_kind {
	SALV_NAME_DOMAIN = 1,
	SALV_NAME_CATEGORY = 2
};

struct salv_name {
	uint32_t domain, category;
	uint16_t len;
	uint8_t kind;              /* enum salv_name_kind */
	uint8_t pad;
};

/* One GPU name in gpu[]: the record, then `len` bytes (no NUL), the
 * whole padded to 8 bytes. The flight recorder's raw CUPTI records
 * (EVBUF_CUPTI) name kernels and devices by pointers into the process's
 * libcupti and API calls by callback id, which only that process can
 * resolve: the core writes each name here the first time a record that
 * uses it is copied into the ring. A later record for the same key
 * renames it. */
enum salv_gpu_kind {
	SALV_GPU_KERNEL = 1,   /* key: the record's name pointer; bytes: the name */
	SALV_GPU_API = 2,      /* key: driver << 32 | cbid; bytes: CUPTI's name */
	SALV_GPU_DEVICE = 3    /* key: the device id; bytes: the DEVICE record
				  as CUPTI wrote it (`dlen` bytes, its name
				  pointer stale), then the device's name */
};

struct salv_gpu_name {
	uint64_t key;
	uint32_t len;              /* bytes after the record */
	uint16_t dlen;             /* SALV_GPU_DEVICE: the record's bytes */
	uint8_t kind;              /* enum salv_gpu_kind */
	uint8_t pad;
};

struct salv_header {
	char magic[8];
	uint32_t version;
	uint32_t header_bytes;     /* SALV_HEADER_BYTES */
	int32_t pid;
	uint32_t chunk_bytes;      /* EVBUF_CHUNK_BYTES */
	struct salv_slot slots[SALV_SLOTS];
	/* identity, written once by the core */
	_Atomic uint32_t ident_ok;
	int32_t rank, world_size;
	uint32_t flags;            /* enum salv_flags */
	char program[256];
	char hostname[256];
	char run_dir[4096];
	char run_id[300];
	/* the recording state */
	_Atomic uint32_t state_cur;
	uint32_t pad;
	struct salv_state state[2];
	/* steps [nsteps - SALV_STEPS, nsteps) are in steps[i % SALV_STEPS] */
	_Atomic uint64_t nsteps;
	struct salv_step steps[SALV_STEPS];
	/* modules [0, nmods) are whole (written by the sampler thread when
	 * the loader's module list changed; append-only) */
	_Atomic uint32_t nmods;
	uint32_t mods_lost;        /* modules that did not fit */
	uint32_t paths_used;       /* bytes of mod_paths used */
	uint32_t pad2;
	struct salv_module mods[SALV_MODULES];
	char mod_paths[SALV_MOD_PATHS];
	/* NVTX names: records in names[0, names_used) are whole (written
	 * under the shim's NVTX name lock when registered; append-only) */
	_Atomic uint32_t names_used;
	uint32_t names_lost;       /* names that did not fit */
	char names[SALV_NAMES_BYTES];
	/* GPU names: records in gpu[0, gpu_used) are whole (written by the
	 * core on CUPTI's thread, under its own lock; append-only) */
	_Atomic uint32_t gpu_used;
	uint32_t gpu_lost;         /* names that did not fit */
	char gpu[SALV_GPU_BYTES];
	/* the signal the CPU sampler samples with now (0: none), written
	 * by the core whenever it changes */
	_Atomic int32_t sample_signal;
	uint32_t pad3;
	/* the Python interpreter's frame-evaluation code [lo, hi) in the
	 * process (0, 0: none), written by the core when the Python bridge
	 * found it: a salvage puts the EVBUF_PYSTACK snapshots into the CPU
	 * samples' stacks there, as a window's collect does */
	_Atomic uint64_t py_eval_lo;
	_Atomic uint64_t py_eval_hi;
};

_Static_assert(sizeof(struct salv_header) <= SALV_HEADER_BYTES,
	       "salv_header outgrew its region");

/* The GNU build-id in the ELF notes at notes[0, len) (a PT_NOTE segment)
 * into out[SALV_BUILD_ID_MAX]; returns its length, 0 when there is none.
 * Reads only inside the given bytes. */
static inline uint32_t salv_note_build_id(const unsigned char *notes, uint64_t len,
					  uint8_t *out)
{
	uint64_t off = 0;

	while (len >= 12 && off <= len - 12) {
		uint32_t nsz, dsz, type;
		uint64_t name, desc, next;

		__builtin_memcpy(&nsz, notes + off, 4);
		__builtin_memcpy(&dsz, notes + off + 4, 4);
		__builtin_memcpy(&type, notes + off + 8, 4);
		name = off + 12;
		desc = name + (((uint64_t)nsz + 3) & ~(uint64_t)3);
		next = desc + (((uint64_t)dsz + 3) & ~(uint64_t)3);
		if (desc > len || next > len)
			return 0;
		if (type == 3 /* NT_GNU_BUILD_ID */ && nsz == 4 &&
		    __builtin_memcmp(notes + name, "GNU", 4) == 0 && dsz > 0 &&
		    dsz <= SALV_BUILD_ID_MAX) {
			__builtin_memcpy(out, notes + desc, dsz);
			return dsz;
		}
		off = next;
	}
	return 0;
}

#endif

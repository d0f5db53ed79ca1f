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
 *                            state), the last SALV_STEPS steps
 *   [slots[i].off, +bytes)   slot i's pool: EVBUF_CHUNK_BYTES chunks as in
 *                            memory (struct evbuf_chunk, its records)
 *
 * Who writes what. The shim (src/shim/evbuf.c) creates the file and
 * writes magic, version, pid, chunk size and the slot table (evbuf_open,
 * evbuf_release, on the caller of open/close or the host thread); the
 * core (src/host/salvage.c) writes the identity once at start-up and, under
 * its window lock, the state and the steps.
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
#include <stdint.h>

#define SALV_MAGIC "PHSALVG\n"      /* 8 bytes, no NUL */
#define SALV_VERSION 1
#define SALV_SLOTS 4                /* EVBUF_SLOTS */
#define SALV_GENS 4                 /* generations a state names */
#define SALV_STEPS 4096             /* the last steps kept */
#define SALV_HEADER_BYTES ((uint64_t)256 << 10)
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
	SALV_F_REPORT_HTML = 128
};

/* One pool slot: where its chunks lie in the file, and which generation
 * they hold (0: none). */
struct salv_slot {
	_Atomic uint64_t gen;
	uint64_t off;              /* file offset of the region */
	uint64_t bytes;            /* the generation's chunks, in bytes */
};

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
	char reason[128];
};

/* One completed step. */
struct salv_step {
	uint64_t step;
	int64_t ts, dur;
	int32_t tid;
	uint32_t pad;
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
};

_Static_assert(sizeof(struct salv_header) <= SALV_HEADER_BYTES,
	       "salv_header outgrew its region");

#endif

/*
 * trace — the drained trace model of one capture window.
 *
 * After a window closes, the host thread turns the raw per-thread records
 * (evbuf), and later GPU activity records and CPU samples, into one struct
 * trace: a flat array of events with interned names and typed arguments,
 * plus the window's steps, threads and counters. Every writer (Chrome trace,
 * tables, summary, reports) reads this model and nothing else.
 *
 * Ownership: a struct trace owns all its memory; trace_free() releases it.
 * Not thread-safe: one thread builds it, then readers may share it read-only.
 * Allocation failures are sticky: the trace_add_* functions return -1 and
 * set t->oom, and the trace stays valid (what was added so far).
 */
#ifndef PROFHOST_TRACE_H
#define PROFHOST_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "strtab.h"

/* Event categories: Kineto's names, so viewers and HTA recognize them. */
enum trace_cat {
	TRACE_CAT_USER_ANNOTATION = 0, /* ranges, ProfilerStep#N */
	TRACE_CAT_CPU_OP,
	TRACE_CAT_GPU_USER_ANNOTATION,
	TRACE_CAT_KERNEL,
	TRACE_CAT_GPU_MEMCPY,
	TRACE_CAT_GPU_MEMSET,
	TRACE_CAT_CUDA_RUNTIME,
	TRACE_CAT_CUDA_DRIVER,
	TRACE_CAT_CUDA_SYNC,
	TRACE_CAT_AC2G,   /* flow: launch -> kernel */
	TRACE_CAT_MARK,   /* instant events */
	TRACE_CAT_SAMPLE, /* CPU samples */
	TRACE_CAT_GPU_MEMORY, /* CUDA allocations and frees (instants) */
	TRACE_CAT_OVERHEAD,   /* CUPTI's own overhead */
	TRACE_CAT_COUNT
};

/* Kineto's category string for `cat` ("user_annotation", "kernel", ...). */
const char *trace_cat_name(enum trace_cat cat);

/* Event flags. */
enum {
	TRACE_F_CLIPPED_START = 1, /* began before the window: ts = window start */
	TRACE_F_CLIPPED_END = 2,   /* still open at window end: ends there */
	TRACE_F_STEP = 4,          /* a ProfilerStep#N span */
	TRACE_F_PARTIAL = 8        /* step cut short by process exit */
};

/* Trace Event Format phases used. */
enum trace_ph {
	TRACE_PH_COMPLETE = 'X', /* ts + dur */
	TRACE_PH_INSTANT = 'i',
	TRACE_PH_FLOW_START = 's',
	TRACE_PH_FLOW_END = 'f'
};

/* Argument value types. */
enum trace_arg_type { TRACE_ARG_INT, TRACE_ARG_UINT, TRACE_ARG_DOUBLE, TRACE_ARG_STR,
		      TRACE_ARG_RAW /* v.str is JSON written as is, e.g. [1,1,1] */ };

/* One named argument; `key` and `v.str` are strtab ids. */
struct trace_arg {
	uint32_t key;
	uint32_t type; /* enum trace_arg_type */
	union {
		int64_t i;
		uint64_t u;
		double d;
		uint32_t str;
	} v;
};

/* One event. Times are clock_now_ns() values (CLOCK_MONOTONIC ns). */
struct trace_event {
	int64_t ts;        /* start */
	int64_t dur;       /* duration in ns; 0 for instants and flows */
	uint64_t id;       /* correlation / flow id; 0 if none */
	int32_t pid;       /* process id, or the GPU device's track id */
	int32_t tid;       /* thread id, or the GPU stream's track id */
	uint32_t name;     /* strtab id */
	uint32_t args;     /* index of the first arg in trace.args */
	uint16_t nargs;    /* number of args */
	uint8_t cat;       /* enum trace_cat */
	uint8_t ph;        /* enum trace_ph */
	uint32_t flags;    /* TRACE_F_* */
};

/* One captured step of the window (ProfilerStep#N). */
struct trace_step {
	uint64_t step;
	int64_t ts, dur;
	int32_t tid;   /* the thread that called prof_step() */
	int partial;   /* cut short by exit */
};

/* A thread seen in the window. */
struct trace_thread {
	int32_t pid, tid;
	uint32_t name; /* strtab id */
};

/* A process-level track other than the profiled process: a GPU, shown as
 * pid = device id (Kineto's layout). */
struct trace_process {
	int32_t pid;
	uint32_t name;   /* strtab id */
	int32_t sort;    /* process_sort_index */
};

/* A GPU's properties, for the trace's deviceProperties (Kineto's keys). */
struct trace_device {
	int32_t id;
	char *name;                 /* owned by the trace */
	uint64_t total_global_mem;  /* bytes */
	int32_t compute_major, compute_minor;
	int32_t max_threads_per_block, max_threads_per_sm;
	int32_t regs_per_block, regs_per_sm;
	int32_t warp_size;
	int32_t shared_mem_per_block, shared_mem_per_sm;
	int32_t num_sms;
};

/* Counters that end up in the metadata and the summary. */
struct trace_counters {
	uint64_t events;            /* events in the trace */
	uint64_t dropped_buffer;    /* records dropped: buffers full */
	uint64_t dropped_noslot;    /* records dropped: host thread behind */
	uint64_t unbalanced_pops;   /* pops with no open range */
	uint64_t clipped;           /* ranges clipped at a window edge */
	uint64_t gpu_dropped;       /* GPU records dropped (CUPTI) */
};

/* Window metadata. Strings are owned by the trace (malloc'd). */
struct trace_meta {
	int rank, world_size;
	uint32_t window;           /* window index in the run, from 0 */
	uint64_t first_step, last_step;
	int64_t start_ts, end_ts;  /* window edges (clock_now_ns) */
	int64_t base_time_ns;      /* epoch ns of clock value 0 */
	int32_t pid;
	char *program;             /* argv[0]'s basename */
	char *hostname;
	char *run;                 /* run name */
	char *reason;              /* "schedule" or the capture_now reason */
	char *notes;               /* one-time notices for the summary, one
				      per line, each '\n'-ended; NULL = none */
};

struct trace {
	struct strtab names;
	struct trace_event *ev;
	size_t nev, cap_ev;
	struct trace_arg *args;
	size_t nargs, cap_args;
	struct trace_step *steps;
	size_t nsteps, cap_steps;
	struct trace_thread *threads;
	size_t nthreads, cap_threads;
	struct trace_process *procs;
	size_t nprocs, cap_procs;
	struct trace_device *devices;
	size_t ndevices, cap_devices;
	struct trace_meta meta;
	struct trace_counters counters;
	int oom;
};

/* Initializes an empty trace. Returns 0, or -1 on allocation failure. */
int trace_init(struct trace *t);

/* Frees everything the trace owns; leaves it empty. NULL-safe. */
void trace_free(struct trace *t);

/* Interns `len` bytes (need not be NUL-ended); returns the id or
 * STRTAB_NONE on allocation failure. */
uint32_t trace_intern(struct trace *t, const char *s, size_t len);

/* Appends an event (copied) and returns a pointer to the stored one, valid
 * until the next trace_add_event(); NULL on allocation failure. */
struct trace_event *trace_add_event(struct trace *t, const struct trace_event *e);

/* Attaches an argument to the most recently added event (its args must be
 * added before the next event). Return 0 or -1. */
int trace_arg_int(struct trace *t, const char *key, int64_t v);
int trace_arg_uint(struct trace *t, const char *key, uint64_t v);
int trace_arg_double(struct trace *t, const char *key, double v);
int trace_arg_str(struct trace *t, const char *key, const char *s, size_t len);

/* Appends a line (no '\n' in it) to meta.notes, once: a line already
 * there is not added again. Returns 0 or -1. */
int trace_add_note(struct trace *t, const char *line);

/* Records a captured step. Returns 0 or -1. */
int trace_add_step(struct trace *t, const struct trace_step *s);

/* Records a thread's name (the last call for a tid wins). 0 or -1. */
int trace_add_thread(struct trace *t, int32_t pid, int32_t tid, const char *name);

/* Attaches a ready argument (key, type and value ids already interned with
 * trace_intern) to the most recent event: the fast path for converters of
 * many events. Returns 0 or -1. */
int trace_arg_add(struct trace *t, const struct trace_arg *a);

/* As trace_arg_add for n arguments at once. Returns 0 or -1 (none added). */
int trace_args_add(struct trace *t, const struct trace_arg *a, size_t n);

/* Attaches a raw JSON argument (written unquoted; the caller guarantees it
 * is valid JSON, e.g. "[128,1,1]") to the most recent event. 0 or -1. */
int trace_arg_raw(struct trace *t, const char *key, const char *json);

/* Names process-level track `pid` (the last call for a pid wins). 0 or -1. */
int trace_add_process(struct trace *t, int32_t pid, const char *name, int32_t sort);

/* Adds a device's properties (copied; a later call for the same id
 * replaces it). 0 or -1. */
int trace_add_device(struct trace *t, const struct trace_device *d);

/* Sorts events by (pid, tid, ts, longer first): nesting order per thread. */
void trace_sort(struct trace *t);

/* Name string of event field ids. */
static inline const char *trace_str(const struct trace *t, uint32_t id)
{
	return strtab_get(&t->names, id);
}

#endif

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

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strtab.h"
#include "trace_keys.h" /* TRACE_ARG_STACK and the other shared keys */

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
	TRACE_CAT_PYTHON_FUNCTION, /* Python calls: nn.Module calls (the bridge) */
	TRACE_CAT_CPU_INSTANT, /* torch's tensor allocations and frees
				  ("[memory]" instants, profile_memory) */
	TRACE_CAT_COUNT
};

/* Kineto's category string for `cat` ("user_annotation", "kernel", ...). */
const char *trace_cat_name(enum trace_cat cat);

/* Event flags. */
enum {
	TRACE_F_CLIPPED_START = 1, /* began before the window: ts = window start */
	TRACE_F_CLIPPED_END = 2,   /* still open at window end: ends there */
	TRACE_F_STEP = 4,          /* a ProfilerStep#N span */
	TRACE_F_PARTIAL = 8,       /* step cut short by process exit */
	TRACE_F_ALL = 15           /* every flag: what a reader keeps of a
				      file's (trace_event.flags has 4 bits) */
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

/* One event, 40 bytes: a full window's trace holds millions of them, as
 * many as its pool of records held ranges (docs/architecture.md, "A
 * window's memory"). Times are ns: clock_now_ns() values (CLOCK_MONOTONIC)
 * as captured, since a Unix-time base once the host has called
 * export_unix_time() (see trace_meta: base_time_ns, monotonic_offset_ns). */
struct trace_event {
	int64_t ts;        /* start */
	int64_t dur;       /* duration in ns; 0 for instants and flows */
	int32_t pid;       /* process id, or the GPU device's track id */
	int32_t tid;       /* thread id, or the GPU stream's track id */
	uint32_t name;     /* strtab id */
	uint32_t args;     /* index of the first arg in trace.args */
	uint32_t id;       /* correlation / flow / external id; 0 if none:
			      CUPTI's correlation ids are 32 bits, and
			      profhost's external ids wrap at 2^32
			      (trace_ext_id) */
	uint16_t nargs;    /* number of args */
	uint8_t ph;        /* enum trace_ph */
	uint8_t cat : 4;   /* enum trace_cat */
	uint8_t flags : 4; /* TRACE_F_* */
};

_Static_assert(TRACE_CAT_COUNT <= 16, "trace_event.cat has 4 bits");
_Static_assert(sizeof(struct trace_event) == 40, "trace_event grew");

/* The external id following `n` (a counter's value), 32 bits and never 0:
 * what profhost pushes to CUPTI and keeps in trace_event.id. */
static inline uint32_t trace_ext_id(uint64_t n)
{
	uint32_t id = (uint32_t)n;

	return id ? id : 1;
}

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
	uint64_t dropped_buffer;    /* records dropped: buffers full, or the
				       trace built from them would have
				       outgrown buffer_mb (dropped_memory) */
	uint64_t dropped_noslot;    /* records dropped: host thread behind */
	uint64_t unbalanced_pops;   /* pops with no open range */
	uint64_t clipped;           /* ranges clipped at a window edge */
	uint64_t gpu_dropped;       /* GPU records dropped (CUPTI) */
	uint64_t dropped_steps;     /* steps past the window's step budget */
	uint64_t windows_skipped;   /* earlier windows not written: the host
				       thread's queue was full */
	uint64_t pool_errno;        /* nonzero: the window's event pool could
				       not be mapped (the mmap errno) and
				       dropped_noslot counts what that lost;
				       in process only, not in capture.phb */
	uint64_t dropped_memory;    /* of dropped_buffer, those the trace had
				       no room for (assemble_source.budget);
				       in process and trace.json only */
};

/* Window metadata. Strings are owned by the trace (malloc'd). */
struct trace_meta {
	int rank, world_size;
	uint32_t window;           /* window index in the run, from 0 */
	uint64_t first_step, last_step;
	int64_t start_ts, end_ts;  /* window edges */
	int64_t base_time_ns;      /* Unix time (ns) of ts 0 */
	int64_t monotonic_offset_ns; /* ts + this = the clock_now_ns() value
				      the event was recorded at: 0 until
				      export_unix_time() moves the ts */
	int32_t pid;
	char *program;             /* argv[0]'s basename */
	char *hostname;
	char *run;                 /* run name */
	char *reason;              /* "schedule" or the capture_now reason */
	double peak_tflops;        /* prof.capture{peak_tflops}: the GPU's
				      peak for the summary's FLOP/s share;
				      0 = from the table of known GPUs */
	bool recorder;             /* a flight recorder dump (`window` is
				      the dump's number): its folder is
				      recorder<K>_steps<a>-<b> */
	char *notes;               /* one-time notices for the summary, one
				      per line, each '\n'-ended; NULL = none */
	char *suffix;              /* NULL, or a job-wide window's or dump's
				      mark on its folder's name ("job",
				      "by-rank5": <name>_<suffix>); not in
				      capture.phb */
};

/* ---- CPU stacks (filled from the sampler's records; see docs/stacks.md)
 *
 * Every stack of the window, over a shared table of frames. Timer samples
 * also become events (cat cpu_sample, instants named after the innermost
 * function, with args "stack" = the folded stack, outermost first, and
 * "weight" = timer periods) once the sampler's collect has named them:
 * writers and reports that only read events see them there. */

/* What a stack was taken for. */
enum trace_stack_kind {
	TRACE_STACK_SAMPLE = 0, /* a timer sample of the thread */
	TRACE_STACK_RANGE = 1,  /* a range push: attached to that range's event */
	TRACE_STACK_CUDA = 2    /* a slow CUDA API call: id = its correlation id */
};

/* trace_stack.flags */
enum { TRACE_STACK_TRUNCATED = 1 }; /* deeper (outer) frames were cut */

/* One distinct code address of the window's stacks. */
struct trace_frame {
	uint64_t pc;     /* inside the function: the interrupted instruction,
			    or a return address minus one */
	uint32_t name;   /* strtab id of the function, STRTAB_NONE until the
			    stacks are symbolized */
	uint32_t module; /* strtab id of the module's file name, or STRTAB_NONE */
};

/* One stack. Its frames are trace.frames[trace.stack_frames[first + i]] for
 * i in [0, depth), innermost first. */
struct trace_stack {
	int64_t ts;
	uint64_t id;     /* kind-specific (see trace_stack_kind) */
	int32_t tid;
	uint32_t first;  /* index into trace.stack_frames */
	uint32_t weight; /* samples: timer periods it stands for (1 + overruns) */
	uint32_t folded; /* strtab id of "outer;...;inner" once symbolized,
			    else STRTAB_NONE */
	uint16_t depth;
	uint8_t kind;    /* enum trace_stack_kind */
	uint8_t flags;   /* TRACE_STACK_* */
};

/* How the window's threads were sampled; all zero when they were not. */
struct trace_sampling {
	uint32_t hz;        /* requested samples per second and thread */
	uint32_t depth;     /* most frames kept per stack */
	int64_t period_ns;  /* timer period: 1e9 / hz */
	int wall_clock;     /* 1: wall-clock timers, 0: CPU-time timers */
	int signal;         /* the signal the samples came with */
	uint64_t lost;      /* samples taken but not recorded (buffers) */
	uint64_t slow;      /* samples unwound step by step, the thread not
			       yet known safe for the fast unwinder */
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
	bool nested;                  /* the events are in nesting order
				       * (trace_sort); adding one clears it */
	/* CPU stacks (trace_add_stack) */
	struct trace_frame *frames;
	size_t nframes, cap_frames;
	uint32_t *frame_slots;        /* pc hash: frame index + 1, 0 = empty */
	size_t nframe_slots;          /* power of two, or 0 */
	uint32_t *stack_frames;       /* frame indexes of every stack */
	size_t nstack_frames, cap_stack_frames;
	struct trace_stack *stacks;
	size_t nstacks, cap_stacks;
	struct trace_sampling sampling;
	/* Records of capture sources the assembler hands over as they are
	 * (trace_add_raw): struct trace_raw headers, each followed by its
	 * payload rounded up to 8 bytes. The flight recorder's CUPTI records
	 * (EVBUF_CUPTI), which the CUPTI source converts in a dump's collect.
	 * The host frees them once the sources collected. */
	uint8_t *raw;
	size_t nraw, cap_raw;         /* bytes used, allocated */
	/* Indices in `ev` of the step phase ranges the Python bridge timed
	 * itself (EVBUF_A_PHASE), which give way to the program's ranges of
	 * the same name (assemble_phases_yield); valid while events are only
	 * appended: trace_sort() empties the list. */
	uint32_t *own_phases;
	size_t nown_phases, cap_own_phases;
};

/* One record in trace.raw. The payload follows, 8-aligned. */
struct trace_raw {
	uint16_t kind;                /* the evbuf record kind */
	uint16_t pad;
	uint32_t len;                 /* payload bytes */
	int64_t ts;                   /* the evbuf record's ts */
};

/* Initializes an empty trace. Returns 0, or -1 on allocation failure. */
int trace_init(struct trace *t);

/* Frees everything the trace owns; leaves it empty. NULL-safe. */
void trace_free(struct trace *t);

/* Memory the trace holds, in bytes: its events, args, names, steps,
 * threads, stacks and raw records as far as they are filled (what a
 * window's budget counts, assemble.h). O(1). */
size_t trace_bytes(const struct trace *t);

/* Interns `len` bytes (need not be NUL-ended); returns the id or
 * STRTAB_NONE on allocation failure. */
uint32_t trace_intern(struct trace *t, const char *s, size_t len);

/* Makes room for `nev` more events and `nargs` more arguments in one
 * allocation each, so a converter that knows how many it will add does not
 * grow the arrays step by step (each doubling would move the array and
 * fault in its pages again). A hint: adding more than reserved still
 * works. Returns 0, or -1 on allocation failure (t->oom is not set: the
 * arrays then grow as usual). */
int trace_reserve(struct trace *t, size_t nev, size_t nargs);

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

/* Appends a record of `kind` with payload p[0..len) to trace.raw.
 * Returns 0, or -1 when memory ran out (nothing added). */
int trace_add_raw(struct trace *t, uint16_t kind, int64_t ts, const void *p,
		  uint32_t len);

/* The raw record at byte offset *off of trace.raw, *off moved past it;
 * NULL at the end. Its payload is (const void *)(r + 1). */
const struct trace_raw *trace_raw_next(const struct trace *t, size_t *off);

/* Frees trace.raw (the sources have read it). */
void trace_raw_free(struct trace *t);

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

/* Adds a stack of `n` instruction addresses, innermost first: return
 * addresses, except ips[0] when `leaf_exact` (a sample's interrupted
 * instruction). Copies *s (its first, depth and folded are set here; depth
 * is cut at 65535) and interns each address in t->frames. Returns the
 * stack's index, or -1 (t->oom set). */
long trace_add_stack(struct trace *t, const struct trace_stack *s,
		     const uint64_t *ips, size_t n, int leaf_exact);

/* Index of the frame at `pc` (interned as is: no return-address
 * adjustment), added if new; a frame without a name yet gets `name` and
 * `module` (strtab ids), which symbolization then keeps. For frames that
 * are not machine code (Python frames, src/capture/pystacks.c). Returns -1
 * (t->oom set) on failure. */
long trace_add_frame(struct trace *t, uint64_t pc, uint32_t name, uint32_t module);

/* Makes stack `stack` consist of frames[0..n) (frame indexes, innermost
 * first, cut at 65535); its folded string is reset. Returns 0, or -1
 * (t->oom set). */
int trace_set_stack_frames(struct trace *t, size_t stack, const uint32_t *frames,
			   size_t n);

/* Writes stack `s` folded, outermost frame first, as "a;b;c" into
 * buf[size] (NUL-ended, cut if short) and returns its full length. Frames
 * not yet symbolized read "0x<pc>"; ';' in a name becomes ':' and control
 * characters '?', so the result is one field of a folded-stacks line. */
size_t trace_stack_fold(const struct trace *t, const struct trace_stack *s,
			char *buf, size_t size);

/* Attaches the TRACE_ARG_STACK placeholder for stack `stack` to the last
 * event. 0 or -1. */
int trace_arg_stack(struct trace *t, uint32_t stack);

/* Attaches a string argument to event `ev` (any event, not only the last:
 * its arguments are moved to the end of t->args first). 0 or -1. */
int trace_arg_str_at(struct trace *t, size_t ev, const char *key,
		     const char *s, size_t len);

/* Nesting order of two events: pid, tid, ts ascending, then longer first;
 * events of the same span: a step first (it holds the others), then by
 * category, name id, phase, id, flags and arguments. 0 only for events
 * that are the same in all these. Any thread. */
int trace_event_cmp(const struct trace_event *a, const struct trace_event *b);

/* trace_event_cmp of events ia and ib of the trace `ctx`, then by index: a
 * total order for sortidx_u32 (sortidx.h) over indexes of t->ev. */
int trace_event_cmp_at(uint32_t ia, uint32_t ib, void *ctx);

/* Puts the events in nesting order (trace_event_cmp's), in place: no
 * memory beyond the array (an O(n) check first: a sorted trace is left
 * as it is), and sets t->nested. Arguments follow their events (they are
 * referenced by index). A window's trace is sorted once it is complete,
 * before its files are written; its tables and reports then sweep the
 * events as they lie. Empties t->own_phases (its indices moved). Never
 * fails. */
void trace_sort(struct trace *t);

/* Name string of event field ids. */
static inline const char *trace_str(const struct trace *t, uint32_t id)
{
	return strtab_get(&t->names, id);
}

#endif

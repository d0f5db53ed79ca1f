/*
 * cupti_internal — what the CUPTI capture's files share. The capture
 * source, a file per job:
 *   cupti.c            the lifecycle: start (subscribe, register) and
 *                      stop (finalize), the window and recorder segment
 *                      callbacks, the outcomes that stop GPU capture, the
 *                      buffer-completed callback, the source's descriptor;
 *                      it calls the files below, which never call it;
 *   cupti_state.c      the state (struct cupti_state below);
 *   cupti_activity.c   CUPTI's activity mechanics only: the clock, the
 *                      pool of buffers CUPTI borrows and returns, the
 *                      kinds switched on and off, the completed buffers
 *                      read back, the records kept for a later window;
 *   cupti_callbacks.c  what runs inside the program's CUDA calls: the API
 *                      callback (steps from CUDA, slow calls' stacks,
 *                      launches tracked), the range hooks (external
 *                      correlation ids), the callbacks enabled, API names;
 *   cupti_driver.c     what the process's CUDA driver and runtime are
 *                      asked (never loaded): devices, cudaProfilerStart;
 *   cupti_window.c     a window's collect: flush, convert, records kept
 *                      for the next window;
 *   cupti_recorder.c   the flight recorder's part (capture_recorder_ops
 *                      but its segment callback): records into the ring,
 *                      a dump's collect;
 *   cupti_hang.c       kernels in flight for a hang report
 *                      (capture_hang_ops), over cupti_inflight.c's table.
 * Beside it, what `prof` links too (ph_cupti): cupti_load.c (finding and
 * opening libcupti), cupti_records.c (activity records -> trace events),
 * cupti_pattern.c (kernel-name patterns), cupti_inflight.c (launches not
 * known to have finished), cupti_names.c (GPU names in the salvage file),
 * cupti_salvage.c (the flight recorder's records in a salvage file, for
 * `prof salvage`).
 * Not a module contract: only the files of src/capture/cupti and their unit tests
 * include it. Built only with the CUDA headers (PROFHOST_HAVE_CUDA).
 */
#ifndef PROFHOST_CUPTI_INTERNAL_H
#define PROFHOST_CUPTI_INTERNAL_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cupti.h>

#include "../../events/trace.h"
#include "../../common/err.h"

/* The record structs this file is written for (CUDA 13). A libcupti whose
 * cuptiGetVersion() is older writes older structs: refused. */
#define CUPTI_MIN_API_VERSION 130000
#if CUPTI_API_VERSION < CUPTI_MIN_API_VERSION
#error "profhost's CUPTI capture needs the CUDA 13 CUPTI headers"
#endif

/* ------------------------------------------------------------ cupti_load.c */

/* The CUPTI functions the host calls, resolved with dlsym. */
struct cupti_fns {
	void *handle;
	char path[PATH_MAX];
	bool reused;           /* the process had this libcupti loaded already */
	CUptiResult (*GetVersion)(uint32_t *);
	CUptiResult (*GetResultString)(CUptiResult, const char **);
	CUptiResult (*GetCallbackName)(CUpti_CallbackDomain, uint32_t, const char **);
	CUptiResult (*Subscribe)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *);
	CUptiResult (*Unsubscribe)(CUpti_SubscriberHandle);
	CUptiResult (*EnableCallback)(uint32_t, CUpti_SubscriberHandle,
				      CUpti_CallbackDomain, CUpti_CallbackId);
	CUptiResult (*SetThreadIdType)(CUpti_ActivityThreadIdType);
	CUptiResult (*ActivityRegisterTimestampCallback)(CUpti_TimestampCallbackFunc);
	CUptiResult (*ActivityRegisterCallbacks)(CUpti_BuffersCallbackRequestFunc,
						 CUpti_BuffersCallbackCompleteFunc);
	CUptiResult (*ActivityEnable)(CUpti_ActivityKind);
	CUptiResult (*ActivityDisable)(CUpti_ActivityKind);
	CUptiResult (*ActivityFlushAll)(uint32_t);
	CUptiResult (*ActivityGetNextRecord)(uint8_t *, size_t, CUpti_Activity **);
	CUptiResult (*ActivityGetNumDroppedRecords)(CUcontext, uint32_t, size_t *);
	CUptiResult (*ActivityPushExternalCorrelationId)(CUpti_ExternalCorrelationKind,
							 uint64_t);
	CUptiResult (*ActivityPopExternalCorrelationId)(CUpti_ExternalCorrelationKind,
							uint64_t *);
	CUptiResult (*ActivityEnableLatencyTimestamps)(uint8_t); /* may be NULL */
	CUptiResult (*GetDeviceId)(CUcontext, uint32_t *);         /* may be NULL */
	CUptiResult (*GetStreamIdEx)(CUcontext, CUstream, uint8_t, uint32_t *); /* may be NULL */
	CUptiResult (*Finalize)(void);
};

/* Where to look for libcupti, in this order:
 *   1. a libcupti the process has mapped (listed in `maps`), reused;
 *   2. `env_lib` (PROF_CUPTI_LIB): only that file when set;
 *   3. `cuda_home` ($CUDA_HOME) and each of `roots`: lib64/, the
 *      extras/CUPTI/lib64/ of older toolkits, lib/;
 *   4. the nvidia/cuda_cupti (CUDA 12 layout) and nvidia/cu13 wheel
 *      directories of each site-packages found in `maps` (paths of loaded
 *      extension modules), under `virtual_env`, and in `sites`. */
struct cupti_search {
	const char *maps;              /* "/proc/self/maps" */
	const char *env_lib;           /* NULL: unset */
	const char *cuda_home;         /* NULL: unset */
	const char *const *roots;      /* NULL-ended */
	const char *virtual_env;       /* NULL: unset */
	const char *const *sites;      /* NULL-ended, may be NULL */
};

enum cupti_load_rc {
	CUPTI_LOAD_OK = 0,
	CUPTI_LOAD_NOT_FOUND = 1,  /* nothing found: *e says where it looked */
	CUPTI_LOAD_FAILED = 2      /* found but unusable: *e says why */
};

/* Finds, opens (dlopen RTLD_LOCAL, never linked) and resolves libcupti.
 * Any thread; once at a time. */
enum cupti_load_rc cupti_load(struct cupti_fns *f, const struct cupti_search *s,
			      struct err *e);

/* Closes what cupti_load opened. */
void cupti_unload(struct cupti_fns *f);

/* "CUPTI_ERROR_UNKNOWN" for rc, through f->GetResultString when it knows
 * it, else "CUPTI error <n>". Never NULL. */
const char *cupti_result_name(const struct cupti_fns *f, CUptiResult rc, char *buf,
			      size_t size);

/* ------------------------------------------------------------ cupti_records.c */

/* Which categories become trace events. */
struct cupti_show {
	bool kernels, memcpy, memset, runtime, driver, sync, memory, overhead;
};

/* Device properties from DEVICE records, kept across windows (CUPTI writes
 * them when a context is created while the kind is on), or from the
 * driver when it wrote none. Owned by the caller. */
struct cupti_devices {
	struct trace_device *dev;
	size_t n, cap;
};

/* Adds or replaces device d->id in ds from a DEVICE record (or one made
 * up from the driver's attributes). Any thread that owns ds; a failed
 * allocation leaves ds as it was. */
void cupti_devices_note(struct cupti_devices *ds, const CUpti_ActivityDevice5 *d);

/* Where a record belongs. */
enum cupti_route {
	CUPTI_ROUTE_THIS = 0,   /* this window */
	CUPTI_ROUTE_LATER = 1,  /* after this window's end: keep for the next */
	CUPTI_ROUTE_DROP = 2    /* before the window (warm-up), or no timing */
};

/* Names a runtime (driver = false) or driver API by cbid; NULL if unknown. */
typedef const char *(*cupti_api_name_fn)(void *ctx, bool driver, uint32_t cbid);

struct cupti_conv_opts {
	int64_t start, end;         /* the window's edges (clock_now_ns) */
	int64_t prev_start, prev_end; /* the window written before (0, 0: none):
				       its work arriving now is late */
	int32_t pid;                /* the process */
	struct cupti_show show;
	cupti_api_name_fn api_name;
	void *api_name_ctx;
	struct cupti_devices *devices; /* updated from DEVICE records */
	size_t corr_hint;           /* correlation ids expected (the last
				       window's map_n): the table is sized for
				       them at once; 0: grows from small */
	bool recorder;              /* the flight recorder keeps CUPTI on
				       past the window: GPU work without
				       timestamps launched after its end
				       (by its API call, or by correlation
				       id) is not counted as dropped */
};

struct cupti_corr;   /* correlation id -> what is known about it */
struct cupti_pending_mem;
struct cupti_gpu_link;

/* The conversion of one window's records. */
struct cupti_conv {
	struct trace *t;
	struct cupti_conv_opts o;
	struct cupti_corr *map;          /* open addressing on correlation id */
	size_t map_cap, map_n;
	struct cupti_pending_mem *mem;   /* MEMORY2 records, sorted at finish */
	size_t nmem, cap_mem;
	struct cupti_gpu_link *links;    /* GPU events with an external id */
	size_t nlinks, cap_links;
	const void **name_key;           /* kernel name pointer cache */
	uint32_t *name_id;
	size_t name_cap;
	uint32_t keys[24];               /* argument keys, interned once */
	struct trace_arg pend[16];       /* args of the event being added */
	size_t npend;
	uint32_t *api_ids[2];            /* cbid -> interned API name + 1 */
	uint32_t copy_ids[11][8][8];     /* memcpy names + 1 by kinds */
	uint32_t set_ids[8];             /* memset names + 1 by memory kind */
	uint32_t kind_ids[11];           /* "HtoD"... + 1 */
	uint32_t ac2g;                   /* "ac2g" */
	int32_t grid_last[3], block_last[3];
	uint32_t grid_id, block_id;      /* + 1 */
	uint64_t tracks[64];             /* (device << 32 | stream) seen */
	size_t ntracks;
	uint64_t devices_seen;           /* bit d: device d has a track */
	int32_t *api_tids;               /* threads of API events */
	size_t napi_tids, cap_api_tids;
	size_t scan_events, scan_args;   /* most events and args pass 2 can add,
					    counted by pass 1 */
	bool reserved;                   /* the trace was sized for them */
	uint32_t later_corr;             /* the lowest correlation id of an API
					    call after the window's end (0:
					    none), from pass 1 */
	/* results */
	uint64_t zero_ts;                /* records without timing: dropped */
	uint64_t late;                   /* records of the previous window that
					    came after it was written: dropped */
	uint64_t records;                /* records that became events */
	uint64_t later;                  /* records kept for the next window */
};

/* Starts converting into `t` (meta.pid set). Returns 0 or -1 (no memory). */
int cupti_conv_init(struct cupti_conv *c, struct trace *t,
		    const struct cupti_conv_opts *o);

/* Pass 1, over every record: API records decide where their correlation
 * id's work belongs; external correlation and DEVICE records are noted. */
void cupti_conv_scan(struct cupti_conv *c, const CUpti_Activity *r);

/* Pass 2, over every record again: adds the events of records that belong
 * to this window and returns where `r` belongs (LATER: the caller keeps a
 * copy for the next window). */
enum cupti_route cupti_conv_add(struct cupti_conv *c, const CUpti_Activity *r);

/* Adds what needs every record: flows (ac2g), gpu_user_annotation spans,
 * the memory events with running totals, GPU and thread names, device
 * properties. */
void cupti_conv_finish(struct cupti_conv *c);

void cupti_conv_free(struct cupti_conv *c);

/* Size in bytes of a record of this kind as CUDA 13 writes it; 0 for a
 * kind profhost does not read. */
size_t cupti_record_size(CUpti_ActivityKind kind);

/* Packed records: copies laid one after another, each padded to 8 bytes
 * (cupti.c's carry to the next window, the salvage's fixed copies). The
 * bytes a record of `kind` takes packed; 0 for a kind profhost does not
 * read. */
size_t cupti_packed_size(CUpti_ActivityKind kind);

/* The packed record of buf[0..used) at *off, *off moved past it; NULL at
 * the end or at a record of a kind profhost does not read. */
const CUpti_Activity *cupti_packed_next(const uint8_t *buf, size_t used, size_t *off);

/* ------------------------------------------------------------ cupti_pattern.c */

/* Lua-pattern matching for kernel names (prof.steps{kernel = ...}), in C so
 * the launch callback never enters Lua. Supports what names need:
 * anchors ^ $, ., %a %c %d %g %l %p %s %u %w %x and their upper-case
 * complements, %<punct> escapes, sets [...] with ranges, classes and ^,
 * and the quantifiers * + - ?. Captures, %b and %f are refused. */

/* Returns NULL when `pat` is supported, else a static message. */
const char *cupti_pattern_check(const char *pat);

/* True when `pat` (checked) matches somewhere in `s` (string.find). */
bool cupti_pattern_find(const char *pat, const char *s);

/* ------------------------------------------------------------ cupti_names.c */

/* The GPU names (kernel names by pointer, API names by callback id, devices
 * by id) the recorder has written into the salvage file: a fixed set of
 * CUPTI_NAMES_SLOTS, nothing allocated. */
#define CUPTI_NAMES_SLOTS 16384
#define CUPTI_NAMES_PROBES 8

/* Whether name (kind, key) is marked written; if not, marks it (the caller
 * writes it now) and returns false. False also when the set has no room
 * near the name's slot: the caller writes it again. Any thread, lock-free;
 * two threads never both get false for one name. */
bool cupti_names_seen(unsigned kind, uint64_t key);

/* Forgets every name (tests). Not while another thread calls the above. */
void cupti_names_reset(void);

/* ------------------------------------------------------------ cupti_inflight.c */

/* Kernel launches seen by the launch callbacks (API enter) whose
 * completion record has not come yet: what a hang report lists as the GPU
 * work launched and not finished. A fixed table of `nslot` slots indexed
 * by correlation id modulo nslot: a launch whose slot holds an older
 * unfinished one lets that one go (counted in `forgotten`); nothing is
 * allocated after init. Every function may be called from any thread. */
#define CUPTI_INFLIGHT_SLOTS 4096
#define CUPTI_INFLIGHT_NAME 160

struct cupti_launch {
	uint32_t corr;                 /* 0: a free slot */
	int32_t tid;                   /* the launching thread */
	int64_t ts;                    /* clock_now_ns at the launch call */
	void *ctx;                     /* its CUcontext */
	void *stream;                  /* its stream handle (when known) */
	bool has_stream;
	bool per_thread;               /* a _ptsz launch: a NULL stream is the
					  thread's default stream */
	char name[CUPTI_INFLIGHT_NAME];/* the kernel's name, cut to fit */
};

struct cupti_inflight {
	pthread_mutex_t lock;
	struct cupti_launch *slot;     /* NULL: not tracking */
	size_t nslot;
	uint64_t forgotten;            /* launches let go unfinished */
};

/* Allocates the table. Returns 0 or -1 (no memory: *f stays inert, every
 * call below a no-op). Once, before any other call. */
int cupti_inflight_init(struct cupti_inflight *f, size_t nslot);

void cupti_inflight_free(struct cupti_inflight *f);

/* A launch (l->corr != 0) takes its slot. */
void cupti_inflight_launch(struct cupti_inflight *f, const struct cupti_launch *l);

/* The launches corr[0..n) finished (or failed): their slots are freed
 * when they still hold them. */
void cupti_inflight_done(struct cupti_inflight *f, const uint32_t *corr, size_t n);

/* Forgets every launch (CUPTI stopped: no record will come) and the count. */
void cupti_inflight_clear(struct cupti_inflight *f);

/* Copies the `max` oldest launches not finished into out[], oldest first;
 * *more: how many more there are; *forgotten: launches let go. Returns how
 * many were copied (0 also without memory for the copy). */
size_t cupti_inflight_take(struct cupti_inflight *f, struct cupti_launch *out, size_t max,
			   uint64_t *more, uint64_t *forgotten);

/* ------------------------------------------------------------ the source's state */

struct capture_host;
struct capture_window;
struct capture_hang_ops;

#define CUPTI_MAX_KINDS 16

/* The source's state (see cupti.c): OFF (no CUDA capture asked for),
 * WAITING (for InitializeInjection), READY (subscribed), STOPPING ->
 * STOPPED (finalized after the last window), DEAD (GPU capture stopped),
 * NSYS (Nsight Systems profiles the process). */
enum cupti_run { CU_OFF, CU_WAITING, CU_READY, CU_STOPPING, CU_STOPPED, CU_DEAD, CU_NSYS };

/* What the window wants of CUPTI: nothing, a warm-up, a recording. */
enum cupti_want { CU_WANT_IDLE, CU_WANT_WARMUP, CU_WANT_RECORD };

/* Activity buffers: one preallocated region cut into equal buffers that
 * CUPTI borrows (requested) and returns (completed); the host thread
 * converts the completed ones and frees them. Never malloc mid-window. */
struct cupti_done {
	uint32_t idx;
	size_t valid;
};

#define CUPTI_REC_DEVICES 8

struct cupti_pool {
	pthread_mutex_t lock;
	uint8_t *base;
	size_t buf_size;
	uint32_t nbuf;
	uint32_t *free_idx, nfree;
	struct cupti_done *done;
	uint32_t ndone;
	CUpti_ActivityDevice5 devrec[CUPTI_REC_DEVICES]; /* the flight
							    recorder's DEVICE
							    records (written
							    once, when the kind
							    is enabled) */
	uint32_t ndevrec;
};

/* The capture source's state, one for the process (cupti_cu, defined in
 * cupti_state.c). Threads and locks: cupti.c's header. */
struct cupti_state {
	/* "No driver" is said when the first window opens, not at start-up:
	 * a process that never captures (a shell, a launcher) stays quiet. */
	char no_gpu_note[256];
	bool no_gpu_said;
	pthread_mutex_t lock;
	pthread_mutex_t flush_lock;    /* a flush and its taking; a finalize */
	const struct capture_host *h;
	enum cupti_run state;
	enum cupti_want want;
	bool enabled;                  /* kinds enabled now */
	struct cupti_fns fn;
	CUpti_SubscriberHandle sub;
	CUpti_ActivityKind kinds[CUPTI_MAX_KINDS];
	bool kind_bad[CUPTI_MAX_KINDS]; /* CUPTI refused it here: left out */
	size_t nkinds;
	struct cupti_show show;
	bool ext;                      /* ranges get external correlation ids */
	_Atomic int ext_on;
	_Atomic uint64_t next_ext;
	struct cupti_pool pool;
	size_t pool_bytes;
	uint8_t *carry;                /* records of a later window */
	size_t ncarry, capcarry;
	uint64_t carry_dropped;
	int64_t prev_start, prev_end;  /* the last window written */
	size_t corr_hint;              /* its correlation ids, to size the next table */
	uint64_t last_gen;             /* generation of the last window opened */
	struct cupti_devices devices;
	const char **names[2];         /* cbid -> name cache (runtime, driver) */
	/* steps from CUDA (prof.steps{cuda = ..., kernel = ...}) */
	uint8_t *step_cbid[2];
	uint8_t *launch_cbid[2];
	char *kernel_pattern;
	bool steps_from_cuda;          /* keeps CUPTI subscribed for good */
	/* CUDA graphs: a graph launched while CUPTI was attached fails its
	 * later launches once CUPTI is finalized (CUDA_ERROR_LAUNCH_FAILED,
	 * seen with CUDA 13.0 on an H200): then CUPTI stays attached. */
	uint8_t *graph_cbid[2];        /* cudaGraphLaunch, cuGraphLaunch */
	_Atomic int graphs_seen;
	/* The CUDA runtime tears the driver down in an exit handler, and
	 * CUPTI crashes when called after it: the host's exit path is armed
	 * to run before (capture_host.arm_exit) at the first step or window
	 * callback with CUPTI up and the driver initialised (the runtime that
	 * initialised it has registered its handler by then): cupti_arm_exit. */
	bool exit_armed;
	bool devices_asked;            /* the driver told the devices */
	/* Nsight Systems */
	int (*profiler_start)(void);
	int (*profiler_stop)(void);
	bool nsys_said;
	uint64_t nvtx_step;            /* an nvtxRangeId_t */
	bool nvtx_open;
	/* CPU stacks of slow calls (prof.capture{cuda_backtrace}); 0 = off */
	int64_t backtrace_ns;
	/* kernels in flight for hang reports (prof.watchdog{}) */
	bool watch;                    /* the watchdog is on and kernels are
					  captured: launches are tracked */
	uint8_t *track_cbid[2];        /* the launch APIs */
	_Atomic int track;             /* kernel records enabled now */
	struct cupti_inflight inflight;
	/* the flight recorder (see its section) */
	bool rec_want;                 /* it keeps segments: kinds on */
	_Atomic int rec_copy;          /* completed buffers go into the ring */
	_Atomic uint64_t pending_gen;  /* a closed window not yet collected:
					  its buffers stay on the done list */
	_Atomic int dumping;           /* recorder dumps taken, not yet
					  collected: buffers go on the done
					  list too */
};

extern struct cupti_state cupti_cu;


/* ------------------------------------------------------------ cupti_activity.c */

/* CUPTI's timestamp callback: the host's clock (clock.h). */
uint64_t CUPTIAPI cupti_clock(void);

/* CUPTI's buffer-requested callback: a buffer lent from the pool (NULL
 * when none is free: CUPTI drops and counts). CUPTI's thread; takes the
 * pool's lock. (The completed callback is cupti.c's.) */
void CUPTIAPI cupti_buf_requested(uint8_t **buffer, size_t *size, size_t *max);

/* Reserves the pool: `bytes` cut into equal buffers. 0, or -1 (no memory:
 * *p zeroed). Once, cu.lock held. */
int cupti_pool_init(struct cupti_pool *p, size_t bytes);

/* Every buffer free again (CUPTI was finalized) and the memory given
 * back. Takes the pool's lock. */
void cupti_pool_reset(struct cupti_pool *p);

/* Gives the buffers bufs[0..n) back to the pool and frees the list (may
 * be NULL). Host thread; takes the pool's lock. */
void cupti_pool_give_back(struct cupti_done *bufs, uint32_t n);

/* The configured kinds on: CUPTI_SUCCESS (a kind CUPTI cannot record here
 * is left out, said once), or CUPTI's failure, for the caller to give up
 * on (cu.enabled is set: giving up disables what was enabled). Or off.
 * cu.lock held. */
CUptiResult cupti_kinds_enable(void);
void cupti_kinds_disable(void);

/* A visitor of records (cupti_each_done, cupti_each_carried). */
typedef void (*cupti_record_fn)(const CUpti_Activity *r, void *arg);

/* Calls fn for each record of the completed buffers done[0..ndone). Host
 * thread. */
void cupti_each_done(const struct cupti_done *done, uint32_t ndone, cupti_record_fn fn,
		     void *arg);

/* Packed records kept past a window's or a dump's end. */
struct cupti_carry {
	uint8_t *buf;
	size_t n, cap;
};

/* Keeps a packed copy of `r` in next[*nnext..cap) (counted in
 * cu.carry_dropped when it does not fit). Host thread. */
void cupti_carry_add(uint8_t *next, size_t *nnext, size_t cap, const CUpti_Activity *r);

/* Calls fn for each record kept in cu.carry. Host thread. */
void cupti_each_carried(cupti_record_fn fn, void *arg);

/* ------------------------------------------------------------ cupti_callbacks.c */

/* The number of callback ids of the runtime [0] and driver [1] APIs. */
extern const uint32_t cupti_cbid_size[2];

/* The API callback subscribed (cuptiSubscribe). Application threads,
 * inside the CUDA call. */
void CUPTIAPI cupti_api_callback(void *ud, CUpti_CallbackDomain domain,
				 CUpti_CallbackId cbid, const void *data);

/* Sets (on) or removes the range hooks of the shim and of torch's
 * operators, which push external correlation ids. cu.lock held. */
void cupti_set_hooks(bool on);

/* Enables the API callbacks the step triggers, cuda_backtrace, the
 * watchdog and the graph launches need: CUPTI_SUCCESS, or CUPTI's failure
 * (the caller gives up). cu.lock held. */
CUptiResult cupti_enable_callbacks(void);

/* The API name of a cbid (cupti_api_name_fn), cached. Host thread. */
const char *cupti_api_name(void *ctx, bool driver, uint32_t cbid);

/* ------------------------------------------------------------ cupti_driver.c */

/* Whether the process's CUDA driver is initialised (cuInit ran). cu.lock
 * held. */
bool cupti_driver_up(void);

/* The devices from the driver's attributes, as DEVICE records into
 * cu.devices, when CUPTI wrote none (never cuInit). Host thread. */
void cupti_devices_from_driver(void);

/* Finds cudaProfilerStart/Stop (or the driver's) for Nsight Systems.
 * cu.lock held. */
void cupti_nsys_find(void);

/* ------------------------------------------------------------ cupti_window.c */

/* A window's collect (capture_ops.collect without a dump). *stop: no
 * later window waits to be written, none lies ahead and the recorder keeps
 * no GPU work, so the caller stops CUPTI. Host thread. */
int cupti_window_collect(const struct capture_window *job, struct trace *t,
			 struct err *e, bool *stop);

/* ------------------------------------------------------------ cupti_recorder.c */

/* The recorder table's slots but the segment's (cupti.c's): a dump
 * takes its segments, a dump taken is dropped, the segment rotated (see
 * capture_recorder_ops). */
void cupti_rec_dump_taken(void);
void cupti_rec_dump_dropped(void);
void cupti_rec_rotated(void);
int cupti_rec_rotated_wanted(void);

/* Whether the flight recorder keeps GPU work between windows. Any thread. */
bool cupti_rec_keeps_gpu(void);

/* cupti_buf_completed's recorder path: true when the buffer went into the
 * ring and back to the pool. CUPTI's thread. */
bool cupti_rec_buffer(uint8_t *buffer, size_t valid);

/* A recorder dump's collect. Host thread. */
int cupti_rec_collect(const struct capture_window *job, struct trace *t, struct err *e);

/* A window's collect of generation `gen` ended. Host thread. */
void cupti_rec_window_collected(uint64_t gen);

/* ------------------------------------------------------------ cupti_hang.c */

/* The watchdog's table (capture_hang_ops). */
extern const struct capture_hang_ops cupti_hang_ops;

/* Frees the in-flight launches whose finished kernel record is in
 * buf[0..valid). CUPTI's thread or a flushing thread. */
void cupti_track_buffer(uint8_t *buf, size_t valid);

#endif

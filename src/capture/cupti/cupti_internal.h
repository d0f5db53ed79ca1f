/*
 * cupti_internal — what the CUPTI capture's files share (cupti.c: the
 * lifecycle; cupti_load.c: finding and opening libcupti; cupti_records.c:
 * activity records -> trace events; cupti_pattern.c: kernel-name patterns;
 * cupti_inflight.c: launches not known to have finished; cupti_salvage.c:
 * the flight recorder's records in a salvage file, for `prof salvage`).
 * Not a module contract: only src/capture/cupti*.c and their unit tests
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

#endif

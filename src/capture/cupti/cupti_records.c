/*
 * cupti_records — CUPTI activity records -> trace events, in Kineto's
 * schema (see cupti_internal.h for the two-pass contract, docs/gpu.md for
 * the events).
 *
 * Pass 1 (scan) learns, for each correlation id, where its API call ran
 * and whether it belongs to this window; pass 2 (add) turns the window's
 * records into events and says which records belong to a later window.
 * Everything that needs all records (flows are added in pass 2; annotation
 * spans, memory totals, track names) is built in cupti_conv_finish.
 * Host thread only.
 */
#include "cupti_internal.h"
#include "../../events/bigalloc.h"
#include "../../util/demangle.h"
#include "../../common/grow.h"
#include "../../util/htab.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TID_CONTEXT_SYNC (-1) /* track of context-wide synchronizations */
#define TID_MEMORY (-2)       /* track of allocations and frees */
#define MAX_CONTEXTS 64

/* What is known about one correlation id: 32 bytes, one per API call of
 * the window, so a window of millions of launches keeps it small. */
struct cupti_corr {
	uint32_t corr;        /* 0: empty slot */
	uint8_t route;        /* enum cupti_route of the API call */
	uint8_t has_api;      /* an API record was seen */
	uint8_t api_driver;
	uint8_t flowed;       /* a flow arrow was drawn for it */
	int32_t api_tid;
	uint32_t api_event;   /* index of its API event + 1, 0: none */
	int64_t api_start;
	uint64_t ext_id;      /* profhost's external id (a range), 0: none */
};

/* A MEMORY2 record waiting for the running totals. */
struct cupti_pending_mem {
	int64_t ts;
	uint64_t addr, bytes;
	uint32_t dev, corr, stream;
	uint8_t alloc, kind;
};

/* GPU time under one annotation on one track: key is (range ext id or
 * step index | STEP_BIT, device << 32 | stream). */
struct cupti_gpu_link {
	uint64_t key, track;
	int64_t start, end;
};

#define STEP_BIT (1ull << 63)

/* Argument keys, interned once per conversion. */
enum key {
	K_CBID, K_CORR, K_QUEUED, K_DEVICE, K_CONTEXT, K_STREAM, K_REGS, K_SHMEM,
	K_BLOCKS_SM, K_WARPS_SM, K_GRID, K_BLOCK, K_GRAPH, K_EXT, K_BYTES, K_COPY_KIND,
	K_BW, K_NKEYS
};

static const char *const key_names[K_NKEYS] = {
	"cbid", "correlation", "queued", "device", "context", "stream",
	"registers per thread", "shared memory", "blocks per SM", "warps per SM",
	"grid", "block", "graph id", "External id", TRACE_ARG_BYTES, TRACE_ARG_COPY_KIND,
	"memory bandwidth (GB/s)",
};

static uint32_t ctx_dev[MAX_CONTEXTS]; /* context id -> device + 1 */

static void args_flush(struct cupti_conv *c);
static enum cupti_route add_record(struct cupti_conv *c, const CUpti_Activity *r);

size_t cupti_record_size(CUpti_ActivityKind kind)
{
	switch (kind) {
	case CUPTI_ACTIVITY_KIND_KERNEL:
	case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
		return sizeof(CUpti_ActivityKernel10);
	case CUPTI_ACTIVITY_KIND_MEMCPY:
		return sizeof(CUpti_ActivityMemcpy6);
	case CUPTI_ACTIVITY_KIND_MEMSET:
		return sizeof(CUpti_ActivityMemset4);
	case CUPTI_ACTIVITY_KIND_RUNTIME:
	case CUPTI_ACTIVITY_KIND_DRIVER:
		return sizeof(CUpti_ActivityAPI);
	case CUPTI_ACTIVITY_KIND_MEMORY2:
		return sizeof(CUpti_ActivityMemory4);
	case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
		return sizeof(CUpti_ActivitySynchronization2);
	case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION:
		return sizeof(CUpti_ActivityExternalCorrelation);
	case CUPTI_ACTIVITY_KIND_DEVICE:
		return sizeof(CUpti_ActivityDevice5);
	case CUPTI_ACTIVITY_KIND_OVERHEAD:
		return sizeof(CUpti_ActivityOverhead3);
	default:
		return 0;
	}
}

size_t cupti_packed_size(CUpti_ActivityKind kind)
{
	return (cupti_record_size(kind) + 7) & ~(size_t)7;
}

const CUpti_Activity *cupti_packed_next(const uint8_t *buf, size_t used, size_t *off)
{
	const CUpti_Activity *r;
	size_t step;

	if (used - *off < sizeof *r)
		return NULL;
	r = (const void *)(buf + *off);
	step = cupti_packed_size(r->kind);
	if (!step || step > used - *off)
		return NULL;
	*off += step;
	return r;
}

/* ------------------------------------------------------------ helpers */

/* Makes room in *arr (holding n of *cap elements of `size` bytes) for one
 * more (grow_array, from 64). 0, or -1 with *arr and *cap unchanged. */
static int grow(void **arr, size_t *cap, size_t n, size_t size)
{
	void *p = grow_array(*arr, cap, n + 1, size, 64);

	if (!p)
		return -1;
	*arr = p;
	return 0;
}

/* Correlation ids count up from 1 with every API call: within a window
 * they are nearly dense, so the identity keeps neighbours in neighbouring
 * slots (cache-friendly, no collisions until the range outgrows the
 * table, which then doubles). */
static size_t hash32(uint32_t v, size_t cap)
{
	return htab_first(v, cap);
}

/* The entry of correlation id `corr`; created when `create`. NULL when
 * absent (or out of memory). */
static struct cupti_corr *corr_get(struct cupti_conv *c, uint32_t corr, bool create)
{
	size_t i;

	if (!corr || !c->map)
		return NULL;
	if (create && htab_full(c->map_n, c->map_cap)) {
		size_t cap = 2 * c->map_cap, k;
		struct cupti_corr *m = bigalloc_calloc(cap, sizeof *m);

		if (!m) {
			c->t->oom = 1;
			return NULL;
		}
		for (k = 0; k < c->map_cap; k++) {
			if (!c->map[k].corr)
				continue;
			for (i = hash32(c->map[k].corr, cap); m[i].corr; i = htab_next(i, cap))
				;
			m[i] = c->map[k];
		}
		bigalloc_drop(c->map); /* outgrown: not kept for reuse */
		c->map = m;
		c->map_cap = cap;
	}
	for (i = hash32(corr, c->map_cap); c->map[i].corr; i = htab_next(i, c->map_cap))
		if (c->map[i].corr == corr)
			return &c->map[i];
	if (!create)
		return NULL;
	memset(&c->map[i], 0, sizeof c->map[i]);
	c->map[i].corr = corr;
	c->map[i].route = CUPTI_ROUTE_DROP;
	c->map_n++;
	return &c->map[i];
}

/* Where work starting at `ts` belongs by time alone. */
static enum cupti_route route_ts(const struct cupti_conv *c, int64_t ts)
{
	if (ts < c->o.start)
		return CUPTI_ROUTE_DROP;
	if (ts > c->o.end)
		return CUPTI_ROUTE_LATER;
	return CUPTI_ROUTE_THIS;
}

/* Counts a dropped record of the previous window's time (launched at
 * `ts`) as late: it came after that window was written. */
static void count_late(struct cupti_conv *c, int64_t ts)
{
	if (c->o.prev_end && ts >= c->o.prev_start && ts <= c->o.prev_end)
		c->late++;
}

/* Where GPU work of correlation `corr` starting at `ts` belongs: with its
 * API call when that was seen, else by its own time. */
static enum cupti_route route_gpu(struct cupti_conv *c, uint32_t corr, int64_t ts)
{
	struct cupti_corr *e = corr_get(c, corr, false);
	enum cupti_route r;

	if (e && e->has_api) {
		r = (enum cupti_route)e->route;
		ts = e->api_start;
	} else {
		r = route_ts(c, ts);
	}
	if (r == CUPTI_ROUTE_DROP)
		count_late(c, ts);
	return r;
}

static uint32_t device_of_context(uint32_t ctx)
{
	return ctx < MAX_CONTEXTS && ctx_dev[ctx] ? ctx_dev[ctx] - 1 : 0;
}

static void note_context(uint32_t ctx, uint32_t dev)
{
	if (ctx < MAX_CONTEXTS)
		ctx_dev[ctx] = dev + 1;
}

/* Remembers a GPU track for naming. */
static void note_track(struct cupti_conv *c, uint32_t dev, int32_t stream)
{
	uint64_t key = (uint64_t)dev << 32 | (uint32_t)stream;
	size_t i;

	if (dev < 64)
		c->devices_seen |= 1ull << dev;
	for (i = 0; i < c->ntracks; i++)
		if (c->tracks[i] == key)
			return;
	if (c->ntracks < sizeof c->tracks / sizeof c->tracks[0])
		c->tracks[c->ntracks++] = key;
}

/* Adds GPU time [start, end) on (dev, stream) under key (an external id,
 * or a step index | STEP_BIT). Linear merge over recent links first: work
 * of one annotation arrives together. */
static void link_add(struct cupti_conv *c, uint64_t key, uint32_t dev, int32_t stream,
		     int64_t start, int64_t end)
{
	uint64_t track = (uint64_t)dev << 32 | (uint32_t)stream;
	size_t i, lo = c->nlinks > 16 ? c->nlinks - 16 : 0;

	for (i = c->nlinks; i-- > lo;) {
		struct cupti_gpu_link *l = &c->links[i];

		if (l->key == key && l->track == track) {
			if (start < l->start)
				l->start = start;
			if (end > l->end)
				l->end = end;
			return;
		}
	}
	if (grow((void **)&c->links, &c->cap_links, c->nlinks, sizeof *c->links)) {
		c->t->oom = 1;
		return;
	}
	c->links[c->nlinks].key = key;
	c->links[c->nlinks].track = track;
	c->links[c->nlinks].start = start;
	c->links[c->nlinks].end = end;
	c->nlinks++;
}

/* Index of the captured step whose span holds `ts`, or -1. */
static long step_at(const struct trace *t, int64_t ts)
{
	size_t lo = 0, hi = t->nsteps;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (t->steps[mid].ts + t->steps[mid].dur <= ts)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < t->nsteps && t->steps[lo].ts <= ts)
		return (long)lo;
	return -1;
}

/* The name of a kernel, demangled when the process has a C++ demangler;
 * cached by CUPTI's name pointer (shared by all records of a kernel). */
static uint32_t kernel_name(struct cupti_conv *c, const char *name)
{
	static demangle_fn demangle;
	static int looked;
	size_t i, mask;
	uint32_t id;
	char *d;

	if (!name)
		name = "(unknown kernel)";
	if (!c->name_key) {
		c->name_cap = 1024;
		c->name_key = calloc(c->name_cap, sizeof *c->name_key);
		c->name_id = calloc(c->name_cap, sizeof *c->name_id);
		if (!c->name_key || !c->name_id) {
			free(c->name_key);
			free(c->name_id);
			c->name_key = NULL;
			c->name_id = NULL;
		}
	}
	mask = c->name_cap - 1;
	i = ((uintptr_t)name >> 3) & mask;
	if (c->name_key && c->name_key[i] == name)
		return c->name_id[i];
	if (!looked) {
		looked = 1;
		demangle = demangle_find(false);
	}
	id = STRTAB_NONE;
	d = demangle_full(demangle, name);
	if (d)
		id = trace_intern(c->t, d, strlen(d));
	free(d);
	if (id == STRTAB_NONE)
		id = trace_intern(c->t, name, strlen(name));
	if (c->name_key) {
		c->name_key[i] = name;
		c->name_id[i] = id;
	}
	return id;
}

static const char *memory_kind_name(unsigned k)
{
	static const char *const names[] = {
		"Unknown", "Pageable", "Pinned", "Device", "Array", "Managed",
		"Device Static", "Managed Static",
	};

	return k < sizeof names / sizeof names[0] ? names[k] : "Unknown";
}

static const char *copy_kind_name(unsigned k)
{
	static const char *const names[] = {
		"Unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA",
		"DtoD", "HtoH", "PtoP",
	};

	return k < sizeof names / sizeof names[0] ? names[k] : "Unknown";
}

/* Adds a complete event and returns it (NULL: out of memory). */
static struct trace_event *add_x(struct cupti_conv *c, enum trace_cat cat, uint32_t name,
				 int32_t pid, int32_t tid, int64_t start, int64_t end,
				 uint64_t id)
{
	struct trace_event e = { 0 };

	e.ts = start;
	e.dur = end > start ? end - start : 0;
	e.id = id;
	e.pid = pid;
	e.tid = tid;
	e.name = name;
	e.cat = (uint8_t)cat;
	e.ph = TRACE_PH_COMPLETE;
	c->records++;
	args_flush(c);
	return trace_add_event(c->t, &e);
}

/* Attaches the gathered arguments to the last event added. */
static void args_flush(struct cupti_conv *c)
{
	if (c->npend)
		trace_args_add(c->t, c->pend, c->npend);
	c->npend = 0;
}

static uint32_t intern(struct cupti_conv *c, const char *s)
{
	return trace_intern(c->t, s, strlen(s));
}

/* Arguments with pre-interned keys (the hot path: no hashing per arg),
 * gathered for the event just added and attached in one go by
 * args_flush(). */
static struct trace_arg *arg_next(struct cupti_conv *c, enum key k, uint32_t type)
{
	struct trace_arg *a;

	if (c->npend == sizeof c->pend / sizeof c->pend[0])
		args_flush(c);
	a = &c->pend[c->npend++];
	a->key = c->keys[k];
	a->type = type;
	return a;
}

static void arg_u(struct cupti_conv *c, enum key k, uint64_t v)
{
	arg_next(c, k, TRACE_ARG_UINT)->v.u = v;
}

static void arg_i(struct cupti_conv *c, enum key k, int64_t v)
{
	arg_next(c, k, TRACE_ARG_INT)->v.i = v;
}

static void arg_d(struct cupti_conv *c, enum key k, double v)
{
	arg_next(c, k, TRACE_ARG_DOUBLE)->v.d = v;
}

/* A string (or raw JSON) argument whose value is strtab id `id`. */
static void arg_id(struct cupti_conv *c, enum key k, uint32_t type, uint32_t id)
{
	if (id != STRTAB_NONE)
		arg_next(c, k, type)->v.str = id;
}

/* The interned "[x,y,z]" of a grid or block, cached while it repeats. */
static uint32_t dim3_id(struct cupti_conv *c, int32_t *last, uint32_t *id, int32_t x,
			int32_t y, int32_t z)
{
	char json[48];

	if (*id && last[0] == x && last[1] == y && last[2] == z)
		return *id - 1;
	snprintf(json, sizeof json, "[%d,%d,%d]", (int)x, (int)y, (int)z);
	last[0] = x;
	last[1] = y;
	last[2] = z;
	*id = intern(c, json) + 1;
	return *id - 1;
}

/* The flow arrow from the API call of `e` to GPU work at (dev, stream, ts),
 * once per correlation id. */
static void add_flow(struct cupti_conv *c, struct cupti_corr *e, uint32_t dev,
		     int32_t stream, int64_t ts)
{
	struct trace_event f = { 0 };

	if (!e || !e->has_api || e->route != CUPTI_ROUTE_THIS || e->flowed ||
	    !(e->api_driver ? c->o.show.driver : c->o.show.runtime))
		return;
	e->flowed = 1;
	args_flush(c);
	f.name = c->ac2g;
	f.cat = TRACE_CAT_AC2G;
	f.id = e->corr;
	f.ph = TRACE_PH_FLOW_START;
	f.pid = c->o.pid;
	f.tid = e->api_tid;
	f.ts = e->api_start;
	trace_add_event(c->t, &f);
	f.ph = TRACE_PH_FLOW_END;
	f.pid = (int32_t)dev;
	f.tid = stream;
	f.ts = ts;
	trace_add_event(c->t, &f);
}

/* Everything GPU work of `corr` on (dev, stream) links to: the flow from
 * its launch, its range (external id), its step. */
static void gpu_links(struct cupti_conv *c, uint32_t corr, uint32_t dev, int32_t stream,
		      int64_t start, int64_t end)
{
	struct cupti_corr *e = corr_get(c, corr, false);
	long step;

	note_track(c, dev, stream);
	if (!e)
		return;
	if (e->ext_id) /* still the last event: its args may grow */
		arg_u(c, K_EXT, e->ext_id);
	add_flow(c, e, dev, stream, start);
	if (e->ext_id)
		link_add(c, e->ext_id, dev, stream, start, end);
	if (e->has_api && (step = step_at(c->t, e->api_start)) >= 0)
		link_add(c, (uint64_t)step | STEP_BIT, dev, stream, start, end);
}

/* ------------------------------------------------------------ pass 1 */

int cupti_conv_init(struct cupti_conv *c, struct trace *t,
		    const struct cupti_conv_opts *o)
{
	size_t k;

	memset(c, 0, sizeof *c);
	c->t = t;
	c->o = *o;
	c->map_cap = 1024;
	while (c->map_cap < SIZE_MAX / 4 && c->map_cap < 2 * (o->corr_hint + 1))
		c->map_cap *= 2;
	c->map = bigalloc_calloc(c->map_cap, sizeof *c->map);
	for (k = 0; k < K_NKEYS; k++)
		c->keys[k] = intern(c, key_names[k]);
	c->ac2g = intern(c, "ac2g");
	c->api_ids[0] = calloc(CUPTI_RUNTIME_TRACE_CBID_SIZE, sizeof *c->api_ids[0]);
	c->api_ids[1] = calloc(CUPTI_DRIVER_TRACE_CBID_SIZE, sizeof *c->api_ids[1]);
	return c->map && c->api_ids[0] && c->api_ids[1] && !t->oom ? 0 : -1;
}

void cupti_devices_note(struct cupti_devices *ds, const CUpti_ActivityDevice5 *d)
{
	struct trace_device td;
	size_t i;

	memset(&td, 0, sizeof td);
	td.id = (int32_t)d->id;
	td.total_global_mem = d->globalMemorySize;
	td.compute_major = (int32_t)d->computeCapabilityMajor;
	td.compute_minor = (int32_t)d->computeCapabilityMinor;
	td.max_threads_per_block = (int32_t)d->maxThreadsPerBlock;
	td.max_threads_per_sm = (int32_t)(d->maxWarpsPerMultiprocessor * d->numThreadsPerWarp);
	td.regs_per_block = (int32_t)d->maxRegistersPerBlock;
	td.regs_per_sm = (int32_t)d->maxRegistersPerMultiprocessor;
	td.warp_size = (int32_t)d->numThreadsPerWarp;
	td.shared_mem_per_block = (int32_t)d->maxSharedMemoryPerBlock;
	td.shared_mem_per_sm = (int32_t)d->maxSharedMemoryPerMultiprocessor;
	td.num_sms = (int32_t)d->numMultiprocessors;
	for (i = 0; i < ds->n; i++)
		if (ds->dev[i].id == td.id)
			break;
	if (i == ds->n) {
		if (grow((void **)&ds->dev, &ds->cap, ds->n, sizeof *ds->dev))
			return;
		ds->n++;
	} else {
		free(ds->dev[i].name);
	}
	td.name = strdup(d->name ? d->name : "");
	ds->dev[i] = td;
}

static void note_device(struct cupti_conv *c, const CUpti_ActivityDevice5 *d)
{
	if (c->o.devices)
		cupti_devices_note(c->o.devices, d);
}

/* Most events and arguments passes 2 and 3 add for a record of kind `k`,
 * so the trace can be sized once (trace_reserve): an event and its args,
 * plus the two ends of a flow arrow for GPU work. */
static void scan_count(struct cupti_conv *c, CUpti_ActivityKind k)
{
	switch (k) {
	case CUPTI_ACTIVITY_KIND_KERNEL:
	case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
		c->scan_events += 3;
		c->scan_args += 13; /* add_kernel with a graph and an external id */
		break;
	case CUPTI_ACTIVITY_KIND_MEMCPY:
	case CUPTI_ACTIVITY_KIND_MEMSET:
		c->scan_events += 3;
		c->scan_args += 8;
		break;
	case CUPTI_ACTIVITY_KIND_RUNTIME:
	case CUPTI_ACTIVITY_KIND_DRIVER:
	case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
	case CUPTI_ACTIVITY_KIND_OVERHEAD:
		c->scan_events += 1;
		c->scan_args += 4;
		break;
	case CUPTI_ACTIVITY_KIND_MEMORY2: /* an event with its args in finish */
		c->scan_events += 1;
		c->scan_args += 9;
		break;
	default:
		break;
	}
}

void cupti_conv_scan(struct cupti_conv *c, const CUpti_Activity *r)
{
	struct cupti_corr *e;

	scan_count(c, r->kind);
	switch (r->kind) {
	case CUPTI_ACTIVITY_KIND_RUNTIME:
	case CUPTI_ACTIVITY_KIND_DRIVER: {
		const CUpti_ActivityAPI *a = (const void *)r;

		e = corr_get(c, a->correlationId, true);
		if (!e)
			return;
		e->has_api = 1;
		e->api_driver = r->kind == CUPTI_ACTIVITY_KIND_DRIVER;
		e->api_tid = (int32_t)a->threadId;
		e->api_start = (int64_t)a->start;
		e->route = a->start == 0 ? CUPTI_ROUTE_DROP : route_ts(c, (int64_t)a->start);
		if (e->route == CUPTI_ROUTE_LATER &&
		    (!c->later_corr || a->correlationId < c->later_corr))
			c->later_corr = a->correlationId;
		break;
	}
	case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
		const CUpti_ActivityExternalCorrelation *x = (const void *)r;

		if (x->externalKind != CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1)
			return;
		e = corr_get(c, x->correlationId, true);
		if (e)
			e->ext_id = x->externalId;
		break;
	}
	case CUPTI_ACTIVITY_KIND_DEVICE:
		note_device(c, (const void *)r);
		break;
	case CUPTI_ACTIVITY_KIND_KERNEL:
	case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
		const CUpti_ActivityKernel10 *k = (const void *)r;

		note_context(k->contextId, k->deviceId);
		break;
	}
	case CUPTI_ACTIVITY_KIND_MEMCPY: {
		const CUpti_ActivityMemcpy6 *m = (const void *)r;

		note_context(m->contextId, m->deviceId);
		break;
	}
	case CUPTI_ACTIVITY_KIND_MEMSET: {
		const CUpti_ActivityMemset4 *m = (const void *)r;

		note_context(m->contextId, m->deviceId);
		break;
	}
	default:
		break;
	}
}

/* ------------------------------------------------------------ pass 2 */

static enum cupti_route add_api(struct cupti_conv *c, const CUpti_ActivityAPI *a, bool driver)
{
	struct cupti_corr *e = corr_get(c, a->correlationId, false);
	enum cupti_route route = e ? (enum cupti_route)e->route
				   : route_ts(c, (int64_t)a->start);
	const char *fn;
	char name[128];
	size_t n;
	uint32_t *cache, id;

	if (a->start == 0 && a->end == 0) {
		c->zero_ts++;
		return CUPTI_ROUTE_DROP;
	}
	if (route == CUPTI_ROUTE_DROP)
		count_late(c, (int64_t)a->start);
	if (route != CUPTI_ROUTE_THIS || !(driver ? c->o.show.driver : c->o.show.runtime))
		return route;
	cache = a->cbid < (driver ? CUPTI_DRIVER_TRACE_CBID_SIZE : CUPTI_RUNTIME_TRACE_CBID_SIZE)
		? &c->api_ids[driver][a->cbid] : NULL;
	if (cache && *cache) {
		id = *cache - 1;
		goto named;
	}
	fn = c->o.api_name ? c->o.api_name(c->o.api_name_ctx, driver, a->cbid) : NULL;
	if (fn) {
		/* "cudaLaunchKernel_v7000" -> "cudaLaunchKernel" */
		const char *v = strrchr(fn, '_');

		n = strlen(fn);
		if (v && v[1] == 'v' && v[2] >= '0' && v[2] <= '9' &&
		    strspn(v + 2, "0123456789") == strlen(v + 2))
			n = (size_t)(v - fn);
		if (n >= sizeof name)
			n = sizeof name - 1;
		memcpy(name, fn, n);
		name[n] = '\0';
	} else {
		snprintf(name, sizeof name, "%s API %u", driver ? "driver" : "runtime",
			 (unsigned)a->cbid);
	}
	id = intern(c, name);
	if (cache && id != STRTAB_NONE)
		*cache = id + 1;
named:
	if (!add_x(c, driver ? TRACE_CAT_CUDA_DRIVER : TRACE_CAT_CUDA_RUNTIME,
		   id, c->o.pid, (int32_t)a->threadId, (int64_t)a->start,
		   (int64_t)a->end, a->correlationId))
		return CUPTI_ROUTE_THIS;
	if (e)
		e->api_event = (uint32_t)c->t->nev;
	arg_u(c, K_CBID, a->cbid);
	arg_u(c, K_CORR, a->correlationId);
	if (!c->napi_tids || c->api_tids[c->napi_tids - 1] != (int32_t)a->threadId) {
		size_t i;

		for (i = 0; i < c->napi_tids; i++)
			if (c->api_tids[i] == (int32_t)a->threadId)
				break;
		if (i == c->napi_tids && c->napi_tids < 4096 &&
		    !grow((void **)&c->api_tids, &c->cap_api_tids, c->napi_tids,
			  sizeof *c->api_tids))
			c->api_tids[c->napi_tids++] = (int32_t)a->threadId;
	}
	return CUPTI_ROUTE_THIS;
}

/* Pass 2's first look at a GPU operation of [start, end]: DROP when CUPTI
 * gave it no time (counted in zero_ts, unless o.recorder and it was
 * launched after the window), else the route of its API call.
 * *add: whether this window shows it (`show`, the option of its kind). */
static enum cupti_route gpu_route(struct cupti_conv *c, uint64_t start, uint64_t end,
				  uint32_t corr, bool show, bool *add)
{
	enum cupti_route route;

	*add = false;
	if (start == 0 || end < start) {
		struct cupti_corr *e = corr_get(c, corr, false);

		/* With the flight recorder on, CUPTI records on past the
		 * window, and a forced flush cuts that work short: it is not
		 * this window's loss when its API call lies outside, or when
		 * it came after a call that does (ids only grow). */
		if (c->o.recorder &&
		    ((e && e->has_api && e->route != CUPTI_ROUTE_THIS) ||
		     (c->later_corr && corr >= c->later_corr)))
			return CUPTI_ROUTE_DROP;
		c->zero_ts++;
		return CUPTI_ROUTE_DROP;
	}
	route = route_gpu(c, corr, (int64_t)start);
	*add = route == CUPTI_ROUTE_THIS && show;
	return route;
}

/* The arguments that place a GPU operation: Kineto's device, context,
 * stream and correlation, in that order. */
static void gpu_place_args(struct cupti_conv *c, uint32_t dev, uint32_t ctx, uint32_t stream,
			   uint32_t corr)
{
	arg_u(c, K_DEVICE, dev);
	arg_u(c, K_CONTEXT, ctx);
	arg_u(c, K_STREAM, stream);
	arg_u(c, K_CORR, corr);
}

static enum cupti_route add_kernel(struct cupti_conv *c, const CUpti_ActivityKernel10 *k)
{
	int32_t stream = (int32_t)k->streamId;
	const struct cupti_devices *ds = c->o.devices;
	size_t i;
	bool add;
	enum cupti_route route = gpu_route(c, k->start, k->end, k->correlationId,
					   c->o.show.kernels, &add);

	if (!add || !add_x(c, TRACE_CAT_KERNEL, kernel_name(c, k->name), (int32_t)k->deviceId,
			   stream, (int64_t)k->start, (int64_t)k->end, k->correlationId))
		return route;
	arg_i(c, K_QUEUED, k->queued && k->queued <= k->start
	      ? (int64_t)(k->start - k->queued) / 1000 : 0);
	gpu_place_args(c, k->deviceId, k->contextId, k->streamId, k->correlationId);
	arg_u(c, K_REGS, k->registersPerThread);
	arg_i(c, K_SHMEM, (int64_t)k->staticSharedMemory + k->dynamicSharedMemory);
	for (i = 0; ds && i < ds->n; i++)
		if (ds->dev[i].id == (int32_t)k->deviceId && ds->dev[i].num_sms > 0) {
			double blocks = (double)k->gridX * k->gridY * k->gridZ;
			int64_t threads = (int64_t)k->blockX * k->blockY * k->blockZ;
			int64_t warp = ds->dev[i].warp_size > 0 ? ds->dev[i].warp_size : 32;
			int64_t warps = (threads + warp - 1) / warp; /* per block */

			arg_d(c, K_BLOCKS_SM, blocks / ds->dev[i].num_sms);
			arg_d(c, K_WARPS_SM, blocks * (double)warps / ds->dev[i].num_sms);
			break;
		}
	arg_id(c, K_GRID, TRACE_ARG_RAW, dim3_id(c, c->grid_last, &c->grid_id, k->gridX,
						k->gridY, k->gridZ));
	arg_id(c, K_BLOCK, TRACE_ARG_RAW, dim3_id(c, c->block_last, &c->block_id, k->blockX,
						 k->blockY, k->blockZ));
	if (k->graphId)
		arg_u(c, K_GRAPH, k->graphId);
	gpu_links(c, k->correlationId, k->deviceId, stream, (int64_t)k->start,
		  (int64_t)k->end);
	return route;
}

/* Bytes per nanosecond is GB/s. */
static double bandwidth(uint64_t bytes, uint64_t start, uint64_t end)
{
	return end > start ? (double)bytes / (double)(end - start) : 0.0;
}

static enum cupti_route add_memcpy(struct cupti_conv *c, const CUpti_ActivityMemcpy6 *m)
{
	char name[96];
	unsigned ck, sk, dk;
	bool add;
	enum cupti_route route = gpu_route(c, m->start, m->end, m->correlationId,
					   c->o.show.memcpy, &add);

	if (!add)
		return route;
	ck = m->copyKind < 11 ? m->copyKind : 0;
	sk = m->srcKind < 8 ? m->srcKind : 0;
	dk = m->dstKind < 8 ? m->dstKind : 0;
	if (!c->copy_ids[ck][sk][dk]) {
		snprintf(name, sizeof name, "Memcpy %s (%s -> %s)", copy_kind_name(ck),
			 memory_kind_name(sk), memory_kind_name(dk));
		c->copy_ids[ck][sk][dk] = intern(c, name) + 1;
	}
	if (!c->kind_ids[ck])
		c->kind_ids[ck] = intern(c, copy_kind_name(ck)) + 1;
	if (!add_x(c, TRACE_CAT_GPU_MEMCPY, c->copy_ids[ck][sk][dk] - 1, (int32_t)m->deviceId,
		   (int32_t)m->streamId, (int64_t)m->start, (int64_t)m->end, m->correlationId))
		return route;
	gpu_place_args(c, m->deviceId, m->contextId, m->streamId, m->correlationId);
	arg_u(c, K_BYTES, m->bytes);
	arg_id(c, K_COPY_KIND, TRACE_ARG_STR, c->kind_ids[ck] - 1);
	arg_d(c, K_BW, bandwidth(m->bytes, m->start, m->end));
	gpu_links(c, m->correlationId, m->deviceId, (int32_t)m->streamId, (int64_t)m->start,
		  (int64_t)m->end);
	return route;
}

static enum cupti_route add_memset(struct cupti_conv *c, const CUpti_ActivityMemset4 *m)
{
	char name[64];
	unsigned mk;
	bool add;
	enum cupti_route route = gpu_route(c, m->start, m->end, m->correlationId,
					   c->o.show.memset, &add);

	if (!add)
		return route;
	mk = m->memoryKind < 8 ? m->memoryKind : 0;
	if (!c->set_ids[mk]) {
		snprintf(name, sizeof name, "Memset (%s)", memory_kind_name(mk));
		c->set_ids[mk] = intern(c, name) + 1;
	}
	if (!add_x(c, TRACE_CAT_GPU_MEMSET, c->set_ids[mk] - 1, (int32_t)m->deviceId,
		   (int32_t)m->streamId, (int64_t)m->start, (int64_t)m->end, m->correlationId))
		return route;
	gpu_place_args(c, m->deviceId, m->contextId, m->streamId, m->correlationId);
	arg_u(c, K_BYTES, m->bytes);
	arg_d(c, K_BW, bandwidth(m->bytes, m->start, m->end));
	gpu_links(c, m->correlationId, m->deviceId, (int32_t)m->streamId, (int64_t)m->start,
		  (int64_t)m->end);
	return route;
}

static enum cupti_route add_sync(struct cupti_conv *c, const CUpti_ActivitySynchronization2 *s)
{
	static const char *const names[] = {
		"Sync", "Event Sync", "Stream Wait Event", "Stream Sync", "Context Sync",
	};
	enum cupti_route route;
	uint32_t dev = device_of_context(s->contextId);
	int32_t tid = s->streamId == CUPTI_SYNCHRONIZATION_INVALID_VALUE
		? TID_CONTEXT_SYNC : (int32_t)s->streamId;
	const char *name = (unsigned)s->type < sizeof names / sizeof names[0]
		? names[s->type] : "Sync";

	if (s->start == 0 && s->end == 0) {
		c->zero_ts++;
		return CUPTI_ROUTE_DROP;
	}
	route = route_gpu(c, s->correlationId, (int64_t)s->start);
	if (route != CUPTI_ROUTE_THIS || !c->o.show.sync)
		return route;
	if (!add_x(c, TRACE_CAT_CUDA_SYNC, intern(c, name), (int32_t)dev, tid,
		   (int64_t)s->start, (int64_t)s->end, s->correlationId))
		return route;
	trace_arg_uint(c->t, "device", dev);
	trace_arg_uint(c->t, "context", s->contextId);
	trace_arg_int(c->t, "stream", tid == TID_CONTEXT_SYNC ? -1 : tid);
	trace_arg_uint(c->t, "correlation", s->correlationId);
	note_track(c, dev, tid);
	return route;
}

static enum cupti_route add_memory(struct cupti_conv *c, const CUpti_ActivityMemory4 *m)
{
	enum cupti_route route;
	struct cupti_pending_mem *p;

	if (m->timestamp == 0) {
		c->zero_ts++;
		return CUPTI_ROUTE_DROP;
	}
	route = route_gpu(c, m->correlationId, (int64_t)m->timestamp);
	if (route != CUPTI_ROUTE_THIS || !c->o.show.memory)
		return route;
	if (m->memoryOperationType != CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION &&
	    m->memoryOperationType != CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE)
		return route;
	if (grow((void **)&c->mem, &c->cap_mem, c->nmem, sizeof *c->mem)) {
		c->t->oom = 1;
		return route;
	}
	p = &c->mem[c->nmem++];
	p->ts = (int64_t)m->timestamp;
	p->addr = m->address;
	p->bytes = m->bytes;
	p->dev = m->deviceId;
	p->corr = m->correlationId;
	p->stream = m->streamId;
	p->alloc = m->memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION;
	p->kind = (uint8_t)m->memoryKind;
	note_context(m->contextId, m->deviceId);
	return route;
}

static enum cupti_route add_overhead(struct cupti_conv *c, const CUpti_ActivityOverhead3 *o)
{
	enum cupti_route route;
	const char *name;
	int32_t tid = 0;

	if (o->start == 0) {
		c->zero_ts++;
		return CUPTI_ROUTE_DROP;
	}
	route = route_ts(c, (int64_t)o->start);
	if (route != CUPTI_ROUTE_THIS || !c->o.show.overhead)
		return route;
	switch (o->overheadKind) {
	case CUPTI_ACTIVITY_OVERHEAD_DRIVER_COMPILER: name = "Driver compiler"; break;
	case CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH: name = "CUPTI buffer flush"; break;
	case CUPTI_ACTIVITY_OVERHEAD_CUPTI_INSTRUMENTATION: name = "CUPTI instrumentation"; break;
	case CUPTI_ACTIVITY_OVERHEAD_CUPTI_RESOURCE: name = "CUPTI resource"; break;
	case CUPTI_ACTIVITY_OVERHEAD_ACTIVITY_BUFFER_REQUEST:
		name = "CUPTI buffer request";
		break;
	default: name = "CUPTI overhead"; break;
	}
	if (o->objectKind == CUPTI_ACTIVITY_OBJECT_THREAD)
		tid = (int32_t)o->objectId.pt.threadId;
	add_x(c, TRACE_CAT_OVERHEAD, intern(c, name), c->o.pid, tid, (int64_t)o->start,
	      (int64_t)o->end, 0);
	return route;
}

enum cupti_route cupti_conv_add(struct cupti_conv *c, const CUpti_Activity *r)
{
	enum cupti_route route;

	if (!c->reserved) {
		c->reserved = true;
		/* Slack for the gpu_user_annotation spans of finish (one per
		 * range or step and track, far fewer than records): growing a
		 * big array later would move it. */
		(void)trace_reserve(c->t, c->scan_events + c->scan_events / 16 + 4096,
				    c->scan_args + c->scan_events / 16 + 4096);
	}
	route = add_record(c, r);

	args_flush(c);
	return route;
}

static enum cupti_route add_record(struct cupti_conv *c, const CUpti_Activity *r)
{
	struct cupti_corr *e;

	switch (r->kind) {
	case CUPTI_ACTIVITY_KIND_RUNTIME:
		return add_api(c, (const void *)r, false);
	case CUPTI_ACTIVITY_KIND_DRIVER:
		return add_api(c, (const void *)r, true);
	case CUPTI_ACTIVITY_KIND_KERNEL:
	case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
		return add_kernel(c, (const void *)r);
	case CUPTI_ACTIVITY_KIND_MEMCPY:
		return add_memcpy(c, (const void *)r);
	case CUPTI_ACTIVITY_KIND_MEMSET:
		return add_memset(c, (const void *)r);
	case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
		return add_sync(c, (const void *)r);
	case CUPTI_ACTIVITY_KIND_MEMORY2:
		return add_memory(c, (const void *)r);
	case CUPTI_ACTIVITY_KIND_OVERHEAD:
		return add_overhead(c, (const void *)r);
	case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION:
		/* Used in pass 1; kept for a later window with its API call. */
		e = corr_get(c, ((const CUpti_ActivityExternalCorrelation *)(const void *)r)
				    ->correlationId, false);
		return e && e->has_api && e->route == CUPTI_ROUTE_LATER
			? CUPTI_ROUTE_LATER : CUPTI_ROUTE_DROP;
	default:
		return CUPTI_ROUTE_DROP; /* DEVICE (kept aside), kinds not read */
	}
}

/* ------------------------------------------------------------ finish */

static int cmp_mem(const void *a, const void *b)
{
	const struct cupti_pending_mem *x = a, *y = b;

	return (x->ts > y->ts) - (x->ts < y->ts);
}

/* Allocation sizes by address within the window (open addressing). */
struct addr_map {
	uint64_t *addr, *bytes;
	size_t cap;
};

static uint64_t *addr_slot(struct addr_map *m, uint64_t addr, bool create)
{
	size_t i;

	if (!m->addr)
		return NULL;
	for (i = htab_first((addr >> 9) * 0x9E3779B97F4A7C15ull, m->cap); m->addr[i];
	     i = htab_next(i, m->cap))
		if (m->addr[i] == addr)
			return &m->bytes[i];
	if (!create)
		return NULL;
	m->addr[i] = addr;
	return &m->bytes[i];
}

/* The memory events, in time order, with running totals per device. */
static void finish_memory(struct cupti_conv *c)
{
	struct addr_map m = { 0 };
	int64_t total[64] = { 0 };
	size_t i;
	uint32_t name = intern(c, "[memory]");

	if (!c->nmem)
		return;
	qsort(c->mem, c->nmem, sizeof *c->mem, cmp_mem);
	m.cap = 1;
	while (m.cap < 2 * c->nmem + 2)
		m.cap *= 2;
	m.addr = calloc(m.cap, sizeof *m.addr);
	m.bytes = calloc(m.cap, sizeof *m.bytes);
	for (i = 0; i < c->nmem; i++) {
		const struct cupti_pending_mem *p = &c->mem[i];
		struct trace_event e = { 0 };
		uint64_t *slot = addr_slot(&m, p->addr, p->alloc);
		uint32_t d = p->dev < 64 ? p->dev : 63;
		bool before = false;

		if (p->alloc) {
			total[d] += (int64_t)p->bytes;
			if (slot)
				*slot = p->bytes;
		} else if (slot && *slot) {
			total[d] -= (int64_t)*slot;
			*slot = 0;
		} else {
			before = true; /* allocated before the window: not in the total */
		}
		e.ts = p->ts;
		e.pid = (int32_t)p->dev;
		e.tid = TID_MEMORY;
		e.name = name;
		e.id = p->corr;
		e.cat = TRACE_CAT_GPU_MEMORY;
		e.ph = TRACE_PH_INSTANT;
		if (!trace_add_event(c->t, &e))
			break;
		c->records++;
		trace_arg_int(c->t, "Device Type", 1);
		trace_arg_int(c->t, "Device Id", p->dev);
		trace_arg_uint(c->t, "Addr", p->addr);
		trace_arg_int(c->t, TRACE_ARG_ALLOC_BYTES, p->alloc ? (int64_t)p->bytes : -(int64_t)p->bytes);
		trace_arg_int(c->t, TRACE_ARG_TOTAL_ALLOCATED, total[d]);
		/* What CUPTI sees is what the driver handed out, so it is both
		 * allocated and reserved (for PyTorch, its caching allocator's
		 * segments); TensorBoard's memory view requires both keys. */
		trace_arg_int(c->t, "Total Reserved", total[d]);
		trace_arg_str(c->t, "Memory Kind", memory_kind_name(p->kind),
			      strlen(memory_kind_name(p->kind)));
		trace_arg_uint(c->t, "correlation", p->corr);
		if (before)
			trace_arg_int(c->t, "allocated before the window", 1);
		note_track(c, p->dev, TID_MEMORY);
	}
	free(m.addr);
	free(m.bytes);
}

/* A range that can hold GPU work: its event index and its parent's. */
struct range_node {
	size_t ev;
	long parent;
};

static int cmp_range(const void *a, const void *b, void *ctx)
{
	const struct trace *t = ctx;
	const struct trace_event *x = &t->ev[((const struct range_node *)a)->ev];
	const struct trace_event *y = &t->ev[((const struct range_node *)b)->ev];

	if (x->tid != y->tid)
		return x->tid < y->tid ? -1 : 1;
	if (x->ts != y->ts)
		return x->ts < y->ts ? -1 : 1;
	return (x->dur < y->dur) - (x->dur > y->dur);
}

/* (external id, node) pairs sorted by id, to find a link's range. */
struct id_node {
	uint64_t id;
	long node;
};

static int cmp_id_node(const void *a, const void *b)
{
	const struct id_node *x = a, *y = b;

	return (x->id > y->id) - (x->id < y->id);
}

static long node_of(const struct id_node *ids, size_t n, uint64_t id)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (ids[mid].id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < n && ids[lo].id == id ? ids[lo].node : -1;
}

/* Final span of one (range node, track), accumulated over its subtree. */
struct span {
	long node;
	uint64_t track;
	int64_t start, end;
};

static void span_add(struct span **sp, size_t *n, size_t *cap, long node, uint64_t track,
		     int64_t start, int64_t end)
{
	size_t i;

	for (i = *n; i-- > 0 && i + 32 >= *n;)
		if ((*sp)[i].node == node && (*sp)[i].track == track) {
			if (start < (*sp)[i].start)
				(*sp)[i].start = start;
			if (end > (*sp)[i].end)
				(*sp)[i].end = end;
			return;
		}
	if (grow((void **)sp, cap, *n, sizeof **sp))
		return;
	(*sp)[*n].node = node;
	(*sp)[*n].track = track;
	(*sp)[*n].start = start;
	(*sp)[*n].end = end;
	(*n)++;
}

static int cmp_span(const void *a, const void *b)
{
	const struct span *x = a, *y = b;

	if (x->node != y->node)
		return x->node < y->node ? -1 : 1;
	if (x->track != y->track)
		return x->track < y->track ? -1 : 1;
	return (x->start > y->start) - (x->start < y->start);
}

/* gpu_user_annotation spans: each range with GPU work launched inside it
 * (directly, by its external id, or in a range or torch operator nested in
 * it: with profhost's observer, a kernel carries its operator's id) gets
 * one span per GPU track from its first work's start to its last work's
 * end; each step likewise, from the API calls made during it. Operators
 * get no span of their own (as Kineto writes them). */
static void finish_annotations(struct cupti_conv *c)
{
	struct trace *t = c->t;
	struct range_node *nodes = NULL;
	size_t nn = 0, capn = 0, i, k, nspans = 0, capspans = 0, nev = t->nev;
	long *stack = NULL, depth = 0;
	struct span *spans = NULL;
	struct id_node *ids = NULL;
	size_t nids = 0;

	if (!c->nlinks)
		return;
	for (i = 0; i < nev; i++) {
		const struct trace_event *e = &t->ev[i];

		if ((e->cat != TRACE_CAT_USER_ANNOTATION && e->cat != TRACE_CAT_CPU_OP) ||
		    e->ph != TRACE_PH_COMPLETE || (e->flags & TRACE_F_STEP) ||
		    e->pid != c->o.pid)
			continue;
		if (grow((void **)&nodes, &capn, nn, sizeof *nodes))
			goto out;
		nodes[nn].ev = i;
		nodes[nn].parent = -1;
		nn++;
	}
	qsort_r(nodes, nn, sizeof *nodes, cmp_range, t);
	stack = malloc((nn + 1) * sizeof *stack);
	if (nn && !stack)
		goto out;
	for (i = 0; i < nn; i++) {
		const struct trace_event *e = &t->ev[nodes[i].ev];

		while (depth > 0) {
			const struct trace_event *p = &t->ev[nodes[stack[depth - 1]].ev];

			if (p->tid == e->tid && e->ts >= p->ts && e->ts + e->dur <= p->ts + p->dur)
				break;
			depth--;
		}
		nodes[i].parent = depth > 0 ? stack[depth - 1] : -1;
		stack[depth++] = (long)i;
	}
	ids = malloc((nn + 1) * sizeof *ids);
	if (!ids)
		goto out;
	for (i = 0; i < nn; i++)
		if (t->ev[nodes[i].ev].id) {
			ids[nids].id = t->ev[nodes[i].ev].id;
			ids[nids++].node = (long)i;
		}
	qsort(ids, nids, sizeof *ids, cmp_id_node);
	for (k = 0; k < c->nlinks; k++) {
		const struct cupti_gpu_link *l = &c->links[k];
		long node = -1;

		if (l->key & STEP_BIT) {
			size_t s = (size_t)(l->key & ~STEP_BIT);

			span_add(&spans, &nspans, &capspans, -1 - (long)s, l->track, l->start,
				 l->end);
			continue;
		}
		node = node_of(ids, nids, l->key);
		for (; node >= 0; node = nodes[node].parent)
			if (t->ev[nodes[node].ev].cat == TRACE_CAT_USER_ANNOTATION)
				span_add(&spans, &nspans, &capspans, node, l->track,
					 l->start, l->end);
	}
	qsort(spans, nspans, sizeof *spans, cmp_span);
	for (k = 0; k < nspans; k++) {
		struct span *s = &spans[k];
		struct trace_event e = { 0 };

		/* Merge what the bounded look-back in span_add kept apart. */
		if (k + 1 < nspans && spans[k + 1].node == s->node &&
		    spans[k + 1].track == s->track) {
			if (s->start < spans[k + 1].start)
				spans[k + 1].start = s->start;
			if (s->end > spans[k + 1].end)
				spans[k + 1].end = s->end;
			continue;
		}
		if (s->node >= 0) {
			e.name = t->ev[nodes[s->node].ev].name;
			e.id = t->ev[nodes[s->node].ev].id;
		} else {
			char name[48];
			int n = snprintf(name, sizeof name, "ProfilerStep#%llu",
					 (unsigned long long)t->steps[-1 - s->node].step);

			e.name = trace_intern(t, name, (size_t)n);
		}
		e.ts = s->start;
		e.dur = s->end - s->start;
		e.pid = (int32_t)(s->track >> 32);
		e.tid = (int32_t)(uint32_t)s->track;
		e.cat = TRACE_CAT_GPU_USER_ANNOTATION;
		e.ph = TRACE_PH_COMPLETE;
		if (!trace_add_event(t, &e))
			break;
		if (e.id)
			trace_arg_uint(t, "External id", e.id);
	}
out:
	free(ids);
	free(nodes);
	free(stack);
	free(spans);
}

/* Names GPU processes ("GPU 0"), streams, and threads that made CUDA calls
 * but have no name yet. */
static void finish_names(struct cupti_conv *c)
{
	struct trace *t = c->t;
	char name[64];
	size_t i, j;
	unsigned d;

	for (d = 0; d < 64; d++) {
		if (!(c->devices_seen >> d & 1))
			continue;
		snprintf(name, sizeof name, "GPU %u", d);
		for (i = 0; c->o.devices && i < c->o.devices->n; i++)
			if (c->o.devices->dev[i].id == (int32_t)d)
				snprintf(name, sizeof name, "GPU %u (%s)", d,
					 c->o.devices->dev[i].name);
		trace_add_process(t, (int32_t)d, name, 0x10000 + (int32_t)d);
	}
	for (i = 0; i < c->ntracks; i++) {
		int32_t dev = (int32_t)(c->tracks[i] >> 32);
		int32_t tid = (int32_t)(uint32_t)c->tracks[i];

		if (tid == TID_MEMORY)
			snprintf(name, sizeof name, "memory");
		else if (tid == TID_CONTEXT_SYNC)
			snprintf(name, sizeof name, "context sync");
		else
			snprintf(name, sizeof name, "stream %d", (int)tid);
		trace_add_thread(t, dev, tid, name);
	}
	for (i = 0; i < c->napi_tids; i++) {
		int32_t tid = c->api_tids[i];
		bool known = false;

		for (j = 0; j < t->nthreads && !known; j++)
			known = t->threads[j].pid == c->o.pid && t->threads[j].tid == tid;
		if (!known) {
			char path[64];
			FILE *f;

			snprintf(path, sizeof path, "/proc/self/task/%d/comm", (int)tid);
			snprintf(name, sizeof name, "thread %d", (int)tid);
			f = fopen(path, "r");
			if (f) {
				if (fgets(name, sizeof name, f))
					name[strcspn(name, "\n")] = '\0';
				fclose(f);
			}
			trace_add_thread(t, c->o.pid, tid, name);
		}
	}
	for (i = 0; c->o.devices && i < c->o.devices->n; i++)
		trace_add_device(t, &c->o.devices->dev[i]);
}

void cupti_conv_finish(struct cupti_conv *c)
{
	finish_memory(c);
	finish_annotations(c);
	finish_names(c);
}

void cupti_conv_free(struct cupti_conv *c)
{
	bigalloc_free(c->map);
	free(c->mem);
	free(c->links);
	free(c->name_key);
	free(c->name_id);
	free(c->api_tids);
	free(c->api_ids[0]);
	free(c->api_ids[1]);
	memset(c, 0, sizeof *c);
}

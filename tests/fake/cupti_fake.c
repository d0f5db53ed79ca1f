/*
 * cupti_fake — a CUPTI that runs without a GPU (see cupti_fake.h).
 *
 * Built from the real CUDA 13 headers, so every record it writes has the
 * layout of the record the real library writes for that kind
 * (CUpti_ActivityKernel10, Memcpy6, Memset4, API, Memory4,
 * Synchronization2, ExternalCorrelation, Device5, Overhead3). The contract
 * it follows, from cupti_activity.h and cupti_callbacks.h:
 *   - records only for enabled kinds, written into buffers the client
 *     returns from its buffer-requested callback, honouring maxNumRecords;
 *     no buffer -> the record is dropped and counted
 *     (cuptiActivityGetNumDroppedRecords reads and resets the count);
 *   - a full buffer is handed back through the buffer-completed callback
 *     on the fake's own worker thread; cuptiActivityFlushAll delivers what
 *     is complete (flag 0) or everything, the partial buffer and
 *     unfinished GPU records (with zero timestamps) included (FORCED);
 *   - GPU records appear once their work has finished, with the
 *     correlation id of the API call that launched it;
 *   - an API record is preceded by one external correlation record per
 *     external kind whose per-thread stack is not empty;
 *   - subscribers get CUpti_CallbackData at API enter and exit for the
 *     callbacks they enabled, with the record's correlation id (and for
 *     kernel launches the symbol name and the launch's parameters: the
 *     stream handle of stream N is FAKE_STREAM_BASE + N, which
 *     cuptiGetStreamIdEx maps back to N; cuptiGetDeviceId maps a context
 *     to its device);
 *   - one subscriber at a time; timestamps from the registered callback;
 *   - DEVICE records are written when the context is created (the first
 *     CUDA call, after the injection) if the kind is on then; enabling it
 *     later writes none;
 *   - the runtime registers its teardown with atexit after the first
 *     CUDA call (as libcudart does): it completes the buffers (as a
 *     context's destruction does), and a CUPTI call after it aborts the
 *     process with a message, as the real library crashes there;
 *   - a graph launched while CUPTI was subscribed fails its later
 *     launches once cuptiFinalize ran (CUDA_ERROR_LAUNCH_FAILED, as seen
 *     with CUDA 13.0 on an H200).
 * The scenario functions (cupti_fake_*) play the CUDA runtime and driver.
 *
 * Locking: `fk.lock` guards all state. It is held while the client's
 * buffer-requested and timestamp callbacks run (they must not call back
 * into CUPTI, as with the real library), never while the subscriber's
 * callback or the buffer-completed callback runs.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cupti.h>

#include "cupti_fake.h"

#define FAKE_EXPORT __attribute__((visibility("default")))

/* Generated from cupti_runtime_cbid.h, cupti_driver_cbid.h, cupti_result.h
 * (fake_names.c, see CMakeLists.txt). */
extern const char *const fake_runtime_names[];
extern const unsigned fake_runtime_count;
extern const char *const fake_driver_names[];
extern const unsigned fake_driver_count;
const char *fake_result_name(int code);
void fake_nvtx_write(FILE *f); /* cupti_fake_nvtx.c */

#define FAKE_MAX_DEVICES 8
#define FAKE_EXT_DEPTH 64
#define FAKE_LAUNCH_NS 2000   /* a launch call's own cost */
#define FAKE_LATENCY_NS 1000  /* enqueue -> start on an idle stream */
#define FAKE_STREAM_BASE 0x50000u /* stream N's handle */
#define FAKE_CONTEXT_BASE 0x1000u /* device D's context: BASE + D + 1 */

enum fake_mode { MODE_OK, MODE_NO_DRIVER, MODE_NO_PRIV, MODE_MULTI, MODE_OLD };

/* Any record the fake writes. */
union fake_rec {
	CUpti_Activity a;
	CUpti_ActivityKernel10 k;
	CUpti_ActivityMemcpy6 mc;
	CUpti_ActivityMemset4 ms;
	CUpti_ActivityAPI api;
	CUpti_ActivityMemory4 mem;
	CUpti_ActivitySynchronization2 sync;
	CUpti_ActivityExternalCorrelation ext;
	CUpti_ActivityDevice5 dev;
	CUpti_ActivityOverhead3 ov;
};

/* GPU work whose record is written when it has finished. */
struct pending {
	uint64_t end;
	union fake_rec r;
};

struct stream {
	uint32_t dev, id;
	uint64_t free_at;
};

struct alloc {
	uint64_t addr, bytes;
	uint32_t dev;
};

struct fullbuf {
	uint8_t *buf;
	size_t size, valid;
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;       /* worker: queue not empty; flush: idle */
	enum fake_mode mode;
	unsigned ndev;
	/* client callbacks */
	CUpti_TimestampCallbackFunc ts;
	CUpti_BuffersCallbackRequestFunc req;
	CUpti_BuffersCallbackCompleteFunc done;
	int subscribed;
	CUpti_CallbackFunc cb;
	void *cb_ud;
	uint8_t cb_on[CUPTI_CB_DOMAIN_SIZE][1024];
	/* activity */
	uint8_t kind_on[CUPTI_ACTIVITY_KIND_COUNT];
	int latency_ts;
	CUpti_ActivityThreadIdType tid_type;
	uint32_t corr;
	size_t dropped;
	/* the buffer being filled */
	uint8_t *cur;
	size_t cur_size, cur_used, cur_max, cur_count;
	/* full buffers waiting for the worker; deliveries in progress */
	struct fullbuf *q;
	size_t nq, capq;
	int in_flight;
	int worker;
	/* the simulated GPU */
	struct pending *pend;
	size_t npend, cappend;
	struct stream streams[64];
	size_t nstreams;
	struct alloc *allocs;
	size_t nallocs, capallocs;
	uint64_t next_addr[FAKE_MAX_DEVICES];
	struct cupti_fake_stats st;
} fk = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.cond = PTHREAD_COND_INITIALIZER,
};

/* The first CUDA call made the context (ctx_made); the runtime's exit
 * handler ran (torn_down); a graph launched while CUPTI was subscribed
 * (graph_seen) and cuptiFinalize since (poisoned). */
static _Atomic int torn_down, graph_seen, poisoned, ctx_made;

static __thread uint32_t tl_device;
static __thread uint64_t tl_ext[CUPTI_EXTERNAL_CORRELATION_KIND_SIZE][FAKE_EXT_DEPTH];
static __thread unsigned tl_ext_depth[CUPTI_EXTERNAL_CORRELATION_KIND_SIZE];

static pthread_once_t mode_once = PTHREAD_ONCE_INIT;
static pthread_once_t driver_once = PTHREAD_ONCE_INIT;

/* ------------------------------------------------------------ basics */

static void read_mode(void)
{
	const char *m = getenv("CUPTI_FAKE_MODE");
	const char *d = getenv("CUPTI_FAKE_DEVICES");

	fk.mode = MODE_OK;
	if (m && !strcmp(m, "no_driver"))
		fk.mode = MODE_NO_DRIVER;
	else if (m && !strcmp(m, "insufficient_privileges"))
		fk.mode = MODE_NO_PRIV;
	else if (m && !strcmp(m, "multiple_subscribers"))
		fk.mode = MODE_MULTI;
	else if (m && !strcmp(m, "old_version"))
		fk.mode = MODE_OLD;
	else if (m && *m)
		fprintf(stderr, "cupti-fake: unknown CUPTI_FAKE_MODE '%s'\n", m);
	fk.ndev = d ? (unsigned)atoi(d) : 1;
	if (fk.ndev < 1 || fk.ndev > FAKE_MAX_DEVICES)
		fk.ndev = 1;
}

static enum fake_mode mode(void)
{
	pthread_once(&mode_once, read_mode);
	return fk.mode;
}

static uint64_t realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The clock of every record: the client's callback, else CLOCK_REALTIME
 * (the real CUPTI's default on Linux). */
static uint64_t now(void)
{
	CUpti_TimestampCallbackFunc f = fk.ts;

	return f ? f() : realtime_ns();
}

static uint32_t thread_id(void)
{
	if (fk.tid_type == CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM)
		return (uint32_t)syscall(SYS_gettid);
	return (uint32_t)(uintptr_t)pthread_self();
}

static void wait_until(uint64_t t)
{
	for (;;) {
		uint64_t n = now();
		struct timespec ts;

		if (n >= t)
			return;
		n = t - n;
		if (n > 1000000)
			n = 1000000;
		ts.tv_sec = 0;
		ts.tv_nsec = (long)n;
		nanosleep(&ts, NULL);
	}
}

static void spin_ns(uint64_t ns)
{
	uint64_t end = now() + ns;

	while (now() < end)
		;
}

static size_t kind_size(CUpti_ActivityKind k)
{
	switch (k) {
	case CUPTI_ACTIVITY_KIND_KERNEL:
	case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
		return sizeof(CUpti_ActivityKernel10);
	case CUPTI_ACTIVITY_KIND_MEMCPY:
		return sizeof(CUpti_ActivityMemcpy6);
	case CUPTI_ACTIVITY_KIND_MEMSET:
		return sizeof(CUpti_ActivityMemset4);
	case CUPTI_ACTIVITY_KIND_RUNTIME:
	case CUPTI_ACTIVITY_KIND_DRIVER:
	case CUPTI_ACTIVITY_KIND_INTERNAL_LAUNCH_API:
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

static int kind_is_on(CUpti_ActivityKind k)
{
	if (k == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
		return fk.kind_on[k] || fk.kind_on[CUPTI_ACTIVITY_KIND_KERNEL];
	return (unsigned)k < CUPTI_ACTIVITY_KIND_COUNT && fk.kind_on[k];
}

/* ------------------------------------------------------------ buffers */

static void *worker_main(void *arg);

/* Queues the buffer being filled for delivery. Lock held. */
static void retire_buffer(void)
{
	if (!fk.cur)
		return;
	if (fk.nq == fk.capq) {
		size_t cap = fk.capq ? 2 * fk.capq : 16;
		struct fullbuf *q = realloc(fk.q, cap * sizeof *q);
		if (!q)
			abort();
		fk.q = q;
		fk.capq = cap;
	}
	fk.q[fk.nq].buf = fk.cur;
	fk.q[fk.nq].size = fk.cur_size;
	fk.q[fk.nq].valid = fk.cur_used;
	fk.nq++;
	fk.cur = NULL;
	if (!fk.worker) {
		pthread_t t;
		pthread_attr_t a;

		pthread_attr_init(&a);
		pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&t, &a, worker_main, NULL) == 0)
			fk.worker = 1;
		pthread_attr_destroy(&a);
	}
	pthread_cond_broadcast(&fk.cond);
}

/* Asks the client for a buffer. Lock held. Returns 0 or -1 (none). */
static int request_buffer(size_t need)
{
	uint8_t *b = NULL;
	size_t size = 0, max = 0;
	uint64_t t0 = now();

	if (!fk.req)
		return -1;
	fk.req(&b, &size, &max);
	if (!b || size < need || ((uintptr_t)b & 7)) {
		fk.st.buffers_refused++;
		return -1;
	}
	fk.st.buffers_requested++;
	fk.cur = b;
	fk.cur_size = size;
	fk.cur_used = 0;
	fk.cur_max = max;
	fk.cur_count = 0;
	if (kind_is_on(CUPTI_ACTIVITY_KIND_OVERHEAD) &&
	    size >= need + sizeof(CUpti_ActivityOverhead3)) {
		CUpti_ActivityOverhead3 ov;

		memset(&ov, 0, sizeof ov);
		ov.kind = CUPTI_ACTIVITY_KIND_OVERHEAD;
		ov.overheadKind = CUPTI_ACTIVITY_OVERHEAD_ACTIVITY_BUFFER_REQUEST;
		ov.objectKind = CUPTI_ACTIVITY_OBJECT_THREAD;
		ov.objectId.pt.processId = (uint32_t)getpid();
		ov.objectId.pt.threadId = thread_id();
		ov.start = t0;
		ov.end = now();
		memcpy(fk.cur, &ov, sizeof ov);
		fk.cur_used = sizeof ov;
		fk.cur_count = 1;
		fk.st.records++;
	}
	return 0;
}

/* Writes one record into the client's buffer, asking for a buffer when the
 * current one is full or missing; drops and counts it when there is none.
 * Lock held. */
static void emit(const union fake_rec *r)
{
	size_t size = (kind_size(r->a.kind) + 7) & ~(size_t)7;

	if (fk.cur && (fk.cur_used + size > fk.cur_size ||
		       (fk.cur_max && fk.cur_count >= fk.cur_max)))
		retire_buffer();
	if (!fk.cur && request_buffer(size) != 0) {
		fk.dropped++;
		fk.st.dropped++;
		return;
	}
	memcpy(fk.cur + fk.cur_used, r, kind_size(r->a.kind));
	fk.cur_used += size;
	fk.cur_count++;
	fk.st.records++;
}

/* Hands queued buffers to the client, one at a time. */
static void *worker_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&fk.lock);
	for (;;) {
		struct fullbuf b;
		CUpti_BuffersCallbackCompleteFunc done;

		while (fk.nq == 0)
			pthread_cond_wait(&fk.cond, &fk.lock);
		b = fk.q[0];
		memmove(fk.q, fk.q + 1, (fk.nq - 1) * sizeof *fk.q);
		fk.nq--;
		fk.in_flight++;
		done = fk.done;
		pthread_mutex_unlock(&fk.lock);
		if (done)
			done(NULL, 0, b.buf, b.size, b.valid);
		pthread_mutex_lock(&fk.lock);
		fk.st.buffers_completed++;
		fk.in_flight--;
		pthread_cond_broadcast(&fk.cond);
	}
	return NULL;
}

/* ------------------------------------------------------------ the GPU */

/* Writes the records of GPU work that has finished by `t` (all of it when
 * `force`, unfinished work with zero timestamps). Lock held. */
static void retire_work(uint64_t t, int force)
{
	size_t i = 0;

	while (i < fk.npend) {
		struct pending *p = &fk.pend[i];

		if (p->end > t && !force) {
			i++;
			continue;
		}
		if (p->end > t) { /* incomplete: no timing yet */
			switch (p->r.a.kind) {
			case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
			case CUPTI_ACTIVITY_KIND_KERNEL:
				p->r.k.start = p->r.k.end = 0;
				p->r.k.completed = 0;
				break;
			case CUPTI_ACTIVITY_KIND_MEMCPY:
				p->r.mc.start = p->r.mc.end = 0;
				break;
			case CUPTI_ACTIVITY_KIND_MEMSET:
				p->r.ms.start = p->r.ms.end = 0;
				break;
			default:
				break;
			}
		}
		emit(&p->r);
		fk.pend[i] = fk.pend[--fk.npend];
	}
}

/* Queues GPU work finishing at `end`, if its kind is enabled now (a kind
 * enabled when the work was launched gets its record). Lock held. */
static void add_pending(uint64_t end, const union fake_rec *r)
{
	if (!kind_is_on(r->a.kind))
		return;
	if (fk.npend == fk.cappend) {
		size_t cap = fk.cappend ? 2 * fk.cappend : 64;
		struct pending *p = realloc(fk.pend, cap * sizeof *p);
		if (!p)
			abort();
		fk.pend = p;
		fk.cappend = cap;
	}
	fk.pend[fk.npend].end = end;
	fk.pend[fk.npend].r = *r;
	fk.npend++;
}

static struct stream *stream_get(uint32_t dev, uint32_t id)
{
	size_t i;

	for (i = 0; i < fk.nstreams; i++)
		if (fk.streams[i].dev == dev && fk.streams[i].id == id)
			return &fk.streams[i];
	if (fk.nstreams == sizeof fk.streams / sizeof fk.streams[0])
		return &fk.streams[0];
	fk.streams[fk.nstreams].dev = dev;
	fk.streams[fk.nstreams].id = id;
	fk.streams[fk.nstreams].free_at = 0;
	return &fk.streams[fk.nstreams++];
}

/* Reserves `dur` ns on a stream for work enqueued at `t`; returns its
 * start. Lock held. */
static uint64_t stream_run(uint32_t dev, uint32_t id, uint64_t t, uint64_t dur)
{
	struct stream *s = stream_get(dev, id);
	uint64_t start = t + FAKE_LATENCY_NS;

	if (s->free_at > start)
		start = s->free_at;
	s->free_at = start + dur;
	return start;
}

static uint32_t context_of(uint32_t dev)
{
	return dev + 1;
}

/* The properties of fake device `id`, as its DEVICE record and the
 * driver's queries (cuDeviceGet*) give them. */
static void fake_device(CUpti_ActivityDevice5 *d, unsigned id)
{
	memset(d, 0, sizeof *d);
	d->kind = CUPTI_ACTIVITY_KIND_DEVICE;
	d->id = id;
	d->name = "Fake GPU (CUPTI fake)";
	d->globalMemorySize = 80ull << 30;
	d->globalMemoryBandwidth = 3350000000ull; /* KB/s */
	d->computeCapabilityMajor = 9;
	d->computeCapabilityMinor = 0;
	d->numMultiprocessors = 132;
	d->numThreadsPerWarp = 32;
	d->maxThreadsPerBlock = 1024;
	d->maxWarpsPerMultiprocessor = 64;
	d->maxBlocksPerMultiprocessor = 32;
	d->maxRegistersPerBlock = 65536;
	d->maxRegistersPerMultiprocessor = 65536;
	d->maxSharedMemoryPerBlock = 49152;
	d->maxSharedMemoryPerMultiprocessor = 233472;
	d->l2CacheSize = 50u << 20;
	d->coreClockRate = 1980000;
	d->numMemcpyEngines = 4;
	d->maxBlockDimX = d->maxBlockDimY = 1024;
	d->maxBlockDimZ = 64;
	d->maxGridDimX = 2147483647u;
	d->maxGridDimY = d->maxGridDimZ = 65535;
	d->isCudaVisible = 1;
}

/* Writes one Device5 record per device. Lock held. */
static void emit_devices(void)
{
	unsigned d;

	for (d = 0; d < fk.ndev; d++) {
		union fake_rec r;

		memset(&r, 0, sizeof r);
		fake_device(&r.dev, d);
		emit(&r);
	}
}

/* ------------------------------------------------------------ API calls */

struct call {
	CUpti_CallbackDomain dom;
	uint32_t cbid;
	const char *symbol;
	const void *params;   /* functionParams (NULL: none given) */
	uint32_t corr;
	uint64_t start, end;
	uint64_t cdata;
	int cb;
};

static const char *cbid_name(CUpti_CallbackDomain dom, uint32_t cbid)
{
	if (dom == CUPTI_CB_DOMAIN_RUNTIME_API && cbid < fake_runtime_count)
		return fake_runtime_names[cbid];
	if (dom == CUPTI_CB_DOMAIN_DRIVER_API && cbid < fake_driver_count)
		return fake_driver_names[cbid];
	return NULL;
}

static void callback(struct call *c, CUpti_ApiCallbackSite site)
{
	CUpti_CallbackData d;
	CUpti_CallbackFunc f;
	void *ud;
	int ret = 0;

	pthread_mutex_lock(&fk.lock);
	f = fk.subscribed && fk.cb_on[c->dom][c->cbid] ? fk.cb : NULL;
	ud = fk.cb_ud;
	pthread_mutex_unlock(&fk.lock);
	if (!f)
		return;
	memset(&d, 0, sizeof d);
	d.callbackSite = site;
	d.functionName = cbid_name(c->dom, c->cbid);
	d.functionParams = c->params;
	d.functionReturnValue = site == CUPTI_API_EXIT ? &ret : NULL;
	d.symbolName = c->symbol;
	d.context = (CUcontext)(uintptr_t)(FAKE_CONTEXT_BASE + context_of(tl_device));
	d.contextUid = context_of(tl_device);
	d.correlationData = &c->cdata;
	d.correlationId = c->corr;
	f(ud, c->dom, c->cbid, &d);
}

static void load_injection(void)
{
	const char *path = getenv("CUDA_INJECTION64_PATH");
	void *h;
	int (*init)(void);

	if (mode() == MODE_NO_DRIVER || !path || !*path)
		return;
	h = dlopen(path, RTLD_NOW);
	if (!h) {
		fprintf(stderr, "cupti-fake: cannot load CUDA_INJECTION64_PATH: %s\n",
			dlerror());
		return;
	}
	init = (int (*)(void))dlsym(h, "InitializeInjection");
	if (!init) {
		fprintf(stderr, "cupti-fake: %s has no InitializeInjection\n", path);
		return;
	}
	pthread_mutex_lock(&fk.lock);
	fk.st.injections++;
	pthread_mutex_unlock(&fk.lock);
	init();
}

/* A CUPTI entry point called after the runtime's teardown: the real
 * library crashes there. */
static void check_alive(const char *fn)
{
	if (!atomic_load(&torn_down))
		return;
	fprintf(stderr, "cupti-fake: %s called after the CUDA runtime's exit handler "
		"tore the driver down (a real libcupti crashes there)\n", fn);
	abort();
}

/* The runtime's exit handler: contexts are destroyed, which completes the
 * buffers CUPTI holds; then the driver is gone. */
static void runtime_teardown(void)
{
	cuptiActivityFlushAll(0);
	atomic_store(&torn_down, 1);
}

/* cuInit and the primary context: the injection, then the context
 * (DEVICE records if the kind is on now), then the runtime's exit
 * handler. */
static void driver_init(void)
{
	load_injection();
	if (mode() == MODE_NO_DRIVER)
		return;
	pthread_mutex_lock(&fk.lock);
	atomic_store(&ctx_made, 1);
	if (fk.kind_on[CUPTI_ACTIVITY_KIND_DEVICE])
		emit_devices();
	pthread_mutex_unlock(&fk.lock);
	atexit(runtime_teardown);
}

FAKE_EXPORT int cupti_fake_init(void)
{
	pthread_once(&driver_once, driver_init);
	return mode() == MODE_NO_DRIVER ? -1 : 0;
}

FAKE_EXPORT void cupti_fake_set_device(uint32_t device)
{
	mode();
	tl_device = device < fk.ndev ? device : 0;
}

/* Starts an API call: a correlation id, the enter callback. Returns -1
 * without a driver. */
static int call_begin(struct call *c, CUpti_CallbackDomain dom, uint32_t cbid,
		      const char *symbol, const void *params)
{
	if (cupti_fake_init() != 0)
		return -1;
	memset(c, 0, sizeof *c);
	c->dom = dom;
	c->cbid = cbid;
	c->symbol = symbol;
	c->params = params;
	pthread_mutex_lock(&fk.lock);
	c->start = now();
	retire_work(c->start, 0);
	c->corr = ++fk.corr;
	pthread_mutex_unlock(&fk.lock);
	callback(c, CUPTI_API_ENTER);
	return 0;
}

/* Ends an API call: the exit callback, then the external correlation
 * records and the API record of enabled kinds. */
static void call_end(struct call *c)
{
	CUpti_ActivityKind kind = c->dom == CUPTI_CB_DOMAIN_RUNTIME_API
		? CUPTI_ACTIVITY_KIND_RUNTIME : CUPTI_ACTIVITY_KIND_DRIVER;
	union fake_rec r;
	unsigned k;

	pthread_mutex_lock(&fk.lock);
	c->end = now();
	pthread_mutex_unlock(&fk.lock);
	callback(c, CUPTI_API_EXIT);
	pthread_mutex_lock(&fk.lock);
	if (kind_is_on(kind)) {
		if (kind_is_on(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION))
			for (k = 0; k < CUPTI_EXTERNAL_CORRELATION_KIND_SIZE; k++) {
				if (!tl_ext_depth[k])
					continue;
				memset(&r, 0, sizeof r);
				r.ext.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
				r.ext.externalKind = (CUpti_ExternalCorrelationKind)k;
				r.ext.externalId = tl_ext[k][tl_ext_depth[k] - 1];
				r.ext.correlationId = c->corr;
				emit(&r);
			}
		memset(&r, 0, sizeof r);
		r.api.kind = kind;
		r.api.cbid = c->cbid;
		r.api.start = c->start;
		r.api.end = c->end;
		r.api.processId = (uint32_t)getpid();
		r.api.threadId = thread_id();
		r.api.correlationId = c->corr;
		r.api.returnValue = 0;
		emit(&r);
	}
	pthread_mutex_unlock(&fk.lock);
}

/* Queues kernel `name` for the call `c`. Lock held. */
static void enqueue_kernel(const struct call *c, const char *name, uint32_t stream,
			   uint64_t t, uint64_t dur, uint32_t graph, uint64_t node)
{
	union fake_rec r;
	uint32_t dev = tl_device;

	memset(&r, 0, sizeof r);
	r.k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
	r.k.registersPerThread = 32;
	r.k.start = stream_run(dev, stream, t, dur);
	r.k.end = r.k.start + dur;
	r.k.completed = r.k.end;
	r.k.deviceId = dev;
	r.k.contextId = context_of(dev);
	r.k.streamId = stream;
	r.k.gridX = 128;
	r.k.gridY = r.k.gridZ = 1;
	r.k.blockX = 256;
	r.k.blockY = r.k.blockZ = 1;
	r.k.staticSharedMemory = 1024;
	r.k.dynamicSharedMemory = 4096;
	r.k.correlationId = c->corr;
	r.k.gridId = (int64_t)c->corr;
	r.k.name = name;
	r.k.queued = fk.latency_ts ? t : CUPTI_TIMESTAMP_UNKNOWN;
	r.k.submitted = fk.latency_ts ? t + FAKE_LATENCY_NS / 2 : CUPTI_TIMESTAMP_UNKNOWN;
	r.k.launchType = CUPTI_ACTIVITY_LAUNCH_TYPE_REGULAR;
	r.k.graphId = graph;
	r.k.graphNodeId = node;
	r.k.channelType = CUPTI_CHANNEL_TYPE_COMPUTE;
	add_pending(r.k.end, &r);
}

/* Interned kernel names: CUPTI's name pointers stay valid for the life of
 * the process. */
static const char *intern(const char *s)
{
	static char **names;
	static size_t n, cap;
	size_t i;

	for (i = 0; i < n; i++)
		if (!strcmp(names[i], s))
			return names[i];
	if (n == cap) {
		size_t c2 = cap ? 2 * cap : 32;
		char **p = realloc(names, c2 * sizeof *p);
		if (!p)
			abort();
		names = p;
		cap = c2;
	}
	names[n] = strdup(s);
	if (!names[n])
		abort();
	return names[n++];
}

static uint32_t launch(CUpti_CallbackDomain dom, uint32_t cbid, const char *name,
		       uint32_t stream, uint32_t dur_us)
{
	struct call c;
	cudaLaunchKernel_v7000_params rt;
	cuLaunchKernel_params drv;
	const void *params;

	memset(&rt, 0, sizeof rt);
	memset(&drv, 0, sizeof drv);
	rt.stream = (cudaStream_t)(uintptr_t)(FAKE_STREAM_BASE + stream);
	drv.hStream = (CUstream)(uintptr_t)(FAKE_STREAM_BASE + stream);
	params = dom == CUPTI_CB_DOMAIN_RUNTIME_API ? (const void *)&rt : (const void *)&drv;
	if (call_begin(&c, dom, cbid, name, params) != 0)
		return 0;
	spin_ns(FAKE_LAUNCH_NS);
	pthread_mutex_lock(&fk.lock);
	enqueue_kernel(&c, intern(name), stream, now(), (uint64_t)dur_us * 1000, 0, 0);
	pthread_mutex_unlock(&fk.lock);
	call_end(&c);
	return c.corr;
}

FAKE_EXPORT uint32_t cupti_fake_launch(const char *name, uint32_t stream,
				       uint32_t dur_us)
{
	return launch(CUPTI_CB_DOMAIN_RUNTIME_API,
		      CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, name, stream,
		      dur_us);
}

FAKE_EXPORT uint32_t cupti_fake_launch_driver(const char *name, uint32_t stream,
					      uint32_t dur_us)
{
	return launch(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
		      name, stream, dur_us);
}

FAKE_EXPORT uint32_t cupti_fake_graph_launch(uint32_t stream, unsigned n,
					     const char *const *names, uint32_t dur_us)
{
	struct call c;
	unsigned i;
	uint64_t t;

	if (atomic_load(&poisoned))
		return CUPTI_FAKE_LAUNCH_FAILED;
	if (call_begin(&c, CUPTI_CB_DOMAIN_RUNTIME_API,
		       CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000, NULL, NULL) != 0)
		return 0;
	spin_ns(FAKE_LAUNCH_NS);
	pthread_mutex_lock(&fk.lock);
	if (fk.subscribed)
		atomic_store(&graph_seen, 1);
	t = now();
	for (i = 0; i < n; i++)
		enqueue_kernel(&c, intern(names[i]), stream, t, (uint64_t)dur_us * 1000,
			       7, i + 1);
	pthread_mutex_unlock(&fk.lock);
	call_end(&c);
	return c.corr;
}

FAKE_EXPORT uint32_t cupti_fake_memcpy(enum cupti_fake_copy kind, uint64_t bytes,
				       uint32_t stream, uint32_t dur_us, int async)
{
	struct call c;
	union fake_rec r;
	uint32_t dev = tl_device;

	if (call_begin(&c, CUPTI_CB_DOMAIN_RUNTIME_API,
		       async ? CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020
			     : CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020, NULL, NULL) != 0)
		return 0;
	memset(&r, 0, sizeof r);
	pthread_mutex_lock(&fk.lock);
	r.mc.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
	r.mc.copyKind = (uint8_t)kind;
	r.mc.srcKind = kind == CUPTI_FAKE_HTOD || kind == CUPTI_FAKE_HTOH
		? CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE : CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
	r.mc.dstKind = kind == CUPTI_FAKE_DTOH || kind == CUPTI_FAKE_HTOH
		? CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE : CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
	r.mc.flags = async ? CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC : 0;
	r.mc.bytes = bytes;
	r.mc.start = stream_run(dev, stream, now(), (uint64_t)dur_us * 1000);
	r.mc.end = r.mc.start + (uint64_t)dur_us * 1000;
	r.mc.deviceId = dev;
	r.mc.contextId = context_of(dev);
	r.mc.streamId = stream;
	r.mc.correlationId = c.corr;
	r.mc.runtimeCorrelationId = c.corr;
	r.mc.channelType = CUPTI_CHANNEL_TYPE_ASYNC_MEMCPY;
	r.mc.copyCount = 1;
	add_pending(r.mc.end, &r);
	pthread_mutex_unlock(&fk.lock);
	if (!async)
		wait_until(r.mc.end);
	call_end(&c);
	return c.corr;
}

FAKE_EXPORT uint32_t cupti_fake_memset(uint64_t bytes, uint32_t stream, uint32_t dur_us)
{
	struct call c;
	union fake_rec r;
	uint32_t dev = tl_device;

	if (call_begin(&c, CUPTI_CB_DOMAIN_RUNTIME_API,
		       CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020, NULL, NULL) != 0)
		return 0;
	memset(&r, 0, sizeof r);
	pthread_mutex_lock(&fk.lock);
	r.ms.kind = CUPTI_ACTIVITY_KIND_MEMSET;
	r.ms.value = 0;
	r.ms.bytes = bytes;
	r.ms.start = stream_run(dev, stream, now(), (uint64_t)dur_us * 1000);
	r.ms.end = r.ms.start + (uint64_t)dur_us * 1000;
	r.ms.deviceId = dev;
	r.ms.contextId = context_of(dev);
	r.ms.streamId = stream;
	r.ms.correlationId = c.corr;
	r.ms.flags = CUPTI_ACTIVITY_FLAG_MEMSET_ASYNC;
	r.ms.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
	r.ms.channelType = CUPTI_CHANNEL_TYPE_ASYNC_MEMCPY;
	add_pending(r.ms.end, &r);
	pthread_mutex_unlock(&fk.lock);
	call_end(&c);
	return c.corr;
}

/* Writes a MEMORY2 record for call `c`. Lock held. */
static void memory_record(const struct call *c, CUpti_ActivityMemoryOperationType op,
			  uint64_t addr, uint64_t bytes, uint32_t dev)
{
	union fake_rec r;

	if (!kind_is_on(CUPTI_ACTIVITY_KIND_MEMORY2))
		return;
	memset(&r, 0, sizeof r);
	r.mem.kind = CUPTI_ACTIVITY_KIND_MEMORY2;
	r.mem.memoryOperationType = op;
	r.mem.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
	r.mem.correlationId = c->corr;
	r.mem.address = addr;
	r.mem.bytes = bytes;
	r.mem.timestamp = now();
	r.mem.processId = (uint32_t)getpid();
	r.mem.deviceId = dev;
	r.mem.contextId = context_of(dev);
	r.mem.streamId = 0;
	r.mem.isAsync = 0;
	r.mem.memoryPoolConfig.memoryPoolType = CUPTI_ACTIVITY_MEMORY_POOL_TYPE_INVALID;
	emit(&r);
}

FAKE_EXPORT uint64_t cupti_fake_malloc(uint64_t bytes)
{
	struct call c;
	uint64_t addr;
	uint32_t dev = tl_device;

	if (call_begin(&c, CUPTI_CB_DOMAIN_RUNTIME_API,
		       CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, NULL, NULL) != 0)
		return 0;
	pthread_mutex_lock(&fk.lock);
	if (!fk.next_addr[dev])
		fk.next_addr[dev] = 0x7f0000000000ull + ((uint64_t)dev << 40);
	addr = fk.next_addr[dev];
	fk.next_addr[dev] += (bytes + 511) & ~511ull;
	if (fk.nallocs == fk.capallocs) {
		size_t cap = fk.capallocs ? 2 * fk.capallocs : 64;
		struct alloc *p = realloc(fk.allocs, cap * sizeof *p);
		if (!p)
			abort();
		fk.allocs = p;
		fk.capallocs = cap;
	}
	fk.allocs[fk.nallocs].addr = addr;
	fk.allocs[fk.nallocs].bytes = bytes;
	fk.allocs[fk.nallocs].dev = dev;
	fk.nallocs++;
	memory_record(&c, CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, addr, bytes, dev);
	pthread_mutex_unlock(&fk.lock);
	call_end(&c);
	return addr;
}

FAKE_EXPORT void cupti_fake_free(uint64_t address)
{
	struct call c;
	size_t i;

	if (call_begin(&c, CUPTI_CB_DOMAIN_RUNTIME_API,
		       CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020, NULL, NULL) != 0)
		return;
	pthread_mutex_lock(&fk.lock);
	for (i = 0; i < fk.nallocs; i++)
		if (fk.allocs[i].addr == address) {
			memory_record(&c, CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE,
				      address, fk.allocs[i].bytes, fk.allocs[i].dev);
			fk.allocs[i] = fk.allocs[--fk.nallocs];
			break;
		}
	pthread_mutex_unlock(&fk.lock);
	call_end(&c);
}

/* A synchronization call waiting for stream `stream` (UINT32_MAX: every
 * stream of the device). */
static uint32_t synchronize(uint32_t cbid, uint32_t stream)
{
	struct call c;
	union fake_rec r;
	uint64_t until = 0;
	uint32_t dev = tl_device;
	size_t i;

	if (call_begin(&c, CUPTI_CB_DOMAIN_RUNTIME_API, cbid, NULL, NULL) != 0)
		return 0;
	pthread_mutex_lock(&fk.lock);
	for (i = 0; i < fk.nstreams; i++)
		if (fk.streams[i].dev == dev &&
		    (stream == UINT32_MAX || fk.streams[i].id == stream) &&
		    fk.streams[i].free_at > until)
			until = fk.streams[i].free_at;
	pthread_mutex_unlock(&fk.lock);
	wait_until(until);
	pthread_mutex_lock(&fk.lock);
	if (kind_is_on(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION)) {
		memset(&r, 0, sizeof r);
		r.sync.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
		r.sync.type = stream == UINT32_MAX
			? CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE
			: CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE;
		r.sync.start = c.start;
		r.sync.end = now();
		r.sync.correlationId = c.corr;
		r.sync.contextId = context_of(dev);
		r.sync.streamId = stream == UINT32_MAX ? CUPTI_SYNCHRONIZATION_INVALID_VALUE
						       : stream;
		r.sync.cudaEventId = CUPTI_SYNCHRONIZATION_INVALID_VALUE;
		r.sync.cudaEventSyncId = CUPTI_SYNCHRONIZATION_INVALID_VALUE;
		emit(&r);
	}
	retire_work(now(), 0);
	pthread_mutex_unlock(&fk.lock);
	call_end(&c);
	return c.corr;
}

FAKE_EXPORT uint32_t cupti_fake_sync_stream(uint32_t stream)
{
	return synchronize(CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020, stream);
}

FAKE_EXPORT uint32_t cupti_fake_sync_device(void)
{
	return synchronize(CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020,
			   UINT32_MAX);
}

FAKE_EXPORT uint64_t cupti_fake_replay(uint64_t n, uint32_t kernel_ns)
{
	union fake_rec api, k;
	uint64_t t, i, before;
	const char *name;

	if (cupti_fake_init() != 0)
		return 0;
	memset(&api, 0, sizeof api);
	memset(&k, 0, sizeof k);
	api.api.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
	api.api.cbid = CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000;
	api.api.processId = (uint32_t)getpid();
	k.k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
	k.k.registersPerThread = 32;
	k.k.contextId = 1;
	k.k.streamId = 7;
	k.k.gridX = 128;
	k.k.gridY = k.k.gridZ = 1;
	k.k.blockX = 256;
	k.k.blockY = k.k.blockZ = 1;
	k.k.launchType = CUPTI_ACTIVITY_LAUNCH_TYPE_REGULAR;
	k.k.channelType = CUPTI_CHANNEL_TYPE_COMPUTE;
	name = intern("replay_kernel");
	pthread_mutex_lock(&fk.lock);
	api.api.threadId = thread_id();
	before = fk.st.records;
	t = now();
	for (i = 0; i < n; i++) {
		uint32_t corr = ++fk.corr;

		if (kind_is_on(CUPTI_ACTIVITY_KIND_RUNTIME)) {
			api.api.start = t;
			api.api.end = t + 1000;
			api.api.correlationId = corr;
			emit(&api);
		}
		if (kind_is_on(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)) {
			k.k.start = t + 2000;
			k.k.end = t + 2000 + kernel_ns;
			k.k.completed = k.k.end;
			k.k.correlationId = corr;
			k.k.gridId = corr;
			k.k.name = name;
			emit(&k);
		}
		t += kernel_ns > 1000 ? kernel_ns : 1000;
	}
	i = fk.st.records - before;
	pthread_mutex_unlock(&fk.lock);
	return i;
}

/* The CUDA runtime's profiler control, which Nsight Systems watches. */
FAKE_EXPORT int cudaProfilerStart(void)
{
	struct call c;

	if (call_begin(&c, CUPTI_CB_DOMAIN_RUNTIME_API,
		       CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStart_v4000, NULL, NULL) != 0)
		return 3; /* cudaErrorInitializationError */
	pthread_mutex_lock(&fk.lock);
	fk.st.profiler_starts++;
	pthread_mutex_unlock(&fk.lock);
	call_end(&c);
	return 0;
}

FAKE_EXPORT int cudaProfilerStop(void)
{
	struct call c;

	if (call_begin(&c, CUPTI_CB_DOMAIN_RUNTIME_API,
		       CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStop_v4000, NULL, NULL) != 0)
		return 3;
	pthread_mutex_lock(&fk.lock);
	fk.st.profiler_stops++;
	pthread_mutex_unlock(&fk.lock);
	call_end(&c);
	return 0;
}

/* ------------------------------------------------------------ stats */

FAKE_EXPORT void cupti_fake_get_stats(struct cupti_fake_stats *s)
{
	unsigned k;

	pthread_mutex_lock(&fk.lock);
	fk.st.enabled_now = 0;
	for (k = 0; k < CUPTI_ACTIVITY_KIND_COUNT && k < 64; k++)
		if (fk.kind_on[k])
			fk.st.enabled_now |= 1ull << k;
	*s = fk.st;
	pthread_mutex_unlock(&fk.lock);
}

static void write_stats(void)
{
	const char *path = getenv("CUPTI_FAKE_STATS");
	struct cupti_fake_stats s;
	FILE *f;

	if (!path || !*path)
		return;
	cupti_fake_get_stats(&s);
	f = fopen(path, "w");
	if (!f)
		return;
	fprintf(f, "injections %llu\nsubscribes %llu\nsubscribed %llu\n"
		"finalizes %llu\nts_callbacks %llu\nts_before_enable %llu\n"
		"enables %llu\ndisables %llu\nenabled_now %llu\nrecords %llu\n"
		"dropped %llu\nbuffers_requested %llu\nbuffers_refused %llu\n"
		"buffers_completed %llu\nflushes_forced %llu\next_pushes %llu\n"
		"ext_pops %llu\nprofiler_starts %llu\nprofiler_stops %llu\n",
		(unsigned long long)s.injections, (unsigned long long)s.subscribes,
		(unsigned long long)s.subscribed, (unsigned long long)s.finalizes,
		(unsigned long long)s.ts_callbacks, (unsigned long long)s.ts_before_enable,
		(unsigned long long)s.enables, (unsigned long long)s.disables,
		(unsigned long long)s.enabled_now, (unsigned long long)s.records,
		(unsigned long long)s.dropped, (unsigned long long)s.buffers_requested,
		(unsigned long long)s.buffers_refused, (unsigned long long)s.buffers_completed,
		(unsigned long long)s.flushes_forced, (unsigned long long)s.ext_pushes,
		(unsigned long long)s.ext_pops, (unsigned long long)s.profiler_starts,
		(unsigned long long)s.profiler_stops);
	fake_nvtx_write(f);
	fclose(f);
}

__attribute__((destructor)) static void fake_fini(void)
{
	write_stats();
}

/* ------------------------------------------------------------ CUPTI */

FAKE_EXPORT CUptiResult CUPTIAPI cuptiGetVersion(uint32_t *version)
{
	if (!version)
		return CUPTI_ERROR_INVALID_PARAMETER;
	*version = mode() == MODE_OLD ? 24 : CUPTI_API_VERSION;
	return CUPTI_SUCCESS;
}

FAKE_EXPORT CUptiResult CUPTIAPI cuptiGetResultString(CUptiResult result,
						      const char **str)
{
	const char *s = fake_result_name((int)result);

	if (!str || !s)
		return CUPTI_ERROR_INVALID_PARAMETER;
	*str = s;
	return CUPTI_SUCCESS;
}

FAKE_EXPORT CUptiResult CUPTIAPI cuptiGetCallbackName(CUpti_CallbackDomain domain,
						      uint32_t cbid, const char **name)
{
	const char *s;

	if (!name)
		return CUPTI_ERROR_INVALID_PARAMETER;
	s = cbid_name(domain, cbid);
	if (!s)
		return CUPTI_ERROR_INVALID_PARAMETER;
	*name = s;
	return CUPTI_SUCCESS;
}

FAKE_EXPORT CUptiResult CUPTIAPI cuptiSubscribe(CUpti_SubscriberHandle *subscriber,
						CUpti_CallbackFunc cb, void *userdata)
{
	CUptiResult rc = CUPTI_SUCCESS;

	check_alive("cuptiSubscribe");
	if (!subscriber)
		return CUPTI_ERROR_INVALID_PARAMETER;
	pthread_mutex_lock(&fk.lock);
	fk.st.subscribes++;
	if (mode() == MODE_NO_DRIVER)
		rc = CUPTI_ERROR_UNKNOWN;
	else if (mode() == MODE_MULTI || fk.subscribed)
		rc = CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
	if (rc == CUPTI_SUCCESS) {
		fk.subscribed = 1;
		fk.cb = cb;
		fk.cb_ud = userdata;
		memset(fk.cb_on, 0, sizeof fk.cb_on);
		fk.st.subscribed++;
		*subscriber = (CUpti_SubscriberHandle)&fk;
	}
	pthread_mutex_unlock(&fk.lock);
	return rc;
}

FAKE_EXPORT CUptiResult CUPTIAPI cuptiUnsubscribe(CUpti_SubscriberHandle subscriber)
{
	CUptiResult rc = CUPTI_SUCCESS;

	check_alive("cuptiUnsubscribe");
	pthread_mutex_lock(&fk.lock);
	if (!fk.subscribed || subscriber != (CUpti_SubscriberHandle)&fk)
		rc = CUPTI_ERROR_INVALID_PARAMETER;
	else
		fk.subscribed = 0;
	pthread_mutex_unlock(&fk.lock);
	return rc;
}

FAKE_EXPORT CUptiResult CUPTIAPI cuptiEnableCallback(uint32_t enable,
						     CUpti_SubscriberHandle subscriber,
						     CUpti_CallbackDomain domain,
						     CUpti_CallbackId cbid)
{
	CUptiResult rc = CUPTI_SUCCESS;

	check_alive("cuptiEnableCallback");
	pthread_mutex_lock(&fk.lock);
	if (!fk.subscribed || subscriber != (CUpti_SubscriberHandle)&fk ||
	    domain <= CUPTI_CB_DOMAIN_INVALID || domain >= CUPTI_CB_DOMAIN_SIZE ||
	    cbid >= 1024)
		rc = CUPTI_ERROR_INVALID_PARAMETER;
	else
		fk.cb_on[domain][cbid] = enable ? 1 : 0;
	pthread_mutex_unlock(&fk.lock);
	return rc;
}

FAKE_EXPORT CUptiResult CUPTIAPI cuptiEnableDomain(uint32_t enable,
						   CUpti_SubscriberHandle subscriber,
						   CUpti_CallbackDomain domain)
{
	CUptiResult rc = CUPTI_SUCCESS;

	pthread_mutex_lock(&fk.lock);
	if (!fk.subscribed || subscriber != (CUpti_SubscriberHandle)&fk ||
	    domain <= CUPTI_CB_DOMAIN_INVALID || domain >= CUPTI_CB_DOMAIN_SIZE)
		rc = CUPTI_ERROR_INVALID_PARAMETER;
	else
		memset(fk.cb_on[domain], enable ? 1 : 0, sizeof fk.cb_on[domain]);
	pthread_mutex_unlock(&fk.lock);
	return rc;
}

FAKE_EXPORT CUptiResult CUPTIAPI cuptiEnableAllDomains(uint32_t enable,
						       CUpti_SubscriberHandle subscriber)
{
	CUptiResult rc = CUPTI_SUCCESS;

	pthread_mutex_lock(&fk.lock);
	if (!fk.subscribed || subscriber != (CUpti_SubscriberHandle)&fk)
		rc = CUPTI_ERROR_INVALID_PARAMETER;
	else
		memset(fk.cb_on, enable ? 1 : 0, sizeof fk.cb_on);
	pthread_mutex_unlock(&fk.lock);
	return rc;
}

FAKE_EXPORT CUptiResult CUPTIAPI cuptiSetThreadIdType(CUpti_ActivityThreadIdType type)
{
	if (type != CUPTI_ACTIVITY_THREAD_ID_TYPE_DEFAULT &&
	    type != CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM)
		return CUPTI_ERROR_INVALID_PARAMETER;
	pthread_mutex_lock(&fk.lock);
	fk.tid_type = type;
	pthread_mutex_unlock(&fk.lock);
	return CUPTI_SUCCESS;
}

FAKE_EXPORT CUptiResult CUPTIAPI cuptiActivityRegisterTimestampCallback(
	CUpti_TimestampCallbackFunc f)
{
	if (!f)
		return CUPTI_ERROR_INVALID_PARAMETER;
	if (mode() == MODE_NO_DRIVER)
		return CUPTI_ERROR_UNKNOWN;
	pthread_mutex_lock(&fk.lock);
	fk.ts = f;
	fk.st.ts_callbacks++;
	pthread_mutex_unlock(&fk.lock);
	return CUPTI_SUCCESS;
}

FAKE_EXPORT CUptiResult CUPTIAPI cuptiActivityRegisterCallbacks(
	CUpti_BuffersCallbackRequestFunc req, CUpti_BuffersCallbackCompleteFunc done)
{
	if (!req || !done)
		return CUPTI_ERROR_INVALID_PARAMETER;
	pthread_mutex_lock(&fk.lock);
	fk.req = req;
	fk.done = done;
	pthread_mutex_unlock(&fk.lock);
	return CUPTI_SUCCESS;
}

FAKE_EXPORT CUptiResult CUPTIAPI cuptiActivityEnableLatencyTimestamps(uint8_t enable)
{
	if (mode() == MODE_NO_DRIVER)
		return CUPTI_ERROR_UNKNOWN;
	pthread_mutex_lock(&fk.lock);
	fk.latency_ts = enable != 0;
	pthread_mutex_unlock(&fk.lock);
	return CUPTI_SUCCESS;
}

FAKE_EXPORT CUptiResult CUPTIAPI cuptiActivityEnable(CUpti_ActivityKind kind)
{
	CUptiResult rc = CUPTI_SUCCESS;

	if ((unsigned)kind == 0 || (unsigned)kind >= CUPTI_ACTIVITY_KIND_COUNT)
		return CUPTI_ERROR_INVALID_KIND;
	if (mode() == MODE_NO_DRIVER)
		return CUPTI_ERROR_UNKNOWN;
	if (mode() == MODE_NO_PRIV)
		return CUPTI_ERROR_INSUFFICIENT_PRIVILEGES;
	check_alive("cuptiActivityEnable");
	pthread_mutex_lock(&fk.lock);
	if (fk.st.enables == 0)
		fk.st.ts_before_enable = fk.ts != NULL;
	fk.st.enables++;
	fk.kind_on[kind] = 1;
	pthread_mutex_unlock(&fk.lock);
	return rc;
}

FAKE_EXPORT CUptiResult CUPTIAPI cuptiActivityDisable(CUpti_ActivityKind kind)
{
	if ((unsigned)kind == 0 || (unsigned)kind >= CUPTI_ACTIVITY_KIND_COUNT)
		return CUPTI_ERROR_INVALID_KIND;
	if (mode() == MODE_NO_DRIVER)
		return CUPTI_ERROR_UNKNOWN;
	check_alive("cuptiActivityDisable");
	pthread_mutex_lock(&fk.lock);
	if (fk.kind_on[kind])
		fk.st.disables++;
	fk.kind_on[kind] = 0;
	pthread_mutex_unlock(&fk.lock);
	return CUPTI_SUCCESS;
}

FAKE_EXPORT CUptiResult CUPTIAPI cuptiActivityGetNumDroppedRecords(CUcontext ctx,
								   uint32_t streamId,
								   size_t *dropped)
{
	(void)ctx;
	(void)streamId;
	if (!dropped)
		return CUPTI_ERROR_INVALID_PARAMETER;
	pthread_mutex_lock(&fk.lock);
	*dropped = fk.dropped;
	fk.dropped = 0;
	pthread_mutex_unlock(&fk.lock);
	return CUPTI_SUCCESS;
}

FAKE_EXPORT CUptiResult CUPTIAPI cuptiActivityGetNextRecord(uint8_t *buffer,
							    size_t valid,
							    CUpti_Activity **record)
{
	size_t off, size;

	if (!buffer || !record)
		return CUPTI_ERROR_INVALID_PARAMETER;
	if (!*record) {
		off = 0;
	} else {
		uint8_t *p = (uint8_t *)*record;

		if (p < buffer || p >= buffer + valid)
			return CUPTI_ERROR_INVALID_PARAMETER;
		size = kind_size((*record)->kind);
		if (!size)
			return CUPTI_ERROR_INVALID_KIND;
		off = (size_t)(p - buffer) + ((size + 7) & ~(size_t)7);
	}
	if (off >= valid)
		return CUPTI_ERROR_MAX_LIMIT_REACHED;
	size = kind_size(((CUpti_Activity *)(buffer + off))->kind);
	if (!size || off + size > valid)
		return CUPTI_ERROR_INVALID_KIND;
	*record = (CUpti_Activity *)(buffer + off);
	return CUPTI_SUCCESS;
}

FAKE_EXPORT CUptiResult CUPTIAPI cuptiActivityFlushAll(uint32_t flag)
{
	struct fullbuf *mine = NULL;
	size_t n = 0, i;
	CUpti_BuffersCallbackCompleteFunc done;
	int force = (flag & CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) != 0;

	if (mode() == MODE_NO_DRIVER)
		return CUPTI_ERROR_UNKNOWN;
	check_alive("cuptiActivityFlushAll");
	pthread_mutex_lock(&fk.lock);
	if (!fk.done) {
		pthread_mutex_unlock(&fk.lock);
		return CUPTI_ERROR_INVALID_OPERATION;
	}
	if (force)
		fk.st.flushes_forced++;
	retire_work(now(), force);
	/* Flag 0 returns buffers whose records are all complete: every
	 * buffer here (unfinished work is not in a buffer yet). */
	if (fk.cur && (fk.cur_used > 0 || force))
		retire_buffer();
	if (fk.nq) {
		mine = fk.q;
		n = fk.nq;
		fk.q = NULL;
		fk.nq = fk.capq = 0;
	}
	while (fk.in_flight)
		pthread_cond_wait(&fk.cond, &fk.lock);
	done = fk.done;
	pthread_mutex_unlock(&fk.lock);
	for (i = 0; i < n; i++)
		done(NULL, 0, mine[i].buf, mine[i].size, mine[i].valid);
	pthread_mutex_lock(&fk.lock);
	fk.st.buffers_completed += n;
	pthread_mutex_unlock(&fk.lock);
	free(mine);
	return CUPTI_SUCCESS;
}

FAKE_EXPORT CUptiResult CUPTIAPI cuptiActivityFlushPeriod(uint32_t time)
{
	(void)time;
	return mode() == MODE_NO_DRIVER ? CUPTI_ERROR_UNKNOWN : CUPTI_SUCCESS;
}

FAKE_EXPORT CUptiResult CUPTIAPI cuptiActivityPushExternalCorrelationId(
	CUpti_ExternalCorrelationKind kind, uint64_t id)
{
	if (mode() == MODE_NO_DRIVER)
		return CUPTI_ERROR_UNKNOWN;
	if (kind <= CUPTI_EXTERNAL_CORRELATION_KIND_INVALID ||
	    kind >= CUPTI_EXTERNAL_CORRELATION_KIND_SIZE)
		return CUPTI_ERROR_INVALID_PARAMETER;
	if (tl_ext_depth[kind] < FAKE_EXT_DEPTH)
		tl_ext[kind][tl_ext_depth[kind]] = id;
	tl_ext_depth[kind]++;
	pthread_mutex_lock(&fk.lock);
	fk.st.ext_pushes++;
	pthread_mutex_unlock(&fk.lock);
	return CUPTI_SUCCESS;
}

FAKE_EXPORT CUptiResult CUPTIAPI cuptiActivityPopExternalCorrelationId(
	CUpti_ExternalCorrelationKind kind, uint64_t *last)
{
	if (mode() == MODE_NO_DRIVER)
		return CUPTI_ERROR_UNKNOWN;
	if (kind <= CUPTI_EXTERNAL_CORRELATION_KIND_INVALID ||
	    kind >= CUPTI_EXTERNAL_CORRELATION_KIND_SIZE)
		return CUPTI_ERROR_INVALID_PARAMETER;
	if (!tl_ext_depth[kind])
		return CUPTI_ERROR_QUEUE_EMPTY;
	tl_ext_depth[kind]--;
	if (last)
		*last = tl_ext_depth[kind] < FAKE_EXT_DEPTH ? tl_ext[kind][tl_ext_depth[kind]] : 0;
	pthread_mutex_lock(&fk.lock);
	fk.st.ext_pops++;
	pthread_mutex_unlock(&fk.lock);
	return CUPTI_SUCCESS;
}

/* The device of a context the callbacks gave (FAKE_CONTEXT_BASE + D + 1). */
FAKE_EXPORT CUptiResult CUPTIAPI cuptiGetDeviceId(CUcontext context, uint32_t *deviceId)
{
	uintptr_t c = (uintptr_t)context;

	if (!deviceId)
		return CUPTI_ERROR_INVALID_PARAMETER;
	if (mode() == MODE_NO_DRIVER)
		return CUPTI_ERROR_UNKNOWN;
	if (c <= FAKE_CONTEXT_BASE || c > FAKE_CONTEXT_BASE + fk.ndev)
		return CUPTI_ERROR_INVALID_CONTEXT;
	*deviceId = (uint32_t)(c - FAKE_CONTEXT_BASE - 1);
	return CUPTI_SUCCESS;
}

/* The stream id of a handle the launch parameters gave
 * (FAKE_STREAM_BASE + N -> N; NULL: the default stream, 0). */
FAKE_EXPORT CUptiResult CUPTIAPI cuptiGetStreamIdEx(CUcontext context, CUstream stream,
						    uint8_t perThreadStream, uint32_t *streamId)
{
	uintptr_t h = (uintptr_t)stream;

	(void)context;
	(void)perThreadStream;
	if (!streamId)
		return CUPTI_ERROR_INVALID_PARAMETER;
	if (mode() == MODE_NO_DRIVER)
		return CUPTI_ERROR_UNKNOWN;
	if (h && (h < FAKE_STREAM_BASE || h - FAKE_STREAM_BASE > UINT32_MAX))
		return CUPTI_ERROR_INVALID_STREAM;
	*streamId = h ? (uint32_t)(h - FAKE_STREAM_BASE) : 0;
	return CUPTI_SUCCESS;
}

FAKE_EXPORT CUptiResult CUPTIAPI cuptiGetTimestamp(uint64_t *timestamp)
{
	if (!timestamp)
		return CUPTI_ERROR_INVALID_PARAMETER;
	*timestamp = now();
	return CUPTI_SUCCESS;
}

/* Detaches: callbacks, kinds and the subscriber are gone; a later call
 * starts over. Buffers not flushed before are dropped. */
FAKE_EXPORT CUptiResult CUPTIAPI cuptiFinalize(void)
{
	check_alive("cuptiFinalize");
	if (atomic_load(&graph_seen))
		atomic_store(&poisoned, 1);
	pthread_mutex_lock(&fk.lock);
	while (fk.in_flight)
		pthread_cond_wait(&fk.cond, &fk.lock);
	fk.st.finalizes++;
	fk.subscribed = 0;
	fk.cb = NULL;
	memset(fk.kind_on, 0, sizeof fk.kind_on);
	memset(fk.cb_on, 0, sizeof fk.cb_on);
	fk.ts = NULL;
	fk.req = NULL;
	fk.done = NULL;
	fk.cur = NULL;
	fk.nq = 0;
	fk.npend = 0;
	pthread_mutex_unlock(&fk.lock);
	write_stats();
	return CUPTI_SUCCESS;
}

/* ------------------------------------------------------------ driver device queries */

/* The driver's device queries, answering what the DEVICE records say;
 * CUDA_ERROR_NOT_INITIALIZED before the first CUDA call (cuInit). Any
 * thread. */
static CUresult device_of(CUdevice dev, CUpti_ActivityDevice5 *d)
{
	if (mode() == MODE_NO_DRIVER || !atomic_load(&ctx_made))
		return CUDA_ERROR_NOT_INITIALIZED;
	if (dev < 0 || (unsigned)dev >= fk.ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	fake_device(d, (unsigned)dev);
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult CUDAAPI cuDeviceGetCount(int *count)
{
	if (mode() == MODE_NO_DRIVER || !atomic_load(&ctx_made))
		return CUDA_ERROR_NOT_INITIALIZED;
	*count = (int)fk.ndev;
	return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult CUDAAPI cuDeviceGet(CUdevice *dev, int ordinal)
{
	CUpti_ActivityDevice5 d;
	CUresult rc = device_of(ordinal, &d);

	if (rc == CUDA_SUCCESS)
		*dev = ordinal;
	return rc;
}

FAKE_EXPORT CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev)
{
	CUpti_ActivityDevice5 d;
	CUresult rc = device_of(dev, &d);

	if (rc == CUDA_SUCCESS && len > 0)
		snprintf(name, (size_t)len, "%s", d.name);
	return rc;
}

FAKE_EXPORT CUresult CUDAAPI cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	CUpti_ActivityDevice5 d;
	CUresult rc = device_of(dev, &d);

	if (rc == CUDA_SUCCESS)
		*bytes = (size_t)d.globalMemorySize;
	return rc;
}

FAKE_EXPORT CUresult CUDAAPI cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice dev)
{
	CUpti_ActivityDevice5 d;
	CUresult rc = device_of(dev, &d);

	if (rc != CUDA_SUCCESS)
		return rc;
	switch (a) {
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = (int)d.computeCapabilityMajor; break;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = (int)d.computeCapabilityMinor; break;
	case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = (int)d.maxThreadsPerBlock; break;
	case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *v = (int)d.numThreadsPerWarp; break;
	case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
		*v = (int)(d.maxWarpsPerMultiprocessor * d.numThreadsPerWarp);
		break;
	case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: *v = (int)d.maxRegistersPerBlock; break;
	case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR:
		*v = (int)d.maxRegistersPerMultiprocessor;
		break;
	case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *v = (int)d.maxSharedMemoryPerBlock; break;
	case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
		*v = (int)d.maxSharedMemoryPerMultiprocessor;
		break;
	case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = (int)d.numMultiprocessors; break;
	default: return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

/*
 * cupti — GPU capture through CUPTI: the lifecycle (see cupti.h).
 *
 * States: OFF (no CUDA capture asked for), WAITING (for InitializeInjection,
 * when CUDA_INJECTION64_PATH names this library: by then the application
 * has loaded its own libcupti, which is reused), READY (subscribed), and
 * after the last window STOPPING -> STOPPED (cuptiFinalize; a later window
 * starts over); DEAD when something stopped GPU capture (said once); NSYS
 * under Nsight Systems.
 *
 * Threads and locks. `cu.lock` guards the state; window callbacks take it
 * under the window lock (order: window lock, then cu.lock). It is never
 * held across cuptiActivityFlushAll or cuptiFinalize, which may call back.
 * `cu.flush_lock` (outermost: taken before cu.lock, never under it) is:
 * each flush and what it delivers (the done list taken after it, the
 * launches left in flight) is one step, and a finalize is never under way
 * beside one: the host thread flushes for a window or a dump while the
 * hang watchdog's thread flushes for a report (hang_gpu). It is held for
 * a flush, not for a window's conversion.
 * CUPTI's buffer callbacks take only the pool's lock (innermost: taken
 * under cu.lock too, never the other way); the timestamp callback takes
 * nothing. The API callback (steps counted from CUDA calls)
 * takes the window lock through the host's step callback, never cu.lock
 * directly.
 *
 * Kernels in flight (prof.watchdog{} with kernels captured): the launch
 * callbacks put each launch into `cu.inflight` (cupti_inflight.c) while
 * kernel records are enabled (`cu.track`), the buffer-completed callback
 * frees the launches whose kernel record came, and a hang report lists
 * what is left (hang_gpu).
 * The flight recorder (prof.recorder{}, "flight recorder" below): while it
 * keeps segments, the kinds stay enabled between windows and each buffer
 * CUPTI completes is copied, record by record, into the open segment
 * (EVBUF_CUPTI records, appended on CUPTI's thread), so the ring bounds
 * them; a dump's collect converts the records its segments hold, with
 * those a flush delivers then.
 */
#include "cupti.h"
#include "../torch/torchops.h"
#include "cupti_internal.h"
#include "../cpu/sampler.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <nvtx3/nvToolsExt.h>

#include "../../common/clock.h"
#include "../../shim/evbuf.h"
#include "../../common/salvfile.h"
#include "../../common/grow.h"
#include "../../common/hash.h"
#include "../../util/htab.h"
#include "../../common/log.h"

#define EXT_KIND CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1
#define MAX_KINDS 16
#define MIN_BUF ((size_t)64 * 1024)
#define MAX_BUF ((size_t)4 * 1024 * 1024)

enum cu_state { CU_OFF, CU_WAITING, CU_READY, CU_STOPPING, CU_STOPPED, CU_DEAD, CU_NSYS };
enum cu_want { WANT_IDLE, WANT_WARMUP, WANT_RECORD };

/* Activity buffers: one preallocated region cut into equal buffers that
 * CUPTI borrows (requested) and returns (completed); the host thread
 * converts the completed ones and frees them. Never malloc mid-window. */
struct cu_done {
	uint32_t idx;
	size_t valid;
};

#define REC_DEVICES 8

struct cu_pool {
	pthread_mutex_t lock;
	uint8_t *base;
	size_t buf_size;
	uint32_t nbuf;
	uint32_t *free_idx, nfree;
	struct cu_done *done;
	uint32_t ndone;
	CUpti_ActivityDevice5 devrec[REC_DEVICES]; /* the flight recorder's
						      DEVICE records
						      (written once, when the
						      kind is enabled) */
	uint32_t ndevrec;
};

static struct {
	/* "No driver" is said when the first window opens, not at start-up:
	 * a process that never captures (a shell, a launcher) stays quiet. */
	char no_gpu_note[256];
	bool no_gpu_said;
	pthread_mutex_t lock;
	pthread_mutex_t flush_lock;    /* a flush and its taking; a finalize */
	const struct capture_host *h;
	enum cu_state state;
	enum cu_want want;
	bool enabled;                  /* kinds enabled now */
	struct cupti_fns fn;
	CUpti_SubscriberHandle sub;
	CUpti_ActivityKind kinds[MAX_KINDS];
	bool kind_bad[MAX_KINDS];      /* CUPTI refused it here: left out */
	size_t nkinds;
	struct cupti_show show;
	bool ext;                      /* ranges get external correlation ids */
	_Atomic int ext_on;
	_Atomic uint64_t next_ext;
	struct cu_pool pool;
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
	 * initialised it has registered its handler by then): arm_exit. */
	bool exit_armed;
	bool devices_asked;            /* the driver told the devices */
	/* Nsight Systems */
	int (*profiler_start)(void);
	int (*profiler_stop)(void);
	bool nsys_said;
	nvtxRangeId_t nvtx_step;
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
} cu = { .lock = PTHREAD_MUTEX_INITIALIZER, .flush_lock = PTHREAD_MUTEX_INITIALIZER };

static __thread unsigned tl_ext_depth;   /* external ids this thread pushed */
static __thread int tl_runtime_launch;   /* inside a runtime launch call */
#define CU_NEST 4                        /* API calls timed per thread */
static __thread int64_t tl_enter[2][CU_NEST]; /* entry times (runtime, driver) */
static __thread int tl_nest[2];
static __thread int tl_track_rt;         /* inside a tracked runtime launch */
static __thread int32_t tl_tid;          /* gettid(), once per thread */

/* prof.capture{cuda_backtrace}: times each API call from its entry to its
 * exit callback and, for one that took the threshold or longer, has the
 * sampler take the calling thread's stack, tagged with the call's
 * correlation id (the sampler's collect attaches it to the call's event as
 * args.stack). A driver call made inside a runtime call is left to the
 * runtime call. Application thread, inside the CUDA call. */
static void time_call(int drv, bool exit_site, uint32_t corr)
{
	int k;

	if (!exit_site) {
		if (tl_nest[drv] < CU_NEST)
			tl_enter[drv][tl_nest[drv]] = clock_now_ns();
		tl_nest[drv]++;
		return;
	}
	if (tl_nest[drv] == 0)
		return;
	k = --tl_nest[drv];
	if (k < CU_NEST && !(drv && tl_nest[0] > 0) &&
	    clock_now_ns() - tl_enter[drv][k] >= cu.backtrace_ns)
		sampler_record_stack(TRACE_STACK_CUDA, corr);
}

static const uint32_t cbid_size[2] = {
	CUPTI_RUNTIME_TRACE_CBID_SIZE, CUPTI_DRIVER_TRACE_CBID_SIZE
};

/* The kernel launch APIs (steps from kernel names, kernels in flight). */
static const char *const launch_apis[] = {
	"cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel",
	"cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchCooperativeKernel", NULL,
};

/* The stream of a launch from its parameters, for the launch APIs whose
 * parameters profhost reads; false for others (or none given). */
static bool launch_stream(int drv, uint32_t cbid, const void *p, void **stream,
			  bool *per_thread)
{
	*per_thread = false;
	if (!p)
		return false;
	if (!drv) {
		*per_thread = cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000 ||
			      cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000 ||
			      cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060;
		switch (cbid) {
		case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000:
		case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000:
			*stream = ((const cudaLaunchKernel_v7000_params *)p)->stream;
			return true;
		case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000:
		case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000:
			*stream = ((const cudaLaunchCooperativeKernel_v9000_params *)p)->stream;
			return true;
		case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060:
		case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060: {
			const cudaLaunchConfig_t *c =
				((const cudaLaunchKernelExC_v11060_params *)p)->config;

			if (!c)
				return false;
			*stream = c->stream;
			return true;
		}
		default:
			return false;
		}
	}
	*per_thread = cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz ||
		      cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz ||
		      cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz;
	switch (cbid) {
	case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
	case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz:
		*stream = ((const cuLaunchKernel_params *)p)->hStream;
		return true;
	case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
	case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz:
		*stream = ((const cuLaunchCooperativeKernel_params *)p)->hStream;
		return true;
	case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
	case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz: {
		const CUlaunchConfig *c = ((const cuLaunchKernelEx_params *)p)->config;

		if (!c)
			return false;
		*stream = c->hStream;
		return true;
	}
	default:
		return false;
	}
}

/* A kernel launch API's enter or exit with the watchdog on: at enter the
 * launch is put into the in-flight table (while kernel records are on);
 * a launch that returned an error is taken out at exit. A driver launch
 * made by a runtime launch is the same launch: left out. Application
 * thread, inside the CUDA call. */
static void track_launch(int drv, uint32_t cbid, const CUpti_CallbackData *d)
{
	bool enter = d->callbackSite == CUPTI_API_ENTER;
	struct cupti_launch l;
	size_t n;

	if (!drv) {
		tl_track_rt += enter ? 1 : -1;
		if (tl_track_rt < 0)
			tl_track_rt = 0;
	} else if (tl_track_rt > 0) {
		return;
	}
	if (!atomic_load_explicit(&cu.track, memory_order_relaxed))
		return;
	if (!enter) {
		if (d->functionReturnValue && *(const int *)d->functionReturnValue != 0)
			cupti_inflight_done(&cu.inflight, &d->correlationId, 1);
		return;
	}
	if (!tl_tid)
		tl_tid = (int32_t)syscall(SYS_gettid);
	l.corr = d->correlationId;
	l.tid = tl_tid;
	l.ts = clock_now_ns();
	l.ctx = d->context;
	l.stream = NULL;
	l.has_stream = launch_stream(drv, cbid, d->functionParams, &l.stream, &l.per_thread);
	n = d->symbolName ? strnlen(d->symbolName, sizeof l.name - 1) : 0;
	memcpy(l.name, d->symbolName ? d->symbolName : "", n);
	l.name[n] = '\0';
	cupti_inflight_launch(&cu.inflight, &l);
}

/* Frees the in-flight launches whose kernel record is in `buf` (a record
 * without an end: the kernel has not finished, the record was flushed
 * early). CUPTI's thread or a flushing thread. */
static void track_buffer(uint8_t *buf, size_t valid)
{
	uint32_t ids[256];
	size_t n = 0;
	CUpti_Activity *r = NULL;

	while (cu.fn.ActivityGetNextRecord(buf, valid, &r) == CUPTI_SUCCESS) {
		const CUpti_ActivityKernel10 *k = (const void *)r;

		if ((r->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL &&
		     r->kind != CUPTI_ACTIVITY_KIND_KERNEL) || k->end == 0)
			continue;
		ids[n++] = k->correlationId;
		if (n == sizeof ids / sizeof ids[0]) {
			cupti_inflight_done(&cu.inflight, ids, n);
			n = 0;
		}
	}
	cupti_inflight_done(&cu.inflight, ids, n);
}

/* ------------------------------------------------------------ callbacks */

/* The one clock (clock.h): CUPTI's timestamps are the host's. */
static uint64_t CUPTIAPI cu_clock(void)
{
	return (uint64_t)clock_now_ns();
}

static void CUPTIAPI buf_requested(uint8_t **buffer, size_t *size, size_t *max)
{
	struct cu_pool *p = &cu.pool;

	*max = 0;
	pthread_mutex_lock(&p->lock);
	if (p->base && p->nfree) {
		uint32_t idx = p->free_idx[--p->nfree];

		*buffer = p->base + (size_t)idx * p->buf_size;
		*size = p->buf_size;
	} else {
		*buffer = NULL; /* CUPTI drops and counts what does not fit */
		*size = 0;
	}
	pthread_mutex_unlock(&p->lock);
}

static bool rec_buffer(uint8_t *buffer, size_t valid);

static void CUPTIAPI buf_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer,
				   size_t size, size_t valid)
{
	struct cu_pool *p = &cu.pool;
	size_t off;

	(void)ctx;
	(void)stream;
	(void)size;
	if (cu.inflight.slot && buffer && valid <= size)
		track_buffer(buffer, valid);
	if (rec_buffer(buffer, valid))
		return; /* the flight recorder's: in the ring */
	pthread_mutex_lock(&p->lock);
	if (p->base && buffer >= p->base &&
	    (off = (size_t)(buffer - p->base)) < (size_t)p->nbuf * p->buf_size &&
	    p->ndone < p->nbuf) {
		p->done[p->ndone].idx = (uint32_t)(off / p->buf_size);
		p->done[p->ndone].valid = valid <= p->buf_size ? valid : p->buf_size;
		p->ndone++;
	}
	pthread_mutex_unlock(&p->lock);
}

/* Steps counted from CUDA calls: prof.steps{cuda = "cudaGraphLaunch"} at
 * the call's exit, prof.steps{kernel = pattern} at the exit of a launch of
 * a matching kernel (a driver launch made by a runtime launch counts once). */
static void CUPTIAPI api_callback(void *ud, CUpti_CallbackDomain domain,
				  CUpti_CallbackId cbid, const void *data)
{
	const CUpti_CallbackData *d = data;
	int drv = domain == CUPTI_CB_DOMAIN_DRIVER_API;
	bool exit_site = d->callbackSite == CUPTI_API_EXIT;

	(void)ud;
	if ((domain != CUPTI_CB_DOMAIN_RUNTIME_API && !drv) || cbid >= cbid_size[drv])
		return;
	if (cu.backtrace_ns)
		time_call(drv, exit_site, d->correlationId);
	if (cu.track_cbid[drv] && cu.track_cbid[drv][cbid])
		track_launch(drv, (uint32_t)cbid, d);
	if (cu.launch_cbid[drv] && cu.launch_cbid[drv][cbid]) {
		if (!drv)
			tl_runtime_launch += exit_site ? -1 : 1;
		if (exit_site && (!drv || tl_runtime_launch <= 0) && d->symbolName &&
		    cupti_pattern_find(cu.kernel_pattern, d->symbolName))
			cu.h->step(cu.h->ctx);
	}
	if (exit_site && cu.step_cbid[drv] && cu.step_cbid[drv][cbid])
		cu.h->step(cu.h->ctx);
	if (cu.graph_cbid[drv] && cu.graph_cbid[drv][cbid])
		atomic_store_explicit(&cu.graphs_seen, 1, memory_order_relaxed);
}

/* Range hooks (shim_api.set_range_hooks): a range pushed inside a window
 * gets an external correlation id, which CUPTI attaches to the GPU work
 * launched inside it. */
static uint64_t range_push(void)
{
	uint64_t id;

	if (!atomic_load_explicit(&cu.ext_on, memory_order_relaxed))
		return 0;
	id = trace_ext_id(atomic_fetch_add_explicit(&cu.next_ext, 1, memory_order_relaxed));
	if (cu.fn.ActivityPushExternalCorrelationId(EXT_KIND, id) != CUPTI_SUCCESS)
		return 0;
	tl_ext_depth++;
	return id;
}

static void range_pop(void)
{
	if (!tl_ext_depth)
		return;
	tl_ext_depth--;
	cu.fn.ActivityPopExternalCorrelationId(EXT_KIND, NULL);
}

/* The API name of a cbid, cached. Host thread. */
static const char *api_name(void *ctx, bool driver, uint32_t cbid)
{
	const char **tab = cu.names[driver];
	const char *name = NULL;

	(void)ctx;
	if (cbid >= cbid_size[driver])
		return NULL;
	if (tab && tab[cbid])
		return tab[cbid];
	if (cu.fn.GetCallbackName(driver ? CUPTI_CB_DOMAIN_DRIVER_API
				  : CUPTI_CB_DOMAIN_RUNTIME_API, cbid, &name) != CUPTI_SUCCESS)
		return NULL;
	if (tab)
		tab[cbid] = name;
	return name;
}

/* ------------------------------------------------------------ the pool */

static int pool_init(struct cu_pool *p, size_t bytes)
{
	size_t buf = bytes / 16, i;

	if (buf < MIN_BUF)
		buf = MIN_BUF;
	if (buf > MAX_BUF)
		buf = MAX_BUF;
	buf &= ~(MIN_BUF - 1);
	p->buf_size = buf;
	p->nbuf = (uint32_t)(bytes / buf < 2 ? 2 : bytes / buf);
	p->base = mmap(NULL, (size_t)p->nbuf * buf, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	p->free_idx = malloc(p->nbuf * sizeof *p->free_idx);
	p->done = malloc(p->nbuf * sizeof *p->done);
	if (p->base == MAP_FAILED || !p->free_idx || !p->done) {
		if (p->base != MAP_FAILED)
			munmap(p->base, (size_t)p->nbuf * buf);
		free(p->free_idx);
		free(p->done);
		memset(p, 0, sizeof *p);
		return -1;
	}
	pthread_mutex_init(&p->lock, NULL);
	for (i = 0; i < p->nbuf; i++)
		p->free_idx[i] = p->nbuf - 1 - (uint32_t)i;
	p->nfree = p->nbuf;
	p->ndone = 0;
	return 0;
}

/* Every buffer free again (CUPTI was finalized: it holds none) and the
 * memory given back. */
static void pool_reset(struct cu_pool *p)
{
	uint32_t i;

	pthread_mutex_lock(&p->lock);
	for (i = 0; i < p->nbuf; i++)
		p->free_idx[i] = p->nbuf - 1 - i;
	p->nfree = p->nbuf;
	p->ndone = 0;
	if (p->base)
		madvise(p->base, (size_t)p->nbuf * p->buf_size, MADV_DONTNEED);
	pthread_mutex_unlock(&p->lock);
}

/* ------------------------------------------------------------ outcomes */

/* Who else holds CUPTI, as far as the process's libraries tell. */
static const char *other_client(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[4352];
	const char *who = "torch.profiler (Kineto), Nsight Systems or Nsight Compute";

	if (!f)
		return who;
	while (fgets(line, sizeof line, f)) {
		if (strstr(line, "libToolsInjection") || strstr(line, "nsys")) {
			who = "Nsight Systems";
			break;
		}
		if (strstr(line, "libtorch_cuda") || strstr(line, "kineto"))
			who = "torch.profiler (Kineto)";
	}
	fclose(f);
	return who;
}

static void set_hooks(bool on)
{
	if (cu.h && cu.h->shim->set_range_hooks)
		cu.h->shim->set_range_hooks(on ? range_push : NULL, on ? range_pop : NULL);
	/* torch operators from profhost's observer link the same way. */
	torchops_set_ext_hooks(on ? range_push : NULL, on ? range_pop : NULL);
}

/* Undoes what was set up and turns GPU capture off for the process.
 * Lock held. */
static void teardown(void)
{
	size_t i;

	atomic_store(&cu.ext_on, 0);
	atomic_store(&cu.track, 0);
	atomic_store(&cu.rec_copy, 0);
	set_hooks(false);
	if (cu.enabled)
		for (i = 0; i < cu.nkinds; i++)
			if (!cu.kind_bad[i])
				cu.fn.ActivityDisable(cu.kinds[i]);
	cu.enabled = false;
	if (cu.sub) {
		cu.fn.Unsubscribe(cu.sub);
		cu.sub = NULL;
	}
	cu.state = CU_DEAD;
}

/* Says in one line why GPU capture stops, then tears it down. Lock held. */
static void give_up(CUptiResult rc, const char *call)
{
	char buf[48];
	const char *name = cupti_result_name(&cu.fn, rc, buf, sizeof buf);

	switch (rc) {
	case CUPTI_ERROR_UNKNOWN:
	case CUPTI_ERROR_NOT_INITIALIZED:
	case CUPTI_ERROR_INVALID_DEVICE:
		snprintf(cu.no_gpu_note, sizeof cu.no_gpu_note, "no CUDA driver or "
			 "GPU here (%s from %s): GPU capture is off, CPU capture "
			 "goes on", name, call);
		break;
	case CUPTI_ERROR_INSUFFICIENT_PRIVILEGES:
	case CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES:
		log_msg(LOG_WARN, "GPU capture is off: the NVIDIA driver lets only "
			"administrators profile the GPU (%s from %s); load the nvidia module "
			"with NVreg_RestrictProfilingToAdminUsers=0 or run with CAP_SYS_ADMIN; "
			"CPU capture goes on", name, call);
		break;
	case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
		log_msg(LOG_INFO, "another CUPTI client is profiling this process (%s): "
			"profhost's GPU capture steps aside, CPU capture goes on",
			other_client());
		break;
	default:
		log_msg(LOG_WARN, "GPU capture is off: %s failed with %s; CPU capture goes on",
			call, name);
	}
	teardown();
}

/* ------------------------------------------------------------ kinds */

static void enable_kinds(void)
{
	char buf[48];
	size_t i;

	for (i = 0; i < cu.nkinds; i++) {
		CUptiResult rc;

		if (cu.kind_bad[i])
			continue;
		rc = cu.fn.ActivityEnable(cu.kinds[i]);
		if (rc == CUPTI_SUCCESS)
			continue;
		if (rc == CUPTI_ERROR_NOT_COMPATIBLE || rc == CUPTI_ERROR_NOT_SUPPORTED ||
		    rc == CUPTI_ERROR_INVALID_KIND || rc == CUPTI_ERROR_LEGACY_PROFILER_NOT_SUPPORTED) {
			cu.kind_bad[i] = true;
			log_msg(LOG_WARN, "CUPTI cannot record activity kind %d here (%s): "
				"left out", (int)cu.kinds[i],
				cupti_result_name(&cu.fn, rc, buf, sizeof buf));
			continue;
		}
		cu.enabled = true; /* give_up disables what was enabled */
		give_up(rc, "cuptiActivityEnable");
		return;
	}
	cu.enabled = true;
	atomic_store(&cu.ext_on, cu.ext);
	atomic_store(&cu.track, cu.watch && cu.inflight.slot);
}

static void disable_kinds(void)
{
	size_t i;

	atomic_store(&cu.ext_on, 0);
	atomic_store(&cu.track, 0);
	for (i = 0; i < cu.nkinds; i++)
		if (!cu.kind_bad[i])
			cu.fn.ActivityDisable(cu.kinds[i]);
	cu.enabled = false;
}

/* Marks in tab[drv][cbid] every runtime/driver API named `name` or
 * `name`_ptsz (version suffixes _vNNNN ignored). Returns how many. */
static int mark_cbids(const char *name, uint8_t **tab)
{
	int drv, n = 0;
	uint32_t cbid;
	size_t len = strlen(name);

	for (drv = 0; drv < 2; drv++) {
		if (!tab[drv])
			tab[drv] = calloc(cbid_size[drv], 1);
		if (!tab[drv])
			return n;
		for (cbid = 1; cbid < cbid_size[drv]; cbid++) {
			const char *s = NULL, *rest;

			if (cu.fn.GetCallbackName(drv ? CUPTI_CB_DOMAIN_DRIVER_API
						  : CUPTI_CB_DOMAIN_RUNTIME_API, cbid, &s) !=
				    CUPTI_SUCCESS || !s || strncmp(s, name, len) != 0)
				continue;
			rest = s + len;
			if (!strncmp(rest, "_ptsz", 5))
				rest += 5;
			if (!strncmp(rest, "_v", 2) && rest[2] >= '0' && rest[2] <= '9')
				rest += 2 + strspn(rest + 2, "0123456789");
			if (*rest)
				continue;
			tab[drv][cbid] = 1;
			n++;
		}
	}
	return n;
}

/* ------------------------------------------------------------ the driver */

typedef CUresult (CUDAAPI *dev_count_fn)(int *);
typedef CUresult (CUDAAPI *dev_get_fn)(CUdevice *, int);
typedef CUresult (CUDAAPI *dev_name_fn)(char *, int, CUdevice);
typedef CUresult (CUDAAPI *dev_mem_fn)(size_t *, CUdevice);
typedef CUresult (CUDAAPI *dev_attr_fn)(int *, CUdevice_attribute, CUdevice);

/* A function of the CUDA driver the process has loaded (never loads it),
 * or NULL. What loaded the driver holds it: it is not unloaded while the
 * process runs. Any thread. */
static void *driver_sym(const char *name)
{
	void *lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
	void *f = dlsym(lib ? lib : RTLD_DEFAULT, name);

	if (lib)
		dlclose(lib);
	return f;
}

/* Whether the process's CUDA driver is initialised (cuInit ran). cu.lock
 * held (cu_step, until it is). */
static bool driver_up(void)
{
	static dev_count_fn count;
	int n;

	if (!count)
		count = (dev_count_fn)driver_sym("cuDeviceGetCount");
	return count && count(&n) == CUDA_SUCCESS;
}

/* The driver's attributes that fill a DEVICE record's fields (all
 * uint32_t), by the field's offset. */
static const struct {
	CUdevice_attribute attr;
	size_t field;
} dev_fields[] = {
	{ CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
	  offsetof(CUpti_ActivityDevice5, computeCapabilityMajor) },
	{ CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
	  offsetof(CUpti_ActivityDevice5, computeCapabilityMinor) },
	{ CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
	  offsetof(CUpti_ActivityDevice5, maxThreadsPerBlock) },
	{ CU_DEVICE_ATTRIBUTE_WARP_SIZE, offsetof(CUpti_ActivityDevice5, numThreadsPerWarp) },
	{ CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK,
	  offsetof(CUpti_ActivityDevice5, maxRegistersPerBlock) },
	{ CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR,
	  offsetof(CUpti_ActivityDevice5, maxRegistersPerMultiprocessor) },
	{ CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK,
	  offsetof(CUpti_ActivityDevice5, maxSharedMemoryPerBlock) },
	{ CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR,
	  offsetof(CUpti_ActivityDevice5, maxSharedMemoryPerMultiprocessor) },
	{ CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
	  offsetof(CUpti_ActivityDevice5, numMultiprocessors) },
};

/* CUPTI writes a DEVICE record when a context is created while the kind
 * is on: GPU capture that starts later (at a window's warm-up, with the
 * program's context made long before) gets none, and the trace would have
 * no deviceProperties (nor the summary a GPU's peak). Then the devices
 * come from the driver, as the same record made up from its attributes.
 * Only a driver the process loaded and initialised is asked (never
 * cuInit); until it answers, it is asked again at the next collect. Host
 * thread. */
static void devices_from_driver(void)
{
	dev_count_fn count = (dev_count_fn)driver_sym("cuDeviceGetCount");
	dev_get_fn get = (dev_get_fn)driver_sym("cuDeviceGet");
	dev_name_fn name = (dev_name_fn)driver_sym("cuDeviceGetName");
	dev_mem_fn mem = (dev_mem_fn)driver_sym("cuDeviceTotalMem_v2");
	dev_attr_fn attr = (dev_attr_fn)driver_sym("cuDeviceGetAttribute");
	char text[256];
	int n = 0, i;

	if (count && get && name && mem && attr && count(&n) == CUDA_SUCCESS) {
		cu.devices_asked = true;
		for (i = 0; i < n && i < 64; i++) {
			CUpti_ActivityDevice5 d;
			CUdevice dev;
			size_t bytes = 0, k;
			int threads = 0;

			if (get(&dev, i) != CUDA_SUCCESS)
				continue;
			memset(&d, 0, sizeof d);
			d.kind = CUPTI_ACTIVITY_KIND_DEVICE;
			d.id = (uint32_t)i;
			if (name(text, (int)sizeof text, dev) != CUDA_SUCCESS)
				text[0] = '\0';
			text[sizeof text - 1] = '\0';
			d.name = text;
			if (mem(&bytes, dev) == CUDA_SUCCESS)
				d.globalMemorySize = bytes;
			for (k = 0; k < sizeof dev_fields / sizeof dev_fields[0]; k++) {
				int v = 0;
				uint32_t u;

				if (attr(&v, dev_fields[k].attr, dev) != CUDA_SUCCESS || v <= 0)
					continue;
				u = (uint32_t)v;
				memcpy((char *)&d + dev_fields[k].field, &u, sizeof u);
			}
			if (attr(&threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
				 dev) == CUDA_SUCCESS && threads > 0 && d.numThreadsPerWarp)
				d.maxWarpsPerMultiprocessor = (uint32_t)threads / d.numThreadsPerWarp;
			cupti_devices_note(&cu.devices, &d);
		}
	}
}

/* Enables the API callbacks the step triggers need, and all of them for
 * prof.capture{cuda_backtrace}, the launch APIs with the watchdog on, and
 * the graph launches (which keep CUPTI attached, see stop()). Lock held. */
static int enable_step_callbacks(void)
{
	const struct policy_config *cfg = cu.h->cfg;
	int drv, i;
	uint32_t cbid;

	if (cfg->steps.cuda && !cu.step_cbid[0] &&
	    mark_cbids(cfg->steps.cuda, cu.step_cbid) == 0)
		log_msg(LOG_WARN, "prof.steps{cuda = \"%s\"}: no CUDA runtime or driver API "
			"has that name (e.g. cudaGraphLaunch, cuLaunchKernel): steps are not "
			"counted from CUDA calls", cfg->steps.cuda);
	if (cu.kernel_pattern && !cu.launch_cbid[0])
		for (i = 0; launch_apis[i]; i++)
			mark_cbids(launch_apis[i], cu.launch_cbid);
	if (cu.watch && !cu.track_cbid[0])
		for (i = 0; launch_apis[i]; i++)
			mark_cbids(launch_apis[i], cu.track_cbid);
	if (!cu.graph_cbid[0]) {
		mark_cbids("cudaGraphLaunch", cu.graph_cbid);
		mark_cbids("cuGraphLaunch", cu.graph_cbid);
	}
	for (drv = 0; drv < 2; drv++)
		for (cbid = 1; cbid < cbid_size[drv]; cbid++) {
			CUptiResult rc;

			if (!(cu.backtrace_ns ||
			      (cu.track_cbid[drv] && cu.track_cbid[drv][cbid]) ||
			      (cu.step_cbid[drv] && cu.step_cbid[drv][cbid]) ||
			      (cu.launch_cbid[drv] && cu.launch_cbid[drv][cbid]) ||
			      (cu.graph_cbid[drv] && cu.graph_cbid[drv][cbid])))
				continue;
			rc = cu.fn.EnableCallback(1, cu.sub, drv ? CUPTI_CB_DOMAIN_DRIVER_API
						  : CUPTI_CB_DOMAIN_RUNTIME_API, cbid);
			if (rc != CUPTI_SUCCESS) {
				give_up(rc, "cuptiEnableCallback");
				return -1;
			}
		}
	return 0;
}

/* ------------------------------------------------------------ start, stop */

/* Loads CUPTI if needed, subscribes, registers the clock and the buffer
 * callbacks, then applies what the window wants. Lock held. */
static void start(void)
{
	const char *roots[] = { "/usr/local/cuda", NULL };
	struct cupti_search s = {
		.maps = "/proc/self/maps",
		.env_lib = getenv("PROF_CUPTI_LIB"),
		.cuda_home = getenv("CUDA_HOME"),
		.roots = roots,
		.virtual_env = getenv("VIRTUAL_ENV"),
	};
	struct err e;
	uint32_t version = 0;
	CUptiResult rc;

	if (!cu.fn.handle) {
		enum cupti_load_rc lr = cupti_load(&cu.fn, &s, &e);

		if (lr != CUPTI_LOAD_OK) {
			log_msg(lr == CUPTI_LOAD_NOT_FOUND ? LOG_INFO : LOG_WARN,
				"%s: GPU capture is off, CPU capture goes on", e.msg);
			cu.state = CU_DEAD;
			return;
		}
		if (cu.fn.GetVersion(&version) != CUPTI_SUCCESS ||
		    version < CUPTI_MIN_API_VERSION) {
			log_msg(LOG_WARN, "GPU capture is off: %s is CUPTI API version %u "
				"(CUDA 12 or older) and this build reads CUDA 13's records "
				"(CUPTI API %d or newer); point PROF_CUPTI_LIB at a CUDA 13 "
				"libcupti; CPU capture goes on", cu.fn.path, version,
				CUPTI_MIN_API_VERSION);
			cupti_unload(&cu.fn);
			cu.state = CU_DEAD;
			return;
		}
		log_msg(LOG_DEBUG, "CUPTI %u: %s (%s)", version, cu.fn.path,
			cu.fn.reused ? "already loaded by the process" : "loaded");
		cu.names[0] = calloc(cbid_size[0], sizeof *cu.names[0]);
		cu.names[1] = calloc(cbid_size[1], sizeof *cu.names[1]);
	}
	rc = cu.fn.Subscribe(&cu.sub, api_callback, NULL);
	if (rc != CUPTI_SUCCESS) {
		cu.sub = NULL;
		give_up(rc, "cuptiSubscribe");
		return;
	}
	if (cu.fn.SetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM) != CUPTI_SUCCESS)
		log_msg(LOG_DEBUG, "CUPTI: cannot report system thread ids; CUDA calls may "
			"sit on tracks of their own");
	/* One clock, registered before any kind is enabled. */
	rc = cu.fn.ActivityRegisterTimestampCallback(cu_clock);
	if (rc != CUPTI_SUCCESS) {
		give_up(rc, "cuptiActivityRegisterTimestampCallback");
		return;
	}
	if (cu.fn.ActivityEnableLatencyTimestamps)
		cu.fn.ActivityEnableLatencyTimestamps(1);
	rc = cu.fn.ActivityRegisterCallbacks(buf_requested, buf_completed);
	if (rc != CUPTI_SUCCESS) {
		give_up(rc, "cuptiActivityRegisterCallbacks");
		return;
	}
	if (!cu.pool.base && pool_init(&cu.pool, cu.pool_bytes) != 0) {
		log_msg(LOG_WARN, "GPU capture is off: cannot reserve %zu MiB for GPU "
			"records; CPU capture goes on", cu.pool_bytes >> 20);
		teardown();
		return;
	}
	if (enable_step_callbacks() != 0)
		return;
	cu.state = CU_READY;
	if (cu.ext)
		set_hooks(true);
	if (cu.want != WANT_IDLE || cu.rec_want)
		enable_kinds();
	if (cu.state == CU_READY && cu.rec_want && cu.nkinds)
		atomic_store(&cu.rec_copy, 1);
}

/* Finalizes CUPTI when no window lies ahead, so the job runs at full speed;
 * not once the process launched a CUDA graph while CUPTI was attached:
 * CUPTI stays subscribed with its kinds off, as between windows (a
 * finalize there makes the graph's next launch fail, and the CUDA context
 * with it). Host thread, lock not held; takes the flush lock (no hang
 * report flushes meanwhile). */
static void stop(void)
{
	pthread_mutex_lock(&cu.flush_lock);
	pthread_mutex_lock(&cu.lock);
	if (cu.state != CU_READY || cu.want != WANT_IDLE || cu.rec_want) {
		pthread_mutex_unlock(&cu.lock);
		pthread_mutex_unlock(&cu.flush_lock);
		return;
	}
	if (atomic_load_explicit(&cu.graphs_seen, memory_order_relaxed)) {
		pthread_mutex_unlock(&cu.lock);
		pthread_mutex_unlock(&cu.flush_lock);
		log_msg(LOG_DEBUG, "CUPTI stays attached after the last window: the "
			"program launches CUDA graphs, whose later launches fail once "
			"CUPTI is finalized");
		return;
	}
	if (cu.enabled)
		disable_kinds();
	set_hooks(false);
	cu.state = CU_STOPPING;
	pthread_mutex_unlock(&cu.lock);

	cu.fn.Unsubscribe(cu.sub);
	cu.fn.Finalize();
	cupti_inflight_clear(&cu.inflight); /* no record comes any more */
	pool_reset(&cu.pool);
	free(cu.carry);
	cu.carry = NULL;
	cu.ncarry = cu.capcarry = 0;

	pthread_mutex_lock(&cu.lock);
	cu.sub = NULL;
	cu.state = CU_STOPPED;
	log_msg(LOG_DEBUG, "CUPTI finalized: no capture window ahead");
	if (cu.want != WANT_IDLE || cu.rec_want)
		start(); /* a window began meanwhile */
	pthread_mutex_unlock(&cu.lock);
	pthread_mutex_unlock(&cu.flush_lock);
}

/* ------------------------------------------------------------ Nsight */

/* cudaProfilerStart/Stop of the process's CUDA runtime, once it has one
 * (else the driver's cuProfilerStart/Stop). */
static void nsys_find(void)
{
	FILE *f;
	char line[4352];

	if (cu.profiler_start)
		return;
	cu.profiler_start = (int (*)(void))dlsym(RTLD_DEFAULT, "cudaProfilerStart");
	cu.profiler_stop = (int (*)(void))dlsym(RTLD_DEFAULT, "cudaProfilerStop");
	if (cu.profiler_start && cu.profiler_stop)
		return;
	cu.profiler_start = NULL;
	f = fopen("/proc/self/maps", "r");
	while (f && fgets(line, sizeof line, f)) {
		char *path = strchr(line, '/');
		void *lib;

		if (!path || !strstr(path, "libcudart"))
			continue;
		path[strcspn(path, "\n")] = '\0';
		lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);
		if (!lib)
			continue;
		cu.profiler_start = (int (*)(void))dlsym(lib, "cudaProfilerStart");
		cu.profiler_stop = (int (*)(void))dlsym(lib, "cudaProfilerStop");
		if (cu.profiler_start && cu.profiler_stop)
			break;
		cu.profiler_start = NULL;
	}
	if (f)
		fclose(f);
	if (!cu.profiler_start) {
		/* A program with the static runtime: the driver's calls, which
		 * nsys's capture range watches as well. */
		void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);

		if (lib) {
			cu.profiler_start = (int (*)(void))dlsym(lib, "cuProfilerStart");
			cu.profiler_stop = (int (*)(void))dlsym(lib, "cuProfilerStop");
			if (!cu.profiler_stop)
				cu.profiler_start = NULL;
		}
	}
}

static void nvtx_end_step(void)
{
	if (cu.nvtx_open) {
		nvtxRangeEnd(cu.nvtx_step);
		cu.nvtx_open = false;
	}
}

/* ------------------------------------------------------------ capture ops */

/* Whether CUDA_INJECTION64_PATH names this host's library. */
static bool injected_by_driver(const struct capture_host *h)
{
	const char *p = getenv("CUDA_INJECTION64_PATH");
	char real[PATH_MAX];

	return p && *p && realpath(p, real) && h->shim->shim_path &&
	       strcmp(real, h->shim->shim_path) == 0;
}

/* capture_ops.init: start-up. Reads the policy and subscribes, unless
 * nothing is asked of CUDA or the driver will call cuda_inject. Never
 * fails (GPU capture stopping is said, CPU capture goes on). */
static int cu_init(const struct capture_host *h, struct err *e)
{
	const struct policy_config *cfg = h->cfg;
	const char *bad;
	size_t n = 0;

	(void)e;
	cu.h = h;
	cu.show.kernels = cfg->capture.cuda_kernels;
	cu.show.memcpy = cfg->capture.cuda_memcpy;
	cu.show.memset = cfg->capture.cuda_memset;
	cu.show.runtime = cfg->capture.cuda_runtime;
	cu.show.driver = cfg->capture.cuda_driver;
	cu.show.sync = cfg->capture.cuda_sync;
	cu.show.memory = cfg->capture.cuda_memory;
	cu.show.overhead = true;
	if (cu.show.kernels)
		cu.kinds[n++] = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
	if (cu.show.memcpy)
		cu.kinds[n++] = CUPTI_ACTIVITY_KIND_MEMCPY;
	if (cu.show.memset)
		cu.kinds[n++] = CUPTI_ACTIVITY_KIND_MEMSET;
	if (cu.show.runtime)
		cu.kinds[n++] = CUPTI_ACTIVITY_KIND_RUNTIME;
	if (cu.show.driver)
		cu.kinds[n++] = CUPTI_ACTIVITY_KIND_DRIVER;
	if (cu.show.sync)
		cu.kinds[n++] = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
	if (cu.show.memory)
		cu.kinds[n++] = CUPTI_ACTIVITY_KIND_MEMORY2;
	if (n) {
		cu.ext = cu.show.runtime || cu.show.driver;
		if (cu.ext)
			cu.kinds[n++] = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
		cu.kinds[n++] = CUPTI_ACTIVITY_KIND_OVERHEAD;
		cu.kinds[n++] = CUPTI_ACTIVITY_KIND_DEVICE;
	}
	cu.nkinds = n;
	cu.backtrace_ns = (int64_t)cfg->capture.cuda_backtrace_us * 1000;
	atomic_store(&cu.next_ext, 1);
	cu.pool_bytes = cfg->capture.buffer_bytes;
	if (cfg->steps.kernel) {
		bad = cupti_pattern_check(cfg->steps.kernel);
		if (bad)
			log_msg(LOG_WARN, "prof.steps{kernel = \"%s\"}: %s: steps are not "
				"counted from kernel launches", cfg->steps.kernel, bad);
		else
			cu.kernel_pattern = strdup(cfg->steps.kernel);
	}
	cu.steps_from_cuda = cfg->steps.cuda || cu.kernel_pattern;
	cu.watch = cfg->watchdog.enabled && cu.show.kernels;
	if (cu.watch && cupti_inflight_init(&cu.inflight, CUPTI_INFLIGHT_SLOTS) != 0)
		log_msg(LOG_WARN, "prof.watchdog: no memory for the table of kernels in "
			"flight: hang reports will not list them");
	if (!n && !cu.steps_from_cuda) {
		cu.state = CU_OFF;
		return 0;
	}
	if (getenv("NSYS_PROFILING_SESSION_ID")) {
		cu.state = CU_NSYS;
		log_msg(LOG_INFO, "Nsight Systems is profiling this process: profhost does "
			"not subscribe to CUPTI; its schedule calls cudaProfilerStart/Stop "
			"(use nsys profile --capture-range=cudaProfilerApi) and marks steps "
			"with NVTX");
		return 0;
	}
	if (injected_by_driver(h)) {
		cu.state = CU_WAITING;
		log_msg(LOG_DEBUG, "GPU capture starts when the CUDA driver calls "
			"InitializeInjection");
		return 0;
	}
	pthread_mutex_lock(&cu.lock);
	start();
	pthread_mutex_unlock(&cu.lock);
	return 0;
}

/* capture_ops.cuda_inject: starts GPU capture if it waits for the driver.
 * Any thread; never twice. */
static void cu_inject(void)
{
	pthread_mutex_lock(&cu.lock);
	if (cu.state == CU_WAITING)
		start();
	pthread_mutex_unlock(&cu.lock);
}

/* Arms the host's exit path to run before the CUDA runtime's exit handler
 * (cu.exit_armed), once CUPTI is up and the driver initialised: from each
 * window and step callback, so that a window with no steps (an NVTX
 * capture range) arms it too. cu.lock held. */
static void arm_exit(void)
{
	if (!cu.exit_armed && cu.state == CU_READY && driver_up()) {
		cu.exit_armed = true;
		cu.h->arm_exit();
	}
}

/* A warm-up phase or a window begins: kinds on (a stopped CUPTI starts
 * over). Stepping thread, window lock held. */
static void want(enum cu_want w)
{
	pthread_mutex_lock(&cu.lock);
	cu.want = w;
	if (cu.state == CU_STOPPED)
		start();
	if (cu.state == CU_READY && !cu.enabled && cu.nkinds)
		enable_kinds();
	arm_exit();
	pthread_mutex_unlock(&cu.lock);
}

/* capture_ops.warmup, window_open, window_close, step: stepping thread,
 * window lock held. */
static void cu_warmup(void)
{
	want(WANT_WARMUP);
}

static void cu_window_open(uint64_t gen)
{
	want(WANT_RECORD);
	pthread_mutex_lock(&cu.lock);
	cu.last_gen = gen;
	if (cu.no_gpu_note[0] && !cu.no_gpu_said) {
		cu.no_gpu_said = true;
		log_msg(LOG_INFO, "%s", cu.no_gpu_note);
	}
	if (cu.state == CU_NSYS) {
		nsys_find();
		if (cu.profiler_start) {
			cu.profiler_start();
		} else if (!cu.nsys_said) {
			cu.nsys_said = true;
			log_msg(LOG_INFO, "Nsight Systems: no cudaProfilerStart in the process "
				"yet (libcudart not loaded): this window is not marked for nsys");
		}
	}
	pthread_mutex_unlock(&cu.lock);
}

static void cu_window_close(uint64_t gen)
{
	pthread_mutex_lock(&cu.lock);
	atomic_store(&cu.pending_gen, gen); /* rec_window_collected clears it */
	arm_exit();
	cu.want = WANT_IDLE;
	if (cu.state == CU_READY && cu.enabled)
		disable_kinds();
	if (cu.state == CU_NSYS) {
		nvtx_end_step();
		if (cu.profiler_stop)
			cu.profiler_stop();
	}
	pthread_mutex_unlock(&cu.lock);
}

static void cu_step(const struct capture_step *s)
{
	char name[48];

	pthread_mutex_lock(&cu.lock);
	arm_exit();
	if (cu.state == CU_NSYS) {
		nvtx_end_step();
		if (s->recording) {
			snprintf(name, sizeof name, "ProfilerStep#%llu",
				 (unsigned long long)s->step);
			cu.nvtx_step = nvtxRangeStartA(name);
			cu.nvtx_open = true;
		}
	}
	pthread_mutex_unlock(&cu.lock);
}

/* Keeps a copy of a record that belongs to a later window. */
static void carry_add(uint8_t *next, size_t *nnext, size_t cap, const CUpti_Activity *r)
{
	size_t step = cupti_packed_size(r->kind);

	if (!step || *nnext + step > cap) {
		cu.carry_dropped++;
		return;
	}
	memcpy(next + *nnext, r, cupti_record_size(r->kind));
	*nnext += step;
}

/* A visitor of records (each_carried, each_done). */
typedef void (*record_fn)(const CUpti_Activity *r, void *arg);

/* Calls fn for each record kept in cu.carry (carry_add's layout). Host
 * thread. */
static void each_carried(record_fn fn, void *arg)
{
	const CUpti_Activity *r;
	size_t off = 0;

	while ((r = cupti_packed_next(cu.carry, cu.ncarry, &off)) != NULL)
		fn(r, arg);
}

/* Calls fn for each record of the completed buffers done[0..ndone). Host
 * thread. */
static void each_done(const struct cu_done *done, uint32_t ndone, record_fn fn, void *arg)
{
	uint32_t i;

	for (i = 0; i < ndone; i++) {
		uint8_t *buf = cu.pool.base + (size_t)done[i].idx * cu.pool.buf_size;
		CUpti_Activity *r = NULL;

		while (cu.fn.ActivityGetNextRecord(buf, done[i].valid, &r) == CUPTI_SUCCESS)
			fn(r, arg);
	}
}

/* Calls fn for every record of a window: those kept from the last one,
 * then those of the completed buffers. */
static void each_record(const struct cu_done *done, uint32_t ndone, record_fn fn, void *arg)
{
	each_carried(fn, arg);
	each_done(done, ndone, fn, arg);
}

static void scan_one(const CUpti_Activity *r, void *arg)
{
	cupti_conv_scan(arg, r);
}

struct carry_out {
	uint8_t *buf;
	size_t n, cap;
};

/* add_one's argument: the converter, and where later records go (NULL:
 * counted as dropped). */
struct add_ctx {
	struct cupti_conv *c;
	struct carry_out *o;
};

static void add_one(const CUpti_Activity *r, void *arg)
{
	struct add_ctx *a = arg;

	if (cupti_conv_add(a->c, r) == CUPTI_ROUTE_LATER) {
		if (a->o)
			carry_add(a->o->buf, &a->o->n, a->o->cap, r);
		else
			cu.carry_dropped++;
	}
}

/* Gives the converted buffers bufs[0..n) back to CUPTI's pool and frees
 * the list. Host thread. */
static void pool_give_back(struct cu_done *bufs, uint32_t n)
{
	uint32_t i;

	pthread_mutex_lock(&cu.pool.lock);
	for (i = 0; i < n; i++)
		cu.pool.free_idx[cu.pool.nfree++] = bufs[i].idx;
	pthread_mutex_unlock(&cu.pool.lock);
	free(bufs);
}

/* Whether the flight recorder keeps GPU work between windows (on, and not
 * prof.recorder{ cuda = false }). Any thread (the policy is fixed). */
static bool rec_keeps_gpu(void)
{
	return cu.h->cfg->recorder.enabled && cu.h->cfg->recorder.cuda;
}

/* A window's collect: converts its records (and those kept from the last
 * one); stops CUPTI when no window lies ahead and the recorder keeps no
 * GPU work. Host thread. */
static int window_collect(const struct capture_window *job, struct trace *t,
			  struct err *e)
{
	struct cupti_conv c;
	struct cupti_conv_opts o;
	struct cu_done *done = NULL;
	struct carry_out next = { 0 };
	uint32_t ndone, flag;
	size_t dropped = 0;
	uint64_t lost;
	bool last;

	(void)e;
	pthread_mutex_lock(&cu.flush_lock);
	pthread_mutex_lock(&cu.lock);
	if (cu.state != CU_READY) {
		pthread_mutex_unlock(&cu.lock);
		pthread_mutex_unlock(&cu.flush_lock);
		return 0;
	}
	/* Everything CUPTI holds, incomplete buffers included; but while the
	 * next window records, a forced flush would cut its GPU work short
	 * (records of unfinished work lose their timestamps): then only the
	 * complete buffers, and this window's stragglers are counted late.
	 * The same while the flight recorder records: its steps' GPU work
	 * (a dump may hold it) is not cut short either. */
	flag = cu.want == WANT_RECORD || cu.rec_want ? 0 : CUPTI_ACTIVITY_FLAG_FLUSH_FORCED;
	pthread_mutex_unlock(&cu.lock);

	cu.fn.ActivityFlushAll(flag);
	cu.fn.ActivityGetNumDroppedRecords(NULL, 0, &dropped);
	if (!cu.devices.n && !cu.devices_asked)
		devices_from_driver();
	pthread_mutex_lock(&cu.pool.lock);
	ndone = cu.pool.ndone;
	done = malloc((ndone + 1) * sizeof *done);
	if (done)
		memcpy(done, cu.pool.done, ndone * sizeof *done);
	else
		ndone = 0; /* no memory: the buffers are given back unread */
	cu.pool.ndone = 0;
	pthread_mutex_unlock(&cu.pool.lock);
	pthread_mutex_unlock(&cu.flush_lock);

	memset(&o, 0, sizeof o);
	o.start = job->start_ts;
	o.end = job->end_ts;
	o.prev_start = cu.prev_start;
	o.prev_end = cu.prev_end;
	o.pid = t->meta.pid;
	o.show = cu.show;
	o.api_name = api_name;
	o.devices = &cu.devices;
	o.corr_hint = cu.corr_hint;
	o.recorder = rec_keeps_gpu();
	next.cap = (size_t)cu.pool.nbuf * cu.pool.buf_size;
	next.buf = malloc(next.cap);
	cu.capcarry = next.buf ? next.cap : 0;
	cu.carry_dropped = 0;
	if (cupti_conv_init(&c, t, &o) == 0) {
		struct add_ctx a = { &c, next.buf ? &next : NULL };

		each_record(done, ndone, scan_one, &c);
		each_record(done, ndone, add_one, &a);
		cupti_conv_finish(&c);
	}
	free(cu.carry);
	cu.carry = next.buf;
	cu.ncarry = next.n;

	pool_give_back(done, ndone);

	cu.corr_hint = c.map_n;
	cu.prev_start = job->start_ts;
	cu.prev_end = job->end_ts;
	lost = (uint64_t)dropped + c.zero_ts + c.late + cu.carry_dropped;
	t->counters.gpu_dropped += lost;
	log_msg(LOG_DEBUG, "window %u: %llu GPU records -> events, %llu kept for the "
		"next window", job->window, (unsigned long long)c.records,
		(unsigned long long)next.n);
	if (lost)
		log_msg(LOG_WARN, "window %u: %llu GPU records dropped (%llu: the GPU record "
			"pool of %zu MiB was full, raise prof.capture{buffer_mb = ...}; %llu: "
			"no timestamps; %llu: came after the previous window was written; "
			"%llu: no room to keep past the window's end)", job->window,
			(unsigned long long)lost, (unsigned long long)dropped,
			cu.pool_bytes >> 20, (unsigned long long)c.zero_ts,
			(unsigned long long)c.late, (unsigned long long)cu.carry_dropped);
	cupti_conv_free(&c);
	pthread_mutex_lock(&cu.lock);
	last = job->gen == cu.last_gen; /* no later window waits to be written */
	pthread_mutex_unlock(&cu.lock);
	if (last && !cu.steps_from_cuda &&
	    !rec_keeps_gpu() &&
	    !cu.h->ahead(cu.h->ctx))
		stop();
	return 0;
}

/* ------------------------------------------------------------ flight recorder */

/* Between windows, with prof.recorder{} on, CUPTI stays enabled and what it
 * delivers goes into the recorder's ring (docs/recorder.md, "GPU work"):
 *
 *   cu_recorder      a segment opened: kinds on, completed buffers copied
 *                    into the ring (rec_copy); 0: off again (a window
 *                    opens, the process ends).
 *   rec_buffer       CUPTI's thread: appends each record of a completed
 *                    buffer to the open segment (EVBUF_CUPTI), then gives
 *                    the buffer back; while a closed window waits for its
 *                    collect, or a dump was taken and not yet collected,
 *                    the buffer goes on the done list too, as in a window.
 *   cu_dump_taken    a dump took its segments (before they close): later
 *                    buffers are its too, from the done list.
 *   rec_collect      a dump: converts the records its segments hold
 *                    (trace.raw), those of the done list with what a flush
 *                    delivers now, and those a window's collect kept past
 *                    its end (cu.carry), each once (the same record can
 *                    come two ways), clipped to the dump's span as a
 *                    window's are.
 */

/* Keeps a copy of a DEVICE record: CUPTI writes it once, when the kind
 * is enabled, and the segment that holds it goes long before most dumps.
 * Takes the pool's lock. */
static void rec_keep_device(const CUpti_ActivityDevice5 *d)
{
	struct cu_pool *p = &cu.pool;
	uint32_t i;

	pthread_mutex_lock(&p->lock);
	for (i = 0; i < p->ndevrec; i++)
		if (p->devrec[i].id == d->id)
			break;
	if (i < REC_DEVICES) {
		memcpy(&p->devrec[i], d, sizeof *d);
		if (i == p->ndevrec)
			p->ndevrec++;
	}
	pthread_mutex_unlock(&p->lock);
}

/* Keeps in the salvage file the names record `r` refers to by pointer
 * or callback id (a kernel's name, an API call's, a device and its
 * name), the first time each is seen, so that `prof salvage` can name
 * the records a dead process left in its ring. CUPTI's thread (or the
 * host thread's flush); no lock held. */
static void rec_salvage_names(const CUpti_Activity *r, size_t size)
{
	const char *name = NULL;

	if (!cu.h->salvage_gpu)
		return;
	switch (r->kind) {
	case CUPTI_ACTIVITY_KIND_KERNEL:
	case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
		const CUpti_ActivityKernel10 *k = (const void *)r;

		if (k->name && !cupti_names_seen(SALV_GPU_KERNEL, (uintptr_t)k->name))
			cu.h->salvage_gpu(SALV_GPU_KERNEL, (uintptr_t)k->name, NULL, 0,
					  k->name);
		break;
	}
	case CUPTI_ACTIVITY_KIND_RUNTIME:
	case CUPTI_ACTIVITY_KIND_DRIVER: {
		const CUpti_ActivityAPI *a = (const void *)r;
		bool drv = r->kind == CUPTI_ACTIVITY_KIND_DRIVER;
		uint64_t key = (uint64_t)drv << 32 | a->cbid;

		if (cupti_names_seen(SALV_GPU_API, key))
			break;
		if (cu.fn.GetCallbackName(drv ? CUPTI_CB_DOMAIN_DRIVER_API
					  : CUPTI_CB_DOMAIN_RUNTIME_API, a->cbid,
					  &name) == CUPTI_SUCCESS && name)
			cu.h->salvage_gpu(SALV_GPU_API, key, NULL, 0, name);
		break;
	}
	case CUPTI_ACTIVITY_KIND_DEVICE: {
		const CUpti_ActivityDevice5 *d = (const void *)r;

		if (!cupti_names_seen(SALV_GPU_DEVICE, d->id))
			cu.h->salvage_gpu(SALV_GPU_DEVICE, d->id, r, size, d->name);
		break;
	}
	default:
		break;
	}
}

/* Appends every record of buffer[0..valid) to the open segment. CUPTI's
 * thread (or the host thread's flush); no lock held. */
static void rec_append(uint8_t *buffer, size_t valid, int64_t now)
{
	CUpti_Activity *r = NULL;

	while (cu.fn.ActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) {
		size_t size = cupti_record_size(r->kind);

		if (!size || size > EVBUF_NAME_MAX)
			continue; /* a kind profhost does not read */
		if (r->kind == CUPTI_ACTIVITY_KIND_DEVICE)
			rec_keep_device((const CUpti_ActivityDevice5 *)(const void *)r);
		rec_salvage_names(r, size);
		/* Dropped and counted by the ring when it is full. */
		cu.h->shim->evbuf_append_raw(EVBUF_CUPTI, now, r, (uint32_t)size, 0, 0);
	}
}

/* buf_completed's recorder path: true when the buffer was copied into the
 * ring and given back; false when buf_completed puts it on the done list
 * as usual (the recorder is off, a window's collect or a dump needs it;
 * its records are in the ring all the same). CUPTI's thread; takes the
 * pool's lock. */
static bool rec_buffer(uint8_t *buffer, size_t valid)
{
	struct cu_pool *p = &cu.pool;
	size_t off;

	if (!atomic_load_explicit(&cu.rec_copy, memory_order_acquire) || !p->base ||
	    buffer < p->base ||
	    (off = (size_t)(buffer - p->base)) >= (size_t)p->nbuf * p->buf_size)
		return false;
	if (valid > p->buf_size)
		valid = p->buf_size;
	rec_append(buffer, valid, clock_now_ns());
	/* After the appends: a dump taken before this load gets the buffer
	 * from the done list; one taken after holds the records in its
	 * segments (cu_dump_taken comes before they close). */
	pthread_mutex_lock(&p->lock);
	if (atomic_load(&cu.pending_gen) || atomic_load(&cu.dumping)) {
		pthread_mutex_unlock(&p->lock);
		return false;
	}
	p->free_idx[p->nfree++] = (uint32_t)(off / p->buf_size);
	pthread_mutex_unlock(&p->lock);
	return true;
}

/* capture_recorder_ops.dump_taken: a recorder dump is taking its segments, before
 * they close (stepping thread or the dumping thread, window lock held):
 * buffers completed from now on stay on the done list for its collect. */
static void cu_dump_taken(void)
{
	atomic_fetch_add(&cu.dumping, 1);
}

/* capture_recorder_ops.dump_dropped: a dump cu_dump_taken counted will not be
 * collected (memory ran out). Its count goes, as its collect would take
 * it, so completed buffers go back to CUPTI again once no other dump or
 * window waits for them (what the done list holds goes at the next
 * collect). Window lock held or the host thread; takes the pool's lock. */
static void cu_dump_dropped(void)
{
	pthread_mutex_lock(&cu.pool.lock);
	if (atomic_load(&cu.dumping) > 0)
		atomic_fetch_sub(&cu.dumping, 1);
	pthread_mutex_unlock(&cu.pool.lock);
}

/* capture_recorder_ops.segment: stepping thread (or the thread ending the
 * process), window lock held; takes cu.lock, then the pool's lock. A
 * segment opened (gen): the kinds stay on, a stopped CUPTI starts over,
 * completed buffers go into the ring (not with prof.recorder{ cuda =
 * false }: GPU capture stays the windows'). 0: the recorder stopped: kinds off
 * unless a warm-up or window wants them. */
static void cu_recorder(uint64_t gen)
{
	pthread_mutex_lock(&cu.lock);
	if (gen) {
		if (!cu.rec_want && cu.nkinds && rec_keeps_gpu()) {
			cu.rec_want = true;
			if (cu.state == CU_STOPPED)
				start();
			if (cu.state == CU_READY && !cu.enabled)
				enable_kinds();
			if (cu.state == CU_READY)
				atomic_store(&cu.rec_copy, 1);
		}
		arm_exit();
	} else if (cu.rec_want) {
		cu.rec_want = false;
		atomic_store(&cu.rec_copy, 0);
		if (cu.state == CU_READY && cu.enabled && cu.want == WANT_IDLE)
			disable_kinds();
	}
	pthread_mutex_unlock(&cu.lock);
}

/* capture_recorder_ops.rotated: host thread; takes cu.lock. CUPTI hands
 * a buffer over only when it is full: with the default buffers the last
 * steps' GPU work would sit in CUPTI's memory, out of the ring and the
 * salvage file, when the process is killed. A flush of the completed
 * records (not forced: work in flight keeps its record) puts them in the
 * open segment (rec_buffer), so a SIGKILL loses about a segment's worth. */
static void cu_recorder_rotated(void)
{
	bool flush;

	pthread_mutex_lock(&cu.flush_lock);
	pthread_mutex_lock(&cu.lock);
	flush = cu.state == CU_READY && cu.rec_want && cu.nkinds;
	pthread_mutex_unlock(&cu.lock);
	if (flush)
		cu.fn.ActivityFlushAll(0);
	pthread_mutex_unlock(&cu.flush_lock);
}

/* The records a dump converts, each once. */
struct rec_set {
	const CUpti_Activity **r;
	bool *carried;               /* it came from cu.carry */
	size_t n, cap, ccap;
	uint32_t *slots;             /* htab.h's, over r[] by content */
	size_t nslots;
};

/* The hash of a record's bytes. */
static uint64_t rec_hash(const CUpti_Activity *r)
{
	return hash_fnv64(HASH_FNV64_SEED, r, cupti_record_size(r->kind));
}

static uint64_t rec_set_hash(const void *ctx, size_t i)
{
	return rec_hash(((const struct rec_set *)ctx)->r[i]);
}

/* Adds `r` unless an identical record is in the set already: the same
 * record can reach a dump twice, copied into its segments and through a
 * window's done list (kept in cu.carry). -1: out of memory. */
static int rec_set_add(struct rec_set *s, const CUpti_Activity *r, bool carried)
{
	size_t size = cupti_record_size(r->kind), k;
	const CUpti_Activity **nr;
	bool *nc;

	if (!size)
		return 0;
	if (htab_full(s->n, s->nslots) &&
	    htab_rebuild(&s->slots, &s->nslots, s->nslots ? 2 * s->nslots : 4096, 0,
			 s->n, rec_set_hash, s) != 0)
		return -1;
	for (k = htab_first(rec_hash(r), s->nslots); s->slots[k]; k = htab_next(k, s->nslots)) {
		const CUpti_Activity *o = s->r[s->slots[k] - 1];

		if (o->kind == r->kind && memcmp(o, r, size) == 0)
			return 0; /* a copy */
	}
	nr = grow_array(s->r, &s->cap, s->n + 1, sizeof *nr, 1024);
	if (!nr)
		return -1;
	s->r = nr;
	nc = grow_array(s->carried, &s->ccap, s->n + 1, sizeof *nc, 1024);
	if (!nc)
		return -1;
	s->carried = nc;
	s->slots[k] = (uint32_t)(s->n + 1);
	s->r[s->n] = r;
	s->carried[s->n++] = carried;
	return 0;
}

/* gather_one's argument: the set, whether the records come from
 * cu.carry, and the first failure (then nothing more is added). */
struct gather_ctx {
	struct rec_set *s;
	bool carried;
	int rc;
};

static void gather_one(const CUpti_Activity *r, void *arg)
{
	struct gather_ctx *g = arg;

	if (g->rc == 0)
		g->rc = rec_set_add(g->s, r, g->carried);
}

/* Gathers the dump's records: the EVBUF_CUPTI records of `t` (its
 * segments), those of the buffers bufs[0..n), and those kept in cu.carry
 * (delivered through a window's done list, maybe after the dump took its
 * segments), each once. 0, or -1 when memory ran out (the set holds what
 * fit). Host thread. */
static int rec_gather(struct rec_set *s, const struct trace *t,
		      const struct cu_done *bufs, uint32_t n)
{
	struct gather_ctx g = { s, false, 0 };
	const struct trace_raw *r;
	size_t off = 0;

	while ((r = trace_raw_next(t, &off)) != NULL) {
		const CUpti_Activity *a = (const void *)(r + 1);

		if (r->kind == EVBUF_CUPTI && r->len >= sizeof *a &&
		    r->len == cupti_record_size(a->kind))
			gather_one(a, &g);
	}
	each_done(bufs, n, gather_one, &g);
	g.carried = true;
	each_carried(gather_one, &g);
	return g.rc;
}

static void rec_set_free(struct rec_set *s)
{
	free(s->r);
	free(s->carried);
	free(s->slots);
	memset(s, 0, sizeof *s);
}

/* capture_ops.collect of a recorder dump: host thread. Unless a window
 * records or waits for its collect (the done list is its), flushes CUPTI
 * (completed buffers only: the program goes on) and takes the done list;
 * converts those records, those of the dump's segments and those kept in
 * cu.carry, each once (rec_gather). What lies after the dump's end is
 * kept in cu.carry, for a later dump or a window. */
static int rec_collect(const struct capture_window *job, struct trace *t,
		       struct err *e)
{
	struct cupti_conv c;
	struct cupti_conv_opts o;
	struct cu_done *bufs;
	CUpti_ActivityDevice5 devs[REC_DEVICES];
	struct rec_set set = { 0 };
	struct carry_out next = { 0 };
	uint32_t n = 0, ndevs, i;
	size_t k, dropped = 0;
	bool ready, flush, window;

	pthread_mutex_lock(&cu.flush_lock);
	pthread_mutex_lock(&cu.lock);
	ready = cu.state == CU_READY && cu.nkinds;
	flush = ready && cu.want != WANT_RECORD && !atomic_load(&cu.pending_gen);
	pthread_mutex_unlock(&cu.lock);
	if (flush) {
		cu.fn.ActivityFlushAll(0);
		cu.fn.ActivityGetNumDroppedRecords(NULL, 0, &dropped);
	}
	bufs = flush ? malloc((size_t)cu.pool.nbuf * sizeof *bufs) : NULL;
	pthread_mutex_lock(&cu.pool.lock);
	if (flush) {
		for (i = 0; i < cu.pool.ndone; i++)
			if (bufs)
				bufs[n++] = cu.pool.done[i];
			else /* no memory: given back unread */
				cu.pool.free_idx[cu.pool.nfree++] = cu.pool.done[i].idx;
		cu.pool.ndone = 0;
	}
	if (atomic_load(&cu.dumping) > 0)
		atomic_fetch_sub(&cu.dumping, 1);
	ndevs = cu.pool.ndevrec;
	memcpy(devs, cu.pool.devrec, ndevs * sizeof *devs);
	pthread_mutex_unlock(&cu.pool.lock);
	pthread_mutex_unlock(&cu.flush_lock);
	if (!ready) {
		free(bufs);
		return 0;
	}
	if (!cu.devices.n && !ndevs && !cu.devices_asked)
		devices_from_driver();

	/* A window opened (or closed) meanwhile: cu.carry is the window's
	 * too, records are only added to it. Else it is rebuilt. */
	pthread_mutex_lock(&cu.lock);
	window = cu.want == WANT_RECORD || atomic_load(&cu.pending_gen);
	pthread_mutex_unlock(&cu.lock);
	if (window && !cu.carry) {
		cu.capcarry = (size_t)cu.pool.nbuf * cu.pool.buf_size;
		cu.carry = malloc(cu.capcarry);
		cu.ncarry = 0;
		if (!cu.carry)
			cu.capcarry = 0;
	} else if (!window) {
		next.cap = (size_t)cu.pool.nbuf * cu.pool.buf_size;
		next.buf = malloc(next.cap);
		if (!next.buf)
			next.cap = 0;
	}

	memset(&o, 0, sizeof o);
	o.start = job->start_ts;
	o.end = job->end_ts;
	o.pid = t->meta.pid;
	o.show = cu.show;
	o.api_name = api_name;
	o.devices = &cu.devices;
	o.corr_hint = cu.corr_hint;
	o.recorder = true;
	if (rec_gather(&set, t, bufs, n) != 0)
		t->oom = 1;
	if (cupti_conv_init(&c, t, &o) == 0) {
		for (i = 0; i < ndevs; i++)
			cupti_conv_scan(&c, (const CUpti_Activity *)(const void *)&devs[i]);
		for (k = 0; k < set.n; k++)
			cupti_conv_scan(&c, set.r[k]);
		for (k = 0; k < set.n; k++) {
			if (cupti_conv_add(&c, set.r[k]) != CUPTI_ROUTE_LATER)
				continue;
			if (!window)
				carry_add(next.buf, &next.n, next.cap, set.r[k]);
			else if (!set.carried[k])
				carry_add(cu.carry, &cu.ncarry, cu.capcarry, set.r[k]);
		}
		cupti_conv_finish(&c);
	}
	rec_set_free(&set);
	if (!window) {
		free(cu.carry);
		cu.carry = next.buf;
		cu.ncarry = next.n;
		cu.capcarry = next.cap;
	}

	pool_give_back(bufs, n);

	t->counters.gpu_dropped += (uint64_t)dropped + c.zero_ts;
	log_msg(LOG_DEBUG, "recorder dump %u: %llu GPU records -> events", job->window,
		(unsigned long long)c.records);
	if (dropped || c.zero_ts)
		log_msg(LOG_WARN, "recorder dump %u: %llu GPU records dropped (%llu: the "
			"GPU record pool of %zu MiB was full, raise prof.capture{buffer_mb = "
			"...}; %llu: no timestamps)", job->window,
			(unsigned long long)dropped + c.zero_ts, (unsigned long long)dropped,
			cu.pool_bytes >> 20, (unsigned long long)c.zero_ts);
	cupti_conv_free(&c);
	if (t->oom)
		return err_set(e, "out of memory converting the GPU records of recorder "
			       "dump %u", job->window);
	return 0;
}

/* A window's collect ended: its buffers no longer need the done list. Host
 * thread. */
static void rec_window_collected(uint64_t gen)
{
	uint64_t g = gen;

	atomic_compare_exchange_strong(&cu.pending_gen, &g, 0);
}

/* capture_ops.collect: host thread. A window's records, or a recorder
 * dump's. */
static int cu_collect(const struct capture_window *job, struct trace *t,
		      struct err *e)
{
	int rc;

	if (job->dump)
		return rec_collect(job, t, e);
	rc = window_collect(job, t, e);
	rec_window_collected(job->gen);
	return rc;
}

/* The process is ending after its last window. CUPTI is left as it is:
 * the CUDA runtime may be tearing down, and nothing will run after us. */
static void cu_fini(void)
{
	pthread_mutex_lock(&cu.lock);
	atomic_store(&cu.ext_on, 0);
	if (cu.state == CU_READY)
		set_hooks(false);
	nvtx_end_step();
	pthread_mutex_unlock(&cu.lock);
}

/* Device, then stream, then the oldest launch first. */
static int by_stream(const void *a, const void *b)
{
	const struct capture_gpu_launch *x = a, *y = b;

	if (x->device != y->device)
		return x->device < y->device ? -1 : 1;
	if (x->stream != y->stream)
		return x->stream < y->stream ? -1 : 1;
	if (x->launched_ns != y->launched_ns)
		return x->launched_ns < y->launched_ns ? -1 : 1;
	return x->corr < y->corr ? -1 : x->corr > y->corr;
}

/* capture_hang_ops.gpu: the kernel launches whose record has not come.
 * Flushes the buffers CUPTI holds whose records are complete (flag 0:
 * records of unfinished work stay with CUPTI, the window's records whole),
 * whose kernels the buffer callback takes out, then lists what is left.
 * The watchdog's thread, no lock held (the flush calls buf_completed);
 * takes the flush lock: waits for a flush of the host thread's, never for
 * a window's conversion. */
static int cu_hang_gpu(struct capture_gpu_hang *g)
{
	struct cupti_launch l[CAPTURE_GPU_MAX];
	const char *why = NULL;
	uint32_t id;
	size_t i, n;

	pthread_mutex_lock(&cu.flush_lock);
	pthread_mutex_lock(&cu.lock);
	switch (cu.state) {
	case CU_OFF:
		why = "no GPU capture (prof.capture{} records no CUDA kernels)";
		break;
	case CU_WAITING:
		why = "the CUDA driver has not started GPU capture yet (no CUDA call so far)";
		break;
	case CU_NSYS:
		why = "Nsight Systems records the GPU in this process, not profhost";
		break;
	case CU_DEAD:
		why = cu.no_gpu_note[0] ? cu.no_gpu_note : "GPU capture is off in this process";
		break;
	default:
		if (!cu.show.kernels)
			why = "kernels are not captured (prof.capture{cuda_kernels = false})";
		else if (!cu.inflight.slot)
			why = "no memory for the table of kernels in flight";
		else if (!atomic_load(&cu.track))
			why = "CUPTI is not recording kernels now (outside capture windows): "
			      "the kernels in flight are known inside a window or with prof.recorder{}";
	}
	pthread_mutex_unlock(&cu.lock);
	if (why) {
		pthread_mutex_unlock(&cu.flush_lock);
		snprintf(g->note, sizeof g->note, "%s", why);
		return 0;
	}
	cu.fn.ActivityFlushAll(0);
	n = cupti_inflight_take(&cu.inflight, l, CAPTURE_GPU_MAX, &g->more, &g->forgotten);
	pthread_mutex_unlock(&cu.flush_lock);
	for (i = 0; i < n; i++) {
		struct capture_gpu_launch *o = &g->launch[i];

		memcpy(o->name, l[i].name, sizeof o->name < sizeof l[i].name ?
		       sizeof o->name : sizeof l[i].name);
		o->name[sizeof o->name - 1] = '\0';
		o->launched_ns = l[i].ts;
		o->tid = l[i].tid;
		o->corr = l[i].corr;
		o->device = -1;
		o->stream = -1;
		if (cu.fn.GetDeviceId && l[i].ctx &&
		    cu.fn.GetDeviceId(l[i].ctx, &id) == CUPTI_SUCCESS)
			o->device = (int32_t)id;
		if (cu.fn.GetStreamIdEx && l[i].ctx && l[i].has_stream &&
		    cu.fn.GetStreamIdEx(l[i].ctx, l[i].stream, l[i].per_thread, &id) ==
			    CUPTI_SUCCESS)
			o->stream = id;
	}
	qsort(g->launch, n, sizeof g->launch[0], by_stream);
	g->n = n;
	snprintf(g->note, sizeof g->note, "%s", "");
	return 1;
}

/* GPU work between windows goes into the recorder's ring; the watchdog
 * gets the kernels in flight. */
static const struct capture_recorder_ops cu_recorder_ops = {
	.segment = cu_recorder,
	.dump_taken = cu_dump_taken,
	.dump_dropped = cu_dump_dropped,
	.rotated = cu_recorder_rotated,
};

static const struct capture_hang_ops cu_hang_ops = {
	.gpu = cu_hang_gpu,
};

const struct capture_ops cupti_capture = {
	.name = "cupti",
	.init = cu_init,
	.warmup = cu_warmup,
	.window_open = cu_window_open,
	.window_close = cu_window_close,
	.collect = cu_collect,
	.fini = cu_fini,
	.step = cu_step,
	.cuda_inject = cu_inject,
	.recorder = &cu_recorder_ops,
	.hang = &cu_hang_ops,
};

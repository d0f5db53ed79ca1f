/*
 * cupti — GPU capture through CUPTI: the lifecycle (see cupti.h; the
 * files of the source and what they share: cupti_internal.h).
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
 * hang watchdog's thread flushes for a report (cupti_hang.c). It is held for
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
 * what is left (cupti_hang.c).
 * The flight recorder (prof.recorder{}, cupti_recorder.c): while it
 * keeps segments, the kinds stay enabled between windows and each buffer
 * CUPTI completes is copied, record by record, into the open segment
 * (EVBUF_CUPTI records, appended on CUPTI's thread), so the ring bounds
 * them; a dump's collect converts the records its segments hold, with
 * those a flush delivers then.
 */
#include "cupti.h"
#include "cupti_internal.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nvtx3/nvToolsExt.h>

#include "../../common/log.h"

/* The source's state (cupti_internal.h), by the name every file of the
 * source uses. */
static struct cupti_state *const cu = &cupti_cu;

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

/* Undoes what was set up and turns GPU capture off for the process.
 * Lock held. */
static void teardown(void)
{
	size_t i;

	atomic_store(&cu->ext_on, 0);
	atomic_store(&cu->track, 0);
	atomic_store(&cu->rec_copy, 0);
	cupti_set_hooks(false);
	if (cu->enabled)
		for (i = 0; i < cu->nkinds; i++)
			if (!cu->kind_bad[i])
				cu->fn.ActivityDisable(cu->kinds[i]);
	cu->enabled = false;
	if (cu->sub) {
		cu->fn.Unsubscribe(cu->sub);
		cu->sub = NULL;
	}
	cu->state = CU_DEAD;
}

/* Says in one line why GPU capture stops, then tears it down. Lock held. */
static void give_up(CUptiResult rc, const char *call)
{
	char buf[48];
	const char *name = cupti_result_name(&cu->fn, rc, buf, sizeof buf);

	switch (rc) {
	case CUPTI_ERROR_UNKNOWN:
	case CUPTI_ERROR_NOT_INITIALIZED:
	case CUPTI_ERROR_INVALID_DEVICE:
		snprintf(cu->no_gpu_note, sizeof cu->no_gpu_note, "no CUDA driver or "
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

/* The configured kinds on; a failure CUPTI does not excuse gives up (said
 * once, GPU capture off). Lock held. */
static void enable_kinds(void)
{
	CUptiResult rc = cupti_kinds_enable();

	if (rc != CUPTI_SUCCESS)
		give_up(rc, "cuptiActivityEnable");
}

/* CUPTI's buffer-completed callback: the launches whose kernel record
 * came are freed (cupti_hang.c), the recorder copies the buffer into its
 * ring (cupti_recorder.c), else the buffer goes on the pool's done list
 * for the next collect. CUPTI's thread or a flushing thread; takes the
 * pool's lock. */
static void CUPTIAPI buf_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer,
				   size_t size, size_t valid)
{
	struct cupti_pool *p = &cu->pool;
	size_t off;

	(void)ctx;
	(void)stream;
	(void)size;
	if (cu->inflight.slot && buffer && valid <= size)
		cupti_track_buffer(buffer, valid);
	if (cupti_rec_buffer(buffer, valid))
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

	if (!cu->fn.handle) {
		enum cupti_load_rc lr = cupti_load(&cu->fn, &s, &e);

		if (lr != CUPTI_LOAD_OK) {
			log_msg(lr == CUPTI_LOAD_NOT_FOUND ? LOG_INFO : LOG_WARN,
				"%s: GPU capture is off, CPU capture goes on", e.msg);
			cu->state = CU_DEAD;
			return;
		}
		if (cu->fn.GetVersion(&version) != CUPTI_SUCCESS ||
		    version < CUPTI_MIN_API_VERSION) {
			log_msg(LOG_WARN, "GPU capture is off: %s is CUPTI API version %u "
				"(CUDA 12 or older) and this build reads CUDA 13's records "
				"(CUPTI API %d or newer); point PROF_CUPTI_LIB at a CUDA 13 "
				"libcupti; CPU capture goes on", cu->fn.path, version,
				CUPTI_MIN_API_VERSION);
			cupti_unload(&cu->fn);
			cu->state = CU_DEAD;
			return;
		}
		log_msg(LOG_DEBUG, "CUPTI %u: %s (%s)", version, cu->fn.path,
			cu->fn.reused ? "already loaded by the process" : "loaded");
		cu->names[0] = calloc(cupti_cbid_size[0], sizeof *cu->names[0]);
		cu->names[1] = calloc(cupti_cbid_size[1], sizeof *cu->names[1]);
	}
	rc = cu->fn.Subscribe(&cu->sub, cupti_api_callback, NULL);
	if (rc != CUPTI_SUCCESS) {
		cu->sub = NULL;
		give_up(rc, "cuptiSubscribe");
		return;
	}
	if (cu->fn.SetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM) != CUPTI_SUCCESS)
		log_msg(LOG_DEBUG, "CUPTI: cannot report system thread ids; CUDA calls may "
			"sit on tracks of their own");
	/* One clock, registered before any kind is enabled. */
	rc = cu->fn.ActivityRegisterTimestampCallback(cupti_clock);
	if (rc != CUPTI_SUCCESS) {
		give_up(rc, "cuptiActivityRegisterTimestampCallback");
		return;
	}
	if (cu->fn.ActivityEnableLatencyTimestamps)
		cu->fn.ActivityEnableLatencyTimestamps(1);
	rc = cu->fn.ActivityRegisterCallbacks(cupti_buf_requested, buf_completed);
	if (rc != CUPTI_SUCCESS) {
		give_up(rc, "cuptiActivityRegisterCallbacks");
		return;
	}
	if (!cu->pool.base && cupti_pool_init(&cu->pool, cu->pool_bytes) != 0) {
		log_msg(LOG_WARN, "GPU capture is off: cannot reserve %zu MiB for GPU "
			"records; CPU capture goes on", cu->pool_bytes >> 20);
		teardown();
		return;
	}
	rc = cupti_enable_callbacks();
	if (rc != CUPTI_SUCCESS) {
		give_up(rc, "cuptiEnableCallback");
		return;
	}
	cu->state = CU_READY;
	if (cu->ext)
		cupti_set_hooks(true);
	if (cu->want != CU_WANT_IDLE || cu->rec_want)
		enable_kinds();
	if (cu->state == CU_READY && cu->rec_want && cu->nkinds)
		atomic_store(&cu->rec_copy, 1);
}

/* Finalizes CUPTI when no window lies ahead, so the job runs at full speed;
 * not once the process launched a CUDA graph while CUPTI was attached:
 * CUPTI stays subscribed with its kinds off, as between windows (a
 * finalize there makes the graph's next launch fail, and the CUDA context
 * with it). Host thread, lock not held; takes the flush lock (no hang
 * report flushes meanwhile). */
static void stop(void)
{
	pthread_mutex_lock(&cu->flush_lock);
	pthread_mutex_lock(&cu->lock);
	if (cu->state != CU_READY || cu->want != CU_WANT_IDLE || cu->rec_want) {
		pthread_mutex_unlock(&cu->lock);
		pthread_mutex_unlock(&cu->flush_lock);
		return;
	}
	if (atomic_load_explicit(&cu->graphs_seen, memory_order_relaxed)) {
		pthread_mutex_unlock(&cu->lock);
		pthread_mutex_unlock(&cu->flush_lock);
		log_msg(LOG_DEBUG, "CUPTI stays attached after the last window: the "
			"program launches CUDA graphs, whose later launches fail once "
			"CUPTI is finalized");
		return;
	}
	if (cu->enabled)
		cupti_kinds_disable();
	cupti_set_hooks(false);
	cu->state = CU_STOPPING;
	pthread_mutex_unlock(&cu->lock);

	cu->fn.Unsubscribe(cu->sub);
	cu->fn.Finalize();
	cupti_inflight_clear(&cu->inflight); /* no record comes any more */
	cupti_pool_reset(&cu->pool);
	free(cu->carry);
	cu->carry = NULL;
	cu->ncarry = cu->capcarry = 0;

	pthread_mutex_lock(&cu->lock);
	cu->sub = NULL;
	cu->state = CU_STOPPED;
	log_msg(LOG_DEBUG, "CUPTI finalized: no capture window ahead");
	if (cu->want != CU_WANT_IDLE || cu->rec_want)
		start(); /* a window began meanwhile */
	pthread_mutex_unlock(&cu->lock);
	pthread_mutex_unlock(&cu->flush_lock);
}

static void nvtx_end_step(void)
{
	if (cu->nvtx_open) {
		nvtxRangeEnd(cu->nvtx_step);
		cu->nvtx_open = false;
	}
}

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
	cu->h = h;
	cu->show.kernels = cfg->capture.cuda_kernels;
	cu->show.memcpy = cfg->capture.cuda_memcpy;
	cu->show.memset = cfg->capture.cuda_memset;
	cu->show.runtime = cfg->capture.cuda_runtime;
	cu->show.driver = cfg->capture.cuda_driver;
	cu->show.sync = cfg->capture.cuda_sync;
	cu->show.memory = cfg->capture.cuda_memory;
	cu->show.overhead = true;
	if (cu->show.kernels)
		cu->kinds[n++] = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
	if (cu->show.memcpy)
		cu->kinds[n++] = CUPTI_ACTIVITY_KIND_MEMCPY;
	if (cu->show.memset)
		cu->kinds[n++] = CUPTI_ACTIVITY_KIND_MEMSET;
	if (cu->show.runtime)
		cu->kinds[n++] = CUPTI_ACTIVITY_KIND_RUNTIME;
	if (cu->show.driver)
		cu->kinds[n++] = CUPTI_ACTIVITY_KIND_DRIVER;
	if (cu->show.sync)
		cu->kinds[n++] = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
	if (cu->show.memory)
		cu->kinds[n++] = CUPTI_ACTIVITY_KIND_MEMORY2;
	if (n) {
		cu->ext = cu->show.runtime || cu->show.driver;
		if (cu->ext)
			cu->kinds[n++] = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
		cu->kinds[n++] = CUPTI_ACTIVITY_KIND_OVERHEAD;
		cu->kinds[n++] = CUPTI_ACTIVITY_KIND_DEVICE;
	}
	cu->nkinds = n;
	cu->backtrace_ns = (int64_t)cfg->capture.cuda_backtrace_us * 1000;
	atomic_store(&cu->next_ext, 1);
	cu->pool_bytes = cfg->capture.buffer_bytes;
	if (cfg->steps.kernel) {
		bad = cupti_pattern_check(cfg->steps.kernel);
		if (bad)
			log_msg(LOG_WARN, "prof.steps{kernel = \"%s\"}: %s: steps are not "
				"counted from kernel launches", cfg->steps.kernel, bad);
		else
			cu->kernel_pattern = strdup(cfg->steps.kernel);
	}
	cu->steps_from_cuda = cfg->steps.cuda || cu->kernel_pattern;
	cu->watch = cfg->watchdog.enabled && cu->show.kernels;
	if (cu->watch && cupti_inflight_init(&cu->inflight, CUPTI_INFLIGHT_SLOTS) != 0)
		log_msg(LOG_WARN, "prof.watchdog: no memory for the table of kernels in "
			"flight: hang reports will not list them");
	if (!n && !cu->steps_from_cuda) {
		cu->state = CU_OFF;
		return 0;
	}
	if (getenv("NSYS_PROFILING_SESSION_ID")) {
		cu->state = CU_NSYS;
		log_msg(LOG_INFO, "Nsight Systems is profiling this process: profhost does "
			"not subscribe to CUPTI; its schedule calls cudaProfilerStart/Stop "
			"(use nsys profile --capture-range=cudaProfilerApi) and marks steps "
			"with NVTX");
		return 0;
	}
	if (injected_by_driver(h)) {
		cu->state = CU_WAITING;
		log_msg(LOG_DEBUG, "GPU capture starts when the CUDA driver calls "
			"InitializeInjection");
		return 0;
	}
	pthread_mutex_lock(&cu->lock);
	start();
	pthread_mutex_unlock(&cu->lock);
	return 0;
}

/* capture_ops.cuda_inject: starts GPU capture if it waits for the driver.
 * Any thread; never twice. */
static void cu_inject(void)
{
	pthread_mutex_lock(&cu->lock);
	if (cu->state == CU_WAITING)
		start();
	pthread_mutex_unlock(&cu->lock);
}

/* Arms the host's exit path to run before the CUDA runtime's exit handler
 * (cu->exit_armed), once CUPTI is up and the driver initialised: from each
 * window and step callback, so that a window with no steps (an NVTX
 * capture range) arms it too. cu->lock held. */
static void arm_exit(void)
{
	if (!cu->exit_armed && cu->state == CU_READY && cupti_driver_up()) {
		cu->exit_armed = true;
		cu->h->arm_exit();
	}
}

/* A warm-up phase or a window begins: kinds on (a stopped CUPTI starts
 * over). Stepping thread, window lock held. */
static void want(enum cupti_want w)
{
	pthread_mutex_lock(&cu->lock);
	cu->want = w;
	if (cu->state == CU_STOPPED)
		start();
	if (cu->state == CU_READY && !cu->enabled && cu->nkinds)
		enable_kinds();
	arm_exit();
	pthread_mutex_unlock(&cu->lock);
}

/* capture_ops.warmup, window_open, window_close, step: stepping thread,
 * window lock held. */
static void cu_warmup(void)
{
	want(CU_WANT_WARMUP);
}

static void cu_window_open(uint64_t gen)
{
	want(CU_WANT_RECORD);
	pthread_mutex_lock(&cu->lock);
	cu->last_gen = gen;
	if (cu->no_gpu_note[0] && !cu->no_gpu_said) {
		cu->no_gpu_said = true;
		log_msg(LOG_INFO, "%s", cu->no_gpu_note);
	}
	if (cu->state == CU_NSYS) {
		cupti_nsys_find();
		if (cu->profiler_start) {
			cu->profiler_start();
		} else if (!cu->nsys_said) {
			cu->nsys_said = true;
			log_msg(LOG_INFO, "Nsight Systems: no cudaProfilerStart in the process "
				"yet (libcudart not loaded): this window is not marked for nsys");
		}
	}
	pthread_mutex_unlock(&cu->lock);
}

static void cu_window_close(uint64_t gen)
{
	pthread_mutex_lock(&cu->lock);
	atomic_store(&cu->pending_gen, gen); /* cupti_rec_window_collected clears it */
	arm_exit();
	cu->want = CU_WANT_IDLE;
	if (cu->state == CU_READY && cu->enabled)
		cupti_kinds_disable();
	if (cu->state == CU_NSYS) {
		nvtx_end_step();
		if (cu->profiler_stop)
			cu->profiler_stop();
	}
	pthread_mutex_unlock(&cu->lock);
}

static void cu_step(const struct capture_step *s)
{
	char name[48];

	pthread_mutex_lock(&cu->lock);
	arm_exit();
	if (cu->state == CU_NSYS) {
		nvtx_end_step();
		if (s->recording) {
			snprintf(name, sizeof name, "ProfilerStep#%llu",
				 (unsigned long long)s->step);
			cu->nvtx_step = nvtxRangeStartA(name);
			cu->nvtx_open = true;
		}
	}
	pthread_mutex_unlock(&cu->lock);
}

/* capture_recorder_ops.segment: stepping thread (or the thread ending the
 * process), window lock held; takes cu->lock, then the pool's lock. A
 * segment opened (gen): the kinds stay on, a stopped CUPTI starts over,
 * completed buffers go into the ring (not with prof.recorder{ cuda =
 * false }: GPU capture stays the windows'). 0: the recorder stopped: kinds off
 * unless a warm-up or window wants them. */
static void cu_recorder(uint64_t gen)
{
	pthread_mutex_lock(&cu->lock);
	if (gen) {
		if (!cu->rec_want && cu->nkinds && cupti_rec_keeps_gpu()) {
			cu->rec_want = true;
			if (cu->state == CU_STOPPED)
				start();
			if (cu->state == CU_READY && !cu->enabled)
				enable_kinds();
			if (cu->state == CU_READY)
				atomic_store(&cu->rec_copy, 1);
		}
		arm_exit();
	} else if (cu->rec_want) {
		cu->rec_want = false;
		atomic_store(&cu->rec_copy, 0);
		if (cu->state == CU_READY && cu->enabled && cu->want == CU_WANT_IDLE)
			cupti_kinds_disable();
	}
	pthread_mutex_unlock(&cu->lock);
}

/* GPU work between windows goes into the recorder's ring (cupti_recorder.c; the segment
 * callback is the lifecycle's). */
static const struct capture_recorder_ops cu_recorder_ops = {
	.segment = cu_recorder,
	.dump_taken = cupti_rec_dump_taken,
	.dump_dropped = cupti_rec_dump_dropped,
	.rotated = cupti_rec_rotated,
	.rotated_wanted = cupti_rec_rotated_wanted,
};

/* capture_ops.collect: host thread. A window's records, or a recorder
 * dump's. */
static int cu_collect(const struct capture_window *job, struct trace *t,
		      struct err *e)
{
	bool last;
	int rc;

	if (job->dump)
		return cupti_rec_collect(job, t, e);
	rc = cupti_window_collect(job, t, e, &last);
	if (last)
		stop(); /* no window ahead, the recorder keeps no GPU work */
	cupti_rec_window_collected(job->gen);
	return rc;
}

/* The process is ending after its last window. CUPTI is left as it is:
 * the CUDA runtime may be tearing down, and nothing will run after us. */
static void cu_fini(void)
{
	pthread_mutex_lock(&cu->lock);
	atomic_store(&cu->ext_on, 0);
	if (cu->state == CU_READY)
		cupti_set_hooks(false);
	nvtx_end_step();
	pthread_mutex_unlock(&cu->lock);
}

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
	.hang = &cupti_hang_ops,           /* cupti_hang.c */
};

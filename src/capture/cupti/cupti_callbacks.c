/*
 * cupti_callbacks — what runs inside the program's CUDA calls and range
 * pushes (cupti_internal.h): the API callback (steps counted from CUDA
 * calls, the stacks of slow calls, kernel launches tracked for hang
 * reports), the range hooks that push external correlation ids, and the
 * callbacks enabled at start. Application threads: never takes cu.lock
 * (the step callback takes the window lock).
 */
#include "cupti_internal.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../source.h"
#include "../cpu/sampler.h"
#include "../torch/torchops.h"
#include "../../common/clock.h"
#include "../../common/log.h"

#define EXT_KIND CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1

/* The source's state (cupti_internal.h), by the name every file of the
 * source uses. */
static struct cupti_state *const cu = &cupti_cu;

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
	    clock_now_ns() - tl_enter[drv][k] >= cu->backtrace_ns)
		sampler_record_stack(TRACE_STACK_CUDA, corr);
}

const uint32_t cupti_cbid_size[2] = {
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
	if (!atomic_load_explicit(&cu->track, memory_order_relaxed))
		return;
	if (!enter) {
		if (d->functionReturnValue && *(const int *)d->functionReturnValue != 0)
			cupti_inflight_done(&cu->inflight, &d->correlationId, 1);
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
	cupti_inflight_launch(&cu->inflight, &l);
}

/* Steps counted from CUDA calls: prof.steps{cuda = "cudaGraphLaunch"} at
 * the call's exit, prof.steps{kernel = pattern} at the exit of a launch of
 * a matching kernel (a driver launch made by a runtime launch counts once). */
void CUPTIAPI cupti_api_callback(void *ud, CUpti_CallbackDomain domain,
				  CUpti_CallbackId cbid, const void *data)
{
	const CUpti_CallbackData *d = data;
	int drv = domain == CUPTI_CB_DOMAIN_DRIVER_API;
	bool exit_site = d->callbackSite == CUPTI_API_EXIT;

	(void)ud;
	if ((domain != CUPTI_CB_DOMAIN_RUNTIME_API && !drv) || cbid >= cupti_cbid_size[drv])
		return;
	if (cu->backtrace_ns)
		time_call(drv, exit_site, d->correlationId);
	if (cu->track_cbid[drv] && cu->track_cbid[drv][cbid])
		track_launch(drv, (uint32_t)cbid, d);
	if (cu->launch_cbid[drv] && cu->launch_cbid[drv][cbid]) {
		if (!drv)
			tl_runtime_launch += exit_site ? -1 : 1;
		if (exit_site && (!drv || tl_runtime_launch <= 0) && d->symbolName &&
		    cupti_pattern_find(cu->kernel_pattern, d->symbolName))
			cu->h->step(cu->h->ctx);
	}
	if (exit_site && cu->step_cbid[drv] && cu->step_cbid[drv][cbid])
		cu->h->step(cu->h->ctx);
	if (cu->graph_cbid[drv] && cu->graph_cbid[drv][cbid])
		atomic_store_explicit(&cu->graphs_seen, 1, memory_order_relaxed);
}

/* Range hooks (shim_api.set_range_hooks): a range pushed inside a window
 * gets an external correlation id, which CUPTI attaches to the GPU work
 * launched inside it. */
static uint64_t range_push(void)
{
	uint64_t id;

	if (!atomic_load_explicit(&cu->ext_on, memory_order_relaxed))
		return 0;
	id = trace_ext_id(atomic_fetch_add_explicit(&cu->next_ext, 1, memory_order_relaxed));
	if (cu->fn.ActivityPushExternalCorrelationId(EXT_KIND, id) != CUPTI_SUCCESS)
		return 0;
	tl_ext_depth++;
	return id;
}

static void range_pop(void)
{
	if (!tl_ext_depth)
		return;
	tl_ext_depth--;
	cu->fn.ActivityPopExternalCorrelationId(EXT_KIND, NULL);
}

void cupti_set_hooks(bool on)
{
	if (cu->h && cu->h->shim->set_range_hooks)
		cu->h->shim->set_range_hooks(on ? range_push : NULL, on ? range_pop : NULL);
	/* torch operators from profhost's observer link the same way. */
	torchops_set_ext_hooks(on ? range_push : NULL, on ? range_pop : NULL);
}

/* The API name of a cbid, cached. Host thread. */
const char *cupti_api_name(void *ctx, bool driver, uint32_t cbid)
{
	const char **tab = cu->names[driver];
	const char *name = NULL;

	(void)ctx;
	if (cbid >= cupti_cbid_size[driver])
		return NULL;
	if (tab && tab[cbid])
		return tab[cbid];
	if (cu->fn.GetCallbackName(driver ? CUPTI_CB_DOMAIN_DRIVER_API
				  : CUPTI_CB_DOMAIN_RUNTIME_API, cbid, &name) != CUPTI_SUCCESS)
		return NULL;
	if (tab)
		tab[cbid] = name;
	return name;
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
			tab[drv] = calloc(cupti_cbid_size[drv], 1);
		if (!tab[drv])
			return n;
		for (cbid = 1; cbid < cupti_cbid_size[drv]; cbid++) {
			const char *s = NULL, *rest;

			if (cu->fn.GetCallbackName(drv ? CUPTI_CB_DOMAIN_DRIVER_API
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

/* Enables the API callbacks the step triggers need, and all of them for
 * prof.capture{cuda_backtrace}, the launch APIs with the watchdog on, and
 * the graph launches (which keep CUPTI attached, see cupti_stop()). Lock held. */
CUptiResult cupti_enable_callbacks(void)
{
	const struct policy_config *cfg = cu->h->cfg;
	int drv, i;
	uint32_t cbid;

	if (cfg->steps.cuda && !cu->step_cbid[0] &&
	    mark_cbids(cfg->steps.cuda, cu->step_cbid) == 0)
		log_msg(LOG_WARN, "prof.steps{cuda = \"%s\"}: no CUDA runtime or driver API "
			"has that name (e.g. cudaGraphLaunch, cuLaunchKernel): steps are not "
			"counted from CUDA calls", cfg->steps.cuda);
	if (cu->kernel_pattern && !cu->launch_cbid[0])
		for (i = 0; launch_apis[i]; i++)
			mark_cbids(launch_apis[i], cu->launch_cbid);
	if (cu->watch && !cu->track_cbid[0])
		for (i = 0; launch_apis[i]; i++)
			mark_cbids(launch_apis[i], cu->track_cbid);
	if (!cu->graph_cbid[0]) {
		mark_cbids("cudaGraphLaunch", cu->graph_cbid);
		mark_cbids("cuGraphLaunch", cu->graph_cbid);
	}
	for (drv = 0; drv < 2; drv++)
		for (cbid = 1; cbid < cupti_cbid_size[drv]; cbid++) {
			CUptiResult rc;

			if (!(cu->backtrace_ns ||
			      (cu->track_cbid[drv] && cu->track_cbid[drv][cbid]) ||
			      (cu->step_cbid[drv] && cu->step_cbid[drv][cbid]) ||
			      (cu->launch_cbid[drv] && cu->launch_cbid[drv][cbid]) ||
			      (cu->graph_cbid[drv] && cu->graph_cbid[drv][cbid])))
				continue;
			rc = cu->fn.EnableCallback(1, cu->sub, drv ? CUPTI_CB_DOMAIN_DRIVER_API
						  : CUPTI_CB_DOMAIN_RUNTIME_API, cbid);
			if (rc != CUPTI_SUCCESS)
				return rc;
		}
	return CUPTI_SUCCESS;
}

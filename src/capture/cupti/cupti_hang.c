/*
 * cupti_hang — the kernels in flight for a hang report (capture_hang_ops,
 * cupti_internal.h): the completed buffers free the launches whose kernel
 * record came (the launch callbacks, cupti_callbacks.c, put them into
 * cupti_inflight.c's table), and the watchdog's thread lists what is left.
 */
#include "cupti_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../source.h"

/* The source's state (cupti_internal.h), by the name every file of the
 * source uses. */
static struct cupti_state *const cu = &cupti_cu;

/* Frees the in-flight launches whose kernel record is in `buf` (a record
 * without an end: the kernel has not finished, the record was flushed
 * early). CUPTI's thread or a flushing thread. */
void cupti_track_buffer(uint8_t *buf, size_t valid)
{
	uint32_t ids[256];
	size_t n = 0;
	CUpti_Activity *r = NULL;

	while (cu->fn.ActivityGetNextRecord(buf, valid, &r) == CUPTI_SUCCESS) {
		const CUpti_ActivityKernel10 *k = (const void *)r;

		if ((r->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL &&
		     r->kind != CUPTI_ACTIVITY_KIND_KERNEL) || k->end == 0)
			continue;
		ids[n++] = k->correlationId;
		if (n == sizeof ids / sizeof ids[0]) {
			cupti_inflight_done(&cu->inflight, ids, n);
			n = 0;
		}
	}
	cupti_inflight_done(&cu->inflight, ids, n);
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
 * The watchdog's thread, no lock held (the flush calls cupti_buf_completed);
 * takes the flush lock: waits for a flush of the host thread's, never for
 * a window's conversion. */
static int cu_hang_gpu(struct capture_gpu_hang *g)
{
	struct cupti_launch l[CAPTURE_GPU_MAX];
	const char *why = NULL;
	uint32_t id;
	size_t i, n;

	pthread_mutex_lock(&cu->flush_lock);
	pthread_mutex_lock(&cu->lock);
	switch (cu->state) {
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
		why = cu->no_gpu_note[0] ? cu->no_gpu_note : "GPU capture is off in this process";
		break;
	default:
		if (!cu->show.kernels)
			why = "kernels are not captured (prof.capture{cuda_kernels = false})";
		else if (!cu->inflight.slot)
			why = "no memory for the table of kernels in flight";
		else if (!atomic_load(&cu->track))
			why = "CUPTI is not recording kernels now (outside capture windows): "
			      "the kernels in flight are known inside a window or with prof.recorder{}";
	}
	pthread_mutex_unlock(&cu->lock);
	if (why) {
		pthread_mutex_unlock(&cu->flush_lock);
		snprintf(g->note, sizeof g->note, "%s", why);
		return 0;
	}
	cu->fn.ActivityFlushAll(0);
	n = cupti_inflight_take(&cu->inflight, l, CAPTURE_GPU_MAX, &g->more, &g->forgotten);
	pthread_mutex_unlock(&cu->flush_lock);
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
		if (cu->fn.GetDeviceId && l[i].ctx &&
		    cu->fn.GetDeviceId(l[i].ctx, &id) == CUPTI_SUCCESS)
			o->device = (int32_t)id;
		if (cu->fn.GetStreamIdEx && l[i].ctx && l[i].has_stream &&
		    cu->fn.GetStreamIdEx(l[i].ctx, l[i].stream, l[i].per_thread, &id) ==
			    CUPTI_SUCCESS)
			o->stream = id;
	}
	qsort(g->launch, n, sizeof g->launch[0], by_stream);
	g->n = n;
	snprintf(g->note, sizeof g->note, "%s", "");
	return 1;
}

/* What the watchdog asks of GPU capture (cupti.c's descriptor points
 * here): the kernels in flight. */
const struct capture_hang_ops cupti_hang_ops = {
	.gpu = cu_hang_gpu,
};

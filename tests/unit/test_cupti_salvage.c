/*
 * test_cupti_salvage — the GPU half of a salvage (src/capture/cupti/cupti_salvage.c) on
 * a hand-made salvage header and hand-built CUDA 13 records, as the flight
 * recorder's ring holds them (EVBUF_CUPTI in trace.raw): a kernel is named
 * from the file's GPU names by its record's pointer (the newest entry of a
 * key wins), one the file lacks is "(kernel name lost)" and counted in a
 * note with the names that did not fit, a damaged entry ends the names,
 * API calls are named by callback id, the device and its name come from
 * the kept DEVICE record, the launch arrows are drawn, and no pointer of
 * the dead process is read (they point nowhere here).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capture/cupti/cupti_internal.h"
#include "check.h"
#include "salvage/cupti_salvage.h"
#include "common/evformat.h"

#define W0 1000000   /* the salvaged window's start */
#define W1 2000000   /* its end */

/* Pointers of the dead process: never dereferenced. */
#define PTR_A ((const char *)(uintptr_t)0x7f0000001000ull)
#define PTR_B ((const char *)(uintptr_t)0x7f0000002000ull)
#define PTR_C ((const char *)(uintptr_t)0x7f0000003000ull)
#define PTR_DEV ((const char *)(uintptr_t)0x7f0000004000ull)

/* Appends GPU name (kind, key, rec[0, rlen), text) to h; `len` is the
 * record's length field (the text's length unless damaged). */
static void put_gpu(struct salv_header *h, uint8_t kind, uint64_t key, const void *rec,
		    uint16_t rlen, const char *text, uint32_t len)
{
	uint32_t used = atomic_load(&h->gpu_used);
	struct salv_gpu_name r = { key, len, rlen, kind, 0 };

	memcpy(h->gpu + used, &r, sizeof r);
	if (rlen)
		memcpy(h->gpu + used + sizeof r, rec, rlen);
	memcpy(h->gpu + used + sizeof r + rlen, text, strlen(text));
	atomic_store(&h->gpu_used,
		     used + (uint32_t)((sizeof r + rlen + strlen(text) + 7) & ~(size_t)7));
}

static CUpti_ActivityAPI api(uint32_t corr, uint64_t start, uint32_t cbid)
{
	CUpti_ActivityAPI a;

	memset(&a, 0, sizeof a);
	a.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
	a.cbid = cbid;
	a.start = start;
	a.end = start + 5000;
	a.processId = 42;
	a.threadId = 4242;
	a.correlationId = corr;
	return a;
}

static CUpti_ActivityKernel10 kernel(uint32_t corr, uint64_t start, const char *name)
{
	CUpti_ActivityKernel10 k;

	memset(&k, 0, sizeof k);
	k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
	k.start = start;
	k.end = start + 10000;
	k.streamId = 7;
	k.contextId = 1;
	k.gridX = k.gridY = k.gridZ = 1;
	k.blockX = k.blockY = k.blockZ = 1;
	k.correlationId = corr;
	k.name = name;
	k.pAccessPolicyWindow = (void *)(uintptr_t)0x10;
	return k;
}

static CUpti_ActivityDevice5 device(const char *name)
{
	CUpti_ActivityDevice5 d;

	memset(&d, 0, sizeof d);
	d.kind = CUPTI_ACTIVITY_KIND_DEVICE;
	d.id = 0;
	d.numMultiprocessors = 132;
	d.computeCapabilityMajor = 9;
	d.name = name;
	return d;
}

static int count(const struct trace *t, enum trace_cat cat, const char *name)
{
	size_t i;
	int n = 0;

	for (i = 0; i < t->nev; i++)
		n += t->ev[i].cat == cat &&
		     (!name || strcmp(trace_str(t, t->ev[i].name), name) == 0);
	return n;
}

static void test_named_from_the_file(void)
{
	struct salv_header *h = calloc(1, sizeof *h);
	CUpti_ActivityDevice5 dev = device(PTR_DEV);
	CUpti_ActivityAPI a1 = api(1, W0 + 1000, 211), a2 = api(2, W0 + 20000, 211),
			  a3 = api(3, W0 + 40000, 211), late = api(4, W1 + 1000, 211);
	CUpti_ActivityKernel10 k1 = kernel(1, W0 + 100000, PTR_A),
			       k2 = kernel(2, W0 + 200000, PTR_B),
			       k3 = kernel(3, W0 + 300000, PTR_C);
	struct trace t;

	if (!h)
		exit(2);
	put_gpu(h, SALV_GPU_KERNEL, (uintptr_t)PTR_A, NULL, 0, "old_name", 8);
	put_gpu(h, SALV_GPU_API, 211, NULL, 0, "cudaLaunchKernel_v7000", 22);
	put_gpu(h, SALV_GPU_DEVICE, 0, &dev, sizeof dev, "Test GPU", 8);
	put_gpu(h, SALV_GPU_KERNEL, (uintptr_t)PTR_A, NULL, 0, "gemm_kernel", 11);
	put_gpu(h, SALV_GPU_KERNEL, (uintptr_t)PTR_C, NULL, 0, "kern_c", 60000); /* damaged */
	h->gpu_lost = 2;

	CHECK_EQ_INT(trace_init(&t), 0);
	t.meta.pid = 42;
	trace_add_raw(&t, EVBUF_CUPTI, W0, &dev, sizeof dev);
	trace_add_raw(&t, EVBUF_CUPTI, W0, &a1, sizeof a1);
	trace_add_raw(&t, EVBUF_CUPTI, W0, &a2, sizeof a2);
	trace_add_raw(&t, EVBUF_CUPTI, W0, &a3, sizeof a3);
	trace_add_raw(&t, EVBUF_CUPTI, W0, &late, sizeof late);
	trace_add_raw(&t, EVBUF_CUPTI, W0, &k1, sizeof k1);
	trace_add_raw(&t, EVBUF_CUPTI, W0, &k2, sizeof k2);
	trace_add_raw(&t, EVBUF_CUPTI, W0, &k3, sizeof k3);
	trace_add_raw(&t, EVBUF_CUPTI, W0, &k3, 40); /* not a whole record: skipped */
	trace_add_raw(&t, EVBUF_MARK, W0, "x", 1);
	CHECK_EQ_INT(cupti_salvage_convert(h, W0, W1, &t), 0);

	/* the newest name of PTR_A; PTR_B never named, PTR_C's entry damaged */
	CHECK_EQ_INT(count(&t, TRACE_CAT_KERNEL, "gemm_kernel"), 1);
	CHECK_EQ_INT(count(&t, TRACE_CAT_KERNEL, "old_name"), 0);
	CHECK_EQ_INT(count(&t, TRACE_CAT_KERNEL, "(kernel name lost)"), 2);
	CHECK_EQ_INT(count(&t, TRACE_CAT_KERNEL, NULL), 3);
	/* API calls by name, the one after the window's end left out */
	CHECK_EQ_INT(count(&t, TRACE_CAT_CUDA_RUNTIME, "cudaLaunchKernel"), 3);
	CHECK_EQ_INT(count(&t, TRACE_CAT_CUDA_RUNTIME, NULL), 3);
	/* an arrow's two ends per kernel */
	CHECK_EQ_INT(count(&t, TRACE_CAT_AC2G, NULL), 6);
	CHECK_EQ_INT(t.ndevices, 1);
	if (t.ndevices)
		CHECK_EQ_STR(t.devices[0].name, "Test GPU");
	CHECK(t.meta.notes && strstr(t.meta.notes, "GPU: 2 kernel records show as "
				      "\"(kernel name lost)\""));
	CHECK(t.meta.notes && strstr(t.meta.notes, "2 GPU names did not fit"));
	trace_free(&t);
	free(h);
}

static void test_no_gpu_records(void)
{
	struct salv_header *h = calloc(1, sizeof *h);
	struct trace t;

	if (!h)
		exit(2);
	h->gpu_lost = 5;
	CHECK_EQ_INT(trace_init(&t), 0);
	trace_add_raw(&t, EVBUF_MARK, W0, "x", 1);
	CHECK_EQ_INT(cupti_salvage_convert(h, W0, W1, &t), 0);
	CHECK_EQ_INT(t.nev, 0);
	CHECK(!t.meta.notes || !strstr(t.meta.notes, "GPU"));
	trace_free(&t);
	free(h);
}

int main(void)
{
	test_named_from_the_file();
	test_no_gpu_records();
	return check_done();
}

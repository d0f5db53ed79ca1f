/*
 * test_cupti — the pieces of GPU capture that need no running CUPTI:
 * record -> event conversion (cupti_records.c) on hand-built CUDA 13
 * records, the kernel-name patterns (cupti_pattern.c), and the search for
 * libcupti (cupti_load.c) in a made-up file tree.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "capture/cupti/cupti_internal.h"
#include "check.h"

#define W0 1000000   /* window start */
#define W1 2000000   /* window end */

/* ------------------------------------------------------------ helpers */

static const char *names(void *ctx, bool driver, uint32_t cbid)
{
	(void)ctx;
	if (!driver && cbid == 211)
		return "cudaLaunchKernel_v7000";
	if (!driver && cbid == 41)
		return "cudaMemcpyAsync_v3020";
	if (driver && cbid == 307)
		return "cuLaunchKernel";
	return NULL;
}

static CUpti_ActivityAPI api(uint32_t corr, uint64_t start, uint64_t end, uint32_t cbid)
{
	CUpti_ActivityAPI a;

	memset(&a, 0, sizeof a);
	a.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
	a.cbid = cbid;
	a.start = start;
	a.end = end;
	a.processId = 42;
	a.threadId = 4242;
	a.correlationId = corr;
	return a;
}

static CUpti_ActivityKernel10 kernel(uint32_t corr, uint64_t start, uint64_t end,
				     const char *name)
{
	CUpti_ActivityKernel10 k;

	memset(&k, 0, sizeof k);
	k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
	k.start = start;
	k.end = end;
	k.deviceId = 0;
	k.contextId = 1;
	k.streamId = 7;
	k.gridX = 2;
	k.gridY = k.gridZ = 1;
	k.blockX = 64;
	k.blockY = k.blockZ = 1;
	k.registersPerThread = 40;
	k.staticSharedMemory = 100;
	k.dynamicSharedMemory = 28;
	k.correlationId = corr;
	k.name = name;
	k.queued = start - 3000;
	return k;
}

static const struct trace_event *find(const struct trace *t, enum trace_cat cat,
				      const char *name, int nth)
{
	size_t i;

	for (i = 0; i < t->nev; i++)
		if (t->ev[i].cat == cat && (!name || !strcmp(trace_str(t, t->ev[i].name), name)) &&
		    nth-- == 0)
			return &t->ev[i];
	return NULL;
}

static int count(const struct trace *t, enum trace_cat cat)
{
	size_t i;
	int n = 0;

	for (i = 0; i < t->nev; i++)
		n += t->ev[i].cat == cat;
	return n;
}

static const struct trace_arg *arg(const struct trace *t, const struct trace_event *e,
				   const char *key)
{
	uint16_t i;

	for (i = 0; e && i < e->nargs; i++)
		if (!strcmp(trace_str(t, t->args[e->args + i].key), key))
			return &t->args[e->args + i];
	return NULL;
}

/* Runs both passes over `n` records; returns the routes of pass 2. */
static void convert(struct cupti_conv *c, const CUpti_Activity *const *r, size_t n,
		    enum cupti_route *routes)
{
	size_t i;

	for (i = 0; i < n; i++)
		cupti_conv_scan(c, r[i]);
	for (i = 0; i < n; i++)
		routes[i] = cupti_conv_add(c, r[i]);
	cupti_conv_finish(c);
}

static void setup(struct trace *t, struct cupti_conv *c, struct cupti_devices *devs)
{
	struct cupti_conv_opts o;

	CHECK_EQ_INT(trace_init(t), 0);
	t->meta.pid = 42;
	memset(&o, 0, sizeof o);
	o.start = W0;
	o.end = W1;
	o.pid = 42;
	o.show.kernels = o.show.memcpy = o.show.memset = o.show.runtime = true;
	o.show.driver = o.show.sync = o.show.memory = o.show.overhead = true;
	o.api_name = names;
	o.devices = devs;
	CHECK_EQ_INT(cupti_conv_init(c, t, &o), 0);
}

/* ------------------------------------------------------------ records */

static void test_kernel_api_and_flow(void)
{
	struct trace t;
	struct cupti_conv c;
	struct cupti_devices devs = { 0 };
	CUpti_ActivityAPI a = api(5, W0 + 100, W0 + 2100, 211);
	CUpti_ActivityKernel10 k = kernel(5, W0 + 5000, W0 + 9000, "gemm");
	CUpti_ActivityDevice5 d;
	const CUpti_Activity *recs[3];
	enum cupti_route routes[3];
	const struct trace_event *ke, *ae, *fs, *ff;
	const struct trace_arg *g;

	memset(&d, 0, sizeof d);
	d.kind = CUPTI_ACTIVITY_KIND_DEVICE;
	d.id = 0;
	d.name = "Test GPU";
	d.numMultiprocessors = 2;
	d.numThreadsPerWarp = 32;
	d.maxWarpsPerMultiprocessor = 64;
	d.globalMemorySize = 1234;
	recs[0] = (const void *)&d;
	recs[1] = (const void *)&a;
	recs[2] = (const void *)&k;
	setup(&t, &c, &devs);
	convert(&c, recs, 3, routes);
	CHECK_EQ_INT(routes[1], CUPTI_ROUTE_THIS);
	CHECK_EQ_INT(routes[2], CUPTI_ROUTE_THIS);

	ae = find(&t, TRACE_CAT_CUDA_RUNTIME, "cudaLaunchKernel", 0);
	CHECK(ae != NULL);
	if (ae) {
		CHECK_EQ_INT(ae->pid, 42);
		CHECK_EQ_INT(ae->tid, 4242);
		CHECK_EQ_INT(ae->ts, W0 + 100);
		CHECK_EQ_INT(ae->dur, 2000);
		CHECK_EQ_INT(arg(&t, ae, "cbid")->v.u, 211);
		CHECK_EQ_INT(arg(&t, ae, "correlation")->v.u, 5);
	}
	ke = find(&t, TRACE_CAT_KERNEL, "gemm", 0);
	CHECK(ke != NULL);
	if (ke) {
		CHECK_EQ_INT(ke->pid, 0);
		CHECK_EQ_INT(ke->tid, 7);
		CHECK_EQ_INT(ke->dur, 4000);
		CHECK_EQ_INT(arg(&t, ke, "registers per thread")->v.u, 40);
		CHECK_EQ_INT(arg(&t, ke, "shared memory")->v.i, 128);
		CHECK_EQ_INT(arg(&t, ke, "queued")->v.i, 3);
		g = arg(&t, ke, "grid");
		CHECK(g && g->type == TRACE_ARG_RAW);
		if (g)
			CHECK_EQ_STR(trace_str(&t, g->v.str), "[2,1,1]");
		/* 2 blocks of 2 warps on 2 SMs */
		CHECK(arg(&t, ke, "blocks per SM") && arg(&t, ke, "blocks per SM")->v.d == 1.0);
		CHECK(arg(&t, ke, "warps per SM") && arg(&t, ke, "warps per SM")->v.d == 2.0);
	}
	fs = find(&t, TRACE_CAT_AC2G, NULL, 0);
	ff = find(&t, TRACE_CAT_AC2G, NULL, 1);
	CHECK(fs && ff);
	if (fs && ff) {
		CHECK_EQ_INT(fs->ph, TRACE_PH_FLOW_START);
		CHECK_EQ_INT(fs->id, 5);
		CHECK_EQ_INT(fs->tid, 4242);
		CHECK_EQ_INT(fs->ts, W0 + 100);
		CHECK_EQ_INT(ff->ph, TRACE_PH_FLOW_END);
		CHECK_EQ_INT(ff->pid, 0);
		CHECK_EQ_INT(ff->tid, 7);
		CHECK_EQ_INT(ff->ts, W0 + 5000);
	}
	CHECK_EQ_INT(t.ndevices, 1);
	CHECK_EQ_STR(t.devices[0].name, "Test GPU");
	CHECK_EQ_INT(t.devices[0].total_global_mem, 1234);
	CHECK_EQ_INT(t.nprocs, 1);
	CHECK_EQ_STR(trace_str(&t, t.procs[0].name), "GPU 0 (Test GPU)");
	CHECK(t.nthreads >= 1 && !strcmp(trace_str(&t, t.threads[0].name), "stream 7"));
	cupti_conv_free(&c);
	trace_free(&t);
	free(devs.dev[0].name);
	free(devs.dev);
}

static void test_routing_by_window(void)
{
	struct trace t;
	struct cupti_conv c;
	/* Launched in warm-up (before W0), ran inside: dropped with its API.
	 * Launched after W1: kept for later, with its kernel. A kernel without
	 * timestamps: dropped and counted. No API record: by its own time. */
	CUpti_ActivityAPI warm = api(1, W0 - 500, W0 - 100, 211);
	CUpti_ActivityKernel10 kwarm = kernel(1, W0 + 10, W0 + 20, "warm");
	CUpti_ActivityAPI after = api(2, W1 + 10, W1 + 20, 211);
	CUpti_ActivityKernel10 kafter = kernel(2, W1 + 30, W1 + 40, "after");
	CUpti_ActivityKernel10 kzero = kernel(3, 0, 0, "zero");
	CUpti_ActivityKernel10 klone = kernel(4, W0 + 50, W0 + 60, "lone");
	CUpti_ActivityAPI unknown = api(6, W0 + 70, W0 + 80, 9999);
	const CUpti_Activity *recs[] = {
		(const void *)&warm, (const void *)&kwarm, (const void *)&after,
		(const void *)&kafter, (const void *)&kzero, (const void *)&klone,
		(const void *)&unknown,
	};
	enum cupti_route routes[7];

	kzero.start = kzero.end = 0;
	setup(&t, &c, NULL);
	convert(&c, recs, 7, routes);
	CHECK_EQ_INT(routes[0], CUPTI_ROUTE_DROP);
	CHECK_EQ_INT(routes[1], CUPTI_ROUTE_DROP);
	CHECK_EQ_INT(routes[2], CUPTI_ROUTE_LATER);
	CHECK_EQ_INT(routes[3], CUPTI_ROUTE_LATER);
	CHECK_EQ_INT(routes[4], CUPTI_ROUTE_DROP);
	CHECK_EQ_INT(routes[5], CUPTI_ROUTE_THIS);
	CHECK_EQ_INT(c.zero_ts, 1);
	CHECK_EQ_INT(c.late, 0);
	CHECK_EQ_INT(count(&t, TRACE_CAT_KERNEL), 1);
	CHECK(find(&t, TRACE_CAT_KERNEL, "lone", 0) != NULL);
	CHECK(find(&t, TRACE_CAT_CUDA_RUNTIME, "runtime API 9999", 0) != NULL);
	CHECK_EQ_INT(count(&t, TRACE_CAT_AC2G), 0); /* no launch in the window */
	cupti_conv_free(&c);
	trace_free(&t);

	/* The same warm-up launch, when a window was written before: late. */
	{
		struct cupti_conv_opts o;

		trace_init(&t);
		memset(&o, 0, sizeof o);
		o.start = W0;
		o.end = W1;
		o.prev_start = W0 - 1000;
		o.prev_end = W0 - 1;
		o.show.kernels = o.show.runtime = true;
		cupti_conv_init(&c, &t, &o);
		convert(&c, recs, 2, routes);
		CHECK_EQ_INT(c.late, 2);
		cupti_conv_free(&c);
		trace_free(&t);
	}
}

static void test_copies_sync_memory(void)
{
	struct trace t;
	struct cupti_conv c;
	CUpti_ActivityMemcpy6 m;
	CUpti_ActivitySynchronization2 s;
	CUpti_ActivityMemory4 mem[3];
	const CUpti_Activity *recs[5];
	enum cupti_route routes[5];
	const struct trace_event *e;
	uint64_t ts[3] = { W0 + 300, W0 + 100, W0 + 200 }; /* out of order */
	uint64_t addr[3] = { 0x3000, 0x1000, 0x2000 };
	uint64_t bytes[3] = { 100, 100, 50 };
	int op[3] = { CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE,
		      CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION,
		      CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION };
	int i;

	memset(&m, 0, sizeof m);
	m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
	m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
	m.srcKind = CUPTI_ACTIVITY_MEMORY_KIND_PINNED;
	m.dstKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
	m.bytes = 1000000;
	m.start = W0 + 1000;
	m.end = W0 + 51000; /* 1 MB in 50 µs: 20 GB/s */
	m.streamId = 3;
	m.correlationId = 9;
	memset(&s, 0, sizeof s);
	s.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
	s.type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE;
	s.start = W0 + 10;
	s.end = W0 + 900;
	s.streamId = 3;
	s.contextId = 1;
	recs[0] = (const void *)&m;
	recs[1] = (const void *)&s;
	for (i = 0; i < 3; i++) {
		memset(&mem[i], 0, sizeof mem[i]);
		mem[i].kind = CUPTI_ACTIVITY_KIND_MEMORY2;
		mem[i].memoryOperationType = op[i];
		mem[i].memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
		mem[i].address = addr[i];
		mem[i].bytes = bytes[i];
		mem[i].timestamp = ts[i];
		recs[2 + i] = (const void *)&mem[i];
	}
	mem[0].address = 0x1000; /* frees the first allocation */
	setup(&t, &c, NULL);
	convert(&c, recs, 5, routes);
	e = find(&t, TRACE_CAT_GPU_MEMCPY, "Memcpy HtoD (Pinned -> Device)", 0);
	CHECK(e != NULL);
	if (e) {
		CHECK_EQ_INT(arg(&t, e, "bytes")->v.u, 1000000);
		CHECK(arg(&t, e, "memory bandwidth (GB/s)")->v.d == 20.0);
		CHECK_EQ_STR(trace_str(&t, arg(&t, e, "copy kind")->v.str), "HtoD");
		CHECK_EQ_INT(e->tid, 3);
	}
	e = find(&t, TRACE_CAT_CUDA_SYNC, "Stream Sync", 0);
	CHECK(e && e->dur == 890 && e->tid == 3);
	/* Memory events in time order with running totals: +100, +50, -100. */
	for (i = 0; i < 3; i++) {
		static const int64_t total[] = { 100, 150, 50 };
		static const int64_t delta[] = { 100, 50, -100 };

		e = find(&t, TRACE_CAT_GPU_MEMORY, "[memory]", i);
		CHECK(e != NULL);
		if (!e)
			continue;
		CHECK_EQ_INT(e->ph, TRACE_PH_INSTANT);
		CHECK_EQ_INT(arg(&t, e, "Bytes")->v.i, delta[i]);
		CHECK_EQ_INT(arg(&t, e, "Total Allocated")->v.i, total[i]);
		/* TensorBoard's memory view needs it: CUPTI sees what the
		 * driver handed out, which is also what is reserved */
		CHECK(arg(&t, e, "Total Reserved") != NULL);
		if (arg(&t, e, "Total Reserved"))
			CHECK_EQ_INT(arg(&t, e, "Total Reserved")->v.i, total[i]);
	}
	cupti_conv_free(&c);
	trace_free(&t);
}

/* A range "outer" holding "inner" on thread 4242; kernels launched in
 * inner (external id 77) get a gpu_user_annotation for inner and outer.
 * With `op`, inner is a torch operator (profhost's observer gives kernels
 * their operator's id): outer still gets its span, the operator none. */
static void test_annotations(bool op)
{
	const char *inner = op ? "aten::mm" : "inner";

	struct trace t;
	struct cupti_conv c;
	struct trace_event r = { 0 };
	CUpti_ActivityExternalCorrelation x;
	CUpti_ActivityAPI a1 = api(11, W0 + 200, W0 + 300, 211);
	CUpti_ActivityAPI a2 = api(12, W0 + 400, W0 + 500, 211);
	CUpti_ActivityKernel10 k1 = kernel(11, W0 + 1000, W0 + 2000, "k1");
	CUpti_ActivityKernel10 k2 = kernel(12, W0 + 2000, W0 + 5000, "k2");
	const CUpti_Activity *recs[5];
	enum cupti_route routes[5];
	const struct trace_event *e;

	setup(&t, &c, NULL);
	r.pid = 42;
	r.tid = 4242;
	r.cat = TRACE_CAT_USER_ANNOTATION;
	r.ph = TRACE_PH_COMPLETE;
	r.name = trace_intern(&t, "outer", 5);
	r.ts = W0 + 100;
	r.dur = 1000;
	r.id = 76;
	trace_add_event(&t, &r);
	r.name = trace_intern(&t, inner, strlen(inner));
	r.cat = op ? TRACE_CAT_CPU_OP : TRACE_CAT_USER_ANNOTATION;
	r.ts = W0 + 150;
	r.dur = 500;
	r.id = 77;
	trace_add_event(&t, &r);
	memset(&x, 0, sizeof x);
	x.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
	x.externalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1;
	x.externalId = 77;
	x.correlationId = 11;
	recs[0] = (const void *)&x;
	recs[1] = (const void *)&a1;
	recs[2] = (const void *)&k1;
	recs[3] = (const void *)&a2;
	recs[4] = (const void *)&k2;
	x.correlationId = 11;
	convert(&c, recs, 5, routes);
	/* k2 had no external record: only k1 is inner's. */
	e = find(&t, TRACE_CAT_GPU_USER_ANNOTATION, inner, 0);
	if (op)
		CHECK(e == NULL);
	else
		CHECK(e && e->ts == W0 + 1000 && e->dur == 1000 && e->pid == 0 &&
		      e->tid == 7);
	CHECK(arg(&t, find(&t, TRACE_CAT_KERNEL, "k1", 0), "External id") != NULL);
	CHECK(arg(&t, find(&t, TRACE_CAT_KERNEL, "k2", 0), "External id") == NULL);
	e = find(&t, TRACE_CAT_GPU_USER_ANNOTATION, "outer", 0);
	CHECK(e && e->ts == W0 + 1000 && e->dur == 1000 && e->pid == 0 && e->tid == 7);
	CHECK(find(&t, TRACE_CAT_GPU_USER_ANNOTATION, "outer", 1) == NULL);
	CHECK(find(&t, TRACE_CAT_GPU_USER_ANNOTATION, inner, 1) == NULL);
	cupti_conv_free(&c);
	trace_free(&t);
}

/* Pass 1 sizes the trace for passes 2 and 3: a window of thousands of
 * launches (with copies, syncs, allocations and range-linked kernels) is
 * converted without the event or argument arrays ever moving, so their
 * pages are written once (docs/performance.md, "GPU records"). */
static void test_sized_once(void)
{
	enum { N = 3000 };
	static CUpti_ActivityAPI apis[N];
	static CUpti_ActivityKernel10 ks[N];
	static CUpti_ActivityExternalCorrelation xs[N];
	static CUpti_ActivityMemory4 mems[N];
	static const CUpti_Activity *recs[4 * N];
	static enum cupti_route routes[4 * N];
	struct trace t;
	struct cupti_conv c;
	struct trace_event r = { 0 };
	const struct trace_event *ev;
	const struct trace_arg *args;
	size_t i, n = 0, cap_ev, cap_args;

	setup(&t, &c, NULL);
	r.pid = 42;
	r.tid = 4242;
	r.cat = TRACE_CAT_USER_ANNOTATION;
	r.ph = TRACE_PH_COMPLETE;
	r.ts = W0 + 10;
	r.dur = 800000;
	for (i = 0; i < 50; i++) { /* ranges the kernels' spans go under */
		r.name = trace_intern(&t, "range", 5);
		r.id = 1000 + i;
		trace_add_event(&t, &r);
	}
	for (i = 0; i < N; i++) {
		apis[i] = api((uint32_t)i + 1, W0 + 100 * i + 20, W0 + 100 * i + 60, 211);
		ks[i] = kernel((uint32_t)i + 1, W0 + 100 * i + 70, W0 + 100 * i + 90,
			       i % 2 ? "odd" : "even");
		ks[i].streamId = 7 + (uint32_t)(i % 4);
		memset(&xs[i], 0, sizeof xs[i]);
		xs[i].kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
		xs[i].externalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1;
		xs[i].externalId = 1000 + i % 50;
		xs[i].correlationId = (uint32_t)i + 1;
		memset(&mems[i], 0, sizeof mems[i]);
		mems[i].kind = CUPTI_ACTIVITY_KIND_MEMORY2;
		mems[i].memoryOperationType = CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION;
		mems[i].memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
		mems[i].address = 0x100000 + 0x1000 * i;
		mems[i].bytes = 256;
		mems[i].timestamp = W0 + 100 * i + 30;
		recs[n++] = (const void *)&xs[i];
		recs[n++] = (const void *)&apis[i];
		recs[n++] = (const void *)&ks[i];
		recs[n++] = (const void *)&mems[i];
	}
	for (i = 0; i < n; i++)
		cupti_conv_scan(&c, recs[i]);
	routes[0] = cupti_conv_add(&c, recs[0]);
	ev = t.ev;
	args = t.args;
	cap_ev = t.cap_ev;
	cap_args = t.cap_args;
	for (i = 1; i < n; i++)
		routes[i] = cupti_conv_add(&c, recs[i]);
	cupti_conv_finish(&c);
	for (i = 0; i < N; i++) /* the launches and kernels are this window's */
		CHECK(routes[4 * i + 1] == CUPTI_ROUTE_THIS && routes[4 * i + 2] == CUPTI_ROUTE_THIS);
	CHECK_EQ_INT(count(&t, TRACE_CAT_KERNEL), N);
	CHECK_EQ_INT(count(&t, TRACE_CAT_AC2G), 2 * N);
	CHECK_EQ_INT(count(&t, TRACE_CAT_GPU_MEMORY), N);
	CHECK(count(&t, TRACE_CAT_GPU_USER_ANNOTATION) >= 4);
	CHECK(t.nev > 4 * N);
	CHECK(t.ev == ev && t.cap_ev == cap_ev);
	CHECK(t.args == args && t.cap_args == cap_args);
	cupti_conv_free(&c);
	trace_free(&t);
}

static void test_record_sizes(void)
{
	CHECK_EQ_INT(cupti_record_size(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL),
		     sizeof(CUpti_ActivityKernel10));
	CHECK_EQ_INT(cupti_record_size(CUPTI_ACTIVITY_KIND_MEMORY2), sizeof(CUpti_ActivityMemory4));
	CHECK_EQ_INT(cupti_record_size(CUPTI_ACTIVITY_KIND_PCIE), 0);
}

/* ------------------------------------------------------------ patterns */

static void test_patterns(void)
{
	static const struct {
		const char *pat, *s;
		bool match;
	} cases[] = {
		{ "^ncclKernel_AllReduce", "ncclKernel_AllReduce_RING_LL_Sum_float", true },
		{ "^ncclKernel_AllReduce", "void ncclKernel_AllReduce", false },
		{ "AllReduce", "ncclDevKernel_AllReduce_Sum", true },
		{ "gemm.*kernel$", "ampere_sgemm_128x64_kernel", true },
		{ "gemm.*kernel$", "ampere_sgemm_kernel_nn", false },
		{ "^sm%d%d_", "sm90_xmma_gemm", true },
		{ "^sm%d%d_", "smx0_gemm", false },
		{ "[Rr]educe", "block_reduce", true },
		{ "[^a-z]$", "kernel7", true },
		{ "[^a-z]$", "kernel", false },
		{ "a-b", "xb", true },
		{ "colou?r", "color", true },
		{ "%.step", "opt.step", true },
		{ "%.step", "optxstep", false },
		{ "%w+_kernel", "_kernel", false },
		{ "", "anything", true },
	};
	size_t i;

	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		CHECK(cupti_pattern_check(cases[i].pat) == NULL);
		if (cupti_pattern_find(cases[i].pat, cases[i].s) != cases[i].match)
			fprintf(stderr, "pattern '%s' on '%s': expected %d\n", cases[i].pat,
				cases[i].s, cases[i].match);
		CHECK(cupti_pattern_find(cases[i].pat, cases[i].s) == cases[i].match);
	}
	CHECK(cupti_pattern_check("(gemm)") != NULL);
	CHECK(cupti_pattern_check("%b()") != NULL);
	CHECK(cupti_pattern_check("[abc") != NULL);
	CHECK(cupti_pattern_check("abc%") != NULL);
	/* An optional item at the name's end is not matched against the
	 * byte after it (the name is a heap string of exactly its size,
	 * so ASan sees any read past it). */
	{
		char *name = strdup("k");

		CHECK(name && cupti_pattern_find("k[^a]?$", name));
		CHECK(name && !cupti_pattern_find("k[^a]$", name));
		free(name);
	}
	/* Too deep for Lua ("pattern too complex"): no match, no crash. */
	{
		char deep[600] = "", subject[400];
		int i;

		for (i = 0; i < 250; i++)
			strcat(deep, "a?");
		memset(subject, 'a', 300);
		subject[300] = '\0';
		CHECK(cupti_pattern_check(deep) == NULL);
		CHECK(!cupti_pattern_find(deep, subject));
	}
}

/* ------------------------------------------------------------ loading */

static char tmp[256];

static void mkpath(const char *rel)
{
	char p[512], *s;

	snprintf(p, sizeof p, "%s/%s", tmp, rel);
	for (s = p + strlen(tmp) + 1; (s = strchr(s, '/')); s++) {
		*s = '\0';
		mkdir(p, 0755);
		*s = '/';
	}
}

static void link_fake(const char *rel)
{
	char p[512];

	mkpath(rel);
	snprintf(p, sizeof p, "%s/%s", tmp, rel);
	CHECK_EQ_INT(symlink(PROFHOST_CUPTI_FAKE, p), 0);
}

static void test_load(void)
{
	struct cupti_fns f;
	struct err e;
	char root[300], maps[300], site[300], env[300], line[1024];
	const char *roots[] = { root, NULL };
	struct cupti_search s = { 0 };
	FILE *m;

	snprintf(tmp, sizeof tmp, "/tmp/test_cupti.XXXXXX");
	CHECK(mkdtemp(tmp) != NULL);
	snprintf(root, sizeof root, "%s/cuda", tmp);
	snprintf(maps, sizeof maps, "%s/maps", tmp);
	m = fopen(maps, "w");
	fprintf(m, "7f0000000000-7f0000001000 r-xp 00000000 08:01 1 /usr/lib/libc.so.6\n");
	fclose(m);
	s.maps = maps;
	s.roots = roots;

	/* Nothing anywhere: says where it looked. */
	CHECK_EQ_INT(cupti_load(&f, &s, &e), CUPTI_LOAD_NOT_FOUND);
	CHECK(strstr(e.msg, "no libcupti found") != NULL);
	CHECK(strstr(e.msg, "PROF_CUPTI_LIB (unset)") != NULL);
	CHECK(strstr(e.msg, "CUDA_HOME (unset)") != NULL);
	CHECK(strstr(e.msg, root) != NULL);

	/* A toolkit root with lib64/libcupti.so.13. */
	link_fake("cuda/lib64/libcupti.so.13");
	CHECK_EQ_INT(cupti_load(&f, &s, &e), CUPTI_LOAD_OK);
	CHECK(strstr(f.path, "cuda/lib64/libcupti.so.13") != NULL);
	CHECK(!f.reused && f.Subscribe && f.ActivityFlushAll);
	cupti_unload(&f);

	/* PROF_CUPTI_LIB wins over roots; a bad one is an error, not a search. */
	snprintf(env, sizeof env, "%s/nope.so", tmp);
	s.env_lib = env;
	CHECK_EQ_INT(cupti_load(&f, &s, &e), CUPTI_LOAD_FAILED);
	CHECK(strstr(e.msg, "PROF_CUPTI_LIB") && strstr(e.msg, "nope.so"));
	s.env_lib = NULL;

	/* A file that is no CUPTI. */
	s.roots = NULL;
	snprintf(env, sizeof env, "%s/home", tmp);
	s.cuda_home = env;
	mkpath("home/lib64/x");
	snprintf(line, sizeof line, "%s/home/lib64/libcupti.so", tmp);
	m = fopen(line, "w");
	fclose(m);
	CHECK_EQ_INT(cupti_load(&f, &s, &e), CUPTI_LOAD_FAILED);
	CHECK(strstr(e.msg, "cannot load") != NULL);
	s.cuda_home = NULL;

	/* A Python wheel next to a loaded extension module. */
	snprintf(site, sizeof site, "%s/venv/lib/python3.11/site-packages", tmp);
	m = fopen(maps, "a");
	fprintf(m, "7f0000001000-7f0000002000 r-xp 00000000 08:01 2 %s/torch/lib/libtorch.so\n",
		site);
	fclose(m);
	link_fake("venv/lib/python3.11/site-packages/nvidia/cu13/lib/libcupti.so.13");
	CHECK_EQ_INT(cupti_load(&f, &s, &e), CUPTI_LOAD_OK);
	CHECK(strstr(f.path, "site-packages/nvidia/cu13/lib/libcupti.so.13") != NULL);
	cupti_unload(&f);

	/* A libcupti the process has mapped is reused, before anything else. */
	{
		void *h = dlopen(PROFHOST_CUPTI_FAKE, RTLD_NOW | RTLD_LOCAL);

		CHECK(h != NULL);
		m = fopen(maps, "a");
		fprintf(m, "7f0000002000-7f0000003000 r-xp 00000000 08:01 3 %s\n",
			PROFHOST_CUPTI_FAKE);
		fclose(m);
		s.roots = roots;
		CHECK_EQ_INT(cupti_load(&f, &s, &e), CUPTI_LOAD_OK);
		CHECK(f.reused);
		CHECK_EQ_STR(f.path, PROFHOST_CUPTI_FAKE);
		cupti_unload(&f);
		dlclose(h);
	}
	snprintf(line, sizeof line, "rm -rf '%s'", tmp);
	CHECK_EQ_INT(system(line), 0);
}

/* A launch for the in-flight table. */
static struct cupti_launch launch_of(uint32_t corr, int64_t ts, const char *name)
{
	struct cupti_launch l;

	memset(&l, 0, sizeof l);
	l.corr = corr;
	l.ts = ts;
	l.tid = 7;
	snprintf(l.name, sizeof l.name, "%s", name);
	return l;
}

/* The kernels in flight: launches stay until their record comes, oldest
 * first; a slot needed by a later launch lets the older one go, counted. */
static void test_inflight(void)
{
	struct cupti_inflight f;
	struct cupti_launch out[8], l;
	uint64_t more, forgotten;
	uint32_t done[2];
	size_t n;

	CHECK_EQ_INT(cupti_inflight_init(&f, 8), 0);
	l = launch_of(10, 300, "late");
	cupti_inflight_launch(&f, &l);
	l = launch_of(11, 100, "first");
	cupti_inflight_launch(&f, &l);
	l = launch_of(12, 200, "second");
	cupti_inflight_launch(&f, &l);
	l = launch_of(0, 50, "no id");             /* no correlation id: ignored */
	cupti_inflight_launch(&f, &l);
	n = cupti_inflight_take(&f, out, 8, &more, &forgotten);
	CHECK_EQ_INT((long)n, 3);
	CHECK_EQ_STR(out[0].name, "first");
	CHECK_EQ_STR(out[1].name, "second");
	CHECK_EQ_STR(out[2].name, "late");
	CHECK_EQ_INT((long)more, 0);
	CHECK_EQ_INT((long)forgotten, 0);

	/* 11 finished; 4 (the slot of 12 in a table of 8) is not a launch held */
	done[0] = 11;
	done[1] = 4;
	cupti_inflight_done(&f, done, 2);
	n = cupti_inflight_take(&f, out, 1, &more, &forgotten);
	CHECK_EQ_INT((long)n, 1);
	CHECK_EQ_STR(out[0].name, "second");
	CHECK_EQ_INT((long)more, 1);

	/* 20 needs 12's slot (20 % 8 == 12 % 8): 12 is let go and counted */
	l = launch_of(20, 400, "newer");
	cupti_inflight_launch(&f, &l);
	n = cupti_inflight_take(&f, out, 8, &more, &forgotten);
	CHECK_EQ_INT((long)n, 2);
	CHECK_EQ_STR(out[0].name, "late");
	CHECK_EQ_STR(out[1].name, "newer");
	CHECK_EQ_INT((long)forgotten, 1);
	/* a completion of the launch let go does not free its successor */
	done[0] = 12;
	cupti_inflight_done(&f, done, 1);
	n = cupti_inflight_take(&f, out, 8, &more, &forgotten);
	CHECK_EQ_INT((long)n, 2);

	cupti_inflight_clear(&f);
	n = cupti_inflight_take(&f, out, 8, &more, &forgotten);
	CHECK_EQ_INT((long)n, 0);
	CHECK_EQ_INT((long)forgotten, 0);
	cupti_inflight_free(&f);
	/* a table that was never made takes and lists nothing */
	cupti_inflight_launch(&f, &l);
	CHECK_EQ_INT((long)cupti_inflight_take(&f, out, 8, &more, &forgotten), 0);
}

/* With the flight recorder on (o.recorder), GPU work without timestamps
 * launched after the window (its API call after the end, or a later
 * correlation id than such a call) is not the window's drop; work of the
 * window's own calls still is. */
static void test_zero_ts_with_the_recorder(void)
{
	struct trace t;
	struct cupti_conv c;
	struct cupti_conv_opts o;
	CUpti_ActivityAPI in = api(1, W0 + 10, W0 + 20, 211);
	CUpti_ActivityKernel10 kin = kernel(1, 0, 0, "in");
	CUpti_ActivityAPI after = api(5, W1 + 10, W1 + 20, 211);
	CUpti_ActivityKernel10 kafter = kernel(5, 0, 0, "after");
	CUpti_ActivityKernel10 kinflight = kernel(6, 0, 0, "in flight"); /* no API yet */
	const CUpti_Activity *recs[] = {
		(const void *)&in, (const void *)&kin, (const void *)&after,
		(const void *)&kafter, (const void *)&kinflight,
	};
	enum cupti_route routes[5];
	int rec;

	kin.start = kin.end = kafter.start = kafter.end = 0;
	kinflight.start = kinflight.end = 0;
	for (rec = 0; rec < 2; rec++) {
		CHECK_EQ_INT(trace_init(&t), 0);
		memset(&o, 0, sizeof o);
		o.start = W0;
		o.end = W1;
		o.show.kernels = o.show.runtime = true;
		o.recorder = rec;
		CHECK_EQ_INT(cupti_conv_init(&c, &t, &o), 0);
		convert(&c, recs, 5, routes);
		CHECK_EQ_INT(routes[1], CUPTI_ROUTE_DROP);
		CHECK_EQ_INT(routes[3], CUPTI_ROUTE_DROP);
		CHECK_EQ_INT(routes[4], CUPTI_ROUTE_DROP);
		/* without the recorder, as always: all three counted */
		CHECK_EQ_INT((int)c.zero_ts, rec ? 1 : 3);
		CHECK_EQ_INT(count(&t, TRACE_CAT_KERNEL), 0);
		cupti_conv_free(&c);
		trace_free(&t);
	}
}

/* The set of GPU names the recorder has written into the salvage file:
 * 5000 kernel names (pointers 16 bytes apart, as a library's strings lie)
 * are each new once, then known, so none is written twice (a direct-mapped
 * table of 4096 let colliding names push each other out and be written at
 * every sighting, filling the file's name area); an API name with a
 * kernel's key is another name. */
static void test_names_seen(void)
{
	uint64_t base = 0x7f1234560000ull, k;
	int fresh = 0, known = 0;

	cupti_names_reset();
	for (k = 0; k < 5000; k++)
		fresh += !cupti_names_seen(1, base + 16 * k);
	for (k = 0; k < 5000; k++)
		known += cupti_names_seen(1, base + 16 * k);
	CHECK_EQ_INT(fresh, 5000);
	CHECK_EQ_INT(known, 5000);
	CHECK(!cupti_names_seen(2, base));
	CHECK(cupti_names_seen(2, base));
	cupti_names_reset();
	CHECK(!cupti_names_seen(1, base));
}

int main(void)
{
	test_names_seen();
	test_inflight();
	test_kernel_api_and_flow();
	test_routing_by_window();
	test_copies_sync_memory();
	test_annotations(false);
	test_annotations(true);
	test_sized_once();
	test_record_sizes();
	test_patterns();
	test_load();
	test_zero_ts_with_the_recorder();
	return check_done();
}

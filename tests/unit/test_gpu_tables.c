/*
 * test_gpu_tables — GPU time in the operator table and the GPU summary, on
 * a hand-built trace: a step holding range "fwd" which launches two
 * kernels (one through a graph of two), a launch outside any range, a copy
 * in each direction and a synchronization. The memory timeline: CUDA's
 * allocations (CUPTI), and torch's tensors (profile_memory) per device,
 * tensor by tensor, with the operators that held the peak and what was
 * left at the end.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "testdir.h"
#include "export/outdir.h"
#include "export/gpu_summary.h"
#include "export/key_averages.h"
#include "export/memory_timeline.h"

static void add(struct trace *t, enum trace_cat cat, const char *name, int32_t pid,
		int32_t tid, int64_t ts, int64_t dur, uint64_t id, uint32_t flags)
{
	struct trace_event e = { 0 };

	e.cat = (uint8_t)cat;
	e.ph = TRACE_PH_COMPLETE;
	e.name = trace_intern(t, name, strlen(name));
	e.pid = pid;
	e.tid = tid;
	e.ts = ts;
	e.dur = dur;
	e.id = id;
	e.flags = flags;
	trace_add_event(t, &e);
}

static const struct key_avg_row *row(const struct key_avg_table *tab, const char *key)
{
	size_t i;

	for (i = 0; i < tab->nrows; i++)
		if (!strcmp(tab->rows[i].key, key))
			return &tab->rows[i];
	return NULL;
}

static void build(struct trace *t)
{
	trace_init(t);
	t->meta.pid = 10;
	t->meta.start_ts = 0;
	t->meta.end_ts = 1000000; /* 1 ms window */
	add(t, TRACE_CAT_USER_ANNOTATION, "ProfilerStep#5", 10, 10, 0, 1000000, 0, TRACE_F_STEP);
	add(t, TRACE_CAT_USER_ANNOTATION, "fwd", 10, 10, 1000, 5000, 99, 0);
	add(t, TRACE_CAT_CUDA_RUNTIME, "cudaLaunchKernel", 10, 10, 2000, 1000, 1, 0);
	add(t, TRACE_CAT_CUDA_RUNTIME, "cudaGraphLaunch", 10, 10, 4000, 1000, 2, 0);
	add(t, TRACE_CAT_CUDA_RUNTIME, "cudaLaunchKernel", 10, 10, 7000, 1000, 3, 0);
	add(t, TRACE_CAT_CUDA_RUNTIME, "cudaMemcpyAsync", 10, 10, 9000, 500, 4, 0);
	add(t, TRACE_CAT_CUDA_RUNTIME, "cudaMemcpy", 10, 10, 9500, 500, 5, 0);
	/* GPU work: pid 0 = device, tid 7 = stream */
	add(t, TRACE_CAT_KERNEL, "gemm", 0, 7, 100000, 200000, 1, 0);  /* 0.1-0.3 ms */
	add(t, TRACE_CAT_KERNEL, "g0", 0, 7, 300000, 50000, 2, 0);     /* 0.3-0.35 */
	add(t, TRACE_CAT_KERNEL, "g1", 0, 7, 350000, 50000, 2, 0);     /* 0.35-0.4 */
	add(t, TRACE_CAT_KERNEL, "gemm", 0, 8, 320000, 100000, 3, 0);  /* overlaps */
	add(t, TRACE_CAT_GPU_MEMCPY, "Memcpy HtoD", 0, 7, 600000, 100000, 4, 0);
	trace_arg_uint(t, "bytes", 2000000);
	trace_arg_str(t, "copy kind", "HtoD", 4);
	add(t, TRACE_CAT_GPU_MEMCPY, "Memcpy DtoH", 0, 7, 900000, 10000, 5, 0);
	trace_arg_uint(t, "bytes", 1000);
	trace_arg_str(t, "copy kind", "DtoH", 4);
	add(t, TRACE_CAT_CUDA_SYNC, "Context Sync", 0, -1, 11000, 300000, 6, 0);
}

static void test_attribution(void)
{
	struct trace t;
	struct key_avg_table tab;
	struct err e;
	const struct key_avg_row *r;
	char *text;

	build(&t);
	CHECK_EQ_INT(key_averages_build(&t, KEY_AVG_BY_NAME, KEY_AVG_SORT_SELF_CUDA_TIME_TOTAL,
					&tab, &e), 0);
	/* fwd launched gemm (200 us) and a graph of two (100 us). */
	r = row(&tab, "fwd");
	CHECK(r && r->self_cuda_ns == 300000 && r->cuda_total_ns == 300000);
	/* Launches inside fwd: self 0, total = what they launched. */
	r = row(&tab, "cudaGraphLaunch");
	CHECK(r && r->self_cuda_ns == 0 && r->cuda_total_ns == 100000);
	/* Outside any range: the launch owns its GPU time (2 launches). */
	r = row(&tab, "cudaLaunchKernel");
	CHECK(r && r->count == 2 && r->self_cuda_ns == 100000 && r->cuda_total_ns == 300000);
	r = row(&tab, "cudaMemcpyAsync");
	CHECK(r && r->self_cuda_ns == 100000);
	/* The step holds everything but owns none of it. */
	r = row(&tab, "ProfilerStep*");
	CHECK(r && r->self_cuda_ns == 0 && r->cuda_total_ns == 510000);
	CHECK_EQ_INT(tab.self_cuda_sum_ns, 510000);
	CHECK(key_averages_has_cuda(&tab));
	CHECK_EQ_STR(tab.rows[0].key, "fwd"); /* sorted by self CUDA */
	text = key_averages_format(&tab, 0);
	CHECK(text && strstr(text, "Self CUDA %") && strstr(text, "Self CUDA time total: 510.000us"));
	free(text);
	key_averages_free(&tab);
	trace_free(&t);
}

static void test_summary(void)
{
	struct trace t;
	struct gpu_summary g;
	struct textbuf tb;
	struct err e;
	char *text;

	build(&t);
	CHECK_EQ_INT(gpu_summary_compute(&t, &g, &e), 0);
	CHECK(g.any);
	CHECK_EQ_INT(g.ndev, 1);
	/* busy: 0.1-0.42 (gemm, graph, overlapping gemm) + 0.6-0.7 + 0.9-0.91 */
	CHECK_EQ_INT(g.dev[0].busy_ns, 320000 + 100000 + 10000);
	/* idle: 0-0.1, 0.42-0.6, 0.7-0.9 (>= 100 us: 3); 0.91-1.0 is 90 us */
	CHECK_EQ_INT(g.dev[0].gaps, 3);
	CHECK_EQ_INT(g.dev[0].longest_gap_ns, 200000);
	CHECK_EQ_INT(g.ntop, 3);
	CHECK_EQ_STR(g.top[0].name, "gemm");
	CHECK_EQ_INT(g.top[0].count, 2);
	CHECK_EQ_INT(g.top[0].total_ns, 300000);
	CHECK_EQ_INT(g.copy_bytes[GPU_COPY_HTOD], 2000000);
	CHECK_EQ_INT(g.copy_bytes[GPU_COPY_DTOH], 1000);
	CHECK_EQ_INT(g.syncs, 1);
	CHECK_EQ_INT(g.sync_ns, 300000);
	textbuf_init(&tb);
	gpu_summary_put(&tb, &g);
	text = textbuf_take(&tb);
	CHECK(text && strstr(text, "GPU 0: busy 43.00% of the window"));
	CHECK(text && strstr(text, "3 idle gaps"));
	CHECK(text && strstr(text, "HtoD 1.9 MiB in 1 (20.00 GB/s)"));
	CHECK(text && strstr(text, "Synchronization: 300.000us waiting in 1 call\n"));
	free(text);
	trace_free(&t);

	/* No GPU work: no section. */
	trace_init(&t);
	CHECK_EQ_INT(gpu_summary_compute(&t, &g, &e), 0);
	CHECK(!g.any);
	textbuf_init(&tb);
	gpu_summary_put(&tb, &g);
	text = textbuf_take(&tb);
	CHECK(!text || !*text);
	free(text);
	trace_free(&t);
}

static void mem(struct trace *t, int32_t dev, int64_t ts, int64_t bytes, int64_t total)
{
	struct trace_event e = { 0 };

	e.cat = TRACE_CAT_GPU_MEMORY;
	e.ph = TRACE_PH_INSTANT;
	e.name = trace_intern(t, "[memory]", 8);
	e.pid = dev;
	e.ts = ts;
	trace_add_event(t, &e);
	trace_arg_int(t, "Bytes", bytes);
	trace_arg_int(t, "Total Allocated", total);
}

static void test_memory_timeline(void)
{
	struct trace t;
	struct memory_timeline m;
	struct err e;

	trace_init(&t);
	t.meta.start_ts = 1000;
	t.meta.end_ts = 9000;
	mem(&t, 1, 5000, -10, 30);  /* out of order on purpose */
	mem(&t, 1, 2000, 40, 40);
	mem(&t, 0, 3000, 7, 7);
	CHECK_EQ_INT(memory_timeline_build(&t, &m, &e), 0);
	CHECK_EQ_INT(m.ndev, 2);
	CHECK_EQ_INT(m.dev[0].device, 1);
	CHECK_EQ_INT(m.dev[0].n, 2);
	CHECK_EQ_INT(m.dev[0].p[0].ts, 2000);
	CHECK_EQ_INT(m.dev[0].peak, 40);
	CHECK_EQ_INT(m.dev[0].peak_ts, 2000);
	CHECK_EQ_INT(m.dev[0].allocs, 1);
	CHECK_EQ_INT(m.dev[0].frees, 1);
	CHECK_EQ_INT(m.dev[1].peak, 7);
	memory_timeline_free(&m);
	trace_free(&t);
}

static void op(struct trace *t, int32_t tid, const char *name, uint8_t cat, int64_t ts,
	       int64_t dur)
{
	struct trace_event e = { 0 };

	e.cat = cat;
	e.ph = TRACE_PH_COMPLETE;
	e.name = trace_intern(t, name, strlen(name));
	e.pid = 1;
	e.tid = tid;
	e.ts = ts;
	e.dur = dur;
	if (strncmp(name, "ProfilerStep#", 13) == 0)
		e.flags = TRACE_F_STEP;
	trace_add_event(t, &e);
}

/* A torch "[memory]" event (profile_memory): `bytes` at `addr` on thread
 * `tid`, on the CPU (type 0) or GPU `id` (type 1). */
static void tmem(struct trace *t, int32_t tid, int64_t ts, uint64_t addr, int64_t bytes,
		 int32_t type, int32_t id)
{
	struct trace_event e = { 0 };

	e.cat = TRACE_CAT_CPU_INSTANT;
	e.ph = TRACE_PH_INSTANT;
	e.name = trace_intern(t, "[memory]", 8);
	e.pid = 1;
	e.tid = tid;
	e.ts = ts;
	trace_add_event(t, &e);
	trace_arg_int(t, "Total Reserved", 0);
	trace_arg_int(t, "Total Allocated", 123);
	trace_arg_int(t, "Bytes", bytes);
	trace_arg_uint(t, "Addr", addr);
	trace_arg_int(t, "Device Id", id);
	trace_arg_int(t, "Device Type", type);
}

/*
 * torch's tensors, tensor by tensor (added out of order):
 *   thread 1: step [0,100); aten::mul [10,20) allocates A (100 bytes) at
 *             12; aten::mm [30,40) holding aten::empty [31,32) which
 *             allocates B (50) at 31; aten::mm allocates C (30) at 35 and
 *             at 40 (its end: outside it) frees B; A freed at 60, a block
 *             allocated before the window (D) freed at 70; aten::mul
 *             [80,90) allocates E (100) at 85, at the same address as A
 *   thread 2: aten::add [0,50) allocates F (7) at 45, never freed
 *   GPU 0: aten::mm (thread 1) allocates 1 MiB at 36
 * CPU total: 100, 150, 180, 130 (B), 137 (F), 37 (A), 37 (D: not
 * counted), 137 (E). Peak 180 at 35: A (aten::mul), B (aten::empty), C
 * (aten::mm). At the end: E, F and C.
 */
static void test_memory_tensors(void)
{
	struct trace t;
	struct memory_timeline m;
	struct err e;
	const struct memory_series *cpu, *gpu;
	static const int64_t want[] = { 100, 150, 180, 130, 137, 37, 37, 137 };
	size_t i;

	trace_init(&t);
	t.meta.start_ts = 0;
	t.meta.end_ts = 100;
	tmem(&t, 1, 85, 0xA, 100, 0, -1);
	op(&t, 1, "ProfilerStep#3", TRACE_CAT_USER_ANNOTATION, 0, 100);
	op(&t, 1, "aten::mul", TRACE_CAT_CPU_OP, 10, 10);
	op(&t, 1, "aten::mm", TRACE_CAT_CPU_OP, 30, 10);
	op(&t, 1, "aten::empty", TRACE_CAT_CPU_OP, 31, 1);
	op(&t, 1, "aten::mul", TRACE_CAT_CPU_OP, 80, 10);
	op(&t, 2, "aten::add", TRACE_CAT_CPU_OP, 0, 50);
	tmem(&t, 1, 12, 0xA, 100, 0, -1);
	tmem(&t, 1, 31, 0xB, 50, 0, -1);
	tmem(&t, 1, 35, 0xC, 30, 0, -1);
	tmem(&t, 1, 36, 0x1000, 1 << 20, 1, 0);
	tmem(&t, 1, 40, 0xB, -50, 0, -1);
	tmem(&t, 2, 45, 0xF, 7, 0, -1);
	tmem(&t, 1, 60, 0xA, -100, 0, -1);
	tmem(&t, 1, 70, 0xD, -64, 0, -1);
	CHECK_EQ_INT(memory_timeline_build(&t, &m, &e), 0);
	CHECK_EQ_INT(m.ndev, 2);
	cpu = &m.dev[0];
	gpu = &m.dev[1];
	CHECK_EQ_INT(cpu->source, MEMORY_TORCH);
	CHECK_EQ_INT(cpu->device_type, 0);
	CHECK_EQ_INT(cpu->device, -1);
	CHECK_EQ_INT(cpu->n, 8);
	for (i = 0; i < 8 && i < cpu->n; i++)
		CHECK_EQ_INT(cpu->p[i].bytes, want[i]);
	CHECK_EQ_INT(cpu->allocs, 5);
	CHECK_EQ_INT(cpu->frees, 3);
	CHECK_EQ_INT(cpu->peak, 180);
	CHECK_EQ_INT(cpu->peak_ts, 35);
	CHECK_EQ_INT(cpu->nat_peak, 3);
	if (cpu->nat_peak == 3) {
		CHECK_EQ_STR(trace_str(&t, cpu->at_peak[0].name), "aten::mul");
		CHECK_EQ_INT(cpu->at_peak[0].bytes, 100);
		CHECK_EQ_STR(trace_str(&t, cpu->at_peak[1].name), "aten::empty");
		CHECK_EQ_STR(trace_str(&t, cpu->at_peak[2].name), "aten::mm");
		CHECK_EQ_INT(cpu->at_peak[2].bytes, 30);
	}
	CHECK_EQ_INT(cpu->end_bytes, 137);
	CHECK_EQ_INT(cpu->end_tensors, 3);
	CHECK_EQ_INT(cpu->nat_end, 3);
	if (cpu->nat_end == 3) {
		CHECK_EQ_STR(trace_str(&t, cpu->at_end[0].name), "aten::mul");
		CHECK_EQ_INT(cpu->at_end[0].tensors, 1);
		CHECK_EQ_STR(trace_str(&t, cpu->at_end[1].name), "aten::mm");
		CHECK_EQ_STR(trace_str(&t, cpu->at_end[2].name), "aten::add");
	}
	CHECK_EQ_INT(gpu->source, MEMORY_TORCH);
	CHECK_EQ_INT(gpu->device_type, 1);
	CHECK_EQ_INT(gpu->device, 0);
	CHECK_EQ_INT(gpu->peak, 1 << 20);
	CHECK_EQ_INT(gpu->nat_end, 1);
	CHECK_EQ_STR(trace_str(&t, gpu->at_end[0].name), "aten::mm");
	memory_timeline_free(&m);

	/* an allocation outside any operator (the step is not one) */
	tmem(&t, 1, 95, 0xE0, 5, 0, -1);
	CHECK_EQ_INT(memory_timeline_build(&t, &m, &e), 0);
	CHECK_EQ_INT(m.dev[0].nat_end, 4);
	CHECK_EQ_INT(m.dev[0].at_end[3].name, STRTAB_NONE);
	memory_timeline_free(&m);
	trace_free(&t);
}

/* A window of 200,000 allocations and frees (a tensor every 5 ns, freed
 * at once, one left behind each 1000th): the page draws a few points per
 * tenth of a pixel column, not one per event, and still reaches the
 * peak; the JSON keeps every point, in µs with three decimals. */
static void test_memory_timeline_many(void)
{
	struct trace t;
	struct memory_timeline m;
	struct outdir d;
	struct err e;
	char dir[64], path[128], *html = NULL, *json = NULL, *p;
	size_t len = 0, points = 0;
	FILE *f;
	int i;

	testdir_make(dir, sizeof dir, "test_gpu_tables", false);
	trace_init(&t);
	t.meta.start_ts = 0;
	t.meta.end_ts = 1000000;
	for (i = 0; i < 100000; i++) {
		tmem(&t, 1, 10 * i + 1, 0x1000 + (uint64_t)i, 64, 0, -1);
		if (i % 1000 != 999)
			tmem(&t, 1, 10 * i + 6, 0x1000 + (uint64_t)i, -64, 0, -1);
	}
	CHECK_EQ_INT(memory_timeline_build(&t, &m, &e), 0);
	CHECK_EQ_INT(m.dev[0].n, 199900);
	CHECK_EQ_INT(m.dev[0].peak, 100 * 64);
	CHECK_EQ_INT(outdir_open(dir, &d, &e), 0);
	CHECK_EQ_INT(memory_timeline_write_html(&m, &t, &d, "memory_timeline.html", &e), 0);
	CHECK_EQ_INT(memory_timeline_write_json(&m, &t, &d, "memory_timeline.json", &e), 0);
	snprintf(path, sizeof path, "%s/memory_timeline.html", dir);
	f = fopen(path, "r");
	CHECK(f && getdelim(&html, &len, '\0', f) > 0);
	if (f)
		fclose(f);
	p = html ? strstr(html, "<polyline class=\"series\" points=\"") : NULL;
	CHECK(p != NULL);
	for (; p && *p && *p != '/'; p++)
		points += *p == ',';
	CHECK(points > 1000 && points < 4 * 8600 + 10);
	/* the peak's height: the top margin, 30 px */
	CHECK(html && strstr(html, ",30.0 ") != NULL);
	snprintf(path, sizeof path, "%s/memory_timeline.json", dir);
	f = fopen(path, "r");
	len = 0;
	CHECK(f && getdelim(&json, &len, '\0', f) > 0);
	if (f)
		fclose(f);
	CHECK(json && strstr(json, "\"points\": [[0.001, 64], [0.006, 0], [0.011, 64]") != NULL);
	CHECK(json && strstr(json, "[999.991, 6400]") != NULL);
	free(html);
	free(json);
	outdir_close(&d);
	memory_timeline_free(&m);
	trace_free(&t);
	testdir_remove(dir);
}

int main(void)
{
	test_memory_timeline();
	test_memory_tensors();
	test_memory_timeline_many();
	test_attribution();
	test_summary();
	return check_done();
}

/*
 * bench_cupti — GPU activity records per second through profhost's record
 * path, fed by the CUPTI fake, and the memory one window of them takes.
 *
 *   bench_cupti [launches] [pool_mb] [windows]
 *        defaults: 5000000 launches (10M records), a 2048 MiB pool, 5 windows
 *
 * The path is the host's: the fake writes CUDA 13 records (one
 * cudaLaunchKernel RUNTIME record and one CONCURRENT_KERNEL record per
 * launch) into buffers borrowed from a pool reserved once, as CUPTI would;
 * a forced flush hands the buffers back; the records are read with
 * cuptiActivityGetNextRecord and converted into trace events by
 * cupti_records.c's two passes (correlation, routing, kernel args, ac2g
 * arrows, step spans). The same records are converted `windows` times,
 * each into a fresh trace freed afterwards, as a job's successive windows
 * are: the first window's trace lands on memory the process never touched
 * (every page faulted in and zeroed by the kernel), the later ones on
 * memory the process has given back and takes again. Reported: the rate of
 * the producer (the fake), each window's conversion (wall, user and system
 * CPU, the three passes), the median of the later windows, the pool, the
 * trace, and the peak resident memory. A pool too small for the window
 * drops records and counts them: memory stays bounded by the pool.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>

#include "capture/cupti/cupti_internal.h"
#include "cupti_fake.h"

#define BUF ((size_t)4 << 20)

static uint8_t *pool;
static size_t nbuf, nfree, ndone;
static size_t *free_idx;
static struct { size_t idx, valid; } *done_list;

static uint64_t CUPTIAPI clock_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void CUPTIAPI req(uint8_t **b, size_t *size, size_t *max)
{
	*max = 0;
	if (!nfree) {
		*b = NULL;
		*size = 0;
		return;
	}
	*b = pool + free_idx[--nfree] * BUF;
	*size = BUF;
}

static void CUPTIAPI done(CUcontext c, uint32_t s, uint8_t *b, size_t size, size_t valid)
{
	(void)c;
	(void)s;
	(void)size;
	done_list[ndone].idx = (size_t)(b - pool) / BUF;
	done_list[ndone].valid = valid;
	ndone++;
}

static const char *api_name(void *ctx, bool driver, uint32_t cbid)
{
	static const char *name;

	(void)ctx;
	if (!name && cuptiGetCallbackName(driver ? CUPTI_CB_DOMAIN_DRIVER_API
					  : CUPTI_CB_DOMAIN_RUNTIME_API, cbid, &name) != CUPTI_SUCCESS)
		return NULL;
	return name;
}

static double secs(uint64_t a, uint64_t b)
{
	return (double)(b - a) / 1e9;
}

/* User and system CPU seconds so far. */
static void cpu(double *user, double *sys)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	*user = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6;
	*sys = (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* One conversion of the pool's records into a fresh trace, as the host's
 * cu_collect does after a window: scan, add, finish. Fills *w with its
 * times; the trace is freed before returning (as the host does once the
 * window is written). Returns 0, or -1 when the converter cannot start. */
struct window_run {
	double wall, user, sys;        /* seconds */
	double scan, add, finish;      /* wall seconds of the three passes */
	size_t nev, nargs, bytes;      /* the trace it built */
	uint64_t records;
	size_t corr;                   /* correlation ids: the next window's
					  hint, as the host passes it */
};

static int convert(uint64_t launches, uint64_t start, struct window_run *w)
{
	struct cupti_conv c;
	struct cupti_conv_opts o;
	struct cupti_devices devs = { 0 };
	struct trace t;
	struct trace_step step;
	double u0, s0, u1, s1;
	uint64_t t0, t1, t2, t3;
	size_t i;

	trace_init(&t);
	t.meta.pid = 1;
	t.meta.start_ts = (int64_t)start;
	t.meta.end_ts = (int64_t)start + (int64_t)launches * 5000 + 1000000;
	step.step = 0;
	step.ts = t.meta.start_ts;
	step.dur = t.meta.end_ts - t.meta.start_ts;
	step.tid = 1;
	step.partial = 0;
	trace_add_step(&t, &step);
	memset(&o, 0, sizeof o);
	o.start = t.meta.start_ts;
	o.end = t.meta.end_ts;
	o.pid = 1;
	o.show.kernels = o.show.runtime = true;
	o.api_name = api_name;
	o.devices = &devs;
	o.corr_hint = w->corr;
	cpu(&u0, &s0);
	t0 = clock_ns();
	if (cupti_conv_init(&c, &t, &o) != 0) {
		trace_free(&t);
		return -1;
	}
	for (i = 0; i < ndone; i++) {
		CUpti_Activity *r = NULL;

		while (cuptiActivityGetNextRecord(pool + done_list[i].idx * BUF,
						  done_list[i].valid, &r) == CUPTI_SUCCESS)
			cupti_conv_scan(&c, r);
	}
	t1 = clock_ns();
	for (i = 0; i < ndone; i++) {
		CUpti_Activity *r = NULL;

		while (cuptiActivityGetNextRecord(pool + done_list[i].idx * BUF,
						  done_list[i].valid, &r) == CUPTI_SUCCESS)
			cupti_conv_add(&c, r);
	}
	t2 = clock_ns();
	cupti_conv_finish(&c);
	t3 = clock_ns();
	cpu(&u1, &s1);
	w->wall = secs(t0, t3);
	w->scan = secs(t0, t1);
	w->add = secs(t1, t2);
	w->finish = secs(t2, t3);
	w->user = u1 - u0;
	w->sys = s1 - s0;
	w->records = c.records;
	w->corr = c.map_n;
	w->nev = t.nev;
	w->nargs = t.nargs;
	w->bytes = t.nev * sizeof *t.ev + t.nargs * sizeof *t.args;
	cupti_conv_free(&c);
	trace_free(&t);
	for (i = 0; i < devs.n; i++)
		free(devs.dev[i].name);
	free(devs.dev);
	return 0;
}

/* GB/s at which this machine hands out fresh memory: `mib` MiB mapped,
 * advised huge pages as the trace's arrays are, and written once per 4 KiB.
 * Context for the system time of a window that gets fresh memory. */
static double touch_rate(size_t mib)
{
	size_t n = mib << 20, i;
	uint64_t t0, t1;
	char *p;

	t0 = clock_ns();
	p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return 0;
	madvise(p, n, MADV_HUGEPAGE);
	for (i = 0; i < n; i += 4096)
		p[i] = 1;
	t1 = clock_ns();
	munmap(p, n);
	return (double)n / 1e9 / secs(t0, t1);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	uint64_t launches = argc > 1 ? strtoull(argv[1], NULL, 10) : 5000000;
	size_t pool_mb = argc > 2 ? strtoul(argv[2], NULL, 10) : 2048;
	int windows = argc > 3 ? atoi(argv[3]) : 5;
	uint64_t records, t0, t1, start;
	size_t dropped = 0, i;
	struct window_run w = { 0 };
	struct rusage ru;
	double later[64];
	int n_later = 0, k;

	if (windows < 1 || windows > 64) {
		fprintf(stderr, "bench_cupti: windows must be 1..64, not %d\n", windows);
		return 2;
	}
	nbuf = (pool_mb << 20) / BUF;
	if (nbuf < 2)
		nbuf = 2;
	pool = mmap(NULL, nbuf * BUF, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	free_idx = malloc(nbuf * sizeof *free_idx);
	done_list = malloc(nbuf * sizeof *done_list);
	if (pool == MAP_FAILED || !free_idx || !done_list) {
		fprintf(stderr, "bench_cupti: cannot reserve the pool\n");
		return 1;
	}
	for (i = 0; i < nbuf; i++)
		free_idx[i] = nbuf - 1 - i;
	nfree = nbuf;

	cuptiActivityRegisterTimestampCallback(clock_ns);
	cuptiActivityRegisterCallbacks(req, done);
	cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME);
	cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);

	start = clock_ns();
	t0 = clock_ns();
	records = cupti_fake_replay(launches, 5000);
	cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
	cuptiActivityGetNumDroppedRecords(NULL, 0, &dropped);
	t1 = clock_ns();

	printf("bench_cupti: %llu launches -> %llu records in the pool, %zu dropped "
	       "(pool %zu MiB, %zu buffers of %zu MiB, %zu used)\n",
	       (unsigned long long)launches, (unsigned long long)records, dropped,
	       nbuf * BUF >> 20, nbuf, BUF >> 20, ndone);
	printf("  fake -> buffers (producer): %.3f s, %.2f M records/s\n",
	       secs(t0, t1), (double)records / secs(t0, t1) / 1e6);
	printf("  machine: fresh memory first touched at %.2f GB/s (512 MiB, huge pages "
	       "advised)\n", touch_rate(512));
	printf("  buffers -> trace (host path), each window into a fresh trace:\n");
	printf("  window     wall  M rec/s    user  M rec/s  system    scan     add  finish\n");
	for (k = 0; k < windows; k++) {
		if (convert(launches, start, &w) != 0) {
			fprintf(stderr, "bench_cupti: out of memory converting\n");
			return 1;
		}
		printf("  %6d %8.3f %8.2f %7.3f %8.2f %7.3f %7.3f %7.3f %7.3f%s\n", k + 1,
		       w.wall, (double)records / w.wall / 1e6, w.user,
		       (double)records / w.user / 1e6, w.sys, w.scan, w.add, w.finish,
		       k == 0 ? "  (fresh memory)" : "");
		if (k > 0)
			later[n_later++] = (double)records / w.wall / 1e6;
	}
	if (n_later) {
		qsort(later, (size_t)n_later, sizeof later[0], cmp_double);
		printf("  median of windows 2-%d: %.2f M records/s (wall)\n", windows,
		       n_later % 2 ? later[n_later / 2]
				   : (later[n_later / 2 - 1] + later[n_later / 2]) / 2);
	}
	getrusage(RUSAGE_SELF, &ru);
	printf("  trace: %zu events, %zu args, %.1f MiB; pool used %.1f MiB; "
	       "peak RSS %.1f MiB\n", w.nev, w.nargs, (double)w.bytes / (1 << 20),
	       (double)(ndone * BUF) / (1 << 20), (double)ru.ru_maxrss / 1024);
	return 0;
}

/*
 * bench_cupti — GPU activity records per second through profhost's record
 * path, fed by the CUPTI fake, and the memory one window of them takes.
 *
 *   bench_cupti [launches] [pool_mb]      (default 5000000 launches: 10M
 *                                          records; pool 2048 MiB)
 *
 * The path is the host's: the fake writes CUDA 13 records (one
 * cudaLaunchKernel RUNTIME record and one CONCURRENT_KERNEL record per
 * launch) into buffers borrowed from a pool reserved once, as CUPTI would;
 * a forced flush hands the buffers back; the records are read with
 * cuptiActivityGetNextRecord and converted into trace events by
 * cupti_records.c's two passes (correlation, routing, kernel args, ac2g
 * arrows, step spans). Reported: the rate of the producer (the fake), of
 * the host's conversion, and end to end; the pool, the trace, and the peak
 * resident memory. A pool too small for the window drops records and
 * counts them: memory stays bounded by the pool.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>

#include "capture/cupti_internal.h"
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

int main(int argc, char **argv)
{
	uint64_t launches = argc > 1 ? strtoull(argv[1], NULL, 10) : 5000000;
	size_t pool_mb = argc > 2 ? strtoul(argv[2], NULL, 10) : 2048;
	uint64_t records, t0, t1, t2, t3, start;
	size_t dropped = 0, i, trace_bytes;
	struct cupti_conv c;
	struct cupti_conv_opts o;
	struct cupti_devices devs = { 0 };
	struct trace t;
	struct trace_step step;
	struct rusage ru;
	double u0, s0, u1, s1;

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
	if (cupti_conv_init(&c, &t, &o) != 0)
		return 1;
	cpu(&u0, &s0);
	t2 = clock_ns();
	for (i = 0; i < ndone; i++) {
		CUpti_Activity *r = NULL;

		while (cuptiActivityGetNextRecord(pool + done_list[i].idx * BUF,
						  done_list[i].valid, &r) == CUPTI_SUCCESS)
			cupti_conv_scan(&c, r);
	}
	for (i = 0; i < ndone; i++) {
		CUpti_Activity *r = NULL;

		while (cuptiActivityGetNextRecord(pool + done_list[i].idx * BUF,
						  done_list[i].valid, &r) == CUPTI_SUCCESS)
			cupti_conv_add(&c, r);
	}
	cupti_conv_finish(&c);
	t3 = clock_ns();
	cpu(&u1, &s1);
	getrusage(RUSAGE_SELF, &ru);
	trace_bytes = t.cap_ev * sizeof *t.ev + t.cap_args * sizeof *t.args;

	printf("bench_cupti: %llu launches -> %llu records in the pool, %zu dropped "
	       "(pool %zu MiB, %zu buffers of %zu MiB, %zu used)\n",
	       (unsigned long long)launches, (unsigned long long)records, dropped,
	       nbuf * BUF >> 20, nbuf, BUF >> 20, ndone);
	printf("  fake -> buffers (producer):   %8.3f s  %7.2f M records/s\n",
	       secs(t0, t1), (double)records / secs(t0, t1) / 1e6);
	printf("  buffers -> trace (host path): %8.3f s  %7.2f M records/s\n",
	       secs(t2, t3), (double)records / secs(t2, t3) / 1e6);
	printf("    of which CPU: user %.3f s (%.2f M records/s), system %.3f s "
	       "(first touch of the trace's memory)\n", u1 - u0,
	       (double)records / (u1 - u0) / 1e6, s1 - s0);
	printf("  end to end:                   %8.3f s  %7.2f M records/s\n",
	       secs(t0, t1) + secs(t2, t3),
	       (double)records / (secs(t0, t1) + secs(t2, t3)) / 1e6);
	printf("  trace: %zu events, %zu args, %.1f MiB; pool used %.1f MiB; "
	       "peak RSS %.1f MiB\n", t.nev, t.nargs, (double)trace_bytes / (1 << 20),
	       (double)(ndone * BUF) / (1 << 20), (double)ru.ru_maxrss / 1024);
	cupti_conv_free(&c);
	trace_free(&t);
	for (i = 0; i < devs.n; i++)
		free(devs.dev[i].name);
	free(devs.dev);
	return 0;
}

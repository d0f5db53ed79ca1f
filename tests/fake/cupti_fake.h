/*
 * cupti_fake — the scenario API of the CUPTI fake (libcupti-fake.so).
 *
 * libcupti-fake.so stands in for both halves of a GPU process: it exports
 * the CUPTI functions profhost calls, with the real contract (built from the
 * CUDA 13 headers, writing the CUDA 13 record structs into the buffers the
 * client hands it), and it plays the CUDA driver and runtime: the functions
 * below are the "CUDA calls" a test workload makes. Each one behaves like
 * its CUDA counterpart as far as CUPTI can see: an API call with a
 * correlation id (callbacks to the subscriber at enter and exit, a
 * RUNTIME/DRIVER record), GPU work on a simulated timeline (one queue per
 * stream, kernels run back to back), and the activity records that work
 * produces once it has finished.
 *
 * Time: every timestamp comes from the client's timestamp callback
 * (cuptiActivityRegisterTimestampCallback), or CLOCK_REALTIME when none is
 * registered, as the real CUPTI does. GPU work is virtual: a kernel of
 * D microseconds occupies its stream for D microseconds of that clock, and
 * a synchronizing call (cudaStreamSynchronize, cudaMemcpy) really waits
 * until the work it waits for has "finished".
 *
 * Environment:
 *   CUDA_INJECTION64_PATH   loaded and its InitializeInjection() called by
 *                           the first CUDA call (as cuInit does)
 *   CUPTI_FAKE_MODE         no_driver | insufficient_privileges |
 *                           multiple_subscribers | old_version: the error
 *                           a machine without a driver, with profiling
 *                           restricted to admins, with another CUPTI
 *                           client, or with CUDA 12's CUPTI would give
 *   CUPTI_FAKE_DEVICES      number of devices (default 1, at most 8)
 *   CUPTI_FAKE_STATS        file written at cuptiFinalize() and at exit
 *                           with the counters of struct cupti_fake_stats
 *                           ("name value" lines), and the NVTX ranges seen
 *   NVTX_INJECTION64_PATH   may name libcupti-fake.so: it then records the
 *                           NVTX ranges started and ended, like Nsight
 *                           Systems' injection (cupti_fake_nvtx.c)
 *
 * Every function may be called from any thread. Functions that return a
 * correlation id return 0 when there is no "driver" (CUPTI_FAKE_MODE=
 * no_driver).
 */
#ifndef CUPTI_FAKE_H
#define CUPTI_FAKE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Copy directions: the values of CUpti_ActivityMemcpyKind. */
enum cupti_fake_copy {
	CUPTI_FAKE_HTOD = 1,
	CUPTI_FAKE_DTOH = 2,
	CUPTI_FAKE_DTOD = 8,
	CUPTI_FAKE_HTOH = 9
};

/* cuInit: loads CUDA_INJECTION64_PATH (once per process) and calls its
 * InitializeInjection. Every other call below does this first. Returns 0,
 * or -1 without a driver. */
int cupti_fake_init(void);

/* cudaSetDevice for the calling thread (default 0). */
void cupti_fake_set_device(uint32_t device);

/* cudaLaunchKernel: kernel `name` on `stream`, running `dur_us` µs once the
 * stream is free. Returns the launch's correlation id. */
uint32_t cupti_fake_launch(const char *name, uint32_t stream, uint32_t dur_us);

/* cuLaunchKernel: the same through the driver API (a DRIVER record). */
uint32_t cupti_fake_launch_driver(const char *name, uint32_t stream,
				  uint32_t dur_us);

/* cudaMemcpyAsync (async != 0) or cudaMemcpy (waits for the copy) of
 * `bytes` in direction `kind`, taking `dur_us` µs on `stream`. */
uint32_t cupti_fake_memcpy(enum cupti_fake_copy kind, uint64_t bytes,
			   uint32_t stream, uint32_t dur_us, int async);

/* cudaMemsetAsync of `bytes` on `stream`, taking `dur_us` µs. */
uint32_t cupti_fake_memset(uint64_t bytes, uint32_t stream, uint32_t dur_us);

/* cudaMalloc of `bytes` on the current device; returns the device address
 * (0 without a driver). */
uint64_t cupti_fake_malloc(uint64_t bytes);

/* cudaFree of an address cupti_fake_malloc returned. */
void cupti_fake_free(uint64_t address);

/* cudaStreamSynchronize: returns when the stream's work has finished. */
uint32_t cupti_fake_sync_stream(uint32_t stream);

/* cudaDeviceSynchronize: returns when every stream of the current device
 * is idle. */
uint32_t cupti_fake_sync_device(void);

/* cudaGraphLaunch of a graph of `n` kernels named names[i], each `dur_us`
 * µs, on `stream`: one API call, n kernels sharing its correlation id.
 * Returns its correlation id, 0 without a driver, or
 * CUPTI_FAKE_LAUNCH_FAILED once a graph launched while CUPTI was
 * subscribed saw cuptiFinalize (the real failure, the context lost). */
#define CUPTI_FAKE_LAUNCH_FAILED 0xffffffffu
uint32_t cupti_fake_graph_launch(uint32_t stream, unsigned n,
				 const char *const *names, uint32_t dur_us);

/* For benchmarks: `n` kernel launches replayed at full speed, each a
 * cudaLaunchKernel RUNTIME record and a CONCURRENT_KERNEL record of
 * `kernel_ns` (for enabled kinds), on consecutive simulated times from
 * now; no subscriber callbacks, no waiting. The records go through the same
 * buffer contract as every other (client buffers, drops counted). Returns
 * the records written. */
uint64_t cupti_fake_replay(uint64_t n, uint32_t kernel_ns);

/* What the fake saw, for tests. */
struct cupti_fake_stats {
	uint64_t injections;        /* InitializeInjection calls made */
	uint64_t subscribes;        /* cuptiSubscribe calls */
	uint64_t subscribed;        /* ... that succeeded */
	uint64_t finalizes;         /* cuptiFinalize calls */
	uint64_t ts_callbacks;      /* cuptiActivityRegisterTimestampCallback calls */
	uint64_t ts_before_enable;  /* 1: the first enable came after a
				       timestamp callback was registered */
	uint64_t enables;           /* cuptiActivityEnable calls that succeeded */
	uint64_t disables;
	uint64_t enabled_now;       /* bit k: kind k is enabled now */
	uint64_t records;           /* records written into client buffers */
	uint64_t dropped;           /* records dropped: no buffer */
	uint64_t buffers_requested; /* buffer requests answered with a buffer */
	uint64_t buffers_refused;   /* ... answered with none */
	uint64_t buffers_completed;
	uint64_t flushes_forced;
	uint64_t ext_pushes, ext_pops;
	uint64_t profiler_starts, profiler_stops; /* cudaProfilerStart/Stop */
};

void cupti_fake_get_stats(struct cupti_fake_stats *s);

#ifdef __cplusplus
}
#endif

#endif

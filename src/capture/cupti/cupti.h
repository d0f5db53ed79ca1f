/*
 * cupti — GPU capture through CUPTI, as a capture source (../source.h).
 *
 * CUPTI is opened with dlopen (never linked; a copy already in the process
 * is reused), subscribed once, and driven by the window lifecycle: activity
 * kinds are enabled for warm-up and recorded steps and disabled between
 * windows; the host thread flushes (FLUSH_FORCED) and converts the records
 * of each closed window; CUPTI is finalized once no window lies ahead.
 * Every outcome that stops GPU capture (no CUPTI, no driver, no profiling
 * permission, another CUPTI client) is said in one line and CPU capture
 * goes on. Under Nsight Systems it does not subscribe: the schedule drives
 * cudaProfilerStart/Stop and marks steps with NVTX. See docs/gpu.md.
 *
 * Built only with the CUDA headers (PROFHOST_HAVE_CUDA).
 */
#ifndef PROFHOST_CUPTI_H
#define PROFHOST_CUPTI_H

#include "../source.h"

/* The capture source (listed in host/capture.c). Its cuda_inject slot is
 * InitializeInjection, forwarded by the shim (core_api.cuda_inject): it
 * starts GPU capture if it waits for the CUDA driver, never twice. */
extern const struct capture_ops cupti_capture;

#endif

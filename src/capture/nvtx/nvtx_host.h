/*
 * nvtx_host — the core's half of NVTX capture, as a capture source
 * (src/capture/source.h): configures the shim's triggers at init (the
 * shim's half is src/shim/nvtx.h) and names NVTX-named threads in each
 * trace. Threads: nvtx_capture's callbacks follow source.h.
 */
#ifndef PROFHOST_NVTX_HOST_H
#define PROFHOST_NVTX_HOST_H

#include "../source.h"

extern const struct capture_ops nvtx_capture;

#endif

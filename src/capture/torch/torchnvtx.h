/*
 * torchnvtx — torch's NVTX operator ranges as operator events. Internal to
 * src/capture (python.c calls it for windows in which the Python bridge had
 * torch's emit_nvtx on).
 *
 * torch.autograd.profiler.emit_nvtx names each operator's NVTX range
 *     "<op>[, seq = <n>][, op_id = <n>][, sizes = [[2, 3], [3]]][, input_op_ids = ...]"
 * which the host records as a user_annotation range. torchnvtx_convert()
 * renames each such range to <op>; an operator of a namespace ("aten::mm",
 * "c10d::allreduce_") becomes a cpu_op event, as in torch.profiler's
 * traces, so key_averages.txt lists operators like torch's key_averages();
 * the sequence number becomes the argument "Sequence number" and the sizes
 * "Input Dims" (a JSON list, Kineto's form). Ranges of record_function
 * labels keep their category. Host thread.
 */
#ifndef PROFHOST_CAPTURE_TORCHNVTX_H
#define PROFHOST_CAPTURE_TORCHNVTX_H

#include <stddef.h>

#include "../../events/trace.h"
#include "../../common/err.h"

/* Converts the trace's torch operator ranges; sets *converted to how many
 * became cpu_op events. Returns 0, or -1 with *e set when out of memory. */
int torchnvtx_convert(struct trace *t, size_t *converted, struct err *e);

#endif

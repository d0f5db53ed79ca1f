/*
 * torchops — the C end of profhost's operator collector inside torch.
 *
 * The observer (src/torchops/observer.cpp, loaded into the process by the
 * Python bridge) reports each torch operator, backward function and
 * record_function label through the table torchops_table() returns
 * (src/torchops/torchops_abi.h); torchops appends it to the calling
 * thread's event buffer as one EVBUF_TORCH_OP record (src/events/oprec.h),
 * which the assembler turns into a Kineto cpu_op (or user_annotation)
 * event. On a GPU the observer pushes a CUPTI external correlation id
 * around each operator (the hooks cupti.c installs here), so the kernels it
 * launches link to it as they link to NVTX ranges.
 */
#ifndef PROFHOST_CAPTURE_TORCHOPS_H
#define PROFHOST_CAPTURE_TORCHOPS_H

#include <stdbool.h>
#include <stdint.h>

#include "../torchops/torchops_abi.h"

struct host;

/* The table for the observer. `h` is the host (its shim appends); call
 * once at start-up, before handing the table out. */
const struct torchops_api *torchops_table(struct host *h);

/* Whether a window records now (python.c's window callbacks). Any thread. */
void torchops_set_recording(bool on);

/* The GPU link (cupti.c; NULL, NULL removes it). Any thread. */
void torchops_set_ext_hooks(uint64_t (*push)(void), void (*pop)(void));

/* Operators appended since start-up (all windows). Any thread. */
uint64_t torchops_count(void);

#endif

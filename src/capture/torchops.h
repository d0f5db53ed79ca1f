/*
 * torchops — the C end of profhost's operator collector inside torch.
 *
 * The observer (src/torchops/observer.cpp, loaded into the process by the
 * Python bridge) reports each torch operator, backward function and
 * record_function label through the table torchops_table() returns
 * (src/torchops/torchops_abi.h); torchops appends it to the calling
 * thread's event buffer as one EVBUF_TORCH_OP record (src/events/oprec.h),
 * which the assembler turns into a Kineto cpu_op (or user_annotation)
 * event. An operator belongs to the window its start fell in: one that
 * ends after that window closed is kept apart and added at its collect.
 * With prof.capture{profile_memory} it also records torch's tensor
 * allocations and frees (EVBUF_TORCH_MEM, src/events/memrec.h), and the
 * flight recorder keeps operators and allocations between windows. On a GPU the observer pushes a CUPTI external correlation id
 * around each operator (the hooks cupti.c installs here), so the kernels it
 * launches link to it as they link to NVTX ranges.
 */
#ifndef PROFHOST_CAPTURE_TORCHOPS_H
#define PROFHOST_CAPTURE_TORCHOPS_H

#include <stdbool.h>
#include <stdint.h>

#include "../events/trace.h"
#include "../torchops/torchops_abi.h"
#include "../util/err.h"

struct capture_host;

/* The table for the observer. `h` is what the host gave the Python
 * bridge's source at init (its shim appends; a forked child, where
 * h->disabled says so, records nothing); call once at start-up, before
 * handing the table out. */
const struct torchops_api *torchops_table(const struct capture_host *h);

/* Whether a window records now, and its generation (python.c's window
 * callbacks; gen 0 with on = false). Any thread. */
void torchops_set_recording(bool on, uint64_t gen);

/*
 * Late operators: the fallback path (torch's own profiler, run by the
 * bridge around a window) hands its events over after the window closed.
 * torchops_late_begin() (the window records) says the open window's
 * generation will get them; torchops_late_add() queues one (times on the
 * core's clock, `tid` the thread's kernel id); torchops_late_end() says
 * they are all there. Python threads.
 * torchops_late_collect() (host thread, the window's collect) waits for
 * torchops_late_end() of generation `gen`, at most `wait_ms` (0 when the
 * bridge is gone), and adds the queued operators to `t` as
 * torchops_op's would be. Returns 0, or -1 with *e set (out of memory).
 */
void torchops_late_begin(void);
void torchops_late_add(const struct torchops_op *op, int32_t tid);
void torchops_late_end(void);
int torchops_late_collect(uint64_t gen, unsigned wait_ms, struct trace *t, struct err *e);

/* The operators of window `gen` that ended after it closed (torchops.c,
 * "operators that end late"): waits until the labels the window began have
 * ended, at most `wait_ms` (0 when the bridge is gone), adds the operators
 * kept to `t` as recorded ones are, and a note for labels still open then.
 * Once per window: later ones are not kept. Host thread, the window's
 * collect. Returns 0, or -1 with *e set (out of memory). */
#define TORCHOPS_TAIL_WAIT_MS 1000
int torchops_tail_collect(uint64_t gen, unsigned wait_ms, struct trace *t, struct err *e);

/* prof.capture{profile_memory} (python.c, at each window open and
 * recorder segment): tensor allocations are recorded while a window or a
 * segment that keeps them is open. Stepping thread, window lock held. */
void torchops_set_memory(bool want);

/* The flight recorder's segment `gen` opened and keeps operators and
 * allocations between windows (prof.capture{profile_memory}); 0: none
 * (the recorder stopped, or keeps no operators). Stepping thread, window
 * lock held. */
void torchops_set_recorder(uint64_t gen);

/* Adds, once per process, the note that torch's own profiler took the
 * memory-reporting slot of a thread (torchops_api.mem_aside). Host
 * thread, a window's or dump's collect. 0, or -1 with *e (no memory). */
int torchops_mem_collect(struct trace *t, struct err *e);

/* The GPU link (cupti.c; NULL, NULL removes it). Any thread. */
void torchops_set_ext_hooks(uint64_t (*push)(void), void (*pop)(void));

#endif

/*
 * opstacks — each Python thread's call stack, kept as the thread runs, so
 * that every torch operator gets its exact Python call stack at its start
 * (prof.capture{ with_stack }), as torch.profiler's with_stack gives it.
 * Internal to src/capture (python.c turns it on and off, torchops.c reads
 * it for each operator).
 *
 * torch's observer runs an operator's start callback with the GIL released
 * (torch's bindings release it before dispatching), where no Python frame
 * can be read. So, like torch's own Python tracer, opstacks installs a C
 * profile function (PyEval_SetProfile) on every Python thread from the
 * window's armed step to its end: at each Python call and return, and each
 * call of a C function, it pushes or pops one entry of the thread's shadow
 * stack. An entry is a node of a tree of stacks shared by every thread (a
 * node: its parent and its entry's text), so the thread's stack now is one
 * number, which an operator's start reads without the GIL, a lock or a
 * walk. Entries are named as torch names them: "file(line): function"
 * (the def line; for the frames already running when tracking began, their
 * line then), with torch's path prefixes (sys.path, site-packages) taken
 * off; "nn.Module: Linear_0" for an nn.Module call (its _call_impl frame;
 * numbered per class in the order first seen since tracking began); the
 * C function's repr for a call of one ("<built-in function linear>").
 * Frames of profhost's own Python files, and those torch leaves out of its
 * stacks (autograd's backward and _make_grads), are not entries.
 *
 * An operator's stack goes into the trace as the node id of its record;
 * the first time a node is used in a capture generation, it and each
 * ancestor not yet written in that generation are appended to the using
 * thread's event buffer as EVBUF_OPSTACK records (id: the node, a: its
 * parent, payload: its text), which the assembler turns back into the
 * operator's "Call stack" argument. Memory is bounded: at most
 * OPSTACKS_NODES nodes, OPSTACKS_ENTRIES entries and OPSTACKS_TEXT bytes of
 * their text for the process, OPSTACKS_DEPTH entries a thread; past them
 * an operator gets no stack (counted: opstacks_dropped).
 *
 * Threads: opstacks_start, opstacks_thread and opstacks_stop hold the GIL
 * (the bridge calls them); the profile function runs under the GIL on the
 * thread it tracks; opstacks_current on any thread, with or without the
 * GIL (the operator's).
 */
#ifndef PROFHOST_CAPTURE_OPSTACKS_H
#define PROFHOST_CAPTURE_OPSTACKS_H

#include <stdbool.h>
#include <stdint.h>

#define OPSTACKS_NODES (1u << 18)   /* stack tree nodes */
#define OPSTACKS_ENTRIES (1u << 16) /* distinct entries */
#define OPSTACKS_TEXT (8u << 20)    /* bytes of their text */
#define OPSTACKS_DEPTH 256          /* entries a thread's stack keeps */
#define OPSTACKS_THREADS 256        /* Python threads tracked at once */
#define OPSTACKS_ENTRY_MAX 1024     /* longer entry texts are cut */

/* How a node's record is appended: the shim's evbuf_append_raw. */
typedef int (*opstacks_append_fn)(uint16_t kind, int64_t ts, const void *payload,
				  uint32_t len, uint64_t id, uint64_t a);

/* Looks CPython's functions up (dlsym) and keeps `append`. Returns 0, or
 * -1 when one it needs is missing (CPython before 3.9): tracking cannot
 * start then. Start-up. */
int opstacks_init(opstacks_append_fn append);

/*
 * Starts tracking in every thread of the interpreter: their frames now
 * become their stacks, and the profile function is installed on each.
 * `prefixes`: the path prefixes torch takes off file names, '\n'-separated,
 * in the order they are tried (torch.profiler.python_tracer's
 * _prefix_regex()); `call_impl`: the address of nn.Module._call_impl's
 * code object (0: none). Returns 0, or -1 when tracking cannot run here.
 * GIL held.
 */
int opstacks_start(const char *prefixes, uintptr_t call_impl);

/* Starts tracking on the calling thread (one started while tracking is
 * on: threading.setprofile's hook calls it). GIL held. */
void opstacks_thread(void);

/* Stops tracking in every thread. GIL held. */
void opstacks_stop(void);

/* The calling thread's Python call stack now, as a node id, its records
 * appended for generation `gen` where not yet; 0 when the thread is not
 * tracked, runs no Python, or its stack was left out (counted). Any thread,
 * GIL or not; lock-free. */
uint32_t opstacks_current(uint64_t gen);

/* Operators given no stack because a bound was reached, since start-up. */
uint64_t opstacks_dropped(void);

#endif

/*
 * stacks — the CPU-sample outputs of a window (see docs/stacks.md):
 *
 *   stacks.txt         folded stacks, one line per distinct stack:
 *                      "<thread>;outer;...;inner <samples>" (flamegraph.pl,
 *                      speedscope, inferno read it). A stack cut at the
 *                      configured depth gets a "[truncated]" frame after
 *                      the thread.
 *   cpu_functions.txt  per function: self samples (it was the innermost
 *                      frame), total samples (it was anywhere on the stack,
 *                      once per sample), both also as % and as CPU (or
 *                      wall) milliseconds: samples times timer periods.
 *
 * They read only the trace's timer samples (TRACE_STACK_SAMPLE), with the
 * names the sampler's collect gave the frames ("0x<pc>" otherwise).
 * Host thread.
 */
#ifndef PROFHOST_STACKS_H
#define PROFHOST_STACKS_H

#include "../events/trace.h"
#include "../util/demangle.h"
#include "../common/err.h"
#include "outfile.h"

/* The rate the window's sampling gave, in samples per second and thread
 * (of CPU time with the CPU-time clock): the asked rate times samples per
 * timer period covered. Sets *samples to the window's sample count. 0 when
 * it was not sampled or has no samples. */
uint32_t stacks_given_hz(const struct trace *t, uint64_t *samples);

/* Demangles the C++ names a trace read back from a file may hold (one
 * written by a process without a demangler): the names of its CPU samples
 * and each frame of its "stack" arguments, shortened as the sampler names
 * frames (demangle_shorten). `fn` may be NULL (nothing to do). Returns 0,
 * or -1 when memory ran out (t->oom). For `prof report`. */
int stacks_demangle_names(struct trace *t, demangle_fn fn);

/* Writes stacks.txt's content. 0, or -1 with *e set (out of memory, or
 * the outfile's error). */
int stacks_write_folded(const struct trace *t, struct outfile *out,
			struct err *e);

/* Writes cpu_functions.txt's content. 0 or -1 with *e set. */
int stacks_write_functions(const struct trace *t, struct outfile *out,
			   struct err *e);

#endif

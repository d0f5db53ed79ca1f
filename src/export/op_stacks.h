/*
 * op_stacks — operator_stacks.txt: the torch operators' Python call
 * stacks (prof.capture{ with_stack }) as folded stacks weighted by each
 * operator's self time, as torch's export_stacks(path, metric) writes
 * them: one line an event (an operator, a record_function label) that has
 * a call stack ("Call stack" argument) and a nonzero weight,
 *
 *     outer(file(line):_function);...;inner_entry <weight>
 *
 * its entries outermost first, each with ' ', ';', '\t' and '\n' written
 * as '_', and its weight the event's self CPU (or CUDA) time in whole
 * microseconds. Every event's time is exact (not sampled) and the
 * microseconds are carried from one line to the next, so the weights sum
 * to the self time of those events, floored to a microsecond: the Self
 * CPU time total key_averages.txt gives them. Host thread.
 */
#ifndef PROFHOST_OP_STACKS_H
#define PROFHOST_OP_STACKS_H

#include <stdbool.h>

#include "../events/trace.h"
#include "../common/err.h"
#include "outfile.h"

/* torch's export_stacks metrics. */
enum op_stacks_metric {
	OP_STACKS_SELF_CPU = 0, /* "self_cpu_time_total" */
	OP_STACKS_SELF_CUDA     /* "self_cuda_time_total" */
};

/* Parses a metric name. 0, or -1 with *e naming the valid ones. */
int op_stacks_parse_metric(const char *s, enum op_stacks_metric *out, struct err *e);

/* True when some event of `t` has a call stack. */
bool op_stacks_any(const struct trace *t);

/* Writes the folded stacks of `t` weighted by `metric` to `out`. 0, or -1
 * with *e set (out of memory, the outfile's error). */
int op_stacks_write(const struct trace *t, enum op_stacks_metric metric,
		    struct outfile *out, struct err *e);

#endif

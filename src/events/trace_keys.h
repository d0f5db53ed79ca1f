/*
 * trace_keys — the argument keys that a trace's producers write and its
 * readers look up, spelled once.
 *
 * Producers: the assembler (NVTX domains and categories), the sampler and
 * symbolizer (src/capture), the CUPTI converter (cupti_records.c), torch's
 * NVTX ranges (torchnvtx.c), the trace.json reader. Readers: the writers and
 * tables (src/export), queries (query.c). The names are Kineto's where
 * Kineto has one, so a chrome trace reads the same in other tools; the Lua
 * reports (lua/prof/reports) read them by the same names.
 */
#ifndef PROFHOST_TRACE_KEYS_H
#define PROFHOST_TRACE_KEYS_H

/* An event argument with this key and type TRACE_ARG_UINT holds a stack
 * index until the stacks are symbolized; it then becomes the TRACE_ARG_STR
 * folded stack ("outer;...;inner"). */
#define TRACE_ARG_STACK "stack"

/* An NVTX range's domain and category (src/events/assemble.c): their
 * names (TRACE_ARG_STR), or their numbers (TRACE_ARG_UINT) when unnamed.
 * key_averages groups by the domain's name (group_by = "domain"). */
#define TRACE_ARG_DOMAIN "domain"
#define TRACE_ARG_CATEGORY "category"

/* A CPU sample's weight in timer periods (a sample that stands for several
 * periods); absent means 1. */
#define TRACE_ARG_WEIGHT "weight"

/* A GPU memory copy's size in bytes (TRACE_ARG_UINT) and direction
 * (TRACE_ARG_STR: "HtoD", "DtoH", "DtoD", ...). */
#define TRACE_ARG_BYTES "bytes"
#define TRACE_ARG_COPY_KIND "copy kind"

/* A GPU memory allocation event (cat gpu_memory): the bytes allocated
 * (negative: freed) and the device's total allocated after it. */
#define TRACE_ARG_ALLOC_BYTES "Bytes"
#define TRACE_ARG_TOTAL_ALLOCATED "Total Allocated"

/* A torch tensor allocation or free ("[memory]", cat cpu_instant_event;
 * prof.capture{profile_memory}), Kineto's args: Bytes and Total Allocated
 * above, the allocator's reserved total, the block's address, and the
 * device as c10 numbers it (type 0 CPU, 1 CUDA; id -1: none), all
 * integers. TRACE_MEMORY_NAME is the events' name, torch's
 * MEMORY_EVENT_NAME. */
#define TRACE_ARG_TOTAL_RESERVED "Total Reserved"
#define TRACE_ARG_ADDR "Addr"
#define TRACE_ARG_DEVICE_TYPE "Device Type"
#define TRACE_ARG_DEVICE_ID "Device Id"
#define TRACE_MEMORY_NAME "[memory]"

/* A torch operator (cat cpu_op; src/capture/torchops.c, assemble.c):
 * Kineto's input shapes and dtypes (TRACE_ARG_STR, as Kineto prints
 * them), the autograd sequence number (TRACE_ARG_INT) and the forward
 * thread of a backward function (TRACE_ARG_UINT), and with with_flops its
 * floating-point operations (TRACE_ARG_UINT). */
#define TRACE_ARG_INPUT_DIMS "Input Dims"
#define TRACE_ARG_INPUT_TYPE "Input type"
#define TRACE_ARG_SEQUENCE "Sequence number"
#define TRACE_ARG_FWD_TID "Fwd thread id"
#define TRACE_ARG_FLOPS "flops"

/* A torch operator's Python call stack (prof.capture{ with_stack }): its
 * entries innermost first, "file(line): function" (torch's names),
 * separated by ';' (TRACE_ARG_STR), as Kineto writes it. */
#define TRACE_ARG_CALL_STACK "Call stack"

/* An nn.Module call (cat python_function; the Python bridge, assemble.c),
 * as torch's with_modules writes one: its Python id (TRACE_ARG_UINT,
 * unique in the process), the Python id of the module call it was made in
 * (TRACE_ARG_UINT, or the raw `null` for a root), torch's module id (the
 * module's number among its class's, TRACE_ARG_UINT); and profhost's own:
 * the module's path in its model (TRACE_ARG_STR; absent for a root or a
 * module not registered in its root), which the modules report shows with
 * the class. */
#define TRACE_ARG_PYTHON_ID "Python id"
#define TRACE_ARG_PYTHON_PARENT_ID "Python parent id"
#define TRACE_ARG_PYTHON_MODULE_ID "Python module id"
#define TRACE_ARG_MODULE_PATH "module path"

#endif

/*
 * torchops_abi — the seam between profhost's C core and its operator
 * collector inside torch (src/torchops/observer.cpp, the only C++ of the
 * project).
 *
 * The core hands the observer a struct torchops_api (through the Python
 * bridge: pybridge_api.torchops, src/capture/python.c); the observer calls
 * back for the time, the window recording, each finished operator (with
 * the window its start fell in) and the GPU link. Plain C, included by both sides; append only, bump
 * TORCHOPS_ABI_VERSION.
 */
#ifndef PROFHOST_TORCHOPS_ABI_H
#define PROFHOST_TORCHOPS_ABI_H

#include <stdint.h>

#define TORCHOPS_ABI_VERSION 4 /* 2: window, label_begin, op_in; 3: py_stack;
				  4: memory_on, mem, mem_aside */

/* torchops_op.scope: torch's RecordScope, as Kineto writes it. */
enum torchops_scope {
	TORCHOPS_FUNCTION = 0,  /* an operator (cpu_op) */
	TORCHOPS_BACKWARD = 1,  /* an autograd backward function (cpu_op) */
	TORCHOPS_USER = 2       /* a record_function label (user_annotation) */
};

/* torchops_op.flags */
enum {
	TORCHOPS_HAS_FLOPS = 1, /* `flops` is the operator's FLOP count */
	TORCHOPS_HAS_SHAPES = 2 /* `dims` and `types` are set (JSON lists) */
};

/* One finished operator. Strings are not NUL-ended; `dims` is a JSON list
 * of lists of integers ("[[2, 3], []]"), `types` a JSON list of strings
 * ("[\"float\", \"Scalar\"]"), both Kineto's "Input Dims" / "Input type". */
struct torchops_op {
	const char *name;
	const char *dims;
	const char *types;
	uint32_t name_len, dims_len, types_len;
	uint32_t scope;    /* enum torchops_scope */
	int64_t start, end; /* the core's clock (torchops_api.now) */
	int64_t seq;       /* torch's sequence number, -1: none */
	uint64_t fwd_tid;  /* torch's forward thread id (backward functions) */
	uint64_t flops;
	uint64_t ext_id;   /* the GPU link (torchops_api.ext_push), 0: none */
	uint32_t flags;    /* TORCHOPS_HAS_* */
	uint32_t stack;    /* (version 3) the Python call stack at its start
			      (torchops_api.py_stack), 0: none */
};

/* (4) One tensor allocation (bytes > 0) or free (bytes < 0) as torch
 * reports it to the profiler (c10::reportMemoryUsageToProfiler): the
 * allocator's own totals after it, the device as c10 numbers it. */
struct torchops_mem {
	uint64_t addr;
	int64_t bytes;
	int64_t total_allocated;
	int64_t total_reserved;   /* 0 on the CPU (torch's CPU allocator keeps none) */
	int32_t device_type;      /* c10::DeviceType: 0 CPU, 1 CUDA */
	int32_t device_index;     /* -1: none (the CPU) */
};

/* What the core gives the observer; valid for the life of the process.
 * Every function may be called from any thread. */
struct torchops_api {
	uint32_t version; /* TORCHOPS_ABI_VERSION */
	uint32_t size;    /* sizeof(struct torchops_api) */
	/* The core's clock, ns. */
	int64_t (*now)(void);
	/* Nonzero while a window records: outside, the observer does no work. */
	int (*recording)(void);
	/* Appends the operator to the calling thread's event buffer (a no-op
	 * outside windows). */
	void (*op)(const struct torchops_op *op);
	/* On a GPU: pushes a CUPTI external correlation id on the calling
	 * thread and returns it (0: none, then no pop). */
	uint64_t (*ext_push)(void);
	void (*ext_pop)(void);
	/* (2) The generation of the window recording now, 0 outside windows
	 * (recording() as a number: what an operator's start is tagged with). */
	uint64_t (*window)(void);
	/* (2) A record_function label began in window `gen` (window() at its
	 * start): that window is written once the label ended, or a while
	 * after it closed (torchops.c, "operators that end late"). */
	void (*label_begin)(uint64_t gen);
	/* (2) As op(), for an operator that began in window `gen`: it belongs
	 * to that window, also when it ends after the window closed; a label
	 * ends what label_begin counted. */
	void (*op_in)(const struct torchops_op *op, uint64_t gen);
	/* (3) With prof.capture{ with_stack }: the calling thread's
	 * Python call stack now, as an id for torchops_op.stack (0: none: no
	 * Python on this thread, or with_stack is off). Cheap (no GIL, no
	 * frame walk: profhost tracks each thread's stack as it runs). */
	uint32_t (*py_stack)(void);
	/* (4) Nonzero while tensor allocations are recorded
	 * (prof.capture{profile_memory}, a window or a flight recorder
	 * segment open): one relaxed load; torch asks before every
	 * allocation and free. */
	int (*memory_on)(void);
	/* (4) Appends one allocation or free to the calling thread's event
	 * buffer (a no-op unless memory_on()). */
	void (*mem)(const struct torchops_mem *m);
	/* (4) torch's own profiler holds the memory-reporting slot of the
	 * calling thread (or is about to take it): that thread's allocations
	 * go to it while it runs. Said once. */
	void (*mem_aside)(void);
};

#endif

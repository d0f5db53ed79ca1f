/*
 * shim_api — the seam between the preloaded shim (libprofhost.so) and the
 * core (libprofhost-core.so).
 *
 * The shim owns the hot path: the prof_* entry points and the per-thread
 * event buffers. At start-up it dlopen()s the core with RTLD_LOCAL, so the
 * core's dependencies (Lua, cJSON, libunwind, zlib) never enter the target's
 * global symbol scope, and calls profhost_core_init() with a table of its
 * own functions; the core fills in a table of its functions in return. No
 * other symbol crosses the seam.
 */
#ifndef PROFHOST_SHIM_API_H
#define PROFHOST_SHIM_API_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "nvtx.h"
#include "../common/clock.h"
#include "evbuf.h"

#define SHIM_API_VERSION 12 /* 2: NVTX, clock, range hooks, CUDA injection;
			      3: evbuf_prepare; 4: core_api.dump;
			      5: nvtx_open_ranges; 6: the salvage file;
			      7: evbuf_set_fill_hook, evbuf_rotate;
			      8: salvage_modules; 9: the salvage file's
			      header grew (version 3: GPU names, written
			      by the core); 10: nvtx capture_end gets
			      the range's end timestamp; the salvage
			      file's version 4 (the interpreter's eval
			      range); 11: evbuf_current;
			      12: evbuf_open_lead */

/* What the shim gives the core. Valid for the life of the process. */
struct shim_api {
	uint32_t version;          /* SHIM_API_VERSION */
	const char *shim_path;     /* absolute path of libprofhost.so */
	uint64_t (*evbuf_open)(size_t bytes);
	uint64_t (*evbuf_close)(void);
	void (*evbuf_prepare)(size_t bytes);
	int (*evbuf_drain)(uint64_t gen, evbuf_visit_fn fn, void *ctx,
			   struct evbuf_stats *stats);
	void (*evbuf_release)(uint64_t gen);
	int (*evbuf_append_raw)(uint16_t kind, int64_t ts, const void *payload,
				uint32_t len, uint64_t id, uint64_t a);
	/* The process's clock parameters (src/common/clock.h). */
	struct clock_params *clock;
	/* NVTX (src/shim/nvtx.h): triggers, arming, names for the trace. */
	void (*nvtx_configure)(const struct nvtx_config *cfg);
	void (*nvtx_arm)(int on);
	void (*nvtx_replay)(void);
	int (*nvtx_attached)(void);
	const char *(*nvtx_domain_name)(uint32_t id);
	const char *(*nvtx_category_name)(uint32_t domain, uint32_t category);
	const char *(*nvtx_thread_name)(int32_t tid);
	/* Installs the range hooks (NULL, NULL removes them). Inside an open
	 * window, prof_range_push calls push() and records the id it returns
	 * (an external correlation id linking the range to the GPU work it
	 * launches; 0: none) as the push record's `id`; prof_range_pop calls
	 * pop() after recording the pop. Idle cost unchanged: the hooks are
	 * only looked at once a window is open. Any thread. */
	void (*set_range_hooks)(uint64_t (*push)(void), void (*pop)(void));
	/* Installs the hook called on the pushing thread right after a range
	 * push (NVTX or prof_range_push) was recorded in a window; NULL
	 * removes it. The CPU sampler takes the thread's stack there
	 * (prof.capture{range_stacks}). Any thread. */
	void (*set_range_pushed_hook)(void (*pushed)(void));
	/* Every live thread's open push/pop levels, names and push times
	 * (src/shim/nvtx.h): the hang watchdog's "inside X for N s". */
	size_t (*nvtx_open_ranges)(struct nvtx_open_range *out, size_t max);
	/* The salvage file (evbuf.h, src/common/salvfile.h). */
	struct salv_header *(*salvage_open)(const char *dir, char *why, size_t size);
	const char *(*salvage_path)(void);
	void (*salvage_remove)(void);
	/* The pool-filling hook and rotation (evbuf.h): the flight
	 * recorder's. */
	void (*evbuf_set_fill_hook)(evbuf_fill_fn filling);
	uint64_t (*evbuf_rotate)(size_t bytes, uint64_t *closed);
	/* The salvage file's module table, brought up to date when the
	 * loader's list changed (evbuf_salvage_modules): the CPU sampler's
	 * thread calls it while it samples. */
	void (*salvage_modules)(void);
	/* The generation open now, 0 when none (evbuf.h). Any thread. */
	uint64_t (*evbuf_current)(void);
	/* evbuf_open with the helper's lead given (evbuf.h): the flight
	 * recorder's first segment. */
	uint64_t (*evbuf_open_lead)(size_t bytes, size_t lead);
};

/* What the core gives the shim. Every pointer is set by a successful
 * profhost_core_init() and never changes afterwards. */
struct core_api {
	/* prof_step(): a step boundary on the calling thread. */
	void (*step)(void);
	/* prof_capture_now(); returns 0 or -1. */
	int (*capture_now)(unsigned steps, const char *reason);
	/* Process exit (the shim's destructor): finish and write an open
	 * window, stop the host thread. Called once. */
	void (*fini)(void);
	/* In a child after fork(). */
	void (*after_fork_child)(void);
	/* InitializeInjection (the CUDA driver, through CUDA_INJECTION64_PATH):
	 * starts GPU capture if it waits for the driver; never twice. NULL in
	 * a build without CUDA. Returns 1 (the driver's "success"). */
	int (*cuda_inject)(void);
	/* prof_dump(); returns 0 or -1 (the refusal said on stderr). */
	int (*dump)(unsigned steps, const char *reason);
};

/* The core's one exported symbol. Returns 0, or -1 after reporting why on
 * stderr (the shim then leaves the process alone). Called once, from the
 * shim's constructor. */
typedef int (*profhost_core_init_fn)(const struct shim_api *shim,
				     struct core_api *core);

#endif

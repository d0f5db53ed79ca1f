/*
 * nvtx — NVTX3 capture.
 *
 * Two halves. nvtx.c lives in the shim (libprofhost.so): it is the NVTX
 * injection library (InitializeInjectionNvtx2 fills the CORE and CORE2
 * slots of every NVTX instance in the process) and the hot path of every
 * NVTX call. nvtx_host.c lives in the core: the capture source that hands
 * the shim its step and capture-range triggers and names threads in the
 * trace. They meet through struct shim_api (src/shim/shim_api.h).
 *
 * Records (src/shim/evbuf.h; their format: src/common/evformat.h):
 * push/pop and start/end ranges and marks of every domain, with the domain
 * and category in `a` (evbuf_nvtx_a()). Names are always copied (NVTX
 * callers may pass temporaries); wide strings are converted to UTF-8;
 * registered strings are copied from the registration.
 *
 * Domains and registered strings are allocated once and never freed, so
 * their handles stay valid and the host thread can name the events recorded
 * under them. A domain name created twice (two libraries embedding NVTX)
 * gives the same domain.
 *
 * Shadow stack. Each thread keeps its push/pop levels (domain, category,
 * whether the level is a step or capture-range trigger, the capture
 * generation that recorded the push), up to 64 deep. A pop whose push was
 * not recorded in the open window becomes a range clipped at the window's
 * start (and the thread that opens a window records its own open levels at
 * once, so they show even if they outlive the window). Its name is known
 * when the push was a registered string or happened while the shim was
 * *armed* (see nvtx_arm); otherwise the assembler calls it "(began before
 * the window)". Outside a window, unarmed, a push whose name is no range
 * trigger only counts (the thread's depth is in TLS) and copies nothing.
 */
#ifndef PROFHOST_NVTX_H
#define PROFHOST_NVTX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NVTX_DEFAULT_DOMAIN "default" /* name of domain 0 */

/* What the core asks of the shim's NVTX side. Strings are copied. */
struct nvtx_config {
	bool record;                 /* prof.capture{nvtx}: record NVTX events */
	const char *step_range;      /* prof.steps{nvtx}: a step ends with it */
	const char *step_mark;       /* prof.steps{nvtx_mark} */
	const char *step_domain;     /* their domain; NULL = any */
	const char *capture_range;   /* prof.capture_range{nvtx} */
	const char *capture_domain;  /* its domain; NULL = any */
	void *ctx;
	/* A step boundary (the trigger range ended, or the mark was made). */
	void (*step)(void *ctx);
	/* The capture range began: returns 1 when this instance now drives a
	 * window (call capture_end when it ends), 0 when it does not (another
	 * instance does, or the process is ending), -1 when no capture range
	 * will ever be recorded again (stop asking). capture_end gets the
	 * timestamp of the range's end record (the window ends there). */
	int (*capture_begin)(void *ctx);
	void (*capture_end)(void *ctx, int64_t end_ts);
};

/* ---- core side (nvtx_host.c) ---- */

/* ---- shim side (nvtx.c), reached by the core through struct shim_api ---- */

/* The NVTX injection entry point (exported from libprofhost.so; declared
 * here for tests that play an NVTX instance). `get` is that instance's
 * export-table function (NvtxGetExportTableFunc_t). Returns 1 (attached)
 * or 0. */
int InitializeInjectionNvtx2(const void *(*get)(uint32_t id));

/* Set by the shim's constructor when another copy of libprofhost.so was
 * running first (src/shim/shim.c): this copy's NVTX injection then hands
 * each NVTX instance to the first copy's. */
extern int (*nvtx_first_copy)(const void *(*get)(uint32_t id));

/* Installs the triggers and callbacks. Called once by the core at start-up
 * (before application threads call NVTX, as far as the core can tell);
 * safe against concurrent NVTX calls. */
void nvtx_configure(const struct nvtx_config *cfg);

/* Arms (1) or disarms (0) the shadow stack's name copies (see above). Any
 * thread; the core calls it at step boundaries. */
void nvtx_arm(int on);

/* The calling thread just opened a window (a step boundary): records the
 * ranges still open on it as pushes that began before the window, so they
 * appear clipped at its start. Any thread. */
void nvtx_replay(void);

/* 1 once an NVTX instance in the process attached to profhost. */
int nvtx_attached(void);

/* Name of domain `id` (0: NVTX_DEFAULT_DOMAIN), or NULL when unknown. The
 * string lives as long as the process. Any thread. */
const char *nvtx_domain_name(uint32_t id);

/* Name given to category `category` of domain `domain`, or NULL. The string
 * lives as long as the process. Any thread. */
const char *nvtx_category_name(uint32_t domain, uint32_t category);

/* Name given to kernel thread `tid` with nvtxNameOsThread, or NULL. The
 * string lives as long as the process. Any thread. */
const char *nvtx_thread_name(int32_t tid);

/* The public C ABI's ranges and marks (prof_range_push ...) go through the
 * same path as NVTX's default domain, recorded whatever prof.capture{nvtx}
 * says. Any thread. */
/* Installs the range hooks (NULL, NULL removes them): when a range push is
 * recorded, push() is called and the id it returns (an external
 * correlation id linking the range to the GPU work it launches; 0: none)
 * is stored in the push record; when the pop of a range pushed in the same
 * window is recorded, pop() is called. Any thread. */
void nvtx_set_range_hooks(uint64_t (*push)(void), void (*pop)(void));

/* Installs the hook called on the pushing thread right after a range push
 * was recorded (NULL removes it): prof.capture{range_stacks} takes the
 * thread's stack there. Any thread. */
void nvtx_set_pushed_hook(void (*pushed)(void));

/* One open push/pop level of a thread (nvtx_open_ranges). */
struct nvtx_open_range {
	int32_t tid;
	uint32_t level;          /* 0: outermost */
	uint32_t domain;
	int64_t start_ns;        /* when it was pushed (clock_now_ns); 0:
				    unknown (pushed while nothing kept names) */
	char name[49];           /* its first 48 bytes; "": not kept */
};

/* Every live thread's open push/pop levels (prof_range_push and NVTX),
 * outermost first per thread, up to `max`; returns how many. Levels are
 * read without stopping their threads: a thread pushing or popping
 * meanwhile may show a level half-updated (never memory that is gone: a
 * thread leaves the list before its storage does). Names and times are
 * kept only while armed (nvtx_arm) or recording. Any thread; takes the
 * shadow list's lock, which exiting threads take too. */
size_t nvtx_open_ranges(struct nvtx_open_range *out, size_t max);

void nvtx_prof_push(const char *name);
void nvtx_prof_pop(void);
void nvtx_prof_mark(const char *name);

#endif

/*
 * shim — libprofhost.so, the library preloaded into the target.
 *
 * It exports the public C ABI (include/profhost/prof.h) and nothing else
 * but the injection entry points, keeps the hot path (event buffers) in
 * itself, and loads the core (libprofhost-core.so, found next to itself)
 * with dlopen(RTLD_LOCAL) from its constructor. Every failure here is
 * reported once and leaves the target running without profiling.
 */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "profhost/prof.h"

#include "nvtx.h"
#include "../common/clock.h"
#include "evbuf.h"
#include "nvtx_registry.h"
#include "../common/log.h"
#include "shim_api.h"

#define PROF_EXPORT __attribute__((visibility("default")))

static struct core_api core;   /* all NULL until the core is up */
static char shim_path[PATH_MAX];

PROF_EXPORT int prof_abi_version(void)
{
	return PROF_ABI_VERSION;
}

PROF_EXPORT void prof_step(void)
{
	if (core.step)
		core.step();
}

/* Ranges and marks share NVTX's default domain (src/shim/nvtx.c), so
 * NVTX step and capture-range triggers see them too. */
PROF_EXPORT void prof_range_push(const char *name)
{
	nvtx_prof_push(name);
}

PROF_EXPORT void prof_range_pop(void)
{
	nvtx_prof_pop();
}

PROF_EXPORT void prof_mark(const char *name)
{
	nvtx_prof_mark(name);
}

/* The CUDA driver calls this when CUDA_INJECTION64_PATH names this
 * library (it is loaded, and its constructor has run, by then). */
PROF_EXPORT int InitializeInjection(void)
{
	if (core.cuda_inject)
		return core.cuda_inject();
	return 1;
}

PROF_EXPORT int prof_capture_now(unsigned steps, const char *reason)
{
	if (!core.capture_now)
		return -1;
	return core.capture_now(steps, reason);
}

PROF_EXPORT int prof_dump(unsigned steps, const char *reason)
{
	if (!core.dump)
		return -1;
	return core.dump(steps, reason);
}

/* shim_api.salvage_open: the salvage file (evbuf_salvage_open), which
 * then keeps the NVTX domain and category names too. (A forked child's
 * registry still writes them to the header's address, anonymous memory
 * there: see evbuf_after_fork_child.) */
static struct salv_header *shim_salvage_open(const char *dir, char *why, size_t size)
{
	struct salv_header *h = evbuf_salvage_open(dir, why, size);

	if (h)
		nvtx_registry_salvage(h);
	return h;
}

/* Child side of fork(): the child has no host thread; the core decides what
 * the child may do (see core.c). */
static void shim_atfork_child(void)
{
	evbuf_after_fork_child();
	if (core.after_fork_child)
		core.after_fork_child();
}

/* PROF_DISABLE: 1 when set to disable, 0 when unset or enabling, -1 when
 * the value is not understood. */
static int shim_parse_disable(const char *v)
{
	static const char *const on[] = { "1", "true", "yes", "on" };
	static const char *const off[] = { "", "0", "false", "no", "off" };
	size_t i;

	if (!v)
		return 0;
	for (i = 0; i < sizeof on / sizeof on[0]; i++)
		if (strcasecmp(v, on[i]) == 0)
			return 1;
	for (i = 0; i < sizeof off / sizeof off[0]; i++)
		if (strcasecmp(v, off[i]) == 0)
			return 0;
	return -1;
}

/* Finds the directory this library was loaded from. Returns 0 or -1. */
static int shim_locate(char *dir, size_t size)
{
	Dl_info info;
	char *slash;

	if (!dladdr((void *)&prof_step, &info) || !info.dli_fname)
		return -1;
	if (!realpath(info.dli_fname, shim_path))
		return -1;
	if (strlen(shim_path) >= size)
		return -1;
	strcpy(dir, shim_path);
	slash = strrchr(dir, '/');
	if (!slash)
		return -1;
	*slash = '\0';
	return 0;
}

/* Another copy of libprofhost.so (another file: NVTX_INJECTION64_PATH or
 * CUDA_INJECTION64_PATH naming a different install) may be loaded after
 * the preloaded one. It would start a second host writing the same
 * windows: it stays off, says so once, and hands NVTX to the first copy.
 * Returns 1 when this is such a second copy. Constructor only. */
static int shim_second_copy(void)
{
	void *first = dlsym(RTLD_DEFAULT, "prof_abi_version");
	Dl_info a, b;

	/* Our own file by a static function's address: an exported one's
	 * address resolves to the first copy's (interposition). */
	if (!first || !dladdr(first, &a) || !dladdr((void *)&shim_second_copy, &b) ||
	    a.dli_fbase == b.dli_fbase)
		return 0;
	nvtx_first_copy = (int (*)(const void *(*)(uint32_t)))
		dlsym(RTLD_DEFAULT, "InitializeInjectionNvtx2");
	if (!a.dli_fname)
		a.dli_fname = "?";
	if (!b.dli_fname)
		b.dli_fname = "?";
	log_msg(LOG_WARN, "a second copy of libprofhost.so was loaded (%s, named by "
		"NVTX_INJECTION64_PATH or CUDA_INJECTION64_PATH?) while %s runs: "
		"the second copy stays off (point those variables at the same "
		"file as LD_PRELOAD)", b.dli_fname, a.dli_fname);
	return 1;
}

__attribute__((constructor)) static void shim_init(void)
{
	static struct shim_api api = {
		.version = SHIM_API_VERSION,
		.shim_path = shim_path,
		.evbuf_open = evbuf_open,
		.evbuf_open_lead = evbuf_open_lead,
		.evbuf_close = evbuf_close,
		.evbuf_prepare = evbuf_prepare,
		.evbuf_drain = evbuf_drain,
		.evbuf_release = evbuf_release,
		.evbuf_append_raw = evbuf_append_raw,
		.nvtx_configure = nvtx_configure,
		.nvtx_arm = nvtx_arm,
		.nvtx_replay = nvtx_replay,
		.nvtx_attached = nvtx_attached,
		.nvtx_domain_name = nvtx_domain_name,
		.nvtx_category_name = nvtx_category_name,
		.nvtx_thread_name = nvtx_thread_name,
		.set_range_hooks = nvtx_set_range_hooks,
		.set_range_pushed_hook = nvtx_set_pushed_hook,
		.nvtx_open_ranges = nvtx_open_ranges,
		.salvage_open = shim_salvage_open,
		.salvage_path = evbuf_salvage_path,
		.salvage_remove = evbuf_salvage_remove,
		.salvage_modules = evbuf_salvage_modules,
		.evbuf_set_fill_hook = evbuf_set_fill_hook,
		.evbuf_rotate = evbuf_rotate,
		.evbuf_current = evbuf_current,
	};
	const char *disable = getenv("PROF_DISABLE");
	const char *level = getenv("PROF_LOG");
	enum log_level lv;
	char dir[PATH_MAX], core_path[PATH_MAX + 32];
	profhost_core_init_fn init;
	struct core_api got = { 0 };
	void *h;

	if (level && log_parse_level(level, &lv) == 0)
		log_set_level(lv); /* the core reports a bad PROF_LOG */
	if (shim_second_copy())
		return;
	switch (shim_parse_disable(disable)) {
	case 1:
		return;
	case -1:
		log_msg(LOG_ERROR, "PROF_DISABLE='%s' is not understood (use 1 to "
			"disable profhost, 0 to enable it); profiling is off for "
			"this process", disable);
		return;
	}
	if (shim_locate(dir, sizeof dir) != 0) {
		log_msg(LOG_ERROR, "cannot find where libprofhost.so was loaded from; "
			"profiling is off for this process");
		return;
	}
	strcpy(core_path, dir);
	strcat(core_path, "/libprofhost-core.so");
	h = dlopen(core_path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		log_msg(LOG_ERROR, "cannot load %s: %s; profiling is off for this "
			"process (reinstall profhost: the core library must sit next "
			"to libprofhost.so)", core_path, dlerror());
		return;
	}
	init = (profhost_core_init_fn)dlsym(h, "profhost_core_init");
	if (!init) {
		log_msg(LOG_ERROR, "%s has no profhost_core_init: mismatched "
			"installation; profiling is off for this process", core_path);
		return;
	}
	api.clock = clock_params;
	if (init(&api, &got) != 0)
		return; /* the core said why */
	core = got;
	pthread_atfork(NULL, NULL, shim_atfork_child);
}

__attribute__((destructor)) static void shim_fini(void)
{
	if (core.fini)
		core.fini();
}

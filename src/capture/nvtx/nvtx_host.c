/*
 * nvtx_host — the core's half of NVTX capture (see nvtx_host.h): hands the
 * shim the policy's NVTX triggers, names threads in each trace after
 * nvtxNameOsThread, and tells a user whose NVTX ranges cannot reach the
 * host why.
 */
#include <dlfcn.h>
#include <link.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "nvtx_host.h"
#include "../../common/log.h"
#include "../../shim/nvtx.h"

/* Read-only data segments larger than this are not searched for NVTX's
 * marker (big CUDA libraries): those libraries are known by name. */
#define SCAN_MAX_BYTES (16u << 20)

static const char nvtx_marker[] = "NVTX_INJECTION64_PATH";

/* Libraries known to carry NVTX, matched against the file's base name. */
static const char *const nvtx_libraries[] = {
	"libnvToolsExt", "libnvtx3interop", "libtorch_cuda", NULL
};

/* The host, from init on. */
static const struct capture_host *nvtx_host;

/* capture_ops.init: the triggers, which call the host's step and capture
 * range callbacks directly. Start-up; never fails. */
static int nvtx_init(const struct capture_host *h, struct err *e)
{
	const struct policy_config *c = h->cfg;
	struct nvtx_config nc = { 0 };

	(void)e;
	nvtx_host = h;
	nc.record = c->capture.nvtx;
	nc.step_range = c->steps.nvtx;
	nc.step_mark = c->steps.nvtx_mark;
	nc.step_domain = c->steps.nvtx_domain;
	nc.capture_range = c->capture_range.nvtx;
	nc.capture_domain = c->capture_range.nvtx_domain;
	nc.ctx = h->ctx;
	nc.step = h->step;
	nc.capture_begin = h->range_begin;
	nc.capture_end = h->range_end;
	h->shim->nvtx_configure(&nc);
	return 0;
}

/* Whether `addr` lies in one of the object's loadable segments. */
static int object_holds(const struct dl_phdr_info *info, const void *addr)
{
	uintptr_t a = (uintptr_t)addr - info->dlpi_addr;
	int i;

	for (i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *p = &info->dlpi_phdr[i];
		if (p->p_type == PT_LOAD && a >= p->p_vaddr && a - p->p_vaddr < p->p_memsz)
			return 1;
	}
	return 0;
}

/* Whether `len` bytes at p hold the marker. Reads whole segments, padding
 * between objects included, hence the sanitizer exemption. */
__attribute__((no_sanitize("address")))
static int holds_marker(const unsigned char *p, size_t len)
{
	const size_t m = sizeof nvtx_marker - 1;
	size_t i, k;

	for (i = 0; i + m <= len; i++) {
		if (p[i] != (unsigned char)nvtx_marker[0])
			continue;
		for (k = 1; k < m && p[i + k] == (unsigned char)nvtx_marker[k]; k++)
			;
		if (k == m)
			return 1;
	}
	return 0;
}

struct scan {
	const void *skip[2]; /* addresses inside profhost's own libraries */
	const char *found;   /* the object NVTX was found in */
};

/* dl_iterate_phdr callback: stops (returns 1) at the first object that
 * carries NVTX: a known library, or one whose read-only data (a segment
 * neither writable nor executable) holds the name of the environment
 * variable NVTX3 reads, which every copy of NVTX3's loader embeds. */
static int scan_object(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct scan *s = arg;
	const char *name = info->dlpi_name ? info->dlpi_name : "";
	const char *base = strrchr(name, '/');
	int i;

	(void)size;
	if (object_holds(info, s->skip[0]) || object_holds(info, s->skip[1]))
		return 0;
	base = base ? base + 1 : name;
	/* CUPTI embeds NVTX's loader strings, and profhost's GPU capture may
	 * have loaded it: it is no sign that the application uses NVTX. */
	if (strncmp(base, "libcupti", 8) == 0)
		return 0;
	/* Another copy of profhost (the shim refuses to run it; see
	 * src/shim/shim.c) embeds the strings too. */
	if (strncmp(base, "libprofhost", 11) == 0)
		return 0;
	for (i = 0; nvtx_libraries[i]; i++)
		if (strncmp(base, nvtx_libraries[i], strlen(nvtx_libraries[i])) == 0) {
			s->found = name;
			return 1;
		}
	for (i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *p = &info->dlpi_phdr[i];
		if (p->p_type != PT_LOAD || (p->p_flags & (PF_W | PF_X)) ||
		    p->p_filesz > SCAN_MAX_BYTES)
			continue;
		if (holds_marker((const unsigned char *)(info->dlpi_addr + p->p_vaddr),
				 p->p_filesz)) {
			s->found = *name ? name : "the program";
			return 1;
		}
	}
	return 0;
}

/* Once, after the first window (or at exit, when no window was written:
 * NVTX steps that never came are the likely reason): if NVTX is in the
 * process but never attached, says how to make it attach. Host thread or
 * the exiting thread. */
static void nvtx_hint(void)
{
	const struct capture_host *h = nvtx_host;
	static atomic_flag said = ATOMIC_FLAG_INIT;
	const char *path = getenv(nvtx_marker);
	struct scan s = { { (const void *)h->shim->nvtx_attached, (const void *)nvtx_hint }, NULL };

	if (h->shim->nvtx_attached() || atomic_flag_test_and_set(&said))
		return;
	if (path && *path) {
		if (strcmp(path, h->shim->shim_path) != 0)
			log_msg(LOG_INFO, "NVTX_INJECTION64_PATH is '%s', not profhost's "
				"library: NVTX ranges go to that tool, not to profhost", path);
		return;
	}
	dl_iterate_phdr(scan_object, &s);
	if (s.found)
		log_msg(LOG_INFO, "NVTX is used in this process (%s) but its ranges are "
			"not recorded: NVTX finds profhost only through "
			"NVTX_INJECTION64_PATH=%s (prof run sets it)", s.found,
			h->shim->shim_path);
}

/* capture_ops.collect: thread names given with nvtxNameOsThread. */
static int nvtx_collect(const struct capture_window *w, struct trace *t,
			struct err *e)
{
	const struct capture_host *h = nvtx_host;
	size_t i;

	(void)w;
	(void)e;
	for (i = 0; i < t->nthreads; i++) {
		const char *name;

		if (t->threads[i].pid != h->pid)
			continue;
		name = h->shim->nvtx_thread_name(t->threads[i].tid);
		if (name)
			trace_add_thread(t, t->threads[i].pid, t->threads[i].tid, name);
	}
	nvtx_hint();
	return 0;
}

/* capture_ops.fini: the hint, if no window gave the occasion. */
static void nvtx_fini(void)
{
	nvtx_hint();
}

const struct capture_ops nvtx_capture = {
	.name = "nvtx",
	.init = nvtx_init,
	.collect = nvtx_collect,
	.fini = nvtx_fini,
};

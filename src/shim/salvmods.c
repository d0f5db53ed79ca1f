/*
 * salvmods — the salvage file's table of loaded modules (src/common/salvfile.h,
 * struct salv_module): what a reader needs to name the addresses of CPU
 * stacks after the process is gone (its memory map went with it). In the
 * shim: libc only.
 *
 * Written by one thread at a time (the CPU sampler's thread, after it
 * polled the loader: see shim_api.salvage_modules), append-only: a module
 * seen for the first time (a new path or load bias) gets the next entry,
 * published by `nmods` (release store, after the entry and its path). A
 * module unloaded keeps its entry: samples taken before still name it; a
 * reader prefers the newest entry holding an address. Entries that do not
 * fit are counted in `mods_lost`.
 *
 * It also keeps the NVTX domain and category names (salvmods_name), so a
 * salvaged trace names them as a window does.
 */
#include "salvmods.h"

#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/loader.h"

static pthread_mutex_t mods_lock = PTHREAD_MUTEX_INITIALIZER;
static struct salv_header *mods_hdr;     /* the file last written; mods_lock */
static unsigned long long mods_adds, mods_subs; /* the loader's, then */

struct mods_ctx {
	struct salv_header *h;
};

/* True when entry `m` of h is module (path, bias). */
static int same_module(const struct salv_header *h, const struct salv_module *m,
		       const char *path, size_t len, uint64_t bias)
{
	return m->bias == bias && m->path_len == len &&
	       memcmp(h->mod_paths + m->path_off, path, len) == 0;
}

/* dl_iterate_phdr callback: appends the module unless the table has it. */
static int add_one(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct mods_ctx *c = arg;
	struct salv_header *h = c->h;
	uint32_t n = atomic_load_explicit(&h->nmods, memory_order_relaxed), i;
	const char *path = info->dlpi_name;
	char exe[1024];
	struct salv_module *m;
	uint64_t lo = UINT64_MAX, hi = 0;
	struct stat st;
	size_t len;

	(void)size;
	if (!path || !*path) { /* the main program */
		ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);

		if (k <= 0)
			return 0;
		exe[k] = '\0';
		path = exe;
	}
	len = strlen(path);
	for (i = 0; i < n; i++)
		if (same_module(h, &h->mods[i], path, len, info->dlpi_addr))
			return 0;
	if (n >= SALV_MODULES || len > UINT16_MAX ||
	    len > SALV_MOD_PATHS - (size_t)h->paths_used) {
		h->mods_lost++;
		return 0;
	}
	m = &h->mods[n];
	memset(m, 0, sizeof *m);
	for (i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];

		if (ph->p_type == PT_LOAD) {
			if (info->dlpi_addr + ph->p_vaddr < lo)
				lo = info->dlpi_addr + ph->p_vaddr;
			if (info->dlpi_addr + ph->p_vaddr + ph->p_memsz > hi)
				hi = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
		} else if (ph->p_type == PT_NOTE && !m->build_id_len) {
			/* in memory: the loaded notes, readable */
			m->build_id_len = (uint8_t)salv_note_build_id(
				(const unsigned char *)(info->dlpi_addr + ph->p_vaddr),
				ph->p_memsz, m->build_id);
		}
	}
	if (hi <= lo)
		return 0;
	m->lo = lo;
	m->hi = hi;
	m->bias = info->dlpi_addr;
	if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
		m->dev = (uint64_t)st.st_dev;
		m->ino = (uint64_t)st.st_ino;
		m->size = (uint64_t)st.st_size;
		m->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
	}
	m->path_off = h->paths_used;
	m->path_len = (uint16_t)len;
	memcpy(h->mod_paths + h->paths_used, path, len);
	h->paths_used += (uint32_t)len;
	atomic_store_explicit(&h->nmods, n + 1, memory_order_release);
	return 0;
}

void salvmods_update(struct salv_header *h)
{
	unsigned long long c[2];
	struct mods_ctx ctx = { h };

	if (!h)
		return;
	pthread_mutex_lock(&mods_lock);
	loader_counts(c);
	if (h != mods_hdr || c[0] != mods_adds || c[1] != mods_subs) {
		mods_hdr = h;
		mods_adds = c[0];
		mods_subs = c[1];
		dl_iterate_phdr(add_one, &ctx);
	}
	pthread_mutex_unlock(&mods_lock);
}

void salvmods_name(struct salv_header *h, uint8_t kind, uint32_t domain,
		   uint32_t category, const char *text)
{
	uint32_t used, need;
	struct salv_name r;
	size_t len;

	if (!h || !text)
		return;
	len = strlen(text);
	if (len > UINT16_MAX)
		len = UINT16_MAX;
	used = atomic_load_explicit(&h->names_used, memory_order_relaxed);
	need = (uint32_t)((sizeof r + len + 3) & ~(size_t)3);
	if (used > SALV_NAMES_BYTES || need > SALV_NAMES_BYTES - used) {
		h->names_lost++;
		return;
	}
	memset(&r, 0, sizeof r);
	r.domain = domain;
	r.category = category;
	r.len = (uint16_t)len;
	r.kind = kind;
	memcpy(h->names + used, &r, sizeof r);
	memcpy(h->names + used + sizeof r, text, len);
	atomic_store_explicit(&h->names_used, used + need, memory_order_release);
}

void salvmods_after_fork_child(void)
{
	pthread_mutex_init(&mods_lock, NULL);
	mods_hdr = NULL;
}

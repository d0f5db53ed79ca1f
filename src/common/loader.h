/*
 * loader — how many times the dynamic loader has added and removed
 * modules (dl_iterate_phdr's dlpi_adds and dlpi_subs): a change means the
 * process's module list changed. Header-only, libc only: the shim's
 * salvage module table and the sampler's unwinder both watch it.
 */
#ifndef PROFHOST_LOADER_H
#define PROFHOST_LOADER_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <link.h>
#include <stddef.h>

/* dl_iterate_phdr callback: reads the counters from the first module and
 * stops. */
static inline int loader_counts_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	unsigned long long *c = arg;

	if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
		c[0] = info->dlpi_adds;
		c[1] = info->dlpi_subs;
	}
	return 1;
}

/* Stores the loader's add and remove counts in c[0] and c[1] (0 and 0
 * when the loader does not keep them). Any thread; takes the loader's
 * lock (not from a signal handler). */
static inline void loader_counts(unsigned long long c[2])
{
	c[0] = c[1] = 0;
	dl_iterate_phdr(loader_counts_cb, c);
}

#endif

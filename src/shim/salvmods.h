/*
 * salvmods — the salvage file's table of loaded modules (see salvmods.c
 * and src/common/salvfile.h). In the shim: libc only.
 */
#ifndef PROFHOST_SALVMODS_H
#define PROFHOST_SALVMODS_H

#include "../common/salvfile.h"

/* Appends to h's module table the modules loaded now that it lacks: the
 * loader's list is walked only when it changed since the last call (or h
 * is another file). Any thread but not a signal handler (takes the
 * loader's lock); callers are serialized here. NULL-safe. */
void salvmods_update(struct salv_header *h);

/* Appends NVTX name `text` of `kind` (enum salv_name_kind) for domain
 * (and category) to h's names; counts it in names_lost when it does not
 * fit. Callers serialize (the shim's NVTX name lock). NULL-safe. */
void salvmods_name(struct salv_header *h, uint8_t kind, uint32_t domain,
		   uint32_t category, const char *text);

/* In a child after fork(): forgets the parent's file. */
void salvmods_after_fork_child(void);

#endif

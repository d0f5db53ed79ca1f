/*
 * salvmods — the salvage file's table of loaded modules (see salvmods.c
 * and src/shim/salvfile.h). In the shim: libc only.
 */
#ifndef PROFHOST_SALVMODS_H
#define PROFHOST_SALVMODS_H

#include "salvfile.h"

/* Appends to h's module table the modules loaded now that it lacks: the
 * loader's list is walked only when it changed since the last call (or h
 * is another file). Any thread but not a signal handler (takes the
 * loader's lock); callers are serialized here. NULL-safe. */
void salvmods_update(struct salv_header *h);

/* In a child after fork(): forgets the parent's file. */
void salvmods_after_fork_child(void);

#endif

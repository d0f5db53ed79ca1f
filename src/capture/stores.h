/*
 * stores — the one rule by which a capture source's per-generation stores
 * (the Python bridge's stack snapshots, pystacks.c; the wall clock's
 * repeated samples, wallclock.c) make room when all their slots are taken.
 */
#ifndef PROFHOST_STORES_H
#define PROFHOST_STORES_H

#include <stdbool.h>
#include <stdint.h>

/* Whether the store of generation `agen` (`arec`: a flight recorder
 * segment's) goes before the one of `bgen` when one must be forgotten: a
 * free one (generation 0) first, then recorder segments' before windows',
 * then the oldest. Pure; any thread. */
static inline bool capture_store_evict_before(uint64_t agen, bool arec,
					      uint64_t bgen, bool brec)
{
	if (!agen || !bgen)
		return !agen && bgen;
	if (arec != brec)
		return arec;
	return agen < bgen;
}

#endif

/*
 * stores — the rules by which a capture source's per-generation stores
 * (the Python bridge's stack snapshots, pystacks.c; the wall clock's
 * repeated samples, wallclock.c) make room when all their slots are taken,
 * and keep what a recorder dump waits for.
 *
 * A dump marks every recorder store `dumped` as it takes the recorder's
 * segments (capture_recorder_ops.dump_taken): a marked store is kept as a window's
 * is, however many segments open before the dump's collect takes it. The
 * mark is wider than the dump (segments the recorder gave back before are
 * marked too, and a dropped dump's stay marked): a collect that takes
 * generations from `oldest` on clears it on older recorder stores, since
 * earlier dumps were collected before it (the host thread runs its jobs
 * in order).
 */
#ifndef PROFHOST_STORES_H
#define PROFHOST_STORES_H

#include <stdbool.h>
#include <stdint.h>

/* Whether the store of generation `agen` (`arec`: a flight recorder
 * segment's; `adumped`: a dump waits for it) goes before the one of `bgen`
 * when one must be forgotten: a free one (generation 0) first, then
 * recorder segments' no dump waits for, before windows' and dumps', then
 * the oldest. Pure; any thread. */
static inline bool capture_store_evict_before(uint64_t agen, bool arec, bool adumped,
					      uint64_t bgen, bool brec, bool bdumped)
{
	bool aspare = arec && !adumped, bspare = brec && !bdumped;

	if (!agen || !bgen)
		return !agen && bgen;
	if (aspare != bspare)
		return aspare;
	return agen < bgen;
}

/* Whether a recorder store (`rec`) of generation `gen` loses a dump's
 * mark when a collect takes generations from `oldest` on (see the top).
 * Pure; any thread. */
static inline bool capture_store_mark_stale(uint64_t gen, bool rec, uint64_t oldest)
{
	return gen && rec && gen < oldest;
}

#endif

/*
 * htab — the one open-addressing hash table of profhost's tables of
 * entries (the string table, the trace's frames, key_averages' rows, the
 * sample tree): a power-of-two array of slots, each holding an entry's
 * index + 1 (0: empty), linear probing, at most half full. The entries
 * stay in the caller's own array; the table only finds them, so growing
 * it (htab_rebuild) never moves them. Lookup and insertion, in the caller:
 *
 *	for (k = htab_first(h, nslots); slots[k]; k = htab_next(k, nslots))
 *		if (entry slots[k] - 1 has the key)
 *			return slots[k] - 1;
 *	(append the entry as index i)
 *	slots[k] = i + 1;
 *
 * with `h` the key's hash (src/common/hash.h for text), and htab_full()
 * checked before the lookup so that the slot found stays free.
 *
 * Header-only (static inline), libc only. The caller owns the slots and
 * serializes access.
 */
#ifndef PROFHOST_HTAB_H
#define PROFHOST_HTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* Whether a table of `nslots` slots holding `n` entries must grow (to twice
 * its slots, or a first size when 0) before it takes one more. */
static inline bool htab_full(size_t n, size_t nslots)
{
	return (n + 1) * 2 > nslots;
}

/* The first slot to look at for hash `h` (nslots: a power of two). */
static inline size_t htab_first(uint64_t h, size_t nslots)
{
	return (size_t)h & (nslots - 1);
}

/* The slot after `k`, wrapping around. */
static inline size_t htab_next(size_t k, size_t nslots)
{
	return (k + 1) & (nslots - 1);
}

/*
 * Rebuilds the table *slots of *nslots slots (NULL and 0: none yet) with
 * `to` slots (a power of two, more than n - first) holding the distinct
 * entries first .. n-1 in that order, entry i under hash(ctx, i); the old
 * slots are freed. Returns 0, or -1 when out of memory (the table is
 * unchanged).
 */
static inline int htab_rebuild(uint32_t **slots, size_t *nslots, size_t to,
			       size_t first, size_t n,
			       uint64_t (*hash)(const void *ctx, size_t i),
			       const void *ctx)
{
	uint32_t *v;
	size_t i, k;

	if (to > SIZE_MAX / sizeof *v)
		return -1;
	v = calloc(to, sizeof *v);
	if (!v)
		return -1;
	for (i = first; i < n; i++) {
		for (k = htab_first(hash(ctx, i), to); v[k]; k = htab_next(k, to))
			;
		v[k] = (uint32_t)(i + 1);
	}
	free(*slots);
	*slots = v;
	*nslots = to;
	return 0;
}

#endif

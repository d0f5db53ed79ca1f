/*
 * strtab — string interning (see strtab.h).
 *
 * Strings are copied one after another into blocks of STRTAB_BLOCK bytes
 * (a string longer than a block gets one of its own), indexed by id: a
 * window of millions of distinct names costs their bytes, not a malloc'd
 * block each. The hash table
 * is open addressing with linear probing; a slot holds id + 1 (0 = empty).
 * It doubles, in place, before it gets more than half full. A zeroed struct strtab is
 * a valid empty table too (the first intern allocates).
 */
#include "strtab.h"

#include <stdlib.h>
#include <string.h>

#include "bigalloc.h"
#include "../common/hash.h"
#include "../util/htab.h"

#define STRTAB_MIN_SLOTS 64u
#define STRTAB_MIN_CAP 32u
#define STRTAB_BLOCK ((size_t)64 << 10)

/* Where a block's strings start: after the link to the block before. */
#define STRTAB_LINK sizeof(char *)

/* Copies `len` bytes of s and a NUL into the current block (a new one if
 * it is full). Returns the copy, or NULL on allocation failure. */
static char *strtab_copy(struct strtab *st, const char *s, size_t len)
{
	char *copy;

	if (!st->blk || st->blk_cap - st->blk_used < len + 1) {
		size_t cap = STRTAB_LINK + len + 1 > STRTAB_BLOCK ? STRTAB_LINK + len + 1
								  : STRTAB_BLOCK;
		char *blk = malloc(cap);

		if (!blk)
			return NULL;
		memcpy(blk, &st->blk, sizeof st->blk);
		st->blk = blk;
		st->blk_used = STRTAB_LINK;
		st->blk_cap = cap;
		st->blk_bytes += cap;
	}
	copy = st->blk + st->blk_used;
	if (len)
		memcpy(copy, s, len);
	copy[len] = '\0';
	st->blk_used += len + 1;
	return copy;
}

/* FNV-1a, 32 bits. */
static uint32_t strtab_hash(const char *s, size_t len)
{
	return hash_fnv32(s, len);
}

/* Rebuilds the hash table with `nslots` slots (a power of two, more than
 * it has) in place: the ids are dense, so the slots are grown (bigalloc:
 * a big table's mapping grows, with no copy beside it), cleared and
 * filled again. Returns 0, or -1 (table unchanged) on allocation failure. */
static int strtab_rehash(struct strtab *st, uint32_t nslots)
{
	uint32_t *slots = bigalloc_realloc(st->slots, (size_t)nslots * sizeof *slots);
	uint32_t id;
	size_t k;

	if (!slots)
		return -1;
	memset(slots, 0, (size_t)nslots * sizeof *slots);
	for (id = 0; id < st->n; id++) {
		for (k = htab_first(strtab_hash(st->str[id], st->len[id]), nslots); slots[k];
		     k = htab_next(k, nslots))
			;
		slots[k] = id + 1;
	}
	st->slots = slots;
	st->nslots = nslots;
	return 0;
}

/* Grows the id arrays to hold at least one more string (bigalloc: a
 * window's millions of names grow them in place, not beside a copy).
 * 0 or -1. */
static int strtab_grow_ids(struct strtab *st)
{
	size_t cap = st->cap ? (size_t)st->cap * 2 : STRTAB_MIN_CAP;
	char **str;
	uint32_t *len;

	if (st->n < st->cap)
		return 0;
	if (st->cap > UINT32_MAX / 2)
		return -1;
	str = bigalloc_realloc(st->str, cap * sizeof *str);
	if (!str)
		return -1;
	st->str = str;
	len = bigalloc_realloc(st->len, cap * sizeof *len);
	if (!len)
		return -1;
	st->len = len;
	st->cap = (uint32_t)cap;
	return 0;
}

/* Initializes an empty table with room for a few strings. 0 or -1. */
int strtab_init(struct strtab *st)
{
	memset(st, 0, sizeof *st);
	if (strtab_rehash(st, STRTAB_MIN_SLOTS) < 0 || strtab_grow_ids(st) < 0) {
		strtab_free(st);
		return -1;
	}
	return 0;
}

/* Frees every string and the table; leaves a zeroed (valid, empty) table.
 * NULL-safe. */
void strtab_free(struct strtab *st)
{
	char *blk, *prev;

	if (!st)
		return;
	for (blk = st->blk; blk; blk = prev) {
		memcpy(&prev, blk, sizeof prev);
		free(blk);
	}
	bigalloc_free(st->str);
	bigalloc_free(st->len);
	bigalloc_free(st->slots);
	memset(st, 0, sizeof *st);
}

/* Looks `s` up, adding a copy when new. Returns its id, or STRTAB_NONE on
 * allocation failure or when the table or the string is too large. */
uint32_t strtab_intern(struct strtab *st, const char *s, size_t len)
{
	uint32_t h, id;
	size_t i;
	char *copy;

	if (len > UINT32_MAX || st->n >= STRTAB_NONE - 1)
		return STRTAB_NONE;
	if (len > 0 && !s)
		return STRTAB_NONE;
	if (!s)
		s = "";
	if (htab_full(st->n, st->nslots)) {
		uint64_t want = st->nslots ? (uint64_t)st->nslots * 2 : STRTAB_MIN_SLOTS;

		if (want > UINT32_MAX || strtab_rehash(st, (uint32_t)want) < 0)
			return STRTAB_NONE;
	}
	h = strtab_hash(s, len);
	for (i = htab_first(h, st->nslots); st->slots[i]; i = htab_next(i, st->nslots)) {
		id = st->slots[i] - 1;
		if (st->len[id] == len && memcmp(st->str[id], s, len) == 0)
			return id;
	}
	if (strtab_grow_ids(st) < 0)
		return STRTAB_NONE;
	copy = strtab_copy(st, s, len);
	if (!copy)
		return STRTAB_NONE;
	id = st->n++;
	st->str[id] = copy;
	st->len[id] = (uint32_t)len;
	st->slots[i] = id + 1;
	return id;
}

/* String for `id`, "" when unknown. */
const char *strtab_get(const struct strtab *st, uint32_t id)
{
	return id < st->n ? st->str[id] : "";
}

/* Length of string `id`, 0 when unknown. */
uint32_t strtab_len(const struct strtab *st, uint32_t id)
{
	return id < st->n ? st->len[id] : 0;
}

size_t strtab_bytes(const struct strtab *st)
{
	return st->blk_bytes + bigalloc_resident(st->str, (size_t)st->n * sizeof *st->str) +
	       bigalloc_resident(st->len, (size_t)st->n * sizeof *st->len) +
	       bigalloc_resident(st->slots, st->nslots * sizeof *st->slots);
}

size_t strtab_growth(const struct strtab *st, size_t more)
{
	if (!htab_full(st->n + (more ? more - 1 : 0), st->nslots))
		return 0;
	return st->nslots * sizeof *st->slots; /* it doubles, in place */
}

/*
 * strtab — string interning (see strtab.h).
 *
 * Strings live in their own malloc'd blocks, indexed by id. The hash table
 * is open addressing with linear probing; a slot holds id + 1 (0 = empty).
 * It doubles before it gets more than half full. A zeroed struct strtab is
 * a valid empty table too (the first intern allocates).
 */
#include "strtab.h"

#include <stdlib.h>
#include <string.h>

#include "../util/hash.h"

#define STRTAB_MIN_SLOTS 64u
#define STRTAB_MIN_CAP 32u

/* FNV-1a, 32 bits. */
static uint32_t strtab_hash(const char *s, size_t len)
{
	return hash_fnv32(s, len);
}

/* Rebuilds the hash table with `nslots` slots (a power of two). Returns 0,
 * or -1 (table unchanged) on allocation failure. */
static int strtab_rehash(struct strtab *st, uint32_t nslots)
{
	uint32_t *slots = calloc(nslots, sizeof *slots);
	uint32_t id, mask = nslots - 1;

	if (!slots)
		return -1;
	for (id = 0; id < st->n; id++) {
		uint32_t i = strtab_hash(st->str[id], st->len[id]) & mask;

		while (slots[i])
			i = (i + 1) & mask;
		slots[i] = id + 1;
	}
	free(st->slots);
	st->slots = slots;
	st->nslots = nslots;
	return 0;
}

/* Grows the id arrays to hold at least one more string. 0 or -1. */
static int strtab_grow_ids(struct strtab *st)
{
	uint32_t cap;
	char **str;
	uint32_t *len;

	if (st->n < st->cap)
		return 0;
	if (st->cap > UINT32_MAX / 2)
		return -1;
	cap = st->cap ? st->cap * 2 : STRTAB_MIN_CAP;
	str = realloc(st->str, (size_t)cap * sizeof *str);
	if (!str)
		return -1;
	st->str = str;
	len = realloc(st->len, (size_t)cap * sizeof *len);
	if (!len)
		return -1;
	st->len = len;
	st->cap = cap;
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
	uint32_t id;

	if (!st)
		return;
	for (id = 0; id < st->n; id++)
		free(st->str[id]);
	free(st->str);
	free(st->len);
	free(st->slots);
	memset(st, 0, sizeof *st);
}

/* Looks `s` up, adding a copy when new. Returns its id, or STRTAB_NONE on
 * allocation failure or when the table or the string is too large. */
uint32_t strtab_intern(struct strtab *st, const char *s, size_t len)
{
	uint32_t h, i, mask, id;
	char *copy;

	if (len > UINT32_MAX || st->n >= STRTAB_NONE - 1)
		return STRTAB_NONE;
	if (len > 0 && !s)
		return STRTAB_NONE;
	if (!s)
		s = "";
	if (((uint64_t)st->n + 1) * 2 > st->nslots) {
		uint64_t want = st->nslots ? (uint64_t)st->nslots * 2 : STRTAB_MIN_SLOTS;

		if (want > UINT32_MAX || strtab_rehash(st, (uint32_t)want) < 0)
			return STRTAB_NONE;
	}
	h = strtab_hash(s, len);
	mask = st->nslots - 1;
	for (i = h & mask; st->slots[i]; i = (i + 1) & mask) {
		id = st->slots[i] - 1;
		if (st->len[id] == len && memcmp(st->str[id], s, len) == 0)
			return id;
	}
	if (strtab_grow_ids(st) < 0)
		return STRTAB_NONE;
	copy = malloc(len + 1);
	if (!copy)
		return STRTAB_NONE;
	if (len)
		memcpy(copy, s, len);
	copy[len] = '\0';
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

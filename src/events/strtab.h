/*
 * strtab — string interning for the drained trace.
 *
 * Each distinct byte string gets a small integer id; ids are dense from 0.
 * Strings are stored NUL-terminated (embedded NULs are kept in the length
 * but cut the C string). Owned by one thread at a time.
 */
#ifndef PROFHOST_STRTAB_H
#define PROFHOST_STRTAB_H

#include <stddef.h>
#include <stdint.h>

#define STRTAB_NONE UINT32_MAX

struct strtab {
	char **str;        /* id -> string */
	uint32_t *len;     /* id -> length */
	uint32_t n, cap;
	uint32_t *slots;   /* open-addressing hash: id + 1, 0 = empty */
	size_t nslots;     /* power of two */
	char *blk;         /* the block strings are copied into (its first
			      bytes point to the block before it) */
	size_t blk_used, blk_cap;
	size_t blk_bytes;  /* all blocks' bytes (strtab_bytes) */
};

/* Initializes an empty table. Returns 0 or -1 on allocation failure. */
int strtab_init(struct strtab *st);

/* Frees all strings and the table. NULL-safe. */
void strtab_free(struct strtab *st);

/* Returns the id of `s` (len bytes), adding it if new; STRTAB_NONE on
 * allocation failure. */
uint32_t strtab_intern(struct strtab *st, const char *s, size_t len);

/* String for `id`; "" for STRTAB_NONE or an unknown id. */
const char *strtab_get(const struct strtab *st, uint32_t id);

/* Length in bytes of string `id`; 0 if unknown. */
uint32_t strtab_len(const struct strtab *st, uint32_t id);

/* Memory the table holds for its strings: their blocks, and the id
 * arrays and the hash as far as they are filled, in the whole huge pages
 * they occupy (bigalloc_resident), in bytes. */
size_t strtab_bytes(const struct strtab *st);

/* Memory the table's hash grows by when it takes `more` new strings (0
 * when it has room), in bytes: it doubles in place, with no copy
 * beside it. */
size_t strtab_growth(const struct strtab *st, size_t more);

#endif

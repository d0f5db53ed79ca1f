/*
 * hash — FNV-1a, the one string hash of profhost's tables.
 *
 * Header-only (static inline): the shim (libc only) uses it as well as the
 * core and the readers. The 64-bit seed is the one profhost has always
 * used, so tables fill (and iterate) as they did before these helpers.
 * Pure functions; any thread; async-signal-safe.
 */
#ifndef PROFHOST_HASH_H
#define PROFHOST_HASH_H

#include <stddef.h>
#include <stdint.h>

#define HASH_FNV64_SEED 1469598103934665603ULL
#define HASH_FNV64_PRIME 1099511628211ULL
#define HASH_FNV32_SEED 2166136261u
#define HASH_FNV32_PRIME 16777619u

/* FNV-1a (64 bits) of len bytes at p, continuing from h: start with
 * HASH_FNV64_SEED (or the seed mixed with a key the bytes belong to). */
static inline uint64_t hash_fnv64(uint64_t h, const void *p, size_t len)
{
	const unsigned char *s = p;
	size_t i;

	for (i = 0; i < len; i++)
		h = (h ^ s[i]) * HASH_FNV64_PRIME;
	return h;
}

/* As hash_fnv64 over a NUL-terminated string (the NUL not included). */
static inline uint64_t hash_fnv64_str(uint64_t h, const char *s)
{
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * HASH_FNV64_PRIME;
	return h;
}

/* FNV-1a (32 bits) of len bytes at p. */
static inline uint32_t hash_fnv32(const void *p, size_t len)
{
	const unsigned char *s = p;
	uint32_t h = HASH_FNV32_SEED;
	size_t i;

	for (i = 0; i < len; i++)
		h = (h ^ s[i]) * HASH_FNV32_PRIME;
	return h;
}

#endif

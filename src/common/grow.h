/*
 * grow — the one "double and realloc" of profhost's growing arrays, with
 * or without a limit.
 *
 * Header-only (static inline), libc only: the shim may use it too.
 */
#ifndef PROFHOST_GROW_H
#define PROFHOST_GROW_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/*
 * Makes room for `need` elements of `size` bytes in `arr`, which holds *cap
 * of them, without going past `max` elements: when *cap < need, the
 * capacity doubles (from `min` when *cap is 0) until it holds `need` (>= 1),
 * is cut to `max`, and the array is realloc'ed. Returns `arr` (unchanged:
 * it had room), the moved array (*cap updated), or NULL when `need` is
 * more than `max`, out of memory or the size would overflow (then `arr`
 * and *cap are unchanged and still the caller's). Any thread; the array is
 * the caller's; not async-signal-safe (realloc).
 */
static inline void *grow_array_max(void *arr, size_t *cap, size_t need, size_t size,
				   size_t min, size_t max)
{
	size_t ncap = *cap ? *cap : min;
	void *p;

	if (need <= *cap)
		return arr;
	if (need > max)
		return NULL;
	if (ncap == 0)
		ncap = 1;
	while (ncap < need) {
		if (ncap > SIZE_MAX / 2)
			return NULL;
		ncap *= 2;
	}
	if (ncap > max)
		ncap = max;
	if (ncap > SIZE_MAX / size)
		return NULL;
	p = realloc(arr, ncap * size);
	if (!p)
		return NULL;
	*cap = ncap;
	return p;
}

/* grow_array_max with no limit: the growing arrays' "double and realloc". */
static inline void *grow_array(void *arr, size_t *cap, size_t need, size_t size, size_t min)
{
	return grow_array_max(arr, cap, need, size, min, SIZE_MAX);
}

#endif

/*
 * cupti_names — which GPU names the salvage file already holds, so that the
 * recorder writes each kernel, API and device name there once (see
 * cupti_internal.h).
 */
#include <stdatomic.h>

#include "cupti_internal.h"

/* Open addressing: CUPTI_NAMES_SLOTS slots of (kind << 56 ^ key), 0 empty,
 * probed CUPTI_NAMES_PROBES at a time from the tag's hash. Slots are only
 * ever claimed, never given up, so a name once written is never written
 * again while it fits; a name whose probe run is all taken by others is
 * written each time it is seen (the file's area bounds that). */
static _Atomic uint64_t names[CUPTI_NAMES_SLOTS];

bool cupti_names_seen(unsigned kind, uint64_t key)
{
	uint64_t tag = (uint64_t)kind << 56 ^ key, cur;
	size_t i = (size_t)((tag * 0x9E3779B97F4A7C15ull) >> 40) & (CUPTI_NAMES_SLOTS - 1);
	size_t n;

	for (n = 0; n < CUPTI_NAMES_PROBES; n++, i = (i + 1) & (CUPTI_NAMES_SLOTS - 1)) {
		cur = atomic_load_explicit(&names[i], memory_order_relaxed);
		if (cur == tag)
			return true;
		if (cur != 0)
			continue;
		if (atomic_compare_exchange_strong_explicit(&names[i], &cur, tag,
							    memory_order_relaxed,
							    memory_order_relaxed))
			return false; /* ours: the caller writes the name */
		if (cur == tag)
			return true;  /* another thread claimed it for this name */
	}
	return false;
}

void cupti_names_reset(void)
{
	size_t i;

	for (i = 0; i < CUPTI_NAMES_SLOTS; i++)
		atomic_store_explicit(&names[i], 0, memory_order_relaxed);
}

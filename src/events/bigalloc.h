/*
 * bigalloc — the allocator of arrays that may grow to hundreds of MiB: a
 * window's events and arguments, the GPU correlation table.
 *
 * A window's trace is built in one go on the host thread and writes every
 * page of its arrays once. With fresh memory each page is a page fault and
 * a page the kernel must zero, which costs more than converting the
 * records (docs/performance.md, "GPU records"). So blocks of at least
 * BIGALLOC_HUGE_MIN bytes are
 *
 *  - mapped on their own and advised MADV_HUGEPAGE: where the system allows
 *    transparent huge pages ("madvise" or "always" in
 *    /sys/kernel/mm/transparent_hugepage/enabled) one fault fills 2 MiB;
 *  - kept when freed, for the next window: their pages are handed to the
 *    kernel with MADV_FREE (it takes them back whenever it needs memory,
 *    without swapping), and up to BIGALLOC_CACHE_SLOTS blocks, together at
 *    most a quarter of the machine's memory (8 GiB at most), stay mapped.
 *    A later block that fits reuses one, and its pages, still there unless
 *    the kernel took them, cost no fault. Until the kernel takes them they
 *    are counted in the process's resident size; the host thread unmaps
 *    them (bigalloc_trim) once no window is ahead.
 *
 * Smaller blocks are plain malloc memory. Every block comes from
 * bigalloc_realloc/bigalloc_calloc and goes back through bigalloc_free
 * (never free()). Any thread; the cache has its own lock.
 */
#ifndef PROFHOST_BIGALLOC_H
#define PROFHOST_BIGALLOC_H

#include <stddef.h>

/* Blocks from this size on are mapped, advised huge pages and cached. */
#define BIGALLOC_HUGE_MIN ((size_t)8 << 20)

/* Freed big blocks kept for reuse, at most. */
#define BIGALLOC_CACHE_SLOTS 4

/* Like realloc: resizes block p (NULL: a new block) to hold `bytes`,
 * keeping its contents; new bytes are not zeroed. NULL on failure, p then
 * untouched. */
void *bigalloc_realloc(void *p, size_t bytes);

/* Like calloc: n * size zeroed bytes. NULL on failure or overflow. */
void *bigalloc_calloc(size_t n, size_t size);

/* Frees a block of bigalloc_realloc/bigalloc_calloc; NULL-safe. A big
 * block is kept for reuse. */
void bigalloc_free(void *p);

/* As bigalloc_free, but a big block is unmapped at once: for blocks no
 * later window would ask for again (a table's array it outgrew). */
void bigalloc_drop(void *p);

/* The memory the first `used` bytes of block p (NULL: none) take once
 * written: a big block's whole huge pages from its start, header
 * included, a small block's bytes. What a budget counts (trace_bytes). */
size_t bigalloc_resident(const void *p, size_t used);

/* Bytes mapped by the cached blocks now (for tests and debug logs). */
size_t bigalloc_cached_bytes(void);

/* Unmaps the cached blocks now (tests; a process that wants its memory
 * back). */
void bigalloc_trim(void);

#endif

/*
 * bigalloc — big arrays on their own huge-page mappings, kept for reuse
 * when freed (see bigalloc.h).
 *
 * Every block starts with a header: the length of its mapping (0 for a
 * malloc'd small block) and, for a small block, the bytes asked for (to
 * copy them when it grows big). The caller's pointer is just after it.
 */
#include "bigalloc.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define HUGE_PAGE ((size_t)2 << 20)
#define CACHE_MAX ((size_t)8 << 30)

struct hdr {
	size_t maplen; /* bytes mapped, header included; 0: malloc'd */
	size_t size;   /* small blocks: bytes asked for */
};

#define HDR sizeof(struct hdr)

/* Freed big blocks; their pages were given MADV_FREE. */
static struct {
	pthread_mutex_t lock;
	void *base[BIGALLOC_CACHE_SLOTS];
	size_t len[BIGALLOC_CACHE_SLOTS];
	size_t total;  /* bytes mapped by the cached blocks */
	size_t cap;    /* most bytes cached; 0 until first computed */
} cache = { .lock = PTHREAD_MUTEX_INITIALIZER };

static struct hdr *hdr_of(void *p)
{
	return (struct hdr *)((char *)p - HDR);
}

static void *data_of(struct hdr *h)
{
	return (char *)h + HDR;
}

/* Advises huge pages for the whole mapping; ignored where THP is off. */
static void advise(void *base, size_t len)
{
#ifdef MADV_HUGEPAGE
	(void)madvise(base, len, MADV_HUGEPAGE);
#else
	(void)base;
	(void)len;
#endif
}

/* `n` rounded up to whole huge pages, or 0 on overflow. */
static size_t round_huge(size_t n)
{
	if (n > SIZE_MAX - HUGE_PAGE)
		return 0;
	return (n + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
}

/* Most bytes the cache keeps: a quarter of the machine's memory, 8 GiB at
 * most. Called with the lock held. */
static size_t cache_cap(void)
{
	if (!cache.cap) {
		long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
		size_t phys = pages > 0 && page > 0 ? (size_t)pages * (size_t)page
						    : (size_t)8 << 30;

		cache.cap = phys / 4 < CACHE_MAX ? phys / 4 : CACHE_MAX;
	}
	return cache.cap;
}

/* A mapping of at least `need` bytes: a cached one that is not much larger
 * (its pages may still hold old data: *recycled = 1), else a new one.
 * Sets *len to its length. NULL when mmap fails. */
static struct hdr *map_block(size_t need, size_t *len, int *recycled)
{
	size_t best = BIGALLOC_CACHE_SLOTS, i;
	void *p;

	pthread_mutex_lock(&cache.lock);
	for (i = 0; i < BIGALLOC_CACHE_SLOTS; i++)
		if (cache.base[i] && cache.len[i] >= need && cache.len[i] / 4 <= need &&
		    (best == BIGALLOC_CACHE_SLOTS || cache.len[i] < cache.len[best]))
			best = i;
	if (best < BIGALLOC_CACHE_SLOTS) {
		p = cache.base[best];
		*len = cache.len[best];
		cache.base[best] = NULL;
		cache.total -= *len;
		pthread_mutex_unlock(&cache.lock);
		*recycled = 1;
		return p;
	}
	pthread_mutex_unlock(&cache.lock);
	*len = round_huge(need);
	if (!*len)
		return NULL;
	p = mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	advise(p, *len);
	*recycled = 0;
	return p;
}

/* Parks a freed mapping in the cache, making room by unmapping the
 * smallest cached ones; unmaps it instead when it cannot be kept. */
static void cache_put(void *base, size_t len)
{
	size_t i, small;

#ifdef MADV_FREE
	if (madvise(base, len, MADV_FREE) != 0) {
		munmap(base, len);
		return;
	}
#else
	munmap(base, len);
	return;
#endif
	pthread_mutex_lock(&cache.lock);
	if (len > cache_cap()) {
		pthread_mutex_unlock(&cache.lock);
		munmap(base, len);
		return;
	}
	for (;;) {
		size_t used = 0;

		small = BIGALLOC_CACHE_SLOTS;
		for (i = 0; i < BIGALLOC_CACHE_SLOTS; i++) {
			if (!cache.base[i])
				continue;
			used++;
			if (small == BIGALLOC_CACHE_SLOTS || cache.len[i] < cache.len[small])
				small = i;
		}
		if (used < BIGALLOC_CACHE_SLOTS && cache.total + len <= cache.cap)
			break;
		munmap(cache.base[small], cache.len[small]);
		cache.total -= cache.len[small];
		cache.base[small] = NULL;
	}
	for (i = 0; cache.base[i]; i++)
		;
	cache.base[i] = base;
	cache.len[i] = len;
	cache.total += len;
	pthread_mutex_unlock(&cache.lock);
}

/* A big block for `bytes`, holding the first `keep` bytes of `old` (NULL:
 * nothing), zeroed when `zero`. NULL on failure. */
static void *big_new(size_t bytes, const void *old, size_t keep, int zero)
{
	size_t len;
	int recycled;
	struct hdr *h;

	if (bytes > SIZE_MAX - HDR)
		return NULL;
	h = map_block(bytes + HDR, &len, &recycled);
	if (!h)
		return NULL;
	h->maplen = len;
	h->size = 0;
	if (keep)
		memcpy(data_of(h), old, keep);
	if (zero && recycled)
		memset((char *)data_of(h) + keep, 0, bytes - keep);
	return data_of(h);
}

size_t bigalloc_resident(const void *p, size_t used)
{
	const struct hdr *h;
	size_t n;

	if (!p || !used)
		return 0;
	h = (const struct hdr *)((const char *)p - HDR);
	if (!h->maplen)
		return used;
	n = round_huge(used + HDR);
	return n && n < h->maplen ? n : h->maplen;
}

void *bigalloc_realloc(void *p, size_t bytes)
{
	struct hdr *h = p ? hdr_of(p) : NULL, *q;
	void *n;

	if (h && h->maplen) { /* big: grow its mapping (may move) */
		size_t len;

		if (bytes <= h->maplen - HDR)
			return p;
		len = bytes > SIZE_MAX - HDR ? 0 : round_huge(bytes + HDR);
		if (!len)
			return NULL;
		q = mremap(h, h->maplen, len, MREMAP_MAYMOVE);
		if (q == MAP_FAILED)
			return NULL;
		advise(q, len);
		q->maplen = len;
		return data_of(q);
	}
	if (bytes < BIGALLOC_HUGE_MIN) { /* small stays small */
		q = realloc(h, HDR + bytes);
		if (!q)
			return NULL;
		q->maplen = 0;
		q->size = bytes;
		return data_of(q);
	}
	n = big_new(bytes, p, h ? h->size : 0, 0); /* small (or none) -> big */
	if (n)
		free(h);
	return n;
}

void *bigalloc_calloc(size_t n, size_t size)
{
	struct hdr *h;
	size_t bytes;

	if (size && n > SIZE_MAX / size)
		return NULL;
	bytes = n * size;
	if (bytes >= BIGALLOC_HUGE_MIN)
		return big_new(bytes, NULL, 0, 1);
	if (bytes > SIZE_MAX - HDR)
		return NULL;
	h = calloc(1, HDR + bytes);
	if (!h)
		return NULL;
	h->size = bytes;
	return data_of(h);
}

/* Frees block p: a big one into the cache when `keep`, else unmapped. */
static void release(void *p, int keep)
{
	struct hdr *h;

	if (!p)
		return;
	h = hdr_of(p);
	if (!h->maplen)
		free(h);
	else if (keep)
		cache_put(h, h->maplen);
	else
		munmap(h, h->maplen);
}

void bigalloc_free(void *p)
{
	release(p, 1);
}

void bigalloc_drop(void *p)
{
	release(p, 0);
}

size_t bigalloc_cached_bytes(void)
{
	size_t n;

	pthread_mutex_lock(&cache.lock);
	n = cache.total;
	pthread_mutex_unlock(&cache.lock);
	return n;
}

void bigalloc_trim(void)
{
	size_t i;

	pthread_mutex_lock(&cache.lock);
	for (i = 0; i < BIGALLOC_CACHE_SLOTS; i++)
		if (cache.base[i]) {
			munmap(cache.base[i], cache.len[i]);
			cache.base[i] = NULL;
		}
	cache.total = 0;
	pthread_mutex_unlock(&cache.lock);
}

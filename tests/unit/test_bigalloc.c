/*
 * test_bigalloc — the allocator of a window's big arrays: contents kept
 * across growth (small -> big, big -> bigger), freed big blocks reused by
 * the next window (same mapping, zeroed for calloc), the cache bounded,
 * and huge pages advised on the mapping (VmFlags "hg" in smaps).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "events/bigalloc.h"

#define MiB ((size_t)1 << 20)

static int all(const unsigned char *p, size_t n, unsigned char v)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (p[i] != v)
			return 0;
	return 1;
}

/* 1 when the mapping holding p has the MADV_HUGEPAGE flag, 0 when not, -1
 * when smaps cannot tell (no such mapping, or no VmFlags line). */
static int huge_advised(const void *p)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	int in = 0, r = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof line, f)) {
		unsigned long lo, hi;

		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) { /* a mapping's first line */
			in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
			continue;
		}
		if (in && !strncmp(line, "VmFlags:", 8)) {
			r = strstr(line, " hg") != NULL;
			break;
		}
	}
	fclose(f);
	return r;
}

static void test_growth_keeps_contents(void)
{
	unsigned char *p = bigalloc_realloc(NULL, 1000), *q;

	CHECK(p != NULL);
	memset(p, 0x11, 1000);
	p = bigalloc_realloc(p, 100000); /* small -> small */
	CHECK(p && all(p, 1000, 0x11));
	memset(p, 0x22, 100000);
	q = bigalloc_realloc(p, 16 * MiB); /* small -> big */
	CHECK(q && all(q, 100000, 0x22));
	memset(q, 0x33, 16 * MiB);
	p = bigalloc_realloc(q, 40 * MiB); /* big -> bigger (mremap) */
	CHECK(p && all(p, 16 * MiB, 0x33));
	CHECK(bigalloc_realloc(p, 1000) == p); /* shrinking keeps the block */
	if (access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) == 0)
		CHECK_EQ_INT(huge_advised(p), 1); /* a kernel with THP */
	bigalloc_free(p);
	bigalloc_free(NULL);
}

static void test_reuse(void)
{
	unsigned char *p, *q;

	bigalloc_trim();
	CHECK_EQ_INT(bigalloc_cached_bytes(), 0);
	p = bigalloc_realloc(NULL, 24 * MiB);
	CHECK(p != NULL);
	memset(p, 0xab, 24 * MiB);
	bigalloc_free(p);
	CHECK(bigalloc_cached_bytes() >= 24 * MiB);
	/* The next window's array of about the same size takes that mapping. */
	q = bigalloc_realloc(NULL, 20 * MiB);
	CHECK(q == p);
	CHECK_EQ_INT(bigalloc_cached_bytes(), 0);
	memset(q, 0xcd, 20 * MiB);
	bigalloc_free(q);
	/* calloc from a reused mapping is zeroed all the same. */
	p = bigalloc_calloc(5 * MiB, 4);
	CHECK(p == q);
	CHECK(p && all(p, 20 * MiB, 0));
	bigalloc_free(p);
	/* A block of a quarter of a cached one's size or less does not take
	 * it. */
	bigalloc_trim();
	q = bigalloc_realloc(NULL, 64 * MiB);
	bigalloc_free(q);
	p = bigalloc_calloc(1, 9 * MiB);
	CHECK(p != NULL && p != q);
	CHECK(p && all(p, 9 * MiB, 0));
	bigalloc_free(p);
	/* bigalloc_drop keeps nothing. */
	bigalloc_trim();
	bigalloc_drop(bigalloc_realloc(NULL, 12 * MiB));
	bigalloc_drop(bigalloc_realloc(NULL, 1000));
	bigalloc_drop(NULL);
	CHECK_EQ_INT(bigalloc_cached_bytes(), 0);
}

static void test_cache_bounded(void)
{
	void *p[BIGALLOC_CACHE_SLOTS + 3];
	size_t i;

	bigalloc_trim();
	for (i = 0; i < BIGALLOC_CACHE_SLOTS + 3; i++)
		p[i] = bigalloc_realloc(NULL, (8 + 2 * i) * MiB);
	for (i = 0; i < BIGALLOC_CACHE_SLOTS + 3; i++) {
		CHECK(p[i] != NULL);
		bigalloc_free(p[i]);
	}
	/* Only the largest BIGALLOC_CACHE_SLOTS stay: (14 + 16 + 18 + 20) MiB
	 * of blocks, each rounded up to whole 2 MiB pages with its header. */
	CHECK(bigalloc_cached_bytes() >= 68 * MiB);
	CHECK(bigalloc_cached_bytes() <= 76 * MiB);
	bigalloc_trim();
	CHECK_EQ_INT(bigalloc_cached_bytes(), 0);
}

static void test_overflow(void)
{
	CHECK(bigalloc_calloc(SIZE_MAX / 2, 4) == NULL);
	CHECK(bigalloc_realloc(NULL, SIZE_MAX - 8) == NULL);
}

int main(void)
{
	test_growth_keeps_contents();
	test_reuse();
	test_cache_bounded();
	test_overflow();
	return check_done();
}

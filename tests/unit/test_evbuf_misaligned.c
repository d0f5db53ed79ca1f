/*
 * test_evbuf_misaligned — a pool that does not begin on a huge-page boundary
 * (kernels before 6.7 place large anonymous mappings on any page) is given
 * back by the drain without touching the memory below it. The drain once
 * rounded its give-back point down past the pool's start: the unsigned
 * offset wrapped, and a later MADV_DONTNEED zeroed up to 2 MiB of whatever
 * lay below the pool (a thread's stack and its TLS, under valgrind).
 *
 * This test's mmap() stands in for libc's in evbuf.c's calls: it places a
 * pool 64 KiB past a huge-page boundary, with a guard pattern in the 64 KiB
 * below it, which must survive a drain of a pool several times the
 * drain's give-back step.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "check.h"
#include "shim/evbuf.h"

#define HUGE ((uintptr_t)2 << 20)
#define GUARD ((uintptr_t)64 << 10)

#define POOL ((size_t)64 << 20)

static unsigned char *guard_at;
static int armed, placed;

/* While armed, the pool's reservation (POOL bytes, MAP_NORESERVE) lands
 * GUARD bytes past a huge-page boundary, with GUARD bytes of pattern below
 * it; everything else (a sanitizer's own mappings too) goes to the kernel
 * as asked. Not under ThreadSanitizer, whose runtime needs its own mmap
 * from the first instruction (the test is labelled no_tsan). */
void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	uintptr_t base, at;
	long r;

	if (!armed || !(flags & MAP_NORESERVE) || addr || len != POOL) {
		r = syscall(SYS_mmap, addr, len, prot, flags, fd, off);
		return r < 0 && r > -4096 ? MAP_FAILED : (void *)r;
	}
	r = syscall(SYS_mmap, NULL, len + 2 * HUGE, prot, flags, fd, off);
	if (r < 0 && r > -4096)
		return MAP_FAILED;
	base = (uintptr_t)r;
	at = (base + HUGE - 1) / HUGE * HUGE + GUARD;
	guard_at = (unsigned char *)(at - GUARD);
	memset(guard_at, 0xab, GUARD);
	armed = 0;
	placed++;
	return (void *)at;
}

static void visit(void *ctx, int32_t tid, const char *thread_name,
		  const struct evbuf_rec *r)
{
	(void)tid;
	(void)thread_name;
	(void)r;
	(*(size_t *)ctx)++;
}

int main(void)
{
	char payload[200];
	struct evbuf_stats st;
	size_t n = 0, i, bad = 0;
	uint64_t gen;

	memset(payload, 'x', sizeof payload);
	armed = 1;
	gen = evbuf_open(POOL);
	CHECK(gen != 0);
	CHECK_EQ_INT(placed, 1);
	CHECK(guard_at != NULL);
	/* About 24 MiB of records: three times the drain's give-back step. */
	for (i = 0; i < 100000; i++)
		CHECK_EQ_INT(evbuf_append_raw(EVBUF_MARK, (int64_t)i, payload,
					      sizeof payload, i, 0), 0);
	CHECK_EQ_INT(evbuf_close(), gen);
	CHECK_EQ_INT(evbuf_drain(gen, visit, &n, &st), 0);
	CHECK_EQ_INT(n, 100000);
	evbuf_release(gen);
	for (i = 0; guard_at && i < GUARD; i++)
		bad += guard_at[i] != 0xab;
	CHECK_EQ_INT(bad, 0);
	return check_done();
}

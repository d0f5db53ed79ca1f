/*
 * cupti_activity — CUPTI's activity mechanics, apart from the source's
 * lifecycle (cupti_internal.h): the clock CUPTI stamps records with, the
 * pool of buffers CUPTI borrows and returns, the kinds switched on and
 * off, and the completed buffers read back. Threads and locks: cupti.c's
 * header (the pool's lock is innermost).
 */
#include "cupti_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "../../common/clock.h"
#include "../../common/log.h"

#define MIN_BUF ((size_t)64 * 1024)
#define MAX_BUF ((size_t)4 * 1024 * 1024)

/* The source's state (cupti_internal.h), by the name every file of the
 * source uses. */
static struct cupti_state *const cu = &cupti_cu;

/* The one clock (clock.h): CUPTI's timestamps are the host's. */
uint64_t CUPTIAPI cupti_clock(void)
{
	return (uint64_t)clock_now_ns();
}

void CUPTIAPI cupti_buf_requested(uint8_t **buffer, size_t *size, size_t *max)
{
	struct cupti_pool *p = &cu->pool;

	*max = 0;
	pthread_mutex_lock(&p->lock);
	if (p->base && p->nfree) {
		uint32_t idx = p->free_idx[--p->nfree];

		*buffer = p->base + (size_t)idx * p->buf_size;
		*size = p->buf_size;
	} else {
		*buffer = NULL; /* CUPTI drops and counts what does not fit */
		*size = 0;
	}
	pthread_mutex_unlock(&p->lock);
}

int cupti_pool_init(struct cupti_pool *p, size_t bytes)
{
	size_t buf = bytes / 16, i;

	if (buf < MIN_BUF)
		buf = MIN_BUF;
	if (buf > MAX_BUF)
		buf = MAX_BUF;
	buf &= ~(MIN_BUF - 1);
	p->buf_size = buf;
	p->nbuf = (uint32_t)(bytes / buf < 2 ? 2 : bytes / buf);
	p->base = mmap(NULL, (size_t)p->nbuf * buf, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	p->free_idx = malloc(p->nbuf * sizeof *p->free_idx);
	p->done = malloc(p->nbuf * sizeof *p->done);
	if (p->base == MAP_FAILED || !p->free_idx || !p->done) {
		if (p->base != MAP_FAILED)
			munmap(p->base, (size_t)p->nbuf * buf);
		free(p->free_idx);
		free(p->done);
		memset(p, 0, sizeof *p);
		return -1;
	}
	pthread_mutex_init(&p->lock, NULL);
	for (i = 0; i < p->nbuf; i++)
		p->free_idx[i] = p->nbuf - 1 - (uint32_t)i;
	p->nfree = p->nbuf;
	p->ndone = 0;
	return 0;
}

/* Every buffer free again (CUPTI was finalized: it holds none) and the
 * memory given back. */
void cupti_pool_reset(struct cupti_pool *p)
{
	uint32_t i;

	pthread_mutex_lock(&p->lock);
	for (i = 0; i < p->nbuf; i++)
		p->free_idx[i] = p->nbuf - 1 - i;
	p->nfree = p->nbuf;
	p->ndone = 0;
	if (p->base)
		madvise(p->base, (size_t)p->nbuf * p->buf_size, MADV_DONTNEED);
	pthread_mutex_unlock(&p->lock);
}

/* Gives the converted buffers bufs[0..n) back to CUPTI's pool and frees
 * the list. Host thread. */
void cupti_pool_give_back(struct cupti_done *bufs, uint32_t n)
{
	uint32_t i;

	pthread_mutex_lock(&cu->pool.lock);
	for (i = 0; i < n; i++)
		cu->pool.free_idx[cu->pool.nfree++] = bufs[i].idx;
	pthread_mutex_unlock(&cu->pool.lock);
	free(bufs);
}

CUptiResult cupti_kinds_enable(void)
{
	char buf[48];
	size_t i;

	for (i = 0; i < cu->nkinds; i++) {
		CUptiResult rc;

		if (cu->kind_bad[i])
			continue;
		rc = cu->fn.ActivityEnable(cu->kinds[i]);
		if (rc == CUPTI_SUCCESS)
			continue;
		if (rc == CUPTI_ERROR_NOT_COMPATIBLE || rc == CUPTI_ERROR_NOT_SUPPORTED ||
		    rc == CUPTI_ERROR_INVALID_KIND || rc == CUPTI_ERROR_LEGACY_PROFILER_NOT_SUPPORTED) {
			cu->kind_bad[i] = true;
			log_msg(LOG_WARN, "CUPTI cannot record activity kind %d here (%s): "
				"left out", (int)cu->kinds[i],
				cupti_result_name(&cu->fn, rc, buf, sizeof buf));
			continue;
		}
		cu->enabled = true; /* the caller gives up: disables what was enabled */
		return rc;
	}
	cu->enabled = true;
	atomic_store(&cu->ext_on, cu->ext);
	atomic_store(&cu->track, cu->watch && cu->inflight.slot);
	return CUPTI_SUCCESS;
}

void cupti_kinds_disable(void)
{
	size_t i;

	atomic_store(&cu->ext_on, 0);
	atomic_store(&cu->track, 0);
	for (i = 0; i < cu->nkinds; i++)
		if (!cu->kind_bad[i])
			cu->fn.ActivityDisable(cu->kinds[i]);
	cu->enabled = false;
}

/* Calls fn for each record of the completed buffers done[0..ndone). Host
 * thread. */
void cupti_each_done(const struct cupti_done *done, uint32_t ndone, cupti_record_fn fn, void *arg)
{
	uint32_t i;

	for (i = 0; i < ndone; i++) {
		uint8_t *buf = cu->pool.base + (size_t)done[i].idx * cu->pool.buf_size;
		CUpti_Activity *r = NULL;

		while (cu->fn.ActivityGetNextRecord(buf, done[i].valid, &r) == CUPTI_SUCCESS)
			fn(r, arg);
	}
}

/* Keeps a copy of a record that belongs to a later window. */
void cupti_carry_add(uint8_t *next, size_t *nnext, size_t cap, const CUpti_Activity *r)
{
	size_t step = cupti_packed_size(r->kind);

	if (!step || *nnext + step > cap) {
		cu->carry_dropped++;
		return;
	}
	memcpy(next + *nnext, r, cupti_record_size(r->kind));
	*nnext += step;
}

/* Calls fn for each record kept in cu->carry (cupti_carry_add's layout). Host
 * thread. */
void cupti_each_carried(cupti_record_fn fn, void *arg)
{
	const CUpti_Activity *r;
	size_t off = 0;

	while ((r = cupti_packed_next(cu->carry, cu->ncarry, &off)) != NULL)
		fn(r, arg);
}

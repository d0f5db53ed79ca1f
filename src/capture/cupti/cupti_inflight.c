/*
 * cupti_inflight — the kernel launches not known to have finished, for the
 * hang watchdog (see cupti_internal.h).
 *
 * A fixed table of slots indexed by correlation id modulo its size: a
 * launch takes its slot (a slot still holding an older unfinished launch
 * lets it go and counts it: CUDA's launch queues hold ~1000 launches per
 * stream, so a stuck kernel is overwritten only after thousands of later
 * launches), a completion record frees its slot when the id still matches.
 * One mutex, held for a slot's copy at a time (batches of completions: a
 * few hundred ids), never across a call out.
 */
#include <stdlib.h>
#include <string.h>

#include "cupti_internal.h"

int cupti_inflight_init(struct cupti_inflight *f, size_t nslot)
{
	memset(f, 0, sizeof *f);
	f->slot = calloc(nslot, sizeof *f->slot);
	if (!f->slot)
		return -1;
	f->nslot = nslot;
	pthread_mutex_init(&f->lock, NULL);
	return 0;
}

void cupti_inflight_free(struct cupti_inflight *f)
{
	if (f->slot)
		pthread_mutex_destroy(&f->lock);
	free(f->slot);
	memset(f, 0, sizeof *f);
}

void cupti_inflight_launch(struct cupti_inflight *f, const struct cupti_launch *l)
{
	struct cupti_launch *s;

	if (!f->slot || !l->corr)
		return;
	s = &f->slot[l->corr % f->nslot];
	pthread_mutex_lock(&f->lock);
	if (s->corr && s->corr != l->corr)
		f->forgotten++;
	*s = *l;
	pthread_mutex_unlock(&f->lock);
}

void cupti_inflight_done(struct cupti_inflight *f, const uint32_t *corr, size_t n)
{
	size_t i;

	if (!f->slot || !n)
		return;
	pthread_mutex_lock(&f->lock);
	for (i = 0; i < n; i++) {
		struct cupti_launch *s = &f->slot[corr[i] % f->nslot];

		if (corr[i] && s->corr == corr[i])
			s->corr = 0;
	}
	pthread_mutex_unlock(&f->lock);
}

void cupti_inflight_clear(struct cupti_inflight *f)
{
	size_t i;

	if (!f->slot)
		return;
	pthread_mutex_lock(&f->lock);
	for (i = 0; i < f->nslot; i++)
		f->slot[i].corr = 0;
	f->forgotten = 0;
	pthread_mutex_unlock(&f->lock);
}

/* Oldest launch first; equal times by correlation id. */
static int by_time(const void *a, const void *b)
{
	const struct cupti_launch *x = a, *y = b;

	if (x->ts != y->ts)
		return x->ts < y->ts ? -1 : 1;
	return x->corr < y->corr ? -1 : x->corr > y->corr;
}

size_t cupti_inflight_take(struct cupti_inflight *f, struct cupti_launch *out, size_t max,
			   uint64_t *more, uint64_t *forgotten)
{
	struct cupti_launch *all;
	size_t i, n = 0;

	*more = *forgotten = 0;
	if (!f->slot)
		return 0;
	all = malloc(f->nslot * sizeof *all);
	if (!all)
		return 0;
	pthread_mutex_lock(&f->lock);
	for (i = 0; i < f->nslot; i++)
		if (f->slot[i].corr)
			all[n++] = f->slot[i];
	*forgotten = f->forgotten;
	pthread_mutex_unlock(&f->lock);
	qsort(all, n, sizeof *all, by_time);
	if (n > max) {
		*more = n - max;
		n = max;
	}
	memcpy(out, all, n * sizeof *out);
	free(all);
	return n;
}

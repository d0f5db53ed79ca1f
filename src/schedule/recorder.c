/*
 * recorder — the flight recorder's segment bookkeeping (see recorder.h).
 */
#include "recorder.h"

#include <stdlib.h>
#include <string.h>

/* Checks a configuration; see recorder.h. */
const char *rec_config_check(const struct rec_config *c)
{
	if (!c->enabled)
		return NULL;
	if (c->steps < 1 || c->steps > REC_STEPS_MAX)
		return "steps must be from 1 to 10000";
	if (c->bytes < (size_t)REC_POOLS * 2 * 65536)
		return "mb must be at least 1";
	return NULL;
}

/* Sets up *r; allocates the ring of REC_SEGMENTS segments' steps. */
int rec_init(struct recorder *r, const struct rec_config *c)
{
	memset(r, 0, sizeof *r);
	r->cfg = *c;
	if (!c->enabled)
		return 0;
	r->seg_steps = (c->steps + 1) / 2;
	r->pool_bytes = c->bytes / REC_POOLS;
	r->ring_cap = REC_SEGMENTS * r->seg_steps;
	r->ring = calloc(r->ring_cap, sizeof *r->ring);
	if (!r->ring) {
		r->cfg.enabled = false;
		return -1;
	}
	return 0;
}

/* Frees the ring; *r is disabled after. */
void rec_free(struct recorder *r)
{
	free(r->ring);
	memset(r, 0, sizeof *r);
}

/* Drops the oldest held segment and its steps from the ring. */
static uint64_t drop_oldest(struct recorder *r)
{
	uint64_t gen = r->seg[0].gen;

	r->ring_head = (r->ring_head + r->seg[0].nsteps) % r->ring_cap;
	r->ring_n -= r->seg[0].nsteps;
	memmove(&r->seg[0], &r->seg[1], (r->nseg - 1) * sizeof r->seg[0]);
	r->nseg--;
	return gen;
}

/* A segment opened; see recorder.h. */
int rec_opened(struct recorder *r, uint64_t gen, uint64_t first, int64_t ts,
	       bool mid, uint64_t *release)
{
	int n = 0;

	if (r->nseg == REC_SEGMENTS) {
		*release = drop_oldest(r);
		n = 1;
	}
	r->seg[r->nseg].gen = gen;
	r->seg[r->nseg].first = first;
	r->seg[r->nseg].nsteps = 0;
	r->seg[r->nseg].start_ts = ts;
	r->seg[r->nseg].mid = mid;
	r->nseg++;
	r->open = true;
	return n;
}

/* A step ended in the open segment; see recorder.h. */
bool rec_step(struct recorder *r, const struct rec_step *s)
{
	struct rec_segment *seg;

	if (!r->open || r->ring_n >= r->ring_cap)
		return false;
	seg = &r->seg[r->nseg - 1];
	r->ring[(r->ring_head + r->ring_n) % r->ring_cap] = *s;
	r->ring_n++;
	seg->nsteps++;
	return seg->nsteps >= r->seg_steps;
}

void rec_closed(struct recorder *r)
{
	r->open = false;
}

uint32_t rec_held_steps(const struct recorder *r)
{
	return r->ring_n;
}

/* Empties the recorder (its generations were handed out). */
static void empty(struct recorder *r)
{
	r->nseg = 0;
	r->ring_head = r->ring_n = 0;
}

/* The generations a dump whose first step is d->first takes, and how many
 * it skips: those whose steps all end before d->first hold nothing of it;
 * the last one always holds its end. Sets d->cut_ts when the first one it
 * keeps opened inside that step (its older part was given back). */
static void take_gens(const struct recorder *r, struct rec_dump *d)
{
	uint32_t i, skip;

	for (skip = 0; skip + 1 < r->nseg; skip++) {
		const struct rec_segment *s = &r->seg[skip];

		if (s->nsteps > 0 && s->first + s->nsteps - 1 >= d->first)
			break;
		if (s->nsteps == 0 && s->first >= d->first)
			break;
	}
	if (r->seg[skip].mid && r->seg[skip].start_ts > d->start_ts)
		d->cut_ts = r->seg[skip].start_ts;
	for (i = 0; i < r->nseg; i++)
		d->gens[i] = r->seg[i].gen;
	d->ngens = r->nseg;
	d->nskip = skip;
}

bool rec_held_span(const struct recorder *r, uint64_t *lo, uint64_t *hi)
{
	if (r->ring_n == 0)
		return false;
	*lo = r->ring[r->ring_head].step;
	*hi = r->ring[(r->ring_head + r->ring_n - 1) % r->ring_cap].step;
	return true;
}

/* Takes the held segments for a dump of another rank's steps. */
int rec_take_range(struct recorder *r, uint64_t first, uint64_t last, int64_t running_ts,
		   struct rec_dump *d)
{
	uint32_t i, a = 0, n = 0;
	/* complete steps asked: [first, lim]; none when the running one is
	 * the first asked */
	bool want = !running_ts || last > first;
	uint64_t lim = running_ts ? last - (last > 0) : last;

	memset(d, 0, sizeof *d);
	if (r->open || r->nseg == 0)
		return -1;
	/* the held steps in [first, lim]: contiguous, in step order */
	for (i = 0; i < r->ring_n && want; i++) {
		uint64_t st = r->ring[(r->ring_head + i) % r->ring_cap].step;

		if (st < first || st > lim)
			continue;
		if (n == 0)
			a = i;
		n++;
	}
	if (n == 0 && !running_ts)
		return -1;
	if (n) {
		d->steps = malloc((size_t)n * sizeof *d->steps);
		if (!d->steps)
			return -1;
		for (i = 0; i < n; i++)
			d->steps[i] = r->ring[(r->ring_head + a + i) % r->ring_cap];
	}
	d->nsteps = n;
	d->first = n ? d->steps[0].step : last;
	d->last = n ? d->steps[n - 1].step : last;
	d->start_ts = n ? d->steps[0].ts : running_ts;
	take_gens(r, d);
	d->index = r->dumps++;
	/* every held step goes with it, those after `last` too (the caller
	 * leaves their records out): a later request for them merges */
	r->dumped_last = running_ts ? (last > 0 ? last - 1 : 0) : d->last;
	if (r->ring_n && r->ring[(r->ring_head + r->ring_n - 1) % r->ring_cap].step > r->dumped_last)
		r->dumped_last = r->ring[(r->ring_head + r->ring_n - 1) % r->ring_cap].step;
	empty(r);
	return 0;
}

/* Takes the held segments for a dump of the last n complete steps. */
int rec_take(struct recorder *r, uint32_t n, struct rec_dump *d)
{
	uint32_t i;

	memset(d, 0, sizeof *d);
	if (r->open || r->ring_n == 0 || n == 0)
		return -1;
	if (n > r->ring_n)
		n = r->ring_n;
	d->steps = malloc((size_t)n * sizeof *d->steps);
	if (!d->steps)
		return -1;
	for (i = 0; i < n; i++)
		d->steps[i] = r->ring[(r->ring_head + r->ring_n - n + i) % r->ring_cap];
	d->nsteps = n;
	d->first = d->steps[0].step;
	d->last = d->steps[n - 1].step;
	d->start_ts = d->steps[0].ts;
	take_gens(r, d);
	d->index = r->dumps++;
	r->dumped_last = d->last;
	empty(r);
	return 0;
}

/* Takes the held segments for a dump of the running step alone. */
int rec_take_running(struct recorder *r, uint64_t step, int64_t start_ts,
		     struct rec_dump *d)
{
	uint32_t i;

	memset(d, 0, sizeof *d);
	if (r->open || r->ring_n > 0 || r->nseg == 0)
		return -1;
	d->first = d->last = step;
	d->start_ts = start_ts;
	/* Its oldest part given back (it alone outgrew the pools). */
	if (r->seg[0].mid && r->seg[0].start_ts > start_ts)
		d->cut_ts = r->seg[0].start_ts;
	for (i = 0; i < r->nseg; i++)
		d->gens[i] = r->seg[i].gen;
	d->ngens = r->nseg;
	d->index = r->dumps++;
	/* the last complete step; a request made before `step` ends holds
	 * nothing more than this dump */
	r->dumped_last = step > 0 ? step - 1 : 0;
	empty(r);
	return 0;
}

bool rec_merges(const struct recorder *r, uint64_t ended)
{
	return r->dumps > 0 && ended <= r->dumped_last;
}

/* Hands every held generation out (a window opens, the process ends). */
uint32_t rec_take_all(struct recorder *r, uint64_t out[REC_SEGMENTS])
{
	uint32_t i, n = r->nseg;

	for (i = 0; i < n; i++)
		out[i] = r->seg[i].gen;
	empty(r);
	return n;
}

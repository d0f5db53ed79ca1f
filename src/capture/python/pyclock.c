/*
 * pyclock — Python's timestamps on the host's clock (see pyclock.h).
 *
 * The points live in a ring of PYCLOCK_POINTS (64 KiB), at least
 * PYCLOCK_NEAR_NS apart, so at least 0.2 s of history. A conversion looks
 * at the newest points first: what the bridge converts is at most a step
 * old, and a search through the whole ring touched a cache line per probe
 * on every phase (microseconds on a step that had pushed the ring out of
 * the cache, #29).
 */
#include "pyclock.h"

#include <pthread.h>
#include <stddef.h>

#include "../../common/clock.h"

#define PYCLOCK_NEAR_NS 50000LL
#define PYCLOCK_POINTS 4096
#define PYCLOCK_SCAN 8             /* newest points looked at one by one */
#define PYCLOCK_TRIES 4            /* brackets per point, the tightest kept */

struct pyclock_point {
	int64_t mono;                  /* CLOCK_MONOTONIC ns */
	int64_t off;                   /* host clock minus mono at `mono` */
};

static struct {
	pthread_mutex_t lock;
	struct pyclock_point pt[PYCLOCK_POINTS];
	size_t n, next;                /* points kept; where the next one goes */
} pyclock = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* The point `age` places after the oldest. Caller holds the lock. */
static const struct pyclock_point *pyclock_at(size_t age)
{
	return &pyclock.pt[(pyclock.next + PYCLOCK_POINTS - pyclock.n + age) % PYCLOCK_POINTS];
}

/* The age of the latest point at or before `mono_ts`, or pyclock.n when
 * every point is after it: the newest PYCLOCK_SCAN one by one, then a
 * binary search over the older ones. Caller holds the lock. */
static size_t pyclock_floor(int64_t mono_ts)
{
	size_t scan = pyclock.n < PYCLOCK_SCAN ? pyclock.n : PYCLOCK_SCAN;
	size_t i, lo = 0, hi = pyclock.n - scan; /* [0, lo) are <= mono_ts */

	for (i = 1; i <= scan; i++)
		if (pyclock_at(pyclock.n - i)->mono <= mono_ts)
			return pyclock.n - i;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (pyclock_at(mid)->mono <= mono_ts)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo ? lo - 1 : pyclock.n;
}

/* Adds a point now, the oldest making room: the host clock read between
 * two CLOCK_MONOTONIC reads, the tightest of PYCLOCK_TRIES brackets, so a
 * thread preempted between two reads (a loaded machine) does not put its
 * delay into the offset. Caller holds the lock. */
static struct pyclock_point pyclock_add(void)
{
	struct pyclock_point p = { 0, 0 };
	int64_t best_width = INT64_MAX;
	int i;

	for (i = 0; i < PYCLOCK_TRIES; i++) {
		int64_t m1 = clock_mono_ns(), now = clock_now_ns(), m2 = clock_mono_ns();

		if (m2 - m1 < best_width) {
			best_width = m2 - m1;
			p.mono = m1 + (m2 - m1) / 2;
			p.off = now - p.mono;
		}
	}
	pyclock.pt[pyclock.next] = p;
	pyclock.next = (pyclock.next + 1) % PYCLOCK_POINTS;
	if (pyclock.n < PYCLOCK_POINTS)
		pyclock.n++;
	return p;
}

/* The offset at `t` on the line through points a and b (a.mono <= t,
 * a.mono < b.mono). */
static int64_t pyclock_between(struct pyclock_point a, struct pyclock_point b, int64_t t)
{
	double f = (double)(t - a.mono) / (double)(b.mono - a.mono);

	if (f > 1)
		f = 1;
	return a.off + (int64_t)(f * (double)(b.off - a.off));
}

int64_t pyclock_host_time(int64_t mono_ts)
{
	struct pyclock_point before, after;
	size_t f;
	int64_t off;

	pthread_mutex_lock(&pyclock.lock);
	f = pyclock_floor(mono_ts);
	if (f == pyclock.n) {               /* older than every point */
		off = (pyclock.n ? *pyclock_at(0) : pyclock_add()).off;
	} else if (mono_ts - pyclock_at(f)->mono <= PYCLOCK_NEAR_NS) {
		off = pyclock_at(f)->off;
	} else {
		before = *pyclock_at(f);    /* read first: adding may drop it */
		after = f + 1 < pyclock.n ? *pyclock_at(f + 1) : pyclock_add();
		off = after.mono > before.mono ? pyclock_between(before, after, mono_ts)
					       : after.off;
	}
	pthread_mutex_unlock(&pyclock.lock);
	return mono_ts + off;
}

void pyclock_span(int64_t *start_ns, int64_t *end_ns)
{
	int64_t now;

	*start_ns = pyclock_host_time(*start_ns);
	*end_ns = pyclock_host_time(*end_ns);
	now = clock_now_ns();
	if (*end_ns > now)
		*end_ns = now;
	if (*start_ns > *end_ns)
		*start_ns = *end_ns;
}

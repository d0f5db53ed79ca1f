/*
 * wallclock — wall-clock sampling without waking threads that wait (see
 * sampler.h, docs/stacks.md).
 *
 * With the wall clock every thread is sampled once per period, running or
 * not. A signal to a waiting thread wakes it: a context switch, the
 * handler, and the interrupted call to redo; a Python thread sleeping in
 * time.sleep() or select() gets EINTR and retakes the GIL to check for
 * signals, taking it from the thread that computes. So the sampler thread
 * ticks once per period itself and, for each thread, reads its CPU time
 * (a system call, well under a microsecond):
 *
 *   - the thread ran since its last sample (more than WALL_IDLE_NS of CPU
 *     time, which leaves out what the last signal itself cost it), or has
 *     no sample in this window yet: it gets a signal (rt_tgsigqueueinfo,
 *     SI_QUEUE, the slot as value) and samples itself like a timer's;
 *   - it did not: it is still where its last sample found it, so that
 *     sample counts once more, at this tick, without a signal. These
 *     "repeats" are kept here per window (thread, time, periods, and the
 *     time of the sample they repeat) and become copies of that sample's
 *     stack at collect, after the Python frames were merged into it.
 *
 * A tick that comes late (the sampler thread was not scheduled) weighs the
 * periods it covers, like a timer's overruns.
 *
 * Threads: wallclock_tick and wallclock_open on the sampler thread,
 * wallclock_merge on the host thread; the store takes one short mutex.
 */
#include "sampler.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../stores.h"
#include "../../common/grow.h"
#include "../../common/log.h"

#define WALL_IDLE_NS 50000            /* CPU time that still counts as idle */
#define WALL_WINDOWS 8                /* windows whose repeats are kept */
#define WALL_MAX_REPEATS (4u << 20)   /* per window (96 MiB); more: lost */

/* A sample counted again: thread `tid` at `ts`, still where its sample of
 * `ref_ts` found it, for `weight` periods. */
struct repeat {
	int64_t ts, ref_ts;
	int32_t tid;
	uint32_t weight;
};

struct wall_window {
	uint64_t gen;       /* 0: free */
	bool rec;           /* a recorder segment's */
	bool dumped;        /* ... taken by a dump: kept as a window's until
			     * its collect */
	struct repeat *v;
	size_t n, cap;
	uint64_t lost;
};

static struct {
	pthread_mutex_t lock;
	struct wall_window w[WALL_WINDOWS];
} wc = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* The kernel's clock id for thread `tid`'s CPU time (CPUCLOCK_SCHED of a
 * thread: ~tid << 3 | 6). */
clockid_t wallclock_thread_cpu_clock(int32_t tid)
{
	return (clockid_t)((~(uint32_t)tid << 3) | 6u);
}

void wallclock_open(uint64_t gen, bool rec)
{
	struct wall_window *w = &wc.w[0];
	size_t i;

	pthread_mutex_lock(&wc.lock);
	for (i = 0; i < WALL_WINDOWS; i++)
		if (wc.w[i].gen == gen) {
			pthread_mutex_unlock(&wc.lock);
			return;
		}
	for (i = 1; i < WALL_WINDOWS; i++)
		if (capture_store_evict_before(wc.w[i].gen, wc.w[i].rec, wc.w[i].dumped,
					       w->gen, w->rec, w->dumped))
			w = &wc.w[i];
	free(w->v);
	memset(w, 0, sizeof *w);
	w->gen = gen;
	w->rec = rec;
	pthread_mutex_unlock(&wc.lock);
}

/* Appends the tick's repeats to window `gen`'s store (they are dropped,
 * counted, when it is full or gone). */
static void store(uint64_t gen, const struct repeat *r, size_t n)
{
	struct wall_window *w = NULL;
	size_t i;

	pthread_mutex_lock(&wc.lock);
	for (i = 0; i < WALL_WINDOWS && !w; i++)
		if (wc.w[i].gen == gen)
			w = &wc.w[i];
	if (w && w->n + n > w->cap && w->n + n <= WALL_MAX_REPEATS) {
		struct repeat *v = grow_array(w->v, &w->cap, w->n + n, sizeof *v, 1024);

		if (v)
			w->v = v;
	}
	if (w && w->n + n <= w->cap) {
		memcpy(w->v + w->n, r, n * sizeof *r);
		w->n += n;
	} else if (w) {
		w->lost += n;
	}
	pthread_mutex_unlock(&wc.lock);
}

/* Sends the slot's thread a sampling signal standing for `weight` periods.
 * Returns 0, or -1 when it could not be sent. */
static int send_sample(struct sampler_slot *sl, int32_t tid, int signo,
		       uint32_t weight)
{
	siginfo_t si;

	memset(&si, 0, sizeof si);
	si.si_signo = signo;
	si.si_code = SI_QUEUE;
	si.si_pid = getpid();
	si.si_uid = getuid();
	si.si_value.sival_ptr = sl;
	atomic_store_explicit(&sl->wall_weight, weight, memory_order_relaxed);
	atomic_fetch_add_explicit(&sl->sent, 1, memory_order_release);
	if (syscall(SYS_rt_tgsigqueueinfo, getpid(), tid, signo, &si) == 0)
		return 0;
	atomic_fetch_sub_explicit(&sl->sent, 1, memory_order_relaxed);
	return -1;
}

void wallclock_tick(struct sampler_slot *slots, size_t nslots, uint64_t gen,
		    int signo, int64_t now, uint64_t tick)
{
	struct repeat rep[64];
	size_t i, n = 0;

	for (i = 0; i < nslots; i++) {
		struct sampler_slot *sl = &slots[i];
		int32_t tid = atomic_load_explicit(&sl->tid, memory_order_relaxed);
		struct timespec cpu;
		uint32_t weight;
		int64_t last;

		if (tid <= 0 || sl->own || sl->blocking)
			continue;
		if (atomic_load_explicit(&sl->sent, memory_order_relaxed) !=
		    atomic_load_explicit(&sl->handled, memory_order_acquire))
			continue; /* its last signal is still pending */
		if (sl->wall_gen != gen) {
			sl->wall_gen = gen;
			sl->wall_tick = tick - 1;
			atomic_store_explicit(&sl->last_ts, 0, memory_order_relaxed);
		}
		weight = tick - sl->wall_tick > UINT32_MAX ? UINT32_MAX :
			 (uint32_t)(tick - sl->wall_tick);
		last = atomic_load_explicit(&sl->last_ts, memory_order_relaxed);
		if (clock_gettime(wallclock_thread_cpu_clock(tid), &cpu) != 0)
			continue; /* gone: the next scan frees the slot */
		if (!last || (int64_t)cpu.tv_sec * 1000000000 + cpu.tv_nsec -
		    atomic_load_explicit(&sl->cpu_after, memory_order_relaxed) >
		    WALL_IDLE_NS) {
			if (send_sample(sl, tid, signo, weight) == 0)
				sl->wall_tick = tick;
			continue;
		}
		rep[n].ts = now;
		rep[n].ref_ts = last;
		rep[n].tid = tid;
		rep[n].weight = weight;
		sl->wall_tick = tick;
		if (++n == sizeof rep / sizeof rep[0]) {
			store(gen, rep, n);
			n = 0;
		}
	}
	if (n)
		store(gen, rep, n);
}

/* A sample stack's (tid, ts) and index, for finding what a repeat repeats. */
struct ref {
	int64_t ts;
	int32_t tid;
	uint32_t stack;
};

static int ref_cmp(const void *pa, const void *pb)
{
	const struct ref *a = pa, *b = pb;

	if (a->tid != b->tid)
		return a->tid < b->tid ? -1 : 1;
	return (a->ts > b->ts) - (a->ts < b->ts);
}

void wallclock_rec_dumped(void)
{
	size_t i;

	pthread_mutex_lock(&wc.lock);
	for (i = 0; i < WALL_WINDOWS; i++)
		if (wc.w[i].gen && wc.w[i].rec)
			wc.w[i].dumped = true;
	pthread_mutex_unlock(&wc.lock);
}

/* Takes window `gen`'s store out into *out; false when there is none.
 * Older recorder stores lose a dump's mark (stores.h). */
static bool take(uint64_t gen, struct wall_window *out)
{
	bool found = false;
	size_t i;

	memset(out, 0, sizeof *out);
	pthread_mutex_lock(&wc.lock);
	for (i = 0; i < WALL_WINDOWS; i++) {
		if (wc.w[i].gen == gen && !found) {
			*out = wc.w[i];
			memset(&wc.w[i], 0, sizeof wc.w[i]);
			found = true;
		} else if (capture_store_mark_stale(wc.w[i].gen, wc.w[i].rec, gen)) {
			wc.w[i].dumped = false;
		}
	}
	pthread_mutex_unlock(&wc.lock);
	return found;
}

int wallclock_merge(uint64_t gen, int64_t from_ts, struct trace *t, uint64_t *lost)
{
	struct wall_window w;
	struct ref *refs = NULL, key, *hit;
	size_t i, n = 0;
	int rc = 0;

	if (!take(gen, &w))
		return 0;
	*lost += w.lost;
	for (i = 0; i < t->nstacks; i++)
		n += t->stacks[i].kind == TRACE_STACK_SAMPLE;
	if (w.n && n && !(refs = malloc(n * sizeof *refs)))
		rc = -1;
	for (i = n = 0; refs && i < t->nstacks; i++)
		if (t->stacks[i].kind == TRACE_STACK_SAMPLE) {
			refs[n].ts = t->stacks[i].ts;
			refs[n].tid = t->stacks[i].tid;
			refs[n].stack = (uint32_t)i;
			n++;
		}
	if (refs)
		qsort(refs, n, sizeof *refs, ref_cmp);
	for (i = 0; refs && i < w.n && rc == 0; i++) {
		struct trace_stack s;
		long k;

		if (w.v[i].ts < from_ts)
			continue; /* before a dump's first step: left out */
		key.ts = w.v[i].ref_ts;
		key.tid = w.v[i].tid;
		hit = bsearch(&key, refs, n, sizeof *refs, ref_cmp);
		if (!hit) {
			(*lost)++; /* the sample it repeats was not recorded */
			continue;
		}
		s = t->stacks[hit->stack];
		s.ts = w.v[i].ts;
		s.weight = w.v[i].weight;
		k = trace_add_stack(t, &s, NULL, 0, 1);
		if (k < 0) {
			rc = -1;
			break;
		}
		/* The same frames: the stacks' frame lists are never changed
		 * in place (a merge gives a stack a new list). */
		t->stacks[k].first = t->stacks[hit->stack].first;
		t->stacks[k].depth = t->stacks[hit->stack].depth;
	}
	if (!w.n || !n)
		*lost += w.n;
	if (w.n)
		log_msg(LOG_DEBUG, "wall clock: %zu samples of waiting threads taken "
			"without a signal", w.n);
	free(refs);
	free(w.v);
	return rc;
}

void wallclock_fini(void)
{
	size_t i;

	pthread_mutex_lock(&wc.lock);
	for (i = 0; i < WALL_WINDOWS; i++) {
		free(wc.w[i].v);
		memset(&wc.w[i], 0, sizeof wc.w[i]);
	}
	pthread_mutex_unlock(&wc.lock);
}

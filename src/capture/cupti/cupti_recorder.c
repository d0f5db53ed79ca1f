/*
 * cupti_recorder — the flight recorder's part of GPU capture
 * (capture_recorder_ops, cupti_internal.h): records go into the
 * recorder's ring between windows, and a dump's collect converts them.
 */
#include "cupti_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../source.h"
#include "../../common/clock.h"
#include "../../common/grow.h"
#include "../../common/hash.h"
#include "../../common/log.h"
#include "../../common/salvfile.h"
#include "../../common/evformat.h"
#include "../../util/htab.h"

/* The source's state (cupti_internal.h), by the name every file of the
 * source uses. */
static struct cupti_state *const cu = &cupti_cu;

/* Between windows, with prof.recorder{} on, CUPTI stays enabled and what it
 * delivers goes into the recorder's ring (docs/recorder.md, "GPU work"):
 *
 *   cu_recorder (cupti.c)  a segment opened: kinds on, completed buffers copied
 *                    into the ring (rec_copy); 0: off again (a window
 *                    opens, the process ends).
 *   cupti_rec_buffer  CUPTI's thread: appends each record of a completed
 *                    buffer to the open segment (EVBUF_CUPTI), then gives
 *                    the buffer back; while a closed window waits for its
 *                    collect, or a dump was taken and not yet collected,
 *                    the buffer goes on the done list too, as in a window.
 *   cupti_rec_dump_taken  a dump took its segments (before they close): later
 *                    buffers are its too, from the done list.
 *   cupti_rec_collect  a dump: converts the records its segments hold
 *                    (trace.raw), those of the done list with what a flush
 *                    delivers now, and those a window's collect kept past
 *                    its end (cu->carry), each once (the same record can
 *                    come two ways), clipped to the dump's span as a
 *                    window's are.
 */

/* Whether the flight recorder keeps GPU work between windows (on, and not
 * prof.recorder{ cuda = false }). Any thread (the policy is fixed). */
bool cupti_rec_keeps_gpu(void)
{
	return cu->h->cfg->recorder.enabled && cu->h->cfg->recorder.cuda;
}

/* Keeps a copy of a DEVICE record: CUPTI writes it once, when the kind
 * is enabled, and the segment that holds it goes long before most dumps.
 * Takes the pool's lock. */
static void rec_keep_device(const CUpti_ActivityDevice5 *d)
{
	struct cupti_pool *p = &cu->pool;
	uint32_t i;

	pthread_mutex_lock(&p->lock);
	for (i = 0; i < p->ndevrec; i++)
		if (p->devrec[i].id == d->id)
			break;
	if (i < CUPTI_REC_DEVICES) {
		memcpy(&p->devrec[i], d, sizeof *d);
		if (i == p->ndevrec)
			p->ndevrec++;
	}
	pthread_mutex_unlock(&p->lock);
}

/* Keeps in the salvage file the names record `r` refers to by pointer
 * or callback id (a kernel's name, an API call's, a device and its
 * name), the first time each is seen, so that `prof salvage` can name
 * the records a dead process left in its ring. CUPTI's thread (or the
 * host thread's flush); no lock held. */
static void rec_salvage_names(const CUpti_Activity *r, size_t size)
{
	const char *name = NULL;

	if (!cu->h->salvage_gpu)
		return;
	switch (r->kind) {
	case CUPTI_ACTIVITY_KIND_KERNEL:
	case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
		const CUpti_ActivityKernel10 *k = (const void *)r;

		if (k->name && !cupti_names_seen(SALV_GPU_KERNEL, (uintptr_t)k->name))
			cu->h->salvage_gpu(SALV_GPU_KERNEL, (uintptr_t)k->name, NULL, 0,
					  k->name);
		break;
	}
	case CUPTI_ACTIVITY_KIND_RUNTIME:
	case CUPTI_ACTIVITY_KIND_DRIVER: {
		const CUpti_ActivityAPI *a = (const void *)r;
		bool drv = r->kind == CUPTI_ACTIVITY_KIND_DRIVER;
		uint64_t key = (uint64_t)drv << 32 | a->cbid;

		if (cupti_names_seen(SALV_GPU_API, key))
			break;
		if (cu->fn.GetCallbackName(drv ? CUPTI_CB_DOMAIN_DRIVER_API
					  : CUPTI_CB_DOMAIN_RUNTIME_API, a->cbid,
					  &name) == CUPTI_SUCCESS && name)
			cu->h->salvage_gpu(SALV_GPU_API, key, NULL, 0, name);
		break;
	}
	case CUPTI_ACTIVITY_KIND_DEVICE: {
		const CUpti_ActivityDevice5 *d = (const void *)r;

		if (!cupti_names_seen(SALV_GPU_DEVICE, d->id))
			cu->h->salvage_gpu(SALV_GPU_DEVICE, d->id, r, size, d->name);
		break;
	}
	default:
		break;
	}
}

/* Appends every record of buffer[0..valid) to the open segment. CUPTI's
 * thread (or the host thread's flush); no lock held. */
static void rec_append(uint8_t *buffer, size_t valid, int64_t now)
{
	CUpti_Activity *r = NULL;

	while (cu->fn.ActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) {
		size_t size = cupti_record_size(r->kind);

		if (!size || size > EVBUF_NAME_MAX)
			continue; /* a kind profhost does not read */
		if (r->kind == CUPTI_ACTIVITY_KIND_DEVICE)
			rec_keep_device((const CUpti_ActivityDevice5 *)(const void *)r);
		rec_salvage_names(r, size);
		/* Dropped and counted by the ring when it is full. */
		cu->h->shim->evbuf_append_raw(EVBUF_CUPTI, now, r, (uint32_t)size, 0, 0);
	}
}

/* cupti_buf_completed's recorder path: true when the buffer was copied into the
 * ring and given back; false when cupti_buf_completed puts it on the done list
 * as usual (the recorder is off, a window's collect or a dump needs it;
 * its records are in the ring all the same). CUPTI's thread; takes the
 * pool's lock. */
bool cupti_rec_buffer(uint8_t *buffer, size_t valid)
{
	struct cupti_pool *p = &cu->pool;
	size_t off;

	if (!atomic_load_explicit(&cu->rec_copy, memory_order_acquire) || !p->base ||
	    buffer < p->base ||
	    (off = (size_t)(buffer - p->base)) >= (size_t)p->nbuf * p->buf_size)
		return false;
	if (valid > p->buf_size)
		valid = p->buf_size;
	rec_append(buffer, valid, clock_now_ns());
	/* After the appends: a dump taken before this load gets the buffer
	 * from the done list; one taken after holds the records in its
	 * segments (cupti_rec_dump_taken comes before they close). */
	pthread_mutex_lock(&p->lock);
	if (atomic_load(&cu->pending_gen) || atomic_load(&cu->dumping)) {
		pthread_mutex_unlock(&p->lock);
		return false;
	}
	p->free_idx[p->nfree++] = (uint32_t)(off / p->buf_size);
	pthread_mutex_unlock(&p->lock);
	return true;
}

/* capture_recorder_ops.dump_taken: a recorder dump is taking its segments, before
 * they close (stepping thread or the dumping thread, window lock held):
 * buffers completed from now on stay on the done list for its collect. */
void cupti_rec_dump_taken(void)
{
	atomic_fetch_add(&cu->dumping, 1);
}

/* capture_recorder_ops.dump_dropped: a dump cupti_rec_dump_taken counted will not be
 * collected (memory ran out). Its count goes, as its collect would take
 * it, so completed buffers go back to CUPTI again once no other dump or
 * window waits for them (what the done list holds goes at the next
 * collect). Window lock held or the host thread; takes the pool's lock. */
void cupti_rec_dump_dropped(void)
{
	pthread_mutex_lock(&cu->pool.lock);
	if (atomic_load(&cu->dumping) > 0)
		atomic_fetch_sub(&cu->dumping, 1);
	pthread_mutex_unlock(&cu->pool.lock);
}

/* capture_recorder_ops.rotated: host thread; takes cu->lock. CUPTI hands
 * a buffer over only when it is full: with the default buffers the last
 * steps' GPU work would sit in CUPTI's memory, out of the ring and the
 * salvage file, when the process is killed. A flush of the completed
 * records (not forced: work in flight keeps its record) puts them in the
 * open segment (cupti_rec_buffer), so a SIGKILL loses about a segment's worth. */
void cupti_rec_rotated(void)
{
	bool flush;

	pthread_mutex_lock(&cu->flush_lock);
	pthread_mutex_lock(&cu->lock);
	flush = cu->state == CU_READY && cu->rec_want && cu->nkinds;
	pthread_mutex_unlock(&cu->lock);
	if (flush)
		cu->fn.ActivityFlushAll(0);
	pthread_mutex_unlock(&cu->flush_lock);
}

/* capture_recorder_ops.rotated_wanted: cupti_rec_rotated would flush
 * (CUPTI is ready, the recorder keeps GPU work, kinds are on: rec_copy is
 * set exactly then). Stepping thread, lock-free. */
int cupti_rec_rotated_wanted(void)
{
	return atomic_load_explicit(&cu->rec_copy, memory_order_relaxed);
}

/* The records a dump converts, each once. */
struct rec_set {
	const CUpti_Activity **r;
	bool *carried;               /* it came from cu->carry */
	size_t n, cap, ccap;
	uint32_t *slots;             /* htab.h's, over r[] by content */
	size_t nslots;
};

/* The hash of a record's bytes. */
static uint64_t rec_hash(const CUpti_Activity *r)
{
	return hash_fnv64(HASH_FNV64_SEED, r, cupti_record_size(r->kind));
}

static uint64_t rec_set_hash(const void *ctx, size_t i)
{
	return rec_hash(((const struct rec_set *)ctx)->r[i]);
}

/* Adds `r` unless an identical record is in the set already: the same
 * record can reach a dump twice, copied into its segments and through a
 * window's done list (kept in cu->carry). -1: out of memory. */
static int rec_set_add(struct rec_set *s, const CUpti_Activity *r, bool carried)
{
	size_t size = cupti_record_size(r->kind), k;
	const CUpti_Activity **nr;
	bool *nc;

	if (!size)
		return 0;
	if (htab_full(s->n, s->nslots) &&
	    htab_rebuild(&s->slots, &s->nslots, s->nslots ? 2 * s->nslots : 4096, 0,
			 s->n, rec_set_hash, s) != 0)
		return -1;
	for (k = htab_first(rec_hash(r), s->nslots); s->slots[k]; k = htab_next(k, s->nslots)) {
		const CUpti_Activity *o = s->r[s->slots[k] - 1];

		if (o->kind == r->kind && memcmp(o, r, size) == 0)
			return 0; /* a copy */
	}
	nr = grow_array(s->r, &s->cap, s->n + 1, sizeof *nr, 1024);
	if (!nr)
		return -1;
	s->r = nr;
	nc = grow_array(s->carried, &s->ccap, s->n + 1, sizeof *nc, 1024);
	if (!nc)
		return -1;
	s->carried = nc;
	s->slots[k] = (uint32_t)(s->n + 1);
	s->r[s->n] = r;
	s->carried[s->n++] = carried;
	return 0;
}

/* gather_one's argument: the set, whether the records come from
 * cu->carry, and the first failure (then nothing more is added). */
struct gather_ctx {
	struct rec_set *s;
	bool carried;
	int rc;
};

static void gather_one(const CUpti_Activity *r, void *arg)
{
	struct gather_ctx *g = arg;

	if (g->rc == 0)
		g->rc = rec_set_add(g->s, r, g->carried);
}

/* Gathers the dump's records: the EVBUF_CUPTI records of `t` (its
 * segments), those of the buffers bufs[0..n), and those kept in cu->carry
 * (delivered through a window's done list, maybe after the dump took its
 * segments), each once. 0, or -1 when memory ran out (the set holds what
 * fit). Host thread. */
static int rec_gather(struct rec_set *s, const struct trace *t,
		      const struct cupti_done *bufs, uint32_t n)
{
	struct gather_ctx g = { s, false, 0 };
	const struct trace_raw *r;
	size_t off = 0;

	while ((r = trace_raw_next(t, &off)) != NULL) {
		const CUpti_Activity *a = (const void *)(r + 1);

		if (r->kind == EVBUF_CUPTI && r->len >= sizeof *a &&
		    r->len == cupti_record_size(a->kind))
			gather_one(a, &g);
	}
	cupti_each_done(bufs, n, gather_one, &g);
	g.carried = true;
	cupti_each_carried(gather_one, &g);
	return g.rc;
}

static void rec_set_free(struct rec_set *s)
{
	free(s->r);
	free(s->carried);
	free(s->slots);
	memset(s, 0, sizeof *s);
}

/* capture_ops.collect of a recorder dump: host thread. Unless a window
 * records or waits for its collect (the done list is its), flushes CUPTI
 * (completed buffers only: the program goes on) and takes the done list;
 * converts those records, those of the dump's segments and those kept in
 * cu->carry, each once (rec_gather). What lies after the dump's end is
 * kept in cu->carry, for a later dump or a window. */
int cupti_rec_collect(const struct capture_window *job, struct trace *t,
		       struct err *e)
{
	struct cupti_conv c;
	struct cupti_conv_opts o;
	struct cupti_done *bufs;
	CUpti_ActivityDevice5 devs[CUPTI_REC_DEVICES];
	struct rec_set set = { 0 };
	struct cupti_carry next = { 0 };
	uint32_t n = 0, ndevs, i;
	size_t k, dropped = 0;
	bool ready, flush, window;

	pthread_mutex_lock(&cu->flush_lock);
	pthread_mutex_lock(&cu->lock);
	ready = cu->state == CU_READY && cu->nkinds;
	flush = ready && cu->want != CU_WANT_RECORD && !atomic_load(&cu->pending_gen);
	pthread_mutex_unlock(&cu->lock);
	if (flush) {
		cu->fn.ActivityFlushAll(0);
		cu->fn.ActivityGetNumDroppedRecords(NULL, 0, &dropped);
	}
	bufs = flush ? malloc((size_t)cu->pool.nbuf * sizeof *bufs) : NULL;
	pthread_mutex_lock(&cu->pool.lock);
	if (flush) {
		for (i = 0; i < cu->pool.ndone; i++)
			if (bufs)
				bufs[n++] = cu->pool.done[i];
			else /* no memory: given back unread */
				cu->pool.free_idx[cu->pool.nfree++] = cu->pool.done[i].idx;
		cu->pool.ndone = 0;
	}
	if (atomic_load(&cu->dumping) > 0)
		atomic_fetch_sub(&cu->dumping, 1);
	ndevs = cu->pool.ndevrec;
	memcpy(devs, cu->pool.devrec, ndevs * sizeof *devs);
	pthread_mutex_unlock(&cu->pool.lock);
	pthread_mutex_unlock(&cu->flush_lock);
	if (!ready) {
		free(bufs);
		return 0;
	}
	if (!cu->devices.n && !ndevs && !cu->devices_asked)
		cupti_devices_from_driver();

	/* A window opened (or closed) meanwhile: cu->carry is the window's
	 * too, records are only added to it. Else it is rebuilt. */
	pthread_mutex_lock(&cu->lock);
	window = cu->want == CU_WANT_RECORD || atomic_load(&cu->pending_gen);
	pthread_mutex_unlock(&cu->lock);
	if (window && !cu->carry) {
		cu->capcarry = (size_t)cu->pool.nbuf * cu->pool.buf_size;
		cu->carry = malloc(cu->capcarry);
		cu->ncarry = 0;
		if (!cu->carry)
			cu->capcarry = 0;
	} else if (!window) {
		next.cap = (size_t)cu->pool.nbuf * cu->pool.buf_size;
		next.buf = malloc(next.cap);
		if (!next.buf)
			next.cap = 0;
	}

	memset(&o, 0, sizeof o);
	o.start = job->start_ts;
	o.end = job->end_ts;
	o.pid = t->meta.pid;
	o.show = cu->show;
	o.api_name = cupti_api_name;
	o.devices = &cu->devices;
	o.corr_hint = cu->corr_hint;
	o.recorder = true;
	if (rec_gather(&set, t, bufs, n) != 0)
		t->oom = 1;
	if (cupti_conv_init(&c, t, &o) == 0) {
		for (i = 0; i < ndevs; i++)
			cupti_conv_scan(&c, (const CUpti_Activity *)(const void *)&devs[i]);
		for (k = 0; k < set.n; k++)
			cupti_conv_scan(&c, set.r[k]);
		for (k = 0; k < set.n; k++) {
			if (cupti_conv_add(&c, set.r[k]) != CUPTI_ROUTE_LATER)
				continue;
			if (!window)
				cupti_carry_add(next.buf, &next.n, next.cap, set.r[k]);
			else if (!set.carried[k])
				cupti_carry_add(cu->carry, &cu->ncarry, cu->capcarry, set.r[k]);
		}
		cupti_conv_finish(&c);
	}
	rec_set_free(&set);
	if (!window) {
		free(cu->carry);
		cu->carry = next.buf;
		cu->ncarry = next.n;
		cu->capcarry = next.cap;
	}

	cupti_pool_give_back(bufs, n);

	t->counters.gpu_dropped += (uint64_t)dropped + c.zero_ts;
	log_msg(LOG_DEBUG, "recorder dump %u: %llu GPU records -> events", job->window,
		(unsigned long long)c.records);
	if (dropped || c.zero_ts)
		log_msg(LOG_WARN, "recorder dump %u: %llu GPU records dropped (%llu: the "
			"GPU record pool of %zu MiB was full, raise prof.capture{buffer_mb = "
			"...}; %llu: no timestamps)", job->window,
			(unsigned long long)dropped + c.zero_ts, (unsigned long long)dropped,
			cu->pool_bytes >> 20, (unsigned long long)c.zero_ts);
	cupti_conv_free(&c);
	if (t->oom)
		return err_set(e, "out of memory converting the GPU records of recorder "
			       "dump %u", job->window);
	return 0;
}

/* A window's collect ended: its buffers no longer need the done list. Host
 * thread. */
void cupti_rec_window_collected(uint64_t gen)
{
	uint64_t g = gen;

	atomic_compare_exchange_strong(&cu->pending_gen, &g, 0);
}


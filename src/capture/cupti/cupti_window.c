/*
 * cupti_window — a window's collect (cupti_internal.h): flushes CUPTI,
 * takes the completed buffers, converts their records with those kept
 * from the last window (cupti_records.c), keeps those of a later window,
 * gives the buffers back, and stops CUPTI when nothing lies ahead. Host
 * thread.
 */
#include "cupti_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../source.h"
#include "../../common/log.h"

/* The source's state (cupti_internal.h), by the name every file of the
 * source uses. */
static struct cupti_state *const cu = &cupti_cu;

/* Calls fn for every record of a window: those kept from the last one,
 * then those of the completed buffers. */
static void each_record(const struct cupti_done *done, uint32_t ndone, cupti_record_fn fn, void *arg)
{
	cupti_each_carried(fn, arg);
	cupti_each_done(done, ndone, fn, arg);
}

static void scan_one(const CUpti_Activity *r, void *arg)
{
	cupti_conv_scan(arg, r);
}

/* add_one's argument: the converter, and where later records go (NULL:
 * counted as dropped). */
struct add_ctx {
	struct cupti_conv *c;
	struct cupti_carry *o;
};

static void add_one(const CUpti_Activity *r, void *arg)
{
	struct add_ctx *a = arg;

	if (cupti_conv_add(a->c, r) == CUPTI_ROUTE_LATER) {
		if (a->o)
			cupti_carry_add(a->o->buf, &a->o->n, a->o->cap, r);
		else
			cu->carry_dropped++;
	}
}

/* A window's collect: converts its records (and those kept from the last
 * one); stops CUPTI when no window lies ahead and the recorder keeps no
 * GPU work. Host thread. */
int cupti_window_collect(const struct capture_window *job, struct trace *t,
			 struct err *e, bool *stop)
{
	struct cupti_conv c;
	struct cupti_conv_opts o;
	struct cupti_done *done = NULL;
	struct cupti_carry next = { 0 };
	uint32_t ndone, flag;
	size_t dropped = 0;
	uint64_t lost;
	bool last;

	(void)e;
	pthread_mutex_lock(&cu->flush_lock);
	pthread_mutex_lock(&cu->lock);
	*stop = false;
	if (cu->state != CU_READY) {
		pthread_mutex_unlock(&cu->lock);
		pthread_mutex_unlock(&cu->flush_lock);
		return 0;
	}
	/* Everything CUPTI holds, incomplete buffers included; but while the
	 * next window records, a forced flush would cut its GPU work short
	 * (records of unfinished work lose their timestamps): then only the
	 * complete buffers, and this window's stragglers are counted late.
	 * The same while the flight recorder records: its steps' GPU work
	 * (a dump may hold it) is not cut short either. */
	flag = cu->want == CU_WANT_RECORD || cu->rec_want ? 0 : CUPTI_ACTIVITY_FLAG_FLUSH_FORCED;
	pthread_mutex_unlock(&cu->lock);

	cu->fn.ActivityFlushAll(flag);
	cu->fn.ActivityGetNumDroppedRecords(NULL, 0, &dropped);
	if (!cu->devices.n && !cu->devices_asked)
		cupti_devices_from_driver();
	pthread_mutex_lock(&cu->pool.lock);
	ndone = cu->pool.ndone;
	done = malloc((ndone + 1) * sizeof *done);
	if (done)
		memcpy(done, cu->pool.done, ndone * sizeof *done);
	else
		ndone = 0; /* no memory: the buffers are given back unread */
	cu->pool.ndone = 0;
	pthread_mutex_unlock(&cu->pool.lock);
	pthread_mutex_unlock(&cu->flush_lock);

	memset(&o, 0, sizeof o);
	o.start = job->start_ts;
	o.end = job->end_ts;
	o.prev_start = cu->prev_start;
	o.prev_end = cu->prev_end;
	o.pid = t->meta.pid;
	o.show = cu->show;
	o.api_name = cupti_api_name;
	o.devices = &cu->devices;
	o.corr_hint = cu->corr_hint;
	o.recorder = cupti_rec_keeps_gpu();
	next.cap = (size_t)cu->pool.nbuf * cu->pool.buf_size;
	next.buf = malloc(next.cap);
	cu->capcarry = next.buf ? next.cap : 0;
	cu->carry_dropped = 0;
	if (cupti_conv_init(&c, t, &o) == 0) {
		struct add_ctx a = { &c, next.buf ? &next : NULL };

		each_record(done, ndone, scan_one, &c);
		each_record(done, ndone, add_one, &a);
		cupti_conv_finish(&c);
	}
	free(cu->carry);
	cu->carry = next.buf;
	cu->ncarry = next.n;

	cupti_pool_give_back(done, ndone);

	cu->corr_hint = c.map_n;
	cu->prev_start = job->start_ts;
	cu->prev_end = job->end_ts;
	lost = (uint64_t)dropped + c.zero_ts + c.late + cu->carry_dropped;
	t->counters.gpu_dropped += lost;
	log_msg(LOG_DEBUG, "window %u: %llu GPU records -> events, %llu kept for the "
		"next window", job->window, (unsigned long long)c.records,
		(unsigned long long)next.n);
	if (lost)
		log_msg(LOG_WARN, "window %u: %llu GPU records dropped (%llu: the GPU record "
			"pool of %zu MiB was full, raise prof.capture{buffer_mb = ...}; %llu: "
			"no timestamps; %llu: came after the previous window was written; "
			"%llu: no room to keep past the window's end)", job->window,
			(unsigned long long)lost, (unsigned long long)dropped,
			cu->pool_bytes >> 20, (unsigned long long)c.zero_ts,
			(unsigned long long)c.late, (unsigned long long)cu->carry_dropped);
	cupti_conv_free(&c);
	pthread_mutex_lock(&cu->lock);
	last = job->gen == cu->last_gen; /* no later window waits to be written */
	pthread_mutex_unlock(&cu->lock);
	*stop = last && !cu->steps_from_cuda && !cupti_rec_keeps_gpu() &&
		!cu->h->ahead(cu->h->ctx);
	return 0;
}

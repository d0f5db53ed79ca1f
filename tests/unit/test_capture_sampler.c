/*
 * test_capture_sampler — the CPU sampler (src/capture/cpu/sampler.c) as a
 * capture source against a fake host: started by init from the
 * configuration it is given, armed by window_open, stopped by
 * window_close and fini; samples land through the shim table's
 * evbuf_append_raw (here the real event buffers), and a thread the host
 * calls its own (capture_host.own_thread) is never sampled.
 */
#include "check.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "capture/cpu/sampler.h"
#include "shim/evbuf.h"
#include "capture/source.h"
#include "common/log.h"

#define CPU_WANTED_NS 150000000LL  /* each worker burns this much CPU */
#define WALL_LIMIT_S 20            /* ... or gives up after this long */

/* ---- the fake host */

static _Atomic int32_t host_tid;     /* the thread playing the host's own */
static _Atomic int own_asked;        /* own_thread() said yes */

static bool fake_own_thread(void *ctx, int32_t tid)
{
	(void)ctx;
	if (tid != atomic_load(&host_tid))
		return false;
	atomic_fetch_add(&own_asked, 1);
	return true;
}

static const struct shim_api fake_shim = {
	.version = SHIM_API_VERSION,
	.evbuf_open = evbuf_open,
	.evbuf_close = evbuf_close,
	.evbuf_drain = evbuf_drain,
	.evbuf_release = evbuf_release,
	.evbuf_append_raw = evbuf_append_raw,
};

/* ---- workers */

struct worker {
	pthread_t thread;
	_Atomic int32_t tid;
	_Atomic int go, done;
	volatile double sink;
};

static int64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Publishes its tid, waits for `go`, then burns CPU_WANTED_NS of CPU and
 * says so. It never exits: a sampled thread's exit runs libunwind's
 * per-thread destructor, which ThreadSanitizer's thread teardown does not
 * survive (the test runs in that build too); the process's exit ends it. */
static void *work(void *arg)
{
	struct worker *w = arg;
	time_t until;
	double x = 1.0;
	int64_t start;
	long i;

	atomic_store(&w->tid, (int32_t)syscall(SYS_gettid));
	while (!atomic_load(&w->go))
		usleep(1000);
	start = thread_cpu_ns();
	until = time(NULL) + WALL_LIMIT_S;
	while (thread_cpu_ns() - start < CPU_WANTED_NS && time(NULL) < until)
		for (i = 0; i < 100000; i++)
			x = x * 1.0000001 + 0.5;
	w->sink = x;
	atomic_store(&w->done, 1);
	for (;;)
		pause();
	return NULL;
}

/* ---- counting what was recorded */

struct counts {
	int32_t worker_tid, host_tid;
	uint64_t worker, host;
};

static void count_samples(void *ctx, int32_t tid, const char *name,
			  const struct evbuf_rec *r)
{
	struct counts *c = ctx;

	(void)name;
	if (r->kind != EVBUF_SAMPLE)
		return;
	if (tid == c->worker_tid)
		c->worker++;
	else if (tid == c->host_tid)
		c->host++;
}

int main(void)
{
	struct policy_config cfg;
	struct capture_host ch;
	struct worker w[2];
	struct counts c = { 0 };
	struct evbuf_stats st;
	struct err e;
	uint64_t gen;
	int i;

	log_set_level(LOG_WARN);
	memset(&cfg, 0, sizeof cfg);
	cfg.capture.cpu_hz = 997;
	cfg.capture.cpu_depth = 64;
	memset(&ch, 0, sizeof ch);
	ch.cfg = &cfg;
	ch.shim = &fake_shim;
	ch.pid = getpid();
	ch.own_thread = fake_own_thread;
	memset(w, 0, sizeof w);
	for (i = 0; i < 2; i++)
		CHECK_EQ_INT(pthread_create(&w[i].thread, NULL, work, &w[i]), 0);
	for (i = 0; i < 2; i++)
		while (!atomic_load(&w[i].tid))
			usleep(1000);
	atomic_store(&host_tid, atomic_load(&w[1].tid));

	CHECK_EQ_INT(sampler_capture.init(&ch, &e), 0);
	gen = evbuf_open((size_t)16 << 20);
	CHECK(gen != 0);
	sampler_capture.window_open(gen);
	for (i = 0; i < 2; i++)
		atomic_store(&w[i].go, 1);
	for (i = 0; i < 2; i++)
		while (!atomic_load(&w[i].done))
			usleep(1000);
	evbuf_close();
	sampler_capture.window_close(gen);
	c.worker_tid = atomic_load(&w[0].tid);
	c.host_tid = atomic_load(&w[1].tid);
	CHECK_EQ_INT(evbuf_drain(gen, count_samples, &c, &st), 0);
	evbuf_release(gen);
	sampler_capture.fini();

	/* The worker was sampled; the host's own thread, asked about, never. */
	if (!c.worker)
		fprintf(stderr, "no samples of the worker thread\n");
	CHECK(c.worker > 0);
	CHECK_EQ_INT(c.host, 0);
	CHECK(atomic_load(&own_asked) > 0);
	return check_done();
}

/*
 * test_window — the host's step side (src/host/window.c) against fakes of
 * everything around it: the shim's table (event buffers, NVTX arming), the
 * host thread (start, submit), the window's listeners (the capture
 * sources, the job watcher),
 * the policy's hooks and host_fail. Drives step sequences, capture_now,
 * the NVTX capture range and the exit, and checks what a user would see:
 * which windows are written with which steps and reasons, what the
 * sources and hooks are told, and when.
 */
#include "check.h"

#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "host/host.h"
#include "common/clock.h"

/* ---- a log of what window.c did, one word per call */

static char calls[4096];

static void note(const char *fmt, ...)
{
	size_t n = strlen(calls);
	va_list ap;

	if (n)
		calls[n++] = ' ';
	va_start(ap, fmt);
	vsnprintf(calls + n, sizeof calls - n, fmt, ap);
	va_end(ap);
}

/* ---- the fake shim */

static uint64_t next_gen = 1;
static int armed = -1, replays, prepares;

static uint64_t fake_evbuf_open(size_t bytes)
{
	(void)bytes;
	return next_gen++;
}

static uint64_t fake_evbuf_open_lead(size_t bytes, size_t lead)
{
	(void)lead;
	return fake_evbuf_open(bytes);
}

static uint64_t fake_evbuf_close(void)
{
	return 0;
}

static uint64_t fake_evbuf_rotate(size_t bytes, uint64_t *closed)
{
	(void)bytes;
	*closed = next_gen - 1;
	return next_gen++;
}

static void fake_evbuf_prepare(size_t bytes)
{
	(void)bytes;
	prepares++;
}

static void fake_evbuf_release(uint64_t gen)
{
	(void)gen;
}

static void fake_nvtx_arm(int on)
{
	armed = on;
}

static void fake_nvtx_replay(void)
{
	replays++;
}

static const struct shim_api fake_shim = {
	.version = SHIM_API_VERSION,
	.evbuf_open = fake_evbuf_open,
	.evbuf_open_lead = fake_evbuf_open_lead,
	.evbuf_close = fake_evbuf_close,
	.evbuf_rotate = fake_evbuf_rotate,
	.evbuf_prepare = fake_evbuf_prepare,
	.evbuf_release = fake_evbuf_release,
	.nvtx_arm = fake_nvtx_arm,
	.nvtx_replay = fake_nvtx_replay,
};

/* ---- the fake host thread and failure report */

#define JOBS_MAX 64

static struct host_job *jobs[JOBS_MAX];
static size_t njobs;
static int thread_fails; /* hostthread_start fails while > 0 */
static size_t queue_full;  /* what hostthread_full answers */
static int failures;
static char last_failure[sizeof ((struct err *)0)->msg];

int hostthread_start(struct host *h, struct err *e)
{
	(void)h;
	if (thread_fails > 0) {
		thread_fails--;
		return err_set(e, "cannot start the host thread (test)");
	}
	return 0;
}

size_t hostthread_full(struct host *h)
{
	(void)h;
	return queue_full;
}

void hostthread_submit(struct host *h, struct host_job *job)
{
	(void)h;
	note("submit%u", job->window);
	if (njobs < JOBS_MAX)
		jobs[njobs++] = job;
	else
		free(job->steps), free(job);
}

void host_fail(struct host *h, const struct err *e)
{
	(void)h;
	failures++;
	snprintf(last_failure, sizeof last_failure, "%s", e->msg);
}

/* ---- the fake capture sources: a window listener (window_listen) */

static void fake_warmup(void *ctx)
{
	(void)ctx;
	note("warmup");
}

static void fake_open(void *ctx, uint64_t gen)
{
	(void)ctx;
	note("open%llu", (unsigned long long)gen);
}

static void fake_close(void *ctx, uint64_t gen)
{
	(void)ctx;
	note("close%llu", (unsigned long long)gen);
}

static void fake_recorder(void *ctx, uint64_t gen)
{
	(void)ctx;
	note("rec%llu", (unsigned long long)gen);
}

/* What the sources' listener answers to rotated_wanted: a source (CUPTI
 * with the recorder keeping GPU work) has something to hand over at a
 * rotation. */
static bool rotated_wanted = true;

static bool fake_rotated_wanted(void *ctx)
{
	(void)ctx;
	return rotated_wanted;
}

/* Counted, not logged: not part of the sequences most tests check. */
static int dumps_taken, dumps_dropped;

static void fake_dump_taken(void *ctx)
{
	(void)ctx;
	dumps_taken++;
}

static void fake_dump_dropped(void *ctx)
{
	(void)ctx;
	dumps_dropped++;
}

static void fake_step(void *ctx, uint64_t step, bool recording, bool next_active)
{
	(void)ctx;
	/* step N, R when recorded, + when the next step warms up or records */
	note("step%llu%s%s", (unsigned long long)step, recording ? "R" : "",
	     next_active ? "+" : "");
}

static const struct window_listener fake_sources = {
	.warmup = fake_warmup,
	.open = fake_open,
	.close = fake_close,
	.step = fake_step,
	.recorder = fake_recorder,
	.dump_taken = fake_dump_taken,
	.dump_dropped = fake_dump_dropped,
	.rotated_wanted = fake_rotated_wanted,
};

/* ---- out-of-memory injection: the test links with -Wl,--wrap=malloc
 * and --wrap=calloc, so every allocation of window.c and the recorder
 * comes here; the `oom_after`-th from now (1: the next) fails, then all
 * succeed again (0: none fails). */

static int oom_after;

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);

/* Whether this allocation is the one to fail. */
static int oom_now(void)
{
	return oom_after > 0 && --oom_after == 0;
}

void *__wrap_malloc(size_t n)
{
	return oom_now() ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size)
{
	return oom_now() ? NULL : __real_calloc(n, size);
}

/* ---- the fake job watcher: what window.c publishes for the job (a
 * second listener) */

static struct jobfile pubs[16];
static int npubs;

static void fake_publish(void *ctx, const struct jobfile *f)
{
	(void)ctx;
	if (npubs < 16)
		pubs[npubs++] = *f;
}

static const struct window_listener fake_jobwatch = { .dump = fake_publish };

/* ---- the fake policy hooks */

static char started_reason[HOST_REASON_MAX];
static uint32_t started_window;
static int window_starts, step_hooks;
static uint64_t last_hook_step;

enum policy_status policy_on_window_start(struct policy *p,
					  const struct policy_window_info *w,
					  struct err *e)
{
	(void)p;
	(void)e;
	window_starts++;
	started_window = w->window;
	snprintf(started_reason, sizeof started_reason, "%s", w->reason);
	return POLICY_OK;
}

enum policy_status policy_on_step(struct policy *p,
				  const struct policy_step_info *info,
				  struct err *e)
{
	(void)p;
	(void)e;
	step_hooks++;
	last_hook_step = info->step;
	return POLICY_OK;
}

/* ---- helpers */

static struct host host;
static struct policy_config cfg;

/* A fresh host over `sc` and the capture range `range` (NULL: none) of
 * `count` instances, at step 0. */
static void start_range(const struct sched_config *sc, const char *range,
			uint32_t count)
{
	char keep_rec[sizeof cfg.recorder];
	struct err e;
	size_t i;

	for (i = 0; i < njobs; i++) {
		free(jobs[i]->steps);
		free(jobs[i]);
	}
	njobs = 0;
	calls[0] = '\0';
	failures = 0;
	window_starts = step_hooks = 0;
	replays = prepares = 0;
	armed = -1;
	next_gen = 1;
	memset(&host, 0, sizeof host);
	memcpy(keep_rec, &cfg.recorder, sizeof keep_rec); /* a test's recorder */
	memset(&cfg, 0, sizeof cfg);
	memcpy(&cfg.recorder, keep_rec, sizeof keep_rec);
	cfg.schedule = *sc;
	cfg.capture.buffer_bytes = 1 << 20;
	cfg.capture_range.nvtx = (char *)range;
	cfg.capture_range.count = count;
	host.cfg = &cfg;
	host.shim = &fake_shim;
	CHECK_EQ_INT(window_listen(&host, &fake_sources, NULL, &e), 0);
	CHECK_EQ_INT(window_listen(&host, &fake_jobwatch, NULL, &e), 0);
	window_init(&host);
}

static void start(const struct sched_config *sc)
{
	start_range(sc, NULL, 0);
}

static void steps(int n)
{
	while (n-- > 0)
		window_step(&host);
}

/* Checks job i: window index, steps first..last (`nsteps` of them ended
 * inside it), reason and ticket. */
static void check_job(size_t i, uint32_t window, uint64_t first, uint64_t last,
		      size_t nsteps, const char *reason, uint64_t ticket)
{
	CHECK(i < njobs);
	if (i >= njobs)
		return;
	CHECK_EQ_INT(jobs[i]->window, window);
	CHECK_EQ_INT(jobs[i]->first, first);
	CHECK_EQ_INT(jobs[i]->last, last);
	CHECK_EQ_STR(jobs[i]->reason, reason);
	CHECK_EQ_INT(jobs[i]->ticket, ticket);
	CHECK_EQ_INT(jobs[i]->nsteps, nsteps);
}

/* ---- the cases */

#define CFG(sf, w, wu, a, c) { (sf), (w), (wu), (a), (c), true, false }

/* wait 1, warm-up 1, active 2, twice: steps 2-3 and 6-7 are written, the
 * sources hear warm-up, open, close and every step in that order. */
static void test_schedule_windows(void)
{
	struct sched_config sc = CFG(0, 1, 1, 2, 2);

	start(&sc);
	CHECK_EQ_STR(calls, "step0+");
	CHECK_EQ_INT(armed, 1); /* step 1 warms up */
	steps(9);
	CHECK_EQ_STR(calls, "step0+ warmup step1+ open1 step2R+ step3R close1 "
		     "step4+ submit0 warmup step5+ open2 step6R+ step7R close2 step8 "
		     "submit1 step9");
	CHECK_EQ_INT(njobs, 2);
	check_job(0, 0, 2, 3, 2, "schedule", 0);
	check_job(1, 1, 6, 7, 2, "schedule", 0);
	CHECK_EQ_INT(jobs[0]->steps[0].step, 2);
	CHECK_EQ_INT(jobs[0]->steps[1].step, 3);
	CHECK_EQ_INT(jobs[0]->gen, 1);
	CHECK_EQ_INT(jobs[1]->gen, 2);
	CHECK_EQ_INT(armed, 0); /* nothing lies ahead */
	CHECK(!window_ahead(&host));
	CHECK_EQ_INT(replays, 2);
	CHECK(prepares >= 2);
}

/* The flight recorder tells the sources each segment it opens (from the
 * start, and at each rotation: a segment of steps/2 = 1 step here), stops
 * them before a window opens and starts them again at the window's end; a
 * dump's job holds the segments they were told of. */
static void test_recorder_tells_sources(void)
{
	struct sched_config sc = { 0 }; /* no schedule */
	struct err e;

	cfg.recorder.enabled = true; /* start() keeps cfg.recorder */
	cfg.recorder.steps = 2;
	cfg.recorder.bytes = 4 << 20;
	cfg.recorder.max_dumps = 10;
	start(&sc);
	CHECK_EQ_STR(calls, "rec1 step0");
	steps(2);
	CHECK_EQ_STR(calls, "rec1 step0 rec2 step1 rec3 step2");
	CHECK_EQ_INT(window_capture_now(&host, 1, "slow", &e), 0);
	steps(2);
	CHECK_EQ_STR(calls, "rec1 step0 rec2 step1 rec3 step2 rec0 open4 step3R "
		     "close4 rec5 step4 submit0");
	steps(2);
	CHECK_EQ_INT(window_dump(&host, 2, "slow", &e), 0);
	CHECK_EQ_INT(njobs, 2);
	CHECK(jobs[1]->dump);
	CHECK_EQ_INT(jobs[1]->first, 4);
	CHECK_EQ_INT(jobs[1]->last, 5);
	CHECK_EQ_INT(jobs[1]->gens[jobs[1]->ngens - 1], 7);
	/* A pool filling: only the recorder's open segment (gen 8 now) is
	 * rotated, inside the running step, with no replay. */
	calls[0] = '\0';
	window_pool_filling(&host, 3);
	CHECK_EQ_STR(calls, "");
	window_pool_filling(&host, 8);
	CHECK_EQ_STR(calls, "rec9");
	CHECK_EQ_INT(host.win.rec.seg[host.win.rec.nseg - 1].first, 6);
	CHECK(host.win.rec.seg[host.win.rec.nseg - 1].mid);
	CHECK(!host.win.rec_replay); /* the host thread cannot replay the
					stepping thread's ranges */
	window_finish(&host, false); /* the process ends: the sources stop */
	CHECK_EQ_STR(strrchr(calls, ' ') + 1, "rec0");
	rec_free(&host.win.rec);
	memset(&cfg.recorder, 0, sizeof cfg.recorder);
}

/* At each rotation the host thread is woken to have the sources hand
 * over what they hold of the closed segment (HOST_WAKE_ROTATED), only
 * when a source has something to hand over: in a loop that keeps no GPU
 * work the wake (a futex call per rotation) is left out (#29). */
static void test_recorder_wakes_host_thread_when_wanted(void)
{
	struct sched_config sc = { 0 };
	int wanted;

	for (wanted = 0; wanted < 2; wanted++) {
		rotated_wanted = wanted;
		cfg.recorder.enabled = true;
		cfg.recorder.steps = 2; /* a rotation at every step */
		cfg.recorder.bytes = 4 << 20;
		cfg.recorder.max_dumps = 10;
		start(&sc);
		atomic_store(&host.ht.wake, 0);
		steps(3);
		CHECK_EQ_STR(calls, "rec1 step0 rec2 step1 rec3 step2 rec4 step3");
		CHECK_EQ_INT((atomic_load(&host.ht.wake) & HOST_WAKE_ROTATED) != 0, wanted);
		window_finish(&host, false);
		rec_free(&host.win.rec);
		memset(&cfg.recorder, 0, sizeof cfg.recorder);
	}
	rotated_wanted = true;
}

/* A dump refused by an out-of-memory failure after the sources were told
 * it was taken (capture_recorder_ops.dump_taken: CUPTI keeps its buffers for that
 * dump's collect) tells them it is over (dump_dropped), whichever
 * allocation fails: each dump taken is collected (a job submitted) or
 * dropped, never left waiting. The caller hears why; the next dump, with
 * memory back, is written. */
static void test_dump_out_of_memory(void)
{
	struct sched_config sc = { 0 }; /* no schedule */
	struct err e;
	int fail_at, refused = 0;

	cfg.recorder.enabled = true;
	cfg.recorder.steps = 2;
	cfg.recorder.bytes = 4 << 20;
	cfg.recorder.max_dumps = 100;
	start(&sc);
	dumps_taken = dumps_dropped = 0;
	for (fail_at = 1; fail_at <= 8; fail_at++) {
		size_t before = njobs;
		int rc;

		steps(1); /* a new complete step: not merged into the last dump */
		oom_after = fail_at;
		rc = window_dump(&host, 2, "slow", &e);
		oom_after = 0;
		if (rc != 0) {
			refused++;
			CHECK_EQ_INT(njobs, before);
			CHECK(strstr(e.msg, "out of memory") != NULL);
		} else {
			CHECK_EQ_INT(njobs, before + 1);
		}
		CHECK_EQ_INT(dumps_taken, dumps_dropped + (int)njobs);
	}
	CHECK(refused >= 2); /* rec_take's copy and dump_job's both fail */
	CHECK(njobs >= 1);   /* memory back: the dump is written */
	CHECK(dumps_taken >= 8);
	window_finish(&host, false);
	rec_free(&host.win.rec);
	memset(&cfg.recorder, 0, sizeof cfg.recorder);
}

/* A dump asked while the host thread's queue is full would be skipped,
 * never written: it is refused, says why, and does not count against
 * max_dumps; once the queue drains, the next one is taken. */
static void test_dump_refused_while_queue_full(void)
{
	struct sched_config sc = { 0 }; /* no schedule */
	struct err e;
	size_t before;

	cfg.recorder.enabled = true;
	cfg.recorder.steps = 2;
	cfg.recorder.bytes = 4 << 20;
	cfg.recorder.max_dumps = 1;
	start(&sc);
	steps(2);
	before = njobs;
	queue_full = 4;
	CHECK_EQ_INT(window_dump(&host, 2, "storm", &e), -1);
	CHECK(strstr(e.msg, "still writing 4 earlier windows or dumps") != NULL);
	CHECK_EQ_INT(njobs, before);
	CHECK_EQ_INT(host.win.rec.dumps, 0);
	queue_full = 0;
	CHECK_EQ_INT(window_dump(&host, 2, "storm", &e), 0);
	CHECK_EQ_INT(njobs, before + 1);
	CHECK(jobs[njobs - 1]->dump);
	CHECK_EQ_INT(jobs[njobs - 1]->window, 0);
	window_finish(&host, false);
	rec_free(&host.win.rec);
	memset(&cfg.recorder, 0, sizeof cfg.recorder);
}

/* The hang watchdog's dump holds the stalled step so far, as its last
 * step, marked partial: right after a window (no complete step held, where
 * prof.dump has nothing to take) that step alone; later the recorder's
 * `steps` before it too. The step goes on in a new segment. A step that
 * ended meanwhile, or a window recording, is said. */
static void test_dump_hang(void)
{
	struct sched_config sc = CFG(0, 1, 0, 1, 1); /* window 0: step 1 */
	struct window_hang_dump d;
	struct host_job *j;
	struct err e;

	cfg.recorder.enabled = true;
	cfg.recorder.steps = 2;
	cfg.recorder.bytes = 4 << 20;
	cfg.recorder.max_dumps = 10;
	start(&sc);
	steps(1);
	CHECK_EQ_INT(window_dump_hang(&host, 1, "hang 0", &d, &e), -1);
	CHECK_EQ_STR(e.msg, "window 0 is recording these steps: its own folder will "
		     "hold them");
	CHECK(d.job == NULL);
	steps(1); /* window 0 closed; step 2 runs, the first after it */
	CHECK_EQ_INT(njobs, 1);
	CHECK_EQ_INT(window_dump(&host, 0, "asked", &e), -1);
	CHECK_EQ_STR(e.msg, "no complete step recorded yet");
	CHECK_EQ_INT(window_dump_hang(&host, 2, "hang 0", &d, &e), 0);
	j = d.job;
	CHECK(j != NULL && j->dump);
	if (!j)
		return;
	CHECK_EQ_INT(d.index, 0);
	CHECK_EQ_INT(d.first, 2);
	CHECK_EQ_INT(d.last, 2);
	CHECK_EQ_INT(j->first, 2);
	CHECK_EQ_INT(j->last, 2);
	CHECK_EQ_STR(j->reason, "hang 0");
	CHECK_EQ_INT(j->nsteps, 1);
	CHECK_EQ_INT(j->steps[0].step, 2);
	CHECK_EQ_INT(j->steps[0].partial, 1);
	CHECK_EQ_INT(j->steps[0].ts, host.win.step_start);
	CHECK(j->ngens >= 1);
	CHECK(host.win.rec.open); /* step 2 goes on in a new segment */
	hostthread_submit(&host, j);

	/* Steps 2-4 end: a hang in step 5 dumps 3-4 and 5 so far. */
	steps(3);
	CHECK_EQ_INT(window_dump_hang(&host, 5, "hang 1", &d, &e), 0);
	j = d.job;
	CHECK(j != NULL);
	if (!j)
		return;
	CHECK_EQ_INT(d.index, 1);
	CHECK_EQ_INT(j->first, 3);
	CHECK_EQ_INT(j->last, 5);
	CHECK_EQ_INT(j->nsteps, 3);
	CHECK_EQ_INT(j->steps[0].partial, 0);
	CHECK_EQ_INT(j->steps[1].step, 4);
	CHECK_EQ_INT(j->steps[2].step, 5);
	CHECK_EQ_INT(j->steps[2].partial, 1);
	hostthread_submit(&host, j);
	/* It ended before the dump was asked: said. */
	steps(1);
	CHECK_EQ_INT(window_dump_hang(&host, 5, "hang 1", &d, &e), -1);
	CHECK_EQ_STR(e.msg, "step 5 ended meanwhile");
	CHECK(d.job == NULL);
	window_finish(&host, false);
	rec_free(&host.win.rec);
	memset(&cfg.recorder, 0, sizeof cfg.recorder);
}

/* prof.recorder{ job = true }: this rank's own dumps are published and
 * named after it; another rank's dump is answered with the same steps
 * from the recorder (waiting while this rank has not reached them, said
 * when it no longer holds them, skipped when its own dump has them),
 * named after that rank, never published; a crash's dump is published,
 * SIGTERM's is not. */
static void test_job_dumps(void)
{
	struct sched_config sc = { 0 }; /* no schedule */
	struct window_job_dump req = { 10, 13, 5, "job dump: rank 5's", false };
	struct host_job *j;
	struct err e;

	cfg.recorder.enabled = true;
	cfg.recorder.job = true;
	cfg.recorder.steps = 8;
	cfg.recorder.bytes = 4 << 20;
	cfg.recorder.max_dumps = 10;
	cfg.recorder.dump_on_crash = true;
	cfg.recorder.dump_on_signal = true;
	npubs = 0;
	start(&sc);
	host.env.rank = 3;
	steps(10); /* steps 0-9 ended; 10 runs */
	CHECK_EQ_INT(window_dump(&host, 3, "slow", &e), 0);
	CHECK_EQ_INT(njobs, 1);
	CHECK_EQ_STR(jobs[0]->suffix, "by-rank3");
	CHECK_EQ_INT(npubs, 1);
	CHECK_EQ_INT(pubs[0].kind, JOBFILE_DUMP);
	CHECK_EQ_INT(pubs[0].first, 7);
	CHECK_EQ_INT(pubs[0].last, 9);
	CHECK(!pubs[0].partial);
	CHECK_EQ_STR(pubs[0].reason, "slow");

	/* rank 5 dumped 10-13; this rank is in step 10: not yet */
	CHECK_EQ_INT(window_dump_job(&host, &req, &e), 1);
	CHECK_EQ_INT(njobs, 1);
	steps(5); /* 10-14 ended; 15 runs */
	CHECK_EQ_INT(window_dump_job(&host, &req, &e), 0);
	CHECK_EQ_INT(njobs, 2);
	j = jobs[1];
	CHECK(j->dump);
	CHECK_EQ_INT(j->first, 10);
	CHECK_EQ_INT(j->last, 13);
	CHECK_EQ_INT(j->nsteps, 4);
	CHECK_EQ_STR(j->suffix, "by-rank5");
	CHECK_EQ_STR(j->reason, "job dump: rank 5's");
	CHECK_EQ_STR(j->note, "");
	CHECK(j->end_ts == j->steps[3].ts + j->steps[3].dur); /* step 14 stays out */
	CHECK_EQ_INT(npubs, 1); /* an answer is not published */
	/* asked again (another rank published the same steps): its dump has them */
	CHECK_EQ_INT(window_dump_job(&host, &req, &e), 2);

	/* asked 12-16 when 15-20 ended: 12-13 are in its earlier dump, 14
	 * was given back with it */
	steps(6);
	req.first = 12;
	req.last = 16;
	CHECK_EQ_INT(window_dump_job(&host, &req, &e), 0);
	j = jobs[njobs - 1];
	CHECK_EQ_INT(j->first, 15);
	CHECK_EQ_INT(j->last, 16);
	CHECK_EQ_STR(j->note, "job dump of steps 12-16: this rank no longer held steps "
		     "12-14 (given back with its earlier dump)");
	/* 30 more steps: 21-23 given back by the rotation, asked: none held
	 * (and the recorder left as it was); 17-20 went with the last dump:
	 * a request for them is done */
	req.first = 18;
	req.last = 19;
	CHECK_EQ_INT(window_dump_job(&host, &req, &e), 2);
	steps(30);
	req.first = 22;
	req.last = 23;
	{
		uint64_t lo, hi, lo0 = 0, hi0 = 0;
		char want[200];

		CHECK(rec_held_span(&host.win.rec, &lo0, &hi0));
		CHECK_EQ_INT(window_dump_job(&host, &req, &e), -1);
		CHECK(rec_held_span(&host.win.rec, &lo, &hi));
		CHECK_EQ_INT(lo, lo0);
		CHECK_EQ_INT(hi, hi0);
		snprintf(want, sizeof want, "it no longer holds any of steps 22-23 (it holds "
			 "steps %llu-%llu: prof.recorder{ steps } keeps the last 8)",
			 (unsigned long long)lo, (unsigned long long)hi);
		CHECK_EQ_STR(e.msg, want);
		req.first = lo - 3;
		req.last = lo + 1;
		CHECK_EQ_INT(window_dump_job(&host, &req, &e), 0);
		j = jobs[njobs - 1];
		CHECK_EQ_INT(j->first, lo);
		CHECK_EQ_INT(j->last, lo + 1);
		snprintf(want, sizeof want, "job dump of steps %llu-%llu: this rank no longer "
			 "held steps %llu-%llu (prof.recorder{ steps } keeps the last 8)",
			 (unsigned long long)lo - 3, (unsigned long long)lo + 1,
			 (unsigned long long)lo - 3, (unsigned long long)lo - 1);
		CHECK_EQ_STR(j->note, want);
	}

	/* far ahead, forced (waited long enough): what it holds and the step
	 * running, partial */
	steps(3);
	req.first = host.win.sched.step - 2;
	req.last = 1000;
	req.force = false;
	CHECK_EQ_INT(window_dump_job(&host, &req, &e), 1);
	req.force = true;
	CHECK_EQ_INT(window_dump_job(&host, &req, &e), 0);
	j = jobs[njobs - 1];
	CHECK_EQ_INT(j->last, host.win.sched.step);
	CHECK_EQ_INT(j->steps[j->nsteps - 1].step, host.win.sched.step);
	CHECK_EQ_INT(j->steps[j->nsteps - 1].partial, 1);
	{
		char want[200];

		snprintf(want, sizeof want, "job dump of steps %llu-1000: this rank was still "
			 "in step %llu (written so far, partial)",
			 (unsigned long long)req.first, (unsigned long long)host.win.sched.step);
		CHECK_EQ_STR(j->note, want);
	}
	CHECK_EQ_INT(npubs, 1);

	/* dying of SIGTERM: its dump is not news for the job */
	steps(2);
	atomic_store(&host.exit_signal, SIGTERM);
	window_finish(&host, true);
	CHECK(jobs[njobs - 1]->dump);
	CHECK_EQ_STR(jobs[njobs - 1]->reason, "signal: SIGTERM");
	CHECK_EQ_INT(npubs, 1);
	rec_free(&host.win.rec);

	/* a crash's is: its last step partial */
	start(&sc);
	steps(4);
	atomic_store(&host.exit_signal, SIGSEGV);
	window_finish(&host, true);
	CHECK_EQ_STR(jobs[njobs - 1]->reason, "crash: SIGSEGV");
	CHECK_EQ_INT(npubs, 2);
	CHECK_EQ_INT(pubs[1].last, 4);
	CHECK(pubs[1].partial);
	CHECK_EQ_STR(pubs[1].reason, "crash: SIGSEGV");
	rec_free(&host.win.rec);
	memset(&cfg.recorder, 0, sizeof cfg.recorder);
}

/* prof.recorder{ enabled = false } takes effect at the next boundary: the
 * sources stop, the segments go back, dumps are refused; enabled again, the
 * next boundary opens a segment and a dump holds the steps since. Set up
 * paused, nothing records until enabled; without a recorder, nothing to
 * switch. */
static void test_recorder_switch(void)
{
	struct sched_config sc = { 0 }; /* no schedule */
	struct err e;

	cfg.recorder.enabled = true;
	cfg.recorder.steps = 4;
	cfg.recorder.bytes = 4 << 20;
	cfg.recorder.max_dumps = 10;
	start(&sc);
	steps(2);
	CHECK_EQ_STR(calls, "rec1 step0 step1 rec2 step2");
	CHECK_EQ_INT(window_recorder_switch(&host, false, &e), 0);
	/* (a segment of steps/2 = 2 steps: rotated once) */
	CHECK_EQ_STR(calls, "rec1 step0 step1 rec2 step2"); /* not before the boundary */
	CHECK_EQ_INT(window_dump(&host, 2, "x", &e), -1);
	CHECK(strstr(e.msg, "the recorder is off (paused by prof.recorder{ enabled = "
		      "false })") != NULL);
	CHECK_EQ_INT(rec_held_steps(&host.win.rec), 2);
	steps(1);
	CHECK_EQ_STR(calls, "rec1 step0 step1 rec2 step2 rec0 step3");
	CHECK_EQ_INT(rec_held_steps(&host.win.rec), 0);
	CHECK_EQ_INT(host.win.rec.nseg, 0);
	steps(3);
	CHECK_EQ_STR(calls, "rec1 step0 step1 rec2 step2 rec0 step3 step4 step5 step6");
	CHECK_EQ_INT(window_dump(&host, 2, "x", &e), -1);
	CHECK_EQ_INT(window_recorder_switch(&host, true, &e), 0);
	steps(1); /* step 6 ends: the segment opens with step 7 */
	CHECK_EQ_STR(strstr(calls, "step6"), "step6 rec3 step7");
	steps(3);
	CHECK_EQ_INT(window_dump(&host, 10, "back", &e), 0);
	CHECK_EQ_INT(njobs, 1);
	CHECK(jobs[0]->dump);
	CHECK_EQ_INT(jobs[0]->first, 7);
	CHECK_EQ_INT(jobs[0]->last, 9);
	window_finish(&host, false);
	rec_free(&host.win.rec);

	/* Set up paused: no segment until enabled. */
	cfg.recorder.start_paused = true;
	start(&sc);
	steps(2);
	CHECK_EQ_STR(calls, "step0 step1 step2");
	CHECK_EQ_INT(window_dump(&host, 2, "x", &e), -1);
	CHECK_EQ_INT(window_recorder_switch(&host, true, &e), 0);
	steps(1);
	CHECK_EQ_STR(calls, "step0 step1 step2 rec1 step3");
	window_finish(&host, false);
	CHECK_EQ_INT(window_recorder_switch(&host, false, &e), -1);
	CHECK(strstr(e.msg, "the process is ending") != NULL);
	rec_free(&host.win.rec);
	memset(&cfg.recorder, 0, sizeof cfg.recorder);

	/* No recorder: nothing to switch, and the fix named. */
	start(&sc);
	CHECK_EQ_INT(window_recorder_switch(&host, true, &e), -1);
	CHECK(strstr(e.msg, "no recorder was set up when the process started; put "
		      "prof.recorder{ ... } in the policy file") != NULL);
	window_finish(&host, false);
}

/* capture_now: the next boundary opens a window of N steps, ticket 1, with
 * the request's reason; a second request while one is queued is refused. */
static void test_capture_now(void)
{
	struct sched_config sc = { 0 }; /* no schedule */
	struct err e;

	start(&sc);
	CHECK(!window_ahead(&host));
	steps(2);
	CHECK_EQ_INT(window_capture_now(&host, 3, "slow step", &e), 0);
	CHECK_EQ_INT(window_capture_now(&host, 1, NULL, &e), -1);
	CHECK_EQ_STR(e.msg, "a capture request is already queued");
	CHECK(window_ahead(&host));
	CHECK_EQ_INT(armed, 1);
	steps(5);
	CHECK_EQ_INT(njobs, 1);
	check_job(0, 0, 3, 5, 3, "slow step", 1);
	/* A second request gets the next ticket and window index. */
	CHECK_EQ_INT(window_capture_now(&host, 1, NULL, &e), 0);
	steps(2);
	CHECK_EQ_INT(njobs, 2);
	check_job(1, 1, 8, 8, 1, "capture_now", 2);
	CHECK_EQ_INT(window_capture_now(&host, 0, NULL, &e), -1);
	CHECK_EQ_STR(e.msg, "'steps' must be at least 1");
}

/* The window-start hook sees the opened window's index and reason, and the
 * step hook every boundary. */
static void test_hooks(void)
{
	struct sched_config sc = CFG(1, 0, 0, 1, 1);

	start(&sc);
	cfg.has_on_window_start = true;
	cfg.has_on_step = true;
	steps(1);
	CHECK_EQ_INT(window_starts, 1);
	CHECK_EQ_INT(started_window, 0);
	CHECK_EQ_STR(started_reason, "schedule");
	CHECK_EQ_INT(step_hooks, 1);
	CHECK_EQ_INT(last_hook_step, 0);
	steps(2);
	CHECK_EQ_INT(window_starts, 1);
	CHECK_EQ_INT(step_hooks, 3);
	CHECK_EQ_INT(last_hook_step, 2);
	check_job(0, 0, 1, 1, 1, "schedule", 0);
}

/* An NVTX capture range opens a window at the current step and holds it
 * past the schedule's save; its end closes it, at the time the range
 * ended. count = 2: the third instance is refused. */
static void test_capture_range(void)
{
	struct sched_config sc = { 0 };
	int64_t end_ts;

	start_range(&sc, "train", 2);
	cfg.has_on_window_start = true;
	window_starts = 0;
	steps(1);
	CHECK_EQ_INT(window_range_begin(&host), 1);
	CHECK_EQ_INT(window_starts, 1);
	CHECK_EQ_STR(started_reason, "nvtx range 'train'");
	CHECK_EQ_INT(window_range_begin(&host), 0); /* one instance at a time */
	steps(2);
	CHECK_EQ_INT(njobs, 0);
	end_ts = clock_now_ns();
	usleep(2000); /* the callback comes after the range's end record */
	window_range_end(&host, end_ts);
	CHECK_EQ_INT(njobs, 1);
	check_job(0, 0, 1, 3, 2, "nvtx range 'train'", 0); /* step 3 did not end */
	if (njobs)
		CHECK(jobs[0]->end_ts == end_ts);
	CHECK_EQ_INT(window_range_begin(&host), 1);
	window_range_end(&host, clock_now_ns());
	CHECK_EQ_INT(window_range_begin(&host), -1);
	CHECK_EQ_INT(njobs, 2);
}

/* A schedule window that opens inside a capture range joins it, and the
 * range keeps it recording after the schedule's save. */
static void test_range_joins_schedule(void)
{
	struct sched_config sc = CFG(2, 0, 0, 1, 1);

	start_range(&sc, "r", 0);
	steps(1);
	CHECK_EQ_INT(window_range_begin(&host), 1);
	steps(4); /* the schedule's window (step 2) saves at step 3's boundary */
	CHECK_EQ_INT(njobs, 0);
	window_range_end(&host, clock_now_ns());
	CHECK_EQ_INT(njobs, 1);
	check_job(0, 0, 1, 5, 4, "nvtx range 'r'", 0);
}

/* The process ends inside a window: it is written with its last step
 * partial, once; later boundaries do nothing. */
static void test_finish(void)
{
	struct sched_config sc = CFG(0, 1, 0, 5, 1);

	start(&sc);
	steps(3);
	CHECK(window_recording(&host));
	window_finish(&host, false);
	CHECK(!window_recording(&host));
	CHECK_EQ_INT(njobs, 1);
	check_job(0, 0, 1, 3, 3, "schedule", 0);
	CHECK_EQ_INT(jobs[0]->steps[2].partial, 1);
	window_finish(&host, false);
	steps(3);
	CHECK_EQ_INT(njobs, 1);
	CHECK(!window_ahead(&host));
	CHECK_EQ_INT(window_range_begin(&host), 0);
}

/* prof.schedule{ whole = true }: one window from the start to the exit.
 * A program that never steps has it as its one step, complete (#26.5);
 * one that steps has its steps and the last one partial, as ever.
 * capture_now is refused: every step is in the window already. */
static void test_whole(void)
{
	struct sched_config sc = { 0, 0, 0, 0, 0, true, true };
	struct err e;

	start(&sc);
	CHECK_EQ_STR(calls, "open1 step0R+");
	CHECK(window_recording(&host) && window_ahead(&host));
	CHECK_EQ_INT(window_capture_now(&host, 2, "x", &e), -1);
	CHECK_EQ_STR(e.msg, "the whole process is being recorded in one window "
		     "(prof.schedule{ whole = true }): every step is in it already");
	window_finish(&host, false);
	CHECK_EQ_INT(njobs, 1);
	check_job(0, 0, 0, 0, 1, "whole process", 0);
	if (njobs && jobs[0]->nsteps == 1) {
		CHECK_EQ_INT(jobs[0]->steps[0].step, 0);
		CHECK_EQ_INT(jobs[0]->steps[0].partial, 0);
		CHECK(jobs[0]->steps[0].ts == jobs[0]->start_ts);
		CHECK(jobs[0]->steps[0].ts + jobs[0]->steps[0].dur == jobs[0]->end_ts);
	}

	start(&sc);
	steps(3);
	CHECK_EQ_INT(njobs, 0);
	window_finish(&host, false);
	CHECK_EQ_INT(njobs, 1);
	check_job(0, 0, 0, 3, 4, "whole process", 0);
	if (njobs && jobs[0]->nsteps == 4) {
		CHECK_EQ_INT(jobs[0]->steps[2].partial, 0);
		CHECK_EQ_INT(jobs[0]->steps[3].partial, 1);
	}
}

/* A capture range in a program that has not stepped: the window is the
 * region, with no step made up of it (the program may be inside its first
 * step, which goes on after the region; #26.5). */
static void test_range_without_steps(void)
{
	struct sched_config sc = { 0 };

	start_range(&sc, "infer", 1);
	CHECK_EQ_INT(window_range_begin(&host), 1);
	window_range_end(&host, clock_now_ns());
	CHECK_EQ_INT(njobs, 1);
	check_job(0, 0, 0, 0, 0, "nvtx range 'infer'", 0);
}

/* No host thread: the window is skipped and the failure said once the
 * lock is released; the next window opens as usual. */
static void test_thread_failure(void)
{
	struct sched_config sc = CFG(0, 1, 0, 1, 2);

	start(&sc);
	thread_fails = 100;
	steps(1);
	CHECK(failures >= 1);
	CHECK_EQ_STR(last_failure, "cannot start the host thread (test)");
	CHECK(!window_recording(&host));
	thread_fails = 0;
	steps(4);
	CHECK_EQ_INT(njobs, 1);
	check_job(0, 0, 3, 3, 1, "schedule", 0);
}

int main(void)
{
	test_schedule_windows();
	test_capture_now();
	test_recorder_tells_sources();
	test_recorder_wakes_host_thread_when_wanted();
	test_dump_out_of_memory();
	test_dump_refused_while_queue_full();
	test_dump_hang();
	test_job_dumps();
	test_recorder_switch();
	test_hooks();
	test_capture_range();
	test_range_joins_schedule();
	test_finish();
	test_thread_failure();
	test_whole();
	test_range_without_steps();
	start(&(struct sched_config){ 0 });
	return check_done();
}

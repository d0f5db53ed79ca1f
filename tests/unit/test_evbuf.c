/*
 * test_evbuf — the per-thread event buffers: records come back complete and
 * in order per thread, nothing is recorded outside a generation, a full pool
 * drops and counts, concurrent writers neither lose nor tear records, a
 * signal handler appending mid-append spoils nothing (also in the middle of
 * the inline append), compact records come back as the full records that
 * were appended, the inline append agrees with evbuf_append_raw, and the
 * pool is populated ahead of the writers and given back on release, a
 * visitor that cuts the drain gets no record past the cut; with a
 * salvage file the pools are regions of it, named in its header, whose
 * pages go back to the tmpfs on release.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/statfs.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "shim/evbuf.h"
#include "common/salvfile.h"

struct seen {
	size_t n;
	int32_t tids[64];
	uint64_t next_seq[64]; /* per thread: next expected id */
	size_t ntids;
	int order_ok, payload_ok;
	char last_name[EVBUF_NAME_MAX + 1];
	uint32_t last_len;
	char thread_name[17];
};

static void visit(void *ctx, int32_t tid, const char *thread_name,
		  const struct evbuf_rec *r)
{
	struct seen *s = ctx;
	size_t i;
	char expect[32];

	s->n++;
	for (i = 0; i < s->ntids && s->tids[i] != tid; i++)
		;
	if (i == s->ntids && s->ntids < 64)
		s->tids[s->ntids++] = tid;
	if (i < 64) {
		if (r->id != s->next_seq[i])
			s->order_ok = 0;
		s->next_seq[i] = r->id + 1;
	}
	memcpy(s->last_name, evbuf_payload(r), r->len);
	s->last_name[r->len] = '\0';
	s->last_len = r->len;
	snprintf(s->thread_name, sizeof s->thread_name, "%s", thread_name);
	if (r->kind == EVBUF_MARK) {
		snprintf(expect, sizeof expect, "ev%llu", (unsigned long long)r->id);
		if (r->len != strlen(expect) || memcmp(evbuf_payload(r), expect, r->len))
			s->payload_ok = 0;
	}
}

static void init_seen(struct seen *s)
{
	memset(s, 0, sizeof *s);
	s->order_ok = s->payload_ok = 1;
}

static void test_inactive_is_noop(void)
{
	CHECK_EQ_INT(evbuf_active(), 0);
	CHECK_EQ_INT(evbuf_current(), 0);
	CHECK_EQ_INT(evbuf_append_raw(EVBUF_MARK, 1, "x", 1, 0, 0), -1);
}

static void test_round_trip(void)
{
	struct seen s;
	struct evbuf_stats st;
	uint64_t gen = evbuf_open(1 << 20), i;
	char name[32];

	CHECK(gen > 0);
	CHECK_EQ_INT(evbuf_active(), 1);
	CHECK_EQ_INT(evbuf_current(), gen);
	CHECK_EQ_INT(evbuf_open(1 << 20), 0); /* already open */
	for (i = 0; i < 1000; i++) {
		snprintf(name, sizeof name, "ev%llu", (unsigned long long)i);
		evbuf_append(EVBUF_MARK, name, i, 0);
	}
	CHECK_EQ_INT(evbuf_drain(gen, visit, &s, &st), -1); /* still open */
	CHECK_EQ_INT(evbuf_close(), gen);
	CHECK_EQ_INT(evbuf_active(), 0);
	CHECK_EQ_INT(evbuf_current(), 0); /* a writer that failed: closed, not full */
	evbuf_append(EVBUF_MARK, "late", 1000, 0); /* after close: ignored */
	init_seen(&s);
	CHECK_EQ_INT(evbuf_drain(gen, visit, &s, &st), 0);
	CHECK_EQ_INT(s.n, 1000);
	CHECK_EQ_INT(st.records, 1000);
	CHECK_EQ_INT(st.threads, 1);
	CHECK_EQ_INT(st.dropped_full, 0);
	CHECK(s.order_ok);
	CHECK(s.payload_ok);
	CHECK_EQ_STR(s.thread_name, "test_evbuf");
	evbuf_release(gen);
	CHECK_EQ_INT(evbuf_drain(gen, visit, &s, &st), -1); /* released */
}

static void test_long_name_cut(void)
{
	struct seen s;
	struct evbuf_stats st;
	char *big = malloc(10000);
	uint64_t gen;

	memset(big, 'a', 9999);
	big[9999] = '\0';
	gen = evbuf_open(1 << 20);
	evbuf_append(EVBUF_RANGE_PUSH, big, 0, 0);
	evbuf_close();
	init_seen(&s);
	evbuf_drain(gen, visit, &s, &st);
	CHECK_EQ_INT(s.n, 1);
	CHECK_EQ_INT(s.last_len, EVBUF_NAME_MAX);
	evbuf_release(gen);
	free(big);
}

static void test_full_pool_drops_and_counts(void)
{
	struct seen s;
	struct evbuf_stats st;
	uint64_t gen = evbuf_open(2 * EVBUF_CHUNK_BYTES), i;
	char name[64];
	int dropped = 0;

	/* Each record is 24 + 40 bytes: 2 chunks hold ~2040 of them. */
	for (i = 0; i < 5000; i++) {
		snprintf(name, sizeof name, "%-39llu", (unsigned long long)i);
		if (evbuf_append_raw(EVBUF_MARK, (int64_t)i, name, 40, i, 0) != 0)
			dropped++;
	}
	evbuf_close();
	init_seen(&s);
	evbuf_drain(gen, visit, &s, &st);
	CHECK(dropped > 0);
	CHECK_EQ_INT(st.dropped_full, dropped);
	CHECK_EQ_INT(s.n + (size_t)dropped, 5000);
	CHECK_EQ_INT(st.chunks, 2);
	CHECK(s.order_ok);
	evbuf_release(gen);
}

/* The cutting visitor: records the highest chunk it was handed, checks
 * each record's id follows the last, and cuts the drain at 40 chunks when
 * it reaches chunk 2, then at 6 chunks when it reaches chunk 4 (a cut
 * only ever lowers). At chunk 5 it asks the kernel whether a page past
 * the cut, which the drain has not reached, is still resident. */
struct cut_seen {
	struct evbuf_stats *st;
	size_t n;
	uint64_t next_id, max_pos;
	int order_ok;
	const char *pool;    /* where chunk 0 begins */
	int tail_resident;   /* -1: not asked yet */
};

static void visit_cut(void *ctx, int32_t tid, const char *thread_name,
		      const struct evbuf_rec *r)
{
	struct cut_seen *s = ctx;
	unsigned char in = 1;

	(void)tid;
	(void)thread_name;
	if (!s->pool)
		s->pool = (const char *)r - sizeof(struct evbuf_chunk);
	if (r->id != s->next_id)
		s->order_ok = 0;
	s->next_id = r->id + 1;
	s->n++;
	if (s->st->pos > s->max_pos)
		s->max_pos = s->st->pos;
	if (s->st->pos == 2 * EVBUF_CHUNK_BYTES)
		s->st->keep_bytes = 40 * EVBUF_CHUNK_BYTES;
	if (s->st->pos == 4 * EVBUF_CHUNK_BYTES)
		s->st->keep_bytes = 6 * EVBUF_CHUNK_BYTES - 100;
	if (s->st->pos == 5 * EVBUF_CHUNK_BYTES && s->tail_resident < 0) {
		CHECK_EQ_INT(mincore((void *)(s->pool + 80 * EVBUF_CHUNK_BYTES), 4096, &in), 0);
		s->tail_resident = in & 1;
	}
}

/* A visitor that cuts the drain (evbuf_stats.keep_bytes) is handed no
 * record of a chunk past the cut; their records are counted, and their
 * pages go back at the cut, before the drain reaches them. */
static void test_drain_cut(void)
{
	struct cut_seen s = { 0 };
	struct evbuf_stats st;
	uint64_t gen = evbuf_open((size_t)8 << 20), i; /* 128 chunks */
	char name[32];

	/* 64 bytes a record (a full one: its id is not 0): ~100 chunks */
	for (i = 1; i <= 100000; i++) {
		snprintf(name, sizeof name, "%-31llu", (unsigned long long)i);
		CHECK_EQ_INT(evbuf_append_raw(EVBUF_MARK, (int64_t)i, name, 32, i, 0), 0);
	}
	evbuf_close();
	s.st = &st;
	s.next_id = 1;
	s.order_ok = 1;
	s.tail_resident = -1;
	CHECK_EQ_INT(evbuf_drain(gen, visit_cut, &s, &st), 0);
	CHECK(st.pool_bytes >= 95 * EVBUF_CHUNK_BYTES);
	CHECK(s.order_ok);                              /* the first records, in order */
	CHECK_EQ_INT(s.max_pos, 5 * EVBUF_CHUNK_BYTES); /* chunks 0-5, the one the
							   cut falls in kept */
	CHECK_EQ_INT(st.records, s.n);
	CHECK_EQ_INT(s.n + st.dropped_cut, 100000);     /* the rest counted */
	CHECK_EQ_INT(s.tail_resident, 0);               /* and handed back */
	evbuf_release(gen);
}

#define WRITERS 8
#define PER_WRITER 125000

static void *writer(void *arg)
{
	uint64_t i;
	char name[32];

	(void)arg;
	for (i = 0; i < PER_WRITER; i++) {
		snprintf(name, sizeof name, "ev%llu", (unsigned long long)i);
		evbuf_append(EVBUF_MARK, name, i, 0);
	}
	return NULL;
}

static void test_concurrent_writers(void)
{
	pthread_t th[WRITERS];
	struct seen s;
	struct evbuf_stats st;
	uint64_t gen = evbuf_open((size_t)256 << 20);
	int i;

	for (i = 0; i < WRITERS; i++)
		pthread_create(&th[i], NULL, writer, NULL);
	for (i = 0; i < WRITERS; i++)
		pthread_join(th[i], NULL);
	evbuf_close();
	init_seen(&s);
	evbuf_drain(gen, visit, &s, &st);
	CHECK_EQ_INT(s.n, WRITERS * PER_WRITER);
	CHECK_EQ_INT(s.ntids, WRITERS);
	CHECK_EQ_INT(st.threads, WRITERS);
	CHECK_EQ_INT(st.dropped_full, 0);
	CHECK(s.order_ok);
	CHECK(s.payload_ok);
	for (i = 0; i < WRITERS; i++)
		CHECK_EQ_INT(s.next_seq[i], PER_WRITER);
	evbuf_release(gen);
}

/* Counts what a drain visits. */
static void count_visit(void *ctx, int32_t tid, const char *thread_name,
			const struct evbuf_rec *r)
{
	(void)tid;
	(void)thread_name;
	(void)r;
	(*(uint64_t *)ctx)++;
}

static _Atomic int writers_done;

static void *writer_flag(void *arg)
{
	writer(arg);
	atomic_fetch_add(&writers_done, 1);
	return NULL;
}

/* Drains and releases closed generation `gen`; adds what it held and
 * dropped to *total. */
static void drain_count(uint64_t gen, uint64_t *total)
{
	struct evbuf_stats st;
	uint64_t got = 0;

	CHECK_EQ_INT(evbuf_drain(gen, count_visit, &got, &st), 0);
	CHECK_EQ_INT(got, st.records);
	*total += st.records + st.dropped_full + st.dropped_noslot;
	evbuf_release(gen);
}

/* Rotating while writers append (the flight recorder's segments): every
 * record lands in one generation or the other, none is lost between them.
 * The generations are drained once the writers are done (a drain while a
 * writer that saw its generation open is still finishing an append would
 * miss that record: the host thread drains segments long after). */
static void test_rotate_loses_nothing(void)
{
	pthread_t th[WRITERS];
	uint64_t gens[EVBUF_SLOTS], closed, total = 0;
	int i, n = 0;

	gens[n++] = evbuf_open((size_t)64 << 20);
	atomic_store(&writers_done, 0);
	for (i = 0; i < WRITERS; i++)
		pthread_create(&th[i], NULL, writer_flag, NULL);
	while (n < EVBUF_SLOTS && atomic_load(&writers_done) < WRITERS) {
		usleep(1000);
		gens[n] = evbuf_rotate((size_t)64 << 20, &closed);
		CHECK(gens[n] != 0);
		CHECK_EQ_INT(closed, gens[n - 1]);
		n++;
	}
	for (i = 0; i < WRITERS; i++)
		pthread_join(th[i], NULL);
	CHECK_EQ_INT(evbuf_close(), gens[n - 1]);
	for (i = 0; i < n; i++)
		drain_count(gens[i], &total);
	CHECK_EQ_INT(total, (uint64_t)WRITERS * PER_WRITER);
	CHECK(n > 1);
	/* Nothing open: nothing to rotate. */
	CHECK_EQ_INT(evbuf_rotate((size_t)1 << 20, &closed), 0);
	CHECK_EQ_INT(closed, 0);
}

/* A held generation's slot is stepped over: the next generation opens in
 * a free slot and records (the flight recorder rotates past a window the
 * host thread is still writing). */
static void test_held_slot_is_stepped_over(void)
{
	struct seen s;
	struct evbuf_stats st;
	uint64_t held, gen;
	int i;

	held = evbuf_open(1 << 20);
	evbuf_append(EVBUF_MARK, "held", 0, 0);
	evbuf_close();
	for (i = 0; i < EVBUF_SLOTS - 1; i++) {
		gen = evbuf_open(1 << 20);
		evbuf_close();
		evbuf_release(gen);
	}
	gen = evbuf_open(1 << 20); /* held's slot is next in turn */
	CHECK(gen > held + EVBUF_SLOTS);
	CHECK(gen % EVBUF_SLOTS != held % EVBUF_SLOTS);
	CHECK_EQ_INT(evbuf_append_raw(EVBUF_MARK, 1, "ev0", 3, 0, 0), 0);
	evbuf_close();
	init_seen(&s);
	CHECK_EQ_INT(evbuf_drain(gen, visit, &s, &st), 0);
	CHECK_EQ_INT(st.records, 1);
	CHECK_EQ_INT(st.dropped_noslot, 0);
	evbuf_release(gen);
	init_seen(&s);
	CHECK_EQ_INT(evbuf_drain(held, visit, &s, &st), 0);
	CHECK_EQ_INT(st.records, 1);
	evbuf_release(held);
}

static void test_slots_recycle(void)
{
	struct seen s;
	struct evbuf_stats st;
	uint64_t gens[EVBUF_SLOTS + 1];
	int i;

	/* Every slot busy: the next generation opens but records nothing. */
	for (i = 0; i < EVBUF_SLOTS; i++) {
		gens[i] = evbuf_open(1 << 20);
		evbuf_append(EVBUF_MARK, "ev0", 0, 0);
		evbuf_close();
	}
	gens[EVBUF_SLOTS] = evbuf_open(1 << 20);
	CHECK(gens[EVBUF_SLOTS] > 0);
	CHECK_EQ_INT(evbuf_append_raw(EVBUF_MARK, 0, "x", 1, 0, 0), -1);
	evbuf_close();
	init_seen(&s);
	CHECK_EQ_INT(evbuf_drain(gens[EVBUF_SLOTS], visit, &s, &st), -1);
	CHECK_EQ_INT(st.dropped_noslot, 1);
	for (i = 0; i < EVBUF_SLOTS; i++) {
		init_seen(&s);
		CHECK_EQ_INT(evbuf_drain(gens[i], visit, &s, &st), 0);
		CHECK_EQ_INT(s.n, 1);
		evbuf_release(gens[i]);
	}
	/* Released: a new generation records again. */
	gens[0] = evbuf_open(1 << 20);
	CHECK_EQ_INT(evbuf_append_raw(EVBUF_MARK, 0, "ev0", 3, 0, 0), 0);
	evbuf_close();
	init_seen(&s);
	CHECK_EQ_INT(evbuf_drain(gens[0], visit, &s, &st), 0);
	CHECK_EQ_INT(s.n, 1);
	evbuf_release(gens[0]);
}

/* A signal handler appending on the thread it interrupted (what the CPU
 * sampler does): its record is refused while an append is in progress
 * there, and lands whole otherwise; the interrupted records are never
 * spoiled. */
static volatile sig_atomic_t handler_ok, handler_refused;

static void append_from_handler(int sig)
{
	(void)sig;
	if (evbuf_append_raw(EVBUF_RANGE_PUSH, 1, "from-handler", 12, 0, 0) == 0)
		handler_ok++;
	else
		handler_refused++;
}

struct nested_seen {
	uint64_t marks, next_id, handler;
	int ok;
};

static void visit_nested(void *ctx, int32_t tid, const char *thread_name,
			 const struct evbuf_rec *r)
{
	struct nested_seen *s = ctx;
	char expect[32];

	(void)tid;
	(void)thread_name;
	if (r->kind == EVBUF_MARK) {
		snprintf(expect, sizeof expect, "ev%llu", (unsigned long long)r->id);
		if (r->id != s->next_id || r->len != strlen(expect) ||
		    memcmp(evbuf_payload(r), expect, r->len) != 0)
			s->ok = 0;
		s->next_id = r->id + 1;
		s->marks++;
	} else if (r->kind == EVBUF_RANGE_PUSH && r->len == 12 &&
		   memcmp(evbuf_payload(r), "from-handler", 12) == 0) {
		s->handler++;
	} else {
		s->ok = 0;
	}
}

static void signal_handler_case(int inline_append)
{
	struct sigaction sa, old;
	struct itimerval on = { { 0, 100 }, { 0, 100 } }, off = { { 0, 0 }, { 0, 0 } };
	struct nested_seen seen = { 0, 0, 0, 1 };
	struct evbuf_stats st;
	uint64_t gen, id, appended = 0;
	char name[64]; /* room the inline copy may assume */

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = append_from_handler;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGALRM, &sa, &old);
	gen = evbuf_open(256u << 20);
	setitimer(ITIMER_REAL, &on, NULL);
	for (id = 0; id < 200000; id++) {
		int n = snprintf(name, sizeof name, "ev%llu", (unsigned long long)appended), rc;

		rc = inline_append
			? evbuf_append_fast(atomic_load(&evbuf_state), EVBUF_MARK, 1, name,
					     (uint32_t)n, appended, 0)
			: evbuf_append_raw(EVBUF_MARK, 1, name, (uint32_t)n, appended, 0);

		if (rc == 0)
			appended++;
	}
	setitimer(ITIMER_REAL, &off, NULL);
	sigaction(SIGALRM, &old, NULL);
	CHECK_EQ_INT(evbuf_close(), gen);
	CHECK_EQ_INT(evbuf_drain(gen, visit_nested, &seen, &st), 0);
	CHECK(seen.ok);
	CHECK_EQ_INT(seen.marks, appended);
	CHECK_EQ_INT(seen.handler, handler_ok);
	CHECK(handler_ok + handler_refused > 0);
	evbuf_release(gen);
}

static void test_append_from_signal_handler(void)
{
	handler_ok = handler_refused = 0;
	signal_handler_case(0);
	handler_ok = handler_refused = 0;
	signal_handler_case(1); /* the interrupted append is the inline one */
}

/* Records as the visitor saw them (payload copied). */
struct rec_copy {
	struct evbuf_rec r;
	char payload[128];
	const void *where; /* the record's address */
};

struct recs {
	struct rec_copy v[4096];
	size_t n;
};

static void keep(void *ctx, int32_t tid, const char *thread_name,
		 const struct evbuf_rec *r)
{
	struct recs *rs = ctx;

	(void)tid;
	(void)thread_name;
	if (rs->n < sizeof rs->v / sizeof rs->v[0]) {
		rs->v[rs->n].r = *r;
		memcpy(rs->v[rs->n].payload, evbuf_payload(r), r->len < 128 ? r->len : 128);
		rs->v[rs->n].where = r;
	}
	rs->n++;
}

static struct recs rs;

/* A record with id 0 and a 32-bit `a` takes a 16-byte header in the pool;
 * the visitor sees exactly what was appended either way. */
static void test_compact_records(void)
{
	struct evbuf_stats st;
	uint64_t a_small = evbuf_nvtx_a(7, 0, EVBUF_A_EARLY);
	uint64_t a_cat = evbuf_nvtx_a(7, 3, 0);
	uint64_t gen = evbuf_open(1 << 20);

	CHECK_EQ_INT(evbuf_append_raw(EVBUF_RANGE_PUSH, 11, "abc", 3, 0, a_small), 0);
	CHECK_EQ_INT(evbuf_append_raw(EVBUF_RANGE_POP, 12, NULL, 0, 0, a_cat), 0);
	CHECK_EQ_INT(evbuf_append_raw(EVBUF_RANGE_END, 13, NULL, 0, 99, 0), 0);
	CHECK_EQ_INT(evbuf_append_raw(EVBUF_USER + 1, 14, "xy", 2, 0, 0), 0);
	evbuf_close();
	memset(&rs, 0, sizeof rs);
	CHECK_EQ_INT(evbuf_drain(gen, keep, &rs, &st), 0);
	CHECK_EQ_INT(rs.n, 4);
	CHECK_EQ_INT(rs.v[0].r.kind, EVBUF_RANGE_PUSH);
	CHECK_EQ_INT(rs.v[0].r.ts, 11);
	CHECK_EQ_INT(rs.v[0].r.len, 3);
	CHECK(memcmp(rs.v[0].payload, "abc", 3) == 0);
	CHECK(rs.v[0].r.id == 0 && rs.v[0].r.a == a_small);
	CHECK_EQ_INT(rs.v[0].r.size, 40); /* as a full record: header + 3, rounded */
	CHECK_EQ_INT(rs.v[1].r.kind, EVBUF_RANGE_POP);
	CHECK(rs.v[1].r.a == a_cat && rs.v[1].r.len == 0 && rs.v[1].r.ts == 12);
	CHECK_EQ_INT(rs.v[2].r.kind, EVBUF_RANGE_END);
	CHECK(rs.v[2].r.id == 99);
	CHECK_EQ_INT(rs.v[3].r.kind, EVBUF_USER + 1);
	CHECK(rs.v[3].r.len == 2 && memcmp(rs.v[3].payload, "xy", 2) == 0);
	/* In the pool: 16 + 8 (compact), 32 (category), 32 (id), 16 + 8. */
	CHECK_EQ_INT(st.bytes, 24 + 32 + 32 + 24);
	evbuf_release(gen);
}

/* evbuf_append_fast (the NVTX hot path's inline append) and
 * evbuf_append_raw interleaved, over several chunks, names of every length
 * from 0 to 99 bytes: every record comes back whole and in order. */
static void test_inline_append(void)
{
	struct evbuf_stats st;
	char name[104]; /* 99 bytes from offsets 0-2 */
	uint64_t gen = evbuf_open(16 * EVBUF_CHUNK_BYTES), s, i;
	int ok = 1, rc = 0;

	for (i = 0; i < sizeof name; i++)
		name[i] = (char)('A' + i % 50);
	s = atomic_load(&evbuf_state);
	for (i = 0; i < 4000; i++) {
		uint32_t len = (uint32_t)(i % 100);
		uint64_t id = i % 3 == 0 ? i : 0, a = i % 5 == 0 ? (uint64_t)i << 32 : i;

		if (i % 7 == 0)
			rc |= evbuf_append_raw(EVBUF_MARK, (int64_t)i, name + i % 3, len, id, a);
		else
			rc |= evbuf_append_fast(s, EVBUF_MARK, (int64_t)i, name + i % 3, len, id, a);
	}
	CHECK_EQ_INT(rc, 0);
	evbuf_close();
	memset(&rs, 0, sizeof rs);
	CHECK_EQ_INT(evbuf_drain(gen, keep, &rs, &st), 0);
	CHECK_EQ_INT(rs.n, 4000);
	CHECK(st.chunks > 2);
	for (i = 0; i < 4000 && i < rs.n; i++) {
		const struct rec_copy *c = &rs.v[i];
		uint32_t len = (uint32_t)(i % 100);

		if (c->r.kind != EVBUF_MARK || c->r.ts != (int64_t)i || c->r.len != len ||
		    c->r.id != (i % 3 == 0 ? i : 0) ||
		    c->r.a != (i % 5 == 0 ? (uint64_t)i << 32 : i) ||
		    memcmp(c->payload, name + i % 3, len) != 0)
			ok = 0;
	}
	CHECK(ok);
	evbuf_release(gen);
}

/* Resident set size in bytes. */
static long rss_bytes(void)
{
	long pages = 0, resident = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	if (f) {
		if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
			resident = 0;
		fclose(f);
	}
	return resident * sysconf(_SC_PAGESIZE);
}

/* Waits up to 5 s for the RSS to reach `want` bytes. */
static int wait_rss(long want)
{
	int i;

	for (i = 0; i < 500 && rss_bytes() < want; i++) {
		struct timespec ts = { 0, 10000000 };
		nanosleep(&ts, NULL);
	}
	return rss_bytes() >= want;
}

/* Pages of [p, p+len) that are resident. */
static size_t resident_pages(const void *p, size_t len)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), n = (len + page - 1) / page, i, k = 0;
	unsigned char *vec = malloc(n);

	if (!vec || mincore((void *)p, len, vec) != 0) {
		free(vec);
		return (size_t)-1;
	}
	for (i = 0; i < n; i++)
		k += vec[i] & 1;
	free(vec);
	return k;
}

/* The helper populates the open pool ahead of the writers (2 MiB at the
 * open, then as much as they used), and the release gives back all of it,
 * written or not. */
static void test_prefault(void)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), ahead = (size_t)4 << 20;
	void *probe = mmap(NULL, page, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct evbuf_stats st;
	const char *base;
	char name[64];
	long before;
	uint64_t gen, i;
	int supported;

	supported = probe != MAP_FAILED && madvise(probe, page, 23 /* MADV_POPULATE_WRITE */) == 0;
	if (probe != MAP_FAILED)
		munmap(probe, page);
	if (!supported) {
		printf("test_prefault: skipped, the kernel cannot populate (%s)\n", strerror(errno));
		return;
	}
	before = rss_bytes();
	gen = evbuf_open((size_t)64 << 20);
	CHECK_EQ_INT(evbuf_append_raw(EVBUF_MARK, 0, "first", 5, 1, 0), 0);
	CHECK(wait_rss(before + (1l << 20) * 3 / 2)); /* ~2 MiB, nothing written */
	/* 2 MB of records (40 bytes each): the helper keeps ~2 MB more ahead. */
	memset(name, 'n', sizeof name);
	for (i = 0; i < 50000; i++)
		evbuf_append_raw(EVBUF_MARK, (int64_t)i, name, 24, 0, 0);
	CHECK(wait_rss(before + (long)ahead - (1l << 20) / 2));
	evbuf_close();
	memset(&rs, 0, sizeof rs);
	CHECK_EQ_INT(evbuf_drain(gen, keep, &rs, &st), 0);
	CHECK(rs.n > 0);
	/* The first record opens the first chunk, which opens the pool. */
	base = (const char *)rs.v[0].where - sizeof(struct evbuf_chunk);
	CHECK(st.bytes < ahead - ((size_t)1 << 20)); /* written: about 2 MiB */
	CHECK(resident_pages(base, ahead - ((size_t)1 << 20)) ==
	      (ahead - ((size_t)1 << 20)) / page);
	evbuf_release(gen);
	CHECK_EQ_INT(resident_pages(base, (size_t)8 << 20), 0);
}

/* Thread churn: each thread writes a few records and exits; its chunk goes
 * back to the pool, so 1000 threads fit in a pool of 32 chunks and every
 * record keeps its own thread's id and name. */
#define CHURN_THREADS 1000
#define CHURN_RECORDS 10

struct churn_seen {
	size_t n, wrong_tid, wrong_name;
};

static void visit_churn(void *ctx, int32_t tid, const char *thread_name,
			const struct evbuf_rec *r)
{
	struct churn_seen *s = ctx;
	char expect[32];

	s->n++;
	if (r->a != (uint64_t)(uint32_t)tid)
		s->wrong_tid++;
	snprintf(expect, sizeof expect, "churn%llu", (unsigned long long)r->id);
	if (strcmp(thread_name, expect) != 0)
		s->wrong_name++;
}

static void *churn_writer(void *arg)
{
	uint64_t k = (uint64_t)(uintptr_t)arg;
	uint64_t tid = (uint64_t)(uint32_t)syscall(SYS_gettid);
	char name[16];
	int i;

	snprintf(name, sizeof name, "churn%llu", (unsigned long long)k);
	pthread_setname_np(pthread_self(), name);
	for (i = 0; i < CHURN_RECORDS; i++)
		evbuf_append(EVBUF_MARK, "x", k, tid);
	return NULL;
}

static void test_thread_churn_returns_chunks(void)
{
	struct churn_seen s = { 0 };
	struct evbuf_stats st;
	uint64_t gen = evbuf_open((size_t)2 << 20); /* 32 chunks */
	uintptr_t k;

	for (k = 0; k < CHURN_THREADS; k++) {
		pthread_t th;

		CHECK_EQ_INT(pthread_create(&th, NULL, churn_writer, (void *)k), 0);
		pthread_join(th, NULL);
	}
	evbuf_close();
	CHECK_EQ_INT(evbuf_drain(gen, visit_churn, &s, &st), 0);
	CHECK_EQ_INT(st.dropped_full, 0);
	CHECK_EQ_INT(s.n, CHURN_THREADS * CHURN_RECORDS);
	CHECK_EQ_INT(st.records, CHURN_THREADS * CHURN_RECORDS);
	CHECK_EQ_INT(s.wrong_tid, 0);
	CHECK_EQ_INT(s.wrong_name, 0);
	CHECK(st.threads >= CHURN_THREADS - 10); /* tids may be reused */
	CHECK(st.chunks <= 10); /* ~450 bytes a thread: chunks filled in turn */
	evbuf_release(gen);
}

/* A pool that cannot be mapped: its records are dropped, counted, and the
 * drain says why (the mmap error), not "the host was behind". */
static void test_unmappable_pool_says_why(void)
{
	struct seen s;
	struct evbuf_stats st;
	uint64_t gen = evbuf_open((size_t)1 << 62); /* past the address space */

	CHECK(gen > 0);
	CHECK_EQ_INT(evbuf_append_raw(EVBUF_MARK, 1, "x", 1, 0, 0), -1);
	CHECK_EQ_INT(evbuf_close(), gen);
	init_seen(&s);
	CHECK_EQ_INT(evbuf_drain(gen, visit, &s, &st), -1);
	CHECK_EQ_INT(st.dropped_noslot, 1);
	CHECK_EQ_INT(st.pool_errno, ENOMEM);
	gen = evbuf_open(1 << 20);
	CHECK_EQ_INT(evbuf_append_raw(EVBUF_MARK, 1, "ev0", 3, 0, 0), 0);
	evbuf_close();
	CHECK_EQ_INT(evbuf_drain(gen, visit, &s, &st), 0);
	CHECK_EQ_INT(st.pool_errno, 0);
	evbuf_release(gen);
}

/* Opens a pool of `bytes`, which must stay anonymous memory (its slot
 * names it at offset 0 in the header), and checks it keeps every record. */
static void check_pool_kept_out(struct salv_header *h, uint64_t bytes)
{
	struct evbuf_stats st;
	struct seen s;
	uint64_t gen, i;

	gen = evbuf_open((size_t)bytes);
	CHECK(gen != 0);
	for (i = 0; i < 100; i++)
		evbuf_append(EVBUF_MARK, "anonymous", i, 0);
	evbuf_close();
	CHECK_EQ_INT(h->slots[gen % SALV_SLOTS].off, 0);
	init_seen(&s);
	CHECK_EQ_INT(evbuf_drain(gen, visit, &s, &st), 0);
	CHECK_EQ_INT(st.records, 100);
	CHECK_EQ_INT(st.dropped_full, 0);
	evbuf_release(gen);
}

/* A pool larger than the salvage file's tmpfs has free stays anonymous
 * memory and keeps every record. */
static void test_salvage_pool_without_room(struct salv_header *h, const char *dir)
{
	struct statfs sf;

	if (statfs(dir, &sf) != 0)
		return;
	check_pool_kept_out(h, ((uint64_t)sf.f_bavail * sf.f_bsize / EVBUF_CHUNK_BYTES + 1024) *
				       EVBUF_CHUNK_BYTES);
}

/* A pool the tmpfs has room for, but that would leave the program less
 * than a quarter of it (at least EVBUF_SALV_KEEP_MIN) free, stays
 * anonymous memory too: /dev/shm is the program's shared memory as well
 * (DataLoader workers, NCCL). */
static void test_salvage_pool_leaves_the_program_room(struct salv_header *h, const char *dir)
{
	struct statfs sf;
	uint64_t avail, keep;

	if (statfs(dir, &sf) != 0)
		return;
	avail = (uint64_t)sf.f_bavail * sf.f_bsize;
	keep = (uint64_t)sf.f_blocks * sf.f_bsize / 4;
	if (keep < EVBUF_SALV_KEEP_MIN)
		keep = EVBUF_SALV_KEEP_MIN;
	if (avail < keep + 2 * EVBUF_CHUNK_BYTES)
		return; /* a tmpfs that small takes no pool at all */
	check_pool_kept_out(h, (avail - keep / 2) / EVBUF_CHUNK_BYTES * EVBUF_CHUNK_BYTES);
}

/* Bytes of the file at `path` the tmpfs holds pages for. */
static long file_bytes(const char *path)
{
	struct stat sb;

	return stat(path, &sb) == 0 ? (long)sb.st_blocks * 512 : -1;
}

/* Waits until the pre-fault helper is done with the open pool: the file's
 * size on the tmpfs has not moved for 100 ms (at most 2 s). */
static long file_bytes_settled(const char *path)
{
	long last = file_bytes(path), now;
	int i, still = 0;

	for (i = 0; i < 200 && still < 10; i++) {
		struct timespec ts = { 0, 10000000 };

		nanosleep(&ts, NULL);
		now = file_bytes(path);
		still = now == last ? still + 1 : 0;
		last = now;
	}
	return last;
}

/* Whether this tmpfs may back the salvage file with huge pages (then a
 * populated chunk brings its whole huge page, whatever evbuf asks). */
static int tmpfs_huge(void)
{
	char buf[256] = "", line[1024];
	FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/shmem_enabled", "r");
	int huge = 0;

	if (f) {
		if (!fgets(buf, sizeof buf, f))
			buf[0] = '\0';
		fclose(f);
	}
	if (strstr(buf, "[force]"))
		return 1;
	f = fopen("/proc/mounts", "r");
	while (f && fgets(line, sizeof line, f))
		if (strstr(line, " /dev/shm ") && strstr(line, "huge=") &&
		    !strstr(line, "huge=never") && !strstr(line, "huge=deny"))
			huge = 1;
	if (f)
		fclose(f);
	return huge;
}

/* The flight recorder's rotation: a segment that follows one whose
 * writers took a chunk is populated about as far (two chunks), not the
 * 2 MiB of a window's pool, and a segment given back undrained leaves its
 * pages, zeroed, to the next one in its slot: rotating every few steps
 * neither fills the salvage file's tmpfs nor costs the program the
 * pages' zeroing and unmapping (#29). Three segments held, as the
 * recorder holds them; every record kept. */
static void test_salvage_rotation_populates_what_is_used(struct salv_header *h,
							 const char *path)
{
	/* larger than any slot so far: every slot is mapped anew, from the
	 * file (a slot's mapping is reused when it is large enough) */
	const size_t pool = (size_t)768 << 20;
	uint64_t gens[8], closed, total = 0;
	long before;
	int n, i;

	if (tmpfs_huge()) {
		printf("test_salvage_rotation_populates_what_is_used: skipped, the "
		       "tmpfs may use huge pages\n");
		return;
	}
	before = file_bytes_settled(path);
	gens[0] = evbuf_open(pool);
	for (i = 0; i < 100; i++)
		evbuf_append(EVBUF_MARK, "segment", (uint64_t)i, 0);
	for (n = 1; n < 8; n++) {
		gens[n] = evbuf_rotate(pool, &closed);
		CHECK_EQ_INT(closed, gens[n - 1]);
		if (atomic_load(&h->slots[gens[n] % SALV_SLOTS].gen) != gens[n] ||
		    h->slots[gens[n] % SALV_SLOTS].off == 0) {
			printf("test_salvage_rotation_populates_what_is_used: skipped, the "
			       "tmpfs has no room for the pools\n");
			evbuf_close();
			for (i = n < 3 ? 0 : n - 2; i <= n; i++)
				evbuf_release(gens[i]);
			return;
		}
		for (i = 0; i < 100; i++)
			evbuf_append(EVBUF_MARK, "segment", (uint64_t)i, 0);
		if (n >= 3) /* the oldest of three goes back, undrained */
			evbuf_release(gens[n - 3]);
	}
	/* Held now: the segments of gens[5], [6] and the open gens[7], two
	 * chunks each (the one written, one ahead), and the fourth slot the
	 * two gens[4] kept for the next segment, zeroed; the first segment,
	 * populated 2 MiB ahead as a window's pool, gave the rest back. */
	CHECK(file_bytes_settled(path) - before <= 4 * 2 * EVBUF_CHUNK_BYTES);
	CHECK_EQ_INT(evbuf_close(), gens[7]);
	for (i = 5; i < 8; i++)
		drain_count(gens[i], &total);
	CHECK_EQ_INT(total, 3 * 100);
	/* drained, they keep nothing: only the fourth slot's two chunks */
	CHECK(file_bytes_settled(path) - before <= 2 * EVBUF_CHUNK_BYTES);
	/* which hold zeros, gens[4]'s records gone: a salvage reading the
	 * region finds nothing, nor does the next segment in it */
	{
		static char buf[2 * EVBUF_CHUNK_BYTES];
		int fd = open(path, O_RDONLY);
		size_t k, nonzero = 0;

		CHECK(fd >= 0 && pread(fd, buf, sizeof buf,
				       (off_t)h->slots[gens[4] % SALV_SLOTS].off) ==
				 (ssize_t)sizeof buf);
		for (k = 0; k < sizeof buf; k++)
			nonzero += buf[k] != 0;
		CHECK_EQ_INT(nonzero, 0);
		if (fd >= 0)
			close(fd);
	}
}

/* The flight recorder paused and resumed (or around a window): its held
 * segments go back undrained, each slot keeping its two chunks, and its
 * first segment after (evbuf_open_lead, two chunks ahead) is populated
 * no further than those: resuming costs no 2 MiB of fresh pages, as
 * evbuf_open's lead would (#29). Its records are kept. */
static void test_salvage_resume_populates_what_was_kept(struct salv_header *h,
							const char *path)
{
	const size_t pool = (size_t)768 << 20; /* the slots' size so far */
	uint64_t gens[4], closed, total = 0;
	long before, paused;
	int n, i;

	if (tmpfs_huge())
		return; /* said by the test before */
	before = file_bytes_settled(path);
	gens[0] = evbuf_open_lead(pool, 2 * EVBUF_CHUNK_BYTES);
	for (n = 0; n < 4; n++) {
		if (n)
			gens[n] = evbuf_rotate(pool, &closed);
		if (!gens[n] || atomic_load(&h->slots[gens[n] % SALV_SLOTS].gen) != gens[n] ||
		    h->slots[gens[n] % SALV_SLOTS].off == 0) {
			evbuf_close();
			for (i = 0; i <= n; i++)
				evbuf_release(gens[i]);
			return; /* no room in the tmpfs: said by the test before */
		}
		for (i = 0; i < 100; i++)
			evbuf_append(EVBUF_MARK, "segment", (uint64_t)i, 0);
		if (n == 3)
			evbuf_release(gens[0]);
	}
	/* paused: the held segments go back, undrained */
	CHECK_EQ_INT(evbuf_close(), gens[3]);
	for (n = 1; n < 4; n++)
		evbuf_release(gens[n]);
	paused = file_bytes_settled(path);
	CHECK(paused - before <= 4 * 2 * EVBUF_CHUNK_BYTES);
	/* resumed: in the slot of gens[0], which kept the chunk it wrote and
	 * the one after it when the helper had populated that before gens[0]
	 * was rotated away (it populates the open generation only), so at
	 * most that one more chunk */
	gens[0] = evbuf_open_lead(pool, 2 * EVBUF_CHUNK_BYTES);
	for (i = 0; i < 100; i++)
		evbuf_append(EVBUF_MARK, "segment", (uint64_t)i, 0);
	CHECK(file_bytes_settled(path) <= paused + EVBUF_CHUNK_BYTES);
	CHECK_EQ_INT(evbuf_close(), gens[0]);
	drain_count(gens[0], &total);
	CHECK_EQ_INT(total, 100);
}

/* The salvage file: refused outside a tmpfs; on /dev/shm a new pool is a
 * region of it, named in its header while its generation is held, with
 * the records in the file; its pages go back to the tmpfs on release;
 * the file goes with evbuf_salvage_remove(). Last: every later pool is
 * the file's. */
static void test_salvage_file(void)
{
	char dir[] = "/dev/shm/test_evbuf-XXXXXX", why[512];
	struct salv_header *h;
	const struct salv_slot *ss;
	struct evbuf_chunk c;
	struct evbuf_stats st;
	struct seen s;
	struct stat sb;
	const char *path;
	uint64_t gen, i;
	int fd;

	CHECK(evbuf_salvage_open("/proc", why, sizeof why) == NULL);
	CHECK(strstr(why, "not a tmpfs") != NULL);
	if (!mkdtemp(dir)) {
		printf("skipped: no /dev/shm\n");
		return;
	}
	h = evbuf_salvage_open(dir, why, sizeof why);
	if (!h) {
		printf("skipped: %s\n", why);
		rmdir(dir);
		return;
	}
	path = evbuf_salvage_path();
	CHECK(path && stat(path, &sb) == 0);
	CHECK_EQ_INT(sb.st_mode & 0777, 0600);
	CHECK_EQ_INT(memcmp(h->magic, SALV_MAGIC, 8), 0);
	CHECK_EQ_INT(h->pid, getpid());
	gen = evbuf_open((size_t)512 << 20); /* larger than any slot so far */
	for (i = 0; i < 100; i++)
		evbuf_append(EVBUF_MARK, "salvaged", i, 0);
	evbuf_close();
	ss = &h->slots[gen % SALV_SLOTS];
	CHECK_EQ_INT(atomic_load(&ss->gen), gen);
	CHECK(ss->off >= SALV_HEADER_BYTES && ss->off % SALV_ALIGN == 0);
	CHECK_EQ_INT(ss->bytes, (uint64_t)512 << 20);
	fd = open(path, O_RDONLY);
	CHECK(fd >= 0 && pread(fd, &c, sizeof c, (off_t)ss->off) == (ssize_t)sizeof c);
	CHECK(atomic_load(&c.used) > 100 * 16);
	init_seen(&s);
	CHECK_EQ_INT(evbuf_drain(gen, visit, &s, &st), 0);
	CHECK_EQ_INT(st.records, 100);
	evbuf_release(gen);
	CHECK_EQ_INT(atomic_load(&ss->gen), 0);
	CHECK(pread(fd, &c, sizeof c, (off_t)ss->off) == (ssize_t)sizeof c);
	CHECK_EQ_INT(atomic_load(&c.used), 0); /* the page left the file */
	close(fd);
	test_salvage_rotation_populates_what_is_used(h, path);
	test_salvage_resume_populates_what_was_kept(h, path);
	test_salvage_pool_without_room(h, dir);
	test_salvage_pool_leaves_the_program_room(h, dir);
	evbuf_salvage_remove();
	CHECK(stat(path, &sb) != 0);
	rmdir(dir);
}

int main(void)
{
	pthread_setname_np(pthread_self(), "test_evbuf");
	test_inactive_is_noop();
	test_round_trip();
	test_long_name_cut();
	test_full_pool_drops_and_counts();
	test_drain_cut();
	test_concurrent_writers();
	test_rotate_loses_nothing();
	test_held_slot_is_stepped_over();
	test_slots_recycle();
	test_append_from_signal_handler();
	test_compact_records();
	test_inline_append();
	test_prefault();
	test_thread_churn_returns_chunks();
	test_unmappable_pool_says_why();
	test_salvage_file();
	return check_done();
}

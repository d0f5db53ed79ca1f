/*
 * test_evbuf — the per-thread event buffers: records come back complete and
 * in order per thread, nothing is recorded outside a generation, a full pool
 * drops and counts, concurrent writers neither lose nor tear records, and a
 * signal handler appending mid-append spoils nothing.
 */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "check.h"
#include "events/evbuf.h"

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
	CHECK_EQ_INT(evbuf_open(1 << 20), 0); /* already open */
	for (i = 0; i < 1000; i++) {
		snprintf(name, sizeof name, "ev%llu", (unsigned long long)i);
		evbuf_append(EVBUF_MARK, name, i, 0);
	}
	CHECK_EQ_INT(evbuf_drain(gen, visit, &s, &st), -1); /* still open */
	CHECK_EQ_INT(evbuf_close(), gen);
	CHECK_EQ_INT(evbuf_active(), 0);
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

static void test_append_from_signal_handler(void)
{
	struct sigaction sa, old;
	struct itimerval on = { { 0, 100 }, { 0, 100 } }, off = { { 0, 0 }, { 0, 0 } };
	struct nested_seen seen = { 0, 0, 0, 1 };
	struct evbuf_stats st;
	uint64_t gen, id, appended = 0;
	char name[32];

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = append_from_handler;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGALRM, &sa, &old);
	gen = evbuf_open(256u << 20);
	setitimer(ITIMER_REAL, &on, NULL);
	for (id = 0; id < 200000; id++) {
		int n = snprintf(name, sizeof name, "ev%llu", (unsigned long long)appended);

		if (evbuf_append_raw(EVBUF_MARK, 1, name, (uint32_t)n, appended, 0) == 0)
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

int main(void)
{
	pthread_setname_np(pthread_self(), "test_evbuf");
	test_inactive_is_noop();
	test_round_trip();
	test_long_name_cut();
	test_full_pool_drops_and_counts();
	test_concurrent_writers();
	test_slots_recycle();
	test_append_from_signal_handler();
	return check_done();
}

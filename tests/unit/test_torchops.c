/*
 * test_torchops — the C end of the operator collector
 * (src/capture/torch/torchops.c) against a fake host and shim: an operator
 * belongs to the window its start fell in. One that ends after that window
 * closed (a c10d collective's label, ended on the backend's thread) is
 * added at the window's collect, which waits for the window's open labels;
 * one dropped by a full buffer is not; a label still open when the wait
 * ends is noted; profhost's own labels are neither kept nor waited for.
 * Memory (prof.capture{profile_memory}): torch's allocations are recorded
 * only while wanted and a window or recorder segment is open, one
 * EVBUF_TORCH_MEM record each; with the recorder, operators that start in
 * a segment go into the segment open when they end; torch's own profiler
 * taking the slot is noted once.
 */
#include "check.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "capture/torch/torchops.h"
#include "events/memrec.h"
#include "capture/source.h"
#include "common/evformat.h"
#include "common/log.h"

/* ---- the fake shim: appends counted (or refused), the open generation */

static _Atomic uint64_t open_gen;   /* evbuf_current() */
static _Atomic int appended;
static _Atomic int refuse;          /* a full pool: appends fail */
static struct {                     /* the last record appended */
	uint16_t kind;
	uint64_t id, a, gen;
	uint32_t len;
	char payload[256];
} last;

static int fake_append(uint16_t kind, int64_t ts, const void *payload, uint32_t len,
		       uint64_t id, uint64_t a)
{
	(void)ts;
	if (!atomic_load(&open_gen) || atomic_load(&refuse))
		return -1;
	atomic_fetch_add(&appended, 1);
	last.kind = kind;
	last.id = id;
	last.a = a;
	last.gen = atomic_load(&open_gen);
	last.len = len;
	memcpy(last.payload, payload, len < sizeof last.payload ? len : sizeof last.payload);
	return 0;
}

static uint64_t fake_current(void)
{
	return atomic_load(&open_gen);
}

static bool fake_disabled(void *ctx)
{
	(void)ctx;
	return false;
}

static const struct torchops_api *api;

static struct torchops_op op_named(const char *name, enum torchops_scope scope, int64_t start,
				   int64_t end)
{
	struct torchops_op op;

	memset(&op, 0, sizeof op);
	op.name = name;
	op.name_len = (uint32_t)strlen(name);
	op.scope = scope;
	op.start = start;
	op.end = end;
	op.seq = -1;
	return op;
}

/* The window opens (evbuf first, then the sources), then closes (evbuf
 * first): window.c's order. */
static void open_window(uint64_t gen)
{
	atomic_store(&open_gen, gen);
	torchops_set_recording(true, gen);
}

static void close_window(void)
{
	atomic_store(&open_gen, 0);
	torchops_set_recording(false, 0);
}

/* Events of `t` named `name`. */
static int named(const struct trace *t, const char *name)
{
	size_t i;
	int n = 0;

	for (i = 0; i < t->nev; i++)
		n += strcmp(trace_str(t, t->ev[i].name), name) == 0;
	return n;
}

static const struct trace_event *event(const struct trace *t, const char *name)
{
	size_t i;

	for (i = 0; i < t->nev; i++)
		if (strcmp(trace_str(t, t->ev[i].name), name) == 0)
			return &t->ev[i];
	return NULL;
}

struct late_end {
	uint64_t gen;
	unsigned delay_ms;
	struct torchops_op op;
	int32_t tid;
};

/* Ends `op` of window `gen` after delay_ms, as gloo's worker thread does. */
static void *end_later(void *arg)
{
	struct late_end *l = arg;

	usleep(l->delay_ms * 1000);
	l->tid = (int32_t)gettid();
	api->op_in(&l->op, l->gen);
	return NULL;
}

static int64_t ms_since(const struct timespec *a)
{
	struct timespec b;

	clock_gettime(CLOCK_MONOTONIC, &b);
	return (b.tv_sec - a->tv_sec) * 1000 + (b.tv_nsec - a->tv_nsec) / 1000000;
}

/* A label and an operator begun in the window, ended 100 ms after it
 * closed on another thread: the collect waits for the label and adds
 * both, with the ending thread's id; what ends after the collect is lost,
 * harmlessly. */
static void test_ended_after_close(void)
{
	struct late_end l = { 1, 100, op_named("gloo:all_reduce", TORCHOPS_USER, 1000, 5000), 0 };
	struct torchops_op in_window = op_named("inside", TORCHOPS_USER, 1100, 1200);
	struct torchops_op stack_op = op_named("aten::copy_", TORCHOPS_FUNCTION, 1500, 4000);
	struct timespec t0;
	struct trace t;
	struct err e;
	pthread_t th;

	open_window(1);
	CHECK_EQ_INT(api->window(), 1);
	api->label_begin(1);
	api->label_begin(1);
	api->op_in(&in_window, 1); /* ends in the window: appended */
	CHECK_EQ_INT(atomic_load(&appended), 1);
	close_window();
	CHECK_EQ_INT(api->window(), 0);
	api->op_in(&stack_op, 1); /* began in window 1, ended after it */
	CHECK_EQ_INT(atomic_load(&appended), 1);
	pthread_create(&th, NULL, end_later, &l);
	CHECK_EQ_INT(trace_init(&t), 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	CHECK_EQ_INT(torchops_tail_collect(1, 5000, &t, &e), 0);
	CHECK(ms_since(&t0) >= 90 && ms_since(&t0) < 4000);
	pthread_join(th, NULL);
	CHECK_EQ_INT(named(&t, "gloo:all_reduce"), 1);
	CHECK_EQ_INT(named(&t, "aten::copy_"), 1);
	CHECK_EQ_INT(named(&t, "inside"), 0); /* in the buffers, not here */
	if (event(&t, "gloo:all_reduce")) {
		CHECK_EQ_INT(event(&t, "gloo:all_reduce")->ts, 1000);
		CHECK_EQ_INT(event(&t, "gloo:all_reduce")->dur, 4000);
		CHECK_EQ_INT(event(&t, "gloo:all_reduce")->tid, l.tid);
		CHECK_EQ_INT(event(&t, "gloo:all_reduce")->cat, TRACE_CAT_USER_ANNOTATION);
		CHECK_EQ_INT(event(&t, "aten::copy_")->cat, TRACE_CAT_CPU_OP);
	}
	CHECK(!t.meta.notes || !strstr(t.meta.notes, "had not ended"));
	api->op_in(&in_window, 1); /* after the collect: nowhere */
	CHECK_EQ_INT(torchops_tail_collect(1, 5000, &t, &e), 0);
	CHECK_EQ_INT(named(&t, "inside"), 0);
	trace_free(&t);
}

/* An append refused while the window's generation is still open is a
 * full pool's drop (counted by the shim), never kept; one refused
 * because the buffers closed first (window.c closes them before telling
 * the sources) is kept. */
static void test_full_pool_and_close_order(void)
{
	struct torchops_op a = op_named("dropped", TORCHOPS_FUNCTION, 10, 20);
	struct torchops_op b = op_named("between", TORCHOPS_FUNCTION, 10, 30);
	struct trace t;
	struct err e;

	open_window(2);
	atomic_store(&refuse, 1);
	api->op_in(&a, 2);
	atomic_store(&refuse, 0);
	atomic_store(&open_gen, 0); /* the buffers closed, the sources not told yet */
	CHECK_EQ_INT(api->window(), 2);
	api->op_in(&b, 2);
	torchops_set_recording(false, 0);
	CHECK_EQ_INT(trace_init(&t), 0);
	CHECK_EQ_INT(torchops_tail_collect(2, 0, &t, &e), 0);
	CHECK_EQ_INT(named(&t, "dropped"), 0);
	CHECK_EQ_INT(named(&t, "between"), 1);
	trace_free(&t);
}

/* A label that has not ended when the wait is over is left out, and the
 * window's notes say so; profhost's own labels are not kept and not
 * waited for; an operator that began outside windows (gen 0) is never
 * written. */
static void test_open_and_own_labels(void)
{
	struct torchops_op own = op_named("ProfilerStep#4", TORCHOPS_USER, 10, 90);
	struct torchops_op outside = op_named("outside", TORCHOPS_FUNCTION, 10, 90);
	struct timespec t0;
	struct trace t;
	struct err e;

	open_window(3);
	api->label_begin(3); /* never ends */
	close_window();
	CHECK_EQ_INT(trace_init(&t), 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	CHECK_EQ_INT(torchops_tail_collect(3, 100, &t, &e), 0);
	CHECK(ms_since(&t0) >= 90);
	CHECK(t.meta.notes && strstr(t.meta.notes, "1 record_function label begun in this window "
				     "had not ended 100 ms after it closed: left out"));
	trace_free(&t);

	open_window(4);
	api->label_begin(4);
	close_window();
	api->op_in(&own, 4);
	api->op_in(&outside, 0);
	CHECK_EQ_INT(trace_init(&t), 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	CHECK_EQ_INT(torchops_tail_collect(4, 5000, &t, &e), 0);
	CHECK(ms_since(&t0) < 4000); /* the own label ended what it counted */
	CHECK_EQ_INT(t.nev, 0);
	CHECK(!t.meta.notes || !strstr(t.meta.notes, "had not ended"));
	trace_free(&t);
}

/* Allocations are recorded while profile_memory is wanted and a window
 * is open: memory_on() says so (torch asks it before each allocation),
 * and each one is one EVBUF_TORCH_MEM record with the block, its size,
 * the allocator's totals and the device packed in `a`. */
static void test_memory_records(void)
{
	struct torchops_mem m = { 0x7f0000001000ULL, 65536, 131072, 0, 0, -1 };
	struct memrec r;
	int before;

	open_window(8);
	CHECK(!api->memory_on()); /* not wanted */
	before = atomic_load(&appended);
	api->mem(&m);
	CHECK_EQ_INT(atomic_load(&appended), before);
	close_window();

	torchops_set_memory(true);
	CHECK(!api->memory_on()); /* no window */
	open_window(9);
	CHECK(api->memory_on());
	api->mem(&m);
	CHECK_EQ_INT(atomic_load(&appended), before + 1);
	CHECK_EQ_INT(last.kind, EVBUF_TORCH_MEM);
	CHECK_EQ_INT(last.id, 0);
	CHECK_EQ_INT(last.len, sizeof r);
	memcpy(&r, last.payload, sizeof r);
	CHECK_EQ_INT(r.addr, 0x7f0000001000ULL);
	CHECK_EQ_INT(r.bytes, 65536);
	CHECK_EQ_INT(r.total_allocated, 131072);
	CHECK_EQ_INT(r.total_reserved, 0);
	CHECK_EQ_INT(memrec_device_type(last.a), 0);
	CHECK_EQ_INT(memrec_device_index(last.a), -1);
	CHECK(last.a < (1ULL << 32)); /* stored compact */
	m.bytes = -65536;
	m.device_type = 1;
	m.device_index = 3;
	api->mem(&m);
	memcpy(&r, last.payload, sizeof r);
	CHECK_EQ_INT(r.bytes, -65536);
	CHECK_EQ_INT(memrec_device_type(last.a), 1);
	CHECK_EQ_INT(memrec_device_index(last.a), 3);
	close_window();
	CHECK(!api->memory_on());
	api->mem(&m);
	CHECK_EQ_INT(atomic_load(&appended), before + 2);
	torchops_set_memory(false);
}

/* With the recorder keeping operators, window() tags a segment's
 * operators apart from a window's; one that ends after the segment
 * rotated goes into the segment open then, one that ends in a window
 * (the recorder stopped for it) nowhere; memory is on in segments. */
static void test_recorder_segments(void)
{
	struct torchops_op op = op_named("aten::mul", TORCHOPS_FUNCTION, 10, 90);
	uint64_t tag5, tag6;
	int before = atomic_load(&appended);

	CHECK_EQ_INT(api->window(), 0);
	torchops_set_memory(true);
	atomic_store(&open_gen, 5);
	torchops_set_recorder(5);
	CHECK(api->memory_on());
	tag5 = api->window();
	CHECK(tag5 != 0 && tag5 != 5);
	atomic_store(&open_gen, 6); /* rotated */
	torchops_set_recorder(6);
	tag6 = api->window();
	CHECK(tag6 != tag5);
	api->op_in(&op, tag5);
	CHECK_EQ_INT(atomic_load(&appended), before + 1);
	CHECK_EQ_INT(last.kind, EVBUF_TORCH_OP);
	CHECK_EQ_INT(last.gen, 6);
	/* a window opens: the recorder stops first */
	torchops_set_recorder(0);
	atomic_store(&open_gen, 0);
	CHECK(!api->memory_on());
	CHECK_EQ_INT(api->window(), 0);
	open_window(7);
	CHECK_EQ_INT(api->window(), 7);
	api->op_in(&op, tag6);
	CHECK_EQ_INT(atomic_load(&appended), before + 1);
	close_window();
	torchops_set_memory(false);
}

/* A child forked while memory is recorded (a DataLoader worker started
 * in a window) records nothing and tells torch no: its allocator keeps no
 * table of blocks for profhost. */
static void test_forked_child_records_nothing(void)
{
	pid_t pid;
	int status = 0;

	torchops_set_memory(true);
	open_window(12);
	CHECK(api->memory_on());
	pid = fork();
	if (pid == 0)
		_exit(api->memory_on() || api->window() ? 1 : 0);
	CHECK(pid > 0);
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CHECK(api->memory_on()); /* the parent's unchanged */
	close_window();
	torchops_set_memory(false);
}

/* torch's own profiler took a thread's slot: one note, in the first
 * collect after it. */
static void test_mem_aside_note(void)
{
	struct trace t;
	struct err e;

	CHECK_EQ_INT(trace_init(&t), 0);
	CHECK_EQ_INT(torchops_mem_collect(&t, &e), 0);
	CHECK(!t.meta.notes);
	api->mem_aside();
	api->mem_aside();
	CHECK_EQ_INT(torchops_mem_collect(&t, &e), 0);
	CHECK(t.meta.notes && strstr(t.meta.notes, "torch's own profiler ran beside profhost's "
				     "profile_memory"));
	trace_free(&t);
	CHECK_EQ_INT(trace_init(&t), 0);
	api->mem_aside();
	CHECK_EQ_INT(torchops_mem_collect(&t, &e), 0);
	CHECK(!t.meta.notes); /* said once */
	trace_free(&t);
}

int main(void)
{
	struct shim_api shim;
	struct capture_host h;

	log_set_level(LOG_WARN);
	memset(&shim, 0, sizeof shim);
	shim.version = SHIM_API_VERSION;
	shim.evbuf_append_raw = fake_append;
	shim.evbuf_current = fake_current;
	memset(&h, 0, sizeof h);
	h.shim = &shim;
	h.disabled = fake_disabled;
	api = torchops_table(&h);
	CHECK_EQ_INT(api->version, TORCHOPS_ABI_VERSION);
	test_ended_after_close();
	test_full_pool_and_close_order();
	test_open_and_own_labels();
	test_memory_records();
	test_recorder_segments();
	test_mem_aside_note();
	test_forked_child_records_nothing();
	return check_done();
}

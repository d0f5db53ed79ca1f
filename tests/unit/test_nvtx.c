/*
 * test_nvtx — the shim's NVTX injection, driven the way an NVTX3 instance
 * drives it: through an export table and the function-pointer slots it
 * fills (no CUDA headers needed). Checks what a user sees in the trace:
 * names (ASCII, wide, registered), domains and categories, nesting per
 * domain, ranges ending on another thread, ranges clipped at a window's
 * start, unbalanced pops counted, step and capture-range triggers, and,
 * with 8 threads x N ranges at once, that nothing is lost, duplicated or
 * torn (run it under ThreadSanitizer too: see tests/CMakeLists.txt); a
 * window's trace kept within its budget, the rest counted.
 *
 *   test_nvtx [ranges per thread]   (default 125000)
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "shim/nvtx.h"
#include "shim/nvtx_abi.h"
#include "check.h"
#include "events/assemble.h"
#include "common/clock.h"
#include "shim/evbuf.h"

/* ---- a fake NVTX instance: slots, tables, export table ---- */

#define NSLOTS 16

struct instance {
	nvtx_abi_fn core[NSLOTS], core2[NSLOTS];
	nvtx_abi_fn *core_tab[NSLOTS + 1], *core2_tab[NSLOTS + 1];
	uint32_t version_told;
};

static struct instance inst[2];
static struct instance *cur; /* the instance the export table describes */

static int get_module(int module, nvtx_abi_fn ***table, unsigned int *size)
{
	if (module == NVTX_ABI_MODULE_CORE)
		*table = cur->core_tab;
	else if (module == NVTX_ABI_MODULE_CORE2)
		*table = cur->core2_tab;
	else
		return 0;
	*size = NSLOTS;
	return 1;
}

static void set_version(uint32_t v)
{
	cur->version_told = v;
}

static const struct nvtx_abi_callbacks callbacks = { sizeof callbacks, get_module };
static const struct nvtx_abi_version_info version = { sizeof version, 3, 0, set_version };

static const void *get_table(uint32_t id)
{
	if (id == NVTX_ABI_ETID_CALLBACKS)
		return &callbacks;
	if (id == NVTX_ABI_ETID_VERSIONINFO)
		return &version;
	return NULL;
}

static void instance_init(struct instance *in)
{
	int i;

	memset(in, 0, sizeof *in);
	for (i = 0; i < NSLOTS; i++) {
		in->core_tab[i] = i ? &in->core[i] : NULL;
		in->core2_tab[i] = i ? &in->core2[i] : NULL;
	}
}

/* Typed calls through instance 0's slots, as nvToolsExt.h's inline
 * functions make them. */
typedef struct nvtx_abi_attributes attr_t;
#define CORE(id, type) ((type)inst[0].core[NVTX_ABI_CORE_##id])
#define CORE2(id, type) ((type)inst[0].core2[NVTX_ABI_CORE2_##id])

static int push_a(const char *s) { return CORE(RangePushA, int (*)(const char *))(s); }
static int push_w(const wchar_t *s) { return CORE(RangePushW, int (*)(const wchar_t *))(s); }
static int push_ex(const attr_t *a) { return CORE(RangePushEx, int (*)(const attr_t *))(a); }
static int pop(void) { return CORE(RangePop, int (*)(void))(); }
static uint64_t start_a(const char *s) { return CORE(RangeStartA, uint64_t (*)(const char *))(s); }
static void end(uint64_t id) { CORE(RangeEnd, void (*)(uint64_t))(id); }
static void mark_a(const char *s) { CORE(MarkA, void (*)(const char *))(s); }
static void name_thread(uint32_t tid, const char *s)
{
	CORE(NameOsThreadA, void (*)(uint32_t, const char *))(tid, s);
}
static void *domain_create(const char *s) { return CORE2(DomainCreateA, void *(*)(const char *))(s); }
static void *register_a(void *d, const char *s)
{
	return CORE2(DomainRegisterStringA, void *(*)(void *, const char *))(d, s);
}
static int dpush(void *d, const attr_t *a) { return CORE2(DomainRangePushEx, int (*)(void *, const attr_t *))(d, a); }
static int dpop(void *d) { return CORE2(DomainRangePop, int (*)(void *))(d); }
static void dmark(void *d, const attr_t *a) { CORE2(DomainMarkEx, void (*)(void *, const attr_t *))(d, a); }
static void dcategory(void *d, uint32_t c, const char *s)
{
	CORE2(DomainNameCategoryA, void (*)(void *, uint32_t, const char *))(d, c, s);
}

static attr_t attr_ascii(const char *s, uint32_t category)
{
	attr_t a;

	memset(&a, 0, sizeof a);
	a.version = 3;
	a.size = sizeof a;
	a.category = category;
	a.message_type = NVTX_ABI_MESSAGE_ASCII;
	a.message.ascii = s;
	return a;
}

static attr_t attr_registered(const void *h, uint32_t category)
{
	attr_t a = attr_ascii(NULL, category);

	a.message_type = NVTX_ABI_MESSAGE_REGISTERED;
	a.message.registered = h;
	return a;
}

/* ---- windows: open, record, assemble ---- */

static int64_t window_start;

static void window_open(void)
{
	window_start = clock_now_ns();
	CHECK(evbuf_open(256u << 20) != 0);
}

/* Closes the window and assembles it into *t. */
static void window_close(struct trace *t)
{
	uint64_t gen = evbuf_close();
	struct assemble_source src = { .drain = evbuf_drain, .gen = gen,
				       .domain_name = nvtx_domain_name,
				       .category_name = nvtx_category_name };

	CHECK(trace_init(t) == 0);
	t->meta.pid = getpid();
	t->meta.start_ts = window_start;
	t->meta.end_ts = clock_now_ns();
	CHECK_EQ_INT(assemble_window(t, &src, NULL, 0), 0);
	evbuf_release(gen);
}

/* The n-th event named `name` (from 0), or NULL. */
static const struct trace_event *find(const struct trace *t, const char *name, int n)
{
	size_t i;

	for (i = 0; i < t->nev; i++)
		if (strcmp(trace_str(t, t->ev[i].name), name) == 0 && n-- == 0)
			return &t->ev[i];
	return NULL;
}

static int count(const struct trace *t, const char *name)
{
	int n = 0;

	while (find(t, name, n))
		n++;
	return n;
}

/* Value of string arg `key` of e, or NULL. */
static const char *arg_str(const struct trace *t, const struct trace_event *e, const char *key)
{
	uint32_t i;

	for (i = 0; i < e->nargs; i++) {
		const struct trace_arg *a = &t->args[e->args + i];
		if (strcmp(trace_str(t, a->key), key) == 0 && a->type == TRACE_ARG_STR)
			return trace_str(t, a->v.str);
	}
	return NULL;
}

static int contains(const struct trace_event *outer, const struct trace_event *inner)
{
	return outer->ts <= inner->ts && inner->ts + inner->dur <= outer->ts + outer->dur;
}

/* ---- triggers ---- */

static atomic_int steps, begins, ends;
static atomic_int begin_answer = 1;

static void on_step(void *ctx) { (void)ctx; atomic_fetch_add(&steps, 1); }
static int on_begin(void *ctx) { (void)ctx; atomic_fetch_add(&begins, 1); return atomic_load(&begin_answer); }
static _Atomic int64_t end_ts;
static void on_end(void *ctx, int64_t ts)
{
	(void)ctx;
	atomic_store(&end_ts, ts);
	atomic_fetch_add(&ends, 1);
}

static void configure(const char *step_range, const char *step_mark, const char *step_domain,
		      const char *capture_range, const char *capture_domain)
{
	struct nvtx_config c = { 0 };

	c.record = true;
	c.step_range = step_range;
	c.step_mark = step_mark;
	c.step_domain = step_domain;
	c.capture_range = capture_range;
	c.capture_domain = capture_domain;
	c.step = on_step;
	c.capture_begin = on_begin;
	c.capture_end = on_end;
	nvtx_configure(&c);
}

/* ---- the tests ---- */

static void test_attach(void)
{
	instance_init(&inst[0]);
	instance_init(&inst[1]);
	CHECK_EQ_INT(nvtx_attached(), 0);
	setenv("PROF_DISABLE", "1", 1);
	cur = &inst[0];
	CHECK_EQ_INT(InitializeInjectionNvtx2(get_table), 0);
	CHECK(inst[0].core[NVTX_ABI_CORE_RangePushA] == NULL);
	unsetenv("PROF_DISABLE");
	CHECK_EQ_INT(InitializeInjectionNvtx2(get_table), 1);
	CHECK_EQ_INT(inst[0].version_told, 3);
	/* A second library embedding NVTX attaches too (idempotent). */
	cur = &inst[1];
	CHECK_EQ_INT(InitializeInjectionNvtx2(get_table), 1);
	CHECK_EQ_INT(nvtx_attached(), 1);
	CHECK(inst[0].core[NVTX_ABI_CORE_RangePushA] != NULL);
	CHECK(inst[1].core[NVTX_ABI_CORE_RangePushA] == inst[0].core[NVTX_ABI_CORE_RangePushA]);
	CHECK(inst[0].core2[NVTX_ABI_CORE2_DomainCreateA] != NULL);
	/* Slots profhost does not implement stay as NVTX left them. */
	CHECK(inst[0].core2[6] == NULL); /* DomainResourceCreate */
	/* No export table: refused, nothing written. */
	CHECK_EQ_INT(InitializeInjectionNvtx2(NULL), 0);
	cur = &inst[0];
}

static void test_outside_window_records_nothing(void)
{
	struct trace t;

	CHECK_EQ_INT(push_a("outer"), 0);
	CHECK_EQ_INT(push_a("inner"), 1);
	CHECK_EQ_INT(pop(), 1);
	CHECK_EQ_INT(pop(), 0);
	CHECK_EQ_INT(pop(), -1); /* nothing open */
	mark_a("m");
	window_open();
	window_close(&t);
	CHECK_EQ_INT(t.nev, 0);
	CHECK_EQ_INT(t.counters.unbalanced_pops, 0);
	trace_free(&t);
}

static void test_names_domains_categories(void)
{
	void *dom = domain_create("app"), *dom2 = domain_create("app");
	void *reg = register_a(dom, "registered name");
	attr_t a_reg = attr_registered(reg, 7), a_mark = attr_ascii("dmark", 0);
	const struct trace_event *e, *outer, *w;
	struct trace t;
	uint64_t id;

	CHECK(dom != NULL);
	CHECK(dom == dom2); /* one name, one domain */
	CHECK(register_a(dom, "registered name") == reg);
	dcategory(dom, 7, "compute");
	name_thread((uint32_t)syscall(SYS_gettid), "my thread");

	window_open();
	push_a("outer");
	dpush(dom, &a_reg);
	/* Invalid code points (a lone surrogate, beyond U+10FFFF) become U+FFFD. */
	push_w(L"wide \u00e9\u4e2d\U0001F600 \xd800 \x110000");
	pop();
	/* Domains keep separate stacks: this pops "outer", not the domain range. */
	pop();
	dmark(dom, &a_mark);
	dpop(dom);
	id = start_a("started");
	end(id);
	{
		attr_t a_ex = attr_ascii("ex", 3); /* an unnamed category */
		push_ex(&a_ex);
		pop();
	}
	window_close(&t);
	e = find(&t, "ex", 0);
	CHECK(e && e->nargs == 1 && t.args[e->args].type == TRACE_ARG_UINT &&
	      t.args[e->args].v.u == 3);

	outer = find(&t, "outer", 0);
	e = find(&t, "registered name", 0);
	w = find(&t, "wide \xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80 \xef\xbf\xbd \xef\xbf\xbd", 0);
	CHECK(outer && e && w);
	if (outer && e && w) {
		CHECK_EQ_STR(arg_str(&t, e, "domain"), "app");
		CHECK_EQ_STR(arg_str(&t, e, "category"), "compute");
		CHECK(arg_str(&t, outer, "domain") == NULL); /* default domain */
		CHECK(contains(outer, w));
		/* The domain range outlives "outer": popped after it. */
		CHECK(e->ts + e->dur > outer->ts + outer->dur);
		CHECK_EQ_INT(e->flags, 0);
	}
	CHECK(find(&t, "started", 0) != NULL);
	e = find(&t, "dmark", 0);
	CHECK(e && e->ph == TRACE_PH_INSTANT);
	if (e)
		CHECK_EQ_STR(arg_str(&t, e, "domain"), "app");
	CHECK_EQ_STR(nvtx_thread_name((int32_t)syscall(SYS_gettid)), "my thread");
	CHECK_EQ_INT(t.counters.unbalanced_pops, 0);
	CHECK_EQ_INT(t.counters.clipped, 0);
	trace_free(&t);
}

struct ender {
	uint64_t id;
	int64_t ended;
};

static void *end_elsewhere(void *arg)
{
	struct ender *en = arg;

	usleep(2000);
	end(en->id);
	en->ended = clock_now_ns();
	return NULL;
}

static void test_range_ends_on_another_thread(void)
{
	struct ender en;
	struct trace t;
	pthread_t th;
	const struct trace_event *e;

	window_open();
	en.id = start_a("handoff");
	pthread_create(&th, NULL, end_elsewhere, &en);
	pthread_join(th, NULL);
	window_close(&t);
	e = find(&t, "handoff", 0);
	CHECK(e != NULL);
	if (e) {
		CHECK_EQ_INT(e->tid, (int32_t)syscall(SYS_gettid)); /* the starting thread */
		CHECK(e->dur >= 2000000);
		CHECK(e->ts + e->dur <= en.ended);
	}
	CHECK_EQ_INT(t.counters.unbalanced_pops, 0);
	trace_free(&t);
}

static void test_clipped_at_both_edges(void)
{
	struct trace t;
	const struct trace_event *e;
	uint64_t id;

	/* Armed: the name of a range opened before the window is kept. */
	nvtx_arm(1);
	push_a("armed outer");
	nvtx_arm(0);
	push_a("unarmed inner");
	id = start_a("started before");
	window_open();
	pop();
	pop();
	end(id);
	pop(); /* unbalanced: counted, no event */
	push_a("open at the end");
	window_close(&t);

	e = find(&t, "armed outer", 0);
	CHECK(e && (e->flags & TRACE_F_CLIPPED_START) && e->ts == window_start);
	CHECK_EQ_INT(count(&t, "(began before the window)"), 2);
	e = find(&t, "open at the end", 0);
	CHECK(e && (e->flags & TRACE_F_CLIPPED_END));
	CHECK_EQ_INT(t.counters.unbalanced_pops, 1);
	CHECK_EQ_INT(t.counters.clipped, 4);
	trace_free(&t);
	pop();
}

/* The thread that opens a window records its own open ranges at once. */
static void test_replay_on_window_open(void)
{
	struct trace t;
	const struct trace_event *e;

	nvtx_arm(1);
	push_a("epoch");
	nvtx_arm(0);
	push_a("step");
	window_open();
	nvtx_replay();
	nvtx_replay(); /* idempotent */
	push_a("inside");
	pop();
	pop(); /* "step" ends inside */
	window_close(&t);
	pop(); /* "epoch" ends after */

	e = find(&t, "epoch", 0);
	CHECK(e && e->flags == (TRACE_F_CLIPPED_START | TRACE_F_CLIPPED_END) &&
	      e->ts == window_start);
	e = find(&t, "(began before the window)", 0);
	CHECK(e && e->flags == TRACE_F_CLIPPED_START);
	CHECK_EQ_INT(count(&t, "(began before the window)"), 1);
	CHECK_EQ_INT(count(&t, "epoch"), 1);
	e = find(&t, "inside", 0);
	CHECK(e && e->flags == 0);
	CHECK_EQ_INT(t.counters.unbalanced_pops, 0);
	trace_free(&t);
}


/* Levels pushed outside a window in several domains, plain ones (only
 * counted) among written ones: popped inside the window in any order, each
 * is a range clipped at the window's start, in its own domain. */
static void test_quiet_levels_in_domains(void)
{
	void *dom = domain_create("quiet");
	attr_t a_dom = attr_ascii("in quiet", 0), a_cat = attr_ascii("with category", 4);
	const struct trace_event *e;
	struct trace t;
	int n_dom = 0;
	size_t i;

	CHECK_EQ_INT(push_a("p0"), 0);         /* plain */
	CHECK_EQ_INT(dpush(dom, &a_dom), 1);   /* written: another domain */
	CHECK_EQ_INT(push_a("p2"), 2);         /* plain */
	CHECK_EQ_INT(push_ex(&a_cat), 3);      /* written: a category */
	CHECK_EQ_INT(push_a("p4"), 4);         /* plain */
	window_open();
	CHECK_EQ_INT(dpop(dom), 4);            /* below two default-domain levels */
	CHECK_EQ_INT(pop(), 3);                /* p4 */
	CHECK_EQ_INT(pop(), 2);                /* the category level */
	push_a("inside");
	CHECK_EQ_INT(pop(), 2);
	CHECK_EQ_INT(pop(), 1);                /* p2 */
	CHECK_EQ_INT(pop(), 0);                /* p0 */
	CHECK_EQ_INT(pop(), -1);
	window_close(&t);

	CHECK_EQ_INT(count(&t, "(began before the window)"), 5);
	for (i = 0; i < t.nev; i++) {
		e = &t.ev[i];
		if (strcmp(trace_str(&t, e->name), "(began before the window)") != 0)
			continue;
		CHECK(e->flags == TRACE_F_CLIPPED_START && e->ts == window_start);
		if (arg_str(&t, e, "domain")) {
			CHECK_EQ_STR(arg_str(&t, e, "domain"), "quiet");
			n_dom++;
		}
	}
	CHECK_EQ_INT(n_dom, 1);
	e = find(&t, "inside", 0);
	CHECK(e && e->flags == 0);
	CHECK_EQ_INT(t.counters.unbalanced_pops, 1);
	trace_free(&t);
}

static struct trace replay_trace;

/* A thread whose only ranges so far were plain (it never needed a shadow)
 * opens a window: its open ranges are recorded at once. */
static void *replay_fresh(void *arg)
{
	(void)arg;
	push_a("outer");
	push_a("inner");
	window_open();
	nvtx_replay();
	pop();
	window_close(&replay_trace);
	pop();
	return NULL;
}

static void test_replay_fresh_thread(void)
{
	const struct trace_event *e;
	pthread_t th;
	int i, n = 0;

	pthread_create(&th, NULL, replay_fresh, NULL);
	pthread_join(th, NULL);
	CHECK_EQ_INT(count(&replay_trace, "(began before the window)"), 2);
	for (i = 0; i < 2; i++) {
		e = find(&replay_trace, "(began before the window)", i);
		if (e && e->flags == (TRACE_F_CLIPPED_START | TRACE_F_CLIPPED_END))
			n++; /* "outer": still open when the window closed */
	}
	CHECK_EQ_INT(n, 1);
	CHECK_EQ_INT(replay_trace.counters.unbalanced_pops, 0);
	trace_free(&replay_trace);
}

static void test_step_and_capture_triggers(void)
{
	void *dom = domain_create("loop"), *other = domain_create("other");
	void *reg = register_a(dom, "train_step");
	attr_t a_reg = attr_registered(reg, 0), a_step = attr_ascii("train_step", 0);
	attr_t a_mark = attr_ascii("tick", 0);
	uint64_t id;
	int64_t t0;

	/* Before any configuration nothing triggers. */
	push_a("train_step");
	pop();
	CHECK_EQ_INT(atomic_load(&steps), 0);

	configure("train_step", "tick", "loop", "capture me", NULL);
	dpush(dom, &a_step);             /* ASCII, matching domain */
	dpop(dom);
	CHECK_EQ_INT(atomic_load(&steps), 1);
	dpush(dom, &a_reg);              /* registered string */
	push_a("nested");
	pop();
	CHECK_EQ_INT(atomic_load(&steps), 1); /* not before its own pop */
	dpop(dom);
	CHECK_EQ_INT(atomic_load(&steps), 2);
	dpush(other, &a_step);           /* another domain */
	dpop(other);
	push_a("train_step");            /* the default domain */
	pop();
	CHECK_EQ_INT(atomic_load(&steps), 2);
	dmark(dom, &a_mark);
	dmark(other, &a_mark);
	CHECK_EQ_INT(atomic_load(&steps), 3);

	/* Capture range: begin at the push, end at its pop, any domain; the
	 * end callback gets the time of the pop. */
	push_a("capture me");
	CHECK_EQ_INT(atomic_load(&begins), 1);
	CHECK_EQ_INT(atomic_load(&ends), 0);
	t0 = clock_now_ns();
	pop();
	CHECK_EQ_INT(atomic_load(&ends), 1);
	CHECK(atomic_load(&end_ts) >= t0 && atomic_load(&end_ts) <= clock_now_ns());
	id = start_a("capture me");
	CHECK_EQ_INT(atomic_load(&begins), 2);
	t0 = clock_now_ns();
	end(id);
	CHECK_EQ_INT(atomic_load(&ends), 2);
	CHECK(atomic_load(&end_ts) >= t0 && atomic_load(&end_ts) <= clock_now_ns());
	/* An instance the core does not take is not ended; -1 stops asking. */
	atomic_store(&begin_answer, 0);
	push_a("capture me");
	pop();
	CHECK_EQ_INT(atomic_load(&begins), 3);
	CHECK_EQ_INT(atomic_load(&ends), 2);
	atomic_store(&begin_answer, -1);
	push_a("capture me");
	pop();
	push_a("capture me");
	pop();
	CHECK_EQ_INT(atomic_load(&begins), 4);
	CHECK_EQ_INT(atomic_load(&ends), 2);
	configure(NULL, NULL, NULL, NULL, NULL);
}

/* ---- 8 threads x N ranges at once ---- */

#define THREADS 8

static long per_thread = 125000;

static void *hammer(void *arg)
{
	int w = (int)(intptr_t)arg;
	char name[32];
	long k;

	for (k = 0; k < per_thread; k++) {
		/* A temporary buffer, overwritten right after: names are copied. */
		snprintf(name, sizeof name, "t%d#%ld", w, k);
		push_a(name);
		if (k % 4 == 0) {
			push_a("leaf");
			pop();
		}
		memset(name, 'X', sizeof name - 1);
		pop();
	}
	return NULL;
}

static int cmp_event(const void *a, const void *b)
{
	const struct trace_event *x = a, *y = b;

	if (x->tid != y->tid)
		return x->tid < y->tid ? -1 : 1;
	if (x->ts != y->ts)
		return x->ts < y->ts ? -1 : 1;
	return x->dur > y->dur ? -1 : x->dur < y->dur;
}

static void test_concurrent_threads(void)
{
	pthread_t th[THREADS];
	struct trace t;
	char *seen[THREADS];
	long bad_name = 0, dup = 0, missing = 0, leaves = 0, bad_nest = 0;
	size_t i;
	int w;

	window_open();
	for (w = 0; w < THREADS; w++)
		pthread_create(&th[w], NULL, hammer, (void *)(intptr_t)w);
	for (w = 0; w < THREADS; w++)
		pthread_join(th[w], NULL);
	window_close(&t);

	for (w = 0; w < THREADS; w++)
		seen[w] = calloc((size_t)per_thread, 1);
	qsort(t.ev, t.nev, sizeof *t.ev, cmp_event);
	for (i = 0; i < t.nev; i++) {
		const char *n = trace_str(&t, t.ev[i].name);
		int tw;
		long k;
		char tail;

		if (strcmp(n, "leaf") == 0) {
			/* A leaf lies inside the range just before it. */
			leaves++;
			if (i == 0 || !contains(&t.ev[i - 1], &t.ev[i]) ||
			    t.ev[i - 1].tid != t.ev[i].tid)
				bad_nest++;
			continue;
		}
		if (sscanf(n, "t%d#%ld%c", &tw, &k, &tail) != 2 || tw < 0 || tw >= THREADS ||
		    k < 0 || k >= per_thread) {
			bad_name++;
			continue;
		}
		if (seen[tw][k]++)
			dup++;
	}
	for (w = 0; w < THREADS; w++) {
		long k;
		for (k = 0; k < per_thread; k++)
			missing += !seen[w][k];
		free(seen[w]);
	}
	CHECK_EQ_INT(bad_name, 0);
	CHECK_EQ_INT(dup, 0);
	CHECK_EQ_INT(missing, 0);
	CHECK_EQ_INT(bad_nest, 0);
	CHECK_EQ_INT(leaves, THREADS * ((per_thread + 3) / 4));
	CHECK_EQ_INT(t.counters.dropped_buffer, 0);
	CHECK_EQ_INT(t.counters.unbalanced_pops, 0);
	CHECK_EQ_INT(t.counters.clipped, 0);
	trace_free(&t);
}

/* nvtx_open_ranges(): another thread's open levels, their names and push
 * times (armed), and none of a thread that has exited. */
struct holder {
	atomic_int state;        /* 1: pushed; 2: may pop and exit */
	int32_t tid;
};

static void *hold_ranges(void *arg)
{
	struct holder *hd = arg;

	hd->tid = (int32_t)syscall(SYS_gettid);
	push_a("outer held");
	nvtx_prof_push("allreduce"); /* prof_range_push's path */
	atomic_store(&hd->state, 1);
	while (atomic_load(&hd->state) != 2)
		usleep(1000);
	pop();
	return NULL; /* one level still open as the thread exits */
}

static size_t ranges_of(int32_t tid, const struct nvtx_open_range *r, size_t n,
			const struct nvtx_open_range **first)
{
	size_t i, k = 0;

	*first = NULL;
	for (i = 0; i < n; i++) {
		if (r[i].tid != tid)
			continue;
		if (!k++)
			*first = &r[i];
	}
	return k;
}

static void test_open_ranges_of_other_threads(void)
{
	static struct nvtx_open_range r[256];
	const struct nvtx_open_range *f;
	struct holder hd = { 0 };
	pthread_t th;
	int64_t before, after;
	size_t n;

	nvtx_arm(1);
	before = clock_now_ns();
	CHECK(pthread_create(&th, NULL, hold_ranges, &hd) == 0);
	while (atomic_load(&hd.state) != 1)
		usleep(1000);
	after = clock_now_ns();
	n = nvtx_open_ranges(r, 256);
	CHECK_EQ_INT(ranges_of(hd.tid, r, n, &f), 2);
	if (f) {
		CHECK(strcmp(f[0].name, "outer held") == 0);
		CHECK(strcmp(f[1].name, "allreduce") == 0);
		CHECK_EQ_INT(f[0].level, 0);
		CHECK_EQ_INT(f[1].level, 1);
		CHECK(f[0].start_ns >= before && f[0].start_ns <= after);
		CHECK(f[1].start_ns >= f[0].start_ns && f[1].start_ns <= after);
	}
	/* Unarmed: a plain push is counted only, its name and time unknown. */
	nvtx_arm(0);
	push_a("not kept");
	n = nvtx_open_ranges(r, 256);
	CHECK_EQ_INT(ranges_of((int32_t)syscall(SYS_gettid), r, n, &f), 1);
	if (f)
		CHECK(f[0].name[0] == '\0' && f[0].start_ns == 0);
	pop();
	/* A thread that exited (a level still open) is gone from the list. */
	atomic_store(&hd.state, 2);
	CHECK(pthread_join(th, NULL) == 0);
	n = nvtx_open_ranges(r, 256);
	CHECK_EQ_INT(ranges_of(hd.tid, r, n, &f), 0);
	/* `max` bounds what is written. */
	nvtx_arm(1);
	push_a("a");
	push_a("b");
	CHECK_EQ_INT(nvtx_open_ranges(r, 1), 1);
	pop();
	pop();
	nvtx_arm(0);
}

/* The range hooks (CUPTI's external correlation ids): a pushed id is
 * popped exactly once, whether the pop is recorded in the same window,
 * after the window closed, or in the next generation the flight recorder
 * rotated to; a push outside any window pushes none. */
static atomic_int hook_depth, hook_pushes;

static uint64_t hook_push(void)
{
	atomic_fetch_add(&hook_depth, 1);
	return (uint64_t)atomic_fetch_add(&hook_pushes, 1) + 1;
}

static void hook_pop(void)
{
	atomic_fetch_sub(&hook_depth, 1);
}

static void test_range_hooks_stay_balanced(void)
{
	struct trace t;
	uint64_t gen, closed;

	nvtx_set_range_hooks(hook_push, hook_pop);
	/* Pushed in a window, popped after it closed. */
	window_open();
	CHECK_EQ_INT(push_a("across the end"), 0);
	window_close(&t);
	trace_free(&t);
	CHECK_EQ_INT(atomic_load(&hook_depth), 1);
	CHECK_EQ_INT(pop(), 0);
	CHECK_EQ_INT(atomic_load(&hook_depth), 0);
	/* Pushed in one generation, popped in the next (a rotation, no
	 * replay). */
	gen = evbuf_open(1u << 20);
	CHECK(gen != 0);
	CHECK_EQ_INT(push_a("across a rotation"), 0);
	CHECK_EQ_INT(push_a("inner"), 1);
	gen = evbuf_rotate(1u << 20, &closed);
	CHECK(gen != 0);
	CHECK_EQ_INT(pop(), 1);
	CHECK_EQ_INT(pop(), 0);
	CHECK_EQ_INT(atomic_load(&hook_depth), 0);
	CHECK_EQ_INT(evbuf_close(), gen);
	evbuf_release(closed);
	evbuf_release(gen);
	/* Outside any window: no id pushed, none popped. */
	CHECK_EQ_INT(push_a("idle"), 0);
	CHECK_EQ_INT(pop(), 0);
	CHECK_EQ_INT(atomic_load(&hook_depth), 0);
	CHECK_EQ_INT(atomic_load(&hook_pushes), 3);
	nvtx_set_range_hooks(NULL, NULL);
}

/* ---- a window's budget: the trace within what its pool may take ---- */

#define BUDGET_RANGES 200000

/* Records BUDGET_RANGES ranges, each named anew, into a 16 MiB pool (they
 * take ~11 MiB of it) and assembles them with `budget` (0: none) into *t. */
static void assemble_unique(struct trace *t, size_t budget)
{
	struct assemble_source src = { .drain = evbuf_drain, .budget = budget };
	char name[32];
	int i;

	window_start = clock_now_ns();
	CHECK(evbuf_open(16u << 20) != 0);
	for (i = 0; i < BUDGET_RANGES; i++) {
		snprintf(name, sizeof name, "unique range %07d", i);
		evbuf_append(EVBUF_RANGE_PUSH, name, 0, 0);
		evbuf_append(EVBUF_RANGE_POP, NULL, 0, 0);
	}
	src.gen = evbuf_close();
	CHECK(trace_init(t) == 0);
	t->meta.pid = getpid();
	t->meta.start_ts = window_start;
	t->meta.end_ts = clock_now_ns();
	CHECK_EQ_INT(assemble_window(t, &src, NULL, 0), 0);
	evbuf_release(src.gen);
}

/* Ranges each named anew make a trace ~1.5 x their records (each name's
 * bytes, id and hash slot beside its event). Assembled within a budget,
 * the trace keeps the window's first ranges, in order, takes no more than
 * the budget, and counts every record it left out as a memory drop, not
 * as a full pool. Without one, the same records make a trace past it. */
static void test_window_budget(void)
{
	const size_t budget = (size_t)8 << 20;
	struct trace t;
	char name[40];
	size_t i, k, clipped = 0;

	assemble_unique(&t, 0);
	CHECK_EQ_INT(t.nev, BUDGET_RANGES);
	CHECK(trace_bytes(&t) > budget + ASSEMBLE_SLACK);
	CHECK_EQ_INT(t.counters.dropped_buffer, 0);
	trace_free(&t);

	assemble_unique(&t, budget);
	/* give or take the huge page the record that reached it began: an
	 * array's pages count whole (trace_bytes) */
	CHECK(trace_bytes(&t) <= budget + ASSEMBLE_SLACK + ((size_t)2 << 20));
	CHECK(t.nev > BUDGET_RANGES * 6 / 10); /* what fits is kept */
	CHECK(t.nev < BUDGET_RANGES);
	CHECK(t.counters.dropped_memory > 0);
	CHECK_EQ_INT(t.counters.dropped_buffer, t.counters.dropped_memory);
	for (i = k = 0; i < t.nev; i++) {
		snprintf(name, sizeof name, "unique range %07zu", i);
		k += strcmp(trace_str(&t, t.ev[i].name), name) == 0;
		clipped += (t.ev[i].flags & TRACE_F_CLIPPED_END) != 0;
	}
	CHECK_EQ_INT(k, t.nev);   /* the first ranges, in order */
	CHECK(clipped <= 1);      /* the one the cut fell in: its pop left out */
	/* each range left out counted once, as a full pool counts it */
	CHECK_EQ_INT(t.nev + t.counters.dropped_memory, BUDGET_RANGES);
	trace_free(&t);
}

int main(int argc, char **argv)
{
	if (argc > 1)
		per_thread = atol(argv[1]);
	test_attach();
	test_outside_window_records_nothing();
	test_names_domains_categories();
	test_range_ends_on_another_thread();
	test_clipped_at_both_edges();
	test_replay_on_window_open();
	test_quiet_levels_in_domains();
	test_replay_fresh_thread();
	test_step_and_capture_triggers();
	test_concurrent_threads();
	test_open_ranges_of_other_threads();
	test_range_hooks_stay_balanced();
	test_window_budget();
	return check_done();
}

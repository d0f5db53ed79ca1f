/* torchops — the C end of the operator collector (see torchops.h). */
#include "torchops.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../../common/clock.h"
#include "../../common/evformat.h"
#include "../../events/memrec.h"
#include "../../events/oprec.h"
#include "../source.h"
#include "../../common/grow.h"
#include "../../common/log.h"
#include "opstacks.h"

static const struct capture_host *top_h;

/* In an operator's generation tag (torchops_api.window): the generation
 * is a flight recorder segment, not a window (see "the flight recorder"
 * below). Generations never reach this bit. */
#define TOP_REC (1ULL << 63)

static _Atomic int top_recording;
static _Atomic uint64_t top_gen;        /* the recording window's generation */
static _Atomic uint64_t top_next_id = 1; /* External ids of operators with no GPU link */
static _Atomic uint64_t top_rec_gen;    /* the flight recorder's segment
					   while it keeps operators and
					   memory (| TOP_REC), 0: none */
static uint64_t (*_Atomic top_push)(void);
static void (*_Atomic top_pop)(void);

/* torchops_api.now: the core's clock. Any thread. */
static int64_t top_now(void)
{
	return clock_now_ns();
}

/* torchops_api.recording: one relaxed load. Any thread. */
static int top_is_recording(void)
{
	return atomic_load_explicit(&top_recording, memory_order_relaxed);
}

/* True for the record_function labels profhost writes itself: torch's
 * DataLoader label (the bridge's data phase, under that name) and
 * torch.profiler's step labels (profhost's steps are ProfilerStep#N). */
static bool top_own_label(const struct torchops_op *op)
{
	static const char *const own[] = { "ProfilerStep#", "enumerate(DataLoader)#" };
	size_t i, n;

	if (op->scope != TORCHOPS_USER)
		return false;
	for (i = 0; i < sizeof own / sizeof own[0]; i++) {
		n = strlen(own[i]);
		if (op->name_len >= n && memcmp(op->name, own[i], n) == 0)
			return true;
	}
	return false;
}

/* Builds the EVBUF_TORCH_OP record of `op` in a stack buffer and appends
 * it to the calling thread's buffer. Returns evbuf_append_raw's result.
 * Any thread; no lock, no allocation. */
static int top_append(const struct torchops_op *op)
{
	char buf[EVBUF_NAME_MAX];
	struct oprec_hdr hdr;
	size_t name_len, used;

	memset(&hdr, 0, sizeof hdr);
	name_len = op->name_len;
	if (name_len > 1024)
		name_len = 1024; /* no operator name is longer; a label is cut */
	hdr.end = op->end;
	hdr.seq = op->seq;
	hdr.fwd_tid = op->fwd_tid;
	hdr.scope = (uint8_t)(op->scope <= OPREC_USER ? op->scope : OPREC_FUNCTION);
	if (op->seq >= 0)
		hdr.flags |= OPREC_SEQ;
	if (op->flags & TORCHOPS_HAS_FLOPS) {
		hdr.flags |= OPREC_FLOPS;
		hdr.flops = op->flops;
	}
	hdr.name_len = (uint16_t)name_len;
	used = sizeof hdr + name_len;
	if (op->stack) /* its id follows the shapes: room kept for it */
		hdr.flags |= OPREC_STACK;
	if ((op->flags & TORCHOPS_HAS_SHAPES) && op->dims && op->types) {
		if (used + op->dims_len + op->types_len +
		    (op->stack ? sizeof op->stack : 0) <= sizeof buf) {
			hdr.flags |= OPREC_SHAPES;
			hdr.dims_len = (uint16_t)op->dims_len;
			hdr.types_len = (uint16_t)op->types_len;
		} else {
			hdr.flags |= OPREC_SHAPES_CUT;
		}
	}
	memcpy(buf, &hdr, sizeof hdr);
	memcpy(buf + sizeof hdr, op->name, name_len);
	if (hdr.flags & OPREC_SHAPES) {
		memcpy(buf + used, op->dims, hdr.dims_len);
		used += hdr.dims_len;
		memcpy(buf + used, op->types, hdr.types_len);
		used += hdr.types_len;
	}
	if (hdr.flags & OPREC_STACK) {
		memcpy(buf + used, &op->stack, sizeof op->stack);
		used += sizeof op->stack;
	}
	/* Every operator has an External id, as in Kineto's traces: its GPU
	 * link's when it has one, else one of its own. */
	return top_h->shim->evbuf_append_raw(EVBUF_TORCH_OP, op->start, buf, (uint32_t)used,
					     op->ext_id ? op->ext_id :
					     trace_ext_id(atomic_fetch_add_explicit(&top_next_id, 1,
										    memory_order_relaxed)),
					     0);
}

/* The generation the shim's buffers are open for now (0: none). A shim
 * table without evbuf_current (a test's) answers with the window's. */
static uint64_t top_buffers_gen(void)
{
	if (top_h->shim->evbuf_current)
		return top_h->shim->evbuf_current();
	return atomic_load_explicit(&top_recording, memory_order_relaxed) ?
	       atomic_load_explicit(&top_gen, memory_order_relaxed) : 0;
}

static void tail_end(uint64_t gen, const struct torchops_op *op, bool label);
static void rec_op(const struct torchops_op *op);

/* torchops_api.op_in: an operator that began in window `gen` (0: outside
 * any; nothing is written) goes into that window: appended to the calling
 * thread's buffer while the window's generation is open (no lock, no
 * allocation), else, when the window closed before the operator ended,
 * kept for the window's collect (tail_end). Dropped for profhost's own
 * labels, in a forked child, or when the buffer is full (counted there).
 * A label also ends what label_begin counted. Any thread. */
static void top_op_in(const struct torchops_op *op, uint64_t gen)
{
	bool label;

	if (!op || !top_h || !gen || top_h->disabled(top_h->ctx)) /* a forked child records none */
		return;
	label = op->scope == TORCHOPS_USER;
	if (gen & TOP_REC) {
		if (op->name && op->end >= op->start && !top_own_label(op))
			rec_op(op);
		return;
	}
	if (!op->name || op->end < op->start || top_own_label(op)) {
		if (label)
			tail_end(gen, NULL, true);
		return;
	}
	if (top_buffers_gen() == gen &&
	    (top_append(op) == 0 || top_buffers_gen() == gen)) {
		/* written, or dropped by a full buffer (counted there) */
		if (label)
			tail_end(gen, NULL, true);
		return;
	}
	tail_end(gen, op, label); /* the window closed before it ended */
}

/* torchops_api.op: an operator of the window recording now (version 1's
 * call: an operator that ends after the window closed is dropped). Any
 * thread. */
static void top_op(const struct torchops_op *op)
{
	if (!atomic_load_explicit(&top_recording, memory_order_relaxed))
		return;
	top_op_in(op, atomic_load_explicit(&top_gen, memory_order_relaxed));
}

/* torchops_api.window: the recording window's generation; between
 * windows the flight recorder's segment, tagged TOP_REC, while it keeps
 * operators (prof.capture{profile_memory}); else 0. Any thread: relaxed
 * loads. */
static uint64_t top_window(void)
{
	if (!atomic_load_explicit(&top_recording, memory_order_relaxed))
		return atomic_load_explicit(&top_rec_gen, memory_order_relaxed);
	return atomic_load_explicit(&top_gen, memory_order_relaxed);
}

static void top_label_begin(uint64_t gen);
static int top_memory_on(void);
static void top_mem(const struct torchops_mem *m);
static void top_mem_aside(void);

/* torchops_api.ext_push / ext_pop: the CUPTI external correlation id of
 * the hooks cupti.c installed, inside windows only (0: none, no pop).
 * Any thread. */
static uint64_t top_ext_push(void)
{
	uint64_t (*push)(void) = atomic_load_explicit(&top_push, memory_order_acquire);

	return push && top_is_recording() ? push() : 0;
}

static void top_ext_pop(void)
{
	void (*pop)(void) = atomic_load_explicit(&top_pop, memory_order_acquire);

	if (pop)
		pop();
}

/* torchops_api.py_stack: the calling thread's Python call stack now
 * (opstacks.h), for the recording window. Any thread. */
static uint32_t top_py_stack(void)
{
	if (!top_is_recording())
		return 0;
	return opstacks_current(atomic_load_explicit(&top_gen, memory_order_relaxed));
}

static const struct torchops_api top_api = {
	.version = TORCHOPS_ABI_VERSION,
	.size = sizeof(struct torchops_api),
	.now = top_now,
	.recording = top_is_recording,
	.op = top_op,
	.ext_push = top_ext_push,
	.ext_pop = top_ext_pop,
	.window = top_window,
	.label_begin = top_label_begin,
	.op_in = top_op_in,
	.py_stack = top_py_stack,
	.memory_on = top_memory_on,
	.mem = top_mem,
	.mem_aside = top_mem_aside,
};

static void top_after_fork(void);

const struct torchops_api *torchops_table(const struct capture_host *h)
{
	static bool forks;

	top_h = h;
	if (!forks && pthread_atfork(NULL, NULL, top_after_fork) == 0)
		forks = true;
	return &top_api;
}

static void tail_open(uint64_t gen);
static void mem_update(void);

void torchops_set_recording(bool on, uint64_t gen)
{
	if (on) {
		tail_open(gen);
		atomic_store_explicit(&top_gen, gen, memory_order_relaxed);
	}
	atomic_store_explicit(&top_recording, on, memory_order_relaxed);
	mem_update();
}

/* ---- late operators (torch's profiler as the fallback) */

struct late_op {
	struct torchops_op op;  /* strings point into `text` */
	int32_t tid;
	char *text;             /* name, dims, types */
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t done_cv;
	uint64_t gen;           /* the generation being handed over, 0 none */
	bool done;              /* torchops_late_end() came for `gen` */
	struct late_op *ops;
	size_t n, cap;
} late = { .lock = PTHREAD_MUTEX_INITIALIZER, .done_cv = PTHREAD_COND_INITIALIZER };

/* Frees the queued late operators. late.lock held. */
static void late_clear(void)
{
	size_t i;

	for (i = 0; i < late.n; i++)
		free(late.ops[i].text);
	late.n = 0;
}

void torchops_late_begin(void)
{
	pthread_mutex_lock(&late.lock);
	late_clear();
	late.gen = atomic_load_explicit(&top_gen, memory_order_relaxed);
	late.done = false;
	pthread_mutex_unlock(&late.lock);
}

/* Appends a copy of `op` (its strings into one allocation of their own),
 * made on thread `tid`, to the list ops[0..*n) of capacity *cap. False
 * when memory ran out (nothing added). Caller holds the list's lock. */
static bool late_keep(struct late_op **ops, size_t *n, size_t *cap,
		      const struct torchops_op *op, int32_t tid)
{
	size_t len = (size_t)op->name_len + op->dims_len + op->types_len;
	struct late_op *p = grow_array(*ops, cap, *n + 1, sizeof **ops, 1024);
	char *text;

	if (!p)
		return false;
	*ops = p;
	text = malloc(len ? len : 1);
	if (!text)
		return false;
	memcpy(text, op->name, op->name_len);
	if (op->dims_len)
		memcpy(text + op->name_len, op->dims, op->dims_len);
	if (op->types_len)
		memcpy(text + op->name_len + op->dims_len, op->types, op->types_len);
	p += *n;
	p->op = *op;
	p->op.name = text;
	p->op.dims = text + op->name_len;
	p->op.types = text + op->name_len + op->dims_len;
	p->tid = tid;
	p->text = text;
	(*n)++;
	return true;
}

void torchops_late_add(const struct torchops_op *op, int32_t tid)
{
	if (!op || !op->name || !op->name_len)
		return;
	pthread_mutex_lock(&late.lock);
	if (late.gen && !late.done)
		late_keep(&late.ops, &late.n, &late.cap, op, tid);
	pthread_mutex_unlock(&late.lock);
}

void torchops_late_end(void)
{
	pthread_mutex_lock(&late.lock);
	late.done = true;
	pthread_cond_broadcast(&late.done_cv);
	pthread_mutex_unlock(&late.lock);
}

/* *until = now + wait_ms on CLOCK_REALTIME (pthread_cond_timedwait's). */
static void late_deadline(struct timespec *until, unsigned wait_ms)
{
	clock_gettime(CLOCK_REALTIME, until);
	until->tv_sec += wait_ms / 1000;
	until->tv_nsec += (long)(wait_ms % 1000) * 1000000L;
	if (until->tv_nsec >= 1000000000L) {
		until->tv_sec++;
		until->tv_nsec -= 1000000000L;
	}
}

/* Adds one late operator to `t`, as the assembler adds a recorded one. */
static void late_event(struct trace *t, const struct late_op *l)
{
	const struct torchops_op *op = &l->op;
	struct trace_event e = { 0 };

	e.ts = op->start;
	e.dur = op->end > op->start ? op->end - op->start : 0;
	e.id = op->ext_id ? (uint32_t)op->ext_id
			  : trace_ext_id(atomic_fetch_add_explicit(&top_next_id, 1,
								   memory_order_relaxed));
	e.pid = t->meta.pid;
	e.tid = l->tid;
	e.name = trace_intern(t, op->name, op->name_len);
	e.cat = op->scope == TORCHOPS_USER ? TRACE_CAT_USER_ANNOTATION : TRACE_CAT_CPU_OP;
	e.ph = TRACE_PH_COMPLETE;
	if (!trace_add_event(t, &e))
		return;
	if ((op->flags & TORCHOPS_HAS_SHAPES) && op->dims_len) {
		trace_arg_str(t, TRACE_ARG_INPUT_DIMS, op->dims, op->dims_len);
		if (!t->oom)
			t->args[t->nargs - 1].type = TRACE_ARG_RAW;
	}
	if ((op->flags & TORCHOPS_HAS_SHAPES) && op->types_len) {
		trace_arg_str(t, TRACE_ARG_INPUT_TYPE, op->types, op->types_len);
		if (!t->oom)
			t->args[t->nargs - 1].type = TRACE_ARG_RAW;
	}
	if (op->seq >= 0 && op->scope != TORCHOPS_USER) {
		trace_arg_uint(t, TRACE_ARG_FWD_TID, op->fwd_tid);
		trace_arg_int(t, TRACE_ARG_SEQUENCE, op->seq);
	}
	if (op->flags & TORCHOPS_HAS_FLOPS)
		trace_arg_uint(t, TRACE_ARG_FLOPS, op->flops);
}

int torchops_late_collect(uint64_t gen, unsigned wait_ms, struct trace *t, struct err *e)
{
	struct timespec until;
	size_t i;
	int rc = 0;

	pthread_mutex_lock(&late.lock);
	if (!gen || late.gen != gen) {
		pthread_mutex_unlock(&late.lock);
		return 0;
	}
	late_deadline(&until, wait_ms);
	while (!late.done && wait_ms)
		if (pthread_cond_timedwait(&late.done_cv, &late.lock, &until) == ETIMEDOUT)
			break;
	if (!late.done)
		trace_add_note(t, "torch's profiler's operator events did not come in time "
			       "for this window; it has none");
	for (i = 0; late.done && i < late.n; i++) {
		struct late_op *l = &late.ops[i];

		if (top_own_label(&l->op) || l->op.end < t->meta.start_ts ||
		    l->op.start > t->meta.end_ts)
			continue;
		late_event(t, l);
	}
	if (t->oom)
		rc = err_set(e, "out of memory adding torch's profiler's operator events");
	late_clear();
	late.gen = 0;
	late.done = false;
	pthread_mutex_unlock(&late.lock);
	return rc;
}

/* ---- operators that end late (after their window closed)
 *
 * An operator belongs to the window its start fell in. Most end in it;
 * some end after the step boundary that closed it: above all a c10d
 * collective's record_function label (gloo:all_reduce, ...), which torch
 * begins and ends on the backend's worker thread and ends only after it
 * completed the future the training thread waits on, so the training
 * thread may reach the next step boundary, and close the window, first.
 * Such an operator cannot go into the window's buffers any more (their
 * generation is closed): tail_end keeps a copy of it here, per window,
 * and the window's collect (host thread, torchops_tail_collect) adds it
 * to the trace. The observer counts the labels a window began
 * (label_begin) and ends them with their operator: the collect first
 * waits for the window's open labels, at most TORCHOPS_TAIL_WAIT_MS, and
 * notes any that had not ended by then. Operators of the observer's
 * per-thread stack end in order on their own thread, and are not counted:
 * one still running on another thread at the boundary is kept if it ends
 * before the collect takes the window's tail.
 */

#define TAIL_SLOTS 4     /* windows whose tails are kept at once */
#define TAIL_MAX 4096    /* operators kept per window; more are counted */

struct tail {
	uint64_t gen;    /* the window's generation, 0: none */
	unsigned open;   /* its labels begun and not yet ended */
	bool collected;  /* its collect took the tail: later ones are lost */
	uint64_t lost;   /* past TAIL_MAX, or out of memory */
	struct late_op *ops;
	size_t n, cap;
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cv;   /* a window's last open label ended */
	struct tail slot[TAIL_SLOTS];
} tails = { .lock = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

/* The tail of window `gen`, NULL when it is not kept (any more).
 * tails.lock held. */
static struct tail *tail_of(uint64_t gen)
{
	struct tail *s = &tails.slot[gen % TAIL_SLOTS];

	return gen && s->gen == gen ? s : NULL;
}

/* Frees the operators kept in `s`. tails.lock held. */
static void tail_clear(struct tail *s)
{
	size_t i;

	for (i = 0; i < s->n; i++)
		free(s->ops[i].text);
	s->n = 0;
}

/* Window `gen` opens: its tail starts empty, in place of the one of the
 * window TAIL_SLOTS earlier (collected long since, unless the host is
 * that far behind: then that window goes without its late operators).
 * Stepping thread, window lock held. */
static void tail_open(uint64_t gen)
{
	struct tail *s = &tails.slot[gen % TAIL_SLOTS];

	pthread_mutex_lock(&tails.lock);
	tail_clear(s);
	s->gen = gen;
	s->open = 0;
	s->collected = false;
	s->lost = 0;
	pthread_mutex_unlock(&tails.lock);
}

/* torchops_api.label_begin: a label began in window `gen`; its end
 * (tail_end with label) uncounts it. Any thread. */
static void top_label_begin(uint64_t gen)
{
	struct tail *s;

	if (!top_h || top_h->disabled(top_h->ctx))
		return;
	pthread_mutex_lock(&tails.lock);
	s = tail_of(gen);
	if (s && !s->collected)
		s->open++;
	pthread_mutex_unlock(&tails.lock);
}

/* An operator of window `gen` ended: `op` (when not NULL) ended after the
 * window closed and is kept for its collect, made on the calling thread;
 * `label`: it is a label label_begin counted. Any thread. */
static void tail_end(uint64_t gen, const struct torchops_op *op, bool label)
{
	int32_t tid = op ? (int32_t)syscall(SYS_gettid) : 0;
	struct tail *s;

	pthread_mutex_lock(&tails.lock);
	s = tail_of(gen);
	if (s && op && !s->collected) {
		if (s->n >= TAIL_MAX || !late_keep(&s->ops, &s->n, &s->cap, op, tid))
			s->lost++;
	}
	if (s && label && s->open && --s->open == 0)
		pthread_cond_broadcast(&tails.cv);
	pthread_mutex_unlock(&tails.lock);
}

int torchops_tail_collect(uint64_t gen, unsigned wait_ms, struct trace *t, struct err *e)
{
	struct timespec until;
	struct tail *s;
	char note[160];
	size_t i;
	int rc = 0;

	pthread_mutex_lock(&tails.lock);
	s = tail_of(gen);
	if (!s || s->collected) {
		pthread_mutex_unlock(&tails.lock);
		return 0;
	}
	late_deadline(&until, wait_ms);
	while (s->open && wait_ms)
		if (pthread_cond_timedwait(&tails.cv, &tails.lock, &until) == ETIMEDOUT)
			break;
	s->collected = true;
	for (i = 0; i < s->n; i++)
		late_event(t, &s->ops[i]);
	if (s->open && wait_ms) {
		snprintf(note, sizeof note, "%u record_function label%s begun in this "
			 "window had not ended %u ms after it closed: left out", s->open,
			 s->open == 1 ? "" : "s", wait_ms);
		trace_add_note(t, note);
	} else if (s->open) {
		snprintf(note, sizeof note, "%u record_function label%s begun in this "
			 "window had not ended when the program ended: left out", s->open,
			 s->open == 1 ? "" : "s");
		trace_add_note(t, note);
	}
	if (s->lost) {
		snprintf(note, sizeof note, "%llu operator%s that ended after this window "
			 "closed could not be kept (out of memory, or more than %d): left out",
			 (unsigned long long)s->lost, s->lost == 1 ? "" : "s", TAIL_MAX);
		trace_add_note(t, note);
	}
	if (t->oom)
		rc = err_set(e, "out of memory adding the operators that ended after the window");
	tail_clear(s);
	pthread_mutex_unlock(&tails.lock);
	return rc;
}

void torchops_set_ext_hooks(uint64_t (*push)(void), void (*pop)(void))
{
	atomic_store_explicit(&top_pop, pop, memory_order_release);
	atomic_store_explicit(&top_push, push, memory_order_release);
}

/* ---- memory (prof.capture{profile_memory})
 *
 * torch reports each tensor allocation and free to the profiler state of
 * the allocating thread (c10::reportMemoryUsageToProfiler); the observer
 * puts a reporter of its own there (src/capture/torch/observer.cpp) and hands
 * each report to top_mem, which appends one EVBUF_TORCH_MEM record
 * (src/events/memrec.h) to the calling thread's buffer: the assembler
 * makes it Kineto's "[memory]" instant, key_averages attributes it to the
 * operators holding it. torch asks memory_on() before every allocation
 * and free: one relaxed load.
 */

static _Atomic int top_mem_want;  /* prof.capture{profile_memory}, read at
				     each window open and recorder segment */
static _Atomic int top_mem_on;    /* ... and a window or segment records */
static _Atomic int top_aside;     /* torch's profiler took the slot: 1 seen,
				     2 said */

/* Recomputes top_mem_on. Stepping thread, window lock held. */
static void mem_update(void)
{
	bool on = atomic_load_explicit(&top_mem_want, memory_order_relaxed) &&
		  (atomic_load_explicit(&top_recording, memory_order_relaxed) ||
		   atomic_load_explicit(&top_rec_gen, memory_order_relaxed));

	atomic_store_explicit(&top_mem_on, on, memory_order_relaxed);
}

void torchops_set_memory(bool want)
{
	atomic_store_explicit(&top_mem_want, want, memory_order_relaxed);
	mem_update();
}

/* torchops_api.memory_on. Any thread. */
static int top_memory_on(void)
{
	return atomic_load_explicit(&top_mem_on, memory_order_relaxed);
}

/* torchops_api.mem: one EVBUF_TORCH_MEM record on the calling thread,
 * while memory is on (a forked child records none). Any thread; no lock,
 * no allocation. */
static void top_mem(const struct torchops_mem *m)
{
	struct memrec r;

	if (!m || !top_h || !atomic_load_explicit(&top_mem_on, memory_order_relaxed) ||
	    top_h->disabled(top_h->ctx))
		return;
	r.addr = m->addr;
	r.bytes = m->bytes;
	r.total_allocated = m->total_allocated;
	r.total_reserved = m->total_reserved;
	top_h->shim->evbuf_append_raw(EVBUF_TORCH_MEM, clock_now_ns(), &r, sizeof r, 0,
				      memrec_a(m->device_type, m->device_index));
}

/* torchops_api.mem_aside: torch's own profiler holds (or takes) a
 * thread's memory-reporting slot. Said once in the log, and in the next
 * window's notes (torchops_mem_collect). Any thread. */
static void top_mem_aside(void)
{
	int was = 0;

	if (!atomic_compare_exchange_strong(&top_aside, &was, 1))
		return;
	log_msg(LOG_WARN, "torch's own profiler runs on a thread of this process: while it "
		"does, that thread's tensor allocations go to it, not to profhost "
		"(prof.capture{profile_memory}; docs/python.md)");
}

int torchops_mem_collect(struct trace *t, struct err *e)
{
	int was = 1;

	if (!atomic_compare_exchange_strong(&top_aside, &was, 2))
		return 0;
	if (trace_add_note(t, "torch's own profiler ran beside profhost's profile_memory: "
			   "while it ran, the tensor allocations of its thread went to it, "
			   "not to this trace") != 0)
		return err_set(e, "out of memory adding the memory note");
	return 0;
}

/* ---- the flight recorder
 *
 * With prof.capture{profile_memory} the recorder keeps operators and
 * allocations between windows, so that a dump or a salvage shows which
 * operators grew the memory in the last steps. The observer tags an
 * operator that starts in a segment with the segment's generation and
 * TOP_REC; at its end it goes into whatever segment is open then (a dump
 * takes its segments together; the assembler reads each operator from
 * its one record), or nowhere when none is (a window opened meanwhile:
 * it began before the window).
 */

void torchops_set_recorder(uint64_t gen)
{
	atomic_store_explicit(&top_rec_gen, gen ? gen | TOP_REC : 0, memory_order_relaxed);
	mem_update();
}

/* An operator that began in a recorder segment ended. Any thread. */
static void rec_op(const struct torchops_op *op)
{
	uint64_t seg = atomic_load_explicit(&top_rec_gen, memory_order_relaxed) & ~TOP_REC;

	if (!top_h || top_h->disabled(top_h->ctx))
		return;
	if (seg && top_buffers_gen() == seg)
		top_append(op);
}

/* pthread_atfork's child handler: a forked child (a DataLoader worker)
 * records nothing, and its torch must not keep its allocator's table of
 * blocks for profhost (the memory reporter its thread inherited asks
 * memory_on()). */
static void top_after_fork(void)
{
	atomic_store_explicit(&top_recording, 0, memory_order_relaxed);
	atomic_store_explicit(&top_rec_gen, 0, memory_order_relaxed);
	atomic_store_explicit(&top_mem_want, 0, memory_order_relaxed);
	atomic_store_explicit(&top_mem_on, 0, memory_order_relaxed);
}

/* torchops — the C end of the operator collector (see torchops.h). */
#include "torchops.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../events/clock.h"
#include "../shim/evbuf.h"
#include "../events/oprec.h"
#include "../host/capture.h"
#include "../util/grow.h"
#include "opstacks.h"

static const struct capture_host *top_h;
static _Atomic int top_recording;
static _Atomic uint64_t top_gen;        /* the recording window's generation */
static _Atomic uint64_t top_next_id = 1; /* External ids of operators with no GPU link */
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

/* torchops_api.op: builds the EVBUF_TORCH_OP record in a stack buffer and
 * appends it to the calling thread's buffer; drops it outside windows, for
 * profhost's own labels, or when the buffer is full (counted there). Any
 * thread; no lock, no allocation. */
static void top_op(const struct torchops_op *op)
{
	char buf[EVBUF_NAME_MAX];
	struct oprec_hdr hdr;
	size_t name_len, used;

	if (!op || !top_h || !op->name || op->end < op->start ||
	    !atomic_load_explicit(&top_recording, memory_order_relaxed) ||
	    top_h->disabled(top_h->ctx) || /* a forked child records none */
	    top_own_label(op))
		return;
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
	top_h->shim->evbuf_append_raw(EVBUF_TORCH_OP, op->start, buf, (uint32_t)used,
				      op->ext_id ? op->ext_id :
				      trace_ext_id(atomic_fetch_add_explicit(&top_next_id, 1,
									     memory_order_relaxed)),
				      0);
}

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
	.py_stack = top_py_stack,
};

const struct torchops_api *torchops_table(const struct capture_host *h)
{
	top_h = h;
	return &top_api;
}

void torchops_set_recording(bool on, uint64_t gen)
{
	if (on)
		atomic_store_explicit(&top_gen, gen, memory_order_relaxed);
	atomic_store_explicit(&top_recording, on, memory_order_relaxed);
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

void torchops_late_add(const struct torchops_op *op, int32_t tid)
{
	struct late_op *p;
	size_t len;
	char *text;

	if (!op || !op->name || !op->name_len)
		return;
	len = (size_t)op->name_len + op->dims_len + op->types_len;
	pthread_mutex_lock(&late.lock);
	if (!late.gen || late.done)
		goto out;
	p = grow_array(late.ops, &late.cap, late.n + 1, sizeof *late.ops, 1024);
	if (!p)
		goto out;
	late.ops = p;
	text = malloc(len ? len : 1);
	if (!text)
		goto out;
	memcpy(text, op->name, op->name_len);
	if (op->dims_len)
		memcpy(text + op->name_len, op->dims, op->dims_len);
	if (op->types_len)
		memcpy(text + op->name_len + op->dims_len, op->types, op->types_len);
	late.ops[late.n].op = *op;
	late.ops[late.n].op.name = text;
	late.ops[late.n].op.dims = text + op->name_len;
	late.ops[late.n].op.types = text + op->name_len + op->dims_len;
	late.ops[late.n].tid = tid;
	late.ops[late.n].text = text;
	late.n++;
out:
	pthread_mutex_unlock(&late.lock);
}

void torchops_late_end(void)
{
	pthread_mutex_lock(&late.lock);
	late.done = true;
	pthread_cond_broadcast(&late.done_cv);
	pthread_mutex_unlock(&late.lock);
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
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += wait_ms / 1000;
	until.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
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

void torchops_set_ext_hooks(uint64_t (*push)(void), void (*pop)(void))
{
	atomic_store_explicit(&top_pop, pop, memory_order_release);
	atomic_store_explicit(&top_push, push, memory_order_release);
}

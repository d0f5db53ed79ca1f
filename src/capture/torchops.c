/* torchops — the C end of the operator collector (see torchops.h). */
#include "torchops.h"

#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

#include "../events/clock.h"
#include "../events/evbuf.h"
#include "../events/oprec.h"
#include "../host/host.h"

static struct host *top_h;
static _Atomic int top_recording;
static _Atomic uint64_t top_ops;
static _Atomic uint64_t top_next_id = 1; /* External ids of operators with no GPU link */
static uint64_t (*_Atomic top_push)(void);
static void (*_Atomic top_pop)(void);

static int64_t top_now(void)
{
	return clock_now_ns();
}

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

/* Builds the record in a stack buffer and appends it. Any thread. */
static void top_op(const struct torchops_op *op)
{
	char buf[EVBUF_NAME_MAX];
	struct oprec_hdr hdr;
	size_t name_len, used;

	if (!op || !top_h || !op->name || op->end < op->start ||
	    !atomic_load_explicit(&top_recording, memory_order_relaxed) ||
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
	if ((op->flags & TORCHOPS_HAS_SHAPES) && op->dims && op->types) {
		if (used + op->dims_len + op->types_len <= sizeof buf) {
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
	/* Every operator has an External id, as in Kineto's traces: its GPU
	 * link's when it has one, else one of its own. */
	if (top_h->shim->evbuf_append_raw(EVBUF_TORCH_OP, op->start, buf, (uint32_t)used,
					  op->ext_id ? op->ext_id :
					  atomic_fetch_add_explicit(&top_next_id, 1,
								    memory_order_relaxed),
					  0) == 0)
		atomic_fetch_add_explicit(&top_ops, 1, memory_order_relaxed);
}

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

static const struct torchops_api top_api = {
	.version = TORCHOPS_ABI_VERSION,
	.size = sizeof(struct torchops_api),
	.now = top_now,
	.recording = top_is_recording,
	.op = top_op,
	.ext_push = top_ext_push,
	.ext_pop = top_ext_pop,
};

const struct torchops_api *torchops_table(struct host *h)
{
	top_h = h;
	return &top_api;
}

void torchops_set_recording(bool on)
{
	atomic_store_explicit(&top_recording, on, memory_order_relaxed);
}

void torchops_set_ext_hooks(uint64_t (*push)(void), void (*pop)(void))
{
	atomic_store_explicit(&top_pop, pop, memory_order_release);
	atomic_store_explicit(&top_push, push, memory_order_release);
}

uint64_t torchops_count(void)
{
	return atomic_load_explicit(&top_ops, memory_order_relaxed);
}

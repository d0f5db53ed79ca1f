/* assemble — raw records to a struct trace (see assemble.h). */
#include "assemble.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/grow.h"
#include "memrec.h"
#include "oprec.h"
#include "pymodrec.h"

/* An open push/start: where and when it began. */
struct open_range {
	uint32_t name;
	int64_t ts;
	uint64_t id;      /* start/end ranges: the range id; pushes: the GPU
			     link (external correlation id, 0: none) */
	uint64_t a;       /* evbuf_nvtx_a(): domain and category */
	int32_t tid;
	uint32_t flags;   /* TRACE_F_CLIPPED_START: open when the window began */
	uint32_t stack;   /* index + 1 of the stack taken at the push, 0 none */
};

#define NAME_UNKNOWN "(began before the window)"

/* In open_range.flags, never in an event: the range was open when the
 * previous generation of a multi-generation drain ended, and the next one
 * has not replayed it yet (see carry_ranges). */
#define OPEN_CARRIED 0x80000000u

/* Per-thread state: the stack of open pushes. */
struct thread_state {
	int32_t tid;
	struct open_range *stack;
	size_t depth, cap;
};

struct assembler {
	struct trace *t;
	const struct assemble_source *src;
	struct thread_state *threads;
	size_t nthreads, cap_threads;
	size_t last;                  /* index of the last thread looked up */
	struct open_range *started;   /* open start/end ranges */
	size_t nstarted, cap_started;
	uint64_t unmatched_ends;
	/* The budget (assemble_source.budget) */
	struct evbuf_stats *st;       /* the drain's, for its cut */
	uint64_t pos_seen;            /* the chunk last cut from */
	unsigned unweighed;           /* records since the trace was weighed */
	bool over;                    /* the budget is spent: records left out */
	uint64_t dropped;             /* records left out for it */
	/* torch operators' call stacks (EVBUF_OPSTACK, src/capture/opstacks.h):
	 * node id -> its parent and entry, and the stack's text once made */
	struct opstack_def *opdefs;
	size_t nopdefs;
	bool op_stacks;               /* an operator has a "Call stack" node */
};

/* One node of the operators' tree of stacks (index: its id). */
struct opstack_def {
	uint32_t parent;
	uint32_t entry;   /* strtab id + 1 of its text, 0: no record came */
	uint32_t stack;   /* strtab id + 1 of the whole stack, once made */
};

/* Node ids the assembler takes (opstacks.h's bound, and room). */
#define OPSTACK_IDS (1u << 20)

/* The budget weighs the trace at each chunk of the drain and every
 * BUDGET_CHECK_EVERY records (trace_bytes is a dozen loads; a window has
 * tens of millions of records), and stops converting records
 * BUDGET_RECORDS_MAX before its end: the most that many records can add
 * (each an event, its args and a name of up to EVBUF_NAME_MAX bytes, and
 * a 64 KiB block of names). */
#define BUDGET_CHECK_EVERY 64
#define BUDGET_RECORDS_MAX ((size_t)512 << 10)

/* The budget keeps room for the string table's hash to double when it
 * would within this many new names (strtab_growth): the most one chunk's
 * records bring (64 KiB, 16 bytes at least a record that names
 * something), and those the trace takes after the drain (its threads'
 * names), so that neither doubles it past the budget. */
#define BUDGET_NAMES_AHEAD 4096

/* Finds or adds the state of `tid`, naming the thread in the trace. */
static struct thread_state *thread_get(struct assembler *as, int32_t tid,
				       const char *name)
{
	struct thread_state *threads;
	size_t i;

	if (as->last < as->nthreads && as->threads[as->last].tid == tid)
		return &as->threads[as->last];
	for (i = 0; i < as->nthreads; i++)
		if (as->threads[i].tid == tid) {
			as->last = i;
			return &as->threads[i];
		}
	threads = grow_array(as->threads, &as->cap_threads, as->nthreads + 1,
			     sizeof *as->threads, 16);
	if (!threads) {
		as->t->oom = 1;
		return NULL;
	}
	as->threads = threads;
	memset(&as->threads[as->nthreads], 0, sizeof *as->threads);
	as->threads[as->nthreads].tid = tid;
	trace_add_thread(as->t, as->t->meta.pid, tid, name ? name : "");
	as->last = as->nthreads;
	return &as->threads[as->nthreads++];
}

/* Adds args "domain" and "category" of a record's `a` to the last event. */
static void add_nvtx_args(struct assembler *as, uint64_t a)
{
	uint32_t domain = evbuf_a_domain(a), cat = evbuf_a_category(a);
	const char *s = NULL;

	if (domain != 0) {
		if (as->src->domain_name)
			s = as->src->domain_name(domain);
		if (s)
			trace_arg_str(as->t, TRACE_ARG_DOMAIN, s, strlen(s));
		else
			trace_arg_uint(as->t, TRACE_ARG_DOMAIN, domain);
	}
	if (cat != 0) {
		s = as->src->category_name ? as->src->category_name(domain, cat) : NULL;
		if (s)
			trace_arg_str(as->t, TRACE_ARG_CATEGORY, s, strlen(s));
		else
			trace_arg_uint(as->t, TRACE_ARG_CATEGORY, cat);
	}
}

/* Notes the event just added as a step phase the Python bridge timed
 * (t->own_phases). 0, or -1 with t->oom set. */
static int own_phase(struct trace *t)
{
	uint32_t *p;

	if (t->nev - 1 > UINT32_MAX) {
		t->oom = 1;
		return -1;
	}
	p = grow_array(t->own_phases, &t->cap_own_phases, t->nown_phases + 1, sizeof *p, 64);
	if (!p) {
		t->oom = 1;
		return -1;
	}
	t->own_phases = p;
	t->own_phases[t->nown_phases++] = (uint32_t)(t->nev - 1);
	return 0;
}

/* Adds a complete range event; `a` carries its NVTX domain and category,
 * `stack` is the index + 1 of the stack taken at its push, or 0. */
static void add_range(struct assembler *as, int32_t tid, uint32_t name,
		      int64_t ts, int64_t end, uint32_t flags, uint64_t a, uint64_t id,
		      uint32_t stack)
{
	struct trace_event e = { 0 };

	flags &= ~OPEN_CARRIED;
	if (as->src->clip_start && ts < as->t->meta.start_ts) {
		/* Before the dump's first step: left out, or cut there. */
		if (end <= as->t->meta.start_ts)
			return;
		ts = as->t->meta.start_ts;
		flags |= TRACE_F_CLIPPED_START;
	}
	e.id = id;
	e.ts = ts;
	e.dur = end > ts ? end - ts : 0;
	e.pid = as->t->meta.pid;
	e.tid = tid;
	e.name = name;
	e.cat = evbuf_a_flags(a) & EVBUF_A_PYTHON ? TRACE_CAT_PYTHON_FUNCTION
						  : TRACE_CAT_USER_ANNOTATION;
	e.ph = TRACE_PH_COMPLETE;
	e.flags = flags;
	if (!trace_add_event(as->t, &e))
		return;
	if ((evbuf_a_flags(a) & EVBUF_A_PHASE) && own_phase(as->t) != 0)
		return;
	add_nvtx_args(as, a);
	if (stack)
		trace_arg_stack(as->t, stack - 1);
	if (flags & (TRACE_F_CLIPPED_START | TRACE_F_CLIPPED_END))
		as->t->counters.clipped++;
}

/* A range that began before the window and ended at `end`: clipped at the
 * window's start, named by the record when the shim knew the name. */
static void add_early(struct assembler *as, int32_t tid, const struct evbuf_rec *r)
{
	struct trace *t = as->t;
	uint32_t name = r->len ? trace_intern(t, evbuf_payload(r), r->len)
			       : trace_intern(t, NAME_UNKNOWN, strlen(NAME_UNKNOWN));
	int64_t start = t->meta.start_ts < r->ts ? t->meta.start_ts : r->ts;

	add_range(as, tid, name, start, r->ts, TRACE_F_CLIPPED_START, r->a, 0, 0);
}

/* A sample or a stack record: the payload is its instruction addresses.
 * A range-push stack belongs to the range the thread pushed last. */
static void add_stack(struct assembler *as, struct thread_state *th,
		      int32_t tid, const struct evbuf_rec *r)
{
	struct trace_stack s = { 0 };
	uint64_t ips[EVBUF_NAME_MAX / sizeof(uint64_t)];
	size_t n = r->len / sizeof(uint64_t);
	long idx;

	if (n == 0)
		return;
	memcpy(ips, evbuf_payload(r), n * sizeof *ips);
	s.ts = r->ts;
	s.tid = tid;
	s.weight = 1;
	s.flags = (r->a & EVBUF_STACK_TRUNCATED) ? TRACE_STACK_TRUNCATED : 0;
	if (r->kind == EVBUF_SAMPLE) {
		s.kind = TRACE_STACK_SAMPLE;
		if (r->id)
			s.weight = r->id > UINT32_MAX ? UINT32_MAX : (uint32_t)r->id;
	} else {
		s.kind = (uint8_t)(r->a >> 8);
		s.id = r->id;
	}
	idx = trace_add_stack(as->t, &s, ips, n, r->kind == EVBUF_SAMPLE);
	if (idx >= 0 && s.kind == TRACE_STACK_RANGE && th->depth > 0 &&
	    !th->stack[th->depth - 1].stack)
		th->stack[th->depth - 1].stack = (uint32_t)idx + 1;
}

/* An EVBUF_A_EARLY push that re-states a range carried over from the
 * previous generation (the stepping thread replays its open ranges when a
 * recorder segment opens): that range goes on; true when one was found
 * (its mark is cleared). Matches the outermost carried range of the
 * domain, as the replay goes outermost first. */
static bool replayed_carried(struct thread_state *th, const struct evbuf_rec *r)
{
	size_t i;

	for (i = 0; i < th->depth; i++)
		if ((th->stack[i].flags & OPEN_CARRIED) &&
		    evbuf_a_domain(th->stack[i].a) == evbuf_a_domain(r->a)) {
			th->stack[i].flags &= ~OPEN_CARRIED;
			return true;
		}
	return false;
}

/* Between two generations of one drain: marks every open range as
 * carried over. */
static void carry_ranges(struct assembler *as)
{
	size_t i, k;

	for (i = 0; i < as->nthreads; i++)
		for (k = 0; k < as->threads[i].depth; k++)
			as->threads[i].stack[k].flags |= OPEN_CARRIED;
}

/* True when s[0..n) is a JSON list the observer wrote: of lists of
 * integers (dims) or of plain strings (types). Anything else is not
 * written raw, so a damaged record cannot break the trace's JSON. */
static bool op_json_ok(const char *s, size_t n, bool types)
{
	size_t i, quotes = 0;

	if (n < 2 || s[0] != '[' || s[n - 1] != ']')
		return false;
	for (i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (types && c == '"')
			quotes++;
		else if (types && quotes % 2 &&
			 (c == '_' || c == ' ' || c == '.' || c == ':' ||
			  (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')))
			continue;
		else if (!strchr("[]-, 0123456789", c) || c == '\0')
			return false;
	}
	return quotes % 2 == 0;
}

/* Adds the torch operator of an EVBUF_TORCH_OP record (oprec.h): a cpu_op
 * (a user_annotation for record_function labels) with Kineto's args. */
static void add_op(struct assembler *as, int32_t tid, const struct evbuf_rec *r)
{
	struct trace *t = as->t;
	const char *p = evbuf_payload(r), *name, *dims, *types;
	struct oprec_hdr h;
	struct trace_event e = { 0 };

	if (r->len < sizeof h)
		return;
	memcpy(&h, p, sizeof h);
	if ((size_t)h.name_len + h.dims_len + h.types_len > r->len - sizeof h || !h.name_len)
		return;
	if (as->src->clip_start && h.end < t->meta.start_ts)
		return; /* ended before the dump's first step */
	name = p + sizeof h;
	dims = name + h.name_len;
	types = dims + h.dims_len;
	e.ts = r->ts;
	e.dur = h.end > r->ts ? h.end - r->ts : 0;
	e.id = r->id; /* External id */
	e.pid = t->meta.pid;
	e.tid = tid;
	e.name = trace_intern(t, name, h.name_len);
	e.cat = h.scope == OPREC_USER ? TRACE_CAT_USER_ANNOTATION : TRACE_CAT_CPU_OP;
	e.ph = TRACE_PH_COMPLETE;
	if (!trace_add_event(t, &e))
		return;
	if (h.flags & OPREC_SHAPES) {
		if (op_json_ok(dims, h.dims_len, false)) {
			trace_arg_str(t, TRACE_ARG_INPUT_DIMS, dims, h.dims_len);
			t->args[t->nargs - 1].type = TRACE_ARG_RAW;
		}
		if (op_json_ok(types, h.types_len, true)) {
			trace_arg_str(t, TRACE_ARG_INPUT_TYPE, types, h.types_len);
			t->args[t->nargs - 1].type = TRACE_ARG_RAW;
		}
	}
	if (t->oom)
		return;
	if ((h.flags & OPREC_SEQ) && h.scope != OPREC_USER) {
		trace_arg_uint(t, TRACE_ARG_FWD_TID, h.fwd_tid);
		trace_arg_int(t, TRACE_ARG_SEQUENCE, h.seq);
	}
	if (h.flags & OPREC_FLOPS)
		trace_arg_uint(t, TRACE_ARG_FLOPS, h.flops);
	if ((h.flags & OPREC_STACK) &&
	    r->len - sizeof h - h.name_len - h.dims_len - h.types_len >= sizeof(uint32_t)) {
		uint32_t node;

		memcpy(&node, types + h.types_len, sizeof node); /* 0 lengths without shapes */
		/* the node for now: op_stacks_resolve() makes it the text */
		if (node && node < OPSTACK_IDS && trace_arg_uint(t, TRACE_ARG_CALL_STACK, node) == 0)
			as->op_stacks = true;
	}
}

/* Keeps one node of the operators' tree of stacks (an EVBUF_OPSTACK
 * record: id the node, a its parent, the payload its entry). */
static void add_opstack(struct assembler *as, const struct evbuf_rec *r)
{
	struct opstack_def *d;
	size_t n;

	if (!r->id || r->id >= OPSTACK_IDS || r->a >= OPSTACK_IDS || !r->len)
		return;
	if (r->id >= as->nopdefs) {
		n = as->nopdefs ? as->nopdefs : 1024;
		while (n <= r->id)
			n *= 2;
		d = realloc(as->opdefs, n * sizeof *d);
		if (!d) {
			as->t->oom = 1;
			return;
		}
		memset(d + as->nopdefs, 0, (n - as->nopdefs) * sizeof *d);
		as->opdefs = d;
		as->nopdefs = n;
	}
	d = &as->opdefs[r->id];
	d->parent = (uint32_t)r->a;
	d->entry = trace_intern(as->t, evbuf_payload(r), r->len) + 1;
	d->stack = 0;
}

/* The text of node `node`'s stack: its entries, innermost first,
 * separated by ';' (as Kineto writes "Call stack"), as a strtab id; the
 * entries above a node whose record never came are left out, and a node
 * with none is "" (counted in *lost). Made once a node. */
static uint32_t op_stack_text(struct assembler *as, uint32_t node, uint64_t *lost)
{
	struct trace *t = as->t;
	char *buf = NULL, *grown;
	size_t len = 0, cap = 0, k, n;
	uint32_t id, at;

	if (node >= as->nopdefs || !as->opdefs[node].entry) {
		++*lost;
		return trace_intern(t, "", 0);
	}
	if (as->opdefs[node].stack)
		return as->opdefs[node].stack - 1;
	/* at most OPSTACK_IDS steps: a damaged record's parents may loop */
	for (at = node, k = 0; at && at < as->nopdefs && as->opdefs[at].entry && k < 4096;
	     at = as->opdefs[at].parent, k++) {
		id = as->opdefs[at].entry - 1;
		n = strtab_len(&t->names, id);
		if (len + n + 1 > cap) {
			cap = (len + n + 1) * 2;
			grown = realloc(buf, cap);
			if (!grown) {
				free(buf);
				t->oom = 1;
				return trace_intern(t, "", 0);
			}
			buf = grown;
		}
		if (len)
			buf[len++] = ';';
		memcpy(buf + len, trace_str(t, id), n);
		len += n;
	}
	id = trace_intern(t, buf ? buf : "", len);
	free(buf);
	as->opdefs[node].stack = id + 1;
	return id;
}

/* Turns each operator's "Call stack" node into its text (after the
 * drains: a node's records may come from any thread's buffer). */
static void op_stacks_resolve(struct assembler *as)
{
	struct trace *t = as->t;
	uint32_t key = trace_intern(t, TRACE_ARG_CALL_STACK, strlen(TRACE_ARG_CALL_STACK));
	uint64_t lost = 0;
	size_t i;
	char note[160];

	for (i = 0; i < t->nargs && !t->oom; i++) {
		struct trace_arg *a = &t->args[i];

		if (a->key != key || a->type != TRACE_ARG_UINT)
			continue;
		a->v.str = op_stack_text(as, (uint32_t)a->v.u, &lost);
		a->type = TRACE_ARG_STR;
	}
	if (lost) {
		snprintf(note, sizeof note, "%llu torch operators lost their call stacks "
			 "(the records naming them were dropped: raise prof.capture{buffer_mb})",
			 (unsigned long long)lost);
		trace_add_note(t, note);
	}
}

/* Adds the nn.Module call of an EVBUF_PY_MODULE record (pymodrec.h): a
 * python_function event named as torch names it, with torch's Python id,
 * parent id (null for a root) and module id, and the module's path when it
 * has one. A record that does not add up is left out. */
static void add_module(struct assembler *as, int32_t tid, const struct evbuf_rec *r)
{
	struct trace *t = as->t;
	const char *p = evbuf_payload(r), *name;
	struct pymodrec_hdr h;
	struct trace_event e = { 0 };

	if (r->len < sizeof h || !r->id)
		return;
	memcpy(&h, p, sizeof h);
	if ((size_t)h.name_len + h.path_len > r->len - sizeof h || !h.name_len)
		return;
	name = p + sizeof h;
	e.ts = r->ts;
	e.dur = h.end > r->ts ? h.end - r->ts : 0;
	e.pid = t->meta.pid;
	e.tid = tid;
	e.name = trace_intern(t, name, h.name_len);
	e.cat = TRACE_CAT_PYTHON_FUNCTION;
	e.ph = TRACE_PH_COMPLETE;
	if (!trace_add_event(t, &e))
		return;
	trace_arg_uint(t, TRACE_ARG_PYTHON_ID, r->id);
	if (h.parent_id)
		trace_arg_uint(t, TRACE_ARG_PYTHON_PARENT_ID, h.parent_id);
	else
		trace_arg_raw(t, TRACE_ARG_PYTHON_PARENT_ID, "null");
	trace_arg_uint(t, TRACE_ARG_PYTHON_MODULE_ID, h.module_id);
	if (h.path_len)
		trace_arg_str(t, TRACE_ARG_MODULE_PATH, name + h.name_len, h.path_len);
}

/* Adds the "[memory]" instant of an EVBUF_TORCH_MEM record (memrec.h):
 * Kineto's cpu_instant_event with its args, on the reporting thread. */
static void add_mem(struct assembler *as, int32_t tid, const struct evbuf_rec *r)
{
	struct trace *t = as->t;
	struct trace_event e = { 0 };
	struct memrec m;

	if (r->len < sizeof m)
		return;
	memcpy(&m, evbuf_payload(r), sizeof m);
	e.ts = r->ts;
	e.pid = t->meta.pid;
	e.tid = tid;
	e.name = trace_intern(t, TRACE_MEMORY_NAME, strlen(TRACE_MEMORY_NAME));
	e.cat = TRACE_CAT_CPU_INSTANT;
	e.ph = TRACE_PH_INSTANT;
	if (!trace_add_event(t, &e))
		return;
	trace_arg_int(t, TRACE_ARG_TOTAL_RESERVED, m.total_reserved);
	trace_arg_int(t, TRACE_ARG_TOTAL_ALLOCATED, m.total_allocated);
	trace_arg_int(t, TRACE_ARG_ALLOC_BYTES, m.bytes);
	trace_arg_uint(t, TRACE_ARG_ADDR, m.addr);
	trace_arg_int(t, TRACE_ARG_DEVICE_ID, memrec_device_index(r->a));
	trace_arg_int(t, TRACE_ARG_DEVICE_TYPE, memrec_device_type(r->a));
}

/* The budget's cut: what is left of the pool (the chunk being read and
 * those after it) and the trace built so far must fit in the budget
 * together, so the chunks past what fits are cut now
 * (evbuf_stats.keep_bytes), before the trace grows into their room. A
 * trace that grows no faster than the drain hands the pool back never
 * cuts. At each new chunk of the drain, with the trace's weight `used`
 * (room for its hash to grow included) under the budget. */
static void budget_cut(struct assembler *as, size_t used, size_t budget)
{
	struct evbuf_stats *st = as->st;
	uint64_t keep;

	if (used + (st->pool_bytes - st->pos) <= budget)
		return;
	keep = st->pos + (budget - used);
	if (!st->keep_bytes || keep < st->keep_bytes)
		st->keep_bytes = keep;
}

/* True when a record of `kind` is to be left out for the budget (counted
 * unless it ends a range, as the drain's cut counts): the budget is spent,
 * or this record finds the trace at it. Once spent it stays spent, for the
 * rest of this drain (cut) and the later generations of a dump (the first
 * chunk of each is read and counted, the rest cut). */
static bool over_budget(struct assembler *as, uint16_t kind)
{
	size_t budget = as->src->budget, used;

	if (!budget)
		return false;
	if (!as->over) {
		if (++as->unweighed < BUDGET_CHECK_EVERY && as->st->pos == as->pos_seen)
			return false;
		as->unweighed = 0;
		budget += ASSEMBLE_SLACK - BUDGET_RECORDS_MAX;
		used = trace_bytes(as->t) + strtab_growth(&as->t->names, BUDGET_NAMES_AHEAD);
		if (used < budget) {
			if (as->st->pos != as->pos_seen) {
				as->pos_seen = as->st->pos;
				budget_cut(as, used, budget);
			}
			return false;
		}
		as->over = true;
	}
	as->st->keep_bytes = 1; /* nothing past this chunk */
	if (!evbuf_rec_ends(kind))
		as->dropped++;
	return true;
}

/* evbuf_visit_fn: one raw record. */
static void visit(void *ctx, int32_t tid, const char *thread_name,
		  const struct evbuf_rec *r)
{
	struct assembler *as = ctx;
	struct trace *t = as->t;
	struct thread_state *th;
	struct trace_event e = { 0 };
	struct open_range *stack, *started;
	size_t i;

	if (r->kind == EVBUF_PYSTACK)
		return; /* the Python bridge's snapshots: a salvage reads them */
	if (r->kind == EVBUF_OPSTACK) {
		add_opstack(as, r); /* a few per stack: never left out */
		return;
	}
	if (over_budget(as, r->kind))
		return;
	if (r->kind == EVBUF_CUPTI) {
		/* The CUPTI source converts these in its collect; they are not
		 * the delivering thread's events (no track of its own). */
		if (trace_add_raw(t, r->kind, r->ts, evbuf_payload(r), r->len) != 0)
			t->oom = 1;
		return;
	}
	th = thread_get(as, tid, thread_name);
	if (!th)
		return;
	if (as->src->clip_start && r->ts < t->meta.start_ts &&
	    (r->kind == EVBUF_MARK || r->kind == EVBUF_SAMPLE || r->kind == EVBUF_STACK ||
	     r->kind == EVBUF_TORCH_MEM))
		return; /* before the dump's first step */
	if (t->meta.end_ts && r->ts > t->meta.end_ts)
		return; /* after the window's end: another thread got in between
			   the closing record's timestamp and the buffer's close
			   (ranges it ends stay open and are cut at the end) */
	switch (r->kind) {
	case EVBUF_RANGE_PUSH:
		if ((evbuf_a_flags(r->a) & EVBUF_A_EARLY) && replayed_carried(th, r))
			break; /* the range the previous generation left open */
		stack = grow_array(th->stack, &th->cap, th->depth + 1, sizeof *th->stack, 16);
		if (!stack) {
			t->oom = 1;
			return;
		}
		th->stack = stack;
		th->stack[th->depth].name = trace_intern(t, evbuf_payload(r), r->len);
		th->stack[th->depth].ts = r->ts;
		th->stack[th->depth].a = r->a;
		th->stack[th->depth].flags = 0;
		th->stack[th->depth].stack = 0;
		th->stack[th->depth].id = r->id; /* GPU link (external id) */
		if (evbuf_a_flags(r->a) & EVBUF_A_EARLY) {
			/* Open when the window began: it starts there. */
			if (!r->len)
				th->stack[th->depth].name =
					trace_intern(t, NAME_UNKNOWN, strlen(NAME_UNKNOWN));
			if (t->meta.start_ts < r->ts)
				th->stack[th->depth].ts = t->meta.start_ts;
			th->stack[th->depth].flags = TRACE_F_CLIPPED_START;
		}
		th->depth++;
		break;
	case EVBUF_RANGE_POP:
		/* Each NVTX domain has its own stack: pop this domain's top. */
		for (i = th->depth; i-- > 0;)
			if (evbuf_a_domain(th->stack[i].a) == evbuf_a_domain(r->a))
				break;
		if (i == SIZE_MAX) {
			if (evbuf_a_flags(r->a) & EVBUF_A_EARLY)
				add_early(as, tid, r);
			else
				t->counters.unbalanced_pops++;
			break;
		}
		{
			struct open_range o = th->stack[i];
			memmove(&th->stack[i], &th->stack[i + 1],
				(th->depth - i - 1) * sizeof *th->stack);
			th->depth--;
			add_range(as, tid, o.name, o.ts, r->ts, o.flags, o.a, o.id, o.stack);
		}
		break;
	case EVBUF_RANGE_START:
		started = grow_array(as->started, &as->cap_started, as->nstarted + 1,
				     sizeof *as->started, 16);
		if (!started) {
			t->oom = 1;
			return;
		}
		as->started = started;
		as->started[as->nstarted].name = trace_intern(t, evbuf_payload(r), r->len);
		as->started[as->nstarted].ts = r->ts;
		as->started[as->nstarted].id = r->id;
		as->started[as->nstarted].tid = tid;
		as->started[as->nstarted].a = r->a;
		as->started[as->nstarted].flags = 0;
		as->nstarted++;
		break;
	case EVBUF_RANGE_END:
		for (i = as->nstarted; i-- > 0;)
			if (as->started[i].id == r->id) {
				add_range(as, as->started[i].tid, as->started[i].name,
					  as->started[i].ts, r->ts, 0, as->started[i].a, 0, 0);
				as->started[i] = as->started[--as->nstarted];
				return;
			}
		if (evbuf_a_flags(r->a) & EVBUF_A_EARLY)
			add_early(as, tid, r);
		else
			as->unmatched_ends++;
		break;
	case EVBUF_MARK:
		e.ts = r->ts;
		e.pid = t->meta.pid;
		e.tid = tid;
		e.name = trace_intern(t, evbuf_payload(r), r->len);
		e.cat = TRACE_CAT_MARK;
		e.ph = TRACE_PH_INSTANT;
		if (trace_add_event(t, &e))
			add_nvtx_args(as, r->a);
		break;
	case EVBUF_SAMPLE:
	case EVBUF_STACK:
		add_stack(as, th, tid, r);
		break;
	case EVBUF_TORCH_OP:
		add_op(as, tid, r);
		break;
	case EVBUF_PY_MODULE:
		add_module(as, tid, r);
		break;
	case EVBUF_TORCH_MEM:
		add_mem(as, tid, r);
		break;
	default:
		break; /* kinds of capture sources this build does not know */
	}
}

/* Adds ProfilerStep#N spans and their threads. */
static void add_steps(struct assembler *as, const struct trace_step *steps,
		      size_t nsteps)
{
	struct trace *t = as->t;
	size_t i;

	for (i = 0; i < nsteps; i++) {
		struct trace_event e = { 0 };
		char name[48];
		int n = snprintf(name, sizeof name, "ProfilerStep#%llu",
				 (unsigned long long)steps[i].step);

		e.ts = steps[i].ts;
		e.dur = steps[i].dur;
		e.pid = t->meta.pid;
		e.tid = steps[i].tid;
		e.name = trace_intern(t, name, (size_t)n);
		e.cat = TRACE_CAT_USER_ANNOTATION;
		e.ph = TRACE_PH_COMPLETE;
		e.flags = TRACE_F_STEP | (steps[i].partial ? TRACE_F_PARTIAL : 0);
		trace_add_event(t, &e);
		trace_add_step(t, &steps[i]);
		if (!thread_get(as, steps[i].tid, NULL))
			return;
	}
}

/* Names threads that had no record of their own (only steps) from /proc. */
static void name_threads(struct assembler *as)
{
	struct trace *t = as->t;
	size_t i, j;

	for (i = 0; i < t->nthreads; i++) {
		char path[64], buf[64];
		FILE *f;

		if (*trace_str(t, t->threads[i].name))
			continue;
		snprintf(path, sizeof path, "/proc/self/task/%d/comm", (int)t->threads[i].tid);
		f = fopen(path, "r");
		if (f && fgets(buf, sizeof buf, f)) {
			j = strcspn(buf, "\n");
			buf[j] = '\0';
			trace_add_thread(t, t->threads[i].pid, t->threads[i].tid, buf);
		} else {
			snprintf(buf, sizeof buf, "thread %d", (int)t->threads[i].tid);
			trace_add_thread(t, t->threads[i].pid, t->threads[i].tid, buf);
		}
		if (f)
			fclose(f);
	}
}

/* Drains generation `gen` into the trace, counting what its pool lost. */
static void drain_gen(struct assembler *as, uint64_t gen)
{
	struct evbuf_stats *st = as->st;
	struct trace *t = as->t;

	memset(st, 0, sizeof *st);
	as->pos_seen = UINT64_MAX;
	as->src->drain(gen, visit, as, st);
	t->counters.dropped_buffer += st->dropped_full + st->dropped_cut;
	t->counters.dropped_memory += st->dropped_cut;
	t->counters.dropped_noslot += st->dropped_noslot;
	if (st->pool_errno)
		t->counters.pool_errno = (uint64_t)st->pool_errno;
}

int assemble_window(struct trace *t, const struct assemble_source *src,
		    const struct trace_step *steps, size_t nsteps)
{
	struct assembler as = { .t = t, .src = src };
	struct evbuf_stats st;
	size_t i, k;

	as.st = &st;
	if (src->ngens && src->drain) {
		for (i = 0; i < src->ngens; i++) {
			if (i > 0)
				carry_ranges(&as);
			drain_gen(&as, src->gens[i]);
		}
	} else if (src->gen && src->drain) {
		drain_gen(&as, src->gen);
	}
	t->counters.dropped_buffer += as.dropped;
	t->counters.dropped_memory += as.dropped;

	/* Whatever is still open ends at the window's end. */
	for (i = 0; i < as.nthreads; i++) {
		struct thread_state *th = &as.threads[i];
		for (k = th->depth; k-- > 0;)
			add_range(&as, th->tid, th->stack[k].name, th->stack[k].ts,
				  t->meta.end_ts, TRACE_F_CLIPPED_END | th->stack[k].flags,
				  th->stack[k].a, th->stack[k].id, th->stack[k].stack);
		free(th->stack);
	}
	for (i = 0; i < as.nstarted; i++)
		add_range(&as, as.started[i].tid, as.started[i].name,
			  as.started[i].ts, t->meta.end_ts, TRACE_F_CLIPPED_END,
			  as.started[i].a, 0, 0);
	t->counters.unbalanced_pops += as.unmatched_ends;
	add_steps(&as, steps, nsteps);
	if (as.op_stacks)
		op_stacks_resolve(&as);
	free(as.opdefs);
	free(as.threads);
	free(as.started);
	name_threads(&as);
	if (assemble_phases_yield(t) != 0)
		t->oom = 1;
	t->counters.events = t->nev;
	return t->oom ? -1 : 0;
}

/* ---- step phases and the program's own ranges of their names */

/* Orders own-phase event indices by thread, name and start. */
static int phase_cmp(const void *pa, const void *pb, void *ctx)
{
	const struct trace *t = ctx;
	const struct trace_event *a = &t->ev[*(const uint32_t *)pa];
	const struct trace_event *b = &t->ev[*(const uint32_t *)pb];

	if (a->pid != b->pid)
		return a->pid < b->pid ? -1 : 1;
	if (a->tid != b->tid)
		return a->tid < b->tid ? -1 : 1;
	if (a->name != b->name)
		return a->name < b->name ? -1 : 1;
	if (a->ts != b->ts)
		return a->ts < b->ts ? -1 : 1;
	return 0;
}

static int64_t ev_end(const struct trace_event *e)
{
	return e->ts + (e->dur > 0 ? e->dur : 0);
}

/* Orders phase `a` against event `ev` by thread and name only. */
static int place_cmp(const struct trace_event *a, const struct trace_event *ev)
{
	if (a->pid != ev->pid)
		return a->pid < ev->pid ? -1 : 1;
	if (a->tid != ev->tid)
		return a->tid < ev->tid ? -1 : 1;
	if (a->name != ev->name)
		return a->name < ev->name ? -1 : 1;
	return 0;
}

/* Marks in `drop` (a bit per event) the own phases of sorted[0..n) (by
 * phase_cmp) that event `ev`, a range of the program's, overlaps on its
 * thread with its name. A thread's phases never overlap, so those of one
 * name end in the order they start: a binary search finds the first that
 * ends after ev begins. */
static void shadow(const struct trace *t, const uint32_t *sorted, size_t n,
		   const struct trace_event *ev, uint8_t *drop)
{
	int64_t end = ev_end(ev);
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct trace_event *a = &t->ev[sorted[mid]];
		int c = place_cmp(a, ev);

		if (c < 0 || (c == 0 && ev_end(a) <= ev->ts))
			lo = mid + 1;
		else
			hi = mid;
	}
	for (; lo < n; lo++) {
		const struct trace_event *a = &t->ev[sorted[lo]];

		if (place_cmp(a, ev) != 0 || a->ts >= end)
			break;
		drop[sorted[lo] / 8] |= (uint8_t)(1u << sorted[lo] % 8);
	}
}

/* The distinct names of the own phases (a handful: the phase names), in
 * names[0..*n); *n = PHASE_NAMES + 1 when there are more. */
#define PHASE_NAMES 8

static void phase_names(const struct trace *t, uint32_t names[PHASE_NAMES], size_t *n)
{
	size_t i, k;

	*n = 0;
	for (i = 0; i < t->nown_phases; i++) {
		uint32_t id = t->ev[t->own_phases[i]].name;

		for (k = 0; k < *n && names[k] != id; k++)
			;
		if (k < *n)
			continue;
		if (*n == PHASE_NAMES) {
			*n = PHASE_NAMES + 1;
			return;
		}
		names[(*n)++] = id;
	}
}

int assemble_phases_yield(struct trace *t)
{
	uint32_t *sorted, names[PHASE_NAMES];
	uint8_t *own, *drop;
	size_t i, j, k, n = t->nown_phases, kept = 0, dropped = 0, nnames;

	if (n == 0)
		return 0;
	sorted = malloc(n * sizeof *sorted);
	own = calloc(t->nev / 8 + 1, 1);
	drop = calloc(t->nev / 8 + 1, 1);
	if (!sorted || !own || !drop) {
		free(sorted);
		free(own);
		free(drop);
		return -1;
	}
	memcpy(sorted, t->own_phases, n * sizeof *sorted);
	for (i = 0; i < n; i++)
		own[sorted[i] / 8] |= (uint8_t)(1u << sorted[i] % 8);
	qsort_r(sorted, n, sizeof *sorted, phase_cmp, t);
	phase_names(t, names, &nnames);
	for (i = 0; i < t->nev; i++) {
		const struct trace_event *ev = &t->ev[i];

		if (ev->ph != TRACE_PH_COMPLETE || ev->cat != TRACE_CAT_USER_ANNOTATION ||
		    (ev->flags & TRACE_F_STEP) || (own[i / 8] >> i % 8 & 1))
			continue;
		/* most ranges have another name: no search for them */
		for (k = 0; k < nnames && k < PHASE_NAMES && names[k] != ev->name; k++)
			;
		if (nnames <= PHASE_NAMES && k == nnames)
			continue;
		shadow(t, sorted, n, ev, drop);
	}
	/* The events that stay move down in order; the own phases that stay
	 * are renumbered. */
	for (i = 0, j = 0; i < t->nev; i++) {
		if (drop[i / 8] >> i % 8 & 1) {
			dropped++;
			continue;
		}
		if (own[i / 8] >> i % 8 & 1)
			t->own_phases[kept++] = (uint32_t)j;
		if (j != i)
			t->ev[j] = t->ev[i];
		j++;
	}
	t->nev = j;
	t->nown_phases = kept;
	if (dropped)
		t->counters.events = t->nev;
	free(sorted);
	free(own);
	free(drop);
	return 0;
}

/* memory_tensors — torch's tensors over a window (see memory_timeline.h). */
#include "memory_timeline.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "../util/sortidx.h"

#define NO_POS UINT32_MAX

/* One "[memory]" event of the window. */
struct tev {
	int64_t ts, bytes;
	uint64_t addr;
	uint32_t ev;      /* index into t->ev */
	uint32_t owner;   /* the operator's name, STRTAB_NONE */
	uint32_t series;  /* index into m->dev */
	uint32_t pos;     /* its place in its series' time order */
	uint32_t free;    /* the tev that freed it (an allocation), NO_POS */
	bool paired;      /* a free matched to an allocation of the window */
};

struct build {
	const struct trace *t;
	struct tev *v;
	uint32_t n;
};

static bool is_tensor_mem(const struct trace *t, const struct trace_event *ev)
{
	return ev->ph == TRACE_PH_INSTANT && ev->cat == TRACE_CAT_CPU_INSTANT &&
	       strcmp(trace_str(t, ev->name), TRACE_MEMORY_NAME) == 0;
}

/* An operator the allocations of its thread are charged to. */
static bool is_owner(const struct trace_event *ev)
{
	return ev->ph == TRACE_PH_COMPLETE && !(ev->flags & TRACE_F_STEP) &&
	       (ev->cat == TRACE_CAT_CPU_OP || ev->cat == TRACE_CAT_USER_ANNOTATION);
}

/* The args of a "[memory]" event into *v; the device in *type, *id. */
static void read_args(const struct trace *t, const struct trace_event *ev, struct tev *v,
		      int32_t *type, int32_t *id)
{
	size_t i;

	*type = 0;
	*id = -1;
	for (i = ev->args; i < (size_t)ev->args + ev->nargs && i < t->nargs; i++) {
		const struct trace_arg *a = &t->args[i];
		const char *key = trace_str(t, a->key);

		if (a->type != TRACE_ARG_INT && a->type != TRACE_ARG_UINT)
			continue;
		if (strcmp(key, TRACE_ARG_ALLOC_BYTES) == 0)
			v->bytes = a->v.i;
		else if (strcmp(key, TRACE_ARG_ADDR) == 0)
			v->addr = a->v.u;
		else if (strcmp(key, TRACE_ARG_DEVICE_TYPE) == 0)
			*type = (int32_t)a->v.i;
		else if (strcmp(key, TRACE_ARG_DEVICE_ID) == 0)
			*id = (int32_t)a->v.i;
	}
}

/* Events in thread and time order, longer first at one start (the
 * enclosing one before what it holds), then by index. */
static int cmp_thread_time(uint32_t a, uint32_t b, void *ctx)
{
	const struct trace *t = ctx;
	const struct trace_event *x = &t->ev[a], *y = &t->ev[b];

	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	if (x->tid != y->tid)
		return x->tid < y->tid ? -1 : 1;
	if (x->ts != y->ts)
		return x->ts < y->ts ? -1 : 1;
	if (x->dur != y->dur)
		return x->dur > y->dur ? -1 : 1;
	return (a > b) - (a < b);
}

/* Each tev's owner: one sweep over the operators and the "[memory]"
 * events of each thread together (`idx`: their event indexes, `map`:
 * event index -> tev + 1 for the memory events). 0, or -1 (no memory). */
static int find_owners(struct build *b, uint32_t *idx, size_t n, const uint32_t *map)
{
	const struct trace *t = b->t;
	uint32_t *stack = NULL;
	size_t depth = 0, cap = 0, i;
	const struct trace_event *prev = NULL;

	sortidx_u32(idx, n, cmp_thread_time, (void *)t);
	for (i = 0; i < n; i++) {
		const struct trace_event *ev = &t->ev[idx[i]];

		if (prev && (ev->pid != prev->pid || ev->tid != prev->tid))
			depth = 0;
		prev = ev;
		/* what ended by now is over (an operator that ends at this
		 * very instant too) */
		while (depth && t->ev[stack[depth - 1]].ts + t->ev[stack[depth - 1]].dur <= ev->ts)
			depth--;
		if (ev->ph == TRACE_PH_INSTANT) {
			b->v[map[idx[i]] - 1].owner =
				depth ? t->ev[stack[depth - 1]].name : STRTAB_NONE;
			continue;
		}
		if (depth == cap) {
			size_t ncap = cap ? 2 * cap : 64;
			uint32_t *s = realloc(stack, ncap * sizeof *s);

			if (!s) {
				free(stack);
				return -1;
			}
			stack = s;
			cap = ncap;
		}
		stack[depth++] = idx[i];
	}
	free(stack);
	return 0;
}

/* tevs by series, then time, then event order. */
static int cmp_series_time(uint32_t a, uint32_t b, void *ctx)
{
	const struct tev *v = ctx;

	if (v[a].series != v[b].series)
		return v[a].series < v[b].series ? -1 : 1;
	if (v[a].ts != v[b].ts)
		return v[a].ts < v[b].ts ? -1 : 1;
	return (v[a].ev > v[b].ev) - (v[a].ev < v[b].ev);
}

/* tevs by series, address, then time order. */
static int cmp_series_addr(uint32_t a, uint32_t b, void *ctx)
{
	const struct tev *v = ctx;

	if (v[a].series != v[b].series)
		return v[a].series < v[b].series ? -1 : 1;
	if (v[a].addr != v[b].addr)
		return v[a].addr < v[b].addr ? -1 : 1;
	return (v[a].pos > v[b].pos) - (v[a].pos < v[b].pos);
}

/* Owners by name, for grouping. */
static int cmp_owner_name(const void *pa, const void *pb)
{
	const struct memory_owner *a = pa, *b = pb;

	return (a->name > b->name) - (a->name < b->name);
}

/* Most bytes first, then more tensors, then the name's id. */
static int cmp_owner_bytes(const void *pa, const void *pb)
{
	const struct memory_owner *a = pa, *b = pb;

	if (a->bytes != b->bytes)
		return a->bytes > b->bytes ? -1 : 1;
	if (a->tensors != b->tensors)
		return a->tensors > b->tensors ? -1 : 1;
	return (a->name > b->name) - (a->name < b->name);
}

/* The allocations of series order[0..n) live after position `at` (or at
 * the end: NO_POS), summed by owner into *out (malloc'd, *nout rows, most
 * bytes first). 0, or -1 (no memory). */
static int live_by_owner(const struct build *b, const uint32_t *order, size_t n, uint32_t at,
			 struct memory_owner **out, size_t *nout)
{
	struct memory_owner *o;
	size_t i, k = 0, g;

	*out = NULL;
	*nout = 0;
	o = malloc((n ? n : 1) * sizeof *o);
	if (!o)
		return -1;
	for (i = 0; i < n; i++) {
		const struct tev *v = &b->v[order[i]];

		if (v->bytes <= 0 || (at != NO_POS && v->pos > at))
			continue;
		if (at == NO_POS ? v->free != NO_POS : v->free != NO_POS && b->v[v->free].pos <= at)
			continue;
		o[k].name = v->owner;
		o[k].bytes = v->bytes;
		o[k].tensors = 1;
		k++;
	}
	qsort(o, k, sizeof *o, cmp_owner_name);
	for (i = 0, g = 0; i < k; i++) {
		if (g && o[g - 1].name == o[i].name) {
			o[g - 1].bytes += o[i].bytes;
			o[g - 1].tensors++;
		} else {
			o[g++] = o[i];
		}
	}
	qsort(o, g, sizeof *o, cmp_owner_bytes);
	*out = o;
	*nout = g;
	return 0;
}

/* One series' points, counts, peak, and what was live at the peak and at
 * the end: order[0..n) are its tevs in time order. 0, or -1. */
static int fill_series(struct build *b, struct memory_series *s, const uint32_t *order,
		       size_t n)
{
	int64_t total = 0;
	uint32_t peak_pos = NO_POS;
	size_t i;

	s->p = malloc((n ? n : 1) * sizeof *s->p);
	if (!s->p)
		return -1;
	s->cap = n ? n : 1;
	for (i = 0; i < n; i++) {
		const struct tev *v = &b->v[order[i]];

		if (v->bytes > 0) {
			total += v->bytes;
			s->allocs++;
		} else {
			s->frees++;
			if (v->paired) /* the block was allocated in the window */
				total += v->bytes;
		}
		s->p[s->n].ts = v->ts;
		s->p[s->n].bytes = total;
		s->n++;
		if (peak_pos == NO_POS || total > s->peak) {
			s->peak = total;
			s->peak_ts = v->ts;
			peak_pos = v->pos;
		}
	}
	if (live_by_owner(b, order, n, peak_pos, &s->at_peak, &s->nat_peak) != 0 ||
	    live_by_owner(b, order, n, NO_POS, &s->at_end, &s->nat_end) != 0)
		return -1;
	s->end_bytes = 0;
	for (i = 0; i < s->nat_end; i++) {
		s->end_bytes += s->at_end[i].bytes;
		s->end_tensors += s->at_end[i].tensors;
	}
	return 0;
}

/* Frees matched to allocations: within a series and an address, in time
 * order, a free ends the latest allocation not yet freed; one with none
 * (a block allocated before the window) stays unpaired. */
static void pair_frees(struct build *b, uint32_t *order)
{
	uint32_t i, open = NO_POS;

	sortidx_u32(order, b->n, cmp_series_addr, b->v);
	for (i = 0; i < b->n; i++) {
		struct tev *v = &b->v[order[i]];

		if (i && (b->v[order[i - 1]].series != v->series ||
			  b->v[order[i - 1]].addr != v->addr))
			open = NO_POS;
		if (v->bytes > 0) {
			open = order[i];
		} else if (open != NO_POS) {
			b->v[open].free = order[i];
			v->paired = true;
			open = NO_POS;
		}
	}
}

/* The series of device (type, id), added when new; NULL when the
 * timeline has no room for another. */
static struct memory_series *series_of(struct memory_timeline *m, int32_t type, int32_t id,
				       uint32_t *index)
{
	size_t d;

	for (d = 0; d < m->ndev; d++)
		if (m->dev[d].source == MEMORY_TORCH && m->dev[d].device_type == type &&
		    m->dev[d].device == id)
			break;
	if (d == m->ndev) {
		if (d == MEMORY_TIMELINE_DEVICES)
			return NULL;
		memset(&m->dev[d], 0, sizeof m->dev[d]);
		m->dev[d].source = MEMORY_TORCH;
		m->dev[d].device_type = type;
		m->dev[d].device = id;
		m->ndev++;
	}
	*index = (uint32_t)d;
	return &m->dev[d];
}

int memory_tensors_build(const struct trace *t, struct memory_timeline *m, struct err *e)
{
	struct build b = { t, NULL, 0 };
	uint32_t *idx = NULL, *map = NULL, *order = NULL;
	size_t i, nidx = 0, first, d;
	int rc = -1;

	if (t->nev >= NO_POS)
		return err_set(e, "the memory timeline: more than 2^32 events in one window");
	for (i = 0; i < t->nev; i++)
		b.n += is_tensor_mem(t, &t->ev[i]);
	if (!b.n)
		return 0;
	b.v = calloc(b.n, sizeof *b.v);
	map = calloc(t->nev, sizeof *map);
	if (!b.v || !map)
		goto out;
	b.n = 0;
	for (i = 0; i < t->nev; i++) {
		const struct trace_event *ev = &t->ev[i];
		int32_t type, id;
		uint32_t series;

		if (is_owner(ev))
			nidx++;
		if (!is_tensor_mem(t, ev))
			continue;
		nidx++;
		read_args(t, ev, &b.v[b.n], &type, &id);
		if (!series_of(m, type, id, &series))
			continue; /* more devices than the timeline shows */
		b.v[b.n].ts = ev->ts;
		b.v[b.n].ev = (uint32_t)i;
		b.v[b.n].series = series;
		b.v[b.n].owner = STRTAB_NONE;
		b.v[b.n].free = NO_POS;
		map[i] = ++b.n;
	}
	idx = malloc((nidx ? nidx : 1) * sizeof *idx);
	order = malloc((b.n ? b.n : 1) * sizeof *order);
	if (!idx || !order)
		goto out;
	for (i = 0, nidx = 0; i < t->nev; i++)
		if (map[i] || is_owner(&t->ev[i]))
			idx[nidx++] = (uint32_t)i;
	if (find_owners(&b, idx, nidx, map) != 0)
		goto out;
	for (i = 0; i < b.n; i++)
		order[i] = (uint32_t)i;
	sortidx_u32(order, b.n, cmp_series_time, b.v);
	for (i = 0; i < b.n; i++)
		b.v[order[i]].pos = (uint32_t)i;
	pair_frees(&b, order);
	sortidx_u32(order, b.n, cmp_series_time, b.v);
	for (first = 0; first < b.n; first = i) {
		d = b.v[order[first]].series;
		for (i = first; i < b.n && b.v[order[i]].series == d; i++)
			;
		if (fill_series(&b, &m->dev[d], order + first, i - first) != 0)
			goto out;
	}
	rc = 0;
out:
	free(b.v);
	free(map);
	free(idx);
	free(order);
	if (rc != 0)
		return err_set(e, "out of memory building the memory timeline");
	return 0;
}

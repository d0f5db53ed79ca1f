/* key_averages — the operator table (see key_averages.h). */
#include "key_averages.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../events/query.h"
#include "../common/grow.h"
#include "../common/hash.h"
#include "../util/htab.h"
#include "../util/sortidx.h"
#include "outfile.h"
#include "textbuf.h"

#define STEP_PREFIX "ProfilerStep#"
#define STEP_KEY "ProfilerStep*"
#define NO_DOMAIN "(none)"
#define COL_WIDTH 12 /* torch's DEFAULT_COLUMN_WIDTH */
#define COL_SPACING 2 /* torch's SPACING_SIZE */

static const char *const sort_names[] = {
	"self_cpu_time_total", "cpu_time_total", "cpu_time", "count",
	"self_cuda_time_total", "cuda_time_total", "cuda_time",
	"cpu_memory_usage", "self_cpu_memory_usage", "cuda_memory_usage",
	"self_cuda_memory_usage"
};
#define NSORT (sizeof sort_names / sizeof sort_names[0])

/* torch >= 2.4 names the CUDA keys device_*. */
static const struct {
	const char *name;
	enum key_avg_sort sort;
} sort_aliases[] = {
	{ "self_device_time_total", KEY_AVG_SORT_SELF_CUDA_TIME_TOTAL },
	{ "device_time_total", KEY_AVG_SORT_CUDA_TIME_TOTAL },
	{ "device_time", KEY_AVG_SORT_CUDA_TIME },
	{ "device_memory_usage", KEY_AVG_SORT_CUDA_MEM },
	{ "self_device_memory_usage", KEY_AVG_SORT_SELF_CUDA_MEM },
};

int key_averages_parse_sort(const char *s, enum key_avg_sort *out, struct err *e)
{
	size_t i;

	for (i = 0; s && i < NSORT; i++) {
		if (strcmp(s, sort_names[i]) == 0) {
			*out = (enum key_avg_sort)i;
			return 0;
		}
	}
	for (i = 0; s && i < sizeof sort_aliases / sizeof sort_aliases[0]; i++) {
		if (strcmp(s, sort_aliases[i].name) == 0) {
			*out = sort_aliases[i].sort;
			return 0;
		}
	}
	return err_set(e, "unknown key_averages sort_by '%s' (one of self_cpu_time_total, "
		       "cpu_time_total, cpu_time, count, self_cuda_time_total, "
		       "cuda_time_total, cuda_time, cpu_memory_usage, self_cpu_memory_usage, "
		       "cuda_memory_usage, self_cuda_memory_usage)", s ? s : "(null)");
}

int key_averages_parse_group(const char *s, enum key_avg_group *out, struct err *e)
{
	if (s && strcmp(s, "name") == 0) {
		*out = KEY_AVG_BY_NAME;
		return 0;
	}
	if (s && strcmp(s, "domain") == 0) {
		*out = KEY_AVG_BY_DOMAIN;
		return 0;
	}
	return err_set(e, "unknown key_averages group_by '%s' (one of name, domain)",
		       s ? s : "(null)");
}

/* True for the CPU-side events the table counts. */
static bool counted(const struct trace_event *ev)
{
	if (ev->ph != TRACE_PH_COMPLETE)
		return false;
	switch (ev->cat) {
	case TRACE_CAT_USER_ANNOTATION:
	case TRACE_CAT_CPU_OP:
	case TRACE_CAT_CUDA_RUNTIME:
	case TRACE_CAT_CUDA_DRIVER:
		return true;
	default:
		return false;
	}
}

/* True for torch's "[memory]" instants (an allocation or a free;
 * prof.capture{profile_memory}), which the sweep attributes to the events
 * holding them. */
static bool is_mem(const struct trace *t, const struct trace_event *ev)
{
	return ev->ph == TRACE_PH_INSTANT && ev->cat == TRACE_CAT_CPU_INSTANT &&
	       strcmp(trace_str(t, ev->name), TRACE_MEMORY_NAME) == 0;
}

/* A "[memory]" event's bytes (negative: freed) and the side it counts on:
 * KEY_AVG_CUDA for a GPU's (c10's Device Type 1), else KEY_AVG_CPU. */
static int64_t mem_bytes(const struct trace *t, const struct trace_event *ev, int *side)
{
	int64_t bytes = 0;
	size_t i;

	*side = KEY_AVG_CPU;
	for (i = ev->args; i < (size_t)ev->args + ev->nargs && i < t->nargs; i++) {
		const struct trace_arg *a = &t->args[i];
		const char *key;

		if (a->type != TRACE_ARG_INT && a->type != TRACE_ARG_UINT)
			continue;
		key = trace_str(t, a->key);
		if (strcmp(key, TRACE_ARG_ALLOC_BYTES) == 0)
			bytes = a->v.i;
		else if (strcmp(key, TRACE_ARG_DEVICE_TYPE) == 0 && a->v.i == 1)
			*side = KEY_AVG_CUDA;
	}
	return bytes;
}

static int64_t ev_dur(const struct trace_event *ev)
{
	return ev->dur > 0 ? ev->dur : 0;
}

/* The grouping key of an event: a string of the trace or a literal. */
static const char *event_key(const struct trace *t, const struct trace_event *ev,
			     enum key_avg_group group)
{
	const char *name;
	size_t len;

	if (group == KEY_AVG_BY_NAME) {
		name = trace_str(t, ev->name);
		if (strncmp(name, STEP_PREFIX, strlen(STEP_PREFIX)) == 0)
			return STEP_KEY;
		return name;
	}
	name = query_arg_str(t, ev, TRACE_ARG_DOMAIN, &len);
	return name ? name : NO_DOMAIN;
}

/* What a row is keyed by: its name (or domain) and, with the grouping
 * options, its input shapes and the first entries of its call stack
 * (NULL when not grouped by them). */
struct row_key {
	const char *key;
	struct key_avg_key_extra x;
};

/* The rest of the key of no row: a table grouped by name or domain
 * alone's rows. */
static const struct key_avg_key_extra no_extra;

/* Key -> row index, open addressing on the key's bytes. */
struct key_map {
	uint32_t *slot; /* row index + 1; 0 = empty */
	size_t nslots;
};

#define NO_SHAPES "[]"

size_t key_averages_stack_prefix(const char *stack, size_t len, uint32_t n,
				 size_t *entries)
{
	size_t i, count = 0, prefix = 0;

	for (i = 0; i < len; i++) {
		if (stack[i] != ';')
			continue;
		if (++count == n)
			prefix = i;
	}
	if (len)
		count++; /* the last entry */
	if (count <= n)
		prefix = len;
	if (entries)
		*entries = count;
	return prefix;
}

/* The value of the event's string argument `key`, raw JSON included (the
 * recorded "Input Dims"), or NULL. */
static const char *arg_text(const struct trace *t, const struct trace_event *ev,
			    const char *key, uint32_t *len)
{
	size_t i;

	for (i = ev->args; i < (size_t)ev->args + ev->nargs && i < t->nargs; i++) {
		const struct trace_arg *a = &t->args[i];

		if ((a->type == TRACE_ARG_STR || a->type == TRACE_ARG_RAW) &&
		    strcmp(trace_str(t, a->key), key) == 0) {
			*len = strtab_len(&t->names, a->v.str);
			return trace_str(t, a->v.str);
		}
	}
	return NULL;
}

/* Fills *k for event `ev` (see struct row_key). */
static void event_row_key(const struct trace *t, const struct trace_event *ev,
			  const struct key_avg_opts *o, struct row_key *k)
{
	struct key_avg_key_extra *x = &k->x;
	uint32_t len;

	k->key = event_key(t, ev, o->group);
	*x = no_extra;
	if (o->by_input_shape) {
		x->shapes = ev->nargs ? arg_text(t, ev, TRACE_ARG_INPUT_DIMS, &len) : NULL;
		if (x->shapes)
			x->shapes_len = len;
		else
			x->shapes = NO_SHAPES, x->shapes_len = sizeof NO_SHAPES - 1;
	}
	if (o->stack_n) {
		x->stack = ev->nargs ? arg_text(t, ev, TRACE_ARG_CALL_STACK, &len) : NULL;
		if (x->stack)
			x->stack_len = (uint32_t)key_averages_stack_prefix(x->stack, len,
									   o->stack_n, NULL);
		else
			x->stack = "";
	}
}

/* Whether `c` is white space in a JSON text. */
static bool json_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* The hash of a key: its name's bytes, then its shapes' (their white
 * space aside: a list read back from JSON may be spaced otherwise) and its
 * stack's, each after a byte no text holds. */
static uint64_t key_hash(const struct row_key *k)
{
	const struct key_avg_key_extra *x = &k->x;
	uint64_t h = hash_fnv64_str(HASH_FNV64_SEED, k->key);
	uint32_t i;

	if (x->shapes) {
		h = hash_fnv64(h, "\1", 1);
		for (i = 0; i < x->shapes_len; i++)
			if (!json_space(x->shapes[i]))
				h = hash_fnv64(h, &x->shapes[i], 1);
	}
	if (x->stack)
		h = hash_fnv64(hash_fnv64(h, "\2", 1), x->stack, x->stack_len);
	return h;
}

/* Whether two lists of shapes are the same, white space aside. */
static bool shapes_eq(const char *a, size_t alen, const char *b, size_t blen)
{
	size_t i = 0, j = 0;

	for (;;) {
		while (i < alen && json_space(a[i]))
			i++;
		while (j < blen && json_space(b[j]))
			j++;
		if (i == alen || j == blen)
			return i == alen && j == blen;
		if (a[i++] != b[j++])
			return false;
	}
}

/* The rest of the key of tab->rows[i] (no_extra in a table grouped by
 * name or domain alone). */
static const struct key_avg_key_extra *row_extra(const struct key_avg_table *tab, size_t i)
{
	return tab->row_extra ? &tab->row_extra[i] : &no_extra;
}

/* Whether tab->rows[i] has key `k`. */
static bool key_eq(const struct key_avg_table *tab, size_t i, const struct row_key *k)
{
	const struct key_avg_key_extra *x = row_extra(tab, i);

	return strcmp(tab->rows[i].key, k->key) == 0 && x->stack_len == k->x.stack_len &&
	       (!k->x.shapes || shapes_eq(x->shapes, x->shapes_len, k->x.shapes,
					  k->x.shapes_len)) &&
	       (!k->x.stack || memcmp(x->stack, k->x.stack, k->x.stack_len) == 0);
}

/* The hash of row `r` (htab_rebuild). */
static uint64_t row_hash(const void *ctx, size_t r)
{
	const struct key_avg_table *tab = ctx;
	struct row_key k;

	k.key = tab->rows[r].key;
	k.x = *row_extra(tab, r);
	return key_hash(&k);
}

/* Doubles the map's slots (rows are rehashed from tab). 0, or -1 with the
 * map unchanged. */
static int key_map_grow(struct key_map *m, const struct key_avg_table *tab)
{
	return htab_rebuild(&m->slot, &m->nslots, m->nslots * 2, 0, tab->nrows, row_hash, tab);
}

/* GPU time by correlation id: the kernels, copies and memsets a launch
 * started (a graph launch starts many). Open addressing. */
struct gpu_map {
	uint64_t *corr;
	int64_t *ns;
	size_t nslots;
};

static bool gpu_work(const struct trace_event *ev)
{
	return ev->ph == TRACE_PH_COMPLETE && ev->id &&
	       (ev->cat == TRACE_CAT_KERNEL || ev->cat == TRACE_CAT_GPU_MEMCPY ||
		ev->cat == TRACE_CAT_GPU_MEMSET);
}

static size_t gpu_slot(const struct gpu_map *m, uint64_t corr)
{
	size_t i;

	for (i = htab_first(corr * 0x9E3779B97F4A7C15ULL, m->nslots);
	     m->corr[i] && m->corr[i] != corr; i = htab_next(i, m->nslots))
		;
	return i;
}

/* Fills the map from the trace's GPU events. 0, or -1 (no memory); an
 * empty map (nslots 0) when there is no GPU work. */
static int gpu_map_build(const struct trace *t, struct gpu_map *m)
{
	size_t i, n = 0;

	memset(m, 0, sizeof *m);
	for (i = 0; i < t->nev; i++)
		n += gpu_work(&t->ev[i]);
	if (!n)
		return 0;
	m->nslots = 64;
	while (m->nslots < 2 * n)
		m->nslots *= 2;
	m->corr = calloc(m->nslots, sizeof *m->corr);
	m->ns = calloc(m->nslots, sizeof *m->ns);
	if (!m->corr || !m->ns)
		return -1;
	for (i = 0; i < t->nev; i++) {
		const struct trace_event *ev = &t->ev[i];
		size_t k;

		if (!gpu_work(ev))
			continue;
		k = gpu_slot(m, ev->id);
		m->corr[k] = ev->id;
		m->ns[k] += ev_dur(ev);
	}
	return 0;
}

static bool is_api(const struct trace_event *ev)
{
	return ev->cat == TRACE_CAT_CUDA_RUNTIME || ev->cat == TRACE_CAT_CUDA_DRIVER;
}

static bool is_step(const struct trace *t, const struct trace_event *ev)
{
	return (ev->flags & TRACE_F_STEP) ||
	       strncmp(trace_str(t, ev->name), STEP_PREFIX, strlen(STEP_PREFIX)) == 0;
}

/* The event's "flops" arg (torch operators with with_flops), 0 if none. */
static uint64_t ev_flops(const struct trace *t, const struct trace_event *ev)
{
	size_t i;

	for (i = ev->args; i < (size_t)ev->args + ev->nargs && i < t->nargs; i++) {
		const struct trace_arg *a = &t->args[i];

		if ((a->type == TRACE_ARG_UINT || a->type == TRACE_ARG_INT) &&
		    strcmp(trace_str(t, a->key), TRACE_ARG_FLOPS) == 0)
			return a->type == TRACE_ARG_INT && a->v.i < 0 ? 0 : a->v.u;
	}
	return 0;
}

/* Events the sweep reads ahead of the one it is at. */
#define SWEEP_AHEAD 16

/* One open event of the sweep: what it has owned so far. */
struct sweep_ent {
	uint32_t ev;    /* index into t->ev */
	int64_t self;   /* self CPU time */
	int64_t cself;  /* self CUDA time (GPU attribution) */
	int64_t ctotal; /* CUDA total */
	int64_t smem[2]; /* Self CPU / CUDA Mem: bytes while innermost */
	int64_t tmem[2]; /* CPU / CUDA Mem: smem and its children's tmem */
};

/* One pass of the build: the rows of the keys in partition `part` of
 * `nparts`, a power of two (a key's partition: its strtab id modulo
 * nparts; the steps' and "(none)" keys are in partition 0). */
struct pass {
	const struct trace *t;
	const struct gpu_map *gm;
	enum key_avg_group group;
	const struct key_avg_opts *o;
	bool composite;            /* keyed by shapes or stack too: a key's
				      part is its hash's, and a part may
				      outgrow max_rows (then `overflow`) */
	size_t max_rows;
	uint32_t nparts, part;
	struct key_avg_table *tab; /* this pass's rows */
	size_t cap, cap_mem, cap_extra; /* of tab->rows, row_mem, row_extra */
	struct key_map map;
	struct sweep_ent *stack;
	size_t cap_stack;
	int64_t self_cpu_sum_ns, self_cuda_sum_ns; /* over every event */
	int failed;                /* out of memory, or (overflow) too many
				      keys in this part */
	bool overflow;
	key_avg_visit_fn visit;    /* key_averages_each: each event's times go
				      here instead of into rows */
	void *visit_ctx;
};

/* Finds or adds the row of key `k` in ps->tab (and, in a table with
 * memory, its zeroed row_mem; grouped by shapes or stack, its row_extra);
 * the map grows with the rows (at most half full), not with the events.
 * Returns its index, or (size_t)-1 on allocation failure. */
static size_t row_for(struct pass *ps, const struct row_key *k)
{
	struct key_avg_table *tab = ps->tab;
	struct key_map *m = &ps->map;
	struct key_avg_row *rows, *r;
	struct key_avg_mem *mem;
	struct key_avg_key_extra *x;
	size_t i;

	if (tab->nrows >= UINT32_MAX - 1 ||
	    (htab_full(tab->nrows, m->nslots) && key_map_grow(m, tab) != 0))
		return (size_t)-1;
	for (i = htab_first(key_hash(k), m->nslots); m->slot[i]; i = htab_next(i, m->nslots))
		if (key_eq(tab, m->slot[i] - 1, k))
			return m->slot[i] - 1;
	rows = grow_array(tab->rows, &ps->cap, tab->nrows + 1, sizeof *rows, 64);
	if (!rows)
		return (size_t)-1;
	tab->rows = rows;
	if (tab->memory) {
		mem = grow_array(tab->row_mem, &ps->cap_mem, tab->nrows + 1, sizeof *mem, 64);
		if (!mem)
			return (size_t)-1;
		tab->row_mem = mem;
		memset(&mem[tab->nrows], 0, sizeof *mem);
	}
	if (ps->composite) {
		x = grow_array(tab->row_extra, &ps->cap_extra, tab->nrows + 1, sizeof *x, 64);
		if (!x)
			return (size_t)-1;
		tab->row_extra = x;
		x[tab->nrows] = k->x;
	}
	r = &tab->rows[tab->nrows];
	memset(r, 0, sizeof *r);
	r->key = k->key;
	r->first_ts = INT64_MAX;
	m->slot[i] = (uint32_t)++tab->nrows;
	return tab->nrows - 1;
}

/* row_for() for one event of a pass: the row's index, or (size_t)-1 when
 * the pass failed (ps->failed set: memory ran out, or a composite key's
 * part holds more than max_rows rows, ps->overflow set, to be done again
 * in more parts). */
static size_t pass_row(struct pass *ps, const struct row_key *k)
{
	size_t r = row_for(ps, k);

	if (r == (size_t)-1) {
		ps->failed = 1;
		return r;
	}
	if (ps->composite && ps->tab->nrows > ps->max_rows) {
		ps->failed = 1; /* done again in more parts */
		ps->overflow = true;
		return (size_t)-1;
	}
	return r;
}

/* The partition of an event's key (see struct pass); exact when it is
 * ps->part or ps->part is 0, otherwise only known not to be ps->part. */
static uint32_t key_part(const struct pass *ps, const struct trace_event *ev)
{
	const struct trace *t = ps->t;
	size_t i;

	if (ps->nparts == 1)
		return 0;
	if (ps->group == KEY_AVG_BY_NAME) {
		uint32_t part = ev->name & (ps->nparts - 1);

		/* the name is read only when it may be in this part: the
		 * passes over other parts touch the event alone */
		if (part != ps->part && ps->part != 0)
			return part;
		return strncmp(trace_str(t, ev->name), STEP_PREFIX, strlen(STEP_PREFIX)) == 0
			       ? 0 : part;
	}
	for (i = ev->args; i < (size_t)ev->args + ev->nargs && i < t->nargs; i++) {
		const struct trace_arg *a = &t->args[i];

		if (a->type == TRACE_ARG_STR &&
		    strcmp(trace_str(t, a->key), TRACE_ARG_DOMAIN) == 0)
			return a->v.str & (ps->nparts - 1);
	}
	return 0;
}

/* An event of the sweep ended: its times go to its row when its key is in
 * this pass's partition. */
static void sweep_done(struct pass *ps, const struct sweep_ent *se)
{
	const struct trace *t = ps->t;
	const struct trace_event *ev = &t->ev[se->ev];
	struct key_avg_row *row;
	struct key_avg_mem *mem;
	struct row_key k;
	size_t r;

	ps->self_cpu_sum_ns += se->self;
	ps->self_cuda_sum_ns += se->cself;
	if (ps->visit) {
		ps->visit(ps->visit_ctx, se->ev, se->self, se->cself);
		return;
	}
	if (ps->failed)
		return;
	if (ps->composite) {
		event_row_key(t, ev, ps->o, &k);
		if (ps->nparts > 1 && (uint32_t)(key_hash(&k) & (ps->nparts - 1)) != ps->part)
			return;
	} else {
		if (key_part(ps, ev) != ps->part)
			return;
		event_row_key(t, ev, ps->o, &k);
	}
	r = pass_row(ps, &k);
	if (r == (size_t)-1)
		return;
	row = &ps->tab->rows[r];
	row->count++;
	row->self_cpu_ns += se->self;
	row->cpu_total_ns += ev_dur(ev);
	row->self_cuda_ns += se->cself;
	row->cuda_total_ns += se->ctotal;
	if (ps->tab->memory) {
		mem = &ps->tab->row_mem[r];
		mem->mem[KEY_AVG_CPU] += se->tmem[KEY_AVG_CPU];
		mem->mem[KEY_AVG_CUDA] += se->tmem[KEY_AVG_CUDA];
		mem->self_mem[KEY_AVG_CPU] += se->smem[KEY_AVG_CPU];
		mem->self_mem[KEY_AVG_CUDA] += se->smem[KEY_AVG_CUDA];
	}
	if (ev->nargs && ev->cat == TRACE_CAT_CPU_OP)
		row->flops += ev_flops(t, ev);
	if (ev->ts < row->first_ts)
		row->first_ts = ev->ts;
}

/* Closes the open events that end by `s` (INT64_MAX: all of them); the
 * innermost open event owns [*cursor, s) (see key_averages.h). */
static void sweep_close(struct pass *ps, size_t *depth, int64_t *cursor, int64_t s)
{
	while (*depth > 0) {
		struct sweep_ent *top = &ps->stack[*depth - 1];
		const struct trace_event *ev = &ps->t->ev[top->ev];
		int64_t end = ev->ts + ev_dur(ev);

		if (end > s) { /* still open at s: it owns [cursor, s) */
			top->self += s - *cursor;
			*cursor = s;
			break;
		}
		if (end > *cursor) { /* ended: it owned [cursor, end) */
			top->self += end - *cursor;
			*cursor = end;
		}
		sweep_done(ps, top);
		if (*depth > 1) { /* its memory counts in its parent's */
			top[-1].tmem[KEY_AVG_CPU] += top->tmem[KEY_AVG_CPU];
			top[-1].tmem[KEY_AVG_CUDA] += top->tmem[KEY_AVG_CUDA];
		}
		--*depth;
	}
}

/* A "[memory]" event at the sweep's position: its bytes go to the
 * innermost open event, or, when none is open on its thread, to the row
 * "[memory]" (grouped by name, as an event with no input shapes and no
 * call stack; in the pass of its key's partition: 0, or its hash's with
 * shapes or stacks). */
static void sweep_mem(struct pass *ps, const struct trace_event *ev, size_t depth)
{
	struct key_avg_row *row;
	struct row_key k;
	int side;
	int64_t b = mem_bytes(ps->t, ev, &side);
	size_t r;

	if (depth) {
		ps->stack[depth - 1].smem[side] += b;
		ps->stack[depth - 1].tmem[side] += b;
		return;
	}
	if (ps->visit || ps->failed || ps->group != KEY_AVG_BY_NAME || !ps->tab->memory)
		return;
	k.key = TRACE_MEMORY_NAME;
	k.x = no_extra;
	if (ps->o->by_input_shape) {
		k.x.shapes = NO_SHAPES;
		k.x.shapes_len = (uint32_t)(sizeof NO_SHAPES - 1);
	}
	if (ps->o->stack_n)
		k.x.stack = "";
	if (ps->composite ? ps->nparts > 1 &&
			    (uint32_t)(key_hash(&k) & (ps->nparts - 1)) != ps->part
			  : ps->part != 0)
		return;
	r = pass_row(ps, &k);
	if (r == (size_t)-1)
		return;
	row = &ps->tab->rows[r];
	row->count++;
	ps->tab->row_mem[r].mem[side] += b;
	ps->tab->row_mem[r].self_mem[side] += b;
	if (ev->ts < row->first_ts)
		row->first_ts = ev->ts;
}

/*
 * One pass over the counted events sel[0..n) (in sweep order; sel NULL:
 * the counted ones of t->ev[0..n), a trace in nesting order): self CPU
 * time (the time an event was the innermost open event of its thread;
 * query_aggregate's sweep computes it the same way), and GPU attribution (a launch's
 * GPU time is the Self CUDA of the innermost range holding it, steps
 * aside, or of the launch itself, and counts in the CUDA total of every
 * event holding it), memory (the "[memory]" events among sel; see
 * key_averages.h), each event's share added to its row as it ends. The
 * working memory is the stack of open events (the deepest nesting), not a
 * value per event. Returns 0, or -1 when out of memory.
 */
static int sweep(struct pass *ps, const uint32_t *sel, size_t n)
{
	const struct trace *t = ps->t;
	const struct trace_event *prev = NULL;
	size_t i, depth = 0, k, target;
	int64_t cursor = 0;

	ps->self_cpu_sum_ns = ps->self_cuda_sum_ns = 0;
	for (i = 0; i < n && !ps->failed; i++) {
		const struct trace_event *ev = &t->ev[sel ? sel[i] : i];
		int64_t g;

		if (!sel && !counted(ev) && !is_mem(t, ev))
			continue;
		/* the events of one thread lie apart in the trace: each pass
		 * would wait for memory at every event */
		if (sel && i + SWEEP_AHEAD < n)
			__builtin_prefetch(&t->ev[sel[i + SWEEP_AHEAD]]);

		if (prev && (ev->pid != prev->pid || ev->tid != prev->tid))
			sweep_close(ps, &depth, &cursor, INT64_MAX); /* next thread */
		prev = ev;
		sweep_close(ps, &depth, &cursor, ev->ts);
		if (ev->ph == TRACE_PH_INSTANT) { /* a "[memory]" event */
			sweep_mem(ps, ev, depth);
			continue;
		}
		if (depth == 0)
			cursor = ev->ts;
		if (depth == ps->cap_stack) {
			struct sweep_ent *p = grow_array(ps->stack, &ps->cap_stack, depth + 1,
							 sizeof *p, 64);

			if (!p)
				return -1;
			ps->stack = p;
		}
		memset(&ps->stack[depth], 0, sizeof ps->stack[depth]);
		ps->stack[depth++].ev = (uint32_t)(sel ? sel[i] : i);
		if (!ps->gm->nslots || !is_api(ev) || !ev->id)
			continue;
		k = gpu_slot(ps->gm, ev->id);
		g = ps->gm->corr[k] == ev->id ? ps->gm->ns[k] : 0;
		if (!g)
			continue;
		target = depth - 1;
		for (k = depth; k-- > 0;) {
			const struct trace_event *a = &t->ev[ps->stack[k].ev];

			ps->stack[k].ctotal += g;
			if (target == depth - 1 && k != depth - 1 && !is_api(a) && !is_step(t, a))
				target = k;
		}
		ps->stack[target].cself += g;
	}
	sweep_close(ps, &depth, &cursor, INT64_MAX);
	return ps->failed ? -1 : 0;
}

/* Average of a total over a count, as torch computes it (0 for no calls). */
static double avg(int64_t total, uint64_t count)
{
	return count ? (double)total / (double)count : 0.0;
}

static int cmp_i64(int64_t a, int64_t b)
{
	return a > b ? -1 : a < b; /* descending */
}

static int cmp_double(double a, double b)
{
	return a > b ? -1 : a < b;
}

/* The memory of no event: a table without memory's rows. */
static const struct key_avg_mem no_mem;

/* <0, 0, >0 as tab->rows[ia] sorts before, with, after tab->rows[ib] in
 * `sort` order: descending, ties by earliest start, then key. */
static int rows_cmp(const struct key_avg_table *tab, size_t ia, size_t ib,
		    enum key_avg_sort sort)
{
	const struct key_avg_row *a = &tab->rows[ia], *b = &tab->rows[ib];
	const struct key_avg_mem *ma = tab->row_mem ? &tab->row_mem[ia] : &no_mem;
	const struct key_avg_mem *mb = tab->row_mem ? &tab->row_mem[ib] : &no_mem;
	int c = 0;

	switch (sort) {
	case KEY_AVG_SORT_SELF_CPU_TIME_TOTAL:
		c = cmp_i64(a->self_cpu_ns, b->self_cpu_ns);
		break;
	case KEY_AVG_SORT_CPU_TIME_TOTAL:
		c = cmp_i64(a->cpu_total_ns, b->cpu_total_ns);
		break;
	case KEY_AVG_SORT_CPU_TIME:
		c = cmp_double(avg(a->cpu_total_ns, a->count), avg(b->cpu_total_ns, b->count));
		break;
	case KEY_AVG_SORT_COUNT:
		c = a->count > b->count ? -1 : a->count < b->count;
		break;
	case KEY_AVG_SORT_SELF_CUDA_TIME_TOTAL:
		c = cmp_i64(a->self_cuda_ns, b->self_cuda_ns);
		break;
	case KEY_AVG_SORT_CUDA_TIME_TOTAL:
		c = cmp_i64(a->cuda_total_ns, b->cuda_total_ns);
		break;
	case KEY_AVG_SORT_CUDA_TIME:
		c = cmp_double(avg(a->cuda_total_ns, a->count), avg(b->cuda_total_ns, b->count));
		break;
	case KEY_AVG_SORT_CPU_MEM:
		c = cmp_i64(ma->mem[KEY_AVG_CPU], mb->mem[KEY_AVG_CPU]);
		break;
	case KEY_AVG_SORT_SELF_CPU_MEM:
		c = cmp_i64(ma->self_mem[KEY_AVG_CPU], mb->self_mem[KEY_AVG_CPU]);
		break;
	case KEY_AVG_SORT_CUDA_MEM:
		c = cmp_i64(ma->mem[KEY_AVG_CUDA], mb->mem[KEY_AVG_CUDA]);
		break;
	case KEY_AVG_SORT_SELF_CUDA_MEM:
		c = cmp_i64(ma->self_mem[KEY_AVG_CUDA], mb->self_mem[KEY_AVG_CUDA]);
		break;
	}
	if (c)
		return c;
	if (a->first_ts != b->first_ts) /* torch keeps first-seen order */
		return a->first_ts < b->first_ts ? -1 : 1;
	return strcmp(a->key, b->key);
}

/* What idx_cmp compares: rows of a table in a sort order. */
struct idx_ctx {
	const struct key_avg_table *tab;
	enum key_avg_sort sort;
};

static int idx_cmp(const void *pa, const void *pb, void *ctx)
{
	const struct idx_ctx *c = ctx;

	return rows_cmp(c->tab, *(const uint32_t *)pa, *(const uint32_t *)pb, c->sort);
}

/* A row with what the table keeps beside it: what sorting and merging
 * move together. */
struct whole_row {
	struct key_avg_row row;
	struct key_avg_mem mem;        /* in a table with row_mem */
	struct key_avg_key_extra x;    /* in a table with row_extra */
};

/* Copies tab->rows[i] and what lies beside it into *w (no_mem, no_extra
 * for what the table has not). */
static void row_load(const struct key_avg_table *tab, size_t i, struct whole_row *w)
{
	w->row = tab->rows[i];
	w->mem = tab->row_mem ? tab->row_mem[i] : no_mem;
	w->x = *row_extra(tab, i);
}

/* Copies *w into tab->rows[i] and beside it (row_mem, row_extra: those
 * the table has). */
static void row_store(struct key_avg_table *tab, size_t i, const struct whole_row *w)
{
	tab->rows[i] = w->row;
	if (tab->row_mem)
		tab->row_mem[i] = w->mem;
	if (tab->row_extra)
		tab->row_extra[i] = w->x;
}

/* Swaps rows i and j of the table, and what lies beside them. */
static void swap_rows(struct key_avg_table *tab, size_t i, size_t j)
{
	struct whole_row a, b;

	row_load(tab, i, &a);
	row_load(tab, j, &b);
	row_store(tab, i, &b);
	row_store(tab, j, &a);
}

/* Moves row `root` of the heap rows[0..n) down to its place (heap_sort). */
static void sift_down(struct key_avg_table *tab, enum key_avg_sort sort, size_t root,
		      size_t n)
{
	size_t child;

	while ((child = 2 * root + 1) < n) {
		if (child + 1 < n && rows_cmp(tab, child, child + 1, sort) < 0)
			child++;
		if (rows_cmp(tab, root, child, sort) >= 0)
			return;
		swap_rows(tab, root, child);
		root = child;
	}
}

/* key_averages_sort with no memory to spare: a heapsort of the rows (and
 * what lies beside them) in place. */
static void heap_sort(struct key_avg_table *tab, enum key_avg_sort sort)
{
	size_t i;

	for (i = tab->nrows / 2; i-- > 0;)
		sift_down(tab, sort, i, tab->nrows);
	for (i = tab->nrows; i-- > 1;) {
		swap_rows(tab, 0, i);
		sift_down(tab, sort, 0, i);
	}
}

/* Sorts an index of the rows and moves the rows (and what lies beside
 * them) into place along its cycles: glibc's qsort would copy the whole
 * table once more (a million names: 64 MB) where the index costs 4 bytes
 * a row. The order is total (the key breaks ties), so it is the same
 * either way; without memory for the index, a heapsort in place gives it
 * too. */
void key_averages_sort(struct key_avg_table *tab, enum key_avg_sort sort)
{
	struct idx_ctx ctx = { tab, sort };
	struct whole_row tmp, w;
	uint32_t *idx;
	size_t i, j, k;

	if (tab->nrows < 2)
		return;
	idx = tab->nrows <= UINT32_MAX ? malloc(tab->nrows * sizeof *idx) : NULL;
	if (!idx) {
		heap_sort(tab, sort);
		return;
	}
	for (i = 0; i < tab->nrows; i++)
		idx[i] = (uint32_t)i;
	qsort_r(idx, tab->nrows, sizeof *idx, idx_cmp, &ctx);
	/* position j takes row idx[j]; UINT32_MAX marks a placed position */
	for (i = 0; i < tab->nrows; i++) {
		if (idx[i] == UINT32_MAX)
			continue;
		row_load(tab, i, &tmp);
		for (j = i;;) {
			k = idx[j];
			idx[j] = UINT32_MAX;
			if (k == i) {
				row_store(tab, j, &tmp);
				break;
			}
			row_load(tab, k, &w);
			row_store(tab, j, &w);
			j = k;
		}
	}
	free(idx);
}

/* Adds the sums of out->rows[i] (and its memory) into out->folded. */
static void fold_row(struct key_avg_table *out, size_t i)
{
	struct key_avg_row *into = &out->folded;
	const struct key_avg_row *r = &out->rows[i];
	int d;

	into->count += r->count;
	into->self_cpu_ns += r->self_cpu_ns;
	into->cpu_total_ns += r->cpu_total_ns;
	into->self_cuda_ns += r->self_cuda_ns;
	into->cuda_total_ns += r->cuda_total_ns;
	into->flops += r->flops;
	if (r->first_ts < into->first_ts)
		into->first_ts = r->first_ts;
	for (d = 0; out->row_mem && d < 2; d++) {
		out->folded_mem.mem[d] += out->row_mem[i].mem[d];
		out->folded_mem.self_mem[d] += out->row_mem[i].self_mem[d];
	}
}

static size_t shapes_cols(const struct key_avg_key_extra *x);
static size_t src_cols(const struct key_avg_key_extra *x);

/* Moves the rows of one pass (ps->tab) into `out`, keeping the first
 * `keep` in `sort` order and folding the others into out->folded. `out`
 * has room for 2 * keep + 1 rows (and their row_mem and row_extra, those
 * `pass` has). */
static void keep_rows(struct key_avg_table *out, struct key_avg_table *pass,
		      enum key_avg_sort sort, size_t keep)
{
	struct whole_row w;
	size_t i;

	for (i = 0; i < pass->nrows; i++) {
		const struct key_avg_row *r = &pass->rows[i];
		const struct key_avg_key_extra *x = row_extra(pass, i);

		if (r->flops && (!out->min_flops || r->flops < out->min_flops))
			out->min_flops = r->flops;
		if (textbuf_cols(r->key) > out->key_cols)
			out->key_cols = textbuf_cols(r->key);
		if (shapes_cols(x) > out->shapes_cols)
			out->shapes_cols = shapes_cols(x);
		if (src_cols(x) > out->src_cols)
			out->src_cols = src_cols(x);
		row_load(pass, i, &w);
		row_store(out, out->nrows++, &w);
		if (out->nrows < 2 * keep + 1)
			continue;
		key_averages_sort(out, sort);
		for (; out->nrows > keep; out->nrows--) {
			fold_row(out, out->nrows - 1);
			out->nfolded++;
		}
	}
	pass->nrows = 0;
}

/* Frees what one build attempt holds beside its result. */
static void pass_free(struct pass *ps, struct key_avg_table *pt)
{
	free(ps->map.slot);
	free(ps->stack);
	free(pt->rows);
	free(pt->row_mem);
	free(pt->row_extra);
	ps->map.slot = NULL;
	ps->stack = NULL;
	pt->rows = NULL;
	pt->row_mem = NULL;
	pt->row_extra = NULL;
}

/*
 * One build of `out` over the counted events sel[0..n) (see sweep) with
 * the keys in `nparts` parts (a power of two); out->memory says whether
 * the rows get their row_mem, `o` whether they get their row_extra (by
 * input shape or stack). Returns 0, -1 when out of
 * memory, 1 when a part outgrew max_rows (composite keys; `out` is then
 * emptied, to be built again in more parts).
 */
static int build_parts(const struct trace *t, const struct key_avg_opts *o,
		       const struct gpu_map *gm, const uint32_t *sel, size_t n,
		       enum key_avg_sort sort, size_t max_rows, size_t keep, uint32_t nparts,
		       struct key_avg_table *out)
{
	struct key_avg_table pt = { 0 };
	struct pass ps;
	size_t i;

	pt.memory = out->memory;
	memset(&ps, 0, sizeof ps);
	ps.t = t;
	ps.gm = gm;
	ps.group = o->group;
	ps.o = o;
	ps.composite = o->by_input_shape || o->stack_n;
	ps.max_rows = max_rows;
	ps.nparts = nparts;
	ps.tab = ps.nparts == 1 ? out : &pt;
	ps.map.nslots = 64;
	ps.map.slot = calloc(ps.map.nslots, sizeof *ps.map.slot);
	if (!ps.map.slot)
		goto fail;
	if (ps.nparts > 1) {
		out->rows = malloc((2 * keep + 1) * sizeof *out->rows);
		pt.rows = malloc((max_rows + 2) * sizeof *pt.rows);
		if (!out->rows || !pt.rows)
			goto fail;
		ps.cap = max_rows + 2;
		if (out->memory) {
			out->row_mem = malloc((2 * keep + 1) * sizeof *out->row_mem);
			pt.row_mem = malloc((max_rows + 2) * sizeof *pt.row_mem);
			if (!out->row_mem || !pt.row_mem)
				goto fail;
			ps.cap_mem = max_rows + 2;
		}
		if (ps.composite) {
			out->row_extra = malloc((2 * keep + 1) * sizeof *out->row_extra);
			pt.row_extra = malloc((max_rows + 2) * sizeof *pt.row_extra);
			if (!out->row_extra || !pt.row_extra)
				goto fail;
			ps.cap_extra = max_rows + 2;
		}
	}
	for (ps.part = 0; ps.part < ps.nparts; ps.part++) {
		if (sweep(&ps, sel, n) != 0)
			goto fail;
		if (ps.nparts > 1) {
			keep_rows(out, &pt, sort, keep);
			memset(ps.map.slot, 0, ps.map.nslots * sizeof *ps.map.slot);
		}
	}
	out->self_cpu_sum_ns = ps.self_cpu_sum_ns;
	out->self_cuda_sum_ns = ps.self_cuda_sum_ns;
	if (ps.nparts == 1) {
		for (i = 0; i < out->nrows; i++)
			if (out->rows[i].flops &&
			    (!out->min_flops || out->rows[i].flops < out->min_flops))
				out->min_flops = out->rows[i].flops;
	}
	pass_free(&ps, &pt);
	key_averages_sort(out, sort);
	for (; ps.nparts > 1 && out->nrows > keep; out->nrows--) {
		fold_row(out, out->nrows - 1);
		out->nfolded++;
	}
	return 0;
fail:
	pass_free(&ps, &pt);
	free(out->rows);
	free(out->row_mem);
	free(out->row_extra);
	out->rows = NULL;
	out->row_mem = NULL;
	out->row_extra = NULL;
	out->nrows = 0;
	out->nfolded = 0;
	memset(&out->folded, 0, sizeof out->folded);
	memset(&out->folded_mem, 0, sizeof out->folded_mem);
	out->folded.first_ts = INT64_MAX;
	out->min_flops = 0;
	out->key_cols = out->shapes_cols = out->src_cols = 0;
	return ps.overflow ? 1 : -1;
}

/* What a sweep reads: the GPU time of each launch (*gm) and, in a trace
 * not in nesting order, the counted events in sweep order (*sel, malloc'd;
 * NULL when the trace lies in nesting order: the sweep then reads its
 * first *n events). *n is 0 when no event counts; *memory (may be NULL)
 * whether any of them is a "[memory]" event. 0, or -1 when out of memory
 * (nothing held). */
static int sweep_input(const struct trace *t, uint32_t **sel, size_t *n, struct gpu_map *gm,
		       bool *memory)
{
	size_t i, j, count = 0, nmem = 0;

	*sel = NULL;
	*n = 0;
	memset(gm, 0, sizeof *gm);
	for (i = 0; i < t->nev; i++) {
		bool m = is_mem(t, &t->ev[i]);

		nmem += m;
		count += m || counted(&t->ev[i]);
	}
	if (memory)
		*memory = nmem > 0;
	if (count == 0)
		return 0;
	if (gpu_map_build(t, gm) != 0)
		goto oom;
	if (t->nested) {
		*n = t->nev; /* the sweep reads the trace as it lies */
		return 0;
	}
	*sel = malloc(count * sizeof **sel);
	if (!*sel)
		goto oom;
	for (i = 0, j = 0; i < t->nev; i++)
		if (counted(&t->ev[i]) || is_mem(t, &t->ev[i]))
			(*sel)[j++] = (uint32_t)i;
	sortidx_u32(*sel, count, trace_event_cmp_at, (void *)t); /* in place: no copy */
	*n = count;
	return 0;
oom:
	free(gm->corr);
	free(gm->ns);
	memset(gm, 0, sizeof *gm);
	return -1;
}

int key_averages_each(const struct trace *t, key_avg_visit_fn fn, void *ctx, struct err *e)
{
	struct key_avg_opts o = { .group = KEY_AVG_BY_NAME };
	struct gpu_map gm;
	uint32_t *sel;
	struct pass ps;
	size_t n;
	int rc;

	if (t->nev > UINT32_MAX)
		return err_set(e, "key_averages: more than 2^32 events in one window");
	if (sweep_input(t, &sel, &n, &gm, NULL) != 0)
		return err_set(e, "out of memory reading the window's self times");
	memset(&ps, 0, sizeof ps);
	ps.t = t;
	ps.gm = &gm;
	ps.o = &o;
	ps.nparts = 1;
	ps.visit = fn;
	ps.visit_ctx = ctx;
	rc = n ? sweep(&ps, sel, n) : 0;
	free(ps.stack);
	free(sel);
	free(gm.corr);
	free(gm.ns);
	return rc == 0 ? 0 : err_set(e, "out of memory reading the window's self times");
}

int key_averages_build_with_max(const struct trace *t, const struct key_avg_opts *o,
				enum key_avg_sort sort, size_t max_rows, size_t keep,
				struct key_avg_table *out, struct err *e)
{
	uint32_t *sel = NULL, nparts;
	size_t n = 0, nkeys;
	struct gpu_map gm = { 0 };
	int rc;

	memset(out, 0, sizeof *out);
	if ((unsigned)o->group > KEY_AVG_BY_DOMAIN || (unsigned)sort >= NSORT || max_rows == 0 ||
	    keep == 0 || keep > max_rows || o->stack_n > KEY_AVG_STACK_N_MAX)
		return err_set(e, "key_averages: bad group, sort, stack depth or row count");
	out->group = o->group;
	out->by_input_shape = o->by_input_shape;
	out->stack_n = o->stack_n;
	out->folded.first_ts = INT64_MAX;
	if (t->nev > UINT32_MAX)
		return err_set(e, "key_averages: more than 2^32 events in one window");
	if (sweep_input(t, &sel, &n, &gm, &out->memory) != 0)
		goto oom;
	if (n == 0)
		return 0;

	/* More keys than max_rows: one pass per partition of the keys, each
	 * holding at most max_rows + 1 rows; the best `keep` are kept. A key
	 * of a name alone is one of the trace's strings: their count bounds
	 * the keys. Keys with shapes or a stack are not bounded so: one part
	 * to begin with, twice as many each time a part outgrows max_rows. */
	nkeys = out->by_input_shape || out->stack_n ? 1 : (size_t)t->names.n + 1;
	/* a power of two: an event's part is the low bits of its key's id
	 * (a division per event and pass cost more than the pass) */
	nparts = 1;
	while ((size_t)nparts * max_rows < nkeys)
		nparts *= 2;
	while ((rc = build_parts(t, o, &gm, sel, n, sort, max_rows, keep, nparts, out)) == 1) {
		if (nparts >= (1u << 30))
			goto oom;
		nparts *= 2;
	}
	if (rc != 0)
		goto oom;
	free(sel);
	free(gm.corr);
	free(gm.ns);
	return 0;
oom:
	free(sel);
	free(gm.corr);
	free(gm.ns);
	key_averages_free(out);
	return err_set(e, "out of memory building the key_averages table");
}

int key_averages_build_max(const struct trace *t, enum key_avg_group group,
			   enum key_avg_sort sort, size_t max_rows, size_t keep,
			   struct key_avg_table *out, struct err *e)
{
	struct key_avg_opts o = { .group = group };

	return key_averages_build_with_max(t, &o, sort, max_rows, keep, out, e);
}

int key_averages_build(const struct trace *t, enum key_avg_group group,
		       enum key_avg_sort sort, struct key_avg_table *out,
		       struct err *e)
{
	return key_averages_build_max(t, group, sort, KEY_AVG_ROWS_MAX, KEY_AVG_ROWS_MAX,
				      out, e);
}

int key_averages_build_top(const struct trace *t, enum key_avg_group group,
			   enum key_avg_sort sort, size_t keep,
			   struct key_avg_table *out, struct err *e)
{
	struct key_avg_opts o = { .group = group };

	return key_averages_build_with(t, &o, sort, keep, out, e);
}

int key_averages_build_with(const struct trace *t, const struct key_avg_opts *o,
			    enum key_avg_sort sort, size_t keep,
			    struct key_avg_table *out, struct err *e)
{
	if (keep == 0 || keep > KEY_AVG_ROWS_MAX)
		keep = KEY_AVG_ROWS_MAX;
	return key_averages_build_with_max(t, o, sort, KEY_AVG_ROWS_MAX, keep, out, e);
}

void key_averages_free(struct key_avg_table *tab)
{
	if (!tab)
		return;
	free(tab->rows);
	free(tab->row_mem);
	free(tab->row_extra);
	memset(tab, 0, sizeof *tab);
}

bool key_averages_has_cuda(const struct key_avg_table *tab)
{
	size_t i;

	for (i = 0; i < tab->nrows; i++)
		if (tab->rows[i].self_cuda_ns > 0)
			return true;
	return tab->folded.self_cuda_ns > 0;
}

struct key_avg_mem key_averages_row_mem(const struct key_avg_table *tab, size_t i)
{
	return tab->row_mem && i < tab->nrows ? tab->row_mem[i] : no_mem;
}

struct key_avg_key_extra key_averages_row_extra(const struct key_avg_table *tab, size_t i)
{
	return tab->row_extra && i < tab->nrows ? tab->row_extra[i] : no_extra;
}

bool key_averages_has_cuda_mem(const struct key_avg_table *tab)
{
	size_t i;

	for (i = 0; tab->row_mem && i < tab->nrows; i++)
		if (tab->row_mem[i].self_mem[KEY_AVG_CUDA] > 0)
			return true;
	return tab->folded_mem.self_mem[KEY_AVG_CUDA] > 0;
}

char *key_averages_format_memory(int64_t bytes, char buf[32])
{
	const double kb = 1024.0, mb = 1024.0 * kb, gb = 1024.0 * mb;
	double a = bytes < 0 ? -(double)bytes : (double)bytes;

	if (a >= gb)
		snprintf(buf, 32, "%.2f Gb", (double)bytes / gb);
	else if (a >= mb)
		snprintf(buf, 32, "%.2f Mb", (double)bytes / mb);
	else if (a >= kb)
		snprintf(buf, 32, "%.2f Kb", (double)bytes / kb);
	else
		snprintf(buf, 32, "%lld b", (long long)bytes);
	return buf;
}

/* _format_time of a (fractional) number of nanoseconds. */
static char *format_time_ns(double ns, char buf[32])
{
	double us = ns / 1000.0;

	if (us >= 1000.0 * 1000.0)
		snprintf(buf, 32, "%.3fs", us / (1000.0 * 1000.0));
	else if (us >= 1000.0)
		snprintf(buf, 32, "%.3fms", us / 1000.0);
	else
		snprintf(buf, 32, "%.3fus", us);
	return buf;
}

char *key_averages_format_time(int64_t ns, char buf[32])
{
	return format_time_ns((double)ns, buf);
}

char *key_averages_format_share(int64_t part_ns, int64_t total_ns, char buf[32])
{
	if (total_ns == 0)
		snprintf(buf, 32, "NaN");
	else
		snprintf(buf, 32, "%.2f%%", (double)part_ns * 100.0 / (double)total_ns);
	return buf;
}

/* The columns of the table: one header each, all 12 wide but the name,
 * the input shapes and the source location. */
enum col {
	COL_NAME, COL_SELF_CPU_PCT, COL_SELF_CPU, COL_CPU_TOTAL_PCT, COL_CPU_TOTAL,
	COL_CPU_AVG, COL_SELF_CUDA, COL_SELF_CUDA_PCT, COL_CUDA_TOTAL, COL_CUDA_AVG,
	COL_CPU_MEM, COL_SELF_CPU_MEM, COL_CUDA_MEM, COL_SELF_CUDA_MEM,
	COL_CALLS, COL_SHAPES, COL_SRC, COL_FLOPS, NCOL
};

static const char *const col_header[NCOL] = {
	"Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg",
	"Self CUDA", "Self CUDA %", "CUDA total", "CUDA time avg",
	"CPU Mem", "Self CPU Mem", "CUDA Mem", "Self CUDA Mem", "# of Calls",
	"Input Shapes", "Source Location",
	"Total FLOPs" /* named by flops_scale() */
};

/* torch's _build_table: max_shapes_column_width, max_src_column_width,
 * and the stack entries a row shows (MAX_STACK_ENTRY). */
#define SHAPES_WIDTH_MAX 80
#define SRC_WIDTH_MAX 75
#define SRC_ENTRIES 5

/* Which optional columns a table shows, and the widths of those that are
 * not COL_WIDTH wide. */
struct cols {
	bool cuda;   /* some row has GPU time */
	bool memory; /* the trace has "[memory]" events (profile_memory) */
	bool cuda_mem; /* ... and some row has Self CUDA Mem */
	bool flops;  /* some row has FLOPs */
	bool shapes; /* some row has input shapes (not "[]") */
	bool src;    /* some row has a call stack entry */
	double flops_scale;
	char flops_header[32];
	size_t name_width, shapes_width, src_width;
};

/* torch's auto_scale_flops, of the smallest nonzero row total: the unit
 * (FLOPs, KFLOPs, ... PFLOPs) and the factor to it. */
static void flops_scale(uint64_t min_flops, struct cols *c)
{
	static const char *const unit[] = { "FLOPs", "KFLOPs", "MFLOPs", "GFLOPs",
					    "TFLOPs", "PFLOPs" };
	double lg = log10((double)min_flops) / 3.0;
	int k;

	if (lg < 0)
		lg = 0;
	if (lg > 5)
		lg = 5;
	k = (int)lg;
	c->flops_scale = pow(10.0, -3.0 * k);
	snprintf(c->flops_header, sizeof c->flops_header, "Total %s", unit[k]);
}

static bool col_shown(enum col c, const struct cols *cs)
{
	switch (c) {
	case COL_FLOPS:
		return cs->flops;
	case COL_SHAPES:
		return cs->shapes;
	case COL_SRC:
		return cs->src;
	case COL_CPU_MEM:
	case COL_SELF_CPU_MEM:
		return cs->memory;
	case COL_CUDA_MEM:
	case COL_SELF_CUDA_MEM:
		return cs->memory && cs->cuda_mem;
	default:
		return cs->cuda || c < COL_SELF_CUDA || c > COL_CUDA_AVG;
	}
}

static size_t col_width(enum col c, const struct cols *cs)
{
	switch (c) {
	case COL_NAME:
		return cs->name_width;
	case COL_SHAPES:
		return cs->shapes_width;
	case COL_SRC:
		return cs->src_width;
	default:
		return COL_WIDTH;
	}
}

/* One row of text: each shown column aligned in its width (right, but the
 * source location, left), followed by two spaces (torch's row format,
 * trailing spaces included). */
static void put_line(struct textbuf *tb, const char *const cells[NCOL], const struct cols *cs)
{
	int c;

	for (c = 0; c < NCOL; c++) {
		if (!col_shown((enum col)c, cs))
			continue;
		textbuf_field(tb, cells[c], col_width((enum col)c, cs), c != COL_SRC);
		textbuf_fill(tb, ' ', COL_SPACING);
	}
	textbuf_puts(tb, "\n");
}

static void put_sep(struct textbuf *tb, const struct cols *cs)
{
	int c;

	for (c = 0; c < NCOL; c++) {
		if (!col_shown((enum col)c, cs))
			continue;
		textbuf_fill(tb, '-', col_width((enum col)c, cs));
		textbuf_fill(tb, ' ', COL_SPACING);
	}
	textbuf_puts(tb, "\n");
}

/* Bytes of the first `n` characters of s[0..len) (UTF-8 lead bytes). */
static size_t chars_bytes(const char *s, size_t len, size_t n)
{
	size_t i;

	for (i = 0; i < len; i++) {
		if (((unsigned char)s[i] & 0xC0) == 0x80)
			continue;
		if (n-- == 0)
			break;
	}
	return i;
}

/* Characters of s[0..len). */
static size_t chars(const char *s, size_t len)
{
	size_t i, n = 0;

	for (i = 0; i < len; i++)
		n += ((unsigned char)s[i] & 0xC0) != 0x80;
	return n;
}

/* The input shapes as Python prints the list (str(input_shapes): "[[8,
 * 16], []]", whatever the trace's spacing), cut to `width` characters,
 * into a malloc'd string ("" for a row without shapes). NULL: no memory. */
static char *shapes_text(const struct key_avg_key_extra *x, size_t width)
{
	struct textbuf tb;
	size_t i, n = 0;

	textbuf_init(&tb);
	textbuf_puts(&tb, "");
	for (i = 0; x->shapes && i < x->shapes_len && n < width; i++) {
		char c = x->shapes[i];

		if (json_space(c))
			continue;
		textbuf_add(&tb, &c, 1);
		n++;
		if (c == ',' && n < width) {
			textbuf_add(&tb, " ", 1);
			n++;
		}
	}
	return textbuf_take(&tb);
}

char *key_averages_row_shapes(const struct key_avg_table *tab, size_t i)
{
	return shapes_text(i < tab->nrows ? row_extra(tab, i) : &no_extra, SIZE_MAX);
}

/* The characters shapes_text() would give the row, uncut. */
static size_t shapes_cols(const struct key_avg_key_extra *x)
{
	size_t i, n = 0;

	for (i = 0; x->shapes && i < x->shapes_len; i++) {
		char c = x->shapes[i];

		if (!json_space(c))
			n += c == ',' ? 2 : 1;
	}
	return n;
}

/* The row's k-th call stack entry (0: innermost): its bytes in *len, or
 * NULL when it has fewer. */
static const char *stack_entry(const struct key_avg_key_extra *x, size_t k, size_t *len)
{
	const char *p = x->stack, *end = x->stack + x->stack_len, *semi;

	if (!x->stack || !x->stack_len)
		return NULL;
	for (;;) {
		semi = memchr(p, ';', (size_t)(end - p));
		if (!k--) {
			*len = (size_t)((semi ? semi : end) - p);
			return p;
		}
		if (!semi)
			return NULL;
		p = semi + 1;
	}
}

/* The characters of the row's longest call stack entry (0: none). */
static size_t src_cols(const struct key_avg_key_extra *x)
{
	size_t k, len, most = 0;
	const char *s;

	for (k = 0; (s = stack_entry(x, k, &len)) != NULL; k++)
		if (chars(s, len) > most)
			most = chars(s, len);
	return most;
}

/* torch's trim_path: an entry longer than `width` keeps its last `width`
 * characters, the first three of them replaced by "...". Into out[size]. */
static void trim_entry(const char *s, size_t len, size_t width, char *out, size_t size)
{
	size_t n = chars(s, len), skip = 0, o = 0;

	if (n > width) {
		skip = chars_bytes(s, len, n - width);
		if (width > 3) {
			memcpy(out, "...", 3);
			o = 3;
			skip += chars_bytes(s + skip, len - skip, 3);
		}
	}
	if (len - skip > size - o - 1)
		len = skip + (size - o - 1);
	memcpy(out + o, s + skip, len - skip);
	out[o + len - skip] = '\0';
}

/* A row's line (`m`: its memory, `x`: its shapes and stack), then (by
 * stack) the lines of its next stack entries and an empty line, as
 * torch's _build_table writes them. */
static void put_row(struct textbuf *tb, const struct key_avg_table *tab,
		    const struct key_avg_row *r, const struct key_avg_mem *m,
		    const struct key_avg_key_extra *x, const struct cols *cs)
{
	char cell[NCOL][32], name[KEY_AVG_NAME_MAX * 4 + 4], src[SRC_WIDTH_MAX * 4 + 8];
	const char *cells[NCOL], *entry;
	char *shapes = NULL;
	size_t k, len;
	int c;

	textbuf_name_fit(r->key, KEY_AVG_NAME_MAX, name, sizeof name);
	key_averages_format_share(r->self_cpu_ns, tab->self_cpu_sum_ns, cell[COL_SELF_CPU_PCT]);
	key_averages_format_time(r->self_cpu_ns, cell[COL_SELF_CPU]);
	key_averages_format_share(r->cpu_total_ns, tab->self_cpu_sum_ns, cell[COL_CPU_TOTAL_PCT]);
	key_averages_format_time(r->cpu_total_ns, cell[COL_CPU_TOTAL]);
	format_time_ns(avg(r->cpu_total_ns, r->count), cell[COL_CPU_AVG]);
	key_averages_format_time(r->self_cuda_ns, cell[COL_SELF_CUDA]);
	key_averages_format_share(r->self_cuda_ns, tab->self_cuda_sum_ns, cell[COL_SELF_CUDA_PCT]);
	key_averages_format_time(r->cuda_total_ns, cell[COL_CUDA_TOTAL]);
	format_time_ns(avg(r->cuda_total_ns, r->count), cell[COL_CUDA_AVG]);
	key_averages_format_memory(m->mem[KEY_AVG_CPU], cell[COL_CPU_MEM]);
	key_averages_format_memory(m->self_mem[KEY_AVG_CPU], cell[COL_SELF_CPU_MEM]);
	key_averages_format_memory(m->mem[KEY_AVG_CUDA], cell[COL_CUDA_MEM]);
	key_averages_format_memory(m->self_mem[KEY_AVG_CUDA], cell[COL_SELF_CUDA_MEM]);
	snprintf(cell[COL_CALLS], 32, "%llu", (unsigned long long)r->count);
	if (r->flops) /* torch: '{0:8.3f}' of the scaled total, "--" for none */
		snprintf(cell[COL_FLOPS], 32, "%8.3f", (double)r->flops * cs->flops_scale);
	else
		snprintf(cell[COL_FLOPS], 32, "--");
	for (c = 0; c < NCOL; c++)
		cells[c] = cell[c];
	cells[COL_NAME] = name;
	if (cs->shapes) {
		shapes = shapes_text(x, cs->shapes_width);
		if (!shapes) {
			tb->oom = true;
			return;
		}
		cells[COL_SHAPES] = shapes;
	}
	src[0] = '\0';
	if (cs->src && (entry = stack_entry(x, 0, &len)) != NULL)
		trim_entry(entry, len, cs->src_width, src, sizeof src);
	cells[COL_SRC] = src;
	put_line(tb, cells, cs);
	free(shapes);
	if (!cs->src)
		return;
	for (c = 0; c < NCOL; c++)
		cells[c] = "";
	for (k = 1; k < SRC_ENTRIES && (entry = stack_entry(x, k, &len)) != NULL; k++) {
		trim_entry(entry, len, cs->src_width, src, sizeof src);
		cells[COL_SRC] = src;
		put_line(tb, cells, cs);
	}
	cells[COL_SRC] = "";
	put_line(tb, cells, cs);
}

/* The widths of the name, shapes and source columns, torch's: the widest
 * value of every row (those folded too) + 4, at most its maximum; and
 * whether the last two are shown. */
static void col_widths(const struct key_avg_table *tab, const char *folded_key,
		       struct cols *cs)
{
	size_t name = 0, shapes = 0, src = 0, i, w;

	if (folded_key)
		name = textbuf_cols(folded_key);
	if (tab->nfolded) {
		name = tab->key_cols > name ? tab->key_cols : name;
		shapes = tab->shapes_cols;
		src = tab->src_cols;
	}
	for (i = 0; i < tab->nrows; i++) {
		const struct key_avg_row *r = &tab->rows[i];
		const struct key_avg_key_extra *x = row_extra(tab, i);

		if ((w = textbuf_cols(r->key)) > name)
			name = w;
		if (tab->by_input_shape && (w = shapes_cols(x)) > shapes)
			shapes = w;
		if (tab->by_input_shape && x->shapes_len > 2)
			cs->shapes = true; /* torch: some row's list is not empty */
		if (tab->stack_n && (w = src_cols(x)) > src)
			src = w;
	}
	cs->src = src > 0;
	cs->name_width = name + 4 > KEY_AVG_NAME_MAX ? KEY_AVG_NAME_MAX : name + 4;
	cs->shapes_width = shapes + 4 > SHAPES_WIDTH_MAX ? SHAPES_WIDTH_MAX : shapes + 4;
	cs->src_width = src + 4 > SRC_WIDTH_MAX ? SRC_WIDTH_MAX : src + 4;
}

char *key_averages_format(const struct key_avg_table *tab, size_t row_limit)
{
	struct textbuf tb;
	struct cols cols = { 0 };
	const char *header[NCOL];
	size_t i, n;
	struct key_avg_row folded = { 0 };
	char buf[32], folded_key[64];

	cols.cuda = key_averages_has_cuda(tab);
	cols.memory = tab->memory;
	cols.cuda_mem = key_averages_has_cuda_mem(tab);
	cols.flops = tab->min_flops > 0;
	if (cols.flops)
		flops_scale(tab->min_flops, &cols);
	for (i = 0; i < NCOL; i++)
		header[i] = col_header[i];
	header[COL_FLOPS] = cols.flops_header;

	textbuf_init(&tb);
	if (tab->nrows == 0) {
		textbuf_puts(&tb, "");
		return textbuf_take(&tb);
	}
	n = row_limit && row_limit < tab->nrows ? row_limit : tab->nrows;
	if (!row_limit && tab->nfolded) { /* every row: the keys folded too */
		folded = tab->folded;
		snprintf(folded_key, sizeof folded_key, "(%llu other %s)",
			 (unsigned long long)tab->nfolded,
			 tab->group == KEY_AVG_BY_DOMAIN ? "domains" : "names");
		folded.key = folded_key;
	}
	col_widths(tab, folded.key, &cols);

	put_sep(&tb, &cols);
	put_line(&tb, header, &cols);
	put_sep(&tb, &cols);
	for (i = 0; i < n; i++)
		put_row(&tb, tab, &tab->rows[i], tab->row_mem ? &tab->row_mem[i] : &no_mem,
			row_extra(tab, i), &cols);
	if (folded.key)
		put_row(&tb, tab, &folded, &tab->folded_mem, &no_extra, &cols);
	put_sep(&tb, &cols);
	textbuf_printf(&tb, "Self CPU time total: %s\n",
		       key_averages_format_time(tab->self_cpu_sum_ns, buf));
	if (cols.cuda)
		textbuf_printf(&tb, "Self CUDA time total: %s\n",
			       key_averages_format_time(tab->self_cuda_sum_ns, buf));
	return textbuf_take(&tb);
}

int key_averages_write(const struct key_avg_table *tab, size_t row_limit,
		       const char *path, struct err *e)
{
	char *text = key_averages_format(tab, row_limit);
	int rc;

	if (!text)
		return err_set(e, "out of memory formatting '%s'", path);
	rc = outfile_write_text(path, text, e);
	free(text);
	return rc;
}

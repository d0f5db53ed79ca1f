/* query — questions asked of a drained trace (see query.h). */
#include "query.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/grow.h"
#include "../common/hash.h"
#include "../util/htab.h"
#include "../util/sortidx.h"

static const char *const query_phase_names[QUERY_PHASE_COUNT] = {
	"data", "forward", "backward", "optimizer", "other"
};

const char *query_phase_name(enum query_phase p)
{
	return (unsigned)p < QUERY_PHASE_COUNT ? query_phase_names[p] : NULL;
}

/* torch's name of a DataLoader fetch, its record_function label
 * "enumerate(DataLoader)#<iterator class>.__next__": what TensorBoard's
 * plugin counts as DataLoader time, and the Python bridge's data phase. */
static int is_dataloader_fetch(const char *name, size_t len)
{
	static const char pre[] = "enumerate(DataLoader)#", suf[] = ".__next__";
	const size_t np = sizeof pre - 1, ns = sizeof suf - 1;

	return len >= np + ns && memcmp(name, pre, np) == 0 &&
	       memcmp(name + len - ns, suf, ns) == 0;
}

enum query_phase query_phase_of(const char *name, size_t len)
{
	int i;

	for (i = 0; i < QUERY_PHASE_COUNT; i++)
		if (strlen(query_phase_names[i]) == len &&
		    memcmp(query_phase_names[i], name, len) == 0)
			return (enum query_phase)i;
	return is_dataloader_fetch(name, len) ? QUERY_PHASE_DATA : QUERY_PHASE_COUNT;
}

/* The strtab id of `s`, or STRTAB_NONE when the trace never names it. */
static uint32_t find_id(const struct trace *t, const char *s)
{
	size_t len = strlen(s);
	uint32_t i;

	for (i = 0; i < t->names.n; i++)
		if (t->names.len[i] == len && memcmp(t->names.str[i], s, len) == 0)
			return i;
	return STRTAB_NONE;
}

/* The args of `ev` as a bounded range (none when out of range). */
static const struct trace_arg *event_args(const struct trace *t,
					  const struct trace_event *ev, size_t *n)
{
	if (ev->nargs == 0 || ev->args > t->nargs ||
	    ev->nargs > t->nargs - ev->args) {
		*n = 0;
		return NULL;
	}
	*n = ev->nargs;
	return &t->args[ev->args];
}

/* As query_arg_num with the key's id already known. */
static bool arg_num_id(const struct trace *t, const struct trace_event *ev,
		       uint32_t key, double *v)
{
	size_t n, i;
	const struct trace_arg *a = event_args(t, ev, &n);

	for (i = 0; i < n; i++) {
		if (a[i].key != key)
			continue;
		switch (a[i].type) {
		case TRACE_ARG_INT: *v = (double)a[i].v.i; return true;
		case TRACE_ARG_UINT: *v = (double)a[i].v.u; return true;
		case TRACE_ARG_DOUBLE: *v = a[i].v.d; return true;
		default: return false;
		}
	}
	return false;
}

const struct trace_arg *query_arg(const struct trace *t, const struct trace_event *ev,
				  const char *key)
{
	size_t n, i;
	const struct trace_arg *a = event_args(t, ev, &n);

	for (i = 0; i < n; i++)
		if (strcmp(trace_str(t, a[i].key), key) == 0)
			return &a[i];
	return NULL;
}

bool query_arg_num(const struct trace *t, const struct trace_event *ev,
		   const char *key, double *v)
{
	const struct trace_arg *a = query_arg(t, ev, key);

	return a && arg_num_id(t, ev, a->key, v);
}

const char *query_arg_str(const struct trace *t, const struct trace_event *ev,
			  const char *key, size_t *len)
{
	size_t n, i;
	const struct trace_arg *a = event_args(t, ev, &n);

	for (i = 0; i < n; i++)
		if (a[i].type == TRACE_ARG_STR &&
		    strcmp(trace_str(t, a[i].key), key) == 0) {
			*len = strtab_len(&t->names, a[i].v.str);
			return trace_str(t, a[i].v.str);
		}
	return NULL;
}

/* Time of [ts, end) inside the sorted, disjoint intervals iv[0..n); for an
 * instant (ts == end), 1 when ts lies in one, else 0 (and *hit says). */
static int64_t within_overlap(const struct query_interval *iv, size_t n,
			      int64_t ts, int64_t end, bool *hit)
{
	size_t lo = 0, hi = n, k;
	int64_t sum = 0;

	/* first interval ending after ts */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (iv[mid].ts + iv[mid].dur <= ts)
			lo = mid + 1;
		else
			hi = mid;
	}
	*hit = false;
	if (ts == end) {
		*hit = lo < n && iv[lo].ts <= ts;
		return 0;
	}
	for (k = lo; k < n && iv[k].ts < end; k++) {
		int64_t a = iv[k].ts > ts ? iv[k].ts : ts;
		int64_t b = iv[k].ts + iv[k].dur < end ? iv[k].ts + iv[k].dur : end;

		if (b > a) {
			sum += b - a;
			*hit = true;
		}
	}
	return sum;
}

bool query_match(const struct trace *t, const struct query_filter *f,
		 const struct trace_event *ev, int64_t *dur)
{
	int64_t ts = ev->ts, end = ev->ts + (ev->dur > 0 ? ev->dur : 0);
	bool hit;

	(void)t;
	if (f->cats && !(f->cats >> ev->cat & 1)) /* cat < 16 */
		return false;
	if (f->name_ok && (ev->name >= f->name_len ||
			   !(f->name_ok[ev->name / 8] >> ev->name % 8 & 1)))
		return false;
	if (f->has_tid && ev->tid != f->tid)
		return false;
	if (f->has_pid && ev->pid != f->pid)
		return false;
	if (f->has_range) {
		if (ts == end) {
			if (ts < f->from || ts >= f->to)
				return false;
		} else {
			if (ts >= f->to || end <= f->from)
				return false;
			if (ts < f->from)
				ts = f->from;
			if (end > f->to)
				end = f->to;
		}
	}
	if (f->within) {
		int64_t in = within_overlap(f->within, f->nwithin, ts, end, &hit);

		if (!hit)
			return false;
		end = ts + in;
	}
	*dur = end - ts;
	return true;
}

/* ------------------------------------------------------------ steps */

/* The sorts below pass their context (the trace, the sort order) to the
 * comparison through glibc's qsort_r (the build defines _GNU_SOURCE), as
 * key_averages.c and cupti_records.c do: no global, any number of threads. */

/* Step indexes (into the trace `ctx`) by (ts, step). */
static int cmp_step_ts(const void *a, const void *b, void *ctx)
{
	const struct trace *t = ctx;
	const struct trace_step *x = &t->steps[*(const size_t *)a];
	const struct trace_step *y = &t->steps[*(const size_t *)b];

	if (x->ts != y->ts)
		return x->ts < y->ts ? -1 : 1;
	return x->step < y->step ? -1 : x->step > y->step;
}

size_t *query_step_order(const struct trace *t)
{
	size_t *order, i;

	if (t->nsteps == 0)
		return NULL;
	order = malloc(t->nsteps * sizeof *order);
	if (!order)
		return NULL;
	for (i = 0; i < t->nsteps; i++)
		order[i] = i;
	qsort_r(order, t->nsteps, sizeof *order, cmp_step_ts, (void *)t);
	return order;
}

long query_step_at(const struct trace *t, const size_t *order, int64_t ts)
{
	size_t lo = 0, hi = t->nsteps, i;
	long best = -1;

	if (!order) {
		for (i = 0; i < t->nsteps; i++)
			if (ts >= t->steps[i].ts && ts < t->steps[i].ts + t->steps[i].dur)
				return (long)i;
		return -1;
	}
	/* last step starting at or before ts */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (t->steps[order[mid]].ts <= ts)
			lo = mid + 1;
		else
			hi = mid;
	}
	/* steps of several threads may overlap: look back a little */
	for (i = lo; i-- > 0 && lo - i <= 8;) {
		const struct trace_step *s = &t->steps[order[i]];

		if (ts < s->ts + s->dur) {
			best = (long)order[i];
			break;
		}
	}
	return best;
}

/* ------------------------------------------------------------ hash map */

/* int64 key -> uint32 value, open addressing. */
struct imap {
	uint64_t *keys;
	uint32_t *vals; /* value + 1; 0 = empty */
	size_t cap, n;
};

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

static int imap_grow(struct imap *m)
{
	size_t ncap = m->cap ? m->cap * 2 : 64, i;
	uint64_t *keys = calloc(ncap, sizeof *keys);
	uint32_t *vals = calloc(ncap, sizeof *vals);

	if (!keys || !vals) {
		free(keys);
		free(vals);
		return -1;
	}
	for (i = 0; i < m->cap; i++) {
		size_t j;

		if (!m->vals[i])
			continue;
		for (j = htab_first(mix64(m->keys[i]), ncap); vals[j]; j = htab_next(j, ncap))
			;
		keys[j] = m->keys[i];
		vals[j] = m->vals[i];
	}
	free(m->keys);
	free(m->vals);
	m->keys = keys;
	m->vals = vals;
	m->cap = ncap;
	return 0;
}

/* Finds `key`; when absent stores `val` for it. Returns the stored value,
 * or UINT32_MAX when out of memory. */
static uint32_t imap_get_or_put(struct imap *m, uint64_t key, uint32_t val)
{
	size_t j;

	if (htab_full(m->n, m->cap) && imap_grow(m) != 0)
		return UINT32_MAX;
	for (j = htab_first(mix64(key), m->cap); m->vals[j]; j = htab_next(j, m->cap))
		if (m->keys[j] == key)
			return m->vals[j] - 1;
	m->keys[j] = key;
	m->vals[j] = val + 1;
	m->n++;
	return val;
}

/* The value of `key`, or UINT32_MAX when it is not in the map. */
static uint32_t imap_get(const struct imap *m, uint64_t key)
{
	size_t j;

	if (!m->cap)
		return UINT32_MAX;
	for (j = htab_first(mix64(key), m->cap); m->vals[j]; j = htab_next(j, m->cap))
		if (m->keys[j] == key)
			return m->vals[j] - 1;
	return UINT32_MAX;
}

static void imap_free(struct imap *m)
{
	free(m->keys);
	free(m->vals);
	memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------------ aggregate */

/* The group key of an event; false when it has none (BY_STEP outside any
 * step). */
static bool group_key(const struct trace *t, const struct query_agg_opts *o,
		      const size_t *order, const struct trace_event *ev,
		      uint64_t *key)
{
	long s;

	switch (o->by) {
	case QUERY_BY_CAT:
		*key = ev->cat;
		return true;
	case QUERY_BY_THREAD:
	case QUERY_BY_STREAM:
		*key = (uint64_t)(uint32_t)ev->pid << 32 | (uint32_t)ev->tid;
		return true;
	case QUERY_BY_STEP:
		s = query_step_at(t, order, ev->ts);
		if (s < 0)
			return false;
		*key = (uint64_t)s;
		return true;
	default:
		*key = ev->name;
		return true;
	}
}

static double row_stat(const struct query_row *r, enum query_sort s)
{
	switch (s) {
	case QUERY_SORT_COUNT: return (double)r->count;
	case QUERY_SORT_AVG: return r->avg;
	case QUERY_SORT_MIN: return r->min;
	case QUERY_SORT_MAX: return r->max;
	case QUERY_SORT_MED: return r->med;
	case QUERY_SORT_STD: return r->std;
	default: return r->total;
	}
}

/* How cmp_row orders the rows of query_aggregate. */
struct row_order {
	const struct trace *t;
	enum query_by by;
	enum query_sort sort;
	/* cmp_group only: the groups' accumulators, their extreme values
	 * (NULL: none), the query and the step order group keys use */
	const struct agg_acc *acc;
	const double *ext;
	const struct query_agg_opts *opts;
	const size_t *order;
};

/* Ascending comparison of two rows' keys. */
static int cmp_key(const struct query_row *x, const struct query_row *y,
		   const struct row_order *o)
{
	int c;

	switch (o->by) {
	case QUERY_BY_NAME:
		c = strcmp(trace_str(o->t, x->name), trace_str(o->t, y->name));
		return c;
	case QUERY_BY_CAT:
		return x->cat < y->cat ? -1 : x->cat > y->cat;
	case QUERY_BY_STEP:
		return x->step < y->step ? -1 : x->step > y->step;
	default:
		if (x->pid != y->pid)
			return x->pid < y->pid ? -1 : 1;
		return x->tid < y->tid ? -1 : x->tid > y->tid;
	}
}

/* Rows in the order of the struct row_order `ctx`. */
static int cmp_row(const void *a, const void *b, void *ctx)
{
	const struct query_row *x = a, *y = b;
	const struct row_order *o = ctx;
	double sx, sy;

	if (o->sort == QUERY_SORT_KEY)
		return cmp_key(x, y, o);
	sx = row_stat(x, o->sort);
	sy = row_stat(y, o->sort);
	if (sx != sy)
		return sx > sy ? -1 : 1;
	if (x->first_ts != y->first_ts)
		return x->first_ts < y->first_ts ? -1 : 1;
	return cmp_key(x, y, o);
}

/* Fills the key fields of a new row from its first event. */
static void row_key(const struct trace *t, const struct query_agg_opts *o,
		    const struct trace_event *ev, uint64_t key,
		    struct query_row *r)
{
	r->name = ev->name;
	r->cat = ev->cat;
	r->pid = ev->pid;
	r->tid = ev->tid;
	if (o->by == QUERY_BY_STEP)
		r->step = t->steps[key].step;
}

/* The value `ev` adds to its group (its argument or its clipped duration;
 * the caller puts its self time in its place) and, in *dur, its clipped
 * duration. False when the filter drops it or it has no value (an argument
 * it lacks). */
static bool agg_value(const struct trace *t, const struct query_agg_opts *o,
		      uint32_t key_id, const struct trace_event *ev, double *v,
		      int64_t *dur)
{
	*v = 0;
	*dur = 0;
	if (!query_match(t, &o->filter, ev, dur))
		return false;
	if (o->sum_arg)
		return arg_num_id(t, ev, key_id, v);
	*v = (double)*dur;
	return true;
}

/* The statistics of one group from its values vals[0..n) (n > 0, sorted
 * here): total, avg, min, max, med, std, summed in ascending order. */
static void group_stats(struct query_row *r, double *vals, size_t n)
{
	double sum = 0, mean, ss = 0;
	size_t k;

	sortidx_f64(vals, n); /* qsort would copy them */
	for (k = 0; k < n; k++)
		sum += vals[k];
	mean = sum / (double)n;
	for (k = 0; k < n; k++)
		ss += (vals[k] - mean) * (vals[k] - mean);
	r->total = sum;
	r->avg = mean;
	r->min = vals[0];
	r->max = vals[n - 1];
	r->med = n % 2 ? vals[n / 2] : (vals[n / 2 - 1] + vals[n / 2]) / 2;
	r->std = n > 1 ? sqrt(ss / (double)(n - 1)) : 0;
}

/* A group while the events are grouped: what sorting the groups needs
 * (its smallest or largest value only when sorting by it: ext). */
struct agg_acc {
	double total;
	uint64_t count;
	int64_t first_ts;
	size_t first;   /* index in t->ev of its first event: its key */
};

/* A row holding only what sorting reads, from group g's accumulator. */
static void acc_row(const struct row_order *o, uint32_t g, struct query_row *r)
{
	const struct agg_acc *a = &o->acc[g];
	const struct trace_event *ev = &o->t->ev[a->first];
	uint64_t key = 0;

	memset(r, 0, sizeof *r);
	group_key(o->t, o->opts, o->order, ev, &key);
	row_key(o->t, o->opts, ev, key, r);
	r->count = a->count;
	r->total = a->total;
	r->avg = a->total / (double)a->count;
	if (o->ext)
		r->min = r->max = o->ext[g];
	r->first_ts = a->first_ts;
}

/* Group order of query_aggregate before the values are read: cmp_row on
 * the accumulators (never sorting by "med" or "std"). */
static int cmp_group(const void *a, const void *b, void *ctx)
{
	struct query_row x, y;

	acc_row(ctx, *(const uint32_t *)a, &x);
	acc_row(ctx, *(const uint32_t *)b, &y);
	return cmp_row(&x, &y, ctx);
}

/* ------------------------------------------------------------ aggregate
 *
 * One grouping pass over the kept events folds each into its group's
 * accumulator as it is read; the groups returned are then read again, in
 * a values pass, for their values (the median needs them). With self
 * times the kept events are visited in nesting order (trace_sort's) by a
 * sweep that hands each event on as it closes, with its self time. By
 * name with a limit, when the window may hold more names than
 * `max_groups`, the names are split by strtab id into parts of at most
 * `max_groups`, one grouping pass each; each part's first `limit` groups
 * join the best so far. No value is kept per event: with self times the
 * open events of one thread; the kept events' positions (4 bytes each) in
 * parts, so that a filter that keeps few events costs each pass only
 * those, and for self times in a trace not in nesting order (sorted so). */

/* The most kept events whose positions the passes over parts list (4
 * bytes each: 4 MiB at most, beside a window of any size). */
#define QUERY_SEL_MAX ((size_t)1 << 20)

/* Events a pass reads ahead of the one it is at. */
#define PARTS_AHEAD 16

/* One open event of the self-time sweep. */
struct open_ev {
	size_t i;     /* position in sel */
	int64_t self; /* time it owned so far */
};

/* What one pass over the kept events does with each of them. A
 * "position" is an index in sel, or in t->ev when sel is NULL. */
struct parts {
	const struct trace *t;
	const struct query_agg_opts *o;
	uint32_t key_id;          /* o->sum_arg's strtab id */
	const size_t *order;      /* query_step_order(): BY_STEP keys */
	const uint32_t *sel;      /* the kept events (in parts, or with
				     o->self in a trace not in nesting order:
				     then in that order); NULL: every event,
				     in trace order */
	size_t n;                 /* positions */
	uint32_t nparts, part;    /* nparts: a power of two (1 unless by
				     name in parts) */
	unsigned shift;           /* log2(nparts) */
	/* grouping pass */
	uint32_t *slot;           /* by name: name id >> shift -> group + 1 of
				     this part, 0 = none yet */
	struct imap map;          /* other keys: key -> group */
	struct agg_acc *acc;      /* first: a position (best_add makes it
				     the event's index) */
	double *ext;
	size_t cap_acc, cap_ext;
	uint32_t ngroups;
	/* values pass: key -> row of the groups returned */
	struct imap rowmap;
	struct query_row *rows;
	size_t *off;
	double *vals;
	bool values;
	struct open_ev *stack;
	size_t cap_stack;
	int failed;
};

/* The event at position i. */
static const struct trace_event *parts_event(const struct parts *p, size_t i)
{
	return &p->t->ev[p->sel ? p->sel[i] : i];
}

/* The event at position i, kept by the query, of value v (its self time,
 * argument or duration) and clipped duration `dur`: when it is in a group,
 * both are added to its group (grouping pass, when its key is in this
 * pass's part) or its row (values pass). */
static void parts_add(struct parts *p, size_t i, double v, int64_t dur)
{
	const struct trace_event *ev = parts_event(p, i);
	struct agg_acc *a;
	uint64_t key;
	uint32_t g;

	/* by name without a call: in parts, most events are another part's,
	 * and this runs once an event a part */
	if (p->o->by == QUERY_BY_NAME) {
		key = ev->name;
		if (key >= p->t->names.n)
			return; /* no name: in no group */
	} else if (!group_key(p->t, p->o, p->order, ev, &key)) {
		return;
	}
	if (!p->values && (key & (p->nparts - 1)) != p->part)
		return;
	g = p->values ? imap_get(&p->rowmap, key) : 0;
	if (g == UINT32_MAX || p->failed) /* not a group returned */
		return;
	if (p->values) {
		p->vals[p->off[g]++] = v;
		p->rows[g].dur += dur;
		return;
	}
	if (p->slot) {
		g = p->slot[key >> p->shift];
		if (g == 0)
			g = p->slot[key >> p->shift] = p->ngroups + 1;
		g--;
	} else {
		g = imap_get_or_put(&p->map, key, p->ngroups);
		if (g == UINT32_MAX) {
			p->failed = 1;
			return;
		}
	}
	if (g == p->ngroups) {
		a = grow_array(p->acc, &p->cap_acc, g + 1, sizeof *a, 64);
		if (!a) {
			p->failed = 1;
			return;
		}
		p->acc = a;
		if (p->o->sort == QUERY_SORT_MIN || p->o->sort == QUERY_SORT_MAX) {
			double *x = grow_array(p->ext, &p->cap_ext, g + 1, sizeof *x, 64);

			if (!x) {
				p->failed = 1;
				return;
			}
			p->ext = x;
		}
		memset(&p->acc[g], 0, sizeof p->acc[g]);
		p->acc[g].first_ts = ev->ts;
		p->acc[g].first = i;
		p->ngroups++;
	}
	a = &p->acc[g];
	if (p->ext && (a->count == 0 || (p->o->sort == QUERY_SORT_MIN ? v < p->ext[g]
								    : v > p->ext[g])))
		p->ext[g] = v;
	a->count++;
	a->total += v;
	if (ev->ts < a->first_ts)
		a->first_ts = ev->ts;
	if (i < a->first)
		a->first = i;
}

/* Closes the open events that end by `s` (INT64_MAX: all), each handed to
 * parts_add as it closes with the time it owned: between two boundaries
 * the open event that started last owns the time. */
static void parts_close(struct parts *p, size_t *depth, int64_t *cursor, int64_t s)
{
	while (*depth > 0) {
		struct open_ev *top = &p->stack[*depth - 1];
		const struct trace_event *ev = parts_event(p, top->i);
		int64_t end = ev->ts + (ev->dur > 0 ? ev->dur : 0);

		if (end > s) {
			top->self += s - *cursor;
			*cursor = s;
			break;
		}
		if (end > *cursor) {
			top->self += end - *cursor;
			*cursor = end;
		}
		/* no time range with self times: the clipped duration is
		 * the duration */
		parts_add(p, top->i, (double)top->self, ev->dur > 0 ? ev->dur : 0);
		--*depth;
	}
}

/* One pass over the positions. 0, or -1 when out of memory. */
static int parts_pass(struct parts *p)
{
	const struct trace_event *prev = NULL;
	size_t i, depth = 0;
	int64_t cursor = 0;

	for (i = 0; i < p->n && !p->failed; i++) {
		const struct trace_event *ev = parts_event(p, i);
		int64_t dur;
		double v;

		if (!p->o->self) {
			if (agg_value(p->t, p->o, p->key_id, ev, &v, &dur))
				parts_add(p, i, v, dur);
			continue;
		}
		/* a trace in nesting order: only the kept events nest */
		if (!p->sel && !agg_value(p->t, p->o, p->key_id, ev, &v, &dur))
			continue;
		/* the kept events lie apart in the trace: each pass would
		 * wait for memory at every event */
		if (p->sel && i + PARTS_AHEAD < p->n)
			__builtin_prefetch(parts_event(p, i + PARTS_AHEAD));
		if (prev && (ev->pid != prev->pid || ev->tid != prev->tid))
			parts_close(p, &depth, &cursor, INT64_MAX);
		prev = ev;
		parts_close(p, &depth, &cursor, ev->ts);
		if (depth == 0)
			cursor = ev->ts;
		if (depth == p->cap_stack) {
			struct open_ev *s = grow_array(p->stack, &p->cap_stack, depth + 1,
						       sizeof *s, 64);

			if (!s)
				return -1;
			p->stack = s;
		}
		p->stack[depth].i = i;
		p->stack[depth++].self = 0;
	}
	if (p->o->self)
		parts_close(p, &depth, &cursor, INT64_MAX);
	return p->failed ? -1 : 0;
}

/* The groups kept so far across the parts (acc[0..n)), and room to trim
 * them to the first `want` in row order (the others' totals go to rest). */
struct best {
	struct agg_acc *acc;
	double *ext;           /* with sort "min"/"max" */
	size_t n, cap, cap_ext;
	size_t want;           /* SIZE_MAX: every group */
	double rest;           /* the totals of the groups trimmed */
	uint64_t count;        /* events in every group */
	uint32_t *perm;        /* best_trim's order of acc, and the groups */
	struct agg_acc *tmp;   /* it keeps */
	double *tmpext;
	size_t cap_perm, cap_tmp, cap_tmpext;
};

/* Keeps the first min(want, n) groups of `b` in row order. 0, or -1 when
 * out of memory. */
static int best_trim(struct best *b, struct row_order *ro)
{
	size_t k, keep = b->want < b->n ? b->want : b->n;
	uint32_t *perm = grow_array(b->perm, &b->cap_perm, b->n, sizeof *perm, 64);
	struct agg_acc *tmp;

	if (!perm)
		return -1;
	b->perm = perm;
	tmp = grow_array(b->tmp, &b->cap_tmp, keep, sizeof *tmp, 64);
	if (!tmp)
		return -1;
	b->tmp = tmp;
	if (b->ext) {
		double *x = grow_array(b->tmpext, &b->cap_tmpext, keep, sizeof *x, 64);

		if (!x)
			return -1;
		b->tmpext = x;
	}
	ro->acc = b->acc;
	ro->ext = b->ext;
	for (k = 0; k < b->n; k++)
		b->perm[k] = (uint32_t)k;
	qsort_r(b->perm, b->n, sizeof *b->perm, cmp_group, ro);
	for (k = keep; k < b->n; k++)
		b->rest += b->acc[b->perm[k]].total;
	for (k = 0; k < keep; k++) {
		b->tmp[k] = b->acc[b->perm[k]];
		if (b->ext)
			b->tmpext[k] = b->ext[b->perm[k]];
	}
	memcpy(b->acc, b->tmp, keep * sizeof *b->acc);
	if (b->ext)
		memcpy(b->ext, b->tmpext, keep * sizeof *b->ext);
	b->n = keep;
	return 0;
}

/* Adds the pass's groups (positions turned into event indexes) to `b`,
 * trimming it to `want` whenever it reaches twice that. 0 or -1. */
static int best_add(struct best *b, struct parts *p, struct row_order *ro)
{
	uint32_t g;

	for (g = 0; g < p->ngroups; g++) {
		struct agg_acc *a = grow_array(b->acc, &b->cap, b->n + 1, sizeof *a, 64);

		if (!a)
			return -1;
		b->acc = a;
		if (p->ext) {
			double *x = grow_array(b->ext, &b->cap_ext, b->n + 1, sizeof *x, 64);

			if (!x)
				return -1;
			b->ext = x;
			b->ext[b->n] = p->ext[g];
		}
		b->count += p->acc[g].count;
		b->acc[b->n] = p->acc[g];
		b->acc[b->n].first = p->sel ? p->sel[p->acc[g].first] : p->acc[g].first;
		if (++b->n / 2 >= b->want && best_trim(b, ro) != 0)
			return -1;
	}
	return 0;
}

static void best_free(struct best *b)
{
	free(b->acc);
	free(b->ext);
	free(b->perm);
	free(b->tmp);
	free(b->tmpext);
}

int query_aggregate(const struct trace *t, const struct query_agg_opts *o,
		    struct query_result *out, struct err *e)
{
	return query_aggregate_max(t, o, QUERY_GROUPS_MAX, out, e);
}

/* The message of every allocation failure of an aggregation; -1. */
static int agg_oom(struct err *e)
{
	return err_set(e, "out of memory aggregating the trace");
}

/* By name with a limit: a power of two of parts (p->nparts, p->shift),
 * each holding at most about max_groups names; otherwise one. */
static void parts_split(struct parts *p, bool limited, size_t max_groups)
{
	p->nparts = 1;
	/* by name: a power of two of parts, a name's part the low bits of
	 * its id and its slot in the part the others; without a limit and
	 * with many names, a map of the names kept instead */
	while (p->o->by == QUERY_BY_NAME && limited && max_groups &&
	       (size_t)p->nparts * max_groups <= (size_t)p->t->names.n) {
		p->nparts *= 2;
		p->shift++;
	}
}

/* The kept events, for self times in nesting order: for a trace not in
 * that order, and for the passes over the parts (a filter that keeps few
 * events costs each pass only those; a list longer than QUERY_SEL_MAX
 * would save the passes little, and is not made). Sets p->sel and p->n
 * when it makes the list (*sel: the caller frees it). 0; 1 when no event
 * is kept (no group); -1 with *e set. */
static int agg_select(struct parts *p, bool nest_order, uint32_t **sel, struct err *e)
{
	const struct trace *t = p->t;
	size_t i, n = 0;
	int64_t dur;
	double v;

	if (t->nev > UINT32_MAX)
		return err_set(e, "aggregating a trace of more than 4294967295 events");
	for (i = 0; i < t->nev; i++)
		n += agg_value(t, p->o, p->key_id, &t->ev[i], &v, &dur);
	if (n == 0)
		return 1;
	if (!nest_order && n > QUERY_SEL_MAX)
		return 0;
	*sel = malloc(n * sizeof **sel);
	if (!*sel)
		return agg_oom(e);
	for (i = 0, n = 0; i < t->nev; i++)
		if (agg_value(t, p->o, p->key_id, &t->ev[i], &v, &dur))
			(*sel)[n++] = (uint32_t)i;
	if (nest_order)
		sortidx_u32(*sel, n, trace_event_cmp_at, (void *)t); /* in place */
	p->sel = *sel;
	p->n = n;
	return 0;
}

/* Step 1: the groups, one part of the names at a time, kept in `b` (the
 * first b->want in row order); *ngroups: how many there were in all.
 * Frees what the grouping passes used. 0, or -1 when out of memory. */
static int agg_groups(struct parts *p, struct best *b, struct row_order *ro,
		      size_t nslot, size_t *ngroups)
{
	for (p->part = 0; p->part < p->nparts; p->part++) {
		p->ngroups = 0;
		if (p->slot)
			memset(p->slot, 0, nslot * sizeof *p->slot);
		imap_free(&p->map);
		if (parts_pass(p) != 0 || best_add(b, p, ro) != 0)
			return -1;
		*ngroups += p->ngroups;
	}
	if (b->n > b->want && best_trim(b, ro) != 0)
		return -1;
	free(p->slot);
	p->slot = NULL;
	imap_free(&p->map);
	free(p->acc);
	p->acc = NULL;
	free(p->ext);
	p->ext = NULL;
	return 0;
}

/* Step 2: the rows of the groups kept in `b` (p->rows), their values
 * gathered in one more pass and their statistics; out->total: the
 * total of every group. 0, or -1 when out of memory. */
static int agg_values(struct parts *p, const struct best *b, struct query_result *out)
{
	const struct trace *t = p->t;
	size_t k;

	p->rows = calloc(b->n ? b->n : 1, sizeof *p->rows);
	p->off = calloc(b->n + 1, sizeof *p->off);
	if (!p->rows || !p->off)
		return -1;
	for (k = 0; k < b->n; k++) {
		const struct trace_event *ev = &t->ev[b->acc[k].first];
		uint64_t key = 0;

		group_key(t, p->o, p->order, ev, &key);
		if (imap_get_or_put(&p->rowmap, key, (uint32_t)k) == UINT32_MAX)
			return -1;
		row_key(t, p->o, ev, key, &p->rows[k]);
		p->rows[k].count = b->acc[k].count;
		p->rows[k].first_ts = b->acc[k].first_ts;
		p->off[k + 1] = p->off[k] + p->rows[k].count;
	}
	p->vals = malloc((p->off[b->n] ? p->off[b->n] : 1) * sizeof *p->vals);
	if (!p->vals)
		return -1;
	p->values = true;
	p->part = 0;
	if (b->n > 0 && parts_pass(p) != 0)
		return -1;
	out->total = b->rest;
	for (k = 0; k < b->n; k++) {
		group_stats(&p->rows[k], p->vals + p->off[k] - p->rows[k].count,
			    p->rows[k].count);
		out->total += p->rows[k].total;
	}
	return 0;
}

/* Frees what the passes of `p` hold (not p->sel). */
static void parts_free(struct parts *p)
{
	free(p->slot);
	imap_free(&p->map);
	free(p->acc);
	free(p->ext);
	free(p->stack);
	free(p->rows);
	free(p->off);
	free(p->vals);
	imap_free(&p->rowmap);
	free((void *)p->order);
}

int query_aggregate_max(const struct trace *t, const struct query_agg_opts *o,
			size_t max_groups, struct query_result *out, struct err *e)
{
	struct parts p;
	struct best b;
	struct row_order ro;
	uint32_t *sel = NULL;
	size_t nslot = 0, ngroups = 0;
	bool limited = o->limit && o->sort != QUERY_SORT_MED && o->sort != QUERY_SORT_STD;
	bool nest_order = o->self && !t->nested; /* the kept events sorted so */
	int rc = -1;

	memset(out, 0, sizeof *out);
	memset(&p, 0, sizeof p);
	memset(&b, 0, sizeof b);
	if (o->self && (o->sum_arg || o->filter.within || o->filter.has_range))
		return err_set(e, "self time cannot be combined with a sum argument or a time range");
	p.t = t;
	p.o = o;
	p.key_id = STRTAB_NONE;
	if (o->sum_arg) {
		p.key_id = find_id(t, o->sum_arg);
		if (p.key_id == STRTAB_NONE)
			return 0; /* no event has that argument */
	}
	if (t->nev == 0)
		return 0;
	if (o->by == QUERY_BY_STEP && t->nsteps) {
		p.order = query_step_order(t);
		if (!p.order)
			return agg_oom(e);
	}
	parts_split(&p, limited, max_groups);
	p.n = t->nev;
	if (nest_order || p.nparts > 1) {
		rc = agg_select(&p, nest_order, &sel, e);
		if (rc != 0) {
			rc = rc > 0 ? 0 : -1; /* no event kept: no group */
			goto done;
		}
		rc = -1;
	}
	if (o->by == QUERY_BY_NAME && (p.nparts > 1 || (size_t)t->names.n < max_groups)) {
		nslot = ((size_t)t->names.n >> p.shift) + 1;
		p.slot = malloc(nslot * sizeof *p.slot);
		if (!p.slot)
			goto oom;
	}
	ro.t = t;
	ro.by = o->by;
	ro.sort = o->sort;
	ro.opts = o;
	ro.order = p.order;
	b.want = limited ? o->limit : SIZE_MAX;
	if (agg_groups(&p, &b, &ro, nslot, &ngroups) != 0)
		goto oom;
	out->count = b.count;
	if (agg_values(&p, &b, out) != 0)
		goto oom;
	/* 3. the rows in order */
	qsort_r(p.rows, b.n, sizeof *p.rows, cmp_row, &ro);
	out->rows = p.rows;
	out->nrows = o->limit && o->limit < b.n ? o->limit : b.n;
	out->ngroups = ngroups;
	p.rows = NULL;
	rc = 0;
	goto done;
oom:
	agg_oom(e);
done:
	free(sel);
	best_free(&b);
	parts_free(&p);
	return rc;
}

void query_result_free(struct query_result *r)
{
	if (!r)
		return;
	free(r->rows);
	memset(r, 0, sizeof *r);
}

/* ------------------------------------------------------------ phases */

/* The names that are phases (strtab id -> phase): a map of those only, not
 * a byte a name, as a window of millions of names would have. 0, or -1
 * when out of memory. */
static int phase_map(const struct trace *t, struct imap *m)
{
	uint32_t i;
	enum query_phase p;

	memset(m, 0, sizeof *m);
	for (i = 0; i < t->names.n; i++) {
		p = query_phase_of(t->names.str[i], t->names.len[i]);
		if (p != QUERY_PHASE_COUNT && imap_get_or_put(m, i, (uint32_t)p) == UINT32_MAX) {
			imap_free(m);
			return -1;
		}
	}
	return 0;
}

/* The phase of event `ev` when it is a user annotation named as one,
 * else QUERY_PHASE_COUNT. */
static enum query_phase phase_get(const struct imap *m, const struct trace_event *ev)
{
	uint32_t p;

	if (ev->cat != TRACE_CAT_USER_ANNOTATION || !m->n)
		return QUERY_PHASE_COUNT;
	p = imap_get(m, ev->name);
	return p == UINT32_MAX ? QUERY_PHASE_COUNT : (enum query_phase)p;
}

/* The event at position i: an index in pos, or in t->ev when pos is NULL. */
static const struct trace_event *pos_event(const struct trace *t, const uint32_t *pos,
					   size_t i)
{
	return &t->ev[pos ? pos[i] : i];
}

/* The events of thread (pid, tid) among positions [0, n) in nesting order
 * (pos NULL: the trace's events, the trace in nesting order): positions
 * [*lo, *hi) (empty when it has none). */
static void thread_run(const struct trace *t, const uint32_t *pos, size_t n, int32_t pid,
		       int32_t tid, size_t *lo, size_t *hi)
{
	size_t a = 0, b = n;

	while (a < b) { /* the first event not before the thread */
		size_t m = a + (b - a) / 2;
		const struct trace_event *ev = pos_event(t, pos, m);

		if (ev->pid < pid || (ev->pid == pid && ev->tid < tid))
			a = m + 1;
		else
			b = m;
	}
	*lo = a;
	for (b = n; a < b;) { /* the first event past it */
		size_t m = a + (b - a) / 2;
		const struct trace_event *ev = pos_event(t, pos, m);

		if (ev->pid < pid || (ev->pid == pid && ev->tid <= tid))
			a = m + 1;
		else
			b = m;
	}
	*hi = a;
}

/* The process of thread `tid`: the first the trace names it in, else
 * that of its first event, else the window's. */
static int32_t thread_pid(const struct trace *t, int32_t tid)
{
	size_t i;

	for (i = 0; i < t->nthreads; i++)
		if (t->threads[i].tid == tid)
			return t->threads[i].pid;
	for (i = 0; i < t->nev; i++)
		if (t->ev[i].tid == tid && !(t->ev[i].flags & TRACE_F_STEP))
			return t->ev[i].pid;
	return t->meta.pid;
}

static bool is_range(const struct trace_event *ev)
{
	return ev->ph == TRACE_PH_COMPLETE && !(ev->flags & TRACE_F_STEP);
}

/* Fills q's phases from the phase ranges of step s's thread that start
 * within it, at positions [lo, hi) (pos as for thread_run: that thread's
 * events from the step's start on). */
static void step_phases(const struct trace *t, const struct imap *pm, const uint32_t *pos,
			size_t lo, size_t hi, const struct trace_step *s,
			struct query_step *q)
{
	int64_t send = s->ts + s->dur, cover = s->ts, named = 0;
	size_t i;

	for (i = lo; i < hi; i++) {
		const struct trace_event *ev = pos_event(t, pos, i);
		enum query_phase p = phase_get(pm, ev);
		int64_t a, b = ev->ts + ev->dur;

		if (ev->ts >= send)
			break;
		if (p == QUERY_PHASE_COUNT || !is_range(ev))
			continue;
		q->has_phases = true;
		if (b > send)
			b = send;
		if (!(q->phase_mask & 1u << p)) {
			q->phase_mask |= 1u << p;
			q->phase_start[p] = ev->ts;
			q->phase_end[p] = b;
		} else if (b > q->phase_end[p]) {
			q->phase_end[p] = b;
		}
		a = ev->ts > cover ? ev->ts : cover;
		if (b > a) {
			if (p != QUERY_PHASE_OTHER) {
				q->phase[p] += b - a;
				named += b - a;
			}
			cover = b;
		}
	}
	q->phase[QUERY_PHASE_OTHER] = s->dur - named > 0 ? s->dur - named : 0;
}

int query_steps(const struct trace *t, struct query_step **out, size_t *n,
		struct err *e)
{
	size_t *order = NULL, nph = 0, i, k;
	uint32_t *ph = NULL;
	int32_t pid = 0;
	struct imap pm = { 0 };
	struct query_step *steps = NULL;

	*out = NULL;
	*n = 0;
	if (t->nsteps == 0)
		return 0;
	if (!t->nested && t->nev > UINT32_MAX)
		return err_set(e, "computing the step phases of a trace of more than "
			       "4294967295 events");
	order = query_step_order(t);
	steps = calloc(t->nsteps, sizeof *steps);
	if (!order || !steps || phase_map(t, &pm) != 0)
		goto oom;
	/* A trace in nesting order is read as it lies; another's phase
	 * ranges are listed in that order. */
	if (!t->nested && pm.n) {
		for (i = 0; i < t->nev; i++)
			nph += phase_get(&pm, &t->ev[i]) != QUERY_PHASE_COUNT;
		ph = malloc((nph ? nph : 1) * sizeof *ph);
		if (!ph)
			goto oom;
		for (i = 0, nph = 0; i < t->nev; i++)
			if (phase_get(&pm, &t->ev[i]) != QUERY_PHASE_COUNT)
				ph[nph++] = (uint32_t)i;
		sortidx_u32(ph, nph, trace_event_cmp_at, (void *)t); /* in place */
	}
	for (k = 0; k < t->nsteps; k++) {
		const struct trace_step *s = &t->steps[order[k]];
		struct query_step *q = &steps[k];
		size_t a, b, lo, hi;

		q->step = s->step;
		q->ts = s->ts;
		q->dur = s->dur;
		q->tid = s->tid;
		q->partial = s->partial != 0;
		q->phase[QUERY_PHASE_OTHER] = s->dur > 0 ? s->dur : 0;
		if (!pm.n)
			continue; /* no phase names */
		if (k == 0 || s->tid != t->steps[order[k - 1]].tid)
			pid = thread_pid(t, s->tid);
		thread_run(t, ph, ph ? nph : t->nev, pid, s->tid, &a, &b);
		/* the first of the thread's events starting at or after the step */
		for (lo = a, hi = b; lo < hi;) {
			size_t mid = lo + (hi - lo) / 2;

			if (pos_event(t, ph, mid)->ts < s->ts)
				lo = mid + 1;
			else
				hi = mid;
		}
		step_phases(t, &pm, ph, lo, b, s, q);
	}
	free(order);
	imap_free(&pm);
	free(ph);
	*out = steps;
	*n = t->nsteps;
	return 0;
oom:
	free(order);
	imap_free(&pm);
	free(ph);
	free(steps);
	return err_set(e, "out of memory computing the step phases");
}

bool query_phase_counts(const struct query_step *s, bool partial)
{
	return s->has_phases && (partial || !s->partial);
}

void query_phase_summary(const struct query_step *s, size_t n,
			 struct query_phase_sum *out)
{
	size_t i;
	int p;

	memset(out, 0, sizeof *out);
	out->partial = true;
	for (i = 0; i < n; i++)
		if (s[i].has_phases && !s[i].partial)
			out->partial = false;
	for (i = 0; i < n; i++) {
		if (!query_phase_counts(&s[i], out->partial))
			continue;
		out->steps++;
		out->total += s[i].dur;
		for (p = 0; p < QUERY_PHASE_COUNT; p++)
			out->phase[p] += s[i].phase[p];
	}
	if (out->steps == 0)
		out->partial = false;
}

double query_phase_share(const struct query_phase_sum *sum, enum query_phase p)
{
	if (sum->total <= 0 || (unsigned)p >= QUERY_PHASE_COUNT)
		return 0;
	return (double)sum->phase[p] / (double)sum->total;
}

/* ------------------------------------------------------------ busy */

static int cmp_iv(const void *a, const void *b)
{
	const struct query_interval *x = a, *y = b;

	if (x->ts != y->ts)
		return x->ts < y->ts ? -1 : 1;
	return x->dur < y->dur ? -1 : x->dur > y->dur;
}

/* Sorts and merges iv[0..*n) in place into a union of disjoint intervals. */
static void merge_intervals(struct query_interval *iv, size_t *n)
{
	size_t i, m = 0;

	qsort(iv, *n, sizeof *iv, cmp_iv);
	for (i = 0; i < *n; i++) {
		if (iv[i].dur <= 0)
			continue;
		if (m > 0 && iv[i].ts <= iv[m - 1].ts + iv[m - 1].dur) {
			int64_t end = iv[i].ts + iv[i].dur;

			if (end > iv[m - 1].ts + iv[m - 1].dur)
				iv[m - 1].dur = end - iv[m - 1].ts;
		} else {
			iv[m++] = iv[i];
		}
	}
	*n = m;
}

static int cmp_gap(const void *a, const void *b)
{
	const struct query_interval *x = a, *y = b;

	if (x->dur != y->dur)
		return x->dur > y->dur ? -1 : 1;
	return x->ts < y->ts ? -1 : x->ts > y->ts;
}

/* Whether `ev` is busy time of query_busy's categories `cats`. */
static bool busy_kept(const struct query_busy_opts *o, uint32_t cats,
		      const struct trace_event *ev)
{
	return (cats >> ev->cat & 1) && ev->dur > 0 && ev->ph == TRACE_PH_COMPLETE &&
	       (!o->has_pid || ev->pid == o->pid);
}

/* Fills busy[] (room for every kept event) with the kept events of `t`
 * merged into disjoint intervals; counts them in out->events. */
static void busy_intervals(const struct trace *t, const struct query_busy_opts *o,
			   uint32_t cats, struct query_interval *busy, size_t *nbusy,
			   struct query_busy *out)
{
	size_t i;

	for (i = 0, *nbusy = 0; i < t->nev; i++) {
		const struct trace_event *ev = &t->ev[i];

		if (!busy_kept(o, cats, ev))
			continue;
		busy[*nbusy].ts = ev->ts;
		busy[*nbusy].dur = ev->dur;
		(*nbusy)++;
		out->events++;
	}
	merge_intervals(busy, nbusy);
}

/* Fills ref[] (room for t->nsteps, at least 1) with the time busy time is
 * measured against: the steps merged (unless o->whole_window), else the
 * window, else the span of the busy intervals; *nref 0 when there is none. */
static void busy_reference(const struct trace *t, const struct query_busy_opts *o,
			   const struct query_interval *busy, size_t nbusy,
			   struct query_interval *ref, size_t *nref)
{
	size_t i;

	*nref = 0;
	if (!o->whole_window)
		for (i = 0; i < t->nsteps; i++) {
			ref[*nref].ts = t->steps[i].ts;
			ref[*nref].dur = t->steps[i].dur;
			(*nref)++;
		}
	merge_intervals(ref, nref);
	if (*nref == 0) {
		int64_t a = t->meta.start_ts, b = t->meta.end_ts;

		if (b <= a && nbusy > 0) {
			a = busy[0].ts;
			b = busy[nbusy - 1].ts + busy[nbusy - 1].dur;
		}
		if (b > a) {
			ref[0].ts = a;
			ref[0].dur = b - a;
			*nref = 1;
		}
	}
}

/* Appends [ts, ts + dur) to out->idle_iv (room for it). */
static void busy_add_idle(struct query_busy *out, int64_t ts, int64_t dur)
{
	out->idle_iv[out->nidle].ts = ts;
	out->idle_iv[out->nidle].dur = dur;
	out->nidle++;
}

/* busy ∩ ref into inb[] (*ninb), ref minus busy into out->idle_iv (each
 * with room for nbusy + nref), and out->busy, out->idle. */
static void busy_split(const struct query_interval *busy, size_t nbusy,
		       const struct query_interval *ref, size_t nref,
		       struct query_interval *inb, size_t *ninb, struct query_busy *out)
{
	size_t i, j;

	for (i = 0, j = 0; i < nref; i++) {
		int64_t cur = ref[i].ts, rend = ref[i].ts + ref[i].dur;

		while (j < nbusy && busy[j].ts + busy[j].dur <= cur)
			j++;
		for (size_t k = j; k < nbusy && busy[k].ts < rend; k++) {
			int64_t a = busy[k].ts > cur ? busy[k].ts : cur;
			int64_t b = busy[k].ts + busy[k].dur < rend ? busy[k].ts + busy[k].dur : rend;

			if (a > cur)
				busy_add_idle(out, cur, a - cur);
			if (b > a) {
				inb[*ninb].ts = a;
				inb[*ninb].dur = b - a;
				(*ninb)++;
				out->busy += b - a;
				cur = b;
			}
		}
		if (rend > cur)
			busy_add_idle(out, cur, rend - cur);
	}
	out->idle = out->span - out->busy;
}

/* out->gaps: the o->max_gaps longest idle intervals, longest first.
 * 0, or -1 when out of memory. */
static int busy_gaps(const struct query_busy_opts *o, struct query_busy *out)
{
	size_t ng = out->nidle < o->max_gaps ? out->nidle : o->max_gaps;
	struct query_interval *all = malloc(out->nidle * sizeof *all);

	out->gaps = malloc(ng * sizeof *out->gaps);
	if (!all || !out->gaps) {
		free(all);
		return -1;
	}
	memcpy(all, out->idle_iv, out->nidle * sizeof *all);
	qsort(all, out->nidle, sizeof *all, cmp_gap);
	memcpy(out->gaps, all, ng * sizeof *all);
	out->ngaps = ng;
	free(all);
	return 0;
}

/* out->bucket: the busy share of each of o->buckets equal slices of
 * [out->start, out->end), from the busy intervals inb[0..ninb).
 * 0, or -1 when out of memory. */
static int busy_buckets(const struct query_busy_opts *o, const struct query_interval *inb,
			size_t ninb, struct query_busy *out)
{
	int64_t width = out->end - out->start;
	size_t i, nb = o->buckets;
	int64_t bw = (width + (int64_t)nb - 1) / (int64_t)nb;

	if (bw < 1)
		bw = 1;
	out->bucket = calloc(nb, sizeof *out->bucket);
	if (!out->bucket)
		return -1;
	out->nbuckets = nb;
	out->bucket_ns = bw;
	for (i = 0; i < ninb; i++) {
		int64_t a = inb[i].ts, b = inb[i].ts + inb[i].dur;

		while (a < b) {
			size_t k = (size_t)((a - out->start) / bw);
			int64_t bend = out->start + (int64_t)(k + 1) * bw;
			int64_t c = b < bend ? b : bend;

			if (k >= nb)
				break;
			out->bucket[k] += (double)(c - a);
			a = c;
		}
	}
	for (i = 0; i < nb; i++)
		out->bucket[i] /= (double)bw;
	return 0;
}

int query_busy(const struct trace *t, const struct query_busy_opts *o,
	       struct query_busy *out, struct err *e)
{
	uint32_t cats = o->cats ? o->cats : QUERY_GPU_CATS;
	struct query_interval *busy = NULL, *ref = NULL, *inb = NULL;
	size_t nbusy = 0, nref = 0, ninb = 0, i;

	memset(out, 0, sizeof *out);
	for (i = 0; i < t->nev; i++) /* room for the busy events only */
		nbusy += busy_kept(o, cats, &t->ev[i]);
	busy = malloc((nbusy ? nbusy : 1) * sizeof *busy);
	ref = malloc((t->nsteps ? t->nsteps : 1) * sizeof *ref);
	if (!busy || !ref)
		goto oom;
	busy_intervals(t, o, cats, busy, &nbusy, out);
	busy_reference(t, o, busy, nbusy, ref, &nref);
	if (nref == 0) {
		free(busy);
		free(ref);
		return 0;
	}
	out->start = ref[0].ts;
	out->end = ref[nref - 1].ts + ref[nref - 1].dur;
	for (i = 0; i < nref; i++)
		out->span += ref[i].dur;
	inb = malloc((nbusy + nref) * sizeof *inb);
	out->idle_iv = malloc((nbusy + nref) * sizeof *out->idle_iv);
	if (!inb || !out->idle_iv)
		goto oom;
	busy_split(busy, nbusy, ref, nref, inb, &ninb, out);
	if (o->max_gaps && out->nidle && busy_gaps(o, out) != 0)
		goto oom;
	if (o->buckets && out->end > out->start && busy_buckets(o, inb, ninb, out) != 0)
		goto oom;
	free(busy);
	free(ref);
	free(inb);
	return 0;
oom:
	free(busy);
	free(ref);
	free(inb);
	query_busy_free(out);
	return err_set(e, "out of memory computing busy time");
}

void query_busy_free(struct query_busy *b)
{
	if (!b)
		return;
	free(b->idle_iv);
	free(b->gaps);
	free(b->bucket);
	memset(b, 0, sizeof *b);
}

/* ------------------------------------------------------------ during */

#define DURING_CATS ((1u << TRACE_CAT_USER_ANNOTATION) | (1u << TRACE_CAT_CPU_OP) | \
		     (1u << TRACE_CAT_CUDA_RUNTIME) | (1u << TRACE_CAT_CUDA_DRIVER) | \
		     (1u << TRACE_CAT_CUDA_SYNC))

struct during_ctx {
	const struct trace *t;
	const struct query_interval *iv;
	size_t niv, j;
	struct imap pm;       /* phase_map */
	struct imap names;    /* strtab id -> its sum in by_name */
	struct during_sum {
		uint32_t name;
		double total;
	} *by_name;           /* the first QUERY_DURING_NAMES names charged */
	size_t nby_name, cap_by_name;
	double other;         /* charged to the names past them */
	int failed;
	struct query_during *out;
};

/* Adds `ns` to the time of range name `name`. */
static void during_add(struct during_ctx *c, uint32_t name, double ns)
{
	uint32_t g = imap_get(&c->names, name);
	struct during_sum *r;

	if (g == UINT32_MAX) {
		if (c->nby_name >= QUERY_DURING_NAMES) {
			c->other += ns;
			return;
		}
		r = grow_array(c->by_name, &c->cap_by_name, c->nby_name + 1, sizeof *r, 64);
		if (!r || imap_get_or_put(&c->names, name, (uint32_t)c->nby_name) == UINT32_MAX) {
			if (r)
				c->by_name = r;
			c->failed = 1;
			return;
		}
		c->by_name = r;
		g = (uint32_t)c->nby_name++;
		r[g].name = name;
		r[g].total = 0;
	}
	c->by_name[g].total += ns;
}

/* Charges [a, b) to `owner` (event index; the stack gives its phase). */
static void during_charge(struct during_ctx *c, int64_t a, int64_t b,
			  const struct trace_event *owner, int phase)
{
	size_t k;

	while (c->j < c->niv && c->iv[c->j].ts + c->iv[c->j].dur <= a)
		c->j++;
	for (k = c->j; k < c->niv && c->iv[k].ts < b; k++) {
		int64_t x = c->iv[k].ts > a ? c->iv[k].ts : a;
		int64_t y = c->iv[k].ts + c->iv[k].dur < b ? c->iv[k].ts + c->iv[k].dur : b;

		if (y <= x)
			continue;
		if (owner->name < c->t->names.n)
			during_add(c, owner->name, (double)(y - x));
		if (phase >= 0)
			c->out->phase[phase] += y - x;
	}
}

/* The phase of the innermost phase range on the stack, or -1. */
static int stack_phase(const struct during_ctx *c, const size_t *stack,
		       size_t depth)
{
	while (depth-- > 0) {
		const struct trace_event *ev = &c->t->ev[stack[depth]];

		enum query_phase p = phase_get(&c->pm, ev);

		if (p != QUERY_PHASE_COUNT)
			return (int)p;
	}
	return -1;
}

static int cmp_row_total(const void *a, const void *b)
{
	const struct query_row *x = a, *y = b;

	if (x->total != y->total)
		return x->total > y->total ? -1 : 1;
	return x->name < y->name ? -1 : x->name > y->name;
}

/* Whether `ev` is one query_during sweeps: a range of positive length of
 * the thread (pid, tid). */
static bool during_kept(const struct trace_event *ev, int32_t pid, int32_t tid)
{
	return ev->pid == pid && ev->tid == tid && (DURING_CATS >> ev->cat & 1) &&
	       is_range(ev) && ev->dur > 0;
}

int query_during(const struct trace *t, int32_t pid, int32_t tid,
		 const struct query_interval *iv, size_t niv,
		 struct query_during *out, struct err *e)
{
	struct during_ctx c = { .t = t, .iv = iv, .niv = niv, .out = out };
	size_t *stack = NULL, cap_stack = 0, n = 0, depth = 0, i, pos, lo = 0, hi;
	uint32_t *idx = NULL;
	int64_t cursor = INT64_MIN, charged = 0, inphase = 0;

	memset(out, 0, sizeof *out);
	if (!t->nested && t->nev > UINT32_MAX)
		return err_set(e, "attributing thread time in a trace of more than "
			       "4294967295 events");
	for (i = 0; i < niv; i++)
		out->total += iv[i].dur;
	if (phase_map(t, &c.pm) != 0)
		goto oom;
	if (t->nested) {
		/* the thread's events, in nesting order, lie together */
		thread_run(t, NULL, t->nev, pid, tid, &lo, &hi);
	} else {
		idx = malloc((t->nev ? t->nev : 1) * sizeof *idx);
		if (!idx)
			goto oom;
		for (i = 0; i < t->nev; i++)
			if (during_kept(&t->ev[i], pid, tid))
				idx[n++] = (uint32_t)i;
		sortidx_u32(idx, n, trace_event_cmp_at, (void *)t); /* in place */
		hi = n;
	}

	/* Sweep: between boundaries, the top of the stack (the open event
	 * that started last) owns the time. A position is an index in idx,
	 * or in t->ev in a nested trace. */
	for (pos = lo;;) {
		size_t at = SIZE_MAX; /* the next kept event */
		int64_t next;

		while (!idx && pos < hi && !during_kept(&t->ev[pos], pid, tid))
			pos++;
		if (pos < hi)
			at = idx ? idx[pos++] : pos++;
		next = at != SIZE_MAX ? t->ev[at].ts : INT64_MAX;

		while (depth > 0) {
			const struct trace_event *top = &t->ev[stack[depth - 1]];
			int64_t end = top->ts + top->dur;

			if (end > next)
				break;
			if (end > cursor) {
				during_charge(&c, cursor, end, top,
					      stack_phase(&c, stack, depth));
				cursor = end;
			}
			depth--;
		}
		if (at == SIZE_MAX)
			break;
		if (depth > 0 && next > cursor) {
			const struct trace_event *top = &t->ev[stack[depth - 1]];

			during_charge(&c, cursor, next, top, stack_phase(&c, stack, depth));
		}
		if (next > cursor)
			cursor = next;
		if (depth == cap_stack) {
			size_t *s = grow_array(stack, &cap_stack, depth + 1, sizeof *s, 64);

			if (!s)
				goto oom;
			stack = s;
		}
		stack[depth++] = at;
	}
	if (c.failed)
		goto oom;

	/* rows: the names charged, the names past them, no range */
	out->by_range = calloc(c.nby_name + 2, sizeof *out->by_range);
	if (!out->by_range)
		goto oom;
	for (i = 0; i < c.nby_name; i++)
		if (c.by_name[i].total > 0) {
			struct query_row *r = &out->by_range[out->nrange++];

			r->name = c.by_name[i].name;
			r->total = c.by_name[i].total;
			charged += (int64_t)r->total;
		}
	if (c.other > 0) {
		struct query_row *r = &out->by_range[out->nrange++];

		r->name = QUERY_NAME_OTHER;
		r->total = c.other;
		charged += (int64_t)c.other;
	}
	if (out->total > charged) {
		struct query_row *r = &out->by_range[out->nrange++];

		r->name = STRTAB_NONE;
		r->total = (double)(out->total - charged);
	}
	qsort(out->by_range, out->nrange, sizeof *out->by_range, cmp_row_total);
	for (i = 0; i < QUERY_PHASE_COUNT; i++)
		inphase += out->phase[i];
	out->phase[QUERY_PHASE_COUNT] = out->total - inphase;
	free(idx);
	free(stack);
	imap_free(&c.pm);
	imap_free(&c.names);
	free(c.by_name);
	return 0;
oom:
	free(idx);
	free(stack);
	imap_free(&c.pm);
	imap_free(&c.names);
	free(c.by_name);
	query_during_free(out);
	return err_set(e, "out of memory attributing thread time");
}

void query_during_free(struct query_during *d)
{
	if (!d)
		return;
	free(d->by_range);
	memset(d, 0, sizeof *d);
}

/* ------------------------------------------------------------ samples */

struct tree_build {
	struct query_tree *tree;
	size_t cap;
	uint32_t *slots;   /* node + 1; 0 = empty */
	size_t nslots;
};

static uint64_t frame_hash(uint32_t parent, const char *s, uint32_t len)
{
	return mix64(hash_fnv64(HASH_FNV64_SEED ^ parent, s, len));
}

/* The hash of node `i` (htab_rebuild). */
static uint64_t node_hash(const void *ctx, size_t i)
{
	const struct query_node *nd = &((const struct query_tree *)ctx)->nodes[i];

	return frame_hash(nd->parent, nd->name, nd->len);
}

/* Rebuilds the node table with `nslots` slots; the root (node 0) is never
 * looked up. 0, or -1 (table unchanged) when out of memory. */
static int tree_rehash(struct tree_build *b, size_t nslots)
{
	return htab_rebuild(&b->slots, &b->nslots, nslots, 1, b->tree->n, node_hash, b->tree);
}

/* The child `name` of `parent`, created when new. UINT32_MAX: node limit
 * reached (tree->truncated set); -2 cast: out of memory. */
static uint32_t tree_child(struct tree_build *b, uint32_t parent,
			   const char *name, uint32_t len, int *oom)
{
	struct query_tree *tr = b->tree;
	size_t j;
	struct query_node *nd;

	if (htab_full(tr->n, b->nslots) &&
	    tree_rehash(b, b->nslots ? b->nslots * 2 : 1024) != 0) {
		*oom = 1;
		return UINT32_MAX;
	}
	for (j = htab_first(frame_hash(parent, name, len), b->nslots); b->slots[j];
	     j = htab_next(j, b->nslots)) {
		nd = &tr->nodes[b->slots[j] - 1];
		if (nd->parent == parent && nd->len == len && memcmp(nd->name, name, len) == 0)
			return b->slots[j] - 1;
	}
	if (tr->n >= QUERY_TREE_MAX) {
		tr->truncated = true;
		return UINT32_MAX;
	}
	nd = grow_array(tr->nodes, &b->cap, tr->n + 1, sizeof *nd, 1);
	if (!nd) {
		*oom = 1;
		return UINT32_MAX;
	}
	tr->nodes = nd;
	nd = &tr->nodes[tr->n];
	memset(nd, 0, sizeof *nd);
	nd->name = name;
	nd->len = len;
	nd->parent = parent;
	nd->first_child = nd->next_sibling = UINT32_MAX;
	nd->depth = tr->nodes[parent].depth + 1;
	/* append to the parent's children (first-seen order) */
	{
		uint32_t *link = &tr->nodes[parent].first_child;

		while (*link != UINT32_MAX)
			link = &tr->nodes[*link].next_sibling;
		*link = (uint32_t)tr->n;
	}
	b->slots[j] = (uint32_t)tr->n + 1;
	return (uint32_t)tr->n++;
}

int query_sample_tree(const struct trace *t, const struct query_filter *f,
		      struct query_tree *out, struct err *e)
{
	struct query_filter sf = *f;
	struct tree_build b = { .tree = out, .cap = 256 };
	uint32_t stack_id, weight_id;
	size_t i;
	int oom = 0;

	memset(out, 0, sizeof *out);
	sf.cats = 1u << TRACE_CAT_SAMPLE;
	out->nodes = malloc(b.cap * sizeof *out->nodes);
	if (!out->nodes)
		return err_set(e, "out of memory building the sample tree");
	memset(&out->nodes[0], 0, sizeof out->nodes[0]);
	out->nodes[0].name = "all";
	out->nodes[0].len = 3;
	out->nodes[0].parent = UINT32_MAX;
	out->nodes[0].first_child = out->nodes[0].next_sibling = UINT32_MAX;
	out->n = 1;
	stack_id = find_id(t, TRACE_ARG_STACK);
	weight_id = find_id(t, TRACE_ARG_WEIGHT);

	for (i = 0; i < t->nev && !oom; i++) {
		const struct trace_event *ev = &t->ev[i];
		const char *stack = NULL;
		size_t slen = 0, n, k;
		const struct trace_arg *a;
		double w = 1;
		int64_t dur;
		uint32_t node = 0;

		if (!query_match(t, &sf, ev, &dur))
			continue;
		a = event_args(t, ev, &n);
		for (k = 0; k < n; k++)
			if (a[k].key == stack_id && a[k].type == TRACE_ARG_STR) {
				stack = trace_str(t, a[k].v.str);
				slen = strtab_len(&t->names, a[k].v.str);
			}
		if (weight_id != STRTAB_NONE && arg_num_id(t, ev, weight_id, &w) &&
		    !(w > 0))
			continue;
		if (!stack) {
			stack = trace_str(t, ev->name);
			slen = strtab_len(&t->names, ev->name);
		}
		out->samples++;
		out->nodes[0].value += w;
		/* walk the frames, outermost first */
		for (k = 0; k < slen;) {
			const char *fr = stack + k;
			const char *semi = memchr(fr, ';', slen - k);
			uint32_t flen = (uint32_t)(semi ? (size_t)(semi - fr) : slen - k);
			uint32_t child;

			k += flen + 1;
			if (flen == 0)
				continue;
			child = tree_child(&b, node, fr, flen, &oom);
			if (child == UINT32_MAX)
				break;
			node = child;
			out->nodes[node].value += w;
		}
		out->nodes[node].self += w;
	}
	free(b.slots);
	if (oom) {
		query_tree_free(out);
		return err_set(e, "out of memory building the sample tree");
	}
	return 0;
}

void query_tree_free(struct query_tree *tree)
{
	if (!tree)
		return;
	free(tree->nodes);
	memset(tree, 0, sizeof *tree);
}

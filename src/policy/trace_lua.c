/* trace_lua — a window's trace as a Lua object (see trace_lua.h): the
 * object, its fields and its query methods. The options tables and
 * filters the methods read are in trace_lua_filter.c, the writers in
 * trace_lua_write.c (trace_lua_internal.h). */
#include "trace_lua.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "../events/query.h"
#include "../export/key_averages.h"
#include "trace_lua_internal.h"

#define TL_BOX "profhost.trace.box"
#define TL_SAMPLE_NODES 5000 /* default node limit of trace:samples() */

/* ------------------------------------------------------------ helpers */

/* A box owns malloc'd memory until it is freed or collected, so a Lua
 * error (memory, budget) raised while a result is being pushed leaks
 * nothing. */
struct box {
	void (*fn)(void *);
	void *p;
};

static int box_gc(lua_State *L)
{
	struct box *b = lua_touserdata(L, 1);

	if (b && b->p) {
		b->fn(b->p);
		b->p = NULL;
	}
	return 0;
}

/* Pushes a box for `p` (freed by fn, then free()). */
static struct box *push_box(lua_State *L)
{
	struct box *b = lua_newuserdatauv(L, sizeof *b, 0);

	b->fn = NULL;
	b->p = NULL;
	if (luaL_newmetatable(L, TL_BOX)) {
		lua_pushcfunction(L, box_gc);
		lua_setfield(L, -2, "__gc");
	}
	lua_setmetatable(L, -2);
	return b;
}

static void box_done(struct box *b)
{
	if (b->p) {
		b->fn(b->p);
		b->p = NULL;
	}
}

static void free_result(void *p)
{
	query_result_free(p);
	free(p);
}

static void free_busy(void *p)
{
	query_busy_free(p);
	free(p);
}

static void free_during(void *p)
{
	query_during_free(p);
	free(p);
}

static void free_tree(void *p)
{
	query_tree_free(p);
	free(p);
}

/* Allocates a zeroed result of `size` bytes into the box, or raises. */
static void *box_alloc(lua_State *L, struct box *b, size_t size,
		       void (*fn)(void *))
{
	b->p = calloc(1, size);
	if (!b->p)
		luaL_error(L, "out of memory");
	b->fn = fn;
	return b->p;
}

static void set_int(lua_State *L, const char *k, lua_Integer v)
{
	lua_pushinteger(L, v);
	lua_setfield(L, -2, k);
}

static void set_num(lua_State *L, const char *k, double v)
{
	lua_pushnumber(L, v);
	lua_setfield(L, -2, k);
}

/* An integer when `v` is integral and fits, else a float. */
static void push_value(lua_State *L, double v)
{
	if (isfinite(v) && v == floor(v) && fabs(v) < 9.0e18)
		lua_pushinteger(L, (lua_Integer)v);
	else
		lua_pushnumber(L, v);
}

static void set_value(lua_State *L, const char *k, double v)
{
	push_value(L, v);
	lua_setfield(L, -2, k);
}

static void set_str(lua_State *L, const char *k, const char *v)
{
	if (!v)
		return;
	lua_pushstring(L, v);
	lua_setfield(L, -2, k);
}

static void set_bool(lua_State *L, const char *k, int v)
{
	lua_pushboolean(L, v);
	lua_setfield(L, -2, k);
}

/* Gives the rows table at -2 the summary fields of the table on top
 * (popped) through its metatable: rows.total, rows.columns, ... read as
 * fields, while the rows themselves stay a plain sequence (pairs(), #,
 * and JSON see only the rows: prof.json writes an array). */
static void set_summary_fields(lua_State *L)
{
	lua_createtable(L, 0, 1);
	lua_insert(L, -2);
	lua_setfield(L, -2, "__index");
	lua_setmetatable(L, -2);
}

/* Pushes a list of names (NULL-ended). */
static void push_names(lua_State *L, const char *const *names)
{
	int k;

	lua_newtable(L);
	for (k = 0; names[k]; k++) {
		lua_pushstring(L, names[k]);
		lua_rawseti(L, -2, k + 1);
	}
}

static const char *ph_name(uint8_t ph)
{
	switch (ph) {
	case TRACE_PH_INSTANT: return "i";
	case TRACE_PH_FLOW_START: return "s";
	case TRACE_PH_FLOW_END: return "f";
	default: return "X";
	}
}

/* Name of thread (pid, tid), or NULL. */
static const char *thread_name(const struct trace *t, int32_t pid, int32_t tid)
{
	size_t i;

	for (i = 0; i < t->nthreads; i++)
		if (t->threads[i].tid == tid && t->threads[i].pid == pid)
			return trace_str(t, t->threads[i].name);
	for (i = 0; i < t->nthreads; i++)
		if (t->threads[i].tid == tid)
			return trace_str(t, t->threads[i].name);
	return NULL;
}

/* ------------------------------------------------------------ events */

/* Pushes the table of one event. */
static void push_event(lua_State *L, const struct trace_lua *tl, const size_t *order,
		       const struct trace_event *ev)
{
	const struct trace *t = tl->t;
	size_t n = 0, i;
	long s;

	lua_createtable(L, 0, 12);
	lua_pushlstring(L, trace_str(t, ev->name), strtab_len(&t->names, ev->name));
	lua_setfield(L, -2, "name");
	set_str(L, "cat", trace_lua_cat_name(ev->cat));
	set_str(L, "ph", ph_name(ev->ph));
	set_int(L, "ts", ev->ts);
	set_int(L, "dur", ev->dur);
	set_int(L, "pid", ev->pid);
	set_int(L, "tid", ev->tid);
	if (ev->id)
		set_int(L, "id", (lua_Integer)ev->id);
	s = query_step_at(t, order, ev->ts);
	if (s >= 0)
		set_int(L, "step", (lua_Integer)t->steps[s].step);
	if (ev->flags & TRACE_F_STEP)
		set_bool(L, "is_step", 1);
	if (ev->flags & TRACE_F_PARTIAL)
		set_bool(L, "partial", 1);
	if (ev->flags & TRACE_F_CLIPPED_START)
		set_bool(L, "clipped_start", 1);
	if (ev->flags & TRACE_F_CLIPPED_END)
		set_bool(L, "clipped_end", 1);
	if (ev->nargs && ev->args <= t->nargs && ev->nargs <= t->nargs - ev->args)
		n = ev->nargs;
	lua_createtable(L, 0, (int)n);
	for (i = 0; i < n; i++) {
		const struct trace_arg *a = &t->args[ev->args + i];

		lua_pushlstring(L, trace_str(t, a->key), strtab_len(&t->names, a->key));
		switch (a->type) {
		case TRACE_ARG_INT: lua_pushinteger(L, a->v.i); break;
		case TRACE_ARG_UINT:
			if (a->v.u <= (uint64_t)INT64_MAX)
				lua_pushinteger(L, (lua_Integer)a->v.u);
			else
				lua_pushnumber(L, (double)a->v.u);
			break;
		case TRACE_ARG_DOUBLE: lua_pushnumber(L, a->v.d); break;
		default:
			lua_pushlstring(L, trace_str(t, a->v.str),
					strtab_len(&t->names, a->v.str));
		}
		lua_rawset(L, -3);
	}
	lua_setfield(L, -2, "args");
}

/* The iterator state: the filter and a cursor. Upvalue 1: the trace
 * object, 2: this state, 3..: the filter's userdata (kept alive). */
struct ev_iter {
	struct query_filter f;
	size_t next;
	size_t *order;  /* step order, malloc'd: freed at the end */
};

static int ev_iter_gc(lua_State *L)
{
	struct ev_iter *it = lua_touserdata(L, 1);

	free(it->order);
	it->order = NULL;
	return 0;
}

static int events_next(lua_State *L)
{
	struct trace_lua *tl = lua_touserdata(L, lua_upvalueindex(1));
	struct ev_iter *it = lua_touserdata(L, lua_upvalueindex(2));
	int64_t dur;

	if (!tl->t)
		return luaL_error(L, "the trace object is only valid during its on_trace_ready call");
	while (it->next < tl->t->nev) {
		const struct trace_event *ev = &tl->t->ev[it->next++];

		if (query_match(tl->t, &it->f, ev, &dur)) {
			push_event(L, tl, it->order, ev);
			return 1;
		}
	}
	free(it->order);
	it->order = NULL;
	return 0;
}

/* trace:events{filter} -> iterator over event tables. */
static int tl_events(lua_State *L)
{
	struct trace_lua *tl = trace_lua_check(L);
	int base, n;
	struct ev_iter *it;
	struct query_filter f;

	lua_settop(L, 2);
	trace_lua_opt_table(L, 2, "trace:events");
	trace_lua_check_keys(L, 2, "trace:events", true, NULL);
	base = lua_gettop(L);
	trace_lua_read_filter(L, tl, 2, "trace:events", &f);
	n = lua_gettop(L) - base;   /* userdata holding the filter's arrays */
	lua_pushvalue(L, 1);
	lua_insert(L, base + 1);
	it = lua_newuserdatauv(L, sizeof *it, 0);
	it->f = f;
	it->next = 0;
	it->order = NULL;
	lua_createtable(L, 0, 1);
	lua_pushcfunction(L, ev_iter_gc);
	lua_setfield(L, -2, "__gc");
	lua_setmetatable(L, -2);
	lua_insert(L, base + 2);
	it->order = query_step_order(tl->t);
	lua_pushcclosure(L, events_next, 2 + n);
	return 1;
}

/* ------------------------------------------------------------ aggregate */

static const char *const by_names[] = { "name", "cat", "thread", "stream", "step", NULL };
static const char *const sort_names[] = { "total", "count", "avg", "min", "max",
					  "med", "std", "key", NULL };

/* Pushes rows of an aggregate result (an array with .columns, .total,
 * .count, .groups). */
static void push_rows(lua_State *L, const struct trace_lua *tl,
		      const struct query_agg_opts *o, const struct query_result *r)
{
	const struct trace *t = tl->t;
	static const char *const cols_name[] = { "name", "count", "total", "share",
						 "avg", "med", "min", "max", "std", NULL };
	static const char *const cols_thread[] = { "name", "pid", "tid", "count", "total",
						   "share", "avg", "med", "min", "max", "std", NULL };
	static const char *const cols_step[] = { "step", "count", "total", "share",
						 "avg", "med", "min", "max", "std", NULL };
	const char *const *cols = o->by == QUERY_BY_STEP ? cols_step
				 : (o->by == QUERY_BY_THREAD || o->by == QUERY_BY_STREAM)
				   ? cols_thread : cols_name;
	size_t i;

	lua_createtable(L, (int)r->nrows, 0);
	for (i = 0; i < r->nrows; i++) {
		const struct query_row *row = &r->rows[i];
		char buf[64];

		lua_createtable(L, 0, 14);
		switch (o->by) {
		case QUERY_BY_NAME:
			lua_pushlstring(L, trace_str(t, row->name), strtab_len(&t->names, row->name));
			lua_pushvalue(L, -1);
			lua_setfield(L, -3, "key");
			lua_setfield(L, -2, "name");
			break;
		case QUERY_BY_CAT:
			set_str(L, "key", trace_lua_cat_name(row->cat));
			set_str(L, "name", trace_lua_cat_name(row->cat));
			break;
		case QUERY_BY_STEP:
			set_int(L, "key", (lua_Integer)row->step);
			set_int(L, "step", (lua_Integer)row->step);
			snprintf(buf, sizeof buf, "ProfilerStep#%llu", (unsigned long long)row->step);
			set_str(L, "name", buf);
			break;
		default: {
			const char *tn = o->by == QUERY_BY_THREAD
					 ? thread_name(t, row->pid, row->tid) : NULL;

			set_int(L, "key", row->tid);
			set_int(L, "pid", row->pid);
			set_int(L, "tid", row->tid);
			if (tn && *tn) {
				set_str(L, "name", tn);
			} else {
				if (o->by == QUERY_BY_STREAM)
					snprintf(buf, sizeof buf, "device %d stream %d",
						 (int)row->pid, (int)row->tid);
				else
					snprintf(buf, sizeof buf, "thread %d", (int)row->tid);
				set_str(L, "name", buf);
			}
		}
		}
		set_int(L, "count", (lua_Integer)row->count);
		set_value(L, "total", row->total);
		set_num(L, "share", r->total > 0 ? row->total / r->total : 0);
		set_num(L, "avg", row->avg);
		set_num(L, "med", row->med);
		set_value(L, "min", row->min);
		set_value(L, "max", row->max);
		set_num(L, "std", row->std);
		set_int(L, "dur", row->dur);
		set_int(L, "first_ts", row->first_ts);
		lua_rawseti(L, -2, (lua_Integer)i + 1);
	}
	lua_createtable(L, 0, 4);
	push_names(L, cols);
	lua_setfield(L, -2, "columns");
	set_value(L, "total", r->total);
	set_int(L, "count", (lua_Integer)r->count);
	set_int(L, "groups", (lua_Integer)r->ngroups);
	set_summary_fields(L);
}

/* trace:aggregate{filter, by =, sum =, self =, sort =, limit =} -> rows. */
static int tl_aggregate(lua_State *L)
{
	static const char *const extra[] = { "by", "sum", "self", "sort", "limit", NULL };
	struct trace_lua *tl = trace_lua_check(L);
	struct query_agg_opts o;
	struct query_result *r;
	struct box *b;
	struct err e;
	lua_Integer limit;

	memset(&o, 0, sizeof o);
	lua_settop(L, 2);
	trace_lua_opt_table(L, 2, "trace:aggregate");
	trace_lua_check_keys(L, 2, "trace:aggregate", true, extra);
	o.by = (enum query_by)trace_lua_opt_choice(L, 2, "trace:aggregate", "by", by_names, 0);
	o.sort = (enum query_sort)trace_lua_opt_choice(L, 2, "trace:aggregate", "sort",
						       sort_names, 0);
	if (lua_getfield(L, 2, "sum") != LUA_TNIL) {
		if (lua_type(L, -1) != LUA_TSTRING)
			return trace_lua_bad_option(L, "trace:aggregate", "sum", -1,
						    "\"dur\" or the name of a numeric argument");
		if (strcmp(lua_tostring(L, -1), "dur") != 0)
			o.sum_arg = lua_tostring(L, -1); /* stays on the stack */
	}
	o.self = trace_lua_opt_bool(L, 2, "trace:aggregate", "self", false);
	limit = trace_lua_opt_int(L, 2, "trace:aggregate", "limit", 0, 0, LUA_MAXINTEGER);
	o.limit = (size_t)limit;
	trace_lua_read_filter(L, tl, 2, "trace:aggregate", &o.filter);
	if (o.self && (o.sum_arg || o.filter.has_range || o.filter.within))
		return luaL_error(L, "trace:aggregate: 'self = true' cannot be combined with "
				  "'sum' or a time range ('step', 'from', 'to', 'within')");
	b = push_box(L);
	r = box_alloc(L, b, sizeof *r, free_result);
	if (query_aggregate(tl->t, &o, r, &e) != 0)
		return luaL_error(L, "trace:aggregate: %s", e.msg);
	push_rows(L, tl, &o, r);
	box_done(b);
	return 1;
}

/* ------------------------------------------------------------ key_averages */

static void free_key_avg(void *p)
{
	key_averages_free(p);
	free(p);
}

/* Pushes the row's call stack entries (innermost first) as a list. */
static void push_stack_entries(lua_State *L, const struct key_avg_key_extra *x)
{
	const char *p = x->stack, *end = x->stack + x->stack_len, *semi;
	lua_Integer k = 0;

	lua_newtable(L);
	while (p && x->stack_len && p <= end) {
		semi = memchr(p, ';', (size_t)(end - p));
		lua_pushlstring(L, p, (size_t)((semi ? semi : end) - p));
		lua_rawseti(L, -2, ++k);
		if (!semi)
			break;
		p = semi + 1;
	}
}

/* Pushes row i of trace:key_averages (times in ns). */
static void push_key_avg_row(lua_State *L, const struct key_avg_table *tab, size_t i)
{
	const struct key_avg_row *r = &tab->rows[i];
	struct key_avg_key_extra x = key_averages_row_extra(tab, i);
	char *shapes;

	lua_createtable(L, 0, 16);
	set_str(L, "key", r->key);
	set_str(L, "name", r->key);
	if (tab->by_input_shape && x.shapes) {
		shapes = key_averages_row_shapes(tab, i);
		if (!shapes)
			luaL_error(L, "trace:key_averages: out of memory");
		lua_pushstring(L, shapes);
		free(shapes);
		lua_setfield(L, -2, "input_shapes");
	}
	if (tab->stack_n && x.stack) {
		push_stack_entries(L, &x);
		lua_setfield(L, -2, "stack");
	}
	set_int(L, "count", (lua_Integer)r->count);
	set_int(L, "self_cpu", r->self_cpu_ns);
	set_num(L, "self_cpu_share", tab->self_cpu_sum_ns > 0
		? (double)r->self_cpu_ns / (double)tab->self_cpu_sum_ns : 0);
	set_int(L, "cpu_total", r->cpu_total_ns);
	set_num(L, "cpu_avg", r->count ? (double)r->cpu_total_ns / (double)r->count : 0);
	set_int(L, "self_cuda", r->self_cuda_ns);
	set_int(L, "cuda_total", r->cuda_total_ns);
	set_num(L, "cuda_avg", r->count ? (double)r->cuda_total_ns / (double)r->count : 0);
	set_int(L, "flops", (lua_Integer)r->flops);
	set_int(L, "first_ts", r->first_ts);
}

/* trace:key_averages{sort_by =, row_limit =, group_by =,
 * group_by_input_shape =, group_by_stack_n =} -> rows, as key_averages.txt
 * holds them (src/export/key_averages.h), and rows.text, the table torch
 * prints. */
static int tl_key_averages(lua_State *L)
{
	static const char *const keys[] = { "sort_by", "row_limit", "group_by",
					    "group_by_input_shape", "group_by_stack_n", NULL };
	static const char *const groups[] = { "name", "domain", NULL };
	static const char *const cols[] = { "name", "input_shapes", "count", "self_cpu",
					    "self_cpu_share", "cpu_total", "cpu_avg", "self_cuda",
					    "cuda_total", "cuda_avg", "flops", NULL };
	struct trace_lua *tl = trace_lua_check(L);
	enum key_avg_sort sort = KEY_AVG_SORT_SELF_CPU_TIME_TOTAL;
	struct key_avg_opts o = { KEY_AVG_BY_NAME, false, 0 };
	struct key_avg_table *tab;
	struct box *b;
	struct err e;
	size_t limit, n, i;
	char *text;

	lua_settop(L, 2);
	trace_lua_opt_table(L, 2, "trace:key_averages");
	trace_lua_check_keys(L, 2, "trace:key_averages", false, keys);
	if (lua_getfield(L, 2, "sort_by") != LUA_TNIL &&
	    (lua_type(L, -1) != LUA_TSTRING ||
	     key_averages_parse_sort(lua_tostring(L, -1), &sort, &e) != 0))
		return trace_lua_bad_option(L, "trace:key_averages", "sort_by", -1,
					    "one of \"self_cpu_time_total\", \"cpu_time_total\", "
					    "\"cpu_time\", \"count\", \"self_cuda_time_total\", "
					    "\"cuda_time_total\", \"cuda_time\"");
	lua_pop(L, 1);
	o.group = (enum key_avg_group)trace_lua_opt_choice(L, 2, "trace:key_averages", "group_by",
							   groups, 0);
	o.by_input_shape = trace_lua_opt_bool(L, 2, "trace:key_averages",
					      "group_by_input_shape", false);
	o.stack_n = (uint32_t)trace_lua_opt_int(L, 2, "trace:key_averages", "group_by_stack_n",
						0, 0, KEY_AVG_STACK_N_MAX);
	limit = (size_t)trace_lua_opt_int(L, 2, "trace:key_averages", "row_limit", 0, 0,
					  LUA_MAXINTEGER);
	b = push_box(L);
	tab = box_alloc(L, b, sizeof *tab, free_key_avg);
	if (key_averages_build_with(tl->t, &o, sort, limit, tab, &e) != 0)
		return luaL_error(L, "trace:key_averages: %s", e.msg);
	n = limit && limit < tab->nrows ? limit : tab->nrows;
	lua_createtable(L, (int)n, 0);
	for (i = 0; i < n; i++) {
		push_key_avg_row(L, tab, i);
		lua_rawseti(L, -2, (lua_Integer)i + 1);
	}
	lua_createtable(L, 0, 6);
	push_names(L, cols);
	lua_setfield(L, -2, "columns");
	set_int(L, "self_cpu_total", tab->self_cpu_sum_ns);
	set_int(L, "self_cuda_total", tab->self_cuda_sum_ns);
	set_int(L, "groups", (lua_Integer)(tab->nrows + tab->nfolded));
	text = key_averages_format(tab, limit);
	box_done(b); /* the table; the box holds the text now */
	if (!text)
		return luaL_error(L, "trace:key_averages: out of memory");
	b->p = text;
	b->fn = free;
	lua_pushstring(L, text);
	lua_setfield(L, -2, "text");
	box_done(b);
	set_summary_fields(L);
	return 1;
}

/* ------------------------------------------------------------ steps */

/* Pushes trace:phases()'s rows for `sum`: {phase, name, total, avg,
 * share} per phase (none when no step has phases), with steps, partial,
 * total (the steps' time) and columns as summary fields. */
static void push_phase_rows(lua_State *L, const struct query_phase_sum *sum)
{
	static const char *const cols[] = { "phase", "total", "avg", "share", NULL };
	int p;

	lua_createtable(L, sum->steps ? QUERY_PHASE_COUNT : 0, 0);
	for (p = 0; sum->steps && p < QUERY_PHASE_COUNT; p++) {
		lua_createtable(L, 0, 5);
		set_str(L, "phase", query_phase_name((enum query_phase)p));
		set_str(L, "name", query_phase_name((enum query_phase)p));
		set_int(L, "total", sum->phase[p]);
		set_num(L, "avg", (double)sum->phase[p] / (double)sum->steps);
		set_num(L, "share", query_phase_share(sum, (enum query_phase)p));
		lua_rawseti(L, -2, p + 1);
	}
	lua_createtable(L, 0, 4);
	set_int(L, "steps", (lua_Integer)sum->steps);
	set_bool(L, "partial", sum->partial);
	set_int(L, "total", sum->total);
	push_names(L, cols);
	lua_setfield(L, -2, "columns");
	set_summary_fields(L);
}

/* Pushes the object's cached field `key` ("steps" or "phases"), computing
 * the step table and the phase rows (query_steps, query_phase_summary)
 * on first use. Cached in the object's user value. */
static void push_steps_field(lua_State *L, struct trace_lua *tl, const char *key)
{
	struct query_step *steps = NULL;
	struct query_phase_sum sum;
	size_t n = 0, i;
	struct err e;
	struct box *b;
	int p, cache;

	lua_getiuservalue(L, 1, 1);
	cache = lua_gettop(L);
	if (lua_getfield(L, cache, key) != LUA_TNIL) {
		lua_remove(L, cache);
		return;
	}
	lua_pop(L, 1);
	b = push_box(L);
	if (query_steps(tl->t, &steps, &n, &e) != 0)
		luaL_error(L, "trace.steps: %s", e.msg);
	b->p = steps;
	b->fn = free;
	lua_createtable(L, (int)n, 0);
	for (i = 0; i < n; i++) {
		const struct query_step *s = &steps[i];

		lua_createtable(L, 0, 8);
		set_int(L, "step", (lua_Integer)s->step);
		set_int(L, "ts", s->ts);
		set_int(L, "dur", s->dur);
		set_int(L, "tid", s->tid);
		set_bool(L, "partial", s->partial);
		set_bool(L, "has_phases", s->has_phases);
		lua_createtable(L, 0, QUERY_PHASE_COUNT);
		for (p = 0; p < QUERY_PHASE_COUNT; p++)
			set_int(L, query_phase_name((enum query_phase)p), s->phase[p]);
		lua_setfield(L, -2, "phases");
		lua_createtable(L, 0, QUERY_PHASE_COUNT);
		for (p = 0; p < QUERY_PHASE_COUNT; p++)
			if (s->phase_mask & 1u << p)
				set_int(L, query_phase_name((enum query_phase)p),
					s->phase_start[p]);
		lua_setfield(L, -2, "starts");
		lua_createtable(L, 0, QUERY_PHASE_COUNT);
		for (p = 0; p < QUERY_PHASE_COUNT; p++)
			if (s->phase_mask & 1u << p)
				set_int(L, query_phase_name((enum query_phase)p),
					s->phase_end[p]);
		lua_setfield(L, -2, "ends");
		lua_rawseti(L, -2, (lua_Integer)i + 1);
	}
	lua_setfield(L, cache, "steps");
	query_phase_summary(steps, n, &sum);
	push_phase_rows(L, &sum);
	lua_setfield(L, cache, "phases");
	box_done(b);
	lua_settop(L, cache);
	lua_getfield(L, cache, key);
	lua_remove(L, cache);
}

/* trace:phases() -> rows {phase, total, avg, share} over the steps
 * query_phase_summary counts (see query.h); empty when no step has
 * phases. */
static int tl_phases(lua_State *L)
{
	struct trace_lua *tl = trace_lua_check(L);

	lua_settop(L, 1);
	push_steps_field(L, tl, "phases");
	return 1;
}

/* ------------------------------------------------------------ during */

/* Pushes {total, ranges = rows {name, time, share}, phases = {...}} for
 * thread (pid, tid) over `iv`. */
static void push_during(lua_State *L, const struct trace_lua *tl, int32_t pid,
			int32_t tid, const struct query_interval *iv, size_t niv,
			size_t limit)
{
	const struct trace *t = tl->t;
	struct box *b = push_box(L);
	struct query_during *d = box_alloc(L, b, sizeof *d, free_during);
	struct err e;
	size_t i, n;
	int p;

	if (query_during(t, pid, tid, iv, niv, d, &e) != 0)
		luaL_error(L, "trace:during: %s", e.msg);
	n = limit && limit < d->nrange ? limit : d->nrange;
	lua_createtable(L, 0, 4);
	set_int(L, "total", d->total);
	set_int(L, "tid", tid);
	lua_createtable(L, (int)n, 0);
	for (i = 0; i < n; i++) {
		const struct query_row *r = &d->by_range[i];

		lua_createtable(L, 0, 3);
		if (r->name == STRTAB_NONE)
			set_str(L, "name", "(no range)");
		else if (r->name == QUERY_NAME_OTHER)
			set_str(L, "name", "(other names)");
		else {
			lua_pushlstring(L, trace_str(t, r->name), strtab_len(&t->names, r->name));
			lua_setfield(L, -2, "name");
		}
		set_value(L, "time", r->total);
		set_num(L, "share", d->total > 0 ? r->total / (double)d->total : 0);
		lua_rawseti(L, -2, (lua_Integer)i + 1);
	}
	lua_setfield(L, -2, "ranges");
	lua_createtable(L, 0, QUERY_PHASE_COUNT + 1);
	for (p = 0; p < QUERY_PHASE_COUNT; p++)
		set_int(L, query_phase_name((enum query_phase)p), d->phase[p]);
	set_int(L, "none", d->phase[QUERY_PHASE_COUNT]);
	lua_setfield(L, -2, "phases");
	box_done(b);
	lua_remove(L, -2);
}


/* trace:during{thread =, within = {...}, limit =} -> what the thread was
 * doing in those intervals. */
static int tl_during(lua_State *L)
{
	static const char *const extra[] = { "limit", NULL };
	struct trace_lua *tl = trace_lua_check(L);
	const struct query_interval *iv = NULL;
	size_t niv = 0;
	lua_Integer limit;
	int32_t tid;

	lua_settop(L, 2);
	if (!lua_istable(L, 2))
		return luaL_error(L, "trace:during: expected a table of options (e.g. { within = "
				  "trace:busy().gaps } or { from = , to = }), got %s",
				  trace_lua_describe(L, 2));
	trace_lua_check_keys(L, 2, "trace:during", true, extra);
	tid = trace_lua_opt_thread(L, tl, 2, "trace:during");
	limit = trace_lua_opt_int(L, 2, "trace:during", "limit", 0, 0, LUA_MAXINTEGER);
	if (lua_getfield(L, 2, "within") != LUA_TNIL) {
		if (!lua_istable(L, 3))
			return trace_lua_bad_option(L, "trace:during", "within", 3,
						    "a list of { ts = , dur = } intervals");
		iv = trace_lua_read_within(L, 3, "trace:during", &niv);
	} else {
		struct query_interval *w;
		int64_t from, to;

		lua_pop(L, 1);
		if (lua_getfield(L, 2, "from") == LUA_TNIL ||
		    lua_getfield(L, 2, "to") == LUA_TNIL)
			return luaL_error(L, "trace:during: give 'within' (a list of intervals) "
					  "or both 'from' and 'to'");
		lua_settop(L, 2);
		from = trace_lua_opt_int(L, 2, "trace:during", "from", 0, LUA_MININTEGER,
					 LUA_MAXINTEGER);
		to = trace_lua_opt_int(L, 2, "trace:during", "to", 0, LUA_MININTEGER,
				       LUA_MAXINTEGER);
		w = lua_newuserdatauv(L, sizeof *w, 0);
		w->ts = from;
		w->dur = to > from ? to - from : 0;
		iv = w;
		niv = 1;
	}
	push_during(L, tl, tl->t->meta.pid, tid, iv, niv, (size_t)limit);
	return 1;
}

/* ------------------------------------------------------------ busy */

static void push_iv(lua_State *L, const struct trace_lua *tl, const size_t *order,
		    const struct query_interval *iv)
{
	long s = query_step_at(tl->t, order, iv->ts);

	lua_createtable(L, 0, 3);
	set_int(L, "ts", iv->ts);
	set_int(L, "dur", iv->dur);
	if (s >= 0)
		set_int(L, "step", (lua_Integer)tl->t->steps[s].step);
}

/* Reads trace:busy's options (the table at 2) into *o; returns the
 * thread whose doings during the gaps it reports. Leaves 2 on top. */
static int32_t read_busy_opts(lua_State *L, struct trace_lua *tl,
			      struct query_busy_opts *o)
{
	static const char *const keys[] = { "cat", "pid", "buckets", "gaps", "window",
					    "thread", NULL };
	struct query_filter f;

	memset(o, 0, sizeof *o);
	lua_settop(L, 2);
	trace_lua_opt_table(L, 2, "trace:busy");
	trace_lua_check_keys(L, 2, "trace:busy", false, keys); /* some of the filter keys */
	if (lua_getfield(L, 2, "cat") != LUA_TNIL) {
		lua_createtable(L, 0, 1);
		lua_insert(L, -2);
		lua_setfield(L, -2, "cat");
		trace_lua_read_filter(L, tl, lua_gettop(L), "trace:busy", &f);
		o->cats = f.cats;
	}
	lua_settop(L, 2);
	if (lua_getfield(L, 2, "pid") != LUA_TNIL) {
		o->has_pid = true;
		o->pid = (int32_t)trace_lua_opt_int(L, 2, "trace:busy", "pid", 0, INT32_MIN,
						    INT32_MAX);
	}
	lua_pop(L, 1);
	o->buckets = (size_t)trace_lua_opt_int(L, 2, "trace:busy", "buckets", 0, 0, 100000);
	o->max_gaps = (size_t)trace_lua_opt_int(L, 2, "trace:busy", "gaps", 10, 0,
						LUA_MAXINTEGER);
	o->whole_window = trace_lua_opt_bool(L, 2, "trace:busy", "window", false);
	return trace_lua_opt_thread(L, tl, 2, "trace:busy");
}

/* Pushes trace:busy's result for *r: the totals, the buckets, the gaps
 * (each with what thread `tid` did, when there were events) and what it
 * did over all the idle time. `order`: query_step_order's. */
static void push_busy(lua_State *L, const struct trace_lua *tl,
		      const struct query_busy *r, const size_t *order, int32_t tid)
{
	size_t i;

	lua_createtable(L, 0, 12);
	set_int(L, "start", r->start);
	set_int(L, "end", r->end);
	set_int(L, "span", r->span);
	set_int(L, "busy", r->busy);
	set_int(L, "idle", r->idle);
	set_int(L, "events", (lua_Integer)r->events);
	set_num(L, "utilization", r->span > 0 ? (double)r->busy / (double)r->span : 0);
	set_int(L, "bucket_ns", r->bucket_ns);
	lua_createtable(L, (int)r->nbuckets, 0);
	for (i = 0; i < r->nbuckets; i++) {
		lua_pushnumber(L, r->bucket[i]);
		lua_rawseti(L, -2, (lua_Integer)i + 1);
	}
	lua_setfield(L, -2, "buckets");
	lua_createtable(L, (int)r->ngaps, 0);
	for (i = 0; i < r->ngaps; i++) {
		push_iv(L, tl, order, &r->gaps[i]);
		if (r->events > 0) {
			push_during(L, tl, tl->t->meta.pid, tid, &r->gaps[i], 1, 3);
			lua_setfield(L, -2, "cpu");
		}
		lua_rawseti(L, -2, (lua_Integer)i + 1);
	}
	lua_setfield(L, -2, "gaps");
	set_int(L, "nidle", (lua_Integer)r->nidle);
	set_int(L, "tid", tid);
	if (r->nidle > 0) {
		push_during(L, tl, tl->t->meta.pid, tid, r->idle_iv, r->nidle, 10);
		lua_setfield(L, -2, "cpu");
	}
}

/* trace:busy{cat =, pid =, buckets =, gaps =, window =, thread =} -> busy
 * and idle time of the GPU (or the given categories), the largest gaps,
 * and what the thread was doing while the GPU was idle. */
static int tl_busy(lua_State *L)
{
	struct trace_lua *tl = trace_lua_check(L);
	struct query_busy_opts o;
	struct query_busy *r;
	struct box *b, *ob;
	struct err e;
	int32_t tid = read_busy_opts(L, tl, &o);

	b = push_box(L);                 /* 3 */
	r = box_alloc(L, b, sizeof *r, free_busy);
	if (query_busy(tl->t, &o, r, &e) != 0)
		return luaL_error(L, "trace:busy: %s", e.msg);
	ob = push_box(L);                /* 4 */
	ob->p = query_step_order(tl->t);
	ob->fn = free;
	push_busy(L, tl, r, ob->p, tid); /* 5 */
	box_done(b);
	box_done(ob);
	return 1;
}

/* ------------------------------------------------------------ samples */

/* Pushes the nodes of `tree` breadth-first, so a node limit keeps the
 * big picture, into the list at `nodes_tab` (each {name, value, self,
 * children = {}}): at most max_nodes (more: tree->truncated), their
 * indices in the tree into queue[] in that order. Returns how many. */
static size_t push_sample_nodes(lua_State *L, struct query_tree *tree,
				size_t max_nodes, uint32_t *queue, int nodes_tab)
{
	size_t pushed = 1, head;

	queue[0] = 0;
	for (head = 0; head < pushed; head++) {
		const struct query_node *nd = &tree->nodes[queue[head]];
		uint32_t c;

		lua_createtable(L, 0, 5);
		lua_pushlstring(L, nd->name, nd->len);
		lua_setfield(L, -2, "name");
		set_value(L, "value", nd->value);
		set_value(L, "self", nd->self);
		lua_newtable(L);
		lua_setfield(L, -2, "children");
		lua_rawseti(L, nodes_tab, (lua_Integer)head + 1);
		for (c = nd->first_child; c != UINT32_MAX; c = tree->nodes[c].next_sibling)
			if (pushed < max_nodes)
				queue[pushed++] = c;
			else
				tree->truncated = true;
	}
	return pushed;
}

/* Attaches each of the `pushed` nodes of the list at `nodes_tab` but the
 * root to its parent's children, in queue order: a node's parent came
 * earlier. */
static void link_sample_nodes(lua_State *L, const struct query_tree *tree,
			      const uint32_t *queue, size_t pushed, int nodes_tab)
{
	uint32_t *pos = lua_newuserdatauv(L, tree->n * sizeof *pos, 0);
	size_t i;

	for (i = 0; i < tree->n; i++)
		pos[i] = UINT32_MAX;
	for (i = 0; i < pushed; i++)
		pos[queue[i]] = (uint32_t)i;
	for (i = 1; i < pushed; i++) {
		uint32_t parent = tree->nodes[queue[i]].parent;

		lua_rawgeti(L, nodes_tab, (lua_Integer)pos[parent] + 1);
		lua_getfield(L, -1, "children");
		lua_rawgeti(L, nodes_tab, (lua_Integer)i + 1);
		lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
		lua_pop(L, 2);
	}
	lua_pop(L, 1);
}

/* trace:samples{filter, max_nodes =} -> the sample tree {name, value,
 * self, children = {...}} with .samples and .truncated. */
static int tl_samples(lua_State *L)
{
	static const char *const extra[] = { "max_nodes", NULL };
	struct trace_lua *tl = trace_lua_check(L);
	struct query_filter f;
	struct query_tree *tree;
	struct box *b;
	struct err e;
	lua_Integer max_nodes;
	size_t pushed;
	uint32_t *queue;
	int nodes_tab;

	lua_settop(L, 2);
	trace_lua_opt_table(L, 2, "trace:samples");
	trace_lua_check_keys(L, 2, "trace:samples", true, extra);
	max_nodes = trace_lua_opt_int(L, 2, "trace:samples", "max_nodes", TL_SAMPLE_NODES, 1,
				      QUERY_TREE_MAX);
	trace_lua_read_filter(L, tl, 2, "trace:samples", &f);
	b = push_box(L);
	tree = box_alloc(L, b, sizeof *tree, free_tree);
	if (query_sample_tree(tl->t, &f, tree, &e) != 0)
		return luaL_error(L, "trace:samples: %s", e.msg);
	queue = lua_newuserdatauv(L, (tree->n + 1) * sizeof *queue, 0);
	lua_createtable(L, (int)(tree->n < (size_t)max_nodes ? tree->n : (size_t)max_nodes), 0);
	nodes_tab = lua_gettop(L);
	pushed = push_sample_nodes(L, tree, (size_t)max_nodes, queue, nodes_tab);
	link_sample_nodes(L, tree, queue, pushed, nodes_tab);
	lua_rawgeti(L, nodes_tab, 1);
	set_int(L, "samples", (lua_Integer)tree->samples);
	set_bool(L, "truncated", tree->truncated);
	box_done(b);
	return 1;
}

/* ------------------------------------------------------------ fields */

static void push_counters(lua_State *L, const struct trace *t)
{
	const struct trace_counters *c = &t->counters;

	lua_createtable(L, 0, 9);
	set_int(L, "events", (lua_Integer)c->events);
	set_int(L, "dropped_buffer", (lua_Integer)c->dropped_buffer);
	set_int(L, "dropped_memory", (lua_Integer)c->dropped_memory);
	set_int(L, "dropped_noslot", (lua_Integer)c->dropped_noslot);
	set_int(L, "unbalanced_pops", (lua_Integer)c->unbalanced_pops);
	set_int(L, "clipped", (lua_Integer)c->clipped);
	set_int(L, "gpu_dropped", (lua_Integer)c->gpu_dropped);
	set_int(L, "dropped_steps", (lua_Integer)c->dropped_steps);
	set_int(L, "windows_skipped", (lua_Integer)c->windows_skipped);
}

static void push_drops(lua_State *L, const struct trace *t)
{
	const struct trace_counters *c = &t->counters;

	lua_createtable(L, 0, 5);
	set_int(L, "buffer", (lua_Integer)c->dropped_buffer);
	set_int(L, "memory", (lua_Integer)c->dropped_memory);
	set_int(L, "noslot", (lua_Integer)c->dropped_noslot);
	set_int(L, "gpu", (lua_Integer)c->gpu_dropped);
	set_int(L, "total", (lua_Integer)(c->dropped_buffer + c->dropped_noslot +
					  c->gpu_dropped));
}

static void push_threads(lua_State *L, const struct trace *t)
{
	size_t i;

	lua_createtable(L, (int)t->nthreads, 0);
	for (i = 0; i < t->nthreads; i++) {
		lua_createtable(L, 0, 3);
		set_int(L, "pid", t->threads[i].pid);
		set_int(L, "tid", t->threads[i].tid);
		set_str(L, "name", trace_str(t, t->threads[i].name));
		lua_rawseti(L, -2, (lua_Integer)i + 1);
	}
}

/* counts[cat name] = events of that category. */
static void push_counts(lua_State *L, const struct trace *t)
{
	uint64_t n[TRACE_CAT_COUNT] = { 0 };
	size_t i;
	unsigned c;

	for (i = 0; i < t->nev; i++)
		if (t->ev[i].cat < TRACE_CAT_COUNT)
			n[t->ev[i].cat]++;
	lua_createtable(L, 0, TRACE_CAT_COUNT);
	for (c = 0; c < TRACE_CAT_COUNT; c++)
		if (n[c])
			set_int(L, trace_lua_cat_name(c), (lua_Integer)n[c]);
}

static const luaL_Reg tl_methods[] = {
	{ "events", tl_events },
	{ "aggregate", tl_aggregate },
	{ "key_averages", tl_key_averages },
	{ "phases", tl_phases },
	{ "busy", tl_busy },
	{ "during", tl_during },
	{ "samples", tl_samples },
	{ "write", trace_lua_write },
	{ "write_table", trace_lua_write_table },
	{ "write_json", trace_lua_write_json },
	{ NULL, NULL }
};

static const char *const tl_fields =
	"rank, world_size, window, first_step, last_step, reason, recorder, program, "
	"hostname, run, pid, start, end, duration, event_count, main_thread, dir, files, "
	"drops, counters, counts, steps, threads";

/* __index: methods, then fields. Cached fields live in user value 1. */
static int tl_index(lua_State *L)
{
	struct trace_lua *tl = luaL_checkudata(L, 1, TRACE_LUA_META);
	const char *k = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : "";
	const struct trace *t;
	const struct trace_meta *m;

	if (lua_getfield(L, lua_upvalueindex(1), k) != LUA_TNIL)
		return 1;
	lua_pop(L, 1);
	t = trace_lua_check(L)->t;
	m = &t->meta;
	if (strcmp(k, "rank") == 0) lua_pushinteger(L, m->rank);
	else if (strcmp(k, "world_size") == 0) lua_pushinteger(L, m->world_size);
	else if (strcmp(k, "window") == 0) lua_pushinteger(L, m->window);
	else if (strcmp(k, "first_step") == 0) lua_pushinteger(L, (lua_Integer)m->first_step);
	else if (strcmp(k, "last_step") == 0) lua_pushinteger(L, (lua_Integer)m->last_step);
	else if (strcmp(k, "reason") == 0) lua_pushstring(L, m->reason ? m->reason : "");
	else if (strcmp(k, "recorder") == 0) lua_pushboolean(L, m->recorder);
	else if (strcmp(k, "program") == 0) lua_pushstring(L, m->program ? m->program : "");
	else if (strcmp(k, "hostname") == 0) lua_pushstring(L, m->hostname ? m->hostname : "");
	else if (strcmp(k, "run") == 0) lua_pushstring(L, m->run ? m->run : "");
	else if (strcmp(k, "pid") == 0) lua_pushinteger(L, m->pid);
	else if (strcmp(k, "start") == 0) lua_pushinteger(L, m->start_ts);
	else if (strcmp(k, "end") == 0) lua_pushinteger(L, m->end_ts);
	else if (strcmp(k, "duration") == 0)
		lua_pushinteger(L, m->end_ts > m->start_ts ? m->end_ts - m->start_ts : 0);
	else if (strcmp(k, "event_count") == 0) lua_pushinteger(L, (lua_Integer)t->nev);
	else if (strcmp(k, "main_thread") == 0) lua_pushinteger(L, tl->main_tid);
	else if (strcmp(k, "dir") == 0) {
		if (tl->dir)
			lua_pushstring(L, tl->dir);
		else
			lua_pushnil(L);
	} else if (strcmp(k, "files") == 0) {
		lua_Integer i;

		lua_newtable(L);
		for (i = 0; tl->files && tl->files[i]; i++) {
			lua_pushstring(L, tl->files[i]);
			lua_rawseti(L, -2, i + 1);
		}
	} else if (strcmp(k, "drops") == 0) push_drops(L, t);
	else if (strcmp(k, "counters") == 0) push_counters(L, t);
	else if (strcmp(k, "counts") == 0) push_counts(L, t);
	else if (strcmp(k, "steps") == 0) {
		lua_settop(L, 1);
		push_steps_field(L, tl, "steps");
	} else if (strcmp(k, "threads") == 0) push_threads(L, t);
	else
		return luaL_error(L, "trace has no field %s%s%s (fields: %s; methods: events, "
				  "aggregate, key_averages, phases, busy, during, samples, write, "
				  "write_table, write_json)", lua_type(L, 2) == LUA_TSTRING ? "'" : "",
				  lua_type(L, 2) == LUA_TSTRING ? k : trace_lua_describe(L, 2),
				  lua_type(L, 2) == LUA_TSTRING ? "'" : "", tl_fields);
	return 1;
}

static int tl_newindex(lua_State *L)
{
	return luaL_error(L, "the trace object is read-only");
}

static int tl_tostring(lua_State *L)
{
	struct trace_lua *tl = luaL_checkudata(L, 1, TRACE_LUA_META);

	if (!tl->t)
		lua_pushliteral(L, "trace (no longer valid)");
	else
		lua_pushfstring(L, "trace (rank %d, window %d, steps %I-%I, %I events)",
				tl->t->meta.rank, (int)tl->t->meta.window,
				(LUAI_UACINT)tl->t->meta.first_step,
				(LUAI_UACINT)tl->t->meta.last_step,
				(LUAI_UACINT)tl->t->nev);
	return 1;
}

void trace_lua_push(lua_State *L, const struct trace *t, const char *dir,
		    const struct outdir *out, const char *const *files)
{
	struct trace_lua *tl = lua_newuserdatauv(L, sizeof *tl, 1);
	size_t i;

	tl->t = t;
	tl->dir = dir;
	tl->out = out;
	tl->files = files;
	tl->main_tid = t->meta.pid;
	for (i = 0; i < t->nsteps; i++)
		if (!t->steps[i].partial || i + 1 == t->nsteps) {
			tl->main_tid = t->steps[i].tid;
			break;
		}
	lua_newtable(L);
	lua_setiuservalue(L, -2, 1);
	if (luaL_newmetatable(L, TRACE_LUA_META)) {
		luaL_newlib(L, tl_methods);
		lua_pushcclosure(L, tl_index, 1);
		lua_setfield(L, -2, "__index");
		lua_pushcfunction(L, tl_newindex);
		lua_setfield(L, -2, "__newindex");
		lua_pushcfunction(L, tl_tostring);
		lua_setfield(L, -2, "__tostring");
		lua_pushliteral(L, "the trace object's metatable is not accessible");
		lua_setfield(L, -2, "__metatable");
	}
	lua_setmetatable(L, -2);
}

void trace_lua_invalidate(lua_State *L, int idx)
{
	struct trace_lua *tl = luaL_testudata(L, idx, TRACE_LUA_META);

	if (tl) {
		tl->t = NULL;
		tl->dir = NULL;
		tl->out = NULL;
		tl->files = NULL;
	}
}

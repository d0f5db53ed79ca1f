/* trace_lua_filter — the arguments the trace object's methods take (see
 * trace_lua_internal.h): the object itself (trace_lua_check, which the
 * object's methods and its writers both call, so it lies below both), the
 * options tables and the filters read from them: checking an options
 * table's keys, reading an option, the one wording of option
 * errors, and turning the filter keys (cat, name, step, thread, pid,
 * from, to, within) into a struct query_filter that src/events/query.c
 * applies. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "../events/query.h"
#include "sandbox.h"
#include "trace_lua_internal.h"

/* The valid trace object at arg 1, or raises. */
struct trace_lua *trace_lua_check(lua_State *L)
{
	struct trace_lua *tl = luaL_testudata(L, 1, TRACE_LUA_META);

	if (!tl)
		luaL_error(L, "trace methods are called with a colon (trace:aggregate{...}, "
			   "not trace.aggregate{...}): the trace object was expected first, got %s",
			   trace_lua_describe(L, 1));
	if (!tl->t)
		luaL_error(L, "the trace object is only valid during its on_trace_ready call");
	return tl;
}

/* ------------------------------------------------------------ categories */

/* The category name reports use: Kineto's, "mark" for marks. */
const char *trace_lua_cat_name(unsigned c)
{
	return c == TRACE_CAT_MARK ? "mark" : trace_cat_name((enum trace_cat)c);
}

/* The category named `s`, or TRACE_CAT_COUNT. */
static unsigned cat_by_name(const char *s)
{
	unsigned c;

	if (strcmp(s, "sample") == 0)
		return TRACE_CAT_SAMPLE;
	for (c = 0; c < TRACE_CAT_COUNT; c++)
		if (strcmp(s, trace_lua_cat_name(c)) == 0)
			return c;
	return TRACE_CAT_COUNT;
}

/* ------------------------------------------------------------ options */

/* Keys every filter takes, then the extra keys of one method. */
static const char *const filter_keys[] = { "cat", "name", "step", "thread",
					   "pid", "from", "to", "within", NULL };

/* Pushes `v` described as prof.schema.describe() does it (`0`, `string
 * "x"`, `boolean true`, `nothing`, `table`), the one wording of values in
 * option errors; the type name when that module is not loaded. */
const char *trace_lua_describe(lua_State *L, int v)
{
	if (lua_isnone(L, v))
		return lua_pushliteral(L, "nothing");
	v = lua_absindex(L, v);
	luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
	if (lua_getfield(L, -1, "prof.schema") == LUA_TTABLE &&
	    lua_getfield(L, -1, "describe") == LUA_TFUNCTION) {
		lua_pushvalue(L, v);
		lua_call(L, 1, 1);
		if (lua_type(L, -1) == LUA_TSTRING) {
			lua_replace(L, -3);
			lua_pop(L, 1);
			return lua_tostring(L, -1);
		}
	}
	lua_settop(L, v);
	return lua_pushstring(L, luaL_typename(L, v));
}

/* Raises "<fn>: '<key>' must be <expected>, got <value>" (the value at
 * index v) at the caller's line: the form of every option error, as in
 * prof.schema. */
int trace_lua_bad_option(lua_State *L, const char *fn, const char *key, int v,
			 const char *expected)
{
	v = lua_absindex(L, v);
	return luaL_error(L, "%s: '%s' must be %s, got %s", fn, key, expected,
			  trace_lua_describe(L, v));
}

/* Pushes `"a", "b", ...` (names NULL-ended) for messages. */
static const char *push_choices(lua_State *L, const char *const *names)
{
	luaL_Buffer b;
	int i;

	luaL_buffinit(L, &b);
	for (i = 0; names[i]; i++) {
		luaL_addstring(&b, i ? ", \"" : "\"");
		luaL_addstring(&b, names[i]);
		luaL_addchar(&b, '"');
	}
	luaL_pushresult(&b);
	return lua_tostring(L, -1);
}

/* Checks that the options table at `idx` has only known keys (the filter
 * keys when `filter`, then `extra`). */
void trace_lua_check_keys(lua_State *L, int idx, const char *fn, bool filter,
			  const char *const *extra)
{
	lua_pushnil(L);
	while (lua_next(L, idx)) {
		const char *k = NULL;
		int i, ok = 0;

		if (lua_type(L, -2) == LUA_TSTRING) {
			k = lua_tostring(L, -2);
			for (i = 0; filter && filter_keys[i] && !ok; i++)
				ok = strcmp(k, filter_keys[i]) == 0;
			for (i = 0; extra && extra[i] && !ok; i++)
				ok = strcmp(k, extra[i]) == 0;
		}
		if (!ok) {
			luaL_Buffer b;

			luaL_buffinit(L, &b);
			for (i = 0; filter && filter_keys[i]; i++) {
				luaL_addstring(&b, i ? ", " : "");
				luaL_addstring(&b, filter_keys[i]);
			}
			for (i = 0; extra && extra[i]; i++) {
				luaL_addstring(&b, i || filter ? ", " : "");
				luaL_addstring(&b, extra[i]);
			}
			luaL_pushresult(&b);
			if (k)
				luaL_error(L, "%s: unknown option '%s' (valid: %s)", fn, k,
					   lua_tostring(L, -1));
			trace_lua_describe(L, -3); /* the key */
			luaL_error(L, "%s: unexpected key %s (write key = value; valid: %s)",
				   fn, lua_tostring(L, -1), lua_tostring(L, -2));
		}
		lua_pop(L, 1);
	}
}

/* The options table at `idx` (absent or nil: a new empty one is put
 * there), or raises naming what was given. */
void trace_lua_opt_table(lua_State *L, int idx, const char *fn)
{
	if (lua_isnoneornil(L, idx)) {
		lua_newtable(L);
		lua_replace(L, idx);
	} else if (!lua_istable(L, idx)) {
		luaL_error(L, "%s: expected a table of options or nothing, got %s", fn,
			   trace_lua_describe(L, idx));
	}
}

/* An integer option from `min` to `max`, or `def` when absent. */
lua_Integer trace_lua_opt_int(lua_State *L, int idx, const char *fn,
			      const char *key, lua_Integer def, lua_Integer min,
			      lua_Integer max)
{
	lua_Integer v;
	int isnum;
	char expected[96];

	if (lua_getfield(L, idx, key) == LUA_TNIL) {
		lua_pop(L, 1);
		return def;
	}
	v = lua_tointegerx(L, -1, &isnum);
	if (isnum && v >= min && v <= max) {
		lua_pop(L, 1);
		return v;
	}
	if (min == LUA_MININTEGER)
		snprintf(expected, sizeof expected, "an integer");
	else if (max == LUA_MAXINTEGER)
		snprintf(expected, sizeof expected, "an integer >= %lld", (long long)min);
	else
		snprintf(expected, sizeof expected, "an integer from %lld to %lld",
			 (long long)min, (long long)max);
	return trace_lua_bad_option(L, fn, key, -1, expected);
}

/* A boolean option, or `def` when absent. */
bool trace_lua_opt_bool(lua_State *L, int idx, const char *fn, const char *key,
			bool def)
{
	int type = lua_getfield(L, idx, key);
	bool v = type == LUA_TNIL ? def : lua_toboolean(L, -1);

	if (type != LUA_TNIL && type != LUA_TBOOLEAN)
		trace_lua_bad_option(L, fn, key, -1, "a boolean");
	lua_pop(L, 1);
	return v;
}

/* The index in `names` of a string option, or `def` when absent. */
int trace_lua_opt_choice(lua_State *L, int idx, const char *fn, const char *key,
			 const char *const *names, int def)
{
	char expected[256];
	int i;

	if (lua_getfield(L, idx, key) == LUA_TNIL) {
		lua_pop(L, 1);
		return def;
	}
	for (i = 0; lua_type(L, -1) == LUA_TSTRING && names[i]; i++)
		if (strcmp(lua_tostring(L, -1), names[i]) == 0) {
			lua_pop(L, 1);
			return i;
		}
	snprintf(expected, sizeof expected, "one of %s", push_choices(L, names));
	return trace_lua_bad_option(L, fn, key, -2, expected);
}

/* ------------------------------------------------------------ filters */

/* Raises a bad 'cat' (the value at v, `what` "'cat'" or "'cat' item N"):
 * the valid category names listed. */
static int bad_cat(lua_State *L, const char *fn, const char *what, int v)
{
	luaL_Buffer b;
	unsigned c;

	v = lua_absindex(L, v);
	luaL_buffinit(L, &b);
	luaL_addstring(&b, "a category name (");
	for (c = 0; c < TRACE_CAT_COUNT; c++) {
		if (c)
			luaL_addstring(&b, ", ");
		luaL_addstring(&b, trace_lua_cat_name(c));
	}
	luaL_addstring(&b, ") or a list of them");
	luaL_pushresult(&b);
	return trace_lua_bad_option(L, fn, what, v, lua_tostring(L, -1));
}

/* The literal text a name matching Lua pattern `pat` (len bytes) must
 * begin with: for a pattern anchored with '^', the bytes after it up to
 * the first magic character (less the last one when a quantifier follows
 * it). 0 when there is none. */
static size_t pattern_prefix(const char *pat, size_t len)
{
	size_t n;

	if (len == 0 || pat[0] != '^')
		return 0;
	for (n = 1; n < len && pat[n] && !strchr("^$*+?.([%-])", pat[n]); n++)
		;
	if (n > 1 && n < len && pat[n] && strchr("*+?-", pat[n]))
		n--;
	return n - 1;
}

/* The names of the trace matching the Lua pattern on top of the stack
 * (replaced by the result: a userdata of a bit per strtab id, as
 * query_filter.name_ok reads it), among those of events of categories
 * `cats` (0: all); a bad pattern raises, naming `fn`. A bit a name, not a
 * byte: the userdata lives until Lua collects it, in a window of millions
 * of names. */
static uint8_t *match_names(lua_State *L, const struct trace *t, uint32_t cats,
			    const char *fn)
{
	uint32_t n = t->names.n ? t->names.n : 1, id;
	uint8_t *ok = lua_newuserdatauv(L, (n + 7) / 8, 0);
	int pat = lua_absindex(L, -2);
	size_t i, plen, pre;
	const char *p = lua_tolstring(L, pat, &plen);

	memset(ok, 0, (n + 7) / 8);
	/* first set for the names of candidate events, to be matched */
	for (i = 0; i < t->nev; i++) {
		const struct trace_event *ev = &t->ev[i];

		if ((!cats || cats >> ev->cat & 1) && ev->name < n)
			ok[ev->name / 8] |= (uint8_t)(1u << ev->name % 8);
	}
	luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
	lua_getfield(L, -1, "string");
	lua_getfield(L, -1, "find");
	lua_replace(L, -3);
	lua_pop(L, 1); /* stack: pattern, ok, find */
	/* A name without the pattern's literal start cannot match: a report
	 * asking for "^ProfilerStep#%d+$" among millions of names calls
	 * string.find for the few that begin so. */
	pre = pattern_prefix(p, plen);
	for (id = 0; id < t->names.n; id++) {
		uint8_t bit = (uint8_t)(1u << id % 8);

		if (!(ok[id / 8] & bit))
			continue;
		if (pre && (t->names.len[id] < pre ||
			    memcmp(t->names.str[id], p + 1, pre) != 0)) {
			ok[id / 8] &= (uint8_t)~bit;
			continue;
		}
		lua_pushvalue(L, -1);
		lua_pushlstring(L, t->names.str[id], t->names.len[id]);
		lua_pushvalue(L, pat);
		int rc = lua_pcall(L, 2, 1, 0);

		if (rc != LUA_OK) {
			const char *why, *given;

			if (rc == LUA_ERRMEM || sandbox_stopping(L))
				lua_error(L); /* the budget's, not the pattern's */
			why = lua_tostring(L, -1);
			given = trace_lua_describe(L, pat);
			luaL_error(L, "%s: 'name' is not a valid Lua pattern (%s), got %s", fn,
				   why, given);
		}
		if (lua_isnil(L, -1))
			ok[id / 8] &= (uint8_t)~bit;
		lua_pop(L, 1);
	}
	lua_pop(L, 1);       /* find */
	lua_remove(L, pat);  /* the pattern */
	return ok;
}

/* Reads `within` = { {ts, dur} or {ts = , dur = }, ... } into a sorted,
 * merged array (a userdata pushed on the stack). */
struct query_interval *trace_lua_read_within(lua_State *L, int idx, const char *fn,
					     size_t *n)
{
	lua_Integer len = luaL_len(L, idx), i;
	struct query_interval *iv;
	size_t m = 0;

	if (len < 0 || (lua_Unsigned)len > SIZE_MAX / sizeof *iv - 1)
		luaL_error(L, "%s: 'within' is too long", fn);
	iv = lua_newuserdatauv(L, ((size_t)len + 1) * sizeof *iv, 0);
	for (i = 1; i <= len; i++) {
		lua_Integer ts = 0, dur = 0;
		int a = 0, b = 0;

		if (lua_geti(L, idx, i) == LUA_TTABLE) {
			if (lua_getfield(L, -1, "ts") == LUA_TNIL) {
				lua_pop(L, 1);
				lua_geti(L, -1, 1);
			}
			if (lua_getfield(L, -2, "dur") == LUA_TNIL) {
				lua_pop(L, 1);
				lua_geti(L, -2, 2);
			}
			ts = lua_tointegerx(L, -2, &a);
			dur = lua_tointegerx(L, -1, &b);
			lua_pop(L, 2);
		}
		if (!a || !b || dur < 0) {
			char key[48];

			snprintf(key, sizeof key, "within[%d]", (int)i);
			trace_lua_bad_option(L, fn, key, -1, "an interval { ts = <integer>, dur = <integer >= 0> }");
		}
		lua_pop(L, 1);
		if (dur > 0) {
			iv[m].ts = ts;
			iv[m].dur = dur;
			m++;
		}
	}
	/* sort (insertion sort is fine for report-sized lists) and merge */
	for (size_t k = 1; k < m; k++) {
		struct query_interval x = iv[k];
		size_t j = k;

		while (j > 0 && iv[j - 1].ts > x.ts) {
			iv[j] = iv[j - 1];
			j--;
		}
		iv[j] = x;
	}
	{
		size_t w = 0;

		for (size_t k = 0; k < m; k++) {
			if (w > 0 && iv[k].ts <= iv[w - 1].ts + iv[w - 1].dur) {
				int64_t end = iv[k].ts + iv[k].dur;

				if (end > iv[w - 1].ts + iv[w - 1].dur)
					iv[w - 1].dur = end - iv[w - 1].ts;
			} else {
				iv[w++] = iv[k];
			}
		}
		m = w;
	}
	*n = m;
	return iv;
}

/* Filter key `cat`: a category name or a list of them, into f->cats. */
static void read_cats(lua_State *L, int idx, const char *fn, struct query_filter *f)
{
	int type = lua_getfield(L, idx, "cat");

	if (type == LUA_TSTRING) {
		unsigned c = cat_by_name(lua_tostring(L, -1));

		if (c == TRACE_CAT_COUNT)
			bad_cat(L, fn, "cat", -1);
		f->cats = 1u << c;
	} else if (type == LUA_TTABLE) {
		lua_Integer i, n = luaL_len(L, -1);

		if (n == 0)
			bad_cat(L, fn, "cat", -1);
		for (i = 1; i <= n; i++) {
			unsigned c = TRACE_CAT_COUNT;
			char key[32];

			if (lua_geti(L, -1, i) == LUA_TSTRING)
				c = cat_by_name(lua_tostring(L, -1));
			if (c == TRACE_CAT_COUNT) {
				snprintf(key, sizeof key, "cat[%d]", (int)i);
				bad_cat(L, fn, key, -1);
			}
			f->cats |= 1u << c;
			lua_pop(L, 1);
		}
	} else if (type != LUA_TNIL) {
		bad_cat(L, fn, "cat", -1);
	}
	lua_pop(L, 1);
}

/* Filter key `name`: a Lua pattern, matched against the names of events
 * of f->cats (read first); leaves match_names' userdata on the stack. */
static void read_name(lua_State *L, const struct trace *t, int idx, const char *fn,
		      struct query_filter *f)
{
	int type = lua_getfield(L, idx, "name");

	if (type == LUA_TSTRING) {
		f->name_ok = match_names(L, t, f->cats, fn);
		f->name_len = t->names.n;
	} else {
		if (type != LUA_TNIL)
			trace_lua_bad_option(L, fn, "name", -1, "a Lua pattern (a string)");
		lua_pop(L, 1);
	}
}

/* Filter key `thread`: a thread id, a thread's name (none of that name:
 * matches nothing) or "main" (the stepping thread unless a thread is
 * named so). */
static void read_thread(lua_State *L, const struct trace_lua *tl, int idx,
			const char *fn, struct query_filter *f)
{
	const struct trace *t = tl->t;
	int type = lua_getfield(L, idx, "thread");

	if (type == LUA_TNUMBER) {
		int isnum;

		f->tid = (int32_t)lua_tointegerx(L, -1, &isnum);
		if (!isnum)
			type = LUA_TNONE; /* a fraction */
		f->has_tid = true;
	} else if (type == LUA_TSTRING) {
		const char *want = lua_tostring(L, -1);
		size_t i;

		f->has_tid = true;
		f->tid = INT32_MIN; /* matches nothing unless found */
		for (i = 0; i < t->nthreads; i++)
			if (strcmp(trace_str(t, t->threads[i].name), want) == 0) {
				f->tid = t->threads[i].tid;
				break;
			}
		if (strcmp(want, "main") == 0 && f->tid == INT32_MIN)
			f->tid = tl->main_tid;
	}
	if (type != LUA_TNIL && type != LUA_TNUMBER && type != LUA_TSTRING)
		trace_lua_bad_option(L, fn, "thread", -1,
				     "a thread id, a thread name or \"main\"");
	lua_pop(L, 1);
}

/* Filter key `pid`: an integer. */
static void read_pid(lua_State *L, int idx, const char *fn, struct query_filter *f)
{
	if (lua_getfield(L, idx, "pid") != LUA_TNIL) {
		f->pid = (int32_t)trace_lua_opt_int(L, idx, fn, "pid", 0, INT32_MIN, INT32_MAX);
		f->has_pid = true;
	}
	lua_pop(L, 1);
}

/* Filter key `step`: the time range of that step (an unknown step: an
 * empty range). */
static void read_step(lua_State *L, const struct trace *t, int idx, const char *fn,
		      struct query_filter *f)
{
	if (lua_getfield(L, idx, "step") != LUA_TNIL) {
		lua_Integer want = trace_lua_opt_int(L, idx, fn, "step", 0, 0, LUA_MAXINTEGER);
		size_t i;

		f->has_range = true;
		f->from = f->to = 0; /* an unknown step matches nothing */
		for (i = 0; i < t->nsteps; i++)
			if ((lua_Integer)t->steps[i].step == want) {
				f->from = t->steps[i].ts;
				f->to = t->steps[i].ts + t->steps[i].dur;
				break;
			}
	}
	lua_pop(L, 1);
}

/* Filter keys `from` and `to`: a time range, narrowed to the step's when
 * `step` gave one (read first). */
static void read_range(lua_State *L, int idx, const char *fn, struct query_filter *f)
{
	int64_t from = trace_lua_opt_int(L, idx, fn, "from", INT64_MIN, LUA_MININTEGER,
					 LUA_MAXINTEGER);
	int64_t to = trace_lua_opt_int(L, idx, fn, "to", INT64_MAX, LUA_MININTEGER,
				       LUA_MAXINTEGER);

	if (from == INT64_MIN && to == INT64_MAX)
		return;
	if (f->has_range) {
		if (from < f->from)
			from = f->from;
		if (to > f->to)
			to = f->to;
	}
	f->has_range = true;
	f->from = from;
	f->to = to > from ? to : from;
}

/* Filter key `within`: a list of intervals (trace_lua_read_within, its
 * userdata left on the stack); an empty list matches nothing. */
static void read_within_key(lua_State *L, int idx, const char *fn,
			    struct query_filter *f)
{
	int w;

	if (lua_getfield(L, idx, "within") == LUA_TNIL) {
		lua_pop(L, 1);
		return;
	}
	w = lua_gettop(L);
	if (!lua_istable(L, w))
		trace_lua_bad_option(L, fn, "within", w, "a list of { ts = , dur = } intervals");
	f->within = trace_lua_read_within(L, w, fn, &f->nwithin);
	lua_remove(L, w);
	if (!f->nwithin) {
		/* nothing to look at */
		f->has_range = true;
		f->from = f->to = 0;
		f->within = NULL;
	}
}

/* Reads the filter keys of the options table at `idx` (or none when idx
 * is 0) into *f, in an order that matters: `name` matches among the
 * names of `cat`'s events, `from`/`to` narrow `step`'s range, `within`
 * empty overrides both. Userdata it needs are pushed on the stack and
 * must stay there while *f is used. */
void trace_lua_read_filter(lua_State *L, struct trace_lua *tl, int idx,
			   const char *fn, struct query_filter *f)
{
	memset(f, 0, sizeof *f);
	if (!idx)
		return;
	read_cats(L, idx, fn, f);
	read_name(L, tl->t, idx, fn, f);
	read_thread(L, tl, idx, fn, f);
	read_pid(L, idx, fn, f);
	read_step(L, tl->t, idx, fn, f);
	read_range(L, idx, fn, f);
	read_within_key(L, idx, fn, f);
}

/* The thread a busy/during call looks at: opts.thread (id or name), else
 * the main (stepping) thread. */
int32_t trace_lua_opt_thread(lua_State *L, struct trace_lua *tl, int idx, const char *fn)
{
	struct query_filter f;
	int top = lua_gettop(L);

	if (!idx || lua_getfield(L, idx, "thread") == LUA_TNIL) {
		lua_settop(L, top);
		return tl->main_tid;
	}
	lua_settop(L, top);
	memset(&f, 0, sizeof f);
	/* reuse the filter's thread parsing on a table holding only it */
	lua_createtable(L, 0, 1);
	lua_getfield(L, idx, "thread");
	lua_setfield(L, -2, "thread");
	trace_lua_read_filter(L, tl, lua_gettop(L), fn, &f);
	lua_settop(L, top);
	return f.tid;
}

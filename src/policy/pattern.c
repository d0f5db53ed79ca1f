/* pattern — Lua's pattern functions with a step budget (see pattern.h):
 * the string library's find, match, gmatch and gsub over the matcher of
 * src/util/lpattern.c, whose results and messages are Lua's own, so a
 * policy sees no difference but the budget. */
#include "pattern.h"

#include <ctype.h>
#include <stddef.h>
#include <string.h>

#include <lauxlib.h>

#include "../util/lpattern.h"

/* One call's matching state: the matcher's, and the Lua state its
 * failures are raised in. */
struct pm {
	struct lpattern m;
	lua_State *L;
	pattern_check_fn check;
};

static void pm_fail(void *ctx, const char *msg)
{
	luaL_error(((struct pm *)ctx)->L, "%s", msg);
}

static void pm_check(void *ctx)
{
	struct pm *pm = ctx;

	if (pm->check)
		pm->check(pm->L);
}

static void pm_init(struct pm *pm, lua_State *L, pattern_check_fn check,
		    const char *s, size_t ls, const char *p, size_t lp)
{
	pm->L = L;
	pm->check = check;
	lpattern_init(&pm->m, s, ls, p, lp, pm_fail, pm_check, pm);
}

/* ------------------------------------------------------------ captures */

/* Pushes capture i of the match s..e (the whole match for i = 0 without
 * captures). */
static void push_capture(struct pm *pm, int i, const char *s, const char *e)
{
	const struct lpattern *m = &pm->m;
	ptrdiff_t len;

	if (i >= m->ncap) {
		if (i != 0)
			luaL_error(pm->L, "invalid capture index %%%d", i + 1);
		lua_pushlstring(pm->L, s, (size_t)(e - s));
		return;
	}
	len = m->cap[i].len;
	if (len == LPATTERN_CAP_OPEN)
		luaL_error(pm->L, "unfinished capture");
	if (len == LPATTERN_CAP_POSITION)
		lua_pushinteger(pm->L, (m->cap[i].at - m->s0) + 1);
	else
		lua_pushlstring(pm->L, m->cap[i].at, (size_t)len);
}

/* Pushes every capture (with s set and none, the whole match); returns
 * how many. */
static int push_captures(struct pm *pm, const char *s, const char *e)
{
	int n = pm->m.ncap == 0 && s ? 1 : pm->m.ncap, i;

	luaL_checkstack(pm->L, n, "too many captures");
	for (i = 0; i < n; i++)
		push_capture(pm, i, s, e);
	return n;
}

/* ------------------------------------------------------------ functions */

static pattern_check_fn check_of(lua_State *L)
{
	pattern_check_fn *f = lua_touserdata(L, lua_upvalueindex(1));

	return f ? *f : NULL;
}

/* A 1-based start index (negative: from the end) as an offset + 1, as the
 * string library reads `init`. */
static size_t start_at(lua_Integer pos, size_t len)
{
	if (pos > 0)
		return (size_t)pos;
	if (pos == 0 || pos < -(lua_Integer)len)
		return 1;
	return len + (size_t)pos + 1;
}

/* find and match. */
static int find_or_match(lua_State *L, int find)
{
	size_t ls, lp;
	const char *s = luaL_checklstring(L, 1, &ls);
	const char *p = luaL_checklstring(L, 2, &lp);
	size_t init = start_at(luaL_optinteger(L, 3, 1), ls) - 1;
	const char *s1;
	struct pm m;
	int anchor;

	if (init > ls) {
		luaL_pushfail(L);
		return 1;
	}
	if (find && (lua_toboolean(L, 4) || lpattern_plain(p, lp))) {
		const char *hit = memmem(s + init, ls - init, p, lp);

		if (hit) {
			lua_pushinteger(L, (hit - s) + 1);
			lua_pushinteger(L, (lua_Integer)((size_t)(hit - s) + lp));
			return 2;
		}
		luaL_pushfail(L);
		return 1;
	}
	anchor = lp > 0 && *p == '^';
	if (anchor) {
		p++;
		lp--;
	}
	pm_init(&m, L, check_of(L), s, ls, p, lp);
	s1 = s + init;
	do {
		const char *e;

		if ((e = lpattern_match(&m.m, s1, p)) != NULL) {
			if (!find)
				return push_captures(&m, s1, e);
			lua_pushinteger(L, (s1 - s) + 1);
			lua_pushinteger(L, e - s);
			return push_captures(&m, NULL, NULL) + 2;
		}
	} while (s1++ < m.m.s_end && !anchor);
	luaL_pushfail(L);
	return 1;
}

static int str_find(lua_State *L)
{
	return find_or_match(L, 1);
}

static int str_match(lua_State *L)
{
	return find_or_match(L, 0);
}

/* gmatch's iterator state: offsets into the subject. */
struct gm_state {
	size_t pos;        /* where the next search starts */
	ptrdiff_t last;    /* end of the last match, -1 before the first */
};

/* The iterator. Upvalues: the subject, the pattern, the state, the
 * check. */
static int gmatch_next(lua_State *L)
{
	size_t ls, lp;
	const char *s = lua_tolstring(L, lua_upvalueindex(1), &ls);
	const char *p = lua_tolstring(L, lua_upvalueindex(2), &lp);
	struct gm_state *g = lua_touserdata(L, lua_upvalueindex(3));
	pattern_check_fn *check = lua_touserdata(L, lua_upvalueindex(4));
	const char *src;
	struct pm m;

	pm_init(&m, L, *check, s, ls, p, lp);
	for (src = s + g->pos; src <= m.m.s_end; src++) {
		const char *e = lpattern_match(&m.m, src, p);

		if (e && (g->last < 0 || e != s + g->last)) {
			g->pos = (size_t)(e - s);
			g->last = e - s;
			return push_captures(&m, src, e);
		}
	}
	g->pos = ls + 1; /* done: later calls find nothing at once */
	return 0;
}

static int str_gmatch(lua_State *L)
{
	size_t ls, lp;
	struct gm_state *g;
	size_t init;

	luaL_checklstring(L, 1, &ls);
	luaL_checklstring(L, 2, &lp);
	init = start_at(luaL_optinteger(L, 3, 1), ls) - 1;
	lua_settop(L, 2);
	g = lua_newuserdatauv(L, sizeof *g, 0);
	g->pos = init > ls ? ls + 1 : init;
	g->last = -1;
	lua_pushvalue(L, lua_upvalueindex(1));
	lua_pushcclosure(L, gmatch_next, 4);
	return 1;
}

/* Appends the replacement string (arg 3) for the match s..e: %0 the match,
 * %1-%9 captures, %% a '%'. */
static void add_string(struct pm *m, luaL_Buffer *b, const char *s, const char *e)
{
	lua_State *L = m->L;
	size_t l;
	const char *r = lua_tolstring(L, 3, &l), *end = r + l;

	while (r < end) {
		const char *pct = memchr(r, '%', (size_t)(end - r));

		if (!pct) {
			luaL_addlstring(b, r, (size_t)(end - r));
			return;
		}
		luaL_addlstring(b, r, (size_t)(pct - r));
		pct++;
		if (pct < end && *pct == '%') {
			luaL_addchar(b, '%');
		} else if (pct < end && *pct == '0') {
			luaL_addlstring(b, s, (size_t)(e - s));
		} else if (pct < end && isdigit((unsigned char)*pct)) {
			push_capture(m, *pct - '1', s, e);
			luaL_tolstring(L, -1, NULL);
			lua_remove(L, -2);
			luaL_addvalue(b);
		} else {
			luaL_error(L, "invalid use of '%c' in replacement string", '%');
		}
		r = pct + 1;
	}
}

/* Appends what replaces the match s..e; returns whether it changed. */
static int add_value(struct pm *m, luaL_Buffer *b, const char *s, const char *e,
		     int tr)
{
	lua_State *L = m->L;

	if (tr == LUA_TFUNCTION) {
		int n;

		lua_pushvalue(L, 3);
		n = push_captures(m, s, e);
		lua_call(L, n, 1);
	} else if (tr == LUA_TTABLE) {
		push_capture(m, 0, s, e);
		lua_gettable(L, 3);
	} else {
		add_string(m, b, s, e);
		return 1;
	}
	if (!lua_toboolean(L, -1)) { /* nil or false: keep the match */
		lua_pop(L, 1);
		luaL_addlstring(b, s, (size_t)(e - s));
		return 0;
	}
	if (!lua_isstring(L, -1))
		return luaL_error(L, "invalid replacement value (a %s)", luaL_typename(L, -1));
	luaL_addvalue(b);
	return 1;
}

static int str_gsub(lua_State *L)
{
	size_t ls, lp;
	const char *src = luaL_checklstring(L, 1, &ls);
	const char *p = luaL_checklstring(L, 2, &lp);
	const char *last = NULL;
	int tr = lua_type(L, 3);
	lua_Integer max = luaL_optinteger(L, 4, (lua_Integer)ls + 1), n = 0;
	int anchor = lp > 0 && *p == '^', changed = 0;
	luaL_Buffer b;
	struct pm m;

	luaL_argexpected(L, tr == LUA_TNUMBER || tr == LUA_TSTRING ||
			 tr == LUA_TFUNCTION || tr == LUA_TTABLE, 3,
			 "string/function/table");
	luaL_buffinit(L, &b);
	if (anchor) {
		p++;
		lp--;
	}
	pm_init(&m, L, check_of(L), src, ls, p, lp);
	while (n < max) {
		const char *e;

		if ((e = lpattern_match(&m.m, src, p)) != NULL && e != last) {
			n++;
			changed |= add_value(&m, &b, src, e, tr);
			src = last = e;
		} else if (src < m.m.s_end) {
			luaL_addchar(&b, *src++);
		} else {
			break;
		}
		if (anchor)
			break;
	}
	if (!changed) {
		lua_pushvalue(L, 1);
	} else {
		luaL_addlstring(&b, src, (size_t)(m.m.s_end - src));
		luaL_pushresult(&b);
	}
	lua_pushinteger(L, n);
	return 2;
}

void pattern_install(lua_State *L, pattern_check_fn check)
{
	static const luaL_Reg fns[] = {
		{ "find", str_find },
		{ "match", str_match },
		{ "gmatch", str_gmatch },
		{ "gsub", str_gsub },
		{ NULL, NULL }
	};
	pattern_check_fn *u = lua_newuserdatauv(L, sizeof *u, 0);

	*u = check;
	luaL_setfuncs(L, fns, 1);
}

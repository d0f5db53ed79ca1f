/* pattern — Lua's pattern functions with a step budget (see pattern.h).
 *
 * The patterns are those of the Lua 5.4 manual (section 6.4.1): single
 * character classes ('.', %a..%x and their complements, %<punct>, sets
 * [...] with ranges and classes), each optionally followed by *, +, - or
 * ?; %1-%9 back references; %bxy balanced runs; %f[set] frontiers;
 * captures and position captures (); ^ and $ anchors. The matcher is a
 * backtracking recursion over the pattern, with the manual's limits (32
 * captures, 200 nested calls) and the error messages of Lua's string
 * library, so a policy sees no difference but the budget. */
#include "pattern.h"

#include <ctype.h>
#include <stddef.h>
#include <string.h>

#include <lauxlib.h>

#define PM_MAX_DEPTH 200 /* nested matching calls ("pattern too complex") */
#define PM_MAX_CAPTURES 32 /* Lua's LUA_MAXCAPTURES */
#define CAP_OPEN (-1)    /* a capture whose ')' has not been reached */
#define CAP_POSITION (-2)
#define PM_SPECIALS "^$*+?.([%-"

struct pm_cap {
	const char *at;
	ptrdiff_t len;   /* bytes, or CAP_OPEN / CAP_POSITION */
};

/* One call's matching state, on the C stack. */
struct pm {
	lua_State *L;
	pattern_check_fn check;
	const char *s0, *s_end;   /* the subject */
	const char *p_end;        /* the end of the pattern */
	int depth;                /* nested match calls left */
	int steps;                /* until the next check */
	int ncap;
	struct pm_cap cap[PM_MAX_CAPTURES];
};

/* Counts one step; every PATTERN_CHECK_STEPS, the check (which may
 * raise). */
static void pm_step(struct pm *m)
{
	if (--m->steps > 0)
		return;
	m->steps = PATTERN_CHECK_STEPS;
	if (m->check)
		m->check(m->L);
}

static void pm_init(struct pm *m, lua_State *L, pattern_check_fn check,
		    const char *s, size_t ls, const char *p, size_t lp)
{
	m->L = L;
	m->check = check;
	m->s0 = s;
	m->s_end = s + ls;
	m->p_end = p + lp;
	m->steps = PATTERN_CHECK_STEPS;
}

/* Ready for a match attempt at a new position. */
static void pm_restart(struct pm *m)
{
	m->ncap = 0;
	m->depth = PM_MAX_DEPTH;
}

/* Whether byte c is in class %cl (cl a letter of the class, or any other
 * byte standing for itself). */
static int class_has(int c, int cl)
{
	int r;

	switch (tolower(cl)) {
	case 'a': r = isalpha(c); break;
	case 'c': r = iscntrl(c); break;
	case 'd': r = isdigit(c); break;
	case 'g': r = isgraph(c); break;
	case 'l': r = islower(c); break;
	case 'p': r = ispunct(c); break;
	case 's': r = isspace(c); break;
	case 'u': r = isupper(c); break;
	case 'w': r = isalnum(c); break;
	case 'x': r = isxdigit(c); break;
	default: return cl == c;
	}
	return isupper(cl) ? !r : r != 0;
}

/* Whether byte c is in the set that starts at '[' (p) and ends at ']'
 * (close). */
static int set_has(int c, const char *p, const char *close)
{
	int in = 1;

	if (p[1] == '^') {
		in = 0;
		p++;
	}
	while (++p < close) {
		if (*p == '%') {
			p++;
			if (class_has(c, (unsigned char)*p))
				return in;
		} else if (p[1] == '-' && p + 2 < close) {
			p += 2;
			if ((unsigned char)p[-2] <= c && c <= (unsigned char)*p)
				return in;
		} else if ((unsigned char)*p == c) {
			return in;
		}
	}
	return !in;
}

/* The end of the single-character item at p (just past it). Raises on a
 * malformed item. */
static const char *item_end(struct pm *m, const char *p)
{
	char c = *p++;

	if (c == '%') {
		if (p >= m->p_end)
			luaL_error(m->L, "malformed pattern (ends with '%%')");
		return p + 1;
	}
	if (c != '[')
		return p;
	if (p < m->p_end && *p == '^')
		p++;
	/* the first byte of a set is taken as it is, even a ']' */
	do {
		if (p >= m->p_end)
			luaL_error(m->L, "malformed pattern (missing ']')");
		c = *p++;
		if (c == '%' && p < m->p_end)
			p++;
	} while (p >= m->p_end || *p != ']');
	return p + 1;
}

/* Whether the item p..ep matches the byte at s. */
static int single(const struct pm *m, const char *s, const char *p, const char *ep)
{
	int c;

	if (s >= m->s_end)
		return 0;
	c = (unsigned char)*s;
	switch (*p) {
	case '.': return 1;
	case '%': return class_has(c, (unsigned char)p[1]);
	case '[': return set_has(c, p, ep - 1);
	default: return (unsigned char)*p == c;
	}
}

static const char *do_match(struct pm *m, const char *s, const char *p);

/* %bxy at s (p just past "%b"). */
static const char *balance(struct pm *m, const char *s, const char *p)
{
	int depth = 1;

	if (p + 1 >= m->p_end)
		luaL_error(m->L, "malformed pattern (missing arguments to '%%b')");
	if (s >= m->s_end || *s != *p)
		return NULL;
	while (++s < m->s_end) {
		pm_step(m);
		if (*s == p[1]) {
			if (--depth == 0)
				return s + 1;
		} else if (*s == p[0]) {
			depth++;
		}
	}
	return NULL;
}

/* Back reference %<digit> at s. */
static const char *back_ref(struct pm *m, const char *s, int digit)
{
	int i = digit - '1';
	size_t len;

	if (i < 0 || i >= m->ncap || m->cap[i].len == CAP_OPEN)
		luaL_error(m->L, "invalid capture index %%%d", i + 1);
	len = (size_t)m->cap[i].len; /* a position capture never matches */
	if ((size_t)(m->s_end - s) >= len && memcmp(m->cap[i].at, s, len) == 0)
		return s + len;
	return NULL;
}

static const char *open_capture(struct pm *m, const char *s, const char *p,
				ptrdiff_t what)
{
	const char *r;

	if (m->ncap >= PM_MAX_CAPTURES)
		luaL_error(m->L, "too many captures");
	m->cap[m->ncap].at = s;
	m->cap[m->ncap].len = what;
	m->ncap++;
	r = do_match(m, s, p);
	if (!r)
		m->ncap--;
	return r;
}

static const char *close_capture(struct pm *m, const char *s, const char *p)
{
	const char *r;
	int i;

	for (i = m->ncap - 1; i >= 0 && m->cap[i].len != CAP_OPEN; i--)
		;
	if (i < 0)
		luaL_error(m->L, "invalid pattern capture");
	m->cap[i].len = s - m->cap[i].at;
	r = do_match(m, s, p);
	if (!r)
		m->cap[i].len = CAP_OPEN;
	return r;
}

/* item* (longest first). */
static const char *expand_max(struct pm *m, const char *s, const char *p,
			      const char *ep)
{
	ptrdiff_t i = 0;
	const char *r;

	while (single(m, s + i, p, ep)) {
		pm_step(m);
		i++;
	}
	for (; i >= 0; i--)
		if ((r = do_match(m, s + i, ep + 1)) != NULL)
			return r;
	return NULL;
}

/* item- (shortest first). */
static const char *expand_min(struct pm *m, const char *s, const char *p,
			      const char *ep)
{
	const char *r;

	for (;;) {
		if ((r = do_match(m, s, ep + 1)) != NULL)
			return r;
		if (!single(m, s, p, ep))
			return NULL;
		s++;
	}
}

/* Matches the pattern from p against the subject from s: the end of the
 * match, or NULL. Raises on a malformed pattern, too deep a recursion, or
 * when the check says so. */
static const char *do_match(struct pm *m, const char *s, const char *p)
{
	const char *ep;

	if (m->depth-- == 0)
		luaL_error(m->L, "pattern too complex");
	pm_step(m);
	while (s && p < m->p_end) {
		switch (*p) {
		case '(':
			if (p + 1 < m->p_end && p[1] == ')')
				s = open_capture(m, s, p + 2, CAP_POSITION);
			else
				s = open_capture(m, s, p + 1, CAP_OPEN);
			goto out;
		case ')':
			s = close_capture(m, s, p + 1);
			goto out;
		case '$':
			if (p + 1 == m->p_end) {
				s = s == m->s_end ? s : NULL;
				goto out;
			}
			break;
		case '%':
			if (p + 1 >= m->p_end)
				break; /* item_end reports it */
			if (p[1] == 'b') {
				s = balance(m, s, p + 2);
				p += 4;
				continue;
			}
			if (p[1] == 'f') {
				char prev, cur;

				p += 2;
				if (p >= m->p_end || *p != '[')
					luaL_error(m->L, "missing '[' after '%%f' in pattern");
				ep = item_end(m, p);
				prev = s == m->s0 ? '\0' : s[-1];
				cur = s < m->s_end ? *s : '\0';
				if (set_has((unsigned char)prev, p, ep - 1) ||
				    !set_has((unsigned char)cur, p, ep - 1))
					s = NULL;
				p = ep;
				continue;
			}
			if (isdigit((unsigned char)p[1])) {
				s = back_ref(m, s, (unsigned char)p[1]);
				p += 2;
				continue;
			}
			break;
		default:
			break;
		}
		/* a single-character item, maybe with a repetition */
		ep = item_end(m, p);
		if (!single(m, s, p, ep)) {
			if (ep < m->p_end && (*ep == '*' || *ep == '?' || *ep == '-')) {
				p = ep + 1; /* zero repetitions */
				continue;
			}
			s = NULL;
			goto out;
		}
		switch (ep < m->p_end ? *ep : '\0') {
		case '?': {
			const char *r = do_match(m, s + 1, ep + 1);

			if (r) {
				s = r;
				goto out;
			}
			p = ep + 1;
			continue;
		}
		case '+':
			s = expand_max(m, s + 1, p, ep);
			goto out;
		case '*':
			s = expand_max(m, s, p, ep);
			goto out;
		case '-':
			s = expand_min(m, s, p, ep);
			goto out;
		default:
			s++;
			p = ep;
		}
	}
out:
	m->depth++;
	return s;
}

/* ------------------------------------------------------------ captures */

/* Pushes capture i of the match s..e (the whole match for i = 0 without
 * captures). */
static void push_capture(struct pm *m, int i, const char *s, const char *e)
{
	ptrdiff_t len;

	if (i >= m->ncap) {
		if (i != 0)
			luaL_error(m->L, "invalid capture index %%%d", i + 1);
		lua_pushlstring(m->L, s, (size_t)(e - s));
		return;
	}
	len = m->cap[i].len;
	if (len == CAP_OPEN)
		luaL_error(m->L, "unfinished capture");
	if (len == CAP_POSITION)
		lua_pushinteger(m->L, (m->cap[i].at - m->s0) + 1);
	else
		lua_pushlstring(m->L, m->cap[i].at, (size_t)len);
}

/* Pushes every capture (with s set and none, the whole match); returns
 * how many. */
static int push_captures(struct pm *m, const char *s, const char *e)
{
	int n = m->ncap == 0 && s ? 1 : m->ncap, i;

	luaL_checkstack(m->L, n, "too many captures");
	for (i = 0; i < n; i++)
		push_capture(m, i, s, e);
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

/* Whether the pattern has no special character (find then searches for
 * it as it is). */
static int plain_text(const char *p, size_t lp)
{
	size_t i;

	for (i = 0; i < lp; i++)
		if (p[i] != '\0' && strchr(PM_SPECIALS, p[i]))
			return 0;
	return 1;
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
	if (find && (lua_toboolean(L, 4) || plain_text(p, lp))) {
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

		pm_restart(&m);
		if ((e = do_match(&m, s1, p)) != NULL) {
			if (!find)
				return push_captures(&m, s1, e);
			lua_pushinteger(L, (s1 - s) + 1);
			lua_pushinteger(L, e - s);
			return push_captures(&m, NULL, NULL) + 2;
		}
	} while (s1++ < m.s_end && !anchor);
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
	for (src = s + g->pos; src <= m.s_end; src++) {
		const char *e;

		pm_restart(&m);
		e = do_match(&m, src, p);
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

		pm_restart(&m);
		if ((e = do_match(&m, src, p)) != NULL && e != last) {
			n++;
			changed |= add_value(&m, &b, src, e, tr);
			src = last = e;
		} else if (src < m.s_end) {
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
		luaL_addlstring(&b, src, (size_t)(m.s_end - src));
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

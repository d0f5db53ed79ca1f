/* policy_live — what the policy asks of the running host: prof.* queries
 * (answers built through struct policy_build) and live reconfiguration
 * of prof.schedule{} / prof.capture{} (see policy_internal.h). */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "policy_internal.h"

/* struct policy_build is the Lua state whose top is the table being
 * built; nested tables sit above their key (or a false "append" marker). */
struct policy_build {
	lua_State *L;
};

/* Stores the value on top under `key`, or appends it; pops it. */
static void build_set(struct policy_build *b, const char *key)
{
	lua_State *L = b->L;

	if (key)
		lua_setfield(L, -2, key);
	else
		lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
}

void policy_build_int(struct policy_build *b, const char *key, int64_t v)
{
	lua_pushinteger(b->L, (lua_Integer)v);
	build_set(b, key);
}

void policy_build_num(struct policy_build *b, const char *key, double v)
{
	lua_pushnumber(b->L, v);
	build_set(b, key);
}

void policy_build_bool(struct policy_build *b, const char *key, bool v)
{
	lua_pushboolean(b->L, v);
	build_set(b, key);
}

void policy_build_str(struct policy_build *b, const char *key, const char *v)
{
	if (!v)
		return;
	lua_pushstring(b->L, v);
	build_set(b, key);
}

void policy_build_open(struct policy_build *b, const char *key)
{
	luaL_checkstack(b->L, 3, "policy: table too deep");
	if (key)
		lua_pushstring(b->L, key);
	else
		lua_pushboolean(b->L, 0);
	lua_newtable(b->L);
}

void policy_build_close(struct policy_build *b)
{
	lua_State *L = b->L;

	if (lua_type(L, -2) == LUA_TSTRING) {
		lua_rawset(L, -3);
	} else {
		lua_remove(L, -2);
		lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
	}
}

/* prof._native.query(what [, arg]) -> table | nil: the host's answer
 * (policy_live_ops.query). Upvalue 1: the policy. */
int policy_native_query(lua_State *L)
{
	struct policy *p = lua_touserdata(L, lua_upvalueindex(1));
	const char *what = luaL_checkstring(L, 1);
	lua_Integer arg = luaL_optinteger(L, 2, 0);
	struct policy_build b = { L };
	struct err e;
	int base, rc;

	if (!p->live || !p->live->query)
		return luaL_error(L, "prof.%s: not available here (no profhost host "
				  "is running)", what);
	lua_settop(L, 2);
	lua_newtable(L);
	base = lua_gettop(L);
	e.msg[0] = '\0';
	rc = p->live->query(p->live_ctx, what, (int64_t)arg, &b, &e);
	if (rc < 0)
		return luaL_error(L, "%s", e.msg[0] ? e.msg : "the host refused");
	lua_settop(L, base);
	if (rc == 1)
		lua_pushnil(L);
	return 1;
}

/* prof._native.recorder(on): prof.recorder{ enabled = ... } after the
 * file loaded (lua/prof/init.lua checked the keys): the host pauses or
 * resumes the flight recorder at the next step boundary. From a hook or
 * the REPL. Raises the host's refusal. Upvalue 1: the policy. */
int policy_native_recorder(lua_State *L)
{
	struct policy *p = lua_touserdata(L, lua_upvalueindex(1));
	bool on = lua_toboolean(L, 1);
	struct err e;

	if (!p->live || !p->live->recorder)
		return luaL_error(L, "not available here (no profhost host is running)");
	e.msg[0] = '\0';
	if (p->live->recorder(p->live_ctx, on, &e) != 0)
		return luaL_error(L, "%s", e.msg[0] ? e.msg : "the host refused");
	return 0;
}

/* What policy_native_reconfigure hands the host's apply step. */
struct live_apply {
	struct policy *p;
	const struct policy_config *next;
	unsigned sections;
};

/* Copies the changed sections into the policy's configuration (called by
 * the host under its lock). */
static void apply_live(void *ctx)
{
	struct live_apply *a = ctx;

	if (a->sections & POLICY_LIVE_SCHEDULE)
		a->p->cfg.schedule = a->next->schedule;
	if (a->sections & POLICY_LIVE_CAPTURE)
		a->p->cfg.capture = a->next->capture;
}

/* prof._native.reconfigure(section): the Lua side has stored a live
 * prof.schedule{} / prof.capture{}; read the resolved section and have the
 * host apply it. Raises the host's refusal. Upvalue 1: the policy. */
int policy_native_reconfigure(lua_State *L)
{
	struct policy *p = lua_touserdata(L, lua_upvalueindex(1));
	const char *section = luaL_checkstring(L, 1);
	struct policy_config next = p->cfg;
	struct live_apply a = { p, &next, 0 };
	struct err e;
	int cfg;

	if (strcmp(section, "schedule") == 0)
		a.sections = POLICY_LIVE_SCHEDULE;
	else if (strcmp(section, "capture") == 0)
		a.sections = POLICY_LIVE_CAPTURE;
	else
		return luaL_error(L, "prof.%s cannot change while the process runs",
				  section);
	if (!p->repl.active)
		return luaL_error(L, "prof.%s: live changes only at the REPL", section);
	if (!p->live || !p->live->reconfigure)
		return luaL_error(L, "not available here (no profhost host is running)");
	lua_rawgeti(L, LUA_REGISTRYINDEX, p->config_ref);
	lua_call(L, 0, 1);
	cfg = lua_gettop(L);
	if (!lua_istable(L, cfg))
		return luaL_error(L, "policy: prof._config() did not return a table");
	if (a.sections == POLICY_LIVE_SCHEDULE)
		policy_read_schedule(L, cfg, &next);
	else
		policy_read_capture(L, cfg, &next);
	e.msg[0] = '\0';
	if (p->live->reconfigure(p->live_ctx, &next, a.sections, apply_live, &a,
				 &e) != 0)
		return luaL_error(L, "%s", e.msg[0] ? e.msg : "the host refused");
	return 0;
}

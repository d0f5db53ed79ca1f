/* policy_repl — the REPL (policy_repl_eval): each command runs in a
 * coroutine under the repl_ms budget, and prof.sleep yields it so the VM
 * lock is released while it sleeps (see policy.h, policy_internal.h). */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <lauxlib.h>
#include <lua.h>

#include "../common/clock.h"
#include "policy_internal.h"
#include "sandbox.h"

/* ------------------------------------------------------------ natives */

/* prof._native.repl_active() -> boolean: a REPL command is running.
 * Upvalue 1: the policy. */
int policy_native_repl_active(lua_State *L)
{
	struct policy *p = lua_touserdata(L, lua_upvalueindex(1));

	lua_pushboolean(L, p->repl.active);
	return 1;
}

/* prof.sleep's continuation: true, or nil and "interrupted" when an
 * interrupt cut the sleep short. */
static int native_sleep_k(lua_State *L, int status, lua_KContext ctx)
{
	struct policy *p = (struct policy *)ctx;

	(void)status;
	if (sandbox_interrupted(p->sb)) {
		lua_pushnil(L);
		lua_pushliteral(L, "interrupted");
		return 2;
	}
	lua_pushboolean(L, 1);
	return 1;
}

/* prof._native.sleep(ms) -> true | nil, message: at the REPL's top level,
 * yields to policy_repl_eval, which sleeps with the VM lock released.
 * Misuse is answered, not raised, so that prof.sleep raises it at its
 * caller's line. Upvalue 1: the policy. */
int policy_native_sleep(lua_State *L)
{
	struct policy *p = lua_touserdata(L, lua_upvalueindex(1));
	lua_Integer ms = luaL_checkinteger(L, 1);

	if (!p->repl.active || L != p->repl.co || !lua_isyieldable(L)) {
		lua_pushnil(L);
		lua_pushliteral(L, "only at the REPL, outside coroutines, "
				"metamethods and iterators");
		return 2;
	}
	if (ms < 0)
		ms = 0;
	if (ms > 600000)
		ms = 600000;
	p->repl.sleeping = true;
	p->repl.sleep_ms = (uint32_t)ms;
	return lua_yieldk(L, 0, (lua_KContext)p, native_sleep_k);
}

/* ------------------------------------------------------------ REPL */

#define REPL_SLICE_NS 10000000 /* sleep and lock-wait slices, 10 ms */

static void repl_print(void *ctx, const char *text, size_t len)
{
	struct policy *p = ctx;

	p->repl.io->out(p->repl.io->ctx, false, text, len);
}

static bool repl_poll(void *ctx)
{
	struct policy *p = ctx;

	return p->repl.io->poll && p->repl.io->poll(p->repl.io->ctx);
}

/* Enters (or, with on = false, leaves) REPL mode: print() to the client,
 * interrupts polled from the client, the REPL-only natives allowed. */
static void repl_mode(struct policy *p, bool on)
{
	p->repl.active = on;
	sandbox_set_print(p->sb, on ? repl_print : NULL, p);
	sandbox_set_poll(p->sb, on ? repl_poll : NULL, p);
}

static void sleep_ns(int64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000), (long)(ns % 1000000000) };

	nanosleep(&ts, NULL);
}

/* Takes the VM lock for the REPL, polling for an interrupt while a report
 * holds it. Returns false when interrupted first. */
static bool repl_lock(struct policy *p, const struct policy_repl_io *io)
{
	for (;;) {
		if (pthread_mutex_trylock(&p->lock) == 0)
			return true;
		if (io->poll && io->poll(io->ctx))
			return false;
		sleep_ns(REPL_SLICE_NS);
	}
}

/* prof.sleep: releases the lock for p->repl.sleep_ms (hooks may run
 * meanwhile), polling for an interrupt, then takes it back. */
static void repl_sleep(struct policy *p, const struct policy_repl_io *io)
{
	int64_t end = clock_now_ns() + (int64_t)p->repl.sleep_ms * 1000000;
	int64_t now;
	bool intr = false;

	repl_mode(p, false);
	pthread_mutex_unlock(&p->lock);
	while ((now = clock_now_ns()) < end) {
		if (io->poll && io->poll(io->ctx)) {
			intr = true;
			break;
		}
		sleep_ns(end - now < REPL_SLICE_NS ? end - now : REPL_SLICE_NS);
	}
	pthread_mutex_lock(&p->lock);
	repl_mode(p, true);
	/* Only now: hooks that ran meanwhile must not see the interrupt. */
	if (intr)
		sandbox_interrupt(p->sb);
}

/* Protected: pushes prof.repl[name] (loading the module once). Arg 1: the
 * policy. */
static int push_repl_fn(lua_State *L, struct policy *p, const char *name)
{
	if (p->repl_ref == LUA_NOREF) {
		lua_rawgeti(L, LUA_REGISTRYINDEX, p->require_ref);
		lua_pushliteral(L, "prof.repl");
		lua_call(L, 1, 1);
		if (!lua_istable(L, -1))
			return luaL_error(L, "require('prof.repl') did not return a table");
		p->repl_ref = luaL_ref(L, LUA_REGISTRYINDEX);
	}
	lua_rawgeti(L, LUA_REGISTRYINDEX, p->repl_ref);
	if (lua_getfield(L, -1, name) != LUA_TFUNCTION)
		return luaL_error(L, "prof.repl.%s is missing", name);
	lua_remove(L, -2);
	return 0;
}

/* Protected: prof.repl.compile(chunk) -> fn | nil, message, incomplete.
 * Arg 1: the policy, arg 2: the chunk. */
static int repl_compile(lua_State *L)
{
	struct policy *p = lua_touserdata(L, 1);

	push_repl_fn(L, p, "compile");
	lua_pushvalue(L, 2);
	lua_call(L, 1, 3);
	return 3;
}

/* Protected: prof.repl.show(n, ...) -> text | nil. Arg 1: the policy, then
 * the results. */
static int repl_show(lua_State *L)
{
	struct policy *p = lua_touserdata(L, 1);
	int n = lua_gettop(L) - 1;

	push_repl_fn(L, p, "show");
	lua_insert(L, 2);
	lua_pushinteger(L, n);
	lua_insert(L, 3);
	lua_call(L, n + 1, 1);
	return 1;
}

/* Protected: the error message of a failed command with the coroutine's
 * traceback. Arg 1: the coroutine, arg 2: the error object. Runs under the
 * command's budget (a looping __tostring is stopped by it). */
static int repl_traceback(lua_State *L)
{
	lua_State *co = lua_tothread(L, 1);

	luaL_traceback(L, co, sandbox_error_text(L, 2, co, 0), 0);
	return 1;
}

/* The identity function a compiled expression returns its values
 * through. */
static int repl_identity(lua_State *L)
{
	return lua_gettop(L);
}

/* Sends text to the client and, for an error, its first line to *e.
 * Returns the status given. */
static enum policy_status repl_say(const struct policy_repl_io *io, bool error,
				   const char *text, size_t len,
				   enum policy_status st, struct err *e)
{
	if (len)
		io->out(io->ctx, error, text, len);
	if (error)
		err_set(e, "%.*s", (int)strcspn(text, "\n"), text);
	return st;
}

/* As repl_say with the string on top of L (popped). */
static enum policy_status repl_say_top(lua_State *L, const struct policy_repl_io *io,
				       bool error, enum policy_status st,
				       struct err *e)
{
	size_t len = 0;
	const char *text = lua_tolstring(L, -1, &len);

	if (!text) {
		text = "(no message)";
		len = strlen(text);
	}
	repl_say(io, error, text, len, st, e);
	lua_pop(L, 1);
	return st;
}

/* Runs the compiled function on top of L in a coroutine until it ends,
 * sleeping with the lock released whenever it yields from prof.sleep.
 * Lock held, REPL mode on. */
static enum policy_status repl_run(struct policy *p, const struct policy_repl_io *io,
				   struct err *e)
{
	lua_State *L = sandbox_lua(p->sb);
	lua_State *co;
	struct err local;
	int status, nres = 0, nargs = 0, base, ref;
	int64_t resumed = 0;
	char line[128];

	co = lua_newthread(L);
	lua_insert(L, -2);
	lua_xmove(L, co, 1);
	lua_pushcfunction(co, repl_identity);  /* see prof.repl.compile */
	nargs = 1;
	base = lua_gettop(L);              /* the thread */
	lua_pushvalue(L, base);
	ref = luaL_ref(L, LUA_REGISTRYINDEX); /* kept alive while it sleeps */
	p->repl.co = co;
	for (;;) {
		p->repl.sleeping = false;
		resumed = clock_now_ns();
		sandbox_set_budget(p->sb, resumed, p->cfg.limits.repl_ms, "repl_ms");
		status = lua_resume(co, L, nargs, &nres);
		sandbox_clear_budget(p->sb);
		if (status != LUA_YIELD)
			break;
		lua_pop(co, nres);
		if (!p->repl.sleeping) {
			status = -1; /* a yield of the user's own at the top level */
			break;
		}
		repl_sleep(p, io);
		nargs = 0;
	}
	p->repl.co = NULL;

	if (status == LUA_OK) {
		enum policy_status st = POLICY_OK;

		lua_pushcfunction(L, repl_show);
		lua_pushlightuserdata(L, p);
		lua_xmove(co, L, nres);
		sandbox_set_budget(p->sb, clock_now_ns(), p->cfg.limits.repl_ms,
				   "repl_ms");
		if (sandbox_pcall(p->sb, nres + 1, 1, "stdin", &local) != 0)
			st = repl_say(io, true, local.msg, strlen(local.msg),
				      POLICY_ERROR, e);
		else if (lua_isstring(L, -1))
			repl_say_top(L, io, false, POLICY_OK, e);
		else
			lua_pop(L, 1);
		sandbox_clear_budget(p->sb);
		luaL_unref(L, LUA_REGISTRYINDEX, ref);
		lua_settop(L, base - 1);
		return st;
	}
	if (status == -1) {
		snprintf(line, sizeof line, "attempt to yield from outside a coroutine");
		repl_say(io, true, line, strlen(line), POLICY_ERROR, e);
	} else if (status == LUA_ERRMEM) {
		snprintf(line, sizeof line, "command exceeded the policy's %zu MiB "
			 "memory limit (prof.limits{memory_mb=...})",
			 p->cfg.limits.memory_bytes / POLICY_MIB);
		repl_say(io, true, line, strlen(line), POLICY_ERROR, e);
	} else {
		lua_pushcfunction(L, repl_traceback);
		lua_pushvalue(L, base);
		lua_xmove(co, L, 1);
		/* what is left of the command's budget */
		sandbox_set_budget(p->sb, resumed, p->cfg.limits.repl_ms, "repl_ms");
		if (lua_pcall(L, 2, 1, 0) != LUA_OK)
			lua_pushliteral(L, "(the error message could not be made)");
		sandbox_clear_budget(p->sb);
		repl_say_top(L, io, true, POLICY_ERROR, e);
	}
	lua_resetthread(co);
	luaL_unref(L, LUA_REGISTRYINDEX, ref);
	lua_settop(L, base - 1);
	return POLICY_ERROR;
}

enum policy_status policy_repl_eval(struct policy *p, const char *chunk,
				    size_t len, const struct policy_repl_io *io,
				    struct err *e)
{
	lua_State *L;
	struct err local;
	enum policy_status st;
	int top;
	static const char busy[] = "interrupted while waiting for the policy VM "
				   "(a report hook was running)";
	static const char broken[] = "the Lua VM was in use on another thread when "
				     "this process forked; the REPL is not available "
				     "in this child";

	if (!p || !p->sb || !io || !io->out) {
		err_set(e, "policy_repl_eval: no policy or no output");
		return POLICY_ERROR;
	}
	if (p->repl.broken)
		return repl_say(io, true, broken, strlen(broken), POLICY_ERROR, e);
	if (!repl_lock(p, io))
		return repl_say(io, true, busy, strlen(busy), POLICY_ERROR, e);
	L = sandbox_lua(p->sb);
	top = lua_gettop(L);
	p->repl.io = io;
	sandbox_clear_interrupt(p->sb);
	repl_mode(p, true);

	lua_pushcfunction(L, repl_compile);
	lua_pushlightuserdata(L, p);
	lua_pushlstring(L, chunk, len);
	sandbox_set_budget(p->sb, clock_now_ns(), p->cfg.limits.repl_ms, "repl_ms");
	if (sandbox_pcall(p->sb, 2, 3, "stdin", &local) != 0) {
		st = repl_say(io, true, local.msg, strlen(local.msg), POLICY_ERROR, e);
	} else if (lua_isfunction(L, -3)) {
		lua_pop(L, 2);
		st = repl_run(p, io, e);
	} else if (lua_toboolean(L, -1)) {
		st = POLICY_INCOMPLETE;
	} else {
		lua_pop(L, 1);
		st = repl_say_top(L, io, true, POLICY_ERROR, e);
	}
	sandbox_clear_budget(p->sb);
	lua_settop(L, top);
	repl_mode(p, false);
	sandbox_clear_interrupt(p->sb);
	p->repl.io = NULL;
	pthread_mutex_unlock(&p->lock);
	return st;
}

/* policy — the Lua policy engine (see policy.h). */
#include "policy.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>

#include "../events/clock.h"
#include "../util/fsutil.h"
#include "../util/log.h"
#include "sandbox.h"
#include "trace_lua.h"

#define POLICY_MIB ((size_t)1 << 20)
#define POLICY_DEFAULT_SOURCE "(built-in default)"
#define POLICY_DEFAULT_MEMORY (64 * POLICY_MIB)
#define POLICY_DEFAULT_LOAD_MS 2000

struct policy {
	pthread_mutex_t lock;      /* held while Lua runs */
	struct sandbox *sb;
	struct policy_config cfg;
	char *source;              /* absolute path, or POLICY_DEFAULT_SOURCE */
	char *script;              /* the file as loaded ("myprof.lua") */
	int apply_set_ref;         /* prof._apply_set, taken before the file runs */
	int load_done_ref;         /* prof._load_done, likewise */
	int hooks_ref;             /* the hook lists, from prof._load_done() */
	bool loading;              /* policy_load is running */
	int64_t load_start_ns;
	policy_capture_fn capture_now;
	void *capture_ctx;
	const struct policy_live_ops *live;
	void *live_ctx;
	int config_ref;            /* prof._config, taken before the file runs */
	int require_ref;           /* the sandbox's require, likewise */
	int repl_ref;              /* prof.repl, once a REPL command loaded it */
	struct {
		bool active;       /* a REPL command runs (not while it sleeps) */
		bool sleeping;     /* it yielded in prof.sleep */
		uint32_t sleep_ms;
		lua_State *co;     /* the command's coroutine */
		const struct policy_repl_io *io;
		bool broken;       /* forked while another thread used the VM */
	} repl;
};

/* ------------------------------------------------------------ natives */

/* prof._native.capture_now(steps, reason) -> true | nil, message.
 * Upvalue 1: the policy. Runs the host's callback (policy lock held). */
static int native_capture_now(lua_State *L)
{
	struct policy *p = lua_touserdata(L, lua_upvalueindex(1));
	lua_Integer steps = luaL_checkinteger(L, 1);
	const char *reason = luaL_optstring(L, 2, NULL);
	struct err e;

	lua_pushnil(L);
	if (steps < 1 || steps > (lua_Integer)UINT32_MAX) {
		lua_pushliteral(L, "'steps' must be an integer >= 1");
		return 2;
	}
	if (!p->capture_now) {
		lua_pushliteral(L, "not available (the host installed no capture function)");
		return 2;
	}
	e.msg[0] = '\0';
	if (p->capture_now(p->capture_ctx, (uint32_t)steps, reason, &e) != 0) {
		lua_pushstring(L, e.msg[0] ? e.msg : "the host refused the request");
		return 2;
	}
	lua_pushboolean(L, 1);
	return 1;
}

/* prof._native.set_limits(memory_mb, load_ms): the memory cap applies at
 * once, and while the file loads so does the load budget. Upvalue 1: the
 * policy. */
static int native_set_limits(lua_State *L)
{
	struct policy *p = lua_touserdata(L, lua_upvalueindex(1));
	lua_Integer mb = luaL_checkinteger(L, 1);
	lua_Integer ms = luaL_checkinteger(L, 2);

	if (mb > 0)
		sandbox_set_memory_limit(p->sb, (size_t)mb * POLICY_MIB);
	if (p->loading && ms > 0 && ms <= (lua_Integer)UINT32_MAX)
		sandbox_set_budget(p->sb, p->load_start_ns, (uint32_t)ms,
				   "load_ms");
	return 0;
}

/* prof._native.repl_active() -> boolean: a REPL command is running.
 * Upvalue 1: the policy. */
static int native_repl_active(lua_State *L)
{
	struct policy *p = lua_touserdata(L, lua_upvalueindex(1));

	lua_pushboolean(L, p->repl.active);
	return 1;
}

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
static int native_query(lua_State *L)
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
static int native_sleep(lua_State *L)
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

static int native_reconfigure(lua_State *L);
static int native_hooks_changed(lua_State *L);

/* ------------------------------------------------------------ loading */

/* Protected: require("prof"), make it the global `prof`, give it its
 * natives and keep its private functions. Arg 1: the policy. */
static int load_module(lua_State *L)
{
	struct policy *p = lua_touserdata(L, 1);

	lua_getglobal(L, "require");
	lua_pushliteral(L, "prof");
	lua_call(L, 1, 1);
	if (!lua_istable(L, -1))
		return luaL_error(L, "require('prof') did not return a table");
	lua_pushvalue(L, -1);
	lua_setglobal(L, "prof");

	{
		/* Each native gets the policy as its one upvalue. */
		static const luaL_Reg natives[] = {
			{ "capture_now", native_capture_now },
			{ "set_limits", native_set_limits },
			{ "repl_active", native_repl_active },
			{ "query", native_query },
			{ "reconfigure", native_reconfigure },
			{ "sleep", native_sleep },
			{ "hooks_changed", native_hooks_changed },
			{ NULL, NULL }
		};

		lua_createtable(L, 0, 7);
		lua_pushlightuserdata(L, p);
		luaL_setfuncs(L, natives, 1);
	}
	lua_setfield(L, -2, "_native");

	if (lua_getfield(L, -1, "_config") != LUA_TFUNCTION)
		return luaL_error(L, "prof._config is missing");
	p->config_ref = luaL_ref(L, LUA_REGISTRYINDEX);
	lua_getglobal(L, "require");
	p->require_ref = luaL_ref(L, LUA_REGISTRYINDEX);

	if (lua_getfield(L, -1, "_apply_set") != LUA_TFUNCTION)
		return luaL_error(L, "prof._apply_set is missing");
	p->apply_set_ref = luaL_ref(L, LUA_REGISTRYINDEX);
	if (lua_getfield(L, -1, "_load_done") != LUA_TFUNCTION)
		return luaL_error(L, "prof._load_done is missing");
	p->load_done_ref = luaL_ref(L, LUA_REGISTRYINDEX);
	return 0;
}

/* Protected: loads and runs the policy file (text only). Arg 1: its path
 * as a light userdata. */
static int run_file(lua_State *L)
{
	const char *path = lua_touserdata(L, 1);

	if (sandbox_loadfile(L, path) != LUA_OK)
		return lua_error(L);
	lua_call(L, 0, 0);
	return 0;
}

/* Protected: prof._apply_set(s). Arg 1: the policy, arg 2: s as a light
 * userdata. */
static int apply_set(lua_State *L)
{
	struct policy *p = lua_touserdata(L, 1);
	const char *s = lua_touserdata(L, 2);

	lua_rawgeti(L, LUA_REGISTRYINDEX, p->apply_set_ref);
	lua_pushstring(L, s);
	lua_call(L, 1, 0);
	return 0;
}

/* Field readers for the resolved configuration table at index t. They
 * raise on a type the Lua side never produces (a tampered prof module). */
static lua_Integer cfg_int(lua_State *L, int t, const char *key,
			   lua_Integer min, lua_Integer max)
{
	lua_Integer v;
	int isnum;

	lua_getfield(L, t, key);
	v = lua_tointegerx(L, -1, &isnum);
	lua_pop(L, 1);
	if (!isnum || v < min || v > max)
		luaL_error(L, "policy: configuration field '%s' is not an integer from %I to %I",
			   key, min, max);
	return v;
}

static uint32_t cfg_u32(lua_State *L, int t, const char *key, uint32_t min)
{
	return (uint32_t)cfg_int(L, t, key, min, (lua_Integer)UINT32_MAX);
}

static bool cfg_bool(lua_State *L, int t, const char *key)
{
	bool v;

	if (lua_getfield(L, t, key) != LUA_TBOOLEAN)
		luaL_error(L, "policy: configuration field '%s' is not a boolean", key);
	v = lua_toboolean(L, -1);
	lua_pop(L, 1);
	return v;
}

/* A copy of a string field into *out (NULL when nil and `optional`). */
static void cfg_str(lua_State *L, int t, const char *key, bool optional,
		    char **out)
{
	int type = lua_getfield(L, t, key);

	if (type == LUA_TNIL && optional) {
		lua_pop(L, 1);
		return;
	}
	if (type != LUA_TSTRING)
		luaL_error(L, "policy: configuration field '%s' is not a string", key);
	*out = strdup(lua_tostring(L, -1));
	lua_pop(L, 1);
	if (!*out)
		luaL_error(L, "policy: out of memory");
}

/* A signal field ("auto", "SIGPROF" or "SIGRTMIN+N", as the schema
 * checked) as a number, 0 for "auto"; raises for N beyond this system's
 * real-time signals. */
static int cfg_signal(lua_State *L, int t, const char *key)
{
	const char *v;
	int n = 0, sig = 0;

	if (lua_getfield(L, t, key) != LUA_TSTRING)
		luaL_error(L, "policy: configuration field '%s' is not a string", key);
	v = lua_tostring(L, -1);
	if (strcmp(v, "SIGPROF") == 0) {
		sig = SIGPROF;
	} else if (sscanf(v, "SIGRTMIN+%d", &n) == 1) {
		if (n < 0 || n > SIGRTMAX - SIGRTMIN)
			luaL_error(L, "prof.capture: 'cpu_samples.signal' %s: this "
				   "system has real-time signals SIGRTMIN+0 to "
				   "SIGRTMIN+%d", v, SIGRTMAX - SIGRTMIN);
		sig = SIGRTMIN + n;
	}
	lua_pop(L, 1);
	return sig;
}

/* Pushes section `name` of the table at t; raises if it is not a table. */
static int cfg_section(lua_State *L, int t, const char *name)
{
	if (lua_getfield(L, t, name) != LUA_TTABLE)
		luaL_error(L, "policy: configuration section '%s' is missing", name);
	return lua_gettop(L);
}

static bool has_hooks(lua_State *L, int hooks, const char *kind)
{
	bool any = lua_getfield(L, hooks, kind) == LUA_TTABLE &&
		   lua_rawlen(L, -1) > 0;

	lua_pop(L, 1);
	return any;
}

/* Sets the configuration's has_on_* flags from the hook lists at index
 * `hooks`. The flags are atomic: the host's threads read them without the
 * policy lock. */
static void read_hook_flags(lua_State *L, int hooks, struct policy_config *c)
{
	c->has_on_step = has_hooks(L, hooks, "on_step");
	c->has_on_window_start = has_hooks(L, hooks, "on_window_start");
	c->has_on_window_end = has_hooks(L, hooks, "on_window_end");
	c->has_on_trace_ready = has_hooks(L, hooks, "on_trace_ready");
}

/* prof._native.hooks_changed(): a hook was registered after loading (at
 * the REPL, or by another hook); the host's has_on_* flags follow the hook
 * lists, so a kind of hook the policy file did not have starts running.
 * Upvalue 1: the policy. */
static int native_hooks_changed(lua_State *L)
{
	struct policy *p = lua_touserdata(L, lua_upvalueindex(1));

	if (p->hooks_ref == LUA_NOREF)
		return 0;
	lua_rawgeti(L, LUA_REGISTRYINDEX, p->hooks_ref);
	if (lua_istable(L, -1))
		read_hook_flags(L, lua_gettop(L), &p->cfg);
	return 0;
}

/* The schedule section of the resolved configuration at index cfg. */
static void read_schedule(lua_State *L, int cfg, struct policy_config *c)
{
	int s = cfg_section(L, cfg, "schedule");

	c->schedule.enabled = cfg_bool(L, s, "enabled");
	c->schedule.skip_first = cfg_u32(L, s, "skip_first", 0);
	c->schedule.wait = cfg_u32(L, s, "wait", 0);
	c->schedule.warmup = cfg_u32(L, s, "warmup", 0);
	c->schedule.active = cfg_u32(L, s, "active", 1);
	c->schedule.cycles = cfg_u32(L, s, "cycles", 0);
	lua_pop(L, 1);
}

/* The capture section of the resolved configuration at index cfg. */
static void read_capture(lua_State *L, int cfg, struct policy_config *c)
{
	int s = cfg_section(L, cfg, "capture");

	c->capture.nvtx = cfg_bool(L, s, "nvtx");
	c->capture.cuda_kernels = cfg_bool(L, s, "cuda_kernels");
	c->capture.cuda_memcpy = cfg_bool(L, s, "cuda_memcpy");
	c->capture.cuda_memset = cfg_bool(L, s, "cuda_memset");
	c->capture.cuda_runtime = cfg_bool(L, s, "cuda_runtime");
	c->capture.cuda_driver = cfg_bool(L, s, "cuda_driver");
	c->capture.cuda_sync = cfg_bool(L, s, "cuda_sync");
	c->capture.cuda_memory = cfg_bool(L, s, "cuda_memory");
	c->capture.cpu_hz = cfg_u32(L, s, "cpu_hz", 0);
	c->capture.cpu_wall_clock = cfg_bool(L, s, "cpu_wall_clock");
	c->capture.cpu_depth = cfg_u32(L, s, "cpu_depth", 1);
	c->capture.cpu_signal = cfg_signal(L, s, "cpu_signal");
	c->capture.range_stacks = cfg_bool(L, s, "range_stacks");
	c->capture.cuda_backtrace_us = cfg_u32(L, s, "cuda_backtrace_us", 0);
	c->capture.record_shapes = cfg_bool(L, s, "record_shapes");
	c->capture.with_flops = cfg_bool(L, s, "with_flops");
	lua_getfield(L, s, "peak_tflops");
	c->capture.peak_tflops = lua_tonumber(L, -1); /* checked by prof.schema */
	lua_pop(L, 1);
	c->capture.buffer_bytes =
		(size_t)cfg_int(L, s, "buffer_mb", 1, 65536) * POLICY_MIB;
	lua_pop(L, 1);
}

/* What native_reconfigure hands the host's apply step. */
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
static int native_reconfigure(lua_State *L)
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
		read_schedule(L, cfg, &next);
	else
		read_capture(L, cfg, &next);
	e.msg[0] = '\0';
	if (p->live->reconfigure(p->live_ctx, &next, a.sections, apply_live, &a,
				 &e) != 0)
		return luaL_error(L, "%s", e.msg[0] ? e.msg : "the host refused");
	return 0;
}

/* Protected: prof._load_done(), then the configuration into p->cfg (strings
 * stored as they are copied, so policy_free releases them on failure).
 * Arg 1: the policy. */
static int read_config(lua_State *L)
{
	struct policy *p = lua_touserdata(L, 1);
	struct policy_config *c = &p->cfg;
	int cfg, s;

	lua_rawgeti(L, LUA_REGISTRYINDEX, p->load_done_ref);
	lua_call(L, 0, 2);
	if (!lua_istable(L, -2) || !lua_istable(L, -1))
		return luaL_error(L, "policy: prof._load_done() did not return tables");
	lua_pushvalue(L, -1);
	p->hooks_ref = luaL_ref(L, LUA_REGISTRYINDEX);
	read_hook_flags(L, lua_gettop(L), c);
	lua_pop(L, 1);
	cfg = lua_gettop(L);

	s = cfg_section(L, cfg, "output");
	cfg_str(L, s, "dir", false, &c->output_dir);
	cfg_str(L, s, "run", true, &c->run_name);

	read_schedule(L, cfg, c);

	s = cfg_section(L, cfg, "steps");
	cfg_str(L, s, "nvtx", true, &c->steps.nvtx);
	cfg_str(L, s, "nvtx_domain", true, &c->steps.nvtx_domain);
	cfg_str(L, s, "nvtx_mark", true, &c->steps.nvtx_mark);
	cfg_str(L, s, "python", true, &c->steps.python);
	cfg_str(L, s, "cuda", true, &c->steps.cuda);
	cfg_str(L, s, "kernel", true, &c->steps.kernel);
	c->steps.every_ms = cfg_u32(L, s, "every_ms", 0);

	s = cfg_section(L, cfg, "capture_range");
	cfg_str(L, s, "nvtx", true, &c->capture_range.nvtx);
	cfg_str(L, s, "nvtx_domain", true, &c->capture_range.nvtx_domain);
	c->capture_range.count = cfg_u32(L, s, "count", 0);

	read_capture(L, cfg, c);

	s = cfg_section(L, cfg, "export");
	c->export.chrome = cfg_bool(L, s, "chrome");
	c->export.chrome_gzip = cfg_bool(L, s, "chrome_gzip");
	c->export.tensorboard = cfg_bool(L, s, "tensorboard");
	c->export.key_averages = cfg_bool(L, s, "key_averages");
	cfg_str(L, s, "sort_by", false, &c->export.sort_by);
	c->export.row_limit = cfg_u32(L, s, "row_limit", 0);
	cfg_str(L, s, "group_by", false, &c->export.group_by);
	c->export.stacks = cfg_bool(L, s, "stacks");
	c->export.memory_timeline = cfg_bool(L, s, "memory_timeline");
	c->export.summary = cfg_bool(L, s, "summary");
	c->export.raw = cfg_bool(L, s, "raw");
	c->export.report_text = cfg_bool(L, s, "report_text");
	c->export.report_html = cfg_bool(L, s, "report_html");

	s = cfg_section(L, cfg, "limits");
	c->limits.hook_ms = cfg_u32(L, s, "hook_ms", 1);
	c->limits.report_ms = cfg_u32(L, s, "report_ms", 1);
	c->limits.load_ms = cfg_u32(L, s, "load_ms", 1);
	c->limits.repl_ms = cfg_u32(L, s, "repl_ms", 1);
	c->limits.memory_bytes =
		(size_t)cfg_int(L, s, "memory_mb", 1, 65536) * POLICY_MIB;
	return 0;
}

/* Checks that `path` is a readable Lua source file. `label` names where the
 * path came from ("PROF_SCRIPT"). Returns 0 or -1 with *e set. */
static int check_script(const char *path, const char *label, struct err *e)
{
	struct stat st;
	char c = 0;
	int fd = fsutil_open_regular(path, &st);

	if (fd == FSUTIL_NOT_REGULAR)
		return err_set(e, "%s: '%s' is %s, not a regular file", label, path,
			       fsutil_file_kind(st.st_mode));
	if (fd < 0)
		return err_errno(e, errno, "%s: cannot open '%s'", label, path);
	if (read(fd, &c, 1) != 1)
		c = 0;
	close(fd);
	if (c == LUA_SIGNATURE[0])
		return err_set(e, "%s: '%s' is a precompiled Lua chunk; profhost loads Lua source only",
			       label, path);
	return 0;
}

/* The directory part of an absolute path, newly allocated. */
static char *dir_of(const char *path)
{
	const char *slash = strrchr(path, '/');
	size_t len = slash ? (size_t)(slash - path) : 0;
	char *d;

	if (slash == path)
		len = 1; /* "/x.lua" lives in "/" */
	d = malloc(len + 2);
	if (!d)
		return NULL;
	if (len == 0) {
		strcpy(d, ".");
	} else {
		memcpy(d, path, len);
		d[len] = '\0';
	}
	return d;
}

/* Runs a protected step of loading: the C function and `nargs` light
 * userdata arguments already pushed. On failure prefixes *e with `prefix`
 * (may be NULL). */
static int load_step(struct policy *p, int nargs, const char *prefix,
		     struct err *e)
{
	struct err local;

	if (sandbox_pcall(p->sb, nargs, 0, p->script, &local) == 0)
		return 0;
	if (prefix)
		return err_set(e, "%s%s", prefix, local.msg);
	return err_set(e, "%s", local.msg);
}

/* An error-checking mutex: a capture_now callback that wrongly re-enters
 * the policy on the same thread gets POLICY_BUSY instead of a deadlock. */
static void init_lock(pthread_mutex_t *lock)
{
	pthread_mutexattr_t attr;

	pthread_mutexattr_init(&attr);
	pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ERRORCHECK);
	pthread_mutex_init(lock, &attr);
	pthread_mutexattr_destroy(&attr);
}

struct policy *policy_load(const struct policy_opts *opts, struct err *e)
{
	struct policy *p;
	struct sandbox_opts so;
	char *policy_dir = NULL;
	lua_State *L;
	size_t i;

	if (!opts) {
		err_set(e, "policy: no options given");
		return NULL;
	}
	if (!opts->lua_dir || !opts->lua_dir[0]) {
		err_set(e, "policy: no Lua directory given (profhost's lua/ folder)");
		return NULL;
	}
	p = calloc(1, sizeof *p);
	if (!p) {
		err_set(e, "policy: out of memory");
		return NULL;
	}
	init_lock(&p->lock);
	p->apply_set_ref = p->load_done_ref = p->hooks_ref = LUA_NOREF;
	p->config_ref = p->require_ref = p->repl_ref = LUA_NOREF;
	p->capture_now = opts->capture_now;
	p->capture_ctx = opts->capture_ctx;
	p->live = opts->live;
	p->live_ctx = opts->live_ctx;

	if (opts->script && opts->script[0]) {
		if (check_script(opts->script, "PROF_SCRIPT", e) != 0)
			goto fail;
		char abs[PATH_MAX];

		/* A caller buffer, not realpath(x, NULL): under a sanitizer
		 * runtime that is not first in the link order, the latter can
		 * bind to glibc's old realpath, which refuses NULL. */
		p->script = strdup(opts->script);
		p->source = realpath(opts->script, abs) ? strdup(abs) : NULL;
		if (!p->script || !p->source) {
			err_errno(e, errno, "PROF_SCRIPT: cannot resolve '%s'",
				  opts->script);
			goto fail;
		}
		policy_dir = dir_of(p->source);
		if (!policy_dir) {
			err_set(e, "policy: out of memory");
			goto fail;
		}
	} else {
		size_t n = strlen(opts->lua_dir) + sizeof "/prof/default.lua";

		p->script = malloc(n);
		p->source = strdup(POLICY_DEFAULT_SOURCE);
		if (!p->script || !p->source) {
			err_set(e, "policy: out of memory");
			goto fail;
		}
		snprintf(p->script, n, "%s/prof/default.lua", opts->lua_dir);
		if (check_script(p->script, "built-in default policy", e) != 0)
			goto fail;
	}

	so.lua_dir = opts->lua_dir;
	so.policy_dir = policy_dir;
	so.memory_bytes = POLICY_DEFAULT_MEMORY;
	p->sb = sandbox_new(&so, e);
	if (!p->sb)
		goto fail;
	L = sandbox_lua(p->sb);

	p->loading = true;
	p->load_start_ns = clock_now_ns();
	sandbox_set_budget(p->sb, p->load_start_ns, POLICY_DEFAULT_LOAD_MS,
			   "load_ms");

	lua_pushcfunction(L, load_module);
	lua_pushlightuserdata(L, p);
	if (load_step(p, 1, "policy: cannot load the prof module: ", e) != 0)
		goto fail;

	lua_pushcfunction(L, run_file);
	lua_pushlightuserdata(L, p->script);
	if (load_step(p, 1, NULL, e) != 0)
		goto fail;

	for (i = 0; opts->sets && opts->sets[i]; i++) {
		lua_pushcfunction(L, apply_set);
		lua_pushlightuserdata(L, p);
		lua_pushlightuserdata(L, (void *)opts->sets[i]);
		if (load_step(p, 2, NULL, e) != 0)
			goto fail;
	}

	lua_pushcfunction(L, read_config);
	lua_pushlightuserdata(L, p);
	if (load_step(p, 1, NULL, e) != 0)
		goto fail;

	p->loading = false;
	sandbox_clear_budget(p->sb);
	sandbox_set_memory_limit(p->sb, p->cfg.limits.memory_bytes);
	free(policy_dir);
	return p;

fail:
	free(policy_dir);
	policy_free(p);
	return NULL;
}

const struct policy_config *policy_config(const struct policy *p)
{
	return p ? &p->cfg : NULL;
}

const char *policy_source(const struct policy *p)
{
	return p ? p->source : "(no policy)";
}

/* ------------------------------------------------------------ hooks */

enum hook_arg { HOOK_ARG_STEP, HOOK_ARG_WINDOW, HOOK_ARG_TRACE };

/* One hook call: what to run and what came of it. */
struct hook_call {
	struct policy *p;
	const char *kind;          /* "on_step", ... */
	enum hook_arg arg_type;
	const void *info;          /* policy_step_info, policy_window_info
				      or policy_trace */
	uint32_t budget_ms;
	const char *budget_key;
	struct err *e;
	int failed;                /* hooks that failed in this call */
	int trace_ref;             /* the trace object, to invalidate after
				      the call whatever happened */
};

static void set_int(lua_State *L, const char *key, lua_Integer v)
{
	lua_pushinteger(L, v);
	lua_setfield(L, -2, key);
}

static void set_num(lua_State *L, const char *key, double v)
{
	lua_pushnumber(L, v);
	lua_setfield(L, -2, key);
}

static void set_str(lua_State *L, const char *key, const char *v)
{
	if (!v)
		return;
	lua_pushstring(L, v);
	lua_setfield(L, -2, key);
}

static void push_step_info(lua_State *L, const struct policy_step_info *s)
{
	lua_createtable(L, 0, 6);
	set_int(L, "step", (lua_Integer)s->step);
	set_num(L, "duration_ms", s->duration_ms);
	set_num(L, "median_ms", s->median_ms);
	set_num(L, "mean_ms", s->mean_ms);
	set_str(L, "action", s->action);
	lua_pushboolean(L, s->recording);
	lua_setfield(L, -2, "recording");
}

static void push_window_info(lua_State *L, const struct policy_window_info *w)
{
	lua_Integer i;

	lua_createtable(L, 0, 8);
	set_int(L, "window", (lua_Integer)w->window);
	set_int(L, "first_step", (lua_Integer)w->first_step);
	set_int(L, "last_step", (lua_Integer)w->last_step);
	set_str(L, "reason", w->reason);
	set_str(L, "dir", w->dir);
	lua_newtable(L);
	for (i = 0; w->files && w->files[i]; i++) {
		lua_pushstring(L, w->files[i]);
		lua_rawseti(L, -2, i + 1);
	}
	lua_setfield(L, -2, "files");
	set_int(L, "events", (lua_Integer)w->events);
	set_int(L, "dropped", (lua_Integer)w->dropped);
}

/* Reports a failed hook: the first into hc->e, later ones to the log (one
 * call can only return one message). */
static void hook_failed(struct hook_call *hc, const struct err *herr)
{
	char line[ERR_MSG_MAX];

	snprintf(line, sizeof line, "%.*s (in prof.%s; hook disabled)",
		 ERR_MSG_MAX - 64, herr->msg, hc->kind);
	if (hc->failed++ == 0)
		err_set(hc->e, "%s", line);
	else
		log_msg(LOG_WARN, "%s", line);
}

/* Protected: runs every enabled hook of hc->kind in order, each under the
 * budget, disabling (setting to false) each that fails. Arg 1: hc. */
static int run_hooks(lua_State *L)
{
	struct hook_call *hc = lua_touserdata(L, 1);
	struct sandbox *sb = hc->p->sb;
	lua_Integer i, n;
	int list, arg;

	lua_rawgeti(L, LUA_REGISTRYINDEX, hc->p->hooks_ref);
	if (!lua_istable(L, -1) || lua_getfield(L, -1, hc->kind) != LUA_TTABLE)
		return 0;
	list = lua_gettop(L);
	n = (lua_Integer)lua_rawlen(L, list);
	if (n == 0)
		return 0;
	if (hc->arg_type == HOOK_ARG_STEP) {
		push_step_info(L, hc->info);
	} else if (hc->arg_type == HOOK_ARG_TRACE) {
		const struct policy_trace *tr = hc->info;

		trace_lua_push(L, tr->trace, tr->dir, tr->out, tr->files);
		lua_pushvalue(L, -1);
		hc->trace_ref = luaL_ref(L, LUA_REGISTRYINDEX);
	} else {
		push_window_info(L, hc->info);
	}
	arg = lua_gettop(L);

	for (i = 1; i <= n; i++) {
		char where[LUA_IDSIZE + 24];
		struct err herr;
		lua_Debug ar;

		if (lua_rawgeti(L, list, i) != LUA_TFUNCTION) {
			lua_pop(L, 1);
			continue; /* disabled */
		}
		lua_pushvalue(L, -1);
		lua_getinfo(L, ">S", &ar);
		snprintf(where, sizeof where, "%s:%d", ar.short_src,
			 ar.linedefined);
		lua_pushvalue(L, arg);
		sandbox_set_budget(sb, clock_now_ns(), hc->budget_ms,
				   hc->budget_key);
		if (sandbox_pcall(sb, 1, 0, where, &herr) != 0) {
			lua_pushboolean(L, 0);
			lua_rawseti(L, list, i);
			hook_failed(hc, &herr);
		}
		sandbox_clear_budget(sb);
	}
	return 0;
}

/* Makes the trace object a call handed out unusable (a hook may have
 * kept it), and drops the reference. Never raises. */
static void invalidate_trace(lua_State *L, int *ref)
{
	if (*ref == LUA_NOREF)
		return;
	lua_rawgeti(L, LUA_REGISTRYINDEX, *ref);
	trace_lua_invalidate(L, -1);
	lua_pop(L, 1);
	luaL_unref(L, LUA_REGISTRYINDEX, *ref);
	*ref = LUA_NOREF;
}

/* Runs the hooks of one kind; the caller holds the lock. */
static enum policy_status call_hooks(struct policy *p, const char *kind,
				     enum hook_arg arg_type, const void *info,
				     uint32_t budget_ms, const char *budget_key,
				     struct err *e)
{
	struct hook_call hc = { p, kind, arg_type, info, budget_ms, budget_key,
				e, 0, LUA_NOREF };
	lua_State *L = sandbox_lua(p->sb);
	struct err local;
	char where[64];

	if (p->hooks_ref == LUA_NOREF)
		return POLICY_OK;
	snprintf(where, sizeof where, "prof.%s", kind);
	lua_pushcfunction(L, run_hooks);
	lua_pushlightuserdata(L, &hc);
	/* The hooks have their own budget; this one covers building the
	 * argument table. */
	sandbox_set_budget(p->sb, clock_now_ns(), budget_ms, budget_key);
	if (sandbox_pcall(p->sb, 1, 0, where, &local) != 0) {
		sandbox_clear_budget(p->sb);
		invalidate_trace(L, &hc.trace_ref);
		err_set(e, "%s", local.msg);
		return POLICY_ERROR;
	}
	sandbox_clear_budget(p->sb);
	invalidate_trace(L, &hc.trace_ref);
	return hc.failed ? POLICY_ERROR : POLICY_OK;
}

enum policy_status policy_on_step(struct policy *p,
				  const struct policy_step_info *info,
				  struct err *e)
{
	enum policy_status st;

	if (!p || !p->sb)
		return POLICY_OK;
	if (!info) {
		err_set(e, "policy_on_step: no step information");
		return POLICY_ERROR;
	}
	if (pthread_mutex_trylock(&p->lock) != 0)
		return POLICY_BUSY;
	st = call_hooks(p, "on_step", HOOK_ARG_STEP, info, p->cfg.limits.hook_ms,
			"hook_ms", e);
	pthread_mutex_unlock(&p->lock);
	return st;
}

/* The window hooks: try-lock, or wait when `wait` (on_trace_ready). */
static enum policy_status window_hooks(struct policy *p, const char *kind,
				       enum hook_arg arg_type, const void *info,
				       bool wait, uint32_t budget_ms,
				       const char *budget_key, struct err *e)
{
	enum policy_status st;

	if (!p || !p->sb)
		return POLICY_OK;
	if (!info) {
		err_set(e, "policy: prof.%s: no window information", kind);
		return POLICY_ERROR;
	}
	if ((wait ? pthread_mutex_lock(&p->lock)
		  : pthread_mutex_trylock(&p->lock)) != 0)
		return POLICY_BUSY;
	st = call_hooks(p, kind, arg_type, info, budget_ms, budget_key, e);
	pthread_mutex_unlock(&p->lock);
	return st;
}

enum policy_status policy_on_window_start(struct policy *p,
					  const struct policy_window_info *w,
					  struct err *e)
{
	return window_hooks(p, "on_window_start", HOOK_ARG_WINDOW, w, false,
			    p ? p->cfg.limits.hook_ms : 0, "hook_ms", e);
}

enum policy_status policy_on_window_end(struct policy *p,
					const struct policy_window_info *w,
					struct err *e)
{
	return window_hooks(p, "on_window_end", HOOK_ARG_WINDOW, w, false,
			    p ? p->cfg.limits.hook_ms : 0, "hook_ms", e);
}

enum policy_status policy_on_trace_ready(struct policy *p,
					 const struct policy_trace *tr,
					 struct err *e)
{
	if (tr && !tr->trace) {
		err_set(e, "policy: prof.on_trace_ready: no trace");
		return POLICY_ERROR;
	}
	return window_hooks(p, "on_trace_ready", HOOK_ARG_TRACE, tr, true,
			    p ? p->cfg.limits.report_ms : 0, "report_ms", e);
}

/* ------------------------------------------------------------ reports */

/* One call into prof.reports. */
struct report_call {
	struct policy *p;
	const struct policy_trace *tr; /* NULL: the run report */
	unsigned formats;
	bool keep;
	struct policy_report *out;
	int trace_ref;
};

/* Copies string field `key` of the table on top into *dst (malloc'd). */
static void take_field(lua_State *L, const char *key, char **dst)
{
	size_t n;
	const char *s;

	if (lua_getfield(L, -1, key) == LUA_TSTRING) {
		s = lua_tolstring(L, -1, &n);
		*dst = malloc(n + 1);
		if (!*dst)
			luaL_error(L, "out of memory");
		memcpy(*dst, s, n + 1);
	}
	lua_pop(L, 1);
}

/* Protected: require("prof.reports").window(trace, formats, keep) or
 * .run(formats); the result's text/json/html into rc->out. Arg 1: rc. */
static int run_report(lua_State *L)
{
	struct report_call *rc = lua_touserdata(L, 1);

	lua_getglobal(L, "require");
	lua_pushliteral(L, "prof.reports");
	lua_call(L, 1, 1);
	lua_getfield(L, -1, rc->tr ? "window" : "run");
	if (rc->tr) {
		trace_lua_push(L, rc->tr->trace, rc->tr->dir, rc->tr->out, rc->tr->files);
		lua_pushvalue(L, -1);
		rc->trace_ref = luaL_ref(L, LUA_REGISTRYINDEX);
	}
	lua_createtable(L, 0, 3);
	lua_pushboolean(L, rc->formats & POLICY_REPORT_TEXT);
	lua_setfield(L, -2, "text");
	lua_pushboolean(L, rc->formats & POLICY_REPORT_JSON);
	lua_setfield(L, -2, "json");
	lua_pushboolean(L, rc->formats & POLICY_REPORT_HTML);
	lua_setfield(L, -2, "html");
	if (rc->tr) {
		lua_pushboolean(L, rc->keep);
		lua_call(L, 3, 1);
	} else {
		lua_call(L, 1, 1);
	}
	if (!lua_istable(L, -1))
		return luaL_error(L, "prof.reports returned no table");
	take_field(L, "text", &rc->out->text);
	take_field(L, "json", &rc->out->json);
	take_field(L, "html", &rc->out->html);
	take_field(L, "findings", &rc->out->findings);
	return 0;
}

static enum policy_status report_common(struct policy *p, struct report_call *rc,
					struct err *e)
{
	lua_State *L;
	struct err local;
	int status;

	memset(rc->out, 0, sizeof *rc->out);
	if (!p || !p->sb) {
		err_set(e, "policy: no policy to run the reports in");
		return POLICY_ERROR;
	}
	if (pthread_mutex_lock(&p->lock) != 0)
		return POLICY_BUSY;
	L = sandbox_lua(p->sb);
	lua_pushcfunction(L, run_report);
	lua_pushlightuserdata(L, rc);
	sandbox_set_budget(p->sb, clock_now_ns(), p->cfg.limits.report_ms, "report_ms");
	status = sandbox_pcall(p->sb, 1, 0, "built-in reports", &local);
	sandbox_clear_budget(p->sb);
	invalidate_trace(L, &rc->trace_ref);
	pthread_mutex_unlock(&p->lock);
	if (status != 0) {
		policy_report_free(rc->out);
		err_set(e, "%s (in the built-in reports)", local.msg);
		return POLICY_ERROR;
	}
	return POLICY_OK;
}

enum policy_status policy_report_window(struct policy *p,
					const struct policy_trace *tr,
					unsigned formats, bool keep,
					struct policy_report *out,
					struct err *e)
{
	struct report_call rc = { p, tr, formats, keep, out, LUA_NOREF };

	if (!tr || !tr->trace) {
		memset(out, 0, sizeof *out);
		err_set(e, "policy: the reports need a trace");
		return POLICY_ERROR;
	}
	return report_common(p, &rc, e);
}

enum policy_status policy_report_run(struct policy *p, unsigned formats,
				     struct policy_report *out, struct err *e)
{
	struct report_call rc = { p, NULL, formats, false, out, LUA_NOREF };

	return report_common(p, &rc, e);
}

void policy_report_free(struct policy_report *r)
{
	if (!r)
		return;
	free(r->text);
	free(r->json);
	free(r->html);
	free(r->findings);
	r->text = r->json = r->html = r->findings = NULL;
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

void policy_after_fork_child(struct policy *p)
{
	if (!p)
		return;
	if (pthread_mutex_trylock(&p->lock) == 0) {
		pthread_mutex_unlock(&p->lock);
		return;
	}
	/* Held by a thread that does not exist here: the VM may be
	 * half-way through a change. */
	p->repl.broken = true;
}

void policy_free(struct policy *p)
{
	struct policy_config *c;

	if (!p)
		return;
	sandbox_free(p->sb);
	c = &p->cfg;
	free(c->output_dir);
	free(c->run_name);
	free(c->steps.nvtx);
	free(c->steps.nvtx_domain);
	free(c->steps.nvtx_mark);
	free(c->steps.python);
	free(c->steps.cuda);
	free(c->steps.kernel);
	free(c->capture_range.nvtx);
	free(c->capture_range.nvtx_domain);
	free(c->export.sort_by);
	free(c->export.group_by);
	free(p->source);
	free(p->script);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

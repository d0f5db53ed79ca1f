/* policy_config — the resolved configuration (prof._config()) read into
 * struct policy_config, and the hook flags that follow the hook lists
 * (see policy_internal.h). */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "policy_internal.h"

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

static double cfg_num(lua_State *L, int t, const char *key, double min,
		      double max)
{
	double v;
	int isnum;

	lua_getfield(L, t, key);
	v = lua_tonumberx(L, -1, &isnum);
	lua_pop(L, 1);
	if (!isnum || !(v >= min && v <= max))
		luaL_error(L, "policy: configuration field '%s' is not a number from %f to %f",
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
	c->has_on_hang = has_hooks(L, hooks, "on_hang");
}

/* prof._native.hooks_changed(): a hook was registered after loading (at
 * the REPL, or by another hook); the host's has_on_* flags follow the hook
 * lists, so a kind of hook the policy file did not have starts running.
 * Upvalue 1: the policy. */
int policy_native_hooks_changed(lua_State *L)
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
void policy_read_schedule(lua_State *L, int cfg, struct policy_config *c)
{
	int s = cfg_section(L, cfg, "schedule");

	c->schedule.enabled = cfg_bool(L, s, "enabled");
	c->schedule.skip_first = cfg_u32(L, s, "skip_first", 0);
	c->schedule.wait = cfg_u32(L, s, "wait", 0);
	c->schedule.warmup = cfg_u32(L, s, "warmup", 0);
	c->schedule.active = cfg_u32(L, s, "active", 1);
	c->schedule.cycles = cfg_u32(L, s, "cycles", 0);
	c->schedule.whole = c->schedule.enabled && cfg_bool(L, s, "whole");
	lua_pop(L, 1);
}

/* The capture section of the resolved configuration at index cfg. */
void policy_read_capture(lua_State *L, int cfg, struct policy_config *c)
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
	c->capture.modules = cfg_bool(L, s, "modules");
	c->capture.cuda_backtrace_us = cfg_u32(L, s, "cuda_backtrace_us", 0);
	c->capture.record_shapes = cfg_bool(L, s, "record_shapes");
	c->capture.with_flops = cfg_bool(L, s, "with_flops");
	c->capture.profile_memory = cfg_bool(L, s, "profile_memory");
	c->capture.with_stack = cfg_bool(L, s, "with_stack");
	lua_getfield(L, s, "peak_tflops");
	c->capture.peak_tflops = lua_tonumber(L, -1); /* checked by prof.schema */
	lua_pop(L, 1);
	c->capture.buffer_bytes =
		(size_t)cfg_int(L, s, "buffer_mb", 1, 65536) * POLICY_MIB;
	lua_pop(L, 1);
}

/* Protected: prof._load_done(), then the configuration into p->cfg (strings
 * stored as they are copied, so policy_free releases them on failure).
 * Arg 1: the policy. */
int policy_read_config(lua_State *L)
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

	policy_read_schedule(L, cfg, c);

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

	policy_read_capture(L, cfg, c);

	s = cfg_section(L, cfg, "export");
	c->export.chrome = cfg_bool(L, s, "chrome");
	c->export.chrome_gzip = cfg_bool(L, s, "chrome_gzip");
	c->export.tensorboard = cfg_bool(L, s, "tensorboard");
	c->export.key_averages = cfg_bool(L, s, "key_averages");
	cfg_str(L, s, "sort_by", false, &c->export.sort_by);
	c->export.row_limit = cfg_u32(L, s, "row_limit", 0);
	cfg_str(L, s, "group_by", false, &c->export.group_by);
	c->export.group_by_input_shape = cfg_bool(L, s, "group_by_input_shape");
	c->export.group_by_stack_n = cfg_u32(L, s, "group_by_stack_n", 0);
	c->export.stacks = cfg_bool(L, s, "stacks");
	cfg_str(L, s, "stacks_metric", false, &c->export.stacks_metric);
	c->export.memory_timeline = cfg_bool(L, s, "memory_timeline");
	c->export.summary = cfg_bool(L, s, "summary");
	c->export.raw = cfg_bool(L, s, "raw");
	c->export.report_text = cfg_bool(L, s, "report_text");
	c->export.report_html = cfg_bool(L, s, "report_html");

	s = cfg_section(L, cfg, "recorder");
	c->recorder.enabled = cfg_bool(L, s, "enabled");
	c->recorder.start_paused = !cfg_bool(L, s, "on");
	c->recorder.steps = cfg_u32(L, s, "steps", 1);
	c->recorder.bytes = (size_t)cfg_int(L, s, "mb", 1, 65536) * POLICY_MIB;
	c->recorder.max_dumps = cfg_u32(L, s, "max_dumps", 0);
	c->recorder.dump_on_crash = cfg_bool(L, s, "dump_on_crash");
	c->recorder.dump_on_signal = cfg_bool(L, s, "dump_on_signal");
	c->recorder.dump_on_exception = cfg_bool(L, s, "dump_on_exception");
	c->recorder.cpu_samples = cfg_bool(L, s, "cpu_samples");
	c->recorder.phases = cfg_bool(L, s, "phases");
	c->recorder.cuda = cfg_bool(L, s, "cuda");
	c->recorder.job = cfg_bool(L, s, "job");
	lua_pop(L, 1);

	s = cfg_section(L, cfg, "job");
	c->job.poll_ms = cfg_u32(L, s, "poll_ms", 0);
	lua_pop(L, 1);

	s = cfg_section(L, cfg, "watchdog");
	c->watchdog.enabled = cfg_bool(L, s, "enabled");
	c->watchdog.after_s = cfg_num(L, s, "after_s", 0.01, 1e7);
	c->watchdog.factor = cfg_num(L, s, "factor", 0, 1e6);
	c->watchdog.dump = cfg_bool(L, s, "dump");
	lua_pop(L, 1);

	s = cfg_section(L, cfg, "limits");
	c->limits.hook_ms = cfg_u32(L, s, "hook_ms", 1);
	c->limits.report_ms = cfg_u32(L, s, "report_ms", 1);
	c->limits.load_ms = cfg_u32(L, s, "load_ms", 1);
	c->limits.repl_ms = cfg_u32(L, s, "repl_ms", 1);
	c->limits.exit_ms = cfg_u32(L, s, "exit_ms", 100);
	c->limits.memory_bytes =
		(size_t)cfg_int(L, s, "memory_mb", 1, 65536) * POLICY_MIB;
	return 0;
}

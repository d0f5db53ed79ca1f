/* policy — the Lua policy engine (see policy.h): the VM's lifecycle,
 * loading the prof module and the policy file, the natives the file may
 * call while loading, fork and free. The other concerns are in
 * policy_config.c, policy_live.c, policy_hooks.c and policy_repl.c
 * (policy_internal.h). */
#include "policy.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>

#include "../events/clock.h"
#include "../util/fsutil.h"
#include "policy_internal.h"
#include "sandbox.h"

#define POLICY_DEFAULT_SOURCE "(built-in default)"
#define POLICY_DEFAULT_MEMORY (64 * POLICY_MIB)
#define POLICY_DEFAULT_LOAD_MS 2000
#define POLICY_SOURCE_MAX ((size_t)64 << 20) /* the sandbox's limit */

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

/* prof._native.capture_job(steps, reason) -> true | nil, message: asks
 * every rank of the run for `steps` steps (prof.capture_now{ job = true }).
 * Upvalue 1: the policy. Runs the host's callback (policy lock held). */
static int native_capture_job(lua_State *L)
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
	if (!p->capture_job) {
		lua_pushliteral(L, "not available (the host installed no job capture function)");
		return 2;
	}
	e.msg[0] = '\0';
	if (p->capture_job(p->capture_ctx, (uint32_t)steps, reason, &e) != 0) {
		lua_pushstring(L, e.msg[0] ? e.msg : "the host refused the request");
		return 2;
	}
	lua_pushboolean(L, 1);
	return 1;
}

/* prof._native.dump(steps, reason) -> true | false, message: a refusal
 * (recorder off, window recording, dumps used up) is an answer, not an
 * error. Upvalue 1: the policy. Runs the host's callback (policy lock
 * held). */
static int native_dump(lua_State *L)
{
	struct policy *p = lua_touserdata(L, lua_upvalueindex(1));
	lua_Integer steps = luaL_checkinteger(L, 1);
	const char *reason = luaL_optstring(L, 2, NULL);
	struct err e;

	if (steps < 1 || steps > (lua_Integer)UINT32_MAX) {
		lua_pushboolean(L, 0);
		lua_pushliteral(L, "'steps' must be an integer >= 1");
		return 2;
	}
	if (!p->dump) {
		lua_pushboolean(L, 0);
		lua_pushliteral(L, "not available (the host installed no dump function)");
		return 2;
	}
	e.msg[0] = '\0';
	if (p->dump(p->capture_ctx, (uint32_t)steps, reason, &e) != 0) {
		lua_pushboolean(L, 0);
		lua_pushstring(L, e.msg[0] ? e.msg : "the host refused the dump");
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
			{ "capture_job", native_capture_job },
			{ "dump", native_dump },
			{ "set_limits", native_set_limits },
			{ "repl_active", policy_native_repl_active },
			{ "query", policy_native_query },
			{ "reconfigure", policy_native_reconfigure },
			{ "recorder", policy_native_recorder },
			{ "sleep", policy_native_sleep },
			{ "hooks_changed", policy_native_hooks_changed },
			{ NULL, NULL }
		};

		lua_createtable(L, 0, 10);
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

/* The name of the prof.<name>{ or prof.<name>( call that begins last in
 * text[0..len) before the end of line `line` (from 1), into out (cut to
 * outsz - 1 bytes); "" when there is none. */
static void last_call_before(const char *text, size_t len, long line, char *out,
			     size_t outsz)
{
	size_t i, end = 0, n;
	long l = 1;

	out[0] = '\0';
	while (end < len && (l < line || text[end] != '\n'))
		l += text[end++] == '\n';
	for (i = 0; i + 5 < end; i++) {
		size_t j = i + 5;

		if (memcmp(text + i, "prof.", 5) != 0 ||
		    (i > 0 && (isalnum((unsigned char)text[i - 1]) || text[i - 1] == '_')))
			continue;
		while (j < end && (isalnum((unsigned char)text[j]) || text[j] == '_'))
			j++;
		n = j - i - 5;
		while (j < end && isspace((unsigned char)text[j]))
			j++;
		if (n == 0 || j >= end || (text[j] != '{' && text[j] != '('))
			continue;
		if (n >= outsz)
			n = outsz - 1;
		memcpy(out, text + i + 5, n);
		out[n] = '\0';
	}
}

/* The policy file did not compile; its message is on top of the stack. A
 * keyword written as a key (`repeat = 2`, as torch spells it) gets the
 * hint of the configuration call it is in (prof._syntax_hint), which
 * replaces the message. Protected; raises only memory errors. */
static void syntax_hint(lua_State *L, const char *path)
{
	const char *msg = lua_tostring(L, -1), *at;
	char section[64] = "";
	long line = 0;
	size_t len;
	struct err e;
	char *text;

	if (!msg || !strstr(msg, " near '"))
		return;
	/* "path:LINE: ..." */
	at = strncmp(msg, path, strlen(path)) == 0 ? msg + strlen(path) : NULL;
	if (at && at[0] == ':')
		line = strtol(at + 1, NULL, 10);
	text = line > 0 ? fsutil_read(path, POLICY_SOURCE_MAX, &len, &e) : NULL;
	if (text) {
		last_call_before(text, len, line, section, sizeof section);
		free(text);
	}
	if (lua_getglobal(L, "prof") != LUA_TTABLE) {
		lua_pop(L, 1);
		return;
	}
	if (lua_getfield(L, -1, "_syntax_hint") != LUA_TFUNCTION) {
		lua_pop(L, 2);
		return;
	}
	lua_pushvalue(L, -3);
	lua_pushstring(L, section);
	if (lua_pcall(L, 2, 1, 0) != LUA_OK || !lua_isstring(L, -1)) {
		lua_pop(L, 2);
		return;
	}
	lua_replace(L, -3);
	lua_pop(L, 1);
}

/* Protected: loads and runs the policy file (text only). Arg 1: its path
 * as a light userdata. */
static int run_file(lua_State *L)
{
	const char *path = lua_touserdata(L, 1);
	int rc = sandbox_loadfile(L, path);

	if (rc == LUA_ERRSYNTAX)
		syntax_hint(L, path);
	if (rc != LUA_OK)
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

/* Checks that `path` is a readable Lua source file that no one but this
 * user or root can change (fsutil_check_code). `label` names where the
 * path came from ("PROF_SCRIPT"). Returns 0 or -1 with *e set. */
static int check_script(const char *path, const char *label, struct err *e)
{
	struct err why;
	struct stat st;
	char c = 0;
	int fd = fsutil_open_regular(path, &st);

	if (fd == FSUTIL_NOT_REGULAR)
		return err_set(e, "%s: '%s' is %s, not a regular file", label, path,
			       fsutil_file_kind(st.st_mode));
	if (fd < 0)
		return err_errno(e, errno, "%s: cannot open '%s'", label, path);
	if (fsutil_check_code(&st, path, &why) != 0) {
		close(fd);
		return err_set(e, "%s: %s", label, why.msg);
	}
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
	p->dump = opts->dump;
	p->capture_job = opts->capture_job;
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

	lua_pushcfunction(L, policy_read_config);
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
	free(c->export.stacks_metric);
	free(p->source);
	free(p->script);
	pthread_mutex_destroy(&p->lock);
	free(p);
}


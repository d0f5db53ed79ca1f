/* sandbox — a restricted Lua 5.4 state for policy files (see sandbox.h). */
#include "sandbox.h"

#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lualib.h>

#include "../common/clock.h"
#include "../util/fsutil.h"
#include "../common/log.h"
#include "pattern.h"

#define SANDBOX_HOOK_COUNT 1000 /* instructions between budget checks */
#define SANDBOX_MIB ((size_t)1 << 20)
#define SANDBOX_POLL_NS 20000000 /* at most one poll() per 20 ms */
#define SANDBOX_SOURCE_MAX ((size_t)64 << 20) /* a policy or module file */

struct sandbox {
	lua_State *L;
	size_t used, limit;        /* bytes held, cap */
	int64_t deadline_ns;       /* 0: no budget */
	uint32_t budget_ms;
	const char *budget_key;
	char *lua_dir, *policy_dir;
	sandbox_print_fn print_fn;  /* NULL: print() logs */
	void *print_ctx;
	sandbox_poll_fn poll_fn;    /* NULL: nothing to poll */
	void *poll_ctx;
	int64_t last_poll_ns;
	atomic_int interrupted;
};

/* ------------------------------------------------------------ allocator */

/* lua_Alloc that refuses to grow past sb->limit. Shrinking never fails. */
static void *sb_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
	struct sandbox *sb = ud;
	size_t old = ptr ? osize : 0; /* with ptr NULL, osize is a type tag */
	void *np;

	if (nsize == 0) {
		free(ptr);
		sb->used -= old;
		return NULL;
	}
	if (nsize > old &&
	    (sb->used > sb->limit || nsize - old > sb->limit - sb->used))
		return NULL;
	np = realloc(ptr, nsize);
	if (!np)
		return nsize <= old ? ptr : NULL;
	sb->used = sb->used - old + nsize;
	return np;
}

/* ------------------------------------------------------------ budget */

static void sb_count_hook(lua_State *L, lua_Debug *ar);

/* Pushes "<file>:<line>: " of the innermost Lua function of thread `from`
 * at stack level `level` or above, or "" when there is none. */
static void push_where(lua_State *L, lua_State *from, int level)
{
	lua_Debug ar;

	for (; lua_getstack(from, level, &ar); level++) {
		if (lua_getinfo(from, "Sl", &ar) && ar.currentline > 0) {
			lua_pushfstring(L, "%s:%d: ", ar.short_src, ar.currentline);
			return;
		}
	}
	lua_pushliteral(L, "");
}

/* Raises the budget error, or "interrupted", at the file:line of the
 * innermost Lua function at stack level `level` or above, once the deadline
 * has passed or an interrupt came (the poll function may bring one). From
 * then on the count hook runs at every
 * instruction, so code that catches the error with pcall is stopped again
 * at its next instruction outside the pcall. */
static void sb_check(lua_State *L, int level)
{
	void *ud;
	struct sandbox *sb;
	int64_t now = 0;
	bool over, intr;

	lua_getallocf(L, &ud);
	sb = ud;
	if (sb->deadline_ns != 0 || sb->poll_fn)
		now = clock_now_ns();
	if (sb->poll_fn && now - sb->last_poll_ns >= SANDBOX_POLL_NS) {
		sb->last_poll_ns = now;
		if (sb->poll_fn(sb->poll_ctx))
			atomic_store(&sb->interrupted, 1);
	}
	intr = atomic_load_explicit(&sb->interrupted, memory_order_relaxed) != 0;
	over = sb->deadline_ns != 0 && now >= sb->deadline_ns;
	if (!intr && !over) {
		if (lua_gethookcount(L) != SANDBOX_HOOK_COUNT)
			lua_sethook(L, sb_count_hook, LUA_MASKCOUNT,
				    SANDBOX_HOOK_COUNT);
		return;
	}
	if (lua_gethookcount(L) != 1)
		lua_sethook(L, sb_count_hook, LUA_MASKCOUNT, 1);
	push_where(L, L, level);
	if (intr)
		lua_pushliteral(L, "interrupted");
	else if (strcmp(sb->budget_key, "repl_ms") == 0)
		lua_pushfstring(L, "command exceeded its %d ms time budget (prof.limits{%s=...})",
				(int)sb->budget_ms, sb->budget_key);
	else
		lua_pushfstring(L, "policy exceeded its %d ms time budget (prof.limits{%s=...})",
				(int)sb->budget_ms, sb->budget_key);
	lua_concat(L, 2);
	lua_error(L);
}

bool sandbox_stopping(lua_State *L)
{
	void *ud;
	struct sandbox *sb;

	if (lua_getallocf(L, &ud) != sb_alloc)
		return false;
	sb = ud;
	return atomic_load(&sb->interrupted) != 0 ||
	       (sb->deadline_ns != 0 && clock_now_ns() >= sb->deadline_ns);
}

/* Count hook (every SANDBOX_HOOK_COUNT instructions, inherited into
 * coroutines): the budget check at the running function's line. */
static void sb_count_hook(lua_State *L, lua_Debug *ar)
{
	(void)ar;
	sb_check(L, 0);
}

/* The pattern functions' check (src/policy/pattern.h): the budget at the
 * line that called string.find & co. */
static void sb_pattern_check(lua_State *L)
{
	sb_check(L, 1);
}

void sandbox_set_budget(struct sandbox *sb, int64_t start_ns, uint32_t ms,
			const char *key)
{
	if (!sb)
		return;
	sb->budget_ms = ms;
	sb->budget_key = key ? key : "hook_ms";
	sb->deadline_ns = start_ns + (int64_t)ms * 1000000;
	if (sb->deadline_ns == 0)
		sb->deadline_ns = 1;
}

void sandbox_clear_budget(struct sandbox *sb)
{
	if (sb)
		sb->deadline_ns = 0;
}

void sandbox_set_print(struct sandbox *sb, sandbox_print_fn fn, void *ctx)
{
	if (!sb)
		return;
	sb->print_fn = fn;
	sb->print_ctx = ctx;
}

void sandbox_set_poll(struct sandbox *sb, sandbox_poll_fn fn, void *ctx)
{
	if (!sb)
		return;
	sb->poll_fn = fn;
	sb->poll_ctx = ctx;
	sb->last_poll_ns = 0;
}

void sandbox_interrupt(struct sandbox *sb)
{
	if (sb)
		atomic_store(&sb->interrupted, 1);
}

bool sandbox_interrupted(struct sandbox *sb)
{
	return sb && atomic_load(&sb->interrupted) != 0;
}

void sandbox_clear_interrupt(struct sandbox *sb)
{
	if (sb)
		atomic_store(&sb->interrupted, 0);
}

/* ------------------------------------------------------------ replacements */

/* A function that refuses: upvalue 1 is its name ("os.execute"). */
static int sb_denied(lua_State *L)
{
	return luaL_error(L, "%s is not available in a profhost policy",
			  lua_tostring(L, lua_upvalueindex(1)));
}

static void push_denied(lua_State *L, const char *name)
{
	lua_pushstring(L, name);
	lua_pushcclosure(L, sb_denied, 1);
}

/* __index of the `io` stand-in: any io.X refuses, at the caller's line. */
static int sb_io_index(lua_State *L)
{
	const char *key = lua_tostring(L, 2);
	int is_write = key && strcmp(key, "write") == 0;

	return luaL_error(L, "io.%s is not available in a profhost policy%s",
			  key ? key : "?",
			  is_write ? " (print() writes to the profhost log)" : "");
}

/* load() for text chunks only: the mode argument is forced to "t".
 * Upvalue 1: the original load. */
static int sb_load(lua_State *L)
{
	if (lua_gettop(L) < 3)
		lua_settop(L, 3);
	lua_pushliteral(L, "t");
	lua_replace(L, 3);
	lua_pushvalue(L, lua_upvalueindex(1));
	lua_insert(L, 1);
	lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
	return lua_gettop(L);
}

/* setmetatable() without __gc: finalizers run with hooks off, so the time
 * budget could not stop one. Otherwise as the base library's. */
static int sb_setmetatable(lua_State *L)
{
	int t = lua_type(L, 2);

	luaL_checktype(L, 1, LUA_TTABLE);
	luaL_argexpected(L, t == LUA_TNIL || t == LUA_TTABLE, 2, "nil or table");
	if (luaL_getmetafield(L, 1, "__metatable") != LUA_TNIL)
		return luaL_error(L, "cannot change a protected metatable");
	if (t == LUA_TTABLE) {
		lua_pushliteral(L, "__gc");
		if (lua_rawget(L, 2) != LUA_TNIL)
			return luaL_error(L, "setmetatable: __gc metamethods are not available in a profhost policy");
		lua_pop(L, 1);
	}
	lua_settop(L, 2);
	lua_setmetatable(L, 1);
	return 1;
}

/* The function coroutine.wrap returns: resumes its coroutine (upvalue 1)
 * with the arguments and returns what it yields or returns. An error
 * raised inside the coroutine is raised again as it is: Lua's own wrap
 * prefixes the caller's position to a string error, which already holds
 * the position where it was raised ("a.lua:2: a.lua:1: boom"). Errors of
 * the resume itself (a dead coroutine) get the caller's position. */
static int sb_wrap_call(lua_State *L)
{
	lua_State *co = lua_tothread(L, lua_upvalueindex(1));
	int n = lua_gettop(L), nres, status;

	if (!lua_checkstack(co, n))
		return luaL_error(L, "too many arguments to resume");
	lua_xmove(L, co, n);
	status = lua_resume(co, L, n, &nres);
	if (status == LUA_OK || status == LUA_YIELD) {
		if (!lua_checkstack(L, nres + 1)) {
			lua_pop(co, nres);
			return luaL_error(L, "too many results to resume");
		}
		lua_xmove(co, L, nres);
		return nres;
	}
	if (lua_status(co) == LUA_OK) {
		/* refused by lua_resume: the message has no position */
		lua_xmove(co, L, 1);
		luaL_where(L, 1);
		lua_insert(L, -2);
		lua_concat(L, 2);
		return lua_error(L);
	}
	lua_resetthread(co); /* closes its to-be-closed variables */
	lua_xmove(co, L, 1);
	return lua_error(L);
}

/* coroutine.wrap(f), raising errors from inside as they are (see
 * sb_wrap_call). */
static int sb_wrap(lua_State *L)
{
	lua_State *co;

	luaL_checktype(L, 1, LUA_TFUNCTION);
	co = lua_newthread(L);
	lua_pushvalue(L, 1);
	lua_xmove(L, co, 1);
	lua_pushcclosure(L, sb_wrap_call, 1);
	return 1;
}

/* table.sort's default order, "<", checking the budget every
 * SANDBOX_HOOK_COUNT comparisons (Lua's own sort compares numbers and
 * strings without running an instruction, so the count hook never runs
 * during it). Upvalue 1: the comparison counter. */
static int sb_less(lua_State *L)
{
	int *n = lua_touserdata(L, lua_upvalueindex(1));

	if (++*n >= SANDBOX_HOOK_COUNT) {
		*n = 0;
		sb_check(L, 1);
	}
	lua_pushboolean(L, lua_compare(L, 1, 2, LUA_OPLT));
	return 1;
}

/* table.sort(t [, comp]): without comp, Lua's sort with sb_less as comp.
 * Upvalue 1: the library's sort. */
static int sb_sort(lua_State *L)
{
	luaL_checktype(L, 1, LUA_TTABLE);
	if (lua_isnoneornil(L, 2)) {
		int *n;

		lua_settop(L, 1);
		n = lua_newuserdatauv(L, sizeof *n, 0);
		*n = 0;
		lua_pushcclosure(L, sb_less, 1);
	}
	lua_pushvalue(L, lua_upvalueindex(1));
	lua_insert(L, 1);
	lua_call(L, lua_gettop(L) - 1, 0);
	return 0;
}

/* print(): one LOG_INFO line "<source>: a\tb", or "a\tb\n" to the print
 * function when one is set (the REPL). */
static int sb_print(lua_State *L)
{
	int n = lua_gettop(L), i;
	lua_Debug ar;
	char src[LUA_IDSIZE] = "policy";
	luaL_Buffer b;
	void *ud;
	struct sandbox *sb;
	const char *text;
	size_t len;

	lua_getallocf(L, &ud);
	sb = ud;
	luaL_buffinit(L, &b);
	for (i = 1; i <= n; i++) {
		if (i > 1)
			luaL_addchar(&b, '\t');
		luaL_tolstring(L, i, NULL);
		luaL_addvalue(&b);
	}
	if (sb->print_fn) {
		luaL_addchar(&b, '\n');
		luaL_pushresult(&b);
		text = lua_tolstring(L, -1, &len);
		sb->print_fn(sb->print_ctx, text, len);
		return 0;
	}
	luaL_pushresult(&b);
	if (lua_getstack(L, 1, &ar) && lua_getinfo(L, "S", &ar))
		snprintf(src, sizeof src, "%s", ar.short_src);
	log_msg(LOG_INFO, "%s: %s", src, lua_tostring(L, -1));
	return 0;
}

/* ------------------------------------------------------------ loading */

/* Loads the regular file open on `fd` (named `path`, *st its fstat) as a
 * text chunk and pushes it; see sandbox_loadfile(). Code that someone else
 * could have written is refused (fsutil_check_code, on this descriptor).
 * Closes fd. Nothing is held while Lua may raise (a memory error): the
 * text is read and fd closed first. */
static int load_fd(lua_State *L, int fd, const struct stat *st, const char *path)
{
	struct err e;
	char chunkname[PATH_MAX + 2];
	size_t len, skip = 0;
	char *text = NULL;
	int rc;

	if (fsutil_check_code(st, path, &e) == 0)
		text = fsutil_read_fd(fd, path, SANDBOX_SOURCE_MAX, &len, &e);
	close(fd);
	if (!text) {
		lua_pushstring(L, e.msg);
		return LUA_ERRFILE;
	}
	if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0)
		skip = 3;
	if (skip < len && text[skip] == '#') {
		/* a "#!" line: dropped, its newline kept for the line numbers */
		while (skip < len && text[skip] != '\n')
			skip++;
	}
	snprintf(chunkname, sizeof chunkname, "@%s", path);
	/* returns LUA_ERRMEM rather than raising */
	rc = luaL_loadbufferx(L, text + skip, len - skip, chunkname, "t");
	free(text);
	return rc;
}

int sandbox_loadfile(lua_State *L, const char *path)
{
	struct stat st;
	int fd = fsutil_open_regular(path, &st);

	if (fd == FSUTIL_NOT_REGULAR) {
		lua_pushfstring(L, "%s is %s, not a regular file", path,
				fsutil_file_kind(st.st_mode));
		return LUA_ERRFILE;
	}
	if (fd < 0) {
		lua_pushfstring(L, "cannot open %s: %s", path, strerror(errno));
		return LUA_ERRFILE;
	}
	return load_fd(L, fd, &st, path);
}

/*
 * require(name) over a fixed path of Lua files (upvalue 1: "a/?.lua;..."),
 * after package.loaded and package.preload. Dots in the name become '/', so
 * a name can never climb out of the searched directories. Upvalue 2: the
 * directories, for the error message.
 */
static int sb_require(lua_State *L)
{
	const char *name = luaL_checkstring(L, 1);
	const char *path = lua_tostring(L, lua_upvalueindex(1));
	const char *modpath, *tpl, *filename = NULL;
	struct stat st;
	struct err e;
	int fd = -1;

	lua_settop(L, 1);
	luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE); /* 2 */
	if (lua_getfield(L, 2, name) != LUA_TNIL && lua_toboolean(L, -1))
		return 1;
	lua_pop(L, 1);

	luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE); /* 3 */
	if (lua_getfield(L, 3, name) == LUA_TFUNCTION) {          /* 4 */
		lua_pushstring(L, name);
		lua_pushliteral(L, ":preload:");
		filename = ":preload:";
	} else {
		lua_pop(L, 1);
		modpath = luaL_gsub(L, name, ".", "/");            /* 4 */
		for (tpl = path; *tpl; ) {
			const char *end = strchr(tpl, ';');
			size_t len = end ? (size_t)(end - tpl) : strlen(tpl);

			lua_pushlstring(L, tpl, len);
			filename = luaL_gsub(L, lua_tostring(L, -1), "?", modpath);
			lua_remove(L, -2);
			/* never blocks: a FIFO there is refused, not waited on */
			fd = fsutil_open_regular(filename, &st);
			if (fd == FSUTIL_NOT_REGULAR)
				return luaL_error(L, "module '%s': %s is %s, not a regular file",
						  name, filename, fsutil_file_kind(st.st_mode));
			if (fd >= 0)
				break;
			lua_pop(L, 1);
			filename = NULL;
			tpl += len + (end ? 1 : 0);
		}
		if (!filename)
			return luaL_error(L, "module '%s' not found in %s", name,
					  lua_tostring(L, lua_upvalueindex(2)));
		/* stack: ... modpath filename; loaded from the descriptor found,
		 * never reopened by name */
		if (fsutil_check_code(&st, filename, &e) != 0) {
			close(fd);
			return luaL_error(L, "module '%s': %s", name, e.msg);
		}
		if (load_fd(L, fd, &st, filename) != LUA_OK)
			return lua_error(L);
		lua_pushstring(L, name);
		lua_pushvalue(L, -3);
	}
	/* stack: ... loader name data */
	lua_call(L, 2, 1);
	if (!lua_isnil(L, -1))
		lua_setfield(L, 2, name);
	else
		lua_pop(L, 1);
	if (lua_getfield(L, 2, name) == LUA_TNIL) {
		lua_pushboolean(L, 1);
		lua_copy(L, -1, -2);
		lua_setfield(L, 2, name);
	}
	lua_pushstring(L, filename);
	return 2;
}

/* ------------------------------------------------------------ setup */

/* Replaces the global and package.loaded entry `name` with the table on top
 * of the stack (popped). */
static void set_library(lua_State *L, const char *name)
{
	luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
	lua_pushvalue(L, -2);
	lua_setfield(L, -2, name);
	lua_pop(L, 1);
	lua_setglobal(L, name);
}

static void setup_os(lua_State *L)
{
	static const char *const keep[] = { "clock", "date", "difftime",
					    "getenv", "time", NULL };
	static const char *const deny[] = { "os.execute", "os.exit", "os.remove",
					    "os.rename", "os.setlocale",
					    "os.tmpname", NULL };
	int i;

	luaL_requiref(L, LUA_OSLIBNAME, luaopen_os, 0);
	lua_newtable(L);
	for (i = 0; keep[i]; i++) {
		lua_getfield(L, -2, keep[i]);
		lua_setfield(L, -2, keep[i]);
	}
	for (i = 0; deny[i]; i++) {
		push_denied(L, deny[i]);
		lua_setfield(L, -2, deny[i] + 3);
	}
	lua_remove(L, -2);
	set_library(L, LUA_OSLIBNAME);
}

static void setup_io(lua_State *L)
{
	lua_newtable(L);
	lua_newtable(L);
	lua_pushcfunction(L, sb_io_index);
	lua_setfield(L, -2, "__index");
	lua_pushliteral(L, "io is not available in a profhost policy");
	lua_setfield(L, -2, "__metatable");
	lua_setmetatable(L, -2);
	set_library(L, LUA_IOLIBNAME);
}

static void setup_base(lua_State *L)
{
	lua_pushglobaltable(L);
	push_denied(L, "loadfile");
	lua_setfield(L, -2, "loadfile");
	push_denied(L, "dofile");
	lua_setfield(L, -2, "dofile");
	lua_getfield(L, -1, "load");
	lua_pushcclosure(L, sb_load, 1);
	lua_setfield(L, -2, "load");
	lua_pushcfunction(L, sb_setmetatable);
	lua_setfield(L, -2, "setmetatable");
	lua_pushcfunction(L, sb_print);
	lua_setfield(L, -2, "print");
	lua_getfield(L, -1, LUA_COLIBNAME);
	lua_pushcfunction(L, sb_wrap);
	lua_setfield(L, -2, "wrap");
	lua_pop(L, 1);
	lua_getfield(L, -1, LUA_TABLIBNAME);
	lua_getfield(L, -1, "sort");
	lua_pushcclosure(L, sb_sort, 1);
	lua_setfield(L, -2, "sort");
	lua_pop(L, 2);
}

/* Restricts the package table on top of the stack and installs require. */
static void setup_package(lua_State *L, struct sandbox *sb)
{
	int pkg = lua_gettop(L);
	lua_Integer i;

	if (sb->policy_dir) {
		lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;%s/?.lua;%s/?/init.lua",
				sb->lua_dir, sb->lua_dir, sb->policy_dir,
				sb->policy_dir);
		lua_pushfstring(L, "'%s' or '%s'", sb->lua_dir, sb->policy_dir);
	} else {
		lua_pushfstring(L, "%s/?.lua;%s/?/init.lua", sb->lua_dir,
				sb->lua_dir);
		lua_pushfstring(L, "'%s'", sb->lua_dir);
	}
	lua_pushvalue(L, -2);
	lua_setfield(L, pkg, "path");
	lua_pushcclosure(L, sb_require, 2);
	lua_setglobal(L, "require");

	lua_pushliteral(L, "");
	lua_setfield(L, pkg, "cpath");
	push_denied(L, "package.loadlib");
	lua_setfield(L, pkg, "loadlib");
	push_denied(L, "package.searchpath");
	lua_setfield(L, pkg, "searchpath");
	/* Keep only the preload searcher: the others read package.path and
	 * package.cpath, which a policy could point anywhere. */
	if (lua_getfield(L, pkg, "searchers") == LUA_TTABLE) {
		for (i = (lua_Integer)lua_rawlen(L, -1); i > 1; i--) {
			lua_pushnil(L);
			lua_rawseti(L, -2, i);
		}
	}
	lua_pop(L, 1);
}

/* Opens and restricts the libraries. Runs in protected mode; arg 1: sb. */
static int sb_setup(lua_State *L)
{
	static const luaL_Reg libs[] = {
		{ LUA_GNAME, luaopen_base },
		{ LUA_STRLIBNAME, luaopen_string },
		{ LUA_TABLIBNAME, luaopen_table },
		{ LUA_MATHLIBNAME, luaopen_math },
		{ LUA_UTF8LIBNAME, luaopen_utf8 },
		{ LUA_COLIBNAME, luaopen_coroutine },
		{ NULL, NULL }
	};
	struct sandbox *sb = lua_touserdata(L, 1);
	const luaL_Reg *lib;

	for (lib = libs; lib->name; lib++) {
		luaL_requiref(L, lib->name, lib->func, 1);
		if (lib->func == luaopen_string)
			pattern_install(L, sb_pattern_check);
		lua_pop(L, 1);
	}
	/* Before package opens: LUA_PATH/LUA_CPATH must not count. */
	lua_pushboolean(L, 1);
	lua_setfield(L, LUA_REGISTRYINDEX, "LUA_NOENV");
	luaL_requiref(L, LUA_LOADLIBNAME, luaopen_package, 1);
	setup_package(L, sb);
	lua_pop(L, 1);
	setup_os(L);
	setup_io(L);
	setup_base(L);
	return 0;
}

static int sb_panic(lua_State *L)
{
	const char *msg = lua_tostring(L, -1);

	log_msg(LOG_ERROR, "Lua panic (unprotected error in the policy engine): %s",
		msg ? msg : "?");
	return 0;
}

/* ------------------------------------------------------------ public */

struct sandbox *sandbox_new(const struct sandbox_opts *o, struct err *e)
{
	struct sandbox *sb;

	if (!o || !o->lua_dir || !o->lua_dir[0]) {
		err_set(e, "policy: no Lua directory given (profhost's lua/ folder)");
		return NULL;
	}
	sb = calloc(1, sizeof *sb);
	if (!sb) {
		err_set(e, "policy: out of memory");
		return NULL;
	}
	sb->limit = o->memory_bytes ? o->memory_bytes : 64 * SANDBOX_MIB;
	sb->lua_dir = strdup(o->lua_dir);
	sb->policy_dir = o->policy_dir ? strdup(o->policy_dir) : NULL;
	if (!sb->lua_dir || (o->policy_dir && !sb->policy_dir)) {
		sandbox_free(sb);
		err_set(e, "policy: out of memory");
		return NULL;
	}
	sb->L = lua_newstate(sb_alloc, sb);
	if (!sb->L) {
		sandbox_free(sb);
		err_set(e, "policy: cannot create the Lua state (out of memory)");
		return NULL;
	}
	lua_atpanic(sb->L, sb_panic);
	lua_sethook(sb->L, sb_count_hook, LUA_MASKCOUNT, SANDBOX_HOOK_COUNT);
	lua_pushcfunction(sb->L, sb_setup);
	lua_pushlightuserdata(sb->L, sb);
	if (sandbox_pcall(sb, 1, 0, "policy sandbox", e) != 0) {
		sandbox_free(sb);
		return NULL;
	}
	return sb;
}

lua_State *sandbox_lua(struct sandbox *sb)
{
	return sb ? sb->L : NULL;
}

void sandbox_set_memory_limit(struct sandbox *sb, size_t bytes)
{
	if (sb && bytes)
		sb->limit = bytes;
}

const char *sandbox_error_text(lua_State *L, int idx, lua_State *from,
			       int level)
{
	idx = lua_absindex(L, idx);
	if (lua_type(L, idx) == LUA_TSTRING) {
		lua_pushvalue(L, idx);
		return lua_tostring(L, -1);
	}
	push_where(L, from, level); /* where it was raised */
	if (lua_type(L, idx) == LUA_TNUMBER) {
		lua_pushvalue(L, idx);
		lua_tostring(L, -1);
	} else if (luaL_getmetafield(L, idx, "__tostring") != LUA_TNIL) {
		/* protected: a __tostring that fails, or loops until the
		 * budget stops it, must not replace the error */
		lua_pushvalue(L, idx);
		if (lua_pcall(L, 1, 1, 0) != LUA_OK || lua_type(L, -1) != LUA_TSTRING) {
			lua_pushfstring(L, "(error object is a %s value; its __tostring "
					"failed: %s)", luaL_typename(L, idx),
					lua_type(L, -1) == LUA_TSTRING
					? lua_tostring(L, -1) : "it returned no string");
			lua_remove(L, -2);
		}
	} else {
		lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, idx));
	}
	lua_concat(L, 2);
	return lua_tostring(L, -1);
}

/* Message handler: the message followed by a traceback. */
static int sb_msgh(lua_State *L)
{
	const char *msg = sandbox_error_text(L, 1, L, 1);

	luaL_traceback(L, L, msg, 1);
	return 1;
}

int sandbox_pcall(struct sandbox *sb, int nargs, int nresults,
		  const char *where, struct err *e)
{
	lua_State *L = sb->L;
	int base = lua_gettop(L) - nargs;
	int status;
	const char *msg;

	if (!lua_checkstack(L, 2)) {
		lua_settop(L, base - 1);
		return err_set(e, "%s%spolicy exceeded its %zu MiB memory limit (prof.limits{memory_mb=...})",
			       where ? where : "", where ? ": " : "",
			       sb->limit / SANDBOX_MIB);
	}
	lua_pushcfunction(L, sb_msgh);
	lua_insert(L, base);
	status = lua_pcall(L, nargs, nresults, base);
	lua_remove(L, base);
	if (status == LUA_OK)
		return 0;
	if (status == LUA_ERRMEM) {
		err_set(e, "%s%spolicy exceeded its %zu MiB memory limit (prof.limits{memory_mb=...})",
			where ? where : "", where ? ": " : "",
			sb->limit / SANDBOX_MIB);
	} else {
		msg = lua_tostring(L, -1);
		if (!msg)
			msg = "(error object is not a string)";
		log_msg(LOG_DEBUG, "policy error: %s", msg);
		err_set(e, "%.*s", (int)strcspn(msg, "\n"), msg);
	}
	lua_pop(L, 1);
	return -1;
}

void sandbox_free(struct sandbox *sb)
{
	if (!sb)
		return;
	if (sb->L)
		lua_close(sb->L);
	free(sb->lua_dir);
	free(sb->policy_dir);
	free(sb);
}

/*
 * trace_lua_internal — what the trace object's files share (trace_lua.c:
 * the object, its fields and its query methods; trace_lua_filter.c: the
 * options tables methods take and the filters read from them;
 * trace_lua_write.c: the writers, trace:write, write_table, write_json).
 * Not a module contract: only src/policy/trace_lua*.c and their unit
 * tests include it; everyone else uses trace_lua.h.
 *
 * Every function here runs on the thread that holds the policy's lock
 * and raises Lua errors rather than returning them unless it says
 * otherwise; `fn` names the method in those errors ("trace:events").
 */
#ifndef PROFHOST_POLICY_TRACE_LUA_INTERNAL_H
#define PROFHOST_POLICY_TRACE_LUA_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <lua.h>

#include "../events/query.h"
#include "../events/trace.h"
#include "../export/outdir.h"

#define TRACE_LUA_META "profhost.trace"

/* The trace object's userdata (user value 1: the cache of computed
 * fields). Every pointer is borrowed until trace_lua_invalidate(). */
struct trace_lua {
	const struct trace *t;     /* NULL once invalidated */
	const char *dir;
	const struct outdir *out;  /* dir held open, or NULL: open dir */
	const char *const *files;
	int32_t main_tid;
};

/* ---- trace_lua_filter.c: the object as an argument */

/* The valid trace object at arg 1, or raises. */
struct trace_lua *trace_lua_check(lua_State *L);

/* ---- trace_lua_filter.c: options */

/* Pushes the value at `v` described as prof.schema.describe() does it
 * (`0`, `string "x"`, `boolean true`, `nothing`, `table`), the one
 * wording of values in option errors; the type name when that module is
 * not loaded. Returns the pushed string. */
const char *trace_lua_describe(lua_State *L, int v);

/* Raises "<fn>: '<key>' must be <expected>, got <value>" (the value at
 * index v) at the caller's line: the form of every option error, as in
 * prof.schema. */
int trace_lua_bad_option(lua_State *L, const char *fn, const char *key, int v,
			 const char *expected);

/* The options table at `idx` (absent or nil: a new empty one is put
 * there), or raises naming what was given. */
void trace_lua_opt_table(lua_State *L, int idx, const char *fn);

/* Checks that the options table at `idx` has only known keys (the filter
 * keys when `filter`, then `extra`, NULL-ended or NULL). */
void trace_lua_check_keys(lua_State *L, int idx, const char *fn, bool filter,
			  const char *const *extra);

/* An integer option from `min` to `max`, or `def` when absent. */
lua_Integer trace_lua_opt_int(lua_State *L, int idx, const char *fn,
			      const char *key, lua_Integer def, lua_Integer min,
			      lua_Integer max);

/* A boolean option, or `def` when absent. */
bool trace_lua_opt_bool(lua_State *L, int idx, const char *fn, const char *key,
			bool def);

/* The index in `names` (NULL-ended) of a string option, or `def` when
 * absent. */
int trace_lua_opt_choice(lua_State *L, int idx, const char *fn, const char *key,
			 const char *const *names, int def);

/* The category name reports use: Kineto's, "mark" for marks. Never
 * raises. */
const char *trace_lua_cat_name(unsigned c);

/* ---- trace_lua_filter.c: filters */

/* Reads the filter keys (cat, name, step, thread, pid, from, to, within)
 * of the options table at `idx` (or none when idx is 0) into *f.
 * Userdata it needs are pushed on the stack and must stay there while *f
 * is used. */
void trace_lua_read_filter(lua_State *L, struct trace_lua *tl, int idx,
			   const char *fn, struct query_filter *f);

/* Reads the list of intervals at `idx` ({ {ts, dur} or {ts = , dur = },
 * ... }) into a sorted, merged array, a userdata pushed on the stack;
 * *n: its length. */
struct query_interval *trace_lua_read_within(lua_State *L, int idx, const char *fn,
					     size_t *n);

/* The thread a busy/during call looks at: option `thread` of the table
 * at `idx` (id or name), else the main (stepping) thread. Leaves the
 * stack as it was. */
int32_t trace_lua_opt_thread(lua_State *L, struct trace_lua *tl, int idx,
			     const char *fn);

/* ---- trace_lua_write.c: the writers, as methods of the object */

/* trace:write(path, text), trace:write_json(path, value) and
 * trace:write_table(path, rows [, columns]) -> the full path written. */
int trace_lua_write(lua_State *L);
int trace_lua_write_json(lua_State *L);
int trace_lua_write_table(lua_State *L);

#endif

/*
 * trace_lua — a window's trace as a Lua object (private to src/policy).
 *
 * The object borrows the struct trace: it is valid only until
 * trace_lua_invalidate(), after which every use raises "the trace object is
 * only valid during its on_trace_ready call". Its API (fields, events,
 * aggregate, phases, busy, during, samples, writers) is documented in
 * docs/reports.md; the heavy work is done in C (src/events/query.h).
 *
 * Writers (trace:write, write_table, write_json) only write under the
 * window's directory: relative paths without "..", no absolute paths, no
 * symbolic link on the way, each file created through the descriptor of
 * the directory that holds it (outdir_resolve); files appear atomically
 * (outfile).
 *
 * Runs on the thread that holds the policy's lock.
 */
#ifndef PROFHOST_POLICY_TRACE_LUA_H
#define PROFHOST_POLICY_TRACE_LUA_H

#include <lua.h>

#include "../events/trace.h"
#include "../export/outdir.h"

/* Pushes a new trace object for `t`, whose files live in `dir` (NULL: the
 * writers refuse) and are listed in `files` (NULL-ended, may be NULL).
 * `out`, when not NULL, is `dir` held open: the writers create their files
 * through it (else they open `dir` by its path). The pointers are borrowed
 * until trace_lua_invalidate(). Raises a Lua error when out of memory
 * (call it in protected mode). */
void trace_lua_push(lua_State *L, const struct trace *t, const char *dir,
		    const struct outdir *out, const char *const *files);

/* Makes the trace object at `idx` unusable from now on. Never raises. */
void trace_lua_invalidate(lua_State *L, int idx);

#endif

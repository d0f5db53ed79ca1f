/*
 * pattern — Lua 5.4's pattern functions (string.find, string.match,
 * string.gmatch, string.gsub) with a step budget (private to src/policy).
 *
 * Lua's own matcher backtracks inside one C call, where the sandbox's count
 * hook never runs: string.rep("a", 1500):find(".-.-.-b") takes minutes and
 * no time budget could stop it. These functions match the same patterns
 * with the same results and messages (src/util/lpattern.c), and call
 * `check` every few thousand matching steps; `check` raises (a Lua
 * error, longjmp) to stop a match. The matcher holds no memory of its own,
 * so being stopped anywhere leaks nothing.
 *
 * One thread at a time per Lua state, like any Lua library.
 */
#ifndef PROFHOST_POLICY_PATTERN_H
#define PROFHOST_POLICY_PATTERN_H

#include <lua.h>

/* Called every LPATTERN_CHECK_STEPS matching steps (src/util/lpattern.h)
 * with the state running the match; may raise. */
typedef void (*pattern_check_fn)(lua_State *L);

/* Replaces find, match, gmatch and gsub in the string library table on top
 * of L's stack (string methods use that table, so s:find() too). May raise
 * a memory error. */
void pattern_install(lua_State *L, pattern_check_fn check);

#endif

/*
 * sandbox — a restricted Lua 5.4 state for policy files (private to
 * src/policy).
 *
 * The state's allocator caps the bytes it holds; a count hook enforces a
 * time budget on whatever Lua code runs. Libraries: base, string, table,
 * math, utf8, coroutine, package (opened with LUA_NOENV), and an `os` with
 * time/clock/date/getenv/difftime only. io, os.execute/exit/remove/rename/
 * tmpname/setlocale, loadfile, dofile, package.loadlib and
 * package.searchpath raise "X is not available in a profhost policy".
 * `load` takes text chunks only. `require` searches a fixed path (profhost's
 * Lua directory, then the policy's directory) for Lua files only;
 * package.path is informational. print() writes to the host log (LOG_INFO).
 *
 * A sandbox is used by one thread at a time (the policy's lock), except
 * sandbox_interrupt(), which any thread may call.
 */
#ifndef PROFHOST_POLICY_SANDBOX_H
#define PROFHOST_POLICY_SANDBOX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <lua.h>

#include "../common/err.h"

struct sandbox_opts {
	const char *lua_dir;     /* profhost's Lua directory; required */
	const char *policy_dir;  /* the policy file's directory; may be NULL */
	size_t memory_bytes;     /* initial memory cap */
};

struct sandbox;

/* Creates the state. Returns NULL with *e set on failure. Any thread. */
struct sandbox *sandbox_new(const struct sandbox_opts *o, struct err *e);

/* The Lua state, for pushing calls. Owned by the sandbox. */
lua_State *sandbox_lua(struct sandbox *sb);

/* Changes the memory cap. Allocations that would pass it fail (a Lua
 * memory error); memory already held is kept. */
void sandbox_set_memory_limit(struct sandbox *sb, size_t bytes);

/* Starts a time budget of `ms` milliseconds from `start_ns`
 * (clock_now_ns()). Lua code still running after it raises "policy exceeded
 * its N ms time budget (prof.limits{<key>=...})" at its file:line. `key` is
 * a static string ("load_ms", "hook_ms", "report_ms"); with "repl_ms" the
 * message reads "command exceeded ..." instead. */
void sandbox_set_budget(struct sandbox *sb, int64_t start_ns, uint32_t ms,
			const char *key);

/* Removes the budget. */
void sandbox_clear_budget(struct sandbox *sb);

/* Where print() writes while set (the REPL): `fn` gets one line, ending
 * in '\n'. NULL sends print() back to the log. */
typedef void (*sandbox_print_fn)(void *ctx, const char *text, size_t len);
void sandbox_set_print(struct sandbox *sb, sandbox_print_fn fn, void *ctx);

/*
 * Interrupts. After sandbox_interrupt(), Lua code raises "interrupted" at
 * its file:line at the next budget check (every 1000 instructions), and
 * again at each instruction after a pcall caught it, until
 * sandbox_clear_interrupt(). `poll`, when set, is called from the budget
 * check at most every 20 ms on the running thread; returning true
 * interrupts. sandbox_interrupt() is async-signal-safe, any thread.
 */
typedef bool (*sandbox_poll_fn)(void *ctx);
void sandbox_set_poll(struct sandbox *sb, sandbox_poll_fn fn, void *ctx);
void sandbox_interrupt(struct sandbox *sb);
bool sandbox_interrupted(struct sandbox *sb);
void sandbox_clear_interrupt(struct sandbox *sb);

/* Whether the sandbox owning L is stopping the code it runs (an interrupt
 * came, or the budget ran out): an error caught then is the budget's, to be
 * raised again as it is. False for a state that is not a sandbox's. */
bool sandbox_stopping(lua_State *L);

/*
 * Calls the function under `nargs` arguments on the stack, like lua_pcall,
 * with a traceback handler. Returns 0 with `nresults` results pushed, or -1
 * with the function and its arguments popped and *e set to the error's first
 * line (the full traceback goes to LOG_DEBUG). A memory error, which has no
 * position, reads "<where>: policy exceeded its N MiB memory limit
 * (prof.limits{memory_mb=...})"; `where` may be NULL.
 */
int sandbox_pcall(struct sandbox *sb, int nargs, int nresults,
		  const char *where, struct err *e);

/*
 * Pushes the text of the error object at `idx` of L and returns it: a
 * string as it is; anything else as "<file>:<line>: <text>", where the
 * position is the innermost Lua function of thread `from` at stack level
 * `level` or above (none when there is none), and the text is a number's
 * digits, the result of the object's __tostring (called protected: when it
 * fails, or the budget stops it, the text says so), or "(error object is a
 * <type> value)". May raise only a memory error. Lock held.
 */
const char *sandbox_error_text(lua_State *L, int idx, lua_State *from,
			       int level);

/*
 * Loads the Lua source file `path` and pushes it as a function, the way
 * luaL_loadfilex(L, path, "t") does (chunk name "@path"; a UTF-8 BOM and a
 * first line starting with '#' are skipped), but opens it without blocking
 * and loads only a regular file: a FIFO or a device never hangs the
 * caller, and only one no one but this user (or root) can change
 * (fsutil_check_code: a policy, like every module require() loads, is
 * code run in the process). Returns LUA_OK, or an error status with the
 * message pushed ("cannot open <path>: ...", "<path> is a FIFO (named
 * pipe), not a regular file", "'<path>' is writable by every user (mode
 * 666): ...", a syntax error). Raises only on memory errors.
 */
int sandbox_loadfile(lua_State *L, const char *path);

/* Closes the state (running finalizers under a short budget) and frees the
 * sandbox. NULL-safe. */
void sandbox_free(struct sandbox *sb);

#endif

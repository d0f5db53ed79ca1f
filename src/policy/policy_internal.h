/*
 * policy_internal — what the policy engine's files share (policy.c: the
 * VM's lifecycle and loading; policy_config.c: reading the resolved
 * configuration; policy_live.c: host queries and live reconfiguration;
 * policy_hooks.c: the hooks and the built-in reports; policy_repl.c: the
 * REPL coroutine). Not a module contract: only src/policy/policy*.c
 * include it; everyone else uses policy.h.
 *
 * Every function here runs with the policy lock held (struct policy.lock)
 * on the thread that runs Lua, and raises Lua errors rather than
 * returning them unless it says otherwise.
 */
#ifndef PROFHOST_POLICY_INTERNAL_H
#define PROFHOST_POLICY_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <lua.h>

#include "policy.h"
#include "sandbox.h"

#define POLICY_MIB ((size_t)1 << 20)

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
	policy_dump_fn dump;
	policy_capture_fn capture_job;
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

/* ---- policy_config.c */

/* Protected: prof._load_done(), then the configuration into p->cfg
 * (strings stored as they are copied, so policy_free releases them on
 * failure). Arg 1: the policy. */
int policy_read_config(lua_State *L);

/* The schedule / capture section of the resolved configuration at index
 * cfg into *c. Raise on a field the schema never produces. */
void policy_read_schedule(lua_State *L, int cfg, struct policy_config *c);
void policy_read_capture(lua_State *L, int cfg, struct policy_config *c);

/* prof._native.hooks_changed(). Upvalue 1: the policy. */
int policy_native_hooks_changed(lua_State *L);

/* ---- policy_live.c */

/* prof._native.query(what [, arg]), prof._native.reconfigure(section) and
 * prof._native.recorder(on). Upvalue 1: the policy. */
int policy_native_query(lua_State *L);
int policy_native_reconfigure(lua_State *L);
int policy_native_recorder(lua_State *L);

/* ---- policy_repl.c */

/* prof._native.repl_active() and prof._native.sleep(ms). Upvalue 1: the
 * policy. */
int policy_native_repl_active(lua_State *L);
int policy_native_sleep(lua_State *L);

#endif

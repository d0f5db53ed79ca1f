/* policy_hooks — the policy's hooks (prof.on_step, on_window_start,
 * on_window_end, on_trace_ready, on_hang) and the built-in reports, each run in the
 * VM under its budget (see policy.h, policy_internal.h). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "../common/clock.h"
#include "../export/export.h"
#include "../hang/hanglinks.h"
#include "../common/log.h"
#include "policy_internal.h"
#include "sandbox.h"
#include "trace_lua.h"

/* ------------------------------------------------------------ hooks */

enum hook_arg { HOOK_ARG_STEP, HOOK_ARG_WINDOW, HOOK_ARG_TRACE, HOOK_ARG_HANG };

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

	lua_createtable(L, 0, 9);
	set_int(L, "window", (lua_Integer)w->window);
	lua_pushboolean(L, w->recorder);
	lua_setfield(L, -2, "recorder");
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

static void push_hang_info(lua_State *L, const struct policy_hang_info *h)
{
	size_t i, j;

	lua_createtable(L, 0, 7);
	set_int(L, "hang", (lua_Integer)h->hang);
	set_int(L, "step", (lua_Integer)h->step);
	set_num(L, "stalled_s", h->stalled_s);
	set_num(L, "limit_s", h->limit_s);
	set_str(L, "dir", h->dir);
	lua_createtable(L, (int)h->nthreads, 0);
	for (i = 0; i < h->nthreads; i++) {
		const struct policy_hang_thread *t = &h->threads[i];

		lua_createtable(L, 0, 3);
		set_int(L, "tid", t->tid);
		set_str(L, "name", t->name);
		lua_createtable(L, (int)t->nranges, 0);
		for (j = 0; j < t->nranges; j++) {
			lua_createtable(L, 0, 2);
			set_str(L, "name", t->ranges[j].name);
			if (t->ranges[j].open_s >= 0)
				set_num(L, "open_s", t->ranges[j].open_s);
			lua_rawseti(L, -2, (lua_Integer)j + 1);
		}
		lua_setfield(L, -2, "ranges");
		lua_rawseti(L, -2, (lua_Integer)i + 1);
	}
	lua_setfield(L, -2, "threads");
	lua_createtable(L, (int)h->ngpu, 0);
	for (i = 0; i < h->ngpu; i++) {
		const struct policy_hang_kernel *k = &h->gpu[i];

		lua_createtable(L, 0, 5);
		set_str(L, "name", k->name);
		if (k->device >= 0)
			set_int(L, "device", k->device);
		if (k->stream >= 0)
			set_int(L, "stream", (lua_Integer)k->stream);
		set_int(L, "tid", k->tid);
		set_num(L, "in_flight_s", k->in_flight_s);
		lua_rawseti(L, -2, (lua_Integer)i + 1);
	}
	lua_setfield(L, -2, "gpu");
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
	} else if (hc->arg_type == HOOK_ARG_HANG) {
		push_hang_info(L, hc->info);
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

/* The hang reports a window links, as the built-in reports read them:
 * { { hang =, step =, stalled_s =, dir = "hang0_step5" }, ... }. */
static void push_hang_links(lua_State *L, const struct policy_trace *tr)
{
	size_t i;

	lua_createtable(L, (int)tr->nhangs, 0);
	for (i = 0; tr->hangs && i < tr->nhangs; i++) {
		lua_createtable(L, 0, 4);
		set_int(L, "hang", (lua_Integer)tr->hangs[i].hang);
		set_int(L, "step", (lua_Integer)tr->hangs[i].step);
		set_num(L, "stalled_s", tr->hangs[i].stalled_s);
		set_str(L, "dir", tr->hangs[i].dir);
		lua_rawseti(L, -2, (lua_Integer)i + 1);
	}
}

/* Protected: require("prof.reports").window(trace, formats, keep, hangs) or
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
		push_hang_links(L, rc->tr);
		lua_call(L, 4, 1);
	} else {
		lua_call(L, 1, 1);
	}
	if (!lua_istable(L, -1))
		return luaL_error(L, "prof.reports returned no table");
	take_field(L, "text", &rc->out->text);
	take_field(L, "json", &rc->out->json);
	take_field(L, "html", &rc->out->html);
	take_field(L, "findings", &rc->out->findings);
	take_field(L, "modules", &rc->out->modules);
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

enum policy_status policy_write_reports(struct policy *p, const struct trace *t,
					struct export_result *res, unsigned formats,
					bool link_hangs, char **findings, struct err *e)
{
	static const char *const names[] = { "report.txt", "report.html", "modules.txt" };
	struct hang_link links[HANGLINKS_MAX];
	struct policy_report rep;
	struct policy_trace pt;
	const char *texts[3];
	size_t i;

	*findings = NULL;
	res->files[res->nfiles] = NULL;
	pt.trace = t;
	pt.dir = res->dir;
	pt.out = &res->out;
	pt.files = (const char *const *)res->files;
	pt.hangs = links;
	pt.nhangs = link_hangs ? hanglinks_find(res->dir, &t->meta, links, HANGLINKS_MAX) : 0;
	if (policy_report_window(p, &pt, formats, false, &rep, e) != POLICY_OK)
		return POLICY_ERROR;
	texts[0] = rep.text;
	texts[1] = rep.html;
	texts[2] = rep.modules;
	for (i = 0; i < 3; i++) {
		if (texts[i] && export_text_file(res, names[i], texts[i], e) != 0) {
			policy_report_free(&rep);
			return POLICY_ERROR;
		}
	}
	*findings = rep.findings;
	rep.findings = NULL;
	policy_report_free(&rep);
	return POLICY_OK;
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
	free(r->modules);
	r->text = r->json = r->html = r->findings = r->modules = NULL;
}

enum policy_status policy_on_hang(struct policy *p,
				  const struct policy_hang_info *h,
				  struct err *e)
{
	return window_hooks(p, "on_hang", HOOK_ARG_HANG, h, true,
			    p ? p->cfg.limits.hook_ms : 0, "hook_ms", e);
}

/*
 * test_repl — policy_repl_eval as someone typing at `prof attach` sees it:
 * values printed like the `lua` prompt, print() captured, errors with a
 * traceback, incomplete chunks, the time budget, interrupts, prof.sleep
 * letting hooks run, live prof.schedule/prof.capture, the host's answers,
 * and capture_now waiting for its window. The host side is a fake
 * policy_live_ops.
 */

#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "common/clock.h"
#include "events/trace.h"
#include "policy/policy.h"
#include "testdir.h"

#ifndef PROFHOST_TEST_LUA_DIR
#error "PROFHOST_TEST_LUA_DIR must name the source tree's lua/ folder"
#endif

static char tmpdir[256];

/* ------------------------------------------------------------ the fake host */

struct fake_host {
	/* reconfigure */
	int reconfigures;
	unsigned sections;
	struct sched_config schedule;
	uint32_t cpu_hz;
	const char *refuse;        /* refuse with this message */
	/* capture_now */
	atomic_int captures;       /* also the report hook's "I hold the VM" */
	uint32_t steps;
	int capture_queries;       /* "capture" answers "written" from the 3rd */
	/* status */
	int statuses;
	/* recorder */
	int switches;
	bool rec_on;
};

static int fake_query(void *ctx, const char *what, int64_t arg,
		      struct policy_build *b, struct err *e)
{
	struct fake_host *h = ctx;

	if (strcmp(what, "status") == 0) {
		h->statuses++;
		policy_build_int(b, "step", 42);
		policy_build_bool(b, "recording", false);
		policy_build_open(b, "outputs");
		policy_build_str(b, NULL, "/out/window0");
		policy_build_str(b, NULL, "/out/window1");
		policy_build_close(b);
		policy_build_open(b, "next_window");
		policy_build_int(b, "first_step", 50);
		policy_build_int(b, "last_step", 52);
		policy_build_close(b);
		policy_build_num(b, "median_ms", 1.5);
		return 0;
	}
	if (strcmp(what, "capture") == 0) {
		if (atomic_load(&h->captures) == 0)
			return 1;
		h->capture_queries++;
		policy_build_int(b, "ticket", arg ? arg : atomic_load(&h->captures));
		policy_build_int(b, "steps", h->steps);
		if (h->capture_queries < 3) {
			policy_build_str(b, "state", h->capture_queries == 1 ? "queued"
									   : "recording");
			policy_build_int(b, "first_step", 10);
			return 0;
		}
		policy_build_str(b, "state", "written");
		policy_build_str(b, "dir", "/out/window2_steps10-12");
		policy_build_open(b, "files");
		policy_build_str(b, NULL, "/out/window2_steps10-12/trace.json");
		policy_build_close(b);
		return 0;
	}
	return err_set(e, "no answer to '%s'", what);
}

static int fake_reconfigure(void *ctx, const struct policy_config *next,
			    unsigned sections, void (*apply)(void *), void *actx,
			    struct err *e)
{
	struct fake_host *h = ctx;

	if (h->refuse)
		return err_set(e, "%s", h->refuse);
	h->reconfigures++;
	h->sections = sections;
	h->schedule = next->schedule;
	h->cpu_hz = next->capture.cpu_hz;
	apply(actx);
	return 0;
}

static int fake_recorder(void *ctx, bool on, struct err *e)
{
	struct fake_host *h = ctx;

	if (h->refuse)
		return err_set(e, "%s", h->refuse);
	h->switches++;
	h->rec_on = on;
	return 0;
}

static const struct policy_live_ops fake_ops = { fake_query, fake_reconfigure,
						 fake_recorder };

static int fake_capture(void *ctx, uint32_t steps, const char *reason,
			struct err *e)
{
	struct fake_host *h = ctx;

	(void)reason;
	(void)e;
	atomic_fetch_add(&h->captures, 1);
	h->steps = steps;
	return 0;
}

/* ------------------------------------------------------------ the client */

struct client {
	char out[16384];           /* everything, errors marked with "E:" */
	char err[16384];
	int polls;
	int interrupt_after;       /* poll() says stop from this call on (0: never) */
	atomic_int stop;           /* or when set */
};

static void client_out(void *ctx, bool error, const char *text, size_t len)
{
	struct client *c = ctx;
	char *dst = error ? c->err : c->out;
	size_t n = strlen(dst);

	snprintf(dst + n, sizeof c->out - n, "%.*s", (int)len, text);
}

static bool client_poll(void *ctx)
{
	struct client *c = ctx;

	c->polls++;
	if (atomic_load(&c->stop))
		return true;
	return c->interrupt_after && c->polls >= c->interrupt_after;
}

static struct policy *load(const char *src, struct fake_host *h)
{
	struct policy_opts o = { 0 };
	struct err e;
	struct policy *p;

	testdir_write("myprof.lua", src);
	o.lua_dir = PROFHOST_TEST_LUA_DIR;
	o.script = "myprof.lua";
	o.capture_now = fake_capture;
	o.capture_ctx = h;
	o.live = &fake_ops;
	o.live_ctx = h;
	p = policy_load(&o, &e);
	if (!p)
		fprintf(stderr, "load failed: %s\n", e.msg);
	return p;
}

/* Runs `chunk` for a fresh client; returns the status. */
static enum policy_status eval(struct policy *p, struct client *c, const char *chunk)
{
	struct policy_repl_io io = { client_out, client_poll, c };
	struct err e;

	c->out[0] = c->err[0] = '\0';
	c->polls = 0;
	return policy_repl_eval(p, chunk, strlen(chunk), &io, &e);
}


/* ------------------------------------------------------------ tests */

static void test_values_like_lua(void)
{
	struct fake_host h = { 0 };
	struct client c = { 0 };
	struct policy *p = load("answer = 41\n", &h);

	CHECK(p != NULL);
	if (!p)
		return;
	CHECK_EQ_INT(eval(p, &c, "1 + 1"), POLICY_OK);
	CHECK_EQ_STR(c.out, "2\n");
	CHECK_EQ_INT(eval(p, &c, "=answer + 1"), POLICY_OK);
	CHECK_EQ_STR(c.out, "42\n");
	CHECK_EQ_INT(eval(p, &c, "return 1, 'a', nil, 2.5"), POLICY_OK);
	CHECK_EQ_STR(c.out, "1\t\"a\"\tnil\t2.5\n");
	/* A statement prints nothing of its own; print() goes to the client. */
	CHECK_EQ_INT(eval(p, &c, "x = 3\nprint('x is', x)"), POLICY_OK);
	CHECK_EQ_STR(c.out, "x is\t3\n");
	CHECK_EQ_INT(eval(p, &c, "x"), POLICY_OK);
	CHECK_EQ_STR(c.out, "3\n");
	CHECK_EQ_INT(eval(p, &c, "{ b = { 1, 2 }, a = 'q\\nr', [10] = true, 5 }"),
		     POLICY_OK);
	CHECK_EQ_STR(c.out, "{ 5, [10] = true, a = \"q\\nr\", b = { 1, 2 } }\n");
	CHECK_EQ_STR(c.err, "");
	policy_free(p);
}

static void test_long_tables_wrap(void)
{
	struct fake_host h = { 0 };
	struct client c = { 0 };
	struct policy *p = load("", &h);

	CHECK(p != NULL);
	if (!p)
		return;
	CHECK_EQ_INT(eval(p, &c, "local t = { name = string.rep('n', 70), inner = { x = 1 } }"
			  " t.self = t return t"), POLICY_OK);
	CHECK(contains(c.out, "{\n  inner = { x = 1 },\n  name = \"nnn"));
	CHECK(contains(c.out, "\n  self = <cycle: table: "));
	CHECK(contains(c.out, "\n}\n"));
	policy_free(p);
}

static void test_incomplete_and_errors(void)
{
	struct fake_host h = { 0 };
	struct client c = { 0 };
	struct policy *p = load("", &h);

	CHECK(p != NULL);
	if (!p)
		return;
	CHECK_EQ_INT(eval(p, &c, "for i = 1, 3 do"), POLICY_INCOMPLETE);
	CHECK_EQ_STR(c.out, "");
	CHECK_EQ_STR(c.err, "");
	CHECK_EQ_INT(eval(p, &c, "for i = 1, 3 do\nprint(i)\nend"), POLICY_OK);
	CHECK_EQ_STR(c.out, "1\n2\n3\n");
	CHECK_EQ_INT(eval(p, &c, "f("), POLICY_INCOMPLETE);
	CHECK_EQ_INT(eval(p, &c, "x = = 1"), POLICY_ERROR);
	CHECK(contains(c.err, "stdin:1:"));
	CHECK(!contains(c.err, "stack traceback"));
	CHECK_EQ_INT(eval(p, &c, "local function f() error('boom') end\nf()"),
		     POLICY_ERROR);
	CHECK(contains(c.err, "stdin:1: boom"));
	CHECK(contains(c.err, "stack traceback:"));
	CHECK(contains(c.err, "in local 'f'") || contains(c.err, "in function 'f'"));
	CHECK_EQ_INT(eval(p, &c, "error({})"), POLICY_ERROR);
	CHECK(starts_with(c.err, "stdin:1: (error object is a table value)"));
	CHECK_EQ_INT(eval(p, &c, "\nerror(7)"), POLICY_ERROR);
	CHECK(starts_with(c.err, "stdin:2: 7\n"));
	CHECK_EQ_INT(eval(p, &c, "coroutine.yield(1)"), POLICY_ERROR);
	CHECK(contains(c.err, "outside a coroutine"));
	/* Still healthy afterwards. */
	CHECK_EQ_INT(eval(p, &c, "2 * 21"), POLICY_OK);
	CHECK_EQ_STR(c.out, "42\n");
	policy_free(p);
}

static void test_budget_and_interrupt(void)
{
	struct fake_host h = { 0 };
	struct client c = { 0 };
	struct policy *p = load("prof.limits{ repl_ms = 200 }\n", &h);
	int64_t t0;

	CHECK(p != NULL);
	if (!p)
		return;
	t0 = clock_now_ns();
	CHECK_EQ_INT(eval(p, &c, "while true do end"), POLICY_ERROR);
	CHECK(contains(c.err, "command exceeded its 200 ms time budget "
			      "(prof.limits{repl_ms=...})"));
	CHECK(clock_now_ns() - t0 < 2000000000LL);
	/* A pcall cannot swallow it. */
	CHECK_EQ_INT(eval(p, &c, "while true do pcall(function() while true do end end) end"),
		     POLICY_ERROR);
	CHECK(contains(c.err, "time budget"));
	/* An interrupt from the client stops it long before the budget. */
	policy_free(p);
	p = load("", &h);
	CHECK(p != NULL);
	if (!p)
		return;
	c.interrupt_after = 3;
	t0 = clock_now_ns();
	CHECK_EQ_INT(eval(p, &c, "local n = 0 while true do n = n + 1 end"), POLICY_ERROR);
	CHECK(contains(c.err, "stdin:1: interrupted"));
	CHECK(clock_now_ns() - t0 < 1000000000LL);
	c.interrupt_after = 0;
	CHECK_EQ_INT(eval(p, &c, "'fine'"), POLICY_OK);
	CHECK_EQ_STR(c.out, "\"fine\"\n");
	policy_free(p);
}

/* An error object whose __tostring loops: the message is made within the
 * command's budget, and the VM is free again at once (hooks run). */
static void test_error_tostring_budget(void)
{
	struct fake_host h = { 0 };
	struct client c = { 0 };
	struct policy *p = load("prof.limits{ repl_ms = 200 }\n"
				"prof.on_step(function(s) stepped = (stepped or 0) + 1 end)\n", &h);
	struct policy_step_info info = { .step = 1, .action = "NONE" };
	struct err e;
	int64_t t0;

	CHECK(p != NULL);
	if (!p)
		return;
	t0 = clock_now_ns();
	CHECK_EQ_INT(eval(p, &c, "error(setmetatable({}, { __tostring = function() "
			  "while true do end end }))"), POLICY_ERROR);
	CHECK(clock_now_ns() - t0 < 2000000000LL);
	CHECK(starts_with(c.err, "stdin:1: (error object is a table value; its __tostring "
			  "failed: stdin:1: command exceeded its 200 ms time budget"));
	CHECK_EQ_INT(policy_on_step(p, &info, &e), POLICY_OK);
	CHECK_EQ_INT(eval(p, &c, "stepped"), POLICY_OK);
	CHECK_EQ_STR(c.out, "1\n");
	policy_free(p);
}

/* prof.on_step typed at the REPL runs from the next step on, though the
 * policy file had no on_step hook (the host only calls the step hooks
 * when policy_config() says there are some). */
static void test_hooks_added_at_the_repl(void)
{
	struct fake_host h = { 0 };
	struct client c = { 0 };
	struct policy *p = load("", &h);
	const struct policy_config *cfg;
	struct policy_step_info info = { .step = 5, .action = "NONE" };
	struct err e;

	CHECK(p != NULL);
	if (!p)
		return;
	cfg = policy_config(p);
	CHECK(!cfg->has_on_step && !cfg->has_on_trace_ready);
	CHECK_EQ_INT(eval(p, &c, "prof.on_step(function(s) last = s.step end)"), POLICY_OK);
	CHECK(cfg->has_on_step);
	CHECK(!cfg->has_on_window_start && !cfg->has_on_window_end);
	CHECK_EQ_INT(policy_on_step(p, &info, &e), POLICY_OK);
	CHECK_EQ_INT(eval(p, &c, "last"), POLICY_OK);
	CHECK_EQ_STR(c.out, "5\n");
	CHECK_EQ_INT(eval(p, &c, "prof.on_trace_ready(function(t) end)"), POLICY_OK);
	CHECK(cfg->has_on_trace_ready);
	policy_free(p);
}

/* A thread that keeps calling the step hooks while the REPL sleeps. */
struct stepper {
	struct policy *p;
	atomic_int run;
	atomic_int ok, busy;
};

static void *stepper_main(void *arg)
{
	struct stepper *s = arg;
	struct policy_step_info info = { .step = 1, .action = "NONE" };
	struct err e;

	while (atomic_load(&s->run)) {
		enum policy_status st = policy_on_step(s->p, &info, &e);
		struct timespec ts = { 0, 2000000 };

		if (st == POLICY_OK)
			atomic_fetch_add(&s->ok, 1);
		else if (st == POLICY_BUSY)
			atomic_fetch_add(&s->busy, 1);
		nanosleep(&ts, NULL);
	}
	return NULL;
}

static void test_sleep_lets_hooks_run(void)
{
	struct fake_host h = { 0 };
	struct client c = { 0 };
	struct stepper s = { 0 };
	pthread_t t;
	struct policy *p = load(
		"steps_seen = 0\n"
		"prof.on_step(function(s)\n"
		"  steps_seen = steps_seen + 1\n"
		"  if sleeping and not said then said = true print('from hook') end\n"
		"end)\n",
		&h);

	CHECK(p != NULL);
	if (!p)
		return;
	s.p = p;
	atomic_store(&s.run, 1);
	pthread_create(&t, NULL, stepper_main, &s);
	CHECK_EQ_INT(eval(p, &c, "sleeping = true local a = steps_seen prof.sleep(300) "
			  "sleeping = false return steps_seen > a, said"), POLICY_OK);
	atomic_store(&s.run, 0);
	pthread_join(t, NULL);
	CHECK_EQ_STR(c.out, "true\ttrue\n");
	/* The hook's print() went to the log, not to the client. */
	CHECK(!contains(c.out, "from hook"));
	CHECK(atomic_load(&s.ok) > 10);
	/* Interrupting a sleep ends it at once, with an error. */
	c.interrupt_after = 2;
	CHECK_EQ_INT(eval(p, &c, "prof.sleep(60000) return 'woke'"), POLICY_ERROR);
	CHECK(contains(c.err, "interrupted"));
	c.interrupt_after = 0;
	/* prof.sleep inside a coroutine of the user's is refused, at the
	 * user's line (not profhost's init.lua), once. */
	CHECK_EQ_INT(eval(p, &c, "coroutine.wrap(function() prof.sleep(1) end)()"),
		     POLICY_ERROR);
	CHECK(starts_with(c.err, "stdin:1: prof.sleep: only at the REPL, outside coroutines"));
	CHECK(!contains(c.err, "init.lua:"));
	policy_free(p);
}

/* Holds the VM in a report for a while. */
static void *report_main(void *arg)
{
	static struct trace empty_trace;
	struct policy *p = arg;
	struct policy_trace tr = { .trace = &empty_trace };
	struct err e;

	policy_on_trace_ready(p, &tr, &e);
	return NULL;
}

static void test_waits_for_a_report(void)
{
	struct fake_host h = { 0 };
	struct client c = { 0 };
	pthread_t t;
	/* The report says it holds the VM through capture_now (the fake
	 * counts), so the REPL is sure to come second however slow the
	 * machine is. */
	struct policy *p = load(
		"reports = 0\n"
		"prof.on_trace_ready(function(w)\n"
		"  prof.capture_now{ steps = 1 }\n"
		"  local t = os.clock() + 0.3 while os.clock() < t do end\n"
		"  reports = reports + 1\n"
		"end)\n", &h);
	struct timespec ts = { 0, 1000000 };

	CHECK(p != NULL);
	if (!p)
		return;
	pthread_create(&t, NULL, report_main, p);
	while (atomic_load(&h.captures) < 1)
		nanosleep(&ts, NULL);
	CHECK_EQ_INT(eval(p, &c, "reports"), POLICY_OK);
	CHECK_EQ_STR(c.out, "1\n");
	pthread_join(t, NULL);
	/* Interrupted while waiting: told so, nothing run. */
	pthread_create(&t, NULL, report_main, p);
	while (atomic_load(&h.captures) < 2)
		nanosleep(&ts, NULL);
	c.interrupt_after = 1;
	CHECK_EQ_INT(eval(p, &c, "reports = 100"), POLICY_ERROR);
	CHECK(contains(c.err, "interrupted while waiting for the policy VM"));
	c.interrupt_after = 0;
	pthread_join(t, NULL);
	CHECK_EQ_INT(eval(p, &c, "reports"), POLICY_OK);
	CHECK_EQ_STR(c.out, "2\n");
	policy_free(p);
}

static void test_live_schedule_and_capture(void)
{
	struct fake_host h = { 0 };
	struct client c = { 0 };
	struct policy *p = load(
		"prof.schedule{ skip_first = 10, wait = 5, warmup = 1, active = 3 }\n"
		"prof.on_step(function(s) prof.schedule{ active = 1 } end)\n", &h);
	const struct policy_config *cfg;
	struct err e;
	struct policy_step_info info = { .step = 1, .action = "NONE" };

	CHECK(p != NULL);
	if (!p)
		return;
	cfg = policy_config(p);
	CHECK_EQ_INT(eval(p, &c, "prof.schedule{ active = 7 }"), POLICY_OK);
	CHECK_EQ_INT(h.reconfigures, 1);
	CHECK_EQ_INT(h.sections, POLICY_LIVE_SCHEDULE);
	/* The keys given replace those keys; the others stay. */
	CHECK_EQ_INT(h.schedule.active, 7);
	CHECK_EQ_INT(h.schedule.skip_first, 10);
	CHECK_EQ_INT(h.schedule.wait, 5);
	CHECK(h.schedule.enabled);
	CHECK_EQ_INT(cfg->schedule.active, 7);
	CHECK(contains(c.out, "active = 7"));
	CHECK_EQ_INT(eval(p, &c, "prof.schedule(false)"), POLICY_OK);
	CHECK(!h.schedule.enabled);
	CHECK(!cfg->schedule.enabled);
	CHECK_EQ_INT(eval(p, &c, "prof.capture{ cpu_samples = { hz = 250 } }"), POLICY_OK);
	CHECK_EQ_INT(h.sections, POLICY_LIVE_CAPTURE);
	CHECK_EQ_INT(h.cpu_hz, 250);
	CHECK_EQ_INT(cfg->capture.cpu_hz, 250);
	/* Checked like in a policy file, at the typed line. */
	CHECK_EQ_INT(eval(p, &c, "prof.schedule{ activ = 2 }"), POLICY_ERROR);
	CHECK(contains(c.err, "stdin:1: prof.schedule: unknown key 'activ'"));
	/* Sections that cannot change live say so. */
	CHECK_EQ_INT(eval(p, &c, "prof.output{ dir = 'x' }"), POLICY_ERROR);
	CHECK(contains(c.err, "prof.output: cannot change while the process runs"));
	/* The host's refusal is an error, and the configuration stays. */
	h.refuse = "this is a child forked from process 1";
	CHECK_EQ_INT(eval(p, &c, "prof.schedule{ active = 9 }"), POLICY_ERROR);
	CHECK(contains(c.err, "prof.schedule: this is a child forked from process 1"));
	CHECK_EQ_INT(eval(p, &c, "prof._config().schedule.enabled"), POLICY_OK);
	CHECK_EQ_STR(c.out, "false\n");
	h.refuse = NULL;
	/* From a hook (not the REPL) configuration calls are still refused. */
	CHECK_EQ_INT(policy_on_step(p, &info, &e), POLICY_ERROR);
	CHECK(contains(e.msg, "can only be called while the policy file loads"));
	CHECK_EQ_INT(h.reconfigures, 3);
	policy_free(p);
}

/* prof.recorder{ enabled = ... } after loading: from the REPL and from a
 * hook alike; only `enabled` changes, the other keys may repeat their
 * values; bad input is one line at the caller's line. */
static void test_recorder_switch(void)
{
	struct fake_host h = { 0 };
	struct client c = { 0 };
	struct policy *p = load(
		"prof.recorder{ steps = 8 }\n"
		"prof.on_step(function(s)\n"
		"  prof.recorder{ enabled = s.step % 2 == 1 }\n"
		"end)\n", &h);
	struct policy *none;
	struct err e;
	struct policy_step_info info = { .step = 2, .action = "NONE" };

	CHECK(p != NULL);
	if (!p)
		return;
	CHECK(!policy_config(p)->recorder.start_paused);
	CHECK_EQ_INT(eval(p, &c, "prof.recorder{ enabled = false }.on"), POLICY_OK);
	CHECK_EQ_STR(c.out, "false\n");
	CHECK_EQ_INT(h.switches, 1);
	CHECK(!h.rec_on);
	/* prof.recorder{} resumes; a key repeating its running value is fine. */
	CHECK_EQ_INT(eval(p, &c, "prof.recorder{ steps = 8 }.on"), POLICY_OK);
	CHECK_EQ_STR(c.out, "true\n");
	CHECK(h.rec_on);
	/* Other keys cannot change; wrong types and unknown keys as at load. */
	CHECK_EQ_INT(eval(p, &c, "prof.recorder{ mb = 16 }"), POLICY_ERROR);
	CHECK(contains(c.err, "stdin:1: prof.recorder: 'mb' cannot change while the "
		       "process runs (it is 256; only 'enabled' can: prof.recorder{ "
		       "enabled = false }); set it in the policy file"));
	CHECK_EQ_INT(eval(p, &c, "prof.recorder{ enabled = 'no' }"), POLICY_ERROR);
	CHECK(contains(c.err, "stdin:1: prof.recorder: 'enabled' must be a boolean"));
	CHECK_EQ_INT(eval(p, &c, "prof.recorder{ enable = true }"), POLICY_ERROR);
	CHECK(contains(c.err, "stdin:1: prof.recorder: unknown key 'enable'"));
	CHECK_EQ_INT(h.switches, 2);
	/* The host's refusal is an error; the recorder's state stays. */
	h.refuse = "the process is ending";
	CHECK_EQ_INT(eval(p, &c, "prof.recorder{ enabled = false }"), POLICY_ERROR);
	CHECK(contains(c.err, "stdin:1: prof.recorder: the process is ending"));
	CHECK_EQ_INT(eval(p, &c, "prof._config().recorder.on"), POLICY_OK);
	CHECK_EQ_STR(c.out, "true\n");
	h.refuse = NULL;
	/* From a hook: step 2 turns it off, step 3 on. */
	CHECK_EQ_INT(policy_on_step(p, &info, &e), POLICY_OK);
	CHECK(!h.rec_on);
	info.step = 3;
	CHECK_EQ_INT(policy_on_step(p, &info, &e), POLICY_OK);
	CHECK(h.rec_on);
	CHECK_EQ_INT(h.switches, 4);
	policy_free(p);

	/* Set up paused: enabled = false in the file. */
	p = load("prof.recorder{ enabled = false }\n", &h);
	CHECK(p != NULL);
	if (p) {
		CHECK(policy_config(p)->recorder.enabled);
		CHECK(policy_config(p)->recorder.start_paused);
		policy_free(p);
	}
	/* No recorder in the file: nothing to switch, and the fix named. */
	none = load("-- no recorder\n", &h);
	CHECK(none != NULL);
	if (!none)
		return;
	CHECK_EQ_INT(eval(none, &c, "prof.recorder{ enabled = true }"), POLICY_ERROR);
	CHECK(contains(c.err, "stdin:1: prof.recorder: no recorder was set up when the "
		       "policy file loaded; put prof.recorder{ ... } in the policy file"));
	CHECK_EQ_INT(h.switches, 4);
	policy_free(none);
}

static void test_host_answers(void)
{
	struct fake_host h = { 0 };
	struct client c = { 0 };
	struct policy *p = load("", &h);

	CHECK(p != NULL);
	if (!p)
		return;
	CHECK_EQ_INT(eval(p, &c, "prof.status()"), POLICY_OK);
	CHECK_EQ_STR(c.out, "{\n  median_ms = 1.5,\n  next_window = { first_step = 50, "
		     "last_step = 52 },\n  outputs = { \"/out/window0\", \"/out/window1\" },\n"
		     "  recording = false,\n  step = 42\n}\n");
	CHECK_EQ_INT(eval(p, &c, "prof.status().outputs[2]"), POLICY_OK);
	CHECK_EQ_STR(c.out, "\"/out/window1\"\n");
	CHECK_EQ_INT(eval(p, &c, "prof._native.query('nonsense')"), POLICY_ERROR);
	CHECK(contains(c.err, "no answer to 'nonsense'"));
	CHECK_EQ_INT(eval(p, &c, "prof.help()"), POLICY_OK);
	CHECK(contains(c.out, "prof.capture_now{steps = N}"));
	policy_free(p);
}

static void test_capture_now_waits(void)
{
	struct fake_host h = { 0 };
	struct client c = { 0 };
	struct policy *p = load("", &h);

	CHECK(p != NULL);
	if (!p)
		return;
	CHECK_EQ_INT(eval(p, &c, "w = prof.capture_now{ steps = 3 }"), POLICY_OK);
	CHECK_EQ_INT(atomic_load(&h.captures), 1);
	CHECK_EQ_INT(h.steps, 3);
	CHECK_EQ_INT(h.capture_queries, 3);
	CHECK(contains(c.out, "recording steps 10-12 ..."));
	CHECK_EQ_INT(eval(p, &c, "w.dir, w.files[1]"), POLICY_OK);
	CHECK_EQ_STR(c.out, "\"/out/window2_steps10-12\"\t"
		     "\"/out/window2_steps10-12/trace.json\"\n");
	CHECK_EQ_INT(eval(p, &c, "prof.capture_now{ steps = 1, wait = false }"), POLICY_OK);
	CHECK_EQ_STR(c.out, "true\n");
	CHECK_EQ_INT(atomic_load(&h.captures), 2);
	policy_free(p);
}

static void test_memory_error(void)
{
	struct fake_host h = { 0 };
	struct client c = { 0 };
	struct policy *p = load("prof.limits{ memory_mb = 8 }\n", &h);

	CHECK(p != NULL);
	if (!p)
		return;
	CHECK_EQ_INT(eval(p, &c, "local t = {} for i = 1, 1e8 do t[i] = i end"),
		     POLICY_ERROR);
	CHECK(contains(c.err, "exceeded the policy's 8 MiB memory limit"));
	CHECK_EQ_INT(eval(p, &c, "1"), POLICY_OK);
	CHECK_EQ_STR(c.out, "1\n");
	policy_free(p);
}

static void test_fork_child(void)
{
	struct fake_host h = { 0 };
	struct client c = { 0 };
	struct policy *p = load(
		"prof.on_trace_ready(function(w)\n"
		"  local t = os.clock() + 0.5 while os.clock() < t do end\n"
		"end)\n", &h);
	struct timespec ts = { 0, 100000000 };
	pthread_t t;
	pid_t pid;
	int status = -1;

	CHECK(p != NULL);
	if (!p)
		return;
	/* Nobody held the VM: the REPL works as before. */
	policy_after_fork_child(p);
	CHECK_EQ_INT(eval(p, &c, "1"), POLICY_OK);
	policy_after_fork_child(NULL);
	/* Forked while a report ran on another thread: the child's copy of
	 * the VM may be half-way through something; the REPL says so. */
	pthread_create(&t, NULL, report_main, p);
	nanosleep(&ts, NULL);
	pid = fork();
	if (pid == 0) {
		enum policy_status st;

		policy_after_fork_child(p);
		st = eval(p, &c, "1");
		_exit(st == POLICY_ERROR &&
		      contains(c.err, "in use on another thread when this process forked")
		      ? 0 : 1);
	}
	CHECK(pid > 0);
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	pthread_join(t, NULL);
	policy_free(p);
}

/* ------------------------------------------------------------ main */

int main(void)
{
	testdir_make(tmpdir, sizeof tmpdir, "test_repl", true);
	test_values_like_lua();
	test_long_tables_wrap();
	test_incomplete_and_errors();
	test_budget_and_interrupt();
	test_error_tostring_budget();
	test_hooks_added_at_the_repl();
	test_sleep_lets_hooks_run();
	test_waits_for_a_report();
	test_live_schedule_and_capture();
	test_recorder_switch();
	test_host_answers();
	test_capture_now_waits();
	test_memory_error();
	test_fork_child();
	testdir_remove(tmpdir);
	return check_done();
}

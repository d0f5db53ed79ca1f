/*
 * test_policy — the policy engine as a policy author and the host see it:
 * configuration read from real files, one-line errors with file:line, the
 * sandbox, time and memory budgets, hooks, --set, capture_now, the lock.
 *
 * Every test writes its files into a fresh mkdtemp() directory, which is
 * also the working directory, so messages read "myprof.lua:3: ...".
 */

#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
static char outside_dir[256];

/* What the capture_now callback saw. */
struct capture_log {
	atomic_int calls;
	uint32_t steps;
	char reason[512];
	char order[256];  /* reasons of all calls, joined by ',' */
	const char *refuse; /* when set, refuse with this message */
	struct policy *reenter; /* when set, call back into this policy */
	int reenter_status;
};

static const struct policy_window_info window_info;
static const struct policy_trace trace_info;

static int test_capture(void *ctx, uint32_t steps, const char *reason,
			struct err *e)
{
	struct capture_log *log = ctx;
	size_t n;

	if (log->refuse)
		return err_set(e, "%s", log->refuse);
	if (log->reenter)
		log->reenter_status = policy_on_trace_ready(log->reenter,
							    &trace_info, NULL);
	log->steps = steps;
	snprintf(log->reason, sizeof log->reason, "%s", reason ? reason : "(null)");
	n = strlen(log->order);
	snprintf(log->order + n, sizeof log->order - n, "%s%s", n ? "," : "",
		 log->reason);
	atomic_fetch_add(&log->calls, 1);
	return 0;
}

/* Writes `src` as myprof.lua in the test directory and loads it. */
static struct policy *load_src(const char *src, const char *const *sets,
			       struct capture_log *log, struct err *e)
{
	struct policy_opts o = { 0 };

	testdir_write("myprof.lua", src);
	o.lua_dir = PROFHOST_TEST_LUA_DIR;
	o.script = "myprof.lua";
	o.sets = sets;
	o.capture_now = test_capture;
	o.capture_ctx = log;
	e->msg[0] = '\0';
	return policy_load(&o, e);
}

/* Loads `src`, expecting failure; returns the message (static). */
static const char *load_error(const char *src)
{
	static struct err e;
	struct capture_log log = { 0 };
	struct policy *p = load_src(src, NULL, &log, &e);

	if (p) {
		policy_free(p);
		return "(loaded)";
	}
	return e.msg;
}

static const struct policy_step_info step_info = {
	.step = 7, .duration_ms = 12.5, .median_ms = 10.0, .mean_ms = 11.0,
	.action = "RECORD", .recording = true
};

static const char *const window_files[] = { "trace.json", "summary.txt", NULL };

static const struct policy_window_info window_info = {
	.window = 2, .first_step = 15, .last_step = 17, .reason = "schedule",
	.dir = "prof_out/run/rank0/window2_steps15-17", .files = window_files,
	.events = 1234, .dropped = 5
};

/* A zeroed trace is a valid empty one. */
static struct trace empty_trace;

static const struct policy_trace trace_info = {
	.trace = &empty_trace, .dir = NULL, .files = window_files
};

/* Runs p's step hooks, checking their status; returns how long they took,
 * in ms (a budget's test: well under the 60 s of a runaway). */
static int64_t timed_step(struct policy *p, enum policy_status want, struct err *e)
{
	int64_t t0 = clock_now_ns();

	CHECK_EQ_INT(policy_on_step(p, &step_info, e), want);
	return (clock_now_ns() - t0) / 1000000;
}

/* ------------------------------------------------------------ tests */

static void test_valid_file_config(void)
{
	struct err e;
	struct capture_log log = { 0 };
	struct policy *p = load_src(
		"prof.output{ dir = \"/tmp/out\", run = \"baseline\" }\n"
		"prof.schedule{ skip_first = 10, wait = 5, warmup = 1, active = 3, cycles = 2 }\n"
		"prof.steps{ nvtx = \"train_step\", domain = \"app\", every_ms = 500,\n"
		"            kernel = \"^nccl\", python = \"optimizer\", cuda = \"cudaGraphLaunch\",\n"
		"            nvtx_mark = \"tick\" }\n"
		"prof.capture{ cuda = { driver = false }, nvtx = false,\n"
		"              cpu_samples = { hz = 250, clock = \"wall\", depth = 40,\n"
		"                              signal = \"SIGRTMIN+2\" }, range_stacks = true, modules = true,\n"
		"              cuda_backtrace = { threshold_us = 20 }, record_shapes = true,\n"
		"              buffer_mb = 256 }\n"
		"prof.export{ chrome = { gzip = true }, tensorboard = true,\n"
		"             key_averages = { sort_by = \"self_cuda_time_total\", row_limit = 20,\n"
		"                              group_by = \"domain\" },\n"
		"             stacks = false, memory_timeline = false, summary = false }\n"
		"prof.limits{ hook_ms = 50, report_ms = 5000, load_ms = 1000, memory_mb = 32 }\n"
		"prof.capture_range{ nvtx = \"eval\", domain = \"app\", count = 0 }\n"
		"prof.on_step(function(s) end)\n"
		"prof.on_trace_ready(function(w) end)\n",
		NULL, &log, &e);
	const struct policy_config *c;
	char expect_source[512];

	CHECK(p != NULL);
	if (!p) {
		fprintf(stderr, "load failed: %s\n", e.msg);
		return;
	}
	c = policy_config(p);
	CHECK_EQ_STR(c->output_dir, "/tmp/out");
	CHECK_EQ_STR(c->run_name, "baseline");
	CHECK(c->schedule.enabled);
	CHECK_EQ_INT(c->schedule.skip_first, 10);
	CHECK_EQ_INT(c->schedule.wait, 5);
	CHECK_EQ_INT(c->schedule.warmup, 1);
	CHECK_EQ_INT(c->schedule.active, 3);
	CHECK_EQ_INT(c->schedule.cycles, 2);
	CHECK_EQ_STR(c->steps.nvtx, "train_step");
	CHECK_EQ_STR(c->steps.nvtx_domain, "app");
	CHECK_EQ_STR(c->steps.nvtx_mark, "tick");
	CHECK_EQ_STR(c->steps.python, "optimizer");
	CHECK_EQ_STR(c->steps.cuda, "cudaGraphLaunch");
	CHECK_EQ_STR(c->steps.kernel, "^nccl");
	CHECK_EQ_INT(c->steps.every_ms, 500);
	CHECK_EQ_STR(c->capture_range.nvtx, "eval");
	CHECK_EQ_STR(c->capture_range.nvtx_domain, "app");
	CHECK_EQ_INT(c->capture_range.count, 0);
	CHECK(!c->capture.nvtx);
	CHECK(c->capture.cuda_kernels && c->capture.cuda_memcpy &&
	      c->capture.cuda_memset && c->capture.cuda_runtime &&
	      c->capture.cuda_sync && c->capture.cuda_memory);
	CHECK(!c->capture.cuda_driver);
	CHECK_EQ_INT(c->capture.cpu_hz, 250);
	CHECK(c->capture.cpu_wall_clock);
	CHECK_EQ_INT(c->capture.cpu_depth, 40);
	CHECK_EQ_INT(c->capture.cpu_signal, SIGRTMIN + 2);
	CHECK(c->capture.range_stacks);
	CHECK(c->capture.modules);
	CHECK_EQ_INT(c->capture.cuda_backtrace_us, 20);
	CHECK(c->capture.record_shapes);
	CHECK_EQ_INT(c->capture.buffer_bytes, 256u << 20);
	CHECK(c->export.chrome && c->export.chrome_gzip && c->export.tensorboard);
	CHECK(c->export.key_averages);
	CHECK_EQ_STR(c->export.sort_by, "self_cuda_time_total");
	CHECK_EQ_INT(c->export.row_limit, 20);
	CHECK_EQ_STR(c->export.group_by, "domain");
	CHECK(!c->export.stacks && !c->export.memory_timeline && !c->export.summary);
	CHECK_EQ_INT(c->limits.hook_ms, 50);
	CHECK_EQ_INT(c->limits.report_ms, 5000);
	CHECK_EQ_INT(c->limits.load_ms, 1000);
	CHECK_EQ_INT(c->limits.memory_bytes, 32u << 20);
	CHECK(c->has_on_step && c->has_on_trace_ready);
	CHECK(!c->has_on_window_start && !c->has_on_window_end);
	snprintf(expect_source, sizeof expect_source, "%s/myprof.lua", tmpdir);
	CHECK_EQ_STR(policy_source(p), expect_source);
	policy_free(p);
}

static void test_defaults(void)
{
	struct err e;
	struct capture_log log = { 0 };
	struct policy *p = load_src("-- nothing\n", NULL, &log, &e);
	const struct policy_config *c;

	CHECK(p != NULL);
	if (!p)
		return;
	c = policy_config(p);
	CHECK_EQ_STR(c->output_dir, "prof_out");
	CHECK(c->run_name == NULL);
	CHECK(!c->schedule.enabled);
	CHECK(c->steps.nvtx == NULL && c->steps.python == NULL);
	CHECK(c->capture_range.nvtx == NULL && c->capture_range.nvtx_domain == NULL);
	CHECK_EQ_INT(c->capture_range.count, 1);
	CHECK(c->capture.nvtx && c->capture.cuda_kernels && c->capture.cuda_driver);
	CHECK_EQ_INT(c->capture.cpu_hz, 0);
	CHECK_EQ_INT(c->capture.cpu_depth, 128);
	CHECK_EQ_INT(c->capture.cpu_signal, 0);
	CHECK(!c->capture.range_stacks);
	CHECK(!c->capture.modules);
	CHECK_EQ_INT(c->capture.cuda_backtrace_us, 0);
	CHECK_EQ_INT(c->capture.buffer_bytes, 128u << 20);
	CHECK(c->export.chrome && !c->export.chrome_gzip && !c->export.tensorboard);
	CHECK_EQ_STR(c->export.sort_by, "self_cpu_time_total");
	CHECK_EQ_INT(c->export.row_limit, 50);
	CHECK_EQ_STR(c->export.group_by, "name");
	CHECK(c->export.stacks && c->export.memory_timeline && c->export.summary);
	CHECK_EQ_INT(c->limits.hook_ms, 100);
	CHECK_EQ_INT(c->limits.report_ms, 10000);
	CHECK_EQ_INT(c->limits.load_ms, 2000);
	CHECK_EQ_INT(c->limits.memory_bytes, 64u << 20);
	CHECK(!c->has_on_step);
	policy_free(p);
}

static void test_builtin_default(void)
{
	struct err e;
	struct policy_opts o = { 0 };
	struct policy *p;
	const struct policy_config *c;

	o.lua_dir = PROFHOST_TEST_LUA_DIR;
	p = policy_load(&o, &e);
	CHECK(p != NULL);
	if (!p) {
		fprintf(stderr, "load failed: %s\n", e.msg);
		return;
	}
	c = policy_config(p);
	CHECK(c->schedule.enabled);
	CHECK_EQ_INT(c->schedule.skip_first, 10);
	CHECK_EQ_INT(c->schedule.wait, 0);
	CHECK_EQ_INT(c->schedule.warmup, 1);
	CHECK_EQ_INT(c->schedule.active, 5);
	CHECK_EQ_INT(c->schedule.cycles, 1);
	CHECK_EQ_STR(policy_source(p), "(built-in default)");
	policy_free(p);
}

static void test_open_errors(void)
{
	struct err e;
	struct policy_opts o = { 0 };

	o.lua_dir = PROFHOST_TEST_LUA_DIR;
	o.script = "x.lua";
	CHECK(policy_load(&o, &e) == NULL);
	CHECK_EQ_STR(e.msg, "PROF_SCRIPT: cannot open 'x.lua': No such file or directory");

	o.script = ".";
	CHECK(policy_load(&o, &e) == NULL);
	CHECK_EQ_STR(e.msg, "PROF_SCRIPT: cannot open '.': Is a directory");

	testdir_write("compiled.luac", "\x1bLuaT\x00 fake");
	o.script = "compiled.luac";
	CHECK(policy_load(&o, &e) == NULL);
	CHECK_EQ_STR(e.msg, "PROF_SCRIPT: 'compiled.luac' is a precompiled Lua chunk; profhost loads Lua source only");

	testdir_write("ok.lua", "\n");
	o.script = "ok.lua";
	o.lua_dir = "/nonexistent/lua";
	CHECK(policy_load(&o, &e) == NULL);
	CHECK(starts_with(e.msg, "policy: cannot load the prof module: module 'prof' not found in '/nonexistent/lua'"));

	o.lua_dir = NULL;
	CHECK(policy_load(&o, &e) == NULL);
	CHECK(contains(e.msg, "no Lua directory"));
	CHECK(policy_load(NULL, &e) == NULL);
}

/* Dies with a message instead of hanging the suite when a load blocks. */
static void on_alarm(int sig)
{
	static const char msg[] = "test_policy: a load blocked on a FIFO\n";

	(void)sig;
	if (write(2, msg, sizeof msg - 1) < 0)
		_exit(3);
	_exit(3);
}

/* A policy or module that is a FIFO is refused at once with one line; it
 * used to block the process in open() forever. */
static void test_fifo_refused(void)
{
	struct err e;
	struct policy_opts o = { 0 };
	char path[512];

	signal(SIGALRM, on_alarm);
	alarm(20);
	CHECK(mkfifo("pipe.lua", 0600) == 0);
	o.lua_dir = PROFHOST_TEST_LUA_DIR;
	o.script = "pipe.lua";
	CHECK(policy_load(&o, &e) == NULL);
	CHECK_EQ_STR(e.msg, "PROF_SCRIPT: 'pipe.lua' is a FIFO (named pipe), not a regular file");

	mkdir("fifomods", 0700);
	CHECK(mkfifo("fifomods/piped.lua", 0600) == 0);
	snprintf(path, sizeof path, "myprof.lua:2: module 'fifomods.piped': %s/fifomods/piped.lua "
		 "is a FIFO (named pipe), not a regular file", tmpdir);
	CHECK_EQ_STR(load_error("\nrequire('fifomods.piped')\n"), path);
	alarm(0);
	signal(SIGALRM, SIG_DFL);
}

static void test_syntax_and_validation_errors(void)
{
	const char *m;

	m = load_error("prof.schedule{ active = 1 }\n\nlocal x = = 2\n");
	CHECK(starts_with(m, "myprof.lua:3:"));
	CHECK(contains(m, "unexpected symbol"));
	CHECK(!contains(m, "\n"));

	CHECK_EQ_STR(load_error("-- policy\n\nprof.schedule{ activ = 3 }\n"),
		     "myprof.lua:3: prof.schedule: unknown key 'activ' (valid keys: active, cycles, skip_first, wait, warmup, whole)");
	CHECK_EQ_STR(load_error("\n\n\nprof.schedule{ active = 0 }\n"),
		     "myprof.lua:4: prof.schedule: 'active' must be an integer >= 1, got 0");
	CHECK_EQ_STR(load_error("\n\n\n\nprof.export{ chrome = \"yes\" }\n"),
		     "myprof.lua:5: prof.export: 'chrome' must be a boolean or a table (e.g. chrome = { gzip = true }), got string \"yes\"");
	CHECK_EQ_STR(load_error("prof.schedule{ active = 1 }\nprof.schedule{ active = 2 }\n"),
		     "myprof.lua:2: prof.schedule: called twice (first call at myprof.lua:1); put all schedule settings in one call");
	/* torch's spelling, repeat = 2, is a syntax error before any prof.*
	 * call runs: it gets the hint ["repeat"] = 2 gets, of the call it is
	 * in (issue #26.6). */
	CHECK_EQ_STR(load_error("prof.schedule{ wait = 1, active = 3, repeat = 2 }\n"),
		     "myprof.lua:1: unexpected symbol near 'repeat' (torch's repeat is called "
		     "'cycles' here because repeat is a Lua keyword)");
	CHECK_EQ_STR(load_error("prof.output{ dir = 'x' }\nprof.schedule {\n  active = 3,\n"
				"  repeat = 2,\n}\n"),
		     "myprof.lua:4: unexpected symbol near 'repeat' (torch's repeat is called "
		     "'cycles' here because repeat is a Lua keyword)");
	CHECK_EQ_STR(load_error("prof.schedule{ active = 3 }\nprof.capture_range{ nvtx = 'eval', "
				"repeat = 0 }\n"),
		     "myprof.lua:2: unexpected symbol near 'repeat' (nsys's repeat is called "
		     "'count' here (0 = every time))");
	/* a repeat loop left open is Lua's own message */
	m = load_error("prof.schedule{ active = 3 }\nrepeat\n");
	CHECK(starts_with(m, "myprof.lua:3: 'until' expected"));
	CHECK(!contains(m, "cycles"));

	m = load_error("local t = nil\nlocal x = t.field\n");
	CHECK(starts_with(m, "myprof.lua:2: attempt to index a nil value"));
	CHECK_EQ_STR(load_error("error('custom', 0)\n"), "custom");
	CHECK_EQ_STR(load_error("\nerror({})\n"), "myprof.lua:2: (error object is a table value)");
}

/* Errors carry the position where they were raised, once: error objects
 * that are not strings, errors out of coroutine.wrap, prof.sleep misused,
 * an error object whose __tostring fails or loops. */
static void test_error_positions(void)
{
	struct err e;
	struct capture_log log = { 0 };
	struct policy *p;

	CHECK_EQ_STR(load_error("\n\nerror(42)\n"), "myprof.lua:3: 42");
	CHECK_EQ_STR(load_error("error(setmetatable({}, { __tostring = function() return 'mine' end }))\n"),
		     "myprof.lua:1: mine");
	CHECK_EQ_STR(load_error("error(setmetatable({}, { __tostring = function() error('bad') end }))\n"),
		     "myprof.lua:1: (error object is a table value; its __tostring failed: myprof.lua:1: bad)");
	CHECK_EQ_STR(load_error("local f = coroutine.wrap(function()\n  error('boom')\nend)\nf()\n"),
		     "myprof.lua:2: boom");
	CHECK_EQ_STR(load_error("local f = coroutine.wrap(function() end)\nf()\nf()\n"),
		     "myprof.lua:3: cannot resume dead coroutine");
	CHECK_EQ_STR(load_error("local f = coroutine.wrap(function(a) local b = coroutine.yield(a + 1) error(b, 0) end)\n"
				"assert(f(1) == 2)\nf('plain')\n"), "plain");
	CHECK_EQ_STR(load_error("\nprof.sleep(5)\n"),
		     "myprof.lua:2: prof.sleep: only at the REPL, outside coroutines, metamethods and iterators");

	/* In a hook: the same positions. */
	p = load_src("prof.on_step(function(s)\n  error(42)\nend)\n", NULL, &log, &e);
	CHECK(p != NULL);
	if (!p)
		return;
	CHECK_EQ_INT(policy_on_step(p, &step_info, &e), POLICY_ERROR);
	CHECK_EQ_STR(e.msg, "myprof.lua:2: 42 (in prof.on_step; hook disabled)");
	policy_free(p);

	/* A __tostring that loops is stopped by the hook's budget, and the
	 * VM is free again at once. */
	p = load_src("prof.limits{ hook_ms = 50 }\n"
		     "prof.on_step(function(s)\n"
		     "  error(setmetatable({}, { __tostring = function() while true do end end }))\n"
		     "end)\n", NULL, &log, &e);
	CHECK(p != NULL);
	if (!p)
		return;
	CHECK(timed_step(p, POLICY_ERROR, &e) < 2000);
	CHECK_EQ_STR(e.msg, "myprof.lua:3: (error object is a table value; its __tostring failed: "
		     "myprof.lua:3: policy exceeded its 50 ms time budget (prof.limits{hook_ms=...})) "
		     "(in prof.on_step; hook disabled)");
	CHECK_EQ_INT(policy_on_step(p, &step_info, &e), POLICY_OK);
	policy_free(p);
}

/* Library calls that do not run Lua instructions are stopped by the hook
 * budget like any Lua code: string.find & co. with a pathological pattern
 * (Lua's own matcher cannot be interrupted), table.sort. */
static void test_library_calls_budget(void)
{
	struct err e;
	struct capture_log log = { 0 };
	struct policy *p = load_src(
		"prof.limits{ hook_ms = 50 }\n"
		"prof.on_step(function(s)\n"
		"  local x = string.rep('a', 1500):find('.-.-.-b')\n"
		"end)\n"
		"prof.on_step(function(s)\n"
		"  local ok, err = pcall(string.gsub, string.rep('a', 1500), '.-.-.-b', '')\n"
		"  local t = ('key = value'):match('^(%w+)%s*=%s*(%w+)$')\n"
		"  prof.capture_now{ steps = 1, reason = t }\n"
		"end)\n",
		NULL, &log, &e);

	CHECK(p != NULL);
	if (!p)
		return;
	CHECK(timed_step(p, POLICY_ERROR, &e) < 2000); /* Lua's matcher: over a minute */
	CHECK_EQ_STR(e.msg, "myprof.lua:3: policy exceeded its 50 ms time budget "
		     "(prof.limits{hook_ms=...}) (in prof.on_step; hook disabled)");
	/* The second hook catches its runaway match with pcall, which does
	 * not help: it is stopped at its next line (so no capture). */
	CHECK_EQ_INT(atomic_load(&log.calls), 0);
	CHECK_EQ_INT(policy_on_step(p, &step_info, &e), POLICY_OK);
	policy_free(p);

	/* table.sort of numbers runs no Lua instruction either: a sort of
	 * two million (about half a second) is stopped by a 20 ms budget,
	 * and sorting with and without a comparator still works. */
	p = load_src("prof.limits{ hook_ms = 20, load_ms = 20000, memory_mb = 256 }\n"
		     "local t = { 3, 1, 2 } table.sort(t) assert(table.concat(t) == '123')\n"
		     "table.sort(t, function(a, b) return a > b end) assert(table.concat(t) == '321')\n"
		     "assert(not pcall(table.sort, { 1, 'x' }))\n"
		     "big = {} for i = 1, 2000000 do big[i] = (i * 7919) % 1000003 end\n"
		     "prof.on_step(function(s)\n"
		     "  table.sort(big)\n"
		     "end)\n", NULL, &log, &e);
	CHECK(p != NULL);
	if (!p) {
		fprintf(stderr, "load failed: %s\n", e.msg);
		return;
	}
	CHECK_EQ_INT(policy_on_step(p, &step_info, &e), POLICY_ERROR);
	CHECK_EQ_STR(e.msg, "myprof.lua:7: policy exceeded its 20 ms time budget "
		     "(prof.limits{hook_ms=...}) (in prof.on_step; hook disabled)");
	policy_free(p);
}

static void test_sandbox_denials(void)
{
	CHECK_EQ_STR(load_error("\nos.exit(1)\n"),
		     "myprof.lua:2: os.exit is not available in a profhost policy");
	CHECK_EQ_STR(load_error("os.execute('touch pwned')\n"),
		     "myprof.lua:1: os.execute is not available in a profhost policy");
	CHECK(access("pwned", F_OK) != 0);
	CHECK_EQ_STR(load_error("\n\nlocal f = io.open('/etc/passwd')\n"),
		     "myprof.lua:3: io.open is not available in a profhost policy");
	CHECK_EQ_STR(load_error("io.write('x')\n"),
		     "myprof.lua:1: io.write is not available in a profhost policy (print() writes to the profhost log)");
	CHECK_EQ_STR(load_error("loadfile('myprof.lua')\n"),
		     "myprof.lua:1: loadfile is not available in a profhost policy");
	CHECK_EQ_STR(load_error("dofile('myprof.lua')\n"),
		     "myprof.lua:1: dofile is not available in a profhost policy");
	CHECK_EQ_STR(load_error("os.remove('myprof.lua')\n"),
		     "myprof.lua:1: os.remove is not available in a profhost policy");
	CHECK(access("myprof.lua", F_OK) == 0);
	CHECK_EQ_STR(load_error("os.rename('a', 'b')\n"),
		     "myprof.lua:1: os.rename is not available in a profhost policy");
	CHECK_EQ_STR(load_error("os.tmpname()\n"),
		     "myprof.lua:1: os.tmpname is not available in a profhost policy");
	CHECK_EQ_STR(load_error("package.loadlib('libc.so.6', 'system')\n"),
		     "myprof.lua:1: package.loadlib is not available in a profhost policy");
	CHECK_EQ_STR(load_error("require('os').execute('true')\n"),
		     "myprof.lua:1: os.execute is not available in a profhost policy");
	CHECK_EQ_STR(load_error("setmetatable({}, { __gc = function() end })\n"),
		     "myprof.lua:1: setmetatable: __gc metamethods are not available in a profhost policy");
	CHECK(starts_with(load_error("require('debug')\n"),
			  "myprof.lua:1: module 'debug' not found in '"));
	CHECK(starts_with(load_error("local d = debug.sethook\n"),
			  "myprof.lua:1: attempt to index a nil value (global 'debug')"));
	/* What stays: os.time/clock/date/getenv, string, table, math, utf8,
	 * coroutine, text load(); binary chunks are refused. */
	CHECK_EQ_STR(load_error(
		"assert(os.time() > 0 and os.clock() >= 0 and os.date('%Y') and os.difftime(2, 1) == 1)\n"
		"assert(os.getenv('PATH'))\n"
		"assert(string.rep('a', 3) == 'aaa' and table.concat({1, 2}) == '12')\n"
		"assert(math.max(1, 2) == 2 and utf8.char(72) == 'H')\n"
		"assert(coroutine.wrap(function() coroutine.yield(5) end)() == 5)\n"
		"assert(load('return 1 + 1')() == 2)\n"
		"local f, err = load(string.dump(function() end))\n"
		"assert(f == nil and err:find('binary chunk'), err)\n"
		"local ok = pcall(load, string.dump(function() end), 'x', 'b')\n"
		"assert(package.cpath == '')\n"
		"error('all fine', 0)\n"),
		"all fine");
}

static void test_load_budget(void)
{
	int64_t t0 = clock_now_ns(), ms;
	const char *m = load_error("prof.limits{ load_ms = 200 }\n"
				   "local n = 0\n"
				   "while true do n = n + 1 end\n");

	ms = (clock_now_ns() - t0) / 1000000;
	CHECK_EQ_STR(m, "myprof.lua:3: policy exceeded its 200 ms time budget (prof.limits{load_ms=...})");
	CHECK(ms >= 190);
	/* Stopped, not run to completion: generous, the machine may be busy. */
	CHECK(ms < 2000);

	/* A runaway loop that catches the budget error still stops. */
	t0 = clock_now_ns();
	m = load_error("prof.limits{ load_ms = 100 }\n"
		       "while true do pcall(function() while true do end end) end\n");
	ms = (clock_now_ns() - t0) / 1000000;
	CHECK(contains(m, "policy exceeded its 100 ms time budget (prof.limits{load_ms=...})"));
	CHECK(ms < 1000);
}

static void test_hook_budget_disables_hook(void)
{
	struct err e;
	struct capture_log log = { 0 };
	struct policy *p = load_src(
		"prof.limits{ hook_ms = 50 }\n"
		"prof.on_step(function(s)\n"
		"  prof.capture_now{ steps = 1, reason = 'looping' }\n"
		"  while true do end\n"
		"end)\n",
		NULL, &log, &e);

	CHECK(p != NULL);
	if (!p)
		return;
	CHECK(timed_step(p, POLICY_ERROR, &e) < 2000); /* interrupted; generous for a busy machine */
	CHECK_EQ_STR(e.msg, "myprof.lua:4: policy exceeded its 50 ms time budget (prof.limits{hook_ms=...}) (in prof.on_step; hook disabled)");
	CHECK_EQ_INT(atomic_load(&log.calls), 1);
	/* Disabled: the next step runs nothing. */
	e.msg[0] = '\0';
	CHECK_EQ_INT(policy_on_step(p, &step_info, &e), POLICY_OK);
	CHECK_EQ_INT(atomic_load(&log.calls), 1);
	CHECK_EQ_STR(e.msg, "");
	policy_free(p);
}

static void test_report_budget(void)
{
	struct err e;
	struct capture_log log = { 0 };
	struct policy *p = load_src(
		"prof.limits{ report_ms = 1000, hook_ms = 1 }\n"
		"prof.on_trace_ready(function(w)\n"
		"  local t = os.clock() + 0.03\n"
		"  while os.clock() < t do end\n"
		"  prof.capture_now{ steps = 1, reason = 'slow report finished' }\n"
		"  while true do end\n"
		"end)\n",
		NULL, &log, &e);

	CHECK(p != NULL);
	if (!p)
		return;
	/* 30 ms of CPU is past hook_ms but well within report_ms, even on a
	 * loaded machine where it takes longer in wall-clock time. */
	CHECK_EQ_INT(policy_on_trace_ready(p, &trace_info, &e), POLICY_ERROR);
	CHECK_EQ_STR(log.reason, "slow report finished");
	CHECK_EQ_STR(e.msg, "myprof.lua:6: policy exceeded its 1000 ms time budget (prof.limits{report_ms=...}) (in prof.on_trace_ready; hook disabled)");
	policy_free(p);
}

static void test_hook_errors_and_order(void)
{
	struct err e;
	struct capture_log log = { 0 };
	struct policy *p = load_src(
		"prof.on_step(function(s) prof.capture_now{ steps = 1, reason = 'first' } end)\n"
		"prof.on_step(function(s)\n"
		"  local t = nil\n"
		"  return t.x\n"
		"end)\n"
		"prof.on_step(function(s) prof.capture_now{ steps = 1, reason = 'third' } end)\n"
		"prof.on_window_start(function(w) prof.schedule{ active = 2 } end)\n",
		NULL, &log, &e);
	struct policy_window_info start = { .window = 1, .first_step = 3,
					    .last_step = 3, .reason = "schedule" };

	CHECK(p != NULL);
	if (!p)
		return;
	CHECK_EQ_INT(policy_on_step(p, &step_info, &e), POLICY_ERROR);
	CHECK_EQ_STR(e.msg, "myprof.lua:4: attempt to index a nil value (local 't') (in prof.on_step; hook disabled)");
	CHECK_EQ_STR(log.order, "first,third");
	CHECK_EQ_INT(policy_on_step(p, &step_info, &e), POLICY_OK);
	CHECK_EQ_STR(log.order, "first,third,first,third");

	CHECK_EQ_INT(policy_on_window_start(p, &start, &e), POLICY_ERROR);
	CHECK_EQ_STR(e.msg, "myprof.lua:7: prof.schedule: can only be called while the policy file loads, not from a hook (in prof.on_window_start; hook disabled)");
	policy_free(p);
}

static void test_hook_arguments(void)
{
	struct err e;
	struct capture_log log = { 0 };
	struct policy *p = load_src(
		"prof.on_step(function(s)\n"
		"  prof.capture_now{ steps = 2, reason = string.format('%d %.1f %.1f %.1f %s %s',\n"
		"    s.step, s.duration_ms, s.median_ms, s.mean_ms, s.action, tostring(s.recording)) }\n"
		"end)\n"
		"prof.on_window_end(function(w)\n"
		"  prof.capture_now{ steps = 1, reason = table.concat({ w.window, w.first_step,\n"
		"    w.last_step, w.reason, w.dir, table.concat(w.files, '+'), w.events, w.dropped }, ' ') }\n"
		"end)\n",
		NULL, &log, &e);

	CHECK(p != NULL);
	if (!p)
		return;
	CHECK_EQ_INT(policy_on_step(p, &step_info, &e), POLICY_OK);
	CHECK_EQ_INT(log.steps, 2);
	CHECK_EQ_STR(log.reason, "7 12.5 10.0 11.0 RECORD true");
	CHECK_EQ_INT(policy_on_window_end(p, &window_info, &e), POLICY_OK);
	CHECK_EQ_INT(log.steps, 1);
	CHECK_EQ_STR(log.reason, "2 15 17 schedule prof_out/run/rank0/window2_steps15-17 trace.json+summary.txt 1234 5");
	policy_free(p);
}

static void test_capture_now(void)
{
	struct err e;
	struct capture_log log = { 0 };
	struct policy *p = load_src(
		"prof.on_step(function(s)\n"
		"  if s.duration_ms > 1.2 * s.median_ms then\n"
		"    prof.capture_now{ steps = 3, reason = 'slow step' }\n"
		"  end\n"
		"end)\n",
		NULL, &log, &e);

	CHECK(p != NULL);
	if (!p)
		return;
	CHECK_EQ_INT(policy_on_step(p, &step_info, &e), POLICY_OK);
	CHECK_EQ_INT(atomic_load(&log.calls), 1);
	CHECK_EQ_INT(log.steps, 3);
	CHECK_EQ_STR(log.reason, "slow step");
	/* The host refuses: the error is raised at the policy's line. */
	log.refuse = "a capture_now window is already queued";
	CHECK_EQ_INT(policy_on_step(p, &step_info, &e), POLICY_ERROR);
	CHECK_EQ_STR(e.msg, "myprof.lua:3: prof.capture_now: a capture_now window is already queued (in prof.on_step; hook disabled)");

	/* A callback that wrongly calls back into the policy is told BUSY
	 * instead of deadlocking. */
	policy_free(p);
	log.refuse = NULL;
	p = load_src("prof.on_step(function(s) prof.capture_now{ steps = 1 } end)\n",
		     NULL, &log, &e);
	CHECK(p != NULL);
	if (!p)
		return;
	log.reenter = p;
	log.reenter_status = 99;
	CHECK_EQ_INT(policy_on_step(p, &step_info, &e), POLICY_OK);
	CHECK_EQ_INT(log.reenter_status, POLICY_BUSY);
	log.reenter = NULL;
	policy_free(p);

	/* At load time, with the default reason. */
	p = load_src("prof.capture_now{ steps = 4 }\n", NULL, &log, &e);
	CHECK(p != NULL);
	CHECK_EQ_INT(log.steps, 4);
	CHECK_EQ_STR(log.reason, "capture_now");
	policy_free(p);
}

static void test_memory_cap(void)
{
	struct err e;
	struct capture_log log = { 0 };
	struct policy *p;
	const char *m;

	m = load_error("prof.limits{ memory_mb = 8 }\n"
		       "local t = {}\n"
		       "for i = 1, 1e8 do t[i] = i end\n");
	CHECK_EQ_STR(m, "myprof.lua: policy exceeded its 8 MiB memory limit (prof.limits{memory_mb=...})");

	/* prof.limits raises the cap for the rest of the file. */
	p = load_src("prof.limits{ memory_mb = 256, load_ms = 30000 }\n"
		     "big = string.rep('x', 80 * 1024 * 1024)\n"
		     "big = nil\n",
		     NULL, &log, &e);
	CHECK(p != NULL);
	if (!p)
		fprintf(stderr, "load failed: %s\n", e.msg);
	policy_free(p);

	/* In a hook: that hook fails and is disabled, the VM goes on. */
	p = load_src("prof.limits{ memory_mb = 8 }\n"
		     "prof.on_step(function(s)\n"
		     "  local s = string.rep('x', 16 * 1024 * 1024)\n"
		     "end)\n"
		     "prof.on_step(function(s) prof.capture_now{ steps = 1, reason = 'alive' } end)\n",
		     NULL, &log, &e);
	CHECK(p != NULL);
	if (!p)
		return;
	CHECK_EQ_INT(policy_on_step(p, &step_info, &e), POLICY_ERROR);
	CHECK_EQ_STR(e.msg, "myprof.lua:2: policy exceeded its 8 MiB memory limit (prof.limits{memory_mb=...}) (in prof.on_step; hook disabled)");
	CHECK_EQ_STR(log.reason, "alive");
	CHECK_EQ_INT(policy_on_step(p, &step_info, &e), POLICY_OK);
	CHECK_EQ_INT(atomic_load(&log.calls), 2);
	policy_free(p);
}

static void test_require(void)
{
	struct err e;
	struct capture_log log = { 0 };
	struct policy *p;
	char src[1024], outside_mod[512];

	testdir_write("helper.lua", "return { active = 4 }\n");
	mkdir("sub", 0700);
	testdir_write("sub/mod.lua", "return { dir = 'from_sub' }\n");
	testdir_write("sub/init.lua", "return { run = 'sub_init' }\n");
	p = load_src("local h = require('helper')\n"
		     "local m = require('sub.mod')\n"
		     "assert(require('helper') == h)\n"
		     "prof.schedule{ active = h.active }\n"
		     "prof.output{ dir = m.dir, run = require('sub').run }\n",
		     NULL, &log, &e);
	CHECK(p != NULL);
	if (p) {
		CHECK_EQ_INT(policy_config(p)->schedule.active, 4);
		CHECK_EQ_STR(policy_config(p)->output_dir, "from_sub");
		CHECK_EQ_STR(policy_config(p)->run_name, "sub_init");
	} else {
		fprintf(stderr, "load failed: %s\n", e.msg);
	}
	policy_free(p);

	/* A module outside the two directories is not found, whatever the
	 * policy does to package.path, and LUA_PATH does not count. */
	snprintf(outside_mod, sizeof outside_mod, "%s/outside.lua", outside_dir);
	testdir_write(outside_mod, "return {}\n");
	CHECK(starts_with(load_error("\nrequire('outside')\n"),
			  "myprof.lua:2: module 'outside' not found in '" PROFHOST_TEST_LUA_DIR "' or '"));
	snprintf(src, sizeof src, "package.path = '%s/?.lua'\nrequire('outside')\n",
		 outside_dir);
	CHECK(starts_with(load_error(src), "myprof.lua:2: module 'outside' not found"));
	snprintf(src, sizeof src, "%s/?.lua;;", outside_dir);
	setenv("LUA_PATH", src, 1);
	setenv("LUA_PATH_5_4", src, 1);
	CHECK(starts_with(load_error("require('outside')\n"),
			  "myprof.lua:1: module 'outside' not found"));
	snprintf(src, sizeof src,
		 "assert(not package.path:find('%s', 1, true), package.path)\n"
		 "error('checked', 0)\n",
		 outside_dir);
	CHECK_EQ_STR(load_error(src), "checked");
	unsetenv("LUA_PATH");
	unsetenv("LUA_PATH_5_4");
	/* Dots become slashes: a name cannot climb out. */
	CHECK(starts_with(load_error("require('..outside')\n"),
			  "myprof.lua:1: module '..outside' not found"));
	/* A syntax error in a module names the module's file and line. */
	testdir_write("broken.lua", "\nlocal x = = 1\nreturn {}\n");
	CHECK(contains(load_error("require('broken')\n"), "broken.lua:2:"));
}

/* Code someone else could have written is never run: a policy or a module
 * writable by its group or by every user, or (as root, who can make such
 * a file) one that belongs to another user, is refused with one line
 * naming it and the fix; the same file made private loads. */
static void test_untrusted_code_refused(void)
{
	struct err e;
	struct policy_opts o = { 0 };
	struct policy *p;
	char want[1024];

	o.lua_dir = PROFHOST_TEST_LUA_DIR;
	testdir_write("shared.lua", "prof.schedule{ active = 2 }\n");
	CHECK_EQ_INT(chmod("shared.lua", 0666), 0);
	o.script = "shared.lua";
	CHECK(policy_load(&o, &e) == NULL);
	CHECK_EQ_STR(e.msg, "PROF_SCRIPT: 'shared.lua' is writable by every user (mode "
		     "666): profhost runs code only from files no one else can change "
		     "(chmod go-w 'shared.lua')");
	CHECK_EQ_INT(chmod("shared.lua", 0664), 0);
	CHECK(policy_load(&o, &e) == NULL);
	CHECK_EQ_STR(e.msg, "PROF_SCRIPT: 'shared.lua' is writable by its group (mode "
		     "664): profhost runs code only from files no one else can change "
		     "(chmod go-w 'shared.lua')");
	CHECK_EQ_INT(chmod("shared.lua", 0644), 0);
	p = policy_load(&o, &e);
	CHECK(p != NULL);
	policy_free(p);

	/* a module the policy requires, checked on the descriptor it loads */
	testdir_write("planted.lua", "return { active = 9 }\n");
	CHECK_EQ_INT(chmod("planted.lua", 0646), 0);
	snprintf(want, sizeof want, "myprof.lua:1: module 'planted': '%s/planted.lua' is writable by every "
		 "user (mode 646): profhost runs code only from files no one else can "
		 "change (chmod go-w '%s/planted.lua')", tmpdir, tmpdir);
	CHECK_EQ_STR(load_error("require('planted')\n"), want);

	if (geteuid() == 0) {
		CHECK_EQ_INT(chmod("planted.lua", 0644), 0);
		CHECK_EQ_INT(chown("planted.lua", 65534, 65534), 0);
		snprintf(want, sizeof want, "myprof.lua:1: module 'planted': '%s/planted.lua' belongs to uid "
			 "65534, not to you (uid 0) or root: profhost runs code only from "
			 "files no one else can change (copy it to a file of your own)",
			 tmpdir);
		CHECK_EQ_STR(load_error("require('planted')\n"), want);
		CHECK_EQ_INT(chown("shared.lua", 65534, 65534), 0);
		CHECK(policy_load(&o, &e) == NULL);
		CHECK(starts_with(e.msg, "PROF_SCRIPT: 'shared.lua' belongs to uid 65534, "
				  "not to you (uid 0) or root"));
	}
}

static void test_sets(void)
{
	struct err e;
	struct capture_log log = { 0 };
	const char *const good[] = { "schedule.active=7", "export.chrome.gzip=true",
				     "output.dir=/tmp/x", "capture.cpu_samples.hz=99",
				     NULL };
	const char *const bad[] = { "schedule.active=x", NULL };
	const char *const unknown[] = { "schedule.activ=5", NULL };
	struct policy *p;

	p = load_src("prof.schedule{ skip_first = 3, active = 2 }\n", good, &log, &e);
	CHECK(p != NULL);
	if (p) {
		const struct policy_config *c = policy_config(p);

		CHECK_EQ_INT(c->schedule.skip_first, 3);
		CHECK_EQ_INT(c->schedule.active, 7);
		CHECK(c->export.chrome && c->export.chrome_gzip);
		CHECK_EQ_STR(c->output_dir, "/tmp/x");
		CHECK_EQ_INT(c->capture.cpu_hz, 99);
	}
	policy_free(p);

	/* No prof.schedule call: --set schedule.* turns the schedule on. */
	p = load_src("\n", good, &log, &e);
	CHECK(p != NULL);
	if (p) {
		CHECK(policy_config(p)->schedule.enabled);
		CHECK_EQ_INT(policy_config(p)->schedule.active, 7);
		CHECK_EQ_INT(policy_config(p)->schedule.wait, 0);
	}
	policy_free(p);

	CHECK(load_src("\n", bad, &log, &e) == NULL);
	CHECK_EQ_STR(e.msg, "--set schedule.active=x: 'active' must be an integer >= 1, got string \"x\"");
	CHECK(load_src("\n", unknown, &log, &e) == NULL);
	CHECK_EQ_STR(e.msg, "--set schedule.activ=5: unknown key 'activ' (valid keys: active, cycles, skip_first, wait, warmup, whole)");
}

/* Runs policy_on_trace_ready on another thread. */
struct busy_run {
	struct policy *p;
	enum policy_status status;
	struct err e;
};

static void *trace_ready_thread(void *arg)
{
	struct busy_run *b = arg;

	b->status = policy_on_trace_ready(b->p, &trace_info, &b->e);
	return NULL;
}

static void test_busy(void)
{
	struct err e;
	struct capture_log log = { 0 };
	struct busy_run b = { 0 };
	pthread_t t;
	int64_t deadline;
	struct policy *p = load_src(
		"prof.on_trace_ready(function(w)\n"
		"  prof.capture_now{ steps = 1, reason = 'report' }\n"
		"  local t = os.clock() + 0.3\n"
		"  while os.clock() < t do end\n"
		"end)\n"
		"prof.on_step(function(s) prof.capture_now{ steps = 1, reason = 'step' } end)\n",
		NULL, &log, &e);

	CHECK(p != NULL);
	if (!p)
		return;
	b.p = p;
	CHECK_EQ_INT(pthread_create(&t, NULL, trace_ready_thread, &b), 0);
	deadline = clock_now_ns() + 5000000000LL;
	while (atomic_load(&log.calls) == 0 && clock_now_ns() < deadline) {
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
	}
	CHECK_EQ_INT(atomic_load(&log.calls), 1);
	/* The report holds the VM: the step boundary does not wait. */
	CHECK_EQ_INT(policy_on_step(p, &step_info, &e), POLICY_BUSY);
	CHECK_EQ_INT(policy_on_window_start(p, &window_info, &e), POLICY_BUSY);
	CHECK_EQ_INT(atomic_load(&log.calls), 1);
	pthread_join(t, NULL);
	CHECK_EQ_INT(b.status, POLICY_OK);
	CHECK_EQ_INT(policy_on_step(p, &step_info, &e), POLICY_OK);
	CHECK_EQ_INT(atomic_load(&log.calls), 2);
	CHECK_EQ_STR(log.order, "report,step");
	policy_free(p);
}

static void test_print_goes_to_log(void)
{
	struct err e;
	struct capture_log log = { 0 };
	struct policy *p;
	char buf[1024] = "";
	int saved, fd;
	ssize_t n;

	fflush(stderr);
	saved = dup(STDERR_FILENO);
	fd = open("stderr.txt", O_WRONLY | O_CREAT | O_TRUNC, 0600);
	dup2(fd, STDERR_FILENO);
	close(fd);
	p = load_src("print('hello', 42, true)\n", NULL, &log, &e);
	dup2(saved, STDERR_FILENO);
	close(saved);
	CHECK(p != NULL);
	policy_free(p);
	fd = open("stderr.txt", O_RDONLY);
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	buf[n > 0 ? n : 0] = '\0';
	CHECK_EQ_STR(buf, "profhost: myprof.lua: hello\t42\ttrue\n");
}

static void test_null_safety(void)
{
	struct err e;

	policy_free(NULL);
	CHECK(policy_config(NULL) == NULL);
	CHECK(policy_source(NULL) != NULL);
	CHECK_EQ_INT(policy_on_step(NULL, &step_info, &e), POLICY_OK);
	CHECK_EQ_INT(policy_on_window_start(NULL, &window_info, &e), POLICY_OK);
	CHECK_EQ_INT(policy_on_window_end(NULL, NULL, NULL), POLICY_OK);
	CHECK_EQ_INT(policy_on_trace_ready(NULL, &trace_info, NULL), POLICY_OK);
	CHECK(policy_load(NULL, NULL) == NULL);
}

/* ------------------------------------------------------------ main */

int main(void)
{
	testdir_make(outside_dir, sizeof outside_dir, "test_policy_outside", false);
	testdir_make(tmpdir, sizeof tmpdir, "test_policy", true);

	test_valid_file_config();
	test_defaults();
	test_builtin_default();
	test_open_errors();
	test_fifo_refused();
	test_syntax_and_validation_errors();
	test_error_positions();
	test_library_calls_budget();
	test_sandbox_denials();
	test_load_budget();
	test_hook_budget_disables_hook();
	test_report_budget();
	test_hook_errors_and_order();
	test_hook_arguments();
	test_capture_now();
	test_memory_cap();
	test_require();
	test_untrusted_code_refused();
	test_sets();
	test_busy();
	test_print_goes_to_log();
	test_null_safety();

	testdir_remove(tmpdir);
	testdir_remove(outside_dir);
	return check_done();
}

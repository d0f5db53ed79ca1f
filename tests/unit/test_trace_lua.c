/*
 * test_trace_lua — the trace object a policy's on_trace_ready hooks get
 * (src/policy/trace_lua.c through policy_on_trace_ready): fields, events
 * with filters, aggregate, phases, busy, samples, the writers and their
 * path checks, validity after the call, one failing report not stopping
 * the next, and the built-in reports through policy_report_window.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "events/trace.h"
#include "export/key_averages.h"
#include "export/summary.h"
#include "policy/policy.h"
#include "testdir.h"
#include "testtrace.h"

#ifndef PROFHOST_TEST_LUA_DIR
#error "PROFHOST_TEST_LUA_DIR must name the source tree's lua/ folder"
#endif

static char tmpdir[256];
static char windir[600];

/* testtrace_build()'s two steps of 100 ns with phases, kernels on two
 * streams, a memcpy; plus the window's fields, two samples and a thread
 * name. */
static void build(struct trace *t)
{
	testtrace_build(t);
	t->meta.rank = 2;
	t->meta.world_size = 4;
	t->meta.window = 3;
	t->meta.first_step = 0;
	t->meta.last_step = 1;
	t->meta.reason = strdup("schedule");
	testtrace_event(t, TRACE_CAT_SAMPLE, "b", 1, 1, 10, 0);
	trace_arg_str(t, "stack", "main;a;b", 8);
	testtrace_event(t, TRACE_CAT_SAMPLE, "a", 1, 1, 20, 0);
	trace_arg_str(t, "stack", "main;a", 6);
	trace_add_thread(t, 1, 1, "python");
}

static struct policy *load(const char *src, struct err *e)
{
	char path[700];
	struct policy_opts o = { 0 };

	snprintf(path, sizeof path, "%s/report.lua", tmpdir);
	testdir_write(path, src);
	o.lua_dir = PROFHOST_TEST_LUA_DIR;
	o.script = path;
	return policy_load(&o, e);
}

/* build()'s trace in *t and the policy `src` loaded to run on it, with
 * *pt pointing at the trace and the window directory; NULL (a failed
 * check, the trace freed) when the policy does not load. */
static struct policy *setup(const char *src, struct trace *t, struct policy_trace *pt)
{
	struct err e;
	struct policy *p;

	build(t);
	p = load(src, &e);
	CHECK(p != NULL);
	if (!p) {
		fprintf(stderr, "%s\n", e.msg);
		trace_free(t);
		return NULL;
	}
	memset(pt, 0, sizeof *pt);
	pt->trace = t;
	pt->dir = windir;
	return p;
}

static char *read_all(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf = calloc(1, 65536);

	if (f) {
		if (fread(buf, 1, 65535, f) == 0)
			buf[0] = '\0';
		fclose(f);
	}
	return buf;
}

static const char script[] =
	"prof.on_trace_ready(function(trace)\n"
	"  assert(trace.rank == 2 and trace.world_size == 4 and trace.window == 3)\n"
	"  assert(trace.first_step == 0 and trace.last_step == 1 and trace.reason == 'schedule')\n"
	"  assert(trace.event_count == 15 and trace.main_thread == 1)\n"
	"  assert(trace.counts.kernel == 3 and trace.drops.total == 0)\n"
	"  assert(#trace.steps == 2 and trace.steps[1].phases.data == 60)\n"
	"  assert(trace.steps[2].phases.other == 10 and trace.files[1] == 'trace.json')\n"
	"  assert(trace.steps[1].starts.backward == 80 and trace.steps[1].ends.backward == 95)\n"
	"  assert(trace.steps[2].ends.optimizer == 190 and trace.steps[2].ends.backward == nil)\n"
	"  local rows = trace:aggregate{ cat = 'kernel' }\n"
	"  assert(#rows == 2 and rows[1].name == 'gemm' and rows[1].total == 60)\n"
	"  assert(rows[1].med == 30 and rows[1].min == 20 and rows.total == 80)\n"
	"  assert(rows.columns[1] == 'name')\n"
	"  local s = trace:aggregate{ cat = 'kernel', by = 'stream', sort = 'count', limit = 1 }\n"
	"  assert(#s == 1 and s[1].tid == 7 and s.groups == 2)\n"
	"  local b = trace:aggregate{ cat = 'gpu_memcpy', sum = 'bytes' }\n"
	"  assert(b[1].total == 1000 and b[1].dur == 10)\n"
	"  local n = 0\n"
	"  for e in trace:events{ cat = 'kernel', name = '^ge', step = 1 } do\n"
	"    n = n + 1\n"
	"    assert(e.ts == 110 and e.dur == 40 and e.step == 1 and e.tid == 7)\n"
	"  end\n"
	"  assert(n == 1)\n"
	"  n = 0\n"
	"  for e in trace:events{ cat = { 'kernel', 'gpu_memcpy' }, thread = 7 } do\n"
	"    n = n + 1\n"
	"    if e.cat == 'gpu_memcpy' then assert(e.args.bytes == 1000) end\n"
	"  end\n"
	"  assert(n == 3)\n"
	"  local ph = trace:phases()\n"
	"  assert(ph[1].phase == 'data' and ph[1].total == 70 and ph.steps == 2)\n"
	"  local busy = trace:busy{ buckets = 4 }\n"
	"  assert(busy.busy == 80 and busy.span == 200 and #busy.buckets == 4)\n"
	"  assert(busy.gaps[1].ts == 0 and busy.gaps[1].dur == 60 and busy.gaps[1].step == 0)\n"
	"  assert(busy.cpu.ranges[1].name == 'next' and busy.cpu.ranges[1].time == 50)\n"
	"  local d = trace:during{ thread = 'python', from = 0, to = 60 }\n"
	"  assert(d.total == 60 and d.phases.data == 60)\n"
	"  local tree = trace:samples()\n"
	"  assert(tree.value == 2 and tree.children[1].name == 'main')\n"
	"  assert(tree.children[1].children[1].value == 2)\n"
	"  local small = trace:samples{ max_nodes = 2 }\n"
	"  assert(small.truncated and not tree.truncated and small.samples == 2)\n"
	"  assert(#small.children == 1 and #small.children[1].children == 0)\n"
	"  assert(not pcall(trace.aggregate, trace, { cat = 'kernels' }))\n"
	"  local ok, err = pcall(trace.aggregate, trace, { bogus = 1 })\n"
	"  assert(not ok and err:find(\"unknown option 'bogus'\"), err)\n"
	"  ok, err = pcall(function() return trace.nope end)\n"
	"  assert(not ok and err:find(\"no field 'nope'\"), err)\n"
	"  trace:write('plain.txt', 'hello')\n"
	"  trace:write('sub/dir/nested.txt', 'deep')\n"
	"  trace:write_table('table.txt', rows, { 'name', 'count', 'total' })\n"
	"  trace:write_table('columns.txt', rows)\n"
	"  trace:write_table('keys.txt', { { b = 1.5, a = 'xyz' }, 'not a row', { a = '7', c = true } })\n"
	"  trace:write_json('data.json', { a = 1, list = { 1, 2 } })\n"
	"  trace:write_json('rows.json', trace:aggregate{ cat = 'kernel', limit = 1 })\n"
	"  local nkeys = 0 for _ in pairs(rows) do nkeys = nkeys + 1 end\n"
	"  assert(nkeys == 2 and #trace:phases() == 5, nkeys)\n"
	"  for _, bad in ipairs({ '../up.txt', '/tmp/abs.txt', 'a/../../b', '', 'x//y', 'link/x', 'link' }) do\n"
	"    assert(not pcall(trace.write, trace, bad, 'no'), bad)\n"
	"  end\n"
	"  kept = trace\n"
	"end)\n"
	"prof.on_trace_ready(function(trace) error('second report fails') end)\n"
	"prof.on_trace_ready(function(trace) trace:write('third.txt', 'ran') end)\n"
	"prof.on_step(function(s) local x = kept.rank end)\n";

static void test_trace_object(void)
{
	struct trace t;
	struct err e;
	struct policy *p;
	static const char *const files[] = { "trace.json", NULL };
	struct policy_trace pt = { 0 };
	struct policy_step_info si = { 0 };
	char path[800], *text;

	p = setup(script, &t, &pt);
	if (!p)
		return;
	pt.files = files;
	CHECK_EQ_INT(policy_on_trace_ready(p, &pt, &e), POLICY_ERROR);
	CHECK(strstr(e.msg, "second report fails (in prof.on_trace_ready; hook disabled)") != NULL);
	snprintf(path, sizeof path, "%s/plain.txt", windir);
	text = read_all(path);
	CHECK_EQ_STR(text, "hello");
	free(text);
	snprintf(path, sizeof path, "%s/sub/dir/nested.txt", windir);
	text = read_all(path);
	CHECK_EQ_STR(text, "deep");
	free(text);
	snprintf(path, sizeof path, "%s/third.txt", windir);
	text = read_all(path);
	CHECK_EQ_STR(text, "ran");
	free(text);
	snprintf(path, sizeof path, "%s/table.txt", windir);
	text = read_all(path);
	CHECK_EQ_STR(text, "name   count  total\n"
			   "-----  -----  -----\n"
			   "gemm       2     60\n"
			   "copyk      1     20\n");
	free(text);
	/* columns: rows.columns when none are given, floats with 3 digits */
	snprintf(path, sizeof path, "%s/columns.txt", windir);
	text = read_all(path);
	CHECK_EQ_STR(text, "name   count  total  share  avg     med     min  max  std\n"
			   "-----  -----  -----  -----  ------  ------  ---  ---  ------\n"
			   "gemm       2     60  0.750  30.000  30.000   20   40  14.142\n"
			   "copyk      1     20  0.250  20.000  20.000   20   20   0.000\n");
	free(text);
	/* else the rows' keys in order; a row not a table is blank, numbers
	 * (and strings that read as numbers) right-aligned */
	snprintf(path, sizeof path, "%s/keys.txt", windir);
	text = read_all(path);
	CHECK_EQ_STR(text, "a    b      c\n"
			   "---  -----  ----\n"
			   "xyz  1.500  \n"
			   "            \n"
			   "  7         true\n");
	free(text);
	snprintf(path, sizeof path, "%s/data.json", windir);
	text = read_all(path);
	CHECK_EQ_STR(text, "{\"a\":1,\"list\":[1,2]}");
	free(text);
	/* a sequence of rows is a JSON array, not {"1": ...} */
	snprintf(path, sizeof path, "%s/rows.json", windir);
	text = read_all(path);
	CHECK(text[0] == '[' && strstr(text, "\"name\":\"gemm\"") && !strstr(text, "\"1\":"));
	free(text);
	snprintf(path, sizeof path, "%s/up.txt", tmpdir);
	CHECK(access(path, F_OK) != 0);
	CHECK(access("/tmp/abs.txt", F_OK) != 0 || 1);

	/* the object kept in a global is dead after the call */
	si.step = 5;
	CHECK_EQ_INT(policy_on_step(p, &si, &e), POLICY_ERROR);
	CHECK(strstr(e.msg, "only valid during its on_trace_ready call") != NULL);
	policy_free(p);
	trace_free(&t);
}

/* Every option error of the trace's methods names the method, the key,
 * the value given and what is valid, at the caller's file:line. Each case
 * is one line of the hook: `check(line, fn, expected)`. */
static const char option_errors[] =
	"local failures = {}\n"
	"local function check(line, fn, expected)\n"
	"  local ok, err = pcall(fn)\n"
	"  local want = 'report.lua:' .. line .. ': ' .. expected\n"
	"  if ok or err:sub(-#want) ~= want then\n"
	"    failures[#failures + 1] = ('line %d: want: %s ### got: %s'):format(line, want, tostring(err))\n"
	"  end\n"
	"end\n"
	"local CATS = 'a category name (user_annotation, cpu_op, gpu_user_annotation, kernel, gpu_memcpy, gpu_memset, '\n"
	"  .. 'cuda_runtime, cuda_driver, cuda_sync, ac2g, mark, cpu_sample, gpu_memory, overhead, python_function, cpu_instant_event) or a list of them'\n"
	"prof.on_trace_ready(function(t)\n"
	"  check(12, function() return t:aggregate{ sort = 'sum' } end, \"trace:aggregate: 'sort' must be one of \\\"total\\\", \\\"count\\\", \\\"avg\\\", \\\"min\\\", \\\"max\\\", \\\"med\\\", \\\"std\\\", \\\"key\\\", got string \\\"sum\\\"\")\n"
	"  check(13, function() return t:aggregate{ by = 3 } end, \"trace:aggregate: 'by' must be one of \\\"name\\\", \\\"cat\\\", \\\"thread\\\", \\\"stream\\\", \\\"step\\\", got 3\")\n"
	"  check(14, function() return t:aggregate{ limit = -1 } end, \"trace:aggregate: 'limit' must be an integer >= 0, got -1\")\n"
	"  check(15, function() return t:aggregate{ limit = 1.5 } end, \"trace:aggregate: 'limit' must be an integer >= 0, got 1.5\")\n"
	"  check(16, function() return t:aggregate{ self = 'yes' } end, \"trace:aggregate: 'self' must be a boolean, got string \\\"yes\\\"\")\n"
	"  check(17, function() return t:aggregate{ sum = 5 } end, \"trace:aggregate: 'sum' must be \\\"dur\\\" or the name of a numeric argument, got 5\")\n"
	"  check(18, function() return t:aggregate{ cat = 'kernels' } end, \"trace:aggregate: 'cat' must be \" .. CATS .. \", got string \\\"kernels\\\"\")\n"
	"  check(19, function() return t:aggregate{ cat = { 'kernel', 7 } } end, \"trace:aggregate: 'cat[2]' must be \" .. CATS .. \", got 7\")\n"
	"  check(20, function() return t:aggregate{ cat = {} } end, \"trace:aggregate: 'cat' must be \" .. CATS .. \", got table\")\n"
	"  check(21, function() return t:aggregate{ name = 5 } end, \"trace:aggregate: 'name' must be a Lua pattern (a string), got 5\")\n"
	"  check(22, function() return t:events{ name = '[a' } end, \"trace:events: 'name' is not a valid Lua pattern (malformed pattern (missing ']')), got string \\\"[a\\\"\")\n"
	"  check(23, function() return t:events{ thread = true } end, \"trace:events: 'thread' must be a thread id, a thread name or \\\"main\\\", got boolean true\")\n"
	"  check(24, function() return t:events{ pid = 'x' } end, \"trace:events: 'pid' must be an integer from -2147483648 to 2147483647, got string \\\"x\\\"\")\n"
	"  check(25, function() return t:events{ step = -2 } end, \"trace:events: 'step' must be an integer >= 0, got -2\")\n"
	"  check(26, function() return t:events{ to = 'a' } end, \"trace:events: 'to' must be an integer, got string \\\"a\\\"\")\n"
	"  check(27, function() return t:events{ within = 3 } end, \"trace:events: 'within' must be a list of { ts = , dur = } intervals, got 3\")\n"
	"  check(28, function() return t:events{ within = { { ts = 1, dur = -1 } } } end, \"trace:events: 'within[1]' must be an interval { ts = <integer>, dur = <integer >= 0> }, got table\")\n"
	"  check(29, function() return t:events{ bogus = 1 } end, \"trace:events: unknown option 'bogus' (valid: cat, name, step, thread, pid, from, to, within)\")\n"
	"  check(30, function() return t:events{ 5 } end, \"trace:events: unexpected key 1 (write key = value; valid: cat, name, step, thread, pid, from, to, within)\")\n"
	"  check(31, function() return t:events(5) end, \"trace:events: expected a table of options or nothing, got 5\")\n"
	"  check(32, function() return t:busy{ buckets = 200000 } end, \"trace:busy: 'buckets' must be an integer from 0 to 100000, got 200000\")\n"
	"  check(33, function() return t:busy{ gaps = -1 } end, \"trace:busy: 'gaps' must be an integer >= 0, got -1\")\n"
	"  check(34, function() return t:busy{ window = 1 } end, \"trace:busy: 'window' must be a boolean, got 1\")\n"
	"  check(35, function() return t:busy{ name = 'x' } end, \"trace:busy: unknown option 'name' (valid: cat, pid, buckets, gaps, window, thread)\")\n"
	"  check(36, function() return t:during{ from = 0 } end, \"trace:during: give 'within' (a list of intervals) or both 'from' and 'to'\")\n"
	"  check(37, function() return t:during(3) end, \"trace:during: expected a table of options (e.g. { within = trace:busy().gaps } or { from = , to = }), got 3\")\n"
	"  check(38, function() return t:during{ within = {}, limit = -1 } end, \"trace:during: 'limit' must be an integer >= 0, got -1\")\n"
	"  check(39, function() return t:samples{ max_nodes = 0 } end, \"trace:samples: 'max_nodes' must be an integer from 1 to 200000, got 0\")\n"
	"  check(40, function() return t:write(5, 'x') end, \"trace:write: 'path' must be a string (a file name in the window directory), got 5\")\n"
	"  check(41, function() return t:write('a.txt') end, \"trace:write: 'text' must be a string (the file's contents), got nothing\")\n"
	"  check(42, function() return t:write_table('t.txt', 5) end, \"trace:write_table: 'rows' must be a list of rows (tables), got 5\")\n"
	"  check(43, function() return t:write_table('t.txt', {}, 'name') end, \"trace:write_table: 'columns' must be a list of column names, got string \\\"name\\\"\")\n"
	"  check(44, function() return t.aggregate{} end, 'trace methods are called with a colon (trace:aggregate{...}, not trace.aggregate{...}): the trace object was expected first, got table')\n"
	"  check(45, function() return t:aggregate{ self = true, step = 1 } end, \"trace:aggregate: 'self = true' cannot be combined with 'sum' or a time range ('step', 'from', 'to', 'within')\")\n"
	"  check(46, function() return t[1] end, 'trace has no field 1 (fields: rank, world_size, window, first_step, last_step, reason, recorder, '\n"
	"    .. 'program, hostname, run, pid, start, end, duration, event_count, main_thread, dir, files, drops, counters, '\n"
	"    .. 'counts, steps, threads; methods: events, aggregate, key_averages, phases, busy, during, samples, write, '\n"
	"    .. 'write_table, write_json)')\n"
	"  check(50, function() return t:write_json(nil, {}) end, \"trace:write_json: 'path' must be a string (a file name in the window directory), got nothing\")\n"
	/* a name with the pattern's literal start ("ge": gemm) reaches the
	 * malformed rest: the names skipped by their start never hide it */
	"  check(51, function() return t:events{ name = '^ge[' } end, \"trace:events: 'name' is not a valid Lua pattern (malformed pattern (missing ']')), got string \\\"^ge[\\\"\")\n"
	"  check(52, function() return t:key_averages{ sort_by = 'total' } end, \"trace:key_averages: 'sort_by' must be one of \\\"self_cpu_time_total\\\", \\\"cpu_time_total\\\", \\\"cpu_time\\\", \\\"count\\\", \\\"self_cuda_time_total\\\", \\\"cuda_time_total\\\", \\\"cuda_time\\\", got string \\\"total\\\"\")\n"
	"  check(53, function() return t:key_averages{ group_by_stack_n = 129 } end, \"trace:key_averages: 'group_by_stack_n' must be an integer from 0 to 128, got 129\")\n"
	"  check(54, function() return t:key_averages{ group_by = 'cat' } end, \"trace:key_averages: 'group_by' must be one of \\\"name\\\", \\\"domain\\\", got string \\\"cat\\\"\")\n"
	"  check(55, function() return t:key_averages{ group_by_input_shape = 1 } end, \"trace:key_averages: 'group_by_input_shape' must be a boolean, got 1\")\n"
	"  check(56, function() return t:key_averages{ limit = 1 } end, \"trace:key_averages: unknown option 'limit' (valid: sort_by, row_limit, group_by, group_by_input_shape, group_by_stack_n)\")\n"
	"  check(57, function() return t:write_table('t.txt', {}) end, 'trace:write_table: no columns (give rows with keys, or a list of column names)')\n"
	"  if #t:aggregate{ name = '^gem' } ~= 1 or #t:aggregate{ name = '^xyz' } ~= 0 then failures[#failures + 1] = 'prefix' end\n"
	"  if #failures > 0 then error(table.concat(failures, ' ||| '), 0) end\n"
	"end)\n";

static void test_option_errors(void)
{
	struct trace t;
	struct err e;
	struct policy *p;
	struct policy_trace pt = { 0 };

	p = setup(option_errors, &t, &pt);
	if (!p)
		return;
	e.msg[0] = '\0';
	CHECK_EQ_INT(policy_on_trace_ready(p, &pt, &e), POLICY_OK);
	if (e.msg[0])
		fprintf(stderr, "%s\n", e.msg);
	policy_free(p);
	trace_free(&t);
}

/* ------------------------------------------------------------ phase shares */

/* The percentages on the line of `text` that starts with `prefix` (after
 * the first `section`), in order, into v (at most n); returns how many. */
static int shares_on_line(const char *text, const char *section, const char *prefix,
			  double *v, int n)
{
	const char *p = text ? strstr(text, section) : NULL;
	int k = 0;

	while (p && (p = strchr(p, '\n')) != NULL) {
		p++;
		if (strncmp(p, prefix, strlen(prefix)) == 0)
			break;
	}
	if (!p)
		return 0;
	p += strlen(p) > strlen(prefix) ? strlen(prefix) : 0;
	while (k < n && *p && *p != '\n') {
		char *end;
		double x = strtod(p, &end);

		if (end == p) {
			p++;
			continue;
		}
		while (*end == ' ')
			end++;
		if (*end == '%')
			v[k++] = x;
		p = end;
	}
	return k;
}

/* Steps of 10 ms with every phase, time in no phase, and a program's own
 * "forward" range inside the automatic one (counted once). */
static void build_phased(struct trace *t)
{
	static const int64_t MS = 1000000;
	int i;

	trace_init(t);
	t->meta.pid = 1;
	t->meta.first_step = 1;
	t->meta.last_step = 3;
	t->meta.end_ts = 30 * MS;
	for (i = 0; i < 3; i++) {
		int64_t b = i * 10 * MS;

		testtrace_step(t, (uint64_t)i + 1, b, 10 * MS);
		testtrace_event(t, TRACE_CAT_USER_ANNOTATION, "data", 1, 1, b, 1 * MS + i * MS / 2);
		testtrace_event(t, TRACE_CAT_USER_ANNOTATION, "forward", 1, 1, b + 2 * MS, 3 * MS);
		testtrace_event(t, TRACE_CAT_USER_ANNOTATION, "forward", 1, 1, b + 2 * MS + MS / 2,
				2 * MS);
		testtrace_event(t, TRACE_CAT_USER_ANNOTATION, "backward", 1, 1, b + 5 * MS,
				3 * MS + i * MS / 3);
		testtrace_event(t, TRACE_CAT_USER_ANNOTATION, "optimizer", 1, 1, b + 9 * MS, MS / 2);
	}
	trace_add_thread(t, 1, 1, "python");
}

/* summary.txt, report.txt and key_averages.txt give each phase the same
 * share (report.txt's CPU table once gave backward 54.9 % against 37.0 %
 * elsewhere: it left the steps' own time out of its 100 %). */
static void test_phase_shares_agree(void)
{
	static const char *const names[] = { "data", "forward", "backward", "optimizer" };
	struct trace t;
	struct err e;
	struct policy *p;
	struct policy_trace pt = { 0 };
	struct policy_report r = { 0 };
	struct key_avg_table tab;
	char *summary, *ka = NULL, prefix[64];
	double sum_share[6] = { 0 }, rep_share[5] = { 0 }, v[4];
	int i;

	build_phased(&t);
	summary = summary_render(&t, NULL, NULL, 0, &e);
	CHECK(summary != NULL);
	if (key_averages_build(&t, KEY_AVG_BY_NAME, KEY_AVG_SORT_SELF_CPU_TIME_TOTAL, &tab,
			       &e) == 0) {
		ka = key_averages_format(&tab, 0);
		key_averages_free(&tab);
	}
	CHECK(ka != NULL);
	p = load("-- no hooks\n", &e);
	CHECK(p != NULL);
	if (p) {
		pt.trace = &t;
		pt.dir = windir;
		CHECK_EQ_INT(policy_report_window(p, &pt, POLICY_REPORT_TEXT, false, &r, &e),
			     POLICY_OK);
		policy_free(p);
	}
	CHECK_EQ_INT(shares_on_line(summary, "Step phases", "   share", sum_share, 6), 6);
	CHECK_EQ_INT(shares_on_line(r.text, "Step time breakdown", "  share", rep_share, 5), 5);
	for (i = 0; i < 4; i++) {
		double ka_self = -1, cpu_self = -1;

		snprintf(prefix, sizeof prefix, "  %s ", names[i]);
		if (shares_on_line(r.text, "\nCPU time", prefix, v, 1) == 1)
			cpu_self = v[0];
		snprintf(prefix, sizeof prefix, "%*s", 17, names[i]);
		if (shares_on_line(ka, "Name", prefix, v, 1) == 1)
			ka_self = v[0];
		if (!(fabs(sum_share[i + 1] - rep_share[i]) < 0.1 &&
		      fabs(sum_share[i + 1] - cpu_self) < 0.1 &&
		      fabs(sum_share[i + 1] - ka_self) < 0.1))
			fprintf(stderr, "%s: summary %.2f, report %.2f, report CPU %.2f, "
				"key_averages %.2f\n", names[i], sum_share[i + 1], rep_share[i],
				cpu_self, ka_self);
		CHECK(fabs(sum_share[i + 1] - rep_share[i]) < 0.1);
		CHECK(fabs(sum_share[i + 1] - cpu_self) < 0.1);
		CHECK(fabs(sum_share[i + 1] - ka_self) < 0.1);
		CHECK(sum_share[i + 1] <= 100.0 && sum_share[i + 1] > 0);
	}
	/* backward: 3, 3.33, 3.67 ms of 30 ms */
	CHECK(fabs(sum_share[3] - 33.3) < 0.05);
	free(summary);
	free(ka);
	policy_report_free(&r);
	trace_free(&t);
}

/* A name filter over names whose ids span several bytes of its bitmap:
 * each name matched (or not) once, by its own id. */
static void test_name_filter_many_names(void)
{
	static const char src[] =
		"prof.on_trace_ready(function(trace)\n"
		"  local rows = trace:aggregate{ name = '^n[13]' }\n"
		"  local seen = {}\n"
		"  for _, r in ipairs(rows) do seen[#seen + 1] = r.name end\n"
		"  table.sort(seen)\n"
		"  assert(#rows == 22, 'rows ' .. #rows .. ': ' .. table.concat(seen, ' '))\n"
		"  local n = 0\n"
		"  for e in trace:events{ name = '7$' } do n = n + 1 end\n"
		"  assert(n == 4, 'events ' .. n)\n"
		"end)\n";
	struct trace t;
	struct err e;
	struct policy *p;
	struct policy_trace pt = { 0 };
	char name[16];
	int i, rc;

	p = setup(src, &t, &pt);
	if (!p)
		return;
	for (i = 0; i < 40; i++) { /* n0 .. n39, one event each */
		struct trace_event ev = { 0 };

		snprintf(name, sizeof name, "n%d", i);
		ev.ts = 1000 + i;
		ev.dur = 1;
		ev.pid = ev.tid = 1;
		ev.name = trace_intern(&t, name, strlen(name));
		ev.cat = TRACE_CAT_USER_ANNOTATION;
		ev.ph = TRACE_PH_COMPLETE;
		CHECK(trace_add_event(&t, &ev) != NULL);
	}
	rc = policy_on_trace_ready(p, &pt, &e);
	if (rc != POLICY_OK)
		fprintf(stderr, "%s\n", e.msg);
	CHECK_EQ_INT(rc, POLICY_OK);
	policy_free(p);
	trace_free(&t);
}

/* ------------------------------------------------------------ key_averages */

static const char key_avg_script[] =
	"prof.on_trace_ready(function(trace)\n"
	"  local rows = trace:key_averages{ group_by_input_shape = true, group_by_stack_n = 2,\n"
	"                                   sort_by = 'count', row_limit = 0 }\n"
	"  trace:write('ka.txt', rows.text)\n"
	"  local ops = {}\n"
	"  for _, row in ipairs(rows) do\n"
	"    if row.name == 'aten::addmm' then ops[#ops + 1] = row end\n"
	"  end\n"
	"  assert(#ops == 2, #ops)\n"
	"  local r = ops[1]\n"
	"  assert(r.key == 'aten::addmm' and r.count == 2 and r.self_cpu == 30 and r.cpu_total == 30)\n"
	"  assert(r.input_shapes == '[[32], [8, 16], []]', r.input_shapes)\n"
	"  assert(#r.stack == 2 and r.stack[1] == 'a.py(1): f' and r.stack[2] == 'b.py(2): g',\n"
	"         table.concat(r.stack, '|'))\n"
	"  assert(ops[2].count == 1 and #ops[2].stack == 0 and ops[2].input_shapes == '[]')\n"
	"  assert(rows.groups == #rows and rows.self_cpu_total > 0)\n"
	"  local top = trace:key_averages{ row_limit = 1 }\n"
	"  assert(#top == 1 and top.groups > 1 and top[1].input_shapes == nil and top[1].stack == nil)\n"
	"  trace:write('top.txt', top.text)\n"
	"end)\n";

/* The operators the key_averages script groups, added to build()'s trace
 * on thread 2: two addmm of one shape and stack (its deeper entries
 * differ), one with neither. */
static void add_ops(struct trace *t)
{
	static const char dims[] = "[[32],[8,16],[]]";
	static const struct {
		int64_t ts, dur;
		const char *stack;
	} ops[] = {
		{ 10, 10, "a.py(1): f;b.py(2): g;c.py(3): h" },
		{ 30, 20, "a.py(1): f;b.py(2): g;c.py(4): i" },
		{ 60, 5, NULL },
	};
	size_t i;

	for (i = 0; i < sizeof ops / sizeof ops[0]; i++) {
		testtrace_event(t, TRACE_CAT_CPU_OP, "aten::addmm", 1, 2, ops[i].ts, ops[i].dur);
		if (!ops[i].stack)
			continue;
		trace_arg_str(t, TRACE_ARG_INPUT_DIMS, dims, strlen(dims));
		t->args[t->nargs - 1].type = TRACE_ARG_RAW;
		trace_arg_str(t, TRACE_ARG_CALL_STACK, ops[i].stack, strlen(ops[i].stack));
	}
}

/* trace:key_averages: the rows' fields, and rows.text is the table
 * key_averages.txt would hold with the same options. */
static void test_key_averages(void)
{
	struct key_avg_opts o = { KEY_AVG_BY_NAME, true, 2 };
	struct key_avg_table tab;
	struct trace t;
	struct err e;
	struct policy *p;
	struct policy_trace pt = { 0 };
	char path[800], *text, *want;

	p = setup(key_avg_script, &t, &pt);
	if (!p)
		return;
	add_ops(&t);
	e.msg[0] = '\0';
	CHECK_EQ_INT(policy_on_trace_ready(p, &pt, &e), POLICY_OK);
	if (e.msg[0])
		fprintf(stderr, "%s\n", e.msg);
	CHECK(key_averages_build_with(&t, &o, KEY_AVG_SORT_COUNT, 0, &tab, &e) == 0);
	want = key_averages_format(&tab, 0);
	key_averages_free(&tab);
	snprintf(path, sizeof path, "%s/ka.txt", windir);
	text = read_all(path);
	CHECK_EQ_STR(text, want);
	CHECK(strstr(text, "Input Shapes  Source Location") != NULL);
	free(text);
	free(want);
	o.by_input_shape = false;
	o.stack_n = 0;
	CHECK(key_averages_build_with(&t, &o, KEY_AVG_SORT_SELF_CPU_TIME_TOTAL, 1, &tab, &e) == 0);
	want = key_averages_format(&tab, 1);
	key_averages_free(&tab);
	snprintf(path, sizeof path, "%s/top.txt", windir);
	text = read_all(path);
	CHECK_EQ_STR(text, want);
	free(text);
	free(want);
	policy_free(p);
	trace_free(&t);
}

static void test_builtin_reports(void)
{
	struct trace t;
	struct err e;
	struct policy *p;
	struct policy_trace pt = { 0 };
	struct policy_report r;

	p = setup("-- no hooks\n", &t, &pt);
	if (!p)
		return;
	CHECK_EQ_INT(policy_report_window(p, &pt, POLICY_REPORT_TEXT | POLICY_REPORT_JSON |
					  POLICY_REPORT_HTML, true, &r, &e), POLICY_OK);
	CHECK(r.text && strstr(r.text, "Step time breakdown"));
	CHECK(r.text && strstr(r.text, "gemm"));
	CHECK(r.json && strstr(r.json, "\"utilization\":0.4"));
	CHECK(r.html && strstr(r.html, "<!DOCTYPE html>") && !strstr(r.html, "</script><"));
	CHECK(r.findings && strstr(r.findings, "findings (window 3, rank 2)"));
	/* the data phase is 35 % of step time: the first finding */
	CHECK(r.findings && strstr(r.findings, "1. data loading took 35.0 % of step time"));
	policy_report_free(&r);
	CHECK_EQ_INT(policy_report_run(p, POLICY_REPORT_TEXT, &r, &e), POLICY_OK);
	CHECK(r.text && strstr(r.text, "1 rank, 1 window"));
	policy_report_free(&r);
	policy_free(p);
	trace_free(&t);
}

int main(void)
{
	char cmd[700];

	testdir_make(tmpdir, sizeof tmpdir, "profhost-test-tl", false);
	snprintf(windir, sizeof windir, "%s/window0_steps0-1", tmpdir);
	mkdir(windir, 0755);
	snprintf(cmd, sizeof cmd, "%s/link", windir);
	if (symlink(tmpdir, cmd) != 0)
		perror("symlink");
	test_trace_object();
	test_key_averages();
	test_option_errors();
	test_phase_shares_agree();
	test_name_filter_many_names();
	test_builtin_reports();
	testdir_remove(tmpdir);
	return check_done();
}

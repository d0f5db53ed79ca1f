/*
 * test_trace_lua — the trace object a policy's on_trace_ready hooks get
 * (src/policy/trace_lua.c through policy_on_trace_ready): fields, events
 * with filters, aggregate, phases, busy, samples, the writers and their
 * path checks, validity after the call, one failing report not stopping
 * the next, and the built-in reports through policy_report_window.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "events/trace.h"
#include "policy/policy.h"

#ifndef PROFHOST_TEST_LUA_DIR
#error "PROFHOST_TEST_LUA_DIR must name the source tree's lua/ folder"
#endif

static char tmpdir[] = "/tmp/profhost-test-tl-XXXXXX";
static char windir[600];

static void ev(struct trace *t, uint8_t cat, const char *name, int32_t pid,
	       int32_t tid, int64_t ts, int64_t dur)
{
	struct trace_event e = { 0 };

	e.ts = ts;
	e.dur = dur;
	e.pid = pid;
	e.tid = tid;
	e.name = trace_intern(t, name, strlen(name));
	e.cat = cat;
	e.ph = cat == TRACE_CAT_SAMPLE ? TRACE_PH_INSTANT : TRACE_PH_COMPLETE;
	trace_add_event(t, &e);
}

/* The trace of test_query.c: two steps of 100 ns with phases, kernels on
 * two streams, a memcpy; plus two samples. */
static void build(struct trace *t)
{
	int i;

	trace_init(t);
	t->meta.pid = 1;
	t->meta.rank = 2;
	t->meta.world_size = 4;
	t->meta.window = 3;
	t->meta.first_step = 0;
	t->meta.last_step = 1;
	t->meta.end_ts = 200;
	t->meta.reason = strdup("schedule");
	for (i = 0; i < 2; i++) {
		struct trace_step s = { (uint64_t)i, i * 100, 100, 1, 0 };
		char name[32];
		struct trace_event e = { 0 };

		snprintf(name, sizeof name, "ProfilerStep#%d", i);
		e.ts = s.ts;
		e.dur = 100;
		e.pid = e.tid = 1;
		e.name = trace_intern(t, name, strlen(name));
		e.cat = TRACE_CAT_USER_ANNOTATION;
		e.ph = TRACE_PH_COMPLETE;
		e.flags = TRACE_F_STEP;
		trace_add_event(t, &e);
		trace_add_step(t, &s);
	}
	ev(t, TRACE_CAT_USER_ANNOTATION, "data", 1, 1, 0, 60);
	ev(t, TRACE_CAT_USER_ANNOTATION, "next", 1, 1, 5, 50);
	ev(t, TRACE_CAT_USER_ANNOTATION, "forward", 1, 1, 60, 20);
	ev(t, TRACE_CAT_USER_ANNOTATION, "backward", 1, 1, 80, 15);
	ev(t, TRACE_CAT_USER_ANNOTATION, "data", 1, 1, 100, 10);
	ev(t, TRACE_CAT_USER_ANNOTATION, "forward", 1, 1, 110, 40);
	ev(t, TRACE_CAT_USER_ANNOTATION, "optimizer", 1, 1, 150, 40);
	ev(t, TRACE_CAT_KERNEL, "gemm", 0, 7, 60, 20);
	ev(t, TRACE_CAT_KERNEL, "gemm", 0, 7, 110, 40);
	ev(t, TRACE_CAT_KERNEL, "copyk", 0, 8, 70, 20);
	ev(t, TRACE_CAT_GPU_MEMCPY, "Memcpy HtoD", 0, 7, 150, 10);
	trace_arg_uint(t, "bytes", 1000);
	ev(t, TRACE_CAT_SAMPLE, "b", 1, 1, 10, 0);
	trace_arg_str(t, "stack", "main;a;b", 8);
	ev(t, TRACE_CAT_SAMPLE, "a", 1, 1, 20, 0);
	trace_arg_str(t, "stack", "main;a", 6);
	trace_add_thread(t, 1, 1, "python");
}

static struct policy *load(const char *src, struct err *e)
{
	char path[700];
	struct policy_opts o = { 0 };
	FILE *f;

	snprintf(path, sizeof path, "%s/report.lua", tmpdir);
	f = fopen(path, "w");
	fputs(src, f);
	fclose(f);
	o.lua_dir = PROFHOST_TEST_LUA_DIR;
	o.script = path;
	return policy_load(&o, e);
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
	"  assert(not pcall(trace.aggregate, trace, { cat = 'kernels' }))\n"
	"  local ok, err = pcall(trace.aggregate, trace, { bogus = 1 })\n"
	"  assert(not ok and err:find(\"unknown option 'bogus'\"), err)\n"
	"  ok, err = pcall(function() return trace.nope end)\n"
	"  assert(not ok and err:find(\"no field 'nope'\"), err)\n"
	"  trace:write('plain.txt', 'hello')\n"
	"  trace:write('sub/dir/nested.txt', 'deep')\n"
	"  trace:write_table('table.txt', rows, { 'name', 'count', 'total' })\n"
	"  trace:write_json('data.json', { a = 1, list = { 1, 2 } })\n"
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

	build(&t);
	p = load(script, &e);
	CHECK(p != NULL);
	if (!p) {
		fprintf(stderr, "%s\n", e.msg);
		trace_free(&t);
		return;
	}
	pt.trace = &t;
	pt.dir = windir;
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
	snprintf(path, sizeof path, "%s/data.json", windir);
	text = read_all(path);
	CHECK_EQ_STR(text, "{\"a\":1,\"list\":[1,2]}");
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

static void test_builtin_reports(void)
{
	struct trace t;
	struct err e;
	struct policy *p;
	struct policy_trace pt = { 0 };
	struct policy_report r;

	build(&t);
	p = load("-- no hooks\n", &e);
	CHECK(p != NULL);
	if (!p) {
		trace_free(&t);
		return;
	}
	pt.trace = &t;
	pt.dir = windir;
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

	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	snprintf(windir, sizeof windir, "%s/window0_steps0-1", tmpdir);
	mkdir(windir, 0755);
	snprintf(cmd, sizeof cmd, "%s/link", windir);
	if (symlink(tmpdir, cmd) != 0)
		perror("symlink");
	test_trace_object();
	test_builtin_reports();
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", tmpdir);
	return check_done();
}

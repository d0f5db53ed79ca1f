/*
 * test_summary — the window summary: step statistics on known durations
 * (odd and even counts, partial steps left out), the top ranges in order,
 * drop lines only for nonzero counters, the files, its length, and names
 * holding invalid UTF-8 or control characters.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "export/export.h"
#include "export/summary.h"
#include "export/textbuf.h"
#include "util/fsutil.h"

#define MS 1000000LL

static void add_step(struct trace *t, uint64_t n, int64_t ts, int64_t dur, int partial)
{
	struct trace_step s = { 0 };

	s.step = n;
	s.ts = ts;
	s.dur = dur;
	s.tid = 1;
	s.partial = partial;
	CHECK(trace_add_step(t, &s) == 0);
}

static void add_range(struct trace *t, const char *name, int64_t ts, int64_t dur)
{
	struct trace_event e = { 0 };

	e.ts = ts;
	e.dur = dur;
	e.pid = 7;
	e.tid = 1;
	e.name = trace_intern(t, name, strlen(name));
	e.cat = TRACE_CAT_USER_ANNOTATION;
	e.ph = TRACE_PH_COMPLETE;
	CHECK(trace_add_event(t, &e) != NULL);
}

/* A trace with steps 10..15 of 5, 1, 3, 2, 4 ms and a partial 100 ms. */
static void build(struct trace *t)
{
	static const int64_t ms[] = { 5, 1, 3, 2, 4 };
	int64_t ts = 0;
	size_t i;

	CHECK(trace_init(t) == 0);
	for (i = 0; i < 5; i++) {
		add_step(t, 10 + i, ts, ms[i] * MS, 0);
		ts += ms[i] * MS;
	}
	add_step(t, 15, ts, 100 * MS, 1);
	t->meta.window = 2;
	t->meta.first_step = 10;
	t->meta.last_step = 15;
	t->meta.rank = 1;
	t->meta.world_size = 4;
	t->meta.pid = 4242;
	t->meta.start_ts = 0;
	t->meta.end_ts = 100 * MS;
	t->meta.reason = strdup("slow step");
	t->meta.program = strdup("train");
	t->meta.hostname = strdup("node1");
	t->meta.run = strdup("train-1");
	t->counters.events = 812;
}

static void test_step_stats(void)
{
	struct trace t;
	struct summary_steps st;
	struct err e;

	/* odd count: 1 2 3 4 5; p90 at rank 3.6: 4 + 0.6 */
	build(&t);
	CHECK(summary_step_stats(&t, &st, &e) == 0);
	CHECK_EQ_INT(st.captured, 6);
	CHECK_EQ_INT(st.partial, 1);
	CHECK_EQ_INT(st.n, 5);
	CHECK_EQ_INT(st.min, 1 * MS);
	CHECK_EQ_INT(st.median, 3 * MS);
	CHECK_EQ_INT(st.p90, 4600000);
	CHECK_EQ_INT(st.max, 5 * MS);
	trace_free(&t);

	/* even count: 1 2 3 4; median at rank 1.5, p90 at rank 2.7 */
	CHECK(trace_init(&t) == 0);
	add_step(&t, 1, 0, 4 * MS, 0);
	add_step(&t, 2, 4 * MS, 1 * MS, 0);
	add_step(&t, 3, 5 * MS, 50 * MS, 1);
	add_step(&t, 4, 55 * MS, 3 * MS, 0);
	add_step(&t, 5, 58 * MS, 2 * MS, 0);
	CHECK(summary_step_stats(&t, &st, &e) == 0);
	CHECK_EQ_INT(st.n, 4);
	CHECK_EQ_INT(st.partial, 1);
	CHECK_EQ_INT(st.min, 1 * MS);
	CHECK_EQ_INT(st.median, 2500000);
	CHECK_EQ_INT(st.p90, 3700000);
	CHECK_EQ_INT(st.max, 4 * MS);
	trace_free(&t);

	/* one step: every statistic is it */
	CHECK(trace_init(&t) == 0);
	add_step(&t, 7, 0, 9 * MS, 0);
	CHECK(summary_step_stats(&t, &st, &e) == 0);
	CHECK(st.n == 1 && st.min == 9 * MS && st.median == 9 * MS && st.p90 == 9 * MS &&
	      st.max == 9 * MS);
	trace_free(&t);
}

static void test_render_steps(void)
{
	struct trace t;
	struct err e;
	char *s;
	const char *head = "profhost summary: window 2, steps 10-15 (slow step), rank 1 of 4\n"
			   "train (pid 4242) on node1, run train-1\n"
			   "Window: 100.000ms, 812 events written\n\n";

	build(&t);
	s = summary_render(&t, NULL, NULL, 0, &e);
	CHECK(s != NULL);
	CHECK(strncmp(s, head, strlen(head)) == 0);
	CHECK(strstr(s, "Steps: 6 captured (10-15); 1 partial (15, cut short by exit), "
			"not in the step times\n") != NULL);
	CHECK(strstr(s, "Step time: min 1.000ms  median 3.000ms  p90 4.600ms  max 5.000ms"
			"  (5 steps)\n") != NULL);
	free(s);
	trace_free(&t);

	/* runs of steps are compressed; only partial steps: no statistics */
	CHECK(trace_init(&t) == 0);
	add_step(&t, 3, 0, 1 * MS, 0);
	add_step(&t, 4, 1 * MS, 1 * MS, 0);
	add_step(&t, 8, 5 * MS, 1 * MS, 0);
	s = summary_render(&t, NULL, NULL, 0, &e);
	CHECK(strstr(s, "Steps: 3 captured (3-4, 8)\n") != NULL);
	free(s);
	trace_free(&t);
	CHECK(trace_init(&t) == 0);
	add_step(&t, 3, 0, 1 * MS, 1);
	s = summary_render(&t, NULL, NULL, 0, &e);
	CHECK(strstr(s, "Step time: no complete step\n") != NULL);
	CHECK(strstr(s, "1 partial (3, cut short by exit)") != NULL);
	free(s);
	trace_free(&t);
	/* the hang watchdog's dump: the stalled step, still running */
	CHECK(trace_init(&t) == 0);
	add_step(&t, 3, 0, 1 * MS, 1);
	t.meta.recorder = true;
	t.meta.reason = strdup("hang 0");
	s = summary_render(&t, NULL, NULL, 0, &e);
	CHECK(strstr(s, "Steps: 1 captured (3); 1 partial (3, still running: stalled), "
			"not in the step times\n") != NULL);
	free(s);
	trace_free(&t);
}

static void test_top_ranges(void)
{
	struct trace t;
	struct err e;
	char *s, name[32];
	const char *prev, *p;
	int i;

	build(&t);
	/* r0 .. r11, one after another, r<i> lasting (i + 1) ms: r11 first */
	for (i = 0; i < 12; i++) {
		snprintf(name, sizeof name, "r%d", i);
		add_range(&t, name, i * 20 * MS, (i + 1) * MS);
	}
	add_range(&t, "r11", 300 * MS, 13 * MS); /* r11: 2 calls, 25 ms */
	s = summary_render(&t, NULL, NULL, 0, &e);
	CHECK(s != NULL);
	CHECK(strstr(s, "Top ranges by self CPU time:\n  Name     Calls      Self CPU"
			"     CPU total  % of window\n") != NULL);
	CHECK(strstr(s, "\n  r11          2      25.000ms      25.000ms       25.00%\n") != NULL);
	/* in order of self time, ten of them: r11, r10, ..., r2 */
	prev = strstr(s, "Top ranges");
	for (i = 11; i >= 2; i--) {
		snprintf(name, sizeof name, "\n  r%d ", i);
		p = strstr(s, name);
		CHECK(p != NULL && p > prev);
		if (p)
			prev = p;
	}
	CHECK(strstr(s, "\n  r1 ") == NULL);
	CHECK(strstr(s, "\n  r0 ") == NULL);
	free(s);
	trace_free(&t);
}

/* Whether s is well-formed UTF-8 (an independent check: shortest forms,
 * no surrogates, nothing above U+10FFFF). */
static int valid_utf8(const char *str)
{
	const unsigned char *s = (const unsigned char *)str;

	while (*s) {
		unsigned c = *s, need, cp, min;

		if (c < 0x80) {
			s++;
			continue;
		}
		if (c >= 0xC2 && c <= 0xDF) { need = 1; cp = c & 0x1F; min = 0x80; }
		else if (c >= 0xE0 && c <= 0xEF) { need = 2; cp = c & 0x0F; min = 0x800; }
		else if (c >= 0xF0 && c <= 0xF4) { need = 3; cp = c & 0x07; min = 0x10000; }
		else return 0;
		for (s++; need > 0; need--, s++) {
			if ((*s & 0xC0) != 0x80)
				return 0;
			cp = cp << 6 | (*s & 0x3F);
		}
		if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
			return 0;
	}
	return 1;
}

/* Code points of s[0..n) (valid UTF-8): the columns a terminal gives it. */
static size_t cols_of(const char *s, size_t n)
{
	size_t i, c = 0;

	for (i = 0; i < n; i++)
		c += ((unsigned char)s[i] & 0xC0) != 0x80;
	return c;
}

static void test_invalid_utf8_names(void)
{
	struct trace t;
	struct err e;
	char *s, *p;
	size_t header_cols = 0, rows = 0;

	build(&t);
	free(t.meta.program);
	t.meta.program = strdup("tr\xffin");
	/* a lone continuation byte, a truncated sequence, a control, an
	 * overlong '/' and a valid "é" */
	add_range(&t, "a\x80\x81" "b", 0, 3 * MS);
	add_range(&t, "c\xe2\x82" "d\te", 0, 2 * MS);
	add_range(&t, "\xc0\xaf" "caf\xc3\xa9", 0, 1 * MS);
	add_range(&t, "plain", 0, 4 * MS);
	s = summary_render(&t, NULL, NULL, 0, &e);
	CHECK(s != NULL);
	if (!s) {
		trace_free(&t);
		return;
	}
	CHECK(valid_utf8(s));
	CHECK(strstr(s, "\ntr\xef\xbf\xbdin (pid 4242)") != NULL);
	CHECK(strstr(s, "\n  a\xef\xbf\xbd\xef\xbf\xbd" "b ") != NULL);
	CHECK(strstr(s, "\n  c\xef\xbf\xbd" "d?e ") != NULL);
	CHECK(strstr(s, "\n  \xef\xbf\xbd\xef\xbf\xbd" "caf\xc3\xa9 ") != NULL);
	/* every row of the table ends in the same column as its header */
	p = strstr(s, "Top ranges by self CPU time:\n");
	CHECK(p != NULL);
	for (p = p ? strchr(p, '\n') + 1 : NULL; p && *p && *p != '\n';) {
		char *end = strchr(p, '\n');
		size_t cols = cols_of(p, end ? (size_t)(end - p) : strlen(p));

		if (!header_cols)
			header_cols = cols;
		else
			CHECK_EQ_INT(cols, header_cols);
		rows++;
		p = end ? end + 1 : NULL;
	}
	CHECK_EQ_INT(rows, 5); /* the header and four ranges */
	free(s);
	trace_free(&t);
}

static void test_drops(void)
{
	struct trace t;
	struct err e;
	char *s;

	build(&t);
	s = summary_render(&t, NULL, NULL, 0, &e);
	CHECK(strstr(s, "Drops: none\n") != NULL);
	CHECK(strstr(s, "buffer_mb") == NULL);
	free(s);

	t.counters.dropped_buffer = 12;
	t.counters.unbalanced_pops = 3;
	s = summary_render(&t, NULL, NULL, 0, &e);
	CHECK(strstr(s, "Drops: none") == NULL);
	CHECK(strstr(s, "\n  12 events dropped: the event buffers were full; "
			"raise prof.capture{buffer_mb=...}\n") != NULL);
	CHECK(strstr(s, "\n  3 range pops had no open range") != NULL);
	CHECK(strstr(s, "previous window") == NULL);
	CHECK(strstr(s, "CUPTI") == NULL);
	CHECK(strstr(s, "window edge") == NULL);
	CHECK(strstr(s, "outgrown") == NULL);
	free(s);

	/* of the 12, 5 the trace had no room for: two lines, each with its fix */
	t.counters.dropped_memory = 5;
	s = summary_render(&t, NULL, NULL, 0, &e);
	CHECK(strstr(s, "\n  7 events dropped: the event buffers were full; "
			"raise prof.capture{buffer_mb=...}\n") != NULL);
	CHECK(strstr(s, "\n  5 events dropped: the trace built from the event buffers "
			"would have outgrown prof.capture{buffer_mb=...} (a name per range, "
			"or many marks?); raise buffer_mb or give ranges names that repeat\n")
	      != NULL);
	free(s);
	t.counters.dropped_buffer = t.counters.dropped_memory = 5; /* all of them */
	s = summary_render(&t, NULL, NULL, 0, &e);
	CHECK(strstr(s, "buffers were full") == NULL);
	CHECK(strstr(s, "\n  5 events dropped: the trace built") != NULL);
	free(s);

	t.counters.dropped_buffer = t.counters.dropped_memory = 0;
	t.counters.unbalanced_pops = 0;
	t.counters.dropped_noslot = 1;
	t.counters.gpu_dropped = 2;
	t.counters.clipped = 4;
	s = summary_render(&t, NULL, NULL, 0, &e);
	CHECK(strstr(s, "\n  1 events dropped: the previous window") != NULL);
	CHECK(strstr(s, "\n  2 GPU records dropped by CUPTI; raise prof.capture{buffer_mb=...}\n")
	      != NULL);
	CHECK(strstr(s, "\n  4 ranges cut at a window edge") != NULL);
	CHECK(strstr(s, "buffers were full") == NULL);
	free(s);
	trace_free(&t);
}

static size_t count_lines(const char *s)
{
	size_t n = 0;

	for (; *s; s++)
		n += *s == '\n';
	return n;
}

static void test_files_and_length(void)
{
	struct trace t;
	struct err e;
	char dir[] = "/tmp/test_summary.XXXXXX", path[256], *s, *got, name[32];
	const char *files[3];
	size_t len;
	int i;

	CHECK(mkdtemp(dir) != NULL);
	build(&t);
	for (i = 0; i < 30; i++) {
		snprintf(name, sizeof name, "range%d", i);
		add_range(&t, name, i * 3 * MS, 2 * MS);
	}
	t.counters.dropped_buffer = t.counters.dropped_noslot = t.counters.gpu_dropped = 1;
	t.counters.unbalanced_pops = t.counters.clipped = 1;
	files[0] = "/x/w/trace.json";
	files[1] = "/x/tensorboard/node1_4242.1.pt.trace.json.gz";
	files[2] = "/x/w/summary.txt";
	s = summary_render(&t, "/x/w", files, 3, &e);
	CHECK(strstr(s, "Directory: /x/w\nFiles: trace.json summary.txt\n"
			"  /x/tensorboard/node1_4242.1.pt.trace.json.gz\n") != NULL);
	/* everything at once still fits a terminal */
	CHECK(count_lines(s) <= 40);
	snprintf(path, sizeof path, "%s/summary.txt", dir);
	CHECK(summary_write(path, s, &e) == 0);
	got = fsutil_read(path, 1 << 20, &len, &e);
	CHECK_EQ_STR(got, s);
	free(got);
	unlink(path);
	snprintf(path, sizeof path, "%s/no/summary.txt", dir);
	CHECK(summary_write(path, s, &e) == -1);
	CHECK(strstr(e.msg, "/no/") != NULL);
	free(s);
	rmdir(dir);
	trace_free(&t);
}

/* export_window with the tables on: key_averages.txt, then summary.txt
 * listing every file; the summary text comes back in the result. */
static void test_export_window(void)
{
	struct trace t;
	struct err e;
	struct export_opts o = { 0 };
	struct export_result res;
	char dir[] = "/tmp/test_summary_export.XXXXXX", path[4200], *got;
	size_t len, i;

	CHECK(mkdtemp(dir) != NULL);
	build(&t);
	add_range(&t, "outer", 0, 5 * MS);
	add_range(&t, "inner", 1 * MS, 3 * MS);
	o.run_dir = dir;
	o.chrome = true;
	o.key_averages = true;
	o.sort_by = "count";
	o.row_limit = 1;
	o.summary = true;
	CHECK(export_window(&t, &o, &res, &e) == 0);
	CHECK_EQ_INT(res.nfiles, 3);
	snprintf(path, sizeof path, "%s/rank1/window2_steps10-15", dir);
	CHECK_EQ_STR(res.dir, path);
	snprintf(path, sizeof path, "%s/key_averages.txt", res.dir);
	CHECK_EQ_STR(res.files[1], path);
	got = fsutil_read(path, 1 << 20, &len, &e);
	CHECK(got && strstr(got, "# of Calls") && strstr(got, " outer  ") && !strstr(got, "inner"));
	CHECK(got && strstr(got, "Self CPU time total: 5.000ms\n"));
	free(got);
	snprintf(path, sizeof path, "%s/summary.txt", res.dir);
	CHECK_EQ_STR(res.files[2], path);
	got = fsutil_read(path, 1 << 20, &len, &e);
	CHECK(res.summary != NULL);
	CHECK_EQ_STR(got, res.summary);
	CHECK(got && strstr(got, "Files: trace.json key_averages.txt summary.txt\n"));
	free(got);
	for (i = 0; i < res.nfiles; i++)
		unlink(res.files[i]);
	rmdir(res.dir);
	export_result_free(&res);
	CHECK(res.summary == NULL);

	/* a bad sort key or group is an error before anything is written */
	o.sort_by = "flops";
	CHECK(export_window(&t, &o, &res, &e) == -1);
	CHECK(strstr(e.msg, "flops") != NULL);
	CHECK_EQ_INT(res.nfiles, 0);
	CHECK(access(path, F_OK) != 0);
	export_result_free(&res);
	o.sort_by = NULL;
	o.group_by = "file";
	CHECK(export_window(&t, &o, &res, &e) == -1);
	CHECK(strstr(e.msg, "group_by 'file'") != NULL);
	export_result_free(&res);
	snprintf(path, sizeof path, "%s/rank1", dir);
	rmdir(path);
	rmdir(dir);
	trace_free(&t);
}

/* export_window with every output this window has on: the files in the
 * order of export.c's table (trace.json.gz, its TensorBoard copy,
 * capture.phb, key_averages.txt, summary.txt last), the copy the same
 * bytes; a bad stacks metric fails before anything is written even with
 * stacks off. */
static void test_export_outputs_in_order(void)
{
	static const char *const names[] = { "trace.json.gz", NULL, "capture.phb",
					     "key_averages.txt", "summary.txt" };
	struct trace t;
	struct err e;
	struct export_opts o = { 0 };
	struct export_result res;
	char dir[] = "/tmp/test_summary_outputs.XXXXXX", path[4200], tb[4200];
	char *a, *b;
	size_t i, alen, blen;

	CHECK(mkdtemp(dir) != NULL);
	build(&t);
	add_range(&t, "outer", 0, 5 * MS);
	o.run_dir = dir;
	o.stacks_metric = "flops";
	CHECK(export_window(&t, &o, &res, &e) == -1);
	CHECK(strstr(e.msg, "flops") != NULL);
	CHECK_EQ_INT(res.nfiles, 0);
	export_result_free(&res);
	snprintf(path, sizeof path, "%s/rank1", dir);
	CHECK(access(path, F_OK) != 0);

	o.stacks_metric = NULL;
	o.chrome = o.chrome_gzip = o.tensorboard = o.raw = o.key_averages = true;
	o.stacks = o.memory_timeline = o.summary = true; /* nothing of theirs */
	CHECK(export_window(&t, &o, &res, &e) == 0);
	CHECK_EQ_INT(res.nfiles, 5);
	snprintf(tb, sizeof tb, "%s/tensorboard/window2_steps10-15/node1_4242.100.pt.trace.json.gz",
		 dir);
	for (i = 0; i < 5 && i < res.nfiles; i++) {
		if (names[i])
			snprintf(path, sizeof path, "%s/%s", res.dir, names[i]);
		else
			snprintf(path, sizeof path, "%s", tb);
		CHECK_EQ_STR(res.files[i], path);
	}
	snprintf(path, sizeof path, "%s/trace.json.gz", res.dir);
	a = fsutil_read(path, 1 << 20, &alen, &e);
	b = fsutil_read(tb, 1 << 20, &blen, &e);
	CHECK(a && b && alen == blen && memcmp(a, b, alen) == 0);
	free(a);
	free(b);
	for (i = 0; i < res.nfiles; i++)
		unlink(res.files[i]);
	rmdir(res.dir);
	export_result_free(&res);
	snprintf(path, sizeof path, "%s/tensorboard/window2_steps10-15", dir);
	rmdir(path);
	snprintf(path, sizeof path, "%s/tensorboard", dir);
	rmdir(path);
	snprintf(path, sizeof path, "%s/rank1", dir);
	rmdir(path);
	CHECK(rmdir(dir) == 0);
	trace_free(&t);
}

/* Names from the program in HTML (the hang report's page): markup and
 * bytes that are not UTF-8 cannot break the page. */
static void test_put_html(void)
{
	struct textbuf tb;
	char *text;

	textbuf_init(&tb);
	textbuf_put_html(&tb, "void k<float>(a&b, \"c\", 'd')\n\xff");
	text = textbuf_take(&tb);
	CHECK_EQ_STR(text, "void k&lt;float&gt;(a&amp;b, &quot;c&quot;, &#39;d&#39;)?\xEF\xBF\xBD");
	free(text);
	textbuf_init(&tb);
	textbuf_put_html(&tb, "");
	text = textbuf_take(&tb);
	CHECK(!text || !*text);
	free(text);
}

int main(void)
{
	test_put_html();
	test_step_stats();
	test_render_steps();
	test_top_ranges();
	test_invalid_utf8_names();
	test_drops();
	test_files_and_length();
	test_export_window();
	test_export_outputs_in_order();
	return check_done();
}

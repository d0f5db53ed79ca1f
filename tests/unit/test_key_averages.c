/*
 * test_key_averages — the operator table: self/total/count/avg from known
 * nesting on two threads, ProfilerStep* grouping, grouping by domain, every
 * sort key, row_limit, the rows folded past the table's size, name
 * truncation, torch's exact text, time formats; memory (profile_memory's
 * "[memory]" events) attributed to the events holding them, its columns,
 * sort keys and byte formats; rows by input shape and by call stack, with
 * memory too; the row's size, and out of memory.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "export/key_averages.h"
#include "util/fsutil.h"

#define MS 1000000LL
#define US 1000LL

static void add(struct trace *t, int tid, const char *name, enum trace_cat cat,
		int64_t ts, int64_t dur, const char *domain)
{
	struct trace_event e = { 0 };

	e.ts = ts;
	e.dur = dur;
	e.pid = 100;
	e.tid = tid;
	e.name = trace_intern(t, name, strlen(name));
	e.cat = (uint8_t)cat;
	e.ph = TRACE_PH_COMPLETE;
	if (strncmp(name, "ProfilerStep#", 13) == 0)
		e.flags = TRACE_F_STEP;
	CHECK(trace_add_event(t, &e) != NULL);
	if (domain)
		CHECK(trace_arg_str(t, "domain", domain, strlen(domain)) == 0);
}

/* Adds a "[memory]" event (profile_memory): `bytes` allocated (negative:
 * freed) on thread `tid` at `ts`, on the CPU (cuda false: c10's Device
 * Type 0, Device Id -1) or GPU 0. */
static void add_mem(struct trace *t, int tid, int64_t ts, int64_t bytes, bool cuda)
{
	struct trace_event e = { 0 };

	e.ts = ts;
	e.pid = 100;
	e.tid = tid;
	e.name = trace_intern(t, "[memory]", 8);
	e.cat = TRACE_CAT_CPU_INSTANT;
	e.ph = TRACE_PH_INSTANT;
	CHECK(trace_add_event(t, &e) != NULL);
	CHECK(trace_arg_int(t, "Total Reserved", 0) == 0);
	CHECK(trace_arg_int(t, "Total Allocated", 1 << 20) == 0);
	CHECK(trace_arg_int(t, "Bytes", bytes) == 0);
	CHECK(trace_arg_uint(t, "Addr", 0x1000) == 0);
	CHECK(trace_arg_int(t, "Device Id", cuda ? 0 : -1) == 0);
	CHECK(trace_arg_int(t, "Device Type", cuda ? 1 : 0) == 0);
}

static const struct key_avg_row *find(const struct key_avg_table *tab, const char *key)
{
	size_t i;

	for (i = 0; i < tab->nrows; i++)
		if (strcmp(tab->rows[i].key, key) == 0)
			return &tab->rows[i];
	return NULL;
}

static void check_row(const struct key_avg_table *tab, const char *key, uint64_t count,
		      int64_t self, int64_t total)
{
	const struct key_avg_row *r = find(tab, key);

	CHECK(r != NULL);
	if (!r) {
		fprintf(stderr, "  missing row %s\n", key);
		return;
	}
	CHECK_EQ_INT(r->count, count);
	CHECK_EQ_INT(r->self_cpu_ns, self);
	CHECK_EQ_INT(r->cpu_total_ns, total);
}

/* The rows' keys in table order, joined by ",". */
static const char *order(const struct key_avg_table *tab)
{
	static char buf[1024];
	size_t i;

	buf[0] = '\0';
	for (i = 0; i < tab->nrows; i++) {
		if (i)
			strcat(buf, ",");
		strcat(buf, tab->rows[i].key);
	}
	return buf;
}

/*
 * Thread 1:  ProfilerStep#1 [0,10)  > outer [1,6) > inner [2,5) > launch [3,3.5)
 *                                   > outer [6,9) (starts where the last ended)
 *                                   > zero [6,6) and zero [9,9) (zero-length)
 *            ProfilerStep#2 [10,20) > outer [12,15)
 * Thread 2:  outer [0,4) > inner [1,2); left [5,9) and right [7,12) overlap.
 * Plus events the table must not count: a kernel and an instant "outer".
 * Times in ms. Added out of order: the table sorts for itself.
 */
static void build_two_threads(struct trace *t)
{
	struct trace_event mark = { 0 };

	CHECK(trace_init(t) == 0);
	add(t, 2, "right", TRACE_CAT_USER_ANNOTATION, 7 * MS, 5 * MS, NULL);
	add(t, 1, "ProfilerStep#2", TRACE_CAT_USER_ANNOTATION, 10 * MS, 10 * MS, NULL);
	add(t, 1, "outer", TRACE_CAT_USER_ANNOTATION, 12 * MS, 3 * MS, NULL);
	add(t, 1, "ProfilerStep#1", TRACE_CAT_USER_ANNOTATION, 0, 10 * MS, NULL);
	add(t, 1, "outer", TRACE_CAT_USER_ANNOTATION, 1 * MS, 5 * MS, NULL);
	add(t, 1, "inner", TRACE_CAT_CPU_OP, 2 * MS, 3 * MS, NULL);
	add(t, 1, "cudaLaunchKernel", TRACE_CAT_CUDA_RUNTIME, 3 * MS, 500 * US, NULL);
	add(t, 1, "zero", TRACE_CAT_CPU_OP, 6 * MS, 0, NULL);
	add(t, 1, "outer", TRACE_CAT_USER_ANNOTATION, 6 * MS, 3 * MS, NULL);
	add(t, 1, "zero", TRACE_CAT_CPU_OP, 9 * MS, 0, NULL);
	add(t, 2, "outer", TRACE_CAT_USER_ANNOTATION, 0, 4 * MS, NULL);
	add(t, 2, "inner", TRACE_CAT_CPU_OP, 1 * MS, 1 * MS, NULL);
	add(t, 2, "left", TRACE_CAT_USER_ANNOTATION, 5 * MS, 4 * MS, NULL);
	add(t, 7, "outer", TRACE_CAT_KERNEL, 0, 50 * MS, NULL);
	mark.ts = 2 * MS;
	mark.pid = 100;
	mark.tid = 1;
	mark.name = trace_intern(t, "outer", 5);
	mark.cat = TRACE_CAT_MARK;
	mark.ph = TRACE_PH_INSTANT;
	CHECK(trace_add_event(t, &mark) != NULL);
}

/* The same table whether the table orders the events itself or reads a
 * trace in nesting order (trace_sort) as it lies. */
static void check_self_total_count(bool nested)
{
	struct trace t;
	struct key_avg_table tab;
	struct err e;

	build_two_threads(&t);
	if (nested) {
		trace_sort(&t);
		CHECK(t.nested);
	}
	CHECK(key_averages_build(&t, KEY_AVG_BY_NAME, KEY_AVG_SORT_SELF_CPU_TIME_TOTAL,
				 &tab, &e) == 0);
	CHECK_EQ_INT(tab.nrows, 7);
	/* steps: 10 - 5 - 3 = 2 ms and 10 - 3 = 7 ms of their own */
	check_row(&tab, "ProfilerStep*", 2, 9 * MS, 20 * MS);
	/* outer: (5-3) + 3 + 3 on thread 1, 4 - 1 on thread 2 */
	check_row(&tab, "outer", 4, 11 * MS, 15 * MS);
	check_row(&tab, "inner", 2, 3 * MS + 500 * US, 4 * MS);
	check_row(&tab, "cudaLaunchKernel", 1, 500 * US, 500 * US);
	check_row(&tab, "zero", 2, 0, 0);
	/* partial overlap: right takes over at 7 ms; nothing negative */
	check_row(&tab, "left", 1, 2 * MS, 4 * MS);
	check_row(&tab, "right", 1, 5 * MS, 5 * MS);
	CHECK(find(&tab, "ProfilerStep#1") == NULL);
	/* the 100 %: time covered on thread 1 (20 ms) and thread 2 (4 + 7) */
	CHECK_EQ_INT(tab.self_cpu_sum_ns, 31 * MS);
	CHECK_EQ_STR(order(&tab), "outer,ProfilerStep*,right,inner,left,cudaLaunchKernel,zero");
	CHECK(!key_averages_has_cuda(&tab));
	key_averages_free(&tab);
	trace_free(&t);
}

static void test_self_total_count(void)
{
	check_self_total_count(false);
	check_self_total_count(true);
}

static void test_sort_keys(void)
{
	struct trace t;
	struct key_avg_table tab;
	struct err e;
	enum key_avg_sort s;
	static const struct {
		const char *name, *order;
	} cpu[] = {
		{ "self_cpu_time_total",
		  "outer,ProfilerStep*,right,inner,left,cudaLaunchKernel,zero" },
		/* inner and left tie at 4 ms: inner started first */
		{ "cpu_time_total", "ProfilerStep*,outer,right,inner,left,cudaLaunchKernel,zero" },
		{ "cpu_time", "ProfilerStep*,right,left,outer,inner,cudaLaunchKernel,zero" },
		{ "count", "outer,ProfilerStep*,inner,zero,cudaLaunchKernel,left,right" },
		/* no CUDA time at all: first-seen order, then the key */
		{ "self_cuda_time_total",
		  "ProfilerStep*,outer,inner,cudaLaunchKernel,left,zero,right" },
	};
	size_t i;

	build_two_threads(&t);
	for (i = 0; i < sizeof cpu / sizeof cpu[0]; i++) {
		CHECK(key_averages_parse_sort(cpu[i].name, &s, &e) == 0);
		CHECK(key_averages_build(&t, KEY_AVG_BY_NAME, s, &tab, &e) == 0);
		CHECK_EQ_STR(order(&tab), cpu[i].order);
		key_averages_free(&tab);
	}

	/* The CUDA keys, on CUDA times given by hand (GPU attribution fills
	 * them later). cuda_time is the average: inner 5/2 > outer 8/4. */
	CHECK(key_averages_build(&t, KEY_AVG_BY_NAME, KEY_AVG_SORT_COUNT, &tab, &e) == 0);
	((struct key_avg_row *)find(&tab, "inner"))->self_cuda_ns = 5 * MS;
	((struct key_avg_row *)find(&tab, "inner"))->cuda_total_ns = 5 * MS;
	((struct key_avg_row *)find(&tab, "outer"))->self_cuda_ns = 3 * MS;
	((struct key_avg_row *)find(&tab, "outer"))->cuda_total_ns = 8 * MS;
	((struct key_avg_row *)find(&tab, "left"))->cuda_total_ns = 1 * MS;
	CHECK(key_averages_parse_sort("self_cuda_time_total", &s, &e) == 0);
	key_averages_sort(&tab, s);
	CHECK_EQ_STR(order(&tab), "inner,outer,ProfilerStep*,cudaLaunchKernel,left,zero,right");
	CHECK(key_averages_parse_sort("cuda_time_total", &s, &e) == 0);
	key_averages_sort(&tab, s);
	CHECK_EQ_STR(order(&tab), "outer,inner,left,ProfilerStep*,cudaLaunchKernel,zero,right");
	CHECK(key_averages_parse_sort("cuda_time", &s, &e) == 0);
	key_averages_sort(&tab, s);
	CHECK_EQ_STR(order(&tab), "inner,outer,left,ProfilerStep*,cudaLaunchKernel,zero,right");
	CHECK(key_averages_has_cuda(&tab));
	key_averages_free(&tab);

	CHECK(key_averages_parse_sort("device_time", &s, &e) == 0);
	CHECK_EQ_INT(s, KEY_AVG_SORT_CUDA_TIME);
	CHECK(key_averages_parse_sort("self_device_time_total", &s, &e) == 0);
	CHECK_EQ_INT(s, KEY_AVG_SORT_SELF_CUDA_TIME_TOTAL);
	CHECK(key_averages_parse_sort("device_time_total", &s, &e) == 0);
	CHECK_EQ_INT(s, KEY_AVG_SORT_CUDA_TIME_TOTAL);
	CHECK(key_averages_parse_sort("self_cpu_memory", &s, &e) == -1);
	CHECK(strstr(e.msg, "'self_cpu_memory'") != NULL);
	CHECK(strstr(e.msg, "cpu_time_total") != NULL);
	CHECK(strstr(e.msg, "self_cpu_memory_usage") != NULL);
	CHECK(key_averages_parse_sort(NULL, &s, &e) == -1);
	CHECK(key_averages_build(&t, KEY_AVG_BY_NAME, (enum key_avg_sort)99, &tab, &e) == -1);
	CHECK_EQ_INT(tab.nrows, 0);
	trace_free(&t);
}

static void test_group_by_domain(void)
{
	struct trace t;
	struct key_avg_table tab;
	struct err e;
	enum key_avg_group g;

	CHECK(trace_init(&t) == 0);
	/* d1 [0,10) holds d2 [2,5); d1 again [20,23); no domain [30,34) */
	add(&t, 1, "a", TRACE_CAT_USER_ANNOTATION, 0, 10 * MS, "d1");
	add(&t, 1, "b", TRACE_CAT_USER_ANNOTATION, 2 * MS, 3 * MS, "d2");
	add(&t, 1, "c", TRACE_CAT_USER_ANNOTATION, 20 * MS, 3 * MS, "d1");
	add(&t, 1, "ProfilerStep#3", TRACE_CAT_USER_ANNOTATION, 30 * MS, 4 * MS, NULL);
	CHECK(key_averages_parse_group("domain", &g, &e) == 0);
	CHECK(key_averages_build(&t, g, KEY_AVG_SORT_SELF_CPU_TIME_TOTAL, &tab, &e) == 0);
	CHECK_EQ_INT(tab.nrows, 3);
	check_row(&tab, "d1", 2, 10 * MS, 13 * MS);
	check_row(&tab, "d2", 1, 3 * MS, 3 * MS);
	check_row(&tab, "(none)", 1, 4 * MS, 4 * MS);
	CHECK_EQ_STR(order(&tab), "d1,(none),d2");
	key_averages_free(&tab);

	CHECK(key_averages_parse_group("name", &g, &e) == 0);
	CHECK_EQ_INT(g, KEY_AVG_BY_NAME);
	CHECK(key_averages_parse_group("thread", &g, &e) == -1);
	CHECK(strstr(e.msg, "thread") != NULL);
	trace_free(&t);
}

/* Many distinct names, each twice: the name map grows as rows come (it is
 * not sized by the events), and every name still gets one row of two
 * calls with its own times. */
static void test_many_names(void)
{
	struct trace t;
	struct key_avg_table tab;
	struct err e;
	char name[32];
	const struct key_avg_row *r;
	int i, k;

	CHECK(trace_init(&t) == 0);
	for (k = 0; k < 2; k++)
		for (i = 0; i < 5000; i++) {
			snprintf(name, sizeof name, "op%d", i);
			add(&t, 1, name, TRACE_CAT_CPU_OP,
			    (int64_t)(k * 5000 + i) * 10 * US, (i % 9 + 1) * US, NULL);
		}
	CHECK(key_averages_build(&t, KEY_AVG_BY_NAME, KEY_AVG_SORT_SELF_CPU_TIME_TOTAL,
				 &tab, &e) == 0);
	CHECK_EQ_INT(tab.nrows, 5000);
	check_row(&tab, "op0", 2, 2 * US, 2 * US);
	check_row(&tab, "op4999", 2, 10 * US, 10 * US); /* 4999 % 9 + 1 = 5 us */
	r = find(&tab, "op1234");
	CHECK(r && r->count == 2 && r->cpu_total_ns == 2 * 2 * US);
	/* most self time first (9 us), ties in first-seen order */
	CHECK(strcmp(tab.rows[0].key, "op8") == 0 && strcmp(tab.rows[1].key, "op17") == 0);
	key_averages_free(&tab);
	trace_free(&t);
}

/* Counts the lines of `s` and the rows between the 2nd and 3rd dashed lines. */
static size_t data_rows(const char *s)
{
	size_t dashes = 0, rows = 0;

	while (*s) {
		const char *nl = strchr(s, '\n');

		if (*s == '-')
			dashes++;
		else if (dashes == 2)
			rows++;
		s = nl ? nl + 1 : s + strlen(s);
	}
	return rows;
}

static void test_row_limit(void)
{
	struct trace t;
	struct key_avg_table tab;
	struct err e;
	char *s;

	build_two_threads(&t);
	CHECK(key_averages_build(&t, KEY_AVG_BY_NAME, KEY_AVG_SORT_SELF_CPU_TIME_TOTAL,
				 &tab, &e) == 0);
	s = key_averages_format(&tab, 2);
	CHECK_EQ_INT(data_rows(s), 2);
	CHECK(strstr(s, " outer  ") && strstr(s, "ProfilerStep*") && !strstr(s, "right"));
	/* percentages stay against every row's self time, shown or not */
	CHECK(strstr(s, "Self CPU time total: 31.000ms\n") != NULL);
	free(s);
	s = key_averages_format(&tab, 0);
	CHECK_EQ_INT(data_rows(s), 7);
	free(s);
	s = key_averages_format(&tab, 100);
	CHECK_EQ_INT(data_rows(s), 7);
	free(s);
	key_averages_free(&tab);
	trace_free(&t);

	/* an empty table is an empty text */
	CHECK(trace_init(&t) == 0);
	CHECK(key_averages_build(&t, KEY_AVG_BY_NAME, KEY_AVG_SORT_COUNT, &tab, &e) == 0);
	s = key_averages_format(&tab, 0);
	CHECK_EQ_STR(s, "");
	free(s);
	trace_free(&t);
}

/*
 * torch's layout, worked out by hand from _build_table's rules: columns
 * right-aligned ('{: >N}') and each followed by two spaces, the name column
 * max(len(key)) + 4 wide (here len("ProfilerStep*") + 4 = 17), the others
 * 12; percentages against the sum of self CPU (1.5 ms).
 */
static void test_exact_text(void)
{
	struct trace t;
	struct key_avg_table tab;
	struct err e;
	char *s;
	const char *want =
		"-----------------  ------------  ------------  ------------  ------------  ------------  ------------  \n"
		"             Name    Self CPU %      Self CPU   CPU total %     CPU total  CPU time avg    # of Calls  \n"
		"-----------------  ------------  ------------  ------------  ------------  ------------  ------------  \n"
		"              fwd        66.67%       1.000ms        66.67%       1.000ms       1.000ms             1  \n"
		"    ProfilerStep*        33.33%     500.000us       100.00%       1.500ms       1.500ms             1  \n"
		"-----------------  ------------  ------------  ------------  ------------  ------------  ------------  \n"
		"Self CPU time total: 1.500ms\n";

	CHECK(trace_init(&t) == 0);
	add(&t, 1, "ProfilerStep#5", TRACE_CAT_USER_ANNOTATION, 0, 1500 * US, NULL);
	add(&t, 1, "fwd", TRACE_CAT_CPU_OP, 250 * US, 1 * MS, NULL);
	CHECK(key_averages_build(&t, KEY_AVG_BY_NAME, KEY_AVG_SORT_SELF_CPU_TIME_TOTAL,
				 &tab, &e) == 0);
	s = key_averages_format(&tab, 50);
	CHECK_EQ_STR(s, want);
	free(s);

	/* With CUDA time the four CUDA columns appear after CPU time avg and
	 * the footer gains its total (fwd: self 2 ms, total 3 ms, one call). */
	tab.rows[0].self_cuda_ns = 2 * MS;
	tab.rows[0].cuda_total_ns = 3 * MS;
	tab.self_cuda_sum_ns = 2 * MS;
	s = key_averages_format(&tab, 0);
	CHECK(strstr(s, "  CPU time avg     Self CUDA   Self CUDA %    CUDA total  CUDA time avg"
			"    # of Calls  \n") != NULL);
	CHECK(strstr(s, "       1.000ms       2.000ms       100.00%       3.000ms       3.000ms"
			"             1  \n") != NULL);
	CHECK(strstr(s, "Self CPU time total: 1.500ms\nSelf CUDA time total: 2.000ms\n") != NULL);
	free(s);
	key_averages_free(&tab);
	trace_free(&t);
}

/* Name column: at most 55 wide; a name of 52 code points or more is cut
 * to 52 and "..." (torch cuts at max_name_column_width - 3). */
static void test_name_truncation(void)
{
	struct trace t;
	struct key_avg_table tab;
	struct err e;
	char *s, name60[61], name52[53], name51[52], want[128];
	const char *line;

	memset(name60, 'x', 60);
	name60[60] = '\0';
	memset(name52, 'y', 52);
	name52[52] = '\0';
	memset(name51, 'z', 51);
	name51[51] = '\0';
	CHECK(trace_init(&t) == 0);
	add(&t, 1, name60, TRACE_CAT_CPU_OP, 0, 3 * MS, NULL);
	add(&t, 1, name52, TRACE_CAT_CPU_OP, 10 * MS, 2 * MS, NULL);
	add(&t, 1, name51, TRACE_CAT_CPU_OP, 20 * MS, 1 * MS, NULL);
	add(&t, 1, "tab\there", TRACE_CAT_CPU_OP, 30 * MS, 1 * US, NULL);
	CHECK(key_averages_build(&t, KEY_AVG_BY_NAME, KEY_AVG_SORT_SELF_CPU_TIME_TOTAL,
				 &tab, &e) == 0);
	s = key_averages_format(&tab, 0);
	/* the dashed line's first field is 55 wide */
	CHECK(strncmp(s, "-------------------------------------------------------  ---", 60) == 0);
	CHECK(s[55] == ' ' && s[54] == '-');
	/* 60 x: first 52, then "..." */
	snprintf(want, sizeof want, "\n%.52s...  ", name60);
	CHECK(strstr(s, want) != NULL);
	snprintf(want, sizeof want, "\n%.52s...  ", name52);
	CHECK(strstr(s, want) != NULL);
	snprintf(want, sizeof want, "\n    %s  ", name51);
	CHECK(strstr(s, want) != NULL);
	line = strstr(s, "tab?here");
	CHECK(line != NULL);
	CHECK(strchr(s, '\t') == NULL);
	free(s);
	key_averages_free(&tab);
	trace_free(&t);

	/* UTF-8 names are measured in code points: "é" is one column */
	CHECK(trace_init(&t) == 0);
	add(&t, 1, "caf\xc3\xa9", TRACE_CAT_CPU_OP, 0, 1 * MS, NULL);
	CHECK(key_averages_build(&t, KEY_AVG_BY_NAME, KEY_AVG_SORT_COUNT, &tab, &e) == 0);
	s = key_averages_format(&tab, 0);
	CHECK(strncmp(s, "--------  ", 10) == 0);         /* 4 + 4 wide */
	CHECK(strstr(s, "\n    caf\xc3\xa9  ") != NULL);
	free(s);
	key_averages_free(&tab);
	trace_free(&t);

	/* invalid UTF-8: each ill-formed part shows as one U+FFFD and counts
	 * one column (two lone continuation bytes: 2 + 4 wide) */
	CHECK(trace_init(&t) == 0);
	add(&t, 1, "\x80\xbf", TRACE_CAT_CPU_OP, 0, 1 * MS, NULL);
	CHECK(key_averages_build(&t, KEY_AVG_BY_NAME, KEY_AVG_SORT_COUNT, &tab, &e) == 0);
	s = key_averages_format(&tab, 0);
	CHECK(strncmp(s, "------  ", 8) == 0);
	CHECK(strstr(s, "\n    \xef\xbf\xbd\xef\xbf\xbd  ") != NULL);
	CHECK(strstr(s, "\x80") == NULL);
	free(s);
	key_averages_free(&tab);
	trace_free(&t);
}

static void test_time_formats(void)
{
	char b[32];

	CHECK_EQ_STR(key_averages_format_time(0, b), "0.000us");
	CHECK_EQ_STR(key_averages_format_time(1, b), "0.001us");
	CHECK_EQ_STR(key_averages_format_time(1500, b), "1.500us");
	CHECK_EQ_STR(key_averages_format_time(999999, b), "999.999us");
	CHECK_EQ_STR(key_averages_format_time(1000000, b), "1.000ms");
	CHECK_EQ_STR(key_averages_format_time(12345678, b), "12.346ms");
	/* 999999.999 us is still ms, and rounds up to 1000.000 */
	CHECK_EQ_STR(key_averages_format_time(999999999, b), "1000.000ms");
	CHECK_EQ_STR(key_averages_format_time(1000000000, b), "1.000s");
	CHECK_EQ_STR(key_averages_format_time(75500000000LL, b), "75.500s");
	CHECK_EQ_STR(key_averages_format_share(1, 3, b), "33.33%");
	CHECK_EQ_STR(key_averages_format_share(2, 3, b), "66.67%");
	CHECK_EQ_STR(key_averages_format_share(3, 3, b), "100.00%");
	CHECK_EQ_STR(key_averages_format_share(5, 2, b), "250.00%");
	CHECK_EQ_STR(key_averages_format_share(0, 0, b), "NaN");
}

static void test_write_file(void)
{
	struct trace t;
	struct key_avg_table tab;
	struct err e;
	char dir[] = "/tmp/test_key_averages.XXXXXX", path[256], *want, *got;
	size_t len;

	CHECK(mkdtemp(dir) != NULL);
	build_two_threads(&t);
	CHECK(key_averages_build(&t, KEY_AVG_BY_NAME, KEY_AVG_SORT_SELF_CPU_TIME_TOTAL,
				 &tab, &e) == 0);
	snprintf(path, sizeof path, "%s/key_averages.txt", dir);
	CHECK(key_averages_write(&tab, 3, path, &e) == 0);
	want = key_averages_format(&tab, 3);
	got = fsutil_read(path, 1 << 20, &len, &e);
	CHECK(got != NULL);
	CHECK_EQ_STR(got, want);
	free(want);
	free(got);
	unlink(path);
	snprintf(path, sizeof path, "%s/missing/key_averages.txt", dir);
	CHECK(key_averages_write(&tab, 3, path, &e) == -1);
	CHECK(strstr(e.msg, "missing") != NULL);
	rmdir(dir);
	key_averages_free(&tab);
	trace_free(&t);
}

/* A kernel of `dur` ns for the launch with correlation id `corr`. */
static void add_kernel(struct trace *t, uint64_t corr, int64_t ts, int64_t dur)
{
	struct trace_event e = { 0 };

	e.ts = ts;
	e.dur = dur;
	e.id = corr;
	e.pid = 0;
	e.tid = 7;
	e.name = trace_intern(t, "kern", 4);
	e.cat = TRACE_CAT_KERNEL;
	e.ph = TRACE_PH_COMPLETE;
	CHECK(trace_add_event(t, &e) != NULL);
}

/* Whether row i of table ta and row j of tb have the same key and sums. */
static int same_row(const struct key_avg_table *ta, size_t i, const struct key_avg_table *tb,
		    size_t j)
{
	const struct key_avg_row *a = &ta->rows[i], *b = &tb->rows[j];
	struct key_avg_mem ma = key_averages_row_mem(ta, i), mb = key_averages_row_mem(tb, j);

	return strcmp(a->key, b->key) == 0 && a->count == b->count &&
	       a->self_cpu_ns == b->self_cpu_ns && a->cpu_total_ns == b->cpu_total_ns &&
	       a->self_cuda_ns == b->self_cuda_ns && a->cuda_total_ns == b->cuda_total_ns &&
	       a->first_ts == b->first_ts && a->flops == b->flops &&
	       ma.mem[0] == mb.mem[0] && ma.mem[1] == mb.mem[1] &&
	       ma.self_mem[0] == mb.self_mem[0] && ma.self_mem[1] == mb.self_mem[1];
}

/* Three threads of 300 ranges over 120 names (domains "a", "b" or none),
 * a step every 50, each range holding a launch with a kernel and a child
 * operator, an allocation in the child and a free in the range, and a
 * free between ranges. */
static void build_launches(struct trace *t)
{
	char name[32];
	uint64_t corr = 1;
	int tid, i;

	CHECK(trace_init(t) == 0);
	srand(7);
	for (tid = 1; tid <= 3; tid++) {
		int64_t ts = 0;

		for (i = 0; i < 300; i++) {
			int64_t d = (rand() % 50 + 1) * US;
			const char *dom = i % 3 ? (i % 3 == 1 ? "a" : "b") : NULL;

			snprintf(name, sizeof name, "op%d", rand() % 120);
			if (i % 50 == 0) {
				snprintf(name, sizeof name, "ProfilerStep#%d", i / 50);
				d = 400 * US;
			}
			add(t, tid, name, TRACE_CAT_USER_ANNOTATION, ts, d, dom);
			/* a nested launch with GPU work, and a child range */
			add(t, tid, "cudaLaunchKernel", TRACE_CAT_CUDA_RUNTIME, ts + d / 4, d / 8,
			    dom);
			t->ev[t->nev - 1].id = corr;
			add_kernel(t, corr++, ts + d / 2, (rand() % 9 + 1) * US);
			snprintf(name, sizeof name, "child%d", rand() % 40);
			add(t, tid, name, TRACE_CAT_CPU_OP, ts + d / 2, d / 3, NULL);
			add_mem(t, tid, ts + d / 2 + 1, rand() % 4096, i % 7 == 0);
			add_mem(t, tid, ts + d - 1, -(rand() % 1024), false);
			add_mem(t, tid, ts + d + 1, -1, false);
			ts += i % 50 == 0 ? 10 * US : d + (rand() % 3) * US;
		}
	}
}

/*
 * More names than a table holds: the capped build (several passes over the
 * events, one per part of the names) keeps exactly the uncapped table's
 * first rows, and the rest is one row "(N other names)" with their sums,
 * shown when every row is asked for; a table built for the rows a caller
 * shows renders as the whole table does.
 */
static void test_folded_rows(void)
{
	struct trace t;
	struct key_avg_table full, capped;
	struct key_avg_row rest;
	struct err e;
	char name[32], *text;
	int g, s;
	size_t k;

	build_launches(&t);
	for (g = 0; g <= 1; g++)
		for (s = 0; s <= KEY_AVG_SORT_SELF_CUDA_MEM; s++) {
			size_t max = g ? 2 : 7;

			CHECK(key_averages_build(&t, (enum key_avg_group)g, (enum key_avg_sort)s,
						 &full, &e) == 0);
			CHECK(key_averages_build_max(&t, (enum key_avg_group)g,
						     (enum key_avg_sort)s, max, max, &capped,
						     &e) == 0);
			CHECK(full.nfolded == 0);
			CHECK(full.nrows > max);
			CHECK_EQ_INT(capped.nrows, max);
			CHECK_EQ_INT(capped.nfolded, full.nrows - max);
			for (k = 0; k < max && k < capped.nrows; k++)
				CHECK(same_row(&capped, k, &full, k));
			memset(&rest, 0, sizeof rest);
			for (k = max; k < full.nrows; k++) {
				rest.count += full.rows[k].count;
				rest.self_cpu_ns += full.rows[k].self_cpu_ns;
				rest.cpu_total_ns += full.rows[k].cpu_total_ns;
				rest.self_cuda_ns += full.rows[k].self_cuda_ns;
				rest.cuda_total_ns += full.rows[k].cuda_total_ns;
			}
			CHECK_EQ_INT(capped.folded.count, rest.count);
			CHECK_EQ_INT(capped.folded.self_cpu_ns, rest.self_cpu_ns);
			CHECK_EQ_INT(capped.folded.cpu_total_ns, rest.cpu_total_ns);
			CHECK_EQ_INT(capped.folded.self_cuda_ns, rest.self_cuda_ns);
			CHECK_EQ_INT(capped.folded.cuda_total_ns, rest.cuda_total_ns);
			CHECK_EQ_INT(capped.self_cpu_sum_ns, full.self_cpu_sum_ns);
			CHECK_EQ_INT(capped.self_cuda_sum_ns, full.self_cuda_sum_ns);
			CHECK(full.self_cuda_sum_ns > 0);
			if (g == 0 && s == 0) {
				snprintf(name, sizeof name, "(%zu other names)", full.nrows - max);
				text = key_averages_format(&capped, 0);
				CHECK(text && strstr(text, name) != NULL);
				free(text);
				text = key_averages_format(&capped, max - 1);
				CHECK(text && strstr(text, "other names") == NULL);
				free(text);
			}
			{ /* a caller showing 1 row: the same text as from
			     the whole table */
				struct key_avg_table top;
				char *want;

				CHECK(key_averages_build_max(&t, (enum key_avg_group)g,
							     (enum key_avg_sort)s, max, 1,
							     &top, &e) == 0);
				CHECK_EQ_INT(top.nrows, 1);
				text = key_averages_format(&top, 1);
				want = key_averages_format(&full, 1);
				CHECK(text && want && strcmp(text, want) == 0);
				free(text);
				free(want);
				key_averages_free(&top);
			}
			if (g == 1) {
				text = key_averages_format(&capped, 0);
				CHECK(text && strstr(text, "(1 other domains)") != NULL);
				free(text);
			}
			key_averages_free(&full);
			key_averages_free(&capped);
		}
	trace_free(&t);
}

/* GPU time and self times of a trace in nesting order, read as it lies,
 * are those of the same events added in another order, in every grouping
 * and sort and with the names in parts. */
static void test_nested_trace(void)
{
	struct trace u, v;
	struct key_avg_table a, b;
	struct err e;
	int g, s;
	size_t k, max;

	build_launches(&u);
	build_launches(&v);
	trace_sort(&v);
	CHECK(!u.nested && v.nested);
	CHECK(trace_event_cmp(&u.ev[1], &u.ev[2]) > 0); /* u is not in order */
	for (g = 0; g <= 1; g++)
		for (s = 0; s <= KEY_AVG_SORT_SELF_CUDA_MEM; s++)
			for (max = 4; max <= 1000; max += 996) {
				CHECK(key_averages_build_max(&u, (enum key_avg_group)g,
							     (enum key_avg_sort)s, max, max, &a,
							     &e) == 0);
				CHECK(key_averages_build_max(&v, (enum key_avg_group)g,
							     (enum key_avg_sort)s, max, max, &b,
							     &e) == 0);
				CHECK(a.nrows > 1 && a.self_cuda_sum_ns > 0);
				CHECK_EQ_INT(a.nrows, b.nrows);
				CHECK_EQ_INT(a.nfolded, b.nfolded);
				CHECK_EQ_INT(a.self_cpu_sum_ns, b.self_cpu_sum_ns);
				CHECK_EQ_INT(a.self_cuda_sum_ns, b.self_cuda_sum_ns);
				for (k = 0; k < a.nrows && k < b.nrows; k++) {
					if (!same_row(&a, k, &b, k))
						fprintf(stderr, "  group %d sort %d max %zu: row %zu (%s) differs\n",
							g, s, max, k, a.rows[k].key);
					CHECK(same_row(&a, k, &b, k));
				}
				CHECK_EQ_INT(a.folded.count, b.folded.count);
				CHECK_EQ_INT(a.folded.self_cpu_ns, b.folded.self_cpu_ns);
				CHECK_EQ_INT(a.folded.self_cuda_ns, b.folded.self_cuda_ns);
				key_averages_free(&a);
				key_averages_free(&b);
			}
	trace_free(&u);
	trace_free(&v);
}

static void check_mem(const struct key_avg_table *tab, const char *key, int64_t mem,
		      int64_t self_mem, int64_t cuda_mem, int64_t self_cuda_mem)
{
	const struct key_avg_row *r = find(tab, key);
	struct key_avg_mem m;

	CHECK(r != NULL);
	if (!r) {
		fprintf(stderr, "  missing row %s\n", key);
		return;
	}
	m = key_averages_row_mem(tab, (size_t)(r - tab->rows));
	CHECK_EQ_INT(m.mem[KEY_AVG_CPU], mem);
	CHECK_EQ_INT(m.self_mem[KEY_AVG_CPU], self_mem);
	CHECK_EQ_INT(m.mem[KEY_AVG_CUDA], cuda_mem);
	CHECK_EQ_INT(m.self_mem[KEY_AVG_CUDA], self_cuda_mem);
}

/*
 * build_two_threads, with allocations and frees (bytes; times in ms):
 *   thread 1: 100 in inner [2,5) at 2, 50 in cudaLaunchKernel [3,3.5) at
 *             3.2 and its free at 3.5 (the launch ends then: inner's),
 *             30 in outer [1,6) at 1.5, 7 freed at 6 (outer
 *             [1,6) ended, outer [6,9) begins: the new one's), 64 on GPU
 *             0 in outer [12,15) at 13, 5 in ProfilerStep#2 at 11
 *   thread 2: 8 in inner [1,2) at 1, 1000 freed at 4.5 (outer [0,4)
 *             ended: no event holds it) and 24 allocated there at 4.6
 */
static void build_memory(struct trace *t)
{
	build_two_threads(t);
	add_mem(t, 1, 2 * MS, 100, false);
	add_mem(t, 1, 3 * MS + 200 * US, 50, false);
	add_mem(t, 1, 3 * MS + 500 * US, -50, false);
	add_mem(t, 1, 1 * MS + 500 * US, 30, false);
	add_mem(t, 1, 6 * MS, -7, false);
	add_mem(t, 1, 13 * MS, 64, true);
	add_mem(t, 1, 11 * MS, 5, false);
	add_mem(t, 2, 1 * MS, 8, false);
	add_mem(t, 2, 4 * MS + 500 * US, -1000, false);
	add_mem(t, 2, 4 * MS + 600 * US, 24, false);
}

/* Each allocation and free goes to the innermost event open on its
 * thread: Self CPU Mem is what an event held as the innermost, CPU Mem
 * adds what its children held (torch's self_cpu_memory_usage and
 * cpu_memory_usage), a GPU's goes to the CUDA side, and what no event
 * holds is the row "[memory]" (count: its events). The same whether the
 * table orders the events itself or reads a trace in nesting order, and
 * in every pass of a table split by names. */
static void test_memory_attribution(void)
{
	struct trace t;
	struct key_avg_table tab, capped;
	struct err e;
	int64_t rest[2][2];
	size_t k;
	int nested, d;

	for (nested = 0; nested <= 1; nested++) {
		build_memory(&t);
		if (nested)
			trace_sort(&t);
		CHECK(key_averages_build(&t, KEY_AVG_BY_NAME, KEY_AVG_SORT_SELF_CPU_TIME_TOTAL,
					 &tab, &e) == 0);
		CHECK(tab.memory);
		/* cudaLaunchKernel: 50 (the free at its end is inner's);
		 * inner: 100 - 50 on thread 1, 8 on thread 2 */
		check_mem(&tab, "cudaLaunchKernel", 50, 50, 0, 0);
		check_mem(&tab, "inner", 108, 58, 0, 0);
		/* outer: 30 + 100 (inner's) [1,6); -7 [6,9); 64 on the GPU
		 * [12,15); thread 2's: 8 (inner's) */
		check_mem(&tab, "outer", 131, 23, 64, 64);
		/* steps: everything of thread 1, and 5 of their own */
		check_mem(&tab, "ProfilerStep*", 128, 5, 64, 0);
		check_mem(&tab, "[memory]", -976, -976, 0, 0);
		CHECK_EQ_INT(find(&tab, "[memory]")->count, 2);
		CHECK_EQ_INT(find(&tab, "[memory]")->self_cpu_ns, 0);
		check_mem(&tab, "left", 0, 0, 0, 0);
		/* the times are those of the trace without memory */
		check_row(&tab, "outer", 4, 11 * MS, 15 * MS);
		check_row(&tab, "ProfilerStep*", 2, 9 * MS, 20 * MS);
		CHECK_EQ_INT(tab.self_cpu_sum_ns, 31 * MS);
		CHECK(key_averages_has_cuda_mem(&tab));

		/* split by names, two rows a pass: the rows kept and the
		 * folded sums are the whole table's */
		CHECK(key_averages_build_max(&t, KEY_AVG_BY_NAME, KEY_AVG_SORT_CPU_MEM, 2, 2,
					     &capped, &e) == 0);
		key_averages_sort(&tab, KEY_AVG_SORT_CPU_MEM);
		CHECK(capped.memory && capped.row_mem && tab.row_mem);
		CHECK_EQ_INT(capped.nrows, 2);
		CHECK_EQ_INT(capped.nfolded, tab.nrows - 2);
		memset(rest, 0, sizeof rest);
		for (k = 0; k < tab.nrows; k++)
			for (d = 0; d < 2; d++) {
				if (k < 2) {
					CHECK_EQ_STR(capped.rows[k].key, tab.rows[k].key);
					CHECK_EQ_INT(capped.row_mem[k].mem[d], tab.row_mem[k].mem[d]);
					CHECK_EQ_INT(capped.row_mem[k].self_mem[d],
						     tab.row_mem[k].self_mem[d]);
					continue;
				}
				rest[0][d] += tab.row_mem[k].mem[d];
				rest[1][d] += tab.row_mem[k].self_mem[d];
			}
		for (d = 0; d < 2; d++) {
			CHECK_EQ_INT(capped.folded_mem.mem[d], rest[0][d]);
			CHECK_EQ_INT(capped.folded_mem.self_mem[d], rest[1][d]);
		}
		key_averages_free(&capped);
		key_averages_free(&tab);
		trace_free(&t);
	}

	/* Without "[memory]" events: no memory columns */
	build_two_threads(&t);
	CHECK(key_averages_build(&t, KEY_AVG_BY_NAME, KEY_AVG_SORT_SELF_CPU_TIME_TOTAL, &tab,
				 &e) == 0);
	CHECK(!tab.memory);
	CHECK(tab.row_mem == NULL); /* no memory held for memory sums */
	CHECK(!key_averages_has_cuda_mem(&tab));
	key_averages_free(&tab);
	trace_free(&t);
}

/* torch's memory sort keys (and 2.x's device_* names), descending. */
static void test_memory_sort(void)
{
	struct trace t;
	struct key_avg_table tab;
	struct err e;
	enum key_avg_sort s;
	static const struct {
		const char *name, *order;
		enum key_avg_sort sort;
	} keys[] = {
		{ "self_cpu_memory_usage",
		  "inner,cudaLaunchKernel,outer,ProfilerStep*,left,zero,right,[memory]",
		  KEY_AVG_SORT_SELF_CPU_MEM },
		{ "cpu_memory_usage",
		  "outer,ProfilerStep*,inner,cudaLaunchKernel,left,zero,right,[memory]",
		  KEY_AVG_SORT_CPU_MEM },
		/* ties: first seen ("[memory]" at 4.5 ms), then the key */
		{ "cuda_memory_usage",
		  "ProfilerStep*,outer,inner,cudaLaunchKernel,[memory],left,zero,right",
		  KEY_AVG_SORT_CUDA_MEM },
		{ "self_cuda_memory_usage",
		  "outer,ProfilerStep*,inner,cudaLaunchKernel,[memory],left,zero,right",
		  KEY_AVG_SORT_SELF_CUDA_MEM },
		{ "device_memory_usage", NULL, KEY_AVG_SORT_CUDA_MEM },
		{ "self_device_memory_usage", NULL, KEY_AVG_SORT_SELF_CUDA_MEM },
	};
	size_t i;

	build_memory(&t);
	for (i = 0; i < sizeof keys / sizeof keys[0]; i++) {
		CHECK(key_averages_parse_sort(keys[i].name, &s, &e) == 0);
		CHECK_EQ_INT(s, keys[i].sort);
		if (!keys[i].order)
			continue;
		CHECK(key_averages_build(&t, KEY_AVG_BY_NAME, s, &tab, &e) == 0);
		CHECK_EQ_STR(order(&tab), keys[i].order);
		key_averages_free(&tab);
	}
	trace_free(&t);
}

/* torch's _format_memory, and the columns torch's table has with
 * profile_memory: CPU Mem and Self CPU Mem after the CUDA times, CUDA Mem
 * and Self CUDA Mem when a row has Self CUDA Mem above 0. */
static void test_memory_text(void)
{
	struct trace t;
	struct key_avg_table tab;
	struct err e;
	char buf[32], *s;
	const char *want =
		"-----------------  ------------  ------------  ------------  ------------  ------------  ------------  ------------  ------------  \n"
		"             Name    Self CPU %      Self CPU   CPU total %     CPU total  CPU time avg       CPU Mem  Self CPU Mem    # of Calls  \n"
		"-----------------  ------------  ------------  ------------  ------------  ------------  ------------  ------------  ------------  \n"
		"              fwd        66.67%       1.000ms        66.67%       1.000ms       1.000ms     192.00 Kb     192.00 Kb             1  \n"
		"    ProfilerStep*        33.33%     500.000us       100.00%       1.500ms       1.500ms      63.99 Kb    -128.01 Kb             1  \n"
		"         [memory]         0.00%       0.000us         0.00%       0.000us       0.000us       -1000 b       -1000 b             1  \n"
		"-----------------  ------------  ------------  ------------  ------------  ------------  ------------  ------------  ------------  \n"
		"Self CPU time total: 1.500ms\n";

	CHECK_EQ_STR(key_averages_format_memory(0, buf), "0 b");
	CHECK_EQ_STR(key_averages_format_memory(1023, buf), "1023 b");
	CHECK_EQ_STR(key_averages_format_memory(-1023, buf), "-1023 b");
	CHECK_EQ_STR(key_averages_format_memory(1024, buf), "1.00 Kb");
	CHECK_EQ_STR(key_averages_format_memory(-589824, buf), "-576.00 Kb");
	CHECK_EQ_STR(key_averages_format_memory(1572864, buf), "1.50 Mb");
	CHECK_EQ_STR(key_averages_format_memory(-(3LL << 30), buf), "-3.00 Gb");
	CHECK_EQ_STR(key_averages_format_memory(1048575, buf), "1024.00 Kb");

	CHECK(trace_init(&t) == 0);
	add(&t, 1, "ProfilerStep#5", TRACE_CAT_USER_ANNOTATION, 0, 1500 * US, NULL);
	add(&t, 1, "fwd", TRACE_CAT_CPU_OP, 250 * US, 1 * MS, NULL);
	add_mem(&t, 1, 300 * US, 196608, false);
	add_mem(&t, 1, 1400 * US, -131082, false);
	add_mem(&t, 1, 1600 * US, -1000, false);
	CHECK(key_averages_build(&t, KEY_AVG_BY_NAME, KEY_AVG_SORT_SELF_CPU_TIME_TOTAL,
				 &tab, &e) == 0);
	s = key_averages_format(&tab, 50);
	CHECK_EQ_STR(s, want);
	free(s);

	/* GPU memory: the CUDA memory columns follow the CPU's */
	CHECK(tab.row_mem != NULL);
	tab.row_mem[0].mem[KEY_AVG_CUDA] = 3 << 20;
	tab.row_mem[0].self_mem[KEY_AVG_CUDA] = 1 << 20;
	s = key_averages_format(&tab, 0);
	CHECK(strstr(s, "  CPU time avg       CPU Mem  Self CPU Mem      CUDA Mem  Self CUDA Mem"
			"    # of Calls  \n") != NULL);
	CHECK(strstr(s, "     192.00 Kb     192.00 Kb       3.00 Mb       1.00 Mb             1  \n")
	      != NULL);
	free(s);
	key_averages_free(&tab);
	trace_free(&t);
}

/* ---- grouping by input shape and by call stack (torch's
 * key_averages(group_by_input_shape, group_by_stack_n)) */

/* The texts torch 1.13's EventList.key_averages(...).table(sort_by=
 * "self_cpu_time_total") prints for the events of add_shaped_ops(), made
 * with FunctionEvents of the same names, times (us), input_shapes and
 * stacks. */
static const char want_shapes[] =
	"----------------  ------------  ------------  ------------  ------------  ------------  ------------  -------------------------------------  \n"
	"            Name    Self CPU %      Self CPU   CPU total %     CPU total  CPU time avg    # of Calls                           Input Shapes  \n"
	"----------------  ------------  ------------  ------------  ------------  ------------  ------------  -------------------------------------  \n"
	"     aten::addmm        35.71%      80.000us        35.71%      80.000us      40.000us             2      [[32], [8, 16], [16, 32], [], []]  \n"
	"    aten::linear        22.32%      50.000us        44.64%     100.000us     100.000us             1              [[8, 16], [32, 16], [32]]  \n"
	"    aten::linear        17.86%      40.000us        35.71%      80.000us      80.000us             1                [[8, 32], [4, 32], [4]]  \n"
	"     aten::addmm        17.86%      40.000us        17.86%      40.000us      40.000us             1        [[4], [8, 32], [32, 4], [], []]  \n"
	"      aten::relu         6.25%      14.000us         6.25%      14.000us       7.000us             2                              [[8, 32]]  \n"
	"----------------  ------------  ------------  ------------  ------------  ------------  ------------  -------------------------------------  \n"
	"Self CPU time total: 224.000us\n";

static const char want_stack2[] =
	"----------------  ------------  ------------  ------------  ------------  ------------  ------------  ---------------------------------------------------------------------------  \n"
	"            Name    Self CPU %      Self CPU   CPU total %     CPU total  CPU time avg    # of Calls  Source Location                                                              \n"
	"----------------  ------------  ------------  ------------  ------------  ------------  ------------  ---------------------------------------------------------------------------  \n"
	"    aten::linear        40.18%      90.000us        80.36%     180.000us      90.000us             2  torch/nn/modules/linear.py(113): forward                                     \n"
	"                                                                                                      nn.Module: Linear_0                                                          \n"
	"                                                                                                                                                                                   \n"
	"     aten::addmm        40.18%      90.000us        40.18%      90.000us      45.000us             2  torch/nn/modules/linear.py(113): forward                                     \n"
	"                                                                                                      nn.Module: Linear_0                                                          \n"
	"                                                                                                                                                                                   \n"
	"     aten::addmm        13.39%      30.000us        13.39%      30.000us      30.000us             1  <built-in method addmm of type object at 0x7f00>                             \n"
	"                                                                                                      model.py(7): block                                                           \n"
	"                                                                                                                                                                                   \n"
	"      aten::relu         4.46%      10.000us         4.46%      10.000us      10.000us             1                                                                               \n"
	"                                                                                                                                                                                   \n"
	"      aten::relu         1.79%       4.000us         1.79%       4.000us       4.000us             1  ...xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx.py(1): f  \n"
	"                                                                                                                                                                                   \n"
	"----------------  ------------  ------------  ------------  ------------  ------------  ------------  ---------------------------------------------------------------------------  \n"
	"Self CPU time total: 224.000us\n";

static const char want_both5[] =
	"----------------  ------------  ------------  ------------  ------------  ------------  ------------  -------------------------------------  ---------------------------------------------------------------------------  \n"
	"            Name    Self CPU %      Self CPU   CPU total %     CPU total  CPU time avg    # of Calls                           Input Shapes  Source Location                                                              \n"
	"----------------  ------------  ------------  ------------  ------------  ------------  ------------  -------------------------------------  ---------------------------------------------------------------------------  \n"
	"    aten::linear        22.32%      50.000us        44.64%     100.000us     100.000us             1              [[8, 16], [32, 16], [32]]  torch/nn/modules/linear.py(113): forward                                     \n"
	"                                                                                                                                             nn.Module: Linear_0                                                          \n"
	"                                                                                                                                             train.py(20): step                                                           \n"
	"                                                                                                                                                                                                                          \n"
	"     aten::addmm        22.32%      50.000us        22.32%      50.000us      50.000us             1      [[32], [8, 16], [16, 32], [], []]  torch/nn/modules/linear.py(113): forward                                     \n"
	"                                                                                                                                             nn.Module: Linear_0                                                          \n"
	"                                                                                                                                             train.py(20): step                                                           \n"
	"                                                                                                                                                                                                                          \n"
	"    aten::linear        17.86%      40.000us        35.71%      80.000us      80.000us             1                [[8, 32], [4, 32], [4]]  torch/nn/modules/linear.py(113): forward                                     \n"
	"                                                                                                                                             nn.Module: Linear_0                                                          \n"
	"                                                                                                                                             train.py(21): step                                                           \n"
	"                                                                                                                                                                                                                          \n"
	"     aten::addmm        17.86%      40.000us        17.86%      40.000us      40.000us             1        [[4], [8, 32], [32, 4], [], []]  torch/nn/modules/linear.py(113): forward                                     \n"
	"                                                                                                                                             nn.Module: Linear_0                                                          \n"
	"                                                                                                                                             train.py(21): step                                                           \n"
	"                                                                                                                                                                                                                          \n"
	"     aten::addmm        13.39%      30.000us        13.39%      30.000us      30.000us             1      [[32], [8, 16], [16, 32], [], []]  <built-in method addmm of type object at 0x7f00>                             \n"
	"                                                                                                                                             model.py(7): block                                                           \n"
	"                                                                                                                                             model.py(3): run                                                             \n"
	"                                                                                                                                             train.py(40): loop                                                           \n"
	"                                                                                                                                             train.py(50): main                                                           \n"
	"                                                                                                                                                                                                                          \n"
	"      aten::relu         4.46%      10.000us         4.46%      10.000us      10.000us             1                              [[8, 32]]                                                                               \n"
	"                                                                                                                                                                                                                          \n"
	"      aten::relu         1.79%       4.000us         1.79%       4.000us       4.000us             1                              [[8, 32]]  ...xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx.py(1): f  \n"
	"                                                                                                                                                                                                                          \n"
	"----------------  ------------  ------------  ------------  ------------  ------------  ------------  -------------------------------------  ---------------------------------------------------------------------------  \n"
	"Self CPU time total: 224.000us\n";


#define ST_A "torch/nn/modules/linear.py(113): forward"
#define ST_B "nn.Module: Linear_0"
#define ST_C "train.py(20): step"
#define ST_D "<built-in method addmm of type object at 0x7f00>"

/* An operator on thread 1 with its "Input Dims" (raw JSON, as the
 * assembler keeps it; NULL: none) and "Call stack" (NULL: none). */
static void add_op(struct trace *t, const char *name, int64_t ts_us, int64_t end_us,
		   const char *dims, const char *stack)
{
	add(t, 1, name, TRACE_CAT_CPU_OP, ts_us * US, (end_us - ts_us) * US, NULL);
	if (dims) {
		CHECK(trace_arg_str(t, TRACE_ARG_INPUT_DIMS, dims, strlen(dims)) == 0);
		t->args[t->nargs - 1].type = TRACE_ARG_RAW;
	}
	if (stack)
		CHECK(trace_arg_str(t, TRACE_ARG_CALL_STACK, stack, strlen(stack)) == 0);
}

/* Two linears with an addmm each, an addmm of the first one's shapes
 * called from elsewhere, two relus (one without a stack, one whose entry
 * is wider than the column). The shapes are spaced as trace.json would
 * not be: the table prints them as Python does. */
static void add_shaped_ops(struct trace *t)
{
	static char longer[128];

	snprintf(longer, sizeof longer, "a/%090d.py(1): f", 0);
	memset(longer + 2, 'x', 90);
	CHECK(trace_init(t) == 0);
	add_op(t, "aten::linear", 0, 100, "[[8, 16], [32, 16], [32]]", ST_A ";" ST_B ";" ST_C);
	add_op(t, "aten::addmm", 10, 60, "[[32],[8,16],[16,32],[],[]]", ST_A ";" ST_B ";" ST_C);
	add_op(t, "aten::linear", 200, 280, "[[8, 32], [4, 32], [4]]",
	       ST_A ";" ST_B ";train.py(21): step");
	add_op(t, "aten::addmm", 210, 250, "[[4], [8, 32], [32, 4], [], []]",
	       ST_A ";" ST_B ";train.py(21): step");
	add_op(t, "aten::addmm", 300, 330, "[[32], [8, 16], [16, 32], [], []]",
	       ST_D ";model.py(7): block;model.py(3): run;train.py(40): loop;"
	       "train.py(50): main;train.py(60): <module>");
	add_op(t, "aten::relu", 400, 410, "[[8, 32]]", NULL);
	add_op(t, "aten::relu", 500, 504, "[[8, 32]]", longer);
}

static char *table_text(const struct trace *t, bool shapes, uint32_t stack_n,
			size_t max_rows)
{
	struct key_avg_opts o = { KEY_AVG_BY_NAME, shapes, stack_n };
	struct key_avg_table tab;
	struct err e;
	char *s;

	CHECK(key_averages_build_with_max(t, &o, KEY_AVG_SORT_SELF_CPU_TIME_TOTAL, max_rows,
					  max_rows, &tab, &e) == 0);
	s = key_averages_format(&tab, 100);
	key_averages_free(&tab);
	return s;
}

static void test_group_by_input_shape(void)
{
	struct trace t;
	struct key_avg_opts o = { KEY_AVG_BY_NAME, true, 0 };
	struct key_avg_table tab;
	struct err e;
	char *s;

	add_shaped_ops(&t);
	s = table_text(&t, true, 0, KEY_AVG_ROWS_MAX);
	CHECK_EQ_STR(s, want_shapes);
	free(s);
	/* the rows know their shapes as the trace has them */
	CHECK(key_averages_build_with(&t, &o, KEY_AVG_SORT_COUNT, 0, &tab, &e) == 0);
	CHECK_EQ_INT(tab.nrows, 5);
	CHECK_EQ_STR(tab.rows[0].key, "aten::addmm");
	CHECK_EQ_INT(tab.rows[0].count, 2);
	CHECK(tab.rows[0].shapes_len == strlen("[[32],[8,16],[16,32],[],[]]") &&
	      memcmp(tab.rows[0].shapes, "[[32],[8,16],[16,32],[],[]]", tab.rows[0].shapes_len) == 0);
	CHECK(tab.rows[0].stack == NULL);
	key_averages_free(&tab);
	/* an event without shapes is keyed "[]"; no row with a shape: no
	 * column */
	trace_free(&t);
	CHECK(trace_init(&t) == 0);
	add_op(&t, "aten::empty", 0, 10, NULL, NULL);
	add_op(&t, "aten::empty", 20, 30, "[]", NULL);
	CHECK(key_averages_build_with(&t, &o, KEY_AVG_SORT_COUNT, 0, &tab, &e) == 0);
	CHECK_EQ_INT(tab.nrows, 1);
	CHECK_EQ_INT(tab.rows[0].count, 2);
	s = key_averages_format(&tab, 0);
	CHECK(s && !strstr(s, "Input Shapes"));
	free(s);
	key_averages_free(&tab);
	trace_free(&t);
}

/* Keys beyond what one pass holds (max_rows 2: the trace's 5 to 7 keys
 * are grouped in parts, done again in more parts when one outgrows it):
 * the first rows, the folded sums and the totals of the whole table. */
static void check_parts(const struct trace *t, bool shapes, uint32_t stack_n)
{
	struct key_avg_opts o = { KEY_AVG_BY_NAME, shapes, stack_n };
	struct key_avg_table all, parts;
	struct err e;
	size_t i;
	uint64_t count = 0;

	CHECK(key_averages_build_with(t, &o, KEY_AVG_SORT_SELF_CPU_TIME_TOTAL, 0, &all, &e) == 0);
	CHECK(key_averages_build_with_max(t, &o, KEY_AVG_SORT_SELF_CPU_TIME_TOTAL, 2, 2, &parts,
					  &e) == 0);
	CHECK(all.nrows > 2);
	CHECK_EQ_INT(parts.nrows, 2);
	CHECK_EQ_INT(parts.nfolded, all.nrows - 2);
	for (i = 0; i < 2 && i < parts.nrows; i++) {
		CHECK_EQ_STR(parts.rows[i].key, all.rows[i].key);
		CHECK_EQ_INT(parts.rows[i].self_cpu_ns, all.rows[i].self_cpu_ns);
		CHECK_EQ_INT(parts.rows[i].shapes_len, all.rows[i].shapes_len);
		CHECK_EQ_INT(parts.rows[i].stack_len, all.rows[i].stack_len);
	}
	for (i = 2; i < all.nrows; i++)
		count += all.rows[i].count;
	CHECK_EQ_INT(parts.folded.count, count);
	CHECK_EQ_INT(parts.self_cpu_sum_ns, all.self_cpu_sum_ns);
	key_averages_free(&all);
	key_averages_free(&parts);
}

static void test_group_by_stack(void)
{
	struct trace t;
	char *s;

	add_shaped_ops(&t);
	s = table_text(&t, false, 2, KEY_AVG_ROWS_MAX);
	CHECK_EQ_STR(s, want_stack2);
	free(s);
	s = table_text(&t, true, 5, KEY_AVG_ROWS_MAX);
	CHECK_EQ_STR(s, want_both5);
	free(s);
	check_parts(&t, true, 5);
	check_parts(&t, false, 2);
	check_parts(&t, true, 0);
	trace_free(&t);
}

/* The entries of a "Call stack": counted, and the first n of them. */
static void test_stack_prefix(void)
{
	size_t n;

	CHECK_EQ_INT(key_averages_stack_prefix("a;bb;c", 6, 2, &n), 4);
	CHECK_EQ_INT(n, 3);
	CHECK_EQ_INT(key_averages_stack_prefix("a;bb;c", 6, 3, &n), 6);
	CHECK_EQ_INT(key_averages_stack_prefix("a;bb;c", 6, 9, &n), 6);
	CHECK_EQ_INT(key_averages_stack_prefix("a", 1, 1, &n), 1);
	CHECK_EQ_INT(n, 1);
	CHECK_EQ_INT(key_averages_stack_prefix("", 0, 1, &n), 0);
	CHECK_EQ_INT(n, 0);
}

/* ---- memory beside grouping by input shape and call stack */

/* The texts torch 1.13's EventList(profile_memory=True).key_averages(...)
 * .table() prints for add_shaped_ops() with add_grouped_mem()'s
 * allocations, made with FunctionEvents of the same names, times (us),
 * input_shapes, stacks and cpu_memory_usage (what torch's Kineto path
 * gives an event: the bytes of the records within its span), the
 * allocations no event holds as torch's "[memory]" FunctionEvents (no
 * input shapes, no stack). The memory columns come before "# of Calls",
 * "Input Shapes" and "Source Location" after it. */
static const char want_mem_both5[] =
	"----------------  ------------  ------------  ------------  ------------  ------------  ------------  ------------  ------------  -------------------------------------  ---------------------------------------------------------------------------  \n"
	"            Name    Self CPU %      Self CPU   CPU total %     CPU total  CPU time avg       CPU Mem  Self CPU Mem    # of Calls                           Input Shapes  Source Location                                                              \n"
	"----------------  ------------  ------------  ------------  ------------  ------------  ------------  ------------  ------------  -------------------------------------  ---------------------------------------------------------------------------  \n"
	"    aten::linear        22.32%      50.000us        44.64%     100.000us     100.000us       5.00 Kb       1.00 Kb             1              [[8, 16], [32, 16], [32]]  torch/nn/modules/linear.py(113): forward                                     \n"
	"                                                                                                                                                                         nn.Module: Linear_0                                                          \n"
	"                                                                                                                                                                         train.py(20): step                                                           \n"
	"                                                                                                                                                                                                                                                      \n"
	"     aten::addmm        22.32%      50.000us        22.32%      50.000us      50.000us       4.00 Kb       4.00 Kb             1      [[32], [8, 16], [16, 32], [], []]  torch/nn/modules/linear.py(113): forward                                     \n"
	"                                                                                                                                                                         nn.Module: Linear_0                                                          \n"
	"                                                                                                                                                                         train.py(20): step                                                           \n"
	"                                                                                                                                                                                                                                                      \n"
	"    aten::linear        17.86%      40.000us        35.71%      80.000us      80.000us      -3.75 Kb      -4.00 Kb             1                [[8, 32], [4, 32], [4]]  torch/nn/modules/linear.py(113): forward                                     \n"
	"                                                                                                                                                                         nn.Module: Linear_0                                                          \n"
	"                                                                                                                                                                         train.py(21): step                                                           \n"
	"                                                                                                                                                                                                                                                      \n"
	"     aten::addmm        17.86%      40.000us        17.86%      40.000us      40.000us         256 b         256 b             1        [[4], [8, 32], [32, 4], [], []]  torch/nn/modules/linear.py(113): forward                                     \n"
	"                                                                                                                                                                         nn.Module: Linear_0                                                          \n"
	"                                                                                                                                                                         train.py(21): step                                                           \n"
	"                                                                                                                                                                                                                                                      \n"
	"     aten::addmm        13.39%      30.000us        13.39%      30.000us      30.000us       2.00 Mb       2.00 Mb             1      [[32], [8, 16], [16, 32], [], []]  <built-in method addmm of type object at 0x7f00>                             \n"
	"                                                                                                                                                                         model.py(7): block                                                           \n"
	"                                                                                                                                                                         model.py(3): run                                                             \n"
	"                                                                                                                                                                         train.py(40): loop                                                           \n"
	"                                                                                                                                                                         train.py(50): main                                                           \n"
	"                                                                                                                                                                                                                                                      \n"
	"      aten::relu         4.46%      10.000us         4.46%      10.000us      10.000us         512 b         512 b             1                              [[8, 32]]                                                                               \n"
	"                                                                                                                                                                                                                                                      \n"
	"      aten::relu         1.79%       4.000us         1.79%       4.000us       4.000us           0 b           0 b             1                              [[8, 32]]  ...xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx.py(1): f  \n"
	"                                                                                                                                                                                                                                                      \n"
	"        [memory]         0.00%       0.000us         0.00%       0.000us       0.000us        -960 b        -960 b             2                                     []                                                                               \n"
	"                                                                                                                                                                                                                                                      \n"
	"----------------  ------------  ------------  ------------  ------------  ------------  ------------  ------------  ------------  -------------------------------------  ---------------------------------------------------------------------------  \n"
	"Self CPU time total: 224.000us\n";

static const char want_mem_stack2[] =
	"----------------  ------------  ------------  ------------  ------------  ------------  ------------  ------------  ------------  ---------------------------------------------------------------------------  \n"
	"            Name    Self CPU %      Self CPU   CPU total %     CPU total  CPU time avg       CPU Mem  Self CPU Mem    # of Calls  Source Location                                                              \n"
	"----------------  ------------  ------------  ------------  ------------  ------------  ------------  ------------  ------------  ---------------------------------------------------------------------------  \n"
	"     aten::addmm        13.39%      30.000us        13.39%      30.000us      30.000us       2.00 Mb       2.00 Mb             1  <built-in method addmm of type object at 0x7f00>                             \n"
	"                                                                                                                                  model.py(7): block                                                           \n"
	"                                                                                                                                                                                                               \n"
	"     aten::addmm        40.18%      90.000us        40.18%      90.000us      45.000us       4.25 Kb       4.25 Kb             2  torch/nn/modules/linear.py(113): forward                                     \n"
	"                                                                                                                                  nn.Module: Linear_0                                                          \n"
	"                                                                                                                                                                                                               \n"
	"      aten::relu         4.46%      10.000us         4.46%      10.000us      10.000us         512 b         512 b             1                                                                               \n"
	"                                                                                                                                                                                                               \n"
	"      aten::relu         1.79%       4.000us         1.79%       4.000us       4.000us           0 b           0 b             1  ...xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx.py(1): f  \n"
	"                                                                                                                                                                                                               \n"
	"        [memory]         0.00%       0.000us         0.00%       0.000us       0.000us        -960 b        -960 b             2                                                                               \n"
	"                                                                                                                                                                                                               \n"
	"    aten::linear        40.18%      90.000us        80.36%     180.000us      90.000us       1.25 Kb      -3.00 Kb             2  torch/nn/modules/linear.py(113): forward                                     \n"
	"                                                                                                                                  nn.Module: Linear_0                                                          \n"
	"                                                                                                                                                                                                               \n"
	"----------------  ------------  ------------  ------------  ------------  ------------  ------------  ------------  ------------  ---------------------------------------------------------------------------  \n"
	"Self CPU time total: 224.000us\n";

/* Allocations and frees on thread 1 (us, bytes) in and between the
 * operators of add_shaped_ops(): the last two in none. */
static void add_grouped_mem(struct trace *t)
{
	static const int64_t mem[][2] = {
		{ 20, 4096 }, { 70, 1024 }, { 220, 256 }, { 260, -4096 },
		{ 320, 2 << 20 }, { 405, 512 }, { 600, -1024 }, { 700, 64 },
	};
	size_t i;

	for (i = 0; i < sizeof mem / sizeof mem[0]; i++)
		add_mem(t, 1, mem[i][0] * US, mem[i][1], false);
}

/* Keyed by shapes and stacks, each allocation goes to the innermost
 * operator holding it and the others to one "[memory]" row keyed as an
 * event with no shapes and no stack: torch's text, and, with the keys
 * split in parts of two rows, the same first rows and folded sums. */
static void test_memory_grouped(void)
{
	static const struct {
		bool shapes;
		uint32_t stack_n;
	} keys[] = { { true, 5 }, { false, 2 }, { true, 0 } };
	struct key_avg_opts o = { KEY_AVG_BY_NAME, false, 2 };
	struct trace t;
	struct key_avg_table tab, all, parts;
	struct err e;
	int64_t rest[2];
	uint64_t count;
	size_t i, k;
	char *s;

	add_shaped_ops(&t);
	add_grouped_mem(&t);
	s = table_text(&t, true, 5, KEY_AVG_ROWS_MAX);
	CHECK_EQ_STR(s, want_mem_both5);
	free(s);
	CHECK(key_averages_build_with(&t, &o, KEY_AVG_SORT_SELF_CPU_MEM, 0, &tab, &e) == 0);
	s = key_averages_format(&tab, 100);
	CHECK_EQ_STR(s, want_mem_stack2);
	free(s);
	key_averages_free(&tab);

	for (i = 0; i < sizeof keys / sizeof keys[0]; i++) {
		o.by_input_shape = keys[i].shapes;
		o.stack_n = keys[i].stack_n;
		CHECK(key_averages_build_with(&t, &o, KEY_AVG_SORT_CPU_MEM, 0, &all,
					      &e) == 0);
		CHECK(key_averages_build_with_max(&t, &o, KEY_AVG_SORT_CPU_MEM, 2, 2,
						  &parts, &e) == 0);
		CHECK(all.memory && parts.memory && all.row_mem && parts.row_mem);
		CHECK_EQ_INT(parts.nrows, 2);
		CHECK_EQ_INT(parts.nfolded, all.nrows - 2);
		for (k = 0; k < 2 && k < parts.nrows; k++) {
			CHECK_EQ_STR(parts.rows[k].key, all.rows[k].key);
			CHECK_EQ_INT(parts.row_mem[k].mem[KEY_AVG_CPU],
				     all.row_mem[k].mem[KEY_AVG_CPU]);
			CHECK_EQ_INT(parts.row_mem[k].self_mem[KEY_AVG_CPU],
				     all.row_mem[k].self_mem[KEY_AVG_CPU]);
		}
		rest[0] = rest[1] = 0;
		count = 0;
		for (k = 2; k < all.nrows; k++) {
			rest[0] += all.row_mem[k].mem[KEY_AVG_CPU];
			rest[1] += all.row_mem[k].self_mem[KEY_AVG_CPU];
			count += all.rows[k].count;
		}
		CHECK_EQ_INT(parts.folded_mem.mem[KEY_AVG_CPU], rest[0]);
		CHECK_EQ_INT(parts.folded_mem.self_mem[KEY_AVG_CPU], rest[1]);
		CHECK_EQ_INT(parts.folded.count, count);
		/* "[memory]": its two allocations, once */
		CHECK_EQ_INT(find(&all, "[memory]")->count, 2);
		CHECK_EQ_INT(key_averages_row_mem(&all, (size_t)(find(&all, "[memory]") - all.rows))
				     .self_mem[KEY_AVG_CPU], -960);
		key_averages_free(&all);
		key_averages_free(&parts);
	}
	trace_free(&t);
}

/* What key_averages_each handed over: the sum of (event index + 1) x its
 * self times, and the events. */
struct visits {
	int64_t sum;
	size_t n;
};

static void visit(void *ctx, size_t ev, int64_t self_cpu_ns, int64_t self_cuda_ns)
{
	struct visits *v = ctx;

	v->sum += (int64_t)(ev + 1) * (self_cpu_ns + 3 * self_cuda_ns);
	v->n++;
}

/* ---- out-of-memory injection: the test links with -Wl,--wrap=malloc,
 * --wrap=calloc and --wrap=realloc (tests/CMakeLists.txt), so every
 * allocation of key_averages.c comes here; the `oom_after`-th from now
 * (1: the next) fails, then all succeed again (0: none fails). */

static int oom_after;

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);

/* Whether this allocation is the one to fail. */
static int oom_now(void)
{
	return oom_after > 0 && --oom_after == 0;
}

void *__wrap_malloc(size_t n)
{
	return oom_now() ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size)
{
	return oom_now() ? NULL : __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t n)
{
	return oom_now() ? NULL : __real_realloc(p, n);
}

/* A row is 88 bytes: a table of KEY_AVG_ROWS_MAX rows is part of what a
 * window's memory adds to its pool (docs/architecture.md, "A window's
 * memory"). Its memory sums lie apart, held only by a table of a trace
 * with "[memory]" events. */
static void test_row_size(void)
{
	struct trace t;
	struct key_avg_table tab;
	struct err e;

	CHECK(sizeof(struct key_avg_row) <= 88);
	build_launches(&t); /* with allocations */
	CHECK(key_averages_build(&t, KEY_AVG_BY_NAME, KEY_AVG_SORT_SELF_CPU_TIME_TOTAL, &tab,
				 &e) == 0);
	CHECK(tab.memory && tab.row_mem != NULL);
	key_averages_free(&tab);
	trace_free(&t);
	build_two_threads(&t); /* without */
	CHECK(key_averages_build(&t, KEY_AVG_BY_NAME, KEY_AVG_SORT_SELF_CPU_TIME_TOTAL, &tab,
				 &e) == 0);
	CHECK(!tab.memory && tab.row_mem == NULL);
	CHECK(tab.nrows > 0);
	CHECK_EQ_INT(key_averages_row_mem(&tab, 0).self_mem[KEY_AVG_CPU], 0);
	key_averages_free(&tab);
	trace_free(&t);
}

/* Whether tables a and b have the same rows, memory and folded sums. */
static bool same_table(const struct key_avg_table *a, const struct key_avg_table *b)
{
	size_t k;

	if (a->nrows != b->nrows || a->nfolded != b->nfolded ||
	    a->folded.count != b->folded.count || a->folded.self_cpu_ns != b->folded.self_cpu_ns ||
	    memcmp(&a->folded_mem, &b->folded_mem, sizeof a->folded_mem) != 0)
		return false;
	for (k = 0; k < a->nrows; k++)
		if (!same_row(a, k, b, k))
			return false;
	return true;
}

/*
 * Out of memory. A sort with no memory for its index (a heapsort in
 * place) gives every sort's order, each row with its own memory, as the
 * sort with it does. A build whose allocations fail, each in turn, in
 * one pass and in parts of the names: either the table it would have
 * built, or the error with an empty table (ASan: nothing leaks).
 */
static void test_out_of_memory(void)
{
	struct trace t, plain;
	struct key_avg_table want, tab;
	struct err e;
	int s, k, left, rc, max, failed;

	build_launches(&t);
	build_two_threads(&plain);
	for (s = 0; s <= KEY_AVG_SORT_SELF_CUDA_MEM; s++) {
		struct trace *tr[2] = { &t, &plain };
		int i;

		for (i = 0; i < 2; i++) {
			CHECK(key_averages_build(tr[i], KEY_AVG_BY_NAME, (enum key_avg_sort)s,
						 &want, &e) == 0);
			CHECK(key_averages_build(tr[i], KEY_AVG_BY_NAME,
						 s ? KEY_AVG_SORT_SELF_CPU_TIME_TOTAL
						   : KEY_AVG_SORT_CPU_MEM,
						 &tab, &e) == 0);
			CHECK(want.nrows > 3);
			oom_after = 1; /* the index */
			key_averages_sort(&tab, (enum key_avg_sort)s);
			CHECK_EQ_INT(oom_after, 0);
			oom_after = 0;
			if (!same_table(&tab, &want))
				fprintf(stderr, "  sort %d, trace %d: the heapsort differs\n", s, i);
			CHECK(same_table(&tab, &want));
			key_averages_free(&want);
			key_averages_free(&tab);
		}
	}
	for (max = 7; max <= KEY_AVG_ROWS_MAX; max += KEY_AVG_ROWS_MAX - 7) {
		CHECK(key_averages_build_max(&t, KEY_AVG_BY_NAME, KEY_AVG_SORT_CPU_MEM,
					     (size_t)max, (size_t)max, &want, &e) == 0);
		CHECK(want.memory && (max == 7) == (want.nfolded > 0));
		failed = 0;
		for (k = 1; k < 100000; k++) {
			oom_after = k;
			rc = key_averages_build_max(&t, KEY_AVG_BY_NAME, KEY_AVG_SORT_CPU_MEM,
						    (size_t)max, (size_t)max, &tab, &e);
			left = oom_after;
			oom_after = 0;
			if (rc == 0) {
				CHECK(same_table(&tab, &want));
			} else {
				failed++;
				CHECK_EQ_STR(e.msg, "out of memory building the key_averages table");
				CHECK(tab.nrows == 0 && tab.rows == NULL && tab.row_mem == NULL);
			}
			key_averages_free(&tab);
			if (left > 0)
				break; /* no allocation was left to fail */
		}
		CHECK(failed > 3);
		CHECK(k < 100000);
		key_averages_free(&want);
	}
	trace_free(&plain);
	trace_free(&t);
}

/* key_averages_each (operator_stacks.txt's sweep) over a trace with
 * allocations, some in no event: each operator once, with the self times
 * it has without them; the allocations are no events of their own. */
static void test_each_with_memory(void)
{
	struct trace t;
	struct visits plain = { 0 }, mem = { 0 };
	struct err e;

	add_shaped_ops(&t);
	CHECK(key_averages_each(&t, visit, &plain, &e) == 0);
	add_grouped_mem(&t);
	CHECK(key_averages_each(&t, visit, &mem, &e) == 0);
	CHECK_EQ_INT(plain.n, 7);
	CHECK_EQ_INT(mem.n, plain.n);
	CHECK_EQ_INT(mem.sum, plain.sum);
	trace_sort(&t);
	memset(&mem, 0, sizeof mem);
	CHECK(key_averages_each(&t, visit, &mem, &e) == 0);
	CHECK_EQ_INT(mem.n, plain.n);
	trace_free(&t);
}

int main(void)
{
	test_self_total_count();
	test_sort_keys();
	test_group_by_domain();
	test_many_names();
	test_folded_rows();
	test_nested_trace();
	test_row_limit();
	test_exact_text();
	test_name_truncation();
	test_time_formats();
	test_write_file();
	test_memory_attribution();
	test_memory_sort();
	test_memory_text();
	test_group_by_input_shape();
	test_group_by_stack();
	test_stack_prefix();
	test_memory_grouped();
	test_each_with_memory();
	test_row_size();
	test_out_of_memory();
	return check_done();
}

/*
 * test_chrome_writer — the atomic output file and the Chrome trace writer.
 *
 * Traces are built by hand through struct trace's public fields (a local
 * interner fills t->names), written plain and gzipped, read back and parsed
 * with cJSON; fields are checked both parsed and as raw text where a double
 * would hide the difference (timestamps, 64-bit integers).
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "check.h"
#include "events/bigalloc.h"
#include "events/trace.h"
#include "export/chrome_writer.h"
#include "export/export.h"
#include "export/outfile.h"
#include "version.h"

/* export_unix_time()'s base is the Unix time floored to a week (ns). */
#define WEEK (604800LL * 1000000000LL)

static char tmpdir[256];

/* ---------------------------------------------------------------- helpers */

/* p, or the test ends: out of memory. */
static void *need(void *p)
{
	if (!p) {
		fprintf(stderr, "out of memory\n");
		exit(2);
	}
	return p;
}

static void *xrealloc(void *p, size_t n)
{
	return need(realloc(p, n));
}

/* Grows one of the trace's arrays (trace_free releases them with
 * bigalloc_free). */
static void *xgrow(void *p, size_t n)
{
	return need(bigalloc_realloc(p, n));
}

/* Interns `len` bytes in the trace's names (the table owns the copy). */
static uint32_t put_name(struct trace *t, const char *s, size_t len)
{
	uint32_t id = trace_intern(t, s, len);

	if (id == STRTAB_NONE) {
		fprintf(stderr, "test_chrome_writer: out of memory\n");
		exit(2);
	}
	return id;
}

static uint32_t put_cstr(struct trace *t, const char *s)
{
	return put_name(t, s, strlen(s));
}

/* Appends an event; returns it (valid until the next add). */
static struct trace_event *add_ev(struct trace *t, int ph, int cat,
				  const char *name, size_t nlen, int64_t ts,
				  int64_t dur)
{
	struct trace_event *e;

	if (t->nev == t->cap_ev) {
		t->cap_ev = t->cap_ev ? 2 * t->cap_ev : 16;
		t->ev = xgrow(t->ev, t->cap_ev * sizeof *t->ev);
	}
	e = &t->ev[t->nev++];
	memset(e, 0, sizeof *e);
	e->ph = (uint8_t)ph;
	e->cat = (uint8_t)cat;
	e->name = put_name(t, name, nlen);
	e->ts = ts;
	e->dur = dur;
	e->pid = 100;
	e->tid = 101;
	e->args = (uint32_t)t->nargs;
	return e;
}

static struct trace_event *add_x(struct trace *t, int cat, const char *name,
				 int64_t ts, int64_t dur)
{
	return add_ev(t, TRACE_PH_COMPLETE, cat, name, strlen(name), ts, dur);
}

/* Appends an arg to the last event. */
static struct trace_arg *add_arg(struct trace *t, const char *key, int type)
{
	struct trace_arg *a;

	if (t->nargs == t->cap_args) {
		t->cap_args = t->cap_args ? 2 * t->cap_args : 16;
		t->args = xgrow(t->args, t->cap_args * sizeof *t->args);
	}
	a = &t->args[t->nargs++];
	memset(a, 0, sizeof *a);
	a->key = put_cstr(t, key);
	a->type = (uint32_t)type;
	t->ev[t->nev - 1].nargs++;
	return a;
}

static void add_thread(struct trace *t, int32_t pid, int32_t tid, const char *name)
{
	if (t->nthreads == t->cap_threads) {
		t->cap_threads = t->cap_threads ? 2 * t->cap_threads : 4;
		t->threads = xgrow(t->threads, t->cap_threads * sizeof *t->threads);
	}
	t->threads[t->nthreads].pid = pid;
	t->threads[t->nthreads].tid = tid;
	t->threads[t->nthreads].name = put_cstr(t, name);
	t->nthreads++;
}

static char *xstrdup(const char *s)
{
	size_t n = strlen(s) + 1;
	return memcpy(xrealloc(NULL, n), s, n);
}

/* An empty trace with recognizable metadata. */
static void trace_new(struct trace *t)
{
	memset(t, 0, sizeof *t);
	t->meta.rank = 3;
	t->meta.world_size = 8;
	t->meta.window = 2;
	t->meta.first_step = 12;
	t->meta.last_step = 14;
	/* a whole number of weeks: export_unix_time() would leave ts as
	 * given (test_wall_clock covers the conversion) */
	t->meta.base_time_ns = WEEK * 2810;
	t->meta.pid = 100;
	t->meta.program = xstrdup("train.py");
	t->meta.hostname = xstrdup("node-7");
	t->meta.run = xstrdup("myrun");
	t->meta.reason = xstrdup("slow step");
	t->counters.events = 42;
	t->counters.dropped_buffer = 1;
	t->counters.dropped_memory = 1;
	t->counters.dropped_noslot = 2;
	t->counters.unbalanced_pops = 3;
	t->counters.clipped = 4;
	t->counters.gpu_dropped = 18446744073709551615ULL;
}

static void trace_done(struct trace *t)
{
	trace_free(t);
}

static void path_in_tmp(char *out, size_t size, const char *name)
{
	snprintf(out, size, "%s/%s", tmpdir, name);
}

static int exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

static void tmp_name(char *out, size_t size, const char *path)
{
	snprintf(out, size, "%s.tmp.%ld", path, (long)getpid());
}

/* Reads a whole file through zlib (which also reads plain files).
 * Returns a malloc'd NUL-terminated buffer. */
static char *slurp(const char *path, size_t *len)
{
	gzFile g = gzopen(path, "rb");
	size_t cap = 1 << 16, n = 0;
	char *buf;
	int r;

	if (!g)
		return NULL;
	buf = xrealloc(NULL, cap + 1);
	while ((r = gzread(g, buf + n, (unsigned)(cap - n))) > 0) {
		n += (size_t)r;
		if (n == cap) {
			cap *= 2;
			buf = xrealloc(buf, cap + 1);
		}
	}
	gzclose(g);
	if (r < 0) {
		free(buf);
		return NULL;
	}
	buf[n] = '\0';
	*len = n;
	return buf;
}

/* First bytes of a file as stored on disk. */
static int head_bytes(const char *path, unsigned char *out, size_t n)
{
	FILE *f = fopen(path, "rb");
	size_t r;

	if (!f)
		return -1;
	r = fread(out, 1, n, f);
	fclose(f);
	return r == n ? 0 : -1;
}

/* Independent UTF-8 check of the whole document: decode code points and
 * reject overlongs, surrogates and values past U+10FFFF. */
static int valid_utf8(const unsigned char *s, size_t n)
{
	size_t i = 0;

	while (i < n) {
		unsigned c = s[i], len, k;
		uint32_t cp;

		if (c < 0x80) {
			i++;
			continue;
		}
		if ((c & 0xE0) == 0xC0) {
			len = 2;
			cp = c & 0x1F;
		} else if ((c & 0xF0) == 0xE0) {
			len = 3;
			cp = c & 0x0F;
		} else if ((c & 0xF8) == 0xF0) {
			len = 4;
			cp = c & 0x07;
		} else {
			return 0;
		}
		if (i + len > n)
			return 0;
		for (k = 1; k < len; k++) {
			if ((s[i + k] & 0xC0) != 0x80)
				return 0;
			cp = (cp << 6) | (s[i + k] & 0x3F);
		}
		if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) ||
		    (len == 4 && cp < 0x10000) || cp > 0x10FFFF ||
		    (cp >= 0xD800 && cp <= 0xDFFF))
			return 0;
		i += len;
	}
	return 1;
}

/* JSON forbids raw control characters inside strings; outside them only
 * the formatting's \n and \t may appear. */
static int no_raw_controls(const char *s, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c < 0x20 && c != '\n' && c != '\t')
			return 0;
	}
	return 1;
}

/* Writes `t` to `name` in tmpdir and parses it back; returns the root (the
 * caller deletes it) and, if asked, the document text. */
static cJSON *write_and_parse(const struct trace *t, const char *name, int gzip,
			      char **text_out)
{
	char path[512];
	struct err e = { "" };
	struct outfile *f;
	char *text;
	size_t len;
	cJSON *root;

	path_in_tmp(path, sizeof path, name);
	f = outfile_open(path, gzip, &e);
	CHECK(f != NULL);
	if (!f) {
		fprintf(stderr, "open: %s\n", e.msg);
		return NULL;
	}
	CHECK_EQ_INT(chrome_writer_write(t, f, &e), 0);
	CHECK_EQ_INT(outfile_commit(f, &e), 0);
	text = slurp(path, &len);
	CHECK(text != NULL);
	if (!text)
		return NULL;
	CHECK_EQ_INT(strlen(text), len); /* no raw NUL anywhere */
	CHECK(valid_utf8((const unsigned char *)text, len));
	CHECK(no_raw_controls(text, len));
	root = cJSON_ParseWithLength(text, len);
	CHECK(root != NULL);
	if (!root)
		fprintf(stderr, "parse error near: %.80s\n", cJSON_GetErrorPtr());
	if (text_out)
		*text_out = text;
	else
		free(text);
	return root;
}

static cJSON *events_of(cJSON *root)
{
	cJSON *ev = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
	CHECK(cJSON_IsArray(ev));
	return ev;
}

/* The first event whose "name" equals `name` (and "ph" equals ph if set). */
static cJSON *find_event(cJSON *root, const char *name, const char *ph)
{
	cJSON *ev;

	cJSON_ArrayForEach(ev, events_of(root)) {
		cJSON *n = cJSON_GetObjectItemCaseSensitive(ev, "name");
		cJSON *p = cJSON_GetObjectItemCaseSensitive(ev, "ph");

		if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0 &&
		    (!ph || (cJSON_IsString(p) && strcmp(p->valuestring, ph) == 0)))
			return ev;
	}
	return NULL;
}

static const char *str_of(cJSON *o, const char *key)
{
	cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static double num_of(cJSON *o, const char *key)
{
	cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* The raw text of member `key` in the one-line event whose name is `name`
 * (names here are plain ASCII), copied into out. */
static const char *raw_field(const char *text, const char *name, const char *key,
			     char *out, size_t size)
{
	char pat[256];
	const char *line, *eol, *p;
	size_t n = 0;

	snprintf(pat, sizeof pat, "\"name\":\"%s\"", name);
	line = strstr(text, pat);
	out[0] = '\0';
	if (!line)
		return out;
	while (line > text && line[-1] != '\n')
		line--;
	eol = strchr(line, '\n');
	if (!eol)
		eol = line + strlen(line);
	snprintf(pat, sizeof pat, "\"%s\":", key);
	p = strstr(line, pat);
	if (!p || p > eol)
		return out;
	p += strlen(pat);
	while (p < eol && *p != ',' && *p != '}' && n + 1 < size)
		out[n++] = *p++;
	out[n] = '\0';
	return out;
}

/* ---------------------------------------------------------------- outfile */

static void test_outfile_atomic(void)
{
	char path[512], tmp[600];
	struct err e = { "" };
	struct outfile *f;
	char *text;
	size_t len;

	path_in_tmp(path, sizeof path, "atomic.txt");
	tmp_name(tmp, sizeof tmp, path);
	f = outfile_open(path, false, &e);
	CHECK(f != NULL);
	if (!f)
		return;
	CHECK(exists(tmp));
	CHECK(!exists(path));
	CHECK_EQ_INT(outfile_puts(f, "hello "), 0);
	CHECK_EQ_INT(outfile_write(f, "world", 5), 0);
	CHECK_EQ_INT(outfile_printf(f, " %d-%s", 42, "x"), 0);
	CHECK_EQ_INT(outfile_bytes(f), 16);
	CHECK(!exists(path)); /* still only the temporary */
	CHECK_EQ_INT(outfile_error(f, &e), 0);
	CHECK_EQ_INT(outfile_commit(f, &e), 0);
	CHECK(exists(path));
	CHECK(!exists(tmp));
	text = slurp(path, &len);
	CHECK(text && strcmp(text, "hello world 42-x") == 0);
	free(text);

	/* abort: nothing is left behind, an earlier file is kept intact */
	f = outfile_open(path, true, &e);
	CHECK(f != NULL);
	if (!f)
		return;
	CHECK_EQ_INT(outfile_puts(f, "replacement"), 0);
	CHECK(exists(tmp));
	outfile_abort(f);
	CHECK(!exists(tmp));
	text = slurp(path, &len);
	CHECK(text && strcmp(text, "hello world 42-x") == 0);
	free(text);
	outfile_abort(NULL);
}

static void test_outfile_missing_dir(void)
{
	char path[512];
	struct err e = { "" };
	struct outfile *f;

	path_in_tmp(path, sizeof path, "no/such/dir/trace.json");
	f = outfile_open(path, false, &e);
	CHECK(f == NULL);
	CHECK(strstr(e.msg, path) != NULL);
	CHECK(strstr(e.msg, "No such file or directory") != NULL);
	outfile_abort(f);
}

/* Big writes, printf past 4 KiB and buffer boundaries, plain and gzip. */
static void test_outfile_large(int gzip)
{
	char path[512];
	struct err e = { "" };
	struct outfile *f;
	char *big = xrealloc(NULL, 1000001), *text, *expect;
	size_t i, len, elen;
	unsigned char magic[2];

	for (i = 0; i < 1000000; i++)
		big[i] = (char)('a' + i % 26);
	big[1000000] = '\0';
	path_in_tmp(path, sizeof path, gzip ? "large.gz" : "large.txt");
	f = outfile_open(path, gzip, &e);
	CHECK(f != NULL);
	if (!f) {
		free(big);
		return;
	}
	CHECK_EQ_INT(outfile_write(f, big, 1000000), 0);
	CHECK_EQ_INT(outfile_printf(f, "<%s>", big + 990000), 0); /* 10 KiB */
	for (i = 0; i < 100000; i++)
		CHECK_EQ_INT(outfile_write(f, "0123456789", 10) == 0, 1);
	CHECK_EQ_INT(outfile_bytes(f), 1000000 + 10002 + 1000000);
	CHECK_EQ_INT(outfile_commit(f, &e), 0);

	elen = 1000000 + 10002 + 1000000;
	expect = xrealloc(NULL, elen + 1);
	memcpy(expect, big, 1000000);
	expect[1000000] = '<';
	memcpy(expect + 1000001, big + 990000, 10000);
	expect[1010001] = '>';
	for (i = 0; i < 100000; i++)
		memcpy(expect + 1010002 + 10 * i, "0123456789", 10);
	text = slurp(path, &len);
	CHECK(text != NULL);
	CHECK_EQ_INT(len, elen);
	CHECK(text && len == elen && memcmp(text, expect, elen) == 0);
	CHECK_EQ_INT(head_bytes(path, magic, 2), 0);
	if (gzip)
		CHECK(magic[0] == 0x1f && magic[1] == 0x8b);
	else
		CHECK(magic[0] == 'a' && magic[1] == 'b');
	free(text);
	free(expect);
	free(big);
}

/* A write that fails (file size limit: EFBIG) sticks, and commit reports it
 * naming the final path and leaves no file behind. */
static void test_outfile_write_error(void)
{
	char path[512], tmp[600], expect[700];
	struct err e = { "" };
	struct outfile *f;
	struct rlimit old, lim;
	char block[4096];
	int i, failed_at = -1;

	memset(block, 'x', sizeof block);
	path_in_tmp(path, sizeof path, "toobig.txt");
	tmp_name(tmp, sizeof tmp, path);
	signal(SIGXFSZ, SIG_IGN);
	getrlimit(RLIMIT_FSIZE, &old);
	lim = old;
	lim.rlim_cur = 64 * 1024;
	CHECK_EQ_INT(setrlimit(RLIMIT_FSIZE, &lim), 0);
	f = outfile_open(path, false, &e);
	CHECK(f != NULL);
	if (!f) {
		setrlimit(RLIMIT_FSIZE, &old);
		return;
	}
	for (i = 0; i < 256 && failed_at < 0; i++)
		if (outfile_write(f, block, sizeof block) != 0)
			failed_at = i;
	CHECK(failed_at >= 0);
	CHECK_EQ_INT(outfile_puts(f, "more"), -1); /* sticky */
	CHECK_EQ_INT(outfile_printf(f, "%d", 1), -1);
	CHECK_EQ_INT(outfile_error(f, &e), -1);
	snprintf(expect, sizeof expect, "cannot write '%s': %s", path, strerror(EFBIG));
	CHECK_EQ_STR(e.msg, expect);
	memset(&e, 0, sizeof e);
	CHECK_EQ_INT(outfile_commit(f, &e), -1);
	CHECK_EQ_STR(e.msg, expect);
	CHECK(!exists(path));
	CHECK(!exists(tmp));

	/* the writer passes the outfile's message up */
	{
		struct trace t;
		int k;

		trace_new(&t);
		for (k = 0; k < 5000; k++)
			add_x(&t, TRACE_CAT_KERNEL, "some_kernel_name_long_enough", k, 1);
		f = outfile_open(path, false, &e);
		CHECK(f != NULL);
		if (f) {
			memset(&e, 0, sizeof e);
			CHECK_EQ_INT(chrome_writer_write(&t, f, &e), -1);
			CHECK_EQ_STR(e.msg, expect);
			outfile_abort(f);
		}
		CHECK(!exists(tmp));
		trace_done(&t);
	}
	setrlimit(RLIMIT_FSIZE, &old);
	signal(SIGXFSZ, SIG_DFL);
}

/* ---------------------------------------------------------------- writer */

static void test_header(void)
{
	struct trace t;
	cJSON *root, *di, *ph, *cn, *dp;
	char *text = NULL;

	trace_new(&t);
	add_x(&t, TRACE_CAT_CPU_OP, "op", 10, 5);
	root = write_and_parse(&t, "header.json", 0, &text);
	if (!root) {
		trace_done(&t);
		free(text);
		return;
	}
	CHECK_EQ_INT(num_of(root, "schemaVersion"), 1);
	dp = cJSON_GetObjectItemCaseSensitive(root, "deviceProperties");
	CHECK(cJSON_IsArray(dp) && cJSON_GetArraySize(dp) == 0);
	di = cJSON_GetObjectItemCaseSensitive(root, "distributedInfo");
	CHECK_EQ_INT(num_of(di, "rank"), 3);
	CHECK_EQ_INT(num_of(di, "world_size"), 8);
	CHECK_EQ_STR(str_of(root, "traceName"), "myrun/rank3/window2");
	CHECK_EQ_STR(str_of(root, "displayTimeUnit"), "ms");
	CHECK(num_of(root, "baseTimeNanoseconds") == 1699488000000000000.0);
	/* exact digits */
	CHECK(text && strstr(text, "\"baseTimeNanoseconds\":\t1699488000000000000,") != NULL);
	ph = cJSON_GetObjectItemCaseSensitive(root, "profhost");
	CHECK(cJSON_IsObject(ph));
	CHECK_EQ_STR(str_of(ph, "version"), PROFHOST_VERSION);
	CHECK_EQ_INT(num_of(ph, "window"), 2);
	CHECK_EQ_INT(num_of(ph, "first_step"), 12);
	CHECK_EQ_INT(num_of(ph, "last_step"), 14);
	CHECK_EQ_STR(str_of(ph, "reason"), "slow step");
	CHECK_EQ_STR(str_of(ph, "program"), "train.py");
	CHECK_EQ_STR(str_of(ph, "hostname"), "node-7");
	CHECK_EQ_INT(num_of(ph, "pid"), 100);
	cn = cJSON_GetObjectItemCaseSensitive(ph, "counters");
	CHECK_EQ_INT(num_of(cn, "events"), 42);
	CHECK_EQ_INT(num_of(cn, "dropped_buffer"), 1);
	CHECK_EQ_INT(num_of(cn, "dropped_memory"), 1);
	CHECK_EQ_INT(num_of(cn, "dropped_noslot"), 2);
	CHECK_EQ_INT(num_of(cn, "unbalanced_pops"), 3);
	CHECK_EQ_INT(num_of(cn, "clipped"), 4);
	CHECK(text && strstr(text, "\"gpu_dropped\":\t18446744073709551615") != NULL);
	/* traceEvents comes last, after the header */
	CHECK(root->child && cJSON_IsArray(cJSON_GetArrayItem(root, cJSON_GetArraySize(root) - 1)));
	CHECK_EQ_STR(cJSON_GetArrayItem(root, cJSON_GetArraySize(root) - 1)->string, "traceEvents");
	cJSON_Delete(root);
	free(text);

	/* Missing strings and hostile metadata still give valid JSON. */
	free(t.meta.run);
	t.meta.run = NULL;
	free(t.meta.reason);
	t.meta.reason = NULL;
	free(t.meta.hostname);
	t.meta.hostname = xstrdup("h\"o\\s\nt\xff");
	root = write_and_parse(&t, "header2.json", 0, NULL);
	if (root) {
		ph = cJSON_GetObjectItemCaseSensitive(root, "profhost");
		CHECK_EQ_STR(str_of(ph, "hostname"), "h\"o\\s\nt\xEF\xBF\xBD");
		CHECK_EQ_STR(str_of(ph, "reason"), "");
		CHECK(str_of(root, "traceName") != NULL);
	}
	cJSON_Delete(root);
	trace_done(&t);
}

static void test_times_and_phases(void)
{
	static const struct {
		const char *name;
		int64_t ts, dur;
		const char *raw_ts, *raw_dur;
	} cases[] = {
		{ "t_basic", 1234567, 1000, "1234.567", "1.000" },
		{ "t_zero", 0, 0, "0.000", "0.000" },
		{ "t_small", 5, 1, "0.005", "0.001" },
		{ "t_neg", -1500, 999, "-1.500", "0.999" },
		{ "t_negsub", -999, 1000001, "-0.999", "1000.001" },
		{ "t_big", 9223372036854775807LL, 0, "9223372036854775.807", "0.000" },
		{ "t_min", INT64_MIN, 0, "-9223372036854775.808", "0.000" },
	};
	struct trace t;
	struct trace_event *e;
	cJSON *root, *ev;
	char *text = NULL, raw[64];
	size_t i;

	trace_new(&t);
	for (i = 0; i < sizeof cases / sizeof cases[0]; i++)
		add_x(&t, TRACE_CAT_KERNEL, cases[i].name, cases[i].ts, cases[i].dur);
	e = add_ev(&t, TRACE_PH_INSTANT, TRACE_CAT_MARK, "i_mark", 6, 2500, 0);
	e->tid = 7;
	e = add_ev(&t, TRACE_PH_FLOW_START, TRACE_CAT_AC2G, "launch", 6, 3000, 0);
	e->id = 77;
	e = add_ev(&t, TRACE_PH_FLOW_END, TRACE_CAT_AC2G, "launch", 6, 4000, 0);
	e->id = 77;
	e->pid = 0;
	e->tid = 7000001;
	add_x(&t, TRACE_CAT_USER_ANNOTATION, "c_user", 1, 1);
	add_x(&t, TRACE_CAT_GPU_MEMCPY, "c_memcpy", 1, 1);
	add_x(&t, TRACE_CAT_CUDA_RUNTIME, "c_runtime", 1, 1);
	e = add_x(&t, TRACE_CAT_COUNT + 3, "c_bogus", 1, 1); /* out of range */
	e->pid = -1;

	root = write_and_parse(&t, "times.json", 0, &text);
	if (!root) {
		trace_done(&t);
		free(text);
		return;
	}
	/* events + process_name (no threads here) */
	CHECK_EQ_INT(cJSON_GetArraySize(events_of(root)), t.nev + 1);
	for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		ev = find_event(root, cases[i].name, "X");
		CHECK(ev != NULL);
		CHECK_EQ_STR(raw_field(text, cases[i].name, "ts", raw, sizeof raw),
			     cases[i].raw_ts);
		CHECK_EQ_STR(raw_field(text, cases[i].name, "dur", raw, sizeof raw),
			     cases[i].raw_dur);
		CHECK_EQ_STR(str_of(ev, "cat"), "kernel");
		CHECK_EQ_INT(num_of(ev, "pid"), 100);
		CHECK_EQ_INT(num_of(ev, "tid"), 101);
		/* no args and no flags: no "args" member at all */
		CHECK(cJSON_GetObjectItemCaseSensitive(ev, "args") == NULL);
	}
	CHECK(fabs(num_of(find_event(root, "t_basic", NULL), "ts") - 1234.567) < 1e-9);
	CHECK(fabs(num_of(find_event(root, "t_neg", NULL), "ts") + 1.5) < 1e-12);

	ev = find_event(root, "i_mark", NULL);
	CHECK(ev != NULL);
	CHECK_EQ_STR(str_of(ev, "ph"), "i");
	CHECK_EQ_STR(str_of(ev, "s"), "t");
	CHECK_EQ_STR(str_of(ev, "cat"), "user_annotation");
	CHECK_EQ_INT(num_of(ev, "tid"), 7);
	CHECK_EQ_STR(raw_field(text, "i_mark", "ts", raw, sizeof raw), "2.500");
	CHECK(cJSON_GetObjectItemCaseSensitive(ev, "dur") == NULL);

	ev = find_event(root, "launch", "s");
	CHECK(ev != NULL);
	CHECK_EQ_STR(str_of(ev, "cat"), "ac2g");
	CHECK_EQ_INT(num_of(ev, "id"), 77);
	CHECK(fabs(num_of(ev, "ts") - 3.0) < 1e-12);
	CHECK(cJSON_GetObjectItemCaseSensitive(ev, "bp") == NULL);
	CHECK(cJSON_GetObjectItemCaseSensitive(ev, "dur") == NULL);
	ev = find_event(root, "launch", "f");
	CHECK(ev != NULL);
	CHECK_EQ_STR(str_of(ev, "cat"), "ac2g");
	CHECK_EQ_INT(num_of(ev, "id"), 77);
	CHECK_EQ_STR(str_of(ev, "bp"), "e");
	CHECK_EQ_INT(num_of(ev, "pid"), 0);
	CHECK_EQ_INT(num_of(ev, "tid"), 7000001);
	CHECK(cJSON_GetObjectItemCaseSensitive(ev, "dur") == NULL);

	CHECK_EQ_STR(str_of(find_event(root, "c_user", NULL), "cat"), "user_annotation");
	CHECK_EQ_STR(str_of(find_event(root, "c_memcpy", NULL), "cat"), "gpu_memcpy");
	CHECK_EQ_STR(str_of(find_event(root, "c_runtime", NULL), "cat"), "cuda_runtime");
	CHECK(str_of(find_event(root, "c_bogus", NULL), "cat") != NULL);
	CHECK_EQ_INT(num_of(find_event(root, "c_bogus", NULL), "pid"), -1);
	cJSON_Delete(root);
	free(text);
	trace_done(&t);
}

static void test_args_and_flags(void)
{
	struct trace t;
	struct trace_event *e;
	struct trace_arg *a;
	cJSON *root, *ev, *args;
	char *text = NULL, raw[64];

	trace_new(&t);
	e = add_x(&t, TRACE_CAT_KERNEL, "k_args", 1000, 2000);
	(void)e;
	a = add_arg(&t, "grid", TRACE_ARG_INT);
	a->v.i = -5;
	a = add_arg(&t, "correlation", TRACE_ARG_UINT);
	a->v.u = 18446744073709551615ULL;
	a = add_arg(&t, "ratio", TRACE_ARG_DOUBLE);
	a->v.d = 0.1;
	a = add_arg(&t, "third", TRACE_ARG_DOUBLE);
	a->v.d = 1.0 / 3.0;
	a = add_arg(&t, "huge", TRACE_ARG_DOUBLE);
	a->v.d = 1e300;
	a = add_arg(&t, "nan", TRACE_ARG_DOUBLE);
	a->v.d = NAN;
	a = add_arg(&t, "inf", TRACE_ARG_DOUBLE);
	a->v.d = -INFINITY;
	a = add_arg(&t, "device", TRACE_ARG_STR);
	a->v.str = put_cstr(&t, "cuda:\"0\"\n");
	a = add_arg(&t, "k\"ey", TRACE_ARG_INT);
	a->v.i = 0;

	e = add_x(&t, TRACE_CAT_USER_ANNOTATION, "r_clipped", 0, 10);
	e->flags = TRACE_F_CLIPPED_START | TRACE_F_CLIPPED_END;
	e = add_x(&t, TRACE_CAT_USER_ANNOTATION, "ProfilerStep#12", 0, 10);
	e->flags = TRACE_F_STEP | TRACE_F_PARTIAL;
	a = add_arg(&t, "step", TRACE_ARG_UINT);
	a->v.u = 12;
	e = add_x(&t, TRACE_CAT_USER_ANNOTATION, "r_stepflag", 0, 10);
	e->flags = TRACE_F_STEP; /* not a user-visible arg */

	root = write_and_parse(&t, "args.json", 0, &text);
	if (!root) {
		trace_done(&t);
		free(text);
		return;
	}
	ev = find_event(root, "k_args", NULL);
	args = cJSON_GetObjectItemCaseSensitive(ev, "args");
	CHECK(cJSON_IsObject(args));
	CHECK_EQ_INT(cJSON_GetArraySize(args), 9);
	CHECK_EQ_INT(num_of(args, "grid"), -5);
	CHECK(num_of(args, "correlation") == 18446744073709551615.0);
	CHECK(text && strstr(text, "\"correlation\":18446744073709551615,") != NULL);
	CHECK(num_of(args, "ratio") == 0.1);
	CHECK(text && strstr(text, "\"ratio\":0.1,") != NULL);
	CHECK(num_of(args, "third") == 1.0 / 3.0); /* round-trips exactly */
	CHECK(num_of(args, "huge") == 1e300);
	CHECK(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(args, "nan")));
	CHECK(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(args, "inf")));
	CHECK_EQ_STR(str_of(args, "device"), "cuda:\"0\"\n");
	CHECK(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(args, "k\"ey")));
	CHECK(cJSON_GetObjectItemCaseSensitive(args, "clipped_start") == NULL);

	ev = find_event(root, "r_clipped", NULL);
	args = cJSON_GetObjectItemCaseSensitive(ev, "args");
	CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(args, "clipped_start")));
	CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(args, "clipped_end")));
	CHECK(cJSON_GetObjectItemCaseSensitive(args, "partial") == NULL);
	CHECK_EQ_INT(cJSON_GetArraySize(args), 2);

	ev = find_event(root, "ProfilerStep#12", NULL);
	args = cJSON_GetObjectItemCaseSensitive(ev, "args");
	CHECK_EQ_INT(num_of(args, "step"), 12);
	CHECK(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(args, "partial")));
	CHECK_EQ_INT(cJSON_GetArraySize(args), 2);
	CHECK_EQ_STR(raw_field(text, "ProfilerStep#12", "dur", raw, sizeof raw), "0.010");

	ev = find_event(root, "r_stepflag", NULL);
	CHECK(ev != NULL && cJSON_GetObjectItemCaseSensitive(ev, "args") == NULL);
	cJSON_Delete(root);
	free(text);
	trace_done(&t);
}

static void test_metadata_events(void)
{
	struct trace t;
	cJSON *root, *ev, *arr;
	int nthread_name = 0, nsort = 0, nproc = 0;

	trace_new(&t);
	add_x(&t, TRACE_CAT_CPU_OP, "op", 0, 1);
	add_thread(&t, 100, 101, "main");
	add_thread(&t, 100, 205, "dataloader \"w\"\n");
	add_thread(&t, 0, 7000001, "stream 7");
	root = write_and_parse(&t, "meta.json", 0, NULL);
	if (!root) {
		trace_done(&t);
		return;
	}
	arr = events_of(root);
	CHECK_EQ_INT(cJSON_GetArraySize(arr), 1 + 1 + 2 * 3);
	cJSON_ArrayForEach(ev, arr) {
		const char *name = str_of(ev, "name");
		cJSON *args = cJSON_GetObjectItemCaseSensitive(ev, "args");
		int tid = (int)num_of(ev, "tid");

		if (!name || strcmp(str_of(ev, "ph"), "M") != 0)
			continue;
		if (strcmp(name, "process_name") == 0) {
			nproc++;
			CHECK_EQ_INT(num_of(ev, "pid"), 100);
			CHECK_EQ_INT(tid, 0);
			CHECK_EQ_STR(str_of(args, "name"), "train.py");
		} else if (strcmp(name, "thread_name") == 0) {
			nthread_name++;
			if (tid == 101) {
				CHECK_EQ_STR(str_of(args, "name"), "main");
			} else if (tid == 205) {
				CHECK_EQ_STR(str_of(args, "name"), "dataloader \"w\"\n");
			} else {
				CHECK_EQ_INT(tid, 7000001);
				CHECK_EQ_INT(num_of(ev, "pid"), 0);
				CHECK_EQ_STR(str_of(args, "name"), "stream 7");
			}
		} else if (strcmp(name, "thread_sort_index") == 0) {
			nsort++;
			CHECK(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(args, "sort_index")));
			if (tid == 101)
				CHECK_EQ_INT(num_of(args, "sort_index"), 0);
			if (tid == 7000001)
				CHECK_EQ_INT(num_of(args, "sort_index"), 2);
		}
	}
	CHECK_EQ_INT(nproc, 1);
	CHECK_EQ_INT(nthread_name, 3);
	CHECK_EQ_INT(nsort, 3);
	cJSON_Delete(root);

	/* No events at all: still a valid document with the metadata. */
	t.nev = 0;
	root = write_and_parse(&t, "meta_empty.json", 0, NULL);
	if (root)
		CHECK_EQ_INT(cJSON_GetArraySize(events_of(root)), 1 + 2 * 3);
	cJSON_Delete(root);
	t.nthreads = 0;
	free(t.meta.program);
	t.meta.program = NULL;
	root = write_and_parse(&t, "empty.json", 0, NULL);
	if (root)
		CHECK_EQ_INT(cJSON_GetArraySize(events_of(root)), 0);
	cJSON_Delete(root);
	trace_done(&t);
}

/* One hostile name (NUL-free C strings): the bytes written and the string a
 * JSON reader must decode. */
struct hostile {
	const char *in;
	const char *want;
};

#define FFFD "\xEF\xBF\xBD"

static void test_hostile_names(void)
{
	static const struct hostile cases[] = {
		{ "q\"uo\"te", "q\"uo\"te" },
		{ "back\\slash\\", "back\\slash\\" },
		{ "line\nbreak\r\ttab", "line\nbreak\r\ttab" },
		{ "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80",
		  "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80" },
		{ "\xF4\x8F\xBF\xBF", "\xF4\x8F\xBF\xBF" }, /* U+10FFFF: valid */
		{ "del\x7f", "del\x7f" },
		/* bad lead bytes */
		{ "a\x80" "b", "a" FFFD "b" },
		{ "\xFF\xFE", FFFD FFFD },
		{ "\xF8\x88\x80\x80\x80", FFFD FFFD FFFD FFFD FFFD },
		/* overlongs */
		{ "\xC0\xAF", FFFD FFFD },
		{ "\xC1\xBF", FFFD FFFD },
		{ "\xE0\x80\xAF", FFFD FFFD FFFD },
		{ "\xF0\x80\x80\x80", FFFD FFFD FFFD FFFD },
		/* truncated */
		{ "x\xE2\x82", "x" FFFD },
		{ "\xE2\x82y", FFFD "y" },
		{ "\xF0\x9F\x98", FFFD },
		{ "\xC3", FFFD },
		/* surrogates */
		{ "\xED\xA0\x80", FFFD FFFD FFFD },
		{ "\xED\xBF\xBF", FFFD FFFD FFFD },
		/* above U+10FFFF */
		{ "\xF4\x90\x80\x80", FFFD FFFD FFFD FFFD },
		{ "\xF5\x80\x80\x80", FFFD FFFD FFFD FFFD },
	};
	size_t ncases = sizeof cases / sizeof cases[0];
	struct trace t;
	cJSON *root, *arr, *ev;
	char *text = NULL, controls[33], *big4k, *huge;
	size_t i, k;

	trace_new(&t);
	for (i = 0; i < ncases; i++) {
		struct trace_event *e =
			add_ev(&t, 'X', TRACE_CAT_CPU_OP, cases[i].in,
			       strlen(cases[i].in), 0, 1);
		e->tid = (int32_t)i; /* find it back by tid */
	}
	/* every control byte, DEL, then NUL last (cJSON decodes \u0000 as the
	 * end of its C string) */
	for (i = 1; i < 32; i++)
		controls[i - 1] = (char)i;
	controls[31] = 0x7f;
	controls[32] = '\0';
	add_ev(&t, 'X', TRACE_CAT_CPU_OP, controls, 33, 0, 1)->tid = 1000;
	/* an embedded NUL in the middle, length-delimited */
	add_ev(&t, 'X', TRACE_CAT_CPU_OP, "nul\0after", 9, 0, 1)->tid = 1001;
	/* 4 KiB of mixed content */
	big4k = xrealloc(NULL, 4096);
	for (i = 0; i < 4096; i++)
		big4k[i] = "ab\"\\\n\x01\xC3\xA9"[i % 8];
	add_ev(&t, 'X', TRACE_CAT_CPU_OP, big4k, 4096, 0, 1)->tid = 1002;
	/* 200 KiB of control bytes: escapes to 1.2 MB, far past every buffer */
	huge = xrealloc(NULL, 200 * 1024);
	memset(huge, 0x01, 200 * 1024);
	add_ev(&t, 'X', TRACE_CAT_CPU_OP, huge, 200 * 1024, 0, 1)->tid = 1003;
	/* a string arg and a thread name with invalid UTF-8 */
	add_arg(&t, "bad\xFF", TRACE_ARG_STR)->v.str = put_name(&t, "v\xED\xA0\x80", 4);
	add_thread(&t, 100, 1003, "thr\xC0");

	root = write_and_parse(&t, "hostile.json", 0, &text);
	if (!root) {
		trace_done(&t);
		free(big4k);
		free(huge);
		free(text);
		return;
	}
	arr = events_of(root);
	CHECK_EQ_INT(cJSON_GetArraySize(arr), t.nev + 1 + 2);
	cJSON_ArrayForEach(ev, arr) {
		int tid = (int)num_of(ev, "tid");
		const char *name = str_of(ev, "name");

		if (strcmp(str_of(ev, "ph"), "X") != 0)
			continue;
		CHECK(name != NULL);
		if (!name)
			continue;
		if (tid >= 0 && (size_t)tid < ncases) {
			if (strcmp(name, cases[tid].want) != 0)
				fprintf(stderr, "hostile case %d decoded wrong\n", tid);
			CHECK_EQ_STR(name, cases[tid].want);
		} else if (tid == 1000) {
			CHECK_EQ_STR(name, controls);
		} else if (tid == 1001) {
			CHECK_EQ_STR(name, "nul"); /* the C string ends at the NUL */
		} else if (tid == 1002) {
			size_t n = strlen(name);
			CHECK_EQ_INT(n, 4096);
			CHECK(n == 4096 && memcmp(name, big4k, 4096) == 0);
		} else if (tid == 1003) {
			cJSON *args = cJSON_GetObjectItemCaseSensitive(ev, "args");
			CHECK_EQ_INT(strlen(name), 200 * 1024);
			for (k = 0; k < 200 * 1024 && name[k] == 0x01; k++)
				;
			CHECK_EQ_INT(k, 200 * 1024);
			CHECK_EQ_STR(str_of(args, "bad" FFFD), "v" FFFD FFFD FFFD);
		} else {
			CHECK(0);
		}
	}
	/* The escapes themselves, as text. */
	CHECK(strstr(text, "\"name\":\"\\u0001\\u0002\\u0003\\u0004\\u0005\\u0006\\u0007"
			   "\\b\\t\\n\\u000b\\f\\r\\u000e") != NULL);
	CHECK(strstr(text, "\\u001f\\u007f\\u0000\"") != NULL);
	CHECK(strstr(text, "\"name\":\"nul\\u0000after\"") != NULL);
	CHECK(strstr(text, "\"caf\xC3\xA9 ") != NULL); /* passed through raw */
	ev = find_event(root, "thread_name", "M");
	CHECK_EQ_STR(str_of(cJSON_GetObjectItemCaseSensitive(ev, "args"), "name"),
		     "thr" FFFD);
	cJSON_Delete(root);
	free(text);
	free(big4k);
	free(huge);
	trace_done(&t);
}

/* chrome_writer_string alone, through a tiny document. */
static void test_string_api(void)
{
	char path[512];
	struct err e = { "" };
	struct outfile *f;
	char *text;
	size_t len;

	path_in_tmp(path, sizeof path, "string.json");
	f = outfile_open(path, false, &e);
	CHECK(f != NULL);
	if (!f)
		return;
	CHECK_EQ_INT(outfile_puts(f, "["), 0);
	CHECK_EQ_INT(chrome_writer_string(f, "a\"\\\x1f\xE2\x82 z", 8), 0);
	CHECK_EQ_INT(outfile_puts(f, ","), 0);
	CHECK_EQ_INT(chrome_writer_string(f, "", 0), 0);
	CHECK_EQ_INT(outfile_puts(f, ","), 0);
	/* length wins over NUL termination: only 3 of these bytes */
	CHECK_EQ_INT(chrome_writer_string(f, "abcdef", 3), 0);
	CHECK_EQ_INT(outfile_puts(f, "]"), 0);
	CHECK_EQ_INT(outfile_commit(f, &e), 0);
	text = slurp(path, &len);
	CHECK_EQ_STR(text, "[\"a\\\"\\\\\\u001f" FFFD " z\",\"\",\"abc\"]");
	free(text);
}

/* The same trace gzipped decompresses to exactly the plain document. */
static void test_gzip(void)
{
	struct trace t;
	char plain_path[512], gz_path[512], *plain, *unz;
	size_t plen = 0, glen = 0;
	unsigned char magic[2];
	struct stat sp, sg;
	cJSON *root;
	int i;

	trace_new(&t);
	for (i = 0; i < 20000; i++) {
		struct trace_event *e = add_x(&t, i % TRACE_CAT_COUNT, "kernel_x",
					      (int64_t)i * 1000, 500);
		e->tid = i % 4;
		add_arg(&t, "correlation", TRACE_ARG_UINT)->v.u = (uint64_t)i;
	}
	add_thread(&t, 100, 1, "main");
	root = write_and_parse(&t, "gz.json.gz", 1, NULL);
	if (root)
		CHECK_EQ_INT(cJSON_GetArraySize(events_of(root)), 20000 + 1 + 2);
	cJSON_Delete(root);
	root = write_and_parse(&t, "plain.json", 0, NULL);
	cJSON_Delete(root);
	path_in_tmp(plain_path, sizeof plain_path, "plain.json");
	path_in_tmp(gz_path, sizeof gz_path, "gz.json.gz");
	CHECK_EQ_INT(head_bytes(gz_path, magic, 2), 0);
	CHECK(magic[0] == 0x1f && magic[1] == 0x8b);
	plain = slurp(plain_path, &plen);
	unz = slurp(gz_path, &glen);
	CHECK(plain && unz && plen == glen && memcmp(plain, unz, plen) == 0);
	CHECK(stat(plain_path, &sp) == 0 && stat(gz_path, &sg) == 0 &&
	      sg.st_size < sp.st_size / 4);
	free(plain);
	free(unz);
	trace_done(&t);
}

/* An exact decimal "[-]I.FFF" (three decimals) as ns; -1 when not that. */
static int parse_us3(const char *raw, int64_t *ns)
{
	const char *dot = strchr(raw, '.');
	char *end;
	long long i;

	if (!dot || strlen(dot) != 4)
		return -1;
	i = strtoll(raw, &end, 10);
	if (end != dot)
		return -1;
	*ns = i * 1000 + (raw[0] == '-' ? -1 : 1) * strtoll(dot + 1, NULL, 10);
	return 0;
}

/* After export_unix_time(), ts is Unix time in Kineto's form:
 * baseTimeNanoseconds is the Unix time of the window's start floored to a
 * week, and baseTimeNanoseconds + ts is each event's Unix time, to the
 * nanosecond, one offset for the whole window; profhost.monotonic_offset_ns
 * takes ts back to the capture clock. */
static void test_wall_clock(void)
{
	struct trace t;
	cJSON *root;
	char *text = NULL, raw[64];
	int64_t wall0 = 1700000000123456789LL, base = WEEK * 2810, ns = 0, off;
	struct trace_step st = { 7, 6000000000LL, 5, 101, 0 };

	CHECK(trace_init(&t) == 0);
	t.meta.start_ts = 5000000000LL;           /* monotonic 5 s */
	t.meta.end_ts = 66000000000LL;
	off = wall0 - t.meta.start_ts;            /* Unix time of monotonic 0 */
	t.meta.base_time_ns = off;
	add_x(&t, TRACE_CAT_USER_ANNOTATION, "w_first", 5000000000LL, 1000);
	add_x(&t, TRACE_CAT_USER_ANNOTATION, "w_later", 65000000123LL, 7);
	add_x(&t, TRACE_CAT_USER_ANNOTATION, "w_before", 4999999999LL, 1);
	add_ev(&t, TRACE_PH_INSTANT, TRACE_CAT_MARK, "w_mark", 6, 6000000001LL, 0);
	CHECK(trace_add_step(&t, &st) == 0);
	export_unix_time(&t);
	CHECK_EQ_INT(t.meta.base_time_ns, base);
	CHECK_EQ_INT(t.meta.start_ts, wall0 - base);
	CHECK_EQ_INT(t.meta.end_ts, wall0 + 61000000000LL - base);
	CHECK_EQ_INT(t.steps[0].ts, off + 6000000000LL - base);
	CHECK_EQ_INT(t.meta.monotonic_offset_ns, base - off);
	export_unix_time(&t);                   /* a second call: no change */
	CHECK_EQ_INT(t.meta.base_time_ns, base);
	CHECK_EQ_INT(t.meta.start_ts, wall0 - base);
	root = write_and_parse(&t, "wall.json", 0, &text);
	CHECK(root != NULL);
	if (root) {
		CHECK(text && strstr(text, "\"baseTimeNanoseconds\":\t1699488000000000000,"));
		CHECK(raw_field(text, "w_first", "ts", raw, sizeof raw) &&
		      parse_us3(raw, &ns) == 0 && base + ns == wall0);
		CHECK(raw_field(text, "w_later", "ts", raw, sizeof raw) &&
		      parse_us3(raw, &ns) == 0 && base + ns == wall0 + 60000000123LL);
		CHECK(raw_field(text, "w_before", "ts", raw, sizeof raw) &&
		      parse_us3(raw, &ns) == 0 && base + ns == wall0 - 1);
		CHECK(raw_field(text, "w_mark", "ts", raw, sizeof raw) &&
		      parse_us3(raw, &ns) == 0 && base + ns == wall0 + 1000000001LL &&
		      ns + (base - off) == 6000000001LL);
		CHECK_EQ_STR(raw_field(text, "w_first", "dur", raw, sizeof raw), "1.000");
		CHECK(text && strstr(text, "\"monotonic_offset_ns\":\t-511995123456789,"));
	}
	cJSON_Delete(root);
	free(text);
	trace_free(&t);

	/* a week on, the next base; an event past INT64_MAX is held */
	CHECK(trace_init(&t) == 0);
	t.meta.start_ts = 5000000000LL;
	t.meta.base_time_ns = off + WEEK;
	add_x(&t, TRACE_CAT_USER_ANNOTATION, "w_first", 5000000000LL, 1000);
	add_x(&t, TRACE_CAT_KERNEL, "w_huge", INT64_MAX - 10, 5);
	export_unix_time(&t);
	CHECK_EQ_INT(t.meta.base_time_ns, base + WEEK);
	CHECK_EQ_INT(t.ev[0].ts, wall0 - base);
	CHECK_EQ_INT(t.ev[1].ts, INT64_MAX);
	trace_free(&t);
}

/* Readers add ts and dur as doubles: TensorBoard's plugin builds its tree
 * with end = ts + dur, speedscope does the same after subtracting the
 * first ts. Steps that touch must not overlap there, a range ending with
 * its step must not outlast it, and readers that round each field to
 * whole ns (Perfetto, profhost) must still read the exact duration.
 * Checked where export_unix_time() puts ts (up to a week, 6e11 us) with
 * thousands of pseudo-random durations. */
static void test_touching_spans(void)
{
	static const int64_t starts[] = {
		WEEK - 20000000000LL,  /* the end of a week */
		549755813888000LL,     /* 2^39 us */
		123456789012345LL,
		1234567890LL,
	};
	struct trace t;
	cJSON *root;
	size_t m, i, n = 1500;
	char name[32];
	uint64_t rng = 0x2545F4914F6CDD1DULL;

	for (m = 0; m < sizeof starts / sizeof starts[0]; m++) {
		int64_t ts = starts[m];
		double *sts = need(malloc(n * sizeof *sts)), *sdur = need(malloc(n * sizeof *sdur));
		double *cts = need(malloc(n * sizeof *cts)), *cdur = need(malloc(n * sizeof *cdur));
		int64_t *dur = need(malloc(n * sizeof *dur));
		size_t overshoot = 0, outlast = 0, inexact = 0, shifted = 0, touch = 0;
		double F;

		trace_new(&t);
		for (i = 0; i < n; i++) {
			rng ^= rng << 13;
			rng ^= rng >> 7;
			rng ^= rng << 17;
			dur[i] = 1 + (int64_t)(rng % 20000000); /* up to 20 ms */
			snprintf(name, sizeof name, "s%zu", i);
			add_x(&t, TRACE_CAT_USER_ANNOTATION, name, ts, dur[i])->flags = TRACE_F_STEP;
			snprintf(name, sizeof name, "c%zu", i); /* a range ending with it */
			add_x(&t, TRACE_CAT_USER_ANNOTATION, name, ts + dur[i] / 3,
			      dur[i] - dur[i] / 3);
			ts += dur[i];
		}
		root = write_and_parse(&t, "touch.json", 0, NULL);
		CHECK(root != NULL);
		/* written in order: s0, c0, s1, c1, ... */
		for (i = 0; root && i < n; i++) {
			cJSON *s = cJSON_GetArrayItem(events_of(root), (int)(2 * i));
			cJSON *c = s ? s->next : NULL;

			snprintf(name, sizeof name, "s%zu", i);
			if (!c || !str_of(s, "name") || strcmp(str_of(s, "name"), name) != 0) {
				CHECK(!"the events are in their order");
				break;
			}
			sts[i] = num_of(s, "ts");
			sdur[i] = num_of(s, "dur");
			cts[i] = num_of(c, "ts");
			cdur[i] = num_of(c, "dur");
			inexact += llround(sdur[i] * 1000.0) != dur[i] ||
				   llround(cdur[i] * 1000.0) != dur[i] - dur[i] / 3;
			outlast += cts[i] + cdur[i] > sts[i] + sdur[i];
		}
		F = sts[0]; /* speedscope subtracts the first ts */
		for (i = 0; root && i < n; i++) {
			shifted += (cts[i] - F) + cdur[i] > (sts[i] - F) + sdur[i];
			if (i + 1 < n) {
				overshoot += sts[i] + sdur[i] > sts[i + 1];
				touch += sts[i] + sdur[i] != sts[i + 1];
				shifted += (sts[i] - F) + sdur[i] > sts[i + 1] - F;
			}
		}
		CHECK_EQ_INT(overshoot, 0);
		CHECK_EQ_INT(touch, 0);
		CHECK_EQ_INT(outlast, 0);
		/* speedscope's shift is exact where every ts is within twice the
		 * first (Sterbenz), as in Unix time: not for the small start */
		if (ts < 2 * starts[m])
			CHECK_EQ_INT(shifted, 0);
		CHECK_EQ_INT(inexact, 0);
		cJSON_Delete(root);
		trace_done(&t);
		free(sts);
		free(sdur);
		free(cts);
		free(cdur);
		free(dur);
	}
}

/* A span of test_nested_ends' trees: its extent in ns and its parent's
 * index (-1: a root). */
struct nspan {
	int64_t ts, end;
	long parent;
};

/* xorshift64: the tests' pseudo-random numbers, reproducible. */
static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Adds span [ts, end] under `parent` and a random tree of spans in it, as
 * a training step's ranges, module calls and operators nest: children
 * start at or after their parent's start and end at or before its end,
 * often exactly with it (a loss module ending with the forward phase, the
 * last operator of a module), and some have their parent's whole extent
 * (a root module and the forward phase). Categories vary, none flagged:
 * only nesting decides how a duration is written. */
static void add_tree(struct trace *t, struct nspan *sp, size_t *n, size_t max, uint64_t *s,
		     long parent, int64_t ts, int64_t end, int depth)
{
	static const int cats[] = { TRACE_CAT_USER_ANNOTATION, TRACE_CAT_PYTHON_FUNCTION,
				    TRACE_CAT_CPU_OP };
	long me = (long)*n;
	int64_t cur = ts;
	char name[32];

	if (*n >= max)
		return;
	snprintf(name, sizeof name, "n%ld", me);
	add_x(t, cats[rnd(s) % 3], name, ts, end - ts);
	sp[*n].ts = ts;
	sp[*n].end = end;
	sp[*n].parent = parent;
	(*n)++;
	while (depth < 5 && cur < end && *n < max) {
		uint64_t r = rnd(s) % 8;
		int64_t a = r < 2 ? cur : cur + (int64_t)(rnd(s) % (uint64_t)(end - cur)), b;

		if (a >= end)
			break;
		r = rnd(s) % 4;
		b = r == 0 ? end : a + 1 + (int64_t)(rnd(s) % (uint64_t)(end - a));
		add_tree(t, sp, n, max, s, me, a, b, depth + 1);
		if (b == end || rnd(s) % 3 == 0)
			break;
		cur = b; /* the next one touches it, or starts later */
	}
}

/* Readers that add ts and dur as doubles (TensorBoard's plugin as they
 * are, speedscope after subtracting its thread's first ts) must never see
 * an event end after an event that holds it, whatever holds it: one rule
 * for every nesting (fmt_dur, cw_holders), not a case per kind of event.
 * Random trees of spans at the magnitudes export_unix_time() gives ts, the
 * trace written as built (not in nesting order) and sorted; in doubles as
 * the file reads, plain and shifted by the thread's first ts, every event
 * ends no later than each of its ancestors of another extent, a span that
 * touches the next one ends no later than it starts, and each duration
 * still rounds to its exact ns. */
static void test_nested_ends(void)
{
	static const int64_t starts[] = {
		WEEK - 20000000000LL,  /* the end of a week */
		549755813888000LL,     /* 2^39 us */
		123456789012345LL,
	};
	enum { MAX = 6000 };
	struct nspan *sp = need(malloc(MAX * sizeof *sp));
	double *eabs = need(malloc(MAX * sizeof *eabs)), *esh = need(malloc(MAX * sizeof *esh));
	double *tsd = need(malloc(MAX * sizeof *tsd));
	uint64_t s = 0x9E3779B97F4A7C15ULL;
	size_t m, sorted;

	for (m = 0; m < sizeof starts / sizeof starts[0]; m++) {
		for (sorted = 0; sorted < 2; sorted++) {
			struct trace t;
			cJSON *root, *ev, *arr;
			size_t n = 0, i, late = 0, late_shifted = 0, overlap = 0, inexact = 0;
			size_t seen = 0;
			int64_t ts = starts[m];
			double F = INFINITY;

			trace_new(&t);
			while (n < MAX - 64) {
				int64_t len = 1000 + (int64_t)(rnd(&s) % 20000000); /* up to 20 ms */

				add_tree(&t, sp, &n, MAX, &s, -1, ts, ts + len, 0);
				ts += len; /* the next tree touches this one */
			}
			if (sorted)
				trace_sort(&t);
			root = write_and_parse(&t, "nested.json", 0, NULL);
			CHECK(root != NULL);
			arr = root ? events_of(root) : NULL;
			cJSON_ArrayForEach(ev, arr) {
				const char *nm = str_of(ev, "name");
				long k = nm && nm[0] == 'n' ? strtol(nm + 1, NULL, 10) : -1;

				if (k < 0 || (size_t)k >= n)
					continue;
				tsd[k] = num_of(ev, "ts");
				eabs[k] = num_of(ev, "dur"); /* for now: the duration */
				inexact += llround(eabs[k] * 1000.0) != sp[k].end - sp[k].ts;
				if (tsd[k] < F)
					F = tsd[k];
				seen++;
			}
			CHECK_EQ_INT(seen, n);
			for (i = 0; i < n; i++) {
				double dur = eabs[i];

				eabs[i] = tsd[i] + dur;
				esh[i] = (tsd[i] - F) + dur; /* speedscope's */
			}
			for (i = 0; i < n; i++) {
				long a;

				for (a = sp[i].parent; a >= 0; a = sp[a].parent) {
					if (sp[a].ts == sp[i].ts && sp[a].end == sp[i].end)
						continue; /* the same extent: either holds */
					late += eabs[i] > eabs[a];
					late_shifted += esh[i] > esh[a];
				}
				if (i + 1 < n && sp[i + 1].ts >= sp[i].end) /* what follows it */
					overlap += eabs[i] > tsd[i + 1] || esh[i] > tsd[i + 1] - F;
			}
			CHECK_EQ_INT(late, 0);
			CHECK_EQ_INT(late_shifted, 0);
			CHECK_EQ_INT(overlap, 0);
			CHECK_EQ_INT(inexact, 0);
			cJSON_Delete(root);
			trace_done(&t);
		}
	}
	free(sp);
	free(eabs);
	free(esh);
	free(tsd);
}

/* Adds a cpu_sample instant as the sampler does (trace API). */
static void add_sample(struct trace *t, int32_t tid, int64_t ts, const char *stack,
		       uint64_t weight)
{
	struct trace_event e = { 0 };
	const char *leaf = strrchr(stack, ';');

	leaf = leaf ? leaf + 1 : stack;
	e.ts = ts;
	e.pid = 100;
	e.tid = tid;
	e.cat = TRACE_CAT_SAMPLE;
	e.ph = TRACE_PH_INSTANT;
	e.name = trace_intern(t, leaf, strlen(leaf));
	CHECK(trace_add_event(t, &e) != NULL);
	CHECK(trace_arg_str(t, TRACE_ARG_STACK, stack, strlen(stack)) == 0);
	CHECK(trace_arg_uint(t, "weight", weight) == 0);
}

/* The folded stack of sample `smp` from the file's stackFrames. */
static void fold_sample(cJSON *root, cJSON *smp, char *out, size_t size)
{
	cJSON *frames = cJSON_GetObjectItemCaseSensitive(root, "stackFrames");
	const char *names[64];
	int n = 0, id = (int)num_of(smp, "sf");
	size_t o = 0;
	char key[32];

	out[0] = '\0';
	while (id > 0 && n < 64) {
		cJSON *fr;

		snprintf(key, sizeof key, "%d", id);
		fr = cJSON_GetObjectItemCaseSensitive(frames, key);
		if (!fr)
			return;
		names[n++] = str_of(fr, "name");
		id = cJSON_GetObjectItemCaseSensitive(fr, "parent")
			? (int)num_of(fr, "parent") : 0;
	}
	while (n-- > 0)
		o += (size_t)snprintf(out + o, size > o ? size - o : 0, "%s%s",
				      names[n] ? names[n] : "?", n ? ";" : "");
}

/* CPU samples also go in the Trace Event Format's "stackFrames" and
 * "samples" (chrome://tracing's and speedscope's sampled views): each
 * sample's frames chain up from its "sf" to the stack it was taken with,
 * ids start at 1 (speedscope reads 0 as "no frame"), samples come by
 * thread and time; the cpu_sample instants stay (Perfetto reads them). A
 * trace without samples has neither key. */
static void test_samples(void)
{
	static const struct {
		int32_t tid;
		int64_t ts;
		const char *stack;
		uint64_t weight;
	} in[] = {
		{ 2, 5000, "main;run;\"quoted\" \\ name", 1 },
		{ 1, 3000, "main;run;spin", 4 },
		{ 1, 1000, "main;run;spin", 1 },
		{ 1, 2000, "main;wait", 2 },
		{ 2, 4000, "main;run;spin", 1 },
	};
	static const int order[] = { 2, 3, 1, 4, 0 }; /* by tid, then ts */
	struct trace t;
	cJSON *root, *arr, *smp, *frames, *fr;
	char folded[512], key[16];
	size_t i, instants = 0;
	int ids = 0;

	CHECK(trace_init(&t) == 0);
	t.meta.pid = 100;
	t.meta.program = xstrdup("p");
	for (i = 0; i < sizeof in / sizeof in[0]; i++)
		add_sample(&t, in[i].tid, in[i].ts, in[i].stack, in[i].weight);
	root = write_and_parse(&t, "samples.json", 0, NULL);
	CHECK(root != NULL);
	if (root) {
		frames = cJSON_GetObjectItemCaseSensitive(root, "stackFrames");
		arr = cJSON_GetObjectItemCaseSensitive(root, "samples");
		CHECK(cJSON_IsObject(frames) && cJSON_IsArray(arr));
		CHECK_EQ_INT(cJSON_GetArraySize(arr), 5);
		i = 0;
		cJSON_ArrayForEach(smp, arr) {
			const int k = i < 5 ? order[i] : 0;

			fold_sample(root, smp, folded, sizeof folded);
			CHECK_EQ_STR(folded, in[k].stack);
			CHECK_EQ_INT(num_of(smp, "tid"), in[k].tid);
			CHECK_EQ_INT(num_of(smp, "pid"), 100);
			CHECK(fabs(num_of(smp, "ts") - in[k].ts / 1000.0) < 1e-12);
			CHECK_EQ_INT(num_of(smp, "weight"), in[k].weight);
			CHECK(num_of(smp, "sf") >= 1);
			i++;
		}
		/* main, run, the quoted one, spin, wait: shared prefixes once */
		cJSON_ArrayForEach(fr, frames) {
			ids++;
			snprintf(key, sizeof key, "%d", ids);
			CHECK_EQ_STR(fr->string, key);
			CHECK(cJSON_GetObjectItemCaseSensitive(fr, "parent") == NULL ||
			      num_of(fr, "parent") < ids);
		}
		CHECK_EQ_INT(ids, 5);
		cJSON_ArrayForEach(smp, events_of(root))
			instants += str_of(smp, "cat") && !strcmp(str_of(smp, "cat"), "cpu_sample");
		CHECK_EQ_INT(instants, 5);
	}
	cJSON_Delete(root);
	trace_free(&t);

	/* no samples, no keys (speedscope would show an empty profile) */
	CHECK(trace_init(&t) == 0);
	{
		struct trace_event e = { 0 };

		e.ts = 1000;
		e.dur = 5;
		e.ph = TRACE_PH_COMPLETE;
		e.name = trace_intern(&t, "r", 1);
		CHECK(trace_add_event(&t, &e) != NULL);
	}
	root = write_and_parse(&t, "nosamples.json", 0, NULL);
	CHECK(root && !cJSON_GetObjectItemCaseSensitive(root, "samples") &&
	      !cJSON_GetObjectItemCaseSensitive(root, "stackFrames"));
	cJSON_Delete(root);
	trace_free(&t);
}

/* Many events: the count survives every buffer boundary. */
static void test_many_events(void)
{
	struct trace t;
	cJSON *root, *arr, *last;
	int i;

	trace_new(&t);
	for (i = 0; i < 60000; i++)
		add_x(&t, TRACE_CAT_KERNEL, i % 2 ? "odd" : "even", i, 1);
	root = write_and_parse(&t, "many.json", 0, NULL);
	if (root) {
		arr = events_of(root);
		CHECK_EQ_INT(cJSON_GetArraySize(arr), 60000 + 1);
		last = cJSON_GetArrayItem(arr, 59999);
		CHECK(fabs(num_of(last, "ts") - 59.999) < 1e-9);
	}
	cJSON_Delete(root);
	trace_done(&t);
}

/*
 * More names than the cache of escaped names indexes (2^18 ids): the names
 * past it are escaped as they are written, the same bytes, each use of a
 * name alike.
 */
static void test_names_past_cache(void)
{
	enum { NNAMES = 270000 };
	static const int probe[] = { 0, 1, 262143, 262144, 269999 };
	struct trace t;
	cJSON *root, *arr;
	char name[64];
	size_t k;
	int i;

	trace_new(&t);
	for (i = 0; i < NNAMES; i++) {
		snprintf(name, sizeof name, "n\"%d\\\n", i);
		add_x(&t, TRACE_CAT_CPU_OP, name, i, 1);
	}
	for (k = 0; k < sizeof probe / sizeof probe[0]; k++) { /* each once more */
		snprintf(name, sizeof name, "n\"%d\\\n", probe[k]);
		add_x(&t, TRACE_CAT_CPU_OP, name, NNAMES + (int)k, 1);
	}
	CHECK(t.names.n >= NNAMES);
	root = write_and_parse(&t, "names.json", 0, NULL);
	if (root) {
		arr = events_of(root);
		for (k = 0; k < sizeof probe / sizeof probe[0]; k++) {
			snprintf(name, sizeof name, "n\"%d\\\n", probe[k]);
			CHECK_EQ_STR(str_of(cJSON_GetArrayItem(arr, probe[k]), "name"), name);
			CHECK_EQ_STR(str_of(cJSON_GetArrayItem(arr, NNAMES + (int)k), "name"),
				     name);
		}
	}
	cJSON_Delete(root);
	trace_done(&t);
}

/* Removes the files the tests left in tmpdir, then tmpdir. */
static void cleanup(void)
{
	static const char *const names[] = {
		"atomic.txt", "large.txt", "large.gz", "header.json", "header2.json",
		"times.json", "args.json", "meta.json", "meta_empty.json", "empty.json",
		"hostile.json", "string.json", "gz.json.gz", "plain.json", "many.json",
		"wall.json", "wall2.json", "touch.json", "samples.json", "nosamples.json",
		"names.json", "nested.json",
	};
	char path[512];
	size_t i;

	for (i = 0; i < sizeof names / sizeof names[0]; i++) {
		path_in_tmp(path, sizeof path, names[i]);
		unlink(path);
	}
	if (rmdir(tmpdir) != 0)
		fprintf(stderr, "leftover files in %s\n", tmpdir);
}

int main(void)
{
	const char *base = getenv("TMPDIR");

	snprintf(tmpdir, sizeof tmpdir, "%s/test_chrome_writer.XXXXXX",
		 base && base[0] ? base : "/tmp");
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 2;
	}
	test_outfile_atomic();
	test_outfile_missing_dir();
	test_outfile_large(0);
	test_outfile_large(1);
	test_outfile_write_error();
	test_header();
	test_times_and_phases();
	test_wall_clock();
	test_touching_spans();
	test_nested_ends();
	test_samples();
	test_args_and_flags();
	test_metadata_events();
	test_hostile_names();
	test_string_api();
	test_gzip();
	test_many_events();
	test_names_past_cache();
	cleanup();
	return check_done();
}

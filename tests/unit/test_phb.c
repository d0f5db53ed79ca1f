/*
 * test_phb — capture.phb: a trace written and read back is the same trace;
 * corrupt and truncated files give one error naming the file and an
 * offset, never a crash (thousands of deterministic mutations of a valid
 * file; tests/fuzz/ has the open-ended fuzzer). Also the JSON reader on
 * the Chrome writer's own output. Files of version 1.0 (before the GPU
 * tracks and properties) still read.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "events/trace.h"
#include "export/chrome_writer.h"
#include "export/export.h"
#include "export/outfile.h"
#include "export/phb.h"
#include "read/phb_read.h"
#include "util/fsutil.h"
#include "read/trace_json.h"

static char tmpdir[] = "/tmp/profhost-test-phb-XXXXXX";

/* A trace with every kind of content: names with odd bytes, all arg
 * types, flags, steps (one partial), threads, a sample. */
static void build(struct trace *t)
{
	struct trace_event e = { 0 };
	struct trace_step s = { 0 };
	int i;

	trace_init(t);
	t->meta.rank = 3;
	t->meta.world_size = 8;
	t->meta.window = 2;
	t->meta.first_step = 40;
	t->meta.last_step = 42;
	t->meta.start_ts = 1000;
	t->meta.end_ts = 900000;
	t->meta.base_time_ns = 1700000000123456789LL;
	t->meta.monotonic_offset_ns = -1696186000000000000LL;
	t->meta.pid = 77;
	t->meta.program = strdup("train \"x\"");
	t->meta.hostname = strdup("node\n1");
	t->meta.run = strdup("run-1");
	t->meta.reason = NULL;
	t->counters.dropped_buffer = 5;
	t->counters.gpu_dropped = 1ULL << 40;
	for (i = 0; i < 50; i++) {
		char name[32];

		snprintf(name, sizeof name, "range%d\x01\xff", i % 7);
		e.ts = 1000 + i * 100;
		e.dur = i * 3;
		e.id = (uint64_t)i << 33;
		e.pid = i % 2 ? 77 : 0;
		e.tid = -i;
		e.name = trace_intern(t, name, strlen(name));
		e.cat = (uint8_t)(i % TRACE_CAT_COUNT);
		e.ph = i % 5 == 0 ? TRACE_PH_INSTANT : TRACE_PH_COMPLETE;
		e.flags = (uint32_t)(i % 16);
		trace_add_event(t, &e);
		if (i % 3 == 0) {
			trace_arg_int(t, "n", -i);
			trace_arg_uint(t, "u", UINT64_MAX - (uint64_t)i);
			trace_arg_double(t, "d", i / 3.0);
			trace_arg_str(t, "stack", "a;b;c", 5);
		}
	}
	for (i = 0; i < 3; i++) {
		s.step = 40 + (uint64_t)i;
		s.ts = 1000 + i * 1000;
		s.dur = 999;
		s.tid = 77;
		s.partial = i == 2;
		trace_add_step(t, &s);
	}
	trace_add_thread(t, 77, 77, "main");
	trace_add_thread(t, 77, 78, "");
	trace_add_process(t, 0, "GPU 0 (NVIDIA \"H100\")", 5000000);
	trace_add_process(t, 1, "GPU 1", 5000001);
	{
		struct trace_device d = { 1, "NVIDIA H100 80GB HBM3", 85520809984ULL, 9, 0,
					  1024, 2048, 65536, 65536, 32, 49152, 233472, 132 };

		trace_add_device(t, &d);
		d.id = 0;
		d.name = NULL;
		d.num_sms = -1;
		trace_add_device(t, &d);
	}
}

static int same_str(const char *a, const char *b)
{
	if (!a || !b)
		return a == b;
	return strcmp(a, b) == 0;
}

/* Compares two traces field by field (strings by content). */
static void check_same(const struct trace *a, const struct trace *b)
{
	size_t i, k;

	CHECK_EQ_INT(a->nev, b->nev);
	CHECK_EQ_INT(a->nargs, b->nargs);
	CHECK_EQ_INT(a->nsteps, b->nsteps);
	CHECK_EQ_INT(a->nthreads, b->nthreads);
	CHECK_EQ_INT(a->meta.rank, b->meta.rank);
	CHECK_EQ_INT(a->meta.world_size, b->meta.world_size);
	CHECK_EQ_INT(a->meta.window, b->meta.window);
	CHECK_EQ_INT(a->meta.first_step, b->meta.first_step);
	CHECK_EQ_INT(a->meta.last_step, b->meta.last_step);
	CHECK_EQ_INT(a->meta.start_ts, b->meta.start_ts);
	CHECK_EQ_INT(a->meta.end_ts, b->meta.end_ts);
	CHECK_EQ_INT(a->meta.base_time_ns, b->meta.base_time_ns);
	CHECK_EQ_INT(a->meta.monotonic_offset_ns, b->meta.monotonic_offset_ns);
	CHECK_EQ_INT(a->meta.pid, b->meta.pid);
	CHECK(same_str(a->meta.program, b->meta.program));
	CHECK(same_str(a->meta.hostname, b->meta.hostname));
	CHECK(same_str(a->meta.run, b->meta.run));
	CHECK(same_str(a->meta.reason, b->meta.reason));
	CHECK(memcmp(&a->counters, &b->counters, sizeof a->counters) == 0);
	for (i = 0; i < a->nev && i < b->nev; i++) {
		const struct trace_event *x = &a->ev[i], *y = &b->ev[i];
		int same = x->ts == y->ts && x->dur == y->dur && x->id == y->id &&
			   x->pid == y->pid && x->tid == y->tid && x->cat == y->cat &&
			   x->ph == y->ph && x->flags == y->flags && x->nargs == y->nargs &&
			   x->args == y->args &&
			   strcmp(trace_str(a, x->name), trace_str(b, y->name)) == 0;

		CHECK(same);
		if (!same)
			fprintf(stderr, "event %zu: ts %lld/%lld dur %lld/%lld id %llu/%llu pid %d/%d tid %d/%d cat %d/%d ph %d/%d flags %u/%u nargs %d/%d args %u/%u\n",
				i, (long long)x->ts, (long long)y->ts, (long long)x->dur, (long long)y->dur,
				(unsigned long long)x->id, (unsigned long long)y->id, x->pid, y->pid,
				x->tid, y->tid, x->cat, y->cat, x->ph, y->ph, x->flags, y->flags,
				x->nargs, y->nargs, x->args, y->args);
		for (k = 0; same && k < x->nargs; k++) {
			const struct trace_arg *p = &a->args[x->args + k], *q = &b->args[y->args + k];

			CHECK(p->type == q->type);
			CHECK_EQ_STR(trace_str(a, p->key), trace_str(b, q->key));
			if (p->type == TRACE_ARG_STR)
				CHECK_EQ_STR(trace_str(a, p->v.str), trace_str(b, q->v.str));
			else
				CHECK(p->v.u == q->v.u);
		}
	}
	for (i = 0; i < a->nsteps && i < b->nsteps; i++)
		CHECK(a->steps[i].step == b->steps[i].step && a->steps[i].ts == b->steps[i].ts &&
		      a->steps[i].dur == b->steps[i].dur && a->steps[i].tid == b->steps[i].tid &&
		      !a->steps[i].partial == !b->steps[i].partial);
	for (i = 0; i < a->nthreads && i < b->nthreads; i++)
		CHECK(a->threads[i].tid == b->threads[i].tid &&
		      strcmp(trace_str(a, a->threads[i].name), trace_str(b, b->threads[i].name)) == 0);
	CHECK_EQ_INT(a->nprocs, b->nprocs);
	for (i = 0; i < a->nprocs && i < b->nprocs; i++)
		CHECK(a->procs[i].pid == b->procs[i].pid && a->procs[i].sort == b->procs[i].sort &&
		      strcmp(trace_str(a, a->procs[i].name), trace_str(b, b->procs[i].name)) == 0);
	CHECK_EQ_INT(a->ndevices, b->ndevices);
	for (i = 0; i < a->ndevices && i < b->ndevices; i++) {
		const struct trace_device *x = &a->devices[i], *y = &b->devices[i];

		CHECK(same_str(x->name, y->name));
		CHECK(x->id == y->id && x->total_global_mem == y->total_global_mem &&
		      x->compute_major == y->compute_major && x->compute_minor == y->compute_minor &&
		      x->max_threads_per_block == y->max_threads_per_block &&
		      x->max_threads_per_sm == y->max_threads_per_sm &&
		      x->regs_per_block == y->regs_per_block && x->regs_per_sm == y->regs_per_sm &&
		      x->warp_size == y->warp_size &&
		      x->shared_mem_per_block == y->shared_mem_per_block &&
		      x->shared_mem_per_sm == y->shared_mem_per_sm && x->num_sms == y->num_sms);
	}
}

static char *slurp(const char *path, size_t *len)
{
	struct err e;
	char *buf = fsutil_read(path, 1 << 30, len, &e);

	if (!buf)
		fprintf(stderr, "%s\n", e.msg);
	return buf;
}

static void test_round_trip(char **image, size_t *image_len)
{
	struct trace a, b;
	struct err e;
	char path[512];
	char *buf;
	size_t len;

	build(&a);
	snprintf(path, sizeof path, "%s/capture.phb", tmpdir);
	CHECK_EQ_INT(phb_write(&a, path, &e), 0);
	buf = slurp(path, &len);
	CHECK(buf != NULL);
	if (!buf)
		return;
	CHECK(phb_is_phb(buf, len));
	trace_init(&b);
	CHECK_EQ_INT(phb_parse(buf, len, "capture.phb", &b, &e), 0);
	check_same(&a, &b);
	trace_free(&b);

	/* an empty trace too */
	trace_free(&a);
	trace_init(&a);
	CHECK_EQ_INT(phb_write(&a, path, &e), 0);
	free(buf);
	buf = slurp(path, &len);
	trace_init(&b);
	CHECK_EQ_INT(phb_parse(buf, len, "capture.phb", &b, &e), 0);
	check_same(&a, &b);
	trace_free(&b);
	trace_free(&a);
	free(buf);

	build(&a);
	CHECK_EQ_INT(phb_write(&a, path, &e), 0);
	trace_free(&a);
	*image = slurp(path, image_len);
}

/* The image with section `tag` (header, payload and CRC) cut out. */
static size_t drop_section(char *buf, size_t len, const char *tag)
{
	size_t off = 16;

	while (off + 16 <= len) {
		uint64_t plen = 0;
		int k;

		for (k = 7; k >= 0; k--)
			plen = plen << 8 | (unsigned char)buf[off + 8 + k];
		if (memcmp(buf + off, tag, 4) == 0) {
			size_t n = 16 + (size_t)plen + 4;

			memmove(buf + off, buf + off + n, len - off - n);
			return len - n;
		}
		off += 16 + (size_t)plen + 4;
	}
	return len;
}

/* A file as version 1.0 wrote it (no PROC, no DEVS, minor 0) reads, with
 * everything else the same; this version writes 1.1. */
static void test_version_1_0(const char *image, size_t len)
{
	struct trace a, b;
	struct err e;
	char *old = malloc(len);
	size_t n;

	if (!old)
		return;
	CHECK_EQ_INT(image[10], PHB_MINOR);
	CHECK_EQ_INT(PHB_MINOR, 1);
	memcpy(old, image, len);
	n = drop_section(old, len, "PROC");
	CHECK(n < len);
	n = drop_section(old, n, "DEVS");
	old[10] = 0;
	build(&a);
	trace_init(&b);
	CHECK_EQ_INT(phb_parse(old, n, "old.phb", &b, &e), 0);
	CHECK_EQ_INT(b.nprocs, 0);
	CHECK_EQ_INT(b.ndevices, 0);
	a.nprocs = 0;     /* what 1.0 could not hold */
	for (; a.ndevices > 0; a.ndevices--)
		free(a.devices[a.ndevices - 1].name);
	check_same(&a, &b);
	trace_free(&b);
	trace_free(&a);

	/* and a reader meets the new sections only once each */
	trace_init(&b);
	memcpy(old, image, len);
	CHECK_EQ_INT(phb_parse(old, len, "new.phb", &b, &e), 0);
	CHECK_EQ_INT(b.nprocs, 2);
	CHECK_EQ_INT(b.ndevices, 2);
	trace_free(&b);
	free(old);
}

/* Every mutation parses or fails with "<label>: ... at offset N" and the
 * trace stays freeable (ASan checks the rest). */
static void test_mutations(const char *image, size_t len)
{
	uint64_t rng = 0x9e3779b97f4a7c15ULL;
	char *buf = malloc(len + 64);
	int i, failed = 0, ok = 0, bad_msg = 0;

	for (i = 0; i < 4000; i++) {
		struct trace t;
		struct err e;
		size_t n = len, k, flips;

		memcpy(buf, image, len);
		rng ^= rng << 13;
		rng ^= rng >> 7;
		rng ^= rng << 17;
		switch (rng % 4) {
		case 0: /* truncate */
			n = (size_t)(rng >> 8) % len;
			break;
		case 1: /* flip bytes */
			flips = 1 + (rng >> 8) % 4;
			for (k = 0; k < flips; k++)
				buf[(rng >> (12 + k * 8)) % len] ^= (char)(1 + (rng >> 40) % 255);
			break;
		case 2: /* a 64-bit field set to a huge value */
			k = (size_t)(rng >> 8) % (len - 8);
			memset(buf + k, 0xff, 8);
			break;
		default: /* garbage appended after a cut */
			n = (size_t)(rng >> 8) % len;
			memset(buf + n, (int)(rng >> 48), 32);
			n += 32;
		}
		trace_init(&t);
		e.msg[0] = '\0';
		if (phb_parse(buf, n, "m.phb", &t, &e) == 0) {
			ok++;
		} else {
			failed++;
			if (strncmp(e.msg, "m.phb: ", 7) != 0 || !strstr(e.msg, "offset") ||
			    strchr(e.msg, '\n'))
				bad_msg++;
		}
		trace_free(&t);
	}
	/* a checksum catches flipped bytes: most mutations must fail */
	CHECK(failed > 3000);
	CHECK_EQ_INT(bad_msg, 0);
	(void)ok;
	free(buf);
}

static void test_bad_headers(void)
{
	struct trace t;
	struct err e;
	unsigned char v2[32] = "\x89PHB\r\n\x1a\n\x02\x00";

	trace_init(&t);
	CHECK_EQ_INT(phb_parse("hello", 5, "x.phb", &t, &e), -1);
	CHECK_EQ_STR(e.msg, "x.phb: not a profhost capture file (bad magic) at offset 0");
	CHECK_EQ_INT(phb_parse(v2, 16, "x.phb", &t, &e), -1);
	CHECK_EQ_STR(e.msg, "x.phb: capture format version 2.0; this prof reads 1.x at offset 8");
	CHECK_EQ_INT(phb_parse(v2, 12, "x.phb", &t, &e), -1);
	CHECK(strstr(e.msg, "truncated header") != NULL);
	trace_free(&t);
}

/* The Chrome writer's output reads back into the same events. */
static void test_json_reader(void)
{
	struct trace a, b;
	struct err e;
	char path[512];
	struct outfile *f;
	size_t len, i, skipped;
	char *buf;

	trace_init(&a);
	a.meta.rank = 1;
	a.meta.world_size = 2;
	a.meta.window = 4;
	a.meta.first_step = 3;
	a.meta.last_step = 4;
	a.meta.pid = 9;
	a.meta.program = strdup("p");
	a.meta.reason = strdup("schedule");
	for (i = 0; i < 2; i++) {
		struct trace_event ev = { 0 };
		struct trace_step s = { 3 + i, 1000 + (int64_t)i * 5000, 4999, 9, i == 1 };
		char name[32];
		int n = snprintf(name, sizeof name, "ProfilerStep#%zu", 3 + i);

		ev.ts = s.ts;
		ev.dur = s.dur;
		ev.pid = 9;
		ev.tid = 9;
		ev.name = trace_intern(&a, name, (size_t)n);
		ev.cat = TRACE_CAT_USER_ANNOTATION;
		ev.ph = TRACE_PH_COMPLETE;
		ev.flags = TRACE_F_STEP | (s.partial ? TRACE_F_PARTIAL : 0);
		trace_add_event(&a, &ev);
		trace_add_step(&a, &s);
		ev.name = trace_intern(&a, "k\"1", 3);
		ev.cat = TRACE_CAT_KERNEL;
		ev.flags = 0;
		ev.ts += 7;
		ev.dur = 1234567;
		trace_add_event(&a, &ev);
		trace_arg_uint(&a, "stream", 7);
		trace_arg_double(&a, "ratio", 0.25);
	}
	trace_add_thread(&a, 9, 9, "main");
	snprintf(path, sizeof path, "%s/trace.json", tmpdir);
	f = outfile_open(path, false, &e);
	CHECK(f && chrome_writer_write(&a, f, &e) == 0 && outfile_commit(f, &e) == 0);
	buf = slurp(path, &len);
	trace_init(&b);
	CHECK_EQ_INT(trace_json_parse(buf, len, "trace.json", &b, &skipped, &e), 0);
	CHECK_EQ_INT(skipped, 0);
	CHECK_EQ_INT(b.nev, 4);
	CHECK_EQ_INT(b.nsteps, 2);
	CHECK_EQ_INT(b.meta.rank, 1);
	CHECK_EQ_INT(b.meta.window, 4);
	CHECK(b.nsteps == 2 && b.steps[1].partial && !b.steps[0].partial);
	CHECK(b.nsteps == 2 && b.steps[0].dur == 4999 && b.steps[1].ts == 6000);
	for (i = 0; i < b.nev; i++)
		CHECK(b.ev[i].ts == a.ev[i].ts && b.ev[i].dur == a.ev[i].dur &&
		      b.ev[i].cat == a.ev[i].cat &&
		      strcmp(trace_str(&a, a.ev[i].name), trace_str(&b, b.ev[i].name)) == 0);
	CHECK_EQ_INT(b.nthreads, 1);
	trace_free(&b);
	trace_free(&a);

	/* Unix time late in a week (ts up to 6e11 us): every event reads back
	 * at its exact Unix time and duration, to the nanosecond */
	trace_init(&a);
	a.meta.base_time_ns = 1700000000123456789LL;
	a.meta.start_ts = 599000000000000LL - a.meta.base_time_ns % 604800000000000LL;
	for (i = 0; i < 3000; i++) {
		struct trace_event ev = { 0 };

		ev.ts = a.meta.start_ts + (int64_t)i * 1234567891LL + (int64_t)(i * i % 1000);
		ev.dur = 1 + (int64_t)(i * 7919 % 20000000);
		ev.pid = 9;
		ev.tid = 9;
		ev.name = trace_intern(&a, "r", 1);
		ev.cat = TRACE_CAT_USER_ANNOTATION;
		ev.ph = i % 3 ? TRACE_PH_COMPLETE : TRACE_PH_INSTANT;
		if (ev.ph == TRACE_PH_INSTANT)
			ev.dur = 0;
		trace_add_event(&a, &ev);
	}
	export_unix_time(&a); /* as the host does */
	f = outfile_open(path, false, &e);
	CHECK(f && chrome_writer_write(&a, f, &e) == 0 && outfile_commit(f, &e) == 0);
	free(buf);
	buf = slurp(path, &len);
	trace_init(&b);
	CHECK_EQ_INT(trace_json_parse(buf, len, "trace.json", &b, &skipped, &e), 0);
	CHECK_EQ_INT(b.nev, a.nev);
	CHECK_EQ_INT(b.meta.monotonic_offset_ns, a.meta.monotonic_offset_ns);
	{
		size_t off_ts = 0, off_dur = 0;

		for (i = 0; i < a.nev && i < b.nev; i++) {
			off_ts += b.meta.base_time_ns + b.ev[i].ts !=
				  a.meta.base_time_ns + a.ev[i].ts;
			off_dur += b.ev[i].dur != a.ev[i].dur;
		}
		CHECK_EQ_INT(off_ts, 0);
		CHECK_EQ_INT(off_dur, 0);
	}
	trace_free(&b);
	trace_free(&a);

	/* the trace's memory drops are a part of its buffer drops, in a file
	 * that says otherwise too (the summary prints their difference) */
	{
		static const char doc[] =
			"{\"profhost\":{\"counters\":{\"dropped_buffer\":3,"
			"\"dropped_memory\":9}},\"traceEvents\":[]}";
		static const char doc2[] =
			"{\"profhost\":{\"counters\":{\"dropped_buffer\":5,"
			"\"dropped_memory\":2}},\"traceEvents\":[]}";

		trace_init(&b);
		CHECK_EQ_INT(trace_json_parse(doc, sizeof doc - 1, "m.json", &b, NULL, &e), 0);
		CHECK(b.counters.dropped_buffer == 3 && b.counters.dropped_memory == 3);
		trace_free(&b);
		trace_init(&b);
		CHECK_EQ_INT(trace_json_parse(doc2, sizeof doc2 - 1, "m.json", &b, NULL, &e), 0);
		CHECK(b.counters.dropped_buffer == 5 && b.counters.dropped_memory == 2);
		trace_free(&b);
	}

	/* a torch.profiler trace's ts (libkineto's three-month base: up to
	 * 7.9e12 us) read to the exact ns, also where ts * 1000 in doubles
	 * misses it (2^42 us and above) */
	{
		char *doc = malloc(1000 * 96 + 64), *q = doc;
		size_t bad = 0;

		q += sprintf(q, "{\"traceEvents\":[");
		for (i = 0; i < 1000; i++)
			q += sprintf(q, "%s{\"ph\":\"i\",\"cat\":\"cpu_op\",\"name\":\"m\",\"ts\":%lld.%03d}",
				     i ? "," : "", 4398046511104LL + (long long)i * 3779,
				     (int)(i * 7 % 1000));
		q += sprintf(q, "]}");
		trace_init(&b);
		CHECK_EQ_INT(trace_json_parse(doc, (size_t)(q - doc), "k.json", &b, NULL, &e), 0);
		CHECK_EQ_INT(b.nev, 1000);
		for (i = 0; i < b.nev; i++)
			bad += b.ev[i].ts != (4398046511104LL + (long long)i * 3779) * 1000 +
					     (long long)(i * 7 % 1000);
		CHECK_EQ_INT(bad, 0);
		trace_free(&b);
		free(doc);
	}

	/* CPU samples are in the file twice (cpu_sample instants and the
	 * Trace Event Format's "samples"): they read back once; a file with
	 * only "samples" (another tool's) still gives them */
	trace_init(&a);
	for (i = 0; i < 4; i++) {
		struct trace_event ev = { 0 };

		ev.ts = 1000 * (int64_t)(i + 1);
		ev.pid = 9;
		ev.tid = 9;
		ev.name = trace_intern(&a, "leaf", 4);
		ev.cat = TRACE_CAT_SAMPLE;
		ev.ph = TRACE_PH_INSTANT;
		trace_add_event(&a, &ev);
		trace_arg_str(&a, "stack", "main;leaf", 9);
		trace_arg_uint(&a, "weight", 1);
	}
	f = outfile_open(path, false, &e);
	CHECK(f && chrome_writer_write(&a, f, &e) == 0 && outfile_commit(f, &e) == 0);
	free(buf);
	buf = slurp(path, &len);
	CHECK(buf && strstr(buf, "\"samples\":[") != NULL);
	trace_init(&b);
	CHECK_EQ_INT(trace_json_parse(buf, len, "trace.json", &b, &skipped, &e), 0);
	CHECK_EQ_INT(b.nev, 4);
	trace_free(&b);
	trace_free(&a);
	{
		static const char tef[] = "{\"traceEvents\":[],\"samples\":[{\"ts\":1,\"tid\":1,"
					  "\"sf\":2}],\"stackFrames\":{\"1\":{\"name\":\"main\"},"
					  "\"2\":{\"name\":\"leaf\",\"parent\":1}}}";

		trace_init(&b);
		CHECK_EQ_INT(trace_json_parse(tef, sizeof tef - 1, "tef.json", &b, NULL, &e), 0);
		CHECK(b.nev == 1 && b.ev[0].cat == TRACE_CAT_SAMPLE);
		trace_free(&b);
	}

	/* wrong schemas and broken JSON: one line, the file named */
	trace_init(&b);
	CHECK_EQ_INT(trace_json_parse("{\"x\":1}", 7, "t.json", &b, NULL, &e), -1);
	CHECK_EQ_STR(e.msg, "t.json: not a Chrome trace (no traceEvents array)");
	CHECK_EQ_INT(trace_json_parse("{\"traceEvents\":[{\"ph\":\"X\",\"ts\":1}]}", 35,
				      "t.json", &b, NULL, &e), -1);
	CHECK_EQ_STR(e.msg, "t.json: traceEvents[0]: 'dur' is missing or not a number");
	CHECK_EQ_INT(trace_json_parse("{\"traceEvents\":[1,", 18, "t.json", &b, NULL, &e), -1);
	CHECK(strstr(e.msg, "t.json: not valid JSON") == e.msg && strstr(e.msg, "offset"));
	trace_free(&b);
	free(buf);
}

int main(void)
{
	char *image = NULL;
	size_t len = 0;
	char cmd[128];

	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	test_round_trip(&image, &len);
	if (image) {
		test_version_1_0(image, len);
		test_mutations(image, len);
	}
	test_bad_headers();
	test_json_reader();
	free(image);
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", tmpdir);
	return check_done();
}

/*
 * bench_writer — Chrome trace writer throughput.
 *
 *   bench_writer [N [PATH [gzip]]]   (defaults: 5000000 /tmp/bench_writer.json)
 *
 * Builds a synthetic trace of N events shaped like a GPU training window
 * (3/8 kernels with correlation and stream args, 2/8 runtime calls with
 * cbid and correlation, one in 16 of those with a double arg too, 1/8
 * annotations, 2/8 flow ends; 200 distinct names of realistic length), writes it with
 * chrome_writer_write + outfile_commit, and prints events/s and MB/s of
 * JSON, and the peak resident memory before and while writing. Not a test:
 * it asserts nothing about time.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "events/trace.h"
#include "export/chrome_writer.h"
#include "export/outfile.h"

#define NNAMES 200

static void *xmalloc(size_t n)
{
	void *p = malloc(n);
	if (!p) {
		fprintf(stderr, "bench_writer: out of memory\n");
		exit(2);
	}
	return p;
}

static double now_s(clockid_t clock)
{
	struct timespec ts;
	clock_gettime(clock, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Adds a name to the table by hand (ids are dense from 0). */
static uint32_t put_name(struct trace *t, const char *s)
{
	size_t n = strlen(s);
	char *copy = xmalloc(n + 1);

	memcpy(copy, s, n + 1);
	t->names.str[t->names.n] = copy;
	t->names.len[t->names.n] = (uint32_t)n;
	return t->names.n++;
}

static void build(struct trace *t, size_t n)
{
	static const char *const stems[] = {
		"void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>",
		"ampere_sgemm_128x64_tn",
		"cudaLaunchKernel",
		"aten::linear",
		"nccl:all_reduce",
		"Memcpy HtoD (Pageable -> Device)",
	};
	uint32_t names[NNAMES], k_corr, k_stream, k_cbid, k_occ;
	char buf[256];
	size_t i, na = 0;

	memset(t, 0, sizeof *t);
	t->names.str = xmalloc((NNAMES + 8) * sizeof *t->names.str);
	t->names.len = xmalloc((NNAMES + 8) * sizeof *t->names.len);
	for (i = 0; i < NNAMES; i++) {
		snprintf(buf, sizeof buf, "%s_%zu", stems[i % 6], i);
		names[i] = put_name(t, buf);
	}
	k_corr = put_name(t, "correlation");
	k_stream = put_name(t, "stream");
	k_cbid = put_name(t, "cbid");
	k_occ = put_name(t, "est. achieved occupancy %");
	t->ev = xmalloc(n * sizeof *t->ev);
	t->args = xmalloc(3 * n * sizeof *t->args);
	for (i = 0; i < n; i++) {
		struct trace_event *e = &t->ev[i];

		memset(e, 0, sizeof *e);
		e->ts = 1000000000000LL + (int64_t)i * 1370;
		e->dur = 1000 + (int64_t)(i % 977) * 13;
		e->pid = 4242;
		e->tid = 4242 + (int32_t)(i % 3);
		e->name = names[i % NNAMES];
		e->args = (uint32_t)na;
		switch (i % 8) {
		case 0: case 1: case 2: /* kernel with two args */
			e->cat = TRACE_CAT_KERNEL;
			e->ph = TRACE_PH_COMPLETE;
			e->pid = 0;
			e->tid = 7;
			t->args[na].key = k_corr;
			t->args[na].type = TRACE_ARG_UINT;
			t->args[na++].v.u = i;
			t->args[na].key = k_stream;
			t->args[na].type = TRACE_ARG_INT;
			t->args[na++].v.i = 7;
			e->nargs = 2;
			break;
		case 3: case 4: /* runtime call: cbid + correlation */
			e->cat = TRACE_CAT_CUDA_RUNTIME;
			e->ph = TRACE_PH_COMPLETE;
			t->args[na].key = k_cbid;
			t->args[na].type = TRACE_ARG_INT;
			t->args[na++].v.i = 211;
			t->args[na].key = k_corr;
			t->args[na].type = TRACE_ARG_UINT;
			t->args[na++].v.u = i;
			e->nargs = 2;
			if (i % 16 == 3) { /* a non-integral double now and then */
				t->args[na].key = k_occ;
				t->args[na].type = TRACE_ARG_DOUBLE;
				t->args[na++].v.d = (double)(i % 1000) / 7.0;
				e->nargs = 3;
			}
			break;
		case 5:
			e->cat = TRACE_CAT_AC2G;
			e->ph = TRACE_PH_FLOW_START;
			e->dur = 0;
			e->id = i;
			break;
		case 6:
			e->cat = TRACE_CAT_AC2G;
			e->ph = TRACE_PH_FLOW_END;
			e->dur = 0;
			e->id = i - 1;
			break;
		default:
			e->cat = TRACE_CAT_USER_ANNOTATION;
			e->ph = TRACE_PH_COMPLETE;
		}
	}
	t->nev = t->cap_ev = n;
	t->nargs = t->cap_args = na;
	t->meta.rank = 0;
	t->meta.world_size = 1;
	t->meta.pid = 4242;
	t->meta.program = (char *)"bench";
	t->meta.hostname = (char *)"localhost";
	t->meta.run = (char *)"bench";
	t->meta.reason = (char *)"schedule";
	t->counters.events = n;
}

/* Peak resident memory of the process so far, in MB. */
static double peak_rss_mb(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_maxrss / 1024.0;
}

int main(int argc, char **argv)
{
	size_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 5000000;
	const char *path = argc > 2 ? argv[2] : "/tmp/bench_writer.json";
	int gzip = argc > 3 && strcmp(argv[3], "gzip") == 0;
	struct err e = { "" };
	struct outfile *f;
	struct trace t;
	double t0, t1, c0, c1, rss_model;
	uint64_t bytes;
	uint32_t i;

	build(&t, n);
	rss_model = peak_rss_mb();
	t0 = now_s(CLOCK_MONOTONIC);
	c0 = now_s(CLOCK_PROCESS_CPUTIME_ID);
	f = outfile_open(path, gzip, &e);
	if (!f || chrome_writer_write(&t, f, &e) != 0) {
		fprintf(stderr, "bench_writer: %s\n", e.msg);
		outfile_abort(f);
		return 1;
	}
	bytes = outfile_bytes(f);
	if (outfile_commit(f, &e) != 0) {
		fprintf(stderr, "bench_writer: %s\n", e.msg);
		return 1;
	}
	t1 = now_s(CLOCK_MONOTONIC);
	c1 = now_s(CLOCK_PROCESS_CPUTIME_ID);
	printf("%zu events, %.1f MB of JSON%s in %.3f s: %.2f M events/s, "
	       "%.0f MB/s (CPU %.3f s user+sys: %.2f M events/CPU-s)\n",
	       n, (double)bytes / 1e6, gzip ? " (gzip)" : "", t1 - t0,
	       (double)n / (t1 - t0) / 1e6, (double)bytes / 1e6 / (t1 - t0),
	       c1 - c0, (double)n / (c1 - c0) / 1e6);
	/* The writer streams: writing adds its buffers, not the file's size. */
	printf("peak RSS %.1f MB: %.1f MB with the trace model built, +%.1f MB while "
	       "writing\n", peak_rss_mb(), rss_model, peak_rss_mb() - rss_model);
	for (i = 0; i < t.names.n; i++)
		free(t.names.str[i]);
	free(t.names.str);
	free(t.names.len);
	free(t.ev);
	free(t.args);
	return 0;
}

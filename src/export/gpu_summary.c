/* gpu_summary — the GPU part of the summary (see gpu_summary.h). */
#include "gpu_summary.h"

#include <stdlib.h>
#include <string.h>

#include "../events/query.h"
#include "key_averages.h"

#define NAME_COLS 40

struct span {
	int64_t start, end;
};

static int cmp_span(const void *pa, const void *pb)
{
	const struct span *a = pa, *b = pb;

	return (a->start > b->start) - (a->start < b->start);
}

static bool is_gpu_work(const struct trace_event *ev)
{
	return ev->ph == TRACE_PH_COMPLETE &&
	       (ev->cat == TRACE_CAT_KERNEL || ev->cat == TRACE_CAT_GPU_MEMCPY ||
		ev->cat == TRACE_CAT_GPU_MEMSET);
}

/* Busy time and idle gaps of one device from its spans (sorted here),
 * within [lo, hi): the window's edges count, so idle time before the first
 * and after the last GPU work is a gap too. */
static void busy_and_gaps(struct span *s, size_t n, int64_t lo, int64_t hi,
			  struct gpu_summary_device *d)
{
	int64_t end = lo; /* covered up to here */
	size_t i;

	qsort(s, n, sizeof *s, cmp_span);
	for (i = 0; i <= n; i++) {
		int64_t a = i < n ? s[i].start : hi, b = i < n ? s[i].end : hi;

		if (a < lo)
			a = lo;
		if (b > hi)
			b = hi;
		if (a > end) {
			int64_t gap = a - end;

			if (gap >= GPU_SUMMARY_GAP_NS) {
				d->gaps++;
				d->gap_ns += gap;
				if (gap > d->longest_gap_ns)
					d->longest_gap_ns = gap;
			}
			end = a;
		}
		if (b > end) {
			d->busy_ns += b - end;
			end = b;
		}
	}
}

/* Kernel totals by name: a small open-addressing table over name ids. */
struct kacc {
	uint32_t name;   /* strtab id + 1; 0 empty */
	uint64_t count;
	int64_t ns;
};

static int cmp_kacc(const void *pa, const void *pb)
{
	const struct kacc *a = pa, *b = pb;

	if (a->ns != b->ns)
		return a->ns > b->ns ? -1 : 1;
	return (a->name > b->name) - (a->name < b->name);
}

static enum gpu_copy_dir copy_dir(const struct trace *t, const struct trace_event *ev)
{
	const struct trace_arg *a = query_arg(t, ev, TRACE_ARG_COPY_KIND);
	const char *k = a && a->type == TRACE_ARG_STR ? trace_str(t, a->v.str) : "";

	if (!strcmp(k, "HtoD"))
		return GPU_COPY_HTOD;
	if (!strcmp(k, "DtoH"))
		return GPU_COPY_DTOH;
	if (!strcmp(k, "DtoD"))
		return GPU_COPY_DTOD;
	return GPU_COPY_OTHER;
}

int gpu_summary_compute(const struct trace *t, struct gpu_summary *out, struct err *e)
{
	struct span *spans = NULL;
	struct kacc *k = NULL;
	size_t nspans = 0, i, d, nk = 64;
	int64_t lo = t->meta.start_ts, hi = t->meta.end_ts;

	memset(out, 0, sizeof *out);
	out->window_ns = hi - lo;
	for (i = 0; i < t->nev; i++)
		nspans += is_gpu_work(&t->ev[i]);
	while (nk < 2 * nspans)
		nk *= 2;
	spans = malloc((nspans + 1) * sizeof *spans);
	k = calloc(nk, sizeof *k);
	if (!spans || !k) {
		free(spans);
		free(k);
		return err_set(e, "out of memory summarizing the GPU work");
	}
	for (i = 0; i < t->nev; i++) {
		const struct trace_event *ev = &t->ev[i];

		if (ev->cat == TRACE_CAT_CUDA_SYNC && ev->ph == TRACE_PH_COMPLETE) {
			out->syncs++;
			out->sync_ns += ev->dur;
			out->any = true;
			continue;
		}
		if (!is_gpu_work(ev))
			continue;
		out->any = true;
		for (d = 0; d < out->ndev && out->dev[d].device != ev->pid; d++)
			;
		if (d == out->ndev && d < GPU_SUMMARY_DEVICES)
			out->dev[out->ndev++].device = ev->pid;
		if (ev->cat == TRACE_CAT_KERNEL) {
			size_t h = (ev->name * 2654435761u) & (nk - 1);

			while (k[h].name && k[h].name != ev->name + 1)
				h = (h + 1) & (nk - 1);
			k[h].name = ev->name + 1;
			k[h].count++;
			k[h].ns += ev->dur;
			out->kernel_ns += ev->dur;
		} else if (ev->cat == TRACE_CAT_GPU_MEMCPY) {
			const struct trace_arg *b = query_arg(t, ev, TRACE_ARG_BYTES);
			enum gpu_copy_dir dir = copy_dir(t, ev);

			out->copies[dir]++;
			out->copy_ns[dir] += ev->dur;
			if (b && b->type == TRACE_ARG_UINT)
				out->copy_bytes[dir] += b->v.u;
		}
	}
	/* Busy time per device over its own spans. */
	for (d = 0; d < out->ndev; d++) {
		size_t n = 0;

		for (i = 0; i < t->nev; i++)
			if (is_gpu_work(&t->ev[i]) && t->ev[i].pid == out->dev[d].device) {
				spans[n].start = t->ev[i].ts;
				spans[n].end = t->ev[i].ts + t->ev[i].dur;
				n++;
			}
		busy_and_gaps(spans, n, lo, hi, &out->dev[d]);
	}
	qsort(k, nk, sizeof *k, cmp_kacc);
	for (i = 0; i < nk && i < GPU_SUMMARY_TOP && k[i].name; i++) {
		out->top[i].name = trace_str(t, k[i].name - 1);
		out->top[i].count = k[i].count;
		out->top[i].total_ns = k[i].ns;
		out->ntop++;
	}
	free(spans);
	free(k);
	return 0;
}

/* "12.0 MiB" style sizes. */
static void put_bytes(struct textbuf *tb, uint64_t b)
{
	if (b >= (1ull << 30))
		textbuf_printf(tb, "%.1f GiB", (double)b / (double)(1ull << 30));
	else if (b >= (1ull << 20))
		textbuf_printf(tb, "%.1f MiB", (double)b / (double)(1ull << 20));
	else if (b >= 1024)
		textbuf_printf(tb, "%.1f KiB", (double)b / 1024.0);
	else
		textbuf_printf(tb, "%llu B", (unsigned long long)b);
}

void gpu_summary_put(struct textbuf *tb, const struct gpu_summary *g)
{
	static const char *const dirs[GPU_COPY_NDIR] = { "HtoD", "DtoH", "DtoD", "other" };
	char a[32], b[32], c[32], name[NAME_COLS * 4 + 4];
	size_t i, width = 4;
	bool first = true;

	if (!g->any)
		return;
	textbuf_puts(tb, "GPU:\n");
	for (i = 0; i < g->ndev; i++) {
		const struct gpu_summary_device *d = &g->dev[i];

		textbuf_printf(tb, "  GPU %d: busy %s of the window (%s of %s)",
			       (int)d->device,
			       key_averages_format_share(d->busy_ns, g->window_ns, a),
			       key_averages_format_time(d->busy_ns, b),
			       key_averages_format_time(g->window_ns, c));
		if (d->gaps)
			textbuf_printf(tb, "; %llu idle gap%s of %s or more, %s in all, "
				       "longest %s\n", (unsigned long long)d->gaps,
				       d->gaps == 1 ? "" : "s",
				       key_averages_format_time(GPU_SUMMARY_GAP_NS, a),
				       key_averages_format_time(d->gap_ns, b),
				       key_averages_format_time(d->longest_gap_ns, c));
		else
			textbuf_printf(tb, "; no idle gap of %s or more\n",
				       key_averages_format_time(GPU_SUMMARY_GAP_NS, a));
	}
	if (g->ntop) {
		for (i = 0; i < g->ntop; i++) {
			textbuf_name_fit(g->top[i].name, NAME_COLS, name, sizeof name);
			if (textbuf_cols(name) > width)
				width = textbuf_cols(name);
		}
		textbuf_puts(tb, "  Top kernels by GPU time:\n    ");
		textbuf_field(tb, "Name", width, false);
		textbuf_puts(tb, "     Calls      GPU time  % of kernels\n");
		for (i = 0; i < g->ntop; i++) {
			textbuf_name_fit(g->top[i].name, NAME_COLS, name, sizeof name);
			textbuf_puts(tb, "    ");
			textbuf_field(tb, name, width, false);
			textbuf_printf(tb, "  %8llu  %12s  %12s\n",
				       (unsigned long long)g->top[i].count,
				       key_averages_format_time(g->top[i].total_ns, a),
				       key_averages_format_share(g->top[i].total_ns,
								 g->kernel_ns, b));
		}
	}
	for (i = 0; i < GPU_COPY_NDIR; i++) {
		if (!g->copies[i])
			continue;
		textbuf_puts(tb, first ? "  Copies: " : "; ");
		first = false;
		textbuf_printf(tb, "%s ", dirs[i]);
		put_bytes(tb, g->copy_bytes[i]);
		textbuf_printf(tb, " in %llu (%.2f GB/s)", (unsigned long long)g->copies[i],
			       g->copy_ns[i] ? (double)g->copy_bytes[i] / (double)g->copy_ns[i] : 0.0);
	}
	textbuf_puts(tb, first ? "  Copies: none\n" : "\n");
	textbuf_printf(tb, "  Synchronization: %s waiting in %llu call%s\n\n",
		       key_averages_format_time(g->sync_ns, a), (unsigned long long)g->syncs,
		       g->syncs == 1 ? "" : "s");
}

/* memory_timeline — memory over a window (see memory_timeline.h). */
#include "memory_timeline.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../events/query.h"
#include "../util/grow.h"
#include "outfile.h"
#include "textbuf.h"

#define W 960          /* chart width, px */
#define H 280          /* chart height, px */
#define ML 90          /* left margin (axis labels) */
#define MB 40          /* bottom margin */
#define MT 30          /* top margin (peak label) */

static int64_t int_arg(const struct trace *t, const struct trace_event *ev, const char *key)
{
	const struct trace_arg *a = query_arg(t, ev, key);

	if (!a)
		return 0;
	return a->type == TRACE_ARG_UINT ? (int64_t)a->v.u : a->v.i;
}

static int cmp_point(const void *pa, const void *pb)
{
	const struct memory_point *a = pa, *b = pb;

	return (a->ts > b->ts) - (a->ts < b->ts);
}

static int push(struct memory_series *s, int64_t ts, int64_t bytes)
{
	struct memory_point *p = grow_array(s->p, &s->cap, s->n + 1, sizeof *p, 64);

	if (!p)
		return -1;
	s->p = p;
	s->p[s->n].ts = ts;
	s->p[s->n].bytes = bytes;
	s->n++;
	return 0;
}

int memory_timeline_build(const struct trace *t, struct memory_timeline *m,
			  struct err *e)
{
	size_t i, d;

	memset(m, 0, sizeof *m);
	m->start = t->meta.start_ts;
	m->end = t->meta.end_ts;
	for (i = 0; i < t->nev; i++) {
		const struct trace_event *ev = &t->ev[i];
		struct memory_series *s;
		int64_t delta;

		if (ev->cat != TRACE_CAT_GPU_MEMORY)
			continue;
		for (d = 0; d < m->ndev && m->dev[d].device != ev->pid; d++)
			;
		if (d == m->ndev) {
			if (d == MEMORY_TIMELINE_DEVICES)
				continue;
			m->dev[m->ndev].device_type = 1;
			m->dev[m->ndev++].device = ev->pid;
		}
		s = &m->dev[d];
		delta = int_arg(t, ev, TRACE_ARG_ALLOC_BYTES);
		if (delta >= 0)
			s->allocs++;
		else
			s->frees++;
		if (push(s, ev->ts, int_arg(t, ev, TRACE_ARG_TOTAL_ALLOCATED)) != 0) {
			memory_timeline_free(m);
			return err_set(e, "out of memory building the memory timeline");
		}
	}
	for (d = 0; d < m->ndev; d++) {
		struct memory_series *s = &m->dev[d];

		if (s->source != MEMORY_CUPTI)
			continue;
		qsort(s->p, s->n, sizeof *s->p, cmp_point);
		s->peak_ts = s->n ? s->p[0].ts : m->start;
		for (i = 0; i < s->n; i++)
			if (s->p[i].bytes > s->peak) {
				s->peak = s->p[i].bytes;
				s->peak_ts = s->p[i].ts;
			}
	}
	if (memory_tensors_build(t, m, e) != 0) {
		memory_timeline_free(m);
		return -1;
	}
	return 0;
}

void memory_timeline_free(struct memory_timeline *m)
{
	size_t d;

	for (d = 0; d < m->ndev; d++) {
		free(m->dev[d].p);
		free(m->dev[d].at_peak);
		free(m->dev[d].at_end);
	}
	memset(m, 0, sizeof *m);
}

/* Writes the text to `path` atomically. */
static int write_text(const struct outdir *d, const char *name, struct textbuf *tb,
		      struct err *e)
{
	char *text = textbuf_take(tb);
	int rc;

	if (!text)
		return err_set(e, "out of memory writing '%s/%s'", d->path, name);
	rc = outfile_write_textat(d, name, text, e);
	free(text);
	return rc;
}

/* The operators listed per torch series in each file (most bytes first;
 * the others are summed into one line). */
#define OWNERS_JSON 50
#define OWNERS_HTML 10
#define NO_OPERATOR "(no operator)"

/* A series' name: "CPU (torch tensors)", "GPU 0 (torch tensors)",
 * "GPU 0" (CUDA's own allocations, CUPTI). */
static void series_label(const struct memory_series *s, char *buf, size_t size)
{
	if (s->source == MEMORY_CUPTI)
		snprintf(buf, size, "GPU %d", (int)s->device);
	else if (s->device_type == 0)
		snprintf(buf, size, "CPU (torch tensors)");
	else if (s->device_type == 1)
		snprintf(buf, size, "GPU %d (torch tensors)", (int)s->device);
	else
		snprintf(buf, size, "device type %d, %d (torch tensors)", (int)s->device_type,
			 (int)s->device);
}

/* The operator name of an owner as the program wrote it ("(no operator)"
 * when none was open). */
static const char *owner_name(const struct trace *t, const struct memory_owner *o)
{
	return o->name == STRTAB_NONE ? NO_OPERATOR : trace_str(t, o->name);
}

/* Appends `s` as a JSON string: shown as textbuf_put_name() does (valid
 * UTF-8, no control characters), '"' and '\\' escaped. */
static void put_json_str(struct textbuf *tb, const char *s)
{
	struct textbuf tmp;
	char *shown, *p;

	textbuf_init(&tmp);
	textbuf_put_name(&tmp, s, strlen(s));
	shown = textbuf_take(&tmp);
	textbuf_puts(tb, "\"");
	for (p = shown; p && *p; p++) {
		if (*p == '"' || *p == '\\')
			textbuf_add(tb, "\\", 1);
		textbuf_add(tb, p, 1);
	}
	textbuf_puts(tb, "\"");
	free(shown);
}

/* One list of owners as JSON: at most OWNERS_JSON, then "(N others)". */
static void put_owners_json(struct textbuf *tb, const struct trace *t,
			    const struct memory_owner *o, size_t n)
{
	struct memory_owner rest = { STRTAB_NONE, 0, 0 };
	char name[48];
	size_t i;

	textbuf_puts(tb, "[");
	for (i = 0; i < n; i++) {
		if (i >= OWNERS_JSON) {
			rest.bytes += o[i].bytes;
			rest.tensors += o[i].tensors;
			continue;
		}
		textbuf_puts(tb, i ? ", {\"operator\": " : "{\"operator\": ");
		put_json_str(tb, owner_name(t, &o[i]));
		textbuf_printf(tb, ", \"bytes\": %lld, \"tensors\": %llu}", (long long)o[i].bytes,
			       (unsigned long long)o[i].tensors);
	}
	if (rest.tensors) {
		snprintf(name, sizeof name, "(%zu others)", n - OWNERS_JSON);
		textbuf_puts(tb, ", {\"operator\": ");
		put_json_str(tb, name);
		textbuf_printf(tb, ", \"bytes\": %lld, \"tensors\": %llu}", (long long)rest.bytes,
			       (unsigned long long)rest.tensors);
	}
	textbuf_puts(tb, "]");
}

/* Microseconds since the window's start, 3 decimals. */
static double us_of(const struct memory_timeline *m, int64_t ts)
{
	return (double)(ts - m->start) / 1000.0;
}

int memory_timeline_write_json(const struct memory_timeline *m, const struct trace *t,
			       const struct outdir *dir, const char *name, struct err *e)
{
	struct textbuf tb;
	size_t d, i;

	textbuf_init(&tb);
	textbuf_printf(&tb, "{\"window\": %u, \"first_step\": %llu, \"last_step\": %llu,\n"
		       " \"time_unit\": \"us since the window's start\", \"unit\": \"bytes\",\n"
		       " \"window_us\": %.3f, \"base_time_ns\": %lld, \"start_ns\": %lld,\n"
		       " \"devices\": [", t->meta.window,
		       (unsigned long long)t->meta.first_step,
		       (unsigned long long)t->meta.last_step, us_of(m, m->end),
		       (long long)t->meta.base_time_ns, (long long)m->start);
	for (d = 0; d < m->ndev; d++) {
		const struct memory_series *s = &m->dev[d];

		textbuf_printf(&tb, "%s\n  {\"device\": %d, \"device_type\": \"%s\", \"source\": "
			       "\"%s\", \"allocations\": %llu, \"frees\": %llu,"
			       " \"peak\": {\"bytes\": %lld, \"t_us\": %.3f},\n",
			       d ? "," : "", (int)s->device, s->device_type == 0 ? "CPU" :
			       s->device_type == 1 ? "CUDA" : "other",
			       s->source == MEMORY_TORCH ? "torch" : "cupti",
			       (unsigned long long)s->allocs,
			       (unsigned long long)s->frees, (long long)s->peak,
			       us_of(m, s->peak_ts));
		if (s->source == MEMORY_TORCH) {
			textbuf_puts(&tb, "   \"at_peak\": ");
			put_owners_json(&tb, t, s->at_peak, s->nat_peak);
			textbuf_printf(&tb, ",\n   \"at_end\": {\"bytes\": %lld, \"tensors\": %llu, "
				       "\"by_operator\": ", (long long)s->end_bytes,
				       (unsigned long long)s->end_tensors);
			put_owners_json(&tb, t, s->at_end, s->nat_end);
			textbuf_puts(&tb, "},\n");
		}
		textbuf_puts(&tb, "   \"points\": [");
		for (i = 0; i < s->n; i++) {
			/* µs with 3 decimals, exactly, without formatting a
			 * double: a window holds millions of points */
			int64_t ns = s->p[i].ts - m->start, a = ns < 0 ? -ns : ns;

			textbuf_printf(&tb, "%s[%s%lld.%03lld, %lld]", i ? ", " : "",
				       ns < 0 ? "-" : "", (long long)(a / 1000),
				       (long long)(a % 1000), (long long)s->p[i].bytes);
		}
		textbuf_puts(&tb, "]}");
	}
	textbuf_puts(&tb, "\n]}\n");
	return write_text(dir, name, &tb, e);
}

/* "1.5 MiB" */
static void fmt_bytes(char *buf, size_t size, int64_t b)
{
	double v = (double)(b < 0 ? -b : b);
	const char *u = "B";

	if (v >= 1024.0 * 1024 * 1024) {
		v /= 1024.0 * 1024 * 1024;
		u = "GiB";
	} else if (v >= 1024.0 * 1024) {
		v /= 1024.0 * 1024;
		u = "MiB";
	} else if (v >= 1024.0) {
		v /= 1024.0;
		u = "KiB";
	}
	snprintf(buf, size, "%s%.*f %s", b < 0 ? "-" : "", *u == 'B' ? 0 : 1, v, u);
}

/* Appends " x,y" in tenths of a pixel, each "%d.%d" (clamped to the
 * chart's box). */
static void put_xy(struct textbuf *tb, long x, long y)
{
	x = x < 0 ? 0 : x > W * 10L ? W * 10L : x;
	y = y < 0 ? 0 : y > H * 10L ? H * 10L : y;
	textbuf_printf(tb, " %ld.%ld,%ld.%ld", x / 10, x % 10, y / 10, y % 10);
}

/* The polyline's points after its start, in tenths of a pixel: flat until
 * each event, then its new total. Events that fall in the same tenth of a
 * pixel are drawn as one vertical stroke over the totals they reach (its
 * entry, lowest, highest and last: what a pixel shows of them), so a
 * window of millions of allocations draws a few thousand points. */
static void put_steps(struct textbuf *tb, const struct memory_timeline *m,
		      const struct memory_series *s, double span, double top)
{
	long x = -1, y = (H - MB) * 10, lo = 0, hi = 0, last = 0, entry = y;
	size_t i;

	for (i = 0; i <= s->n; i++) {
		long nx = -1, ny = 0;

		if (i < s->n) {
			double b = (double)(s->p[i].bytes > 0 ? s->p[i].bytes : 0);

			nx = lround(10.0 * (ML + (double)(W - 10 - ML) *
					    (double)(s->p[i].ts - m->start) / span));
			ny = lround(10.0 * ((H - MB) - (double)(H - MB - MT) * b / top));
			if (nx == x) { /* the same column: widen its stroke */
				lo = ny < lo ? ny : lo;
				hi = ny > hi ? ny : hi;
				last = ny;
				continue;
			}
		}
		if (x >= 0) { /* the column ends: its stroke */
			put_xy(tb, x, entry);
			if (lo != entry && lo != last)
				put_xy(tb, x, lo);
			if (hi != entry && hi != last && hi != lo)
				put_xy(tb, x, hi);
			put_xy(tb, x, last);
			entry = last;
		}
		if (i == s->n)
			break;
		x = nx;
		lo = hi = last = ny;
	}
	put_xy(tb, (W - 10) * 10L, entry);
}

/* One device's step chart as inline SVG. */
static void put_chart(struct textbuf *tb, const struct memory_timeline *m,
		      const struct memory_series *s)
{
	double span = (double)(m->end - m->start), top = (double)(s->peak > 0 ? s->peak : 1);
	double px;
	char a[32], b[32], label[64];

	if (span <= 0)
		span = 1;

	series_label(s, label, sizeof label);
	textbuf_printf(tb, "<svg width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
		       "role=\"img\" aria-label=\"%s memory\">\n", W, H, W, H, label);
	/* axes */
	textbuf_printf(tb, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" class=\"axis\"/>\n",
		       ML, MT, ML, H - MB);
	textbuf_printf(tb, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" class=\"axis\"/>\n",
		       ML, H - MB, W - 10, H - MB);
	fmt_bytes(a, sizeof a, s->peak);
	textbuf_printf(tb, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%s</text>\n",
		       ML - 6, MT + 4, a);
	textbuf_printf(tb, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">0</text>\n",
		       ML - 6, H - MB + 4);
	textbuf_printf(tb, "<text x=\"%d\" y=\"%d\">0 ms</text>\n", ML, H - MB + 18);
	textbuf_printf(tb, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%.3f ms</text>\n",
		       W - 10, H - MB + 18, span / 1e6);
	/* the series as steps: flat until each event, then its new total */
	textbuf_puts(tb, "<polyline class=\"series\" points=\"");
	textbuf_printf(tb, "%d,%d", ML, H - MB);
	put_steps(tb, m, s, span, top);
	textbuf_puts(tb, "\"/>\n");
	/* the peak, marked and labelled */
	px = ML + (double)(W - 10 - ML) * (double)(s->peak_ts - m->start) / span;
	fmt_bytes(a, sizeof a, s->peak);
	snprintf(b, sizeof b, "%.3f ms", (double)(s->peak_ts - m->start) / 1e6);
	textbuf_printf(tb, "<circle class=\"peak\" cx=\"%.1f\" cy=\"%d\" r=\"4\"/>\n", px, MT);
	textbuf_printf(tb, "<text class=\"peak\" x=\"%.1f\" y=\"%d\" text-anchor=\"%s\">"
		       "peak %s at %s</text>\n", px, MT - 10, px > W / 2 ? "end" : "start",
		       a, b);
	textbuf_puts(tb, "</svg>\n");
}

/* One torch series' owners as an HTML table: at most OWNERS_HTML, then
 * the others summed. */
static void put_owners_html(struct textbuf *tb, const struct trace *t,
			    const struct memory_owner *o, size_t n)
{
	struct memory_owner rest = { STRTAB_NONE, 0, 0 };
	char a[32];
	size_t i;

	textbuf_puts(tb, "<table><tr><th style=\"text-align:left\">Operator</th><th>Bytes</th>"
		     "<th>Tensors</th></tr>\n");
	for (i = 0; i < n; i++) {
		if (i >= OWNERS_HTML) {
			rest.bytes += o[i].bytes;
			rest.tensors += o[i].tensors;
			continue;
		}
		fmt_bytes(a, sizeof a, o[i].bytes);
		textbuf_puts(tb, "<tr><td style=\"text-align:left\">");
		textbuf_put_html(tb, owner_name(t, &o[i]));
		textbuf_printf(tb, "</td><td>%s</td><td>%llu</td></tr>\n", a,
			       (unsigned long long)o[i].tensors);
	}
	if (rest.tensors) {
		fmt_bytes(a, sizeof a, rest.bytes);
		textbuf_printf(tb, "<tr><td style=\"text-align:left\">(%zu others)</td><td>%s</td>"
			       "<td>%llu</td></tr>\n", n - OWNERS_HTML, a,
			       (unsigned long long)rest.tensors);
	}
	textbuf_puts(tb, "</table>\n");
}

/* Under a torch series' chart: who held the memory at its peak, and what
 * was still allocated when the window ended (what grew in it). */
static void put_owners(struct textbuf *tb, const struct memory_timeline *m,
		       const struct trace *t, const struct memory_series *s)
{
	char a[32];

	fmt_bytes(a, sizeof a, s->peak);
	textbuf_printf(tb, "<h3>At the peak (%s at %.3f ms): the tensors then allocated, by "
		       "the operator that allocated them</h3>\n", a,
		       (double)(s->peak_ts - m->start) / 1e6);
	if (s->nat_peak)
		put_owners_html(tb, t, s->at_peak, s->nat_peak);
	else
		textbuf_puts(tb, "<p>none allocated in the window</p>\n");
	fmt_bytes(a, sizeof a, s->end_bytes);
	textbuf_printf(tb, "<h3>Still allocated at the end (%s in %llu tensors allocated in "
		       "the window and not freed: what grew), by operator</h3>\n", a,
		       (unsigned long long)s->end_tensors);
	if (s->nat_end)
		put_owners_html(tb, t, s->at_end, s->nat_end);
	else
		textbuf_puts(tb, "<p>none: every tensor allocated in the window was freed in "
			     "it</p>\n");
}

int memory_timeline_write_html(const struct memory_timeline *m, const struct trace *t,
			       const struct outdir *dir, const char *name, struct err *e)
{
	struct textbuf tb;
	char a[32], b[32], label[64], title[512];
	bool cupti = false, torch = false;
	size_t d;

	for (d = 0; d < m->ndev; d++) {
		cupti |= m->dev[d].source == MEMORY_CUPTI;
		torch |= m->dev[d].source == MEMORY_TORCH;
	}
	snprintf(title, sizeof title, "%s: %s, %s %u (steps %llu-%llu)",
		 cupti && !torch ? "GPU memory" : "Memory",
		 t->meta.program ? t->meta.program : "?",
		 t->meta.recorder ? "recorder dump" : "window", t->meta.window,
		 (unsigned long long)t->meta.first_step, (unsigned long long)t->meta.last_step);
	textbuf_init(&tb);
	textbuf_puts(&tb, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>");
	textbuf_put_html(&tb, title);
	textbuf_puts(&tb, "</title>\n<style>\n"
		     "body{font:14px sans-serif;margin:24px;color:#222}\n"
		     "svg{display:block;margin:8px 0 24px;background:#fafafa}\n"
		     "svg text{font:12px sans-serif;fill:#444}\n"
		     ".axis{stroke:#888;stroke-width:1}\n"
		     ".series{fill:none;stroke:#1f77b4;stroke-width:1.5}\n"
		     "circle.peak{fill:#d62728}\ntext.peak{fill:#d62728;font-weight:bold}\n"
		     "table{border-collapse:collapse}td,th{padding:2px 12px;text-align:right}\n"
		     "</style></head><body>\n<h1>");
	textbuf_put_html(&tb, title);
	textbuf_puts(&tb, "</h1>\n");
	if (torch)
		textbuf_puts(&tb, "<p>torch's tensors (prof.capture{ profile_memory = true }), "
			     "tensor by tensor as torch's allocators report them, per device: "
			     "bytes allocated over the window, each tensor charged to the "
			     "operator running on its thread when it was allocated.</p>\n");
	if (cupti)
		textbuf_puts(&tb, "<p>Bytes allocated with CUDA (cudaMalloc and friends, "
			     "from CUPTI) over the window, per device: for PyTorch, its caching "
			     "allocator's segments.</p>\n");
	textbuf_puts(&tb, "<p>Blocks allocated before the window are not counted.</p>\n"
		     "<table><tr><th>Device</th><th>Peak</th><th>at</th><th>Allocations</th>"
		     "<th>Frees</th><th>Still allocated at the end</th></tr>\n");
	for (d = 0; d < m->ndev; d++) {
		const struct memory_series *s = &m->dev[d];

		series_label(s, label, sizeof label);
		fmt_bytes(a, sizeof a, s->peak);
		fmt_bytes(b, sizeof b, s->source == MEMORY_TORCH ? s->end_bytes :
			  s->n ? s->p[s->n - 1].bytes : 0);
		textbuf_printf(&tb, "<tr><td>%s</td><td>%s</td><td>%.3f ms</td><td>%llu</td>"
			       "<td>%llu</td><td>%s</td></tr>\n", label, a,
			       (double)(s->peak_ts - m->start) / 1e6,
			       (unsigned long long)s->allocs, (unsigned long long)s->frees, b);
	}
	textbuf_puts(&tb, "</table>\n");
	for (d = 0; d < m->ndev; d++) {
		series_label(&m->dev[d], label, sizeof label);
		textbuf_printf(&tb, "<h2>%s</h2>\n", label);
		put_chart(&tb, m, &m->dev[d]);
		if (m->dev[d].source == MEMORY_TORCH)
			put_owners(&tb, m, t, &m->dev[d]);
	}
	textbuf_puts(&tb, "</body></html>\n");
	return write_text(dir, name, &tb, e);
}

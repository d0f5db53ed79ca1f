/* memory_timeline — GPU memory over a window (see memory_timeline.h). */
#include "memory_timeline.h"

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

		qsort(s->p, s->n, sizeof *s->p, cmp_point);
		s->peak_ts = s->n ? s->p[0].ts : m->start;
		for (i = 0; i < s->n; i++)
			if (s->p[i].bytes > s->peak) {
				s->peak = s->p[i].bytes;
				s->peak_ts = s->p[i].ts;
			}
	}
	return 0;
}

void memory_timeline_free(struct memory_timeline *m)
{
	size_t d;

	for (d = 0; d < m->ndev; d++)
		free(m->dev[d].p);
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

		textbuf_printf(&tb, "%s\n  {\"device\": %d, \"allocations\": %llu, \"frees\": %llu,"
			       " \"peak\": {\"bytes\": %lld, \"t_us\": %.3f},\n   \"points\": [",
			       d ? "," : "", (int)s->device, (unsigned long long)s->allocs,
			       (unsigned long long)s->frees, (long long)s->peak,
			       us_of(m, s->peak_ts));
		for (i = 0; i < s->n; i++)
			textbuf_printf(&tb, "%s[%.3f, %lld]", i ? ", " : "", us_of(m, s->p[i].ts),
				       (long long)s->p[i].bytes);
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

/* One device's step chart as inline SVG. */
static void put_chart(struct textbuf *tb, const struct memory_timeline *m,
		      const struct memory_series *s)
{
	double span = (double)(m->end - m->start), top = (double)(s->peak > 0 ? s->peak : 1);
	double px, py, prev_y = H - MB;
	char a[32], b[32];
	size_t i;

	if (span <= 0)
		span = 1;
	textbuf_printf(tb, "<svg width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
		       "role=\"img\" aria-label=\"GPU %d memory\">\n", W, H, W, H,
		       (int)s->device);
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
	for (i = 0; i < s->n; i++) {
		px = ML + (double)(W - 10 - ML) * (double)(s->p[i].ts - m->start) / span;
		py = (H - MB) - (double)(H - MB - MT) * (double)(s->p[i].bytes > 0 ? s->p[i].bytes : 0) / top;
		textbuf_printf(tb, " %.1f,%.1f %.1f,%.1f", px, prev_y, px, py);
		prev_y = py;
	}
	textbuf_printf(tb, " %d,%.1f\"/>\n", W - 10, prev_y);
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

int memory_timeline_write_html(const struct memory_timeline *m, const struct trace *t,
			       const struct outdir *dir, const char *name, struct err *e)
{
	struct textbuf tb;
	char a[32], title[512];
	size_t d;

	snprintf(title, sizeof title, "GPU memory: %s, window %u (steps %llu-%llu)",
		 t->meta.program ? t->meta.program : "?", t->meta.window,
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
	textbuf_puts(&tb, "</h1>\n<p>Bytes allocated with CUDA (cudaMalloc and friends, "
		     "from CUPTI) over the window, per device. Blocks allocated before "
		     "the window are not counted.</p>\n<table><tr><th>Device</th><th>Peak</th>"
		     "<th>at</th><th>Allocations</th><th>Frees</th></tr>\n");
	for (d = 0; d < m->ndev; d++) {
		const struct memory_series *s = &m->dev[d];

		fmt_bytes(a, sizeof a, s->peak);
		textbuf_printf(&tb, "<tr><td>GPU %d</td><td>%s</td><td>%.3f ms</td><td>%llu</td>"
			       "<td>%llu</td></tr>\n", (int)s->device, a,
			       (double)(s->peak_ts - m->start) / 1e6,
			       (unsigned long long)s->allocs, (unsigned long long)s->frees);
	}
	textbuf_puts(&tb, "</table>\n");
	for (d = 0; d < m->ndev; d++) {
		textbuf_printf(&tb, "<h2>GPU %d</h2>\n", (int)m->dev[d].device);
		put_chart(&tb, m, &m->dev[d]);
	}
	textbuf_puts(&tb, "</body></html>\n");
	return write_text(dir, name, &tb, e);
}

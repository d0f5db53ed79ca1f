/*
 * hanghtml — a hang report's report.html (hangreport.h): the stuck step,
 * how long, the stuck threads (their open ranges with ages, top frames),
 * the GPU work in flight, the last steps; the other threads are in
 * hang_report.txt.
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "hangfmt.h"
#include "hangreport.h"

#define HANG_HTML_FRAMES 8         /* top frames per stuck thread */

/* Whether thread t is one the stall is about: the stepping thread, or one
 * inside a range (not profhost's own). */
static bool stuck_thread(const struct hang_report *r, const struct hang_thread *t)
{
	return !t->self && (t->tid == r->step_tid || t->nranges > 0);
}

/* A thread's open ranges with their ages. */
static void html_ranges(struct textbuf *tb, const struct hang_thread *t, int64_t now)
{
	char age[48];
	size_t i;

	textbuf_puts(tb, "<table class=\"ranges\"><tr><th>open range (outermost "
		     "first)</th><th>open for</th></tr>\n");
	for (i = 0; i < t->nranges; i++) {
		const struct nvtx_open_range *g = &t->ranges[i];

		if (g->start_ns)
			snprintf(age, sizeof age, "%.1f s", (double)(now - g->start_ns) / 1e9);
		else
			snprintf(age, sizeof age, "since before the watchdog kept times");
		textbuf_puts(tb, "<tr><td><code>");
		textbuf_put_html(tb, hang_range_name(g));
		textbuf_printf(tb, "</code></td><td class=\"age\">%s</td></tr>\n", age);
	}
	textbuf_puts(tb, "</table>\n");
}

/* One thread's block in report.html: its open ranges with their ages, its
 * top native and Python frames. */
static void html_thread(struct textbuf *tb, const struct hang_report *r,
			const struct hang_thread *t)
{
	char frame[PATH_MAX + 64];
	int f, shown;

	textbuf_printf(tb, "<h3>thread %d &ldquo;", (int)t->tid);
	textbuf_put_html(tb, t->name);
	textbuf_puts(tb, "&rdquo;");
	if (t->tid == r->pid)
		textbuf_puts(tb, " (main thread)");
	if (t->tid == r->step_tid)
		textbuf_puts(tb, " (steps)");
	textbuf_puts(tb, "</h3>\n");
	if (t->nranges)
		html_ranges(tb, t, r->now);
	if (t->no_stack || t->state != HANG_STACK_OK) {
		textbuf_puts(tb, "<p>native stack: not taken (see hang_report.txt)</p>\n");
	} else {
		shown = t->nframes < HANG_HTML_FRAMES ? t->nframes : HANG_HTML_FRAMES;
		textbuf_puts(tb, "<p>native stack, innermost first:</p>\n<ol class=\"frames\">");
		for (f = 0; f < shown; f++) {
			r->frame_text(t->ip[f], f > 0, frame, sizeof frame);
			textbuf_puts(tb, "<li><code>");
			textbuf_put_html(tb, frame);
			textbuf_puts(tb, "</code></li>");
		}
		textbuf_puts(tb, "</ol>\n");
		if (t->nframes > shown || t->truncated)
			textbuf_puts(tb, "<p class=\"more\">deeper frames in hang_report.txt</p>\n");
	}
	if (t->py) {
		const char *p = t->py, *end = t->py + t->pylen;

		textbuf_puts(tb, "<p>Python stack, most recent call first:</p>\n"
			     "<ol class=\"frames\">");
		for (shown = 0; p < end && shown < HANG_HTML_FRAMES;) {
			const char *nl = memchr(p, '\n', (size_t)(end - p));
			size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);

			if (hang_py_frame(p, n, frame, sizeof frame)) {
				textbuf_puts(tb, "<li><code>");
				textbuf_put_html(tb, frame);
				textbuf_puts(tb, "</code></li>");
				shown++;
			}
			p += n + 1;
		}
		textbuf_puts(tb, "</ol>\n");
	}
}

/* The page's head, its title and the process and limit it is about. */
static void html_head(struct textbuf *tb, const struct hang_report *r, double stalled)
{
	textbuf_printf(tb, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
		       "<title>profhost hang %u: step %llu</title>\n", r->k,
		       (unsigned long long)r->step);
	textbuf_puts(tb, "<style>body{font-family:sans-serif;margin:1.5em;max-width:70em}"
		     "table{border-collapse:collapse}td,th{border:1px solid #ccc;"
		     "padding:2px 8px;text-align:left}td.age{text-align:right}"
		     "ol.frames{font-size:90%;margin-top:0}p.more{color:#666}"
		     "h2{border-bottom:1px solid #ccc}</style></head><body>\n");
	textbuf_printf(tb, "<h1>Hang %u: step %llu has not ended after %.1f s</h1>\n", r->k,
		       (unsigned long long)r->step, stalled);
	textbuf_printf(tb, "<p>rank %d of %d, pid %d, <code>", r->rank, r->world_size, r->pid);
	textbuf_put_html(tb, r->program);
	textbuf_puts(tb, "</code> on ");
	textbuf_put_html(tb, r->hostname);
	textbuf_printf(tb, ". The watchdog's limit: %.3f s = max(after_s %g, factor %g "
		       "&times; median step %.3f ms). Every thread's full stack: "
		       "<a href=\"hang_report.txt\">hang_report.txt</a>.</p>\n",
		       (double)r->limit / 1e9, r->after_s, r->factor, r->median_ms);
}

/* The page's line on the recorder dump. */
static void html_dump(struct textbuf *tb, const struct hang_dump *dump)
{
	if (dump->taken) {
		textbuf_printf(tb, "<p>Recorder dump %u of steps %llu-%llu (step %llu so "
			       "far, marked partial): <a href=\"../%s/report.html\">%s</a>",
			       dump->index, (unsigned long long)dump->first,
			       (unsigned long long)dump->last,
			       (unsigned long long)dump->last, dump->dir, dump->dir);
		if (dump->behind)
			textbuf_printf(tb, ", written by profhost's host thread after the "
				       "%zu window%s or dump%s it had to finish first",
				       dump->behind, dump->behind == 1 ? "" : "s",
				       dump->behind == 1 ? "" : "s");
		textbuf_puts(tb, ".</p>\n");
	} else {
		textbuf_puts(tb, "<p>Recorder dump: none (");
		textbuf_put_html(tb, dump->why);
		textbuf_puts(tb, ").</p>\n");
	}
}

/* The page's GPU section. */
static void html_gpu(struct textbuf *tb, const struct hang_gpu *gpu, int64_t now)
{
	char where[64];
	size_t j;

	textbuf_puts(tb, "<h2>GPU</h2>\n");
	if (!gpu->known) {
		textbuf_puts(tb, "<p>Kernels in flight not known: ");
		textbuf_put_html(tb, gpu->note);
		textbuf_puts(tb, ".</p>\n");
	} else if (gpu->n == 0) {
		textbuf_puts(tb, "<p>No kernel launched and not finished.</p>\n");
	} else {
		textbuf_puts(tb, "<table class=\"gpu\"><tr><th>where</th><th>kernel launched, "
			     "not finished</th><th>launched</th><th>thread</th></tr>\n");
		for (j = 0; j < gpu->n; j++) {
			const struct hang_kernel *l = &gpu->k[j];

			hang_gpu_where(l, where, sizeof where);
			textbuf_printf(tb, "<tr><td>%s</td><td><code>", where);
			textbuf_put_html(tb, l->name);
			textbuf_printf(tb, "</code></td><td class=\"age\">%.1f s ago</td>"
				       "<td>%d</td></tr>\n",
				       (double)(now - l->launched_ns) / 1e9, (int)l->tid);
		}
		textbuf_puts(tb, "</table>\n");
		if (gpu->more)
			textbuf_printf(tb, "<p class=\"more\">and %llu more launched later</p>\n",
				       (unsigned long long)gpu->more);
	}
	if (gpu->known && gpu->forgotten)
		textbuf_printf(tb, "<p class=\"more\">%llu earlier launches left the table of "
			       "launches before their record came: whether they finished is "
			       "not known.</p>\n", (unsigned long long)gpu->forgotten);
}

void hang_html(struct textbuf *tb, const struct hang_report *r)
{
	double stalled = (double)(r->now - r->start) / 1e9;
	size_t j;
	int i, others = 0;

	html_head(tb, r, stalled);
	html_dump(tb, &r->dump);
	textbuf_puts(tb, "<h2>Stuck threads</h2>\n");
	for (i = 0; i < r->n; i++) {
		if (stuck_thread(r, &r->th[i]))
			html_thread(tb, r, &r->th[i]);
		else
			others++;
	}
	if (others)
		textbuf_printf(tb, "<p class=\"more\">%d other thread%s (no open range, not "
			       "stepping) in hang_report.txt</p>\n", others,
			       others == 1 ? "" : "s");
	html_gpu(tb, r->gpu, r->now);
	textbuf_printf(tb, "<h2>Last steps</h2>\n<p>median %.3f ms, mean %.3f ms (%zu steps "
		       "known)</p>\n<table><tr><th>step</th><th>duration</th></tr>\n",
		       r->median_ms, r->mean_ms, r->ndur);
	for (j = 0; j < r->nlast; j++)
		textbuf_printf(tb, "<tr><td>%llu</td><td class=\"age\">%.3f ms</td></tr>\n",
			       (unsigned long long)(r->step - r->nlast + j), r->last_ms[j]);
	textbuf_printf(tb, "<tr><td>%llu</td><td class=\"age\">running for %.1f s</td>"
		       "</tr>\n</table>\n</body></html>\n", (unsigned long long)r->step,
		       stalled);
}

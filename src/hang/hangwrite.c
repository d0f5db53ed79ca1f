/*
 * hangwrite — a hang report's hang_report.txt and hang.json, and the
 * writing of its three files (hangreport.h).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "../export/outfile.h"
#include "hangreport.h"
#include "hangfmt.h"

const char *hang_range_name(const struct nvtx_open_range *r)
{
	return r->name[0] ? r->name : "(unnamed range)";
}

bool hang_py_frame(const char *line, size_t n, char *out, size_t size)
{
	char buf[1024], file[768], func[256];
	int ln = 0;

	if (n >= sizeof buf)
		n = sizeof buf - 1;
	memcpy(buf, line, n);
	buf[n] = '\0';
	if (sscanf(buf, " File \"%767[^\"]\", line %d in %255s", file, &ln, func) != 3)
		return false;
	snprintf(out, size, "%s (%s:%d)", func, file, ln);
	return true;
}

void hang_gpu_where(const struct hang_kernel *l, char *out, size_t size)
{
	char dev[24] = "GPU ?", st[32] = "stream ?";

	if (l->device >= 0)
		snprintf(dev, sizeof dev, "GPU %d", (int)l->device);
	if (l->stream >= 0)
		snprintf(st, sizeof st, "stream %lld", (long long)l->stream);
	snprintf(out, size, "%s, %s", dev, st);
}

/* Adds the report's text for one thread. */
static void text_thread(struct textbuf *tb, const struct hang_report *r,
			const struct hang_thread *t)
{
	size_t i;
	int f;
	char frame[PATH_MAX + 64];

	textbuf_printf(tb, "thread %d \"%s\"", (int)t->tid, t->name);
	if (t->tid == r->pid)
		textbuf_puts(tb, " (main thread)");
	if (t->tid == r->step_tid)
		textbuf_puts(tb, " (steps)");
	if (t->self)
		textbuf_puts(tb, " (profhost's hang watchdog, writing this report)");
	textbuf_puts(tb, "\n");
	for (i = 0; i < t->nranges; i++) {
		const struct nvtx_open_range *g = &t->ranges[i];

		if (g->start_ns)
			textbuf_printf(tb, "  inside `%s` for %.1f s\n", hang_range_name(g),
				       (double)(r->now - g->start_ns) / 1e9);
		else
			textbuf_printf(tb, "  inside `%s` (open since before the "
				       "watchdog kept times)\n", hang_range_name(g));
	}
	if (t->no_stack) {
		textbuf_printf(tb, "  native stack: not taken (%s)\n", t->no_stack);
	} else if (t->state != HANG_STACK_OK) {
		textbuf_printf(tb, "  native stack: not taken (%s)\n",
			       t->state == HANG_STACK_BLOCKED ? "the thread blocks "
			       "signals" : t->state == HANG_STACK_GONE ?
			       "it exited meanwhile" : "it did not answer in time");
	} else {
		textbuf_puts(tb, "  native stack:\n");
		for (f = 0; f < t->nframes; f++) {
			r->frame_text(t->ip[f], f > 0, frame, sizeof frame);
			textbuf_printf(tb, "    #%-2d %s\n", f, frame);
		}
		if (t->truncated)
			textbuf_puts(tb, "    ... (deeper frames not taken)\n");
	}
	if (t->py) {
		const char *p = t->py, *end = t->py + t->pylen;

		textbuf_puts(tb, "  Python stack (most recent call first):\n");
		while (p < end) {
			const char *nl = memchr(p, '\n', (size_t)(end - p));
			size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);

			textbuf_puts(tb, "  ");
			textbuf_add(tb, p, n);
			textbuf_puts(tb, "\n");
			p += n + 1;
		}
	}
	textbuf_puts(tb, "\n");
}

/* Adds thread t to hang.json's "threads". */
static void json_thread(cJSON *arr, const struct hang_report *r, const struct hang_thread *t)
{
	cJSON *o = cJSON_CreateObject(), *a;
	char frame[PATH_MAX + 64];
	size_t i;
	int f;

	if (!o)
		return;
	cJSON_AddNumberToObject(o, "tid", t->tid);
	cJSON_AddStringToObject(o, "name", t->name);
	cJSON_AddBoolToObject(o, "main", t->tid == r->pid);
	cJSON_AddBoolToObject(o, "steps", t->tid == r->step_tid);
	cJSON_AddBoolToObject(o, "profhost", t->self || strncmp(t->name, "profhost", 8) == 0);
	a = cJSON_AddArrayToObject(o, "ranges");
	for (i = 0; a && i < t->nranges; i++) {
		cJSON *g = cJSON_CreateObject();

		if (!g)
			break;
		cJSON_AddStringToObject(g, "name", hang_range_name(&t->ranges[i]));
		if (t->ranges[i].start_ns)
			cJSON_AddNumberToObject(g, "open_s",
						(double)(r->now - t->ranges[i].start_ns) / 1e9);
		cJSON_AddItemToArray(a, g);
	}
	a = cJSON_AddArrayToObject(o, "native");
	for (f = 0; a && t->state == HANG_STACK_OK && f < t->nframes; f++) {
		r->frame_text(t->ip[f], f > 0, frame, sizeof frame);
		cJSON_AddItemToArray(a, cJSON_CreateString(frame));
	}
	if (t->py) {
		const char *p = t->py, *end = t->py + t->pylen;

		a = cJSON_AddArrayToObject(o, "python");
		while (a && p < end) {
			const char *nl = memchr(p, '\n', (size_t)(end - p));
			size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);

			if (hang_py_frame(p, n, frame, sizeof frame))
				cJSON_AddItemToArray(a, cJSON_CreateString(frame));
			p += n + 1;
		}
	}
	cJSON_AddItemToArray(arr, o);
}

/* The report's GPU section. */
static void gpu_text(struct textbuf *tb, const struct hang_gpu *w, int64_t now)
{
	char where[64];
	size_t i;

	if (!w->known) {
		textbuf_printf(tb, "GPU: kernels in flight not known (%s)\n\n", w->note);
		return;
	}
	if (w->n == 0) {
		textbuf_puts(tb, "GPU: no kernel launched and not finished (every kernel "
			     "launched has its completion record)\n");
	} else {
		textbuf_printf(tb, "GPU: kernels launched and not finished (%zu; no "
			       "completion record yet), by stream, oldest first:\n",
			       w->n + (size_t)w->more);
		for (i = 0; i < w->n; i++) {
			const struct hang_kernel *l = &w->k[i];

			if (i == 0 || l->device != w->k[i - 1].device ||
			    l->stream != w->k[i - 1].stream) {
				hang_gpu_where(l, where, sizeof where);
				textbuf_printf(tb, "  %s:\n", where);
			}
			textbuf_printf(tb, "    `%s` launched %.1f s ago (thread %d)\n",
				       l->name, (double)(now - l->launched_ns) / 1e9,
				       (int)l->tid);
		}
		if (w->more)
			textbuf_printf(tb, "  ... and %llu more launched later\n",
				       (unsigned long long)w->more);
	}
	if (w->forgotten)
		textbuf_printf(tb, "  (%llu earlier launches left the table of launches "
			       "before their record came: whether they finished is not "
			       "known)\n", (unsigned long long)w->forgotten);
	textbuf_puts(tb, "\n");
}

/* hang.json's "gpu": {"known", "note", "in_flight": [...], "more", "forgotten"}. */
static void gpu_json(cJSON *root, const struct hang_gpu *w, int64_t now)
{
	cJSON *o = cJSON_AddObjectToObject(root, "gpu"), *a;
	size_t i;

	if (!o)
		return;
	cJSON_AddBoolToObject(o, "known", w->known == 1);
	if (!w->known) {
		cJSON_AddStringToObject(o, "note", w->note);
		return;
	}
	a = cJSON_AddArrayToObject(o, "in_flight");
	for (i = 0; a && i < w->n; i++) {
		const struct hang_kernel *l = &w->k[i];
		cJSON *k = cJSON_CreateObject();

		if (!k)
			break;
		cJSON_AddStringToObject(k, "name", l->name);
		cJSON_AddNumberToObject(k, "device", l->device);
		cJSON_AddNumberToObject(k, "stream", (double)l->stream);
		cJSON_AddNumberToObject(k, "launched_s_ago", (double)(now - l->launched_ns) / 1e9);
		cJSON_AddNumberToObject(k, "tid", l->tid);
		cJSON_AddNumberToObject(k, "correlation", l->corr);
		cJSON_AddItemToArray(a, k);
	}
	cJSON_AddNumberToObject(o, "more", (double)w->more);
	cJSON_AddNumberToObject(o, "forgotten", (double)w->forgotten);
}

/* The report's line on the dump. */
static void dump_text(struct textbuf *tb, const struct hang_dump *d)
{
	if (!d->taken) {
		textbuf_printf(tb, "Recorder dump: none (%s)\n\n", d->why);
		return;
	}
	textbuf_printf(tb, "Recorder dump: recorder dump %u of steps %llu-%llu (step %llu "
		       "so far, marked partial), taken now; profhost's host thread writes "
		       "it into ../%s/", d->index, (unsigned long long)d->first,
		       (unsigned long long)d->last, (unsigned long long)d->last,
		       d->dir);
	if (d->behind)
		textbuf_printf(tb, " after the %zu window%s or dump%s it has to finish "
			       "first", d->behind, d->behind == 1 ? "" : "s",
			       d->behind == 1 ? "" : "s");
	textbuf_puts(tb, "\n\n");
}

/* hang.json's "dump": {"index", "first", "last", "dir", "behind"}, or
 * null and "dump_missing": why. */
static void dump_json(cJSON *root, const struct hang_dump *d)
{
	cJSON *o;

	if (!d->taken) {
		cJSON_AddNullToObject(root, "dump");
		cJSON_AddStringToObject(root, "dump_missing", d->why);
		return;
	}
	o = cJSON_AddObjectToObject(root, "dump");
	if (!o)
		return;
	cJSON_AddNumberToObject(o, "index", d->index);
	cJSON_AddNumberToObject(o, "first", (double)d->first);
	cJSON_AddNumberToObject(o, "last", (double)d->last);
	cJSON_AddStringToObject(o, "dir", d->dir);
	cJSON_AddNumberToObject(o, "behind", (double)d->behind);
}

void hang_text(struct textbuf *tb, const struct hang_report *r)
{
	const struct hang_asked *asked = r->asked;
	size_t j;
	int i;

	textbuf_printf(tb, "profhost hang report %u: rank %d of %d, pid %d, %s on %s\n",
		       r->k, r->rank, r->world_size, r->pid, r->program, r->hostname);
	if (asked)
		textbuf_printf(tb, "asked by rank %d's hang (its step %llu, on %s): this "
			       "rank's threads at that moment; its step %llu has run %.1f s "
			       "(its own limit: %.3f s)\n\n", asked->rank,
			       (unsigned long long)asked->step, asked->host,
			       (unsigned long long)r->step, r->stalled, (double)r->limit / 1e9);
	else
		textbuf_printf(tb, "step %llu has not ended after %.1f s (the watchdog's limit: "
			       "%.3f s = max(after_s %g, factor %g x median step %.3f ms))\n\n",
			       (unsigned long long)r->step, r->stalled, (double)r->limit / 1e9,
			       r->after_s, r->factor, r->median_ms);
	textbuf_printf(tb, "Last steps (%zu of the last %zu; median %.3f ms, mean %.3f ms):\n",
		       r->nlast, r->ndur, r->median_ms, r->mean_ms);
	for (j = 0; j < r->nlast; j++)
		textbuf_printf(tb, "  step %llu: %.3f ms\n",
			       (unsigned long long)(r->step - r->nlast + j), r->last_ms[j]);
	textbuf_printf(tb, "  step %llu: running for %.1f s\n\n",
		       (unsigned long long)r->step, r->stalled);
	dump_text(tb, &r->dump);
	if (!r->py)
		textbuf_printf(tb, "Python stacks: none (%s)\n\n", r->py_why);
	gpu_text(tb, r->gpu, r->now);
	textbuf_printf(tb, "Threads (%d): open ranges outermost first, then the stacks\n\n",
		       r->n);
	for (i = 0; i < r->n; i++)
		text_thread(tb, r, &r->th[i]);
}

char *hang_json(const struct hang_report *r)
{
	cJSON *root = cJSON_CreateObject(), *arr;
	char *json;
	int i;

	if (!root)
		return NULL;
	cJSON_AddNumberToObject(root, "rank", r->rank);
	cJSON_AddNumberToObject(root, "world_size", r->world_size);
	cJSON_AddNumberToObject(root, "pid", r->pid);
	cJSON_AddStringToObject(root, "host", r->hostname);
	cJSON_AddStringToObject(root, "program", r->program);
	cJSON_AddNumberToObject(root, "hang", r->k);
	cJSON_AddNumberToObject(root, "step", (double)r->step);
	cJSON_AddNumberToObject(root, "stalled_s", r->stalled);
	cJSON_AddNumberToObject(root, "limit_s", (double)r->limit / 1e9);
	cJSON_AddNumberToObject(root, "median_ms", r->median_ms);
	cJSON_AddNumberToObject(root, "time_unix", (double)time(NULL));
	/* on the trace clock: the windows and dumps whose span overlaps
	 * the stall link this report (hanglinks.h) */
	cJSON_AddNumberToObject(root, "since_ts", (double)r->start);
	cJSON_AddNumberToObject(root, "report_ts", (double)r->now);
	if (!r->py)
		cJSON_AddStringToObject(root, "python_missing", r->py_why);
	if (r->asked) {
		cJSON *a = cJSON_AddObjectToObject(root, "asked_by");

		if (a) {
			cJSON_AddNumberToObject(a, "rank", r->asked->rank);
			cJSON_AddNumberToObject(a, "step", (double)r->asked->step);
			cJSON_AddStringToObject(a, "host", r->asked->host);
		}
	}
	dump_json(root, &r->dump);
	arr = cJSON_AddArrayToObject(root, "threads");
	for (i = 0; arr && i < r->n; i++)
		json_thread(arr, r, &r->th[i]);
	gpu_json(root, r->gpu, r->now);
	json = cJSON_PrintUnformatted(root);
	cJSON_Delete(root);
	return json;
}

int hang_write(const struct outdir *dir, const struct hang_report *r, struct err *e)
{
	struct textbuf tb, html;
	char *text, *json, *page;
	int rc = 0;

	textbuf_init(&tb);
	textbuf_init(&html);
	hang_text(&tb, r);
	json = hang_json(r);
	hang_html(&html, r);
	text = textbuf_take(&tb);
	page = textbuf_take(&html);
	/* in this order, each written while the ones before are */
	if (!text || outfile_write_textat(dir, "hang_report.txt", text, e) != 0 ||
	    !json || outfile_write_textat(dir, "hang.json", json, e) != 0 ||
	    !page || outfile_write_textat(dir, "report.html", page, e) != 0) {
		if (!text || !json || !page)
			err_set(e, "out of memory");
		rc = -1;
	}
	free(text);
	free(json);
	free(page);
	textbuf_free(&tb);
	textbuf_free(&html);
	return rc;
}

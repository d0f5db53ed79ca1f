/*
 * watchdog — the hang watchdog (prof.watchdog{}, docs/recorder.md).
 *
 * Runs on a thread of its own ("profhost-wd", every signal blocked), which
 * sleeps on a wake word until the running step's deadline (check()
 * returns it), so the step path does nothing more than it did
 * (window_step already keeps the step's start and the recent durations),
 * and the host thread writing a window (seconds, for millions of events)
 * does not hold a report back: the watchdog never waits for the host
 * thread, only for short locks (the window's, the stacks', a GPU flush's)
 * and, for prof.on_hang, the policy's VM. When the current step has run
 * longer than
 * max(after_s, factor x median step), it writes one report per hang into
 * <run>/rank<R>/hang<K>_step<N>/: hang_report.txt (every thread's native
 * stack, Python stacks where the bridge can give them, each thread's open
 * ranges and how long each has been open, on a GPU the kernels launched
 * and not finished, the last steps), hang.json (the same for `prof
 * report`'s view across ranks) and report.html (the same for a browser:
 * the stuck threads first); with the recorder on, takes a dump of the
 * last steps and the stalled one so far (window_dump_hang: under the
 * window lock, no waiting) and hands it to the host thread once the report
 * is written, after what it is writing (the report says which dump, or
 * why none); then runs prof.on_hang. When steps resume it says how long
 * the step stalled.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "../control/control.h"
#include "../common/clock.h"
#include "../export/outdir.h"
#include "../export/outfile.h"
#include "../export/textbuf.h"
#include "../util/demangle.h"
#include "../common/log.h"
#include "../util/wakeword.h"
#include "capture.h"
#include "host.h"

#define WD_RANGES_MAX 4096         /* open levels read, all threads */
#define WD_STEPS_SHOWN 10          /* last steps in the report */
#define WD_PY_MAX (1u << 20)       /* Python stacks' text, at most */
#define WD_POLL_NS 1000000000LL    /* while hung: how often to look for
				      the step's end */
#define WD_MIN_WAIT_NS 10000000LL
#define WD_HTML_FRAMES 8           /* top frames per stuck thread in the html */

/* What the window state says now, copied under its lock. */
struct wd_snap {
	bool finished;
	uint64_t step;                 /* the step in progress */
	int64_t start;                 /* when it began */
	int32_t tid;                   /* the thread of the last boundary */
	size_t ndur;                   /* step durations known */
	double median_ms, mean_ms;
	double last_ms[WD_STEPS_SHOWN];/* oldest first */
	size_t nlast;
	double hung_ms;                /* the duration of the hung step, once
					  it ended (-1: not known) */
};

/* Copies what the watchdog needs of the window state; `hung` is the step
 * whose duration is wanted (UINT64_MAX: none). Returns false when the
 * window lock could not be taken within a second (a thread holds it:
 * looked at again next time). The watchdog's thread. */
static bool take_snapshot(struct host *h, uint64_t hung, struct wd_snap *s)
{
	struct window_state *w = &h->win;
	struct timespec until;
	size_t i, n;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 1;
	if (pthread_mutex_timedlock(&w->lock, &until) != 0)
		return false;
	s->finished = w->finished;
	s->step = w->sched.step;
	s->start = w->step_start;
	s->tid = w->step_tid;
	s->ndur = w->ndur;
	window_step_stats(w, &s->median_ms, &s->mean_ms);
	n = w->ndur < WD_STEPS_SHOWN ? w->ndur : WD_STEPS_SHOWN;
	for (i = 0; i < n; i++)
		s->last_ms[i] = w->dur_ms[(w->dur_pos + HOST_DUR_RING - n + i) % HOST_DUR_RING];
	s->nlast = n;
	s->hung_ms = -1;
	if (hung != UINT64_MAX && s->step > hung && s->step - hung <= w->ndur)
		s->hung_ms = w->dur_ms[(w->dur_pos + HOST_DUR_RING - (s->step - hung)) %
				       HOST_DUR_RING];
	pthread_mutex_unlock(&w->lock);
	return true;
}

/* The watchdog's limit in ns for a median step of `median_ms`. */
static int64_t limit_ns(const struct policy_config *c, double median_ms)
{
	double s = c->watchdog.after_s, f = c->watchdog.factor * median_ms / 1e3;

	return (int64_t)((f > s ? f : s) * 1e9);
}

/* ------------------------------------------------------------ the report */

/* One thread as the report sees it. */
struct wd_thread {
	const struct control_stack *stack;
	const struct nvtx_open_range *ranges;  /* into the open-range array */
	size_t nranges;
	uintptr_t pthread;
	const char *py;                         /* its Python block, or NULL */
	size_t pylen;
	const char *no_stack;                   /* why stacks were not taken at
						   all (NULL: they were) */
};

/* A range's display name. */
static const char *range_name(const struct nvtx_open_range *r)
{
	return r->name[0] ? r->name : "(unnamed range)";
}

/* Finds thread `ptid`'s block ("Thread 0x..." or "Current thread 0x...")
 * in faulthandler's text; *len its length. NULL when not there. */
static const char *py_block(const char *text, uintptr_t ptid, size_t *len)
{
	char want[40];
	const char *p = text, *end;

	if (!text || !ptid)
		return NULL;
	snprintf(want, sizeof want, "hread 0x%016lx", (unsigned long)ptid);
	while ((p = strstr(p, want)) != NULL) {
		if (p == text || (p[-1] != 'T' && p[-1] != 't')) {
			p++;
			continue;
		}
		p = strchr(p, '\n');
		if (!p)
			return NULL;
		p++;
		end = strstr(p, "\n\n");
		if (!end)
			end = p + strlen(p);
		*len = (size_t)(end - p);
		return p;
	}
	return NULL;
}

/* One faulthandler line `  File "f", line N in func` as "func (f:N)" into
 * out; false when the line is not one. */
static bool py_frame(const char *line, size_t n, char *out, size_t size)
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

/* Adds the report's text for one thread. */
static void text_thread(struct textbuf *tb, struct host *h, const struct wd_snap *s,
			const struct wd_thread *t, int64_t now)
{
	const struct control_stack *st = t->stack;
	size_t i;
	int f;
	char frame[PATH_MAX + 64];

	textbuf_printf(tb, "thread %d \"%s\"", (int)st->tid, st->name);
	if (st->tid == h->pid)
		textbuf_puts(tb, " (main thread)");
	if (st->tid == s->tid)
		textbuf_puts(tb, " (steps)");
	if (st->self)
		textbuf_puts(tb, " (profhost's hang watchdog, writing this report)");
	textbuf_puts(tb, "\n");
	for (i = 0; i < t->nranges; i++) {
		const struct nvtx_open_range *r = &t->ranges[i];

		if (r->start_ns)
			textbuf_printf(tb, "  inside `%s` for %.1f s\n", range_name(r),
				       (double)(now - r->start_ns) / 1e9);
		else
			textbuf_printf(tb, "  inside `%s` (open since before the "
				       "watchdog kept times)\n", range_name(r));
	}
	if (t->no_stack) {
		textbuf_printf(tb, "  native stack: not taken (%s)\n", t->no_stack);
	} else if (st->state != CONTROL_STACK_OK) {
		textbuf_printf(tb, "  native stack: not taken (%s)\n",
			       st->state == CONTROL_STACK_BLOCKED ? "the thread blocks "
			       "signals" : st->state == CONTROL_STACK_GONE ?
			       "it exited meanwhile" : "it did not answer in time");
	} else {
		textbuf_puts(tb, "  native stack:\n");
		for (f = 0; f < st->nframes; f++) {
			live_frame_text(st->ip[f], f > 0, frame, sizeof frame);
			textbuf_printf(tb, "    #%-2d %s\n", f, frame);
		}
		if (st->truncated)
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
static void json_thread(cJSON *arr, struct host *h, const struct wd_snap *s,
			const struct wd_thread *t, int64_t now)
{
	cJSON *o = cJSON_CreateObject(), *a;
	const struct control_stack *st = t->stack;
	char frame[PATH_MAX + 64];
	size_t i;
	int f;

	if (!o)
		return;
	cJSON_AddNumberToObject(o, "tid", st->tid);
	cJSON_AddStringToObject(o, "name", st->name);
	cJSON_AddBoolToObject(o, "main", st->tid == h->pid);
	cJSON_AddBoolToObject(o, "steps", st->tid == s->tid);
	cJSON_AddBoolToObject(o, "profhost", st->self || strncmp(st->name, "profhost", 8) == 0);
	a = cJSON_AddArrayToObject(o, "ranges");
	for (i = 0; a && i < t->nranges; i++) {
		cJSON *r = cJSON_CreateObject();

		if (!r)
			break;
		cJSON_AddStringToObject(r, "name", range_name(&t->ranges[i]));
		if (t->ranges[i].start_ns)
			cJSON_AddNumberToObject(r, "open_s",
						(double)(now - t->ranges[i].start_ns) / 1e9);
		cJSON_AddItemToArray(a, r);
	}
	a = cJSON_AddArrayToObject(o, "native");
	for (f = 0; a && st->state == CONTROL_STACK_OK && f < st->nframes; f++) {
		live_frame_text(st->ip[f], f > 0, frame, sizeof frame);
		cJSON_AddItemToArray(a, cJSON_CreateString(frame));
	}
	if (t->py) {
		const char *p = t->py, *end = t->py + t->pylen;

		a = cJSON_AddArrayToObject(o, "python");
		while (a && p < end) {
			const char *nl = memchr(p, '\n', (size_t)(end - p));
			size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);

			if (py_frame(p, n, frame, sizeof frame))
				cJSON_AddItemToArray(a, cJSON_CreateString(frame));
			p += n + 1;
		}
	}
	cJSON_AddItemToArray(arr, o);
}

/* ------------------------------------------------------------ the GPU */

/* What the capture sources say of the GPU work not finished, names made
 * readable (C++ names demangled and shortened). */
struct wd_gpu {
	struct capture_gpu_hang g;
	int known;                     /* capture_hang_gpu_all's answer */
	char shown[CAPTURE_GPU_MAX][CAPTURE_GPU_NAME];
};

/* Asks the sources (the watchdog's thread) and names the kernels. */
static void gpu_take(struct wd_gpu *w)
{
	demangle_fn dm = NULL;
	size_t i;

	w->known = capture_hang_gpu_all(&w->g);
	for (i = 0; i < w->g.n; i++) {
		const char *name = w->g.launch[i].name;

		if (!name[0])
			name = "(unnamed kernel)";
		if (demangle_is_mangled(name) && !dm)
			dm = demangle_find(false);
		if (!dm || !demangle_frame(dm, name, w->shown[i], sizeof w->shown[i]))
			snprintf(w->shown[i], sizeof w->shown[i], "%s", name);
	}
}

/* "GPU 0, stream 7" for launch i into out. */
static void gpu_where(const struct capture_gpu_launch *l, char *out, size_t size)
{
	char dev[24] = "GPU ?", st[32] = "stream ?";

	if (l->device >= 0)
		snprintf(dev, sizeof dev, "GPU %d", (int)l->device);
	if (l->stream >= 0)
		snprintf(st, sizeof st, "stream %lld", (long long)l->stream);
	snprintf(out, size, "%s, %s", dev, st);
}

/* Whether launch i starts a new device/stream group. */
static bool gpu_new_group(const struct wd_gpu *w, size_t i)
{
	return i == 0 || w->g.launch[i].device != w->g.launch[i - 1].device ||
	       w->g.launch[i].stream != w->g.launch[i - 1].stream;
}

/* The report's GPU section. */
static void gpu_text(struct textbuf *tb, const struct wd_gpu *w, int64_t now)
{
	char where[64];
	size_t i;

	if (!w->known) {
		textbuf_printf(tb, "GPU: kernels in flight not known (%s)\n\n", w->g.note);
		return;
	}
	if (w->g.n == 0) {
		textbuf_puts(tb, "GPU: no kernel launched and not finished (every kernel "
			     "launched has its completion record)\n");
	} else {
		textbuf_printf(tb, "GPU: kernels launched and not finished (%zu; no "
			       "completion record yet), by stream, oldest first:\n",
			       w->g.n + (size_t)w->g.more);
		for (i = 0; i < w->g.n; i++) {
			const struct capture_gpu_launch *l = &w->g.launch[i];

			if (gpu_new_group(w, i)) {
				gpu_where(l, where, sizeof where);
				textbuf_printf(tb, "  %s:\n", where);
			}
			textbuf_printf(tb, "    `%s` launched %.1f s ago (thread %d)\n",
				       w->shown[i], (double)(now - l->launched_ns) / 1e9,
				       (int)l->tid);
		}
		if (w->g.more)
			textbuf_printf(tb, "  ... and %llu more launched later\n",
				       (unsigned long long)w->g.more);
	}
	if (w->g.forgotten)
		textbuf_printf(tb, "  (%llu earlier launches left the table of launches "
			       "before their record came: whether they finished is not "
			       "known)\n", (unsigned long long)w->g.forgotten);
	textbuf_puts(tb, "\n");
}

/* hang.json's "gpu": {"known", "note", "in_flight": [...], "more", "forgotten"}. */
static void gpu_json(cJSON *root, const struct wd_gpu *w, int64_t now)
{
	cJSON *o = cJSON_AddObjectToObject(root, "gpu"), *a;
	size_t i;

	if (!o)
		return;
	cJSON_AddBoolToObject(o, "known", w->known == 1);
	if (!w->known) {
		cJSON_AddStringToObject(o, "note", w->g.note);
		return;
	}
	a = cJSON_AddArrayToObject(o, "in_flight");
	for (i = 0; a && i < w->g.n; i++) {
		const struct capture_gpu_launch *l = &w->g.launch[i];
		cJSON *k = cJSON_CreateObject();

		if (!k)
			break;
		cJSON_AddStringToObject(k, "name", w->shown[i]);
		cJSON_AddNumberToObject(k, "device", l->device);
		cJSON_AddNumberToObject(k, "stream", (double)l->stream);
		cJSON_AddNumberToObject(k, "launched_s_ago", (double)(now - l->launched_ns) / 1e9);
		cJSON_AddNumberToObject(k, "tid", l->tid);
		cJSON_AddNumberToObject(k, "correlation", l->corr);
		cJSON_AddItemToArray(a, k);
	}
	cJSON_AddNumberToObject(o, "more", (double)w->g.more);
	cJSON_AddNumberToObject(o, "forgotten", (double)w->g.forgotten);
}

/* ------------------------------------------------------------ report.html */

/* The hang's recorder dump, as the report tells it. */
/* Another rank's hang this report answers (job-wide), or NULL. */
struct wd_asked {
	int rank;
	uint64_t step;
	char host[128];
};

struct wd_dump {
	struct window_hang_dump d;     /* d.job NULL: none */
	size_t behind;                 /* jobs the host thread finishes first */
	char dir[160];                 /* its folder's usual name */
	char why[ERR_MSG_MAX];         /* why none */
};

/* Whether thread t is one the stall is about: the stepping thread, or one
 * inside a range (not profhost's own). */
static bool stuck_thread(const struct wd_snap *s, const struct wd_thread *t)
{
	return !t->stack->self && (t->stack->tid == s->tid || t->nranges > 0);
}

/* One thread's block in report.html: its open ranges with their ages, its
 * top native and Python frames. */
static void html_thread(struct textbuf *tb, struct host *h, const struct wd_snap *s,
			const struct wd_thread *t, int64_t now)
{
	const struct control_stack *st = t->stack;
	char frame[PATH_MAX + 64], age[48];
	size_t i;
	int f, shown;

	textbuf_printf(tb, "<h3>thread %d &ldquo;", (int)st->tid);
	textbuf_put_html(tb, st->name);
	textbuf_puts(tb, "&rdquo;");
	if (st->tid == h->pid)
		textbuf_puts(tb, " (main thread)");
	if (st->tid == s->tid)
		textbuf_puts(tb, " (steps)");
	textbuf_puts(tb, "</h3>\n");
	if (t->nranges) {
		textbuf_puts(tb, "<table class=\"ranges\"><tr><th>open range (outermost "
			     "first)</th><th>open for</th></tr>\n");
		for (i = 0; i < t->nranges; i++) {
			const struct nvtx_open_range *r = &t->ranges[i];

			if (r->start_ns)
				snprintf(age, sizeof age, "%.1f s",
					 (double)(now - r->start_ns) / 1e9);
			else
				snprintf(age, sizeof age, "since before the watchdog kept times");
			textbuf_puts(tb, "<tr><td><code>");
			textbuf_put_html(tb, range_name(r));
			textbuf_printf(tb, "</code></td><td class=\"age\">%s</td></tr>\n", age);
		}
		textbuf_puts(tb, "</table>\n");
	}
	if (t->no_stack || st->state != CONTROL_STACK_OK) {
		textbuf_puts(tb, "<p>native stack: not taken (see hang_report.txt)</p>\n");
	} else {
		shown = st->nframes < WD_HTML_FRAMES ? st->nframes : WD_HTML_FRAMES;
		textbuf_puts(tb, "<p>native stack, innermost first:</p>\n<ol class=\"frames\">");
		for (f = 0; f < shown; f++) {
			live_frame_text(st->ip[f], f > 0, frame, sizeof frame);
			textbuf_puts(tb, "<li><code>");
			textbuf_put_html(tb, frame);
			textbuf_puts(tb, "</code></li>");
		}
		textbuf_puts(tb, "</ol>\n");
		if (st->nframes > shown || st->truncated)
			textbuf_puts(tb, "<p class=\"more\">deeper frames in hang_report.txt</p>\n");
	}
	if (t->py) {
		const char *p = t->py, *end = t->py + t->pylen;

		textbuf_puts(tb, "<p>Python stack, most recent call first:</p>\n"
			     "<ol class=\"frames\">");
		for (shown = 0; p < end && shown < WD_HTML_FRAMES;) {
			const char *nl = memchr(p, '\n', (size_t)(end - p));
			size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);

			if (py_frame(p, n, frame, sizeof frame)) {
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

/* report.html of hang k: the stuck step, how long, the stuck threads
 * (their open ranges with ages, top frames), the GPU work in flight, the
 * last steps; the other threads in hang_report.txt. */
static void html_report(struct textbuf *tb, struct host *h, const struct wd_snap *s,
			uint32_t k, int64_t limit, const struct wd_thread *th, int n,
			const struct wd_gpu *gpu, const struct wd_dump *dump, int64_t now)
{
	double stalled = (double)(now - s->start) / 1e9;
	char where[64];
	size_t j;
	int i, others = 0;

	textbuf_printf(tb, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
		       "<title>profhost hang %u: step %llu</title>\n", k,
		       (unsigned long long)s->step);
	textbuf_puts(tb, "<style>body{font-family:sans-serif;margin:1.5em;max-width:70em}"
		     "table{border-collapse:collapse}td,th{border:1px solid #ccc;"
		     "padding:2px 8px;text-align:left}td.age{text-align:right}"
		     "ol.frames{font-size:90%;margin-top:0}p.more{color:#666}"
		     "h2{border-bottom:1px solid #ccc}</style></head><body>\n");
	textbuf_printf(tb, "<h1>Hang %u: step %llu has not ended after %.1f s</h1>\n", k,
		       (unsigned long long)s->step, stalled);
	textbuf_printf(tb, "<p>rank %d of %d, pid %d, <code>", h->env.rank,
		       h->env.world_size, (int)h->pid);
	textbuf_put_html(tb, h->program);
	textbuf_puts(tb, "</code> on ");
	textbuf_put_html(tb, h->hostname);
	textbuf_printf(tb, ". The watchdog's limit: %.3f s = max(after_s %g, factor %g "
		       "&times; median step %.3f ms). Every thread's full stack: "
		       "<a href=\"hang_report.txt\">hang_report.txt</a>.</p>\n",
		       (double)limit / 1e9, h->cfg->watchdog.after_s,
		       h->cfg->watchdog.factor, s->median_ms);

	if (dump->d.job) {
		textbuf_printf(tb, "<p>Recorder dump %u of steps %llu-%llu (step %llu so "
			       "far, marked partial): <a href=\"../%s/report.html\">%s</a>",
			       dump->d.index, (unsigned long long)dump->d.first,
			       (unsigned long long)dump->d.last,
			       (unsigned long long)dump->d.last, dump->dir, dump->dir);
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
	textbuf_puts(tb, "<h2>Stuck threads</h2>\n");
	for (i = 0; i < n; i++) {
		if (stuck_thread(s, &th[i]))
			html_thread(tb, h, s, &th[i], now);
		else
			others++;
	}
	if (others)
		textbuf_printf(tb, "<p class=\"more\">%d other thread%s (no open range, not "
			       "stepping) in hang_report.txt</p>\n", others,
			       others == 1 ? "" : "s");

	textbuf_puts(tb, "<h2>GPU</h2>\n");
	if (!gpu->known) {
		textbuf_puts(tb, "<p>Kernels in flight not known: ");
		textbuf_put_html(tb, gpu->g.note);
		textbuf_puts(tb, ".</p>\n");
	} else if (gpu->g.n == 0) {
		textbuf_puts(tb, "<p>No kernel launched and not finished.</p>\n");
	} else {
		textbuf_puts(tb, "<table class=\"gpu\"><tr><th>where</th><th>kernel launched, "
			     "not finished</th><th>launched</th><th>thread</th></tr>\n");
		for (j = 0; j < gpu->g.n; j++) {
			const struct capture_gpu_launch *l = &gpu->g.launch[j];

			gpu_where(l, where, sizeof where);
			textbuf_printf(tb, "<tr><td>%s</td><td><code>", where);
			textbuf_put_html(tb, gpu->shown[j]);
			textbuf_printf(tb, "</code></td><td class=\"age\">%.1f s ago</td>"
				       "<td>%d</td></tr>\n",
				       (double)(now - l->launched_ns) / 1e9, (int)l->tid);
		}
		textbuf_puts(tb, "</table>\n");
		if (gpu->g.more)
			textbuf_printf(tb, "<p class=\"more\">and %llu more launched later</p>\n",
				       (unsigned long long)gpu->g.more);
	}
	if (gpu->known && gpu->g.forgotten)
		textbuf_printf(tb, "<p class=\"more\">%llu earlier launches left the table of "
			       "launches before their record came: whether they finished is "
			       "not known.</p>\n", (unsigned long long)gpu->g.forgotten);

	textbuf_printf(tb, "<h2>Last steps</h2>\n<p>median %.3f ms, mean %.3f ms (%zu steps "
		       "known)</p>\n<table><tr><th>step</th><th>duration</th></tr>\n",
		       s->median_ms, s->mean_ms, s->ndur);
	for (j = 0; j < s->nlast; j++)
		textbuf_printf(tb, "<tr><td>%llu</td><td class=\"age\">%.3f ms</td></tr>\n",
			       (unsigned long long)(s->step - s->nlast + j), s->last_ms[j]);
	textbuf_printf(tb, "<tr><td>%llu</td><td class=\"age\">running for %.1f s</td>"
		       "</tr>\n</table>\n</body></html>\n", (unsigned long long)s->step,
		       stalled);
}

/* Creates <run>/rank<R>/hang<K>_step<N>[_<suffix>] into *dir. Returns 0
 * or -1 with *e. */
static int make_dir(struct host *h, uint32_t k, uint64_t step, const char *suffix,
		    struct outdir *dir, struct err *e)
{
	struct outdir run, rank;
	char name[128];
	bool moved = false;
	int rc;

	if (outdir_open_run(h->run_dir, h->run_id, &h->job, &run, &moved, e) != 0)
		return -1;
	snprintf(name, sizeof name, "rank%d", h->env.rank);
	rc = outdir_sub(&run, name, false, &rank, e);
	outdir_close(&run);
	if (rc != 0)
		return -1;
	snprintf(name, sizeof name, "hang%u_step%llu%s%s", k, (unsigned long long)step,
		 suffix[0] ? "_" : "", suffix);
	rc = outdir_sub(&rank, name, true, dir, e);
	if (rc == 1) {
		snprintf(name, sizeof name, "hang%u_step%llu%s%s.pid%d", k,
			 (unsigned long long)step, suffix[0] ? "_" : "", suffix, (int)h->pid);
		rc = outdir_sub(&rank, name, true, dir, e);
		if (rc == 1)
			rc = err_set(e, "'%s/%s' exists", rank.path, name);
	}
	outdir_close(&rank);
	return rc;
}

/* Adds an entry (no stack) for each thread with open ranges that the
 * stacks left out (they could not be taken at all). Returns the count. */
static int add_range_threads(struct control_stack *st, int n,
			     const struct nvtx_open_range *rg, size_t nr)
{
	size_t j;
	int i;

	for (j = 0; j < nr && n < CONTROL_STACK_THREADS; j++) {
		for (i = 0; i < n && st[i].tid != rg[j].tid; i++)
			;
		if (i < n)
			continue;
		memset(&st[n], 0, sizeof st[n]);
		st[n].tid = rg[j].tid;
		st[n].state = CONTROL_STACK_TIMEOUT;
		snprintf(st[n].name, sizeof st[n].name, "?");
		n++;
	}
	return n;
}

/* Takes the Python stacks (faulthandler's text, malloc'd) or says why
 * not in why[]. */
static char *python_text(char *why, size_t size)
{
	char *py = malloc(WD_PY_MAX);

	if (!py) {
		snprintf(why, size, "out of memory");
		return NULL;
	}
	if (capture_hang_stacks_all(py, WD_PY_MAX, why, size) != 0) {
		free(py);
		return NULL;
	}
	return py;
}

/* Takes hang k's recorder dump (prof.recorder{} on, prof.watchdog{ dump }
 * not false) or says why none into out->why. Under the window lock only:
 * the host thread, maybe seconds into writing a window, writes it after
 * that window. The watchdog's thread. */
static void take_dump(struct host *h, const struct wd_snap *s, uint32_t k,
		      const struct wd_asked *asked, struct wd_dump *out)
{
	char reason[64];
	struct err e;

	memset(out, 0, sizeof *out);
	if (!h->cfg->recorder.enabled) {
		snprintf(out->why, sizeof out->why, "the flight recorder is off: "
			 "prof.recorder{ steps = 20 } in the policy keeps the last steps");
		return;
	}
	if (!h->cfg->watchdog.dump) {
		snprintf(out->why, sizeof out->why, "prof.watchdog{ dump = false }");
		return;
	}
	snprintf(reason, sizeof reason, "hang %u", k);
	if (window_dump_hang(h, s->step, reason, &out->d, &e) != 0) {
		snprintf(out->why, sizeof out->why, "%s", e.msg);
		log_msg(LOG_INFO, "watchdog: no recorder dump for hang %u: %s", k, e.msg);
		return;
	}
	out->behind = hostthread_backlog(h);
	if (asked) /* named after the rank whose hang it answers */
		snprintf(out->d.job->suffix, sizeof out->d.job->suffix, "by-rank%d",
			 asked->rank);
	snprintf(out->dir, sizeof out->dir, "recorder%u_steps%llu-%llu%s%s", out->d.index,
		 (unsigned long long)out->d.first, (unsigned long long)out->d.last,
		 out->d.job->suffix[0] ? "_" : "", out->d.job->suffix);
}

/* The report's line on the dump. */
static void dump_text(struct textbuf *tb, const struct wd_dump *d)
{
	if (!d->d.job) {
		textbuf_printf(tb, "Recorder dump: none (%s)\n\n", d->why);
		return;
	}
	textbuf_printf(tb, "Recorder dump: recorder dump %u of steps %llu-%llu (step %llu "
		       "so far, marked partial), taken now; profhost's host thread writes "
		       "it into ../%s/", d->d.index, (unsigned long long)d->d.first,
		       (unsigned long long)d->d.last, (unsigned long long)d->d.last,
		       d->dir);
	if (d->behind)
		textbuf_printf(tb, " after the %zu window%s or dump%s it has to finish "
			       "first", d->behind, d->behind == 1 ? "" : "s",
			       d->behind == 1 ? "" : "s");
	textbuf_puts(tb, "\n\n");
}

/* hang.json's "dump": {"index", "first", "last", "dir", "behind"}, or
 * null and "dump_missing": why. */
static void dump_json(cJSON *root, const struct wd_dump *d)
{
	cJSON *o;

	if (!d->d.job) {
		cJSON_AddNullToObject(root, "dump");
		cJSON_AddStringToObject(root, "dump_missing", d->why);
		return;
	}
	o = cJSON_AddObjectToObject(root, "dump");
	if (!o)
		return;
	cJSON_AddNumberToObject(o, "index", d->d.index);
	cJSON_AddNumberToObject(o, "first", (double)d->d.first);
	cJSON_AddNumberToObject(o, "last", (double)d->d.last);
	cJSON_AddStringToObject(o, "dir", d->dir);
	cJSON_AddNumberToObject(o, "behind", (double)d->behind);
}

/* What one hang report is made of (report() and its steps). */
struct wd_report {
	const struct wd_snap *s;
	uint32_t k;                    /* its number */
	int64_t limit;
	const struct wd_asked *asked;  /* NULL: this rank's own hang */
	struct control_stack *st;      /* the threads' stacks: n of them */
	struct nvtx_open_range *rg;    /* the open ranges: nr of them */
	struct wd_thread *th;          /* per thread: its stack and ranges */
	struct wd_gpu *gpu;
	struct wd_dump dump;           /* d.job NULL: none */
	int n;
	size_t nr;
	char why[256];                 /* why no Python stacks (py NULL) */
	char *py;
	char no_stack[ERR_MSG_MAX];
	int64_t now;
	double stalled;
	struct outdir dir;
	bool have_dir;
};

/* Takes the snapshot a report is made of: the open ranges, the threads'
 * stacks, Python's, the GPU work in flight, the recorder's dump. Returns
 * 0, or -1 when memory ran out. The watchdog's thread. */
static int report_take(struct host *h, struct wd_report *r)
{
	struct err e;
	size_t j;
	int i;

	r->st = calloc(CONTROL_STACK_THREADS, sizeof *r->st);
	r->rg = calloc(WD_RANGES_MAX, sizeof *r->rg);
	r->gpu = calloc(1, sizeof *r->gpu);
	if (!r->st || !r->rg || !r->gpu)
		return -1;
	/* The ranges first: taking stacks signals the threads, and one in a
	 * call the kernel does not restart (a sleep) may move on. */
	r->nr = h->shim->nvtx_open_ranges(r->rg, WD_RANGES_MAX);
	r->n = control_stacks_take(r->st, CONTROL_STACK_THREADS, &e);
	if (r->n < 0) {
		/* no stacks (no free signal, /proc unreadable): the threads
		 * with open ranges are still told */
		snprintf(r->no_stack, sizeof r->no_stack, "%s", e.msg);
		r->n = add_range_threads(r->st, 0, r->rg, r->nr);
	}
	r->py = python_text(r->why, sizeof r->why);
	gpu_take(r->gpu);
	r->now = clock_now_ns();
	r->stalled = (double)(r->now - r->s->start) / 1e9;
	/* After the snapshot: the dump's span covers the report's time. */
	take_dump(h, r->s, r->k, r->asked, &r->dump);
	r->th = calloc((size_t)r->n + 1, sizeof *r->th);
	if (!r->th)
		return -1;
	for (i = 0; i < r->n; i++) {
		struct wd_thread *t = &r->th[i];

		t->stack = &r->st[i];
		for (j = 0; j < r->nr && r->rg[j].tid != r->st[i].tid; j++)
			;
		t->ranges = &r->rg[j];
		for (; j < r->nr && r->rg[j].tid == r->st[i].tid; j++)
			t->nranges++;
		t->py = py_block(r->py, r->st[i].pthread, &t->pylen);
		t->no_stack = r->no_stack[0] ? r->no_stack : NULL;
	}
	return 0;
}

/* hang_report.txt into tb. The watchdog's thread. */
static void report_text(struct textbuf *tb, struct host *h, const struct wd_report *r)
{
	const struct wd_snap *s = r->s;
	const struct wd_asked *asked = r->asked;
	size_t j;
	int i;

	textbuf_printf(tb, "profhost hang report %u: rank %d of %d, pid %d, %s on %s\n",
		       r->k, h->env.rank, h->env.world_size, (int)h->pid, h->program,
		       h->hostname);
	if (asked)
		textbuf_printf(tb, "asked by rank %d's hang (its step %llu, on %s): this "
			       "rank's threads at that moment; its step %llu has run %.1f s "
			       "(its own limit: %.3f s)\n\n", asked->rank,
			       (unsigned long long)asked->step, asked->host,
			       (unsigned long long)s->step, r->stalled, (double)r->limit / 1e9);
	else
		textbuf_printf(tb, "step %llu has not ended after %.1f s (the watchdog's limit: "
			       "%.3f s = max(after_s %g, factor %g x median step %.3f ms))\n\n",
			       (unsigned long long)s->step, r->stalled, (double)r->limit / 1e9,
			       h->cfg->watchdog.after_s, h->cfg->watchdog.factor, s->median_ms);
	textbuf_printf(tb, "Last steps (%zu of the last %zu; median %.3f ms, mean %.3f ms):\n",
		       s->nlast, s->ndur, s->median_ms, s->mean_ms);
	for (j = 0; j < s->nlast; j++)
		textbuf_printf(tb, "  step %llu: %.3f ms\n",
			       (unsigned long long)(s->step - s->nlast + j), s->last_ms[j]);
	textbuf_printf(tb, "  step %llu: running for %.1f s\n\n",
		       (unsigned long long)s->step, r->stalled);
	dump_text(tb, &r->dump);
	if (!r->py)
		textbuf_printf(tb, "Python stacks: none (%s)\n\n", r->why);
	gpu_text(tb, r->gpu, r->now);
	textbuf_printf(tb, "Threads (%d): open ranges outermost first, then the stacks\n\n",
		       r->n);
	for (i = 0; i < r->n; i++)
		text_thread(tb, h, s, &r->th[i], r->now);
}

/* hang.json's text (malloc'd), or NULL when memory ran out. The
 * watchdog's thread. */
static char *report_json(struct host *h, const struct wd_report *r)
{
	const struct wd_snap *s = r->s;
	cJSON *root = cJSON_CreateObject(), *arr;
	char *json;
	int i;

	if (!root)
		return NULL;
	cJSON_AddNumberToObject(root, "rank", h->env.rank);
	cJSON_AddNumberToObject(root, "world_size", h->env.world_size);
	cJSON_AddNumberToObject(root, "pid", h->pid);
	cJSON_AddStringToObject(root, "host", h->hostname);
	cJSON_AddStringToObject(root, "program", h->program);
	cJSON_AddNumberToObject(root, "hang", r->k);
	cJSON_AddNumberToObject(root, "step", (double)s->step);
	cJSON_AddNumberToObject(root, "stalled_s", r->stalled);
	cJSON_AddNumberToObject(root, "limit_s", (double)r->limit / 1e9);
	cJSON_AddNumberToObject(root, "median_ms", s->median_ms);
	cJSON_AddNumberToObject(root, "time_unix", (double)time(NULL));
	/* on the trace clock: the windows and dumps whose span overlaps
	 * the stall link this report (hang/hanglinks.h) */
	cJSON_AddNumberToObject(root, "since_ts", (double)s->start);
	cJSON_AddNumberToObject(root, "report_ts", (double)r->now);
	if (!r->py)
		cJSON_AddStringToObject(root, "python_missing", r->why);
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
		json_thread(arr, h, s, &r->th[i], r->now);
	gpu_json(root, r->gpu, r->now);
	json = cJSON_PrintUnformatted(root);
	cJSON_Delete(root);
	return json;
}

/* Writes the report's three files into its folder (when it has one),
 * taking tb's text and json; a failure is said. The watchdog's thread. */
static void report_write(struct host *h, struct wd_report *r, struct textbuf *tb,
			 const char *json)
{
	struct textbuf html;
	char *text = NULL, *page = NULL;
	struct err e;

	if (!r->have_dir)
		return;
	textbuf_init(&html);
	html_report(&html, h, r->s, r->k, r->limit, r->th, r->n, r->gpu, &r->dump, r->now);
	text = textbuf_take(tb);
	page = textbuf_take(&html);
	if (!text || outfile_write_textat(&r->dir, "hang_report.txt", text, &e) != 0 ||
	    !json || outfile_write_textat(&r->dir, "hang.json", json, &e) != 0 ||
	    !page || outfile_write_textat(&r->dir, "report.html", page, &e) != 0)
		log_msg(LOG_WARN, "watchdog: hang report %u: %s", r->k,
			text && json && page ? e.msg : "out of memory");
	free(text);
	free(page);
	textbuf_free(&html);
}

/* Says the report in the log and tells the job's other ranks of this
 * rank's own hang (prof.recorder{ job = true }: they write theirs). The
 * watchdog's thread. */
static void report_tell(struct host *h, const struct wd_report *r)
{
	const struct wd_snap *s = r->s;
	const struct wd_asked *asked = r->asked;
	const char *where = r->have_dir ? r->dir.path : "(not written)";

	if (asked)
		log_msg(LOG_WARN, "watchdog: rank %d's hang (its step %llu): hang report %u of "
			"this rank's step %llu (%.1f s so far) -> %s/", asked->rank,
			(unsigned long long)asked->step, r->k, (unsigned long long)s->step,
			r->stalled, where);
	else
		log_msg(LOG_WARN, "watchdog: step %llu has not ended after %.1f s (limit %.1f s): "
			"hang report %u -> %s/", (unsigned long long)s->step, r->stalled,
			(double)r->limit / 1e9, r->k, where);
	if (!asked && h->cfg->recorder.enabled && h->cfg->recorder.job) {
		struct jobfile pub = { 0 };

		pub.kind = JOBFILE_HANG;
		pub.step = s->step;
		snprintf(pub.reason, sizeof pub.reason, "step %llu has not ended after %.1f s",
			 (unsigned long long)s->step, r->stalled);
		jobwatch_publish(h, &pub);
	}
}

/* Runs prof.on_hang with the threads that have open ranges and the
 * kernels in flight, as the report lists them; not when memory ran out.
 * The watchdog's thread. */
static void report_hook(struct host *h, const struct wd_report *r)
{
	struct policy_hang_thread *pht = calloc((size_t)r->n + 1, sizeof *pht);
	struct policy_hang_range *phr = calloc(r->nr + 1, sizeof *phr);
	struct policy_hang_kernel phk[CAPTURE_GPU_MAX];
	struct policy_hang_info info = { 0 };
	struct err e;
	size_t j, k = 0;
	int i;

	if (!pht || !phr) {
		free(pht);
		free(phr);
		return;
	}
	for (i = 0; i < r->n; i++) {
		const struct wd_thread *t = &r->th[i];

		pht[info.nthreads].tid = r->st[i].tid;
		pht[info.nthreads].name = r->st[i].name;
		pht[info.nthreads].ranges = &phr[k];
		for (j = 0; j < t->nranges; j++, k++) {
			phr[k].name = range_name(&t->ranges[j]);
			phr[k].open_s = t->ranges[j].start_ns ?
				(double)(r->now - t->ranges[j].start_ns) / 1e9 : -1;
		}
		pht[info.nthreads].nranges = t->nranges;
		info.nthreads++;
	}
	info.hang = r->k;
	info.step = r->s->step;
	info.stalled_s = r->stalled;
	info.limit_s = (double)r->limit / 1e9;
	info.dir = r->have_dir ? r->dir.path : NULL;
	info.threads = pht;
	for (j = 0; j < r->gpu->g.n; j++) {
		const struct capture_gpu_launch *l = &r->gpu->g.launch[j];

		phk[j].name = r->gpu->shown[j];
		phk[j].device = l->device;
		phk[j].stream = l->stream;
		phk[j].tid = l->tid;
		phk[j].in_flight_s = (double)(r->now - l->launched_ns) / 1e9;
	}
	info.gpu = phk;
	info.ngpu = r->gpu->g.n;
	if (policy_on_hang(h->policy, &info, &e) == POLICY_ERROR)
		host_fail(h, &e);
	free(phr);
	free(pht);
}

/* Writes the report of hang `k` (step s->step, stalled since s->start),
 * takes its recorder dump and hands it to the host thread, and runs the
 * hooks; with prof.recorder{ job = true } tells the job's other ranks.
 * `asked`: another rank's hang asked for it (job-wide): written whatever
 * this rank's own limit says, named after that rank, no hooks, not told
 * on. The watchdog's thread. */
static void report(struct host *h, const struct wd_snap *s, uint32_t k, int64_t limit,
		   const struct wd_asked *asked)
{
	struct wd_report r = { .s = s, .k = k, .limit = limit, .asked = asked,
			       .dir = { -1, "" } };
	struct textbuf tb;
	char suffix[32] = "", *json = NULL;
	struct err e;

	textbuf_init(&tb);
	if (report_take(h, &r) != 0)
		goto out;
	if (asked)
		snprintf(suffix, sizeof suffix, "by-rank%d", asked->rank);
	else if (h->cfg->recorder.enabled && h->cfg->recorder.job)
		snprintf(suffix, sizeof suffix, "by-rank%d", h->env.rank);
	r.have_dir = make_dir(h, k, s->step, suffix, &r.dir, &e) == 0;
	if (!r.have_dir)
		log_msg(LOG_WARN, "watchdog: cannot write hang report %u: %s", k, e.msg);
	report_text(&tb, h, &r);
	json = report_json(h, &r);
	report_write(h, &r, &tb, json);
	report_tell(h, &r);
	/* Its files are written: the dump's reports find and link them. */
	if (r.dump.d.job)
		hostthread_submit(h, r.dump.d.job);
	r.dump.d.job = NULL;
	if (h->cfg->has_on_hang && !asked)
		report_hook(h, &r);
out:
	if (r.dump.d.job) /* no memory for the report: the dump is still written */
		hostthread_submit(h, r.dump.d.job);
	outdir_close(&r.dir);
	free(json);
	textbuf_free(&tb);
	free(r.gpu);
	free(r.py);
	free(r.th);
	free(r.rg);
	free(r.st);
}

/* ------------------------------------------------------------ the check */

/* Takes another rank's hang that asked for a report (watchdog_ask), if
 * any, into *a. The watchdog's thread. */
static bool take_ask(struct host *h, struct wd_asked *a)
{
	struct watchdog *wd = &h->wd;
	bool pending;

	pthread_mutex_lock(&wd->ask_lock);
	pending = wd->ask.pending;
	if (pending) {
		a->rank = wd->ask.rank;
		a->step = wd->ask.step;
		snprintf(a->host, sizeof a->host, "%s", wd->ask.host);
		wd->ask.pending = false;
		wd->asked_rank = a->rank;
	}
	pthread_mutex_unlock(&wd->ask_lock);
	return pending;
}

int watchdog_ask(struct host *h, int rank, uint64_t step, const char *host, struct err *e)
{
	struct watchdog *wd = &h->wd;

	if (!atomic_load(&wd->started))
		return err_set(e, "prof.watchdog{} is not on in this process");
	pthread_mutex_lock(&wd->ask_lock);
	wd->ask.pending = true;
	wd->ask.rank = rank;
	wd->ask.step = step;
	snprintf(wd->ask.host, sizeof wd->ask.host, "%s", host ? host : "");
	pthread_mutex_unlock(&wd->ask_lock);
	wakeword_post(&wd->wake, WD_WAKE_ASK);
	return 0;
}

/* Looks for a hang and, the first time the step in progress passes the
 * limit, writes its report (report()); says when a reported step ends.
 * Returns how long to sleep before the next look (ns), or -1 for ever (no
 * watchdog, or the process is ending). The watchdog's thread. */
static int64_t check(struct host *h)
{
	/* (also called once more as the thread stops: a step that resumed
	 * just before exit is said) */
	struct watchdog *wd = &h->wd;
	const struct policy_config *c = h->cfg;
	struct wd_snap s;
	struct wd_asked asked;
	int64_t now, limit, left;

	/* (h->disabled is set at exit too: a hang already reported is still
	 * followed to its end, below) */
	if (!c->watchdog.enabled || h->forked_child ||
	    (!wd->hung && atomic_load_explicit(&h->disabled, memory_order_relaxed)))
		return -1;
	if (!take_snapshot(h, wd->hung ? wd->hung_step : UINT64_MAX, &s))
		return WD_POLL_NS;
	now = clock_now_ns();
	if (wd->hung && s.step != wd->hung_step) {
		double ms = s.hung_ms >= 0 ? s.hung_ms : (double)(s.start - wd->hung_since) / 1e6;

		log_msg(LOG_WARN, "watchdog: steps resumed: step %llu ended after %.1f s "
			"(hang %u)", (unsigned long long)wd->hung_step, ms / 1e3, wd->hangs - 1);
		wd->hung = false;
	} else if (wd->hung && s.finished) {
		log_msg(LOG_WARN, "watchdog: the process is ending with step %llu stalled "
			"for %.1f s (hang %u)", (unsigned long long)wd->hung_step,
			(double)(now - wd->hung_since) / 1e9, wd->hangs - 1);
		wd->hung = false;
	}
	if (s.finished || atomic_load_explicit(&h->disabled, memory_order_relaxed))
		return -1;
	if (take_ask(h, &asked)) {
		/* another rank's hang: this rank's state now, whatever its own
		 * limit; its own watchdog does not report this step again */
		report(h, &s, wd->hangs++, limit_ns(c, s.median_ms), &asked);
		wd->asked = true;
		wd->asked_step = s.step;
	}
	if (capture_ended_any()) {
		/* No step comes after the program's end; its teardown is no
		 * hang. Looked at again in case (finished is set at exit). */
		return WD_POLL_NS;
	}
	if (s.ndur == 0) /* armed from the first step boundary on */
		return limit_ns(c, 0);
	limit = limit_ns(c, s.median_ms);
	if (wd->hung)
		return WD_POLL_NS < limit ? WD_POLL_NS : limit;
	left = s.start + limit - now;
	if (left > 0)
		return left > WD_MIN_WAIT_NS ? left : WD_MIN_WAIT_NS;
	wd->hung = true;
	wd->hung_step = s.step;
	wd->hung_since = s.start;
	if (wd->asked && wd->asked_step == s.step) {
		/* reported already, when another rank's hang asked */
		log_msg(LOG_WARN, "watchdog: step %llu has not ended after %.1f s (limit "
			"%.1f s); its hang report was written when rank %d's hang asked",
			(unsigned long long)s.step, (double)(now - s.start) / 1e9,
			(double)limit / 1e9, wd->asked_rank);
		return WD_POLL_NS < limit ? WD_POLL_NS : limit;
	}
	report(h, &s, wd->hangs++, limit, NULL);
	return WD_POLL_NS < limit ? WD_POLL_NS : limit;
}

/* The watchdog's thread: looks, then sleeps until the next deadline or
 * until watchdog_stop() wakes it. */
static void *wd_main(void *arg)
{
	struct host *h = arg;
	struct watchdog *wd = &h->wd;
	uint32_t bits = 0;

	atomic_store(&wd->tid, (int32_t)syscall(SYS_gettid));
	while (!(bits & WD_WAKE_STOP))
		bits = wakeword_take(&wd->wake, check(h));
	check(h); /* a hang that ended (or not) as the process ends */
	return NULL;
}

int watchdog_start(struct host *h, struct err *e)
{
	struct watchdog *wd = &h->wd;
	sigset_t all, old;
	int rc;

	if (!h->cfg->watchdog.enabled || h->forked_child || atomic_load(&wd->started))
		return 0;
	pthread_mutex_init(&wd->ask_lock, NULL);
	/* Every signal blocked: the stack and Python signals, SIGTERM and
	 * the sampler's land on the program's threads. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&wd->thread, NULL, wd_main, h);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0)
		return err_errno(e, rc, "prof.watchdog: no hang is reported in this "
				 "process: cannot create the watchdog's thread");
	pthread_setname_np(wd->thread, "profhost-wd");
	atomic_store(&wd->started, 1);
	return 0;
}

void watchdog_stop(struct host *h)
{
	struct watchdog *wd = &h->wd;

	if (!atomic_load(&wd->started) ||
	    atomic_load(&wd->tid) == (int32_t)syscall(SYS_gettid))
		return;
	wakeword_post(&wd->wake, WD_WAKE_STOP);
	pthread_join(wd->thread, NULL);
	atomic_store(&wd->started, 0);
}

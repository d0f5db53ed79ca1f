/*
 * report — `prof report`: runs the built-in and custom reports on saved
 * output, without the target process.
 *
 * Input: a window directory (capture.phb, else trace.json[.gz]), a rank or
 * run directory (every window*_steps* below it), or one file (capture.phb
 * or a JSON trace, gzipped or not; read by winload.c). A run directory
 * whose ranks wrote hang reports first gets the view of the hang across
 * ranks (hangs.c), then that of its latest job-wide capture or dump
 * (jobview.c). The reports run in a policy VM like the host's (the
 * built-in default policy, or --script), so a policy's prof.on_trace_ready
 * hooks work offline unchanged.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "cliopt.h"
#include "hangs.h"
#include "jobview.h"
#include "locate.h"
#include "winload.h"
#include "../events/trace.h"
#include "../hang/hanglinks.h"
#include "../export/key_averages.h"
#include "../export/textbuf.h"
#include "../export/outfile.h"
#include "../policy/policy.h"
#include "../common/err.h"
#include "../common/grow.h"
#include "../common/log.h"

static const char report_synopsis[] =
	"prof report <window-or-run-dir | file> [--script report.lua] "
	"[--format text|json|html] [--key-averages] [-o file] [--set key=value]...";

/* Windows one report reads at most. */
#define REPORT_MAX_WINDOWS 100000

/* Offline there is no training to protect: generous limits by default
 * (--set may still change them). */
static const char *const report_default_sets[] = {
	"limits.report_ms=3600000", "limits.memory_mb=4096", NULL
};

struct report_opts {
	const char *input;
	const char *script;
	const char *format;    /* "text" (default), "json", "html" */
	const char *output;    /* -o, or NULL */
	bool key_averages;     /* --key-averages: the operator table only */
	const char **sets;     /* NULL-ended, malloc'd */
	size_t nsets;
};

/* Writes the help of `prof report` to `out`. */
static void report_help(FILE *out)
{
	fprintf(out,
		"usage: %s\n"
		"\n"
		"Runs profhost's reports on saved output, without the profiled program:\n"
		"the built-in analyses (step phases, GPU utilization and idle gaps, top\n"
		"kernels, copies, ranges, CPU samples, findings) and the prof.on_trace_ready\n"
		"hooks of a report script.\n"
		"\n"
		"input:\n"
		"  a window directory    reads its capture.phb (else trace.json[.gz])\n"
		"  a rank or run dir     every window below it: the run report (per-rank\n"
		"                        step times and phases, the slowest rank per step,\n"
		"                        the spread, the straggler); when its ranks wrote\n"
		"                        hang reports (prof.watchdog), first which ranks\n"
		"                        are stuck where, and the odd one out\n"
		"  a file                capture.phb or a Chrome trace (.json, .json.gz)\n"
		"\n"
		"options:\n"
		"  -s, --script FILE     a Lua file whose prof.on_trace_ready hooks run on\n"
		"                        each window (their files go into the window dir)\n"
		"  -f, --format FORMAT   text (default) and json print to stdout; html\n"
		"                        writes report.html into the window (or run) dir\n"
		"  -o, --output FILE     write the report to FILE instead\n"
		"      --key-averages    print the operator table (key_averages.txt) instead,\n"
		"                        as the policy's prof.export{ key_averages = ... } asks\n"
		"                        (e.g. --set export.key_averages.group_by_input_shape=true\n"
		"                        --set export.key_averages.group_by_stack_n=5)\n"
		"      --set KEY=VALUE   overrides a policy field (e.g. limits.report_ms=1000)\n"
		"  -h, --help            show this help\n"
		"\n"
		"Exit status: 0 on success, 1 when an input cannot be read or a report\n"
		"fails, 2 on bad arguments. See docs/reports.md.\n",
		report_synopsis);
}


/* Parses the arguments; 0, -1 after help, or an exit status. */
static int report_parse(int argc, char **argv, struct report_opts *o)
{
	int i, m;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *val = NULL;

		if (cliopt_help(&cli_report_cmd, a))
			return -1;
		if (a[0] != '-' || a[1] == '\0') {
			if (o->input)
				return cliopt_usage_error(&cli_report_cmd, "more than one input "
							  "('%s' and '%s')", o->input, a);
			o->input = a;
			continue;
		}
		if ((m = cliopt_value(argc, argv, &i, 's', "script", &val)) != 0) {
			if (m < 0)
				return cliopt_usage_error(&cli_report_cmd, "option '%s' needs a file", a);
			o->script = val;
		} else if ((m = cliopt_value(argc, argv, &i, 'f', "format", &val)) != 0) {
			if (m < 0)
				return cliopt_usage_error(&cli_report_cmd,
							  "option '%s' needs text, json or html", a);
			if (strcmp(val, "text") && strcmp(val, "json") && strcmp(val, "html"))
				return cliopt_usage_error(&cli_report_cmd,
							  "unknown format '%s' (text, json or html)", val);
			o->format = val;
		} else if ((m = cliopt_value(argc, argv, &i, 'o', "output", &val)) != 0) {
			if (m < 0 || !val[0])
				return cliopt_usage_error(&cli_report_cmd, "option '%s' needs a file", a);
			o->output = val;
		} else if (strcmp(a, "--key-averages") == 0) {
			o->key_averages = true;
		} else if ((m = cliopt_value(argc, argv, &i, 0, "set", &val)) != 0) {
			const char **grown;

			if (m < 0 || !strchr(val, '='))
				return cliopt_usage_error(&cli_report_cmd,
							  "option '--set' needs key=value");
			grown = realloc(o->sets, (o->nsets + 2) * sizeof *grown);
			if (!grown) {
				fprintf(stderr, "prof report: out of memory\n");
				return 1;
			}
			o->sets = grown;
			o->sets[o->nsets++] = val;
			o->sets[o->nsets] = NULL;
		} else {
			return cliopt_usage_error(&cli_report_cmd, "unknown option '%s'", a);
		}
	}
	if (!o->input)
		return cliopt_usage_error(&cli_report_cmd, "missing input (a window or run "
					  "directory, or a trace file)");
	if (o->key_averages && o->format && strcmp(o->format, "text") != 0)
		return cliopt_usage_error(&cli_report_cmd, "--key-averages prints text only "
					  "(not --format %s)", o->format);
	if (!o->format)
		o->format = "text";
	return 0;
}

/* ------------------------------------------------------------ inputs */

struct window_list {
	char **dirs;   /* window directories (or files), sorted */
	size_t n, cap;
};

static int list_add(struct window_list *l, const char *path)
{
	char **g = grow_array(l->dirs, &l->cap, l->n + 1, sizeof *g, 16);

	if (!g)
		return -1;
	l->dirs = g;
	l->dirs[l->n] = strdup(path);
	return l->dirs[l->n] ? (int)++l->n * 0 : -1;
}

static void list_free(struct window_list *l)
{
	size_t i;

	for (i = 0; i < l->n; i++)
		free(l->dirs[i]);
	free(l->dirs);
	memset(l, 0, sizeof *l);
}

/* Numbers in a name ("rank12" -> 12, "window3_steps..." -> 3) for sorting. */
static long name_number(const char *name)
{
	while (*name && (*name < '0' || *name > '9'))
		name++;
	return strtol(name, NULL, 10);
}

static int cmp_window_path(const void *a, const void *b)
{
	const char *x = *(char *const *)a, *y = *(char *const *)b;
	const char *xw = strrchr(x, '/'), *yw = strrchr(y, '/');
	const char *xr = x, *yr = y;
	long d;

	/* rank directory: the component before the window */
	for (const char *p = x; p < xw; p++)
		if (*p == '/')
			xr = p + 1;
	for (const char *p = y; p < yw; p++)
		if (*p == '/')
			yr = p + 1;
	d = name_number(xr) - name_number(yr);
	if (d)
		return d < 0 ? -1 : 1;
	d = name_number(xw ? xw + 1 : x) - name_number(yw ? yw + 1 : y);
	if (d)
		return d < 0 ? -1 : 1;
	return strcmp(x, y);
}

/* Adds the window directories directly inside `dir` (window*_steps*). */
static int scan_windows(const char *dir, struct window_list *l, struct err *e)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	char p[PATH_MAX];

	if (!d)
		return err_errno(e, errno, "%s: cannot read the directory", dir);
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, "window", 6) != 0 || !strstr(de->d_name, "_steps"))
			continue;
		if ((size_t)snprintf(p, sizeof p, "%s/%s", dir, de->d_name) >= sizeof p)
			continue;
		if (winload_is_window(p) && (l->n >= REPORT_MAX_WINDOWS || list_add(l, p) != 0)) {
			closedir(d);
			return err_set(e, "%s: too many windows or out of memory", dir);
		}
	}
	closedir(d);
	return 0;
}

/* Finds the windows of `input`: itself (a file or window dir), the windows
 * of a rank dir, or those of every rank directory of a run dir. */
static int find_windows(const char *input, struct window_list *l, struct err *e)
{
	struct stat st;
	DIR *d;
	struct dirent *de;
	char p[PATH_MAX];

	if (stat(input, &st) != 0)
		return err_errno(e, errno, "%s: cannot open", input);
	if (!S_ISDIR(st.st_mode) || winload_is_window(input))
		return list_add(l, input) == 0 ? 0 : err_set(e, "out of memory");
	if (scan_windows(input, l, e) != 0)
		return -1;
	d = opendir(input);
	if (!d)
		return err_errno(e, errno, "%s: cannot read the directory", input);
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, "rank", 4) != 0)
			continue;
		if ((size_t)snprintf(p, sizeof p, "%s/%s", input, de->d_name) >= sizeof p)
			continue;
		if (stat(p, &st) == 0 && S_ISDIR(st.st_mode) && scan_windows(p, l, e) != 0) {
			closedir(d);
			return -1;
		}
	}
	closedir(d);
	if (l->n == 0)
		return err_set(e, "%s: no profhost window here (expected capture.phb or trace.json, "
			       "or rank*/window*_steps*/ below it)", input);
	qsort(l->dirs, l->n, sizeof *l->dirs, cmp_window_path);
	return 0;
}

/* ------------------------------------------------------------ output */


/* Emits a rendered report: html into `html_path` (or -o), text and json to
 * stdout (or -o). */
static int emit(const struct report_opts *o, const struct policy_report *r,
		const char *html_path)
{
	struct err e;
	const char *text = strcmp(o->format, "json") == 0 ? r->json
			   : strcmp(o->format, "html") == 0 ? r->html : r->text;
	const char *dest = o->output ? o->output
			   : strcmp(o->format, "html") == 0 ? html_path : NULL;

	if (!text) {
		fprintf(stderr, "prof report: the reports produced no %s output\n", o->format);
		return 1;
	}
	if (!dest) {
		fputs(text, stdout);
		return fflush(stdout) == 0 ? 0 : 1;
	}
	if (outfile_write_text(dest, text, &e) != 0) {
		fprintf(stderr, "prof report: %s\n", e.msg);
		return 1;
	}
	if (strcmp(o->format, "html") == 0)
		printf("wrote %s\n", dest);
	return 0;
}

/* The operator table of `t` as the policy's prof.export{ key_averages }
 * asks for it (malloc'd text), or NULL with *e set. */
static char *key_averages_text(const struct policy_config *c, const struct trace *t,
			       struct err *e)
{
	struct key_avg_opts ko = { KEY_AVG_BY_NAME, c->export.group_by_input_shape,
				   c->export.group_by_stack_n };
	enum key_avg_sort sort = KEY_AVG_SORT_SELF_CPU_TIME_TOTAL;
	struct key_avg_table tab;
	char *text;

	if (c->export.sort_by && key_averages_parse_sort(c->export.sort_by, &sort, e) != 0)
		return NULL;
	if (c->export.group_by && key_averages_parse_group(c->export.group_by, &ko.group, e) != 0)
		return NULL;
	if (key_averages_build_with(t, &ko, sort, c->export.row_limit, &tab, e) != 0)
		return NULL;
	text = key_averages_format(&tab, c->export.row_limit);
	key_averages_free(&tab);
	if (!text)
		err_set(e, "out of memory formatting the operator table");
	return text;
}

/* --key-averages: each window's operator table, to stdout or -o (several
 * windows: each after a line naming its directory). Returns the exit
 * status. */
static int emit_key_averages(const struct report_opts *o, const struct window_list *wl,
			     const struct policy_config *c)
{
	struct textbuf out;
	struct trace t;
	struct err e;
	char dir[PATH_MAX], *text;
	int status = 0;
	size_t i;

	textbuf_init(&out);
	for (i = 0; i < wl->n; i++) {
		if (trace_init(&t) != 0) {
			fprintf(stderr, "prof report: out of memory\n");
			status = 1;
			break;
		}
		if (winload_read(wl->dirs[i], &t, dir, sizeof dir, &e) != 0 ||
		    !(text = key_averages_text(c, &t, &e))) {
			fprintf(stderr, "prof report: %s: %s\n", wl->dirs[i], e.msg);
			trace_free(&t);
			status = 1;
			continue;
		}
		if (wl->n > 1)
			textbuf_printf(&out, "%s== %s ==\n", i ? "\n" : "", dir);
		textbuf_puts(&out, text);
		free(text);
		trace_free(&t);
	}
	text = textbuf_take(&out);
	if (!text) {
		fprintf(stderr, "prof report: out of memory\n");
		return 1;
	}
	if (o->output) {
		if (outfile_write_text(o->output, text, &e) != 0) {
			fprintf(stderr, "prof report: %s\n", e.msg);
			status = 1;
		}
	} else {
		fputs(text, stdout);
		if (fflush(stdout) != 0)
			status = 1;
	}
	free(text);
	return status;
}

/* PROF_LOG, when set to a level, sets the log's level (the readers' and
 * the policy VM's messages). */
static void report_log_level(void)
{
	enum log_level lv;
	const char *env = getenv("PROF_LOG");

	if (env && log_parse_level(env, &lv) == 0)
		log_set_level(lv);
}

/* Loads the reports' policy VM: the built-in policy, or --script, with
 * the default limits and then the --set values. *sets gets the list it
 * was loaded with (the caller frees it after policy_free). Returns the
 * policy, or NULL after saying why, with *status the exit status. */
static struct policy *report_policy(const struct report_opts *o, const char ***sets,
				    int *status)
{
	struct policy_opts po = { 0 };
	struct policy *p;
	char lua_dir[PATH_MAX];
	struct err e;
	size_t i, n = 0;

	*sets = NULL;
	if (locate_lua_dir(lua_dir, sizeof lua_dir, &e) != 0) {
		fprintf(stderr, "prof report: %s\n", e.msg);
		*status = CLI_EXIT_USAGE;
		return NULL;
	}
	*sets = calloc(o->nsets + 3, sizeof **sets);
	if (!*sets) {
		fprintf(stderr, "prof report: out of memory\n");
		*status = 1;
		return NULL;
	}
	for (i = 0; report_default_sets[i]; i++)
		(*sets)[n++] = report_default_sets[i];
	for (i = 0; i < o->nsets; i++)
		(*sets)[n++] = o->sets[i];
	po.lua_dir = lua_dir;
	po.script = o->script;
	po.sets = *sets;
	p = policy_load(&po, &e);
	if (!p) {
		fprintf(stderr, "prof report: %s\n", e.msg);
		*status = CLI_EXIT_USAGE;
	}
	return p;
}

/* The reports of window wl->dirs[i] (formats `fmt` when it is the only
 * one; else report.html only, when asked), then the policy's
 * prof.on_trace_ready hooks on it. Returns 0, 1 after saying what failed,
 * or -1 when the report must stop (out of memory; the only window
 * unreadable). */
static int report_window(const struct report_opts *o, struct policy *p,
			 const struct window_list *wl, size_t i, unsigned fmt)
{
	struct trace t;
	struct policy_trace pt;
	struct hang_link links[HANGLINKS_MAX];
	struct policy_report r;
	char dir[PATH_MAX], out_path[PATH_MAX + 16];
	unsigned want = wl->n == 1 ? fmt : (fmt == POLICY_REPORT_HTML ? fmt : 0);
	struct err e;
	int status = 0;

	if (trace_init(&t) != 0) {
		fprintf(stderr, "prof report: out of memory\n");
		return -1;
	}
	if (winload_read(wl->dirs[i], &t, dir, sizeof dir, &e) != 0) {
		fprintf(stderr, "prof report: %s\n", e.msg);
		trace_free(&t);
		return wl->n == 1 ? -1 : 1;
	}
	pt.trace = &t;
	pt.dir = dir;
	pt.out = NULL; /* the user's directory: opened by its path */
	pt.files = NULL;
	/* the hang reports beside it, as the host linked them */
	pt.hangs = links;
	pt.nhangs = hanglinks_find(dir, &t.meta, links, HANGLINKS_MAX);
	if (policy_report_window(p, &pt, want, wl->n > 1, &r, &e) != POLICY_OK) {
		fprintf(stderr, "prof report: %s: %s\n", wl->dirs[i], e.msg);
		status = 1;
	} else {
		snprintf(out_path, sizeof out_path, "%s/report.html", dir);
		if (wl->n == 1) {
			if (emit(o, &r, out_path) != 0)
				status = 1;
		} else if (r.html && outfile_write_text(out_path, r.html, &e) != 0) {
			fprintf(stderr, "prof report: %s\n", e.msg);
			status = 1;
		}
		policy_report_free(&r);
	}
	if (policy_config(p)->has_on_trace_ready &&
	    policy_on_trace_ready(p, &pt, &e) == POLICY_ERROR) {
		fprintf(stderr, "prof report: %s: %s\n", wl->dirs[i], e.msg);
		status = 1;
	}
	trace_free(&t);
	return status;
}

/* The run report of several windows (formats `fmt`), emitted. Returns 0,
 * or 1 after saying what failed. */
static int report_run(const struct report_opts *o, struct policy *p, unsigned fmt)
{
	char out_path[PATH_MAX + 16];
	struct policy_report r;
	struct err e;
	int status = 0;

	if (policy_report_run(p, fmt, &r, &e) != POLICY_OK) {
		fprintf(stderr, "prof report: %s\n", e.msg);
		return 1;
	}
	snprintf(out_path, sizeof out_path, "%s/report.html", o->input);
	if (emit(o, &r, out_path) != 0)
		status = 1;
	policy_report_free(&r);
	return status;
}

/* `prof report`: see cli_report_cmd in cli.h. */
static int report_main(int argc, char **argv)
{
	struct report_opts o = { 0 };
	struct window_list wl = { 0 };
	struct policy *p = NULL;
	const char **sets = NULL;
	unsigned fmt;
	struct err e;
	int status = 0, rc, hangs, jobs;
	size_t i;

	rc = report_parse(argc, argv, &o);
	if (rc != 0) {
		free(o.sets);
		return rc < 0 ? 0 : rc;
	}
	report_log_level();
	fmt = strcmp(o.format, "json") == 0 ? POLICY_REPORT_JSON
	      : strcmp(o.format, "html") == 0 ? POLICY_REPORT_HTML : POLICY_REPORT_TEXT;
	/* A run whose ranks wrote hang reports (prof.watchdog): the view
	 * across ranks first; such a run may have no window at all. Then
	 * its latest job-wide capture or dump, side by side across ranks
	 * (docs/jobs.md). */
	hangs = fmt == POLICY_REPORT_TEXT ? hangs_report(o.input, stdout) : 0;
	jobs = fmt == POLICY_REPORT_TEXT ? jobview_report(o.input, stdout) : 0;
	if (find_windows(o.input, &wl, &e) != 0) {
		if (hangs <= 0 && jobs <= 0) { /* else the views were the report */
			fprintf(stderr, "prof report: %s\n", e.msg);
			status = 1;
		}
		goto out;
	}
	p = report_policy(&o, &sets, &status);
	if (!p)
		goto out;
	if (o.key_averages) {
		status = emit_key_averages(&o, &wl, policy_config(p));
		goto out;
	}
	for (i = 0; i < wl.n; i++) {
		rc = report_window(&o, p, &wl, i, fmt);
		if (rc != 0)
			status = 1;
		if (rc < 0)
			break;
	}
	if (wl.n > 1 && report_run(&o, p, fmt) != 0)
		status = 1;
out:
	policy_free(p);
	list_free(&wl);
	free(sets);
	free(o.sets);
	return status;
}

const struct cli_cmd cli_report_cmd = { "report", report_main, report_help, report_synopsis };

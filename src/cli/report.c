/*
 * report — `prof report`: runs the built-in and custom reports on saved
 * output, without the target process.
 *
 * Input: a window directory (capture.phb, else trace.json[.gz]), a rank or
 * run directory (every window*_steps* below it), or one file (capture.phb
 * or a JSON trace, gzipped or not). A run directory whose ranks wrote hang
 * reports first gets the view of the hang across ranks (hangs.c). The reports run in a policy VM like
 * the host's (the built-in default policy, or --script), so a policy's
 * prof.on_trace_ready hooks work offline unchanged.
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
#include "../events/trace.h"
#include "../export/hanglinks.h"
#include "../export/key_averages.h"
#include "../export/textbuf.h"
#include "../export/outfile.h"
#include "../export/phb.h"
#include "../read/phb_read.h"
#include "../read/readfile.h"
#include "../export/stacks.h"
#include "../read/trace_json.h"
#include "../policy/policy.h"
#include "../util/err.h"
#include "../util/grow.h"
#include "../util/log.h"

const char cli_report_synopsis[] =
	"prof report <window-or-run-dir | file> [--script report.lua] "
	"[--format text|json|html] [--key-averages] [-o file] [--set key=value]...";

/* capture.phb files are read whole; this bounds them. */
#define REPORT_PHB_MAX ((size_t)16 << 30)

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

void cli_report_help(FILE *out)
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
		cli_report_synopsis);
}


/* Parses the arguments; 0, -1 after help, or an exit status. */
static int report_parse(int argc, char **argv, struct report_opts *o)
{
	int i, m;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *val = NULL;

		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			cli_report_help(stdout);
			return -1;
		}
		if (a[0] != '-' || a[1] == '\0') {
			if (o->input)
				return cli_usage_error("report", cli_report_synopsis, "more than one input ('%s' and '%s')",
							  o->input, a);
			o->input = a;
			continue;
		}
		if ((m = cli_option(argc, argv, &i, 's', "script", &val)) != 0) {
			if (m < 0)
				return cli_usage_error("report", cli_report_synopsis, "option '%s' needs a file", a);
			o->script = val;
		} else if ((m = cli_option(argc, argv, &i, 'f', "format", &val)) != 0) {
			if (m < 0)
				return cli_usage_error("report", cli_report_synopsis, "option '%s' needs text, json or html", a);
			if (strcmp(val, "text") && strcmp(val, "json") && strcmp(val, "html"))
				return cli_usage_error("report", cli_report_synopsis, "unknown format '%s' (text, json or html)", val);
			o->format = val;
		} else if ((m = cli_option(argc, argv, &i, 'o', "output", &val)) != 0) {
			if (m < 0 || !val[0])
				return cli_usage_error("report", cli_report_synopsis, "option '%s' needs a file", a);
			o->output = val;
		} else if (strcmp(a, "--key-averages") == 0) {
			o->key_averages = true;
		} else if ((m = cli_option(argc, argv, &i, 0, "set", &val)) != 0) {
			const char **grown;

			if (m < 0 || !strchr(val, '='))
				return cli_usage_error("report", cli_report_synopsis, "option '--set' needs key=value");
			grown = realloc(o->sets, (o->nsets + 2) * sizeof *grown);
			if (!grown) {
				fprintf(stderr, "prof report: out of memory\n");
				return 1;
			}
			o->sets = grown;
			o->sets[o->nsets++] = val;
			o->sets[o->nsets] = NULL;
		} else {
			return cli_usage_error("report", cli_report_synopsis, "unknown option '%s'", a);
		}
	}
	if (!o->input)
		return cli_usage_error("report", cli_report_synopsis, "missing input (a window or run directory, or a trace file)");
	if (o->key_averages && o->format && strcmp(o->format, "text") != 0)
		return cli_usage_error("report", cli_report_synopsis,
				       "--key-averages prints text only (not --format %s)", o->format);
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

static bool is_file(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Whether `dir` holds a window's data. */
static bool is_window_dir(const char *dir)
{
	char p[PATH_MAX];

	snprintf(p, sizeof p, "%s/%s", dir, PHB_FILE);
	if (is_file(p))
		return true;
	snprintf(p, sizeof p, "%s/trace.json", dir);
	if (is_file(p))
		return true;
	snprintf(p, sizeof p, "%s/trace.json.gz", dir);
	return is_file(p);
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
		if (is_window_dir(p) && (l->n >= REPORT_MAX_WINDOWS || list_add(l, p) != 0)) {
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
	if (!S_ISDIR(st.st_mode) || is_window_dir(input))
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

/* readfile's sniff function: a capture.phb may hold REPORT_PHB_MAX bytes,
 * a JSON trace TRACE_JSON_MAX_BYTES; anything else is refused from its
 * first bytes, before the rest is read or inflated. */
static int report_sniff(const char *head, size_t n, const char *path,
			struct readfile_kind *k, struct err *e)
{
	size_t i = 0;

	if (phb_is_phb(head, n)) {
		k->max = REPORT_PHB_MAX;
		k->what = "capture data";
		k->hint = "";
		return 0;
	}
	while (i < n && (head[i] == ' ' || head[i] == '\n' || head[i] == '\r' ||
			 head[i] == '\t'))
		i++;
	if (n == 0)
		return err_set(e, "%s: empty file at offset 0", path);
	if (i < n && head[i] != '{' && head[i] != '[')
		return err_set(e, "%s: neither a profhost capture (capture.phb) nor a JSON "
			       "trace: unexpected byte 0x%02x at offset %zu", path,
			       (unsigned char)head[i], i);
	k->max = TRACE_JSON_MAX_BYTES;
	k->what = "JSON";
	k->hint = " (prof report parses JSON whole; use the window's capture.phb)";
	return 0;
}

int cli_report_load_window(const char *path, struct trace *t, char *dir, size_t dsize,
			   struct err *e)
{
	char file[PATH_MAX];
	struct stat st;
	struct readfile_buf in;
	size_t skipped = 0, k;
	int rc;

	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
		snprintf(dir, dsize, "%s", path);
		snprintf(file, sizeof file, "%s/%s", path, PHB_FILE);
		if (!is_file(file))
			snprintf(file, sizeof file, "%s/trace.json", path);
		if (!is_file(file))
			snprintf(file, sizeof file, "%s/trace.json.gz", path);
	} else {
		const char *slash = strrchr(path, '/');

		snprintf(file, sizeof file, "%s", path);
		if (slash)
			snprintf(dir, dsize, "%.*s", (int)(slash - path), path);
		else
			snprintf(dir, dsize, ".");
	}
	if (readfile_all(file, report_sniff, &in, e) != 0)
		return -1;
	if (phb_is_phb(in.data, in.len)) {
		rc = phb_parse(in.data, in.len, file, t, e);
	} else {
		for (k = 0; k < in.len && (in.data[k] == ' ' || in.data[k] == '\n' ||
					   in.data[k] == '\r' || in.data[k] == '\t'); k++)
			;
		if (k == in.len)
			rc = err_set(e, "%s: no JSON in it (only white space)", file);
		else
			rc = trace_json_parse(in.data, in.len, file, t, &skipped, e);
	}
	readfile_release(&in);
	/* A trace written by a process without a C++ demangler holds mangled
	 * names: name them here, as the process would have. */
	if (rc == 0 && stacks_demangle_names(t, demangle_find(true)) != 0)
		rc = err_set(e, "%s: out of memory naming its C++ functions", file);
	if (rc == 0)
		trace_sort(t); /* profhost wrote it sorted: then only a check */
	return rc;
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
		if (cli_report_load_window(wl->dirs[i], &t, dir, sizeof dir, &e) != 0 ||
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

int cli_find_lua_dir(char *out, size_t size, struct err *e)
{
	const char *env = getenv("PROF_LUA_DIR");
	char exe[PATH_MAX];
	ssize_t n;
	int i;

	if (env && env[0]) {
		snprintf(out, size, "%s", env);
		return 0;
	}
	n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n < 0)
		return err_errno(e, errno, "cannot read /proc/self/exe");
	exe[n] = '\0';
	for (i = 0; i < 2; i++) {
		char *slash = strrchr(exe, '/');

		if (!slash)
			return err_set(e, "cannot tell the directory of '%s'", exe);
		*slash = '\0';
	}
	if ((size_t)snprintf(out, size, "%s/share/profhost/lua", exe) >= size)
		return err_set(e, "path too long");
	return 0;
}

int cli_report_main(int argc, char **argv)
{
	struct report_opts o = { 0 };
	struct window_list wl = { 0 };
	struct policy_opts po = { 0 };
	struct policy *p = NULL;
	const char **sets = NULL;
	char lua_dir[PATH_MAX], dir[PATH_MAX], out_path[PATH_MAX + 16];
	unsigned fmt;
	struct err e;
	int status = 0, rc, hangs, jobs;
	size_t i, nsets = 0;

	rc = report_parse(argc, argv, &o);
	if (rc != 0) {
		free(o.sets);
		return rc < 0 ? 0 : rc;
	}
	{
		enum log_level lv;
		const char *env = getenv("PROF_LOG");

		if (env && log_parse_level(env, &lv) == 0)
			log_set_level(lv);
	}
	fmt = strcmp(o.format, "json") == 0 ? POLICY_REPORT_JSON
	      : strcmp(o.format, "html") == 0 ? POLICY_REPORT_HTML : POLICY_REPORT_TEXT;
	/* A run whose ranks wrote hang reports (prof.watchdog): the view
	 * across ranks first; such a run may have no window at all. Then
	 * its latest job-wide capture or dump, side by side across ranks
	 * (docs/jobs.md). */
	hangs = fmt == POLICY_REPORT_TEXT ? cli_hangs_report(o.input, stdout) : 0;
	jobs = fmt == POLICY_REPORT_TEXT ? cli_jobs_report(o.input, stdout) : 0;
	if (find_windows(o.input, &wl, &e) != 0) {
		if (hangs > 0 || jobs > 0)
			goto out; /* the views across ranks were the report */
		fprintf(stderr, "prof report: %s\n", e.msg);
		status = 1;
		goto out;
	}
	if (cli_find_lua_dir(lua_dir, sizeof lua_dir, &e) != 0) {
		fprintf(stderr, "prof report: %s\n", e.msg);
		status = CLI_EXIT_USAGE;
		goto out;
	}
	sets = calloc(o.nsets + 3, sizeof *sets);
	if (!sets) {
		fprintf(stderr, "prof report: out of memory\n");
		status = 1;
		goto out;
	}
	for (i = 0; report_default_sets[i]; i++)
		sets[nsets++] = report_default_sets[i];
	for (i = 0; i < o.nsets; i++)
		sets[nsets++] = o.sets[i];
	po.lua_dir = lua_dir;
	po.script = o.script;
	po.sets = sets;
	p = policy_load(&po, &e);
	if (!p) {
		fprintf(stderr, "prof report: %s\n", e.msg);
		status = CLI_EXIT_USAGE;
		goto out;
	}

	if (o.key_averages) {
		status = emit_key_averages(&o, &wl, policy_config(p));
		goto out;
	}
	for (i = 0; i < wl.n; i++) {
		struct trace t;
		struct policy_trace pt;
		struct hang_link links[HANGLINKS_MAX];
		struct policy_report r;
		unsigned want = wl.n == 1 ? fmt : (fmt == POLICY_REPORT_HTML ? fmt : 0);

		if (trace_init(&t) != 0) {
			fprintf(stderr, "prof report: out of memory\n");
			status = 1;
			break;
		}
		if (cli_report_load_window(wl.dirs[i], &t, dir, sizeof dir, &e) != 0) {
			fprintf(stderr, "prof report: %s\n", e.msg);
			trace_free(&t);
			status = 1;
			if (wl.n == 1)
				break;
			continue;
		}
		pt.trace = &t;
		pt.dir = dir;
		pt.out = NULL; /* the user's directory: opened by its path */
		pt.files = NULL;
		/* the hang reports beside it, as the host linked them */
		pt.hangs = links;
		pt.nhangs = hanglinks_find(dir, &t.meta, links, HANGLINKS_MAX);
		if (policy_report_window(p, &pt, want, wl.n > 1, &r, &e) != POLICY_OK) {
			fprintf(stderr, "prof report: %s: %s\n", wl.dirs[i], e.msg);
			status = 1;
		} else {
			snprintf(out_path, sizeof out_path, "%s/report.html", dir);
			if (wl.n == 1) {
				if (emit(&o, &r, out_path) != 0)
					status = 1;
			} else if (r.html && outfile_write_text(out_path, r.html, &e) != 0) {
				fprintf(stderr, "prof report: %s\n", e.msg);
				status = 1;
			}
			policy_report_free(&r);
		}
		if (policy_config(p)->has_on_trace_ready &&
		    policy_on_trace_ready(p, &pt, &e) == POLICY_ERROR) {
			fprintf(stderr, "prof report: %s: %s\n", wl.dirs[i], e.msg);
			status = 1;
		}
		trace_free(&t);
	}
	if (wl.n > 1) {
		struct policy_report r;

		if (policy_report_run(p, fmt, &r, &e) != POLICY_OK) {
			fprintf(stderr, "prof report: %s\n", e.msg);
			status = 1;
		} else {
			snprintf(out_path, sizeof out_path, "%s/report.html", o.input);
			if (emit(&o, &r, out_path) != 0)
				status = 1;
			policy_report_free(&r);
		}
	}
out:
	policy_free(p);
	list_free(&wl);
	free(sets);
	free(o.sets);
	return status;
}

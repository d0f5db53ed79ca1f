/*
 * salvage — `prof salvage PATH`, and the launcher's salvage of a target
 * that died of SIGKILL or ended in _exit() (run.c): reads a salvage file
 * (src/read/salvage_read.h), writes what it recorded as a window folder
 * with the files the host thread would have written, and removes the
 * file. docs/recorder.md.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../events/trace.h"
#include "../export/export.h"
#include "../policy/policy.h"
#include "../read/salvage_read.h"
#include "../util/fsutil.h"
#include "cli.h"

const char *const cli_salvage_synopsis = "prof salvage PATH";

void cli_salvage_help(FILE *out)
{
	fprintf(out,
		"usage: %s\n"
		"\n"
		"Writes what a process held in its salvage file (a window recording,\n"
		"or the flight recorder's last steps) when it died of SIGKILL or ended\n"
		"in _exit(): a window folder under the run's rank folder, as the\n"
		"process would have written it, marked \"salvaged\" in summary.txt and\n"
		"the trace's metadata, GPU work from the recorder's CUPTI records\n"
		"included. Then removes the file. `prof run` does this by\n"
		"itself; this is for processes started without it (the files are\n"
		"/dev/shm/profhost-<pid>-<time>.salvage, or in PROF_SALVAGE_DIR).\n",
		cli_salvage_synopsis);
}

/* Appends "window\t<dir>" to the launcher's notes file `notes`. */
static void note_window(const char *notes, const char *dir)
{
	FILE *f;

	if (!notes)
		return;
	f = fopen(notes, "a");
	if (!f)
		return;
	fprintf(f, "window\t%s\n", dir);
	fclose(f);
}

/* Adds the built-in reports (report.txt, report.html, modules.txt) the
 * host thread would have, as its settings in the file ask, to the folder
 * in *res; rank 0's findings go to stderr. Returns 0 or -1 with *e. */
static int write_reports(const struct salvage_file *f, const struct trace *t,
			 struct export_result *res, struct err *e)
{
	static const char *const sets[] = { "limits.report_ms=3600000",
					    "limits.memory_mb=4096", NULL };
	unsigned formats = (f->hd->flags & SALV_F_REPORT_TEXT ? POLICY_REPORT_TEXT : 0) |
			   (f->hd->flags & SALV_F_REPORT_HTML ? POLICY_REPORT_HTML : 0);
	struct policy_opts po = { 0 };
	struct policy *p;
	char lua_dir[PATH_MAX], *findings;
	int rc = 0;

	if (!formats)
		return 0;
	if (cli_find_lua_dir(lua_dir, sizeof lua_dir, e) != 0)
		return -1;
	po.lua_dir = lua_dir;
	po.sets = sets;
	p = policy_load(&po, e);
	if (!p)
		return -1;
	/* a process killed while hung links the watchdog's report */
	if (policy_write_reports(p, t, res, formats, true, &findings, e) != POLICY_OK)
		rc = -1;
	else if (findings && findings[0] && t->meta.rank == 0)
		fputs(findings, stderr);
	free(findings); /* NULL after a failure */
	policy_free(p);
	return rc;
}

/* Writes trace t as the salvage file's window folder, with the export
 * settings it names; res is filled. Returns 0 or -1 with *e. */
static int write_trace(const struct salvage_file *f, struct trace *t,
		       struct export_result *res, struct err *e)
{
	struct export_opts o = { 0 };
	uint32_t fl = f->hd->flags;
	char run_dir[sizeof f->hd->run_dir], run_id[sizeof f->hd->run_id];

	snprintf(run_dir, sizeof run_dir, "%.*s", (int)sizeof run_dir - 1, f->hd->run_dir);
	snprintf(run_id, sizeof run_id, "%.*s", (int)sizeof run_id - 1, f->hd->run_id);
	o.run_dir = run_dir;
	o.run_id = run_id[0] ? run_id : NULL;
	o.chrome = fl & SALV_F_CHROME;
	o.chrome_gzip = fl & SALV_F_GZIP;
	o.key_averages = fl & SALV_F_KEY_AVERAGES;
	o.raw = fl & SALV_F_RAW;
	o.stacks = fl & SALV_F_STACKS;
	o.summary = false;
	t->counters.events = t->nev;
	export_unix_time(t);
	trace_sort(t); /* its tables and reports sweep it as it lies */
	if (export_window(t, &o, res, e) != 0 || write_reports(f, t, res, e) != 0)
		return -1;
	if ((fl & SALV_F_SUMMARY) && export_summary(t, res, e) != 0)
		return -1;
	return 0;
}

/* Whether the recording salvaged into t deserves a folder. A window:
 * always (the policy asked for it). The flight recorder of a process that
 * completed a step: always. The recorder of one that never stepped (a
 * shell that started the real ranks, a helper tool): only when it may
 * have been stopped from outside while it hung before its first step
 * (SIGKILL) and holds something from that time; not when its process is
 * known to have ended by exit or _exit on its own (`exited`), and not
 * when it recorded nothing. docs/recorder.md, "Surviving SIGKILL and _exit()". */
static bool salvage_worth(const struct salvage_file *f, const struct trace *t, bool exited)
{
	if (f->st.kind != SALV_RECORDER ||
	    atomic_load_explicit(&f->hd->nsteps, memory_order_acquire) != 0)
		return true;
	return !exited && t->nev > 0;
}

int cli_salvage_file(const char *path, const char *how, bool exited, const char *notes,
		     struct err *e)
{
	struct salvage_file f;
	struct export_result res;
	struct trace t;
	int rc;

	if (salvage_open(path, &f, e) != 0)
		return -1;
	if (!salvage_recording(&f)) {
		/* nothing was recording: nothing lost */
		unlink(path);
		salvage_close(&f);
		return 1;
	}
	if (trace_init(&t) != 0) {
		salvage_close(&f);
		return err_set(e, "out of memory salvaging '%s'", path);
	}
	memset(&res, 0, sizeof res);
	rc = salvage_build(&f, how, &t, e);
	if (rc == 0 && !salvage_worth(&f, &t, exited)) {
		unlink(path);
		rc = 2;
	} else if (rc == 0) {
		rc = write_trace(&f, &t, &res, e);
	}
	if (rc == 0) {
		char lost[160] = "";

		/* a pool its tmpfs had no room for: said, not passed off as
		 * a quiet recording (the notes say how to avoid it) */
		if (f.pools_out && !t.meta.recorder)
			snprintf(lost, sizeof lost, "; its events were lost: the salvage "
				 "file's tmpfs had no room for them");
		else if (f.pools_out)
			snprintf(lost, sizeof lost, "; the events of %u of its %u segments "
				 "were lost: the salvage file's tmpfs had no room for "
				 "them", f.pools_out, f.st.ngens);
		fprintf(stderr, "profhost: salvaged %s %u of process %d (steps %llu-%llu) "
			"%s: %llu events, %llu torn records dropped%s -> %s/\n",
			t.meta.recorder ? "recorder dump" : "window", t.meta.window,
			(int)f.hd->pid, (unsigned long long)t.meta.first_step,
			(unsigned long long)t.meta.last_step, how,
			(unsigned long long)t.counters.events,
			(unsigned long long)f.torn, lost, res.dir);
		note_window(notes, res.dir);
		unlink(path);
	}
	export_result_free(&res);
	trace_free(&t);
	salvage_close(&f);
	return rc;
}

/* What ended the launched process, for the folder's mark: "after
 * SIGKILL", "after _exit(3)". */
static void describe_end(int status, char *out, size_t size)
{
	if (WIFSIGNALED(status)) {
		const char *abbrev = sigabbrev_np(WTERMSIG(status));

		if (abbrev)
			snprintf(out, size, "after SIG%s", abbrev);
		else
			snprintf(out, size, "after signal %d", WTERMSIG(status));
	} else if (WIFEXITED(status)) {
		snprintf(out, size, "after _exit(%d)", WEXITSTATUS(status));
	} else {
		snprintf(out, size, "after its process ended");
	}
}

void cli_salvage_dir(const char *dir, pid_t child, int status, const char *notes)
{
	char path[PATH_MAX], how[64], other[64];
	struct dirent *d;
	DIR *dp = opendir(dir);
	struct err e;

	if (!dp)
		return;
	describe_end(status, how, sizeof how);
	snprintf(other, sizeof other, "after its process ended");
	while ((d = readdir(dp)) != NULL) {
		size_t n = strlen(d->d_name);
		char prefix[64];
		bool own;

		if (n <= 8 || strcmp(d->d_name + n - 8, ".salvage") != 0 ||
		    fsutil_join(path, sizeof path, dir, d->d_name, NULL) != 0)
			continue;
		/* the launched process itself, whose end is known, or one it
		 * started */
		snprintf(prefix, sizeof prefix, "profhost-%d-", (int)child);
		own = strncmp(d->d_name, prefix, strlen(prefix)) == 0;
		if (cli_salvage_file(path, own ? how : other, own && WIFEXITED(status),
				     notes, &e) < 0)
			fprintf(stderr, "prof run: %s\n", e.msg); /* the file stays */
	}
	closedir(dp);
}

int cli_salvage_main(int argc, char **argv)
{
	struct err e;

	if (argc != 2)
		return cli_usage_error("salvage", cli_salvage_synopsis,
				       argc < 2 ? "missing PATH" : "one PATH at a time");
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		cli_salvage_help(stdout);
		return 0;
	}
	switch (cli_salvage_file(argv[1], "after its process ended", false, NULL, &e)) {
	case 0:
		return 0;
	case 1:
		fprintf(stderr, "prof salvage: '%s' held nothing recording (no window, no "
			"recorder); removed it\n", argv[1]);
		return 0;
	case 2:
		fprintf(stderr, "prof salvage: '%s' held the flight recorder of a process "
			"that ended before its first step, with nothing recorded; removed "
			"it\n", argv[1]);
		return 0;
	default:
		fprintf(stderr, "prof salvage: %s\n", e.msg);
		return 1;
	}
}

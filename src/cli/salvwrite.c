/*
 * salvwrite — a salvage file written out (see salvwrite.h): reads it
 * (src/salvage/salvage_read.h), writes what it recorded as a window folder
 * with the files the host thread would have written, and removes the
 * file. A salvage file is untrusted input: only this user's is read
 * (salvage_open), and the run folder it names is written only when it is
 * a plain path into a folder of this user's (outdir_open_untrusted), or
 * the user names another (-o DIR). docs/recorder.md.
 */
#include <ctype.h>
#include <dirent.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../events/trace.h"
#include "../export/export.h"
#include "../export/jobfile.h"
#include "../export/outdir.h"
#include "../policy/policy.h"
#include "../salvage/salvage_read.h"
#include "../common/err.h"
#include "../util/fsutil.h"
#include "locate.h"
#include "salvwrite.h"

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
	if (locate_lua_dir(lua_dir, sizeof lua_dir, e) != 0)
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

/* Copies the text field src[size] of the file into dst[size]: 0, or -1
 * when it has no end or holds control characters (a damaged or forged
 * file; a run id goes into the run folder's marker, a line). */
static int field_text(char *dst, const char *src, size_t size)
{
	size_t i, n = strnlen(src, size);

	if (n == size)
		return -1;
	for (i = 0; i < n; i++)
		if ((unsigned char)src[i] < 0x20 || src[i] == 0x7f)
			return -1;
	memcpy(dst, src, n + 1);
	return 0;
}

/* The run folder's name for -o DIR, into out[size]: the last part of the
 * run folder the file names, with characters other than letters, digits
 * and "_.+-" made "_" (as PROF_RUN_ID's); "salvaged-<pid>" when that
 * leaves nothing usable. */
static void safe_run_name(const char *run_dir, int pid, char *out, size_t size)
{
	const char *last = strrchr(run_dir, '/');
	size_t i, n = 0;

	for (last = last ? last + 1 : run_dir; *last && n + 1 < size && n < 200; last++, n++) {
		unsigned char c = (unsigned char)*last;

		out[n] = c < 0x80 && (isalnum(c) || strchr("_.+-", c)) ? (char)c : '_';
	}
	out[n] = '\0';
	for (i = 0; i < n && out[i] == '.'; i++)
		;
	if (i == n)
		snprintf(out, size, "salvaged-%d", pid);
}

/* Opens the output directory the file's run folder goes in (*out) and
 * names the run folder in it (run[size]), and copies the run id (run_id,
 * "" for none): with o->out_dir, that directory (created if missing,
 * followed as the user gave it) and safe_run_name(); else the run folder
 * the file names, under outdir_open_untrusted()'s rules. Returns 0, or -1
 * with *e naming the file, the path and the fix. */
static int open_output(const struct salvage_file *f, const struct salvwrite_opts *o,
		       struct outdir *out, char *run, size_t size, char *run_id,
		       struct err *e)
{
	char run_dir[sizeof f->hd->run_dir];
	const char *leaf;
	struct err why;
	bool ended;

	out->fd = -1;
	if (field_text(run_id, f->hd->run_id, sizeof f->hd->run_id) != 0)
		return err_set(e, "'%s' is damaged: its run id is not a line of text", f->path);
	snprintf(run_dir, sizeof run_dir, "%.*s", (int)sizeof run_dir - 1, f->hd->run_dir);
	if (o->out_dir) {
		safe_run_name(run_dir, (int)f->hd->pid, run, size);
		if (fsutil_mkdirs(o->out_dir, 0755, e) != 0 || outdir_open(o->out_dir, out, e) != 0)
			return -1;
		return 0;
	}
	ended = strnlen(f->hd->run_dir, sizeof f->hd->run_dir) < sizeof f->hd->run_dir;
	if (!ended)
		err_set(&why, "it has no end (a damaged file)");
	if (!ended || outdir_open_untrusted(run_dir, out, &leaf, &why) != 0) {
		size_t i;

		for (i = 0; run_dir[i]; i++) /* said on one line */
			if ((unsigned char)run_dir[i] < 0x20 || run_dir[i] == 0x7f)
				run_dir[i] = '?';
		return err_set(e, "refusing the run folder '%s' that '%s' names: %s (write it "
			       "elsewhere: prof salvage -o DIR %s)", run_dir, f->path, why.msg,
			       f->path);
	}
	snprintf(run, size, "%s", leaf);
	return 0;
}

/* Writes trace t as the salvage file's window folder, with the export
 * settings it names, where open_output() says; res is filled. Returns 0
 * or -1 with *e. */
static int write_trace(const struct salvage_file *f, const struct salvwrite_opts *co,
		       struct trace *t, struct export_result *res, struct err *e)
{
	struct export_opts o = { 0 };
	uint32_t fl = f->hd->flags;
	char run[256], run_id[sizeof f->hd->run_id];
	struct outdir out;
	int rc;

	memset(res, 0, sizeof *res);
	res->out.fd = -1;
	if (open_output(f, co, &out, run, sizeof run, run_id, e) != 0)
		return -1;
	o.out_dir = &out;
	o.run_dir = run;
	o.run_id = run_id[0] ? run_id : NULL;
	o.chrome = fl & SALV_F_CHROME;
	o.chrome_gzip = fl & SALV_F_GZIP;
	o.key_averages = fl & SALV_F_KEY_AVERAGES;
	o.raw = fl & SALV_F_RAW;
	o.stacks = fl & SALV_F_STACKS;
	o.memory_timeline = fl & SALV_F_MEMORY_TIMELINE;
	o.summary = false;
	t->counters.events = t->nev;
	/* a job-wide dump: named after its rank, as the others' answers are */
	if ((fl & SALV_F_JOB) && t->meta.recorder && !t->meta.suffix) {
		char sfx[32];

		snprintf(sfx, sizeof sfx, "by-rank%d", (int)f->hd->rank);
		t->meta.suffix = strdup(sfx);
	}
	export_unix_time(t);
	trace_sort(t); /* its tables and reports sweep it as it lies */
	rc = export_window(t, &o, res, e) != 0 || write_reports(f, t, res, e) != 0 ? -1 : 0;
	outdir_close(&out);
	if (rc == 0 && (fl & SALV_F_SUMMARY) && export_summary(t, res, e) != 0)
		rc = -1;
	return rc;
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

/* Says in one line what was salvaged from f (its trace t) into res->dir,
 * `how` it ended. */
static void say_salvaged(const struct salvage_file *f, const struct trace *t,
			 const struct export_result *res, const char *how)
{
	char lost[160] = "";

	/* a pool its tmpfs had no room for: said, not passed off as a quiet
	 * recording (the notes say how to avoid it) */
	if (f->pools_out && !t->meta.recorder)
		snprintf(lost, sizeof lost, "; its events were lost: the salvage "
			 "file's tmpfs had no room for them");
	else if (f->pools_out)
		snprintf(lost, sizeof lost, "; the events of %u of its %u segments "
			 "were lost: the salvage file's tmpfs had no room for "
			 "them", f->pools_out, f->st.ngens);
	fprintf(stderr, "profhost: salvaged %s %u of process %d (steps %llu-%llu) "
		"%s: %llu events, %llu torn records dropped%s -> %s/\n",
		t->meta.recorder ? "recorder dump" : "window", t->meta.window,
		(int)f->hd->pid, (unsigned long long)t->meta.first_step,
		(unsigned long long)t->meta.last_step, how,
		(unsigned long long)t->counters.events,
		(unsigned long long)f->torn, lost, res->dir);
}

/* A salvaged flight recorder of a process with prof.recorder{ job = true }
 * is news for the job's other ranks, which may still run (a rank killed
 * by the kernel's OOM killer, the others waiting for it in a collective):
 * published into its run directory's job folder as the process would
 * have (docs/jobs.md), said in one line. */
static void publish_salvaged(const struct salvage_file *f, const struct trace *t,
			     const struct export_result *res, const char *how)
{
	struct jobfile jf = { 0 };
	char name[128], text[JOBFILE_MAX + 1];
	struct timespec now;
	struct err e;
	int dfd, rc;

	if (!(f->hd->flags & SALV_F_JOB) || !t->meta.recorder || !res->run_dir[0])
		return;
	clock_gettime(CLOCK_REALTIME, &now);
	jf.kind = JOBFILE_DUMP;
	jf.created_ns = (int64_t)now.tv_sec * 1000000000LL + now.tv_nsec;
	jf.rank = (int)f->hd->rank;
	jf.pid = (int)f->hd->pid;
	jf.first = t->meta.first_step;
	jf.last = t->meta.last_step;
	jf.partial = true;
	snprintf(jf.host, sizeof jf.host, "%.127s", f->hd->hostname);
	snprintf(jf.reason, sizeof jf.reason, "salvaged %s", how);
	if (jobfile_format(&jf, text, sizeof text) < 0) {
		jf.host[0] = '\0'; /* not a line of text */
		if (jobfile_format(&jf, text, sizeof text) < 0)
			return;
	}
	snprintf(name, sizeof name, "dump-%lld-steps%llu-%llu",
		 (long long)(now.tv_sec / 60), (unsigned long long)jf.first,
		 (unsigned long long)jf.last);
	rc = jobfile_open_dir(res->run_dir, true, &dfd, &e);
	if (rc == 0) {
		rc = jobfile_write_new(dfd, name, text, &e);
		close(dfd);
	}
	if (rc < 0)
		fprintf(stderr, "profhost: the job's other ranks are not told of rank %d's "
			"salvaged dump: %s\n", jf.rank, e.msg);
	else if (rc == 0)
		fprintf(stderr, "profhost: told the job's other ranks of rank %d's salvaged "
			"dump (steps %llu-%llu): %s/%s/%s\n", jf.rank,
			(unsigned long long)jf.first, (unsigned long long)jf.last,
			res->run_dir, JOBFILE_DIR, name);
}

int salvwrite_file(const char *path, const struct salvwrite_opts *o, struct err *e)
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
	res.out.fd = -1;
	rc = salvage_build(&f, o->how, &t, e);
	if (rc == 0 && !salvage_worth(&f, &t, o->exited)) {
		unlink(path);
		rc = 2;
	} else if (rc == 0) {
		rc = write_trace(&f, o, &t, &res, e);
	}
	if (rc == 0) {
		say_salvaged(&f, &t, &res, o->how);
		publish_salvaged(&f, &t, &res, o->how);
		note_window(o->notes, res.dir);
		unlink(path);
	}
	export_result_free(&res);
	trace_free(&t);
	salvage_close(&f);
	return rc;
}

void salvwrite_say_removed(const char *who, const char *path, int rc)
{
	if (rc == 1)
		fprintf(stderr, "%s: '%s' held nothing recording (no window, no "
			"recorder); removed it\n", who, path);
	else
		fprintf(stderr, "%s: '%s' held the flight recorder of a process that "
			"ended before its first step, with nothing recorded; removed "
			"it\n", who, path);
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

void salvwrite_launch_dir(const char *dir, pid_t child, int status, const char *notes)
{
	struct salvwrite_opts o = { .who = "prof run", .notes = notes };
	char path[PATH_MAX], how[64], prefix[64];
	struct dirent *d;
	DIR *dp = opendir(dir);
	struct err e;

	if (!dp)
		return;
	describe_end(status, how, sizeof how);
	snprintf(prefix, sizeof prefix, "profhost-%d-", (int)child);
	while ((d = readdir(dp)) != NULL) {
		size_t n = strlen(d->d_name);
		bool own;

		if (n <= 8 || strcmp(d->d_name + n - 8, ".salvage") != 0 ||
		    fsutil_join(path, sizeof path, dir, d->d_name, NULL) != 0)
			continue;
		/* the launched process itself, whose end is known, or one it
		 * started */
		own = strncmp(d->d_name, prefix, strlen(prefix)) == 0;
		o.how = own ? how : "after its process ended";
		o.exited = own && WIFEXITED(status);
		if (salvwrite_file(path, &o, &e) < 0)
			fprintf(stderr, "%s: %s\n", o.who, e.msg); /* the file stays */
	}
	closedir(dp);
}

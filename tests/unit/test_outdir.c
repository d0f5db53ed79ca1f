/*
 * test_outdir — where profhost writes: the run directory (owned by the
 * user, writable by no one else, one run's), window directories made
 * fresh, temporary files never written through a planted link, and the
 * trace writers' confinement, including a symbolic link swapped in
 * between the check and the write.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "export/outdir.h"
#include "export/outfile.h"
#include "util/fsutil.h"

static char tmpdir[256];

static int remove_entry(const char *path, const struct stat *st, int flag,
			struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	if (!f) {
		perror(path);
		exit(2);
	}
	fputs(text, f);
	fclose(f);
}

/* The whole file (static buffer), or "(missing)". */
static const char *contents(const char *path)
{
	static char buf[4096];
	char *got = fsutil_read(path, sizeof buf - 1, NULL, NULL);

	snprintf(buf, sizeof buf, "%s", got ? got : "(missing)");
	free(got);
	return buf;
}

static int contains(const char *s, const char *part)
{
	return s && strstr(s, part) != NULL;
}

/* The confinement: the directory fd returned is where the file lands,
 * even after the path's directory was swapped for a link elsewhere. */
static void test_resolve_swap(void)
{
	struct outdir base, d;
	struct err e;
	const char *leaf;
	char path[700], outside[512], moved[512];
	struct outfile *f;

	snprintf(path, sizeof path, "%s/window", tmpdir);
	snprintf(outside, sizeof outside, "%s/outside", tmpdir);
	mkdir(path, 0755);
	mkdir(outside, 0755);
	CHECK_EQ_INT(outdir_open(path, &base, &e), 0);

	CHECK_EQ_INT(outdir_resolve(&base, "a/b/out.txt", 11, &d, &leaf, &e), 0);
	CHECK_EQ_STR(leaf, "out.txt");
	snprintf(path, sizeof path, "%s/window/a/b", tmpdir);
	CHECK_EQ_STR(d.path, path);

	/* between check and write: a/b becomes a link to `outside` */
	snprintf(moved, sizeof moved, "%s/window/a/b.moved", tmpdir);
	CHECK_EQ_INT(rename(path, moved), 0);
	CHECK_EQ_INT(symlink(outside, path), 0);

	f = outfile_openat(&d, leaf, false, &e);
	CHECK(f != NULL);
	if (f) {
		outfile_puts(f, "inside");
		CHECK_EQ_INT(outfile_commit(f, &e), 0);
	}
	outdir_close(&d);
	snprintf(path, sizeof path, "%s/out.txt", outside);
	CHECK_EQ_STR(contents(path), "(missing)");
	snprintf(path, sizeof path, "%s/out.txt", moved);
	CHECK_EQ_STR(contents(path), "inside");

	/* resolving again sees the link and refuses it */
	CHECK_EQ_INT(outdir_resolve(&base, "a/b/out.txt", 11, &d, &leaf, &e), -1);
	CHECK_EQ_STR(e.msg, "'b' in 'a/b/out.txt' is a symbolic link or not a directory");
	outdir_close(&base);
}

/* The leaf itself swapped for a link to a file outside after the check
 * (outdir_resolve refused it as a link before): the write replaces the
 * link inside the window directory, the outside file keeps its bytes. */
static void test_resolve_leaf_swap(void)
{
	struct outdir base, d;
	struct err e;
	const char *leaf;
	char path[700], victim[512];
	struct outfile *f;
	struct stat st;

	snprintf(path, sizeof path, "%s/window3", tmpdir);
	mkdir(path, 0755);
	snprintf(victim, sizeof victim, "%s/victim3.txt", tmpdir);
	write_file(victim, "precious\n");
	CHECK_EQ_INT(outdir_open(path, &base, &e), 0);
	CHECK_EQ_INT(outdir_resolve(&base, "c/report.txt", 12, &d, &leaf, &e), 0);
	CHECK_EQ_STR(leaf, "report.txt");

	/* between check and write: the leaf appears as a link to `victim` */
	snprintf(path, sizeof path, "%s/window3/c/report.txt", tmpdir);
	CHECK_EQ_INT(symlink(victim, path), 0);

	f = outfile_openat(&d, leaf, false, &e);
	CHECK(f != NULL);
	if (f) {
		outfile_puts(f, "inside");
		CHECK_EQ_INT(outfile_commit(f, &e), 0);
	}
	outdir_close(&d);
	outdir_close(&base);
	CHECK_EQ_STR(contents(victim), "precious\n");
	CHECK_EQ_INT(lstat(path, &st), 0);
	CHECK(S_ISREG(st.st_mode));
	CHECK_EQ_STR(contents(path), "inside");
}

/* Paths that would leave the window directory, and bad leaves. */
static void test_resolve_refusals(void)
{
	static const char *const escapes[] = { "../x", "a/../../x", "./x", "a//x", "a/", NULL };
	struct outdir base, d;
	struct err e;
	const char *leaf;
	char path[512], msg[256];
	size_t i;

	snprintf(path, sizeof path, "%s/window2", tmpdir);
	mkdir(path, 0755);
	CHECK_EQ_INT(outdir_open(path, &base, &e), 0);
	for (i = 0; escapes[i]; i++) {
		CHECK_EQ_INT(outdir_resolve(&base, escapes[i], strlen(escapes[i]), &d, &leaf, &e), -1);
		snprintf(msg, sizeof msg, "'%s' must stay inside the window directory (no '..', "
			 "'.' or empty parts)", escapes[i]);
		CHECK_EQ_STR(e.msg, msg);
	}
	CHECK_EQ_INT(outdir_resolve(&base, "/etc/passwd", 11, &d, &leaf, &e), -1);
	CHECK_EQ_STR(e.msg, "'/etc/passwd' is absolute; give a path inside the window directory");
	CHECK_EQ_INT(outdir_resolve(&base, "a\0b", 3, &d, &leaf, &e), -1);
	CHECK_EQ_STR(e.msg, "the path must be a non-empty string without NUL bytes");

	snprintf(path, sizeof path, "%s/window2/link", tmpdir);
	CHECK_EQ_INT(symlink("/etc/passwd", path), 0);
	CHECK_EQ_INT(outdir_resolve(&base, "link", 4, &d, &leaf, &e), -1);
	CHECK_EQ_STR(e.msg, "'link' is a symbolic link");
	snprintf(path, sizeof path, "%s/window2/sub", tmpdir);
	mkdir(path, 0755);
	CHECK_EQ_INT(outdir_resolve(&base, "sub", 3, &d, &leaf, &e), -1);
	CHECK_EQ_STR(e.msg, "'sub' is a directory");
	outdir_close(&base);
}

/* A temporary name planted as a link to a victim's file: the link is
 * removed, the victim's file is untouched, the output is written. */
static void test_planted_tmp_link(void)
{
	struct outdir d;
	struct err e;
	char path[512], victim[512], tmp[600];
	struct outfile *f;

	snprintf(path, sizeof path, "%s/plant", tmpdir);
	mkdir(path, 0755);
	snprintf(victim, sizeof victim, "%s/victim.txt", tmpdir);
	write_file(victim, "precious\n");
	snprintf(tmp, sizeof tmp, "%s/trace.json.tmp.%ld", path, (long)getpid());
	CHECK_EQ_INT(symlink(victim, tmp), 0);
	CHECK_EQ_INT(outdir_open(path, &d, &e), 0);
	f = outfile_openat(&d, "trace.json", false, &e);
	CHECK(f != NULL);
	if (f) {
		outfile_puts(f, "{}");
		CHECK_EQ_INT(outfile_commit(f, &e), 0);
	}
	outdir_close(&d);
	CHECK_EQ_STR(contents(victim), "precious\n");
	snprintf(tmp, sizeof tmp, "%s/trace.json", path);
	CHECK_EQ_STR(contents(tmp), "{}");

	/* through a path, the same */
	snprintf(tmp, sizeof tmp, "%s/report.html.tmp.%ld", path, (long)getpid());
	CHECK_EQ_INT(symlink(victim, tmp), 0);
	snprintf(tmp, sizeof tmp, "%s/report.html", path);
	CHECK_EQ_INT(outfile_write_text(tmp, "<html>", &e), 0);
	CHECK_EQ_STR(contents(victim), "precious\n");
	CHECK_EQ_STR(contents(tmp), "<html>");
}

/* Run and window directories: created 0755, refused when writable by
 * others or not the user's, never a link; a fresh window name. */
static void test_sub_checks(void)
{
	struct outdir parent, d;
	struct err e;
	char path[512], msg[1024];
	struct stat st;

	snprintf(path, sizeof path, "%s/runs", tmpdir);
	mkdir(path, 0755);
	CHECK_EQ_INT(outdir_open(path, &parent, &e), 0);
	CHECK_EQ_INT(outdir_sub(&parent, "rank0", false, &d, &e), 0);
	snprintf(path, sizeof path, "%s/runs/rank0", tmpdir);
	CHECK_EQ_STR(d.path, path);
	CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0755);
	outdir_close(&d);
	/* existing: fine unless a fresh one is asked for */
	CHECK_EQ_INT(outdir_sub(&parent, "rank0", false, &d, &e), 0);
	outdir_close(&d);
	CHECK_EQ_INT(outdir_sub(&parent, "rank0", true, &d, &e), 1);
	CHECK_EQ_INT(d.fd, -1);

	CHECK_EQ_INT(chmod(path, 0777), 0);
	CHECK_EQ_INT(outdir_sub(&parent, "rank0", false, &d, &e), -1);
	snprintf(msg, sizeof msg, "refusing output directory '%s': it is writable by every "
		 "user (mode 777), who could plant files where profhost writes (chmod go-w "
		 "it, or write elsewhere)", path);
	CHECK_EQ_STR(e.msg, msg);
	CHECK_EQ_INT(chmod(path, 0775), 0);
	CHECK_EQ_INT(outdir_sub(&parent, "rank0", false, &d, &e), -1);
	CHECK(contains(e.msg, "writable by its group (mode 775)"));
	CHECK_EQ_INT(chmod(path, 0755), 0);

	snprintf(path, sizeof path, "%s/runs/rank1", tmpdir);
	CHECK_EQ_INT(symlink(tmpdir, path), 0);
	CHECK_EQ_INT(outdir_sub(&parent, "rank1", false, &d, &e), -1);
	snprintf(msg, sizeof msg, "refusing output directory '%s': it is a symbolic link or "
		 "not a directory (remove it, or write elsewhere: prof run -o DIR, "
		 "PROF_OUTPUT_DIR or prof.output{ dir = ... })", path);
	CHECK_EQ_STR(e.msg, msg);

	if (geteuid() == 0) {
		/* root plays the other user's directory with chown */
		snprintf(path, sizeof path, "%s/runs/rank2", tmpdir);
		mkdir(path, 0755);
		CHECK_EQ_INT(chown(path, 65534, 65534), 0);
		CHECK_EQ_INT(outdir_sub(&parent, "rank2", false, &d, &e), -1);
		snprintf(msg, sizeof msg, "refusing output directory '%s': it belongs to uid "
			 "65534, not to you (uid 0), so its owner could redirect what profhost "
			 "writes there (remove it, or write elsewhere: prof run -o DIR, "
			 "PROF_OUTPUT_DIR or prof.output{ dir = ... })", path);
		CHECK_EQ_STR(e.msg, msg);
	} else {
		printf("skipped the other-owner case: needs root to chown\n");
	}
	outdir_close(&parent);
}

/* One run per run directory: the same run id joins, another goes to
 * <run>.2, a directory with files but no marker is another run. */
static void test_run_claims(void)
{
	struct outdir d;
	struct err e;
	bool moved;
	char run[512], path[600];

	snprintf(run, sizeof run, "%s/out/deep/x", tmpdir);
	CHECK_EQ_INT(outdir_open_run(run, "launch-A", NULL, &d, &moved, &e), 0);
	CHECK_EQ_STR(d.path, run);
	CHECK(!moved);
	outdir_close(&d);
	snprintf(path, sizeof path, "%s/" OUTDIR_RUN_MARKER, run);
	CHECK_EQ_STR(contents(path), "launch-A\n");
	/* another process of the same launch */
	CHECK_EQ_INT(outdir_open_run(run, "launch-A", NULL, &d, &moved, &e), 0);
	CHECK_EQ_STR(d.path, run);
	CHECK(!moved);
	outdir_close(&d);
	/* a later launch with the same run name */
	CHECK_EQ_INT(outdir_open_run(run, "launch-B", NULL, &d, &moved, &e), 0);
	snprintf(path, sizeof path, "%s.2", run);
	CHECK_EQ_STR(d.path, path);
	CHECK(moved);
	outdir_close(&d);
	CHECK_EQ_INT(outdir_open_run(run, "launch-B", NULL, &d, &moved, &e), 0);
	CHECK_EQ_STR(d.path, path);
	outdir_close(&d);
	CHECK_EQ_INT(outdir_open_run(run, "launch-C", NULL, &d, &moved, &e), 0);
	snprintf(path, sizeof path, "%s.3", run);
	CHECK_EQ_STR(d.path, path);
	outdir_close(&d);

	/* an empty directory made beforehand is taken; one with files from
	 * before runs were marked is not */
	snprintf(run, sizeof run, "%s/out/empty", tmpdir);
	mkdir(run, 0755);
	CHECK_EQ_INT(outdir_open_run(run, "launch-A", NULL, &d, &moved, &e), 0);
	CHECK_EQ_STR(d.path, run);
	outdir_close(&d);
	snprintf(run, sizeof run, "%s/out/old", tmpdir);
	mkdir(run, 0755);
	snprintf(path, sizeof path, "%s/rank0", run);
	mkdir(path, 0755);
	CHECK_EQ_INT(outdir_open_run(run, "launch-A", NULL, &d, &moved, &e), 0);
	snprintf(path, sizeof path, "%s.2", run);
	CHECK_EQ_STR(d.path, path);
	outdir_close(&d);

	/* without a run id, anything goes (as before) */
	CHECK_EQ_INT(outdir_open_run(run, NULL, NULL, &d, &moved, &e), 0);
	CHECK_EQ_STR(d.path, run);
	outdir_close(&d);
}

/* Ranks of one job launched separately (one prof run each, their run ids
 * made up a second apart) share the run directory: a marker written by a
 * rank of the same rendezvous after this process started is this run's.
 * A later launch at the same rendezvous, or another job, is not. */
static void test_job_claims(void)
{
	struct outdir d;
	struct err e;
	bool moved;
	char run[512], path[600], want[600];
	struct timespec now;
	int64_t t0;
	const char *text, *sp;
	struct outdir_job rank0 = { "127.0.0.1:29500/2", 0 }, rank1, later, other, none = { NULL, 0 };

	clock_gettime(CLOCK_REALTIME, &now);
	t0 = (int64_t)now.tv_sec * 1000000000LL + now.tv_nsec;
	rank0.start_ns = t0 - 2000000000LL;
	rank1 = rank0;
	rank1.start_ns = t0 - 1000000000LL; /* started a second later */
	snprintf(run, sizeof run, "%s/out/job", tmpdir);
	CHECK_EQ_INT(outdir_open_run(run, "ddp-20260101-000000", &rank0, &d, &moved, &e), 0);
	CHECK_EQ_STR(d.path, run);
	outdir_close(&d);
	snprintf(path, sizeof path, "%s/" OUTDIR_RUN_MARKER, run);
	text = contents(path);
	snprintf(want, sizeof want, "ddp-20260101-000000\njob 127.0.0.1:29500/2 ");
	CHECK(strncmp(text, want, strlen(want)) == 0);
	sp = text + strlen(want);
	CHECK(strtoll(sp, NULL, 10) >= t0);
	/* the other rank, its run id a second on: the same directory */
	CHECK_EQ_INT(outdir_open_run(run, "ddp-20260101-000001", &rank1, &d, &moved, &e), 0);
	CHECK_EQ_STR(d.path, run);
	CHECK(!moved);
	outdir_close(&d);
	/* ... and again for its next window */
	CHECK_EQ_INT(outdir_open_run(run, "ddp-20260101-000001", &rank1, &d, &moved, &e), 0);
	CHECK_EQ_STR(d.path, run);
	outdir_close(&d);
	/* a later launch at the same rendezvous (started after the marker):
	 * another run */
	later = rank0;
	clock_gettime(CLOCK_REALTIME, &now);
	later.start_ns = (int64_t)now.tv_sec * 1000000000LL + now.tv_nsec;
	CHECK_EQ_INT(outdir_open_run(run, "ddp-20260101-000100", &later, &d, &moved, &e), 0);
	snprintf(path, sizeof path, "%s.2", run);
	CHECK_EQ_STR(d.path, path);
	CHECK(moved);
	outdir_close(&d);
	/* another job (another port, or another world size), or no job */
	other = rank1;
	other.key = "127.0.0.1:29501/2";
	CHECK_EQ_INT(outdir_open_run(run, "ddp-20260101-000002", &other, &d, &moved, &e), 0);
	snprintf(path, sizeof path, "%s.3", run);
	CHECK_EQ_STR(d.path, path);
	outdir_close(&d);
	other.key = "127.0.0.1:29500/3";
	CHECK_EQ_INT(outdir_open_run(run, "ddp-20260101-000003", &other, &d, &moved, &e), 0);
	snprintf(path, sizeof path, "%s.4", run);
	CHECK_EQ_STR(d.path, path);
	outdir_close(&d);
	CHECK_EQ_INT(outdir_open_run(run, "ddp-20260101-000004", &none, &d, &moved, &e), 0);
	snprintf(path, sizeof path, "%s.5", run);
	CHECK_EQ_STR(d.path, path);
	outdir_close(&d);
	/* a marker without a job line (no job, or an older profhost) is
	 * another run's */
	snprintf(path, sizeof path, "%s.5", run);
	CHECK_EQ_INT(outdir_open_run(path, "ddp-20260101-000005", &rank1, &d, &moved, &e), 0);
	CHECK(moved);
	outdir_close(&d);
}

/* Checks that outdir_open_untrusted(path) refuses with message `want`,
 * opening nothing. */
static void check_untrusted_refused(const char *path, const char *want)
{
	struct outdir d;
	struct err e;
	const char *leaf = NULL;

	CHECK_EQ_INT(outdir_open_untrusted(path, &d, &leaf, &e), -1);
	CHECK_EQ_STR(e.msg, want);
	CHECK_EQ_INT(d.fd, -1);
	CHECK(leaf == NULL);
}

/* A run folder's path read back from a file (a salvage file's): its text,
 * links anywhere on it, folders others own or can write, and what is made
 * where. */
static void test_untrusted_paths(void)
{
	char path[1024], want[2048], other[1024], big[400];
	struct outdir d, run;
	struct stat st;
	const char *leaf;
	struct err e;
	bool moved;

	check_untrusted_refused("out/run", "it is not an absolute path");
	check_untrusted_refused("/a/../b/run", "it has a '..' part");
	check_untrusted_refused("/a/./run", "it has a '.' part");
	check_untrusted_refused("/a//run", "it has an empty part ('//' or a '/' at its end)");
	check_untrusted_refused("/a/run/", "it has an empty part ('//' or a '/' at its end)");
	check_untrusted_refused("/a/b\nc/run", "it has control characters");
	check_untrusted_refused("/", "it is '/', not <directory>/<run>");
	memset(big, 'x', 300);
	big[300] = '\0';
	snprintf(path, sizeof path, "/a/%s/run", big);
	check_untrusted_refused(path, "a part of it is longer than 255 bytes");

	/* missing folders are made in a folder of ours, 0755, never followed */
	snprintf(path, sizeof path, "%s/u1/new/run", tmpdir);
	CHECK_EQ_INT(outdir_open_untrusted(path, &d, &leaf, &e), 0);
	CHECK_EQ_STR(leaf, "run");
	snprintf(want, sizeof want, "%s/u1/new", tmpdir);
	CHECK_EQ_STR(d.path, want);
	CHECK(stat(want, &st) == 0 && (st.st_mode & 07777) == 0755);
	CHECK_EQ_INT(outdir_open_run_in(&d, leaf, "id1", NULL, &run, &moved, &e), 0);
	snprintf(want, sizeof want, "%s/u1/new/run", tmpdir);
	CHECK_EQ_STR(run.path, want);
	CHECK(!moved);
	outdir_close(&run);
	outdir_close(&d);
	/* the run folder itself, existing and ours: fine */
	CHECK_EQ_INT(outdir_open_untrusted(path, &d, &leaf, &e), 0);
	outdir_close(&d);

	/* a link anywhere on the path: refused, nothing made through it */
	snprintf(other, sizeof other, "%s/u2real", tmpdir);
	mkdir(other, 0755);
	snprintf(path, sizeof path, "%s/u2link", tmpdir);
	CHECK_EQ_INT(symlink(other, path), 0);
	snprintf(path, sizeof path, "%s/u2link/x/run", tmpdir);
	snprintf(want, sizeof want, "'%s/u2link' is a symbolic link or not a directory", tmpdir);
	check_untrusted_refused(path, want);
	snprintf(path, sizeof path, "%s/u2real/x", tmpdir);
	CHECK(access(path, F_OK) != 0);
	snprintf(path, sizeof path, "%s/u2link", tmpdir);
	snprintf(want, sizeof want, "'%s/u2link' is a symbolic link", tmpdir);
	check_untrusted_refused(path, want);

	/* folders others can write: refused to write in, or to make in,
	 * unless sticky (/tmp) */
	snprintf(path, sizeof path, "%s/u4", tmpdir);
	mkdir(path, 0755);
	chmod(path, 0777);
	snprintf(path, sizeof path, "%s/u4/run", tmpdir);
	snprintf(want, sizeof want, "'%s/u4' is writable by every user (mode 777)", tmpdir);
	check_untrusted_refused(path, want);
	snprintf(path, sizeof path, "%s/u4/new/run", tmpdir);
	snprintf(want, sizeof want, "'%s/u4/new' does not exist, and is made only in a folder "
		 "of yours that no one else can write: '%s/u4' is writable by every user "
		 "(mode 777)", tmpdir, tmpdir);
	check_untrusted_refused(path, want);
	snprintf(path, sizeof path, "%s/u4/new", tmpdir);
	CHECK(access(path, F_OK) != 0);
	snprintf(path, sizeof path, "%s/u4", tmpdir);
	chmod(path, 0775);
	snprintf(path, sizeof path, "%s/u4/run", tmpdir);
	snprintf(want, sizeof want, "'%s/u4' is writable by its group (mode 775)", tmpdir);
	check_untrusted_refused(path, want);
	snprintf(path, sizeof path, "%s/u5", tmpdir);
	mkdir(path, 0755);
	chmod(path, 01777);
	snprintf(path, sizeof path, "%s/u5/new/run", tmpdir);
	CHECK_EQ_INT(outdir_open_untrusted(path, &d, &leaf, &e), 0);
	outdir_close(&d);
	/* the run folder: a link, or writable by others */
	snprintf(path, sizeof path, "%s/u1/new/linked", tmpdir);
	CHECK_EQ_INT(symlink(other, path), 0);
	snprintf(want, sizeof want, "'%s' is a symbolic link", path);
	check_untrusted_refused(path, want);
	snprintf(path, sizeof path, "%s/u1/new/open", tmpdir);
	mkdir(path, 0755);
	chmod(path, 0757);
	snprintf(want, sizeof want, "'%s' is writable by every user (mode 757)", path);
	check_untrusted_refused(path, want);
	snprintf(path, sizeof path, "%s/u1/new/file", tmpdir);
	write_file(path, "x");
	snprintf(want, sizeof want, "'%s' is a regular file, not a directory", path);
	check_untrusted_refused(path, want);

	/* another user's folder (root only: chown) */
	if (geteuid() == 0) {
		snprintf(path, sizeof path, "%s/u6", tmpdir);
		mkdir(path, 0755);
		CHECK_EQ_INT(chown(path, 65534, 65534), 0);
		snprintf(path, sizeof path, "%s/u6/run", tmpdir);
		snprintf(want, sizeof want, "'%s/u6' belongs to uid 65534, not to you (uid 0)",
			 tmpdir);
		check_untrusted_refused(path, want);
		snprintf(path, sizeof path, "%s/u6/new/run", tmpdir);
		snprintf(want, sizeof want, "'%s/u6/new' does not exist, and is made only in a "
			 "folder of yours that no one else can write: '%s/u6' belongs to uid "
			 "65534, not to you (uid 0)", tmpdir, tmpdir);
		check_untrusted_refused(path, want);
		snprintf(path, sizeof path, "%s/u1/new/theirs", tmpdir);
		mkdir(path, 0755);
		CHECK_EQ_INT(chown(path, 65534, 65534), 0);
		snprintf(want, sizeof want, "'%s' belongs to uid 65534, not to you (uid 0)", path);
		check_untrusted_refused(path, want);
	}
}

int main(void)
{
	char tmpl[] = "/tmp/test_outdir_XXXXXX";

	umask(022);
	if (!mkdtemp(tmpl)) {
		perror("mkdtemp");
		return 2;
	}
	snprintf(tmpdir, sizeof tmpdir, "%s", tmpl);
	test_resolve_swap();
	test_resolve_leaf_swap();
	test_resolve_refusals();
	test_planted_tmp_link();
	test_sub_checks();
	test_run_claims();
	test_job_claims();
	test_untrusted_paths();
	nftw(tmpdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
	return check_done();
}

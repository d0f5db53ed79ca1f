/*
 * test_jobfile — the job folder's files (src/export/jobfile.c): names,
 * the text format both ways, and the checks on reading untrusted files
 * (another user's, a link, a FIFO, too big, a typo) and on the folder.
 */
#include "check.h"
#include "testdir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "export/jobfile.h"

static void test_names(void)
{
	int64_t ns;

	CHECK_EQ_INT(jobfile_name_kind("capture-1700000000123-42-9f3a", &ns), JOBFILE_CAPTURE);
	CHECK(ns == 1700000000123LL * 1000000);
	CHECK_EQ_INT(jobfile_name_kind("capture-1700000000123-42-9f3a.first", &ns), JOBFILE_FIRST);
	CHECK_EQ_INT(jobfile_name_kind("dump-28333333-steps31-40", &ns), JOBFILE_DUMP);
	CHECK(ns == 28333333LL * 60000000000LL);
	CHECK_EQ_INT(jobfile_name_kind("hang-28333333-step7", &ns), JOBFILE_HANG);
	CHECK_EQ_INT(jobfile_name_kind(".tmp-42-1234", &ns), JOBFILE_NONE);
	CHECK_EQ_INT(jobfile_name_kind("capture-1-42-9f3a.firstx", &ns), JOBFILE_NONE);
	CHECK_EQ_INT(jobfile_name_kind("capture-1-42-", &ns), JOBFILE_NONE);
	CHECK_EQ_INT(jobfile_name_kind("capture-x-42-9f", &ns), JOBFILE_NONE);
	CHECK_EQ_INT(jobfile_name_kind("dump-1-steps3", &ns), JOBFILE_NONE);
	CHECK_EQ_INT(jobfile_name_kind("dump-1-steps3-4x", &ns), JOBFILE_NONE);
	CHECK_EQ_INT(jobfile_name_kind("hang-1-step", &ns), JOBFILE_NONE);
	CHECK_EQ_INT(jobfile_name_kind("capture-99999999999999999999-1-f", &ns), JOBFILE_NONE);
}

static void test_round_trip(void)
{
	struct jobfile f = { 0 }, g;
	char buf[JOBFILE_MAX + 1];
	struct err e;
	int n;

	f.kind = JOBFILE_CAPTURE;
	f.created_ns = 1700000000123000000LL;
	f.steps = 3;
	f.lead_ms = 2500;
	snprintf(f.from, sizeof f.from, "prof capture (pid 42 on node1)");
	n = jobfile_format(&f, buf, sizeof buf);
	CHECK(n > 0);
	CHECK(contains(buf, "profhost-job 1\nkind capture\n"));
	CHECK_EQ_INT(jobfile_parse(buf, (size_t)n, &g, &e), 0);
	CHECK_EQ_INT(g.kind, JOBFILE_CAPTURE);
	CHECK(g.created_ns == f.created_ns);
	CHECK_EQ_INT(g.steps, 3);
	CHECK_EQ_INT(g.first, 0);
	CHECK_EQ_INT(g.lead_ms, 2500);
	CHECK_EQ_STR(g.from, f.from);

	memset(&f, 0, sizeof f);
	f.kind = JOBFILE_DUMP;
	f.created_ns = 5;
	f.rank = 5;
	f.pid = 77;
	f.first = 31;
	f.last = 40;
	f.partial = true;
	snprintf(f.host, sizeof f.host, "node2");
	snprintf(f.reason, sizeof f.reason, "slow step");
	n = jobfile_format(&f, buf, sizeof buf);
	CHECK_EQ_INT(jobfile_parse(buf, (size_t)n, &g, &e), 0);
	CHECK_EQ_INT(g.kind, JOBFILE_DUMP);
	CHECK_EQ_INT(g.rank, 5);
	CHECK_EQ_INT(g.pid, 77);
	CHECK_EQ_INT(g.first, 31);
	CHECK_EQ_INT(g.last, 40);
	CHECK(g.partial);
	CHECK_EQ_STR(g.host, "node2");
	CHECK_EQ_STR(g.reason, "slow step");

	/* a control character in a text field is never written */
	snprintf(f.reason, sizeof f.reason, "two\nlines");
	CHECK_EQ_INT(jobfile_format(&f, buf, sizeof buf), -1);
	/* nor anything that does not fit */
	snprintf(f.reason, sizeof f.reason, "ok");
	CHECK_EQ_INT(jobfile_format(&f, buf, 20), -1);
}

/* Parses `text`; returns the message of its refusal ("" when accepted). */
static const char *refusal(const char *text)
{
	static struct err e;
	struct jobfile f;

	if (jobfile_parse(text, strlen(text), &f, &e) == 0)
		return "";
	return e.msg;
}

static void test_refusals(void)
{
	CHECK_EQ_STR(refusal("profhost-job 1\nkind capture\ncreated_ns 1\nsteps 3\n"), "");
	CHECK_EQ_STR(refusal("hello\n"), "line 1: expected 'profhost-job 1' (not a profhost job file)");
	CHECK_EQ_STR(refusal("profhost-job 1\nkind capture\ncreated_ns 1\nsteps x\n"),
		     "line 4: 'steps' must be an integer from 1 to 100000, got 'x'");
	CHECK_EQ_STR(refusal("profhost-job 1\nkind capture\ncreated_ns 1\nsteps 0\n"),
		     "line 4: 'steps' must be an integer from 1 to 100000, got '0'");
	CHECK_EQ_STR(refusal("profhost-job 1\nkind capture\ncreated_ns 1\nstep 3\n"),
		     "a capture file needs a 'steps' line");
	CHECK_EQ_STR(refusal("profhost-job 1\nkind capture\ncreated_ns 1\nsteps 3\nstpes 4\n"),
		     "line 5: unknown key 'stpes'");
	CHECK_EQ_STR(refusal("profhost-job 1\nkind capture\ncreated_ns 1\nsteps 3\nsteps 4\n"),
		     "line 5: 'steps' given twice");
	CHECK_EQ_STR(refusal("profhost-job 1\nkind capture\ncreated_ns 1\nsteps 3"),
		     "it does not end with a newline (cut short?)");
	CHECK_EQ_STR(refusal("profhost-job 1\nkind party\n"),
		     "line 2: unknown kind 'party' (capture, first, dump or hang)");
	CHECK_EQ_STR(refusal("profhost-job 1\nsteps 3\n"), "it has no 'kind' line");
	CHECK_EQ_STR(refusal("profhost-job 1\nkind dump\ncreated_ns 1\nrank 2\nfirst 9\nlast 3\n"),
		     "'last' (3) is before 'first' (9)");
	CHECK_EQ_STR(refusal("profhost-job 1\nkind capture\ncreated_ns 1\nsteps 3\nfrom a\tb\n"),
		     "line 5: 'from' holds a control character");
	CHECK_EQ_STR(refusal("profhost-job 1\nkind capture\nsteps\n"),
		     "line 3: expected 'key value', got 'steps'");
}

static void test_files(void)
{
	char dir[256], path[512], buf[JOBFILE_MAX + 1], big[JOBFILE_MAX + 64];
	struct jobfile f;
	struct err e;
	int dfd, jfd;

	testdir_make(dir, sizeof dir, "test_jobfile", false);
	dfd = open(dir, O_RDONLY | O_DIRECTORY);
	CHECK(dfd >= 0);
	CHECK_EQ_INT(jobfile_read(dfd, "missing", &f, buf, sizeof buf, &e), 1);
	CHECK_EQ_INT(jobfile_write_new(dfd, "capture-1-2-a",
				       "profhost-job 1\nkind capture\ncreated_ns 1\nsteps 2\n", &e), 0);
	CHECK_EQ_INT(jobfile_write_new(dfd, "capture-1-2-a", "other\n", &e), 1);
	CHECK_EQ_INT(jobfile_read(dfd, "capture-1-2-a", &f, buf, sizeof buf, &e), 0);
	CHECK_EQ_INT(f.steps, 2);

	CHECK(symlinkat("capture-1-2-a", dfd, "link") == 0);
	CHECK_EQ_INT(jobfile_read(dfd, "link", &f, buf, sizeof buf, &e), -1);
	CHECK_EQ_STR(e.msg, "it is a symbolic link");
	CHECK(mkfifoat(dfd, "fifo", 0600) == 0);
	CHECK_EQ_INT(jobfile_read(dfd, "fifo", &f, buf, sizeof buf, &e), -1);
	CHECK(contains(e.msg, "not a regular file"));
	memset(big, 'x', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	snprintf(path, sizeof path, "%s/big", dir);
	testdir_write(path, big);
	CHECK_EQ_INT(jobfile_read(dfd, "big", &f, buf, sizeof buf, &e), -1);
	CHECK(contains(e.msg, "more than 4096"));
	if (geteuid() == 0) {
		snprintf(path, sizeof path, "%s/capture-1-2-a", dir);
		CHECK(chown(path, 65534, 65534) == 0);
		CHECK_EQ_INT(jobfile_read(dfd, "capture-1-2-a", &f, buf, sizeof buf, &e), -1);
		CHECK_EQ_STR(e.msg, "it belongs to uid 65534, not to you (uid 0)");
	}

	/* the folder: made with `create`, refused when others can write it */
	snprintf(path, sizeof path, "%s/run", dir);
	CHECK_EQ_INT(jobfile_open_dir(path, false, &jfd, &e), 1);
	CHECK_EQ_INT(jobfile_open_dir(path, true, &jfd, &e), 0);
	close(jfd);
	CHECK_EQ_INT(jobfile_open_dir(path, false, &jfd, &e), 0);
	close(jfd);
	snprintf(path, sizeof path, "%s/run/job", dir);
	CHECK(chmod(path, 0777) == 0);
	snprintf(path, sizeof path, "%s/run", dir);
	CHECK_EQ_INT(jobfile_open_dir(path, false, &jfd, &e), -1);
	CHECK(contains(e.msg, "/run/job' is writable by every user (mode 777)"));
	snprintf(path, sizeof path, "%s/linked", dir);
	CHECK(symlink("run", path) == 0);
	CHECK_EQ_INT(jobfile_open_dir(path, false, &jfd, &e), -1);
	CHECK(contains(e.msg, "is a symbolic link or not a folder"));
	close(dfd);
	testdir_remove(dir);
}

int main(void)
{
	test_names();
	test_round_trip();
	test_refusals();
	test_files();
	return check_done();
}

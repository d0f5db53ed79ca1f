/*
 * test_hanglinks — which hang reports a window links (src/hang/hanglinks.c):
 * those of the same process whose stall [since_ts, report_ts] meets the
 * window's span, on the process's clock (a trace moved to Unix time by
 * export_unix_time still matches through monotonic_offset_ns); the lowest
 * hang numbers first, at most `max`; folders that are not hang reports and
 * files that are not JSON are passed over.
 */
#include "check.h"
#include "testdir.h"

#include "hang/hanglinks.h"

/* Writes <dir>/<name>/hang.json for process `pid`, stalled over
 * [since, at]. */
static void hang(const char *dir, const char *name, int pid, long long since,
		 long long at, long long step)
{
	char path[512], json[512];

	snprintf(path, sizeof path, "%s/%s", dir, name);
	mkdir(path, 0700);
	snprintf(path, sizeof path, "%s/%s/hang.json", dir, name);
	snprintf(json, sizeof json, "{\"pid\": %d, \"step\": %lld, \"stalled_s\": 2.5, "
		 "\"since_ts\": %lld, \"report_ts\": %lld, \"threads\": []}",
		 pid, step, since, at);
	testdir_write(path, json);
}

/* The links of a window of process `pid` over [start, end] (given on the
 * process's clock, stored moved by `shift` as export_unix_time does). */
static size_t find(const char *dir, int pid, long long start, long long end,
		   long long shift, struct hang_link *out, size_t max)
{
	char win[512];
	struct trace_meta m;

	memset(&m, 0, sizeof m);
	m.pid = pid;
	m.start_ts = start + shift;
	m.end_ts = end + shift;
	m.monotonic_offset_ns = -shift;
	snprintf(win, sizeof win, "%s/recorder0_steps1-4/", dir);
	return hanglinks_find(win, &m, out, max);
}

int main(void)
{
	char dir[256], path[512];
	struct hang_link l[HANGLINKS_MAX];

	testdir_make(dir, sizeof dir, "test_hanglinks", false);
	snprintf(path, sizeof path, "%s/recorder0_steps1-4", dir);
	mkdir(path, 0700);
	hang(dir, "hang1_step9", 100, 5000, 6000, 9);
	hang(dir, "hang0_step5", 100, 1000, 2000, 5);
	hang(dir, "hang2_step12.pid200", 200, 1000, 2000, 12); /* another process */
	hang(dir, "hangover", 100, 1000, 2000, 1);               /* not a hang report */
	snprintf(path, sizeof path, "%s/hang3_step14", dir);
	mkdir(path, 0700);
	snprintf(path, sizeof path, "%s/hang3_step14/hang.json", dir);
	testdir_write(path, "{\"pid\": 100, \"since_ts\": 10");  /* cut short */

	/* A dump taken during hang 0's stall (its end after the stall began). */
	CHECK_EQ_INT(find(dir, 100, 500, 1500, 0, l, HANGLINKS_MAX), 1);
	CHECK_EQ_STR(l[0].dir, "hang0_step5");
	CHECK_EQ_INT(l[0].hang, 0);
	CHECK_EQ_INT(l[0].step, 5);
	CHECK(l[0].stalled_s == 2.5);
	/* The same, its times moved to Unix time. */
	CHECK_EQ_INT(find(dir, 100, 500, 1500, 1795000000000000000LL, l, HANGLINKS_MAX), 1);
	/* A window that ended as the stalled step began does not link it; one
	 * that began after the report was written does not either. */
	CHECK_EQ_INT(find(dir, 100, 0, 1000, 0, l, HANGLINKS_MAX), 0);
	CHECK_EQ_INT(find(dir, 100, 2001, 4000, 0, l, HANGLINKS_MAX), 0);
	/* A window over both hangs: both, by hang number; with room for one,
	 * the first. */
	CHECK_EQ_INT(find(dir, 100, 0, 7000, 0, l, HANGLINKS_MAX), 2);
	CHECK_EQ_STR(l[0].dir, "hang0_step5");
	CHECK_EQ_STR(l[1].dir, "hang1_step9");
	CHECK_EQ_INT(find(dir, 100, 0, 7000, 0, l, 1), 1);
	CHECK_EQ_STR(l[0].dir, "hang0_step5");
	/* Another process's window links its own. */
	CHECK_EQ_INT(find(dir, 200, 0, 7000, 0, l, HANGLINKS_MAX), 1);
	CHECK_EQ_STR(l[0].dir, "hang2_step12.pid200");
	/* No rank folder: nothing. */
	CHECK_EQ_INT(find("/nonexistent/run/rank0", 100, 0, 7000, 0, l, HANGLINKS_MAX), 0);

	testdir_remove(dir);
	return check_done();
}

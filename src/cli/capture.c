/*
 * capture — `prof capture RUN [--steps N] [--first STEP] [--lead SECONDS]
 * [--wait SECONDS]`: asks every process of run directory RUN, on every
 * host that sees it, to record the same steps (docs/jobs.md). Writes a
 * request into RUN/job/ (src/export/jobfile.h), which each process's job
 * watcher reads within its poll interval; unless --first names the first
 * step, the first rank to read it decides one far enough ahead, and
 * prof waits (--wait) for that decision and prints the steps.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../export/jobfile.h"
#include "cli.h"

const char cli_capture_synopsis[] =
	"prof capture RUN [--steps N] [--first STEP] [--lead SECONDS] [--wait SECONDS]";

#define CAPTURE_STEPS_DEFAULT 3
#define CAPTURE_WAIT_DEFAULT 10.0

void cli_capture_help(FILE *out)
{
	fprintf(out,
		"usage: %s\n"
		"\n"
		"Asks every process of a run (every rank of a job, on every host that sees\n"
		"the run directory) to record the same steps as one window each. RUN is the\n"
		"run directory (<output dir>/<run>, e.g. prof_out/train-20250314-093012).\n"
		"The request is a file in RUN/job/; each process looks for one every\n"
		"prof.job{ poll_ms } (1 s by default). Unless --first names it, the first\n"
		"process to read the request decides the first step: its own step plus\n"
		"as many steps as the lead lasts, so that every rank reads it in time.\n"
		"Each rank writes RUN/rank<R>/window<K>_steps<a>-<b>_job/.\n"
		"\n"
		"options:\n"
		"  --steps N         steps to record (default %d)\n"
		"  --first STEP      the first step to record (default: decided as above)\n"
		"  --lead SECONDS    how far ahead the decided first step lies (default:\n"
		"                    2 poll intervals + 1 s)\n"
		"  --wait SECONDS    how long to wait for a rank to decide the first step\n"
		"                    (default %g; 0: do not wait)\n"
		"  -h, --help        show this help\n"
		"\n"
		"Exit status: 0 once the steps are known (or without waiting), 1 when no\n"
		"rank read the request in time (it stays: ranks that read it later still\n"
		"record) or it cannot be written, 2 on bad arguments. See docs/jobs.md.\n",
		cli_capture_synopsis, CAPTURE_STEPS_DEFAULT, CAPTURE_WAIT_DEFAULT);
}

/* An integer argument from `min` to `max` into *out; -1 when it is not. */
static int parse_uint(const char *v, uint64_t min, uint64_t max, uint64_t *out)
{
	char *end;
	unsigned long long n;

	if (!v[0] || v[0] < '0' || v[0] > '9')
		return -1;
	errno = 0;
	n = strtoull(v, &end, 10);
	if (errno || *end || n < min || n > max)
		return -1;
	*out = n;
	return 0;
}

/* Seconds (a number from 0 to max) into *out; -1 when it is not. */
static int parse_seconds(const char *v, double max, double *out)
{
	char *end;
	double d;

	errno = 0;
	d = strtod(v, &end);
	if (errno || end == v || *end || !(d >= 0 && d <= max))
		return -1;
	*out = d;
	return 0;
}

/* Unix time now, in ns. */
static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int cli_capture_main(int argc, char **argv)
{
	const char *run = NULL, *val;
	uint64_t steps = CAPTURE_STEPS_DEFAULT, first = 0, n;
	double lead = 0, wait = CAPTURE_WAIT_DEFAULT, waited;
	char host[256] = "", name[128], fname[160], text[JOBFILE_MAX + 1];
	char buf[JOBFILE_MAX + 1];
	struct jobfile f = { 0 }, d;
	struct err e;
	int i, m, dfd, rc;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			cli_capture_help(stdout);
			return 0;
		}
		if (a[0] != '-' || a[1] == '\0') {
			if (run)
				return cli_usage_error("capture", cli_capture_synopsis,
						       "more than one run directory ('%s' and '%s')",
						       run, a);
			run = a;
		} else if ((m = cli_option(argc, argv, &i, 0, "steps", &val)) != 0) {
			if (m < 0 || parse_uint(val, 1, JOBFILE_STEPS_MAX, &steps) != 0)
				return cli_usage_error("capture", cli_capture_synopsis,
						       "--steps needs a number of steps from 1 to %u",
						       JOBFILE_STEPS_MAX);
		} else if ((m = cli_option(argc, argv, &i, 0, "first", &val)) != 0) {
			if (m < 0 || parse_uint(val, 1, INT64_MAX, &first) != 0)
				return cli_usage_error("capture", cli_capture_synopsis,
						       "--first needs a step number from 1");
		} else if ((m = cli_option(argc, argv, &i, 0, "lead", &val)) != 0) {
			if (m < 0 || parse_seconds(val, 3600, &lead) != 0 || lead < 0.001)
				return cli_usage_error("capture", cli_capture_synopsis,
						       "--lead needs seconds from 0.001 to 3600");
		} else if ((m = cli_option(argc, argv, &i, 0, "wait", &val)) != 0) {
			if (m < 0 || parse_seconds(val, 3600, &wait) != 0)
				return cli_usage_error("capture", cli_capture_synopsis,
						       "--wait needs seconds from 0 to 3600");
		} else {
			return cli_usage_error("capture", cli_capture_synopsis,
					       "unknown option '%s'", a);
		}
	}
	if (!run)
		return cli_usage_error("capture", cli_capture_synopsis,
				       "missing the run directory (e.g. prof_out/<run>)");
	if (first && lead > 0)
		return cli_usage_error("capture", cli_capture_synopsis,
				       "--lead has no use with --first (the steps are named)");

	rc = jobfile_open_dir(run, true, &dfd, &e);
	if (rc != 0) {
		fprintf(stderr, "prof capture: cannot use the run directory: %s\n",
			rc > 0 ? "it does not exist" : e.msg);
		return 1;
	}
	gethostname(host, sizeof host - 1);
	f.kind = JOBFILE_CAPTURE;
	f.created_ns = now_ns();
	f.steps = (uint32_t)steps;
	f.first = first;
	f.lead_ms = (uint32_t)(lead * 1000 + 0.5);
	snprintf(f.from, sizeof f.from, "prof capture (pid %d on %.100s)", (int)getpid(), host);
	if (jobfile_format(&f, text, sizeof text) < 0) {
		snprintf(f.from, sizeof f.from, "prof capture (pid %d)", (int)getpid());
		jobfile_format(&f, text, sizeof text);
	}
	snprintf(name, sizeof name, "capture-%lld-%d-%04x",
		 (long long)(f.created_ns / 1000000), (int)getpid(),
		 (unsigned)(f.created_ns / 1000) & 0xffff);
	rc = jobfile_write_new(dfd, name, text, &e);
	if (rc != 0) {
		fprintf(stderr, "prof capture: cannot write the request into '%s/%s': %s\n",
			run, JOBFILE_DIR, rc > 0 ? "a request of that name exists" : e.msg);
		close(dfd);
		return 1;
	}
	if (first) {
		printf("prof capture: asked every rank of %s to record steps %" PRIu64 "-%" PRIu64
		       " (request %s)\n", run, first, first + steps - 1, name + 8);
		close(dfd);
		return 0;
	}
	if (wait <= 0) {
		printf("prof capture: asked every rank of %s to record %" PRIu64 " step%s from a "
		       "step the first rank to read it decides (request %s; %s/%s/%s.first "
		       "will name it)\n", run, steps, steps == 1 ? "" : "s", name + 8, run,
		       JOBFILE_DIR, name);
		close(dfd);
		return 0;
	}
	snprintf(fname, sizeof fname, "%s.first", name);
	for (waited = 0;; waited += 0.05) {
		rc = jobfile_read(dfd, fname, &d, buf, sizeof buf, &e);
		if (rc < 0) {
			fprintf(stderr, "prof capture: %s/%s/%s: %s\n", run, JOBFILE_DIR, fname,
				e.msg);
			close(dfd);
			return 1;
		}
		if (rc == 0 || waited >= wait)
			break;
		usleep(50000);
	}
	close(dfd);
	if (rc != 0) {
		fprintf(stderr, "prof capture: no process of %s read the request within %g s "
			"(are its processes running, with prof.job{ poll_ms } above 0?); the "
			"request stays in %s/%s/%s: a process that reads it later still "
			"records\n", run, wait, run, JOBFILE_DIR, name);
		return 1;
	}
	n = d.first + steps - 1;
	printf("prof capture: every rank of %s records steps %" PRIu64 "-%" PRIu64
	       " (rank %d on %s, at its step %" PRIu64 ", chose step %" PRIu64 "); each "
	       "rank writes rank<R>/window<K>_steps%" PRIu64 "-%" PRIu64 "_job\n", run,
	       d.first, n, d.rank, d.host[0] ? d.host : "?", d.step, d.first, d.first, n);
	return 0;
}

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
#include "cliopt.h"

static const char capture_synopsis[] =
	"prof capture RUN [--steps N] [--first STEP] [--lead SECONDS] [--wait SECONDS]";

#define CAPTURE_STEPS_DEFAULT 3
#define CAPTURE_WAIT_DEFAULT 10.0

/* Writes the help of `prof capture` to `out`. */
static void capture_help(FILE *out)
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
		capture_synopsis, CAPTURE_STEPS_DEFAULT, CAPTURE_WAIT_DEFAULT);
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

/* What `prof capture` was asked for. */
struct capture_args {
	const char *run;        /* the run directory */
	uint64_t steps;         /* --steps */
	uint64_t first;         /* --first; 0: the first rank to read decides */
	double lead;            /* --lead, seconds; 0: the ranks' default */
	double wait;            /* --wait, seconds */
};

/* Parses the arguments (argv[0] is "capture") into *a. Returns -1 to go
 * on, else the exit status (help shown, or a usage error said). */
static int capture_parse(int argc, char **argv, struct capture_args *a)
{
	const char *val;
	int i, m;

	a->steps = CAPTURE_STEPS_DEFAULT;
	a->wait = CAPTURE_WAIT_DEFAULT;
	for (i = 1; i < argc; i++) {
		const char *arg = argv[i];

		if (cliopt_help(&cli_capture_cmd, arg))
			return 0;
		if (arg[0] != '-' || arg[1] == '\0') {
			if (a->run)
				return cliopt_usage_error(&cli_capture_cmd, "more than one run "
							  "directory ('%s' and '%s')", a->run, arg);
			a->run = arg;
		} else if ((m = cliopt_value(argc, argv, &i, 0, "steps", &val)) != 0) {
			if (m < 0 || parse_uint(val, 1, JOBFILE_STEPS_MAX, &a->steps) != 0)
				return cliopt_usage_error(&cli_capture_cmd, "--steps needs a number "
							  "of steps from 1 to %u", JOBFILE_STEPS_MAX);
		} else if ((m = cliopt_value(argc, argv, &i, 0, "first", &val)) != 0) {
			if (m < 0 || parse_uint(val, 1, INT64_MAX, &a->first) != 0)
				return cliopt_usage_error(&cli_capture_cmd,
							  "--first needs a step number from 1");
		} else if ((m = cliopt_value(argc, argv, &i, 0, "lead", &val)) != 0) {
			if (m < 0 || parse_seconds(val, 3600, &a->lead) != 0 || a->lead < 0.001)
				return cliopt_usage_error(&cli_capture_cmd,
							  "--lead needs seconds from 0.001 to 3600");
		} else if ((m = cliopt_value(argc, argv, &i, 0, "wait", &val)) != 0) {
			if (m < 0 || parse_seconds(val, 3600, &a->wait) != 0)
				return cliopt_usage_error(&cli_capture_cmd,
							  "--wait needs seconds from 0 to 3600");
		} else {
			return cliopt_usage_error(&cli_capture_cmd, "unknown option '%s'", arg);
		}
	}
	if (!a->run)
		return cliopt_usage_error(&cli_capture_cmd,
					  "missing the run directory (e.g. prof_out/<run>)");
	if (a->first && a->lead > 0)
		return cliopt_usage_error(&cli_capture_cmd,
					  "--lead has no use with --first (the steps are named)");
	return -1;
}

/* Writes the request into the job folder `dfd` of the run, its name into
 * name[size] (capture-<ms>-<pid>-<xxxx>). Returns 0, or 1 after saying
 * why it cannot. */
static int capture_request(const struct capture_args *a, int dfd, char *name, size_t size)
{
	char host[256] = "", text[JOBFILE_MAX + 1];
	struct jobfile f = { 0 };
	struct err e;
	int rc;

	gethostname(host, sizeof host - 1);
	f.kind = JOBFILE_CAPTURE;
	f.created_ns = now_ns();
	f.steps = (uint32_t)a->steps;
	f.first = a->first;
	f.lead_ms = (uint32_t)(a->lead * 1000 + 0.5);
	snprintf(f.from, sizeof f.from, "prof capture (pid %d on %.100s)", (int)getpid(), host);
	if (jobfile_format(&f, text, sizeof text) < 0) {
		snprintf(f.from, sizeof f.from, "prof capture (pid %d)", (int)getpid());
		jobfile_format(&f, text, sizeof text);
	}
	snprintf(name, size, "capture-%lld-%d-%04x",
		 (long long)(f.created_ns / 1000000), (int)getpid(),
		 (unsigned)(f.created_ns / 1000) & 0xffff);
	rc = jobfile_write_new(dfd, name, text, &e);
	if (rc != 0) {
		fprintf(stderr, "prof capture: cannot write the request into '%s/%s': %s\n",
			a->run, JOBFILE_DIR, rc > 0 ? "a request of that name exists" : e.msg);
		return 1;
	}
	return 0;
}

/* Waits up to --wait for the first rank's choice of the first step of
 * request `name` in the job folder `dfd`, and prints it. Returns the exit
 * status: 0, or 1 after saying that no rank chose in time (or the choice
 * cannot be read). */
static int capture_wait_first(const struct capture_args *a, int dfd, const char *name)
{
	char fname[160], buf[JOBFILE_MAX + 1];
	struct jobfile d;
	struct err e;
	double waited;
	uint64_t n;
	int rc;

	snprintf(fname, sizeof fname, "%s.first", name);
	for (waited = 0;; waited += 0.05) {
		rc = jobfile_read(dfd, fname, &d, buf, sizeof buf, &e);
		if (rc < 0) {
			fprintf(stderr, "prof capture: %s/%s/%s: %s\n", a->run, JOBFILE_DIR, fname,
				e.msg);
			return 1;
		}
		if (rc == 0 || waited >= a->wait)
			break;
		usleep(50000);
	}
	if (rc != 0) {
		fprintf(stderr, "prof capture: no process of %s read the request within %g s "
			"(are its processes running, with prof.job{ poll_ms } above 0?); the "
			"request stays in %s/%s/%s: a process that reads it later still "
			"records\n", a->run, a->wait, a->run, JOBFILE_DIR, name);
		return 1;
	}
	n = d.first + a->steps - 1;
	printf("prof capture: every rank of %s records steps %" PRIu64 "-%" PRIu64
	       " (rank %d on %s, at its step %" PRIu64 ", chose step %" PRIu64 "); each "
	       "rank writes rank<R>/window<K>_steps%" PRIu64 "-%" PRIu64 "_job\n", a->run,
	       d.first, n, d.rank, d.host[0] ? d.host : "?", d.step, d.first, d.first, n);
	return 0;
}

/* `prof capture`: see cli_capture_cmd in cli.h. */
static int capture_main(int argc, char **argv)
{
	struct capture_args a = { 0 };
	char name[128];
	struct err e;
	int dfd, rc;

	rc = capture_parse(argc, argv, &a);
	if (rc >= 0)
		return rc;
	rc = jobfile_open_dir(a.run, true, &dfd, &e);
	if (rc != 0) {
		fprintf(stderr, "prof capture: cannot use the run directory: %s\n",
			rc > 0 ? "it does not exist" : e.msg);
		return 1;
	}
	if (capture_request(&a, dfd, name, sizeof name) != 0) {
		rc = 1;
	} else if (a.first) {
		printf("prof capture: asked every rank of %s to record steps %" PRIu64 "-%" PRIu64
		       " (request %s)\n", a.run, a.first, a.first + a.steps - 1, name + 8);
		rc = 0;
	} else if (a.wait <= 0) {
		printf("prof capture: asked every rank of %s to record %" PRIu64 " step%s from a "
		       "step the first rank to read it decides (request %s; %s/%s/%s.first "
		       "will name it)\n", a.run, a.steps, a.steps == 1 ? "" : "s", name + 8,
		       a.run, JOBFILE_DIR, name);
		rc = 0;
	} else {
		rc = capture_wait_first(&a, dfd, name);
	}
	close(dfd);
	return rc;
}

const struct cli_cmd cli_capture_cmd = { "capture", capture_main, capture_help,
					 capture_synopsis };

/*
 * jobfile — the files of a run directory's job folder (docs/jobs.md):
 * `prof capture RUN`'s requests, the first step a rank decided for one,
 * and the dumps and hangs ranks publish for the job's other ranks.
 *
 * <run>/job/ holds one small text file per request or publication. Every
 * process of the run looks at the folder at an interval (one stat) and
 * reads the files it has not seen. A file is lines "key value" after the
 * first line "profhost-job 1"; values are integers or one line of
 * printable text. The files are untrusted: each is read only when it is
 * this user's own regular file, reached without a link, at most
 * JOBFILE_MAX bytes; a bad one is refused with one line saying why.
 *
 * Names (so a reader can skip old ones without opening them, and writers
 * of one publication meet on one name):
 *   capture-<unix ms>-<pid>-<hex>         a capture request
 *   capture-<unix ms>-<pid>-<hex>.first   its first step, decided by the
 *                                         first rank that read it
 *   dump-<unix min>-steps<a>-<b>          a dump of steps a-b (the first
 *                                         rank to publish those steps in
 *                                         that minute)
 *   hang-<unix min>-step<n>               a hang report of step n
 * Every file is written whole under a temporary name (`.tmp-...`,
 * skipped by readers) and linked into place, which never replaces: the
 * first writer of a name wins.
 *
 * No global state; any thread.
 */
#ifndef PROFHOST_JOBFILE_H
#define PROFHOST_JOBFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../util/err.h"

#define JOBFILE_DIR "job"
#define JOBFILE_MAX 4096           /* bytes of one file, at most */
#define JOBFILE_MAGIC "profhost-job 1"
#define JOBFILE_STEPS_MAX 100000u  /* steps one capture request may ask */

enum jobfile_kind {
	JOBFILE_NONE = 0,
	JOBFILE_CAPTURE,               /* capture-...: a capture request */
	JOBFILE_FIRST,                 /* capture-....first: its first step */
	JOBFILE_DUMP,                  /* dump-...: a rank's dump */
	JOBFILE_HANG                   /* hang-...: a rank's hang report */
};

/* One file's contents. Fields a kind does not use are 0 / "". */
struct jobfile {
	enum jobfile_kind kind;
	int64_t created_ns;            /* Unix time it was written */
	/* capture */
	uint32_t steps;                /* steps to record, 1..JOBFILE_STEPS_MAX */
	uint64_t first;                /* capture: its first step (0: the
					  first rank to read it decides);
					  first: the step decided; dump:
					  the dump's first step */
	uint32_t lead_ms;              /* capture: how far ahead the decided
					  first step lies (0: the reader's
					  default) */
	char from[160];                /* capture: who asked, for messages */
	/* first, dump, hang: the rank that wrote it */
	int rank;
	int pid;
	char host[128];
	uint64_t step;                 /* first: the decider's step then;
					  hang: the stalled step */
	/* dump */
	uint64_t last;                 /* its last step */
	bool partial;                  /* its last step was still running */
	char reason[128];              /* dump, hang: why */
};

/* The kind a file name in the job folder stands for, and the time in its
 * name (*ns: Unix ns of the millisecond or minute it names); JOBFILE_NONE
 * for any other name (temporary files included). Any thread. */
enum jobfile_kind jobfile_name_kind(const char *name, int64_t *ns);

/* Parses a file's text (len bytes, NUL or not). Returns 0, or -1 with *e
 * naming the line and what is wrong ("line 3: 'steps' must be an integer
 * from 1 to 100000, got 'x'"). Unknown keys are refused too, so a typo
 * changes nothing. */
int jobfile_parse(const char *text, size_t len, struct jobfile *f, struct err *e);

/* Formats *f into buf[size] (the kind's keys only). Returns the length,
 * or -1 when it does not fit or a text field holds a control character. */
int jobfile_format(const struct jobfile *f, char *buf, size_t size);

/* Reads the file `name` of the open folder `dfd` into buf[size] (NUL-ended;
 * size > JOBFILE_MAX) and parses it into *f. The file is opened without
 * following a link and without blocking, and must be a regular file
 * belonging to this user (geteuid), at most JOBFILE_MAX bytes. Returns 0;
 * 1 when there is no such file; -1 with *e saying why it is refused ("it
 * belongs to uid 65534, not to you (uid 0)", "it is a symbolic link",
 * "line 2: ...") without the file's name. */
int jobfile_read(int dfd, const char *name, struct jobfile *f, char *buf, size_t size,
		 struct err *e);

/* As jobfile_read, for any user's file: what is only shown (prof report
 * reading another user's run), never acted on. */
int jobfile_read_any(int dfd, const char *name, struct jobfile *f, char *buf, size_t size,
		     struct err *e);

/* Writes `text` as the file `name` of the open folder `dfd`, whole or not
 * at all (a temporary file linked into place: an existing `name` is never
 * replaced). Returns 0, 1 when `name` exists already, -1 with *e. */
int jobfile_write_new(int dfd, const char *name, const char *text, struct err *e);

/* Opens <run>/job (`run` the run directory's path) into *dfd, checked: a
 * folder (no link) of this user's that no one else can write. With
 * `create`, makes it (0755), and the run directory and the folders above
 * it when they are missing (the path up to the run directory is followed
 * as given; the run directory is never a link). Returns 0; 1 when it does
 * not exist (without `create`); -1 with *e saying why it cannot be used
 * ("'<path>' belongs to uid N, not to you (uid M)", ...). */
int jobfile_open_dir(const char *run, bool create, int *dfd, struct err *e);

#endif

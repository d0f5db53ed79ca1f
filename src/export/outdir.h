/*
 * outdir — the directories profhost writes into, held open.
 *
 * Output may go under a directory other users can write to (`-o /tmp/x`,
 * `prof_out` in /tmp). So every file is created relative to an open
 * directory descriptor (outfile_openat()), never by a path another user
 * could redirect between a check and the write; the directories profhost
 * writes into (the run directory and everything below it) must belong to
 * this user and be writable by no one else, checked on the descriptor that
 * is then used; and below the run directory no symbolic link is followed.
 * The user's own path up to the run directory is followed as given.
 *
 * Descriptors are opened for one export and closed after it (a program
 * that closes descriptors it did not open must not find one of ours).
 * One thread at a time per outdir.
 */
#ifndef PROFHOST_OUTDIR_H
#define PROFHOST_OUTDIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/err.h"

#define OUTDIR_PATH_MAX 4096

/* The file in a run directory that names the run it belongs to. */
#define OUTDIR_RUN_MARKER ".profhost-run"

/* An open directory: where files are created, and its path for messages. */
struct outdir {
	int fd;                        /* O_DIRECTORY | O_CLOEXEC; -1: none */
	char path[OUTDIR_PATH_MAX];
};

/*
 * Opens the existing directory `path` (following the user's path as given)
 * into *d, without any ownership check: for output the user names
 * explicitly (prof report's window directory, -o). Returns 0, or -1 with
 * *e set ("cannot open directory '<path>': ...").
 */
int outdir_open(const char *path, struct outdir *d, struct err *e);

/*
 * The distributed job a process is a rank of, for sharing a run directory
 * with the job's other ranks when they were launched separately (one
 * `prof run` each: each makes up its own PROF_RUN_ID from the second it
 * started in, so two ranks started a second apart have different ones).
 * `key` names the job's rendezvous (MASTER_ADDR:MASTER_PORT/WORLD_SIZE, and
 * the host for a loopback address; no newline),
 * NULL when the process is not a rank of such a job; `start_ns` is when
 * this process started (CLOCK_REALTIME, ns).
 */
struct outdir_job {
	const char *key;
	int64_t start_ns;
};

/*
 * Opens the run directory `run_dir` (<output dir>/<run>) into *d for the
 * run `run_id` (the launch's PROF_RUN_ID; NULL: any run may share it),
 * creating the output directory and the run directory as needed. The run
 * directory itself is never a symbolic link, must belong to this user and
 * be writable by no one else. A run directory holding another run (its
 * OUTDIR_RUN_MARKER names another run id, or it has files but no marker)
 * is left alone: the run goes to `<run>.2`, `<run>.3`, ... instead, and
 * *moved is set (d->path says where). One exception: a marker written by
 * a rank of the same job (`job`, may be NULL: its key equal to ours) after
 * this process started is this run's, whatever its run id: two jobs cannot
 * hold one rendezvous address and port at once, so a process alive beside
 * this one with the same rendezvous is one of its ranks. The marker records
 * the writer's job key and the time it was written (its second line).
 * Returns 0, or -1 with *e set ("refusing output directory '<path>': it
 * belongs to uid N, not to you (uid M) ...", "refusing output directory
 * '<path>': it is writable by others ...").
 */
int outdir_open_run(const char *run_dir, const char *run_id, const struct outdir_job *job,
		    struct outdir *d, bool *moved, struct err *e);

/*
 * As outdir_open_run, for the run directory `name` (one component) in the
 * output directory `parent`, already open (outdir_open,
 * outdir_open_untrusted). Same checks, same `<name>.N` rule.
 */
int outdir_open_run_in(const struct outdir *parent, const char *name, const char *run_id,
		       const struct outdir_job *job, struct outdir *d, bool *moved,
		       struct err *e);

/*
 * Opens the output directory that holds the run directory `run_dir` read
 * back from a file another process wrote (a salvage file's run folder):
 * nothing on it is the user's word, so nothing on it is followed.
 * `run_dir` must be absolute, of printable characters, without ".", ".."
 * or empty parts; its directories are walked from "/" one part at a time
 * (openat, O_NOFOLLOW: a symbolic link anywhere on it is refused); a part
 * that does not exist is created (0755), only in a directory of this
 * user's that no one else can write, or in a sticky one (/tmp) of root's
 * or this user's; the directory reached (into *d) must belong to this user
 * and be writable by no one else, and so must the run directory when it
 * exists (a directory, not a link: outdir_sub checks it again when it is
 * opened). *leaf points at run_dir's last part, the run directory's name
 * (outdir_open_run_in). Returns 0, or -1 with *e saying why, naming the
 * part ("it has a '..' part", "'/a/b' is a symbolic link or not a
 * directory", "'/a' belongs to uid N, not to you (uid M)", "'/a' is
 * writable by every user (mode 777)", ...): the caller names the path and
 * the fix.
 */
int outdir_open_untrusted(const char *run_dir, struct outdir *d, const char **leaf,
			  struct err *e);

/* The first of outdir_open_untrusted's checks, on the text alone (no file
 * system is touched): `path` absolute, of printable characters, without
 * ".", ".." or empty parts, each part under 256 bytes, the whole well
 * under OUTDIR_PATH_MAX. Returns 0, or -1 with *e saying why ("it is not
 * an absolute path", "it has a '..' part", ...). Any thread. */
int outdir_untrusted_text(const char *path, struct err *e);

/*
 * Opens the subdirectory `name` (one component) of `parent` into *d,
 * creating it (0755). `fresh`: it must be new; an existing one gives 1
 * (nothing opened) so the caller can pick another name. The directory is
 * never a symbolic link and must belong to this user and be writable by no
 * one else. Returns 0, 1 (exists, `fresh` only), or -1 with *e set.
 */
int outdir_sub(const struct outdir *parent, const char *name, bool fresh,
	       struct outdir *d, struct err *e);

/*
 * The confinement of the trace writers (trace:write and friends): checks
 * `rel` (relative, no "..", "." or empty components, no NUL, at most 1024
 * bytes), creates its directories under `base` without following any
 * symbolic link, and opens the directory that will hold its last
 * component into *d; *leaf points at that component in `rel`. A leaf that
 * is a directory or a symbolic link is refused. Writing through d->fd
 * (outfile_openat) lands inside `base` even if a component is swapped for
 * a link afterwards. Returns 0, or -1 with *e set ("'<rel>' must stay
 * inside the window directory (no '..', '.' or empty parts)", "'x' in
 * '<rel>' is a symbolic link or not a directory", ...).
 */
int outdir_resolve(const struct outdir *base, const char *rel, size_t len,
		   struct outdir *d, const char **leaf, struct err *e);

/* Closes d->fd (if open) and marks it closed. NULL-safe. */
void outdir_close(struct outdir *d);

#endif

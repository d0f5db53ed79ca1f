/*
 * salvscan — finding salvage files whose process is gone ("orphans"), for
 * `prof salvage --all`, `prof run`'s start and the host's start, and the
 * check of a folder named to hold salvage files (docs/recorder.md,
 * "Orphaned salvage files").
 *
 * A salvage folder holds files profhost-<pid>-<time>[-<x>].salvage and,
 * made by `prof run`, launcher folders prof-salvage-XXXXXX, each locked
 * (flock LOCK_EX) by its launcher for its life. An orphan is such a file
 * that is a regular file of this user's whose lock no one holds: its
 * process ended (a live writer holds LOCK_EX for its life, a salvage in
 * progress too). Files of other users, links, other files, and launcher
 * folders that are not this user's, that others can write or whose
 * launcher still runs are left alone. Nothing here reads a file's
 * contents, and nothing blocks (O_NONBLOCK opens, LOCK_NB locks): the host
 * may call it in the target's start-up. Any thread.
 */
#ifndef PROFHOST_SALVSCAN_H
#define PROFHOST_SALVSCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SALVSCAN_SHM "/dev/shm"                /* the default salvage folder */
#define SALVSCAN_LAUNCH_PREFIX "prof-salvage-" /* a launcher's folder */

/* What salvscan_check_dir() found: usable, missing, or refused. */
enum salvscan_dir_ok {
	SALVSCAN_DIR_OK = 0,
	SALVSCAN_DIR_MISSING = 1,
	SALVSCAN_DIR_REFUSED = -1
};

/*
 * Checks that `dir` may hold this user's salvage files: a directory
 * (followed as given) of this user's that no one else can write, or a
 * sticky one (/dev/shm) of root's or this user's. Another user's, or one
 * others can write, could have the files removed, replaced or read from
 * under the process. Returns SALVSCAN_DIR_OK, SALVSCAN_DIR_MISSING (it
 * does not exist: the caller says so its own way), or SALVSCAN_DIR_REFUSED
 * with why[size] saying why ("it belongs to uid N, not to you (uid M)",
 * "it is writable by every user (mode 777)", "it is not a directory").
 */
enum salvscan_dir_ok salvscan_check_dir(const char *dir, char *why, size_t size);

/* One orphan, as handed to the visitor: unlocked again, not open. */
struct salvscan_file {
	const char *path;          /* <folder>/<name> */
	const char *name;
	uint64_t bytes;            /* the memory it holds (its allocated blocks) */
};

/* What a scan found: orphans (handed to the visitor), the memory they
 * hold, and files of live processes (or being salvaged) left alone. */
struct salvscan_count {
	unsigned orphans, live;
	uint64_t bytes;
};

/* Called for each orphan; its return is ignored. */
typedef void (*salvscan_fn)(const struct salvscan_file *f, void *ctx);

/*
 * Scans folder `dir` for orphans: its salvage files, and those of its
 * launcher folders (this user's, writable by no one else, and not locked
 * by a running launcher; nested ones too, a few deep). `dir` itself is
 * skipped when a running launcher holds it (a `prof run`'s own folder,
 * which that launcher salvages when its command ends). Calls fn(file,
 * ctx) for each (fn NULL: counts only) and adds to *c. `tidy`: a launcher
 * folder left empty is removed, and each launcher folder is held
 * (LOCK_EX) while its files are visited, so that two tidying scans never
 * visit one folder at once. A folder that cannot be read is skipped.
 */
void salvscan_dir(const char *dir, bool tidy, salvscan_fn fn, void *ctx,
		  struct salvscan_count *c);

/*
 * Locks the launcher folder open on `fd` (flock LOCK_EX, not waiting) for
 * its launcher's life, so that scans leave it and its files to the
 * launcher. Returns 0, or -1 (held by a scan, or removed by one since it
 * was made: the launcher makes another).
 */
int salvscan_hold_launcher(int fd);

#endif

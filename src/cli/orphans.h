/*
 * orphans — the salvage files of this user's processes that ended with
 * nothing to salvage them (private to src/cli; docs/recorder.md,
 * "Orphaned salvage files"), and the folder `prof run` keeps its launch's
 * salvage files in. Main thread only.
 */
#ifndef PROFHOST_ORPHANS_H
#define PROFHOST_ORPHANS_H

#include <stdbool.h>
#include <stddef.h>

struct salvwrite_opts;

/* `prof salvage --all`: salvages (salvwrite_file; or with `discard`
 * removes) every salvage file of this user's processes that ended, in the
 * folders folders[0, n) or, with none, in PROF_SALVAGE_DIR and /dev/shm
 * (each with the launcher folders there whose launcher is gone): a line
 * each and a count on stderr. Returns 0, or 1 when a file or folder could
 * not be. */
int orphans_salvage_all(const char *const *folders, int n, bool discard,
			const struct salvwrite_opts *o);

/* The folder `prof run` makes its launch's salvage folder in, into
 * home[size]: PROF_SALVAGE_DIR when it is set to a tmpfs folder of this
 * user's that no one else can write (salvscan_check_dir), else /dev/shm
 * (one that is set but refused is said in one line, "prof run: ..."). */
void orphans_home(char *home, size_t size);

/* `prof run`'s start: salvages, under the rules of salvwrite_file, the
 * salvage files of this user's processes that ended in `home`
 * (orphans_home) and the launcher folders there whose launcher is gone, a
 * line each on stderr. Returns how many it found. */
unsigned orphans_at_start(const char *home);

#endif

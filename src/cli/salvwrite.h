/*
 * salvwrite — a salvage file written out (private to src/cli): the
 * recording a process that died (SIGKILL) or ended in _exit() left in its
 * salvage file becomes a window folder, then the file is removed. Used by
 * `prof salvage FILE`, by `prof salvage --all` and `prof run`'s start
 * (orphans.c), and by `prof run` after its command ended. Main thread
 * only. docs/recorder.md, "Surviving SIGKILL and _exit()".
 */
#ifndef PROFHOST_SALVWRITE_H
#define PROFHOST_SALVWRITE_H

#include <stdbool.h>
#include <sys/types.h>

struct err;

/* How salvwrite_file() salvages a file. */
struct salvwrite_opts {
	const char *who;       /* the messages' prefix: "prof salvage" */
	const char *how;       /* the folder's mark: "after SIGKILL", "after
				  its process ended" */
	const char *notes;     /* the launcher notes file the window folder is
				  listed in; NULL: none */
	const char *out_dir;   /* -o DIR: the run folder goes in DIR (the
				  user's path, followed as given); NULL: the
				  run folder the file names, under the rules
				  for an untrusted path (outdir_open_untrusted) */
	bool exited;           /* its process is known to have ended by exit
				  or _exit (the launched command's wait
				  status) */
};

/* Salvages the file at `path`, which is untrusted input (salvage_open:
 * this user's; the run folder it names: outdir_open_untrusted): its
 * recording goes to a window folder, then the file is removed. Returns 0;
 * 1 when the file held no recording, 2 when it held the flight recorder
 * of a process that ended before its first step and left nothing worth a
 * folder (salvage_worth in salvwrite.c; either way the file is just
 * removed); -1 with *e, one line without the prefix (the file stays). */
int salvwrite_file(const char *path, const struct salvwrite_opts *o, struct err *e);

/* Says on stderr, prefixed by `who`, that the salvage file at `path` was
 * removed without a folder: salvwrite_file()'s 1 or 2 in `rc`. */
void salvwrite_say_removed(const char *who, const char *path, int rc);

/* The launcher's salvage: every salvage file in folder `dir` once the
 * launched process `child` ended with wait status `status` (its own
 * file is marked with how it ended), each window folder listed in the
 * launcher notes file `notes`. Errors are said on stderr, "prof run: ...". */
void salvwrite_launch_dir(const char *dir, pid_t child, int status, const char *notes);

#endif

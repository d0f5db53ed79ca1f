/*
 * fsutil — small file-system helpers shared by the host and the writers.
 */
#ifndef PROFHOST_FSUTIL_H
#define PROFHOST_FSUTIL_H

#include <stddef.h>
#include <sys/stat.h>

#include "../common/err.h"

/* Creates `path` and its missing parents with `mode` (like mkdir -p).
 * Returns 0, or -1 with *e naming the directory that failed. */
int fsutil_mkdirs(const char *path, unsigned mode, struct err *e);

/* Joins `a` and `b` with one '/' into out[size]. Returns 0, or -1 with *e
 * set when the result does not fit. */
int fsutil_join(char *out, size_t size, const char *a, const char *b,
		struct err *e);

/* fsutil_open_regular()'s answer for a path that is not a regular file. */
#define FSUTIL_NOT_REGULAR (-2)

/*
 * Opens `path` for reading without ever blocking (O_NONBLOCK: a FIFO with
 * no writer, a device) and keeps it only when it is a regular file, so a
 * FIFO named as a policy, module or input cannot hang the caller. Returns
 * the descriptor (O_CLOEXEC, blocking again) with *st filled; -1 with errno
 * set (EISDIR for a directory); or FSUTIL_NOT_REGULAR with *st telling what
 * it is (fsutil_file_kind()). Any thread.
 */
int fsutil_open_regular(const char *path, struct stat *st);

/*
 * Whether the file whose fstat() is *st (named `path` in messages) may be
 * loaded as code by this process, as ssh checks its key files: it belongs
 * to this user or to root, and neither its group nor other users may write
 * it. Checked on the descriptor that is then read, so a file swapped after
 * the check is never the one loaded. Returns 0, or -1 with *e one line
 * naming the file, what is wrong and the fix. Any thread.
 */
int fsutil_check_code(const struct stat *st, const char *path, struct err *e);

/* "a FIFO (named pipe)", "a socket", "a character device", "a block
 * device", "a directory", "a symbolic link", "a regular file": for
 * messages. */
const char *fsutil_file_kind(unsigned mode);

/* Reads a whole small regular file (at most `max` bytes) into a malloc'd,
 * NUL-terminated buffer. Returns NULL with *e set ("'<path>' is a FIFO
 * (named pipe), not a regular file", "cannot open '<path>': ...", "'<path>'
 * is larger than N bytes"). */
char *fsutil_read(const char *path, size_t max, size_t *len, struct err *e);

/* As fsutil_read, from a descriptor already open (fsutil_open_regular());
 * `path` names it in messages. Closes nothing. */
char *fsutil_read_fd(int fd, const char *path, size_t max, size_t *len,
		     struct err *e);

#endif

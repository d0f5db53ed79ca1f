/*
 * privfd — reading files on a thread whose descriptor table is its own.
 *
 * Every thread of a process shares one descriptor table. A descriptor a
 * thread of profhost's holds, even for the few system calls between an
 * open() and its close(), can be closed by the program (a daemon closing
 * 3-1023 on another thread) and its number handed to the program's next
 * open(): profhost's read, getdents or close then lands on the program's
 * file (issue #25: the sampler's scan of /proc/self/task, preempted after
 * its opendir, closed a file the daemon had just opened under that
 * number). ownfd narrows this for the descriptors profhost keeps; those
 * it opens for a moment had nothing.
 *
 * Here a reader thread ("profhost-fd", every signal blocked, started at
 * the first request) makes its descriptor table its own when it starts
 * (close_range(0, ~0, CLOSE_RANGE_UNSHARE): a new table holding nothing;
 * on a kernel before 5.9, unshare(CLONE_FILES) and closing the copies)
 * and opens, reads and closes files for profhost's other threads. What it
 * opens is in no table the program can reach, and the program's
 * descriptors are not in its own, so neither side can close, read or
 * write the other's. Where the table cannot be made its own (an old
 * kernel and unshare refused by a seccomp filter) the requests run on the
 * calling thread, as before.
 *
 * Threads: any thread of profhost's, not a signal handler; requests run
 * one at a time. The reader runs only this file's functions: no log (its
 * table has no stderr), no libunwind (its pipe's numbers are the shared
 * table's), and no descriptor is handed out.
 */
#ifndef PROFHOST_PRIVFD_H
#define PROFHOST_PRIVFD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Reads file `path` on the reader into buf, at most size - 1 bytes (the
 * rest is cut), and ends it with a NUL. Returns the bytes read, or -1
 * with errno set (the file cannot be opened or read). size >= 1. */
ssize_t privfd_read(const char *path, char *buf, size_t size);

/* The entries of folder `path` whose names are positive decimal numbers
 * (in /proc/self/task: the thread ids), listed on the reader into *ids,
 * an array of *cap that is grown (realloc) as needed and stays the
 * caller's to free; *n is set to their count. Returns 0, or -1 with errno
 * set (the folder cannot be read, out of memory), *n then 0. */
int privfd_list_ids(const char *path, int32_t **ids, size_t *n, size_t *cap);

/* Runs fn(arg) on the reader and returns when it has (on the calling
 * thread when the reader has no table of its own). fn may open, read and
 * close files and must do nothing else the header names above. For
 * privfd's own functions and its tests. */
void privfd_run(void (*fn)(void *), void *arg);

/* True when requests run on the reader, in a descriptor table of its own
 * (starts the reader when it is not running yet). */
bool privfd_private(void);

/* In a forked child (one thread): forgets the parent's reader, whose
 * thread is not here; the next request starts one. */
void privfd_after_fork_child(void);

#endif

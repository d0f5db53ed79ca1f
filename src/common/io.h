/*
 * io — writing a whole buffer to a file descriptor.
 *
 * One loop for every writer that must not lose a short write: the log
 * (also linked into the shim, libc only), the control socket's frames, the
 * output files, `prof attach` and its line editor; and keeping profhost's
 * own descriptors off 0-2. Nothing here allocates
 * or locks, so both calls may be used from a signal handler.
 */
#ifndef PROFHOST_IO_H
#define PROFHOST_IO_H

#include <stddef.h>

/* Writes all `len` bytes of buf to fd with write(2), going on after short
 * writes and EINTR. Returns 0, or -1 with errno set (EIO when write(2)
 * wrote nothing). Any thread; async-signal-safe (it may change errno: a
 * handler saves and restores it). */
int io_write_all(int fd, const void *buf, size_t len);

/* As io_write_all, on a socket, with send(2) and MSG_NOSIGNAL: a peer that
 * went away is -1 with EPIPE, never SIGPIPE. Any thread;
 * async-signal-safe. */
int io_send_all(int fd, const void *buf, size_t len);

/* Moves descriptor fd, just opened by profhost, above the standard ones
 * (0-2) when it is one of them: a program started with stdin or stdout
 * closed must not read profhost's files or write its output into them
 * (nor find the numbers it expects to reopen taken). Returns the
 * descriptor (close-on-exec), or -1 with errno set (fd is closed then);
 * passes a negative fd through. Any thread; async-signal-safe. */
int io_fd_above_stdio(int fd);

#endif

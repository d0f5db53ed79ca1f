/*
 * ownfd — a descriptor profhost opened, checked before each use.
 *
 * A program may close every descriptor it inherited or did not open (a
 * daemon closing 3-1023), then open its own files under the same numbers.
 * Each descriptor profhost keeps is remembered with the identity of what
 * it opened (device and inode, from fstat); before it is used, polled or
 * closed, ownfd_check() compares them. One that no longer matches is
 * *lost*: profhost forgets the number without closing it (it may be the
 * program's now) and never writes to it again. ownfd_say_lost() says so
 * once per process.
 */
#ifndef PROFHOST_OWNFD_H
#define PROFHOST_OWNFD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <sys/types.h>

struct ownfd {
	_Atomic int fd;            /* -1: none */
	dev_t dev;
	ino_t ino;
};

#define OWNFD_NONE { -1, 0, 0 }

/* The descriptor held (not checked), or -1. Any thread. */
static inline int ownfd_fd(const struct ownfd *o)
{
	return atomic_load(&o->fd);
}

/* Takes `fd` (just opened by profhost) as owned, moved above 0-2 when it
 * is one of them (the number held is then another: read it back with
 * ownfd_fd). Returns 0, or -1 (fd is closed) when it cannot be moved or
 * fstat'ed. Owner thread. */
int ownfd_adopt(struct ownfd *o, int fd);

/* True when o holds a descriptor that is still what profhost opened.
 * Any thread; async-signal-safe (fstat). */
bool ownfd_check(const struct ownfd *o);

/* The descriptor, or -1 when o holds none or it was lost (then forgotten,
 * said once with `what`). Owner thread. */
int ownfd_get(struct ownfd *o, const char *what);

/* Closes the descriptor if it is still profhost's; forgets it either way.
 * Owner thread. */
void ownfd_close(struct ownfd *o);

/* Says once per process that the program closed or reused one of
 * profhost's descriptors (`what`, its number). Not from a signal handler. */
void ownfd_say_lost(const char *what, int fd);

#endif

/*
 * err — errors as values.
 *
 * A function that can fail takes a `struct err *` and, on failure, writes one
 * line of English into it (no "profhost:" prefix, no newline) and returns -1
 * (or NULL). The caller either handles the error or passes it up; one place
 * (the host) reports it. A NULL `struct err *` is allowed: the message is
 * dropped.
 */
#ifndef PROFHOST_ERR_H
#define PROFHOST_ERR_H

#define ERR_MSG_MAX 1024

struct err {
	char msg[ERR_MSG_MAX];
};

/* Formats the message into *e (if e is not NULL). Returns -1, so callers can
 * write `return err_set(e, "...")`. Any thread. */
int err_set(struct err *e, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* As err_set, appending ": strerror(errno_value)". Returns -1. */
int err_errno(struct err *e, int errno_value, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif

/* fsutil — small file-system helpers (see fsutil.h). */
#include "fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/grow.h"
#include "../common/io.h"

int fsutil_mkdirs(const char *path, unsigned mode, struct err *e)
{
	char buf[PATH_MAX];
	size_t n = strlen(path);
	char *p;

	if (n == 0 || n >= sizeof buf)
		return err_set(e, "directory name '%s' is empty or too long", path);
	memcpy(buf, path, n + 1);
	for (p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, mode) != 0 && errno != EEXIST)
			return err_errno(e, errno, "cannot create directory '%s'", buf);
		*p = '/';
	}
	if (mkdir(buf, mode) != 0 && errno != EEXIST)
		return err_errno(e, errno, "cannot create directory '%s'", buf);
	return 0;
}

int fsutil_join(char *out, size_t size, const char *a, const char *b,
		struct err *e)
{
	size_t la = strlen(a);
	int n;

	while (la > 1 && a[la - 1] == '/')
		la--;
	n = snprintf(out, size, "%.*s/%s", (int)la, a, b);
	if (n < 0 || (size_t)n >= size)
		return err_set(e, "path '%s/%s' is too long", a, b);
	return 0;
}

int fsutil_check_code(const struct stat *st, const char *path, struct err *e)
{
	uid_t me = geteuid();

	if (st->st_uid != me && st->st_uid != 0)
		return err_set(e, "'%s' belongs to uid %u, not to you (uid %u) or root: "
			       "profhost runs code only from files no one else can "
			       "change (copy it to a file of your own)", path,
			       (unsigned)st->st_uid, (unsigned)me);
	if (st->st_mode & (S_IWGRP | S_IWOTH))
		return err_set(e, "'%s' is writable by %s (mode %03o): profhost runs "
			       "code only from files no one else can change (chmod "
			       "go-w '%s')", path,
			       st->st_mode & S_IWOTH ? "every user" : "its group",
			       (unsigned)(st->st_mode & 0777), path);
	return 0;
}

int fsutil_open_regular(const char *path, struct stat *st)
{
	int fd = io_fd_above_stdio(open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
	int flags;

	if (fd < 0)
		return -1;
	if (fstat(fd, st) != 0) {
		int err = errno;

		close(fd);
		errno = err;
		return -1;
	}
	if (!S_ISREG(st->st_mode)) {
		close(fd);
		if (S_ISDIR(st->st_mode)) {
			errno = EISDIR;
			return -1;
		}
		return FSUTIL_NOT_REGULAR;
	}
	flags = fcntl(fd, F_GETFL);
	if (flags >= 0)
		fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
	return fd;
}

const char *fsutil_file_kind(unsigned mode)
{
	switch (mode & S_IFMT) {
	case S_IFIFO: return "a FIFO (named pipe)";
	case S_IFSOCK: return "a socket";
	case S_IFCHR: return "a character device";
	case S_IFBLK: return "a block device";
	case S_IFDIR: return "a directory";
	case S_IFLNK: return "a symbolic link";
	case S_IFREG: return "a regular file";
	default: return "not a file";
	}
}

char *fsutil_read_fd(int fd, const char *path, size_t max, size_t *len,
		     struct err *e)
{
	struct stat st;
	size_t cap = 4096, n = 0;
	char *buf;

	/* sized by the file; grown should it grow meanwhile */
	if (fstat(fd, &st) == 0 && st.st_size > 0)
		cap = (uint64_t)st.st_size < max ? (size_t)st.st_size + 1 : max + 1;
	if (cap > max + 1)
		cap = max + 1;
	buf = malloc(cap);
	if (!buf) {
		err_set(e, "out of memory reading '%s'", path);
		return NULL;
	}
	for (;;) {
		ssize_t r;

		if (n == cap - 1 && cap <= max) {
			char *g = grow_array_max(buf, &cap, cap + 1, 1, cap, max + 1);

			if (!g) {
				err_set(e, "out of memory reading '%s'", path);
				free(buf);
				return NULL;
			}
			buf = g;
		}
		if (n == max) {
			/* one byte past max tells a file that is too large */
			char extra;

			r = read(fd, &extra, 1);
		} else {
			r = read(fd, buf + n, cap - 1 - n);
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			err_errno(e, errno, "cannot read '%s'", path);
			free(buf);
			return NULL;
		}
		if (r == 0)
			break;
		if (n == max) {
			err_set(e, "'%s' is larger than %zu bytes", path, max);
			free(buf);
			return NULL;
		}
		n += (size_t)r;
	}
	buf[n] = '\0';
	if (len)
		*len = n;
	return buf;
}

char *fsutil_read(const char *path, size_t max, size_t *len, struct err *e)
{
	struct stat st;
	int fd = fsutil_open_regular(path, &st);
	char *buf;

	if (fd == FSUTIL_NOT_REGULAR) {
		err_set(e, "'%s' is %s, not a regular file", path,
			fsutil_file_kind(st.st_mode));
		return NULL;
	}
	if (fd < 0) {
		err_errno(e, errno, "cannot open '%s'", path);
		return NULL;
	}
	buf = fsutil_read_fd(fd, path, max, len, e);
	close(fd);
	return buf;
}

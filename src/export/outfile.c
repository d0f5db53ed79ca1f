/* outfile — a buffered output file that appears atomically (see outfile.h). */
#include "outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "../common/io.h"

#define OUTFILE_BUF (256 * 1024) /* uncompressed data waiting for write(2) */
#define OUTFILE_ZBUF (64 * 1024) /* compressed output of one deflate() call */
#define OUTFILE_PRINTF_MAX 4096
#define OUTFILE_DIRECT (32 * 1024) /* writes this big skip the copy into buf */

struct outfile {
	char *path;         /* <dir>/<name>, for messages */
	char *name;         /* final name in dirfd */
	char *tmp;          /* `<name>.tmp.<pid>` in dirfd */
	int dirfd;          /* our own descriptor of the directory */
	int fd;
	int gzip;
	int zinit;          /* deflateInit2 succeeded: deflateEnd owed */
	int failed;         /* sticky: a write or compression failed */
	struct err err;     /* the first failure, naming `path` */
	uint64_t bytes;     /* uncompressed bytes accepted */
	size_t n;           /* bytes used in buf */
	z_stream zs;
	unsigned char *zbuf;
	unsigned char buf[OUTFILE_BUF];
};

/* Records the first failure (later ones keep the first message), with
 * what to do when the file system is full or read-only. Returns -1. */
static int fail_errno(struct outfile *f, int errno_value, const char *what)
{
	size_t n;

	if (!f->failed) {
		err_errno(&f->err, errno_value, "cannot %s '%s'", what, f->path);
		n = strlen(f->err.msg);
		if (errno_value == ENOSPC || errno_value == EDQUOT)
			snprintf(f->err.msg + n, sizeof f->err.msg - n, " (free some space "
				 "there, or write the output to another folder)");
		else if (errno_value == EROFS)
			snprintf(f->err.msg + n, sizeof f->err.msg - n, " (write the "
				 "output to another folder)");
	}
	f->failed = 1;
	return -1;
}

/* As fail_errno, for zlib failures (no errno). Returns -1. */
static int fail_zlib(struct outfile *f, int zrc)
{
	if (!f->failed)
		err_set(&f->err, "cannot compress '%s': zlib error %d", f->path, zrc);
	f->failed = 1;
	return -1;
}

/* Writes all of data to the file descriptor. Returns 0 or -1 (sticky). */
static int write_fd(struct outfile *f, const unsigned char *data, size_t len)
{
	if (io_write_all(f->fd, data, len) != 0)
		return fail_errno(f, errno, "write");
	return 0;
}

/* Runs deflate over `len` bytes with `flush` (Z_NO_FLUSH or Z_FINISH) and
 * writes what it produces. Returns 0 or -1 (sticky). */
static int deflate_out(struct outfile *f, const unsigned char *data, size_t len,
		       int flush)
{
	int zrc;

	f->zs.next_in = (unsigned char *)data;
	f->zs.avail_in = (uInt)len; /* len <= OUTFILE_BUF, fits uInt */
	do {
		size_t have;

		f->zs.next_out = f->zbuf;
		f->zs.avail_out = OUTFILE_ZBUF;
		zrc = deflate(&f->zs, flush);
		if (zrc == Z_STREAM_ERROR)
			return fail_zlib(f, zrc);
		have = OUTFILE_ZBUF - f->zs.avail_out;
		if (have > 0 && write_fd(f, f->zbuf, have) != 0)
			return -1;
	} while (f->zs.avail_out == 0 || (flush == Z_FINISH && zrc != Z_STREAM_END));
	return 0;
}

/* Empties buf into the file (through deflate when gzip). 0 or -1. */
static int flush_buf(struct outfile *f)
{
	size_t n = f->n;

	f->n = 0;
	if (n == 0)
		return 0;
	if (f->gzip)
		return deflate_out(f, f->buf, n, Z_NO_FLUSH);
	return write_fd(f, f->buf, n);
}

/* Frees f's memory and closes its directory descriptor. */
static void outfile_free(struct outfile *f)
{
	if (f->zinit)
		deflateEnd(&f->zs);
	if (f->dirfd >= 0)
		close(f->dirfd);
	free(f->zbuf);
	free(f->path);
	free(f->name);
	free(f->tmp);
	free(f);
}

/* Creates f->tmp in f->dirfd: exclusively and without following a link,
 * so nothing planted under that name is ever written through; a file or
 * link already there (a crashed process of the same pid, or planted) is
 * removed once first. The descriptor, or -1 with errno set. */
static int create_tmp(struct outfile *f)
{
	int fd = openat(f->dirfd, f->tmp,
			O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);

	if (fd >= 0 || errno != EEXIST)
		return io_fd_above_stdio(fd);
	if (unlinkat(f->dirfd, f->tmp, 0) != 0) {
		errno = EEXIST;
		return -1;
	}
	return io_fd_above_stdio(openat(f->dirfd, f->tmp, O_WRONLY | O_CREAT | O_EXCL |
					O_NOFOLLOW | O_CLOEXEC, 0644));
}

/* Host thread (any one thread per outfile). The caller owns the result until
 * commit or abort. NULL with *e set (naming the file) on failure. */
struct outfile *outfile_openat(const struct outdir *d, const char *name, bool gzip,
			       struct err *e)
{
	struct outfile *f = calloc(1, sizeof *f);
	size_t plen = strlen(d->path) + strlen(name) + 2;
	size_t tlen = strlen(name) + 32;
	int zrc;

	if (!f) {
		err_set(e, "out of memory opening '%s/%s'", d->path, name);
		return NULL;
	}
	f->fd = -1;
	f->dirfd = -1;
	f->path = malloc(plen);
	f->name = strdup(name);
	f->tmp = malloc(tlen);
	if (!f->path || !f->name || !f->tmp) {
		err_set(e, "out of memory opening '%s/%s'", d->path, name);
		outfile_free(f);
		return NULL;
	}
	snprintf(f->path, plen, "%s/%s", d->path, name);
	snprintf(f->tmp, tlen, "%s.tmp.%ld", name, (long)getpid());
	f->dirfd = fcntl(d->fd, F_DUPFD_CLOEXEC, 3); /* never 0-2: io.h */
	if (f->dirfd < 0) {
		err_errno(e, errno, "cannot create '%s'", f->path);
		outfile_free(f);
		return NULL;
	}
	if (gzip) {
		f->gzip = 1;
		f->zbuf = malloc(OUTFILE_ZBUF);
		if (!f->zbuf) {
			err_set(e, "out of memory opening '%s'", f->path);
			outfile_free(f);
			return NULL;
		}
		/* Level 1, 15-bit window + 16: a gzip wrapper, not zlib's. */
		zrc = deflateInit2(&f->zs, 1, Z_DEFLATED, 15 + 16, 8,
				   Z_DEFAULT_STRATEGY);
		if (zrc != Z_OK) {
			err_set(e, "cannot compress '%s': zlib error %d", f->path, zrc);
			outfile_free(f);
			return NULL;
		}
		f->zinit = 1;
	}
	f->fd = create_tmp(f);
	if (f->fd < 0) {
		if (errno == EEXIST)
			err_set(e, "cannot create '%s': '%s' is in its way and cannot be removed",
				f->path, f->tmp);
		else
			err_errno(e, errno, "cannot create '%s'", f->path);
		outfile_free(f);
		return NULL;
	}
	return f;
}

/* Splits `path` into its directory (opened as given) and its last
 * component. */
struct outfile *outfile_open(const char *path, bool gzip, struct err *e)
{
	const char *slash = strrchr(path, '/');
	char dir[OUTDIR_PATH_MAX];
	struct outdir d;
	struct outfile *f;

	if (!slash)
		snprintf(dir, sizeof dir, ".");
	else if (slash == path)
		snprintf(dir, sizeof dir, "/");
	else if ((size_t)(slash - path) < sizeof dir)
		snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
	else {
		err_set(e, "path '%s' is too long", path);
		return NULL;
	}
	if (!(slash ? slash[1] : path[0])) {
		err_set(e, "cannot create '%s': it names a directory", path);
		return NULL;
	}
	if (outdir_open(dir, &d, NULL) != 0) {
		err_errno(e, errno, "cannot create '%s'", path);
		return NULL;
	}
	f = outfile_openat(&d, slash ? slash + 1 : path, gzip, e);
	outdir_close(&d);
	if (f) {
		/* messages name the file as the user did */
		char *p = strdup(path);

		if (p) {
			free(f->path);
			f->path = p;
		}
	}
	return f;
}

/* Copies into the buffer, flushing it whenever it fills. A big block (a
 * writer's own staging buffer) goes out directly after what is buffered,
 * saving a copy. 0 or -1. */
int outfile_write(struct outfile *f, const void *data, size_t len)
{
	const unsigned char *p = data;

	if (f->failed)
		return -1;
	f->bytes += len;
	if (len >= OUTFILE_DIRECT) {
		if (flush_buf(f) != 0)
			return -1;
		while (len > 0) { /* deflate's avail_in is 32-bit: chunk */
			size_t k = len < OUTFILE_BUF ? len : OUTFILE_BUF;
			int rc = f->gzip ? deflate_out(f, p, k, Z_NO_FLUSH)
					 : write_fd(f, p, k);

			if (rc != 0)
				return -1;
			p += k;
			len -= k;
		}
		return 0;
	}
	while (len > 0) {
		size_t room = OUTFILE_BUF - f->n;
		size_t k = len < room ? len : room;

		memcpy(f->buf + f->n, p, k);
		f->n += k;
		p += k;
		len -= k;
		if (f->n == OUTFILE_BUF && flush_buf(f) != 0)
			return -1;
	}
	return 0;
}

/* outfile_write of strlen(s) bytes. */
int outfile_puts(struct outfile *f, const char *s)
{
	return outfile_write(f, s, strlen(s));
}

/* Formats straight into the buffer (flushed first if less than 4 KiB is
 * free). Longer output is formatted into a heap buffer instead, so nothing
 * is ever cut. 0 or -1. */
int outfile_printf(struct outfile *f, const char *fmt, ...)
{
	va_list ap, ap2;
	size_t room;
	int n;

	if (f->failed)
		return -1;
	if (OUTFILE_BUF - f->n < OUTFILE_PRINTF_MAX && flush_buf(f) != 0)
		return -1;
	room = OUTFILE_BUF - f->n;
	va_start(ap, fmt);
	va_copy(ap2, ap);
	n = vsnprintf((char *)f->buf + f->n, room, fmt, ap);
	va_end(ap);
	if (n >= 0 && (size_t)n < room) {
		va_end(ap2);
		f->n += (size_t)n;
		f->bytes += (size_t)n;
		if (f->n == OUTFILE_BUF)
			return flush_buf(f);
		return 0;
	}
	if (n < 0) {
		va_end(ap2);
		return fail_errno(f, errno ? errno : EINVAL, "format output for");
	}
	{
		char *big = malloc((size_t)n + 1);
		int rc;

		if (!big) {
			va_end(ap2);
			return fail_errno(f, ENOMEM, "write");
		}
		vsnprintf(big, (size_t)n + 1, fmt, ap2);
		va_end(ap2);
		rc = outfile_write(f, big, (size_t)n);
		free(big);
		return rc;
	}
}

/* Uncompressed bytes accepted so far. */
uint64_t outfile_bytes(const struct outfile *f)
{
	return f->bytes;
}

/* The first failure so far, copied into *e: -1 if a write has failed, 0 if
 * not. */
int outfile_error(const struct outfile *f, struct err *e)
{
	if (!f->failed)
		return 0;
	if (e)
		*e = f->err;
	return -1;
}

/* Flushes, finishes the gzip stream, closes and renames. On any failure the
 * temporary file is removed. Frees f in all cases. */
int outfile_commit(struct outfile *f, struct err *e)
{
	int rc = 0;

	if (!f->failed && flush_buf(f) == 0 && f->gzip)
		deflate_out(f, NULL, 0, Z_FINISH);
	if (close(f->fd) != 0)
		fail_errno(f, errno, "write");
	f->fd = -1;
	if (!f->failed && renameat(f->dirfd, f->tmp, f->dirfd, f->name) != 0) {
		err_errno(&f->err, errno, "cannot rename '%s' to '%s'", f->tmp,
			  f->path);
		f->failed = 1;
	}
	if (f->failed) {
		unlinkat(f->dirfd, f->tmp, 0);
		if (e)
			*e = f->err;
		rc = -1;
	}
	outfile_free(f);
	return rc;
}

/* Closes and removes the temporary file; frees f. NULL-safe. */
void outfile_abort(struct outfile *f)
{
	if (!f)
		return;
	if (f->fd >= 0)
		close(f->fd);
	unlinkat(f->dirfd, f->tmp, 0);
	outfile_free(f);
}

/* Writes all of text through f and commits it. Frees f. */
static int write_text(struct outfile *f, const char *text, struct err *e)
{
	if (outfile_puts(f, text) != 0) {
		outfile_error(f, e);
		outfile_abort(f);
		return -1;
	}
	return outfile_commit(f, e);
}

int outfile_write_text(const char *path, const char *text, struct err *e)
{
	struct outfile *f = outfile_open(path, false, e);

	return f ? write_text(f, text, e) : -1;
}

int outfile_write_textat(const struct outdir *d, const char *name, const char *text,
			 struct err *e)
{
	struct outfile *f = outfile_openat(d, name, false, e);

	return f ? write_text(f, text, e) : -1;
}

int outfile_copyat(const struct outdir *from, const char *from_name,
		   const struct outdir *to, const char *to_name, struct err *e)
{
	unsigned char buf[65536];
	struct outfile *f;
	ssize_t r;
	int in = io_fd_above_stdio(openat(from->fd, from_name, O_RDONLY | O_NOFOLLOW |
					  O_NONBLOCK | O_CLOEXEC));

	if (in < 0)
		return err_errno(e, errno, "cannot read '%s/%s'", from->path, from_name);
	f = outfile_openat(to, to_name, false, e);
	if (!f) {
		close(in);
		return -1;
	}
	while ((r = read(in, buf, sizeof buf)) != 0) {
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			err_errno(e, errno, "cannot read '%s/%s'", from->path, from_name);
			close(in);
			outfile_abort(f);
			return -1;
		}
		if (outfile_write(f, buf, (size_t)r) != 0)
			break;
	}
	close(in);
	return outfile_commit(f, e);
}

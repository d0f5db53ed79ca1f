/* readfile — whole files into memory, gzip or not, bounded (see readfile.h). */
#include "readfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>

#include "../util/fsutil.h"

/* A gzip stream's first mapping when its size field says nothing. */
#define READFILE_GZ_START ((size_t)1 << 20)

/* Whether the file starts with gzip's magic. -1 on a read error. */
static int sniff_gzip(int fd)
{
	unsigned char m[2];
	ssize_t n = pread(fd, m, 2, 0);

	if (n < 0)
		return -1;
	return n == 2 && m[0] == 0x1f && m[1] == 0x8b;
}

/* gzip's last four bytes: the uncompressed size of the last member modulo
 * 2^32. The whole content is at least that large, whatever the members
 * and the wrap, so a value over the limit proves the input too large.
 * 0 when it cannot be read. */
static uint64_t gzip_size_field(int fd, const struct stat *st)
{
	unsigned char b[4];

	if (st->st_size < 18 || pread(fd, b, 4, st->st_size - 4) != 4)
		return 0;
	return (uint64_t)b[0] | (uint64_t)b[1] << 8 | (uint64_t)b[2] << 16 |
	       (uint64_t)b[3] << 24;
}

/* Sets *e for a failed gzread; `ended` when the stream simply stopped
 * (no trailer). Returns -1. */
static int gz_fail(gzFile f, const char *path, bool ended, struct err *e)
{
	int zerr;
	const char *msg = gzerror(f, &zerr);

	if (ended || zerr == Z_BUF_ERROR)
		return err_set(e, "%s: truncated gzip stream at offset %lld (%s)", path,
			       (long long)gzoffset(f),
			       msg && *msg ? msg : "unexpected end of file");
	return err_set(e, "%s: corrupt gzip stream at offset %lld (%s)", path,
		       (long long)gzoffset(f), msg && *msg ? msg : "data error");
}

/* Reads up to `want` bytes (fewer only at the end). Returns the count, or
 * -1 with *e set. A stream cut off without its trailer is an error: zlib
 * reports it only through gzerror. */
static long long read_upto(gzFile f, char *buf, size_t want, const char *path,
			   struct err *e)
{
	size_t n = 0;

	while (n < want) {
		size_t chunk = want - n < (1u << 30) ? want - n : (1u << 30);
		int got = gzread(f, buf + n, (unsigned)chunk);
		int zerr;

		if (got < 0)
			return gz_fail(f, path, false, e);
		if (got == 0) {
			gzerror(f, &zerr);
			if (zerr != Z_OK)
				return gz_fail(f, path, true, e);
			break;
		}
		n += (size_t)got;
	}
	return (long long)n;
}

/* "<path>: N MiB of JSON[ once decompressed (gzip's size field)], more
 * than the M MiB of JSON this reader takes<hint>". Returns -1. */
static int too_large(const char *path, uint64_t size, bool gz,
		     const struct readfile_kind *k, struct err *e)
{
	return err_set(e, "%s: %llu MiB of %s%s, more than the %zu MiB of %s this reader takes%s",
		       path, (unsigned long long)(size >> 20), k->what,
		       gz ? " once decompressed (gzip's size field)" : "", k->max >> 20,
		       k->what, k->hint);
}

int readfile_all(const char *path, readfile_sniff_fn sniff,
		 struct readfile_buf *out, struct err *e)
{
	struct readfile_kind k = { 0, "data", "" };
	char head[READFILE_HEAD], extra;
	struct stat st;
	gzFile f = NULL;
	char *data = MAP_FAILED;
	size_t cap = 0;
	long long n, more;
	uint64_t isize;
	bool ended;
	int fd, isgz;

	memset(out, 0, sizeof *out);
	fd = fsutil_open_regular(path, &st);
	if (fd == FSUTIL_NOT_REGULAR)
		return err_set(e, "%s: %s, not a regular file", path,
			       fsutil_file_kind(st.st_mode));
	if (fd < 0)
		return err_errno(e, errno, "%s: cannot open", path);
	isgz = sniff_gzip(fd);
	if (isgz < 0) {
		err_errno(e, errno, "%s: cannot read", path);
		close(fd);
		return -1;
	}
	f = gzdopen(fd, "rb");
	if (!f) {
		close(fd);
		return err_set(e, "%s: out of memory", path);
	}
	gzbuffer(f, 256 * 1024);
	n = read_upto(f, head, sizeof head, path, e);
	if (n < 0 || sniff(head, (size_t)n, path, &k, e) != 0)
		goto fail;
	if (!isgz && (uint64_t)st.st_size > k.max) {
		too_large(path, (uint64_t)st.st_size, false, &k, e);
		goto fail;
	}
	isize = isgz ? gzip_size_field(fd, &st) : 0;
	if (isize > k.max) {
		too_large(path, isize, true, &k, e);
		goto fail;
	}
	/* A plain file needs its size. A gzip stream starts from its size
	 * field (when it is plausible) or 1 MiB and grows, up to the limit,
	 * by remapping its pages: never a copy, so memory holds what was read
	 * and no more, and nothing large is reserved up front. */
	if (!isgz)
		cap = (size_t)st.st_size + 1;
	else if (isize >= (uint64_t)n && isize > 0)
		cap = (size_t)isize + 1;
	else
		cap = READFILE_GZ_START;
	if (cap < (size_t)n + 1)
		cap = (size_t)n + 1;
	data = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (data == MAP_FAILED) {
		err_errno(e, errno, "%s: cannot map %zu MiB to read it", path, cap >> 20);
		goto fail;
	}
	memcpy(data, head, (size_t)n);
	/* a short head was all there is */
	for (ended = (size_t)n < sizeof head; !ended; ended = (size_t)n < cap - 1) {
		if ((size_t)n < cap - 1) {
			/* room left: read on */
		} else if (isgz && cap - 1 < k.max) {
			size_t ncap = (cap - 1) * 2 < k.max ? (cap - 1) * 2 + 1 : k.max + 1;
			void *grown = mremap(data, cap, ncap, MREMAP_MAYMOVE);

			if (grown == MAP_FAILED) {
				err_errno(e, errno, "%s: cannot map %zu MiB to read it", path,
					  ncap >> 20);
				goto fail;
			}
			data = grown;
			cap = ncap;
		} else {
			/* full: one byte more says it does not end there */
			more = read_upto(f, &extra, 1, path, e);
			if (more < 0)
				goto fail;
			if (more == 0)
				break; /* it ends exactly there */
			if (isgz || (uint64_t)n >= k.max)
				err_set(e, "%s: more than %zu MiB of %s once decompressed, more than this reader takes%s",
					path, k.max >> 20, k.what, k.hint);
			else
				err_set(e, "%s: the file grew while it was read", path);
			goto fail;
		}
		more = read_upto(f, data + n, cap - 1 - (size_t)n, path, e);
		if (more < 0)
			goto fail;
		n += more;
	}
	gzclose(f);
	data[n] = '\0';
	/* give back the reservation past the end */
	{
		size_t page = (size_t)sysconf(_SC_PAGESIZE);
		size_t keep = ((size_t)n + 1 + page - 1) / page * page;

		if (keep < cap) {
			munmap(data + keep, cap - keep);
			cap = keep;
		}
	}
	out->data = data;
	out->len = (size_t)n;
	out->gz = isgz == 1;
	out->mapped = cap;
	return 0;
fail:
	if (data != MAP_FAILED)
		munmap(data, cap);
	gzclose(f);
	return -1;
}

void readfile_release(struct readfile_buf *b)
{
	if (b && b->data)
		munmap(b->data, b->mapped);
	if (b)
		memset(b, 0, sizeof *b);
}

/* readfile — whole files into memory, gzip or not (see readfile.h). */
#include "readfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>

/* Whether the file starts with gzip's magic. -1 on a read error. */
static int sniff_gzip(int fd)
{
	unsigned char m[2];
	ssize_t n = pread(fd, m, 2, 0);

	if (n < 0)
		return -1;
	return n == 2 && m[0] == 0x1f && m[1] == 0x8b;
}

char *readfile_all(const char *path, size_t max, size_t *len, bool *gz,
		   struct err *e)
{
	struct stat st;
	size_t cap, n = 0;
	char *buf = NULL;
	gzFile f = NULL;
	int fd, isgz;

	*len = 0;
	*gz = false;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		err_errno(e, errno, "%s: cannot open", path);
		return NULL;
	}
	if (fstat(fd, &st) != 0 || S_ISDIR(st.st_mode)) {
		err_errno(e, S_ISDIR(st.st_mode) ? EISDIR : errno, "%s: cannot read", path);
		close(fd);
		return NULL;
	}
	isgz = sniff_gzip(fd);
	if (isgz < 0) {
		err_errno(e, errno, "%s: cannot read", path);
		close(fd);
		return NULL;
	}
	*gz = isgz == 1;
	if (!*gz && (uint64_t)st.st_size > max) {
		err_set(e, "%s: %llu bytes, more than the %zu MiB this reader takes",
			path, (unsigned long long)st.st_size, max >> 20);
		close(fd);
		return NULL;
	}
	f = gzdopen(fd, "rb");
	if (!f) {
		close(fd);
		err_set(e, "%s: out of memory", path);
		return NULL;
	}
	gzbuffer(f, 256 * 1024);
	cap = *gz ? 1 << 20 : (size_t)st.st_size + 1;
	buf = malloc(cap);
	if (!buf)
		goto oom;
	for (;;) {
		int got, zerr;
		size_t want;

		if (cap - n < 2) {
			size_t ncap = cap * 2;
			char *nb;

			if (ncap > max + 2)
				ncap = max + 2;
			if (ncap <= cap) {
				err_set(e, "%s: more than %zu MiB once decompressed, more than this reader takes",
					path, max >> 20);
				goto fail;
			}
			nb = realloc(buf, ncap);
			if (!nb)
				goto oom;
			buf = nb;
			cap = ncap;
		}
		want = cap - n - 1;
		if (want > (1u << 30))
			want = 1u << 30;
		got = gzread(f, buf + n, (unsigned)want);
		if (got < 0) {
			const char *msg = gzerror(f, &zerr);

			if (zerr == Z_BUF_ERROR)
				err_set(e, "%s: truncated gzip stream at offset %lld (%s)", path,
					(long long)gzoffset(f), msg && *msg ? msg : "unexpected end of file");
			else
				err_set(e, "%s: corrupt gzip stream at offset %lld (%s)", path,
					(long long)gzoffset(f), msg && *msg ? msg : "data error");
			goto fail;
		}
		if (got == 0) {
			/* zlib reports a cut-off stream only through gzerror */
			const char *msg = gzerror(f, &zerr);

			if (zerr != Z_OK) {
				err_set(e, "%s: truncated gzip stream at offset %lld (%s)", path,
					(long long)gzoffset(f), msg && *msg ? msg : "unexpected end of file");
				goto fail;
			}
			break;
		}
		n += (size_t)got;
		if (n > max) {
			err_set(e, "%s: more than %zu MiB once decompressed, more than this reader takes",
				path, max >> 20);
			goto fail;
		}
	}
	gzclose(f);
	buf[n] = '\0';
	*len = n;
	return buf;
oom:
	err_set(e, "%s: out of memory", path);
fail:
	free(buf);
	gzclose(f);
	return NULL;
}

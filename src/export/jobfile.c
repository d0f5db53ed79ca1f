/* jobfile — the files of a run directory's job folder (see jobfile.h). */
#include "jobfile.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../util/fsutil.h"
#include "../util/io.h"

static const char *const kind_names[] = {
	[JOBFILE_NONE] = "", [JOBFILE_CAPTURE] = "capture", [JOBFILE_FIRST] = "first",
	[JOBFILE_DUMP] = "dump", [JOBFILE_HANG] = "hang",
};

/* Reads decimal digits at *p (no sign, no spaces) into *v; advances *p.
 * False when there is none or it overflows. */
static bool read_u64(const char **p, uint64_t *v)
{
	const char *s = *p;
	uint64_t n = 0;

	if (*s < '0' || *s > '9')
		return false;
	for (; *s >= '0' && *s <= '9'; s++) {
		if (n > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
			return false;
		n = n * 10 + (uint64_t)(*s - '0');
	}
	*v = n;
	*p = s;
	return true;
}

enum jobfile_kind jobfile_name_kind(const char *name, int64_t *ns)
{
	const char *p;
	uint64_t t, a, b;
	size_t n;

	*ns = 0;
	if (strncmp(name, "capture-", 8) == 0) {
		/* capture-<ms>-<pid>-<hex>[.first]: nothing else */
		p = name + 8;
		if (!read_u64(&p, &t) || t > (uint64_t)INT64_MAX / 1000000 || *p++ != '-' ||
		    !read_u64(&p, &a) || *p++ != '-')
			return JOBFILE_NONE;
		n = strspn(p, "0123456789abcdef");
		if (n == 0 || (p[n] && strcmp(p + n, ".first") != 0))
			return JOBFILE_NONE;
		*ns = (int64_t)t * 1000000;
		return p[n] ? JOBFILE_FIRST : JOBFILE_CAPTURE;
	}
	if (strncmp(name, "dump-", 5) == 0) {
		p = name + 5;
		if (!read_u64(&p, &t) || t > (uint64_t)INT64_MAX / 60000000000ULL ||
		    strncmp(p, "-steps", 6) != 0)
			return JOBFILE_NONE;
		p += 6;
		if (!read_u64(&p, &a) || *p++ != '-' || !read_u64(&p, &b) || *p)
			return JOBFILE_NONE;
		*ns = (int64_t)t * 60000000000LL;
		return JOBFILE_DUMP;
	}
	if (strncmp(name, "hang-", 5) == 0) {
		p = name + 5;
		if (!read_u64(&p, &t) || t > (uint64_t)INT64_MAX / 60000000000ULL ||
		    strncmp(p, "-step", 5) != 0)
			return JOBFILE_NONE;
		p += 5;
		if (!read_u64(&p, &a) || *p)
			return JOBFILE_NONE;
		*ns = (int64_t)t * 60000000000LL;
		return JOBFILE_HANG;
	}
	return JOBFILE_NONE;
}

/* An integer value `v` of key `key` into *out, from `min` to `max`. */
static int int_value(const char *v, const char *key, uint64_t min, uint64_t max,
		     uint64_t *out, unsigned line, struct err *e)
{
	const char *p = v;
	uint64_t n;

	if (!read_u64(&p, &n) || *p || n < min || n > max)
		return err_set(e, "line %u: '%s' must be an integer from %" PRIu64 " to %" PRIu64
			       ", got '%.40s'", line, key, min, max, v);
	*out = n;
	return 0;
}

/* A text value into out[size]: printable, shorter than size. */
static int text_value(const char *v, const char *key, char *out, size_t size,
		      unsigned line, struct err *e)
{
	const char *p;

	if (strlen(v) >= size)
		return err_set(e, "line %u: '%s' is longer than %zu bytes", line, key,
			       size - 1);
	for (p = v; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			return err_set(e, "line %u: '%s' holds a control character", line, key);
	memcpy(out, v, strlen(v) + 1);
	return 0;
}

/* One "key value" line into *f; `seen` gets the key's bit. */
static int parse_line(char *line, unsigned ln, struct jobfile *f, unsigned *seen,
		      struct err *e)
{
	static const char *const keys[] = {
		"kind", "created_ns", "steps", "first", "lead_ms", "from", "rank",
		"pid", "host", "step", "last", "partial", "reason",
	};
	char *v = strchr(line, ' ');
	uint64_t n = 0;
	unsigned k;

	if (!v)
		return err_set(e, "line %u: expected 'key value', got '%.40s'", ln, line);
	*v++ = '\0';
	for (k = 0; k < sizeof keys / sizeof keys[0] && strcmp(keys[k], line) != 0; k++)
		;
	if (k == sizeof keys / sizeof keys[0])
		return err_set(e, "line %u: unknown key '%.40s'", ln, line);
	if (*seen & (1u << k))
		return err_set(e, "line %u: '%s' given twice", ln, line);
	*seen |= 1u << k;
	switch (k) {
	case 0:
		for (n = 1; n < sizeof kind_names / sizeof kind_names[0]; n++)
			if (strcmp(kind_names[n], v) == 0)
				break;
		if (n == sizeof kind_names / sizeof kind_names[0])
			return err_set(e, "line %u: unknown kind '%.40s' (capture, first, "
				       "dump or hang)", ln, v);
		f->kind = (enum jobfile_kind)n;
		return 0;
	case 1:
		if (int_value(v, line, 0, INT64_MAX, &n, ln, e) != 0)
			return -1;
		f->created_ns = (int64_t)n;
		return 0;
	case 2:
		if (int_value(v, line, 1, JOBFILE_STEPS_MAX, &n, ln, e) != 0)
			return -1;
		f->steps = (uint32_t)n;
		return 0;
	case 3:
		return int_value(v, line, 0, INT64_MAX, &f->first, ln, e);
	case 4:
		if (int_value(v, line, 0, 3600000, &n, ln, e) != 0)
			return -1;
		f->lead_ms = (uint32_t)n;
		return 0;
	case 5:
		return text_value(v, line, f->from, sizeof f->from, ln, e);
	case 6:
	case 7:
		if (int_value(v, line, 0, INT32_MAX, &n, ln, e) != 0)
			return -1;
		if (k == 6)
			f->rank = (int)n;
		else
			f->pid = (int)n;
		return 0;
	case 8:
		return text_value(v, line, f->host, sizeof f->host, ln, e);
	case 9:
		return int_value(v, line, 0, INT64_MAX, &f->step, ln, e);
	case 10:
		return int_value(v, line, 0, INT64_MAX, &f->last, ln, e);
	case 11:
		if (int_value(v, line, 0, 1, &n, ln, e) != 0)
			return -1;
		f->partial = n == 1;
		return 0;
	default:
		return text_value(v, line, f->reason, sizeof f->reason, ln, e);
	}
}

int jobfile_parse(const char *text, size_t len, struct jobfile *f, struct err *e)
{
	char buf[JOBFILE_MAX + 1], *line, *next;
	unsigned ln = 1, seen = 0, need;
	size_t m = strlen(JOBFILE_MAGIC);

	memset(f, 0, sizeof *f);
	if (memchr(text, '\0', len))
		len = strlen(text);
	if (len > JOBFILE_MAX)
		return err_set(e, "it is longer than %d bytes", JOBFILE_MAX);
	memcpy(buf, text, len);
	buf[len] = '\0';
	if (len < m + 1 || strncmp(buf, JOBFILE_MAGIC, m) != 0 || buf[m] != '\n')
		return err_set(e, "line 1: expected '%s' (not a profhost job file)", JOBFILE_MAGIC);
	if (buf[len - 1] != '\n')
		return err_set(e, "it does not end with a newline (cut short?)");
	for (line = buf + m + 1; *line; line = next) {
		next = strchr(line, '\n');
		*next++ = '\0';
		ln++;
		if (parse_line(line, ln, f, &seen, e) != 0)
			return -1;
	}
	/* bits: kind 0, created_ns 1, steps 2, first 3, rank 6, step 9, last 10 */
	switch (f->kind) {
	case JOBFILE_CAPTURE: need = 1u << 1 | 1u << 2; break;
	case JOBFILE_FIRST: need = 1u << 3; break;
	case JOBFILE_DUMP: need = 1u << 1 | 1u << 3 | 1u << 6 | 1u << 10; break;
	case JOBFILE_HANG: need = 1u << 1 | 1u << 6 | 1u << 9; break;
	default: return err_set(e, "it has no 'kind' line");
	}
	if ((seen & need) != need) {
		static const char *const names[] = { "kind", "created_ns", "steps", "first",
			"", "", "rank", "", "", "step", "last" };
		unsigned k;

		for (k = 0; !(need & ~seen & (1u << k)); k++)
			;
		return err_set(e, "a %s file needs a '%s' line", kind_names[f->kind], names[k]);
	}
	if (f->kind == JOBFILE_DUMP && f->last < f->first)
		return err_set(e, "'last' (%" PRIu64 ") is before 'first' (%" PRIu64 ")",
			       f->last, f->first);
	return 0;
}

/* Appends "key text\n" to buf when text is not empty; false when a
 * control character is in it. */
static bool put_text(char *buf, size_t size, size_t *n, const char *key, const char *text)
{
	const char *p;
	int w;

	if (!text[0])
		return true;
	for (p = text; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			return false;
	w = snprintf(buf + *n, *n < size ? size - *n : 0, "%s %s\n", key, text);
	*n += w > 0 ? (size_t)w : 0;
	return true;
}

/* Appends "key value\n". */
static void put_int(char *buf, size_t size, size_t *n, const char *key, uint64_t v)
{
	int w = snprintf(buf + *n, *n < size ? size - *n : 0, "%s %" PRIu64 "\n", key, v);

	*n += w > 0 ? (size_t)w : 0;
}

int jobfile_format(const struct jobfile *f, char *buf, size_t size)
{
	size_t n = 0;
	bool ok = true;

	if (f->kind <= JOBFILE_NONE || f->kind > JOBFILE_HANG)
		return -1;
	n = (size_t)snprintf(buf, size, "%s\nkind %s\n", JOBFILE_MAGIC, kind_names[f->kind]);
	if (f->kind != JOBFILE_FIRST)
		put_int(buf, size, &n, "created_ns", (uint64_t)f->created_ns);
	switch (f->kind) {
	case JOBFILE_CAPTURE:
		put_int(buf, size, &n, "steps", f->steps);
		put_int(buf, size, &n, "first", f->first);
		put_int(buf, size, &n, "lead_ms", f->lead_ms);
		ok = put_text(buf, size, &n, "from", f->from);
		break;
	case JOBFILE_FIRST:
		put_int(buf, size, &n, "first", f->first);
		put_int(buf, size, &n, "rank", (uint64_t)f->rank);
		put_int(buf, size, &n, "pid", (uint64_t)f->pid);
		put_int(buf, size, &n, "step", f->step);
		ok = put_text(buf, size, &n, "host", f->host);
		break;
	case JOBFILE_DUMP:
		put_int(buf, size, &n, "rank", (uint64_t)f->rank);
		put_int(buf, size, &n, "pid", (uint64_t)f->pid);
		put_int(buf, size, &n, "first", f->first);
		put_int(buf, size, &n, "last", f->last);
		put_int(buf, size, &n, "partial", f->partial);
		ok = put_text(buf, size, &n, "host", f->host) &&
		     put_text(buf, size, &n, "reason", f->reason);
		break;
	default:
		put_int(buf, size, &n, "rank", (uint64_t)f->rank);
		put_int(buf, size, &n, "pid", (uint64_t)f->pid);
		put_int(buf, size, &n, "step", f->step);
		ok = put_text(buf, size, &n, "host", f->host) &&
		     put_text(buf, size, &n, "reason", f->reason);
		break;
	}
	if (!ok || n >= size || n > JOBFILE_MAX)
		return -1;
	return (int)n;
}

/* jobfile_read, and with `own` false any user's file (jobfile_read_any). */
static int read_file(int dfd, const char *name, bool own, struct jobfile *f, char *buf,
		     size_t size, struct err *e)
{
	int fd = io_fd_above_stdio(openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK |
					  O_CLOEXEC | O_NOCTTY));
	struct stat st;
	ssize_t n;
	size_t got = 0;

	if (fd < 0) {
		if (errno == ENOENT)
			return 1;
		if (errno == ELOOP)
			return err_set(e, "it is a symbolic link");
		return err_errno(e, errno, "cannot open it");
	}
	if (fstat(fd, &st) != 0) {
		int saved = errno;

		close(fd);
		return err_errno(e, saved, "cannot read it");
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return err_set(e, "it is %s, not a regular file", fsutil_file_kind(st.st_mode));
	}
	if (own && st.st_uid != geteuid()) {
		close(fd);
		return err_set(e, "it belongs to uid %u, not to you (uid %u)",
			       (unsigned)st.st_uid, (unsigned)geteuid());
	}
	if (st.st_size > JOBFILE_MAX || size <= JOBFILE_MAX) {
		close(fd);
		return err_set(e, "it is %lld bytes, more than %d", (long long)st.st_size,
			       JOBFILE_MAX);
	}
	while (got <= JOBFILE_MAX) {
		n = read(fd, buf + got, JOBFILE_MAX + 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	if (got > JOBFILE_MAX)
		return err_set(e, "it grew past %d bytes while read", JOBFILE_MAX);
	buf[got] = '\0';
	return jobfile_parse(buf, got, f, e);
}

int jobfile_read(int dfd, const char *name, struct jobfile *f, char *buf, size_t size,
		 struct err *e)
{
	return read_file(dfd, name, true, f, buf, size, e);
}

int jobfile_read_any(int dfd, const char *name, struct jobfile *f, char *buf, size_t size,
		     struct err *e)
{
	return read_file(dfd, name, false, f, buf, size, e);
}

int jobfile_write_new(int dfd, const char *name, const char *text, struct err *e)
{
	char tmp[96];
	struct timespec now;
	int fd, rc, saved;

	clock_gettime(CLOCK_MONOTONIC, &now);
	snprintf(tmp, sizeof tmp, ".tmp-%ld-%lx", (long)getpid(),
		 (unsigned long)(now.tv_nsec ^ (long)now.tv_sec << 20));
	fd = io_fd_above_stdio(openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
				      O_CLOEXEC, 0644));
	if (fd < 0)
		return err_errno(e, errno, "cannot create a file in the job folder");
	rc = io_write_all(fd, text, strlen(text));
	saved = errno;
	if (close(fd) != 0 && rc == 0) {
		rc = -1;
		saved = errno;
	}
	if (rc == 0) {
		rc = linkat(dfd, tmp, dfd, name, 0);
		saved = errno;
	}
	unlinkat(dfd, tmp, 0);
	if (rc == 0)
		return 0;
	if (saved == EEXIST)
		return 1;
	return err_errno(e, saved, "cannot write '%s'", name);
}

/* Opens `name` in `parent` (a folder, no link), made with `create`; checks
 * it is this user's and not writable by others. 0, 1 (missing), -1. */
static int open_checked(int parent, const char *name, const char *path, bool create,
			int *out, struct err *e)
{
	struct stat st;
	int fd;

	if (create && mkdirat(parent, name, 0755) != 0 && errno != EEXIST)
		return err_errno(e, errno, "cannot create '%s'", path);
	fd = io_fd_above_stdio(openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
				      O_CLOEXEC));
	if (fd < 0) {
		if (errno == ENOENT)
			return 1;
		if (errno == ELOOP || errno == ENOTDIR)
			return err_set(e, "'%s' is a symbolic link or not a folder", path);
		return err_errno(e, errno, "cannot open '%s'", path);
	}
	if (fstat(fd, &st) != 0) {
		int saved = errno;

		close(fd);
		return err_errno(e, saved, "cannot read '%s'", path);
	}
	if (st.st_uid != geteuid()) {
		close(fd);
		return err_set(e, "'%s' belongs to uid %u, not to you (uid %u)", path,
			       (unsigned)st.st_uid, (unsigned)geteuid());
	}
	if (st.st_mode & (S_IWGRP | S_IWOTH)) {
		close(fd);
		return err_set(e, "'%s' is writable by %s (mode %03o)", path,
			       (st.st_mode & S_IWOTH) ? "every user" : "its group",
			       (unsigned)(st.st_mode & 07777));
	}
	*out = fd;
	return 0;
}

int jobfile_open_dir(const char *run, bool create, int *dfd, struct err *e)
{
	char parent[4096], path[4200];
	const char *slash = strrchr(run, '/');
	int pfd, rfd, rc;

	*dfd = -1;
	if (!slash) {
		snprintf(parent, sizeof parent, ".");
		slash = run - 1;
	} else if (slash == run) {
		snprintf(parent, sizeof parent, "/");
	} else if ((size_t)(slash - run) >= sizeof parent) {
		return err_set(e, "'%s' is too long", run);
	} else {
		memcpy(parent, run, (size_t)(slash - run));
		parent[slash - run] = '\0';
	}
	if (!slash[1])
		return err_set(e, "'%s' ends in '/': name the run directory itself", run);
	/* the user's path up to the run directory: followed as given, made
	 * as the host makes it when it first writes */
	if (create && fsutil_mkdirs(parent, 0755, e) != 0)
		return -1;
	pfd = io_fd_above_stdio(open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
	if (pfd < 0) {
		if (errno == ENOENT && !create)
			return 1;
		return err_errno(e, errno, "cannot open '%s'", parent);
	}
	rc = open_checked(pfd, slash + 1, run, create, &rfd, e);
	close(pfd);
	if (rc != 0)
		return rc;
	snprintf(path, sizeof path, "%s/%s", run, JOBFILE_DIR);
	rc = open_checked(rfd, JOBFILE_DIR, path, create, dfd, e);
	close(rfd);
	return rc;
}

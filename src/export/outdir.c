/* outdir — the directories profhost writes into, held open (see outdir.h). */
#include "outdir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../util/fsutil.h"
#include "../util/io.h"

#define OUTDIR_RUN_ID_MAX 1024  /* bytes of a run marker read or written */
#define OUTDIR_RUN_TRIES 99     /* <run>, <run>.2 ... <run>.99 */

/* Where to write instead, for the refusals. */
#define OUTDIR_ELSEWHERE "remove it, or write elsewhere: prof run -o DIR, " \
			 "PROF_OUTPUT_DIR or prof.output{ dir = ... }"

/* Requires the directory open on `fd` to belong to this user and to be
 * writable by no one else: otherwise its owner, group or anyone could
 * plant links or files where profhost writes. Returns 0 or -1 (*e). */
static int check_owned(int fd, const char *path, struct err *e)
{
	struct stat st;

	if (fstat(fd, &st) != 0)
		return err_errno(e, errno, "cannot read directory '%s'", path);
	if (st.st_uid != geteuid())
		return err_set(e, "refusing output directory '%s': it belongs to uid %u, not "
			       "to you (uid %u), so its owner could redirect what profhost "
			       "writes there (" OUTDIR_ELSEWHERE ")",
			       path, (unsigned)st.st_uid, (unsigned)geteuid());
	if (st.st_mode & (S_IWGRP | S_IWOTH))
		return err_set(e, "refusing output directory '%s': it is writable by %s "
			       "(mode %03o), who could plant files where profhost writes "
			       "(chmod go-w it, or write elsewhere)", path,
			       (st.st_mode & S_IWOTH) ? "every user" : "its group",
			       (unsigned)(st.st_mode & 07777));
	return 0;
}

int outdir_open(const char *path, struct outdir *d, struct err *e)
{
	d->fd = -1;
	if (snprintf(d->path, sizeof d->path, "%s", path) >= (int)sizeof d->path)
		return err_set(e, "directory name '%s' is too long", path);
	d->fd = io_fd_above_stdio(open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
	if (d->fd < 0)
		return err_errno(e, errno, "cannot open directory '%s'", path);
	return 0;
}

int outdir_sub(const struct outdir *parent, const char *name, bool fresh,
	       struct outdir *d, struct err *e)
{
	int n = snprintf(d->path, sizeof d->path, "%s/%s", parent->path, name);

	d->fd = -1;
	if (n < 0 || (size_t)n >= sizeof d->path)
		return err_set(e, "output path '%s/%s' is too long", parent->path, name);
	if (mkdirat(parent->fd, name, 0755) != 0) {
		if (errno != EEXIST)
			return err_errno(e, errno, "cannot create directory '%s'", d->path);
		if (fresh)
			return 1;
	}
	d->fd = io_fd_above_stdio(openat(parent->fd, name, O_RDONLY | O_DIRECTORY |
					 O_NOFOLLOW | O_CLOEXEC));
	if (d->fd < 0) {
		if (errno == ELOOP || errno == ENOTDIR)
			return err_set(e, "refusing output directory '%s': it is a symbolic link "
				       "or not a directory (" OUTDIR_ELSEWHERE ")", d->path);
		return err_errno(e, errno, "cannot open directory '%s'", d->path);
	}
	if (check_owned(d->fd, d->path, e) != 0) {
		outdir_close(d);
		return -1;
	}
	return 0;
}

/* Whether the directory holds nothing but run markers (its own or one
 * being written beside it) and the job folder (jobfile.h). -1 when it
 * cannot be read. */
static int only_markers(const struct outdir *d)
{
	int fd = fcntl(d->fd, F_DUPFD_CLOEXEC, 3);
	DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *ent;
	int empty = 1;

	if (!dir) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	rewinddir(dir);
	while (empty && (ent = readdir(dir)) != NULL) {
		/* `job`: requests (prof capture) made before any rank wrote */
		if (strcmp(ent->d_name, ".") != 0 && strcmp(ent->d_name, "..") != 0 &&
		    strcmp(ent->d_name, "job") != 0 &&
		    strncmp(ent->d_name, OUTDIR_RUN_MARKER, sizeof OUTDIR_RUN_MARKER - 1) != 0)
			empty = 0;
	}
	closedir(dir);
	return empty;
}

/* Reads the run marker of d into buf[size] (NUL-ended; its first line is
 * the run id, a second line the writer's job, see marker_job). 0, or -1
 * with errno set (ENOENT: none); never blocks (O_NONBLOCK, a regular file
 * only). */
static int read_marker(const struct outdir *d, char *buf, size_t size)
{
	int fd = io_fd_above_stdio(openat(d->fd, OUTDIR_RUN_MARKER,
					  O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
	struct stat st;
	ssize_t n;

	if (fd < 0)
		return -1;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		errno = EINVAL;
		return -1;
	}
	do
		n = read(fd, buf, size - 1);
	while (n < 0 && errno == EINTR);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = '\0';
	return 0;
}

/* Whether the marker text `buf` (read_marker) names the run `run_id`
 * (its first line). */
static bool marker_is_run(const char *buf, const char *run_id)
{
	size_t n = strcspn(buf, "\n");

	return strlen(run_id) == n && strncmp(buf, run_id, n) == 0;
}

/* Whether the marker text `buf` was written by a rank of `job` after this
 * process started: its second line is "job <key> <unix ns>" with our key
 * and a time not before job->start_ns. */
static bool marker_job(const char *buf, const struct outdir_job *job)
{
	const char *line = strchr(buf, '\n'), *sp;
	size_t keylen = job && job->key ? strlen(job->key) : 0;
	long long ns;
	char *end;

	if (!keylen || !line || strncmp(line + 1, "job ", 4) != 0)
		return false;
	line += 5;
	sp = line + strcspn(line, "\n");
	while (sp > line && sp[-1] != ' ')
		sp--;
	if (sp <= line || (size_t)(sp - 1 - line) != keylen || strncmp(line, job->key, keylen) != 0)
		return false;
	errno = 0;
	ns = strtoll(sp, &end, 10);
	if (errno != 0 || end == sp || (*end != '\n' && *end != '\0'))
		return false;
	return ns >= job->start_ns;
}

/* Writes the run marker of d atomically and only if there is none (a
 * temporary file linked into place: link never replaces): the run id, and
 * for a rank of a job (job->key) a line "job <key> <unix ns now>". 0:
 * written, 1: another process wrote one first, -1 with *e set. */
static int write_marker(const struct outdir *d, const char *run_id,
			const struct outdir_job *job, struct err *e)
{
	char tmp[64], text[OUTDIR_RUN_ID_MAX];
	int fd, rc, saved, tries, len;
	struct timespec now;

	if (job && job->key && clock_gettime(CLOCK_REALTIME, &now) == 0)
		len = snprintf(text, sizeof text, "%s\njob %s %lld\n", run_id, job->key,
			       (long long)now.tv_sec * 1000000000LL + now.tv_nsec);
	else
		len = snprintf(text, sizeof text, "%s\n", run_id);
	if (len < 0 || (size_t)len >= sizeof text)
		len = snprintf(text, sizeof text, "%s\n", run_id); /* a key too long: none */
	if (len < 0 || (size_t)len >= sizeof text)
		return err_set(e, "run id '%s' is too long", run_id);

	snprintf(tmp, sizeof tmp, "%s.tmp.%ld", OUTDIR_RUN_MARKER, (long)getpid());
	for (tries = 0;; tries++) {
		fd = io_fd_above_stdio(openat(d->fd, tmp, O_WRONLY | O_CREAT | O_EXCL |
					      O_NOFOLLOW | O_CLOEXEC, 0644));
		if (fd >= 0 || errno != EEXIST || tries > 0)
			break;
		unlinkat(d->fd, tmp, 0); /* left by a process of the same pid */
	}
	if (fd < 0)
		return err_errno(e, errno, "cannot create '%s/%s'", d->path, tmp);
	rc = io_write_all(fd, text, (size_t)len) == 0 ? 0 : -1;
	saved = errno;
	if (close(fd) != 0 && rc == 0) {
		rc = -1;
		saved = errno;
	}
	if (rc == 0) {
		rc = linkat(d->fd, tmp, d->fd, OUTDIR_RUN_MARKER, 0);
		saved = errno;
	}
	unlinkat(d->fd, tmp, 0);
	if (rc == 0)
		return 0;
	if (saved == EEXIST)
		return 1;
	return err_errno(e, saved, "cannot write '%s/%s'", d->path, OUTDIR_RUN_MARKER);
}

/* Claims the run directory d for `run_id`: 0 when it is this run's (its
 * marker names it or a rank of this job alive beside us, see outdir.h, or
 * it was empty and now does), 1 when it holds another run, -1 with *e
 * set. */
static int claim_run(const struct outdir *d, const char *run_id,
		     const struct outdir_job *job, struct err *e)
{
	char id[OUTDIR_RUN_ID_MAX];
	int tries, rc, empty;

	for (tries = 0; tries < 3; tries++) {
		if (read_marker(d, id, sizeof id) == 0)
			return marker_is_run(id, run_id) || marker_job(id, job) ? 0 : 1;
		if (errno != ENOENT)
			return err_errno(e, errno, "cannot read '%s/%s'", d->path,
					 OUTDIR_RUN_MARKER);
		empty = only_markers(d);
		if (empty < 0)
			return err_errno(e, errno, "cannot read directory '%s'", d->path);
		/* A process that claimed it since our read linked its marker
		 * before making anything beside it: read that one (ranks of a
		 * job capture write their first windows at the same moment). */
		if (!empty && read_marker(d, id, sizeof id) == 0)
			return marker_is_run(id, run_id) || marker_job(id, job) ? 0 : 1;
		if (!empty)
			return 1; /* written before runs were marked: not this run */
		rc = write_marker(d, run_id, job, e);
		if (rc <= 0)
			return rc;
		/* another process of some run marked it first: read it */
	}
	return err_set(e, "cannot tell which run '%s' belongs to", d->path);
}

int outdir_open_run_in(const struct outdir *parent, const char *run, const char *run_id,
		       const struct outdir_job *job, struct outdir *d, bool *moved,
		       struct err *e)
{
	char name[300];
	int k, rc;

	*moved = false;
	d->fd = -1;
	if (!run[0] || strchr(run, '/') || strlen(run) >= 256)
		return err_set(e, "run directory name '%s' is not one part of a path", run);
	for (k = 1; k <= OUTDIR_RUN_TRIES; k++) {
		if (k == 1)
			snprintf(name, sizeof name, "%s", run);
		else
			snprintf(name, sizeof name, "%s.%d", run, k);
		if (outdir_sub(parent, name, false, d, e) != 0)
			return -1;
		rc = run_id ? claim_run(d, run_id, job, e) : 0;
		if (rc == 0) {
			*moved = k > 1;
			return 0;
		}
		outdir_close(d);
		if (rc < 0)
			return -1;
	}
	return err_set(e, "run directories '%s/%s' to '%s/%s.%d' all hold other runs (name "
		       "this run: prof.output{ run = ... } or PROF_RUN_ID)", parent->path, run,
		       parent->path, run, OUTDIR_RUN_TRIES);
}

int outdir_open_run(const char *run_dir, const char *run_id, const struct outdir_job *job,
		    struct outdir *d, bool *moved, struct err *e)
{
	const char *slash = strrchr(run_dir, '/');
	char parent_path[OUTDIR_PATH_MAX];
	struct outdir parent;
	int rc;

	*moved = false;
	d->fd = -1;
	if (!slash || slash == run_dir || !slash[1] ||
	    (size_t)(slash - run_dir) >= sizeof parent_path || strlen(slash + 1) >= 256)
		return err_set(e, "output path '%s' is not <directory>/<run>", run_dir);
	memcpy(parent_path, run_dir, (size_t)(slash - run_dir));
	parent_path[slash - run_dir] = '\0';
	/* the user's output directory: followed as given, created if missing */
	if (fsutil_mkdirs(parent_path, 0755, e) != 0 || outdir_open(parent_path, &parent, e) != 0)
		return -1;
	rc = outdir_open_run_in(&parent, slash + 1, run_id, job, d, moved, e);
	outdir_close(&parent);
	return rc;
}

/* Says in *e why the directory `path` (st: lstat or fstat of it) is no
 * place to write into: not a directory, not this user's, or writable by
 * others. Returns 0 when it is one, else -1. */
static int why_not_private(const struct stat *st, const char *path, struct err *e)
{
	if (!S_ISDIR(st->st_mode))
		return err_set(e, "'%s' is %s, not a directory", path,
			       fsutil_file_kind(st->st_mode));
	if (st->st_uid != geteuid())
		return err_set(e, "'%s' belongs to uid %u, not to you (uid %u)", path,
			       (unsigned)st->st_uid, (unsigned)geteuid());
	if (st->st_mode & (S_IWGRP | S_IWOTH))
		return err_set(e, "'%s' is writable by %s (mode %03o)", path,
			       (st->st_mode & S_IWOTH) ? "every user" : "its group",
			       (unsigned)(st->st_mode & 07777));
	return 0;
}

/* Whether a directory may be made in the directory `st` describes, for
 * outdir_open_untrusted: it is this user's and no one else can write it,
 * or it is sticky and root's or this user's (no one else can remove or
 * rename what is made there; a name someone else took first is theirs,
 * refused by the check of what is opened). */
static bool may_make_in(const struct stat *st)
{
	if (st->st_uid == geteuid() && !(st->st_mode & (S_IWGRP | S_IWOTH)))
		return true;
	return (st->st_mode & S_ISVTX) && (st->st_uid == 0 || st->st_uid == geteuid());
}

int outdir_untrusted_text(const char *path, struct err *e)
{
	const char *p;

	if (path[0] != '/')
		return err_set(e, "it is not an absolute path");
	if (strlen(path) >= OUTDIR_PATH_MAX - 300)
		return err_set(e, "it is too long");
	for (p = path; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			return err_set(e, "it has control characters");
	if (strcmp(path, "/") == 0)
		return 0;
	for (p = path + 1;;) {
		size_t n = strcspn(p, "/");

		if (n == 0)
			return err_set(e, "it has an empty part ('//' or a '/' at its end)");
		if ((n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
			return err_set(e, "it has a '%.*s' part", (int)n, p);
		if (n >= 256)
			return err_set(e, "a part of it is longer than 255 bytes");
		p += n;
		if (!*p)
			break;
		p++; /* past the '/' */
	}
	return 0;
}

int outdir_open_untrusted(const char *run_dir, struct outdir *d, const char **leaf,
			  struct err *e)
{
	const char *p = run_dir + 1, *last = strrchr(run_dir, '/') + 1;
	size_t used = 0;
	struct stat st;
	int cur, next;

	d->fd = -1;
	d->path[0] = '\0';
	if (outdir_untrusted_text(run_dir, e) != 0)
		return -1;
	if (!*last)
		return err_set(e, "it is '/', not <directory>/<run>");
	cur = io_fd_above_stdio(open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
	if (cur < 0)
		return err_errno(e, errno, "cannot open '/'");
	while (p < last) {
		size_t n = strcspn(p, "/");
		char part[256], here[OUTDIR_PATH_MAX];

		memcpy(part, p, n);
		part[n] = '\0';
		snprintf(here, sizeof here, "%s", used ? d->path : "/");
		snprintf(d->path + used, sizeof d->path - used, "/%s", part);
		used += n + 1;
		next = io_fd_above_stdio(openat(cur, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
						O_CLOEXEC));
		if (next < 0 && errno == ENOENT) {
			/* made here only where no one else can take it over */
			if (fstat(cur, &st) != 0) {
				err_errno(e, errno, "cannot read '%s'", here);
				goto fail;
			}
			if (!may_make_in(&st)) {
				struct err why;

				why_not_private(&st, here, &why);
				err_set(e, "'%s' does not exist, and is made only in a folder of "
					"yours that no one else can write: %s", d->path, why.msg);
				goto fail;
			}
			if (mkdirat(cur, part, 0755) != 0 && errno != EEXIST) {
				err_errno(e, errno, "cannot create directory '%s'", d->path);
				goto fail;
			}
			next = io_fd_above_stdio(openat(cur, part, O_RDONLY | O_DIRECTORY |
							O_NOFOLLOW | O_CLOEXEC));
		}
		if (next < 0) {
			if (errno == ELOOP || errno == ENOTDIR)
				err_set(e, "'%s' is a symbolic link or not a directory", d->path);
			else
				err_errno(e, errno, "cannot open '%s'", d->path);
			goto fail;
		}
		close(cur);
		cur = next;
		p += n + 1;
	}
	if (!used)
		snprintf(d->path, sizeof d->path, "/");
	if (fstat(cur, &st) != 0) {
		err_errno(e, errno, "cannot read '%s'", d->path);
		goto fail;
	}
	if (why_not_private(&st, d->path, e) != 0)
		goto fail;
	if (fstatat(cur, last, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		if (S_ISLNK(st.st_mode)) {
			err_set(e, "'%s' is a symbolic link", run_dir);
			goto fail;
		}
		if (why_not_private(&st, run_dir, e) != 0)
			goto fail;
	}
	d->fd = cur;
	*leaf = last;
	return 0;
fail:
	close(cur);
	return -1;
}

int outdir_resolve(const struct outdir *base, const char *rel, size_t len,
		   struct outdir *d, const char **leaf, struct err *e)
{
	char comp[256];
	const char *p = rel, *slash;
	struct outdir cur, next;
	struct stat st;

	d->fd = -1;
	if (len == 0 || strlen(rel) != len)
		return err_set(e, "the path must be a non-empty string without NUL bytes");
	if (rel[0] == '/')
		return err_set(e, "'%s' is absolute; give a path inside the window directory", rel);
	if (len > 1024)
		return err_set(e, "the path is too long");
	cur.fd = fcntl(base->fd, F_DUPFD_CLOEXEC, 3);
	if (cur.fd < 0)
		return err_errno(e, errno, "cannot use the window directory '%s'", base->path);
	snprintf(cur.path, sizeof cur.path, "%s", base->path);
	for (;;) {
		size_t n;

		slash = strchr(p, '/');
		n = slash ? (size_t)(slash - p) : strlen(p);
		if (n == 0 || n >= sizeof comp || (n == 1 && p[0] == '.') ||
		    (n == 2 && p[0] == '.' && p[1] == '.')) {
			outdir_close(&cur);
			return err_set(e, "'%s' must stay inside the window directory (no '..', "
				       "'.' or empty parts)", rel);
		}
		memcpy(comp, p, n);
		comp[n] = '\0';
		if (!slash)
			break;
		if (mkdirat(cur.fd, comp, 0755) != 0 && errno != EEXIST) {
			int err = errno;

			outdir_close(&cur);
			return err_errno(e, err, "cannot create directory '%s' in '%s'", comp,
					 base->path);
		}
		next.fd = io_fd_above_stdio(openat(cur.fd, comp, O_RDONLY | O_DIRECTORY |
						   O_NOFOLLOW | O_CLOEXEC));
		if (next.fd < 0) {
			int err = errno;

			outdir_close(&cur);
			if (err == ELOOP || err == ENOTDIR)
				return err_set(e, "'%s' in '%s' is a symbolic link or not a directory",
					       comp, rel);
			return err_errno(e, err, "'%s' in '%s'", comp, rel);
		}
		if (snprintf(next.path, sizeof next.path, "%s/%.*s", base->path,
			     (int)(slash - rel), rel) >= (int)sizeof next.path)
			snprintf(next.path, sizeof next.path, "%s", base->path);
		outdir_close(&cur);
		cur = next;
		p = slash + 1;
	}
	if (fstatat(cur.fd, comp, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    (S_ISLNK(st.st_mode) || S_ISDIR(st.st_mode))) {
		outdir_close(&cur);
		return err_set(e, "'%s' is %s", rel, fsutil_file_kind(st.st_mode));
	}
	*d = cur;
	*leaf = p;
	return 0;
}

void outdir_close(struct outdir *d)
{
	if (d && d->fd >= 0) {
		close(d->fd);
		d->fd = -1;
	}
}

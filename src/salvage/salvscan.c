/* salvscan — finding orphaned salvage files (see salvscan.h). */
#include "salvscan.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define SALVSCAN_DEPTH 4  /* launcher folders nested (prof run in prof run) */

enum salvscan_dir_ok salvscan_check_dir(const char *dir, char *why, size_t size)
{
	struct stat st;

	if (stat(dir, &st) != 0) {
		if (errno == ENOENT)
			return SALVSCAN_DIR_MISSING;
		snprintf(why, size, "cannot use it: %s", strerror(errno));
		return SALVSCAN_DIR_REFUSED;
	}
	if (!S_ISDIR(st.st_mode)) {
		snprintf(why, size, "it is not a directory");
		return SALVSCAN_DIR_REFUSED;
	}
	if (st.st_uid == geteuid() && !(st.st_mode & (S_IWGRP | S_IWOTH)))
		return SALVSCAN_DIR_OK;
	/* /dev/shm: no one but a file's owner removes or renames it there */
	if ((st.st_mode & S_ISVTX) && (st.st_uid == 0 || st.st_uid == geteuid()))
		return SALVSCAN_DIR_OK;
	if (st.st_uid != geteuid())
		snprintf(why, size, "it belongs to uid %u, not to you (uid %u)",
			 (unsigned)st.st_uid, (unsigned)geteuid());
	else
		snprintf(why, size, "it is writable by %s (mode %03o)",
			 (st.st_mode & S_IWOTH) ? "every user" : "its group",
			 (unsigned)(st.st_mode & 07777));
	return SALVSCAN_DIR_REFUSED;
}

/* Whether `name` is a salvage file's: profhost-*.salvage. */
static bool salvage_name(const char *name)
{
	size_t n = strlen(name);

	return n > 17 && strncmp(name, "profhost-", 9) == 0 &&
	       strcmp(name + n - 8, ".salvage") == 0;
}

/* Looks at file `name` of the folder open on dfd (path `dir`): an orphan
 * of this user's is counted and handed to fn. */
static void visit_file(int dfd, const char *dir, const char *name, salvscan_fn fn,
		       void *ctx, struct salvscan_count *c)
{
	struct salvscan_file f;
	char path[PATH_MAX];
	struct stat st;
	int fd;

	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
	    st.st_uid != geteuid())
		return;
	fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		return;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
		close(fd);
		return;
	}
	/* shared: two scans may look at once; a writer holds it exclusive */
	if (flock(fd, LOCK_SH | LOCK_NB) != 0) {
		c->live++;
		close(fd);
		return;
	}
	close(fd); /* the lock goes with it */
	c->orphans++;
	c->bytes += (uint64_t)st.st_blocks * 512;
	if (!fn || snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
		return;
	f.path = path;
	f.name = name;
	f.bytes = (uint64_t)st.st_blocks * 512;
	fn(&f, ctx);
}

static void scan_fd(int dfd, const char *dir, int depth, bool tidy, salvscan_fn fn,
		    void *ctx, struct salvscan_count *c);

/* Looks into launcher folder `name` of the folder open on `parent` (path
 * `dir`) when it is this user's, writable by no one else and its launcher
 * is gone; with `tidy`, removes it when it is left empty. */
static void visit_launcher(int parent, const char *dir, const char *name, int depth,
			   bool tidy, salvscan_fn fn, void *ctx, struct salvscan_count *c)
{
	char path[PATH_MAX];
	struct stat st;
	int fd;

	if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode) ||
	    st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)))
		return;
	fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return;
	if (fstat(fd, &st) != 0 || st.st_uid != geteuid() ||
	    (st.st_mode & (S_IWGRP | S_IWOTH)) ||
	    flock(fd, (tidy ? LOCK_EX : LOCK_SH) | LOCK_NB) != 0 ||
	    snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) {
		close(fd); /* a running launcher's: it salvages its own */
		return;
	}
	scan_fd(fd, path, depth + 1, tidy, fn, ctx, c);
	if (tidy)
		unlinkat(parent, name, AT_REMOVEDIR); /* fails unless empty */
	close(fd);
}

/* Scans the folder open on dfd (path `dir`, `depth` launcher folders
 * down). dfd stays open. */
static void scan_fd(int dfd, const char *dir, int depth, bool tidy, salvscan_fn fn,
		    void *ctx, struct salvscan_count *c)
{
	int fd = fcntl(dfd, F_DUPFD_CLOEXEC, 3);
	DIR *dp = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *d;

	if (!dp) {
		if (fd >= 0)
			close(fd);
		return;
	}
	while ((d = readdir(dp)) != NULL) {
		if (salvage_name(d->d_name))
			visit_file(dfd, dir, d->d_name, fn, ctx, c);
		else if (depth < SALVSCAN_DEPTH &&
			 strncmp(d->d_name, SALVSCAN_LAUNCH_PREFIX,
				 sizeof SALVSCAN_LAUNCH_PREFIX - 1) == 0)
			visit_launcher(dfd, dir, d->d_name, depth, tidy, fn, ctx, c);
	}
	closedir(dp);
}

void salvscan_dir(const char *dir, bool tidy, salvscan_fn fn, void *ctx,
		  struct salvscan_count *c)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NONBLOCK | O_CLOEXEC);

	if (fd < 0)
		return;
	/* shared, as every scan takes it: only a running launcher holds its
	 * own folder exclusive */
	if (flock(fd, LOCK_SH | LOCK_NB) == 0)
		scan_fd(fd, dir, 0, tidy, fn, ctx, c);
	close(fd);
}

int salvscan_hold_launcher(int fd)
{
	struct stat st;

	if (flock(fd, LOCK_EX | LOCK_NB) != 0 || fstat(fd, &st) != 0 || st.st_nlink == 0)
		return -1;
	return 0;
}

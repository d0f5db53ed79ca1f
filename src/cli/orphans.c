/*
 * orphans — the salvage files of this user's processes that ended with
 * nothing to salvage them (SIGKILL or _exit() of a process run with
 * LD_PRELOAD alone, or whose `prof run` died first): found in the salvage
 * folders (src/salvage/salvscan.h); `prof salvage --all` salvages each into
 * its run folder under the rules for untrusted files (salvwrite_file)
 * or removes it (--discard), and `prof run` salvages them before it
 * launches. docs/recorder.md, "Orphaned salvage files".
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "../common/salvfile.h"
#include "../common/err.h"
#include "../salvage/salvscan.h"
#include "orphans.h"
#include "salvwrite.h"

/* One pass over the orphans: how to handle each, and what became of them. */
struct orphans {
	const struct salvwrite_opts *o;
	bool discard;
	unsigned salvaged, removed, failed;
};

/* --discard: removes `path` when it is still a salvage file of this
 * user's that no process holds (checked on the descriptor, the lock held
 * while it goes). Returns 0, or -1 with *e (the file stays). */
static int discard_file(const char *path, struct err *e)
{
	char magic[sizeof SALV_MAGIC - 1];
	struct stat st;
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);

	if (fd < 0)
		return err_errno(e, errno, "cannot open salvage file '%s'", path);
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
		close(fd);
		return err_set(e, "'%s' is no longer a salvage file of yours; left alone", path);
	}
	if (pread(fd, magic, sizeof magic, 0) != (ssize_t)sizeof magic ||
	    memcmp(magic, SALV_MAGIC, sizeof magic) != 0) {
		close(fd);
		return err_set(e, "'%s' is not a profhost salvage file; left alone", path);
	}
	if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		close(fd);
		return err_set(e, "'%s' is held by a process again (another prof salvaging "
			       "it); left alone", path);
	}
	if (unlink(path) != 0) {
		int err = errno;

		close(fd);
		return err_errno(e, err, "cannot remove '%s'", path);
	}
	close(fd);
	return 0;
}

/* salvscan_fn: salvages or removes one orphan, a line on stderr. */
static void visit(const struct salvscan_file *sf, void *ctx)
{
	struct orphans *r = ctx;
	struct err e;
	int rc;

	if (r->discard) {
		if (discard_file(sf->path, &e) != 0) {
			fprintf(stderr, "%s: %s\n", r->o->who, e.msg);
			r->failed++;
			return;
		}
		fprintf(stderr, "%s: removed '%s' without salvaging it (%llu MiB freed)\n",
			r->o->who, sf->path, (unsigned long long)((sf->bytes + (1u << 20) - 1) >> 20));
		r->removed++;
		return;
	}
	switch ((rc = salvwrite_file(sf->path, r->o, &e))) {
	case 0:
		r->salvaged++;
		break;
	case 1:
	case 2:
		salvwrite_say_removed(r->o->who, sf->path, rc);
		r->removed++;
		break;
	default:
		fprintf(stderr, "%s: %s\n", r->o->who, e.msg); /* the file stays */
		r->failed++;
	}
}

/* Whether folder `dir` (named by `what`, e.g. "PROF_SALVAGE_DIR '/x'")
 * may be searched: a refused one is said in one line; so is a missing
 * one, when `bad` is not NULL; either sets *bad (when not NULL). */
static bool searchable(const char *who, const char *what, const char *dir, bool *bad)
{
	char why[256];

	switch (salvscan_check_dir(dir, why, sizeof why)) {
	case SALVSCAN_DIR_OK:
		return true;
	case SALVSCAN_DIR_MISSING:
		if (bad) {
			fprintf(stderr, "%s: cannot search %s: no such folder\n", who, what);
			*bad = true;
		}
		return false;
	default:
		fprintf(stderr, "%s: not searching %s: %s, so its files could be swapped under "
			"prof (move them to a folder of yours that no one else can write)\n",
			who, what, why);
		if (bad)
			*bad = true;
		return false;
	}
}

/* Whether paths a and b are one folder. */
static bool same_dir(const char *a, const char *b)
{
	struct stat sa, sb;

	return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
	       sa.st_ino == sb.st_ino;
}

/* The final line of `prof salvage --all`: what was found in dirs[0, n)
 * and what became of it. */
static void say_count(const struct orphans *r, const struct salvscan_count *c,
		      const char *const *dirs, int n)
{
	char where[1024] = "", live[96] = "";
	size_t used = 0;
	int i;

	for (i = 0; i < n && used < sizeof where; i++)
		used += (size_t)snprintf(where + used, sizeof where - used, "%s'%s'",
					 i ? (i + 1 == n ? " and " : ", ") : "", dirs[i]);
	if (c->live)
		snprintf(live, sizeof live, "; %u of running processes left alone", c->live);
	if (!c->orphans) {
		fprintf(stderr, "%s: no salvage files of processes that ended in %s%s\n",
			r->o->who, where, live);
		return;
	}
	fprintf(stderr, "%s: %u salvage file%s of processes that ended in %s: %u salvaged, "
		"%u removed, %u left in place%s\n", r->o->who, c->orphans,
		c->orphans == 1 ? "" : "s", where, r->salvaged, r->removed, r->failed, live);
}

int orphans_salvage_all(const char *const *folders, int n, bool discard,
			const struct salvwrite_opts *o)
{
	struct orphans r = { .o = o, .discard = discard };
	struct salvscan_count c = { 0 };
	const char *dirs[64], *env = getenv("PROF_SALVAGE_DIR");
	char what[PATH_MAX + 32];
	bool bad = false;
	int i, nd = 0;

	for (i = 0; i < n && nd < (int)(sizeof dirs / sizeof dirs[0]); i++) {
		snprintf(what, sizeof what, "'%s'", folders[i]);
		if (searchable(o->who, what, folders[i], &bad))
			dirs[nd++] = folders[i];
	}
	if (n == 0) {
		snprintf(what, sizeof what, "PROF_SALVAGE_DIR '%s'", env ? env : "");
		if (env && *env && searchable(o->who, what, env, NULL))
			dirs[nd++] = env;
		if (!nd || !same_dir(dirs[0], SALVSCAN_SHM))
			dirs[nd++] = SALVSCAN_SHM;
	}
	for (i = 0; i < nd; i++)
		salvscan_dir(dirs[i], true, visit, &r, &c);
	if (nd)
		say_count(&r, &c, dirs, nd);
	return r.failed || bad ? 1 : 0;
}

void orphans_home(char *home, size_t size)
{
	const char *env = getenv("PROF_SALVAGE_DIR");
	const char *why_not = NULL;
	char why[256], path[PATH_MAX];
	struct statfs sf;

	snprintf(home, size, "%s", SALVSCAN_SHM);
	if (!env || !*env)
		return;
	switch (salvscan_check_dir(env, why, sizeof why)) {
	case SALVSCAN_DIR_OK:
		if (!realpath(env, path) || strlen(path) >= size)
			why_not = "it cannot be resolved to an absolute path";
		else if (statfs(path, &sf) != 0 || sf.f_type != TMPFS_MAGIC)
			why_not = "it is not a tmpfs (the salvage files' pages would be "
				  "written back to disk)";
		else
			snprintf(home, size, "%s", path);
		break;
	case SALVSCAN_DIR_MISSING:
		why_not = "it does not exist";
		break;
	default:
		why_not = why;
	}
	if (why_not)
		fprintf(stderr, "prof run: PROF_SALVAGE_DIR '%s' is refused: %s; the launch "
			"keeps its salvage files in " SALVSCAN_SHM " instead (name a tmpfs folder "
			"of yours that no one else can write, or unset PROF_SALVAGE_DIR)\n",
			env, why_not);
}

unsigned orphans_at_start(const char *home)
{
	struct salvwrite_opts o = { .who = "prof run", .how = "after its process ended" };
	struct orphans r = { .o = &o };
	struct salvscan_count c = { 0 };

	salvscan_dir(home, true, visit, &r, &c);
	return c.orphans;
}

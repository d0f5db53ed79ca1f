/*
 * test_salvscan — finding orphaned salvage files: which folders may hold
 * salvage files; which files a scan hands over (this user's regular
 * profhost-*.salvage files that no process locks), which it counts as
 * live, which it skips (links, other names, launcher folders still held
 * by their launcher or open to others); a tidying scan removes emptied
 * launcher folders; a launcher's hold.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "testdir.h"
#include "salvage/salvscan.h"

static char dir[256];

/* dir/<rel> into out[4096]. */
static const char *at(const char *rel)
{
	static char out[4][4096];
	static int k;

	k = (k + 1) % 4;
	snprintf(out[k], sizeof out[k], "%s/%s", dir, rel);
	return out[k];
}

/* Writes `bytes` bytes into dir/<rel>. */
static void make_file(const char *rel, size_t bytes)
{
	char *buf = calloc(1, bytes + 1);
	FILE *f = fopen(at(rel), "w");

	if (!f || !buf) {
		perror(rel);
		exit(2);
	}
	memset(buf, 'x', bytes);
	fwrite(buf, 1, bytes, f);
	fclose(f);
	free(buf);
}

/* An open descriptor of dir/<rel> holding LOCK_EX on it. */
static int hold(const char *rel, int flags)
{
	int fd = open(at(rel), flags | O_CLOEXEC);

	if (fd < 0 || flock(fd, LOCK_EX | LOCK_NB) != 0) {
		perror(rel);
		exit(2);
	}
	return fd;
}

/* The names the visitor got, each followed by '|'. */
static char seen[4096];

static void note(const struct salvscan_file *f, void *ctx)
{
	(void)ctx;
	CHECK(f->bytes >= 8192);
	CHECK(strlen(f->path) > strlen(f->name) &&
	      strcmp(f->path + strlen(f->path) - strlen(f->name), f->name) == 0);
	strncat(seen, f->name, sizeof seen - strlen(seen) - 2);
	strcat(seen, "|");
}

static void test_check_dir(void)
{
	char why[256] = "";

	mkdir(at("mine"), 0700);
	CHECK_EQ_INT(salvscan_check_dir(at("mine"), why, sizeof why), SALVSCAN_DIR_OK);
	CHECK_EQ_INT(salvscan_check_dir(at("missing"), why, sizeof why), SALVSCAN_DIR_MISSING);
	mkdir(at("open"), 0700);
	chmod(at("open"), 0777);
	CHECK_EQ_INT(salvscan_check_dir(at("open"), why, sizeof why), SALVSCAN_DIR_REFUSED);
	CHECK_EQ_STR(why, "it is writable by every user (mode 777)");
	chmod(at("open"), 0770);
	CHECK_EQ_INT(salvscan_check_dir(at("open"), why, sizeof why), SALVSCAN_DIR_REFUSED);
	CHECK_EQ_STR(why, "it is writable by its group (mode 770)");
	mkdir(at("sticky"), 0700);
	chmod(at("sticky"), 01777);
	CHECK_EQ_INT(salvscan_check_dir(at("sticky"), why, sizeof why), SALVSCAN_DIR_OK);
	make_file("plain", 1);
	CHECK_EQ_INT(salvscan_check_dir(at("plain"), why, sizeof why), SALVSCAN_DIR_REFUSED);
	CHECK_EQ_STR(why, "it is not a directory");
	if (geteuid() == 0) {
		mkdir(at("theirs"), 0755);
		CHECK_EQ_INT(chown(at("theirs"), 65534, 65534), 0);
		CHECK_EQ_INT(salvscan_check_dir(at("theirs"), why, sizeof why),
			     SALVSCAN_DIR_REFUSED);
		CHECK_EQ_STR(why, "it belongs to uid 65534, not to you (uid 0)");
		chmod(at("theirs"), 01777);
		CHECK_EQ_INT(salvscan_check_dir(at("theirs"), why, sizeof why),
			     SALVSCAN_DIR_REFUSED);
	}
}

static void test_scan(void)
{
	struct salvscan_count c = { 0 };
	int live, launcher, top;

	mkdir(at("s"), 0700);
	make_file("s/profhost-1-100.salvage", 8192);         /* an orphan */
	make_file("s/profhost-2-100.salvage", 8192);         /* live */
	live = hold("s/profhost-2-100.salvage", O_RDONLY);
	make_file("s/other.salvage", 8192);                  /* another name */
	make_file("s/profhost-3-100.tmp", 8192);
	CHECK_EQ_INT(symlink(at("s/profhost-1-100.salvage"), at("s/profhost-4-100.salvage")), 0);
	mkdir(at("s/profhost-5-100.salvage"), 0700);         /* not a file */
	mkdir(at("s/prof-salvage-dead01"), 0700);            /* its launcher gone */
	make_file("s/prof-salvage-dead01/profhost-6-100.salvage", 8192);
	mkdir(at("s/prof-salvage-live01"), 0700);            /* its launcher runs */
	make_file("s/prof-salvage-live01/profhost-7-100.salvage", 8192);
	launcher = hold("s/prof-salvage-live01", O_RDONLY | O_DIRECTORY);
	mkdir(at("s/prof-salvage-open01"), 0700);            /* others can write */
	chmod(at("s/prof-salvage-open01"), 0777);
	make_file("s/prof-salvage-open01/profhost-8-100.salvage", 8192);
	mkdir(at("s/prof-salvage-empty1"), 0700);

	/* counting only: nothing handed over, nothing removed */
	salvscan_dir(at("s"), false, NULL, NULL, &c);
	CHECK_EQ_INT(c.orphans, 2);
	CHECK_EQ_INT(c.live, 1);
	CHECK(c.bytes >= 2 * 8192);
	CHECK(access(at("s/prof-salvage-empty1"), F_OK) == 0);

	/* a tidying scan: the orphans handed over, the empty launcher folder
	 * removed, the dead launcher's folder kept while its file is there */
	memset(&c, 0, sizeof c);
	snprintf(seen, sizeof seen, "|");
	salvscan_dir(at("s"), true, note, NULL, &c);
	CHECK_EQ_INT(c.orphans, 2);
	CHECK(strstr(seen, "|profhost-1-100.salvage|") != NULL);
	CHECK(strstr(seen, "|profhost-6-100.salvage|") != NULL);
	CHECK(strstr(seen, "profhost-2-") == NULL && strstr(seen, "profhost-7-") == NULL &&
	      strstr(seen, "profhost-8-") == NULL && strstr(seen, "profhost-4-") == NULL);
	CHECK(access(at("s/prof-salvage-empty1"), F_OK) != 0);
	CHECK(access(at("s/prof-salvage-dead01"), F_OK) == 0);
	unlink(at("s/prof-salvage-dead01/profhost-6-100.salvage"));
	memset(&c, 0, sizeof c);
	salvscan_dir(at("s"), true, NULL, NULL, &c);
	CHECK_EQ_INT(c.orphans, 1);
	CHECK(access(at("s/prof-salvage-dead01"), F_OK) != 0);
	CHECK(access(at("s/prof-salvage-live01"), F_OK) == 0);

	/* its launcher gone, its file is an orphan; a folder a launcher
	 * holds is left to it, when scanned itself too */
	close(launcher);
	memset(&c, 0, sizeof c);
	salvscan_dir(at("s"), false, NULL, NULL, &c);
	CHECK_EQ_INT(c.orphans, 2);
	top = hold("s", O_RDONLY | O_DIRECTORY);
	memset(&c, 0, sizeof c);
	salvscan_dir(at("s"), false, NULL, NULL, &c);
	CHECK_EQ_INT(c.orphans + c.live, 0);
	close(top);
	close(live);
	memset(&c, 0, sizeof c);
	salvscan_dir(at("s"), false, NULL, NULL, &c);
	CHECK_EQ_INT(c.orphans, 3);
	CHECK_EQ_INT(c.live, 0);
}

static void test_hold_launcher(void)
{
	int a, b;

	mkdir(at("l"), 0700);
	a = open(at("l"), O_RDONLY | O_DIRECTORY);
	b = open(at("l"), O_RDONLY | O_DIRECTORY);
	CHECK_EQ_INT(salvscan_hold_launcher(a), 0);
	CHECK_EQ_INT(salvscan_hold_launcher(b), -1); /* held */
	close(a);
	rmdir(at("l"));
	CHECK_EQ_INT(salvscan_hold_launcher(b), -1); /* removed by a scan */
	close(b);
}

int main(void)
{
	testdir_make(dir, sizeof dir, "test_salvscan", false);
	umask(022);
	test_check_dir();
	test_scan();
	test_hold_launcher();
	testdir_remove(dir);
	return check_done();
}

/*
 * testdir — the unit tests' scratch directory and message helpers: a fresh
 * mkdtemp() directory (the working directory too, when asked, so messages
 * read "myprof.lua:3: ..."), files written into it, all removed at the
 * end; contains() and starts_with() for checking messages.
 */
#ifndef PROFHOST_TEST_TESTDIR_H
#define PROFHOST_TEST_TESTDIR_H

#include <ftw.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Makes /tmp/<name>_XXXXXX into dir (size bytes) and, with `enter`, makes
 * it the working directory. Exits with status 2 when it cannot. */
static inline void testdir_make(char *dir, size_t size, const char *name, bool enter)
{
	snprintf(dir, size, "/tmp/%s_XXXXXX", name);
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		exit(2);
	}
	if (enter && chdir(dir) != 0) {
		perror(dir);
		exit(2);
	}
}

static inline int testdir_remove_entry(const char *path, const struct stat *st, int flag,
				       struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

/* Removes dir and everything below it (leaving it first). */
static inline void testdir_remove(const char *dir)
{
	if (chdir("/") == 0)
		nftw(dir, testdir_remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Writes `content` to `path`; exits with status 2 when it cannot. */
static inline void testdir_write(const char *path, const char *content)
{
	FILE *f = fopen(path, "w");

	if (!f) {
		perror(path);
		exit(2);
	}
	fputs(content, f);
	fclose(f);
}

static inline int contains(const char *s, const char *part)
{
	return s && strstr(s, part) != NULL;
}

static inline int starts_with(const char *s, const char *prefix)
{
	return s && strncmp(s, prefix, strlen(prefix)) == 0;
}

#endif

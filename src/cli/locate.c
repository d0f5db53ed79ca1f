/*
 * locate — where this installation of profhost lies (see locate.h).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/err.h"
#include "../util/fsutil.h"
#include "locate.h"

/* This executable's path without its last two components, into
 * exe[PATH_MAX] (build/bin/prof -> build; /bin/prof -> ""). Returns 0,
 * or -1 with *e set. */
static int exe_prefix(char *exe, struct err *e)
{
	ssize_t n = readlink("/proc/self/exe", exe, PATH_MAX - 1);
	int i;

	if (n < 0)
		return err_errno(e, errno, "cannot read /proc/self/exe");
	exe[n] = '\0';
	for (i = 0; i < 2; i++) {
		char *slash = strrchr(exe, '/');

		if (!slash)
			return err_set(e, "cannot tell the directory of '%s'", exe);
		*slash = '\0';
	}
	return 0;
}

/* Finds the installation prefix: the parent of the directory holding this
 * executable (build/bin/prof -> build). Returns 0, or -1 with *e set. */
static int find_prefix(char *out, size_t size, struct err *e)
{
	char exe[PATH_MAX];

	if (exe_prefix(exe, e) != 0)
		return -1;
	if (exe[0] == '\0')
		strcpy(exe, "/");
	if (strlen(exe) >= size)
		return err_set(e, "path '%s' is too long", exe);
	strcpy(out, exe);
	return 0;
}

/* Resolves the library to preload into out[PATH_MAX] (absolute, links
 * resolved): $PROF_LIB, else <prefix>/lib/libprofhost.so. Returns 0, or -1
 * with *e set to a message that names where it looked and the fix. */
static int find_lib(const char *prefix, char *out, struct err *e)
{
	const char *env = getenv("PROF_LIB");
	char cand[PATH_MAX];
	struct stat st;

	if (env && env[0]) {
		if (!realpath(env, out))
			return err_errno(e, errno, "PROF_LIB='%s' cannot be used", env);
		if (stat(out, &st) != 0 || !S_ISREG(st.st_mode))
			return err_set(e, "PROF_LIB='%s' is not a file", env);
		return 0;
	}
	if (fsutil_join(cand, sizeof cand, prefix, "lib/libprofhost.so", e) != 0)
		return -1;
	if (!realpath(cand, out) || stat(out, &st) != 0 || !S_ISREG(st.st_mode))
		return err_set(e, "cannot find the host library at %s; "
			       "set PROF_LIB=/path/to/libprofhost.so", cand);
	return 0;
}

int locate_host(char *prefix, char *lib, struct err *e)
{
	struct err perr;

	if (find_prefix(prefix, PATH_MAX, &perr) != 0)
		prefix[0] = '\0';
	if (find_lib(prefix, lib, e) != 0) {
		if (!prefix[0] && !getenv("PROF_LIB"))
			return err_set(e, "cannot find the host library (%s); "
				       "set PROF_LIB=/path/to/libprofhost.so", perr.msg);
		return -1;
	}
	return 0;
}

int locate_lua_dir(char *out, size_t size, struct err *e)
{
	const char *env = getenv("PROF_LUA_DIR");
	char exe[PATH_MAX];

	if (env && env[0]) {
		snprintf(out, size, "%s", env);
		return 0;
	}
	if (exe_prefix(exe, e) != 0)
		return -1;
	if ((size_t)snprintf(out, size, "%s/share/profhost/lua", exe) >= size)
		return err_set(e, "path too long");
	return 0;
}

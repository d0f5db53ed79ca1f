/*
 * locate — where this installation of profhost lies, as `prof` finds it
 * (private to src/cli; docs/cli.md): the host library to preload and the
 * Lua library the reports load. The prefix is the parent of the directory
 * holding `prof` (build/bin/prof -> build), unless the environment names
 * the files. Any thread; reads the environment and /proc/self/exe.
 */
#ifndef PROFHOST_LOCATE_H
#define PROFHOST_LOCATE_H

#include <stddef.h>

struct err;

/* Finds the installation (PROF_LIB, see docs/cli.md): its prefix into
 * prefix[PATH_MAX] ("" when it cannot be told), and the host library into
 * lib[PATH_MAX] (absolute, links resolved). Returns 0, or -1 with *e
 * naming where it looked and the fix. */
int locate_host(char *prefix, char *lib, struct err *e);

/* profhost's Lua library, for the reports: $PROF_LUA_DIR, else
 * <prefix>/share/profhost/lua, into out[size]. Returns 0, or -1 with *e. */
int locate_lua_dir(char *out, size_t size, struct err *e);

#endif

/*
 * hygiene_app — a target whose own libraries overlap profhost's: it embeds
 * Lua 5.1, uses cJSON, and calls glibc's backtrace(). It prints what each
 * returns; the test compares the output with and without profhost.
 */
#include <cjson/cJSON.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int depth3(void)
{
	void *frames[64];
	char **names;
	int n = backtrace(frames, 64), i, found = 0;

	names = backtrace_symbols(frames, n);
	for (i = 0; names && i < n; i++)
		if (names[i] && strstr(names[i], "hygiene_app"))
			found = 1;
	free(names);
	printf("backtrace: %s\n", n >= 3 && found ? "ok" : "FAILED");
	return n;
}

/* Prints which library the process's global scope resolves `sym` to. */
static void where(const char *sym)
{
	Dl_info info;
	void *p = dlsym(RTLD_DEFAULT, sym);
	const char *lib = "(none)";

	if (p && dladdr(p, &info) && info.dli_fname) {
		lib = strrchr(info.dli_fname, '/');
		lib = lib ? lib + 1 : info.dli_fname;
	}
	printf("%s from: %s\n", sym, lib);
}

int main(void)
{
	lua_State *L = luaL_newstate();
	cJSON *doc;
	char *text;

	luaL_openlibs(L);
	if (luaL_dostring(L, "return _VERSION .. ' ' .. tostring(unpack ~= nil) .. ' ' .. (1/2)"))
		printf("lua error: %s\n", lua_tostring(L, -1));
	else
		printf("lua: %s\n", lua_tostring(L, -1));
	lua_close(L);

	doc = cJSON_Parse("{\"a\": [1, 2.5, \"x\"], \"b\": true}");
	text = cJSON_PrintUnformatted(doc);
	printf("cjson: %s %s\n", cJSON_Version(), text);
	free(text);
	cJSON_Delete(doc);

	depth3();
	where("backtrace");
	where("lua_newstate");
	where("luaL_openlibs");
	where("cJSON_Parse");
	where("unw_backtrace");
	where("deflate");
	return 0;
}

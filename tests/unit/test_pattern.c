/*
 * test_pattern — the policy sandbox's pattern functions (src/policy/
 * pattern.c) against Lua's own: the same results and the same error
 * messages for string.find/match/gmatch/gsub over many generated patterns
 * and subjects (well-formed and malformed), and a pathological pattern
 * that the step check stops.
 */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lauxlib.h>
#include <lualib.h>

#include "check.h"
#include "policy/pattern.h"

/* Runs every pattern function on (s, p, init, repl) and describes all
 * results and errors in one string. */
static const char driver[] =
	"local function ser(ok, ...)\n"
	"  local t = { tostring(ok) }\n"
	"  for i = 1, select('#', ...) do\n"
	"    local v = select(i, ...)\n"
	"    t[#t + 1] = type(v) .. ':' .. tostring(v)\n"
	"  end\n"
	"  return table.concat(t, '|')\n"
	"end\n"
	"local function fn(a, b)\n"
	"  if b ~= nil then return a .. '=' .. tostring(b) end\n"
	"  if #a % 2 == 0 then return a:upper() end\n"
	"  return nil\n"
	"end\n"
	"local tab = { a = 'X', ab = false, b = 1, [''] = 'E' }\n"
	"function run(s, p, init, r)\n"
	"  local out = {}\n"
	"  out[#out + 1] = ser(pcall(string.find, s, p, init))\n"
	"  out[#out + 1] = ser(pcall(string.find, s, p, init, true))\n"
	"  out[#out + 1] = ser(pcall(string.match, s, p, init))\n"
	"  out[#out + 1] = ser(pcall(function()\n"
	"    local acc, n = {}, 0\n"
	"    for a, b in string.gmatch(s, p, init) do\n"
	"      n = n + 1\n"
	"      acc[#acc + 1] = tostring(a) .. ',' .. tostring(b)\n"
	"      if n > 50 then break end\n"
	"    end\n"
	"    return table.concat(acc, ';')\n"
	"  end))\n"
	"  out[#out + 1] = ser(pcall(string.gsub, s, p, r))\n"
	"  out[#out + 1] = ser(pcall(string.gsub, s, p, r, 2))\n"
	"  out[#out + 1] = ser(pcall(string.gsub, s, p, fn))\n"
	"  out[#out + 1] = ser(pcall(string.gsub, s, p, tab))\n"
	"  out[#out + 1] = ser(pcall(function() return (s):find(p) end))\n"
	"  return table.concat(out, '\\n')\n"
	"end\n";

static int checks;

static void count_check(lua_State *L)
{
	(void)L;
	checks++;
}

/* After a few checks, stop the match as the sandbox's budget would. */
static void stop_check(lua_State *L)
{
	if (++checks >= 3)
		luaL_error(L, "stopped by the check");
}

static lua_State *new_state(pattern_check_fn check)
{
	lua_State *L = luaL_newstate();

	if (!L) {
		fprintf(stderr, "cannot create a Lua state\n");
		exit(2);
	}
	luaL_openlibs(L);
	if (check) {
		lua_getglobal(L, "string");
		pattern_install(L, check);
		lua_pop(L, 1);
	}
	if (luaL_dostring(L, driver) != LUA_OK) {
		fprintf(stderr, "driver: %s\n", lua_tostring(L, -1));
		exit(2);
	}
	return L;
}

/* The driver's description of one case (static buffer per state). */
static const char *run(lua_State *L, const char *s, const char *p, int init,
		       const char *r, char *buf, size_t size)
{
	lua_getglobal(L, "run");
	lua_pushstring(L, s);
	lua_pushstring(L, p);
	if (init == INT32_MIN)
		lua_pushnil(L);
	else
		lua_pushinteger(L, init);
	lua_pushstring(L, r);
	if (lua_pcall(L, 4, 1, 0) != LUA_OK)
		snprintf(buf, size, "driver failed: %s", lua_tostring(L, -1));
	else
		snprintf(buf, size, "%s", lua_tostring(L, -1));
	lua_pop(L, 1);
	return buf;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static unsigned next_rand(unsigned n)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (unsigned)(rng % n);
}

/* Pattern pieces: items, repetitions, captures, anchors, and the
 * malformed ones. */
static const char *const pieces[] = {
	"a", "b", "c", "1", " ", ".", "%a", "%d", "%s", "%w", "%A", "%p", "%%",
	"%.", "%x", "%l", "%u", "%c", "%g", "%S", "[abc]", "[^a]", "[a-c]",
	"[%d_]", "[]]", "[^]a]", "[a-]", "[%a%s]", "*", "+", "-", "?", "(", ")",
	"()", "%1", "%2", "%0", "%bab", "%b()", "%f[%w]", "%f[a]", "%f[^%s]",
	"^", "$", "%", "[", "[a", "%b", "%ba", "%f", "%fa", "%9", "[%", "\xe9",
};

static const char subject_chars[] = "aabbc1 2_()[]%.-\xe9";

static const char *const repls[] = { "x", "%0", "%1", "<%1%2>", "%%", "%",
				     "%z", "%9", "", "a%0b" };

static void random_case(char *s, size_t ssize, char *p, size_t psize)
{
	unsigned n = next_rand(13), i, k = 0;

	for (i = 0; i < n && i + 1 < ssize; i++)
		s[i] = subject_chars[next_rand(sizeof subject_chars - 1)];
	s[i] = '\0';
	p[0] = '\0';
	n = 1 + next_rand(7);
	for (i = 0; i < n; i++) {
		const char *piece = pieces[next_rand(sizeof pieces / sizeof pieces[0])];

		if (k + strlen(piece) + 1 >= psize)
			break;
		strcpy(p + k, piece);
		k += strlen(piece);
	}
}

static void test_same_as_lua(void)
{
	static const int inits[] = { INT32_MIN, 1, 2, -1, -3, 0, 5, 20, -100 };
	lua_State *ref = new_state(NULL), *ours = new_state(count_check);
	static char a[65536], b[65536];
	char s[32], p[64];
	int i, differ = 0;

	for (i = 0; i < 60000; i++) {
		int init = inits[next_rand(sizeof inits / sizeof inits[0])];
		const char *r = repls[next_rand(sizeof repls / sizeof repls[0])];

		random_case(s, sizeof s, p, sizeof p);
		run(ref, s, p, init, r, a, sizeof a);
		run(ours, s, p, init, r, b, sizeof b);
		if (strcmp(a, b) != 0 && differ++ < 5)
			fprintf(stderr, "differs: s=\"%s\" p=\"%s\" init=%d r=\"%s\"\n"
				"  lua:  %s\n  ours: %s\n", s, p, init, r, a, b);
	}
	CHECK_EQ_INT(differ, 0);

	/* Fixed cases: the nesting limit, many captures, long subjects. */
	{
		static const char *const fixed[][2] = {
			{ "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
			  "a?a?a?a?a?a?a?a?a?a?a?a?a?a?a?a?a?a?a?a?a?a?a?a?a?a?" },
			{ "abcabcabcabcabcabcabcabcabcabcabcabc",
			  "(a)(b)(c)(a)(b)(c)(a)(b)(c)(a)(b)(c)(a)(b)(c)(a)(b)(c)"
			  "(a)(b)(c)(a)(b)(c)(a)(b)(c)(a)(b)(c)(a)(b)(c)" },
			{ "key = value, other=thing", "(%w+)%s*=%s*(%w+)" },
			{ "THE (quick) fox", "%f[%a]%a+" },
			{ "x = [[a]] y", "%[(=*)%[(.-)%]%1%]" },
			{ "hello world from Lua", "^(%w+)" },
			{ "  trim  ", "^%s*(.-)%s*$" },
		};
		size_t k;

		for (k = 0; k < sizeof fixed / sizeof fixed[0]; k++) {
			run(ref, fixed[k][0], fixed[k][1], INT32_MIN, "%1", a, sizeof a);
			run(ours, fixed[k][0], fixed[k][1], INT32_MIN, "%1", b, sizeof b);
			CHECK_EQ_STR(b, a);
		}
	}
	/* A pattern 250 '?' deep is "too complex" in both; a long subject
	 * takes enough steps to reach the check. */
	{
		char deep[600], subject[400];

		memset(deep, 0, sizeof deep);
		for (i = 0; i < 250; i++)
			strcat(deep, "a?");
		memset(subject, 'a', 300);
		subject[300] = '\0';
		run(ref, subject, deep, INT32_MIN, "x", a, sizeof a);
		run(ours, subject, deep, INT32_MIN, "x", b, sizeof b);
		CHECK_EQ_STR(b, a);
		CHECK(strstr(b, "pattern too complex") != NULL);
		checks = 0;
		run(ref, subject, "(a*)*b", INT32_MIN, "x", a, sizeof a);
		run(ours, subject, "(a*)*b", INT32_MIN, "x", b, sizeof b);
		CHECK_EQ_STR(b, a);
		CHECK(checks > 0); /* the check ran */
	}
	lua_close(ref);
	lua_close(ours);
}

/* string.rep("a", 1500):find(".-.-.-b") takes minutes in Lua's matcher;
 * here the check stops it after a few thousand steps. */
static void test_check_stops_a_runaway_match(void)
{
	lua_State *L = new_state(stop_check);
	struct timespec t0, t1;
	double ms;
	int rc;

	checks = 0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	rc = luaL_dostring(L, "return string.rep('a', 1500):find('.-.-.-b')");
	clock_gettime(CLOCK_MONOTONIC, &t1);
	ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
	CHECK(rc != LUA_OK);
	CHECK(strstr(lua_tostring(L, -1), "stopped by the check") != NULL);
	CHECK_EQ_INT(checks, 3);
	CHECK(ms < 1000);
	lua_pop(L, 1);

	/* gsub, gmatch and match are stopped too */
	checks = 0;
	CHECK(luaL_dostring(L, "return (string.rep('a', 1500):gsub('.-.-.-b', ''))") != LUA_OK);
	CHECK_EQ_INT(checks, 3);
	lua_pop(L, 1);
	checks = 0;
	CHECK(luaL_dostring(L, "for x in string.rep('a', 1500):gmatch('.-.-.-b') do end") != LUA_OK);
	CHECK_EQ_INT(checks, 3);
	lua_pop(L, 1);
	checks = 0;
	CHECK(luaL_dostring(L, "return string.rep('a', 1500):match('.-.-.-b')") != LUA_OK);
	CHECK_EQ_INT(checks, 3);
	lua_pop(L, 1);
	lua_close(L);
}

int main(void)
{
	test_same_as_lua();
	test_check_stops_a_runaway_match();
	return check_done();
}

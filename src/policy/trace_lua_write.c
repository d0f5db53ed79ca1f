/* trace_lua_write — the trace object's writers (see trace_lua_internal.h):
 * trace:write, write_json and write_table, which only write under the
 * window's directory (outdir_resolve: relative paths without "..", no
 * symbolic link on the way), each file created through the descriptor of
 * the directory that holds it and appearing atomically (outfile). */
#include <stdio.h>
#include <string.h>

#include <lauxlib.h>

#include "../common/err.h"
#include "../export/outdir.h"
#include "../export/outfile.h"
#include "trace_lua_internal.h"

/* Opens tl's window directory as *base: the host's open descriptor when it
 * gave one, else tl->dir by its path. Raises on failure. */
static void open_base(lua_State *L, const struct trace_lua *tl, const char *fn,
		      struct outdir *base)
{
	struct err e;

	if (!tl->dir)
		luaL_error(L, "%s: this trace has no output directory to write into", fn);
	if (tl->out) {
		*base = *tl->out;
		return;
	}
	if (outdir_open(tl->dir, base, &e) != 0)
		luaL_error(L, "%s: %s", fn, e.msg);
}

/* Resolves `rel` under the window directory (outdir_resolve: no way out,
 * no symbolic link followed, directories made) into *d and *leaf. Raises
 * on a bad path. */
static void resolve(lua_State *L, const struct trace_lua *tl, const char *fn,
		    const char *rel, size_t len, struct outdir *d, const char **leaf)
{
	struct outdir base;
	struct err e;
	int rc;

	open_base(L, tl, fn, &base);
	rc = outdir_resolve(&base, rel, len, d, leaf, &e);
	if (!tl->out)
		outdir_close(&base);
	if (rc != 0)
		luaL_error(L, "%s: %s", fn, e.msg);
}

/* Checks `rel` and makes its directories under the window directory, so
 * a bad path fails before any work; pushes the full path. Raises on a bad
 * path. */
static const char *resolve_out(lua_State *L, const struct trace_lua *tl, const char *fn,
			       const char *rel, size_t len)
{
	struct outdir d;
	const char *leaf;

	resolve(L, tl, fn, rel, len, &d, &leaf);
	outdir_close(&d);
	return lua_pushfstring(L, "%s/%s", tl->dir, rel);
}

/* Writes `text` to `rel` under the window directory atomically, through
 * the descriptor of the directory that holds it (never reopened by name);
 * raises on failure. */
static void write_file(lua_State *L, const struct trace_lua *tl, const char *fn,
		       const char *rel, size_t rlen, const char *text, size_t len)
{
	struct err e;
	struct outdir d;
	const char *leaf;
	struct outfile *f;

	resolve(L, tl, fn, rel, rlen, &d, &leaf);
	f = outfile_openat(&d, leaf, false, &e);
	outdir_close(&d); /* the outfile holds its own descriptor */
	if (!f)
		luaL_error(L, "%s: %s", fn, e.msg);
	if (outfile_write(f, text, len) != 0) {
		outfile_error(f, &e);
		outfile_abort(f);
		luaL_error(L, "%s: %s", fn, e.msg);
	}
	if (outfile_commit(f, &e) != 0)
		luaL_error(L, "%s: %s", fn, e.msg);
}

/* Argument `idx` of a writer, a string (`what` describes it), or raises
 * naming it and what was given. */
static const char *arg_string(lua_State *L, int idx, const char *fn,
			      const char *name, const char *what, size_t *len)
{
	if (lua_type(L, idx) != LUA_TSTRING) {
		char expected[96];

		snprintf(expected, sizeof expected, "a string (%s)", what);
		trace_lua_bad_option(L, fn, name, idx, expected);
	}
	return lua_tolstring(L, idx, len);
}

/* trace:write(path, text) -> the full path written. */
int trace_lua_write(lua_State *L)
{
	struct trace_lua *tl = trace_lua_check(L);
	size_t plen, tlen;
	const char *rel = arg_string(L, 2, "trace:write", "path",
				     "a file name in the window directory", &plen);
	const char *text = arg_string(L, 3, "trace:write", "text", "the file's contents",
				      &tlen);

	write_file(L, tl, "trace:write", rel, plen, text, tlen);
	lua_pushfstring(L, "%s/%s", tl->dir, rel);
	return 1;
}

/* trace:write_json(path, value) -> the full path written (encoded by
 * prof.json). */
int trace_lua_write_json(lua_State *L)
{
	struct trace_lua *tl = trace_lua_check(L);
	size_t plen, tlen;
	const char *rel = arg_string(L, 2, "trace:write_json", "path",
				     "a file name in the window directory", &plen);
	const char *text;

	lua_settop(L, 3);
	resolve_out(L, tl, "trace:write_json", rel, plen); /* 4 */
	lua_getglobal(L, "require");
	lua_pushliteral(L, "prof.json");
	lua_call(L, 1, 1);
	lua_getfield(L, -1, "encode");
	lua_pushvalue(L, 3);
	lua_call(L, 1, 1);
	text = lua_tolstring(L, -1, &tlen);
	if (!text)
		return luaL_error(L, "trace:write_json: prof.json.encode returned no string");
	write_file(L, tl, "trace:write_json", rel, plen, text, tlen);
	lua_pushvalue(L, 4);
	return 1;
}

/* The text of one table cell (pushed). */
static void push_cell(lua_State *L, int v)
{
	switch (lua_type(L, v)) {
	case LUA_TNIL:
		lua_pushliteral(L, "");
		break;
	case LUA_TNUMBER:
		if (lua_isinteger(L, v))
			lua_pushfstring(L, "%I", (LUAI_UACINT)lua_tointeger(L, v));
		else {
			char buf[64];

			snprintf(buf, sizeof buf, "%.3f", lua_tonumber(L, v));
			lua_pushstring(L, buf);
		}
		break;
	case LUA_TSTRING:
		lua_pushvalue(L, v);
		break;
	case LUA_TBOOLEAN:
		lua_pushstring(L, lua_toboolean(L, v) ? "true" : "false");
		break;
	default:
		lua_pushstring(L, luaL_typename(L, v));
	}
}

/* write_table's layout: stack indices and sizes. */
struct table_layout {
	int rows;              /* the list of rows (arg 3) */
	int cols;              /* the list of column names (arg 4) */
	int cells;             /* (nrows + 1) * ncols strings, the header first */
	lua_Integer nrows, ncols;
	size_t *width;         /* per column: its widest cell, in bytes */
};

/* Pushes the union of the string keys of the rows in the list at `rows`,
 * sorted (table.sort): write_table's columns when none are given. */
static void push_row_keys(lua_State *L, int rows)
{
	lua_Integer nrows = (lua_Integer)lua_rawlen(L, rows), i;

	lua_newtable(L); /* set */
	for (i = 1; i <= nrows; i++) {
		if (lua_rawgeti(L, rows, i) == LUA_TTABLE) {
			lua_pushnil(L);
			while (lua_next(L, -2)) {
				lua_pop(L, 1);
				if (lua_type(L, -1) == LUA_TSTRING) {
					lua_pushvalue(L, -1);
					lua_pushboolean(L, 1);
					lua_rawset(L, -5);
				}
			}
		}
		lua_pop(L, 1);
	}
	lua_newtable(L);
	lua_pushnil(L);
	while (lua_next(L, -3)) {
		lua_pop(L, 1);
		lua_pushvalue(L, -1);
		lua_rawseti(L, -3, (lua_Integer)lua_rawlen(L, -3) + 1);
	}
	lua_getglobal(L, "table");
	lua_getfield(L, -1, "sort");
	lua_pushvalue(L, -3);
	lua_call(L, 1, 0);
	lua_pop(L, 1);
	lua_remove(L, -2); /* the set */
}

/* Puts write_table's columns at index 4 (the stack holds its 4
 * arguments): the list given there, else rows.columns, else the rows'
 * keys in alphabetical order. */
static void table_columns(lua_State *L)
{
	if (lua_istable(L, 4))
		return;
	if (lua_getfield(L, 3, "columns") != LUA_TTABLE) {
		lua_pop(L, 1);
		push_row_keys(L, 3);
	}
	lua_replace(L, 4);
}

/* Stores the text of the value on top (popped) as cell `at` of the
 * table, widening column `c` (1-based) to fit it. */
static void set_cell(lua_State *L, const struct table_layout *t, lua_Integer at,
		     lua_Integer c)
{
	size_t w;

	push_cell(L, lua_gettop(L));
	lua_tolstring(L, -1, &w);
	if (w > t->width[c - 1])
		t->width[c - 1] = w;
	lua_rawseti(L, t->cells, at);
	lua_pop(L, 1);
}

/* Fills the cells: the column names, then each row's value of each
 * column (nothing for a row that is not a table), and the widths. */
static void fill_cells(lua_State *L, const struct table_layout *t)
{
	lua_Integer i, c;

	for (c = 1; c <= t->ncols; c++) {
		t->width[c - 1] = 0;
		lua_rawgeti(L, t->cols, c);
		set_cell(L, t, c, c);
	}
	for (i = 1; i <= t->nrows; i++) {
		int rt = lua_rawgeti(L, t->rows, i);

		for (c = 1; c <= t->ncols; c++) {
			if (rt == LUA_TTABLE) {
				lua_rawgeti(L, t->cols, c);
				lua_gettable(L, -2);
			} else {
				lua_pushnil(L);
			}
			set_cell(L, t, i * t->ncols + c, c);
		}
		lua_pop(L, 1);
	}
}

/* One cell's text as the layout adds it. */
struct cell {
	const char *s;
	size_t len;
	bool right;            /* a number in a row: right-aligned */
};

/* Adds line `cells` (ncols of them) to *b: each cell padded to its
 * column's width (numbers on the left, the rest on the right but the
 * last), two spaces between columns. */
static void add_line(luaL_Buffer *b, const struct table_layout *t,
		     const struct cell *cells)
{
	lua_Integer c;
	size_t k;

	for (c = 1; c <= t->ncols; c++) {
		const struct cell *x = &cells[c - 1];

		if (x->right)
			for (k = x->len; k < t->width[c - 1]; k++)
				luaL_addchar(b, ' ');
		luaL_addlstring(b, x->s, x->len);
		if (!x->right && c < t->ncols)
			for (k = x->len; k < t->width[c - 1]; k++)
				luaL_addchar(b, ' ');
		if (c < t->ncols)
			luaL_addstring(b, "  ");
	}
	luaL_addchar(b, '\n');
}

/* Adds the rule under the header to *b: dashes as wide as each column. */
static void add_rule(luaL_Buffer *b, const struct table_layout *t)
{
	lua_Integer c;
	size_t k;

	for (c = 1; c <= t->ncols; c++) {
		for (k = 0; k < t->width[c - 1]; k++)
			luaL_addchar(b, '-');
		if (c < t->ncols)
			luaL_addstring(b, "  ");
	}
	luaL_addchar(b, '\n');
}

/* Pushes the table's text: the header, a rule, the rows. */
static void push_table_text(lua_State *L, const struct table_layout *t)
{
	size_t ncell = (size_t)((t->nrows + 1) * t->ncols), at;
	struct cell *cells = lua_newuserdatauv(L, ncell * sizeof *cells, 0);
	lua_Integer i;
	luaL_Buffer b;

	/* the cells' strings stay alive in t->cells; take pointers to them
	 * now, since a luaL_Buffer owns the top of the stack */
	for (at = 0; at < ncell; at++) {
		lua_rawgeti(L, t->cells, (lua_Integer)at + 1);
		cells[at].s = lua_tolstring(L, -1, &cells[at].len);
		/* numbers right-aligned, the header left */
		cells[at].right = at >= (size_t)t->ncols && lua_isnumber(L, -1);
		lua_pop(L, 1);
	}
	luaL_buffinit(L, &b);
	for (i = 0; i <= t->nrows; i++) {
		add_line(&b, t, &cells[i * t->ncols]);
		if (i == 0)
			add_rule(&b, t);
	}
	luaL_pushresult(&b);
}

/* trace:write_table(path, rows [, columns]) -> the full path written.
 * Columns: the third argument, else rows.columns, else the rows' keys in
 * alphabetical order. */
int trace_lua_write_table(lua_State *L)
{
	struct trace_lua *tl = trace_lua_check(L);
	size_t plen, tlen;
	const char *rel = arg_string(L, 2, "trace:write_table", "path",
				     "a file name in the window directory", &plen);
	struct table_layout t = { .rows = 3, .cols = 4 };
	const char *text;

	if (!lua_istable(L, 3))
		return trace_lua_bad_option(L, "trace:write_table", "rows", 3,
					    "a list of rows (tables)");
	if (!lua_isnoneornil(L, 4) && !lua_istable(L, 4))
		return trace_lua_bad_option(L, "trace:write_table", "columns", 4,
					    "a list of column names");
	lua_settop(L, 4);
	table_columns(L);
	t.nrows = (lua_Integer)lua_rawlen(L, t.rows);
	t.ncols = (lua_Integer)lua_rawlen(L, t.cols);
	if (t.ncols == 0)
		return luaL_error(L, "trace:write_table: no columns (give rows with keys, or a list of column names)");
	resolve_out(L, tl, "trace:write_table", rel, plen); /* 5 */
	lua_createtable(L, (int)((t.nrows + 1) * t.ncols), 0);
	t.cells = lua_gettop(L);
	t.width = lua_newuserdatauv(L, (size_t)t.ncols * sizeof *t.width, 0);
	fill_cells(L, &t);
	push_table_text(L, &t);
	text = lua_tolstring(L, -1, &tlen);
	write_file(L, tl, "trace:write_table", rel, plen, text, tlen);
	lua_pushvalue(L, 5);
	return 1;
}

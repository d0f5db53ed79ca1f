/* stacks — stacks.txt and cpu_functions.txt (see stacks.h). */
#include "stacks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/grow.h"
#include "../common/hash.h"
#include "../util/htab.h"

/* A growable byte buffer; `failed` is sticky. */
struct buf {
	char *p;
	size_t n, cap;
	int failed;
};

/* Appends n bytes, keeping the buffer NUL-ended. */
static void buf_put(struct buf *b, const char *s, size_t n)
{
	char *p;

	if (b->failed)
		return;
	p = grow_array(b->p, &b->cap, b->n + n + 1, 1, 1024);
	if (!p) {
		b->failed = 1;
		return;
	}
	b->p = p;
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = '\0';
}

/* Appends a name as one folded field: ';' -> ':', controls -> '?'. */
static void buf_field(struct buf *b, const char *s, size_t n)
{
	size_t i, start = b->n;

	buf_put(b, s, n);
	if (b->failed)
		return;
	for (i = start; i < b->n; i++) {
		if (b->p[i] == ';')
			b->p[i] = ':';
		else if ((unsigned char)b->p[i] < 0x20 || b->p[i] == 0x7f)
			b->p[i] = '?';
	}
}

/* Appends the stack's frames, outermost first. */
static void buf_stack(struct buf *b, const struct trace *t,
		      const struct trace_stack *s)
{
	size_t n;

	if (s->folded != STRTAB_NONE) {
		buf_put(b, trace_str(t, s->folded), strtab_len(&t->names, s->folded));
		return;
	}
	n = trace_stack_fold(t, s, NULL, 0);
	buf_put(b, "", 0);
	if (b->failed)
		return;
	if (b->n + n + 1 > b->cap) {
		char *p = realloc(b->p, b->n + n + 1);

		if (!p) {
			b->failed = 1;
			return;
		}
		b->p = p;
		b->cap = b->n + n + 1;
	}
	trace_stack_fold(t, s, b->p + b->n, n + 1);
	b->n += n;
}

/* The name of thread `tid` (its strtab id), or STRTAB_NONE. `last` caches
 * the previous answer's index. */
static uint32_t thread_name(const struct trace *t, int32_t tid, size_t *last)
{
	size_t i;

	if (*last < t->nthreads && t->threads[*last].tid == tid)
		return t->threads[*last].name;
	for (i = 0; i < t->nthreads; i++)
		if (t->threads[i].tid == tid) {
			*last = i;
			return t->threads[i].name;
		}
	return STRTAB_NONE;
}

/* Appends the thread's folded root frame. */
static void buf_thread(struct buf *b, const struct trace *t, int32_t tid,
		       size_t *last)
{
	uint32_t name = thread_name(t, tid, last);
	char tmp[32];

	if (name != STRTAB_NONE && strtab_len(&t->names, name) > 0) {
		buf_field(b, trace_str(t, name), strtab_len(&t->names, name));
	} else {
		int n = snprintf(tmp, sizeof tmp, "[tid %d]", (int)tid);
		buf_put(b, tmp, (size_t)n);
	}
}

/* FNV-1a of n bytes at s. */
static uint64_t hash_bytes(const char *s, size_t n)
{
	return hash_fnv64(HASH_FNV64_SEED, s, n);
}

/* ------------------------------------------------------------ stacks.txt */

struct line {
	char *text;
	size_t len;
	uint64_t count;
};

struct lines {
	struct line *v;
	size_t n, cap;     /* cap: power of two (open addressing) */
};

/* Counts one occurrence of text[len]. 0 or -1 (out of memory). */
static int lines_add(struct lines *ls, const char *text, size_t len)
{
	size_t k, i;

	if (htab_full(ls->n, ls->cap)) {
		size_t cap = ls->cap ? ls->cap * 2 : 256;
		struct line *v = calloc(cap, sizeof *v);

		if (!v)
			return -1;
		for (i = 0; i < ls->cap; i++) {
			if (!ls->v[i].text)
				continue;
			for (k = htab_first(hash_bytes(ls->v[i].text, ls->v[i].len), cap);
			     v[k].text; k = htab_next(k, cap))
				;
			v[k] = ls->v[i];
		}
		free(ls->v);
		ls->v = v;
		ls->cap = cap;
	}
	for (k = htab_first(hash_bytes(text, len), ls->cap); ls->v[k].text;
	     k = htab_next(k, ls->cap)) {
		if (ls->v[k].len == len && memcmp(ls->v[k].text, text, len) == 0) {
			ls->v[k].count++;
			return 0;
		}
	}
	ls->v[k].text = malloc(len + 1);
	if (!ls->v[k].text)
		return -1;
	memcpy(ls->v[k].text, text, len + 1);
	ls->v[k].len = len;
	ls->v[k].count = 1;
	ls->n++;
	return 0;
}

/* Most samples first, then by text. */
static int line_cmp(const void *pa, const void *pb)
{
	const struct line *a = pa, *b = pb;

	if (a->count != b->count)
		return a->count > b->count ? -1 : 1;
	return strcmp(a->text, b->text);
}

int stacks_write_folded(const struct trace *t, struct outfile *out,
			struct err *e)
{
	struct lines ls = { 0 };
	struct buf b = { 0 };
	size_t i, k, last = 0;
	int rc = 0;

	for (i = 0; i < t->nstacks && rc == 0; i++) {
		const struct trace_stack *s = &t->stacks[i];

		if (s->kind != TRACE_STACK_SAMPLE || s->depth == 0)
			continue;
		b.n = 0;
		buf_thread(&b, t, s->tid, &last);
		if (s->flags & TRACE_STACK_TRUNCATED)
			buf_put(&b, ";[truncated]", 12);
		buf_put(&b, ";", 1);
		buf_stack(&b, t, s);
		if (b.failed || lines_add(&ls, b.p, b.n) != 0)
			rc = err_set(e, "out of memory writing stacks.txt");
	}
	/* Compact the hash into a sorted list. */
	for (i = k = 0; i < ls.cap; i++)
		if (ls.v[i].text)
			ls.v[k++] = ls.v[i];
	if (k)
		qsort(ls.v, k, sizeof *ls.v, line_cmp);
	for (i = 0; i < k && rc == 0; i++)
		if (outfile_write(out, ls.v[i].text, ls.v[i].len) != 0 ||
		    outfile_printf(out, " %llu\n", (unsigned long long)ls.v[i].count) != 0) {
			if (outfile_error(out, e) == 0)
				err_set(e, "cannot write stacks.txt");
			rc = -1;
		}
	for (i = 0; i < k; i++)
		free(ls.v[i].text);
	free(ls.v);
	free(b.p);
	return rc;
}

/* ------------------------------------------------------------ read back */

/* The id of `text` with each of its ';'-separated fields that is a mangled
 * C++ name demangled and shortened; `id` itself when none is. */
static uint32_t demangle_fields(struct trace *t, uint32_t id, demangle_fn fn,
				struct buf *b)
{
	const char *p = trace_str(t, id), *end = p + strtab_len(&t->names, id);
	char name[1024], field[1024];
	bool changed = false;
	size_t n;

	if (!memmem(p, (size_t)(end - p), "_Z", 2))
		return id;
	b->n = 0;
	buf_put(b, "", 0);
	while (p <= end) {
		const char *semi = memchr(p, ';', (size_t)(end - p));

		n = (size_t)((semi ? semi : end) - p);
		snprintf(field, sizeof field, "%.*s", (int)n, p);
		if (n < sizeof field && demangle_frame(fn, field, name, sizeof name)) {
			buf_field(b, name, strlen(name));
			changed = true;
		} else {
			buf_put(b, p, n);
		}
		if (!semi)
			break;
		buf_put(b, ";", 1);
		p = semi + 1;
	}
	if (!changed || b->failed)
		return b->failed ? STRTAB_NONE : id;
	return trace_intern(t, b->p, b->n);
}

int stacks_demangle_names(struct trace *t, demangle_fn fn)
{
	uint32_t key = trace_intern(t, TRACE_ARG_STACK, strlen(TRACE_ARG_STACK));
	struct buf b = { 0 };
	size_t i, k;

	if (!fn)
		return 0;
	for (i = 0; i < t->nev && !t->oom; i++) {
		struct trace_event *e = &t->ev[i];
		uint32_t id;

		if (e->cat == TRACE_CAT_SAMPLE &&
		    (id = demangle_fields(t, e->name, fn, &b)) != STRTAB_NONE)
			e->name = id;
		for (k = 0; k < e->nargs && !t->oom; k++) {
			struct trace_arg *a = &t->args[e->args + k];

			if (a->key == key && a->type == TRACE_ARG_STR &&
			    (id = demangle_fields(t, a->v.str, fn, &b)) != STRTAB_NONE)
				a->v.str = id;
		}
		if (b.failed)
			t->oom = 1;
	}
	free(b.p);
	return t->oom ? -1 : 0;
}

/* ------------------------------------------------------------ functions */

uint32_t stacks_given_hz(const struct trace *t, uint64_t *samples)
{
	uint64_t periods = 0;
	size_t i;

	*samples = 0;
	for (i = 0; i < t->nstacks; i++)
		if (t->stacks[i].kind == TRACE_STACK_SAMPLE && t->stacks[i].depth) {
			(*samples)++;
			periods += t->stacks[i].weight;
		}
	if (!periods)
		return 0;
	return (uint32_t)((double)t->sampling.hz * (double)*samples / (double)periods + 0.5);
}

/* One line of a Python function and the samples it was on. */
struct func_line {
	uint32_t line;
	uint64_t n;
	size_t last;          /* last sample counted, + 1 */
};

struct func {
	int used;
	uint32_t frame;      /* a frame of it, for its name */
	const char *name;    /* its name: a frame's without the line, or NULL
				(an unnamed frame: one row per frame) */
	size_t len;
	uint32_t module;
	uint64_t self_n, total_n, self_w, total_w;
	size_t last;         /* last sample counted in total, + 1 */
	struct func_line *lines; /* Python functions: the lines seen */
	size_t nlines;
};

struct funcs {
	struct func *v;
	size_t n, cap;
};

/* The line of a Python frame's name, "function (file:line)": sets *len to
 * the length of the name before ":line" and returns the line; returns 0
 * (and the whole length) for any other name. */
static uint32_t python_line(const char *name, size_t *len)
{
	size_t n = *len, k = n;
	uint32_t line = 0, scale = 1;

	if (n < 4 || name[n - 1] != ')')
		return 0;
	for (k = n - 1; k > 0 && name[k - 1] >= '0' && name[k - 1] <= '9' &&
	     scale < 1000000000u; k--) {
		line += (uint32_t)(name[k - 1] - '0') * scale;
		scale *= 10;
	}
	if (k == n - 1 || k < 2 || name[k - 1] != ':')
		return 0;
	*len = k - 1;
	return line;
}

/* What makes a function one row: its name (a Python frame's without its
 * line) and module; an unnamed frame is a row of its own. */
static uint64_t func_hash(const struct trace *t, uint32_t frame,
			  const char **name, size_t *len, uint32_t *line)
{
	const struct trace_frame *f = &t->frames[frame];

	*line = 0;
	if (f->name == STRTAB_NONE) {
		*name = NULL;
		*len = 0;
		return hash_bytes((const char *)&frame, sizeof frame) ^ 1;
	}
	*name = trace_str(t, f->name);
	*len = strtab_len(&t->names, f->name);
	if (f->module != STRTAB_NONE && strcmp(trace_str(t, f->module), "python") == 0)
		*line = python_line(*name, len);
	return hash_bytes(*name, *len) ^ ((uint64_t)f->module * HASH_FNV64_PRIME);
}

/* True when entry `fn` is the function of (name, len, module), or of the
 * unnamed `frame`. */
static bool func_is(const struct func *fn, const char *name, size_t len,
		    uint32_t module, uint32_t frame)
{
	if (!name)
		return !fn->name && fn->frame == frame;
	return fn->name && fn->len == len && fn->module == module &&
	       memcmp(fn->name, name, len) == 0;
}

/* The function entry for `frame`, added if new; NULL when out of memory.
 * Sets *line to the frame's Python line (0: none). */
static struct func *funcs_get(struct funcs *fs, const struct trace *t,
			      uint32_t frame, uint32_t *line)
{
	const char *name;
	size_t len, k, i;
	uint32_t module = t->frames[frame].module;
	uint64_t h = func_hash(t, frame, &name, &len, line);

	if (htab_full(fs->n, fs->cap)) {
		size_t cap = fs->cap ? fs->cap * 2 : 256;
		struct func *v = calloc(cap, sizeof *v);

		if (!v)
			return NULL;
		for (i = 0; i < fs->cap; i++) {
			const char *n2;
			size_t l2;
			uint32_t ln;

			if (!fs->v[i].used)
				continue;
			for (k = htab_first(func_hash(t, fs->v[i].frame, &n2, &l2, &ln), cap);
			     v[k].used; k = htab_next(k, cap))
				;
			v[k] = fs->v[i];
		}
		free(fs->v);
		fs->v = v;
		fs->cap = cap;
	}
	for (k = htab_first(h, fs->cap);
	     fs->v[k].used && !func_is(&fs->v[k], name, len, module, frame);
	     k = htab_next(k, fs->cap))
		;
	if (!fs->v[k].used) {
		fs->v[k].used = 1;
		fs->v[k].frame = frame;
		fs->v[k].name = name;
		fs->v[k].len = len;
		fs->v[k].module = module;
		fs->n++;
	}
	return &fs->v[k];
}

/* Counts sample `sample` (+ 1) on line `line` of Python function `fn`,
 * once per sample. 0 or -1 (out of memory). */
static int func_count_line(struct func *fn, uint32_t line, size_t sample)
{
	struct func_line *l;
	size_t i;

	for (i = 0; i < fn->nlines && fn->lines[i].line != line; i++)
		;
	if (i == fn->nlines) {
		l = realloc(fn->lines, (fn->nlines + 1) * sizeof *l);
		if (!l)
			return -1;
		fn->lines = l;
		memset(&l[i], 0, sizeof *l);
		l[i].line = line;
		fn->nlines++;
	}
	if (fn->lines[i].last != sample) {
		fn->lines[i].last = sample;
		fn->lines[i].n++;
	}
	return 0;
}

/* Most self samples first, then most total, then frame order. */
static int func_cmp(const void *pa, const void *pb)
{
	const struct func *a = pa, *b = pb;

	if (a->self_n != b->self_n)
		return a->self_n > b->self_n ? -1 : 1;
	if (a->total_n != b->total_n)
		return a->total_n > b->total_n ? -1 : 1;
	return a->frame < b->frame ? -1 : a->frame > b->frame;
}

/* Most samples first, then by line. */
static int line_cmp_n(const void *pa, const void *pb)
{
	const struct func_line *a = pa, *b = pb;

	if (a->n != b->n)
		return a->n > b->n ? -1 : 1;
	return a->line < b->line ? -1 : a->line > b->line;
}

#define FUNC_LINES_SHOWN 8 /* lines listed after a Python function */

/* Writes one function's name (and module; a Python function's lines, with
 * the samples on each, most first) as text. */
static int put_func_name(struct outfile *out, const struct trace *t,
			 struct func *f)
{
	size_t i;

	if (!f->name)
		return outfile_printf(out, "0x%llx\n",
				      (unsigned long long)t->frames[f->frame].pc);
	if (outfile_write(out, f->name, f->len) ||
	    (f->nlines && outfile_puts(out, ")")))
		return -1;
	if (f->module != STRTAB_NONE &&
	    outfile_printf(out, "  [%s]", trace_str(t, f->module)))
		return -1;
	if (f->nlines) {
		qsort(f->lines, f->nlines, sizeof *f->lines, line_cmp_n);
		outfile_puts(out, "  lines");
		for (i = 0; i < f->nlines && i < FUNC_LINES_SHOWN; i++)
			outfile_printf(out, "%s %u (%llu)", i ? "," : "", f->lines[i].line,
				       (unsigned long long)f->lines[i].n);
		if (f->nlines > FUNC_LINES_SHOWN)
			outfile_printf(out, ", %zu more", f->nlines - FUNC_LINES_SHOWN);
	}
	return outfile_puts(out, "\n");
}

int stacks_write_functions(const struct trace *t, struct outfile *out,
			   struct err *e)
{
	struct funcs fs = { 0 };
	uint64_t samples = 0, weight = 0;
	double period_ms = (double)t->sampling.period_ns / 1e6, pct;
	const char *unit = t->sampling.wall_clock ? "Wall" : "CPU";
	size_t i, j, k;
	int rc = 0, oom = 0;

	for (i = 0; i < t->nstacks && rc == 0; i++) {
		const struct trace_stack *s = &t->stacks[i];

		if (s->kind != TRACE_STACK_SAMPLE || s->depth == 0)
			continue;
		samples++;
		weight += s->weight;
		for (j = 0; j < s->depth; j++) {
			uint32_t line;
			struct func *f = funcs_get(&fs, t, t->stack_frames[s->first + j],
						   &line);

			if (!f || (line && func_count_line(f, line, i + 1) != 0)) {
				oom = 1;
				rc = err_set(e, "out of memory writing cpu_functions.txt");
				break;
			}
			if (j == 0) {
				f->self_n++;
				f->self_w += s->weight;
			}
			if (f->last != i + 1) {
				f->last = i + 1;
				f->total_n++;
				f->total_w += s->weight;
			}
		}
	}
	for (i = k = 0; i < fs.cap; i++)
		if (fs.v[i].used)
			fs.v[k++] = fs.v[i];
	if (k)
		qsort(fs.v, k, sizeof *fs.v, func_cmp);
	pct = samples ? 100.0 / (double)samples : 0;
	if (rc == 0) {
		uint64_t n;
		uint32_t given = stacks_given_hz(t, &n);

		outfile_printf(out, "# CPU samples of window %u (steps %llu-%llu): %llu "
			       "samples, %s clock, %u Hz asked, %u Hz given, %.3f ms "
			       "per timer period, %.1f %s ms in all\n",
			       t->meta.window, (unsigned long long)t->meta.first_step,
			       (unsigned long long)t->meta.last_step,
			       (unsigned long long)samples,
			       t->sampling.wall_clock ? "wall" : "CPU-time",
			       t->sampling.hz, given, period_ms,
			       (double)weight * period_ms, unit);
		outfile_puts(out, "# self: the function was running; total: it was "
			     "on the stack. ms = samples x timer periods "
			     "(1 + overruns) x period.\n");
		outfile_printf(out, "%8s %7s %11s %8s %7s %11s  %s\n", "Self", "Self %",
			       t->sampling.wall_clock ? "Self wall" : "Self CPU",
			       "Total", "Total %",
			       t->sampling.wall_clock ? "Total wall" : "Total CPU",
			       "Function  [module]");
	}
	for (i = 0; i < k && rc == 0; i++) {
		struct func *f = &fs.v[i];

		if (outfile_printf(out, "%8llu %6.2f%% %8.3f ms %8llu %6.2f%% %8.3f ms  ",
				   (unsigned long long)f->self_n, (double)f->self_n * pct,
				   (double)f->self_w * period_ms,
				   (unsigned long long)f->total_n, (double)f->total_n * pct,
				   (double)f->total_w * period_ms) != 0 ||
		    put_func_name(out, t, f) != 0)
			rc = -1;
	}
	if (!oom && outfile_error(out, e) != 0)
		rc = -1;
	else if (!oom && rc != 0)
		err_set(e, "cannot write cpu_functions.txt");
	for (i = 0; i < k; i++)
		free(fs.v[i].lines);
	free(fs.v);
	return rc;
}

/* stacks — stacks.txt and cpu_functions.txt (see stacks.h). */
#include "stacks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A growable byte buffer; `failed` is sticky. */
struct buf {
	char *p;
	size_t n, cap;
	int failed;
};

/* Appends n bytes, keeping the buffer NUL-ended. */
static void buf_put(struct buf *b, const char *s, size_t n)
{
	if (b->failed)
		return;
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 1024;
		char *p;

		while (cap < b->n + n + 1)
			cap *= 2;
		p = realloc(b->p, cap);
		if (!p) {
			b->failed = 1;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
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

/* FNV-1a. */
static uint64_t hash_bytes(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603ULL;
	size_t i;

	for (i = 0; i < n; i++) {
		h ^= (unsigned char)s[i];
		h *= 1099511628211ULL;
	}
	return h;
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

	if ((ls->n + 1) * 2 > ls->cap) {
		size_t cap = ls->cap ? ls->cap * 2 : 256;
		struct line *v = calloc(cap, sizeof *v);

		if (!v)
			return -1;
		for (i = 0; i < ls->cap; i++) {
			if (!ls->v[i].text)
				continue;
			k = hash_bytes(ls->v[i].text, ls->v[i].len) & (cap - 1);
			while (v[k].text)
				k = (k + 1) & (cap - 1);
			v[k] = ls->v[i];
		}
		free(ls->v);
		ls->v = v;
		ls->cap = cap;
	}
	k = hash_bytes(text, len) & (ls->cap - 1);
	while (ls->v[k].text) {
		if (ls->v[k].len == len && memcmp(ls->v[k].text, text, len) == 0) {
			ls->v[k].count++;
			return 0;
		}
		k = (k + 1) & (ls->cap - 1);
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

struct func {
	uint64_t key;        /* name id | module id << 32, or frame | 1 << 63 */
	int used;
	uint32_t frame;      /* a frame of it, for its name */
	uint64_t self_n, total_n, self_w, total_w;
	size_t last;         /* last sample counted in total, + 1 */
};

struct funcs {
	struct func *v;
	size_t n, cap;
};

/* What makes a function one row: its name and module, or, unnamed, the
 * frame itself. */
static uint64_t func_key(const struct trace *t, uint32_t frame)
{
	const struct trace_frame *f = &t->frames[frame];

	if (f->name == STRTAB_NONE)
		return (1ULL << 63) | frame;
	return (uint64_t)f->name | (uint64_t)f->module << 32;
}

/* The function entry for `frame`, added if new; NULL when out of memory. */
static struct func *funcs_get(struct funcs *fs, const struct trace *t,
			      uint32_t frame)
{
	uint64_t key = func_key(t, frame);
	size_t k, i;

	if ((fs->n + 1) * 2 > fs->cap) {
		size_t cap = fs->cap ? fs->cap * 2 : 256;
		struct func *v = calloc(cap, sizeof *v);

		if (!v)
			return NULL;
		for (i = 0; i < fs->cap; i++) {
			if (!fs->v[i].used)
				continue;
			k = hash_bytes((const char *)&fs->v[i].key, 8) & (cap - 1);
			while (v[k].used)
				k = (k + 1) & (cap - 1);
			v[k] = fs->v[i];
		}
		free(fs->v);
		fs->v = v;
		fs->cap = cap;
	}
	k = hash_bytes((const char *)&key, 8) & (fs->cap - 1);
	while (fs->v[k].used && fs->v[k].key != key)
		k = (k + 1) & (fs->cap - 1);
	if (!fs->v[k].used) {
		fs->v[k].used = 1;
		fs->v[k].key = key;
		fs->v[k].frame = frame;
		fs->n++;
	}
	return &fs->v[k];
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

/* Writes one function's name (and module) as text. */
static int put_func_name(struct outfile *out, const struct trace *t,
			 const struct func *f)
{
	const struct trace_frame *fr = &t->frames[f->frame];

	if (fr->name == STRTAB_NONE)
		return outfile_printf(out, "0x%llx\n", (unsigned long long)fr->pc);
	if (outfile_write(out, trace_str(t, fr->name), strtab_len(&t->names, fr->name)))
		return -1;
	if (fr->module != STRTAB_NONE)
		return outfile_printf(out, "  [%s]\n", trace_str(t, fr->module));
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
			struct func *f = funcs_get(&fs, t, t->stack_frames[s->first + j]);

			if (!f) {
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
		const struct func *f = &fs.v[i];

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
	free(fs.v);
	return rc;
}

/*
 * trace — the drained trace model (see trace.h).
 *
 * Growable arrays (doubling, from bigalloc: the events and arguments of a
 * big window are huge-page mappings reused by the next window) plus a
 * string table. Once an allocation
 * has failed, t->oom stays set and every later trace_add_* / trace_arg_* /
 * trace_intern call fails at once, so the trace holds exactly what was added
 * before the failure.
 */
#include "trace.h"

#include "bigalloc.h"
#include "../util/grow.h"
#include "../util/htab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const trace_cat_names[TRACE_CAT_COUNT] = {
	[TRACE_CAT_USER_ANNOTATION] = "user_annotation",
	[TRACE_CAT_CPU_OP] = "cpu_op",
	[TRACE_CAT_GPU_USER_ANNOTATION] = "gpu_user_annotation",
	[TRACE_CAT_KERNEL] = "kernel",
	[TRACE_CAT_GPU_MEMCPY] = "gpu_memcpy",
	[TRACE_CAT_GPU_MEMSET] = "gpu_memset",
	[TRACE_CAT_CUDA_RUNTIME] = "cuda_runtime",
	[TRACE_CAT_CUDA_DRIVER] = "cuda_driver",
	[TRACE_CAT_CUDA_SYNC] = "cuda_sync",
	[TRACE_CAT_AC2G] = "ac2g",
	[TRACE_CAT_MARK] = "user_annotation",
	[TRACE_CAT_SAMPLE] = "cpu_sample",
	[TRACE_CAT_GPU_MEMORY] = "gpu_memory",
	[TRACE_CAT_OVERHEAD] = "overhead",
	[TRACE_CAT_PYTHON_FUNCTION] = "python_function",
	[TRACE_CAT_CPU_INSTANT] = "cpu_instant_event",
};

/* Kineto's category string; "unknown" for a value outside the enum. */
const char *trace_cat_name(enum trace_cat cat)
{
	if ((unsigned)cat >= TRACE_CAT_COUNT)
		return "unknown";
	return trace_cat_names[cat];
}

/* Makes room for one more element in `arr`, an array of *cap elements of
 * `size` bytes holding `n`. Returns the (possibly moved) array, or NULL on
 * allocation failure (then `arr` and *cap are unchanged). */
static void *grow(void *arr, size_t *cap, size_t n, size_t size, size_t min)
{
	size_t ncap;
	void *p;

	if (n < *cap)
		return arr;
	ncap = min;
	if (*cap) {
		if (*cap > SIZE_MAX / 2 / size)
			return NULL;
		ncap = *cap * 2;
	}
	p = bigalloc_realloc(arr, ncap * size);
	if (!p)
		return NULL;
	*cap = ncap;
	return p;
}

/* Initializes an empty trace. 0, or -1 on allocation failure (then the
 * trace is zeroed, which is also a valid empty trace). */
int trace_init(struct trace *t)
{
	memset(t, 0, sizeof *t);
	if (strtab_init(&t->names) < 0)
		return -1;
	return 0;
}

/* Frees all the trace owns, metadata strings included; leaves it zeroed.
 * NULL-safe. */
void trace_free(struct trace *t)
{
	if (!t)
		return;
	strtab_free(&t->names);
	bigalloc_free(t->ev);
	bigalloc_free(t->args);
	bigalloc_free(t->steps);
	bigalloc_free(t->threads);
	bigalloc_free(t->procs);
	for (size_t i = 0; i < t->ndevices; i++)
		free(t->devices[i].name);
	bigalloc_free(t->devices);
	free(t->meta.program);
	free(t->meta.hostname);
	free(t->meta.run);
	free(t->meta.reason);
	free(t->meta.notes);
	free(t->meta.suffix);
	bigalloc_free(t->frames);
	free(t->frame_slots);
	bigalloc_free(t->stack_frames);
	bigalloc_free(t->stacks);
	free(t->raw);
	free(t->own_phases);
	memset(t, 0, sizeof *t);
}

int trace_add_raw(struct trace *t, uint16_t kind, int64_t ts, const void *p,
		  uint32_t len)
{
	size_t step = sizeof(struct trace_raw) + (((size_t)len + 7) & ~(size_t)7);
	struct trace_raw h = { kind, 0, len, ts };
	uint8_t *raw;

	raw = grow_array(t->raw, &t->cap_raw, t->nraw + step, 1, 64 * 1024);
	if (!raw)
		return -1;
	t->raw = raw;
	memcpy(t->raw + t->nraw, &h, sizeof h);
	memcpy(t->raw + t->nraw + sizeof h, p, len);
	t->nraw += step;
	return 0;
}

const struct trace_raw *trace_raw_next(const struct trace *t, size_t *off)
{
	const struct trace_raw *r;

	if (*off + sizeof *r > t->nraw)
		return NULL;
	r = (const struct trace_raw *)(const void *)(t->raw + *off);
	*off += sizeof *r + (((size_t)r->len + 7) & ~(size_t)7);
	return r;
}

void trace_raw_free(struct trace *t)
{
	free(t->raw);
	t->raw = NULL;
	t->nraw = t->cap_raw = 0;
}

int trace_add_note(struct trace *t, const char *line)
{
	size_t old = t->meta.notes ? strlen(t->meta.notes) : 0, n = strlen(line);
	const char *p = t->meta.notes;
	char *q;

	while (p && (p = strstr(p, line)) != NULL) {
		if ((p == t->meta.notes || p[-1] == '\n') && p[n] == '\n')
			return 0;
		p++;
	}
	q = realloc(t->meta.notes, old + n + 2);
	if (!q) {
		t->oom = 1;
		return -1;
	}
	memcpy(q + old, line, n);
	q[old + n] = '\n';
	q[old + n + 1] = '\0';
	t->meta.notes = q;
	return 0;
}

size_t trace_bytes(const struct trace *t)
{
	return strtab_bytes(&t->names) + bigalloc_resident(t->ev, t->nev * sizeof *t->ev) +
	       bigalloc_resident(t->args, t->nargs * sizeof *t->args) +
	       bigalloc_resident(t->steps, t->nsteps * sizeof *t->steps) +
	       bigalloc_resident(t->threads, t->nthreads * sizeof *t->threads) + t->nraw +
	       bigalloc_resident(t->frames, t->nframes * sizeof *t->frames) +
	       t->nframe_slots * sizeof *t->frame_slots +
	       bigalloc_resident(t->stack_frames, t->nstack_frames * sizeof *t->stack_frames) +
	       bigalloc_resident(t->stacks, t->nstacks * sizeof *t->stacks);
}

/* Interns `len` bytes; STRTAB_NONE (and t->oom set) on failure. */
uint32_t trace_intern(struct trace *t, const char *s, size_t len)
{
	uint32_t id;

	if (t->oom || (!s && len > 0))
		return STRTAB_NONE;
	id = strtab_intern(&t->names, s, len);
	if (id == STRTAB_NONE)
		t->oom = 1;
	return id;
}

/* Appends a copy of *e with no arguments yet (e->args/nargs are ignored);
 * keeps counters.events equal to the number of events. Returns the stored
 * event, or NULL (t->oom set) on allocation failure. */
/* Grows *arr to hold at least `want` elements of `size` bytes. 0 or -1. */
static int reserve(void **arr, size_t *cap, size_t want, size_t size)
{
	void *p;

	if (want <= *cap)
		return 0;
	if (want > SIZE_MAX / size)
		return -1;
	p = bigalloc_realloc(*arr, want * size);
	if (!p)
		return -1;
	*arr = p;
	*cap = want;
	return 0;
}

int trace_reserve(struct trace *t, size_t nev, size_t nargs)
{
	if (t->oom || nev > SIZE_MAX - t->nev || nargs > SIZE_MAX - t->nargs)
		return -1;
	if (reserve((void **)&t->ev, &t->cap_ev, t->nev + nev, sizeof *t->ev) != 0)
		return -1;
	return reserve((void **)&t->args, &t->cap_args, t->nargs + nargs, sizeof *t->args);
}

struct trace_event *trace_add_event(struct trace *t, const struct trace_event *e)
{
	struct trace_event *ev, *slot;

	if (t->oom)
		return NULL;
	ev = grow(t->ev, &t->cap_ev, t->nev, sizeof *t->ev, 256);
	if (!ev) {
		t->oom = 1;
		return NULL;
	}
	t->ev = ev;
	slot = &t->ev[t->nev++];
	*slot = *e;
	t->nested = false;
	slot->args = (uint32_t)t->nargs;
	slot->nargs = 0;
	t->counters.events = t->nev;
	return slot;
}

/* Makes the last event's arguments the last ones of t->args, so more can
 * be appended: trace_arg_str_at() on an earlier event appends after them.
 * 0, or -1 (t->oom set). */
static int last_args_at_end(struct trace *t)
{
	struct trace_event *last = &t->ev[t->nev - 1];
	size_t i, n = last->nargs;

	if ((size_t)last->args + n == t->nargs)
		return 0;
	if (n == 0) {
		last->args = (uint32_t)t->nargs;
		return 0;
	}
	for (i = 0; i < n; i++) {
		struct trace_arg *a = grow(t->args, &t->cap_args, t->nargs,
					   sizeof *t->args, 256);
		if (!a) {
			t->oom = 1;
			return -1;
		}
		t->args = a;
		t->args[t->nargs++] = t->args[last->args + i];
	}
	last->args = (uint32_t)(t->nargs - n);
	return 0;
}

/* Appends an argument with key `key` to the last event and returns it for
 * the caller to fill in, or NULL: no event yet, too many args for one event
 * (65535), or allocation failure (t->oom set). */
static struct trace_arg *trace_arg_new(struct trace *t, const char *key,
				       uint32_t type)
{
	struct trace_event *last;
	struct trace_arg *a;
	uint32_t kid;

	if (t->oom || t->nev == 0)
		return NULL;
	if (last_args_at_end(t) != 0)
		return NULL;
	last = &t->ev[t->nev - 1];
	if (last->nargs == UINT16_MAX || t->nargs >= UINT32_MAX)
		return NULL;
	kid = trace_intern(t, key ? key : "", key ? strlen(key) : 0);
	if (kid == STRTAB_NONE)
		return NULL;
	a = grow(t->args, &t->cap_args, t->nargs, sizeof *t->args, 256);
	if (!a) {
		t->oom = 1;
		return NULL;
	}
	t->args = a;
	a = &t->args[t->nargs++];
	a->key = kid;
	a->type = type;
	last->nargs++;
	return a;
}

/* Appends copies of a[0..n) to the last event's arguments. 0 or -1. */
int trace_args_add(struct trace *t, const struct trace_arg *a, size_t n)
{
	struct trace_event *last;

	if (t->oom || t->nev == 0 || last_args_at_end(t) != 0)
		return -1;
	last = &t->ev[t->nev - 1];
	if ((size_t)last->nargs + n > UINT16_MAX || t->nargs + n >= UINT32_MAX)
		return -1;
	while (t->nargs + n > t->cap_args) {
		struct trace_arg *arr = grow(t->args, &t->cap_args, t->cap_args,
					     sizeof *t->args, 256);
		if (!arr) {
			t->oom = 1;
			return -1;
		}
		t->args = arr;
	}
	memcpy(t->args + t->nargs, a, n * sizeof *a);
	t->nargs += n;
	last->nargs = (uint16_t)(last->nargs + n);
	return 0;
}

/* Appends a copy of *a to the last event's arguments. 0 or -1. */
int trace_arg_add(struct trace *t, const struct trace_arg *a)
{
	return trace_args_add(t, a, 1);
}

/* Attaches a signed integer argument to the last event. 0 or -1. */
int trace_arg_int(struct trace *t, const char *key, int64_t v)
{
	struct trace_arg *a = trace_arg_new(t, key, TRACE_ARG_INT);

	if (!a)
		return -1;
	a->v.i = v;
	return 0;
}

/* Attaches an unsigned integer argument to the last event. 0 or -1. */
int trace_arg_uint(struct trace *t, const char *key, uint64_t v)
{
	struct trace_arg *a = trace_arg_new(t, key, TRACE_ARG_UINT);

	if (!a)
		return -1;
	a->v.u = v;
	return 0;
}

/* Attaches a floating-point argument to the last event. 0 or -1. */
int trace_arg_double(struct trace *t, const char *key, double v)
{
	struct trace_arg *a = trace_arg_new(t, key, TRACE_ARG_DOUBLE);

	if (!a)
		return -1;
	a->v.d = v;
	return 0;
}

/* Attaches a string argument (`len` bytes, interned) to the last event.
 * 0 or -1. */
int trace_arg_str(struct trace *t, const char *key, const char *s, size_t len)
{
	uint32_t sid;
	struct trace_arg *a;

	/* Intern the value first: the arg must not exist if this fails. */
	if (t->oom || t->nev == 0)
		return -1;
	sid = trace_intern(t, s ? s : "", s ? len : 0);
	if (sid == STRTAB_NONE)
		return -1;
	a = trace_arg_new(t, key, TRACE_ARG_STR);
	if (!a)
		return -1;
	a->v.str = sid;
	return 0;
}

/* Attaches a raw JSON argument to the last event. 0 or -1. */
int trace_arg_raw(struct trace *t, const char *key, const char *json)
{
	if (trace_arg_str(t, key, json, json ? strlen(json) : 0) != 0)
		return -1;
	t->args[t->nargs - 1].type = TRACE_ARG_RAW;
	return 0;
}

/* Names process track `pid`; a later call renames it in place. 0 or -1. */
int trace_add_process(struct trace *t, int32_t pid, const char *name, int32_t sort)
{
	struct trace_process *p;
	uint32_t nid;
	size_t i;

	if (t->oom)
		return -1;
	nid = trace_intern(t, name ? name : "", name ? strlen(name) : 0);
	if (nid == STRTAB_NONE)
		return -1;
	for (i = 0; i < t->nprocs; i++)
		if (t->procs[i].pid == pid) {
			t->procs[i].name = nid;
			t->procs[i].sort = sort;
			return 0;
		}
	p = grow(t->procs, &t->cap_procs, t->nprocs, sizeof *t->procs, 8);
	if (!p) {
		t->oom = 1;
		return -1;
	}
	t->procs = p;
	t->procs[t->nprocs].pid = pid;
	t->procs[t->nprocs].name = nid;
	t->procs[t->nprocs].sort = sort;
	t->nprocs++;
	return 0;
}

/* Adds or replaces device d->id's properties (the name is copied). */
int trace_add_device(struct trace *t, const struct trace_device *d)
{
	struct trace_device *dev;
	char *name;
	size_t i;

	if (t->oom)
		return -1;
	name = strdup(d->name ? d->name : "");
	if (!name) {
		t->oom = 1;
		return -1;
	}
	for (i = 0; i < t->ndevices; i++)
		if (t->devices[i].id == d->id) {
			free(t->devices[i].name);
			t->devices[i] = *d;
			t->devices[i].name = name;
			return 0;
		}
	dev = grow(t->devices, &t->cap_devices, t->ndevices, sizeof *t->devices, 4);
	if (!dev) {
		free(name);
		t->oom = 1;
		return -1;
	}
	t->devices = dev;
	t->devices[t->ndevices] = *d;
	t->devices[t->ndevices].name = name;
	t->ndevices++;
	return 0;
}

/* Appends a copy of *s. 0, or -1 (t->oom set). */
int trace_add_step(struct trace *t, const struct trace_step *s)
{
	struct trace_step *steps;

	if (t->oom)
		return -1;
	steps = grow(t->steps, &t->cap_steps, t->nsteps, sizeof *t->steps, 16);
	if (!steps) {
		t->oom = 1;
		return -1;
	}
	t->steps = steps;
	t->steps[t->nsteps++] = *s;
	return 0;
}

/* Names thread (pid, tid); a later call for the same pair renames it in
 * place (its position in t->threads is kept). NULL name = "". 0 or -1. */
int trace_add_thread(struct trace *t, int32_t pid, int32_t tid, const char *name)
{
	struct trace_thread *th;
	uint32_t nid;
	size_t i;

	if (t->oom)
		return -1;
	nid = trace_intern(t, name ? name : "", name ? strlen(name) : 0);
	if (nid == STRTAB_NONE)
		return -1;
	for (i = 0; i < t->nthreads; i++) {
		if (t->threads[i].pid == pid && t->threads[i].tid == tid) {
			t->threads[i].name = nid;
			return 0;
		}
	}
	th = grow(t->threads, &t->cap_threads, t->nthreads, sizeof *t->threads,
		  16);
	if (!th) {
		t->oom = 1;
		return -1;
	}
	t->threads = th;
	t->threads[t->nthreads].pid = pid;
	t->threads[t->nthreads].tid = tid;
	t->threads[t->nthreads].name = nid;
	t->nthreads++;
	return 0;
}

/* Hash of a code address for t->frame_slots. */
static size_t pc_hash(uint64_t pc)
{
	pc ^= pc >> 29;
	pc *= 0xbf58476d1ce4e5b9ULL;
	pc ^= pc >> 32;
	return (size_t)pc;
}

/* The hash of frame `i` (htab_rebuild). */
static uint64_t frame_hash(const void *ctx, size_t i)
{
	const struct trace *t = ctx;

	return pc_hash(t->frames[i].pc);
}

/* Doubles the frame hash (or creates it) and reinserts every frame.
 * 0, or -1 (t->oom set). */
static int frame_rehash(struct trace *t)
{
	size_t n = t->nframe_slots ? t->nframe_slots * 2 : 1024;

	if (n / 2 > UINT32_MAX ||
	    htab_rebuild(&t->frame_slots, &t->nframe_slots, n, 0, t->nframes, frame_hash, t) != 0) {
		t->oom = 1;
		return -1;
	}
	return 0;
}

/* Index of the frame for `pc`, added if new; -1 (t->oom) on failure. */
static long frame_intern(struct trace *t, uint64_t pc)
{
	struct trace_frame *fr;
	size_t k;

	if (htab_full(t->nframes, t->nframe_slots) && frame_rehash(t) != 0)
		return -1;
	for (k = htab_first(pc_hash(pc), t->nframe_slots); t->frame_slots[k];
	     k = htab_next(k, t->nframe_slots)) {
		uint32_t i = t->frame_slots[k] - 1;

		if (t->frames[i].pc == pc)
			return (long)i;
	}
	fr = grow(t->frames, &t->cap_frames, t->nframes, sizeof *t->frames, 256);
	if (!fr) {
		t->oom = 1;
		return -1;
	}
	t->frames = fr;
	fr = &t->frames[t->nframes];
	fr->pc = pc;
	fr->name = STRTAB_NONE;
	fr->module = STRTAB_NONE;
	t->frame_slots[k] = (uint32_t)(t->nframes + 1);
	return (long)t->nframes++;
}

long trace_add_frame(struct trace *t, uint64_t pc, uint32_t name, uint32_t module)
{
	long f;

	if (t->oom)
		return -1;
	f = frame_intern(t, pc);
	if (f >= 0 && t->frames[f].name == STRTAB_NONE) {
		t->frames[f].name = name;
		t->frames[f].module = module;
	}
	return f;
}

int trace_set_stack_frames(struct trace *t, size_t stack, const uint32_t *frames,
			   size_t n)
{
	size_t first = t->nstack_frames;
	uint32_t *sf;

	if (t->oom || stack >= t->nstacks)
		return -1;
	if (n > UINT16_MAX)
		n = UINT16_MAX;
	if (t->nstack_frames + n > UINT32_MAX) {
		t->oom = 1;
		return -1;
	}
	while (t->nstack_frames + n > t->cap_stack_frames) {
		sf = grow(t->stack_frames, &t->cap_stack_frames, t->cap_stack_frames,
			  sizeof *t->stack_frames, 1024);
		if (!sf) {
			t->oom = 1;
			return -1;
		}
		t->stack_frames = sf;
	}
	memcpy(t->stack_frames + first, frames, n * sizeof *frames);
	t->nstack_frames += n;
	t->stacks[stack].first = (uint32_t)first;
	t->stacks[stack].depth = (uint16_t)n;
	t->stacks[stack].folded = STRTAB_NONE;
	return 0;
}

/* Adds a stack (see trace.h). Return addresses are stored minus one, so
 * each frame's pc lies inside the calling function even when the call was
 * its last instruction. */
long trace_add_stack(struct trace *t, const struct trace_stack *s,
		     const uint64_t *ips, size_t n, int leaf_exact)
{
	struct trace_stack *st;
	uint32_t *sf;
	size_t i, first = t->nstack_frames;

	if (t->oom)
		return -1;
	if (n > UINT16_MAX)
		n = UINT16_MAX;
	if (t->nstack_frames + n > UINT32_MAX || t->nstacks >= UINT32_MAX) {
		t->oom = 1;
		return -1;
	}
	st = grow(t->stacks, &t->cap_stacks, t->nstacks, sizeof *t->stacks, 64);
	if (!st) {
		t->oom = 1;
		return -1;
	}
	t->stacks = st;
	for (i = 0; i < n; i++) {
		uint64_t pc = ips[i] - (i == 0 && leaf_exact ? 0 : 1);
		long f = frame_intern(t, pc);

		if (f < 0)
			break;
		sf = grow(t->stack_frames, &t->cap_stack_frames, t->nstack_frames,
			  sizeof *t->stack_frames, 1024);
		if (!sf) {
			t->oom = 1;
			break;
		}
		t->stack_frames = sf;
		t->stack_frames[t->nstack_frames++] = (uint32_t)f;
	}
	if (t->oom) {
		t->nstack_frames = first;
		return -1;
	}
	st = &t->stacks[t->nstacks];
	*st = *s;
	st->first = (uint32_t)first;
	st->depth = (uint16_t)n;
	st->folded = STRTAB_NONE;
	return (long)t->nstacks++;
}

/* Appends `n` bytes of `src` at buf[*pos] as far as size allows, with ';'
 * made ':' and control characters '?'; advances *pos by n regardless. */
static void fold_put(char *buf, size_t size, size_t *pos, const char *src,
		     size_t n)
{
	size_t i;

	for (i = 0; i < n; i++, (*pos)++) {
		char c = src[i];

		if (c == ';')
			c = ':';
		else if ((unsigned char)c < 0x20 || c == 0x7f)
			c = '?';
		if (*pos + 1 < size)
			buf[*pos] = c;
	}
}

/* Folds a stack, outermost first (see trace.h). */
size_t trace_stack_fold(const struct trace *t, const struct trace_stack *s,
			char *buf, size_t size)
{
	size_t pos = 0, i;

	for (i = s->depth; i-- > 0;) {
		const struct trace_frame *f = &t->frames[t->stack_frames[s->first + i]];
		char hex[24];

		if (i + 1 < s->depth) {
			if (pos + 1 < size)
				buf[pos] = ';';
			pos++;
		}
		if (f->name != STRTAB_NONE) {
			fold_put(buf, size, &pos, trace_str(t, f->name),
				 strtab_len(&t->names, f->name));
		} else {
			int n = snprintf(hex, sizeof hex, "0x%llx", (unsigned long long)f->pc);
			fold_put(buf, size, &pos, hex, (size_t)n);
		}
	}
	if (size)
		buf[pos < size ? pos : size - 1] = '\0';
	return pos;
}

/* Attaches the stack placeholder to the last event. 0 or -1. */
int trace_arg_stack(struct trace *t, uint32_t stack)
{
	return trace_arg_uint(t, TRACE_ARG_STACK, stack);
}

/* Attaches a string argument to event `ev`, moving its arguments to the
 * end of t->args first when it is not the last event (the old copies stay
 * behind, unreferenced). 0, or -1 (bad index, too many args, or t->oom). */
int trace_arg_str_at(struct trace *t, size_t ev, const char *key,
		     const char *s, size_t len)
{
	struct trace_event *e;
	struct trace_arg *a;
	uint32_t kid, sid;
	size_t i, n;

	if (t->oom || ev >= t->nev)
		return -1;
	if (ev == t->nev - 1)
		return trace_arg_str(t, key, s, len);
	e = &t->ev[ev];
	n = e->nargs;
	if (n == UINT16_MAX || t->nargs + n + 1 > UINT32_MAX)
		return -1;
	kid = trace_intern(t, key ? key : "", key ? strlen(key) : 0);
	sid = trace_intern(t, s ? s : "", s ? len : 0);
	if (kid == STRTAB_NONE || sid == STRTAB_NONE)
		return -1;
	for (i = 0; i <= n; i++) {
		a = grow(t->args, &t->cap_args, t->nargs, sizeof *t->args, 256);
		if (!a) {
			t->oom = 1;
			return -1;
		}
		t->args = a;
		if (i < n) {
			t->args[t->nargs] = t->args[e->args + i];
		} else {
			t->args[t->nargs].key = kid;
			t->args[t->nargs].type = TRACE_ARG_STR;
			t->args[t->nargs].v.str = sid;
		}
		t->nargs++;
	}
	e->args = (uint32_t)(t->nargs - n - 1);
	e->nargs = (uint16_t)(n + 1);
	return 0;
}

int trace_event_cmp(const struct trace_event *a, const struct trace_event *b)
{
	if (a->pid != b->pid)
		return a->pid < b->pid ? -1 : 1;
	if (a->tid != b->tid)
		return a->tid < b->tid ? -1 : 1;
	if (a->ts != b->ts)
		return a->ts < b->ts ? -1 : 1;
	if (a->dur != b->dur)
		return a->dur > b->dur ? -1 : 1;
	/* the same span: a step holds what has its span, then by kind */
	if ((a->flags & TRACE_F_STEP) != (b->flags & TRACE_F_STEP))
		return a->flags & TRACE_F_STEP ? -1 : 1;
	if (a->cat != b->cat)
		return a->cat < b->cat ? -1 : 1;
	if (a->name != b->name)
		return a->name < b->name ? -1 : 1;
	if (a->ph != b->ph)
		return a->ph < b->ph ? -1 : 1;
	if (a->id != b->id)
		return a->id < b->id ? -1 : 1;
	if (a->flags != b->flags)
		return a->flags < b->flags ? -1 : 1;
	if (a->args != b->args)
		return a->args < b->args ? -1 : 1;
	return a->nargs < b->nargs ? -1 : a->nargs > b->nargs;
}

int trace_event_cmp_at(uint32_t ia, uint32_t ib, void *ctx)
{
	const struct trace *t = ctx;
	int c = trace_event_cmp(&t->ev[ia], &t->ev[ib]);

	return c ? c : ia < ib ? -1 : ia > ib;
}

static void swap_ev(struct trace_event *a, struct trace_event *b)
{
	struct trace_event x = *a;

	*a = *b;
	*b = x;
}

/* Moves ev[i] down the max-heap ev[0..n). */
static void sift_down_ev(struct trace_event *ev, size_t i, size_t n)
{
	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= n)
			return;
		if (c + 1 < n && trace_event_cmp(&ev[c], &ev[c + 1]) < 0)
			c++;
		if (trace_event_cmp(&ev[i], &ev[c]) >= 0)
			return;
		swap_ev(&ev[i], &ev[c]);
		i = c;
	}
}

/* Quicksort of ev[0..n) with the median of three as pivot, recursing into
 * the smaller side; heapsort once `depth` splits were not enough, insertion
 * for short runs. */
static void sort_ev(struct trace_event *ev, size_t n, unsigned depth)
{
	size_t i, j;

	while (n > 16) {
		size_t mid = n / 2;

		if (depth-- == 0) {
			for (i = n / 2; i-- > 0;)
				sift_down_ev(ev, i, n);
			for (i = n; i-- > 1;) {
				swap_ev(&ev[0], &ev[i]);
				sift_down_ev(ev, 0, i);
			}
			return;
		}
		/* ev[0] <= ev[mid] <= ev[n - 1], the pivot moved to ev[n - 2] */
		if (trace_event_cmp(&ev[mid], &ev[0]) < 0)
			swap_ev(&ev[mid], &ev[0]);
		if (trace_event_cmp(&ev[n - 1], &ev[0]) < 0)
			swap_ev(&ev[n - 1], &ev[0]);
		if (trace_event_cmp(&ev[n - 1], &ev[mid]) < 0)
			swap_ev(&ev[n - 1], &ev[mid]);
		swap_ev(&ev[mid], &ev[n - 2]);
		i = 0;
		j = n - 2;
		for (;;) {
			while (trace_event_cmp(&ev[++i], &ev[n - 2]) < 0)
				;
			while (trace_event_cmp(&ev[--j], &ev[n - 2]) > 0)
				;
			if (i >= j)
				break;
			swap_ev(&ev[i], &ev[j]);
		}
		swap_ev(&ev[i], &ev[n - 2]);
		/* ev[0..i) <= pivot == ev[i] <= ev[i + 1..n) */
		if (i < n - i - 1) {
			sort_ev(ev, i, depth);
			ev += i + 1;
			n -= i + 1;
		} else {
			sort_ev(ev + i + 1, n - i - 1, depth);
			n = i;
		}
	}
	for (i = 1; i < n; i++)
		for (j = i; j > 0 && trace_event_cmp(&ev[j - 1], &ev[j]) > 0; j--)
			swap_ev(&ev[j - 1], &ev[j]);
}

void trace_sort(struct trace *t)
{
	size_t i;
	unsigned depth = 0;

	for (i = 1; i < t->nev && trace_event_cmp(&t->ev[i - 1], &t->ev[i]) <= 0; i++)
		;
	if (i < t->nev) {
		for (i = t->nev; i > 1; i >>= 1)
			depth += 2;
		sort_ev(t->ev, t->nev, depth);
	}
	t->nested = true;
	t->nown_phases = 0; /* the indices moved */
}


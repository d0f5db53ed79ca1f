/* opstacks — each Python thread's call stack as it runs (see opstacks.h). */
#include "opstacks.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/clock.h"
#include "../../common/evformat.h"
#include "../../common/hash.h"

/* CPython's profile events (Python.h's PyTrace_*). */
enum { PYT_CALL = 0, PYT_RETURN = 3, PYT_C_CALL = 4, PYT_C_EXCEPTION = 5, PYT_C_RETURN = 6 };

#define NODE_FULL UINT32_MAX     /* a stack left out: a bound was reached */
#define ENTRY_HIDDEN UINT32_MAX  /* a frame that is no entry of its stack */
#define CHUNK 4096u              /* nodes or entries a chunk holds */
#define TEXT_CHUNK (1u << 20)    /* bytes of entry text a chunk holds */
#define PREFIXES_MAX 64

typedef struct pyobj pyobj;
typedef int (*tracefunc)(pyobj *obj, pyobj *frame, int what, pyobj *arg);

/* CPython's API, looked up at run time (3.9+: the frame accessors).
 * Objects are opaque; the one layout read is a PyObject's type pointer,
 * after its reference count (the stable ABI's PyObject). */
static struct {
	void *(*GILState_GetThisThreadState)(void);
	void *(*ThreadState_Get)(void);
	void *(*ThreadState_Swap)(void *tstate);
	void *(*InterpreterState_Get)(void);
	void *(*InterpreterState_ThreadHead)(void *interp);
	void *(*ThreadState_Next)(void *tstate);
	pyobj *(*ThreadState_GetFrame)(void *tstate);
	pyobj *(*Frame_GetCode)(pyobj *frame);
	pyobj *(*Frame_GetBack)(pyobj *frame);
	int (*Frame_GetLineNumber)(pyobj *frame);
	void (*Eval_SetProfile)(tracefunc fn, pyobj *obj);
	void (*Eval_SetProfileAllThreads)(tracefunc fn, pyobj *obj); /* 3.12+ */
	pyobj *(*Object_GetAttrString)(pyobj *o, const char *name);
	pyobj *(*Object_Repr)(pyobj *o);
	const char *(*Unicode_AsUTF8)(pyobj *o);
	long (*Long_AsLong)(pyobj *o);
	pyobj *(*Long_FromVoidPtr)(void *p);
	void *(*Long_AsVoidPtr)(pyobj *o);
	pyobj *(*Dict_GetItemString)(pyobj *d, const char *key);
	void *(*CFunction_GetFunction)(pyobj *o);
	pyobj *(*CFunction_GetSelf)(pyobj *o);
	void (*IncRef)(pyobj *o);
	void (*DecRef)(pyobj *o);
	void (*Err_Fetch)(pyobj **type, pyobj **value, pyobj **tb);
	void (*Err_Restore)(pyobj *type, pyobj *value, pyobj *tb);
	void (*Err_Clear)(void);
	void *CFunction_Type;   /* PyCFunction_Type */
	void *CMethod_Type;     /* PyCMethod_Type (3.9+), or NULL */
} py;

/* One node of the tree of stacks: its parent (0: the root, no entry
 * above it) and its entry; `gen` is the capture generation it was last
 * written in. Published in chunks that never move: read without the GIL. */
struct node {
	uint32_t parent, entry;
	_Atomic uint64_t gen;
};

struct entry {
	const char *text;
	uint32_t len;
};

/* Key -> value, open addressing on two 64-bit keys (value 0: empty).
 * GIL held. */
struct map {
	uint64_t *k;    /* 2 a slot */
	uint32_t *v;
	size_t n, cap;  /* cap: a power of two */
};

/* One entry of a thread's shadow stack: its node, and the frame (or the
 * C function object, `c`) that pushed it. */
struct shadow_ent {
	uint32_t node;
	uint32_t c;
	const void *key;
};

/* A tracked thread: its shadow stack (the profile function's, GIL held)
 * and the node on top, which the operators of the thread read. */
struct tracked {
	_Atomic(void *) tstate;  /* its thread state; NULL: a free slot */
	_Atomic uint32_t cur;    /* the stack now (0: none, NODE_FULL) */
	_Atomic int on;
	uint32_t depth;          /* past OPSTACKS_DEPTH: counted, not kept */
	struct shadow_ent ent[OPSTACKS_DEPTH];
};

/* Classes seen since tracking began, for nn.Module entries' numbers. */
struct klass {
	char name[64];
	uint32_t next;
};

static struct {
	opstacks_append_fn append;
	bool ok;                               /* CPython's API found */
	struct node *_Atomic nodes[OPSTACKS_NODES / CHUNK];
	_Atomic uint32_t nnodes;
	struct entry *_Atomic ents[OPSTACKS_ENTRIES / CHUNK];
	uint32_t nents;
	char *text[OPSTACKS_TEXT / TEXT_CHUNK];
	size_t ntext, text_used;               /* chunks, bytes of the last */
	struct map child;   /* (parent, entry) -> node */
	struct map code;    /* code object -> entry (a reference held) */
	struct map cfn;     /* (C function, self) -> entry */
	struct map bytext;  /* (text hash, length) -> entry */
	struct map module;  /* module object -> entry (references held until
			       opstacks_stop) */
	struct klass *klasses;
	size_t nklasses;
	char *prefixes[PREFIXES_MAX];
	size_t nprefixes;
	uintptr_t call_impl;
	struct tracked *_Atomic threads[OPSTACKS_THREADS];
	_Atomic uint64_t dropped;
	bool starting;      /* opstacks_start runs (3.12+: it sets every
			       thread's profile function at its end) */
} os_;

static __thread struct tracked *t_slot; /* the calling thread's, if known */

/* ------------------------------------------------------------ set-up */

int opstacks_init(opstacks_append_fn append)
{
	static const struct {
		const char *name;
		size_t off;
	} need[] = {
#define NEED(sym, field) { sym, offsetof(__typeof__(py), field) }
		NEED("PyGILState_GetThisThreadState", GILState_GetThisThreadState),
		NEED("PyThreadState_Get", ThreadState_Get),
		NEED("PyThreadState_Swap", ThreadState_Swap),
		NEED("PyInterpreterState_Get", InterpreterState_Get),
		NEED("PyInterpreterState_ThreadHead", InterpreterState_ThreadHead),
		NEED("PyThreadState_Next", ThreadState_Next),
		NEED("PyThreadState_GetFrame", ThreadState_GetFrame),
		NEED("PyFrame_GetCode", Frame_GetCode),
		NEED("PyFrame_GetBack", Frame_GetBack),
		NEED("PyFrame_GetLineNumber", Frame_GetLineNumber),
		NEED("PyEval_SetProfile", Eval_SetProfile),
		NEED("PyObject_GetAttrString", Object_GetAttrString),
		NEED("PyObject_Repr", Object_Repr),
		NEED("PyUnicode_AsUTF8", Unicode_AsUTF8),
		NEED("PyLong_AsLong", Long_AsLong),
		NEED("PyLong_FromVoidPtr", Long_FromVoidPtr),
		NEED("PyLong_AsVoidPtr", Long_AsVoidPtr),
		NEED("PyDict_GetItemString", Dict_GetItemString),
		NEED("PyCFunction_GetFunction", CFunction_GetFunction),
		NEED("PyCFunction_GetSelf", CFunction_GetSelf),
		NEED("Py_IncRef", IncRef),
		NEED("Py_DecRef", DecRef),
		NEED("PyErr_Fetch", Err_Fetch),
		NEED("PyErr_Restore", Err_Restore),
		NEED("PyErr_Clear", Err_Clear),
		NEED("PyCFunction_Type", CFunction_Type),
#undef NEED
	};
	void *sym;
	size_t i;

	os_.append = append;
	for (i = 0; i < sizeof need / sizeof need[0]; i++) {
		sym = dlsym(RTLD_DEFAULT, need[i].name);
		if (!sym)
			return -1;
		memcpy((char *)&py + need[i].off, &sym, sizeof sym);
	}
	py.CMethod_Type = dlsym(RTLD_DEFAULT, "PyCMethod_Type");
	sym = dlsym(RTLD_DEFAULT, "PyEval_SetProfileAllThreads");
	memcpy(&py.Eval_SetProfileAllThreads, &sym, sizeof sym);
	os_.ok = true;
	return 0;
}

uint64_t opstacks_dropped(void)
{
	return atomic_load_explicit(&os_.dropped, memory_order_relaxed);
}

/* ------------------------------------------------------------ maps */

static uint64_t map_hash(uint64_t a, uint64_t b)
{
	uint64_t h = a * 0x9E3779B97F4A7C15ULL ^ (b + 0x632BE59BD9B4E019ULL);

	h ^= h >> 31;
	h *= 0xBF58476D1CE4E5B9ULL;
	return h ^ (h >> 29);
}

static size_t map_slot(const struct map *m, uint64_t a, uint64_t b)
{
	size_t i;

	for (i = map_hash(a, b) & (m->cap - 1);
	     m->v[i] && (m->k[2 * i] != a || m->k[2 * i + 1] != b); i = (i + 1) & (m->cap - 1))
		;
	return i;
}

/* The value of (a, b), 0 when absent. */
static uint32_t map_get(const struct map *m, uint64_t a, uint64_t b)
{
	return m->cap ? m->v[map_slot(m, a, b)] : 0;
}

/* Sets (a, b) to v (not 0). 0, or -1 when out of memory (unchanged). */
static int map_put(struct map *m, uint64_t a, uint64_t b, uint32_t v)
{
	size_t i;

	if ((m->n + 1) * 2 > m->cap) {
		struct map g = { 0 };

		g.cap = m->cap ? m->cap * 2 : 256;
		g.k = malloc(g.cap * 2 * sizeof *g.k);
		g.v = calloc(g.cap, sizeof *g.v);
		if (!g.k || !g.v) {
			free(g.k);
			free(g.v);
			return -1;
		}
		for (i = 0; i < m->cap; i++) {
			size_t j;

			if (!m->v[i])
				continue;
			j = map_slot(&g, m->k[2 * i], m->k[2 * i + 1]);
			g.k[2 * j] = m->k[2 * i];
			g.k[2 * j + 1] = m->k[2 * i + 1];
			g.v[j] = m->v[i];
		}
		g.n = m->n;
		free(m->k);
		free(m->v);
		*m = g;
	}
	i = map_slot(m, a, b);
	if (!m->v[i])
		m->n++;
	m->k[2 * i] = a;
	m->k[2 * i + 1] = b;
	m->v[i] = v;
	return 0;
}

static void map_clear(struct map *m)
{
	if (m->cap)
		memset(m->v, 0, m->cap * sizeof *m->v);
	m->n = 0;
}

/* ------------------------------------------------------------ tables */

static struct node *node_at(uint32_t id)
{
	struct node *chunk = atomic_load_explicit(&os_.nodes[(id - 1) / CHUNK],
						  memory_order_acquire);

	return &chunk[(id - 1) % CHUNK];
}

static const struct entry *entry_at(uint32_t id)
{
	struct entry *chunk = atomic_load_explicit(&os_.ents[(id - 1) / CHUNK],
						   memory_order_acquire);

	return &chunk[(id - 1) % CHUNK];
}

/* A new node; NODE_FULL when the tree is full. GIL held. */
static uint32_t node_new(uint32_t parent, uint32_t entry)
{
	uint32_t n = atomic_load_explicit(&os_.nnodes, memory_order_relaxed);
	struct node *chunk;

	if (n >= OPSTACKS_NODES - 1)
		return NODE_FULL;
	chunk = atomic_load_explicit(&os_.nodes[n / CHUNK], memory_order_relaxed);
	if (!chunk) {
		chunk = calloc(CHUNK, sizeof *chunk);
		if (!chunk)
			return NODE_FULL;
		atomic_store_explicit(&os_.nodes[n / CHUNK], chunk, memory_order_release);
	}
	chunk[n % CHUNK].parent = parent;
	chunk[n % CHUNK].entry = entry;
	atomic_store_explicit(&chunk[n % CHUNK].gen, 0, memory_order_relaxed);
	atomic_store_explicit(&os_.nnodes, n + 1, memory_order_release);
	return n + 1;
}

/* The node of `entry` under `parent` (made when new); a hidden entry is
 * its parent's node. GIL held. */
static uint32_t child(uint32_t parent, uint32_t entry)
{
	uint32_t n;

	if (entry == ENTRY_HIDDEN)
		return parent;
	if (parent == NODE_FULL || entry == 0)
		return NODE_FULL;
	n = map_get(&os_.child, parent, entry);
	if (n)
		return n;
	n = node_new(parent, entry);
	if (n != NODE_FULL && map_put(&os_.child, parent, entry, n) != 0)
		return NODE_FULL;
	return n;
}

/* The entry of text s[0..len) (';' read as '_': it separates a stack's
 * entries), made when new; 0 when the tables are full. GIL held. */
static uint32_t entry_of_text(const char *s, size_t len)
{
	uint64_t h;
	uint32_t id;
	struct entry *chunk;
	char *dst;
	size_t i;

	if (len > OPSTACKS_ENTRY_MAX)
		len = OPSTACKS_ENTRY_MAX;
	h = hash_fnv64(HASH_FNV64_SEED, s, len);
	id = map_get(&os_.bytext, h, len);
	if (id) {
		const struct entry *e = entry_at(id);
		bool same = e->len == len;

		for (i = 0; same && i < len; i++)
			same = e->text[i] == (s[i] == ';' ? '_' : s[i]);
		if (same)
			return id;
	}
	if (os_.nents >= OPSTACKS_ENTRIES - 1)
		return 0;
	if (!os_.ntext || os_.text_used + len > TEXT_CHUNK) {
		if (os_.ntext == sizeof os_.text / sizeof os_.text[0])
			return 0;
		os_.text[os_.ntext] = malloc(TEXT_CHUNK);
		if (!os_.text[os_.ntext])
			return 0;
		os_.ntext++;
		os_.text_used = 0;
	}
	chunk = atomic_load_explicit(&os_.ents[os_.nents / CHUNK], memory_order_relaxed);
	if (!chunk) {
		chunk = calloc(CHUNK, sizeof *chunk);
		if (!chunk)
			return 0;
		atomic_store_explicit(&os_.ents[os_.nents / CHUNK], chunk, memory_order_release);
	}
	dst = os_.text[os_.ntext - 1] + os_.text_used;
	for (i = 0; i < len; i++)
		dst[i] = s[i] == ';' ? '_' : s[i];
	os_.text_used += len;
	chunk[os_.nents % CHUNK].text = dst;
	chunk[os_.nents % CHUNK].len = (uint32_t)len;
	id = ++os_.nents;
	if (!map_get(&os_.bytext, h, len))
		map_put(&os_.bytext, h, len, id);
	return id;
}

/* ------------------------------------------------------------ names */

/* The UTF-8 of attribute `name` of `o` into buf[size] (cut); false when
 * there is none. Clears the error it may raise. GIL held. */
static bool attr_text(pyobj *o, const char *name, char *buf, size_t size)
{
	pyobj *a = py.Object_GetAttrString(o, name);
	const char *s = a ? py.Unicode_AsUTF8(a) : NULL;

	if (s)
		snprintf(buf, size, "%s", s);
	else
		py.Err_Clear();
	if (a)
		py.DecRef(a);
	return s != NULL;
}

/* `file` with the first of torch's path prefixes it starts with taken
 * off. */
static const char *trimmed(const char *file)
{
	size_t i, n;

	for (i = 0; i < os_.nprefixes; i++) {
		n = strlen(os_.prefixes[i]);
		if (strncmp(file, os_.prefixes[i], n) == 0)
			return file + n;
	}
	return file;
}

/* Whether a frame of `file` named `text` is left out of stacks: profhost's
 * own Python files, and the entries torch's profiler leaves out
 * (torch.autograd.profiler_util._filter_stack_entry). */
static bool hidden(const char *file, const char *text)
{
	static const char *const torch_out[][2] = {
		{ "autograd/__init__", "_make_grads" },
		{ "autograd/__init__", "backward" },
		{ "torch/tensor", "backward" },
		{ "_internal/common_utils", "prof_callable" },
		{ "_internal/common_utils", "prof_func_call" },
		{ "_internal/common_utils", "prof_meth_call" },
	};
	const char *slash = strrchr(file, '/');
	size_t i;

	if (slash && slash - file >= 9 && strncmp(slash - 9, "/profhost", 9) == 0)
		return true;
	for (i = 0; i < sizeof torch_out / sizeof torch_out[0]; i++)
		if (strstr(text, torch_out[i][0]) && strstr(text, torch_out[i][1]))
			return true;
	return false;
}

/* The entry of a frame of `code` at `line` (-1: the code's first line,
 * as torch names a call), ENTRY_HIDDEN for a hidden one, 0 when it cannot
 * be made. GIL held; the caller keeps any pending exception. */
static uint32_t frame_entry(pyobj *code, int line)
{
	char file[1024], name[256], text[OPSTACKS_ENTRY_MAX + 1];
	pyobj *first;
	int n;

	if (!attr_text(code, "co_filename", file, sizeof file) ||
	    !attr_text(code, "co_name", name, sizeof name))
		return 0;
	if (line < 0) {
		first = py.Object_GetAttrString(code, "co_firstlineno");
		line = first ? (int)py.Long_AsLong(first) : 0;
		if (first)
			py.DecRef(first);
		py.Err_Clear();
	}
	n = snprintf(text, sizeof text, "%s(%d): %s", trimmed(file), line, name);
	if (n < 0)
		return 0;
	if (hidden(file, text))
		return ENTRY_HIDDEN;
	return entry_of_text(text, (size_t)n < sizeof text ? (size_t)n : sizeof text - 1);
}

/* The entry of a call of `code` (cached, a reference to the code held so
 * its address names it for good). GIL held. */
static uint32_t code_entry(pyobj *code)
{
	pyobj *type, *value, *tb;
	uint32_t e = map_get(&os_.code, (uintptr_t)code, 0);

	if (e)
		return e;
	py.Err_Fetch(&type, &value, &tb);
	e = frame_entry(code, -1);
	if (e && map_put(&os_.code, (uintptr_t)code, 0, e) == 0)
		py.IncRef(code);
	py.Err_Restore(type, value, tb);
	return e;
}

/* The entry of an nn.Module call (its _call_impl `frame`): "nn.Module:
 * <class>_<k>", k counting that class's modules in the order first seen
 * since tracking began. GIL held. */
static uint32_t module_entry(pyobj *frame)
{
	pyobj *type, *value, *tb, *locals, *self, *cls;
	char name[64], text[128];
	uint32_t e = 0;
	size_t i;

	py.Err_Fetch(&type, &value, &tb);
	locals = py.Object_GetAttrString(frame, "f_locals");
	self = locals ? py.Dict_GetItemString(locals, "self") : NULL; /* borrowed */
	if (self)
		e = map_get(&os_.module, (uintptr_t)self, 0);
	if (self && !e) {
		cls = py.Object_GetAttrString(self, "__class__");
		if (cls && attr_text(cls, "__name__", name, sizeof name)) {
			for (i = 0; i < os_.nklasses && strcmp(os_.klasses[i].name, name); i++)
				;
			if (i == os_.nklasses) {
				struct klass *k = realloc(os_.klasses, (i + 1) * sizeof *k);

				if (k) {
					os_.klasses = k;
					snprintf(k[i].name, sizeof k[i].name, "%s", name);
					k[i].next = 0;
					os_.nklasses++;
				}
			}
			if (i < os_.nklasses) {
				snprintf(text, sizeof text, "nn.Module: %s_%u", name,
					 os_.klasses[i].next++);
				e = entry_of_text(text, strlen(text));
				if (e && map_put(&os_.module, (uintptr_t)self, 0, e) == 0)
					py.IncRef(self);
			}
		}
		if (cls)
			py.DecRef(cls);
	}
	if (locals)
		py.DecRef(locals);
	py.Err_Clear();
	py.Err_Restore(type, value, tb);
	return e;
}

/* Whether `o` is a C function object (what CPython's C_CALL events name). */
static bool is_cfunction(pyobj *o)
{
	void *type;

	memcpy(&type, (const char *)o + sizeof(intptr_t), sizeof type); /* ob_type */
	return type == py.CFunction_Type || (py.CMethod_Type && type == py.CMethod_Type);
}

/* The entry of a call of C function `fn` (is_cfunction): its repr, as
 * torch names it ("<built-in function linear>", "<built-in method add of
 * type object at 0x...>"), cached by its C function and self. GIL held. */
static uint32_t cfunction_entry(pyobj *fn)
{
	pyobj *type, *value, *tb, *repr;
	uintptr_t f = (uintptr_t)py.CFunction_GetFunction(fn);
	uintptr_t self = (uintptr_t)py.CFunction_GetSelf(fn);
	uint32_t e = map_get(&os_.cfn, f, self);
	const char *s;

	if (e)
		return e;
	py.Err_Fetch(&type, &value, &tb);
	repr = py.Object_Repr(fn);
	s = repr ? py.Unicode_AsUTF8(repr) : NULL;
	if (s)
		e = entry_of_text(s, strlen(s));
	if (repr)
		py.DecRef(repr);
	py.Err_Clear();
	py.Err_Restore(type, value, tb);
	if (e)
		map_put(&os_.cfn, f, self, e);
	return e;
}

/* ------------------------------------------------------------ shadow stacks */

static uint32_t top_node(const struct tracked *s)
{
	if (!s->depth)
		return 0;
	return s->depth > OPSTACKS_DEPTH ? NODE_FULL : s->ent[s->depth - 1].node;
}

static void set_cur(struct tracked *s)
{
	atomic_store_explicit(&s->cur, top_node(s), memory_order_release);
}

static void push(struct tracked *s, uint32_t node, const void *key, uint32_t c)
{
	if (s->depth < OPSTACKS_DEPTH) {
		s->ent[s->depth].node = node;
		s->ent[s->depth].c = c;
		s->ent[s->depth].key = key;
	}
	if (s->depth < UINT32_MAX)
		s->depth++;
	set_cur(s);
}

/* The entry of a frame being called (or, `now`, already running when
 * tracking began: named at its line then). GIL held. */
static uint32_t call_entry(pyobj *frame, bool now)
{
	pyobj *code = py.Frame_GetCode(frame);
	pyobj *type, *value, *tb;
	uint32_t e;

	if (!code)
		return 0;
	if (os_.call_impl && (uintptr_t)code == os_.call_impl) {
		e = module_entry(frame);
	} else if (!now) {
		e = code_entry(code);
	} else {
		py.Err_Fetch(&type, &value, &tb);
		e = frame_entry(code, py.Frame_GetLineNumber(frame));
		py.Err_Restore(type, value, tb);
	}
	py.DecRef(code);
	return e;
}

static void on_call(struct tracked *s, pyobj *frame)
{
	uint32_t parent = top_node(s);

	if (parent == NODE_FULL || s->depth >= OPSTACKS_DEPTH)
		push(s, NODE_FULL, frame, 0);
	else
		push(s, child(parent, call_entry(frame, false)), frame, 0);
}

static void on_return(struct tracked *s, pyobj *frame)
{
	uint32_t i;

	if (s->depth > OPSTACKS_DEPTH) {
		s->depth--;
		set_cur(s);
		return;
	}
	for (i = s->depth; i-- > 0;)
		if (!s->ent[i].c && s->ent[i].key == frame) {
			s->depth = i;
			set_cur(s);
			return;
		}
}

static void on_c_call(struct tracked *s, pyobj *fn)
{
	uint32_t parent = top_node(s);

	if (!is_cfunction(fn))
		return;
	if (parent == NODE_FULL || s->depth >= OPSTACKS_DEPTH)
		push(s, NODE_FULL, fn, 1);
	else
		push(s, child(parent, cfunction_entry(fn)), fn, 1);
}

static void on_c_return(struct tracked *s, pyobj *fn)
{
	if (!is_cfunction(fn) || !s->depth)
		return;
	if (s->depth > OPSTACKS_DEPTH ||
	    (s->ent[s->depth - 1].c && s->ent[s->depth - 1].key == fn)) {
		s->depth--;
		set_cur(s);
	}
}

static struct tracked *slot_of(void *ts);

/* The profile function: `obj` holds the thread's struct tracked (set
 * thread by thread), or is NULL (set on every thread at once, CPython
 * 3.12+: the thread's slot is found by its thread state). Runs under the
 * GIL on the tracked thread, with CPython's tracing off. */
static int profile(pyobj *obj, pyobj *frame, int what, pyobj *arg)
{
	struct tracked *s;

	if (obj) {
		s = py.Long_AsVoidPtr(obj);
	} else {
		void *ts = py.ThreadState_Get();

		s = t_slot;
		if (!s || atomic_load_explicit(&s->tstate, memory_order_relaxed) != ts)
			s = slot_of(ts);
	}
	if (!s || !atomic_load_explicit(&s->on, memory_order_relaxed))
		return 0;
	t_slot = s;
	switch (what) {
	case PYT_CALL:
		on_call(s, frame);
		break;
	case PYT_RETURN:
		on_return(s, frame);
		break;
	case PYT_C_CALL:
		if (arg)
			on_c_call(s, arg);
		break;
	case PYT_C_RETURN:
	case PYT_C_EXCEPTION:
		if (arg)
			on_c_return(s, arg);
		break;
	default:
		break;
	}
	return 0;
}

/* ------------------------------------------------------------ threads */

/* Frees the slots of thread states that are gone (not among live[0..n)).
 * GIL held. */
static void forget_gone(void *const *live, size_t n)
{
	size_t i, k;

	for (i = 0; i < OPSTACKS_THREADS; i++) {
		struct tracked *s = atomic_load(&os_.threads[i]);
		void *ts = s ? atomic_load(&s->tstate) : NULL;

		if (!ts)
			continue;
		for (k = 0; k < n && live[k] != ts; k++)
			;
		if (k == n) {
			atomic_store(&s->on, 0);
			atomic_store(&s->tstate, NULL);
		}
	}
}

/* The slot of thread state `ts`, NULL when it has none. Any thread. */
static struct tracked *slot_of(void *ts)
{
	size_t i;

	for (i = 0; ts && i < OPSTACKS_THREADS; i++) {
		struct tracked *s = atomic_load_explicit(&os_.threads[i], memory_order_acquire);

		if (s && atomic_load_explicit(&s->tstate, memory_order_acquire) == ts)
			return s;
	}
	return NULL;
}

/* The slot of thread state `ts`, taken (and allocated) when it has none;
 * NULL when every slot is in use. GIL held. */
static struct tracked *slot_for(void *ts)
{
	struct tracked *s, *free_slot = NULL;
	size_t i, free_i = OPSTACKS_THREADS;

	for (i = 0; i < OPSTACKS_THREADS; i++) {
		s = atomic_load(&os_.threads[i]);
		if (s && atomic_load(&s->tstate) == ts)
			return s;
		if (!free_slot && (!s || !atomic_load(&s->tstate))) {
			free_slot = s;
			free_i = i;
		}
	}
	if (free_i == OPSTACKS_THREADS)
		return NULL;
	if (!free_slot) {
		free_slot = calloc(1, sizeof *free_slot);
		if (!free_slot)
			return NULL;
		atomic_store(&os_.threads[free_i], free_slot);
	}
	atomic_store(&free_slot->on, 0);
	atomic_store(&free_slot->tstate, ts);
	return free_slot;
}

/* Sets thread state `ts`'s profile function (`obj`: its argument; NULL,
 * NULL removes it): directly on the calling thread's (`self`); another
 * thread's with ts swapped in, as CPython before 3.12 sets only the
 * current thread's (torch's tracer does the same). From 3.12, where
 * swapping in another thread's state would bind it to this thread, every
 * thread's is set at once instead, by opstacks_start and opstacks_stop
 * (nothing here). GIL held. */
static void set_profile(void *ts, void *self, tracefunc fn, pyobj *obj)
{
	void *prev;

	if (ts == self) {
		py.Eval_SetProfile(fn, obj);
		return;
	}
	if (py.Eval_SetProfileAllThreads)
		return;
	prev = py.ThreadState_Swap(ts);
	py.Eval_SetProfile(fn, obj);
	py.ThreadState_Swap(prev);
}

/* Tracks thread state `ts`: its frames now become its shadow stack, and
 * the profile function goes on. GIL held; errors cleared. */
static void track(void *ts, void *self)
{
	struct tracked *s = slot_for(ts);
	pyobj **frames = NULL, **grown, *f, *obj;
	size_t n = 0, cap = 0, i;

	if (!s)
		return;
	atomic_store(&s->on, 0);
	s->depth = 0;
	for (f = py.ThreadState_GetFrame(ts); f; f = py.Frame_GetBack(f)) {
		if (n == cap) {
			cap = cap ? cap * 2 : 64;
			grown = realloc(frames, cap * sizeof *frames);
			if (!grown) {
				py.DecRef(f);
				break;
			}
			frames = grown;
		}
		frames[n++] = f;
	}
	for (i = n; i-- > 0;) {
		uint32_t parent = top_node(s);

		if (parent == NODE_FULL || s->depth >= OPSTACKS_DEPTH)
			push(s, NODE_FULL, frames[i], 0);
		else
			push(s, child(parent, call_entry(frames[i], true)), frames[i], 0);
		py.DecRef(frames[i]);
	}
	free(frames);
	set_cur(s);
	atomic_store(&s->on, 1);
	if (py.Eval_SetProfileAllThreads) {
		if (ts == self && !os_.starting)
			py.Eval_SetProfile(profile, NULL); /* a thread started meanwhile */
	} else {
		obj = py.Long_FromVoidPtr(s);
		if (obj) {
			set_profile(ts, self, profile, obj);
			py.DecRef(obj);
		}
	}
	py.Err_Clear();
}

/* The interpreter's thread states, at most `max`, into live[]. GIL held. */
static size_t live_threads(void **live, size_t max)
{
	void *ts;
	size_t n = 0;

	for (ts = py.InterpreterState_ThreadHead(py.InterpreterState_Get()); ts && n < max;
	     ts = py.ThreadState_Next(ts))
		live[n++] = ts;
	return n;
}

int opstacks_start(const char *prefixes, uintptr_t call_impl)
{
	/* zeroed: gcc -O3 cannot see live_threads() fill what forget_gone reads */
	void *live[4 * OPSTACKS_THREADS] = { 0 }, *self;
	pyobj *type, *value, *tb;
	const char *p, *nl;
	size_t n, i;

	if (!os_.ok)
		return -1;
	py.Err_Fetch(&type, &value, &tb);
	for (i = 0; i < os_.nprefixes; i++)
		free(os_.prefixes[i]);
	os_.nprefixes = 0;
	for (p = prefixes; p && *p && os_.nprefixes < PREFIXES_MAX; p = nl ? nl + 1 : "") {
		nl = strchr(p, '\n');
		n = nl ? (size_t)(nl - p) : strlen(p);
		if (n && (os_.prefixes[os_.nprefixes] = strndup(p, n)) != NULL)
			os_.nprefixes++;
	}
	os_.call_impl = call_impl;
	self = py.ThreadState_Get();
	n = live_threads(live, sizeof live / sizeof live[0]);
	forget_gone(live, n);
	os_.starting = true;
	for (i = 0; i < n; i++)
		track(live[i], self);
	os_.starting = false;
	if (py.Eval_SetProfileAllThreads)
		py.Eval_SetProfileAllThreads(profile, NULL);
	py.Err_Clear();
	py.Err_Restore(type, value, tb);
	return 0;
}

void opstacks_thread(void)
{
	/* zeroed: gcc -O3 cannot see live_threads() fill what forget_gone reads */
	void *live[4 * OPSTACKS_THREADS] = { 0 }, *self;
	pyobj *type, *value, *tb;
	size_t n;

	if (!os_.ok)
		return;
	py.Err_Fetch(&type, &value, &tb);
	self = py.ThreadState_Get();
	n = live_threads(live, sizeof live / sizeof live[0]);
	forget_gone(live, n);
	track(self, self);
	py.Err_Restore(type, value, tb);
}

void opstacks_stop(void)
{
	/* zeroed: gcc -O3 cannot see live_threads() fill what forget_gone reads */
	void *live[4 * OPSTACKS_THREADS] = { 0 }, *self;
	pyobj *type, *value, *tb;
	size_t n, i, k;

	if (!os_.ok)
		return;
	py.Err_Fetch(&type, &value, &tb);
	self = py.ThreadState_Get();
	n = live_threads(live, sizeof live / sizeof live[0]);
	for (i = 0; i < OPSTACKS_THREADS; i++) {
		struct tracked *s = atomic_load(&os_.threads[i]);
		void *ts = s ? atomic_load(&s->tstate) : NULL;

		if (!s || !atomic_load(&s->on))
			continue;
		atomic_store(&s->on, 0);
		atomic_store(&s->cur, 0);
		for (k = 0; k < n && live[k] != ts; k++)
			;
		if (k < n)
			set_profile(ts, self, NULL, NULL);
	}
	if (py.Eval_SetProfileAllThreads)
		py.Eval_SetProfileAllThreads(NULL, NULL);
	for (i = 0; i < os_.module.cap; i++)
		if (os_.module.v[i])
			py.DecRef((pyobj *)(uintptr_t)os_.module.k[2 * i]);
	map_clear(&os_.module);
	free(os_.klasses);
	os_.klasses = NULL;
	os_.nklasses = 0;
	py.Err_Clear();
	py.Err_Restore(type, value, tb);
}

/* ------------------------------------------------------------ operators */

/* Appends the records of `node` and of its ancestors not yet written in
 * generation `gen` (each node once a generation, whichever thread gets
 * it first). Any thread. */
static void emit(uint32_t node, uint64_t gen)
{
	int64_t now = clock_now_ns();

	while (node && node != NODE_FULL) {
		struct node *nd = node_at(node);
		uint64_t old = atomic_load_explicit(&nd->gen, memory_order_relaxed);
		const struct entry *e;

		if (old == gen)
			return;
		if (!atomic_compare_exchange_strong(&nd->gen, &old, gen))
			continue; /* another thread took it meanwhile: look again */
		e = entry_at(nd->entry);
		if (os_.append)
			os_.append(EVBUF_OPSTACK, now, e->text, e->len, node, nd->parent);
		node = nd->parent;
	}
}

/* The calling thread's slot, found by its thread state when it is not
 * yet known (no profile event of its own since tracking began). Any
 * thread. */
static struct tracked *own_slot(void)
{
	void *ts = py.GILState_GetThisThreadState();
	struct tracked *s = t_slot;
	size_t i;

	if (!ts)
		return NULL;
	if (s && atomic_load_explicit(&s->tstate, memory_order_acquire) == ts)
		return s;
	for (i = 0; i < OPSTACKS_THREADS; i++) {
		s = atomic_load_explicit(&os_.threads[i], memory_order_acquire);
		if (s && atomic_load_explicit(&s->tstate, memory_order_acquire) == ts) {
			t_slot = s;
			return s;
		}
	}
	return NULL;
}

uint32_t opstacks_current(uint64_t gen)
{
	struct tracked *s;
	uint32_t node;

	if (!os_.ok || !(s = own_slot()) || !atomic_load_explicit(&s->on, memory_order_acquire))
		return 0;
	node = atomic_load_explicit(&s->cur, memory_order_acquire);
	if (node == NODE_FULL) {
		atomic_fetch_add_explicit(&os_.dropped, 1, memory_order_relaxed);
		return 0;
	}
	if (node)
		emit(node, gen);
	return node;
}

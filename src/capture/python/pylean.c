/*
 * pylean — the builtins the Python bridge calls on every step (see
 * pylean.h).
 *
 * The phases' rules are profhost/_phases.py's lean mode, kept in step with
 * it: phases never nest on a thread (one starting inside another is not
 * timed), except a DataLoader fetch ending an optimizer step whose end
 * never came; a backward's start ends an inferred forward that began at
 * the thread's mark (its last fetch, backward or step boundary); on the
 * thread that makes the automatic steps, phases are kept until its next
 * step and written then, at most PYLEAN_KEPT at once (a full list is
 * written without a step).
 */
#include "pylean.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "../../common/clock.h"
#include "../../common/log.h"

#define PYLEAN_KEPT 16          /* phases kept a thread before its step */
#define PYLEAN_SITES 24         /* frames noted at an automatic step */
#define PYLEAN_REAPPLY_NS 100000000 /* the switch runs at least this often */
#define PYLEAN_WALK_MAX 64      /* frames looked at for a raised step */

enum { DATA, FORWARD, BACKWARD, OPTIMIZER, NPHASES, NONE = -1 };
#define STATE_EXPLICIT 16       /* pybridge state: explicit steps seen */

struct lean_kept {
	int phase;
	int64_t start_ns, end_ns;
	pyobj *name;                 /* a strong reference, or NULL */
};

/* One thread's state. Touched only by its thread (GIL held). */
struct lean_thread {
	unsigned gen;                /* lean.gen when last reset */
	int cur;                     /* the phase timed now, or NONE */
	int open;                    /* the phase begin() started, or NONE */
	bool steps;                  /* this thread made an automatic step */
	bool opt_py;                 /* its optimizer phase is Python's */
	int depth;                   /* optimizer.step() nesting */
	pyobj *frame;                /* the outermost step's frame (strong), or NULL */
	int64_t t0;                  /* start of the optimizer phase */
	int64_t open_t0;             /* start of begin()'s phase */
	int64_t fwd;                 /* ... and of the forward it ends (0: none) */
	int64_t mark;                /* where an inferred forward starts (0: none) */
	unsigned n;                  /* kept[0..n) */
	struct lean_kept kept[PYLEAN_KEPT];
};

/* Global-dynamic: libprofhost-core is loaded with dlopen (no static TLS
 * is promised to it), and these are read a few times a step, not per
 * event. */
static __thread struct lean_thread lean_tls = { .cur = NONE, .open = NONE };

struct lean_site {
	uintptr_t frame;             /* id() of the frame */
	pyobj *code;                 /* its code object (strong) */
	int lasti;
};

static struct {
	const struct py_syms *py;
	const struct pylean_host *h;
	bool walk;                   /* the step builtin notes its frames */
	pyobj *named[NPHASES];       /* the name lean_name took last, per phase
					(strong; GIL held) */
	/* the switches: ctl(); GIL held */
	int mode;                    /* PYLEAN_OFF, _ON, _HOOKS */
	bool batch, auto_steps;
	unsigned owned;              /* bit per phase */
	unsigned gen;
	_Atomic int down;            /* the interpreter is finalizing */
	/* applied(); GIL held */
	bool applied_ok;
	int applied_state;
	int64_t applied_ns;
	ssize_t applied_modules;
	pyobj *modules;              /* sys.modules as applied() saw it (strong) */
	/* the latest automatic step's call sites; GIL held */
	unsigned long ident;
	unsigned nsites;
	bool have_sites;
	struct lean_site sites[PYLEAN_SITES];
} lean;

/* ------------------------------------------------------------ phases */

/* Whether `name` (a str, or anything) is a name the phase queries take for
 * `phase`, *text and *len set to it then. The latest one taken for each
 * phase is remembered (held): a DataLoader's name is one object, checked
 * once rather than at every step. */
static bool lean_name(int phase, pyobj *name, const char **text, ssize_t *len)
{
	const struct py_syms *py = lean.py;

	*text = py->UnicodeAsUTF8AndSize(name, len);
	if (!*text) {
		py->ErrClear(); /* not a str */
		return false;
	}
	if (name == lean.named[phase])
		return true;
	if (!lean.h->name_ok(phase, *text, (size_t)*len))
		return false;
	py->IncRef(name);
	if (lean.named[phase])
		py->DecRef(lean.named[phase]);
	lean.named[phase] = name;
	return true;
}

/* Writes kept phase `k` and drops its name. */
static void lean_write(const struct lean_kept *k)
{
	const char *name = NULL;
	ssize_t len = 0;

	if (k->name && !lean_name(k->phase, k->name, &name, &len))
		name = NULL; /* the phase's own name */
	lean.h->phase(k->phase, k->start_ns, k->end_ns, name, (size_t)len);
	if (k->name)
		lean.py->DecRef(k->name);
}

/* Writes the thread's kept phases, oldest first. */
static void lean_write_kept(struct lean_thread *t)
{
	unsigned i, n = t->n;

	t->n = 0; /* (a name's release may run Python code) */
	for (i = 0; i < n; i++)
		lean_write(&t->kept[i]);
}

/* The calling thread's state, started over when the mode changed since
 * (what was kept is written then). */
static struct lean_thread *lean_me(void)
{
	struct lean_thread *t = &lean_tls;

	if (t->gen != lean.gen) {
		lean_write_kept(t);
		t->gen = lean.gen;
		t->cur = NONE;
		t->mark = 0;
	}
	return t;
}

/* A phase that ended: kept for the thread's step, or written now where
 * none is coming. `name` is borrowed. */
static void lean_put(struct lean_thread *t, int phase, int64_t start, int64_t end,
		     pyobj *name)
{
	struct lean_kept k = { phase, start, end, NULL };

	if (name && name != lean.py->None)
		k.name = name;
	if (lean.batch && t->steps) {
		if (t->n == PYLEAN_KEPT)
			lean_write_kept(t);
		if (k.name)
			lean.py->IncRef(k.name);
		t->kept[t->n++] = k;
		return;
	}
	if (t->n)
		lean_write_kept(t);
	if (k.name)
		lean.py->IncRef(k.name);
	lean_write(&k);
}

static pyobj *lean_none(void)
{
	lean.py->IncRef(lean.py->None);
	return lean.py->None;
}

static pyobj *lean_int(long v)
{
	return lean.py->LongFromLong(v);
}

/* begin(phase): see pylean.h. */
static pyobj *lean_begin(pyobj *self, pyobj *arg)
{
	struct lean_thread *t;
	long long phase;
	int64_t now, fwd;

	(void)self;
	phase = lean.py->LongAsLongLong(arg);
	if (phase == -1 && lean.py->ErrOccurred()) {
		lean.py->ErrClear();
		return lean_int(0);
	}
	if (lean.mode != PYLEAN_ON || phase < 0 || phase >= NPHASES ||
	    (lean.owned & (1u << phase)))
		return lean_int(0);
	t = lean_me();
	if (t->open != NONE || (t->cur != NONE && (t->cur != OPTIMIZER || phase != DATA)))
		return lean_int(0); /* inside another phase: not timed */
	now = clock_mono_ns();
	t->cur = t->open = (int)phase;
	t->open_t0 = now;
	fwd = t->mark;
	t->mark = 0;
	if (phase != BACKWARD || fwd >= now || (lean.owned & (1u << FORWARD)))
		fwd = 0;
	t->fwd = fwd;
	return lean_int(1);
}

/* end(name): see pylean.h. */
static pyobj *lean_end(pyobj *self, pyobj *name)
{
	struct lean_thread *t = lean_me();
	int phase = t->open;
	int64_t now;

	(void)self;
	if (phase == NONE)
		return lean_none();
	t->open = NONE;
	if (t->cur == phase)
		t->cur = NONE;
	now = t->mark = clock_mono_ns();
	if (t->fwd)
		lean_put(t, FORWARD, t->fwd, t->open_t0, NULL);
	lean_put(t, phase, t->open_t0, now, phase == DATA ? name : NULL);
	return lean_none();
}

/* flush(mark): see pylean.h. */
static pyobj *lean_flush(pyobj *self, pyobj *mark)
{
	struct lean_thread *t = lean_me();

	(void)self;
	lean_write_kept(t);
	if (mark && mark != lean.py->None && lean.py->LongAsLongLong(mark) != 0 &&
	    lean.mode == PYLEAN_ON)
		t->mark = clock_mono_ns();
	lean.py->ErrClear();
	return lean_none();
}

/* ------------------------------------------------------------ steps */

/* Notes where the calling thread's automatic step was called from: the
 * frames from the innermost Python one outwards, what Python's
 * _steps._same_iteration reads back through last(). */
static void lean_walk(void)
{
	const struct py_syms *py = lean.py;
	pyobj *f = py->EvalGetFrame(), *back;
	unsigned i, n = 0;

	if (f)
		py->IncRef(f);
	while (f && n < PYLEAN_SITES) {
		struct lean_site *s = &lean.sites[n];
		pyobj *old = n < lean.nsites ? s->code : NULL;

		s->frame = (uintptr_t)f;
		s->code = py->FrameGetCode(f);
		s->lasti = py->FrameGetLasti(f);
		if (old)
			py->DecRef(old);
		n++;
		back = py->FrameGetBack(f);
		py->DecRef(f);
		f = back;
	}
	if (f)
		py->DecRef(f);
	for (i = n; i < lean.nsites; i++)
		if (lean.sites[i].code)
			py->DecRef(lean.sites[i].code);
	lean.nsites = n;
	lean.ident = (unsigned long)pthread_self();
	lean.have_sites = true;
}

/* An automatic step on the calling thread, the phases of `kept` (a list
 * of tuples, see pylean.h, or None) and the thread's own written first.
 * Returns the window state. */
static int lean_step(pyobj *kept);

/* One tuple of a step's `kept` list, written (malformed: skipped, its
 * exception cleared). `tup` is held by the caller (reading a number may
 * run Python code, which could drop it from the list). */
static void lean_kept_write(pyobj *tup)
{
	const struct py_syms *py = lean.py;
	struct lean_kept k;
	long long v[3];
	int i;

	if (!tup || py->TupleSize(tup) != 4) {
		py->ErrClear();
		return;
	}
	for (i = 0; i < 3; i++)
		v[i] = py->LongAsLongLong(py->TupleGetItem(tup, i));
	if (py->ErrOccurred()) {
		py->ErrClear();
		return;
	}
	if (v[0] < 0 || v[0] >= NPHASES)
		return;
	k.phase = (int)v[0];
	k.start_ns = v[1];
	k.end_ns = v[2];
	k.name = py->TupleGetItem(tup, 3);
	if (k.name == py->None)
		k.name = NULL;
	if (k.name)
		py->IncRef(k.name);
	lean_write(&k);
}

static int lean_step(pyobj *kept)
{
	const struct py_syms *py = lean.py;
	struct lean_thread *t = lean_me();
	ssize_t i, n = 0;
	void *ts;
	int state;

	if (lean.mode == PYLEAN_ON) { /* _phases.before_step(True), lean */
		t->mark = clock_mono_ns();
		t->steps = true;
	}
	lean_write_kept(t);
	if (kept && kept != py->None) {
		n = py->ListSize(kept);
		if (n < 0) {
			py->ErrClear(); /* not a list: no phases */
			n = 0;
		}
	}
	for (i = 0; i < n; i++) {
		pyobj *tup = py->ListGetItem(kept, i); /* borrowed */

		if (!tup) {
			py->ErrClear(); /* the list shrank meanwhile */
			break;
		}
		py->IncRef(tup);
		lean_kept_write(tup);
		py->DecRef(tup);
	}
	/* The host's step may run policy hooks and open or close a window:
	 * the GIL is let go (as ctypes' CFUNCTYPE did; keeping it through
	 * steps made torch's profiler's labels of a window late under ASan,
	 * cause not found, #29). */
	ts = py->SaveThread();
	state = lean.h->step();
	py->RestoreThread(ts);
	return state;
}

/* The step builtin: see pylean.h. Returns NULL, an exception set, only
 * when the int cannot be made. */
static pyobj *lean_step_fn(pyobj *self, pyobj *kept)
{
	(void)self;
	if (lean.walk)
		lean_walk();
	return lean_int(lean_step(kept));
}

/* Whether the bridge's switch must run after a step that returned
 * `state`: see pylean.h's applied(). */
static bool lean_must_apply(int state)
{
	ssize_t mods;

	if ((state & STATE_EXPLICIT) || !lean.applied_ok || lean.applied_state != state)
		return true;
	if (clock_mono_ns() - lean.applied_ns >= PYLEAN_REAPPLY_NS)
		return true;
	mods = lean.modules ? lean.py->ObjectSize(lean.modules) : -1;
	if (mods < 0)
		lean.py->ErrClear();
	return mods != lean.applied_modules;
}

/* applied(state): see pylean.h. */
static pyobj *lean_applied(pyobj *self, pyobj *arg)
{
	const struct py_syms *py = lean.py;
	long long state;
	pyobj *mods;

	(void)self;
	lean.applied_ok = false;
	if (!arg || arg == py->None)
		return lean_none();
	state = py->LongAsLongLong(arg);
	if (state == -1 && py->ErrOccurred()) {
		py->ErrClear();
		return lean_none();
	}
	mods = py->SysGetObject("modules"); /* borrowed */
	if (mods != lean.modules) {
		if (mods)
			py->IncRef(mods);
		if (lean.modules)
			py->DecRef(lean.modules);
		lean.modules = mods;
	}
	lean.applied_modules = mods ? py->ObjectSize(mods) : -1;
	py->ErrClear();
	lean.applied_state = (int)state;
	lean.applied_ns = clock_mono_ns();
	lean.applied_ok = true;
	return lean_none();
}

/* True while `frame` runs on the calling thread (the innermost frame or
 * one further out, up to PYLEAN_WALK_MAX). */
static bool lean_on_stack(pyobj *frame)
{
	const struct py_syms *py = lean.py;
	pyobj *f = py->EvalGetFrame(), *back;
	int i;

	if (f)
		py->IncRef(f);
	for (i = 0; f && i < PYLEAN_WALK_MAX; i++) {
		if (f == frame) {
			py->DecRef(f);
			return true;
		}
		back = py->FrameGetBack(f);
		py->DecRef(f);
		f = back;
	}
	if (f)
		py->DecRef(f);
	return false;
}

static void lean_drop_frame(struct lean_thread *t)
{
	pyobj *f = t->frame;

	t->frame = NULL;
	if (f)
		lean.py->DecRef(f);
}

/* The outermost optimizer step of the thread ended (ok: it returned):
 * its phase ends here, or the PYLEAN_PY_* bit for Python's. */
static int lean_opt_end(struct lean_thread *t, bool ok)
{
	int64_t now;

	if (t->opt_py) {
		t->opt_py = false;
		return ok ? PYLEAN_PY_END_OK : PYLEAN_PY_END_FAILED;
	}
	t = lean_me();
	if (t->cur != OPTIMIZER)
		return 0;
	t->cur = NONE;
	if (ok) {
		now = clock_mono_ns();
		lean_put(t, OPTIMIZER, t->t0, now, NULL);
	}
	return 0;
}

/* opt_pre(frame): see pylean.h. */
static pyobj *lean_opt_pre(pyobj *self, pyobj *frame)
{
	struct lean_thread *t = &lean_tls;
	int r = 0;

	(void)self;
	if (t->depth && t->frame && !lean_on_stack(t->frame)) {
		/* The outermost step raised and torch's global hooks ran no
		 * post hook for it (torch >= 2.0): it is over, and was no step. */
		t->depth = 0;
		lean_drop_frame(t);
		r |= lean_opt_end(t, false);
	}
	if (++t->depth == 1) {
		if (frame && frame != lean.py->None) {
			lean.py->IncRef(frame);
			t->frame = frame;
		}
		if (lean.mode == PYLEAN_HOOKS) {
			t->opt_py = true;
			r |= PYLEAN_PY_BEGIN;
		} else if (lean.mode == PYLEAN_ON && !(lean.owned & (1u << OPTIMIZER))) {
			t = lean_me();
			if (t->cur == NONE) {
				t->mark = 0;
				t->cur = OPTIMIZER;
				t->t0 = clock_mono_ns();
			}
		}
	}
	return r ? lean_int(r) : lean_none();
}

/* opt_failed(): see pylean.h. */
static pyobj *lean_opt_failed(pyobj *self, pyobj *unused)
{
	struct lean_thread *t = &lean_tls;
	int r = 0;

	(void)self;
	(void)unused;
	if (t->depth > 0)
		t->depth--;
	if (!t->depth) {
		lean_drop_frame(t);
		r = lean_opt_end(t, false);
	}
	return r ? lean_int(r) : lean_none();
}

/* opt_post(): see pylean.h. */
static pyobj *lean_opt_post(pyobj *self, pyobj *unused)
{
	struct lean_thread *t = &lean_tls;
	int r, state;

	(void)self;
	(void)unused;
	if (t->depth > 0)
		t->depth--;
	if (t->depth)
		return lean_none();
	lean_drop_frame(t);
	r = lean_opt_end(t, true);
	if (!lean.auto_steps || atomic_load(&lean.down))
		return r ? lean_int(r) : lean_none();
	if ((r & PYLEAN_PY_END_OK) || lean.mode == PYLEAN_HOOKS)
		return lean_int(r | PYLEAN_PY_AUTO); /* around a window: Python's */
	lean_walk();
	state = lean_step(NULL);
	if (!lean_must_apply(state))
		return r ? lean_int(r) : lean_none();
	return lean_int(r | PYLEAN_APPLY | (state << 8));
}

/* ctl(bits): see pylean.h. */
static pyobj *lean_ctl(pyobj *self, pyobj *arg)
{
	long long bits;

	(void)self;
	bits = lean.py->LongAsLongLong(arg);
	if (bits == -1 && lean.py->ErrOccurred()) {
		lean.py->ErrClear();
		return lean_none();
	}
	lean.mode = (int)(bits & PYLEAN_MODE);
	lean.batch = (bits & PYLEAN_BATCH) != 0;
	lean.owned = (unsigned)(bits >> PYLEAN_OWNED_SHIFT) & 15u;
	lean.auto_steps = (bits & PYLEAN_AUTO) != 0;
	lean.gen = (unsigned)(bits >> PYLEAN_GEN_SHIFT) & 0x7fffu;
	return lean_none();
}

/* last(): see pylean.h. Returns NULL, an exception set, when the objects
 * cannot be made. */
static pyobj *lean_last(pyobj *self, pyobj *unused)
{
	const struct py_syms *py = lean.py;
	pyobj *list, *out, *ident;
	unsigned i;

	(void)self;
	(void)unused;
	if (!lean.have_sites)
		return lean_none();
	list = py->ListNew(0);
	if (!list)
		return NULL;
	for (i = 0; i < lean.nsites; i++) {
		pyobj *id = py->LongFromVoidPtr((void *)lean.sites[i].frame);
		pyobj *lasti = py->LongFromLong(lean.sites[i].lasti);
		pyobj *tup = id && lasti ? py->TuplePack(3, id, lean.sites[i].code, lasti) : NULL;
		int rc = tup ? py->ListAppend(list, tup) : -1;

		if (tup)
			py->DecRef(tup);
		if (lasti)
			py->DecRef(lasti);
		if (id)
			py->DecRef(id);
		if (rc != 0) {
			py->DecRef(list);
			return NULL;
		}
	}
	ident = py->LongFromVoidPtr((void *)lean.ident);
	out = ident ? py->TuplePack(2, ident, list) : NULL;
	if (ident)
		py->DecRef(ident);
	py->DecRef(list);
	return out;
}

/* ------------------------------------------------------------ set-up */

static struct py_methoddef lean_step_def = {
	"step", lean_step_fn, PY_METH_O,
	"profhost's host: an automatic step, with the list of phases kept for it; "
	"returns the window state"
};

static struct py_methoddef lean_defs[] = {
	{ "begin", lean_begin, PY_METH_O, "profhost: a phase starts; 1 if timed" },
	{ "end", lean_end, PY_METH_O, "profhost: the timed phase ends" },
	{ "opt_pre", lean_opt_pre, PY_METH_O, "profhost: optimizer.step() starts" },
	{ "opt_post", lean_opt_post, PY_METH_NOARGS, "profhost: optimizer.step() returned" },
	{ "opt_failed", lean_opt_failed, PY_METH_NOARGS, "profhost: optimizer.step() raised" },
	{ "ctl", lean_ctl, PY_METH_O, "profhost: the bridge's switches" },
	{ "applied", lean_applied, PY_METH_O, "profhost: the state the bridge applied" },
	{ "flush", lean_flush, PY_METH_O, "profhost: this thread's kept phases, now" },
	{ "last", lean_last, PY_METH_NOARGS, "profhost: the latest automatic step's frames" },
};
#define LEAN_NDEFS (sizeof lean_defs / sizeof lean_defs[0])

#define SYM(name, field) { name, offsetof(struct py_syms, field) }
static const struct {
	const char *name;
	size_t off;
} lean_step_syms[] = {
	SYM("PyCFunction_NewEx", CFunctionNewEx),
	SYM("PyList_Size", ListSize),
	SYM("PyList_GetItem", ListGetItem),
	SYM("PyTuple_Size", TupleSize),
	SYM("PyTuple_GetItem", TupleGetItem),
	SYM("PyLong_AsLongLong", LongAsLongLong),
	SYM("PyLong_FromLong", LongFromLong),
	SYM("PyUnicode_AsUTF8AndSize", UnicodeAsUTF8AndSize),
	SYM("PyEval_SaveThread", SaveThread),
	SYM("PyEval_RestoreThread", RestoreThread),
	SYM("Py_IncRef", IncRef),
	SYM("_Py_NoneStruct", None),
}, lean_fast_syms[] = {
	SYM("PyTuple_Pack", TuplePack),
	SYM("PyList_New", ListNew),
	SYM("PyObject_Size", ObjectSize),
	SYM("PyEval_GetFrame", EvalGetFrame),
	SYM("PyFrame_GetBack", FrameGetBack),
	SYM("PyFrame_GetCode", FrameGetCode),
	SYM("PyFrame_GetLasti", FrameGetLasti),
};
#undef SYM

static bool lean_find(struct py_syms *py, const char *name, size_t off, const char *without)
{
	void *sym = dlsym(RTLD_DEFAULT, name);

	if (!sym) {
		log_msg(LOG_DEBUG, "python bridge: %s not found; %s", name, without);
		return false;
	}
	memcpy((char *)py + off, &sym, sizeof sym);
	return true;
}

void pylean_lookup(struct py_syms *py, bool *step_ok, bool *fast_ok)
{
	size_t i;

	*step_ok = *fast_ok = false;
	for (i = 0; i < sizeof lean_step_syms / sizeof lean_step_syms[0]; i++)
		if (!lean_find(py, lean_step_syms[i].name, lean_step_syms[i].off,
			       "steps go through ctypes"))
			return;
	*step_ok = true;
	for (i = 0; i < sizeof lean_fast_syms / sizeof lean_fast_syms[0]; i++)
		if (!lean_find(py, lean_fast_syms[i].name, lean_fast_syms[i].off,
			       "the step's hooks and phases run in Python"))
			return;
	*fast_ok = true;
}

void pylean_init(const struct py_syms *py, const struct pylean_host *h)
{
	lean.py = py;
	lean.h = h;
}

pyobj *pylean_step_builtin(bool walk)
{
	pyobj *fn = lean.py->CFunctionNewEx(&lean_step_def, NULL, NULL);

	if (!fn)
		lean.py->ErrClear();
	lean.walk = fn && walk;
	return fn;
}

pyobj *pylean_builtins(void)
{
	const struct py_syms *py = lean.py;
	pyobj *fn[LEAN_NDEFS], *out = NULL;
	size_t i, n;

	_Static_assert(LEAN_NDEFS == 9, "pylean_builtins packs nine");
	for (n = 0; n < LEAN_NDEFS; n++) {
		fn[n] = py->CFunctionNewEx(&lean_defs[n], NULL, NULL);
		if (!fn[n])
			break;
	}
	if (n == LEAN_NDEFS)
		out = py->TuplePack((ssize_t)n, fn[0], fn[1], fn[2], fn[3], fn[4], fn[5],
				    fn[6], fn[7], fn[8]);
	for (i = 0; i < n; i++)
		py->DecRef(fn[i]);
	if (!out)
		py->ErrClear();
	return out;
}

void pylean_down(void)
{
	atomic_store(&lean.down, 1);
}

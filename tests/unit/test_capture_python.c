/*
 * test_capture_python — the Python bridge (src/capture/python/python.c) as a
 * capture source against a fake host and a fake CPython: the test
 * executable exports the CPython functions the bridge looks up, and its
 * main thread plays the interpreter's, running the pending calls. Checks
 * what a Python user would notice: the bridge starts once the interpreter
 * is up, its window state follows the window callbacks (armed before a
 * window, recording inside it), automatic steps reach the host's step
 * callback until an explicit prof_step() takes over, each change is told
 * to the bridge (a sync) except while the process is ending, and a
 * disabled host leaves the interpreter alone; the phases a step hands
 * over in one call (version 9's `phases`) are written, in order, under
 * their names, before that step, and a truncated list ends early; the
 * step builtin handed to _start does the same from the tuples the bridge
 * keeps, skipping malformed ones, with the GIL released for the step.
 */
#include "check.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "capture/python/python.h"
#include "capture/source.h"
#include "common/log.h"

#define EXPORT __attribute__((visibility("default")))

/* The bridge's table (python.c's struct pybridge_api): what is used, and
 * the entries before `phases` as placeholders of their size. */
struct bridge_api {
	uint32_t version;
	uint32_t size;
	int (*state)(void);
	int (*step)(void);
	void (*placeholders[17])(void); /* phase .. module_call */
	int (*phases)(const void *buf, uint32_t len, int step);
};

enum { IDLE = 0, WARMUP = 1, RECORDING = 2, ARMED = 3, EXPLICIT = 16 };

/* ---- the fake CPython */

typedef struct pyobj pyobj;
static char obj_mod, obj_fn, obj_other, obj_step; /* objects are addresses */

/* The objects handed to the step builtin: a list of (int, int, int, str or
 * None) tuples, as profhost/_phases.py keeps a step's phases. */
enum fake_kind { F_NONE, F_LIST, F_TUPLE, F_INT, F_STR, F_FRAME };
struct fake_obj {
	enum fake_kind kind;
	long long v;              /* F_INT */
	const char *s;            /* F_STR */
	int n;                    /* F_LIST, F_TUPLE */
	struct fake_obj *items[8]; /* F_FRAME: its back, its code */
};
EXPORT struct fake_obj _Py_NoneStruct = { .kind = F_NONE };

/* CPython's PyMethodDef (python.c's struct py_methoddef). */
struct methoddef {
	const char *ml_name;
	pyobj *(*ml_meth)(pyobj *self, pyobj *arg);
	int ml_flags;
	const char *ml_doc;
};
static const struct methoddef *step_def;  /* made by the bootstrap */
static const struct methoddef *defs[16];  /* ... and the others (pylean.h) */
static int ndefs;
static pyobj *start_step_arg;             /* _start's third argument */
static pyobj *start_fast_arg;             /* ... and its fourth */
static struct fake_obj made[32];          /* tuples and lists the bridge made */
static int nmade;
static struct fake_obj ints[64];          /* ints it made (a ring) */
static int nints;
static struct fake_obj *cur_frame;        /* PyEval_GetFrame's */
static int py_err_set;                       /* an exception is set */
static bool gil_held = true;              /* the step builtin let go of it */
static bool stepped_without_gil;          /* the host's step ran without it */

static pthread_mutex_t pend_lock = PTHREAD_MUTEX_INITIALIZER;
static int (*pend_fn[16])(void *);
static void *pend_arg[16];
static int npend;

static const struct bridge_api *api;  /* handed to _start */
static char start_config[1024];
static int starts, syncs;

EXPORT int Py_IsInitialized(void)
{
	return 1;
}

EXPORT int Py_AddPendingCall(int (*fn)(void *), void *arg)
{
	int rc = -1;

	pthread_mutex_lock(&pend_lock);
	if (npend < 16) {
		pend_fn[npend] = fn;
		pend_arg[npend++] = arg;
		rc = 0;
	}
	pthread_mutex_unlock(&pend_lock);
	return rc;
}

EXPORT pyobj *PyImport_ImportModule(const char *name)
{
	return strcmp(name, "profhost._bridge") == 0 ? (pyobj *)&obj_mod : NULL;
}

EXPORT pyobj *PyObject_GetAttrString(pyobj *o, const char *name)
{
	(void)o;
	(void)name;
	return (pyobj *)&obj_fn;
}

EXPORT pyobj *PyObject_CallFunctionObjArgs(pyobj *fn, ...)
{
	va_list ap;

	(void)fn;
	va_start(ap, fn);
	(void)va_arg(ap, pyobj *); /* the table's address */
	(void)va_arg(ap, pyobj *); /* the configuration */
	start_step_arg = va_arg(ap, pyobj *);
	start_fast_arg = start_step_arg ? va_arg(ap, pyobj *) : NULL;
	va_end(ap);
	starts++;
	return (pyobj *)&obj_other;
}

EXPORT pyobj *PyCFunction_NewEx(const struct methoddef *def, pyobj *self, pyobj *mod)
{
	(void)self;
	(void)mod;
	if (strcmp(def->ml_name, "step") == 0) {
		step_def = def;
		return (pyobj *)&obj_step;
	}
	if (ndefs == 16)
		return NULL;
	defs[ndefs++] = def;
	return (pyobj *)def; /* (only compared) */
}

static struct fake_obj *fake_new(enum fake_kind kind)
{
	if (nmade == 32)
		return NULL;
	made[nmade] = (struct fake_obj){ .kind = kind };
	return &made[nmade++];
}

EXPORT pyobj *PyTuple_Pack(ssize_t n, ...)
{
	struct fake_obj *t = fake_new(F_TUPLE);
	va_list ap;
	ssize_t i;

	if (!t || n > 16)
		return NULL;
	va_start(ap, n);
	for (i = 0; i < n; i++) {
		pyobj *o = va_arg(ap, pyobj *);

		if (i < 8)
			t->items[i] = (struct fake_obj *)o;
	}
	va_end(ap);
	t->n = (int)n;
	return (pyobj *)t;
}

EXPORT pyobj *PyList_New(ssize_t n)
{
	return n == 0 ? (pyobj *)fake_new(F_LIST) : NULL;
}

EXPORT ssize_t PyObject_Size(pyobj *o)
{
	(void)o;
	return 0;
}

EXPORT pyobj *PyEval_GetFrame(void)
{
	return (pyobj *)cur_frame;
}

EXPORT pyobj *PyFrame_GetBack(pyobj *f)
{
	return (pyobj *)((struct fake_obj *)f)->items[0];
}

EXPORT pyobj *PyFrame_GetCode(pyobj *f)
{
	return (pyobj *)((struct fake_obj *)f)->items[1];
}

EXPORT int PyFrame_GetLasti(pyobj *f)
{
	return (int)((struct fake_obj *)f)->v;
}

static struct fake_obj *fake(pyobj *o, enum fake_kind kind)
{
	struct fake_obj *f = (struct fake_obj *)o;

	if (!f || f->kind != kind) {
		py_err_set = 1;
		return NULL;
	}
	return f;
}

/* The length of a fake list or tuple (-1, an exception set: another kind). */
static ssize_t fake_len(pyobj *o, enum fake_kind kind)
{
	struct fake_obj *f = fake(o, kind);

	return f ? f->n : -1;
}

/* Item i of a fake list or tuple, borrowed (NULL: another kind, or out of
 * range). */
static pyobj *fake_item(pyobj *o, ssize_t i, enum fake_kind kind)
{
	struct fake_obj *f = fake(o, kind);

	return f && i < f->n ? (pyobj *)f->items[i] : NULL;
}

EXPORT ssize_t PyList_Size(pyobj *o)
{
	return fake_len(o, F_LIST);
}

EXPORT pyobj *PyList_GetItem(pyobj *o, ssize_t i)
{
	return fake_item(o, i, F_LIST);
}

EXPORT ssize_t PyTuple_Size(pyobj *o)
{
	return fake_len(o, F_TUPLE);
}

EXPORT pyobj *PyTuple_GetItem(pyobj *o, ssize_t i)
{
	return fake_item(o, i, F_TUPLE);
}

EXPORT long long PyLong_AsLongLong(pyobj *o)
{
	struct fake_obj *f = fake(o, F_INT);

	return f ? f->v : -1;
}

EXPORT pyobj *PyLong_FromLong(long v)
{
	struct fake_obj *r = &ints[nints++ % 64];

	*r = (struct fake_obj){ .kind = F_INT, .v = v };
	return (pyobj *)r;
}

EXPORT const char *PyUnicode_AsUTF8AndSize(pyobj *o, ssize_t *len)
{
	struct fake_obj *f = fake(o, F_STR);

	if (!f)
		return NULL;
	*len = (ssize_t)strlen(f->s);
	return f->s;
}

EXPORT void *PyEval_SaveThread(void)
{
	gil_held = false;
	return &obj_other;
}

EXPORT void Py_IncRef(pyobj *o)
{
	(void)o;
}

EXPORT void PyEval_RestoreThread(void *ts)
{
	(void)ts;
	gil_held = true;
}

EXPORT pyobj *PyObject_CallObject(pyobj *fn, pyobj *args)
{
	(void)fn;
	(void)args;
	syncs++;
	return (pyobj *)&obj_other;
}

EXPORT pyobj *PyLong_FromVoidPtr(void *p)
{
	if (!api) { /* the bootstrap's: the table */
		api = p;
		return (pyobj *)&obj_other;
	}
	return PyLong_FromLong((long)(uintptr_t)p); /* last()'s ids */
}

EXPORT pyobj *PyUnicode_FromString(const char *s)
{
	snprintf(start_config, sizeof start_config, "%s", s);
	return (pyobj *)&obj_other;
}

EXPORT pyobj *PyUnicode_DecodeFSDefault(const char *s)
{
	(void)s;
	return (pyobj *)&obj_other;
}

EXPORT pyobj *PySys_GetObject(const char *name)
{
	(void)name;
	return NULL;
}

EXPORT int PyList_Append(pyobj *l, pyobj *i)
{
	struct fake_obj *f = (struct fake_obj *)l;

	if (f < made || f >= made + 32) /* sys.path's */
		return 0;
	if (f->kind != F_LIST || f->n == 8)
		return -1;
	f->items[f->n++] = (struct fake_obj *)i;
	return 0;
}

EXPORT int PySequence_Contains(pyobj *s, pyobj *i)
{
	(void)s;
	(void)i;
	return 1;
}

EXPORT pyobj *PyErr_Occurred(void)
{
	return py_err_set ? (pyobj *)&obj_other : NULL;
}

EXPORT void PyErr_Clear(void)
{
	py_err_set = 0;
}

EXPORT void PyErr_Print(void)
{
}

EXPORT int PyErr_ExceptionMatches(pyobj *e)
{
	(void)e;
	return 0;
}

EXPORT pyobj *PyExc_KeyboardInterrupt = (pyobj *)&obj_other;
EXPORT pyobj *PyExc_SystemExit = (pyobj *)&obj_other;

EXPORT void Py_DecRef(pyobj *o)
{
	(void)o;
}

/* Runs the queued pending calls, as the interpreter's main thread would;
 * returns how many ran. */
static int run_pending(void)
{
	int (*fn)(void *);
	void *arg;
	int ran = 0;

	for (;;) {
		pthread_mutex_lock(&pend_lock);
		if (!npend) {
			pthread_mutex_unlock(&pend_lock);
			return ran;
		}
		fn = pend_fn[0];
		arg = pend_arg[0];
		memmove(pend_fn, pend_fn + 1, (size_t)(npend - 1) * sizeof pend_fn[0]);
		memmove(pend_arg, pend_arg + 1, (size_t)(npend - 1) * sizeof pend_arg[0]);
		npend--;
		pthread_mutex_unlock(&pend_lock);
		fn(arg);
		ran++;
	}
}

/* ---- the fake host */

/* What the bridge wrote through the shim: each range start's name and
 * the number of steps made before it. */
#define MAX_WRITES 48
static char written[MAX_WRITES][64];
static int written_at_step[MAX_WRITES];
static int nwritten;
static int host_steps;

static int fake_append(uint16_t kind, int64_t ts, const void *payload, uint32_t len,
		       uint64_t id, uint64_t a)
{
	(void)ts;
	(void)id;
	(void)a;
	if (kind == EVBUF_RANGE_START && nwritten < MAX_WRITES && len < 64) {
		memcpy(written[nwritten], payload, len);
		written[nwritten][len] = '\0';
		written_at_step[nwritten++] = host_steps;
	}
	return 0;
}

/* Appends a phase record (struct pyb_phase_rec, then the name) to buf at
 * *n, as profhost/_phases.py packs one. */
static void pack_phase(char *buf, size_t *n, int32_t phase, const char *name,
		       int64_t start, int64_t end)
{
	uint32_t len = (uint32_t)strlen(name);

	memcpy(buf + *n, &phase, 4);
	memcpy(buf + *n + 4, &len, 4);
	memcpy(buf + *n + 8, &start, 8);
	memcpy(buf + *n + 16, &end, 8);
	memcpy(buf + *n + 24, name, len);
	*n += 24 + len;
}

static bool host_finishing_now;

static void fake_step(void *ctx)
{
	(void)ctx;
	host_steps++;
	stepped_without_gil = !gil_held;
}

/* The step builtin called as the bridge calls it: step(kept); returns
 * the int it returned (-1: not an int, or an exception left set). */
static long call_step_fn(struct fake_obj *kept)
{
	struct fake_obj *r;

	if (!step_def)
		return -1;
	r = (struct fake_obj *)step_def->ml_meth(NULL, kept ? (pyobj *)kept : (pyobj *)&_Py_NoneStruct);
	if (!r || r->kind != F_INT || py_err_set || !gil_held)
		return -1;
	return (long)r->v;
}

/* The builtin of pylean.h named `name` called with `arg` (NULL: none, as
 * METH_NOARGS). Returns its int, NONE_RET for None, -1 for anything else
 * or an exception left set. */
#define NONE_RET (-100)
static long call_lean(const char *name, struct fake_obj *arg)
{
	struct fake_obj *r = NULL;
	int i;

	for (i = 0; i < ndefs; i++)
		if (strcmp(defs[i]->ml_name, name) == 0)
			r = (struct fake_obj *)defs[i]->ml_meth(NULL, (pyobj *)arg);
	if (!r || py_err_set || !gil_held)
		return -1;
	if (r == &_Py_NoneStruct)
		return NONE_RET;
	return r->kind == F_INT ? (long)r->v : -1;
}

/* A thread of the program's fetching a batch (begin, end) while the
 * main thread times a phase; *arg: what begin returned. */
static void *other_thread_fetch(void *arg)
{
	struct fake_obj data = { .kind = F_INT, .v = 0 };

	*(long *)arg = call_lean("begin", &data);
	call_lean("end", &_Py_NoneStruct);
	return NULL;
}

/* Waits for CLOCK_MONOTONIC to move on: what a phase starts at comes
 * after what the previous one ended at. */
static void tick(void)
{
	struct timespec a, b;

	clock_gettime(CLOCK_MONOTONIC, &a);
	do
		clock_gettime(CLOCK_MONOTONIC, &b);
	while (b.tv_sec == a.tv_sec && b.tv_nsec == a.tv_nsec);
}

static bool fake_disabled(void *ctx)
{
	(void)ctx;
	return false;
}

static bool fake_finishing(void *ctx)
{
	(void)ctx;
	return host_finishing_now;
}

/* A step boundary as window.c reports it. */
static void boundary(uint64_t step, bool recording, bool next_active)
{
	struct capture_step s = { step, recording, next_active };

	python_capture.step(&s);
}

int main(void)
{
	struct policy_config cfg;
	struct capture_host ch;
	struct shim_api shim;
	struct err e;
	char recs[512];
	size_t n = 0;
	int i, steps_then;

	log_set_level(LOG_WARN);
	memset(&cfg, 0, sizeof cfg);
	memset(&ch, 0, sizeof ch);
	memset(&shim, 0, sizeof shim);
	shim.evbuf_append_raw = fake_append;
	ch.shim = &shim;
	ch.cfg = &cfg;
	ch.python = true;
	ch.step = fake_step;
	ch.disabled = fake_disabled;
	ch.finishing = fake_finishing;
	CHECK_EQ_INT(python_capture.init(&ch, &e), 0);

	/* The waiter finds the interpreter up and queues the bootstrap. */
	for (i = 0; i < 5000 && !run_pending(); i++)
		usleep(1000);
	CHECK_EQ_INT(starts, 1);
	CHECK(api != NULL);
	if (!api)
		return check_done();
	CHECK(strstr(start_config, "steps=optimizer\n") != NULL);
	CHECK(strstr(start_config, "py_stacks_hz=0\n") != NULL);
	CHECK_EQ_INT(api->state(), IDLE);

	/* Automatic steps reach the host. */
	CHECK_EQ_INT(api->step(), IDLE);
	CHECK_EQ_INT(host_steps, 1);

	/* A step's phases, handed over with it: written in order under their
	 * names (the data fetch under torch's name for it; a name that is not
	 * the phase's gives way to the phase's), then the step. */
	pack_phase(recs, &n, 0, "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
		   1000, 2000);
	pack_phase(recs, &n, 1, "", 2000, 3000);
	pack_phase(recs, &n, 2, "optimizer", 3000, 4000);
	pack_phase(recs, &n, 3, "", 4000, 5000);
	CHECK_EQ_INT(api->phases(recs, (uint32_t)n, 1), IDLE);
	CHECK_EQ_INT(host_steps, 2);
	CHECK_EQ_INT(nwritten, 4);
	CHECK_EQ_STR(written[0], "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__");
	CHECK_EQ_STR(written[1], "forward");
	CHECK_EQ_STR(written[2], "backward");
	CHECK_EQ_STR(written[3], "optimizer");
	for (i = 0; i < 4; i++)
		CHECK_EQ_INT(written_at_step[i], 1); /* before the step */
	/* Without a step; a record cut short ends the list, no step made. */
	nwritten = 0;
	CHECK_EQ_INT(api->phases(recs, 24 + 10, 0), IDLE);
	CHECK_EQ_INT(nwritten, 0);
	CHECK_EQ_INT(api->phases(recs, (uint32_t)n - 1, 0), IDLE);
	CHECK_EQ_INT(nwritten, 3);
	CHECK_EQ_INT(api->phases(NULL, 0, 0), IDLE);
	CHECK_EQ_INT(host_steps, 2);

	/* The step builtin handed to _start (METH_O): a step's kept phases as
	 * tuples, written in order under their names (None: the phase's own),
	 * before the step, which runs with the GIL released; malformed ones
	 * (not a 4-tuple, a phase out of range, a name not a str) skipped
	 * with their exceptions cleared; a non-list is no phases. */
	CHECK(start_step_arg == (pyobj *)&obj_step);
	CHECK(step_def != NULL && step_def->ml_flags == 0x0008);
	{
		struct fake_obj ph[6][4], tup[7], lst = { .kind = F_LIST }, bad = { .kind = F_TUPLE,
										.n = 3 };
		struct fake_obj nm_data = { .kind = F_STR,
					    .s = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__" };
		struct fake_obj not_str = { .kind = F_INT, .v = 7 };
		int64_t at[6] = { 0, 1, 2, 3, 1, 9 }; /* phases; 9: out of range */

		for (i = 0; i < 6; i++) {
			ph[i][0] = (struct fake_obj){ .kind = F_INT, .v = at[i] };
			ph[i][1] = (struct fake_obj){ .kind = F_INT, .v = 1000 * (i + 1) };
			ph[i][2] = (struct fake_obj){ .kind = F_INT, .v = 1000 * (i + 2) };
			tup[i] = (struct fake_obj){ .kind = F_TUPLE, .n = 4,
						    .items = { &ph[i][0], &ph[i][1], &ph[i][2],
							       &_Py_NoneStruct } };
		}
		tup[0].items[3] = &nm_data;
		tup[4].items[3] = &not_str; /* a name not a str: its phase's */
		lst.n = 7;
		for (i = 0; i < 4; i++)
			lst.items[i] = &tup[i];
		lst.items[4] = &bad;
		lst.items[5] = &tup[4];
		lst.items[6] = &tup[5];
		nwritten = 0;
		CHECK_EQ_INT(call_step_fn(&lst), IDLE);
		CHECK_EQ_INT(host_steps, 3);
		CHECK(stepped_without_gil);
		CHECK_EQ_INT(nwritten, 5);
		CHECK_EQ_STR(written[0], nm_data.s);
		CHECK_EQ_STR(written[1], "forward");
		CHECK_EQ_STR(written[2], "backward");
		CHECK_EQ_STR(written[3], "optimizer");
		CHECK_EQ_STR(written[4], "forward");
		for (i = 0; i < 5; i++)
			CHECK_EQ_INT(written_at_step[i], 2); /* before the step */
		/* None and a non-list: a step, no phases */
		nwritten = 0;
		stepped_without_gil = false;
		CHECK_EQ_INT(call_step_fn(NULL), IDLE);
		CHECK(stepped_without_gil);
		CHECK_EQ_INT(call_step_fn(&nm_data), IDLE);
		CHECK_EQ_INT(host_steps, 5);
		CHECK_EQ_INT(nwritten, 0);
	}

	/* The builtins of the step (pylean.h), handed to _start as a tuple
	 * after the step builtin. Between windows they time the phases and
	 * keep them with the thread's state in C, and make the optimizer
	 * step's automatic step. */
	{
		enum { ON = 1, HOOKS = 2, BATCH = 4, OWNED = 3, AUTO = 128, GEN = 1 << 16,
		       PY_BEGIN = 2, PY_END_OK = 4, PY_AUTO = 8, APPLY = 16 };
		static const char *order[] = { "begin", "end", "opt_pre", "opt_post",
					       "opt_failed", "ctl", "applied", "flush", "last" };
		struct fake_obj *fast = (struct fake_obj *)start_fast_arg, ph[4], b[8];
		struct fake_obj nm = { .kind = F_STR,
				       .s = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__" };
		struct fake_obj code[3], fr[3], *last, *sites, *site;
		int before;

		for (i = 0; i < 4; i++)
			ph[i] = (struct fake_obj){ .kind = F_INT, .v = i };
		CHECK(fast != NULL && fast->kind == F_TUPLE && fast->n == 9);
		CHECK_EQ_INT(ndefs, 9);
		for (i = 0; i < 9 && i < ndefs; i++) {
			CHECK_EQ_STR(defs[i]->ml_name, order[i]);
			if (fast && i < 8)
				CHECK(fast->items[i] == (struct fake_obj *)defs[i]);
		}
#define CTL(bits) (b[0] = (struct fake_obj){ .kind = F_INT, .v = (bits) }, \
		   call_lean("ctl", &b[0]))
#define APPLIED(st) (b[1] = (struct fake_obj){ .kind = F_INT, .v = (st) }, \
		     call_lean("applied", &b[1]))
		/* The first automatic step: no switch applied yet, so it asks
		 * for one; its optimizer phase is written at once (the thread
		 * makes steps from then on). */
		CHECK_EQ_INT(CTL(ON | BATCH | AUTO | 1 * GEN), NONE_RET);
		nwritten = 0;
		before = host_steps;
		CHECK_EQ_INT(call_lean("opt_pre", &_Py_NoneStruct), NONE_RET);
		stepped_without_gil = false;
		CHECK_EQ_INT(call_lean("opt_post", NULL), APPLY | (IDLE << 8));
		CHECK_EQ_INT(host_steps, before + 1);
		CHECK(stepped_without_gil);
		CHECK_EQ_INT(nwritten, 1);
		CHECK_EQ_STR(written[0], "optimizer");
		CHECK_EQ_INT(APPLIED(IDLE), NONE_RET);
		/* A step: the fetch under torch's name, the forward inferred
		 * from its end to the backward's start, the backward (a fetch
		 * inside it not timed), the optimizer step; kept until the
		 * step and written before it; the state applied: no switch. */
		nwritten = 0;
		CHECK_EQ_INT(call_lean("begin", &ph[0]), 1);
		CHECK_EQ_INT(call_lean("end", &nm), NONE_RET);
		tick();
		CHECK_EQ_INT(call_lean("begin", &ph[2]), 1);
		CHECK_EQ_INT(call_lean("begin", &ph[0]), 0);
		CHECK_EQ_INT(call_lean("end", &_Py_NoneStruct), NONE_RET);
		CHECK_EQ_INT(call_lean("opt_pre", &_Py_NoneStruct), NONE_RET);
		CHECK_EQ_INT(nwritten, 0);
		CHECK_EQ_INT(call_lean("opt_post", NULL), NONE_RET);
		CHECK_EQ_INT(host_steps, before + 2);
		CHECK_EQ_INT(nwritten, 4);
		CHECK_EQ_STR(written[0], nm.s);
		CHECK_EQ_STR(written[1], "forward");
		CHECK_EQ_STR(written[2], "backward");
		CHECK_EQ_STR(written[3], "optimizer");
		for (i = 0; i < 4; i++)
			CHECK_EQ_INT(written_at_step[i], before + 1);
		/* A name the phase queries do not take for the phase (here
		 * backward's, for a fetch) gives way to the phase's own; the
		 * loader's is taken again. */
		{
			struct fake_obj wrong = { .kind = F_STR, .s = "backward" };

			nwritten = 0;
			CHECK_EQ_INT(call_lean("begin", &ph[0]), 1);
			call_lean("end", &wrong);
			CHECK_EQ_INT(call_lean("begin", &ph[0]), 1);
			call_lean("end", &nm);
			call_lean("flush", &_Py_NoneStruct);
			CHECK_EQ_INT(nwritten, 2);
			CHECK_EQ_STR(written[0], "data");
			CHECK_EQ_STR(written[1], nm.s);
		}
		/* A phase the program reports itself is not timed; an end
		 * with no phase begun writes nothing. */
		CHECK_EQ_INT(CTL(ON | BATCH | AUTO | 1 * GEN | (1 << (OWNED + 2))), NONE_RET);
		CHECK_EQ_INT(call_lean("begin", &ph[2]), 0);
		CHECK_EQ_INT(call_lean("end", &_Py_NoneStruct), NONE_RET);
		/* Nested optimizer steps are one step; one that raised is none. */
		CHECK_EQ_INT(CTL(ON | BATCH | AUTO | 1 * GEN), NONE_RET);
		CHECK_EQ_INT(APPLIED(IDLE), NONE_RET);
		nwritten = 0;
		call_lean("opt_pre", &_Py_NoneStruct);
		call_lean("opt_pre", &_Py_NoneStruct);
		CHECK_EQ_INT(call_lean("opt_post", NULL), NONE_RET);
		CHECK_EQ_INT(host_steps, before + 2);
		CHECK_EQ_INT(call_lean("opt_post", NULL), NONE_RET);
		CHECK_EQ_INT(host_steps, before + 3);
		CHECK_EQ_INT(call_lean("opt_pre", &_Py_NoneStruct), NONE_RET);
		CHECK_EQ_INT(call_lean("opt_failed", NULL), NONE_RET);
		CHECK_EQ_INT(host_steps, before + 3);
		CHECK_EQ_INT(nwritten, 1); /* the first one's phase only */
		/* More phases than are kept before a step: none lost, in order. */
		nwritten = 0;
		for (i = 0; i < 20; i++) {
			CHECK_EQ_INT(call_lean("begin", &ph[0]), 1);
			call_lean("end", &_Py_NoneStruct);
		}
		CHECK_EQ_INT(nwritten, 16);
		call_lean("opt_pre", &_Py_NoneStruct);
		call_lean("opt_post", NULL);
		CHECK_EQ_INT(nwritten, 21);
		CHECK_EQ_STR(written[19], "data");
		CHECK_EQ_STR(written[20], "optimizer");
		/* Another thread's phases (it makes no steps) are written as
		 * they end, not kept for the stepping thread's step; its
		 * state is its own (the fetch timed there while this thread
		 * times one). */
		nwritten = 0;
		CHECK_EQ_INT(call_lean("begin", &ph[2]), 1);
		{
			pthread_t th;
			long r = -1;

			CHECK_EQ_INT(pthread_create(&th, NULL, other_thread_fetch, &r), 0);
			pthread_join(th, NULL);
			CHECK_EQ_INT(r, 1);
		}
		CHECK_EQ_INT(nwritten, 1);
		CHECK_EQ_STR(written[0], "data");
		call_lean("end", &_Py_NoneStruct);
		CHECK_EQ_INT(nwritten, 1); /* this thread's backward: kept */
		call_lean("flush", &_Py_NoneStruct);
		CHECK_EQ_INT(nwritten, 3); /* with the forward since its last fetch */
		CHECK_EQ_STR(written[1], "forward");
		CHECK_EQ_STR(written[2], "backward");
		/* A new mode writes what a thread kept; flush() does too. */
		nwritten = 0;
		call_lean("begin", &ph[0]);
		call_lean("end", &_Py_NoneStruct);
		CHECK_EQ_INT(nwritten, 0);
		CHECK_EQ_INT(CTL(ON | BATCH | AUTO | 2 * GEN), NONE_RET);
		CHECK_EQ_INT(call_lean("begin", &ph[0]), 1);
		CHECK_EQ_INT(nwritten, 1);
		call_lean("end", &_Py_NoneStruct);
		CHECK_EQ_INT(call_lean("flush", &_Py_NoneStruct), NONE_RET);
		CHECK_EQ_INT(nwritten, 2);
		/* Around a window the phases are Python's: the builtins time
		 * none and ask Python for the optimizer's and the step. */
		CHECK_EQ_INT(CTL(HOOKS | BATCH | AUTO | 3 * GEN), NONE_RET);
		before = host_steps;
		CHECK_EQ_INT(call_lean("begin", &ph[0]), 0);
		CHECK_EQ_INT(call_lean("opt_pre", &_Py_NoneStruct), PY_BEGIN);
		CHECK_EQ_INT(call_lean("opt_post", NULL), PY_END_OK | PY_AUTO);
		CHECK_EQ_INT(host_steps, before);
		/* Without automatic steps: a phase, no step. */
		CHECK_EQ_INT(CTL(ON | 4 * GEN), NONE_RET);
		nwritten = 0;
		call_lean("opt_pre", &_Py_NoneStruct);
		CHECK_EQ_INT(call_lean("opt_post", NULL), NONE_RET);
		CHECK_EQ_INT(host_steps, before);
		CHECK_EQ_INT(nwritten, 1);
		/* last(): the thread and the frames an automatic step was
		 * called from, innermost first: (id, code, lasti). */
		CHECK_EQ_INT(call_lean("last", NULL), -1); /* a tuple, not an int */
		for (i = 0; i < 3; i++) {
			code[i] = (struct fake_obj){ .kind = F_STR, .s = "code" };
			fr[i] = (struct fake_obj){ .kind = F_FRAME, .v = 10 * (i + 1),
						   .items = { i < 2 ? &fr[i + 1] : NULL,
							      &code[i] } };
		}
		cur_frame = &fr[0];
		CHECK_EQ_INT(CTL(AUTO | 5 * GEN), NONE_RET);
		nmade = 0;
		call_lean("opt_pre", &_Py_NoneStruct);
		call_lean("opt_post", NULL);
		CHECK_EQ_INT(host_steps, before + 1);
		last = NULL;
		for (i = 0; i < ndefs; i++)
			if (strcmp(defs[i]->ml_name, "last") == 0)
				last = (struct fake_obj *)defs[i]->ml_meth(NULL, NULL);
		CHECK(last != NULL && last->kind == F_TUPLE && last->n == 2);
		if (last && last->kind == F_TUPLE && last->n == 2) {
			CHECK_EQ_INT(last->items[0]->v, (long long)(uintptr_t)pthread_self());
			sites = last->items[1];
			CHECK(sites->kind == F_LIST && sites->n == 3);
			for (i = 0; i < 3 && i < sites->n; i++) {
				site = sites->items[i];
				CHECK(site->kind == F_TUPLE && site->n == 3);
				CHECK_EQ_INT(site->items[0]->v, (long long)(uintptr_t)&fr[i]);
				CHECK(site->items[1] == &code[i]);
				CHECK_EQ_INT(site->items[2]->v, 10 * (i + 1));
			}
		}
		/* torch >= 2.0's global hooks run no post hook for a step that
		 * raised: the next pre hook finds that step's frame gone from
		 * the stack and starts over; one still on it is an outer step,
		 * and the inner one none. */
		CHECK_EQ_INT(CTL(AUTO | 6 * GEN), NONE_RET);
		before = host_steps;
		cur_frame = &fr[0];
		call_lean("opt_pre", &fr[1]);
		call_lean("opt_pre", &fr[0]);
		call_lean("opt_post", NULL);
		CHECK_EQ_INT(host_steps, before);
		call_lean("opt_post", NULL);
		CHECK_EQ_INT(host_steps, before + 1);
		call_lean("opt_pre", &fr[1]);
		cur_frame = &fr[2]; /* it raised: fr[1] is gone */
		call_lean("opt_pre", &fr[2]);
		call_lean("opt_post", NULL);
		CHECK_EQ_INT(host_steps, before + 2);
		cur_frame = NULL;
#undef CTL
#undef APPLIED
	}

	/* The step before a window arms the bridge, and tells it. */
	boundary(1, false, true);
	CHECK_EQ_INT(api->state(), ARMED);
	CHECK_EQ_INT(run_pending(), 1);
	CHECK_EQ_INT(syncs, 1);
	/* Two changes before the interpreter runs them: one sync. */
	python_capture.window_open(1);
	CHECK_EQ_INT(api->state(), RECORDING);
	boundary(2, true, false);
	CHECK_EQ_INT(api->state(), RECORDING); /* recording: not the step's */
	python_capture.window_close(1);
	CHECK_EQ_INT(api->state(), IDLE);
	CHECK_EQ_INT(run_pending(), 1);
	CHECK_EQ_INT(syncs, 2);
	boundary(3, false, false); /* nothing ahead: stays idle, no sync */
	CHECK_EQ_INT(run_pending(), 0);

	/* An explicit prof_step() wins: automatic steps stop counting. */
	steps_then = host_steps;
	python_capture.explicit_step();
	CHECK_EQ_INT(api->step(), IDLE | EXPLICIT);
	CHECK_EQ_INT(api->phases(recs, (uint32_t)n, 1), IDLE | EXPLICIT);
	CHECK_EQ_INT(call_step_fn(NULL), IDLE | EXPLICIT);
	/* ... and the optimizer step's builtin asks for the bridge's
	 * switch, which sees them */
	call_lean("opt_pre", &_Py_NoneStruct);
	CHECK_EQ_INT(call_lean("opt_post", NULL), 16 | ((IDLE | EXPLICIT) << 8));
	CHECK_EQ_INT(host_steps, steps_then);

	/* While the process ends, the bridge is not called into. */
	python_capture.warmup();
	CHECK_EQ_INT(run_pending(), 1);
	python_capture.window_open(2);
	host_finishing_now = true;
	python_capture.window_close(2);
	CHECK_EQ_INT(api->state() & ~EXPLICIT, IDLE);
	CHECK_EQ_INT(run_pending(), 1); /* the open's sync, not the close's */
	CHECK_EQ_INT(syncs, 4);
	python_capture.fini();
	return check_done();
}

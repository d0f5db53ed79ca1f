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
 * their names, before that step, and a truncated list ends early.
 */
#include "check.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
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
static char obj_mod, obj_fn, obj_other; /* objects are addresses */

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
	(void)fn;
	starts++;
	return (pyobj *)&obj_other;
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
	api = p;
	return (pyobj *)&obj_other;
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
	(void)l;
	(void)i;
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
	return NULL;
}

EXPORT void PyErr_Clear(void)
{
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
#define MAX_WRITES 16
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
	int i;

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
	python_capture.explicit_step();
	CHECK_EQ_INT(api->step(), IDLE | EXPLICIT);
	CHECK_EQ_INT(api->phases(recs, (uint32_t)n, 1), IDLE | EXPLICIT);
	CHECK_EQ_INT(host_steps, 2);

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

/*
 * python — the Python bridge (see python.h).
 *
 * Threads:
 *   - init (the shim's constructor) looks the CPython symbols up and, when
 *     they are there, starts the waiter thread;
 *   - the waiter polls Py_IsInitialized() (a plain read of the runtime's
 *     state, safe without the GIL) for at most PYB_WAIT_MAX_MS, schedules
 *     the bootstrap with Py_AddPendingCall and exits;
 *   - pending calls run in the interpreter's main thread, holding the GIL:
 *     the bootstrap (import profhost._bridge, call its _start) and the
 *     window syncs (call its _sync);
 *   - Python threads call the pybridge_api functions through ctypes, and
 *     the builtins of the step (pylean.c) directly;
 *   - the window callbacks (stepping thread, window lock held) only store
 *     the new state and queue a sync: Py_AddPendingCall needs neither the
 *     GIL nor a thread state, and takes only the interpreter's short
 *     pending-call lock.
 */
#include "python.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../common/clock.h"
#include "../../events/pymodrec.h"
#include "../../events/query.h"
#include "../../common/log.h"
#include "../../util/ownfd.h"
#include "../torch/opstacks.h"
#include "pyapi.h"
#include "pyclock.h"
#include "pylean.h"
#include "pystacks.h"
#include "../torch/torchnvtx.h"
#include "../torch/torchops.h"

#define PYB_API_VERSION 9
#define PYB_WAIT_MAX_MS 60000      /* give up on an interpreter never started */
#define PYB_FAST_POLL_US 500       /* first seconds: Python starts in ms */
#define PYB_FAST_POLL_MS 5000
#define PYB_SLOW_POLL_US 20000
#define PYB_PHASE_ID (1ull << 62)  /* range ids of phases: apart from NVTX's */
#define PYB_MODULE_NAME_MAX 1024   /* longer module paths are cut */

/* Window state as the bridge sees it (pybridge_api.state). PYB_ARMED is
 * the step before a window opens or warms up: the bridge puts its hooks in
 * place then, so that none of that lands in a recorded step. */
enum {
	PYB_IDLE = 0,
	PYB_WARMUP = 1,
	PYB_RECORDING = 2,
	PYB_ARMED = 3,
	PYB_EXPLICIT = 16,          /* flag: explicit steps seen, auto steps off */
	PYB_MODULES = 32,           /* flag: the window records nn.Module calls
				       (prof.capture{ modules = true }) */
	PYB_RECORDER = 64,          /* flag: the flight recorder keeps steps
				       between windows (its phases too) */
	PYB_REC_STACKS = 128,       /* flag: ... and CPU samples: Python stack
				       snapshots run between windows too */
	PYB_REC_OPS = 256           /* flag: ... and torch's operators and
				       allocations (prof.capture{profile_memory}):
				       the observer stays registered */
};

/* Notes the bridge reports (pybridge_api.note). */
enum {
	PYB_NOTE_TORCH_CPU_ONLY = 1, /* (unused since profhost._ops collects a
				      CPU-only torch's operators) */
	PYB_NOTE_NVTX_ON = 2         /* torch's emit_nvtx was entered */
};

/* Step phases: the bridge's numbers (profhost/_phases.py) are enum
 * query_phase's, data to optimizer, and the names query_phase_name()'s. */
#define PYB_NPHASES QUERY_PHASE_OTHER
#define PYB_NAME_MAX 256
#define PYB_NOTE_MAX 512

/* The C functions the bridge calls (through ctypes, by address). Layout
 * shared with profhost/_bridge.py's _Api: append only, bump `version`. */
struct pybridge_api {
	uint32_t version;
	uint32_t size;
	int (*state)(void);              /* PYB_* of the window now */
	int (*step)(void);               /* an automatic step; returns state */
	void (*phase)(int phase, int64_t start_ns, int64_t end_ns);
	void (*note)(int bits);          /* PYB_NOTE_* */
	void (*down)(void);              /* the interpreter is finalizing */
	/* A snapshot of thread `tid`'s Python stack at `ts`: frames
	 * "function (file:line)", innermost first, '\n'-separated. */
	void (*pystack)(int32_t tid, int64_t ts, const char *frames, uint32_t len);
	/* (version 3) A phase written under `name`, when the phase queries
	 * take that name for that phase (torch's DataLoader fetch name for
	 * data); else as `phase`. */
	void (*phase_named)(int phase, int64_t start_ns, int64_t end_ns, const char *name);
	/* (version 4) An nn.Module call named `name` (its path in the
	 * model), written as a python_function event. */
	void (*module)(int64_t start_ns, int64_t end_ns, const char *name);
	/* (version 4) The operator collector's table (struct torchops_api,
	 * src/capture/torch/torchops_abi.h), handed to the observer. */
	const void *torchops;
	/* (version 4) A line for the next window's summary notes (said once
	 * by the caller): which operator path is in use and its cost. */
	void (*note_text)(const char *line);
	/* (version 4) The fallback path's operators (torch's profiler),
	 * handed over after the window: begin (the window records), one op
	 * each (times CLOCK_MONOTONIC ns, `tid` the kernel thread id), end. */
	void (*ops_begin)(void);
	void (*op_late)(const struct torchops_op *op, int32_t tid);
	void (*ops_end)(void);
	/* (version 5) An uncaught exception in the main thread: the flight
	 * recorder's dump with `reason` (0 taken, -1 refused; see
	 * capture_host.dump). Sent only with dump_on_exception=1. */
	int (*dump)(const char *reason);
	/* (version 6) The interpreter will end the process without running
	 * C exit handlers (an uncaught KeyboardInterrupt: Python >= 3.8
	 * raises SIGINT on itself with the default action after its atexit
	 * handlers): the host's exit path runs now (capture_host.exit_now).
	 * Python's main thread, from the bridge's atexit handler, GIL
	 * released. */
	void (*exit_now)(void);
	/* (version 7) prof.capture{ with_stack }: tracking every Python
	 * thread's call stack on (torch's path prefixes, '\n'-separated, and
	 * nn.Module._call_impl's code object; 0, or -1 when it cannot run
	 * here), on the calling thread too (a thread started meanwhile), and
	 * off (src/capture/torch/opstacks.h). GIL held. */
	int (*stacks_on)(const char *prefixes, uintptr_t call_impl);
	void (*stacks_thread)(void);
	void (*stacks_off)(void);
	/* (version 8) An nn.Module call as torch's with_modules writes one:
	 * named `name` ("nn.Module: <class>_<module_id>"), at `path` in its
	 * model (""; none), with its Python id `id` (>= 1) and that of the
	 * module call it was made in, `parent_id` (0: none). */
	void (*module_call)(int64_t start_ns, int64_t end_ns, const char *name,
			    const char *path, uint64_t id, uint64_t parent_id,
			    uint64_t module_id);
	/* (version 9) Phases the calling thread timed, handed over at once
	 * (with the step: one call a step where there were five, #29):
	 * `len` bytes of records, each a struct pyb_phase_rec and its name
	 * (name_len bytes, no NUL; 0: the phase's own), written as
	 * phase_named writes them; then, when `step` is not 0, an automatic
	 * step, as step(). Returns state(). A record that does not fit in
	 * `len` ends the list. */
	int (*phases)(const void *buf, uint32_t len, int step);
};

/* One record of pybridge_api.phases: struct.pack("<iIqq") in
 * profhost/_phases.py (24 bytes, no padding). */
struct pyb_phase_rec {
	int32_t phase;
	uint32_t name_len;
	int64_t start_ns, end_ns;
};
_Static_assert(sizeof(struct pyb_phase_rec) == 24, "the bridge packs 24 bytes");

static const struct {
	const char *name;
	size_t off;
} py_need[] = {
#define NEED(sym, field) { sym, offsetof(struct py_syms, field) }
	NEED("Py_IsInitialized", IsInitialized),
	NEED("Py_AddPendingCall", AddPendingCall),
	NEED("PyImport_ImportModule", ImportModule),
	NEED("PyObject_GetAttrString", GetAttrString),
	NEED("PyObject_CallFunctionObjArgs", CallFunctionObjArgs),
	NEED("PyObject_CallObject", CallObject),
	NEED("PyLong_FromVoidPtr", LongFromVoidPtr),
	NEED("PyUnicode_FromString", UnicodeFromString),
	NEED("PyUnicode_DecodeFSDefault", UnicodeDecodeFSDefault),
	NEED("PySys_GetObject", SysGetObject),
	NEED("PyList_Append", ListAppend),
	NEED("PySequence_Contains", SequenceContains),
	NEED("PyErr_Occurred", ErrOccurred),
	NEED("PyErr_Clear", ErrClear),
	NEED("PyErr_Print", ErrPrint),
	NEED("PyErr_ExceptionMatches", ErrExceptionMatches),
	NEED("PyExc_KeyboardInterrupt", ExcKeyboardInterrupt),
	NEED("PyExc_SystemExit", ExcSystemExit),
	NEED("Py_DecRef", DecRef),
#undef NEED
};

static struct {
	const struct capture_host *h;
	struct py_syms py;
	bool found;                  /* CPython's symbols are in the process */
	bool step_fn_ok;             /* ... and the step builtin's */
	bool fast_ok;                /* ... and the other lean builtins' */
	bool auto_steps;             /* the bridge counts steps by itself */
	char config[1024 + PATH_MAX]; /* handed to _bridge._start */
	char share_dir[PATH_MAX];    /* where profhost/ is; "" if unknown */
	_Atomic int state;           /* PYB_IDLE / WARMUP / RECORDING */
	_Atomic int live;            /* the bridge is up and not finalizing */
	_Atomic int ended;           /* the interpreter began finalizing */
	_Atomic int sync_queued;     /* a _sync pending call is queued */
	_Atomic int explicit_seen;   /* prof_step() came through the C ABI */
	_Atomic int modules;         /* PYB_MODULES of the window recording now */
	_Atomic int recorder;        /* PYB_RECORDER while the recorder keeps
					phases, | PYB_REC_STACKS while it
					keeps CPU samples, else 0 */
	uint64_t rec_gen;            /* the recorder segment taking Python
					snapshots (0: none); window lock */
	_Atomic int notes;           /* PYB_NOTE_* bits */
	_Atomic int notes_told;      /* PYB_NOTE_* bits already in a summary */
	_Atomic uint64_t next_id;    /* phase range ids */
	uint32_t stack_hz;           /* Python stack snapshots per second, 0 off */
	struct ownfd hang_fd;        /* prof.watchdog: the memfd faulthandler
					writes every thread's stack into
					(none: -1); checked before each use,
					a program may close or reuse it */
	int hang_sig;                /* ... when sent this signal (0: none) */
	pyobj *sync_fn;              /* _bridge._sync (a strong reference) */
	/* query_phase_name()'s names and their lengths, read at init: looking
	 * them up on a cold step took 0.4 us a phase (#29) */
	const char *phase_name[PYB_NPHASES];
	size_t phase_len[PYB_NPHASES];
	pthread_mutex_t note_lock;   /* guards note_line */
	char note_line[PYB_NOTE_MAX]; /* pybridge_api.note_text's, not yet in
				       a summary ("" none) */
} pyb = { .note_lock = PTHREAD_MUTEX_INITIALIZER, .hang_fd = OWNFD_NONE };

/* Set on a thread while it runs an automatic step, so the window callbacks
 * it triggers do not queue a sync (the bridge syncs after the step). */
static _Thread_local int pyb_in_step;

/* --------------------------------------------------------- the C API */

static int pyb_state(void)
{
	return atomic_load(&pyb.state) | atomic_load(&pyb.modules) |
	       atomic_load(&pyb.recorder) |
	       (atomic_load(&pyb.explicit_seen) ? PYB_EXPLICIT : 0);
}

static int pyb_step(void)
{
	if (!atomic_load(&pyb.explicit_seen)) {
		pyb_in_step = 1;
		pyb.h->step(pyb.h->ctx);
		pyb_in_step = 0;
	}
	return pyb_state();
}

/* Writes the range [start_ns, end_ns] (Python's clock) named name[0..len)
 * on the calling thread; `flags`: EVBUF_A_* of its start. Python threads,
 * GIL held. */
static void pyb_range(int64_t start_ns, int64_t end_ns, const char *name, size_t len,
		      uint32_t flags)
{
	uint64_t id;

	pyclock_span(&start_ns, &end_ns);
	id = PYB_PHASE_ID | atomic_fetch_add(&pyb.next_id, 1);
	if (pyb.h->shim->evbuf_append_raw(EVBUF_RANGE_START, start_ns, name, (uint32_t)len,
					  id, evbuf_nvtx_a(0, 0, flags)) == 0)
		pyb.h->shim->evbuf_append_raw(EVBUF_RANGE_END, end_ns, NULL, 0, id, 0);
}

/* Whether the phase queries take name[0..len) for phase `phase`: else a
 * phase is written under the phase's own name. Any thread. */
static bool pyb_name_ok(int phase, const char *name, size_t len)
{
	return len && len < PYB_NAME_MAX &&
	       query_phase_of(name, len) == (enum query_phase)phase;
}

/* Writes phase `phase` under name[0..len), which pyb_name_ok took for it
 * (NULL: the phase's own name). Python threads, GIL held. */
static void pyb_phase_checked(int phase, int64_t start_ns, int64_t end_ns, const char *name,
			      size_t len)
{
	if (phase < 0 || phase >= PYB_NPHASES || end_ns < start_ns)
		return;
	if (!name) {
		name = pyb.phase_name[phase];
		len = pyb.phase_len[phase];
	}
	pyb_range(start_ns, end_ns, name, len, EVBUF_A_PHASE);
}

/* Writes phase `phase` under name[0..len) (len 0, or one the phase
 * queries do not take for it: the phase's own name). Python threads, GIL
 * held. */
static void pyb_phase_write(int phase, int64_t start_ns, int64_t end_ns, const char *name,
			    size_t len)
{
	pyb_phase_checked(phase, start_ns, end_ns, pyb_name_ok(phase, name, len) ? name : NULL,
			  len);
}

/* Writes phase `phase` under `name` (NULL: the phase's own name). Python
 * threads, GIL held. */
static void pyb_phase_named(int phase, int64_t start_ns, int64_t end_ns, const char *name)
{
	pyb_phase_write(phase, start_ns, end_ns, name, name ? strnlen(name, PYB_NAME_MAX) : 0);
}

/* Writes an nn.Module call (a python_function event) named `name`, with
 * no ids: the table's version 4 entry, kept in its layout (the bridge now
 * calls pyb_module_call). Python threads, GIL held. */
static void pyb_module(int64_t start_ns, int64_t end_ns, const char *name)
{
	size_t len = name ? strnlen(name, PYB_MODULE_NAME_MAX) : 0;

	if (!len || end_ns < start_ns)
		return;
	pyb_range(start_ns, end_ns, name, len, EVBUF_A_PYTHON);
}

/* Writes an nn.Module call [start_ns, end_ns] (Python's clock) as torch's
 * with_modules writes one: an EVBUF_PY_MODULE record (pymodrec.h) named
 * `name` (torch's "nn.Module: <class>_<module_id>"), with the module's
 * `path` in its model (NULL or "": none), the call's Python id `id` (>= 1,
 * unique in the process) and `parent_id`, that of the module call it was
 * made in (0: none). Names and paths longer than PYB_MODULE_NAME_MAX are
 * cut. Python threads, GIL held. */
_Static_assert(sizeof(struct pymodrec_hdr) + 2 * PYB_MODULE_NAME_MAX <= EVBUF_NAME_MAX,
	       "a module call's record fits a record's payload");

static void pyb_module_call(int64_t start_ns, int64_t end_ns, const char *name,
			    const char *path, uint64_t id, uint64_t parent_id,
			    uint64_t module_id)
{
	char buf[sizeof(struct pymodrec_hdr) + 2 * PYB_MODULE_NAME_MAX];
	struct pymodrec_hdr h;
	size_t len = name ? strnlen(name, PYB_MODULE_NAME_MAX) : 0;
	size_t plen = path ? strnlen(path, PYB_MODULE_NAME_MAX) : 0;

	if (!len || !id || end_ns < start_ns)
		return;
	pyclock_span(&start_ns, &end_ns);
	memset(&h, 0, sizeof h);
	h.end = end_ns;
	h.parent_id = parent_id;
	h.module_id = module_id;
	h.name_len = (uint16_t)len;
	h.path_len = (uint16_t)plen;
	memcpy(buf, &h, sizeof h);
	memcpy(buf + sizeof h, name, len);
	memcpy(buf + sizeof h + len, path ? path : "", plen);
	pyb.h->shim->evbuf_append_raw(EVBUF_PY_MODULE, start_ns, buf,
				      (uint32_t)(sizeof h + len + plen), id, 0);
}

static void pyb_phase(int phase, int64_t start_ns, int64_t end_ns)
{
	pyb_phase_named(phase, start_ns, end_ns, NULL);
}

/* pybridge_api.phases: the records in buf[0..len), then the step. Python
 * threads, GIL held. */
static int pyb_phases(const void *buf, uint32_t len, int step)
{
	const char *p = buf, *end = p ? p + len : p;
	struct pyb_phase_rec r;

	while (p && (size_t)(end - p) >= sizeof r) {
		memcpy(&r, p, sizeof r);
		p += sizeof r;
		if (r.name_len > (size_t)(end - p))
			break;
		pyb_phase_write(r.phase, r.start_ns, r.end_ns, p, r.name_len);
		p += r.name_len;
	}
	return step ? pyb_step() : pyb_state();
}

/* What the builtins of the step (pylean.c) write through. */
static const struct pylean_host pyb_lean_host = {
	.phase = pyb_phase_checked,
	.name_ok = pyb_name_ok,
	.step = pyb_step,
};

static void pyb_note(int bits)
{
	atomic_fetch_or(&pyb.notes, bits);
}

/* Keeps `line` for the next window's notes (the latest wins). Python
 * threads, GIL held. */
static void pyb_note_text(const char *line)
{
	if (!line)
		return;
	pthread_mutex_lock(&pyb.note_lock);
	snprintf(pyb.note_line, sizeof pyb.note_line, "%s", line);
	pthread_mutex_unlock(&pyb.note_lock);
}

/* One operator of the fallback path (times on the bridge's clock), queued
 * for the window's collect. Python threads. */
static void pyb_op_late(const struct torchops_op *op, int32_t tid)
{
	struct torchops_op o;

	if (!op)
		return;
	o = *op;
	o.start = pyclock_host_time(op->start);
	o.end = pyclock_host_time(op->end);
	torchops_late_add(&o, tid);
}

static void pyb_down(void)
{
	pylean_down();
	atomic_store(&pyb.ended, 1);
	atomic_store(&pyb.live, 0);
}

/* pybridge_api.pystack: a snapshot of thread `tid`'s Python frames. One
 * kept for the flight recorder also goes into the ring (EVBUF_PYSTACK, cut
 * at a frame to a record's payload), where a salvage finds it: the
 * bridge's stores die with the process. Python threads, GIL held. */
static void pyb_pystack(int32_t tid, int64_t ts, const char *frames, uint32_t len)
{
	const char *cut;

	if (!frames || !len)
		return;
	ts = pyclock_host_time(ts);
	if (!pystacks_add(tid, ts, frames, len))
		return;
	if (len > EVBUF_NAME_MAX) {
		cut = memrchr(frames, '\n', EVBUF_NAME_MAX);
		len = cut ? (uint32_t)(cut - frames) : EVBUF_NAME_MAX;
	}
	pyb.h->shim->evbuf_append_raw(EVBUF_PYSTACK, ts, frames, len,
				      (uint64_t)(uint32_t)tid, 0);
}

/* opstacks' records (EVBUF_OPSTACK) go to the calling thread's buffer.
 * Any thread. */
static int pyb_opstack_append(uint16_t kind, int64_t ts, const void *payload, uint32_t len,
			      uint64_t id, uint64_t a)
{
	return pyb.h->shim->evbuf_append_raw(kind, ts, payload, len, id, a);
}

/* pybridge_api.dump: the bridge's uncaught-exception hook asks for the
 * recorder's dump. Python's main thread, GIL released. */
static int pyb_dump(const char *reason)
{
	return pyb.h->dump(pyb.h->ctx, reason);
}

/* pybridge_api.exit_now: the interpreter is about to die of SIGINT with no
 * exit handler run. Python's main thread, GIL released. */
static void pyb_exit_now(void)
{
	pyb_down();
	if (pyb.h->exit_now)
		pyb.h->exit_now();
}

static struct pybridge_api pyb_api = { /* .torchops set at init */
	.version = PYB_API_VERSION,
	.size = sizeof(struct pybridge_api),
	.state = pyb_state,
	.step = pyb_step,
	.phase = pyb_phase,
	.note = pyb_note,
	.down = pyb_down,
	.pystack = pyb_pystack,
	.phase_named = pyb_phase_named,
	.module = pyb_module,
	.note_text = pyb_note_text,
	.ops_begin = torchops_late_begin,
	.op_late = pyb_op_late,
	.ops_end = torchops_late_end,
	.dump = pyb_dump,
	.exit_now = pyb_exit_now,
	.stacks_on = opstacks_start,
	.stacks_thread = opstacks_thread,
	.stacks_off = opstacks_stop,
	.module_call = pyb_module_call,
	.phases = pyb_phases,
};

/* ------------------------------------------- pending calls (GIL held) */

/* True while calling into the interpreter is allowed. */
static bool pyb_interpreter_ok(void)
{
	const struct py_syms *py = &pyb.py;

	return py->IsInitialized() && !(py->IsFinalizing && py->IsFinalizing());
}

/* Handles the exception a call left: a KeyboardInterrupt stays set and is
 * returned to the interrupted code (-1), anything else is cleared (printed
 * with PROF_LOG=debug). Returns the pending call's result. */
static int pyb_settle(const char *what)
{
	const struct py_syms *py = &pyb.py;

	if (!py->ErrOccurred())
		return 0;
	if (py->ErrExceptionMatches(*py->ExcKeyboardInterrupt))
		return -1;
	log_msg(LOG_DEBUG, "python bridge: %s failed", what);
	if (log_get_level() >= LOG_DEBUG && !py->ErrExceptionMatches(*py->ExcSystemExit))
		py->ErrPrint();
	else
		py->ErrClear();
	return 0;
}

/* Makes share/profhost/python importable (appended to sys.path, so it
 * never shadows the application's modules). */
static void pyb_add_path(void)
{
	const struct py_syms *py = &pyb.py;
	pyobj *path, *dir;

	if (!pyb.share_dir[0])
		return;
	path = py->SysGetObject("path"); /* borrowed */
	dir = py->UnicodeDecodeFSDefault(pyb.share_dir);
	if (path && dir && py->SequenceContains(path, dir) == 0)
		py->ListAppend(path, dir);
	if (dir)
		py->DecRef(dir);
	py->ErrClear();
}

/* Pending call: imports the bridge and starts it. */
static int pyb_bootstrap(void *arg)
{
	const struct py_syms *py = &pyb.py;
	pyobj *mod, *start = NULL, *addr = NULL, *cfg = NULL, *fn = NULL, *fast = NULL;
	pyobj *r = NULL;
	int rc;

	(void)arg;
	if (!pyb_interpreter_ok())
		return 0;
	mod = py->ImportModule("profhost._bridge");
	if (!mod) {
		if (py->ErrExceptionMatches(*py->ExcKeyboardInterrupt))
			return -1;
		py->ErrClear();
		pyb_add_path();
		mod = py->ImportModule("profhost._bridge");
		if (!mod)
			return pyb_settle("importing profhost._bridge");
	}
	start = py->GetAttrString(mod, "_start");
	pyb.sync_fn = py->GetAttrString(mod, "_sync"); /* kept for good */
	addr = py->LongFromVoidPtr((void *)&pyb_api);
	cfg = py->UnicodeFromString(pyb.config);
	if (pyb.step_fn_ok) /* else _start's default: steps through ctypes */
		fn = pylean_step_builtin(pyb.fast_ok);
	if (fn && pyb.fast_ok) /* else the step's hooks run in Python */
		fast = pylean_builtins();
	atomic_store(&pyb.live, 1); /* _start may step already */
	if (start && pyb.sync_fn && addr && cfg)
		r = py->CallFunctionObjArgs(start, addr, cfg, fn ? fn : py->None,
					    fast ? fast : py->None, (pyobj *)NULL);
	if (!r)
		atomic_store(&pyb.live, 0);
	rc = pyb_settle("profhost._bridge._start");
	if (r)
		py->DecRef(r);
	if (fast)
		py->DecRef(fast);
	if (fn)
		py->DecRef(fn);
	if (cfg)
		py->DecRef(cfg);
	if (addr)
		py->DecRef(addr);
	if (start)
		py->DecRef(start);
	py->DecRef(mod);
	if (atomic_load(&pyb.live))
		log_msg(LOG_DEBUG, "python bridge started");
	return rc;
}

/* Pending call: the window state changed; the bridge turns its phase hooks
 * on or off. */
static int pyb_sync(void *arg)
{
	const struct py_syms *py = &pyb.py;
	pyobj *r;

	(void)arg;
	atomic_store(&pyb.sync_queued, 0);
	if (!atomic_load(&pyb.live) || !pyb_interpreter_ok())
		return 0;
	r = py->CallObject(pyb.sync_fn, NULL);
	if (r)
		py->DecRef(r);
	return pyb_settle("profhost._bridge._sync");
}

/* Queues a sync unless the bridge will sync by itself or the process is
 * ending. Window callbacks (window lock held). */
static void pyb_notify(void)
{
	if (!atomic_load(&pyb.live) || pyb_in_step || pyb.h->finishing(pyb.h->ctx))
		return;
	if (atomic_exchange(&pyb.sync_queued, 1))
		return;
	if (pyb.py.AddPendingCall(pyb_sync, NULL) != 0)
		atomic_store(&pyb.sync_queued, 0); /* queue full: the next change
						       tries again */
}

/* --------------------------------------------------------- the waiter */

static void *pyb_wait(void *arg)
{
	unsigned waited_us = 0, step_us = PYB_FAST_POLL_US;
	int tries;

	(void)arg;
	while (!pyb.py.IsInitialized()) {
		if (waited_us >= PYB_WAIT_MAX_MS * 1000u) {
			log_msg(LOG_DEBUG, "python bridge: the interpreter was not "
				"started within %d s; leaving it alone",
				PYB_WAIT_MAX_MS / 1000);
			return NULL;
		}
		usleep(step_us);
		waited_us += step_us;
		if (waited_us >= PYB_FAST_POLL_MS * 1000u)
			step_us = PYB_SLOW_POLL_US;
	}
	if (pyb.h->disabled(pyb.h->ctx))
		return NULL; /* a forked child, or exiting */
	for (tries = 0; tries < 1000; tries++) {
		if (pyb.py.AddPendingCall(pyb_bootstrap, NULL) == 0)
			return NULL;
		usleep(1000); /* the queue is full: try again */
	}
	log_msg(LOG_DEBUG, "python bridge: the interpreter's pending-call "
		"queue stayed full; not started");
	return NULL;
}

/* ------------------------------------------------------- start-up */

/* Looks the CPython API up in the process. True when all of it is there. */
static bool pyb_lookup(struct py_syms *py)
{
	size_t i;
	void *sym;

	if (!dlsym(RTLD_DEFAULT, "Py_IsInitialized"))
		return false;
	for (i = 0; i < sizeof py_need / sizeof py_need[0]; i++) {
		sym = dlsym(RTLD_DEFAULT, py_need[i].name);
		if (!sym) {
			log_msg(LOG_DEBUG, "python bridge: %s not found; Python "
				"support is off", py_need[i].name);
			return false;
		}
		memcpy((char *)py + py_need[i].off, &sym, sizeof sym);
	}
	sym = dlsym(RTLD_DEFAULT, "Py_IsFinalizing");
	if (!sym)
		sym = dlsym(RTLD_DEFAULT, "_Py_IsFinalizing");
	memcpy(&py->IsFinalizing, &sym, sizeof sym);
	pylean_lookup(py, &pyb.step_fn_ok, &pyb.fast_ok);
	return true;
}

/* <dir of libprofhost-core.so>/../share/profhost/python, or "". */
static void pyb_find_share(char *out, size_t size)
{
	Dl_info info;
	char lib[PATH_MAX], dir[PATH_MAX + 32], *slash;

	out[0] = '\0';
	if (!dladdr((void *)&pyb_find_share, &info) || !info.dli_fname ||
	    !realpath(info.dli_fname, lib))
		return;
	slash = strrchr(lib, '/');
	if (slash)
		*slash = '\0';
	snprintf(dir, sizeof dir, "%s/../share/profhost/python", lib);
	if (!realpath(dir, lib) || strlen(lib) >= size)
		return;
	strcpy(out, lib);
}

/* True when the policy names a step source other than Python. */
static bool pyb_other_step_source(const struct policy_config *c)
{
	return c->steps.nvtx || c->steps.nvtx_mark || c->steps.cuda ||
	       c->steps.kernel || c->steps.every_ms;
}

/* Python stack snapshots per second: none without stacks (CPU samples,
 * range or CUDA-call stacks) or without a way to merge them, else the
 * sampling rate (PYSTACKS_MAX_HZ for stacks taken on purpose) up to
 * PYSTACKS_MAX_HZ. */
static uint32_t pyb_stack_rate(const struct policy_config *c)
{
	uint32_t hz = c->capture.cpu_hz;

	if (!hz && (c->capture.range_stacks || c->capture.cuda_backtrace_us))
		hz = PYSTACKS_MAX_HZ;
	if (hz == 0 || pystacks_init() != 0)
		return 0;
	return hz < PYSTACKS_MAX_HZ ? hz : PYSTACKS_MAX_HZ;
}

/* prof.watchdog: a memory file for Python's faulthandler to write every
 * thread's stack into, and a real-time signal the application leaves at
 * its default, from the low end (prof.stacks() takes its own from the
 * high end), for the bridge to register faulthandler on. Start-up. */
static void pyb_hang_setup(const struct policy_config *c)
{
	int sig, fd;

	if (!c->watchdog.enabled)
		return;
	fd = memfd_create("profhost-pystacks", MFD_CLOEXEC);
	if (fd < 0 || ownfd_adopt(&pyb.hang_fd, fd) != 0) {
		log_msg(LOG_DEBUG, "watchdog: no memory file for Python stacks: %s",
			strerror(errno));
		return;
	}
	for (sig = SIGRTMIN + 4; sig < SIGRTMAX - 4; sig++) {
		struct sigaction old;

		if (sigaction(sig, NULL, &old) == 0 && !(old.sa_flags & SA_SIGINFO) &&
		    old.sa_handler == SIG_DFL && sig != c->capture.cpu_signal) {
			pyb.hang_sig = sig;
			return;
		}
	}
	ownfd_close(&pyb.hang_fd);
}

/* capture_hang_ops.stacks: every Python thread's stack now, as Python's
 * faulthandler writes them ("Thread 0x<pthread> (most recent call
 * first):" blocks), into out[size] (NUL-ended, cut to fit). faulthandler
 * reads the interpreter's thread states without the GIL, so a thread that
 * holds it and never lets go does not stop this. Returns 0, or -1 with
 * why[] saying why there are none. The watchdog's thread; waits at most
 * ~2 s. */
static int pyb_hang_stacks(char *out, size_t size, char *why, size_t wsize)
{
	struct sigaction cur;
	struct stat sb;
	off_t last = -1;
	int i, fd;
	ssize_t n;

	if (!pyb.found)
		return snprintf(why, wsize, "not a Python process"), -1;
	if (ownfd_fd(&pyb.hang_fd) < 0 || !pyb.hang_sig)
		return snprintf(why, wsize, "no memory file or signal for them"), -1;
	/* faulthandler writes to that number: a program that closed it (a
	 * daemon) may have its own file there now */
	fd = ownfd_get(&pyb.hang_fd, "the watchdog's file for Python stacks");
	if (fd < 0)
		return snprintf(why, wsize, "the program closed profhost's memory "
				"file for them"), -1;
	if (!atomic_load(&pyb.live))
		return snprintf(why, wsize, "the Python bridge has not started, or "
				"the interpreter is ending"), -1;
	/* Sending the signal with its default action would end the process:
	 * only once faulthandler holds it. */
	if (sigaction(pyb.hang_sig, NULL, &cur) != 0 ||
	    (!(cur.sa_flags & SA_SIGINFO) && (cur.sa_handler == SIG_DFL ||
					      cur.sa_handler == SIG_IGN)))
		return snprintf(why, wsize, "faulthandler is not registered (the "
				"bridge could not import it)"), -1;
	if (!(cur.sa_flags & SA_RESTART)) {
		/* faulthandler's handler, restarting what it interrupts: the
		 * program's own blocking calls see no EINTR from profhost. */
		cur.sa_flags |= SA_RESTART;
		sigaction(pyb.hang_sig, &cur, NULL);
	}
	if (ftruncate(fd, 0) != 0 || lseek(fd, 0, SEEK_SET) != 0)
		return snprintf(why, wsize, "cannot reset the memory file: %s",
				strerror(errno)), -1;
	if (kill(getpid(), pyb.hang_sig) != 0)
		return snprintf(why, wsize, "cannot signal: %s", strerror(errno)), -1;
	/* faulthandler writes from the thread that takes the signal: done
	 * once the file stops growing. */
	for (i = 0; i < 200; i++) {
		struct timespec ts = { 0, 10000000 };

		nanosleep(&ts, NULL);
		if (fstat(fd, &sb) != 0)
			break;
		if (sb.st_size > 0 && sb.st_size == last)
			break;
		last = sb.st_size;
	}
	n = pread(fd, out, size - 1, 0);
	if (n <= 0)
		return snprintf(why, wsize, "no thread took the signal in 2 s (every "
				"thread blocks it?)"), -1;
	out[n] = '\0';
	return 0;
}

/* capture_hang_ops.ended: the interpreter began finalizing (the program's last
 * Python code ran: its atexit handlers). Any thread. */
static bool pyb_ended(void)
{
	return atomic_load(&pyb.ended) != 0;
}

/* The bridge's configuration: "key=value" lines (see _bridge._start). */
static void pyb_make_config(const struct policy_config *c)
{
	const char *steps = "off", *func = "";

	if (c->steps.python && strcmp(c->steps.python, "optimizer") != 0) {
		steps = "function";
		func = c->steps.python;
	} else if (c->steps.python || !pyb_other_step_source(c)) {
		steps = "optimizer";
	}
	pyb.auto_steps = strcmp(steps, "off") != 0;
	snprintf(pyb.config, sizeof pyb.config,
		 "steps=%s\nfunction=%s\nrecord_shapes=%d\npy_stacks_hz=%u\nlog=%d\n"
		 "with_flops=%d\ndump_on_exception=%d\nshare=%s\nhang_fd=%d\n"
		 "hang_sig=%d\nprofile_memory=%d\nwith_stack=%d\n",
		 steps, func, c->capture.record_shapes ? 1 : 0,
		 (unsigned)pyb.stack_hz, (int)log_get_level(),
		 c->capture.with_flops ? 1 : 0,
		 c->recorder.enabled && c->recorder.dump_on_exception ? 1 : 0,
		 pyb.share_dir, ownfd_fd(&pyb.hang_fd), pyb.hang_sig,
		 c->capture.profile_memory ? 1 : 0, c->capture.with_stack ? 1 : 0);
}

/* capture_ops.init: start-up. Finds CPython and starts the waiter; never
 * fails (without CPython the source stays idle). */
static int pyb_init(const struct capture_host *h, struct err *e)
{
	pthread_t t;
	pthread_attr_t attr;
	sigset_t all, old;
	int rc, i;

	(void)e;
	pyb.h = h;
	if (!h->python || !pyb_lookup(&pyb.py))
		return 0; /* not a Python process: the source stays idle */
	pyb.found = true;
	for (i = 0; i < PYB_NPHASES; i++) {
		pyb.phase_name[i] = query_phase_name((enum query_phase)i);
		pyb.phase_len[i] = strlen(pyb.phase_name[i]);
	}
	pylean_init(&pyb.py, &pyb_lean_host);
	pyb_api.torchops = torchops_table(h);
	if (opstacks_init(pyb_opstack_append) != 0) /* CPython before 3.9 */
		pyb_api.stacks_on = NULL;
	pyb.stack_hz = pyb_stack_rate(h->cfg);
	if (pyb.stack_hz && h->salvage_py_eval) {
		uintptr_t lo, hi;

		pystacks_eval_range(&lo, &hi);
		h->salvage_py_eval(lo, hi); /* a salvage merges the snapshots */
	}
	pyb_find_share(pyb.share_dir, sizeof pyb.share_dir);
	pyb_hang_setup(h->cfg);
	pyb_make_config(h->cfg);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&t, &attr, pyb_wait, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	if (rc != 0)
		log_msg(LOG_DEBUG, "python bridge: cannot start its thread; "
			"Python support is off");
	else
		pthread_setname_np(t, "profhost-py");
	return 0;
}

/* ------------------------------------------------- window callbacks */

/* capture_ops.warmup, window_open, window_close: the bridge's state
 * follows the window's. Stepping thread, window lock held. */
static void pyb_warmup(void)
{
	atomic_store(&pyb.state, PYB_WARMUP);
	pyb_notify();
}

static void pyb_window_open(uint64_t gen)
{
	if (pyb.stack_hz)
		pystacks_open(gen, false);
	/* Read at each window open, as the sampler reads its settings: a live
	 * prof.capture{ modules = ... } applies from the next window on. */
	atomic_store(&pyb.modules, pyb.h->cfg->capture.modules ? PYB_MODULES : 0);
	atomic_store(&pyb.state, PYB_RECORDING);
	torchops_set_memory(pyb.h->cfg->capture.profile_memory);
	torchops_set_recording(true, gen);
	pyb_notify();
}

static void pyb_window_close(uint64_t gen)
{
	if (pyb.stack_hz)
		pystacks_close(gen);
	torchops_set_recording(false, 0);
	atomic_store(&pyb.state, PYB_IDLE);
	atomic_store(&pyb.modules, 0);
	pyb_notify();
}

/* capture_recorder_ops.segment: the bridge times step phases while the recorder
 * keeps steps (prof.recorder{phases}), and takes Python stack snapshots
 * into the recorder's segments while it keeps CPU samples
 * (prof.capture{cpu_samples} and prof.recorder{cpu_samples}, as the
 * sampler's recorder reads them), and keeps torch's operators and tensor
 * allocations in them with prof.capture{profile_memory} (so that a dump
 * shows which operators grew the memory); modules stay window-only.
 * Stepping thread, window lock held. */
static void pyb_recorder(uint64_t gen)
{
	const struct policy_config *c = pyb.h->cfg;
	bool stacks = gen && pyb.stack_hz && c->capture.cpu_hz > 0 &&
		      c->recorder.cpu_samples;
	bool ops = gen && c->capture.profile_memory;
	int want = (gen && c->recorder.phases ? PYB_RECORDER : 0) |
		   (stacks ? PYB_REC_STACKS : 0) | (ops ? PYB_REC_OPS : 0);

	torchops_set_memory(c->capture.profile_memory);
	torchops_set_recorder(ops ? gen : 0);
	if (stacks)
		pystacks_open(gen, true);
	else if (pyb.rec_gen)
		pystacks_close(pyb.rec_gen);
	if (!gen && pyb.stack_hz)
		pystacks_rec_stop(); /* its segments went back */
	pyb.rec_gen = stacks ? gen : 0;
	if (atomic_exchange(&pyb.recorder, want) != want)
		pyb_notify();
}

/* capture_recorder_ops.dump_taken: the dump takes the recorder's segments, their
 * Python snapshots stay for its collect. Window lock held. */
static void pyb_dump_taken(void)
{
	if (pyb.stack_hz)
		pystacks_rec_dumped();
}

/* A step boundary (stepping thread, window lock held): arms the bridge
 * when the next step warms up or records (the schedule's, or a queued
 * capture_now window), disarms it when an armed step leads nowhere. */
static void pyb_on_step(const struct capture_step *s)
{
	int cur = atomic_load(&pyb.state), want;

	if (s->recording || (cur != PYB_IDLE && cur != PYB_ARMED))
		return; /* recording or warming up: the other callbacks' state */
	want = s->next_active ? PYB_ARMED : PYB_IDLE;
	if (want != cur) {
		atomic_store(&pyb.state, want);
		pyb_notify();
	}
}

/* What only a window has (its sources were opened for it): Python stack
 * snapshots, torch operators from emit_nvtx or the fallback path. Host
 * thread. 0, or -1 with *e set. */
static int pyb_collect_window(const struct capture_window *job, struct trace *t,
			      struct err *e)
{
	if (pyb.stack_hz && pystacks_merge(&job->gen, 1, pyb.stack_hz, t, e) != 0)
		return -1;
	if (atomic_load(&pyb.notes) & PYB_NOTE_NVTX_ON) {
		size_t ops;

		if (torchnvtx_convert(t, &ops, e) != 0)
			return -1;
		log_msg(LOG_DEBUG, "window %u: %zu torch operator events", job->window, ops);
	}
	/* The observer's operators that ended after the window closed (a
	 * collective's label, ended on the backend's thread) */
	if (torchops_tail_collect(job->gen, atomic_load(&pyb.live) ? TORCHOPS_TAIL_WAIT_MS : 0,
				  t, e) != 0)
		return -1;
	/* The fallback path's operators come after the window closed; the
	 * bridge hands them over at once (a 5 s bound, none once it is gone). */
	return torchops_late_collect(job->gen, atomic_load(&pyb.live) ? 5000 : 0, t, e);
}

/* capture_ops.collect: a window's own events (a recorder dump has none
 * beyond the phases already in its records, and its segments' Python
 * stack snapshots), then the bridge's notes
 * (the summary prints them), each in the first window or dump after it
 * came. Host thread. */
static int pyb_collect(const struct capture_window *job, struct trace *t,
		       struct err *e)
{
	int fresh = atomic_load(&pyb.notes) & ~atomic_load(&pyb.notes_told);

	atomic_fetch_or(&pyb.notes_told, fresh);
	if (!job->dump && pyb_collect_window(job, t, e) != 0)
		return -1;
	if (torchops_mem_collect(t, e) != 0)
		return -1;
	/* A dump's Python snapshots: those of its segments, merged together
	 * (a snapshot near a segment's end may lie in the next one). */
	if (job->dump && pyb.stack_hz &&
	    pystacks_merge(job->gens, job->ngens, pyb.stack_hz, t, e) != 0)
		return -1;
	pthread_mutex_lock(&pyb.note_lock);
	if (pyb.note_line[0] && trace_add_note(t, pyb.note_line) != 0) {
		pthread_mutex_unlock(&pyb.note_lock);
		return err_set(e, "out of memory adding the Python notes");
	}
	pyb.note_line[0] = '\0';
	pthread_mutex_unlock(&pyb.note_lock);
	return 0;
}

/* capture_ops.explicit_step: from now on explicit steps win. Any thread. */
static void pyb_explicit_step(void)
{
	if (!pyb.auto_steps || atomic_exchange(&pyb.explicit_seen, 1))
		return;
	log_msg(LOG_DEBUG, "explicit prof_step() seen: automatic Python steps "
		"stop counting");
}

/* capture_ops.fini: the exiting thread. */
static void pyb_fini(void)
{
	pystacks_fini();
}

/* The bridge times step phases for the recorder, and gives the watchdog
 * the Python stacks and the interpreter's end. */
static const struct capture_recorder_ops pyb_recorder_ops = {
	.segment = pyb_recorder,
	.dump_taken = pyb_dump_taken,
};

static const struct capture_hang_ops pyb_hang_ops = {
	.stacks = pyb_hang_stacks,
	.ended = pyb_ended,
};

const struct capture_ops python_capture = {
	.name = "python",
	.init = pyb_init,
	.warmup = pyb_warmup,
	.window_open = pyb_window_open,
	.window_close = pyb_window_close,
	.collect = pyb_collect,
	.fini = pyb_fini,
	.step = pyb_on_step,
	.explicit_step = pyb_explicit_step,
	.recorder = &pyb_recorder_ops,
	.hang = &pyb_hang_ops,
};

/*
 * pylean — the builtins the Python bridge calls on every step, in C.
 *
 * Between windows, with the flight recorder on, every training step runs
 * profhost's Python: the optimizer step's hooks, the automatic step, the
 * DataLoader and backward wrappers timing the step's phases. Each piece is
 * a few microseconds on a step whose torch work has pushed profhost's
 * code and data out of the caches, and together they were most of what
 * the recorder cost a step (#29). These builtins do that work in C, with
 * the per-thread state in C (thread-locals), and leave to Python only what
 * runs around windows (the module hooks, the bridge's switch):
 *
 *   step(kept)        an automatic step: the phases kept for it (a list of
 *                     (phase, start_ns, end_ns, name or None) tuples from
 *                     profhost/_phases.py, or None) and those kept here
 *                     are written, then the host's step, the GIL released
 *                     around it; returns the window state (an int)
 *   begin(phase)      a DataLoader fetch or a backward starts (the wrappers,
 *                     lean mode): 1 when it is timed (end() must follow
 *                     on this thread), else 0
 *   end(name)         ... ended; `name` the fetch's torch label or None
 *   opt_pre(frame)    optimizer.step() starts (`frame`: the frame running
 *                     it, to see it raise without a post hook, or None)
 *   opt_post()        ... returned: the step's end; with automatic steps on,
 *                     the automatic step itself
 *   opt_failed()      ... raised
 *   ctl(bits)         the bridge's switches (PYLEAN_* below), under its lock
 *   applied(state)    the state the bridge's switch last applied (None: one
 *                     under way): an automatic step asks for the switch
 *                     only when the state differs, a module was imported
 *                     since, or 0.1 s went by
 *   flush(mark)       the calling thread's kept phases are written now
 *                     (before a dump, an explicit step); `mark` true: an
 *                     explicit step, where an inferred forward starts
 *   last()            (ident, [(frame id, code, lasti), ...]) of the latest
 *                     automatic step made here, or None
 *
 * opt_pre, opt_post and opt_failed return None, or an int whose
 * PYLEAN_PY_* bits ask Python to do what only it can (the phases' module
 * hook mode, its automatic step there) and whose PYLEAN_APPLY bit asks for
 * the bridge's switch to the state in bits 8 and up.
 *
 * All run on Python threads holding the GIL; a thread's state is touched
 * only by that thread, the switches only under the GIL. None raises: a
 * malformed argument is ignored, its exception cleared.
 */
#ifndef PROFHOST_PYLEAN_H
#define PROFHOST_PYLEAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pyapi.h"

/* ctl(bits): which of profhost/_phases.py's modes the phases are in */
enum {
	PYLEAN_OFF = 0,        /* phases are not timed */
	PYLEAN_ON = 1,         /* timed here (the recorder alone, no module hooks) */
	PYLEAN_HOOKS = 2,      /* timed by Python (a window: the module hooks) */
	PYLEAN_MODE = 3,
	PYLEAN_BATCH = 4,      /* phases wait for the thread's automatic step */
	PYLEAN_OWNED_SHIFT = 3, /* 4 bits: phases the program reports itself */
	PYLEAN_AUTO = 128,     /* optimizer steps are automatic steps */
	PYLEAN_GEN_SHIFT = 16  /* 15 bits: bumped when the phases' mode changes:
				  each thread's state starts over */
};

/* What opt_pre/opt_post/opt_failed ask of Python */
enum {
	PYLEAN_PY_END_FAILED = 1, /* phases.optimizer_end(False) */
	PYLEAN_PY_BEGIN = 2,      /* phases.optimizer_begin() */
	PYLEAN_PY_END_OK = 4,     /* phases.optimizer_end(True) */
	PYLEAN_PY_AUTO = 8,       /* then Python's automatic step */
	PYLEAN_APPLY = 16         /* the bridge's switch to state (bits >> 8) */
};

/* What the builtins need of the host. */
struct pylean_host {
	/* Writes phase `phase` [start_ns, end_ns] (CLOCK_MONOTONIC) under
	 * name[0..len), one name_ok took for it (NULL: the phase's own
	 * name). GIL held. */
	void (*phase)(int phase, int64_t start_ns, int64_t end_ns, const char *name,
		      size_t len);
	/* Whether the phase queries take name[0..len) for `phase`. */
	bool (*name_ok)(int phase, const char *name, size_t len);
	/* An automatic step (none once explicit steps were seen); returns
	 * the window state. Called without the GIL. */
	int (*step)(void);
};

/* Looks the optional symbols up into `py` (whose required ones are
 * there). Sets *step_ok when the step builtin can be made, *fast_ok when
 * the other builtins can too. Init (one thread). */
void pylean_lookup(struct py_syms *py, bool *step_ok, bool *fast_ok);

/* Binds the builtins to `py` and `h` (both outlive them). Init. */
void pylean_init(const struct py_syms *py, const struct pylean_host *h);

/* The step builtin (a new reference), or NULL (the exception cleared).
 * With `walk`, it also notes the frames it was called from (last()).
 * GIL held. */
pyobj *pylean_step_builtin(bool walk);

/* A tuple of the other builtins, in the order above (begin, end, opt_pre,
 * opt_post, opt_failed, ctl, applied, flush, last); a new reference, or
 * NULL (the exception cleared). GIL held. */
pyobj *pylean_builtins(void);

/* The interpreter is finalizing: automatic steps here stop. Any thread. */
void pylean_down(void);

#endif

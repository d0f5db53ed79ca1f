/*
 * python — the Python bridge: a capture source that finds CPython in the
 * process and starts profhost's Python side in it (profhost._bridge).
 *
 * CPython is found by symbol lookup (dlsym(RTLD_DEFAULT, "Py_IsInitialized")
 * and a few more); libpython is never linked or loaded. A short-lived helper
 * thread waits for the interpreter to be initialized (bounded), then asks
 * the interpreter's main thread, through Py_AddPendingCall, to import the
 * bridge module and hand it a table of C functions (struct pybridge_api in
 * python.c): step, phase, window state. From then on the bridge counts
 * optimizer steps (or the return of a named function) as steps and times
 * the phases of each step; window changes that do not come from Python are
 * told to it with another pending call. Nothing here runs in a signal
 * handler, and the GIL is only ever held by the interpreter's own threads.
 */
#ifndef PROFHOST_CAPTURE_PYTHON_H
#define PROFHOST_CAPTURE_PYTHON_H

#include "../host/capture.h"

/* The source, for capture_sources[] (src/host/capture.c). Its
 * explicit_step slot: a step boundary came through the C ABI (prof_step,
 * profhost.step()); from then on the bridge's automatic steps stop
 * counting (explicit steps win). */
extern const struct capture_ops python_capture;

/* Every Python thread's stack now, as Python's faulthandler writes them
 * ("Thread 0x<pthread> (most recent call first):" blocks), into out[size]
 * (NUL-ended, cut to fit). faulthandler reads the interpreter's thread
 * states without the GIL, so a thread that holds it and never lets go
 * does not stop this. Returns 0, or -1 with why[] saying why there are
 * none (not a Python process, the bridge not started, the interpreter
 * ending...). Host thread (prof.watchdog); waits at most ~2 s. */
/* True once the interpreter began finalizing (the program's last Python
 * code ran: its atexit handlers). The watchdog stops there: no step comes
 * after the end, however long the teardown. Any thread. */
bool python_ending(void);

int python_hang_stacks(char *out, size_t size, char *why, size_t wsize);

#endif

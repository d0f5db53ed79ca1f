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

#include "../source.h"

/* The source, for capture_sources[] (src/host/capture.c). Its
 * explicit_step slot: a step boundary came through the C ABI (prof_step,
 * profhost.step()); from then on the bridge's automatic steps stop
 * counting (explicit steps win). */
extern const struct capture_ops python_capture;

#endif

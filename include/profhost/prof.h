/*
 * profhost — the public C ABI.
 *
 * These functions let an application tell the profiling host where its steps
 * begin and end, and label its own work. They are exported by libprofhost.so,
 * which the `prof run` launcher (or LD_PRELOAD) loads into the process.
 *
 * Every function here is:
 *   - callable from any thread, at any time, including before the host has
 *     finished starting and after it has shut down;
 *   - cheap when no capture window is open (one relaxed load and a branch);
 *   - harmless when the host is disabled (PROF_DISABLE=1): it does nothing.
 *
 * An application that must also run without profhost should not link against
 * libprofhost.so. Look the functions up at run time instead:
 *
 *     #include <dlfcn.h>
 *     void (*step)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "prof_step");
 *     ...
 *     if (step) step();          // NULL when profhost is not loaded
 *
 * or declare them weak (`#pragma weak prof_step`) and test the address.
 * From Python: the `profhost` module does this for you (profhost.step(),
 * `with profhost.range("name"):`), or use ctypes.CDLL(None).prof_step.
 */
#ifndef PROFHOST_PROF_H
#define PROFHOST_PROF_H

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI version this header describes; prof_abi_version() returns the
 * version of the loaded library. */
#define PROF_ABI_VERSION 1

/* Returns PROF_ABI_VERSION of the loaded host. */
int prof_abi_version(void);

/*
 * Marks the end of the current step and the start of the next one.
 *
 * Steps are numbered as torch.profiler numbers them: step 0 runs from the
 * start of the process to the first prof_step() call, step k ends at the
 * (k+1)-th call. The host's schedule decides, at each call, whether a capture
 * window opens or closes; a closing window is written by the host's own
 * thread, so this call returns at once.
 */
void prof_step(void);

/*
 * Opens a named range on the calling thread. Ranges nest; each push must be
 * matched by a prof_range_pop() on the same thread. The name is copied (the
 * caller may free or reuse it on return); names longer than 4096 bytes are
 * cut. NULL is recorded as "(null)".
 */
void prof_range_push(const char *name);

/* Closes the innermost range opened on the calling thread. A pop with no open
 * range is counted in the trace metadata, never an error. */
void prof_range_pop(void);

/* Records an instant event with the given name on the calling thread. */
void prof_mark(const char *name);

/*
 * Asks for a capture window of `steps` steps starting at the next step
 * boundary, outside the schedule (as prof.capture_now in a policy).
 * `reason` (may be NULL) is copied into the trace metadata.
 * Returns 0 when the request was queued, -1 when the host is disabled or
 * not running, or `steps` is 0.
 */
int prof_capture_now(unsigned steps, const char *reason);

/*
 * Asks the flight recorder (prof.recorder{} in the policy) to write its last
 * `steps` complete steps, the step that just ended included, as a folder
 * recorder<K>_steps<a>-<b> (as prof.dump in a policy; docs/recorder.md).
 * `steps` 0 means the recorder's own `steps`. `reason` (may be NULL) is
 * copied into the summary and the trace metadata. The host's thread writes
 * the files; this call only copies the recorder's step index.
 * Returns 0 when the dump was taken (or merged into an earlier dump that
 * holds these steps), -1 when it was refused: the host is disabled or not
 * running, the recorder is off, a window is recording these steps, the
 * run's max_dumps were written, or no step completed yet. A refusal is said
 * once on stderr (a repeat of the same reason is not).
 */
int prof_dump(unsigned steps, const char *reason);

#ifdef __cplusplus
}
#endif

#endif /* PROFHOST_PROF_H */

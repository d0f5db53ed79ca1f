/*
 * exitpath — keeps the open window when the process dies of a signal.
 *
 * For SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR2, SIGXCPU, SIGXFSZ, SIGSYS,
 * SIGTRAP, and (best effort) SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT,
 * where the application left the default disposition,
 * the handler asks the host thread to close and write the open window (or,
 * with the flight recorder on and no window recording, to write the
 * recorder's steps as a dump: fatal signals and SIGTERM/SIGINT, see
 * window_exit_dump) and waits for its answer (bounded), then restores the default disposition and
 * raises the signal again: the process still dies of it, with the status the
 * user would see without profhost. An application that installs its own
 * handler later simply replaces ours; one that had a handler before is left
 * alone. SIGINT in a process with CPython whose interpreter has not started
 * yet (python itself: the host starts before main) is left alone too: the
 * interpreter installs its KeyboardInterrupt handler only where it finds
 * the default disposition, and ours would keep it from doing so (Ctrl-C
 * would kill the program instead of raising KeyboardInterrupt). An uncaught
 * KeyboardInterrupt ends in a SIGINT the interpreter raises with the
 * default action, after its atexit handlers: the Python bridge runs the
 * exit path from its own (capture_host.exit_now).
 *
 * Everything in the handler is async-signal-safe: atomics, futex calls
 * (src/util/wakeword.h), sigaction, raise.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../common/io.h"
#include "../common/log.h"
#include "../util/wakeword.h"
#include "host.h"

static struct host *exit_host;
/* How long a dying process waits for its window (prof.limits{exit_ms}),
 * and the line it says when that was not enough: set by exitpath_install
 * (the limits never change once the policy is loaded), read by the
 * handler, which may not format text itself. */
static uint32_t exit_wait_ms;
static char exit_gave_up[320];
static size_t exit_gave_up_len;
static _Atomic int exit_in_progress;

/* Every signal whose default action ends the process, but those profhost
 * or common runtimes use for themselves: SIGUSR1 (the REPL's by default),
 * SIGPROF and the real-time signals (the CPU sampler's; a handler there
 * would make them look taken), SIGALRM and SIGVTALRM (timers), SIGPIPE
 * (a program writing into a closed pipe usually means to stop quietly),
 * SIGPOLL, SIGSTKFLT. The REPL's and the sampler's configured signals are
 * skipped too. */
static const int exit_signals[] = { SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR2,
				    SIGXCPU, SIGXFSZ, SIGSYS, SIGTRAP, SIGSEGV,
				    SIGBUS, SIGFPE, SIGILL, SIGABRT };

/* Asks the host thread to write the open window, or the recorder's steps
 * as a dump when dying of `sig` writes one (window_exit_dump); waits for
 * the answer. Returns false when it did not come in time (what was
 * recording is not written), else true. */
static bool exitpath_flush(struct host *h, int sig)
{
	if (!atomic_load(&h->ht.started) || hostthread_is_self(h))
		return true;
	atomic_store(&h->exit_signal, sig);
	if (!window_recording(h) && !h->ht.head && !h->ht.busy &&
	    !window_exit_dump(h, sig))
		return true;
	wakeword_post(&h->ht.wake, HOST_WAKE_TERM);
	return wakeword_take(&h->ht.ack, (int64_t)exit_wait_ms * 1000000LL) != 0;
}

static void exitpath_handler(int sig)
{
	struct sigaction dfl;
	int saved = errno;

	if (atomic_exchange(&exit_in_progress, 1) == 0 && exit_host) {
		/* Written: the salvage file goes. Not in time (the host thread
		 * stuck in a long hook or a slow disk): it stays, as at a
		 * normal exit's time-out (core_fini), for the launcher. */
		if (exitpath_flush(exit_host, sig))
			salvage_done(exit_host);
		else
			io_write_all(2, exit_gave_up, exit_gave_up_len);
	}
	memset(&dfl, 0, sizeof dfl);
	dfl.sa_handler = SIG_DFL;
	sigemptyset(&dfl.sa_mask);
	sigaction(sig, &dfl, NULL);
	errno = saved;
	/* Pending until this handler returns, then fatal with the default
	 * action; a fault re-executes its instruction and dies the same way. */
	raise(sig);
}

/* Whether CPython is in the process and its interpreter not yet started:
 * it will install its own SIGINT handler (KeyboardInterrupt), but only over
 * the default disposition. Start-up. */
static bool exitpath_python_takes_sigint(void)
{
	int (*initialized)(void);
	void *sym = dlsym(RTLD_DEFAULT, "Py_IsInitialized");

	if (!sym)
		return false;
	memcpy(&initialized, &sym, sizeof initialized);
	return !initialized();
}

void exitpath_install(struct host *h)
{
	bool python = exitpath_python_takes_sigint();
	size_t i;

	exit_host = h;
	exit_wait_ms = h->cfg->limits.exit_ms;
	snprintf(exit_gave_up, sizeof exit_gave_up,
		 "profhost: gave up after %u ms (prof.limits{ exit_ms }) waiting for the "
		 "host thread to write what was recording; the process dies without it "
		 "(its salvage file stays: prof run, or prof salvage, writes it)\n",
		 (unsigned)exit_wait_ms);
	exit_gave_up_len = strlen(exit_gave_up);
	for (i = 0; i < sizeof exit_signals / sizeof exit_signals[0]; i++) {
		struct sigaction old, sa;

		if (exit_signals[i] == h->env.repl_signal ||
		    exit_signals[i] == h->cfg->capture.cpu_signal ||
		    (exit_signals[i] == SIGINT && python))
			continue;
		if (sigaction(exit_signals[i], NULL, &old) != 0)
			continue;
		if ((old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL)
			continue; /* the application's own handler, or ignored */
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = exitpath_handler;
		sigfillset(&sa.sa_mask);
		sa.sa_flags = SA_RESTART;
		sigaction(exit_signals[i], &sa, NULL);
	}
	log_msg(LOG_DEBUG, "exit path: signal handlers installed");
}

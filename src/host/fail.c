/*
 * fail — how the host reports a failure (host_fail, host.h): one line on
 * stderr, and with PROF_STRICT=1 the end of the process. Kept apart from
 * core.c so that the files core.c calls (capture.c, hostthread.c,
 * window.c) call nothing back in it.
 */
#include <stdatomic.h>
#include <stdlib.h>

#include "../common/log.h"
#include "host.h"

#define STRICT_EXIT_STATUS 70

static _Atomic int strict_exiting;

/* With PROF_STRICT=1 a failure ends the process through exit(): stdio is
 * flushed and the shim's destructor writes the recording window, as at a
 * normal exit (from the host thread itself, hostthread_stop writes what is
 * queued in place). A failure while exiting does not exit again. */
void host_fail(struct host *h, const struct err *e)
{
	log_msg(LOG_ERROR, "%s", e->msg);
	if (!h->env.strict || atomic_exchange(&strict_exiting, 1))
		return;
	log_msg(LOG_ERROR, "PROF_STRICT=1: exiting with status %d (after writing "
		"the recording window)", STRICT_EXIT_STATUS);
	exit(STRICT_EXIT_STATUS);
}

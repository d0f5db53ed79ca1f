/*
 * cupti_state — the CUPTI capture source's state (struct cupti_state,
 * cupti_internal.h), defined in a file of its own that calls nothing, so
 * that the source's files, which all use it, call one another one way
 * only (cupti.c at the top). Threads and locks: cupti.c's header.
 */
#include "cupti_internal.h"

struct cupti_state cupti_cu = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.flush_lock = PTHREAD_MUTEX_INITIALIZER,
};

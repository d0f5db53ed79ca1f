/*
 * profenv — how `prof` reads the host's own environment variables
 * (private to src/cli), so that it tells the user what the host did.
 */
#ifndef PROFHOST_PROFENV_H
#define PROFHOST_PROFENV_H

#include <stdbool.h>

/* Whether PROF_DISABLE's value `v` (NULL: unset) turns the host off:
 * anything but unset, "", 0, false, no or off, as the host reads it (it
 * refuses a value it does not understand too). Any thread; no state. */
bool profenv_disabled(const char *v);

#endif

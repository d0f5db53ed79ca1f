/* A fixture: one of foo's files, allowed. Never compiled. */
#include "foo_internal.h"

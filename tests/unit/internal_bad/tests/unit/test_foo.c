/* A fixture: foo's unit test, allowed. Never compiled. */
#include "foo/foo_internal.h"

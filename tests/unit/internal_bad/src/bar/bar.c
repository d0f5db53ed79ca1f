/* A fixture: another module reaching into foo's internals. Never compiled. */
#include "../foo/foo_internal.h"

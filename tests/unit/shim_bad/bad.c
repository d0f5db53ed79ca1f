/* A fixture for unit_shim_includes_fails: a "shim" file that reaches
 * beyond libc. Never compiled. */
#include <stdio.h>
#include <lua.h>

#include "../../../src/util/fsutil.h"
#include "ok.h"

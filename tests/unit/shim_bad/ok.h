/* A fixture for unit_shim_includes_fails: a header of the "shim" folder,
 * allowed. Never compiled. */
#include <stdint.h>

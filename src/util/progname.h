/*
 * progname — the short program name a run directory is named after.
 */
#ifndef PROFHOST_PROGNAME_H
#define PROFHOST_PROGNAME_H

#include <stddef.h>

/*
 * Writes into out[size] the name of the program `argv` runs: for
 * `python[3[.x]] script.py ...` the script's basename without ".py", for
 * `python -m pkg.mod` the module, else argv[0]'s basename. Characters other
 * than letters, digits and "_.-+" become '_'; at most 64 are kept; an empty
 * result is "process". Any thread.
 */
void progname_from_argv(int argc, const char *const *argv, char *out, size_t size);

#endif

/*
 * hangs — `prof report RUN`'s view of a hang across ranks (private to
 * src/cli; the hang reports are the watchdog's, src/host/watchdog.c).
 * Main thread only.
 */
#ifndef PROFHOST_HANGS_H
#define PROFHOST_HANGS_H

#include <stdio.h>

/* prof report's view of a hang across ranks: reads the latest
 * hang<K>_step<N>/hang.json of each rank<R> folder of run directory `run`,
 * one rank at a time (memory does not grow with the ranks), and prints
 * which ranks are stuck where and the odd one out to `out`. Returns 1 when
 * it printed a view, 0 when no rank has a hang report, -1 when out of
 * memory. */
int hangs_report(const char *run, FILE *out);

#endif

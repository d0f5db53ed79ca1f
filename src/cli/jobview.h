/*
 * jobview — `prof report RUN`'s view of a job-wide capture or dump across
 * ranks (private to src/cli; docs/jobs.md). Main thread only.
 */
#ifndef PROFHOST_JOBVIEW_H
#define PROFHOST_JOBVIEW_H

#include <stdio.h>

/* prof report's view of the latest job-wide capture or dump of run
 * directory `run`: each rank's folder of it read one at a time into fixed
 * memory (winload.h), then the step times across ranks, the slow rank and
 * its phase, and what the others spent more time in, printed to `out`.
 * Returns 1 when it printed a view, 0 when the run has no job-wide capture
 * or dump, -1 when out of memory. */
int jobview_report(const char *run, FILE *out);

#endif

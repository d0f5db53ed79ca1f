/*
 * winload — one saved window read back (private to src/cli): `prof
 * report`'s windows and the ranks' folders of its views of a job-wide
 * capture (jobview.c, hangs.c). A window folder holds capture.phb, else
 * trace.json[.gz]; either file is untrusted input, refused from its first
 * bytes when it is neither, and bounded in size. Main thread only.
 */
#ifndef PROFHOST_WINLOAD_H
#define PROFHOST_WINLOAD_H

#include <stdbool.h>
#include <stddef.h>

struct err;
struct trace;

/* Whether folder `dir` holds a window's data (capture.phb, trace.json or
 * trace.json.gz). */
bool winload_is_window(const char *dir);

/* Loads one saved window (a window folder: its capture.phb, else its
 * trace.json[.gz]; or one such file) into `t` (trace_init'ed, the
 * caller's to free in every case), sorted; dir[dsize] gets the folder its
 * reports write into. Returns 0, or -1 with *e naming the file and what
 * broke. */
int winload_read(const char *path, struct trace *t, char *dir, size_t dsize, struct err *e);

/* The highest N of the rank<N> folders of job run folder `run`; -1 when
 * none or when `run` cannot be read. Main thread. */
long winload_highest_rank(const char *run);

#endif

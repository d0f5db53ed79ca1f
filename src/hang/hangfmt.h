/*
 * hangfmt — what hangwrite.c and hanghtml.c share (private to src/hang).
 * Any thread.
 */
#ifndef PROFHOST_HANGFMT_H
#define PROFHOST_HANGFMT_H

#include <stdbool.h>
#include <stddef.h>

#include "hangreport.h"

/* One faulthandler line `  File "f", line N in func` (n bytes) as
 * "func (f:N)" into out; false when the line is not one. */
bool hang_py_frame(const char *line, size_t n, char *out, size_t size);

/* "GPU 0, stream 7" for kernel l into out. */
void hang_gpu_where(const struct hang_kernel *l, char *out, size_t size);

#endif

/*
 * phb_read — reads capture.phb (format: src/export/phb.h) back into a
 * struct trace, for `prof report` and the fuzz test. Every length, index
 * and id is validated before use: corrupt or truncated input gives one
 * error naming the file and the byte offset, never a crash.
 */
#ifndef PROFHOST_PHB_READ_H
#define PROFHOST_PHB_READ_H

#include <stddef.h>

#include "../events/trace.h"
#include "../export/phb.h"
#include "../common/err.h"

/*
 * Parses a whole file image buf[0..len) into `t` (trace_init'ed, empty).
 * `label` names the input in messages ("x/capture.phb"). Returns 0, or -1
 * with *e set to "<label>: <what> at offset <n>"; `t` then holds whatever
 * was read and must still be trace_free'd.
 */
int phb_parse(const void *buf, size_t len, const char *label,
	      struct trace *t, struct err *e);

/* Whether buf[0..len) starts with the magic. */
int phb_is_phb(const void *buf, size_t len);

#endif

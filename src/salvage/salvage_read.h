/*
 * salvage_read — reads a salvage file (src/common/salvfile.h) left by a
 * process that died while a window recorded or the flight recorder was
 * on, and builds the trace of what it holds, as the host thread would
 * have: the same records, steps and metadata, torn last records dropped
 * and counted.
 *
 * One file at a time per process (the drain it hands assemble_window()
 * reads the file being built); not thread-safe.
 */
#ifndef PROFHOST_SALVAGE_READ_H
#define PROFHOST_SALVAGE_READ_H

#include <stddef.h>
#include <stdint.h>

#include "../events/trace.h"
#include "../common/salvfile.h"
#include "../common/err.h"

/* An open salvage file. */
struct salvage_file {
	const char *path;
	int fd;                    /* holds the file's lock */
	const char *map;           /* the whole file, read-only */
	uint64_t size;
	const struct salv_header *hd;
	struct salv_state st;      /* what was recording */
	uint64_t torn;             /* records dropped: torn or damaged */
	uint32_t pools_out;        /* the recording's event pools not in the
				      file (salvage_build): their records
				      stayed in the process's memory */
	int64_t last_ts;           /* latest record read */
};

/*
 * Opens and checks `path`. Returns 0, or -1 with *e one line naming the
 * file and what is wrong: unreadable, not a regular file, another user's
 * (checked on the descriptor, for root too: a salvage file is untrusted
 * input), not a salvage file, of another version, truncated, or still
 * held by a live process.
 */
int salvage_open(const char *path, struct salvage_file *f, struct err *e);

/* True when the file names a recording (a window or the recorder). */
int salvage_recording(const struct salvage_file *f);

/*
 * Fills `t` (trace_init'ed) with the recording: metadata from the file
 * (its reason followed by ", salvaged <how>", e.g. "after SIGKILL"), the
 * steps it holds plus the step the process died in (partial), and the
 * records of its generations, assembled as a window's. Returns 0, or -1
 * with *e (out of memory).
 */
int salvage_build(struct salvage_file *f, const char *how, struct trace *t,
		  struct err *e);

/* Unmaps and closes (releasing the lock). */
void salvage_close(struct salvage_file *f);

#endif

/*
 * hangread — a hang report read back (hangreport.h writes it): the latest
 * hang<K>_step<N> folder of a rank folder, and what `prof report`'s view
 * across ranks (src/cli/hangs.c) needs of its hang.json. The file is
 * untrusted: a regular file only (a FIFO or device is refused without
 * waiting on it), at most HANG_READ_FILE_MAX bytes, every field checked
 * for its type. Any thread.
 */
#ifndef PROFHOST_HANGREAD_H
#define PROFHOST_HANGREAD_H

#include <stdbool.h>
#include <stddef.h>

#include "../common/err.h"

#define HANG_READ_FILE_MAX ((size_t)64 << 20)
#define HANG_READ_WHERE 200

/* What a hang.json says of its rank's GPU work. */
enum hang_read_gpu { HANG_READ_GPU_UNKNOWN, HANG_READ_GPU_IDLE, HANG_READ_GPU_BUSY };

/* One rank's hang report, as the view across ranks reads it. */
struct hang_read {
	char where[HANG_READ_WHERE];   /* the stepping thread's place: "inside
					  `allreduce`, in `f (x.py:3)`", ... */
	long long step;                /* 0: not said */
	double stalled_s;              /* 0: not said */
	long world_size;               /* 0: not said */
	enum hang_read_gpu gpu;
	char gpu_name[HANG_READ_WHERE];/* BUSY: the oldest kernel's name;
					  UNKNOWN: why (its note) */
	long long kernels;             /* kernels in flight (and `more`) */
	double oldest_s;               /* the oldest one's age; -1: none */
};

/* The latest hang report folder of rank folder `rdir` (the highest K of
 * hang<K>_step<N>) into name[]; false when none (or rdir unreadable). */
bool hang_read_latest(const char *rdir, char *name, size_t size);

/* Reads the hang.json at `path` into *out. Returns 0; 1 when the file does
 * not exist; -1 with *e naming the file and what is wrong with it (not a
 * regular file, unreadable, too large, not valid JSON). */
int hang_read(const char *path, struct hang_read *out, struct err *e);

#endif

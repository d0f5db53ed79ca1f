/*
 * hangreport — a hang report's files written from a plain snapshot
 * (docs/architecture.md, "The hang watchdog"): hang_report.txt, hang.json
 * and report.html of <run>/rank<R>/hang<K>_step<N>/.
 *
 * The hang watchdog (src/host/watchdog.c) takes the snapshot (its window
 * state, the threads' stacks and open ranges, Python's stacks, the GPU
 * work in flight, the recorder's dump) into a struct hang_report; this
 * module only formats and writes it, and knows nothing of the host.
 * hangread.h reads hang.json back; hanglinks.h finds the reports a window
 * overlaps.
 */
#ifndef PROFHOST_HANGREPORT_H
#define PROFHOST_HANGREPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/err.h"
#include "../export/outdir.h"
#include "../export/textbuf.h"
#include "../shim/nvtx.h"

#define HANG_STEPS_SHOWN 10        /* last steps in the report */
#define HANG_GPU_MAX 64            /* kernels in flight listed */
#define HANG_GPU_NAME 160

/* Whether a thread's native stack was taken. */
enum hang_stack {
	HANG_STACK_OK = 0,
	HANG_STACK_BLOCKED,            /* the thread blocks the signal */
	HANG_STACK_GONE,               /* it exited meanwhile */
	HANG_STACK_TIMEOUT             /* it did not answer in time */
};

/* One thread as the report tells it; every pointer borrowed. */
struct hang_thread {
	int32_t tid;
	const char *name;
	enum hang_stack state;
	bool self;                     /* the watchdog's own thread */
	bool truncated;                /* deeper frames were not taken */
	const uintptr_t *ip;           /* [0] innermost, then return addresses */
	int nframes;
	const struct nvtx_open_range *ranges; /* outermost first */
	size_t nranges;
	const char *py;                /* its faulthandler block, or NULL */
	size_t pylen;
	const char *no_stack;          /* why no stack was taken at all (NULL:
					  they were) */
};

/* One kernel launched and not finished. */
struct hang_kernel {
	char name[HANG_GPU_NAME];      /* readable (demangled, shortened) */
	int64_t launched_ns;           /* clock_now_ns */
	int64_t stream;                /* -1: not known */
	int32_t device;                /* -1: not known */
	int32_t tid;
	uint32_t corr;
};

/* The GPU work in flight, by device, stream, then launch time. */
struct hang_gpu {
	int known;                     /* 0: not known (note says why) */
	const char *note;
	struct hang_kernel k[HANG_GPU_MAX];
	size_t n;
	uint64_t more;                 /* launched beyond those */
	uint64_t forgotten;            /* left the source's table unknown */
};

/* Another rank's hang this report answers (job-wide). */
struct hang_asked {
	int rank;
	uint64_t step;
	char host[128];
};

/* The recorder dump the report names. */
struct hang_dump {
	bool taken;                    /* false: none, `why` says why */
	uint32_t index;
	uint64_t first, last;
	size_t behind;                 /* jobs the host thread finishes first */
	const char *dir;               /* its folder's usual name */
	const char *why;
};

/* Formats native frame `ip` (is_return: a return address) into out. */
typedef void (*hang_frame_fn)(uintptr_t ip, bool is_return, char *out, size_t size);

/* What one hang report says; every pointer borrowed from the caller. */
struct hang_report {
	/* the process */
	int rank, world_size, pid;
	const char *program, *hostname;
	double after_s, factor;        /* prof.watchdog{} */
	/* the hang */
	uint32_t k;                    /* its number */
	int64_t limit;                 /* ns */
	const struct hang_asked *asked;/* NULL: this rank's own hang */
	uint64_t step;                 /* the step in progress */
	int64_t start;                 /* when it began (trace clock) */
	int32_t step_tid;              /* the thread of the last boundary */
	size_t ndur;                   /* step durations known */
	double median_ms, mean_ms;
	double last_ms[HANG_STEPS_SHOWN]; /* oldest first */
	size_t nlast;
	int64_t now;                   /* when the snapshot was taken */
	double stalled;                /* s */
	/* the snapshot */
	const struct hang_thread *th;
	int n;
	const char *py;                /* NULL: no Python stacks, py_why */
	const char *py_why;
	const struct hang_gpu *gpu;
	struct hang_dump dump;
	hang_frame_fn frame_text;
};

/* A range's display name. Any thread. */
const char *hang_range_name(const struct nvtx_open_range *r);

/* hang_report.txt of r into tb. Any thread. */
void hang_text(struct textbuf *tb, const struct hang_report *r);

/* hang.json of r (malloc'd), or NULL when memory ran out. Any thread. */
char *hang_json(const struct hang_report *r);

/* report.html of r into tb. Any thread. */
void hang_html(struct textbuf *tb, const struct hang_report *r);

/* Writes r's three files into `dir`. Returns 0, or -1 with *e (a file not
 * written, or "out of memory"). Any thread. */
int hang_write(const struct outdir *dir, const struct hang_report *r, struct err *e);

#endif

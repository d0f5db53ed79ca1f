/*
 * hanglinks — the hang reports a window or recorder dump overlaps, so its
 * report.html and report.txt can point to them (docs/recorder.md, "The
 * hang watchdog").
 *
 * The hang watchdog writes <rank folder>/hang<K>_step<N>/hang.json with
 * the process's pid and, on the trace clock, when the stalled step began
 * (`since_ts`) and when the report was written (`report_ts`), on the
 * process's clock (clock_now_ns()). A window or
 * dump of the same process whose span [start_ts, end_ts] overlaps that
 * stall is "written after the hang" and links it: the dump the watchdog
 * asks for, a window recording through the stall. The host (after each
 * window it writes) and `prof report` (for each window it reads) both ask
 * here, so a report.html `prof report` writes again keeps the links.
 */
#ifndef PROFHOST_HANGLINKS_H
#define PROFHOST_HANGLINKS_H

#include <stddef.h>
#include <stdint.h>

#include "../events/trace.h"

#define HANGLINKS_MAX 8            /* hangs linked per window, at most */
#define HANGLINKS_FILE_MAX ((size_t)64 << 20)

/* One hang report a window links. */
struct hang_link {
	uint32_t hang;                 /* K of hang<K>_step<N> */
	uint64_t step;                 /* the step that did not end */
	double stalled_s;              /* how long it had run at the report */
	char dir[256];                 /* the report's folder name, a sibling
					  of the window's ("hang0_step5") */
};

/*
 * The hang reports beside the window folder `window_dir` (in its rank
 * folder) written by the process of trace meta `m` (m->pid) whose stall
 * overlaps the window's span (m->start_ts, m->end_ts, plus
 * m->monotonic_offset_ns: on the process's clock_now_ns() clock whether or
 * not export_unix_time() moved them), into out[0..max), the lowest hang
 * numbers first.
 * Folders that are not hang reports, and hang.json files that cannot be
 * read or parsed, are passed over (the links are a convenience; `prof
 * report`'s view across ranks says what is wrong with a rank's report).
 * Returns how many were found. Any thread; reads only regular files, at
 * most HANGLINKS_FILE_MAX bytes each.
 */
size_t hanglinks_find(const char *window_dir, const struct trace_meta *m,
		      struct hang_link *out, size_t max);

#endif

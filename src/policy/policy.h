/*
 * policy — the Lua policy engine.
 *
 * One Lua 5.4 VM per process runs the user's policy file (or the built-in
 * default), sandboxed: no os.execute/io.popen/os.exit, no loadfile/dofile,
 * `require` limited to profhost's Lua directory and the policy file's own
 * directory, LUA_NOENV. Every call into Lua runs under a time budget (a count
 * hook) and lua_pcall with a traceback; the VM's memory is capped by its
 * allocator.
 *
 * The Lua side (lua/prof/init.lua) implements the `prof` module and validates
 * every call; this module creates the VM, loads the file, applies --set
 * overrides and reads the validated configuration into struct policy_config.
 *
 * Threads: all functions take the policy's own lock. policy_on_step() and the
 * window hooks use a try-lock and return POLICY_BUSY instead of waiting, so a
 * step boundary is never delayed by a report or a REPL command.
 *
 * Live control: policy_repl_eval() runs a chunk typed at the REPL (prof
 * attach) in the same VM, under the lock and its own time budget
 * (prof.limits{repl_ms}); the host answers the REPL's questions and applies
 * its live changes through struct policy_live_ops.
 */
#ifndef PROFHOST_POLICY_H
#define PROFHOST_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../schedule/schedule.h"
#include "../common/err.h"

struct trace;
struct outdir;
struct export_result;
struct hang_link;

/* The configuration a policy produced, after validation and --set. Strings
 * are owned by the policy; NULL means "not set". */
struct policy_config {
	/* prof.output */
	char *output_dir;          /* default "prof_out" */
	char *run_name;            /* NULL: <program>-<yyyymmdd-hhmmss> */

	/* prof.schedule (schedule.enabled is false when the policy has no
	 * prof.schedule call and no default applies) */
	struct sched_config schedule;

	/* prof.steps */
	struct {
		char *nvtx;            /* range name whose end is a step */
		char *nvtx_domain;     /* its domain, NULL = any */
		char *nvtx_mark;       /* mark name that is a step */
		char *python;          /* "pkg.module:Class.method" */
		char *cuda;            /* CUDA API name, e.g. cudaGraphLaunch */
		char *kernel;          /* kernel name pattern (Lua pattern) */
		uint32_t every_ms;     /* 0 = off */
	} steps;

	/* prof.capture_range: record while an NVTX range is open */
	struct {
		char *nvtx;            /* range name; NULL = no capture range */
		char *nvtx_domain;     /* its domain, NULL = any */
		uint32_t count;        /* windows to record; 0 = every time;
					  default 1 */
	} capture_range;

	/* prof.capture */
	struct {
		bool nvtx;             /* default true */
		bool cuda_kernels, cuda_memcpy, cuda_memset, cuda_runtime,
		     cuda_driver, cuda_sync, cuda_memory; /* default true */
		uint32_t cpu_hz;       /* 0 = no CPU sampling (default) */
		bool cpu_wall_clock;   /* false: CPU-time clock */
		uint32_t cpu_depth;    /* frames kept per stack; default 128 */
		int cpu_signal;        /* 0 = "auto" (default), else the signal
					  number ("SIGPROF", "SIGRTMIN+N") */
		bool range_stacks;     /* a stack at each range push; default false */
		bool modules;          /* nn.Module calls as ranges; default false */
		uint32_t cuda_backtrace_us; /* 0 = off */
		bool record_shapes;
		bool with_flops;       /* operators' FLOPs (torch's formulas) */
		bool profile_memory;   /* torch's tensor allocations and frees
					  (torch.profiler's profile_memory) */
		bool with_stack;       /* operators' Python call stacks */
		double peak_tflops;    /* the GPU's peak for the FLOP/s share;
					  0 = from the table of known GPUs */
		size_t buffer_bytes;   /* per-window event pool; default 128 MiB */
	} capture;

	/* prof.export */
	struct {
		bool chrome;           /* default true */
		bool chrome_gzip;      /* default false */
		bool tensorboard;      /* default false */
		bool key_averages;     /* default true */
		char *sort_by;         /* default "self_cpu_time_total" */
		uint32_t row_limit;    /* default 50 */
		char *group_by;        /* "name" (default) | "domain" */
		bool group_by_input_shape; /* torch's option; default false */
		uint32_t group_by_stack_n; /* torch's option; default 0 */
		bool stacks, memory_timeline, summary; /* default true */
		char *stacks_metric;   /* operator_stacks.txt's weight: torch's
					  export_stacks metric, default
					  "self_cpu_time_total" */
		bool raw;              /* capture.phb; default true */
		bool report_text;      /* report.txt; default true */
		bool report_html;      /* report.html; default true */
	} export;

	/* prof.recorder: the flight recorder (docs/recorder.md) */
	struct {
		bool enabled;          /* prof.recorder was called */
		bool start_paused;     /* its `enabled` key was false (the
					  resolved `on`): set up but paused
					  from the start (docs/recorder.md);
					  default false */
		uint32_t steps;        /* complete steps kept; default 20 */
		size_t bytes;          /* its event memory; default 256 MiB */
		uint32_t max_dumps;    /* dumps a run may write; default 10 */
		bool dump_on_crash;    /* SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT;
					  default true */
		bool dump_on_signal;   /* SIGTERM, SIGINT; default true */
		bool dump_on_exception; /* an uncaught Python exception in the
					   main thread; default true */
		bool cpu_samples;      /* CPU samples between windows when
					  prof.capture{cpu_samples} asks for
					  them; default true */
		bool phases;           /* Python step phases between windows;
					  default true */
		bool cuda;             /* GPU work between windows when
					  prof.capture{cuda} asks for it
					  (CUPTI's kinds stay on); default
					  true */
		bool job;              /* job-wide dumps: a dump (and a hang
					  report) is published in the run
					  directory and every rank answers
					  (docs/jobs.md); default false */
	} recorder;

	/* prof.job: watching the run directory for job-wide requests */
	struct {
		uint32_t poll_ms;      /* how often; 0: never; default 1000 */
	} job;

	/* prof.watchdog: the hang watchdog (docs/recorder.md) */
	struct {
		bool enabled;          /* prof.watchdog was called */
		double after_s;        /* no step for this long is a hang;
					  default 300 */
		double factor;         /* ... or this many median steps, if
					  longer; default 10 */
		bool dump;             /* a recorder dump with each report;
					  default true */
	} watchdog;

	/* prof.limits */
	struct {
		uint32_t hook_ms;      /* per hook call; default 100 */
		uint32_t report_ms;    /* per on_trace_ready call; default 10000 */
		uint32_t load_ms;      /* loading the file; default 2000 */
		uint32_t repl_ms;      /* per REPL command; default 10000 */
		uint32_t exit_ms;      /* a process dying of a signal waits this
					  long for its window; default 20000 */
		size_t memory_bytes;   /* VM memory cap; default 64 MiB */
	} limits;

	/* Which hooks the policy registered. Atomic: a hook added at the
	 * REPL sets its flag while the host's threads read them. */
	_Atomic bool has_on_step, has_on_window_start, has_on_window_end,
		     has_on_trace_ready, has_on_hang;
};

/* Called from Lua's prof.capture_now{steps=N, reason=...} on whatever thread
 * runs the hook. Returns 0 or -1 (with *e set). Must not call back into the
 * policy. */
typedef int (*policy_capture_fn)(void *ctx, uint32_t steps, const char *reason,
				 struct err *e);

/* Called from Lua's prof.dump{steps=N, reason=...}, like policy_capture_fn.
 * Returns 0 (the dump was handed to the host thread) or -1 with *e set:
 * why nothing will be written (the recorder is off, a window records,
 * max_dumps used up ...). */
typedef int (*policy_dump_fn)(void *ctx, uint32_t steps, const char *reason,
			      struct err *e);

/* A table under construction for the Lua side (what prof.status() and the
 * other live queries return). The host fills it with policy_build_*; a NULL
 * key appends to the table as to an array. Each call may raise a Lua memory
 * error (a longjmp), so never call them while holding a lock. */
struct policy_build;

void policy_build_int(struct policy_build *b, const char *key, int64_t v);
void policy_build_num(struct policy_build *b, const char *key, double v);
void policy_build_bool(struct policy_build *b, const char *key, bool v);
/* A NULL `v` sets nothing. */
void policy_build_str(struct policy_build *b, const char *key, const char *v);
/* Opens a nested table under `key`; policy_build_close() ends it. */
void policy_build_open(struct policy_build *b, const char *key);
void policy_build_close(struct policy_build *b);

/* Sections a live change touches. */
#define POLICY_LIVE_SCHEDULE 1u
#define POLICY_LIVE_CAPTURE 2u

/* The host's side of live control. Each runs on the thread running the Lua
 * code (the REPL's; for `recorder` a hook's too), with the policy lock
 * held; they must not call back into the policy. */
struct policy_live_ops {
	/* Fills `b` (a fresh table) with what prof.<what>() shows: "status",
	 * "top", "stacks", "capture" (arg: a capture_now ticket, 0 = the
	 * latest). Returns 0, 1 for "nothing" (Lua gets nil), or -1 with *e. */
	int (*query)(void *ctx, const char *what, int64_t arg,
		     struct policy_build *b, struct err *e);
	/* A live prof.schedule{} / prof.capture{} from the REPL: `next` holds
	 * the new values of `sections`. The host takes the lock its readers of
	 * policy_config()'s schedule and capture fields hold, applies the
	 * schedule (sched_reconfigure), calls apply(apply_ctx), which copies
	 * next's sections into policy_config(), and releases the lock. Returns
	 * 0, or -1 with *e (apply not called). */
	int (*reconfigure)(void *ctx, const struct policy_config *next,
			   unsigned sections, void (*apply)(void *apply_ctx),
			   void *apply_ctx, struct err *e);
	/* prof.recorder{ enabled = on } after loading, from a hook or the
	 * REPL (the thread running it): pauses or resumes the flight recorder
	 * at the next step boundary. Returns 0, or -1 with *e. May be NULL. */
	int (*recorder)(void *ctx, bool on, struct err *e);
};

struct policy_opts {
	const char *lua_dir;       /* profhost's Lua directory (holds prof/) */
	const char *script;        /* policy file; NULL = built-in default */
	const char *const *sets;   /* "key=value" overrides (--set), NULL-ended;
				      may be NULL */
	policy_capture_fn capture_now;
	void *capture_ctx;
	policy_dump_fn dump;       /* may be NULL: prof.dump refuses; its
				      context is capture_ctx */
	policy_capture_fn capture_job; /* prof.capture_now{ job = true }: ask
				      every rank of the run (docs/jobs.md);
				      may be NULL (refused); context
				      capture_ctx */
	const struct policy_live_ops *live; /* may be NULL: no live control */
	void *live_ctx;
};

struct policy;

/*
 * Creates the VM and loads the policy. On failure returns NULL and writes a
 * one-line message to *e naming the input: "policy.lua:3: prof.schedule:
 * unknown key 'activ' (valid keys: ...)", "PROF_SCRIPT: cannot open
 * 'x.lua': No such file or directory", "--set schedule.active=x: ...".
 * Any thread, once.
 */
struct policy *policy_load(const struct policy_opts *opts, struct err *e);

/* The validated configuration. Valid until policy_free(). */
const struct policy_config *policy_config(const struct policy *p);

/* Absolute path of the loaded policy file, or "(built-in default)". */
const char *policy_source(const struct policy *p);

/* Result of a hook call. */
enum policy_status {
	POLICY_OK = 0,
	POLICY_BUSY = 1,     /* the VM is busy on another thread: not run */
	POLICY_INCOMPLETE = 2, /* (policy_repl_eval) the chunk needs more lines */
	POLICY_ERROR = -1    /* the hook failed; *e has file:line: message */
};

/* What a step hook sees (fields of the Lua table `s`). */
struct policy_step_info {
	uint64_t step;          /* the step that just ended */
	double duration_ms;     /* its duration */
	double median_ms;       /* median of recent steps (up to 101) */
	double mean_ms;
	const char *action;     /* the schedule action of the ended step */
	bool recording;         /* a window is recording */
};

/* Runs every prof.on_step hook. A hook that fails is reported through *e
 * and disabled. Any thread; never waits for the lock. */
enum policy_status policy_on_step(struct policy *p,
				  const struct policy_step_info *info,
				  struct err *e);

/* What the window hooks see (fields of the Lua table `w`). */
struct policy_window_info {
	uint32_t window;
	uint64_t first_step, last_step;  /* last = first for window_start */
	const char *reason;
	const char *dir;                 /* the window's output directory,
					    NULL for window_start */
	const char *const *files;        /* files written, NULL-ended; may be
					    NULL */
	uint64_t events, dropped;
	bool recorder;                   /* a flight recorder dump (`window`
					    is its number) */
};

/* Runs prof.on_window_start / on_window_end hooks. Any thread; never waits. */
enum policy_status policy_on_window_start(struct policy *p,
					  const struct policy_window_info *w,
					  struct err *e);
enum policy_status policy_on_window_end(struct policy *p,
					const struct policy_window_info *w,
					struct err *e);

/* What prof.on_trace_ready hooks and the built-in reports receive: the
 * window's trace (read-only; borrowed for the duration of the call) and
 * where its files are. */
struct policy_trace {
	const struct trace *trace;
	const char *dir;                 /* the window's directory; NULL: the
					    trace writers refuse */
	const struct outdir *out;        /* dir held open (the host's window
					    directory): writers create files
					    through it; NULL: they open dir */
	const char *const *files;        /* files written, NULL-ended; may be
					    NULL */
	const struct hang_link *hangs;   /* the hang reports the window
					    overlaps (hang/hanglinks.h),
					    linked by the built-in reports */
	size_t nhangs;
};

/* Runs prof.on_trace_ready hooks, each under the report budget, with the
 * window's trace as a Lua object (src/policy/trace_lua.h, docs/reports.md)
 * that is valid only during the call. A hook that fails is reported
 * (first failure in *e, later ones logged) and disabled; the others still
 * run. Host thread (or `prof report`); waits for the lock. */
enum policy_status policy_on_trace_ready(struct policy *p,
					 const struct policy_trace *tr,
					 struct err *e);

/* One open range of a stalled thread (prof.on_hang's h.threads[i].ranges). */
struct policy_hang_range {
	const char *name;
	double open_s;                   /* how long it has been open; < 0:
					    unknown */
};

/* One thread of a hang (h.threads[i]). */
struct policy_hang_thread {
	int32_t tid;
	const char *name;
	const struct policy_hang_range *ranges; /* outermost first */
	size_t nranges;
};

/* One kernel launched and not finished (h.gpu[i]), as the hang report
 * lists it. */
struct policy_hang_kernel {
	const char *name;                /* demangled where it can be */
	int32_t device;                  /* -1: not known */
	int64_t stream;                  /* -1: not known */
	int32_t tid;                     /* the launching thread */
	double in_flight_s;              /* since its launch */
};

/* What prof.on_hang hooks see (fields of the Lua table `h`). */
struct policy_hang_info {
	uint32_t hang;                   /* this run's hang number, from 0 */
	uint64_t step;                   /* the step that does not end */
	double stalled_s;                /* since it began */
	double limit_s;                  /* the watchdog's limit */
	const char *dir;                 /* the report's folder; NULL: none */
	const struct policy_hang_thread *threads;
	size_t nthreads;
	const struct policy_hang_kernel *gpu; /* oldest first per stream;
						 none without a GPU or
						 CUPTI */
	size_t ngpu;
};

/* Runs prof.on_hang hooks (the watchdog found a hang), each under the hook
 * budget. A hook that fails is reported through *e and disabled. Host
 * thread; waits for the lock. */
enum policy_status policy_on_hang(struct policy *p,
				  const struct policy_hang_info *h,
				  struct err *e);

/* Formats of the built-in reports (bit mask). */
enum {
	POLICY_REPORT_TEXT = 1,
	POLICY_REPORT_JSON = 2,
	POLICY_REPORT_HTML = 4
};

/* Rendered reports, malloc'd (NULL when not asked for); `findings` (the
 * plain-words findings, one per line) comes with every window report. */
struct policy_report {
	char *text, *json, *html, *findings;
	char *modules;  /* modules.txt (text format, module calls in the
			   window), else NULL */
};

/*
 * Runs the built-in analyses (lua/prof/reports) on one window under the
 * report budget and renders the asked `formats` into *out. With `keep`,
 * the window's analysis is also kept in the VM for policy_report_run().
 * Returns POLICY_OK, or POLICY_ERROR with *e set (*out then empty).
 * Host thread (or `prof report`); waits for the lock.
 */
enum policy_status policy_report_window(struct policy *p,
					const struct policy_trace *tr,
					unsigned formats, bool keep,
					struct policy_report *out,
					struct err *e);

/*
 * Runs the built-in reports on trace t, written as the window folder
 * *res describes, and adds report.txt, report.html and modules.txt (when
 * the window holds nn.Module calls) to it as `formats` asks: the one way
 * the host thread and `prof salvage` add them. With `link_hangs` the
 * reports link the hang reports of the run folder that overlap the
 * window (hanglinks_find). On success *findings gets
 * the plain-words findings (malloc'd or NULL: the caller prints and frees
 * them). Returns POLICY_OK, or POLICY_ERROR with *e set (files written
 * before the failure stay; *findings NULL). Same threads as above.
 */
enum policy_status policy_write_reports(struct policy *p, const struct trace *t,
					struct export_result *res, unsigned formats,
					bool link_hangs, char **findings, struct err *e);

/* Renders the run report (ranks, stragglers) over every window kept since
 * the last call, then forgets them. Same contract as above. */
enum policy_status policy_report_run(struct policy *p, unsigned formats,
				     struct policy_report *out, struct err *e);

/* Frees the strings of *r. NULL-safe. */
void policy_report_free(struct policy_report *r);

/* Where a REPL command's output goes, and how it is stopped. */
struct policy_repl_io {
	/* Output: print() lines and results (error false), the error message
	 * and traceback (error true). Called on the evaluating thread. */
	void (*out)(void *ctx, bool error, const char *text, size_t len);
	/* Polled about every 20 ms while the command runs or sleeps; true
	 * interrupts it (Ctrl-C, the client went away). May be NULL. */
	bool (*poll)(void *ctx);
	void *ctx;
};

/*
 * Evaluates one REPL chunk in the policy's VM, like the `lua` prompt:
 * "=expr" and a bare expression print their values (tables pretty-printed
 * by lua/prof/repl.lua), print() goes to io->out, a chunk that needs more
 * lines returns POLICY_INCOMPLETE without running. It waits for the lock
 * (a report may hold it), runs under prof.limits{repl_ms} restarted at each
 * resume, and runs in a coroutine so prof.sleep() (and capture_now at the
 * REPL) can wait with the lock released. Returns POLICY_OK, POLICY_INCOMPLETE
 * or POLICY_ERROR (the message, with a traceback for a runtime error, went
 * to io->out; *e holds its first line). One REPL at a time; any thread.
 */
enum policy_status policy_repl_eval(struct policy *p, const char *chunk,
				    size_t len, const struct policy_repl_io *io,
				    struct err *e);

/* In a child after fork(), the only thread there: if another thread held
 * the VM when the process forked, the child's copy is unusable and REPL
 * commands say so; otherwise the lock is made usable again. NULL-safe. */
void policy_after_fork_child(struct policy *p);

/* Closes the VM and frees everything. NULL-safe. */
void policy_free(struct policy *p);

#endif

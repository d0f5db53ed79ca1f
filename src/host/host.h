/*
 * host — the core's process-wide state and the functions of src/host/.
 *
 * One struct host per process, owned by core.c. Threads:
 *   - application threads call window_step() / window_capture_now() (through
 *     prof_step / prof_capture_now) and may run step hooks;
 *   - the host thread (hostthread.c), started when the first window opens,
 *     assembles and writes closed windows and runs the report hooks;
 *   - signal handlers (exitpath.c) only post to the host thread's wake
 *     word and wait for its answer;
 *   - the control thread (src/control) runs REPL commands, which read the
 *     host's state and change the schedule through live.c.
 */
#ifndef PROFHOST_HOST_H
#define PROFHOST_HOST_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "../events/trace.h"
#include "../export/jobfile.h"
#include "../export/outdir.h"
#include "../policy/policy.h"
#include "../schedule/recorder.h"
#include "../schedule/schedule.h"
#include "env.h"
#include "../shim/shim_api.h"

#define HOST_REASON_MAX 128
#define HOST_DUR_RING 101
#define HOST_OUTPUTS_KEPT 32

struct export_result;

/* A closed window waiting for the host thread. Owns `steps`. */
struct host_job {
	uint64_t gen;                  /* capture generation (0: none) */
	uint32_t window;
	uint64_t first, last;
	char reason[HOST_REASON_MAX];
	int64_t start_ts, end_ts;
	struct trace_step *steps;
	size_t nsteps;
	uint64_t dropped_steps;        /* steps past the window's step budget */
	uint64_t windows_skipped;      /* windows skipped (queue full) since
					  the job queued before this one */
	bool skip;                     /* queue was full: not written */
	uint64_t ticket;               /* capture_now ticket (0: schedule) */
	/* The flight recorder's jobs (docs/recorder.md): `gen` is 0 and the
	 * generations are in gens[] */
	bool dump;                     /* a dump: drain gens[nskip..], write
					  recorder<window>_steps<first>-<last> */
	uint64_t gens[REC_SEGMENTS];
	uint32_t ngens, nskip;
	int64_t cut_ts;                /* a dump: 0, or when what it holds of
					  its first step begins (rec_dump) */
	char suffix[32];               /* "" or a job-wide capture's or
					  dump's mark on its folder's name
					  (window<K>_steps<a>-<b>_<suffix>:
					  "job", "by-rank5") */
	char note[256];                /* "" or a line for its summary's
					  notes and the log (a job dump:
					  the steps it no longer held) */
	struct host_job *next;
};

/* A window the host thread processed, for prof.status() and a REPL
 * waiting on capture_now. */
struct host_output {
	uint64_t ticket;               /* capture_now ticket (0: schedule) */
	uint32_t window;
	uint64_t first, last;
	char reason[HOST_REASON_MAX];
	char *dir;                     /* malloc'd; NULL: nothing written */
	char **files;                  /* malloc'd, NULL-ended; may be NULL */
};

/* What the host thread wrote so far. Guarded by the host thread's lock. */
struct host_outputs {
	struct host_output kept[HOST_OUTPUTS_KEPT]; /* ring: the latest ones */
	size_t n, pos;
	uint64_t windows;              /* windows processed */
	uint64_t dropped;              /* events dropped in them */
	uint64_t last_ticket;          /* highest capture_now ticket processed */
	/* The flight recorder's dumps written (kept apart: they have no
	 * capture_now ticket). */
	uint64_t dumps;
	char *dump_dirs[HOST_OUTPUTS_KEPT]; /* ring of the latest; malloc'd */
	size_t ndump, dump_pos;
};

/* What window.c publishes (window_listen): a listener leaves the slots it
 * does not use NULL. Listeners are called in the order they registered,
 * and must not call window.c back from a notification (its lock may be
 * held; a request such as prof.dump belongs after it). Threads and locks:
 *   warmup     a warm-up phase starts. Stepping thread, window lock held:
 *              must not block.
 *   prepare    a window may open soon: do now what would slow its first
 *              step (capture_ops.prepare). The thread holding the window
 *              lock (a step boundary, capture_now, a capture range).
 *   open       a window starts recording generation `gen`. Window lock
 *              held (the stepping thread, or a capture range's).
 *   close      the window of generation `gen` stopped recording. Window
 *              lock held.
 *   step       a step boundary: `step` begins (`recording`: a window
 *              records it; `next_active`: the next step warms up or
 *              records). Also at window_init for step 0. Stepping
 *              thread, window lock held: must not block; no allocation.
 *   recorder   the flight recorder keeps generation `gen` (0: it
 *              stopped). Window lock held.
 *   dump_taken a dump is taking the recorder's segments, before they
 *              close; dump_dropped: no collect of it will follow (see
 *              capture.h). Window lock held (or dump_dropped on the host
 *              thread: capture.h).
 *   dump       this rank took a dump the job's other ranks are to hear of
 *              (prof.recorder{ job = true }): f says which (JOBFILE_DUMP:
 *              first, last, partial, reason). The thread that asked for
 *              it, window lock NOT held.
 *   rotated_wanted  a question, not news: whether the listener has work
 *              for the host thread when the recorder rotates its segment
 *              (capture_recorder_ops.rotated_wanted); the host thread is
 *              woken for a rotation only when one says true (#29: a
 *              CPU-only loop's rotation wakes nobody). Stepping thread,
 *              window lock held: lock-free, a load or two. */
struct window_listener {
	void (*warmup)(void *ctx);
	void (*prepare)(void *ctx);
	void (*open)(void *ctx, uint64_t gen);
	void (*close)(void *ctx, uint64_t gen);
	void (*step)(void *ctx, uint64_t step, bool recording, bool next_active);
	void (*recorder)(void *ctx, uint64_t gen);
	void (*dump_taken)(void *ctx);
	void (*dump_dropped)(void *ctx);
	void (*dump)(void *ctx, const struct jobfile *f);
	bool (*rotated_wanted)(void *ctx);
};

#define WINDOW_LISTENERS 4

/* The step-side state: the schedule (which owns the window now recording:
 * whether one records, its index, first step, reason and capture_now
 * ticket, the capture range and the tickets; see schedule.h) and what
 * recording it takes. Guarded by `lock`. */
struct window_state {
	pthread_mutex_t lock;
	struct sched sched;
	int64_t step_start;            /* start of the current step */
	int32_t step_tid;              /* thread of the last boundary */
	uint64_t gen;                  /* the recording window's capture
					  generation */
	int64_t start_ts;              /* when it opened */
	struct trace_step *steps;      /* its completed steps */
	size_t nsteps, cap_steps;
	size_t max_steps;              /* step budget of a window (from
					  prof.capture{buffer_mb}) */
	uint64_t dropped_steps;        /* steps past it in this window */
	double dur_ms[HOST_DUR_RING];  /* recent step durations */
	size_t ndur, dur_pos;
	bool finished;                 /* the process is exiting */
	bool armed;                    /* last value given to nvtx_arm */
	_Atomic int ready;             /* window_init() has run */
	bool prepared;                 /* the next window was prepared */
	bool fail_pending;             /* open_window failed: `fail` is to be
					  said once the lock is released */
	struct err fail;
	struct recorder rec;           /* the flight recorder's segments */
	bool rec_replay;               /* a segment opened: replay this
					  thread's open ranges after the lock */
	bool rec_merge_said;           /* a request merged into the last dump
					  was said (debug) */
	bool rec_told;                 /* the sources were told a segment
					  (capture_recorder_ops.segment), not yet
					  its stop */
	struct {                       /* window_listen's, in order; set at
					  start-up, read-only afterwards */
		const struct window_listener *l;
		void *ctx;
	} listen[WINDOW_LISTENERS];
	unsigned nlisten;
	bool rec_paused;               /* prof.recorder{ enabled = false }:
					  from the next boundary on the
					  recorder keeps no segment (its
					  held ones are given back) until
					  enabled again; dumps are refused */
};

/* What the host thread is woken for (bits of host_thread.wake). */
#define HOST_WAKE_JOB 1u           /* a job was queued */
#define HOST_WAKE_TERM 2u          /* a fatal signal: write the open window */
#define HOST_WAKE_STOP 4u          /* exit once the queue is empty */
#define HOST_WAKE_FILL 8u          /* a pool is three quarters full
				      (fill_gen): the recorder rotates */
#define HOST_WAKE_ROTATED 16u      /* the recorder rotated: the sources
				      hand over what they hold */

struct host;

/* What the host thread runs (hostthread.c names none of it): set once by
 * hostthread_init(), before the thread starts; writer.c's writer_ops. All
 * called on the host thread, no lock held. */
struct hostthread_ops {
	/* Writes a job (a closed window or a recorder dump); the queue frees
	 * the job and its steps afterwards. */
	void (*run)(struct host *h, struct host_job *job);
	/* A job skipped because the queue was full (hostthread_submit): its
	 * pools go back, the sources still collect it; nothing is written. */
	void (*skip)(struct host *h, struct host_job *job);
	/* HOST_WAKE_TERM, before the queue drains: the open window closes
	 * and is queued (a fatal signal's exit path). */
	void (*term)(struct host *h);
	/* HOST_WAKE_FILL: generation `gen`'s pool is filling. */
	void (*fill)(struct host *h, uint64_t gen);
	/* HOST_WAKE_ROTATED: the recorder rotated its segment. */
	void (*rotated)(struct host *h);
	/* HOST_WAKE_TERM, once the queue drained, before the answer. */
	void (*term_done)(struct host *h);
};

/* The host thread and its queue. */
struct host_thread {
	const struct hostthread_ops *ops; /* set at init */
	pthread_t thread;
	_Atomic int started;
	_Atomic int32_t tid;           /* kernel tid of the host thread */
	pthread_mutex_t lock;          /* guards the queue and `busy` */
	pthread_cond_t idle;           /* signalled when the queue empties */
	struct host_job *head, *tail;
	size_t queued;                 /* jobs in the queue */
	uint64_t skipped;              /* windows skipped (queue full) since
					  the last one queued to be written */
	uint64_t skipped_total;        /* ... and over the run */
	bool busy;                     /* a job is being processed */
	bool stop;                     /* exit once the queue is empty */
	_Atomic uint32_t wake;         /* wake word: HOST_WAKE_* bits */
	_Atomic uint32_t ack;          /* wake word: the answer to TERM */
	_Atomic uint64_t fill_gen;     /* the generation of HOST_WAKE_FILL */
	_Atomic int windows_written;
	bool said_run_moved;           /* host thread: the run went to <run>.N */
	struct host_outputs out;       /* guarded by `lock` */
};

/* What the watchdog's thread is woken for (bits of watchdog.wake). */
#define WD_WAKE_STOP 1u            /* look once more, then end */
#define WD_WAKE_ASK 2u             /* another rank's hang: report now
				      (watchdog.ask) */

/* The hang watchdog's state (watchdog.c). Its thread (profhost-wd) owns
 * the fields from `hangs` on; the others are for starting and stopping
 * it. */
struct watchdog {
	pthread_t thread;
	_Atomic int started;
	_Atomic int32_t tid;           /* kernel tid of its thread */
	_Atomic uint32_t wake;         /* wake word: WD_WAKE_* bits */
	pthread_mutex_t ask_lock;      /* guards `ask` */
	struct {
		bool pending;
		int rank;                  /* the rank that hung */
		uint64_t step;             /* its stalled step */
		char host[128];
	} ask;                         /* another rank's hang (job-wide, with
					  prof.recorder{ job = true }): this
					  rank reports now too */
	uint32_t hangs;                /* reports written */
	bool asked;                    /* a report was written for asked_step
					  when another rank's hang asked */
	uint64_t asked_step;
	int asked_rank;
	bool hung;                     /* a report was written for hung_step,
					  which has not ended yet */
	uint64_t hung_step;
	int64_t hung_since;            /* its start */
};

/* What the job watcher's thread is woken for (bits of jobwatch.wake). */
#define JW_WAKE_STOP 1u            /* write what is queued, then end */
#define JW_WAKE_WRITE 2u           /* a request or publication is queued */

#define JW_QUEUE 8                 /* requests and publications waiting */
#define JW_PENDING 8               /* requests waiting for their first step */

/* A capture request read before any rank decided its first step, by a
 * process that cannot decide it (it has not stepped yet): looked at
 * again when the folder changes (the decision is a new file). */
struct jw_pending {
	char name[96];
	struct jobfile f;
};

/* The reason of a job-wide capture's window starts so ("job capture
 * <id>"); its folder is window<K>_steps<a>-<b>_job. */
#define HOST_JOB_CAPTURE "job capture "
#define HOST_JOB_CAPTURE_SUFFIX "job"

struct host;

/* Who writes a hang report when another rank's hang asks (watchdog.c's
 * watchdog_ask: the watcher names no watchdog function). */
typedef int (*jobwatch_hang_fn)(struct host *h, int rank, uint64_t step,
				 const char *host, struct err *e);

/* The job watcher (jobwatch.c, docs/jobs.md): its thread (profhost-job)
 * looks at <run>/job every prof.job{ poll_ms } and answers what it finds;
 * the fields from `seen` on are its own. */
struct jobwatch {
	pthread_t thread;
	_Atomic int started;
	_Atomic int32_t tid;           /* kernel tid of its thread */
	_Atomic uint32_t wake;         /* wake word: JW_WAKE_* bits */
	jobwatch_hang_fn ask_hang;     /* jobwatch_on_hang's; NULL: none */
	pthread_mutex_t lock;          /* guards the queue and `dir` */
	struct jobfile *queue;         /* JW_QUEUE files to write, malloc'd */
	unsigned nqueue;
	char dir[PATH_MAX];            /* the run directory watched (the one
					  the run writes to, once known) */
	struct jw_pending pending[JW_PENDING];
	unsigned npending;
	struct jw_pending answers[JW_PENDING]; /* job dumps of steps this
					  rank has not reached yet: asked
					  again at each look */
	int64_t answer_until[JW_PENDING]; /* ... until then (Unix ns): then
					  what is held is written */
	unsigned nanswers;
	uint64_t *seen;                /* hashes of the names handled; an
					  open-addressing set, 0 = empty */
	size_t nseen, cap_seen;
	bool have_last, recheck, said_dir, said_full;
	dev_t last_dev;
	ino_t last_ino;
	struct timespec last_mtim, last_ctim;
};

struct host {
	struct host_env env;
	const struct shim_api *shim;
	struct policy *policy;
	const struct policy_config *cfg;
	char run_dir[PATH_MAX];        /* <output dir>/<run>, absolute */
	char run_id[300];              /* this launch's PROF_RUN_ID */
	char job_key[300];             /* MASTER_ADDR:MASTER_PORT/WORLD_SIZE of
					  the job this is a rank of; "" none */
	struct outdir_job job;         /* job_key (NULL when ""), when this
					  process started: the run directory's
					  sharing with the job's other ranks */
	char program[256];
	char hostname[256];
	pid_t pid;
	int64_t start_ns;              /* when this process started (Unix ns):
					  job requests made before it are
					  not its own */
	_Atomic int disabled;          /* 1: a forked child or a fatal failure */
	bool forked_child;             /* this is a child forked from parent_pid:
					  no profiling, its own REPL */
	pid_t parent_pid;
	_Atomic int exit_signal;       /* the signal the process dies of (set
					  by exitpath.c before it wakes the
					  host thread); 0: none */
	struct window_state win;
	struct host_thread ht;
	struct watchdog wd;
	struct jobwatch jw;
	struct salv_header *salv;      /* the salvage file's header; NULL:
					  none (salvage.c) */
	bool salv_tried;               /* salvage_ensure ran */
	bool salv_pool_said;           /* salvage_check_pool warned */
	char salvage_dir[PATH_MAX];    /* PROF_SALVAGE_DIR, absolute (from where
					  the process started); "": /dev/shm */
};

/* Reports a failure (e->msg, one line) on stderr. With PROF_STRICT=1 it
 * then ends the process with status 70. Any thread (fail.c). */
void host_fail(struct host *h, const struct err *e);

/* Runs the exit path (the last window written, the host thread stopped,
 * capture sources finished) at exit() before the exit handlers registered
 * so far, rather than in the shim's destructor after all of them: a CUDA
 * runtime's handler tears the driver down, and CUPTI must not be called
 * after it (it crashes there). Registers an atexit handler on each call;
 * the exit path runs once. Any thread (core.c). */
void host_arm_exit(void);

/* Runs the exit path now (as host_arm_exit's handler does at exit()): the
 * process is about to end in a way that runs no exit handler and no
 * destructor, which the Python bridge knows of (an uncaught
 * KeyboardInterrupt: the interpreter raises SIGINT on itself with the
 * default action once its own atexit handlers ran). What was recording is
 * written and the salvage file goes; the host is off from then on. Once
 * per process; any thread but the host thread; blocks while the host
 * thread writes (core.c). */
void host_exit_now(void);

/* --- window.c: the step side --- */

/* Registers `l` (static storage) with `ctx` to hear what window.c
 * publishes (struct window_listener), after the ones registered before.
 * Start-up, before window_init() (which publishes step 0). Returns 0, or
 * -1 with *e when WINDOW_LISTENERS are registered already. */
int window_listen(struct host *h, const struct window_listener *l, void *ctx,
		  struct err *e);

/* Sets up the schedule for step 0 (a window may open at once). Start-up. */
void window_init(struct host *h);

/* A step boundary (prof_step). Any thread. */
void window_step(struct host *h);

/* Queues a capture_now window. Any thread; not while holding the window
 * lock. Returns 0 or -1 with *e set. */
int window_capture_now(struct host *h, unsigned steps, const char *reason,
		       struct err *e);

/* Queues a window of `steps` steps from step `first` on (a job-wide
 * capture: sched_capture_at; one past `first` already opens at the next
 * boundary, late). Its folder is marked "_job". Any thread; not while
 * holding the window lock. Returns 0 or -1 with *e set. */
int window_capture_at(struct host *h, unsigned steps, uint64_t first,
		      const char *reason, struct err *e);

/* Where the steps stand, for a job-wide capture's first step: the step
 * now running and how long a step takes (the median of the recent ones,
 * at least 1 ms). Returns false when no step has ended yet (a launcher,
 * a process that never steps: it cannot say how far ahead a step lies).
 * Any thread; not while holding the window lock. */
bool window_job_position(struct host *h, uint64_t *step, int64_t *step_ns);

/* prof.dump: hands the recorder's last `steps` (0: the recorder's own
 * `steps`) complete steps (the step that just ended included) to the host
 * thread as one job. Only copies the recorder's index under the window
 * lock. A request made before another step completed after the last dump
 * is merged into it (0, nothing more written). Any thread; not while
 * holding the window lock. Returns 0 or -1 with *e saying why nothing
 * will be written. */
int window_dump(struct host *h, unsigned steps, const char *reason,
		struct err *e);

/* As window_dump with the recorder's own `steps`, when the program is
 * about to end (an uncaught Python exception): the step now running is
 * written too, as a step marked partial. */
int window_dump_ending(struct host *h, const char *reason, struct err *e);

/* The hang watchdog's dump, as window_dump_hang() took it. */
struct window_hang_dump {
	struct host_job *job;          /* for hostthread_submit(); NULL: none */
	uint32_t index;                /* its number (recorder<index>_...) */
	uint64_t first, last;          /* its steps; `last` is the stalled one */
};

/* The hang watchdog's recorder dump: the recorder's own `steps` complete
 * steps and step `step`, still running, marked partial (its records so
 * far); with no complete step held (the first step after a window, or
 * after the last dump) that step alone. Taken under the window lock
 * (copies of the recorder's index, its segments close and the step goes
 * on in a new one) into out->job, which the caller hands to the host
 * thread (hostthread_submit) once the hang's report is written, so that
 * the dump's reports link it. Never waits for the host thread. Returns 0,
 * or -1 with *e saying why no dump is taken (as prof.dump's refusals, or
 * `step` ended meanwhile). Any thread; not while holding the window
 * lock. */
int window_dump_hang(struct host *h, uint64_t step, const char *reason,
		     struct window_hang_dump *out, struct err *e);

/* A job-wide dump to answer (docs/jobs.md): another rank dumped steps
 * first..last; this rank writes the same steps from its recorder. */
struct window_job_dump {
	uint64_t first, last;
	int rank;                      /* the rank whose dump it was */
	const char *reason;            /* its reason */
	bool force;                    /* take what is held even when step
					  `last` has not begun here */
};

/* Answers a job-wide dump: the recorder's held steps from req->first to
 * req->last (to the step now running, marked partial, when `last` has not
 * ended here), in a folder recorder<K>_steps<a>-<b>_by-rank<R>; steps no
 * longer held are said in its summary's notes. Returns 0 (handed to the
 * host thread), 1 when step `last` has not begun here yet (asked again
 * later; req->force takes what is held), 2 when this rank's own dumps
 * already hold those steps (nothing written), or -1 with *e saying why
 * nothing is written (the recorder off, a window recording, max_dumps,
 * none of the steps held any more). Never publishes. Any thread; not
 * while holding the window lock. */
int window_dump_job(struct host *h, const struct window_job_dump *req, struct err *e);

/* prof.recorder{ enabled = ... } after the policy loaded (a hook, the
 * REPL): `on` false pauses the recorder, true resumes it. Takes effect at
 * the next step boundary: pausing then gives the held segments back (and
 * stops the sources that record for it, as a window's opening does);
 * resuming opens a segment there (the first step it holds is the one
 * that boundary starts). Dumps are refused from the call on while paused.
 * A window recording is not touched. Any thread; not while holding the
 * window lock. Returns 0, or -1 with *e (no recorder was set up at load,
 * the process is ending, ...). */
int window_recorder_switch(struct host *h, bool on, struct err *e);

/* The process is ending: close a recording window and queue it. With
 * `from_signal`, the window lock is only tried for a while (the interrupted
 * thread may hold it), and when no window records, a signal that
 * window_exit_dump() accepts (h->exit_signal) queues the recorder's steps
 * as a dump. Any thread; once. */
void window_finish(struct host *h, bool from_signal);

/* Whether dying of `sig` would write a recorder dump (the recorder holds
 * steps, no window records, prof.recorder{dump_on_crash / dump_on_signal}
 * says so). Racy read, async-signal-safe: for the exit path. */
bool window_exit_dump(struct host *h, int sig);

/* Generation `gen`'s pool is three quarters full (the pool-filling hook
 * window_init installs with the recorder on): when it is the recorder's
 * open segment, a new one opens inside the running step, so a step that
 * alone outgrows the segments keeps its newest part (docs/recorder.md).
 * Host thread. */
void window_pool_filling(struct host *h, uint64_t gen);

/* True while a window is recording (racy read; for the exit path). */
bool window_recording(struct host *h);

/* Whether the schedule or a capture request may still open a window (or
 * one is recording). Any thread; not while holding the window lock. */
bool window_ahead(struct host *h);

/* An instance of the NVTX capture range (prof.capture_range) began: opens a
 * window unless one is recording, and keeps it recording until
 * window_range_end(). Returns 1 when this instance now holds the window
 * open, 0 when it does not (another instance does, or the process is
 * ending), -1 when prof.capture_range{count} is used up. Any thread; not
 * while holding the window lock. */
int window_range_begin(struct host *h);

/* The instance that window_range_begin() returned 1 for ended at end_ts
 * (its end record's timestamp): closes the window there unless the
 * schedule still records it; what other threads recorded after end_ts is
 * left out of the window. Any thread. */
void window_range_end(struct host *h, int64_t end_ts);

/* The schedule was changed live (sched_reconfigure): re-decides what the
 * NVTX layer must keep. Window lock held. */
void window_schedule_changed(struct host *h);

/* Median and mean of the recent step durations. Window lock held. */
void window_step_stats(const struct window_state *w, double *median,
		       double *mean);

/* --- hostthread.c --- */

/* Sets up the queue; the thread will run `ops` (kept: static storage).
 * Start-up. */
void hostthread_init(struct host *h, const struct hostthread_ops *ops);

/* Starts the host thread if it is not running. Returns 0 or -1 with *e. */
int hostthread_start(struct host *h, struct err *e);

/* Hands a closed window to the host thread (takes ownership of job).
 * Never blocks on the host thread's work. Any thread. */
void hostthread_submit(struct host *h, struct host_job *job);

/* The jobs waiting for the host thread now, beyond the one it writes,
 * when as many as it queues are waiting (a job handed over then is
 * skipped: hostthread_submit); else 0. Any thread; takes the queue's
 * lock, never the window lock. */
size_t hostthread_full(struct host *h);

/* Waits until the queue is empty and nothing is being written, at most
 * `timeout_ms`; then stops the thread. Returns 0, or -1 on time-out. */
int hostthread_stop(struct host *h, int timeout_ms);

/* True when the caller is the host thread. Async-signal-safe. */
bool hostthread_is_self(struct host *h);

/* The jobs the host thread has to finish before one handed over now:
 * those queued, and the one it is writing. Any thread; takes the queue's
 * lock. */
size_t hostthread_backlog(struct host *h);

/* --- writer.c: what the host thread does with a job --- */

/* The host thread's ops (struct hostthread_ops): a job's trace assembled,
 * its files written, its reports and hooks run, noted for prof.status();
 * a fatal signal's window closed; the recorder's pool-filling and
 * rotation answered. core.c hands it to hostthread_init(). */
extern const struct hostthread_ops writer_ops;

/* --- live.c: what the REPL sees and changes --- */

/* The policy's live operations (prof.status/top/stacks, capture_now's
 * progress, live prof.schedule/prof.capture/prof.recorder{ enabled });
 * their context is the host. */
extern const struct policy_live_ops live_ops;

/* Records a processed window for prof.status() and the REPL (res: what
 * export wrote, NULL or with an empty dir when nothing was). Host thread. */
void live_note_window(struct host *h, const struct host_job *job,
		      const struct export_result *res, uint64_t dropped);

/* Records a written recorder dump's directory for prof.status(). Host
 * thread. */
void live_note_dump(struct host *h, const char *dir);

/* Frees the kept outputs. At exit, after the host thread stopped. */
void live_fini(struct host *h);

/* One stack frame as text: "0x... symbol+0xoff (library)"; `is_return`:
 * a return address (looked up at the byte before). Any thread. */
void live_frame_text(uintptr_t ip, bool is_return, char *out, size_t size);

/* --- watchdog.c: the hang watchdog --- */

/* Starts the watchdog's own thread (prof.watchdog{}; nothing when it is
 * off or in a forked child). It sleeps until the running step's deadline,
 * and never waits for the host thread: a hang is reported on time while a
 * window is being written. Start-up, after window_init(). Returns 0 or -1
 * with *e. */
int watchdog_start(struct host *h, struct err *e);

/* Another rank (`rank`, on `host`) reported a hang of its step `step`
 * (job-wide, docs/jobs.md): this rank's watchdog writes a hang report of
 * its own now, whatever its own limit says, into a folder
 * hang<K>_step<N>_by-rank<rank>. Returns 0, or -1 with *e when the
 * watchdog does not run here. Any thread; never blocks on the report. */
int watchdog_ask(struct host *h, int rank, uint64_t step, const char *host, struct err *e);

/* Stops the watchdog's thread: it looks once more (a reported hang that
 * ended, or not, is said), finishes a report it is writing and ends.
 * Called at exit after window_finish(), before hostthread_stop() (a hang's
 * dump is handed to the host thread before it stops). Nothing when
 * called on the watchdog's thread itself (exit() from its hook). */
void watchdog_stop(struct host *h);
/* --- jobwatch.c: the job-wide requests (docs/jobs.md) --- */

/* With prof.recorder{ job = true }: tells the job's other ranks, through
 * the run directory, of a dump this rank took (f->kind JOBFILE_DUMP:
 * first, last, partial, reason) or of its hang report (JOBFILE_HANG:
 * step, reason); the rank, pid, host and time are filled here. Queued for
 * the watcher's thread (no I/O here); dropped with a line when its queue
 * is full or it does not run. Any thread, the window lock not held. */
void jobwatch_publish(struct host *h, const struct jobfile *f);

/* The job watcher as a window listener (window_listen, ctx: the host):
 * this rank's dumps that the job is to hear of are published
 * (jobwatch_publish). */
extern const struct window_listener jobwatch_listener;

/* Writes what is queued now, on the calling thread (a process dying of a
 * signal: the host thread, once its dump is written). */
void jobwatch_flush(struct host *h);

/* Sets the watcher up (its lock, the run directory it watches). Start-up,
 * once the run directory is known, before any thread starts; again in a
 * forked child. */
void jobwatch_init(struct host *h);

/* Another rank's hang found in <run>/job is handed to `ask` (core.c:
 * watchdog_ask), which writes this rank's hang report; without one (or
 * when it fails) the watcher says why none is written. Start-up, before
 * jobwatch_start(). */
void jobwatch_on_hang(struct host *h, jobwatch_hang_fn ask);

/* Starts the job watcher's thread (prof.job{ poll_ms } above 0; not in a
 * forked child): it looks at <run>/job every poll_ms (one stat) and
 * answers the requests it finds (prof capture RUN). Start-up, after
 * window_init(). Returns 0 or -1 with *e. */
int jobwatch_start(struct host *h, struct err *e);

/* Stops the thread once it wrote what is queued. At exit, after
 * watchdog_stop() (a hang's publication is queued), before
 * hostthread_stop(). Nothing when called on its own thread. */
void jobwatch_stop(struct host *h);

/* The run writes to `dir` (<run>.N: <run> held another run): the watcher
 * looks there from now on. Host thread. */
void jobwatch_run_moved(struct host *h, const char *dir);

/* prof.capture_now{ job = true } (a hook, the REPL): asks every rank of
 * the run for `steps` steps, as `prof capture RUN` does; `from` says who
 * asked. The request is written by the watcher's thread (no I/O here).
 * Any thread. Returns 0, or -1 with *e (the watcher is off, its queue is
 * full). */
int jobwatch_request(struct host *h, unsigned steps, const char *from, struct err *e);


/* --- salvage.c: the salvage file (src/common/salvfile.h) --- */

struct salv_header;

/* Decides the salvage file's folder (h->salvage_dir): PROF_SALVAGE_DIR,
 * a relative one taken from the directory the process started in (it may
 * chdir before the file is made, or before it removes it); one of another
 * user's, or that others can write, is refused with one line (the default
 * /dev/shm is used). Then says in one line how many salvage files of this
 * user's processes that ended lie in that folder, and the memory they
 * hold (salvscan: cheap, never blocks). Start-up. */
void salvage_init(struct host *h);

/* Creates the salvage file (PROF_SALVAGE_DIR, else /dev/shm) and writes
 * who this process is into it, the first time a pool is about to be
 * mapped (a process that never records makes no file); says in one line
 * when it cannot (the pools stay anonymous). Window lock held, or
 * start-up. */
void salvage_ensure(struct host *h);

/* Generation `gen` (0: none) was just opened with a pool of `bytes`:
 * when the process has a salvage file but the pool could not be mapped
 * from it (its tmpfs had less room free), says once per process that a
 * SIGKILL or _exit() loses that pool's records, naming `setting`. Lock
 * held. */
void salvage_check_pool(struct host *h, uint64_t gen, size_t bytes, const char *setting);

/* Writes what records now (the window, or the recorder's segments) into
 * the file when it changed. Window lock held. */
void salvage_publish(struct host *h);

/* Adds a completed step to the file's last steps. Window lock held. */
void salvage_step(struct host *h, uint64_t step, int64_t ts, int64_t dur,
		  int32_t tid);

/* Keeps a GPU name the flight recorder's raw CUPTI records use (kind:
 * enum salv_gpu_kind; key and bytes as salvfile.h says; rec[0, rlen): a
 * DEVICE record, else rlen 0) in the file, so that a salvage can name
 * them; one that does not fit is counted (gpu_lost); without a file,
 * nothing. Any thread (CUPTI's buffer callbacks); takes a lock of its
 * own, never allocates. */
void salvage_gpu_name(unsigned kind, uint64_t key, const void *rec, size_t rlen,
		     const char *text);

/* The CPU sampler samples with signal `signo` now (0: none): kept in
 * the file (now, or when it is made) so that a salvage's trace names it
 * as a window's does. Any thread; never blocks. */
void salvage_sample_signal(int signo);

/* The Python interpreter's frame-evaluation code is [lo, hi) in this
 * process: kept in the file (now, or when it is made) so that a salvage
 * can put the recorder's Python snapshots into the CPU samples. Any
 * thread; never blocks. */
void salvage_py_eval(uint64_t lo, uint64_t hi);

/* What the file held was written (or the process ends cleanly), or a
 * signal's exit path ran, which wrote what it was set to write (salvage is
 * for what no exit path sees: SIGKILL, _exit, signals profhost does not
 * catch): removes it. Any thread, async-signal-safe; in the process that
 * created it only. */
void salvage_done(struct host *h);

/* --- exitpath.c --- */

/* Installs the SIGTERM/SIGINT/SIGHUP and fatal-signal handlers where the
 * application left the default disposition. Start-up. */
void exitpath_install(struct host *h);

#endif

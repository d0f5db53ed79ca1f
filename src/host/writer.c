/*
 * writer — what the host thread does with a closed window or recorder
 * dump (hostthread.c's queue hands it over through writer_ops): assemble
 * its trace from the event pools, let the capture sources add theirs,
 * write the files, run the built-in reports and the report hooks, and
 * note it for prof.status(). Also the host thread's answers to its other
 * wake-ups (a fatal signal, a recorder pool filling, a rotation). Every
 * function here runs on the host thread.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../events/assemble.h"
#include "../events/bigalloc.h"
#include "../common/clock.h"
#include "../export/export.h"
#include "../common/io.h"
#include "../common/log.h"
#include "capture.h"
#include "host.h"

/* Appends "window\t<dir>" to the launcher's notes file, if any. */
static void note_window(struct host *h, const char *dir)
{
	char line[4200];
	int fd, n;

	if (!h->env.notes)
		return;
	n = snprintf(line, sizeof line, "window\t%s\n", dir);
	if (n < 0 || (size_t)n >= sizeof line)
		return;
	fd = io_fd_above_stdio(open(h->env.notes, O_WRONLY | O_APPEND | O_CLOEXEC));
	if (fd < 0)
		return; /* the launcher is gone; nothing to tell */
	if (write(fd, line, (size_t)n) != n)
		log_msg(LOG_DEBUG, "could not write to PROF_LAUNCHER_NOTES");
	close(fd);
}

/* Fills the trace's metadata from the job and the host. */
static void fill_meta(struct host *h, const struct host_job *job, struct trace *t)
{
	const char *run = strrchr(h->run_dir, '/');

	t->meta.rank = h->env.rank;
	t->meta.world_size = h->env.world_size;
	t->meta.window = job->window;
	t->meta.first_step = job->first;
	t->meta.last_step = job->last;
	t->meta.start_ts = job->start_ts;
	t->meta.end_ts = job->end_ts;
	/* the Unix time of the clock's zero, taken once for the window (a
	 * clock stepped since start-up does not skew it) */
	t->meta.base_time_ns = clock_wall_offset_ns();
	t->meta.pid = h->pid;
	t->meta.program = strdup(h->program);
	t->meta.hostname = strdup(h->hostname);
	t->meta.run = strdup(run ? run + 1 : h->run_dir);
	t->meta.reason = strdup(job->reason);
	t->meta.peak_tflops = h->cfg->capture.peak_tflops;
	t->meta.recorder = job->dump;
	if (job->suffix[0])
		t->meta.suffix = strdup(job->suffix);
}

/* Gives a job's event pools back: a window's generation, or a recorder
 * dump's generations (a dump has no generation of its own: gen 0 would
 * name whatever slot 0 holds, a prepared pool included). Host thread. */
static void release_job(struct host *h, const struct host_job *job)
{
	uint32_t i;

	if (!job->dump) {
		h->shim->evbuf_release(job->gen);
		return;
	}
	for (i = 0; i < job->ngens; i++)
		h->shim->evbuf_release(job->gens[i]);
}

/* Runs the built-in reports of a written window and adds report.txt,
 * report.html and modules.txt (when nn.Module calls were recorded) to it,
 * linking the hang reports it overlaps; rank 0 prints the findings. Host
 * thread. */
static void run_builtin_reports(struct host *h, const struct trace *t,
				struct export_result *res)
{
	unsigned formats = (h->cfg->export.report_text ? POLICY_REPORT_TEXT : 0) |
			   (h->cfg->export.report_html ? POLICY_REPORT_HTML : 0);
	char *findings;
	struct err e;

	if (!formats || !h->policy)
		return;
	if (policy_write_reports(h->policy, t, res, formats, h->cfg->watchdog.enabled,
				 &findings, &e) != POLICY_OK) {
		host_fail(h, &e);
		return;
	}
	if (findings && findings[0])
		log_text(h->env.rank == 0 ? LOG_INFO : LOG_DEBUG, findings);
	free(findings);
}

/* Runs a host-thread hook; a busy VM (REPL, another report) is waited for. */
static void run_window_hooks(struct host *h, const struct policy_window_info *wi,
			     const struct policy_trace *pt)
{
	enum policy_status st;
	struct err e;
	int tries;

	if (h->cfg->has_on_window_end) {
		for (tries = 0; tries < 10000; tries++) {
			st = policy_on_window_end(h->policy, wi, &e);
			if (st != POLICY_BUSY)
				break;
			usleep(1000);
		}
		if (st == POLICY_ERROR)
			host_fail(h, &e);
	}
	if (h->cfg->has_on_trace_ready &&
	    policy_on_trace_ready(h->policy, pt, &e) == POLICY_ERROR)
		host_fail(h, &e);
}

/* What a recorder dump lost, and which setting to raise. Host thread. */
static void log_dump_drops(struct host *h, uint32_t dump, const struct trace_counters *c)
{
	if (c->dropped_buffer > c->dropped_memory)
		log_msg(LOG_WARN, "recorder dump %u: %llu events dropped because the event "
			"buffers were full (raise prof.recorder{ mb = ... }, now %zu, or "
			"lower its steps)", dump,
			(unsigned long long)(c->dropped_buffer - c->dropped_memory),
			h->cfg->recorder.bytes >> 20);
	if (c->dropped_memory)
		log_msg(LOG_WARN, "recorder dump %u: %llu events dropped because the "
			"trace built from the recorder's event buffers would have "
			"outgrown prof.recorder{ mb = %zu } (each distinct name takes "
			"room beside its records: a name per range, or many marks?); "
			"raise mb, or give ranges names that repeat", dump,
			(unsigned long long)c->dropped_memory, h->cfg->recorder.bytes >> 20);
	if (c->dropped_noslot && c->pool_errno)
		log_msg(LOG_WARN, "recorder dump %u: %llu events dropped because its "
			"event buffers could not be mapped (%s)", dump,
			(unsigned long long)c->dropped_noslot, strerror((int)c->pool_errno));
	else if (c->dropped_noslot)
		log_msg(LOG_WARN, "recorder dump %u: %llu events dropped because its "
			"next event buffer was still held by a dump being written "
			"(raise prof.recorder{ mb = ... }, now %zu, or dump less often)",
			dump, (unsigned long long)c->dropped_noslot,
			h->cfg->recorder.bytes >> 20);
}

/* A dump whose first step alone outgrew the recorder's pools holds only
 * that step's newest part: says so in its summary's notes and the log.
 * Host thread. */
static void note_dump_cut(struct host *h, const struct host_job *job, struct trace *t)
{
	char line[256];

	if (!job->cut_ts || job->cut_ts <= job->start_ts)
		return;
	snprintf(line, sizeof line, "step %llu alone outgrew the flight recorder's "
		 "pools: its first %.1f ms were given back, this dump holds its "
		 "newest part (raise prof.recorder{ mb = ... }, now %zu)",
		 (unsigned long long)job->first, (double)(job->cut_ts - job->start_ts) / 1e6,
		 h->cfg->recorder.bytes >> 20);
	log_msg(LOG_WARN, "recorder dump %u: %s", job->window, line);
	if (trace_add_note(t, line) != 0)
		t->oom = 1;
}

/* Says what a window lost, and why, in one line. Host thread. */
static void log_drops(struct host *h, uint32_t window, const struct trace_counters *c)
{
	if (c->dropped_buffer > c->dropped_memory)
		log_msg(LOG_WARN, "window %u: %llu events dropped because the event "
			"buffers were full (raise prof.capture{buffer_mb = ...}, now %zu)",
			window, (unsigned long long)(c->dropped_buffer - c->dropped_memory),
			h->cfg->capture.buffer_bytes >> 20);
	if (c->dropped_memory)
		log_msg(LOG_WARN, "window %u: %llu events dropped because the trace "
			"built from the event buffers would have outgrown "
			"prof.capture{buffer_mb = %zu} (each distinct name takes room "
			"beside its records: a name per range, or many marks?); raise "
			"buffer_mb, or give ranges names that repeat", window,
			(unsigned long long)c->dropped_memory,
			h->cfg->capture.buffer_bytes >> 20);
	if (c->dropped_noslot && c->pool_errno)
		log_msg(LOG_WARN, "window %u: %llu events dropped because its event "
			"buffer of %zu MiB could not be mapped (%s; a memory limit such "
			"as ulimit -v?): lower prof.capture{buffer_mb = ...} or raise "
			"the limit", window, (unsigned long long)c->dropped_noslot,
			h->cfg->capture.buffer_bytes >> 20, strerror((int)c->pool_errno));
	else if (c->dropped_noslot)
		log_msg(LOG_WARN, "window %u: %llu events dropped because earlier "
			"windows were still being written (space the windows out: "
			"prof.schedule{wait = ...})", window,
			(unsigned long long)c->dropped_noslot);
	if (c->dropped_steps)
		log_msg(LOG_WARN, "window %u: %llu steps not recorded: more than its "
			"budget of one step per %d bytes of prof.capture{buffer_mb}",
			window, (unsigned long long)c->dropped_steps, 256);
	if (c->windows_skipped)
		log_msg(LOG_WARN, "%llu windows before window %u were not written: the "
			"host was still writing others (space the windows out: "
			"prof.schedule{wait = ...})",
			(unsigned long long)c->windows_skipped, window);
}

/* A window or dump skipped because the queue was full: its pools go back
 * and the capture sources still collect it (they keep state per window,
 * and per dump since capture_recorder_ops.dump_taken: CUPTI keeps its buffers for
 * the dump's collect), into a trace nobody writes. Host thread. */
static void skip_job(struct host *h, struct host_job *job)
{
	struct trace t;

	release_job(h, job);
	if (trace_init(&t) != 0) {
		if (job->dump)
			capture_dump_dropped_all(); /* no collect follows */
		return;
	}
	fill_meta(h, job, &t);
	capture_collect_all(h, job, &t);
	trace_free(&t);
}


/* Builds job's trace into `t`: the records of its event pools (given back
 * then), what the capture sources keep apart (a dump: of the segments the
 * recorder told them of), its notes, sorted. Returns 0, or -1 when memory
 * ran out before the trace existed (the job is lost, said so; its pools
 * are back). Host thread. */
static int build_trace(struct host *h, const struct host_job *job, struct trace *t)
{
	struct assemble_source src = { .drain = h->shim->evbuf_drain, .gen = job->gen,
				       .domain_name = h->shim->nvtx_domain_name,
				       .category_name = h->shim->nvtx_category_name };

	if (job->dump) {
		/* A recorder dump: the generations that hold its steps, in
		 * order, records before its first step left out. */
		src.gens = job->gens + job->nskip;
		src.ngens = job->ngens - job->nskip;
		src.clip_start = true;
	}
	/* The trace from the records takes what their pool may (assemble.h) */
	src.budget = job->dump ? h->cfg->recorder.bytes : h->cfg->capture.buffer_bytes;
	if (trace_init(t) != 0) {
		log_msg(LOG_ERROR, "out of memory: %s %u is lost",
			job->dump ? "recorder dump" : "window", job->window);
		release_job(h, job);
		if (job->dump)
			capture_dump_dropped_all(); /* no collect follows */
		return -1;
	}
	fill_meta(h, job, t);
	t->counters.dropped_steps = job->dropped_steps;
	t->counters.windows_skipped = job->windows_skipped;
	if (assemble_window(t, &src, job->steps, job->nsteps) != 0)
		log_msg(LOG_WARN, "out of memory assembling window %u: the trace "
			"is incomplete", job->window);
	release_job(h, job);
	/* The sources add what they keep apart (a dump: of the segments the
	 * recorder told them of) and name the stacks. */
	capture_collect_all(h, job, t);
	trace_raw_free(t); /* the sources read what they kept raw */
	/* the labels the sources added (torch's profiler's) win over the
	 * bridge's phases of their names too */
	if (assemble_phases_yield(t) != 0)
		log_msg(LOG_WARN, "out of memory in window %u: the step phases may "
			"count a phase the program labels itself twice", job->window);
	note_dump_cut(h, job, t);
	if (job->note[0]) {
		log_msg(LOG_INFO, "recorder dump %u: %s", job->window, job->note);
		if (trace_add_note(t, job->note) != 0)
			t->oom = 1;
	}
	t->counters.events = t->nev;
	export_unix_time(t); /* every file and report of the window: one time */
	trace_sort(t); /* its tables and reports sweep it as it lies */
	return 0;
}

/* The policy's output settings as export_window() takes them. */
static void fill_export_opts(struct host *h, struct export_opts *o)
{
	memset(o, 0, sizeof *o);
	o->run_dir = h->run_dir;
	o->run_id = h->run_id;
	o->job = &h->job;
	o->chrome = h->cfg->export.chrome;
	o->chrome_gzip = h->cfg->export.chrome_gzip;
	o->tensorboard = h->cfg->export.tensorboard;
	o->key_averages = h->cfg->export.key_averages;
	o->sort_by = h->cfg->export.sort_by;
	o->row_limit = h->cfg->export.row_limit;
	o->group_by = h->cfg->export.group_by;
	o->group_by_input_shape = h->cfg->export.group_by_input_shape;
	o->group_by_stack_n = h->cfg->export.group_by_stack_n;
	o->summary = false; /* written last, after the reports */
	o->raw = h->cfg->export.raw;
	o->memory_timeline = h->cfg->export.memory_timeline;
	o->stacks = h->cfg->export.stacks;
	o->stacks_metric = h->cfg->export.stacks_metric;
}

/* Writes the trace's files (*res, filled whatever the result), then its
 * reports and summary; a run directory found taken is said once and the
 * job watcher follows the run. Returns 0, or -1 when a file could not be
 * written (reported). Host thread. */
static int write_files(struct host *h, struct trace *t, struct export_result *res)
{
	struct export_opts o;
	struct err e;
	int rc;

	fill_export_opts(h, &o);
	rc = export_window(t, &o, res, &e);
	if (rc != 0)
		host_fail(h, &e);
	if (res->run_moved && !h->ht.said_run_moved) {
		h->ht.said_run_moved = true;
		log_msg(h->env.rank == 0 ? LOG_INFO : LOG_DEBUG, "run directory '%s' holds "
			"another run; this run writes to '%s' (name each run: prof.output{ "
			"run = ... } or PROF_RUN_ID)", h->run_dir, res->run_dir);
		jobwatch_run_moved(h, res->run_dir); /* its job requests are there */
	}
	if (rc == 0 && res->dir[0]) {
		run_builtin_reports(h, t, res);
		if (h->cfg->export.summary && export_summary(t, res, &e) != 0) {
			host_fail(h, &e);
			rc = -1;
		}
	}
	return rc;
}

/* Says what was written (`rc`: write_files' answer), tells the launcher,
 * notes it for prof.status() and capture_now's tickets, and says what it
 * lost. Host thread. */
static void tell_written(struct host *h, const struct host_job *job,
			 const struct trace *t, const struct export_result *res,
			 int rc, uint64_t dropped)
{
	if (res->dir[0] && rc == 0) {
		log_msg(h->env.rank == 0 ? LOG_INFO : LOG_DEBUG,
			"%s %u (steps %llu-%llu, %s): %llu events -> %s/",
			job->dump ? "recorder dump" : "window", job->window, (unsigned long long)job->first,
			(unsigned long long)job->last, job->reason,
			(unsigned long long)t->counters.events, res->dir);
		if (res->summary && h->env.rank == 0)
			log_text(LOG_INFO, res->summary);
		note_window(h, res->dir);
		atomic_fetch_add(&h->ht.windows_written, 1);
	}
	if (!job->dump) /* prof.status's windows and capture_now tickets */
		live_note_window(h, job, rc == 0 ? res : NULL, dropped);
	else if (rc == 0 && res->dir[0])
		live_note_dump(h, res->dir);
	if (job->dump)
		log_dump_drops(h, job->window, &t->counters);
	else
		log_drops(h, job->window, &t->counters);
}

/* Runs the report hooks on the written job (a dump runs the same ones,
 * with w.recorder / trace.recorder set). Host thread. */
static void run_hooks(struct host *h, const struct host_job *job, struct trace *t,
		      struct export_result *res, uint64_t dropped)
{
	struct policy_window_info wi = { 0 };
	struct policy_trace pt;

	wi.recorder = job->dump;
	wi.window = job->window;
	wi.first_step = job->first;
	wi.last_step = job->last;
	wi.reason = job->reason;
	wi.dir = res->dir[0] ? res->dir : NULL;
	res->files[res->nfiles] = NULL; /* NULL-ended for the hooks */
	wi.files = (const char *const *)res->files;
	wi.events = t->counters.events;
	wi.dropped = dropped;
	pt.trace = t;
	pt.dir = wi.dir;
	pt.out = wi.dir ? &res->out : NULL;
	pt.files = wi.files;
	pt.hangs = NULL;
	pt.nhangs = 0;
	run_window_hooks(h, &wi, &pt);
}

/* Assembles, writes and reports one closed window or dump (hostthread_ops
 * run). Host thread. */
static void process_job(struct host *h, struct host_job *job)
{
	struct trace t;
	struct export_result res;
	uint64_t dropped;
	int rc;

	if (build_trace(h, job, &t) != 0)
		return;
	rc = write_files(h, &t, &res);
	dropped = t.counters.dropped_buffer + t.counters.dropped_noslot +
		  t.counters.dropped_steps;
	tell_written(h, job, &t, &res, rc, dropped);
	run_hooks(h, job, &t, &res, dropped);
	export_result_free(&res);
	trace_free(&t);
	/* The trace's big arrays were kept for the next window; with none
	 * ahead, the memory goes back now. */
	if (!window_ahead(h))
		bigalloc_trim();
}

/* hostthread_ops' wake-ups: a fatal signal closes the open window (from
 * a signal's exit path), a recorder pool filling opens a new segment, a
 * rotation has the sources hand over what they hold; after a fatal
 * signal's jobs, the crash's publication is written for the job. */
static void on_term(struct host *h)
{
	window_finish(h, true);
}

static void on_rotated(struct host *h)
{
	(void)h;
	capture_recorder_rotated_all();
}

const struct hostthread_ops writer_ops = {
	.run = process_job,
	.skip = skip_job,
	.term = on_term,
	.fill = window_pool_filling,
	.rotated = on_rotated,
	.term_done = jobwatch_flush,
};

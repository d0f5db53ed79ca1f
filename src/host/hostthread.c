/*
 * hostthread — the host's own thread: it turns closed windows into files
 * and runs the report hooks, so a step boundary never waits for I/O.
 *
 * It sleeps in poll() on a pipe. Application threads queue jobs under a
 * mutex the host thread holds only to pop; signal handlers write one byte
 * ('T') and wait for the answer on a second pipe, which is all they can
 * safely do.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../events/assemble.h"
#include "../events/bigalloc.h"
#include "../events/clock.h"
#include "../export/export.h"
#include "../util/log.h"
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
	fd = open(h->env.notes, O_WRONLY | O_APPEND | O_CLOEXEC);
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
}

/* Runs the built-in reports of a written window and adds report.txt and
 * report.html to it; rank 0 prints the findings. Host thread. */
static void run_builtin_reports(struct host *h, const struct trace *t,
				struct export_result *res)
{
	struct policy_trace pt;
	struct policy_report rep;
	unsigned formats = (h->cfg->export.report_text ? POLICY_REPORT_TEXT : 0) |
			   (h->cfg->export.report_html ? POLICY_REPORT_HTML : 0);
	struct err e;

	if (!formats || !h->policy)
		return;
	res->files[res->nfiles] = NULL;
	pt.trace = t;
	pt.dir = res->dir;
	pt.out = &res->out;
	pt.files = (const char *const *)res->files;
	if (policy_report_window(h->policy, &pt, formats, false, &rep, &e) != POLICY_OK) {
		host_fail(h, &e);
		return;
	}
	if (rep.text && export_text_file(res, "report.txt", rep.text, &e) != 0)
		host_fail(h, &e);
	if (rep.html && export_text_file(res, "report.html", rep.html, &e) != 0)
		host_fail(h, &e);
	if (rep.findings && rep.findings[0])
		log_text(h->env.rank == 0 ? LOG_INFO : LOG_DEBUG, rep.findings);
	policy_report_free(&rep);
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

/* Assembles, writes and reports one closed window. Host thread. */
static void process_job(struct host *h, struct host_job *job)
{
	struct trace t;
	struct assemble_source src = { h->shim->evbuf_drain, job->gen,
				       h->shim->nvtx_domain_name,
				       h->shim->nvtx_category_name };
	struct export_opts o = { 0 };
	struct export_result res;
	struct policy_window_info wi = { 0 };
	struct policy_trace pt;
	uint64_t dropped;
	struct err e;
	int rc;

	if (trace_init(&t) != 0) {
		log_msg(LOG_ERROR, "out of memory: window %u is lost", job->window);
		h->shim->evbuf_release(job->gen);
		return;
	}
	fill_meta(h, job, &t);
	if (assemble_window(&t, &src, job->steps, job->nsteps) != 0)
		log_msg(LOG_WARN, "out of memory assembling window %u: the trace "
			"is incomplete", job->window);
	h->shim->evbuf_release(job->gen);
	capture_collect_all(h, job, &t);
	t.counters.events = t.nev;
	export_unix_time(&t); /* every file and report of the window: one time */

	o.run_dir = h->run_dir;
	o.run_id = h->run_id;
	o.chrome = h->cfg->export.chrome;
	o.chrome_gzip = h->cfg->export.chrome_gzip;
	o.tensorboard = h->cfg->export.tensorboard;
	o.key_averages = h->cfg->export.key_averages;
	o.sort_by = h->cfg->export.sort_by;
	o.row_limit = h->cfg->export.row_limit;
	o.group_by = h->cfg->export.group_by;
	o.summary = false; /* written last, below, after the reports */
	o.raw = h->cfg->export.raw;
	o.memory_timeline = h->cfg->export.memory_timeline;
	o.stacks = h->cfg->export.stacks;
	rc = export_window(&t, &o, &res, &e);
	if (rc != 0)
		host_fail(h, &e);
	if (res.run_moved && !h->ht.said_run_moved) {
		h->ht.said_run_moved = true;
		log_msg(h->env.rank == 0 ? LOG_INFO : LOG_DEBUG, "run directory '%s' holds "
			"another run; this run writes to '%s' (name each run: prof.output{ "
			"run = ... } or PROF_RUN_ID)", h->run_dir, res.run_dir);
	}
	if (rc == 0 && res.dir[0]) {
		run_builtin_reports(h, &t, &res);
		if (h->cfg->export.summary && export_summary(&t, &res, &e) != 0) {
			host_fail(h, &e);
			rc = -1;
		}
	}
	dropped = t.counters.dropped_buffer + t.counters.dropped_noslot;
	if (res.dir[0] && rc == 0) {
		log_msg(h->env.rank == 0 ? LOG_INFO : LOG_DEBUG,
			"window %u (steps %llu-%llu, %s): %llu events -> %s/",
			job->window, (unsigned long long)job->first,
			(unsigned long long)job->last, job->reason,
			(unsigned long long)t.counters.events, res.dir);
		if (res.summary && h->env.rank == 0)
			log_text(LOG_INFO, res.summary);
		note_window(h, res.dir);
		atomic_fetch_add(&h->ht.windows_written, 1);
	}
	live_note_window(h, job, rc == 0 ? &res : NULL, dropped);
	if (dropped)
		log_msg(LOG_WARN, "window %u: %llu events dropped because the event "
			"buffers were full (raise prof.capture{buffer_mb = ...}, now %zu)",
			job->window, (unsigned long long)dropped,
			h->cfg->capture.buffer_bytes >> 20);

	wi.window = job->window;
	wi.first_step = job->first;
	wi.last_step = job->last;
	wi.reason = job->reason;
	wi.dir = res.dir[0] ? res.dir : NULL;
	res.files[res.nfiles] = NULL; /* NULL-ended for the hooks */
	wi.files = (const char *const *)res.files;
	wi.events = t.counters.events;
	wi.dropped = dropped;
	pt.trace = &t;
	pt.dir = wi.dir;
	pt.out = wi.dir ? &res.out : NULL;
	pt.files = wi.files;
	run_window_hooks(h, &wi, &pt);

	export_result_free(&res);
	trace_free(&t);
	/* The trace's big arrays were kept for the next window; with none
	 * ahead, the memory goes back now. */
	if (!window_ahead(h))
		bigalloc_trim();
}

/* Pops and processes every queued job. Host thread. */
static void drain_queue(struct host *h)
{
	struct host_thread *ht = &h->ht;
	struct host_job *job;

	for (;;) {
		pthread_mutex_lock(&ht->lock);
		job = ht->head;
		if (job) {
			ht->head = job->next;
			if (!ht->head)
				ht->tail = NULL;
			ht->busy = true;
		} else {
			ht->busy = false;
			pthread_cond_broadcast(&ht->idle);
		}
		pthread_mutex_unlock(&ht->lock);
		if (!job)
			return;
		process_job(h, job);
		free(job->steps);
		free(job);
	}
}

static void *host_main(void *arg)
{
	struct host *h = arg;
	struct host_thread *ht = &h->ht;
	struct pollfd pfd = { .fd = ht->wake[0], .events = POLLIN };
	char buf[64];
	bool stop = false;

	atomic_store(&ht->tid, (int32_t)syscall(SYS_gettid));
	while (!stop) {
		bool terminate = false;
		ssize_t n, i;

		if (poll(&pfd, 1, -1) < 0 && errno != EINTR)
			break;
		while ((n = read(ht->wake[0], buf, sizeof buf)) > 0)
			for (i = 0; i < n; i++) {
				if (buf[i] == 'T')
					terminate = true;
				else if (buf[i] == 'S')
					stop = true;
			}
		if (terminate)
			window_finish(h, true);
		drain_queue(h);
		if (terminate && write(ht->ack[1], "A", 1) != 1)
			log_msg(LOG_DEBUG, "exit path: could not answer");
		pthread_mutex_lock(&ht->lock);
		stop = stop || ht->stop;
		pthread_mutex_unlock(&ht->lock);
	}
	return NULL;
}

/* Makes both ends of a new pipe close-on-exec and non-blocking. */
static int make_pipe(int fds[2])
{
	return pipe2(fds, O_CLOEXEC | O_NONBLOCK);
}

int hostthread_init(struct host *h, struct err *e)
{
	struct host_thread *ht = &h->ht;

	pthread_mutex_init(&ht->lock, NULL);
	pthread_cond_init(&ht->idle, NULL);
	if (make_pipe(ht->wake) != 0)
		return err_errno(e, errno, "cannot create the host thread's pipe");
	if (make_pipe(ht->ack) != 0) {
		close(ht->wake[0]);
		close(ht->wake[1]);
		return err_errno(e, errno, "cannot create the host thread's pipe");
	}
	return 0;
}

int hostthread_start(struct host *h, struct err *e)
{
	struct host_thread *ht = &h->ht;
	sigset_t all, old;
	int rc;

	if (atomic_load(&ht->started))
		return 0;
	/* The thread starts with every signal blocked, so SIGTERM and the
	 * sampling signals always land on application threads. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&ht->thread, NULL, host_main, h);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0)
		return err_errno(e, rc, "cannot create the host thread");
	pthread_setname_np(ht->thread, "profhost");
	atomic_store(&ht->started, 1);
	return 0;
}

void hostthread_submit(struct host *h, struct host_job *job)
{
	struct host_thread *ht = &h->ht;

	job->next = NULL;
	pthread_mutex_lock(&ht->lock);
	if (ht->tail)
		ht->tail->next = job;
	else
		ht->head = job;
	ht->tail = job;
	pthread_mutex_unlock(&ht->lock);
	if (write(ht->wake[1], "J", 1) != 1)
		log_msg(LOG_DEBUG, "host thread pipe full; it is awake anyway");
}

int hostthread_stop(struct host *h, int timeout_ms)
{
	struct host_thread *ht = &h->ht;
	struct timespec deadline, said;
	int rc = 0;
	bool told = false;

	if (!atomic_load(&ht->started))
		return 0;
	clock_gettime(CLOCK_REALTIME, &deadline);
	said = deadline;
	said.tv_sec += 2;
	deadline.tv_sec += timeout_ms / 1000;
	deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
	if (deadline.tv_nsec >= 1000000000) {
		deadline.tv_sec++;
		deadline.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&ht->lock);
	ht->stop = true;
	if (write(ht->wake[1], "S", 1) != 1)
		log_msg(LOG_DEBUG, "host thread pipe full; it is awake anyway");
	while (ht->head || ht->busy) {
		const struct timespec *until = told ? &deadline : &said;
		if (pthread_cond_timedwait(&ht->idle, &ht->lock, until) == ETIMEDOUT) {
			if (!told) {
				told = true;
				log_msg(LOG_INFO, "still writing the last window before exit...");
				continue;
			}
			rc = -1;
			break;
		}
	}
	pthread_mutex_unlock(&ht->lock);
	if (rc == 0)
		pthread_join(ht->thread, NULL);
	else
		log_msg(LOG_WARN, "gave up waiting for the last window after %d s; "
			"its files may be missing", timeout_ms / 1000);
	atomic_store(&ht->started, 0);
	return rc;
}

bool hostthread_is_self(struct host *h)
{
	return atomic_load(&h->ht.tid) == (int32_t)syscall(SYS_gettid);
}

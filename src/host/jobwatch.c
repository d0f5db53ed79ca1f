/*
 * jobwatch — job-wide requests through the run directory (docs/jobs.md).
 *
 * A job's ranks share one run directory, on a shared file system when
 * they run on several hosts. `prof capture RUN` (or a rank's
 * prof.capture_now{ job = true }) writes a request into <run>/job/; every
 * process of the run looks at that folder on a thread of its own
 * (profhost-job, every signal blocked): one fstatat() of the folder every
 * prof.job{ poll_ms } (1000 by default), nothing more while it is
 * unchanged; no inotify, which shared file systems do not deliver. When
 * the folder changed, it reads the files it has not handled yet (only
 * this user's, no links, bounded: jobfile.h) and answers them. The step
 * path is not touched: a request becomes a capture window through
 * window_capture_at() (the window lock, as prof.capture_now).
 *
 * A capture request names its steps and, unless the requester named it,
 * leaves the first step to the first rank that reads it: that rank takes
 * its own step plus as many steps as the lead (2 x poll_ms + 1 s, or the
 * request's lead_ms) lasts at its median step, and writes that down as
 * <request>.first (linked into place: the first writer wins, the others
 * read it). Every rank reads the request within one poll interval of the
 * first, so every rank whose steps are within the lead of that rank's
 * sees it before the first step begins; one that sees it late starts at
 * its next boundary and its window's reason says how late.
 *
 * With prof.recorder{ job = true } the thread also writes what this rank
 * publishes (its dumps, its hang reports: jobwatch_publish queues them,
 * the thread writes dump-<minute>-steps<a>-<b> / hang-<minute>-step<n>)
 * and answers the others': the same steps from this rank's recorder
 * (window_dump_job; a rank that has not reached them is asked again every
 * half step, at most JW_ANSWER_WAIT_NS), or a hang report now
 * (watchdog_ask). A process that never ended a step answers nothing.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../util/hash.h"
#include "../util/log.h"
#include "../util/wakeword.h"
#include "host.h"

#define JW_SEEN_MAX 65536          /* names handled, at most */
#define JW_RECHECK_NS 2000000000LL /* a change this recent (by its time
				      stamp) is read once more at the next
				      look: the stamp may not show a second
				      change within the same tick */
#define JW_LEAD_EXTRA_MS 1000      /* the default lead: 2 x poll_ms + this */
#define JW_NAME_SLACK_NS 60000000000LL /* names carry their minute */
#define JW_ANSWER_WAIT_NS 30000000000LL /* how long a rank behind is waited
					   for before a job dump takes what
					   it holds */

/* Unix time now, in ns. */
static int64_t real_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Adds `hash` (nonzero) to the set of names handled. Returns 1 when it
 * was there, 0 when added, -1 when the set is full or memory ran out.
 * The watcher's thread. */
static int seen_add(struct jobwatch *jw, uint64_t hash)
{
	size_t i, mask;

	if (!hash)
		hash = 1;
	if (2 * (jw->nseen + 1) > jw->cap_seen) {
		size_t cap = jw->cap_seen ? 2 * jw->cap_seen : 256, k;
		uint64_t *grown;

		if (jw->nseen >= JW_SEEN_MAX)
			return -1;
		grown = calloc(cap, sizeof *grown);
		if (!grown)
			return -1;
		for (k = 0; k < jw->cap_seen; k++) {
			uint64_t v = jw->seen[k];

			if (!v)
				continue;
			for (i = v & (cap - 1); grown[i]; i = (i + 1) & (cap - 1))
				;
			grown[i] = v;
		}
		free(jw->seen);
		jw->seen = grown;
		jw->cap_seen = cap;
	}
	mask = jw->cap_seen - 1;
	for (i = hash & mask; jw->seen[i]; i = (i + 1) & mask)
		if (jw->seen[i] == hash)
			return 1;
	jw->seen[i] = hash;
	jw->nseen++;
	return 0;
}

/* The run directory watched now, into out[size]. */
static void watched_dir(struct jobwatch *jw, char *out, size_t size)
{
	pthread_mutex_lock(&jw->lock);
	snprintf(out, size, "%s", jw->dir);
	pthread_mutex_unlock(&jw->lock);
}

/* The first step of capture request `name` (its file *f): the one it
 * names, else the one <name>.first holds, else this rank decides it and
 * writes it there (the first writer wins). Returns 0 with *first; 1 when
 * nobody decided yet and this process cannot (no step has ended in it);
 * -1 with *e. The watcher's thread. */
static int capture_first(struct host *h, int dfd, const char *name,
			 const struct jobfile *f, uint64_t *first, struct err *e)
{
	char fname[300], buf[JOBFILE_MAX + 1], text[JOBFILE_MAX + 1];
	struct jobfile d = { 0 };
	uint64_t step, margin;
	int64_t step_ns, lead_ns;
	int tries, rc;

	if (f->first) {
		*first = f->first;
		return 0;
	}
	snprintf(fname, sizeof fname, "%s.first", name);
	for (tries = 0; tries < 2; tries++) {
		rc = jobfile_read(dfd, fname, &d, buf, sizeof buf, e);
		if (rc < 0)
			return err_set(e, "its first step, '%s': %.200s", fname, e->msg);
		if (rc == 0) {
			if (d.kind != JOBFILE_FIRST || d.first == 0)
				return err_set(e, "its first step, '%s', is not one", fname);
			*first = d.first;
			log_msg(LOG_DEBUG, "job capture %s: from step %llu, as rank %d (%s) "
				"decided at its step %llu", name + 8, (unsigned long long)d.first,
				d.rank, d.host, (unsigned long long)d.step);
			return 0;
		}
		/* nobody decided yet: this rank does, if it steps */
		if (!window_job_position(h, &step, &step_ns))
			return 1;
		lead_ns = f->lead_ms ? (int64_t)f->lead_ms * 1000000LL
				     : ((int64_t)h->cfg->job.poll_ms * 2 + JW_LEAD_EXTRA_MS) *
					       1000000LL;
		margin = (uint64_t)((lead_ns + step_ns - 1) / step_ns);
		memset(&d, 0, sizeof d);
		d.kind = JOBFILE_FIRST;
		d.first = step + 1 + margin;
		d.rank = h->env.rank;
		d.pid = (int)h->pid;
		d.step = step;
		snprintf(d.host, sizeof d.host, "%.127s", h->hostname);
		if (jobfile_format(&d, text, sizeof text) < 0)
			d.host[0] = '\0'; /* a host name that cannot be a line */
		if (jobfile_format(&d, text, sizeof text) < 0)
			return err_set(e, "cannot write its first step");
		rc = jobfile_write_new(dfd, fname, text, e);
		if (rc < 0)
			return -1;
		if (rc == 0) {
			*first = d.first;
			log_msg(LOG_DEBUG, "job capture %s: this rank decided its first step: "
				"%llu (now at step %llu, %.3f ms a step)", name + 8,
				(unsigned long long)d.first, (unsigned long long)step,
				(double)step_ns / 1e6);
			return 0;
		}
		/* another rank wrote it first: read it */
	}
	return err_set(e, "its first step, '%s', cannot be read", fname);
}

/* Answers capture request `name`: a window of its steps from its first
 * step on. The watcher's thread. */
static void answer_capture(struct host *h, int dfd, const char *dir, const char *name,
			   const struct jobfile *f)
{
	struct jobwatch *jw = &h->jw;
	char reason[HOST_REASON_MAX];
	uint64_t first = 0;
	struct err e;
	int rc = capture_first(h, dfd, name, f, &first, &e);

	if (rc == 1) {
		/* looked at again when the folder changes */
		if (jw->npending < JW_PENDING && strlen(name) < sizeof jw->pending[0].name) {
			snprintf(jw->pending[jw->npending].name, sizeof jw->pending[0].name,
				 "%s", name);
			jw->pending[jw->npending++].f = *f;
			log_msg(LOG_DEBUG, "job capture %s: waiting for a rank that steps to "
				"decide its first step", name + 8);
		} else {
			log_msg(LOG_WARN, "job capture %s is not recorded here: no step has "
				"ended in this process, and %d other requests wait for their "
				"first step", name + 8, JW_PENDING);
		}
		return;
	}
	if (rc != 0) {
		log_msg(LOG_WARN, "job capture '%s/%s/%s' is not recorded here: %s", dir,
			JOBFILE_DIR, name, e.msg);
		return;
	}
	snprintf(reason, sizeof reason, HOST_JOB_CAPTURE "%s", name + 8);
	if (window_capture_at(h, f->steps, first, reason, &e) != 0) {
		log_msg(LOG_WARN, "job capture %s (steps %llu-%llu) is not recorded here: %s",
			name + 8, (unsigned long long)first,
			(unsigned long long)(first + f->steps - 1), e.msg);
		return;
	}
	log_msg(LOG_DEBUG, "job capture %s: steps %llu-%llu, asked by %s", name + 8,
		(unsigned long long)first, (unsigned long long)(first + f->steps - 1),
		f->from[0] ? f->from : "(not said)");
}

/* Answers rank f->rank's dump of steps f->first..f->last from this rank's
 * recorder (window_dump_job); `force` once it waited long enough for this
 * rank to reach them. Returns true when done with it (written, or said
 * why not), false to be asked again later. The watcher's thread. */
static bool answer_dump(struct host *h, const struct jobfile *f, bool force)
{
	struct window_job_dump req = { f->first, f->last, f->rank, NULL, force };
	char reason[HOST_REASON_MAX];
	struct err e;
	int rc;

	snprintf(reason, sizeof reason, "job dump: rank %d's of steps %llu-%llu (%.60s)",
		 f->rank, (unsigned long long)f->first, (unsigned long long)f->last,
		 f->reason[0] ? f->reason : "dump");
	req.reason = reason;
	rc = window_dump_job(h, &req, &e);
	if (rc == 1)
		return false;
	if (rc == 2)
		log_msg(LOG_DEBUG, "job dump of rank %d (steps %llu-%llu): this rank's own "
			"dump holds them", f->rank, (unsigned long long)f->first,
			(unsigned long long)f->last);
	else if (rc < 0)
		log_msg(LOG_WARN, "job dump of rank %d (steps %llu-%llu, %s): not written "
			"here: %s", f->rank, (unsigned long long)f->first,
			(unsigned long long)f->last, f->reason[0] ? f->reason : "dump", e.msg);
	return true;
}

/* Asks again the job dumps this rank had not reached; past their time,
 * what is held is written. The watcher's thread. */
static void answer_waiting(struct host *h)
{
	struct jobwatch *jw = &h->jw;
	unsigned i, n = jw->nanswers, kept = 0;
	int64_t now = real_ns();

	for (i = 0; i < n; i++) {
		if (answer_dump(h, &jw->answers[i].f, now >= jw->answer_until[i]))
			continue;
		jw->answers[kept] = jw->answers[i];
		jw->answer_until[kept++] = jw->answer_until[i];
	}
	jw->nanswers = kept;
}

/* Another rank's dump or hang (prof.recorder{ job = true }): this rank
 * answers with the same steps, or a hang report of its own. The watcher's
 * thread. */
static void answer_publication(struct host *h, const struct jobfile *f)
{
	struct jobwatch *jw = &h->jw;
	const struct policy_config *c = h->cfg;
	uint64_t step;
	int64_t step_ns;
	struct err e;

	if (f->rank == h->env.rank && f->pid == (int)h->pid &&
	    strncmp(f->host, h->hostname, sizeof f->host - 1) == 0)
		return; /* its own */
	if (!c->recorder.enabled || !c->recorder.job) {
		log_msg(LOG_DEBUG, "rank %d's %s is not answered here: prof.recorder{ job "
			"= true } is not set", f->rank, f->kind == JOBFILE_HANG ? "hang" : "dump");
		return;
	}
	if (!window_job_position(h, &step, &step_ns)) {
		/* a launcher, a shell: no step of the job's runs here */
		log_msg(LOG_DEBUG, "rank %d's %s is not answered here: no step has ended in "
			"this process", f->rank, f->kind == JOBFILE_HANG ? "hang" : "dump");
		return;
	}
	if (f->kind == JOBFILE_HANG) {
		if (watchdog_ask(h, f->rank, f->step, f->host, &e) != 0)
			log_msg(LOG_WARN, "rank %d's hang (step %llu on %s): no hang report "
				"here: %s", f->rank, (unsigned long long)f->step, f->host, e.msg);
		return;
	}
	if (answer_dump(h, f, false))
		return;
	if (jw->nanswers >= JW_PENDING) {
		answer_dump(h, f, true);
		return;
	}
	/* this rank is behind: asked again at each look, at most so long */
	jw->answers[jw->nanswers].f = *f;
	jw->answer_until[jw->nanswers++] = real_ns() + JW_ANSWER_WAIT_NS;
	log_msg(LOG_DEBUG, "job dump of rank %d (steps %llu-%llu): waiting for this rank "
		"to reach step %llu", f->rank, (unsigned long long)f->first,
		(unsigned long long)f->last, (unsigned long long)f->last);
}

/* Handles one new file of the job folder. The watcher's thread. */
static void handle(struct host *h, int dfd, const char *dir, const char *name,
		   enum jobfile_kind kind)
{
	char buf[JOBFILE_MAX + 1];
	struct jobfile f;
	struct err e;
	int rc = jobfile_read(dfd, name, &f, buf, sizeof buf, &e);

	if (rc == 1)
		return; /* gone meanwhile */
	if (rc < 0) {
		log_msg(LOG_WARN, "job %s '%s/%s/%s' ignored: %s; only your own "
			"requests, written by prof capture, are honoured",
			kind == JOBFILE_CAPTURE ? "request" : "publication", dir, JOBFILE_DIR,
			name, e.msg);
		return;
	}
	if (f.kind != kind) {
		log_msg(LOG_WARN, "job request '%s/%s/%s' ignored: its kind does not "
			"match its name", dir, JOBFILE_DIR, name);
		return;
	}
	if (f.created_ns < h->start_ns) {
		log_msg(LOG_DEBUG, "job request %s: made before this process started", name);
		return;
	}
	if (kind == JOBFILE_CAPTURE)
		answer_capture(h, dfd, dir, name, &f);
	else
		answer_publication(h, &f);
}

/* Reads the job folder's files not handled yet. The watcher's thread. */
static void scan(struct host *h, const char *dir)
{
	struct jobwatch *jw = &h->jw;
	struct dirent *de;
	struct err e;
	DIR *d;
	int dfd, fd, rc;
	unsigned i, pending;

	rc = jobfile_open_dir(dir, false, &dfd, &e);
	if (rc != 0) {
		if (rc < 0 && !jw->said_dir) {
			jw->said_dir = true;
			log_msg(LOG_WARN, "job requests in '%s/%s' are ignored: %s", dir,
				JOBFILE_DIR, e.msg);
		}
		return;
	}
	/* the requests waiting for a first step: it may be here now */
	pending = jw->npending;
	jw->npending = 0;
	for (i = 0; i < pending; i++) {
		struct jw_pending p = jw->pending[i];

		answer_capture(h, dfd, dir, p.name, &p.f);
	}
	fd = fcntl(dfd, F_DUPFD_CLOEXEC, 3);
	d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		if (fd >= 0)
			close(fd);
		close(dfd);
		return;
	}
	while ((de = readdir(d)) != NULL) {
		int64_t ns;
		enum jobfile_kind kind = jobfile_name_kind(de->d_name, &ns);

		if (kind == JOBFILE_NONE || kind == JOBFILE_FIRST)
			continue;
		/* made (by its name) before this process started: not ours */
		if (ns + JW_NAME_SLACK_NS < h->start_ns)
			continue;
		rc = seen_add(jw, hash_fnv64_str(HASH_FNV64_SEED, de->d_name));
		if (rc == 1)
			continue;
		if (rc < 0) {
			if (!jw->said_full)
				log_msg(LOG_WARN, "job requests: more than %d files in '%s/%s'; "
					"the newer ones are ignored (remove old ones)",
					JW_SEEN_MAX, dir, JOBFILE_DIR);
			jw->said_full = true;
			break;
		}
		handle(h, dfd, dir, de->d_name, kind);
	}
	closedir(d);
	close(dfd);
}

/* One look at the folder: a stat, and a scan when it changed. The
 * watcher's thread. */
static void poll_once(struct host *h)
{
	struct jobwatch *jw = &h->jw;
	char dir[PATH_MAX], path[PATH_MAX + 8];
	struct stat st;
	bool same;

	if (jw->nanswers)
		answer_waiting(h);
	watched_dir(jw, dir, sizeof dir);
	snprintf(path, sizeof path, "%s/%s", dir, JOBFILE_DIR);
	if (fstatat(AT_FDCWD, path, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode)) {
		jw->have_last = false;
		return;
	}
	same = jw->have_last && st.st_dev == jw->last_dev && st.st_ino == jw->last_ino &&
	       st.st_mtim.tv_sec == jw->last_mtim.tv_sec &&
	       st.st_mtim.tv_nsec == jw->last_mtim.tv_nsec &&
	       st.st_ctim.tv_sec == jw->last_ctim.tv_sec &&
	       st.st_ctim.tv_nsec == jw->last_ctim.tv_nsec;
	if (same && !jw->recheck)
		return;
	/* a change read again once at the next look when its time stamp is
	 * recent (or ahead of this host's clock: another host's) */
	jw->recheck = !same && real_ns() - ((int64_t)st.st_mtim.tv_sec * 1000000000LL +
					    st.st_mtim.tv_nsec) < JW_RECHECK_NS;
	jw->have_last = true;
	jw->last_dev = st.st_dev;
	jw->last_ino = st.st_ino;
	jw->last_mtim = st.st_mtim;
	jw->last_ctim = st.st_ctim;
	scan(h, dir);
}

/* The name file *f is written as: a capture request's own, a dump's or a
 * hang's by its steps and minute (ranks publishing the same steps in the
 * same minute meet on one name: the first one's stays). */
static void file_name(const struct host *h, const struct jobfile *f, char *name, size_t size)
{
	long long min = (long long)(f->created_ns / 60000000000LL);
	unsigned rnd;

	switch (f->kind) {
	case JOBFILE_DUMP:
		snprintf(name, size, "dump-%lld-steps%llu-%llu", min,
			 (unsigned long long)f->first, (unsigned long long)f->last);
		break;
	case JOBFILE_HANG:
		snprintf(name, size, "hang-%lld-step%llu", min, (unsigned long long)f->step);
		break;
	default:
		rnd = (unsigned)(f->created_ns ^ (f->created_ns >> 29) ^ (int64_t)h->pid << 7);
		snprintf(name, size, "capture-%lld-%d-%04x",
			 (long long)(f->created_ns / 1000000), (int)h->pid, rnd & 0xffff);
	}
}

/* Writes file *f of the queue into the job folder (made as needed), and
 * marks its name handled (this process does not answer itself). Any
 * thread, one at a time per file (the queue's pop decides). */
static void write_one(struct host *h, const struct jobfile *f)
{
	char dir[PATH_MAX], name[128], text[JOBFILE_MAX + 1];
	const char *what = f->kind == JOBFILE_CAPTURE ? "job request" : "job publication";
	struct err e;
	int dfd, rc;

	watched_dir(&h->jw, dir, sizeof dir);
	if (jobfile_format(f, text, sizeof text) < 0) {
		log_msg(LOG_WARN, "%s not written: its text cannot be a file", what);
		return;
	}
	if (jobfile_open_dir(dir, true, &dfd, &e) != 0) {
		log_msg(LOG_WARN, "%s not written into '%s/%s': %s", what, dir, JOBFILE_DIR,
			e.msg);
		return;
	}
	file_name(h, f, name, sizeof name);
	rc = jobfile_write_new(dfd, name, text, &e);
	close(dfd);
	if (rc < 0)
		log_msg(LOG_WARN, "%s '%s/%s/%s' not written: %s", what, dir, JOBFILE_DIR,
			name, e.msg);
	else if (rc > 0)
		log_msg(LOG_DEBUG, "%s %s: another rank published it first", what, name);
	else
		log_msg(LOG_DEBUG, "%s %s written", what, name);
}

/* Writes what the queue holds. Any thread (each file is popped once). */
static void write_queued(struct host *h)
{
	struct jobwatch *jw = &h->jw;
	struct jobfile f;

	for (;;) {
		pthread_mutex_lock(&jw->lock);
		if (!jw->nqueue) {
			pthread_mutex_unlock(&jw->lock);
			return;
		}
		f = jw->queue[0];
		jw->nqueue--;
		memmove(&jw->queue[0], &jw->queue[1], jw->nqueue * sizeof f);
		pthread_mutex_unlock(&jw->lock);
		write_one(h, &f);
	}
}

/* The watcher's thread: writes what is queued and looks at the folder,
 * then sleeps poll_ms or until woken. */
static void *jw_main(void *arg)
{
	struct host *h = arg;
	struct jobwatch *jw = &h->jw;
	int64_t wait = (int64_t)h->cfg->job.poll_ms * 1000000LL;
	uint32_t bits = 0;

	atomic_store(&jw->tid, (int32_t)syscall(SYS_gettid));
	while (!(bits & JW_WAKE_STOP)) {
		uint64_t step;
		int64_t step_ns, next = wait;

		write_queued(h);
		if (!atomic_load_explicit(&h->disabled, memory_order_relaxed))
			poll_once(h);
		/* a job dump this rank has not reached: asked again every half
		 * step, so the steps it holds are those the others wrote */
		if (jw->nanswers) {
			window_job_position(h, &step, &step_ns);
			if (step_ns / 2 < next)
				next = step_ns / 2;
		}
		bits = wakeword_take(&jw->wake, next);
	}
	write_queued(h);
	return NULL;
}

void jobwatch_init(struct host *h)
{
	pthread_mutex_init(&h->jw.lock, NULL);
	snprintf(h->jw.dir, sizeof h->jw.dir, "%s", h->run_dir);
}

int jobwatch_start(struct host *h, struct err *e)
{
	struct jobwatch *jw = &h->jw;
	sigset_t all, old;
	int rc;

	if (!h->cfg->job.poll_ms || h->forked_child || atomic_load(&jw->started))
		return 0;
	jw->queue = calloc(JW_QUEUE, sizeof *jw->queue);
	if (!jw->queue)
		return err_set(e, "out of memory: job requests (prof capture) are not "
			       "watched for in this process");
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&jw->thread, NULL, jw_main, h);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0)
		return err_errno(e, rc, "job requests (prof capture) are not watched for in "
				 "this process: cannot create its thread");
	pthread_setname_np(jw->thread, "profhost-job");
	atomic_store(&jw->started, 1);
	return 0;
}

void jobwatch_stop(struct host *h)
{
	struct jobwatch *jw = &h->jw;

	if (!atomic_load(&jw->started) ||
	    atomic_load(&jw->tid) == (int32_t)syscall(SYS_gettid))
		return;
	wakeword_post(&jw->wake, JW_WAKE_STOP);
	pthread_join(jw->thread, NULL);
	atomic_store(&jw->started, 0);
	free(jw->seen);
	jw->seen = NULL;
	jw->nseen = jw->cap_seen = 0;
}

void jobwatch_run_moved(struct host *h, const char *dir)
{
	struct jobwatch *jw = &h->jw;

	pthread_mutex_lock(&jw->lock);
	snprintf(jw->dir, sizeof jw->dir, "%s", dir);
	pthread_mutex_unlock(&jw->lock);
}

/* Queues *f for the watcher's thread. Returns 0, or -1 with *e. */
static int enqueue(struct host *h, const struct jobfile *f, struct err *e)
{
	struct jobwatch *jw = &h->jw;
	int rc = 0;

	pthread_mutex_lock(&jw->lock);
	if (!jw->queue)
		rc = err_set(e, "this process does not watch for job requests "
			     "(prof.job{ poll_ms = 0 }, or a child forked from one)");
	else if (jw->nqueue < JW_QUEUE)
		jw->queue[jw->nqueue++] = *f;
	else
		rc = err_set(e, "%d job requests are still being written", JW_QUEUE);
	pthread_mutex_unlock(&jw->lock);
	if (rc == 0)
		wakeword_post(&jw->wake, JW_WAKE_WRITE);
	return rc;
}

void jobwatch_publish(struct host *h, const struct jobfile *pub)
{
	struct jobfile f = *pub;
	struct err e;

	f.created_ns = real_ns();
	f.rank = h->env.rank;
	f.pid = (int)h->pid;
	snprintf(f.host, sizeof f.host, "%.127s", h->hostname);
	for (char *p = f.reason; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?'; /* one line */
	if (enqueue(h, &f, &e) != 0)
		log_msg(LOG_WARN, "the job's other ranks are not told of this rank's %s: %s",
			f.kind == JOBFILE_HANG ? "hang" : "dump", e.msg);
}

void jobwatch_flush(struct host *h)
{
	if (h->jw.queue)
		write_queued(h);
}

int jobwatch_request(struct host *h, unsigned steps, const char *from, struct err *e)
{
	struct jobwatch *jw = &h->jw;
	struct jobfile f = { 0 };

	if (!atomic_load(&jw->started))
		return err_set(e, "this process does not watch for job requests "
			       "(prof.job{ poll_ms = 0 }, or a child forked from one)");
	if (steps < 1 || steps > JOBFILE_STEPS_MAX)
		return err_set(e, "'steps' must be from 1 to %u", JOBFILE_STEPS_MAX);
	f.kind = JOBFILE_CAPTURE;
	f.created_ns = real_ns();
	f.steps = steps;
	snprintf(f.from, sizeof f.from, "%s", from ? from : "");
	for (char *p = f.from; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?'; /* one line */
	return enqueue(h, &f, e);
}

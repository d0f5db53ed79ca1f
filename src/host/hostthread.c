/*
 * hostthread — the host's own thread and its job queue: it runs the jobs
 * it is handed (closed windows and recorder dumps) through the
 * hostthread_ops set at init (writer.c's: files, reports, hooks), so a
 * step boundary never waits for I/O. It names no other file of the host
 * but salvage.c: what it calls is in its ops table.
 *
 * It sleeps on a wake word (src/util/wakeword.h, a futex: no descriptor
 * a program could close or reuse). Application threads queue jobs under a
 * mutex the host thread holds only to pop; signal handlers post
 * HOST_WAKE_TERM and wait for the answer on a second word, which is all
 * they can safely do.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../common/log.h"
#include "../util/wakeword.h"
#include "host.h"

/* Windows waiting for the host thread, beyond the one it is writing. Past
 * EVBUF_SLOTS closed windows the event pools are all held, so a window
 * queued further back recorded nothing but its steps: such a window is
 * skipped (its sources still collect it, nothing is written) and counted
 * in the next window written (trace counters `windows_skipped`). This
 * bounds both the queue's memory and how long exit waits. */
#define HOST_QUEUE_MAX EVBUF_SLOTS

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
			ht->queued--;
			ht->busy = true;
		} else {
			ht->busy = false;
			pthread_cond_broadcast(&ht->idle);
		}
		pthread_mutex_unlock(&ht->lock);
		if (!job)
			return;
		if (job->skip)
			h->ht.ops->skip(h, job);
		else
			h->ht.ops->run(h, job);
		free(job->steps);
		free(job);
	}
}

static void *host_main(void *arg)
{
	struct host *h = arg;
	struct host_thread *ht = &h->ht;
	bool stop = false;

	atomic_store(&ht->tid, (int32_t)syscall(SYS_gettid));
	while (!stop) {
		uint32_t bits = wakeword_take(&ht->wake, -1);

		if (bits & HOST_WAKE_TERM)
			ht->ops->term(h); /* the open window closes */
		if (bits & HOST_WAKE_FILL)
			ht->ops->fill(h, atomic_load(&ht->fill_gen));
		if (bits & HOST_WAKE_ROTATED)
			ht->ops->rotated(h);
		drain_queue(h);
		if (bits & HOST_WAKE_TERM) {
			ht->ops->term_done(h); /* a crash's publication, for the job */
			salvage_done(h); /* the dying process's window is written */
			wakeword_post(&ht->ack, 1);
		}
		pthread_mutex_lock(&ht->lock);
		stop = (bits & HOST_WAKE_STOP) || ht->stop;
		pthread_mutex_unlock(&ht->lock);
	}
	return NULL;
}

void hostthread_init(struct host *h, const struct hostthread_ops *ops)
{
	struct host_thread *ht = &h->ht;

	ht->ops = ops;
	pthread_mutex_init(&ht->lock, NULL);
	pthread_cond_init(&ht->idle, NULL);
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

size_t hostthread_full(struct host *h)
{
	struct host_thread *ht = &h->ht;
	size_t n;

	pthread_mutex_lock(&ht->lock);
	n = ht->queued >= HOST_QUEUE_MAX ? ht->queued : 0;
	pthread_mutex_unlock(&ht->lock);
	return n;
}

size_t hostthread_backlog(struct host *h)
{
	struct host_thread *ht = &h->ht;
	size_t n;

	pthread_mutex_lock(&ht->lock);
	n = ht->queued + (ht->busy ? 1 : 0);
	pthread_mutex_unlock(&ht->lock);
	return n;
}

void hostthread_submit(struct host *h, struct host_job *job)
{
	struct host_thread *ht = &h->ht;

	job->next = NULL;
	pthread_mutex_lock(&ht->lock);
	if (ht->queued >= HOST_QUEUE_MAX) {
		if (job->dump) {
			/* Rare: dump_check refuses a dump while the queue
			 * is full; one that raced a window's close lands
			 * here. Said each time: prof.dump said it would be
			 * written. */
			log_msg(LOG_WARN, "recorder dump %u is not written: the host "
				"was still writing %d others (dump less often)",
				job->window, HOST_QUEUE_MAX);
		} else {
			ht->skipped++;
			if (ht->skipped_total++ == 0)
				log_msg(LOG_WARN, "windows close faster than they are "
					"written: skipping window %u and any other that "
					"finds %d waiting (space the windows out: "
					"prof.schedule{wait = ...})", job->window,
					HOST_QUEUE_MAX);
		}
		if (ht->tail && ht->tail->skip && !ht->tail->dump && !job->dump) {
			/* Merged into the skipped window queued last: its
			 * sources collect both at once (a time range covering
			 * both); its events go back now. */
			ht->tail->last = job->last;
			ht->tail->end_ts = job->end_ts;
			pthread_mutex_unlock(&ht->lock);
			h->shim->evbuf_release(job->gen);
			free(job->steps);
			free(job);
			return;
		}
		job->skip = true; /* its steps go now */
		free(job->steps);
		job->steps = NULL;
		job->nsteps = 0;
	} else {
		job->windows_skipped = ht->skipped; /* said in its summary */
		ht->skipped = 0;
	}
	ht->queued++;
	if (ht->tail)
		ht->tail->next = job;
	else
		ht->head = job;
	ht->tail = job;
	pthread_mutex_unlock(&ht->lock);
	wakeword_post(&ht->wake, HOST_WAKE_JOB);
}

int hostthread_stop(struct host *h, int timeout_ms)
{
	struct host_thread *ht = &h->ht;
	struct timespec deadline, said;
	int rc = 0;
	bool told = false;

	if (!atomic_load(&ht->started))
		return 0;
	if (hostthread_is_self(h)) {
		/* exit() on the host thread (PROF_STRICT=1): the window it was
		 * writing is abandoned; the ones queued are written here. */
		drain_queue(h);
		return 0;
	}
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
	wakeword_post(&ht->wake, HOST_WAKE_STOP);
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
	if (ht->skipped)
		log_msg(LOG_WARN, "the last %llu windows were not written: the host was "
			"still writing others (space the windows out: "
			"prof.schedule{wait = ...})", (unsigned long long)ht->skipped);
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

/* privfd — see privfd.h. */
#include "privfd.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../common/log.h"
#include "wakeword.h"

#ifndef CLOSE_RANGE_UNSHARE
#define CLOSE_RANGE_UNSHARE (1U << 1) /* linux/close_range.h, 5.9 */
#endif

enum {
	PF_NONE,      /* no reader asked for yet in this process */
	PF_PRIVATE,   /* requests run on the reader, in its own table */
	PF_CALLER     /* no reader with a table of its own: on the caller */
};

static struct {
	pthread_mutex_t lock;        /* one request at a time; guards all below */
	pid_t pid;                   /* the process `state` is about */
	int state;                   /* PF_* */
	void (*fn)(void *);          /* the request: set before `req` is */
	void *arg;                   /* posted, read by the reader after */
	_Atomic uint32_t req;        /* wake word: a request for the reader */
	_Atomic uint32_t done;       /* wake word: the reader is ready, or done */
	_Atomic int start_err;       /* why the reader has no table (errno) */
} pf = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* After unshare(CLONE_FILES): closes every descriptor of this thread's
 * (new) table, all copies of the program's and profhost's, listed in
 * /proc/thread-self/fd. Returns 0, or -1 with errno (the copies are then
 * dropped when the thread exits). Reader thread. */
static int close_copies(void)
{
	DIR *d = opendir("/proc/thread-self/fd");
	struct dirent *de;
	int self;

	if (!d)
		return -1;
	self = dirfd(d);
	/* A /proc fd folder lists by number: closing one already listed
	 * does not move the listing. */
	while ((de = readdir(d)) != NULL) {
		char *end;
		long fd = strtol(de->d_name, &end, 10);

		if (de->d_name[0] >= '0' && de->d_name[0] <= '9' && !*end && fd != self)
			close((int)fd);
	}
	closedir(d);
	return 0;
}

/* Makes the calling thread's descriptor table its own and empty. Returns
 * 0, or -1 with errno. Reader thread, before anything else. */
static int own_table(void)
{
#ifdef SYS_close_range
	/* Nothing is copied: every number is in the range closed. */
	if (syscall(SYS_close_range, 0U, ~0U, CLOSE_RANGE_UNSHARE) == 0)
		return 0;
#endif
	/* Before 5.9: a copy of the whole table, its descriptors closed at
	 * once (a program closing one of its pipes meanwhile sees the end a
	 * moment later). */
	if (unshare(CLONE_FILES) != 0)
		return -1;
	return close_copies();
}

/* The reader: makes its table its own, says whether it could, then runs
 * the requests, each as it is posted; exits when its table is shared.
 * Every signal blocked from birth (a handler run here would see this
 * table, not the program's). */
static void *reader_main(void *arg)
{
	(void)arg;
	prctl(PR_SET_NAME, "profhost-fd", 0, 0, 0);
	if (own_table() != 0) {
		atomic_store(&pf.start_err, errno ? errno : ENOSYS);
		wakeword_post(&pf.done, 1);
		return NULL;
	}
	atomic_store(&pf.start_err, 0);
	wakeword_post(&pf.done, 1);
	for (;;) {
		wakeword_take(&pf.req, -1);
		pf.fn(pf.arg);
		wakeword_post(&pf.done, 1);
	}
	return NULL;
}

/* Starts this process's reader and waits until it says whether its table
 * is its own; sets pf.state. pf.lock held. */
static void start_reader(void)
{
	sigset_t all, old;
	pthread_attr_t at;
	pthread_t t;
	int rc;

	pf.pid = getpid();
	pf.state = PF_CALLER;
	atomic_store(&pf.req, 0);
	atomic_store(&pf.done, 0);
	rc = pthread_attr_init(&at);
	if (rc == 0) {
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		rc = pthread_create(&t, &at, reader_main, NULL);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		pthread_attr_destroy(&at);
	}
	if (rc != 0) {
		log_msg(LOG_DEBUG, "cannot start the thread that reads /proc apart "
			"from the program's descriptors (%s): read on the calling "
			"thread", strerror(rc));
		return;
	}
	wakeword_take(&pf.done, -1);
	rc = atomic_load(&pf.start_err);
	if (rc == 0) {
		pf.state = PF_PRIVATE;
		return;
	}
	log_msg(LOG_DEBUG, "no descriptor table of its own for the thread that "
		"reads /proc (%s): read on the calling thread", strerror(rc));
}

/* Starts the reader if this process has none yet. pf.lock held. */
static void ensure_reader(void)
{
	if (pf.state == PF_NONE || pf.pid != getpid())
		start_reader();
}

void privfd_run(void (*fn)(void *), void *arg)
{
	pthread_mutex_lock(&pf.lock);
	ensure_reader();
	if (pf.state != PF_PRIVATE) {
		fn(arg);
		pthread_mutex_unlock(&pf.lock);
		return;
	}
	pf.fn = fn;
	pf.arg = arg;
	wakeword_post(&pf.req, 1);
	wakeword_take(&pf.done, -1);
	pthread_mutex_unlock(&pf.lock);
}

bool privfd_private(void)
{
	bool yes;

	pthread_mutex_lock(&pf.lock);
	ensure_reader();
	yes = pf.state == PF_PRIVATE;
	pthread_mutex_unlock(&pf.lock);
	return yes;
}

void privfd_after_fork_child(void)
{
	pthread_mutex_init(&pf.lock, NULL);
	pf.state = PF_NONE;
	pf.pid = 0;
}

/* ------------------------------------------------------------ requests */

struct read_req {
	const char *path;
	char *buf;
	size_t size;
	ssize_t got;
	int err;
};

/* privfd_read's work. Reader thread. */
static void do_read(void *arg)
{
	struct read_req *r = arg;
	size_t n = 0;
	ssize_t k = 0;
	int fd = open(r->path, O_RDONLY | O_NOCTTY | O_CLOEXEC);

	r->buf[0] = '\0';
	if (fd < 0) {
		r->got = -1;
		r->err = errno;
		return;
	}
	while (n < r->size - 1) {
		k = read(fd, r->buf + n, r->size - 1 - n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		n += (size_t)k;
	}
	r->err = k < 0 ? errno : 0;
	close(fd);
	r->buf[n] = '\0';
	r->got = k < 0 && n == 0 ? -1 : (ssize_t)n;
}

ssize_t privfd_read(const char *path, char *buf, size_t size)
{
	struct read_req r = { path, buf, size, -1, 0 };

	privfd_run(do_read, &r);
	if (r.got < 0)
		errno = r.err;
	return r.got;
}

struct list_req {
	const char *path;
	int32_t **ids;
	size_t *n, *cap;
	int rc, err;
};

/* The entry's name as a positive decimal number that fits, or 0. */
static int32_t id_of(const char *name)
{
	int64_t v = 0;
	const char *p;

	for (p = name; *p; p++) {
		if (*p < '0' || *p > '9')
			return 0;
		v = v * 10 + (*p - '0');
		if (v > INT32_MAX)
			return 0;
	}
	return (int32_t)v;
}

/* privfd_list_ids's work. Reader thread. */
static void do_list(void *arg)
{
	struct list_req *r = arg;
	struct dirent *de;
	DIR *d = opendir(r->path);

	*r->n = 0;
	if (!d) {
		r->rc = -1;
		r->err = errno;
		return;
	}
	errno = 0;
	while ((de = readdir(d)) != NULL) {
		int32_t id = id_of(de->d_name);

		if (id <= 0)
			continue;
		if (*r->n == *r->cap) {
			size_t cap = *r->cap ? *r->cap * 2 : 64;
			int32_t *p = realloc(*r->ids, cap * sizeof *p);

			if (!p) {
				errno = ENOMEM;
				break;
			}
			*r->ids = p;
			*r->cap = cap;
		}
		(*r->ids)[(*r->n)++] = id;
		errno = 0;
	}
	r->err = errno;
	r->rc = r->err ? -1 : 0;
	if (r->rc != 0)
		*r->n = 0;
	closedir(d);
}

int privfd_list_ids(const char *path, int32_t **ids, size_t *n, size_t *cap)
{
	struct list_req r = { path, ids, n, cap, -1, 0 };

	privfd_run(do_list, &r);
	if (r.rc != 0)
		errno = r.err;
	return r.rc;
}

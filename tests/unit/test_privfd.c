/*
 * test_privfd — the reader thread with a descriptor table of its own
 * (src/util/privfd.c): files and folders read through it, the program's
 * descriptors out of its reach, and the race of issue #25 played out step
 * by step: the reader holds a descriptor, the program (a daemon) closes
 * that number and opens a file of its own, which gets the number; the
 * reader's close must leave the program's file open.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "testdir.h"
#include "util/privfd.h"

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };

	nanosleep(&ts, NULL);
}

static void put_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	CHECK(fd >= 0);
	if (fd < 0)
		return;
	CHECK_EQ_INT(write(fd, text, strlen(text)), (long long)strlen(text));
	close(fd);
}

static void test_read(const char *dir)
{
	char path[4096], buf[64], status[4096];

	snprintf(path, sizeof path, "%s/small", dir);
	put_file(path, "0123456789");
	CHECK_EQ_INT(privfd_read(path, buf, sizeof buf), 10);
	CHECK_EQ_STR(buf, "0123456789");
	/* cut to the buffer, NUL-terminated */
	CHECK_EQ_INT(privfd_read(path, buf, 5), 4);
	CHECK_EQ_STR(buf, "0123");
	snprintf(path, sizeof path, "%s/missing", dir);
	errno = 0;
	CHECK_EQ_INT(privfd_read(path, buf, sizeof buf), -1);
	CHECK_EQ_INT(errno, ENOENT);
	CHECK_EQ_STR(buf, "");
	/* /proc/self is this process, as on the calling thread */
	snprintf(path, sizeof path, "/proc/self/task/%d/status", (int)syscall(SYS_gettid));
	CHECK(privfd_read(path, status, sizeof status) > 0);
	CHECK(strncmp(status, "Name:\ttest_privfd", 17) == 0);
}

static int cmp_id(const void *a, const void *b)
{
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;

	return (x > y) - (x < y);
}

static void *idle_thread(void *arg)
{
	_Atomic int *tid = arg;

	atomic_store(tid, (int)syscall(SYS_gettid));
	while (atomic_load(tid) != 0)
		sleep_ms(1);
	return NULL;
}

static void test_list_ids(const char *dir)
{
	static const char *names[] = { "12", "007", "x1", "0", "99999999999", "-3", "5a" };
	char path[600], sub[300];
	int32_t *ids = NULL;
	size_t n = 99, cap = 0, i;
	_Atomic int tid = -1;
	pthread_t t;
	bool me = false, other = false;

	snprintf(sub, sizeof sub, "%s/ids", dir);
	CHECK_EQ_INT(mkdir(sub, 0700), 0);
	for (i = 0; i < sizeof names / sizeof names[0]; i++) {
		snprintf(path, sizeof path, "%s/%s", sub, names[i]);
		put_file(path, "");
	}
	CHECK_EQ_INT(privfd_list_ids(sub, &ids, &n, &cap), 0);
	CHECK_EQ_INT(n, 2);
	if (n == 2) {
		qsort(ids, n, sizeof *ids, cmp_id);
		CHECK_EQ_INT(ids[0], 7);
		CHECK_EQ_INT(ids[1], 12);
	}
	snprintf(path, sizeof path, "%s/none", dir);
	errno = 0;
	CHECK_EQ_INT(privfd_list_ids(path, &ids, &n, &cap), -1);
	CHECK_EQ_INT(errno, ENOENT);
	CHECK_EQ_INT(n, 0);

	/* this process's threads, a second one included */
	CHECK_EQ_INT(pthread_create(&t, NULL, idle_thread, &tid), 0);
	while (atomic_load(&tid) < 0)
		sleep_ms(1);
	CHECK_EQ_INT(privfd_list_ids("/proc/self/task", &ids, &n, &cap), 0);
	for (i = 0; i < n; i++) {
		me = me || ids[i] == (int32_t)getpid();
		other = other || ids[i] == (int32_t)atomic_load(&tid);
	}
	CHECK(me);
	CHECK(other);
	atomic_store(&tid, 0);
	pthread_join(t, NULL);
	free(ids);
}

struct probe {
	int fd;
	int rc, err;
};

/* On the reader: looks at the program's descriptor. */
static void probe_fd(void *arg)
{
	struct probe *p = arg;

	errno = 0;
	p->rc = fcntl(p->fd, F_GETFD);
	p->err = errno;
}

static void test_program_descriptors_unreachable(const char *dir)
{
	char path[4096];
	struct probe p;
	int fd;

	snprintf(path, sizeof path, "%s/program", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	CHECK(fd >= 0);
	p.fd = fd;
	privfd_run(probe_fd, &p);
	CHECK_EQ_INT(p.rc, -1);
	CHECK_EQ_INT(p.err, EBADF);
	close(fd);
}

struct race {
	_Atomic int fd;        /* the reader's descriptor */
	_Atomic int stage;     /* 1: the reader holds it; 2: close it */
	int close_rc;
};

/* On the reader: opens a file, holds it until told, then closes it, as
 * a scan preempted between its opendir and closedir does. */
static void hold_then_close(void *arg)
{
	struct race *r = arg;

	atomic_store(&r->fd, open("/dev/null", O_RDONLY | O_CLOEXEC));
	atomic_store(&r->stage, 1);
	while (atomic_load(&r->stage) != 2)
		sleep_ms(1);
	r->close_rc = close(atomic_load(&r->fd));
}

static void *ask_reader(void *arg)
{
	privfd_run(hold_then_close, arg);
	return NULL;
}

static void test_daemon_reuses_number(const char *dir)
{
	char path[4096], back[64];
	struct race r = { -1, 0, -1 };
	pthread_t t;
	int n, keep, mine, waited = 0;
	ssize_t got;

	CHECK_EQ_INT(pthread_create(&t, NULL, ask_reader, &r), 0);
	while (atomic_load(&r.stage) != 1 && waited++ < 10000)
		sleep_ms(1);
	CHECK_EQ_INT(atomic_load(&r.stage), 1);
	n = atomic_load(&r.fd);
	CHECK(n >= 0);
	/* The daemon: the number is not its own, so it closes it (0-2 kept
	 * aside to be put back after), then opens its file, which gets the
	 * lowest free number: this one. */
	keep = n <= 2 ? fcntl(n, F_DUPFD_CLOEXEC, 3) : -1;
	close(n);
	snprintf(path, sizeof path, "%s/daemon", dir);
	mine = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	CHECK_EQ_INT(mine, n);
	atomic_store(&r.stage, 2);
	pthread_join(t, NULL);
	CHECK_EQ_INT(r.close_rc, 0);
	/* the reader closed its own file, not the daemon's */
	CHECK_EQ_INT(write(mine, "kept\n", 5), 5);
	CHECK_EQ_INT(close(mine), 0);
	got = privfd_read(path, back, sizeof back);
	CHECK_EQ_INT(got, 5);
	CHECK_EQ_STR(back, "kept\n");
	if (keep >= 0) {
		dup2(keep, n);
		close(keep);
	}
}

int main(void)
{
	char dir[256];

	testdir_make(dir, sizeof dir, "privfd", false);
	test_read(dir);
	test_list_ids(dir);
	if (privfd_private()) {
		test_program_descriptors_unreachable(dir);
		test_daemon_reuses_number(dir);
	} else {
		printf("skipped: no descriptor table of its own for the reader here "
		       "(kernel before 5.9 and unshare refused)\n");
	}
	testdir_remove(dir);
	return check_done();
}

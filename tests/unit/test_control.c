/*
 * test_control — the pieces of live control that need no running host:
 * the wire frames, the socket directory's checks, stale-file cleaning,
 * PROF_REPL_SIGNAL parsing, and taking every thread's stack.
 */

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "control/control.h"
#include "testdir.h"

static char tmpdir[256];

/* ------------------------------------------------------------ frames */

static void test_frames(void)
{
	int sv[2];
	struct control_reader r = { 0 };
	char type, *big;
	const char *data;
	size_t len;
	unsigned char partial[] = { 'C', 0, 0, 0, 5, 'a', 'b' };

	CHECK_EQ_INT(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	CHECK_EQ_INT(control_send(sv[0], CONTROL_EVAL, "1 + 1", 5), 0);
	CHECK_EQ_INT(control_send(sv[0], CONTROL_INTERRUPT, NULL, 0), 0);
	CHECK_EQ_INT(control_recv(sv[1], &r, true), 1);
	CHECK_EQ_INT(control_next_frame(&r, &type, &data, &len), 1);
	CHECK_EQ_INT(type, CONTROL_EVAL);
	CHECK_EQ_INT(len, 5);
	CHECK(memcmp(data, "1 + 1", 5) == 0);
	CHECK_EQ_INT(control_next_frame(&r, &type, &data, &len), 1);
	CHECK_EQ_INT(type, CONTROL_INTERRUPT);
	CHECK_EQ_INT(len, 0);
	CHECK_EQ_INT(control_next_frame(&r, &type, &data, &len), 0);
	/* Nothing more: a non-blocking read says EAGAIN. */
	CHECK_EQ_INT(control_recv(sv[1], &r, false), -1);
	CHECK_EQ_INT(errno, EAGAIN);

	/* A frame split across reads comes out whole. */
	CHECK_EQ_INT(write(sv[0], partial, sizeof partial), (ssize_t)sizeof partial);
	CHECK_EQ_INT(control_recv(sv[1], &r, true), 1);
	CHECK_EQ_INT(control_next_frame(&r, &type, &data, &len), 0);
	CHECK_EQ_INT(write(sv[0], "cde", 3), 3);
	CHECK_EQ_INT(control_recv(sv[1], &r, true), 1);
	CHECK_EQ_INT(control_next_frame(&r, &type, &data, &len), 1);
	CHECK_EQ_INT(len, 5);
	CHECK(memcmp(data, "abcde", 5) == 0);

	/* A long frame (bigger than one read). */
	big = malloc(300000);
	memset(big, 'x', 300000);
	if (fork() == 0) {
		control_send(sv[0], CONTROL_OUT, big, 300000);
		_exit(0);
	}
	for (;;) {
		int rc = control_next_frame(&r, &type, &data, &len);

		if (rc == 1)
			break;
		CHECK_EQ_INT(rc, 0);
		if (control_recv(sv[1], &r, true) != 1)
			break;
	}
	CHECK_EQ_INT(type, CONTROL_OUT);
	CHECK_EQ_INT(len, 300000);
	CHECK(data[0] == 'x' && data[299999] == 'x');
	wait(NULL);
	free(big);

	/* A header announcing too much is refused. */
	{
		unsigned char huge[] = { 'C', 0x7f, 0, 0, 0 };

		CHECK_EQ_INT(write(sv[0], huge, sizeof huge), (ssize_t)sizeof huge);
		CHECK_EQ_INT(control_recv(sv[1], &r, true), 1);
		CHECK_EQ_INT(control_next_frame(&r, &type, &data, &len), -1);
	}
	/* The peer closing is the end of the stream. */
	close(sv[0]);
	CHECK_EQ_INT(control_recv(sv[1], &r, true), 0);
	close(sv[1]);
	control_reader_free(&r);
}

/* ------------------------------------------------------------ directory */

static void test_dir(void)
{
	char dir[512], path[512], link[512], file[512], out[256];
	struct stat st;
	struct err e;

	snprintf(dir, sizeof dir, "%s/sockets", tmpdir);
	/* Created private. */
	CHECK_EQ_INT(control_dir_prepare(dir, true, &e), 0);
	CHECK_EQ_INT(stat(dir, &st), 0);
	CHECK_EQ_INT(st.st_mode & 0777, 0700);
	/* Made private again when someone opened it up. */
	chmod(dir, 0755);
	CHECK_EQ_INT(control_dir_prepare(dir, false, &e), 0);
	CHECK_EQ_INT(stat(dir, &st), 0);
	CHECK_EQ_INT(st.st_mode & 0777, 0700);
	/* Missing and not to be created. */
	snprintf(path, sizeof path, "%s/missing", tmpdir);
	CHECK_EQ_INT(control_dir_prepare(path, false, &e), -1);
	CHECK(contains(e.msg, "No such file or directory"));
	/* A link (someone else could point it anywhere) or a file: refused. */
	snprintf(link, sizeof link, "%s/link", tmpdir);
	CHECK_EQ_INT(symlink(dir, link), 0);
	CHECK_EQ_INT(control_dir_prepare(link, true, &e), -1);
	CHECK(contains(e.msg, "is not a directory"));
	snprintf(file, sizeof file, "%s/file", tmpdir);
	close(open(file, O_CREAT | O_WRONLY, 0600));
	CHECK_EQ_INT(control_dir_prepare(file, true, &e), -1);
	CHECK(contains(e.msg, "is not a directory"));
	/* Owned by another user: refused (root can make one to try). */
	if (geteuid() == 0) {
		snprintf(path, sizeof path, "%s/theirs", tmpdir);
		mkdir(path, 0700);
		CHECK_EQ_INT(chown(path, 12345, 12345), 0);
		CHECK_EQ_INT(control_dir_prepare(path, true, &e), -1);
		CHECK(contains(e.msg, "belongs to uid 12345"));
	}

	/* XDG_RUNTIME_DIR when it is ours, else /tmp/profhost-<uid>. */
	CHECK_EQ_INT(control_dir_path(out, sizeof out, tmpdir, &e), 0);
	snprintf(path, sizeof path, "%s/profhost", tmpdir);
	CHECK_EQ_STR(out, path);
	snprintf(path, sizeof path, "/tmp/profhost-%u", (unsigned)geteuid());
	CHECK_EQ_INT(control_dir_path(out, sizeof out, NULL, &e), 0);
	CHECK_EQ_STR(out, path);
	CHECK_EQ_INT(control_dir_path(out, sizeof out, "relative/dir", &e), 0);
	CHECK_EQ_STR(out, path);
	CHECK_EQ_INT(control_dir_path(out, sizeof out, "/no/such/dir", &e), 0);
	CHECK_EQ_STR(out, path);

	CHECK_EQ_INT(control_sock_path(out, sizeof out, "/tmp/profhost-0", 123, &e), 0);
	CHECK_EQ_STR(out, "/tmp/profhost-0/123.sock");
	CHECK_EQ_INT(control_trigger_path(out, sizeof out, "/tmp/profhost-0", 123, &e), 0);
	CHECK_EQ_STR(out, "/tmp/profhost-0/123.attach");
	memset(path, 'd', 120);
	path[0] = '/';
	path[120] = '\0';
	CHECK_EQ_INT(control_sock_path(out, sizeof out, path, 123, &e), -1);
	CHECK(contains(e.msg, "too long for a UNIX socket"));
}

static void touch(const char *dir, const char *name)
{
	char path[512];

	snprintf(path, sizeof path, "%s/%s", dir, name);
	close(open(path, O_CREAT | O_WRONLY, 0600));
}

static bool exists(const char *dir, const char *name)
{
	char path[512];

	snprintf(path, sizeof path, "%s/%s", dir, name);
	return access(path, F_OK) == 0;
}

static void test_clean_stale(void)
{
	char dir[512], name[64];
	pid_t dead = fork();

	if (dead == 0)
		_exit(0);
	waitpid(dead, NULL, 0);
	snprintf(dir, sizeof dir, "%s/stale", tmpdir);
	mkdir(dir, 0700);
	snprintf(name, sizeof name, "%d.sock", (int)dead);
	touch(dir, name);
	snprintf(name, sizeof name, "%d.attach", (int)dead);
	touch(dir, name);
	snprintf(name, sizeof name, ".%d.123.tmp", (int)dead);
	touch(dir, name);
	snprintf(name, sizeof name, "%d.sock", (int)getpid());
	touch(dir, name);
	snprintf(name, sizeof name, "%d.sock", (int)getppid());
	touch(dir, name);
	touch(dir, "notes.txt");
	CHECK_EQ_INT(control_clean_stale(dir), 3);
	snprintf(name, sizeof name, "%d.sock", (int)dead);
	CHECK(!exists(dir, name));
	snprintf(name, sizeof name, "%d.attach", (int)dead);
	CHECK(!exists(dir, name));
	snprintf(name, sizeof name, "%d.sock", (int)getpid());
	CHECK(exists(dir, name));
	snprintf(name, sizeof name, "%d.sock", (int)getppid());
	CHECK(exists(dir, name));
	CHECK(exists(dir, "notes.txt"));
}

/* ------------------------------------------------------------ signals */

static void test_signals(void)
{
	struct err e;
	char buf[32];
	int sig = -1;

	CHECK_EQ_INT(control_parse_signal("USR1", &sig, &e), 0);
	CHECK_EQ_INT(sig, SIGUSR1);
	CHECK_EQ_INT(control_parse_signal("sigusr2", &sig, &e), 0);
	CHECK_EQ_INT(sig, SIGUSR2);
	CHECK_EQ_INT(control_parse_signal("SIGUSR1", &sig, &e), 0);
	CHECK_EQ_INT(sig, SIGUSR1);
	snprintf(buf, sizeof buf, "%d", SIGUSR2);
	CHECK_EQ_INT(control_parse_signal(buf, &sig, &e), 0);
	CHECK_EQ_INT(sig, SIGUSR2);
	snprintf(buf, sizeof buf, "%d", SIGRTMIN + 3);
	CHECK_EQ_INT(control_parse_signal(buf, &sig, &e), 0);
	CHECK_EQ_INT(sig, SIGRTMIN + 3);
	CHECK_EQ_INT(control_parse_signal("0", &sig, &e), 0);
	CHECK_EQ_INT(sig, 0);
	CHECK_EQ_INT(control_parse_signal("15", &sig, &e), -1);
	CHECK(contains(e.msg, "PROF_REPL_SIGNAL='15' is not understood"));
	CHECK_EQ_INT(control_parse_signal("TERM", &sig, &e), -1);
	CHECK_EQ_INT(control_parse_signal("usr", &sig, &e), -1);
	CHECK_EQ_INT(control_parse_signal("", &sig, &e), -1);
	CHECK_EQ_INT(control_parse_signal("10x", &sig, &e), -1);
	CHECK_EQ_STR(control_signal_name(SIGUSR1, buf, sizeof buf), "SIGUSR1");
	CHECK_EQ_STR(control_signal_name(SIGUSR2, buf, sizeof buf), "SIGUSR2");
	CHECK_EQ_STR(control_signal_name(SIGRTMIN + 2, buf, sizeof buf), "SIGRTMIN+2");
}

/* ------------------------------------------------------------ stacks */

static atomic_int marker_ready, marker_stop;
static atomic_int blocked_ready, blocked_stop;

/* Exported (the test is linked with -rdynamic) so dladdr names it. */
__attribute__((noinline, visibility("default"))) void test_control_marker(void)
{
	atomic_store(&marker_ready, 1);
	while (!atomic_load(&marker_stop)) {
		struct timespec ts = { 0, 1000000 };

		nanosleep(&ts, NULL);
	}
	__asm__ volatile("" ::: "memory"); /* not a tail call */
}

static void *marker_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "marker");
	test_control_marker();
	return NULL;
}

static void *blocked_main(void *arg)
{
	sigset_t all;

	(void)arg;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, NULL);
	pthread_setname_np(pthread_self(), "blocker");
	atomic_store(&blocked_ready, 1);
	while (!atomic_load(&blocked_stop)) {
		struct timespec ts = { 0, 1000000 };

		nanosleep(&ts, NULL);
	}
	return NULL;
}

/* The threads of this process, from /proc/self/task. */
static int count_threads(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *ent;
	int n = 0;

	if (!d)
		return -1;
	while ((ent = readdir(d)) != NULL)
		if (ent->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

static void test_stacks(void)
{
	static struct control_stack st[CONTROL_STACK_THREADS];
	pthread_t m, b;
	struct err e;
	int n, i, f, found_marker = 0, found_blocked = 0, found_self = 0;

	pthread_create(&m, NULL, marker_main, NULL);
	pthread_create(&b, NULL, blocked_main, NULL);
	while (!atomic_load(&marker_ready) || !atomic_load(&blocked_ready)) {
		struct timespec ts = { 0, 1000000 };

		nanosleep(&ts, NULL);
	}
	n = control_stacks_take(st, CONTROL_STACK_THREADS, &e);
	/* every thread of the process: this one, marker, blocker, and any a
	 * sanitizer runtime keeps (ThreadSanitizer has one) */
	CHECK_EQ_INT(n, count_threads());
	CHECK(n >= 3);
	for (i = 0; i < n; i++) {
		if (strcmp(st[i].name, "marker") == 0) {
			CHECK_EQ_INT(st[i].state, CONTROL_STACK_OK);
			CHECK(st[i].nframes > 2);
			for (f = 0; f < st[i].nframes; f++) {
				Dl_info info;

				if (dladdr((void *)(st[i].ip[f] - (f > 0)), &info) &&
				    info.dli_saddr == (void *)test_control_marker)
					found_marker = 1;
			}
		} else if (strcmp(st[i].name, "blocker") == 0) {
			CHECK_EQ_INT(st[i].state, CONTROL_STACK_BLOCKED);
			CHECK_EQ_INT(st[i].nframes, 0);
			found_blocked = 1;
		} else if (st[i].tid == (pid_t)syscall(SYS_gettid)) {
			CHECK(st[i].self);
			CHECK_EQ_INT(st[i].state, CONTROL_STACK_OK);
			CHECK(st[i].nframes > 1);
			found_self = 1;
		}
	}
	CHECK(found_marker);
	CHECK(found_blocked);
	CHECK(found_self);
	/* Again: the handler stays installed and works a second time. */
	CHECK_EQ_INT(control_stacks_take(st, 1, &e), 1);
	atomic_store(&marker_stop, 1);
	atomic_store(&blocked_stop, 1);
	pthread_join(m, NULL);
	pthread_join(b, NULL);
}

/* ------------------------------------------------------------ main */

int main(void)
{
	testdir_make(tmpdir, sizeof tmpdir, "test_control", false);
	test_frames();
	test_dir();
	test_clean_stale();
	test_signals();
	test_stacks();
	testdir_remove(tmpdir);
	return check_done();
}

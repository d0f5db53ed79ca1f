/*
 * salvage_app — a steady loop that dies without writing anything, for the
 * salvage tests (tests/e2e/test_salvage.py).
 *
 *   salvage_app [--steps N] [--die-at S] [--how kill|exit|segv] [--sleep-us U]
 *               [--fork-ms M] [--spin] [--print] [--close-fds-at K FILE]
 *               [--chdir-at K DIR]
 *
 * Pushes "train" around the loop; each step pushes "work" and marks
 * "tick", sleeps U microseconds (default 1000) and calls prof_step(). In
 * step S, inside "work", it dies: SIGKILL sent to itself (--how kill, the
 * default), _exit(3) (--how exit), SIGSEGV raised (--how segv) or SIGTERM
 * raised (--how term). Without --die-at it ends normally.
 * With --fork-ms, a child forked at step 5 (inside the window) sleeps M ms
 * and _exit(0)s: it outlives the parent's death. With --spin, each step
 * spins U microseconds in salvage_spin_work() in place of sleeping (for
 * CPU samples to name). With --print, each step writes "step S" to its
 * descriptor 1 (unbuffered) and reads a byte from its descriptor 0, and
 * says on stderr when either fails.
 * With --close-fds-at, at the start of step K it closes descriptors
 * 3-1023 as a daemon does, then opens FILE (created, truncated) and writes
 * "step S" into it each step from then on. With --chdir-at, it changes
 * its directory to DIR at the start of step K. Prints "pid P" first and
 * "done N" at a normal end. Binds profhost only
 * through dlsym, so it runs the same without the host.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "prof_dl.h"

/* Spins for `us` microseconds of wall time. */
__attribute__((noinline, noipa)) double salvage_spin_work(long us)
{
	struct timespec a, b;
	volatile double x = 1;

	clock_gettime(CLOCK_MONOTONIC, &a);
	do {
		for (int i = 0; i < 1000; i++)
			x = x * 1.0000001 + 0.5;
		clock_gettime(CLOCK_MONOTONIC, &b);
	} while ((b.tv_sec - a.tv_sec) * 1000000L + (b.tv_nsec - a.tv_nsec) / 1000 < us);
	return x;
}

static void sleep_us(long us)
{
	struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };

	while (nanosleep(&ts, &ts) != 0)
		;
}

int main(int argc, char **argv)
{
	long steps = 40, die_at = -1, us = 1000, fork_ms = -1, close_at = -1, s;
	const char *how = "kill", *data = NULL, *dir = NULL;
	long chdir_at = -1;
	int i, spin = 0, print = 0, fd = -1;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atol(argv[++i]);
		else if (!strcmp(argv[i], "--die-at") && i + 1 < argc) die_at = atol(argv[++i]);
		else if (!strcmp(argv[i], "--how") && i + 1 < argc) how = argv[++i];
		else if (!strcmp(argv[i], "--sleep-us") && i + 1 < argc) us = atol(argv[++i]);
		else if (!strcmp(argv[i], "--fork-ms") && i + 1 < argc) fork_ms = atol(argv[++i]);
		else if (!strcmp(argv[i], "--spin")) spin = 1;
		else if (!strcmp(argv[i], "--print")) print = 1;
		else if (!strcmp(argv[i], "--chdir-at") && i + 2 < argc) {
			chdir_at = atol(argv[++i]);
			dir = argv[++i];
		} else if (!strcmp(argv[i], "--close-fds-at") && i + 2 < argc) {
			close_at = atol(argv[++i]);
			data = argv[++i];
		}
		else {
			fprintf(stderr, "salvage_app: unknown argument '%s'\n", argv[i]);
			return 2;
		}
	}
	bind();
	printf("pid %d\n", (int)getpid());
	fflush(stdout);
	p_push("train");
	for (s = 0; s < steps; s++) {
		p_push("work");
		p_mark("tick");
		if (s == chdir_at && chdir(dir) != 0) {
			fprintf(stderr, "salvage_app: cannot chdir to '%s': %s\n", dir,
				strerror(errno));
			return 2;
		}
		if (s == close_at) {
			int k;

			for (k = 3; k < 1024; k++)
				close(k);
			fd = open(data, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		}
		if (fd >= 0)
			dprintf(fd, "step %ld\n", s);
		if (print) {
			char line[32];
			int n = snprintf(line, sizeof line, "step %ld\n", s);

			if (write(1, line, (size_t)n) != n)
				fprintf(stderr, "salvage_app: stdout: %s\n", strerror(errno));
			if (read(0, line, 1) < 0)
				fprintf(stderr, "salvage_app: stdin: %s\n", strerror(errno));
		}
		if (s == 5 && fork_ms >= 0 && fork() == 0) {
			sleep_us(fork_ms * 1000);
			_exit(0);
		}
		if (us > 0 && spin)
			salvage_spin_work(us);
		else if (us > 0)
			sleep_us(us);
		if (s == die_at) {
			if (!strcmp(how, "exit"))
				_exit(3);
			if (!strcmp(how, "segv"))
				raise(SIGSEGV);
			if (!strcmp(how, "term"))
				raise(SIGTERM);
			kill(getpid(), SIGKILL);
		}
		p_pop();
		p_step();
	}
	p_pop();
	printf("done %ld\n", steps);
	return 0;
}

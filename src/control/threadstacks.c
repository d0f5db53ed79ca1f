/*
 * threadstacks — every thread's native stack, now (prof.stacks(); see
 * control.h).
 *
 * One request at a time: the requester names a thread (req_tid), sends it
 * the stack signal with tgkill and waits, bounded, for the handler to fill
 * the one request slot. The handler claims the request with a
 * compare-and-swap, so a late handler (after the requester gave up) or one
 * for another thread does nothing. It unwinds with libunwind (local,
 * signal-safe), skipping its own frames up to the signal frame. Nothing in
 * the handler allocates or locks.
 */
#include "control.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>

#define STACKS_THREAD_WAIT_NS 200000000LL   /* per thread */
#define STACKS_TOTAL_WAIT_NS 2000000000LL   /* per request */
#define STACKS_LOCK_WAIT_S 3
#define STACKS_SKIP_MAX 16                  /* handler frames before the
						signal frame, at most */

enum req_state { REQ_IDLE, REQ_ASKED, REQ_TAKING, REQ_DONE };

static pthread_mutex_t stacks_lock = PTHREAD_MUTEX_INITIALIZER;
static int stacks_sig;                      /* 0 until installed */
static atomic_int req_tid;
static atomic_int req_state;
static struct control_stack *_Atomic req_slot;

static pid_t my_tid(void)
{
	return (pid_t)syscall(SYS_gettid);
}

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Unwinds the current thread into s, starting below the signal frame when
 * `in_signal` (else below this function). Async-signal-safe. */
static void unwind_into(struct control_stack *s, bool in_signal)
{
	unw_context_t ctx;
	unw_cursor_t cur;
	unw_word_t ip;
	int n = 0, skipped = 0;

	s->nframes = 0;
	s->truncated = false;
	if (unw_getcontext(&ctx) != 0 || unw_init_local(&cur, &ctx) != 0)
		return;
	if (in_signal) {
		while (unw_is_signal_frame(&cur) <= 0) {
			if (unw_step(&cur) <= 0 || ++skipped > STACKS_SKIP_MAX) {
				/* no signal frame found: keep everything */
				if (unw_init_local(&cur, &ctx) != 0)
					return;
				break;
			}
		}
	}
	while (unw_step(&cur) > 0) {
		if (n == CONTROL_STACK_FRAMES) {
			s->truncated = true;
			break;
		}
		if (unw_get_reg(&cur, UNW_REG_IP, &ip) != 0 || ip == 0)
			break;
		s->ip[n++] = (uintptr_t)ip;
	}
	s->nframes = n;
}

/* The stack signal: fill the request slot if it asks for this thread. */
static void stacks_handler(int sig, siginfo_t *si, void *uc)
{
	int saved = errno;
	int expect = REQ_ASKED;
	struct control_stack *s;

	(void)sig;
	(void)si;
	(void)uc;
	if (atomic_load(&req_tid) == my_tid() &&
	    atomic_compare_exchange_strong(&req_state, &expect, REQ_TAKING)) {
		s = atomic_load(&req_slot);
		s->pthread = (uintptr_t)pthread_self();
		unwind_into(s, true);
		atomic_store(&req_state, REQ_DONE);
	}
	errno = saved;
}

/* Picks a real-time signal the application leaves alone and installs the
 * handler on it, once. Returns 0 or -1 with *e. */
static int install(struct err *e)
{
	int sig;

	if (stacks_sig)
		return 0;
	for (sig = SIGRTMAX - 1; sig >= SIGRTMIN + 2; sig--) {
		struct sigaction old, sa;

		if (sigaction(sig, NULL, &old) != 0)
			continue;
		if ((old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL)
			continue;
		memset(&sa, 0, sizeof sa);
		sa.sa_sigaction = stacks_handler;
		sa.sa_flags = SA_SIGINFO | SA_RESTART;
		sigfillset(&sa.sa_mask);
		if (sigaction(sig, &sa, NULL) != 0)
			continue;
		/* Stays installed: a late signal must never find the default
		 * action (which would end the process). */
		stacks_sig = sig;
		return 0;
	}
	return err_set(e, "prof.stacks: every real-time signal is in use by the "
		       "application");
}

/* Reads /proc/self/task/<tid>/<file>'s first line matching `key` (whole
 * file when key is NULL) into buf. Returns 0 or -1. */
static int read_task(pid_t tid, const char *file, const char *key, char *buf,
		     size_t size)
{
	char path[64], line[256];
	FILE *f;
	int rc = -1;

	snprintf(path, sizeof path, "/proc/self/task/%d/%s", (int)tid, file);
	f = fopen(path, "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof line, f)) {
		if (key && strncmp(line, key, strlen(key)) != 0)
			continue;
		const char *v;
		size_t n;

		line[strcspn(line, "\n")] = '\0';
		v = key ? line + strlen(key) : line;
		n = strlen(v) < size - 1 ? strlen(v) : size - 1; /* cut to fit */
		memcpy(buf, v, n);
		buf[n] = '\0';
		rc = 0;
		break;
	}
	fclose(f);
	return rc;
}

/* True when thread tid blocks signal sig (from its SigBlk mask). */
static bool blocks(pid_t tid, int sig)
{
	char hex[64];
	unsigned long long mask;

	if (read_task(tid, "status", "SigBlk:", hex, sizeof hex) != 0)
		return false;
	mask = strtoull(hex, NULL, 16);
	return (mask >> (sig - 1)) & 1;
}

/* Asks thread s->tid for its stack and waits until `deadline`. */
static void take_one(struct control_stack *s, int64_t deadline)
{
	int expect;
	int64_t until = now_ns() + STACKS_THREAD_WAIT_NS;

	if (until > deadline)
		until = deadline;
	atomic_store(&req_slot, s);
	atomic_store(&req_state, REQ_ASKED);
	atomic_store(&req_tid, s->tid);
	if (syscall(SYS_tgkill, getpid(), s->tid, stacks_sig) != 0) {
		s->state = errno == ESRCH ? CONTROL_STACK_GONE : CONTROL_STACK_TIMEOUT;
		atomic_store(&req_tid, 0);
		atomic_store(&req_state, REQ_IDLE);
		return;
	}
	for (;;) {
		struct timespec ts = { 0, 200000 };

		if (atomic_load(&req_state) == REQ_DONE) {
			s->state = CONTROL_STACK_OK;
			break;
		}
		if (now_ns() >= until) {
			expect = REQ_ASKED;
			if (atomic_compare_exchange_strong(&req_state, &expect,
							   REQ_IDLE)) {
				s->state = CONTROL_STACK_TIMEOUT;
				break;
			}
			/* the handler is writing: it finishes quickly */
		}
		nanosleep(&ts, NULL);
	}
	atomic_store(&req_tid, 0);
	atomic_store(&req_state, REQ_IDLE);
}

int control_stacks_take(struct control_stack *out, size_t max, struct err *e)
{
	struct timespec lock_until;
	DIR *d;
	struct dirent *ent;
	size_t n = 0, i;
	pid_t self = my_tid();
	int64_t deadline;

	clock_gettime(CLOCK_REALTIME, &lock_until);
	lock_until.tv_sec += STACKS_LOCK_WAIT_S;
	if (pthread_mutex_timedlock(&stacks_lock, &lock_until) != 0)
		return err_set(e, "prof.stacks: another request is still running");
	if (install(e) != 0) {
		pthread_mutex_unlock(&stacks_lock);
		return -1;
	}
	d = opendir("/proc/self/task");
	if (!d) {
		pthread_mutex_unlock(&stacks_lock);
		return err_errno(e, errno, "prof.stacks: cannot list the threads");
	}
	while (n < max && (ent = readdir(d)) != NULL) {
		long tid = strtol(ent->d_name, NULL, 10);

		if (tid <= 0)
			continue;
		memset(&out[n], 0, sizeof out[n]);
		out[n].tid = (pid_t)tid;
		if (read_task(out[n].tid, "comm", NULL, out[n].name,
			      sizeof out[n].name) != 0)
			snprintf(out[n].name, sizeof out[n].name, "?");
		n++;
	}
	closedir(d);
	deadline = now_ns() + STACKS_TOTAL_WAIT_NS;
	for (i = 0; i < n; i++) {
		struct control_stack *s = &out[i];

		if (s->tid == self) {
			s->self = true;
			s->state = CONTROL_STACK_OK;
			s->pthread = (uintptr_t)pthread_self();
			unwind_into(s, false);
		} else if (blocks(s->tid, stacks_sig)) {
			s->state = CONTROL_STACK_BLOCKED;
		} else if (now_ns() >= deadline) {
			s->state = CONTROL_STACK_TIMEOUT;
		} else {
			take_one(s, deadline);
		}
	}
	pthread_mutex_unlock(&stacks_lock);
	return (int)n;
}

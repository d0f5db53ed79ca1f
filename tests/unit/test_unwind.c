/*
 * test_unwind — the sampling handler's safety check on real threads: a
 * thread running its start routine is unwound with unw_backtrace after one
 * checked sample; a thread that has left its start routine (glibc's
 * start_thread running its exit: TLS and key destructors, the allocator's
 * per-thread state) never is, whether its first sample lands there or it
 * was known safe before. A thread inside glibc's allocator, in code that
 * no exported function's range covers (aligned_alloc jumps to a static
 * helper, which takes the arena's lock), is unsafe too. Signals are sent
 * with a timer's si_code, so the real handler takes the real path.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "capture/cpu/sampler.h"

static struct sampler_slot slots[2];
static atomic_int records;

/* The handler's sink: counts the records. */
static int count_append(uint16_t kind, int64_t ts, const void *payload,
			uint32_t len, uint64_t id, uint64_t a)
{
	(void)kind, (void)ts, (void)payload, (void)len, (void)id, (void)a;
	atomic_fetch_add(&records, 1);
	return 0;
}

/* Sends thread `tid` one sampler signal naming `slot`, and waits until its
 * handler recorded it. Returns 0, or -1 after 10 s. */
static int sample(int32_t tid, struct sampler_slot *slot)
{
	int before = atomic_load(&records);
	struct timespec ms = { 0, 1000000 };
	siginfo_t si;
	int i;

	memset(&si, 0, sizeof si);
	si.si_signo = SIGPROF;
	si.si_code = SI_TIMER;
	si.si_value.sival_ptr = slot;
	if (syscall(SYS_rt_tgsigqueueinfo, getpid(), tid, SIGPROF, &si) != 0)
		return -1;
	for (i = 0; i < 10000 && atomic_load(&records) == before; i++)
		nanosleep(&ms, NULL);
	return atomic_load(&records) > before ? 0 : -1;
}

/* A thread that spins in its start routine, then in a key destructor, each
 * until told to go on. */
static atomic_int phase;  /* 1 running, 2 in the destructor, 3 may leave */
static atomic_int go_on;
static atomic_int worker_tid;
static pthread_key_t key;

static void in_destructor(void *arg)
{
	(void)arg;
	atomic_store(&phase, 2);
	while (atomic_load(&go_on) < 2)
		;
}

static void *worker(void *arg)
{
	(void)arg;
	atomic_store(&worker_tid, (int)syscall(SYS_gettid));
	pthread_setspecific(key, &key);
	atomic_store(&phase, 1);
	while (atomic_load(&go_on) < 1)
		;
	return NULL;
}

static void *learner(void *arg)
{
	*(int *)arg = unwind_learn_entry();
	return NULL;
}

/* Waits until `phase` reaches `want` (at most 10 s). */
static void wait_phase(int want)
{
	struct timespec ms = { 0, 1000000 };
	int i;

	for (i = 0; i < 10000 && atomic_load(&phase) < want; i++)
		nanosleep(&ms, NULL);
	CHECK_EQ_INT(atomic_load(&phase), want);
}

/* Runs the worker: `sample_first` takes one sample while it runs its
 * start routine; then one while it runs its key destructor. Returns how
 * many of the samples took the checked, step-by-step path. */
static uint64_t run_worker(bool sample_first)
{
	struct sampler_slot *slot = &slots[0];
	struct unwind_counts before, after;
	pthread_t t;

	atomic_store(&phase, 0);
	atomic_store(&go_on, 0);
	memset(slot, 0, sizeof *slot);
	CHECK_EQ_INT(pthread_create(&t, NULL, worker, NULL), 0);
	wait_phase(1);
	atomic_store(&slot->tid, atomic_load(&worker_tid));
	unwind_counts(&before);
	if (sample_first) {
		CHECK_EQ_INT(sample(atomic_load(&worker_tid), slot), 0);
		/* Checked once, then known safe, with the place of
		 * start_thread's return address. */
		CHECK(atomic_load(&slot->epoch) != 0);
		CHECK(atomic_load(&slot->entry_at) != 0);
		CHECK_EQ_INT(sample(atomic_load(&worker_tid), slot), 0);
	}
	atomic_store(&go_on, 1);
	wait_phase(2);
	CHECK_EQ_INT(sample(atomic_load(&worker_tid), slot), 0);
	atomic_store(&go_on, 2);
	pthread_join(t, NULL);
	unwind_counts(&after);
	return after.slow - before.slow;
}

/* The state letter of thread `tid` (/proc/self/task/<tid>/stat), or '?'.
 * Allocates nothing (the main arena's lock may be held). */
static char thread_state(int tid)
{
	char path[64], buf[256], *p;
	ssize_t n;
	int fd;

	snprintf(path, sizeof path, "/proc/self/task/%d/stat", tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return '?';
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return '?';
	buf[n] = '\0';
	p = strrchr(buf, ')');
	return p && p[1] == ' ' ? p[2] : '?';
}

/* Waits until thread `tid` sleeps in the kernel (at most 10 s). Returns
 * 1 when it does, else 0. */
static int wait_blocked(int tid)
{
	struct timespec ms = { 0, 1000000 };
	int i;

	for (i = 0; i < 10000 && thread_state(tid) != 'S'; i++)
		nanosleep(&ms, NULL);
	nanosleep(&ms, NULL);
	return thread_state(tid) == 'S';
}

static atomic_int holder_tid, waiter_tid, waiter_go;

/* Holds the main arena's lock: malloc_stats() prints to stderr with it
 * held, and stderr is a full pipe. */
static void *lock_holder(void *arg)
{
	(void)arg;
	atomic_store(&holder_tid, (int)syscall(SYS_gettid));
	malloc_stats();
	return NULL;
}

/* Waits for that lock inside aligned_alloc, which glibc 2.36 tail-calls
 * into a static helper: no frame of an exported allocator function. */
static void *lock_waiter(void *arg)
{
	atomic_store(&waiter_tid, (int)syscall(SYS_gettid));
	while (!atomic_load(&waiter_go))
		;
	*(void **)arg = aligned_alloc(64, 4096);
	return NULL;
}

/* A thread's first sample inside the allocator's own static code is
 * checked and found unsafe. Returns how many samples took the checked
 * path (1), or -1 when glibc's allocator is not the process's. */
static int sample_inside_allocator(void)
{
	struct sampler_slot *slot = &slots[1];
	struct unwind_counts before, after;
	void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD), *got = NULL;
	int fds[2], saved, fl, sampled, blocked;
	pthread_t holder, waiter;
	char drain[65536];

	if (!libc || dlsym(libc, "aligned_alloc") != dlsym(RTLD_DEFAULT, "aligned_alloc")) {
		if (libc)
			dlclose(libc);
		return -1; /* a sanitizer's allocator */
	}
	dlclose(libc);
	mallopt(M_ARENA_MAX, 1); /* every thread on the main arena */
	fflush(stderr);
	saved = dup(2);
	CHECK(pipe(fds) == 0);
	fl = fcntl(fds[1], F_GETFL);
	fcntl(fds[1], F_SETFL, fl | O_NONBLOCK);
	while (write(fds[1], drain, sizeof drain) > 0)
		;
	fcntl(fds[1], F_SETFL, fl);
	/* Both threads made before the lock is held (creating one
	 * allocates); nothing below allocates until the holder is done. */
	CHECK_EQ_INT(pthread_create(&waiter, NULL, lock_waiter, &got), 0);
	while (!atomic_load(&waiter_tid))
		;
	dup2(fds[1], 2);
	CHECK_EQ_INT(pthread_create(&holder, NULL, lock_holder, NULL), 0);
	while (!atomic_load(&holder_tid))
		;
	blocked = wait_blocked(atomic_load(&holder_tid));
	atomic_store(&waiter_go, 1);
	blocked += wait_blocked(atomic_load(&waiter_tid));

	memset(slot, 0, sizeof *slot);
	atomic_store(&slot->tid, atomic_load(&waiter_tid));
	unwind_counts(&before);
	/* Nothing is printed until stderr is back (a check that fails
	 * would block on the full pipe). */
	sampled = sample(atomic_load(&waiter_tid), slot);
	unwind_counts(&after);

	/* Let the holder print, and both go. */
	fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
	while (pthread_tryjoin_np(holder, NULL) != 0)
		if (read(fds[0], drain, sizeof drain) <= 0)
			nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	dup2(saved, 2);
	close(saved);
	close(fds[0]);
	close(fds[1]);
	pthread_join(waiter, NULL);
	free(got);
	CHECK_EQ_INT(blocked, 2);
	CHECK_EQ_INT(sampled, 0);
	return (int)(after.slow - before.slow);
}

int main(void)
{
	struct unwind_config cfg = { count_append, slots, 2, 64 };
	pthread_t t;
	int learnt = -1, slow;

	CHECK_EQ_INT(pthread_key_create(&key, in_destructor), 0);
	CHECK_EQ_INT(unwind_setup(&cfg), 0);
	CHECK_EQ_INT(pthread_create(&t, NULL, learner, &learnt), 0);
	pthread_join(t, NULL);
	CHECK_EQ_INT(learnt, 0);
	CHECK_EQ_INT(unwind_install(SIGPROF), 0);
	unwind_set_recording(true);

	/* Known safe while running its start routine (the second sample is
	 * a fast one); sampled in its exit, it is not: checked, unsafe. */
	CHECK_EQ_INT(run_worker(true), 1);
	/* First sampled in its exit: the check says unsafe (no allocator
	 * function is on that stack, so the allocator check alone would
	 * have let it through). */
	CHECK_EQ_INT(run_worker(false), 1);
	/* Waiting for the arena's lock in aligned_alloc's helper. */
	slow = sample_inside_allocator();
	if (slow < 0)
		printf("skipped the allocator's static code: not glibc's allocator\n");
	else
		CHECK_EQ_INT(slow, 1);

	unwind_set_recording(false);
	unwind_uninstall(SIGPROF);
	return check_done();
}

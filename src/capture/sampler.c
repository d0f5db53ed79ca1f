/*
 * sampler — the CPU-stacks capture source (see sampler.h, docs/stacks.md).
 *
 * Timers. Each sampled thread gets one POSIX timer (timer_create with
 * SIGEV_THREAD_ID) on its own CPU-time clock, or on CLOCK_MONOTONIC with
 * the wall clock, armed only while a window records. A small sampler
 * thread, started by the first window, finds the threads by scanning
 * /proc/self/task every SCAN_MS while a window records (threads started
 * before and during the window), creates their timers, and deletes those
 * of threads that exited. The stepping thread only arms the existing timers
 * at window_open and disarms them at window_close. Timers survive between
 * windows (disarmed), so a thread's timer is created once.
 *
 * Signal. SIGPROF unless the application handles it (or the policy names
 * another); then the highest free real-time signal, said once at info. The
 * choice is re-checked at each window open and each scan, so an
 * application that installs its own SIGPROF handler later gets SIGPROF back
 * within a scan: the sampler moves its timers to a free signal.
 *
 * Never sampled: the host thread and the sampler thread (both block every
 * signal), and any thread whose name starts with "profhost".
 */
#include "sampler.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../events/clock.h"
#include "../events/evbuf.h"
#include "../host/host.h"
#include "../util/log.h"
#include "../util/wakeword.h"

#define SLOTS_MAX 1024       /* threads sampled at once (power of two) */
#define SCAN_MS 10           /* thread discovery period while recording */
#define TID_FREE 0
#define TID_GONE (-1)        /* tombstone in the slot table */
#define CLOSED_KEEP 8        /* closed windows whose counters are kept */

/* Counters of a closed window, for its collect. */
struct closed_counts {
	uint64_t gen;
	struct unwind_counts c;
	int signo;
};

static struct {
	struct host *h;
	bool on;                  /* init succeeded with anything to do */
	bool sampling;            /* prof.capture{cpu_samples} */
	bool range_stacks;
	bool wall;
	uint32_t hz, depth;
	int64_t period_ns;
	int want_signo;           /* configured signal, 0 = auto */

	struct sampler_slot slots[SLOTS_MAX];
	pthread_mutex_t timer_lock; /* timers: create/delete/arm/disarm */
	pthread_mutex_t sig_lock;   /* the signal choice */
	_Atomic int signo;          /* signal in use, 0 = none yet */
	bool told_signal, told_want, told_nosignal, told_full;

	pthread_t thread;
	bool thread_started;
	_Atomic uint32_t wake;    /* wake word (no descriptor: see wakeword.h) */
	_Atomic int recording;
	_Atomic int stop;
	_Atomic int32_t self_tid;
	_Atomic int window_on;      /* any window records (stack records) */
	_Atomic int32_t prewarm_tid;
	_Atomic uint32_t prewarm_epoch;

	pthread_mutex_t closed_lock;
	struct closed_counts closed[CLOSED_KEEP];

	struct symbols *sym;        /* host thread */
} smp;

/* ------------------------------------------------------------ config */

/* A signal's name for messages: "SIGPROF" or "SIGRTMIN+N". */
static void signal_name(int signo, char *buf, size_t size)
{
	if (signo == SIGPROF)
		snprintf(buf, size, "SIGPROF");
	else if (signo >= SIGRTMIN && signo <= SIGRTMAX)
		snprintf(buf, size, "SIGRTMIN+%d", signo - SIGRTMIN);
	else
		snprintf(buf, size, "signal %d", signo);
}

/* ------------------------------------------------------------ signal */

/* True when the application leaves `signo` alone (default or ignored). */
static bool signal_free(int signo)
{
	struct sigaction cur;

	if (sigaction(signo, NULL, &cur) != 0)
		return false;
	if (cur.sa_flags & SA_SIGINFO)
		return cur.sa_sigaction == unwind_handler;
	return cur.sa_handler == SIG_DFL || cur.sa_handler == SIG_IGN;
}

/* Makes sure the sampler owns a signal; returns it, or 0 when none is
 * free. Any thread (sig_lock). */
static int ensure_signal(void)
{
	int cur, s = 0, lost = 0, r;
	char name[32], prev[32];

	pthread_mutex_lock(&smp.sig_lock);
	cur = atomic_load(&smp.signo);
	if (cur && unwind_owns(cur)) {
		pthread_mutex_unlock(&smp.sig_lock);
		return cur;
	}
	if (cur) {
		/* The application installed its own handler: hand it over. */
		unwind_disown(cur);
		lost = cur;
	}
	if (smp.want_signo) {
		if (smp.want_signo != lost && signal_free(smp.want_signo))
			s = smp.want_signo;
		else if (!smp.told_want) {
			smp.told_want = true;
			signal_name(smp.want_signo, name, sizeof name);
			log_msg(LOG_WARN, "the application handles %s "
				"(prof.capture{cpu_samples.signal}): CPU samples "
				"use another signal", name);
		}
	}
	if (!s && lost != SIGPROF && signal_free(SIGPROF))
		s = SIGPROF;
	for (r = SIGRTMAX - 1; !s && r > SIGRTMIN; r--)
		if (r != lost && signal_free(r))
			s = r;
	if (s && unwind_install(s) != 0)
		s = 0;
	atomic_store(&smp.signo, s);
	unwind_set_block_signal(s);
	if (s && s != SIGPROF && s != smp.want_signo && !smp.told_signal) {
		smp.told_signal = true;
		signal_name(s, name, sizeof name);
		signal_name(lost ? lost : SIGPROF, prev, sizeof prev);
		log_msg(LOG_INFO, "the application handles %s: CPU samples use %s "
			"(signal %d) instead", prev, name, s);
	}
	if (!s && !smp.told_nosignal) {
		smp.told_nosignal = true;
		log_msg(LOG_WARN, "no free signal for CPU sampling: no samples "
			"are taken");
	}
	pthread_mutex_unlock(&smp.sig_lock);
	return s;
}

/* ------------------------------------------------------------ timers */

/* The kernel's clock id for thread `tid`'s CPU time (CPUCLOCK_SCHED of a
 * thread: ~tid << 3 | 6). */
static clockid_t thread_cpu_clock(int32_t tid)
{
	return (clockid_t)((~(uint32_t)tid << 3) | 6u);
}

/* Arms (or with `on` false disarms) a slot's timer. timer_lock held. */
static void slot_arm(struct sampler_slot *sl, bool on)
{
	struct itimerspec its;
	int64_t first = smp.period_ns;

	memset(&its, 0, sizeof its);
	if (on) {
		/* Stagger the threads' first ticks over one period. */
		first = smp.period_ns / 8 * (1 + (sl - smp.slots) % 8);
		if (first <= 0)
			first = 1;
		its.it_interval.tv_sec = smp.period_ns / 1000000000;
		its.it_interval.tv_nsec = smp.period_ns % 1000000000;
		its.it_value.tv_sec = first / 1000000000;
		its.it_value.tv_nsec = first % 1000000000;
	}
	timer_settime(sl->timer, 0, &its, NULL);
}

/* Deletes a slot's timer, if any. timer_lock held. */
static void slot_delete_timer(struct sampler_slot *sl)
{
	if (atomic_load(&sl->has_timer)) {
		atomic_store(&sl->has_timer, 0);
		timer_delete(sl->timer);
	}
}

/* (Re)creates a slot's timer on `signo`, armed when a window records.
 * Sampler thread. Returns 0 or -1 (the thread is gone). */
static int slot_create_timer(struct sampler_slot *sl, int signo)
{
	struct sigevent ev;
	int32_t tid = atomic_load(&sl->tid);
	clockid_t clk = smp.wall ? CLOCK_MONOTONIC : thread_cpu_clock(tid);
	int rc;

	memset(&ev, 0, sizeof ev);
	ev.sigev_notify = SIGEV_THREAD_ID;
	ev.sigev_signo = signo;
	ev.sigev_value.sival_ptr = sl;
	ev._sigev_un._tid = tid;
	pthread_mutex_lock(&smp.timer_lock);
	slot_delete_timer(sl);
	rc = timer_create(clk, &ev, &sl->timer);
	if (rc == 0) {
		sl->signo = signo;
		atomic_store(&sl->has_timer, 1);
		if (atomic_load(&smp.recording))
			slot_arm(sl, true);
	}
	pthread_mutex_unlock(&smp.timer_lock);
	return rc;
}

/* Arms or disarms every timer made for `signo` (0: any). timer_lock is
 * taken here. */
static void arm_all(bool on, int signo)
{
	size_t i;

	pthread_mutex_lock(&smp.timer_lock);
	for (i = 0; i < SLOTS_MAX; i++) {
		struct sampler_slot *sl = &smp.slots[i];

		if (atomic_load(&sl->tid) > 0 && atomic_load(&sl->has_timer) &&
		    (!signo || sl->signo == signo))
			slot_arm(sl, on);
	}
	pthread_mutex_unlock(&smp.timer_lock);
}

/* ------------------------------------------------------------ slots */

static size_t tid_hash(int32_t tid)
{
	return ((uint32_t)tid * 2654435761u) & (SLOTS_MAX - 1);
}

/* The slot of `tid`, or NULL. Any thread (racy but safe). */
static struct sampler_slot *slot_find(int32_t tid)
{
	size_t k = tid_hash(tid), n;

	for (n = 0; n < SLOTS_MAX; n++, k = (k + 1) & (SLOTS_MAX - 1)) {
		int32_t t = atomic_load(&smp.slots[k].tid);

		if (t == tid)
			return &smp.slots[k];
		if (t == TID_FREE)
			return NULL;
	}
	return NULL;
}

/* A new slot for `tid` (not present), or NULL when the table is full.
 * Sampler thread. */
static struct sampler_slot *slot_add(int32_t tid)
{
	size_t k = tid_hash(tid), n;

	for (n = 0; n < SLOTS_MAX; n++, k = (k + 1) & (SLOTS_MAX - 1)) {
		struct sampler_slot *sl = &smp.slots[k];
		int32_t t = atomic_load(&sl->tid);

		if (t == TID_FREE || t == TID_GONE) {
			atomic_store(&sl->has_timer, 0);
			atomic_store(&sl->epoch, 0);
			if (atomic_load(&smp.prewarm_tid) == tid)
				atomic_store(&sl->epoch, atomic_load(&smp.prewarm_epoch));
			sl->seen = 1;
			atomic_store(&sl->tid, tid);
			return sl;
		}
	}
	return NULL;
}

/* True when thread `tid` is one of profhost's own (by name). */
static bool is_profhost_thread(int32_t tid)
{
	char path[64], name[32];
	ssize_t n;
	int fd;

	snprintf(path, sizeof path, "/proc/self/task/%d/comm", (int)tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return true; /* gone already */
	n = read(fd, name, sizeof name - 1);
	close(fd);
	if (n <= 0)
		return true;
	name[n] = '\0';
	return strncmp(name, "profhost", 8) == 0;
}

/* One scan: timers for new threads, none for threads that exited.
 * Sampler thread. */
static void scan_threads(int signo)
{
	int32_t host_tid = atomic_load(&smp.h->ht.tid), me = atomic_load(&smp.self_tid);
	struct dirent *de;
	DIR *d;
	size_t i;

	for (i = 0; i < SLOTS_MAX; i++)
		smp.slots[i].seen = 0;
	d = opendir("/proc/self/task");
	if (!d)
		return;
	while ((de = readdir(d)) != NULL) {
		struct sampler_slot *sl;
		int32_t tid = (int32_t)atoi(de->d_name);

		/* Not seen: a slot made before their tid was known goes. */
		if (tid <= 0 || tid == me || tid == host_tid)
			continue;
		sl = slot_find(tid);
		if (sl) {
			sl->seen = 1;
			if (!atomic_load(&sl->has_timer) || sl->signo != signo)
				slot_create_timer(sl, signo);
			continue;
		}
		if (is_profhost_thread(tid))
			continue;
		sl = slot_add(tid);
		if (!sl) {
			if (!smp.told_full) {
				smp.told_full = true;
				log_msg(LOG_WARN, "more than %d threads: CPU samples "
					"cover the first %d only", SLOTS_MAX, SLOTS_MAX);
			}
			continue;
		}
		if (slot_create_timer(sl, signo) != 0) {
			atomic_store(&sl->tid, TID_GONE);
			continue;
		}
		log_msg(LOG_DEBUG, "sampling thread %d", (int)tid);
	}
	closedir(d);
	for (i = 0; i < SLOTS_MAX; i++) {
		struct sampler_slot *sl = &smp.slots[i];

		if (atomic_load(&sl->tid) > 0 && !sl->seen) {
			pthread_mutex_lock(&smp.timer_lock);
			slot_delete_timer(sl);
			pthread_mutex_unlock(&smp.timer_lock);
			atomic_store(&sl->tid, TID_GONE);
		}
	}
}

/* ------------------------------------------------------------ the thread */

static void *sampler_main(void *arg)
{
	(void)arg;
	atomic_store(&smp.self_tid, (int32_t)syscall(SYS_gettid));
	prctl(PR_SET_NAME, "profhost-smp", 0, 0, 0);
	while (!atomic_load(&smp.stop)) {
		int timeout = -1;

		if (atomic_load(&smp.recording)) {
			int s = ensure_signal();

			unwind_poll_loader();
			if (s)
				scan_threads(s);
			timeout = SCAN_MS;
		}
		wakeword_take(&smp.wake, timeout);
	}
	return NULL;
}

/* Starts the sampler thread with every signal blocked. Lock held by the
 * caller (window lock); cheap enough to do there once. */
static int start_thread(void)
{
	sigset_t all, old;
	int rc;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&smp.thread, NULL, sampler_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		log_msg(LOG_WARN, "cannot start the sampler thread: %s; no CPU "
			"samples", strerror(rc));
		return -1;
	}
	smp.thread_started = true;
	return 0;
}

/* Wakes the sampler thread ('O' a window opened, 'S' stop). Any thread. */
static void wake_thread(char c)
{
	if (smp.thread_started)
		wakeword_post(&smp.wake, (uint32_t)(unsigned char)c);
}

/* ------------------------------------------------------------ stacks */

int sampler_record_stack(unsigned kind, uint64_t id)
{
	uint64_t ips[SAMPLER_DEPTH_MAX];
	bool truncated;
	int n;

	if (!smp.on || !atomic_load_explicit(&smp.window_on, memory_order_relaxed))
		return -1;
	n = sampler_backtrace_now(ips, (int)smp.depth, &truncated);
	if (n <= 0)
		return -1;
	return smp.h->shim->evbuf_append_raw(EVBUF_STACK, clock_now_ns(), ips,
					     (uint32_t)(n * sizeof *ips), id,
					     (uint64_t)kind << 8 |
					     (truncated ? EVBUF_STACK_TRUNCATED : 0));
}

/* shim_api.set_range_pushed_hook: a stack for the range just pushed (on
 * the pushing thread, after its push record). */
static void range_pushed(void)
{
	sampler_record_stack(TRACE_STACK_RANGE, 0);
}


/* ------------------------------------------------------------ lifecycle */

/* capture_ops.init: start-up. Reads the policy; with nothing asked for,
 * every other callback stays idle. */
static int sampler_init(struct host *h, struct err *e)
{
	const struct policy_config *cfg = h->cfg;
	struct unwind_config uc;

	memset(&smp.slots, 0, sizeof smp.slots);
	atomic_store(&smp.stop, 0);
	smp.h = h;
	smp.sampling = cfg->capture.cpu_hz > 0;
	smp.range_stacks = cfg->capture.range_stacks;
	if (!smp.sampling && !smp.range_stacks && !cfg->capture.cuda_backtrace_us)
		return 0; /* nothing to do: every callback stays idle */
	smp.hz = cfg->capture.cpu_hz;
	smp.wall = cfg->capture.cpu_wall_clock;
	smp.depth = cfg->capture.cpu_depth ? cfg->capture.cpu_depth : 128;
	if (smp.depth > SAMPLER_DEPTH_MAX)
		smp.depth = SAMPLER_DEPTH_MAX;
	smp.period_ns = smp.hz ? 1000000000 / smp.hz : 0;
	smp.want_signo = cfg->capture.cpu_signal;
	memset(&uc, 0, sizeof uc);
	uc.append = h->shim->evbuf_append_raw;
	uc.slots = smp.slots;
	uc.nslots = SLOTS_MAX;
	uc.depth = smp.depth;
	if (unwind_setup(&uc) != 0)
		return err_set(e, "CPU stacks: cannot find libc's address range; "
			       "stacks are off");
	pthread_mutex_init(&smp.timer_lock, NULL);
	pthread_mutex_init(&smp.sig_lock, NULL);
	pthread_mutex_init(&smp.closed_lock, NULL);
	smp.on = true;
	if (smp.range_stacks && h->shim->set_range_pushed_hook)
		h->shim->set_range_pushed_hook(range_pushed);
	return 0;
}

/* Warms the stepping thread's unwinder here, outside any handler, so its
 * first sample needs no safe-point check. Window lock held. */
static void warm_stepping_thread(void)
{
	int32_t tid = (int32_t)syscall(SYS_gettid);
	struct sampler_slot *sl = slot_find(tid);
	uint32_t ep;

	if (sl) {
		unwind_warm_self(sl);
		return;
	}
	ep = unwind_warm_self(NULL);
	atomic_store(&smp.prewarm_epoch, ep);
	atomic_store(&smp.prewarm_tid, tid);
}

/* capture_ops.prepare: a window is about to open. Starts the sampler
 * thread and warms the stepping thread's unwinder now, so neither lands
 * in the window's first step. Stepping thread, window lock held. */
static void sampler_prepare(struct host *h)
{
	(void)h;
	if (!smp.on || !smp.sampling)
		return;
	if (!smp.thread_started && start_thread() != 0)
		return;
	warm_stepping_thread();
}

/* capture_ops.window_open: stepping thread, window lock held. Takes the
 * signal if needed, starts the sampler thread once, arms the timers of the
 * threads already known and wakes the thread to find the others. */
static void sampler_window_open(struct host *h, uint64_t gen)
{
	int s;

	(void)h;
	(void)gen;
	if (!smp.on)
		return;
	atomic_store(&smp.window_on, 1);
	if (!smp.sampling)
		return;
	s = ensure_signal();
	if (!s)
		return;
	unwind_set_recording(true);
	atomic_store(&smp.recording, 1);
	if (!smp.thread_started && start_thread() != 0) {
		atomic_store(&smp.recording, 0);
		unwind_set_recording(false);
		return;
	}
	warm_stepping_thread();
	arm_all(true, s);
	wake_thread('O');
}

/* capture_ops.window_close: stepping thread, window lock held. Disarms
 * every timer and keeps the window's counters for its collect. */
static void sampler_window_close(struct host *h, uint64_t gen)
{
	struct closed_counts *cc;

	(void)h;
	if (!smp.on)
		return;
	atomic_store(&smp.window_on, 0);
	if (!smp.sampling || !atomic_load(&smp.recording))
		return;
	atomic_store(&smp.recording, 0);
	unwind_set_recording(false);
	arm_all(false, 0);
	pthread_mutex_lock(&smp.closed_lock);
	cc = &smp.closed[gen % CLOSED_KEEP];
	cc->gen = gen;
	unwind_counts(&cc->c);
	cc->signo = atomic_load(&smp.signo);
	pthread_mutex_unlock(&smp.closed_lock);
}

/* Adds each timer sample to the trace's events, where the writers and the
 * reports read samples: an instant of cat cpu_sample on its thread, named
 * after its innermost function, with args "stack" (folded, outermost
 * first), "weight" (timer periods) and, when cut, "truncated" = 1.
 * 0 or -1 (t->oom). */
static int add_sample_events(struct trace *t)
{
	size_t i, cap = 4096, n;
	char *buf = malloc(cap), *p;
	int rc = 0;

	if (!buf)
		return -1;
	for (i = 0; i < t->nstacks && rc == 0; i++) {
		const struct trace_stack *s = &t->stacks[i];
		const struct trace_frame *leaf;
		struct trace_event e = { 0 };
		const char *stack;
		char hex[24];

		if (s->kind != TRACE_STACK_SAMPLE || s->depth == 0)
			continue;
		leaf = &t->frames[t->stack_frames[s->first]];
		e.ts = s->ts;
		e.pid = t->meta.pid;
		e.tid = s->tid;
		e.cat = TRACE_CAT_SAMPLE;
		e.ph = TRACE_PH_INSTANT;
		if (leaf->name != STRTAB_NONE) {
			e.name = leaf->name;
		} else {
			n = (size_t)snprintf(hex, sizeof hex, "0x%llx",
					     (unsigned long long)leaf->pc);
			e.name = trace_intern(t, hex, n);
		}
		if (s->folded != STRTAB_NONE) {
			stack = trace_str(t, s->folded);
			n = strtab_len(&t->names, s->folded);
		} else {
			n = trace_stack_fold(t, s, buf, cap);
			if (n + 1 > cap) {
				p = realloc(buf, n + 1);
				if (!p) {
					rc = -1;
					break;
				}
				buf = p;
				cap = n + 1;
				trace_stack_fold(t, s, buf, cap);
			}
			stack = buf;
		}
		if (e.name == STRTAB_NONE || !trace_add_event(t, &e) ||
		    trace_arg_str(t, TRACE_ARG_STACK, stack, n) != 0 ||
		    trace_arg_uint(t, "weight", s->weight) != 0 ||
		    ((s->flags & TRACE_STACK_TRUNCATED) &&
		     trace_arg_uint(t, "truncated", 1) != 0))
			rc = -1;
	}
	free(buf);
	return rc;
}

/* capture_ops.collect: host thread. Fills t->sampling, names the window's
 * stacks (see symbols_resolve_trace) and adds the samples as events. */
static int sampler_collect(struct host *h, const struct host_job *job,
			   struct trace *t, struct err *e)
{
	(void)h;
	if (!smp.on)
		return 0;
	if (smp.sampling) {
		struct closed_counts cc;

		pthread_mutex_lock(&smp.closed_lock);
		cc = smp.closed[job->gen % CLOSED_KEEP];
		pthread_mutex_unlock(&smp.closed_lock);
		t->sampling.hz = smp.hz;
		t->sampling.depth = smp.depth;
		t->sampling.period_ns = smp.period_ns;
		t->sampling.wall_clock = smp.wall;
		if (cc.gen == job->gen && job->gen) {
			t->sampling.signal = cc.signo;
			t->sampling.lost = cc.c.lost;
			t->sampling.slow = cc.c.slow;
		}
	}
	if (t->nstacks == 0)
		return 0;
	if (!smp.sym)
		smp.sym = symbols_new();
	if (!smp.sym || symbols_resolve_trace(smp.sym, t) != 0) {
		add_sample_events(t);
		return err_set(e, "out of memory naming the CPU stacks of window "
			       "%u: they show as addresses", job->window);
	}
	if (add_sample_events(t) != 0)
		return err_set(e, "out of memory adding the CPU samples of window "
			       "%u to its trace", job->window);
	return 0;
}

/* capture_ops.fini: the exiting thread, after the last window. Stops the
 * sampler thread, deletes the timers and gives the signal back. */
static void sampler_fini(struct host *h)
{
	size_t i;
	int s;

	(void)h;
	if (!smp.on)
		return;
	atomic_store(&smp.recording, 0);
	unwind_set_recording(false);
	if (smp.thread_started) {
		atomic_store(&smp.stop, 1);
		wake_thread('S');
		pthread_join(smp.thread, NULL);
		smp.thread_started = false;
	}
	pthread_mutex_lock(&smp.timer_lock);
	for (i = 0; i < SLOTS_MAX; i++)
		slot_delete_timer(&smp.slots[i]);
	pthread_mutex_unlock(&smp.timer_lock);
	s = atomic_load(&smp.signo);
	if (s) {
		unwind_uninstall(s);
		unwind_disown(s);
		atomic_store(&smp.signo, 0);
		unwind_set_block_signal(0);
	}
	if (smp.range_stacks && smp.h->shim->set_range_pushed_hook)
		smp.h->shim->set_range_pushed_hook(NULL);
	symbols_free(smp.sym);
	smp.sym = NULL;
	smp.on = false;
}

const struct capture_ops sampler_capture = {
	.name = "cpu stacks",
	.init = sampler_init,
	.window_open = sampler_window_open,
	.window_close = sampler_window_close,
	.prepare = sampler_prepare,
	.collect = sampler_collect,
	.fini = sampler_fini,
};

/*
 * sampler — the CPU-stacks capture source (see sampler.h, docs/stacks.md).
 *
 * Threads and timers. A small sampler thread, started by the first window
 * that samples, finds the process's threads by scanning /proc/self/task
 * every SCAN_MS while a window records (threads started before and during
 * the window) and forgets those that exited. With the CPU-time clock each
 * thread gets one POSIX timer (timer_create with SIGEV_THREAD_ID) on its
 * own CPU-time clock, armed only while a window records: the stepping
 * thread arms the existing timers at window_open and disarms them at
 * window_close; timers survive between windows (disarmed), so a thread's
 * timer is created once. With the wall clock there are no timers: the
 * sampler thread ticks once per period itself and signals only the threads
 * that ran since their last sample (wallclock.c).
 *
 * Settings. prof.capture{cpu_samples, range_stacks} are read at each
 * window open (a live prof.capture{} from the REPL applies from the next
 * window on); each closed window keeps the settings it recorded with.
 * Nothing is set up in a process that never asks for stacks.
 *
 * Signal. SIGPROF unless the application handles it (or the policy names
 * another); then the highest free real-time signal, said once at info. The
 * choice is re-checked at each window open and each scan, so an
 * application that installs its own SIGPROF handler later gets SIGPROF back
 * within a scan: the sampler moves its timers to a free signal.
 *
 * Never sampled: profhost's own threads. Each is created with every signal
 * blocked (its mask, inherited from birth, says so before it has named
 * itself) and named "profhost-..."; a scan gives no timer to a thread
 * named so, nor, for now, to one that blocks the sampling signal (it is
 * looked at again at the next scan, then less and less often).
 *
 * Descriptors. A scan's /proc files (the task folder, each new thread's
 * status) are opened, read and closed by privfd's reader, in a descriptor
 * table of its own: a program that closes every descriptor (a daemon)
 * and opens its files under the freed numbers while a scan runs cannot
 * have them read or closed by the scan (issue #25).
 */
#include "sampler.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../../common/clock.h"
#include "../../common/evformat.h"
#include "../../common/log.h"
#include "../../util/privfd.h"
#include "../../util/wakeword.h"
#include "../python/pystacks.h"

#define SLOTS_MAX 1024       /* threads sampled at once (power of two) */
#define SCAN_MS 10           /* thread discovery period while recording */
#define TID_FREE 0
#define TID_GONE (-1)        /* tombstone in the slot table */
#define CLOSED_KEEP 8        /* closed windows whose counters are kept */
#define BLOCKING_SCANS 10    /* most scans between looks at a blocking thread */

/* What a window asks of the sampler (prof.capture{}). */
struct smp_settings {
	bool sampling;            /* cpu_samples */
	bool wall;                /* cpu_samples.clock = "wall" */
	bool range_stacks;
	bool cuda_stacks;         /* cuda_backtrace */
	uint32_t hz, depth;
	int64_t period_ns;
	int want_signo;           /* cpu_samples.signal, 0 = auto */
};

/* Counters and settings of a closed window, for its collect. */
struct closed_counts {
	uint64_t gen;
	struct unwind_counts c;
	int signo;
	struct smp_settings set;
};

static struct {
	const struct capture_host *h;
	bool ready;               /* set up: unwind ranges, pipe */
	bool failed;              /* setting up failed (said once) */
	struct smp_settings set;  /* the last window opened with: stepping
				     thread, window lock */
	bool hooked;              /* the range-push hook is ours */
	_Atomic int wall;         /* the recording window's, for the sampler */
	_Atomic int64_t period_ns;
	_Atomic uint64_t gen;
	_Atomic uint32_t depth;   /* frames of stacks taken on purpose */
	bool told_rate;           /* host thread */

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
	int32_t *tids;              /* the last scan's thread ids (sampler */
	size_t ntids, tids_cap;     /* thread) */
	_Atomic int window_on;      /* any window records (stack records) */
	_Atomic int gen_rec;        /* smp.gen is a recorder segment's */
	bool rec_on;                /* sampling for the flight recorder
				       (stepping thread, window lock) */
	_Atomic int32_t prewarm_tid;
	_Atomic uint32_t prewarm_epoch;
	_Atomic uintptr_t prewarm_at, prewarm_ra;

	pthread_mutex_t closed_lock;
	struct closed_counts closed[CLOSED_KEEP];
	struct closed_counts rec;   /* the recorder's settings (gen unused),
				       for a dump's collect */

	struct symbols *sym;        /* host thread */
} smp = {
	.timer_lock = PTHREAD_MUTEX_INITIALIZER,
	.sig_lock = PTHREAD_MUTEX_INITIALIZER,
	.closed_lock = PTHREAD_MUTEX_INITIALIZER,
};

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

/* Makes sure the sampler owns a signal, `want` (cpu_samples.signal) if
 * free, else SIGPROF or a free real-time signal; returns it, or 0 when
 * none is free. Any thread (sig_lock). */
static int ensure_signal(int want)
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
	if (want) {
		if (want != lost && signal_free(want))
			s = want;
		else if (!smp.told_want) {
			smp.told_want = true;
			signal_name(want, name, sizeof name);
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
	if (smp.h && smp.h->sample_signal)
		smp.h->sample_signal(s); /* for a salvage */
	if (s && s != SIGPROF && s != want && !smp.told_signal) {
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

/* Arms (or with `on` false disarms) a slot's timer. timer_lock held. */
static void slot_arm(struct sampler_slot *sl, bool on)
{
	struct itimerspec its;
	int64_t period = atomic_load(&smp.period_ns), first;

	memset(&its, 0, sizeof its);
	if (on) {
		/* Stagger the threads' first ticks over one period. */
		first = period / 8 * (1 + (sl - smp.slots) % 8);
		if (first <= 0)
			first = 1;
		its.it_interval.tv_sec = period / 1000000000;
		its.it_interval.tv_nsec = period % 1000000000;
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

/* (Re)creates a slot's timer on `signo` and the thread's CPU-time clock,
 * armed when a window records. Sampler thread. Returns 0 or -1 (the thread
 * is gone). */
static int slot_create_timer(struct sampler_slot *sl, int signo)
{
	struct sigevent ev;
	int32_t tid = atomic_load(&sl->tid);
	clockid_t clk = wallclock_thread_cpu_clock(tid);
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

/* Deletes every timer (the wall clock needs none). timer_lock is taken
 * here. */
static void delete_all_timers(void)
{
	size_t i;

	pthread_mutex_lock(&smp.timer_lock);
	for (i = 0; i < SLOTS_MAX; i++)
		slot_delete_timer(&smp.slots[i]);
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
			sl->own = false;
			sl->blocking = sl->backoff = 0;
			sl->wall_gen = 0;
			atomic_store(&sl->sent, atomic_load(&sl->handled));
			atomic_store(&sl->entry_at, 0);
			atomic_store(&sl->entry_ra, 0);
			if (atomic_load(&smp.prewarm_tid) == tid) {
				atomic_store(&sl->entry_at, atomic_load(&smp.prewarm_at));
				atomic_store(&sl->entry_ra, atomic_load(&smp.prewarm_ra));
				atomic_store(&sl->epoch, atomic_load(&smp.prewarm_epoch));
			}
			sl->seen = 1;
			atomic_store(&sl->tid, tid);
			return sl;
		}
	}
	return NULL;
}

/* Keeps `sl`'s thread unsampled: for good when it is profhost's own, else
 * (it blocks the sampling signal) until a later scan looks again: the next
 * one at first (the block may be momentary), then twice as many scans
 * each time, up to BLOCKING_SCANS. Sampler thread. */
static void slot_exclude(struct sampler_slot *sl, bool own)
{
	pthread_mutex_lock(&smp.timer_lock);
	slot_delete_timer(sl);
	pthread_mutex_unlock(&smp.timer_lock);
	sl->own = own;
	sl->backoff = own ? 0 : sl->backoff ? 2 * sl->backoff : 1;
	if (sl->backoff > BLOCKING_SCANS)
		sl->backoff = BLOCKING_SCANS;
	sl->blocking = sl->backoff;
}

/* What a scan finds of a thread it has no timer for. */
enum thread_kind {
	THREAD_SAMPLE,    /* sample it */
	THREAD_OWN,       /* one of profhost's (by name): never */
	THREAD_BLOCKING,  /* blocks the sampling signal now: look again later */
	THREAD_GONE,
};

/* The hexadecimal mask after `key` in /proc status text, or 0. */
static uint64_t status_mask(const char *text, const char *key)
{
	const char *p = strstr(text, key);

	return p ? strtoull(p + strlen(key), NULL, 16) : 0;
}

/* Reads thread `tid`'s name and blocked signals from /proc/self/task (on
 * privfd's reader). Every thread of profhost's own is created with all
 * signals blocked (the C threads and the Python bridge's), so it counts
 * as blocking from its first instruction, before it names itself
 * "profhost-...". Sampler thread. */
static enum thread_kind thread_kind(int32_t tid, int signo)
{
	char path[64], text[2048];

	snprintf(path, sizeof path, "/proc/self/task/%d/status", (int)tid);
	if (privfd_read(path, text, sizeof text) <= 0)
		return THREAD_GONE;
	if (strncmp(text, "Name:\tprofhost", 14) == 0)
		return THREAD_OWN;
	if (status_mask(text, "\nSigBlk:\t") & (1ull << (signo - 1)))
		return THREAD_BLOCKING;
	return THREAD_SAMPLE;
}

/* One scan: slots (and with `timers`, timers) for new threads, none for
 * threads that exited. Sampler thread. */
static void scan_threads(int signo, bool timers)
{
	int32_t me = atomic_load(&smp.self_tid);
	size_t i, k;

	for (i = 0; i < SLOTS_MAX; i++)
		smp.slots[i].seen = 0;
	if (privfd_list_ids("/proc/self/task", &smp.tids, &smp.ntids,
			    &smp.tids_cap) != 0)
		return;
	for (k = 0; k < smp.ntids; k++) {
		struct sampler_slot *sl;
		int32_t tid = smp.tids[k];
		enum thread_kind kind;
		bool recheck;

		/* Not seen: a slot made before their tid was known goes. */
		if (tid <= 0 || tid == me || smp.h->own_thread(smp.h->ctx, tid))
			continue;
		sl = slot_find(tid);
		if (sl) {
			sl->seen = 1;
			if (sl->own)
				continue;
			recheck = sl->blocking && --sl->blocking == 0;
			if (sl->blocking)
				continue;
			if (recheck || (timers && (!atomic_load(&sl->has_timer) ||
						   sl->signo != signo))) {
				kind = thread_kind(tid, signo);
				if (kind == THREAD_OWN || kind == THREAD_BLOCKING)
					slot_exclude(sl, kind == THREAD_OWN);
				else if (!timers || slot_create_timer(sl, signo) == 0)
					sl->backoff = 0;
			}
			continue;
		}
		kind = thread_kind(tid, signo);
		if (kind == THREAD_GONE)
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
		if (kind != THREAD_SAMPLE) {
			slot_exclude(sl, kind == THREAD_OWN);
			continue;
		}
		if (timers && slot_create_timer(sl, signo) != 0) {
			atomic_store(&sl->tid, TID_GONE);
			continue;
		}
		log_msg(LOG_DEBUG, "sampling thread %d", (int)tid);
	}
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

/* Sleeps until `deadline` (host clock ns; -1: until woken) or a post on
 * the wake word. Sampler thread. */
static void sleep_until(int64_t deadline)
{
	int64_t d = 0;

	if (deadline >= 0) {
		d = deadline - clock_now_ns();
		if (d <= 0)
			return;
	}
	wakeword_take(&smp.wake, deadline >= 0 ? d : -1);
}

/* The sampler thread: while a window records, a scan every SCAN_MS and,
 * with the wall clock, a tick every period; asleep between windows. */
static void *sampler_main(void *arg)
{
	uint64_t gen = 0, tick = 0, k;
	int64_t base = 0, period, next_scan = 0, now, deadline;
	int s = 0;
	bool wall;

	(void)arg;
	atomic_store(&smp.self_tid, (int32_t)syscall(SYS_gettid));
	prctl(PR_SET_NAME, "profhost-smp", 0, 0, 0);
	prctl(PR_SET_TIMERSLACK, 1000, 0, 0, 0); /* ticks of a millisecond */
	if (unwind_learn_entry() != 0)
		log_msg(LOG_DEBUG, "CPU stacks: thread start code not found; "
			"exiting threads are not told apart");
	while (!atomic_load(&smp.stop)) {
		deadline = -1;
		if (atomic_load_explicit(&smp.recording, memory_order_acquire)) {
			wall = atomic_load(&smp.wall);
			period = atomic_load(&smp.period_ns);
			now = clock_now_ns();
			if (atomic_load(&smp.gen) != gen) { /* a new window */
				gen = atomic_load(&smp.gen);
				base = now;
				tick = 0;
				next_scan = now;
				if (wall)
					wallclock_open(gen, atomic_load(&smp.gen_rec));
			}
			if (now >= next_scan) {
				s = ensure_signal(smp.set.want_signo);
				unwind_poll_loader();
				/* the salvage file's module table, for naming
				 * these samples after a SIGKILL */
				if (smp.h->shim->salvage_modules)
					smp.h->shim->salvage_modules();
				if (s)
					scan_threads(s, !wall);
				next_scan = now + SCAN_MS * 1000000LL;
			}
			deadline = next_scan;
			if (wall && s && period > 0) {
				k = (uint64_t)((now - base) / period) + 1;
				if (k > tick) {
					tick = k;
					wallclock_tick(smp.slots, SLOTS_MAX, gen, s, now, tick);
				}
				if (base + (int64_t)tick * period < deadline)
					deadline = base + (int64_t)tick * period;
			}
		}
		sleep_until(deadline);
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
	int64_t ts = clock_now_ns();
	bool truncated;
	int n;

	if (!smp.ready || !atomic_load_explicit(&smp.window_on, memory_order_relaxed))
		return -1;
	n = sampler_backtrace_now(ips, (int)atomic_load(&smp.depth), &truncated);
	if (n <= 0)
		return -1;
	/* In Python, with the GIL: the Python frames of this very moment. */
	pystacks_capture_now((int32_t)syscall(SYS_gettid), ts);
	return smp.h->shim->evbuf_append_raw(EVBUF_STACK, ts, ips,
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

/* What the policy's prof.capture{} asks of the sampler. */
static struct smp_settings settings_of(const struct policy_config *cfg)
{
	struct smp_settings set;

	memset(&set, 0, sizeof set);
	set.sampling = cfg->capture.cpu_hz > 0;
	set.wall = set.sampling && cfg->capture.cpu_wall_clock;
	set.range_stacks = cfg->capture.range_stacks;
	set.cuda_stacks = cfg->capture.cuda_backtrace_us > 0;
	set.hz = cfg->capture.cpu_hz;
	set.depth = cfg->capture.cpu_depth ? cfg->capture.cpu_depth : 128;
	if (set.depth > SAMPLER_DEPTH_MAX)
		set.depth = SAMPLER_DEPTH_MAX;
	set.period_ns = set.hz ? 1000000000 / set.hz : 0;
	set.want_signo = cfg->capture.cpu_signal;
	return set;
}

/* True when `set` asks for any stack. */
static bool wants_stacks(const struct smp_settings *set)
{
	return set->sampling || set->range_stacks || set->cuda_stacks;
}

/* Sets up what every stack needs: the handler's address ranges and the
 * wake pipe. Once; start-up or the first window asking for stacks. */
static int setup(const struct capture_host *h, struct err *e)
{
	struct unwind_config uc;

	memset(&uc, 0, sizeof uc);
	uc.append = h->shim->evbuf_append_raw;
	uc.slots = smp.slots;
	uc.nslots = SLOTS_MAX;
	uc.depth = smp.set.depth;
	if (unwind_setup(&uc) != 0)
		return err_set(e, "CPU stacks: cannot find libc's address range; "
			       "stacks are off");
	smp.ready = true;
	return 0;
}

/* Applies the window's settings: the range-push hook, the depth. Window
 * lock held. */
static void apply_settings(const struct smp_settings *set)
{
	if (set->range_stacks != smp.hooked && smp.h->shim->set_range_pushed_hook) {
		smp.h->shim->set_range_pushed_hook(set->range_stacks ? range_pushed : NULL);
		smp.hooked = set->range_stacks;
	}
	atomic_store(&smp.depth, set->depth);
	unwind_set_depth(set->depth);
	if (set->sampling && set->wall)
		delete_all_timers(); /* the CPU-time clock's, from before */
	smp.set = *set;
	atomic_store(&smp.wall, set->wall);
	atomic_store(&smp.period_ns, set->period_ns);
}

/* capture_ops.init: start-up. Reads the policy; with no stacks asked for,
 * nothing is set up (a window asking later does it). */
static int sampler_init(const struct capture_host *h, struct err *e)
{
	memset(&smp.slots, 0, sizeof smp.slots);
	atomic_store(&smp.stop, 0);
	smp.h = h;
	smp.set = settings_of(h->cfg);
	if (!wants_stacks(&smp.set))
		return 0;
	if (setup(h, e) != 0)
		return -1;
	apply_settings(&smp.set);
	return 0;
}

/* True when the stepping thread `tid` (slot `sl`, or none yet) was warmed
 * at the current loader epoch: by prepare, or by a sample's check. */
static bool stepping_thread_warm(int32_t tid, const struct sampler_slot *sl)
{
	uint32_t ep = unwind_epoch();

	if (sl)
		return atomic_load(&sl->epoch) == ep;
	return atomic_load(&smp.prewarm_tid) == tid &&
	       atomic_load(&smp.prewarm_epoch) == ep;
}

/* Warms the stepping thread's unwinder here, outside any handler, so its
 * first sample needs no safe-point check; once per loader epoch (a warm
 * unwind of the whole stack costs tens of microseconds: prepare pays it
 * in the step before the window, and the opening does not pay it again).
 * Window lock held. */
static void warm_stepping_thread(void)
{
	int32_t tid = (int32_t)syscall(SYS_gettid);
	struct sampler_slot *sl = slot_find(tid);
	uintptr_t at, ra;
	uint32_t ep;

	if (stepping_thread_warm(tid, sl))
		return;
	ep = unwind_warm_self(sl, &at, &ra);
	if (sl)
		return;
	atomic_store(&smp.prewarm_at, at);
	atomic_store(&smp.prewarm_ra, ra);
	atomic_store(&smp.prewarm_epoch, ep);
	atomic_store(&smp.prewarm_tid, tid);
}

/* Sets up on the first window asking for stacks (said once when it
 * fails). Returns whether the sampler is set up. Window lock held. */
static bool ensure_setup(void)
{
	struct err e;

	if (smp.ready)
		return true;
	if (smp.failed)
		return false;
	if (setup(smp.h, &e) != 0) {
		smp.failed = true;
		log_msg(LOG_WARN, "%s", e.msg);
		return false;
	}
	return true;
}

/* capture_ops.prepare: a window is about to open. Sets up, takes the
 * signal, starts the sampler thread and warms the stepping thread's
 * unwinder now, so none of it lands in the window's first step. Stepping
 * thread, window lock held. */
static void sampler_prepare(void)
{
	struct smp_settings set = settings_of(smp.h->cfg);

	/* The salvage file's module table, so the window's stacks can be
	 * named after a SIGKILL: here for stacks taken on purpose (no
	 * sampler thread then), cheap when the loader's list is unchanged;
	 * while it samples the sampler thread keeps it up to date. */
	if (wants_stacks(&set) && smp.h->shim->salvage_modules)
		smp.h->shim->salvage_modules();
	if (!set.sampling || !ensure_setup())
		return;
	if (!ensure_signal(set.want_signo))
		return;
	if (!smp.thread_started && start_thread() != 0)
		return;
	warm_stepping_thread();
}

/* Starts sampling into generation `gen` (`rec`: a recorder segment's)
 * with `set` on signal `s`: the sampler thread (started once), the
 * stepping thread warmed, the timers armed (CPU-time clock). Returns false
 * when the thread could not start (nothing samples). Stepping thread,
 * window lock held. */
static bool start_sampling(uint64_t gen, bool rec, const struct smp_settings *set, int s)
{
	atomic_store(&smp.gen_rec, rec);
	atomic_store(&smp.gen, gen);
	unwind_set_recording(true);
	atomic_store_explicit(&smp.recording, 1, memory_order_release);
	if (!smp.thread_started && start_thread() != 0) {
		atomic_store(&smp.recording, 0);
		unwind_set_recording(false);
		return false;
	}
	warm_stepping_thread();
	if (!set->wall)
		arm_all(true, s);
	wake_thread('O');
	return true;
}

/* capture_ops.window_open: stepping thread, window lock held. Reads the
 * window's settings, sets up on the first window asking for stacks (unless
 * prepare did), takes the signal if needed, starts the sampler thread once,
 * arms the timers of the threads already known (CPU-time clock) and wakes
 * the thread to find the others (and, with the wall clock, to tick). */
static void sampler_window_open(uint64_t gen)
{
	struct smp_settings set = settings_of(smp.h->cfg);
	int s;

	if (!wants_stacks(&set) && !smp.ready) {
		smp.set = set;
		return;
	}
	if (!ensure_setup())
		return;
	apply_settings(&set);
	atomic_store(&smp.window_on, wants_stacks(&set));
	if (!set.sampling)
		return;
	s = ensure_signal(set.want_signo);
	if (s)
		start_sampling(gen, false, &set, s);
}

/* capture_recorder_ops.segment: stepping thread (or the thread ending the
 * process), window lock held. With prof.capture{cpu_samples} and
 * prof.recorder{cpu_samples}, samples what the recorder's segments hold as
 * a window would (its first segment arms the timers, each rotation starts
 * the wall clock's repeats anew, 0 disarms); its settings are kept for a
 * dump's collect. A window opening stops the recorder first. */
static void sampler_recorder(uint64_t gen)
{
	struct smp_settings set;
	int s;

	if (gen && smp.rec_on) { /* a rotation */
		atomic_store(&smp.gen_rec, 1);
		atomic_store(&smp.gen, gen);
		return;
	}
	if (!gen) {
		if (!smp.rec_on)
			return;
		smp.rec_on = false;
		atomic_store(&smp.recording, 0);
		unwind_set_recording(false);
		if (!smp.set.wall)
			arm_all(false, 0);
		return;
	}
	set = settings_of(smp.h->cfg);
	if (!set.sampling || !smp.h->cfg->recorder.cpu_samples || !ensure_setup())
		return;
	apply_settings(&set);
	s = ensure_signal(set.want_signo);
	if (!s)
		return;
	pthread_mutex_lock(&smp.closed_lock);
	memset(&smp.rec, 0, sizeof smp.rec);
	smp.rec.set = set;
	smp.rec.signo = s;
	pthread_mutex_unlock(&smp.closed_lock);
	smp.rec_on = start_sampling(gen, true, &set, s);
}

/* capture_ops.window_close: stepping thread, window lock held. Disarms
 * every timer and keeps the window's counters and settings for its
 * collect. */
static void sampler_window_close(uint64_t gen)
{
	struct closed_counts *cc;

	if (!smp.ready)
		return;
	atomic_store(&smp.window_on, 0);
	pthread_mutex_lock(&smp.closed_lock);
	cc = &smp.closed[gen % CLOSED_KEEP];
	memset(cc, 0, sizeof *cc);
	cc->gen = gen;
	cc->set = smp.set;
	if (atomic_load(&smp.recording)) {
		atomic_store(&smp.recording, 0);
		unwind_set_recording(false);
		if (!smp.set.wall)
			arm_all(false, 0);
		unwind_counts(&cc->c);
		cc->signo = atomic_load(&smp.signo);
	} else {
		cc->set.sampling = false; /* no signal: nothing was sampled */
	}
	pthread_mutex_unlock(&smp.closed_lock);
}

/* Says once when the clock gave far fewer samples than asked: CPU-time
 * timers are checked at the kernel's tick (250 Hz here), so each sample
 * stands for several periods. `samples` samples stood for `periods`
 * periods. Host thread. */
static void tell_rate(const struct smp_settings *set, uint64_t samples,
		      uint64_t periods)
{
	uint32_t given;

	if (smp.told_rate || samples < 20 || !periods)
		return;
	given = (uint32_t)((double)set->hz * (double)samples / (double)periods + 0.5);
	if (given >= set->hz * 8 / 10)
		return;
	smp.told_rate = true;
	log_msg(LOG_WARN, "prof.capture{cpu_samples.hz = %u}: the %s clock gave "
		"about %u samples per second and thread (%s); each sample stands "
		"for the periods it covers, so times stay right (the rate given "
		"is in summary.txt)", set->hz, set->wall ? "wall" : "CPU-time",
		given, set->wall ? "the sampler thread could not keep up" :
		"the kernel checks CPU-time timers at its tick");
}

/* capture_ops.collect: host thread. Fills t->sampling, adds the wall
 * clock's repeated samples, names the window's stacks (see
 * symbols_resolve_trace) and adds the samples as events. */
static int sampler_collect(const struct capture_window *job, struct trace *t,
			   struct err *e)
{
	struct closed_counts cc;
	uint64_t periods, samples = 0;
	size_t i;

	if (!smp.ready)
		return 0;
	pthread_mutex_lock(&smp.closed_lock);
	if (job->dump) {
		cc = smp.rec;
		cc.gen = 0;
	} else {
		cc = smp.closed[job->gen % CLOSED_KEEP];
	}
	pthread_mutex_unlock(&smp.closed_lock);
	if (job->dump && cc.set.sampling) {
		uint32_t i;

		t->sampling.hz = cc.set.hz;
		t->sampling.depth = cc.set.depth;
		t->sampling.period_ns = cc.set.period_ns;
		t->sampling.wall_clock = cc.set.wall;
		t->sampling.signal = cc.signo;
		for (i = 0; cc.set.wall && i < job->ngens; i++)
			if (wallclock_merge(job->gens[i], job->start_ts, t,
					    &t->sampling.lost) != 0)
				return err_set(e, "out of memory adding the wall-clock "
					       "samples of recorder dump %u", job->window);
	} else if (cc.gen == job->gen && job->gen && cc.set.sampling) {
		t->sampling.hz = cc.set.hz;
		t->sampling.depth = cc.set.depth;
		t->sampling.period_ns = cc.set.period_ns;
		t->sampling.wall_clock = cc.set.wall;
		t->sampling.signal = cc.signo;
		t->sampling.lost = cc.c.lost;
		t->sampling.slow = cc.c.slow;
		if (cc.set.wall &&
		    wallclock_merge(job->gen, INT64_MIN, t, &t->sampling.lost) != 0)
			return err_set(e, "out of memory adding the wall-clock samples "
				       "of window %u", job->window);
	}
	if (t->nstacks == 0)
		return 0;
	if (!smp.sym)
		smp.sym = symbols_new();
	if (!smp.sym || symbols_resolve_trace(smp.sym, t) != 0) {
		symbols_sample_events(t, &periods);
		return err_set(e, "out of memory naming the CPU stacks of window "
			       "%u: they show as addresses", job->window);
	}
	if (symbols_sample_events(t, &periods) != 0)
		return err_set(e, "out of memory adding the CPU samples of window "
			       "%u to its trace", job->window);
	for (i = 0; i < t->nstacks; i++)
		samples += t->stacks[i].kind == TRACE_STACK_SAMPLE;
	if (t->sampling.hz)
		tell_rate(&cc.set, samples, periods);
	return 0;
}

/* capture_ops.fini: the exiting thread, after the last window. Stops the
 * sampler thread, deletes the timers and gives the signal back. */
static void sampler_fini(void)
{
	int s;

	if (!smp.ready)
		return;
	atomic_store(&smp.recording, 0);
	unwind_set_recording(false);
	if (smp.thread_started) {
		atomic_store(&smp.stop, 1);
		wake_thread('S');
		pthread_join(smp.thread, NULL);
		smp.thread_started = false;
	}
	free(smp.tids);
	smp.tids = NULL;
	smp.ntids = smp.tids_cap = 0;
	delete_all_timers();
	s = atomic_load(&smp.signo);
	if (s) {
		unwind_uninstall(s);
		unwind_disown(s);
		atomic_store(&smp.signo, 0);
		unwind_set_block_signal(0);
	}
	if (smp.hooked && smp.h->shim->set_range_pushed_hook)
		smp.h->shim->set_range_pushed_hook(NULL);
	smp.hooked = false;
	symbols_free(smp.sym);
	smp.sym = NULL;
	wallclock_fini();
	smp.ready = false;
}

/* capture_recorder_ops.dump_taken: the dump takes the recorder's segments, their
 * wall-clock repeats stay for its collect. Window lock held. */
static void sampler_dump_taken(void)
{
	wallclock_rec_dumped();
}

/* The sampler samples between windows for the recorder too. */
static const struct capture_recorder_ops sampler_recorder_ops = {
	.segment = sampler_recorder,
	.dump_taken = sampler_dump_taken,
};

const struct capture_ops sampler_capture = {
	.name = "cpu stacks",
	.init = sampler_init,
	.window_open = sampler_window_open,
	.window_close = sampler_window_close,
	.prepare = sampler_prepare,
	.collect = sampler_collect,
	.fini = sampler_fini,
	.recorder = &sampler_recorder_ops,
};

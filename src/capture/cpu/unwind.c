/*
 * unwind — the part of the sampler that runs on sampled threads (see
 * sampler.h).
 *
 * The handler is async-signal-safe: no malloc, no locks, no stdio. It
 * unwinds with libunwind's unw_backtrace (its per-thread frame cache makes
 * a warm unwind well under a microsecond) into an array on the interrupted
 * thread's stack, drops the frames of the handler itself (everything above
 * the interrupted instruction, which the signal's ucontext names), and
 * appends one EVBUF_SAMPLE record through the shim.
 *
 * One hazard lies inside unw_backtrace: its frame cache hangs off
 * thread-local storage of a library that was dlopen'ed (libunwind, the
 * core's dependency), and glibc allocates such storage with malloc on a
 * thread's first access (and may free or grow it after modules were loaded
 * or unloaded). Calling malloc from a handler that interrupted malloc
 * deadlocks. So a thread not yet known to be safe (its first sample, and
 * its first after the loader's module list changed: the "epoch", polled by
 * the sampler thread) is unwound with libunwind's step-by-step unwinder
 * started from the signal's context, which touches no thread-local storage
 * (about a microsecond more per frame). When none of its frames lies in
 * the allocator's code (libc's or an interposed malloc's: its exported
 * functions and the static helpers of its source around them) or in the
 * dynamic loader, the thread holds no allocator lock: that sample takes
 * the unw_backtrace path, which does the allocation there and then, and
 * the thread is marked safe for the epoch.
 *
 * Threads starting or exiting. glibc's start_thread runs code of its own
 * around the thread's start routine: at exit, TLS destructors, key
 * destructors (libunwind's frees its cache there), the allocator's
 * per-thread state (__malloc_arena_thread_freeres holds the allocator's
 * free_list_lock) and, for a detached thread, its TLS blocks. None of this
 * is a named, exported function, and a thread there may hold allocator
 * locks or have no TLS left, so the handler recognises the state itself:
 * the sampler thread, a thread like any other, learns start_thread's code
 * range from its own stack (unwind_learn_entry). A stack on which
 * start_thread calls anything of its own module (libc), or is itself the
 * innermost frame, is a thread starting or exiting: unsafe. On a normal
 * stack, start_thread's return address lies at a fixed place of the
 * thread's stack (x86-64: below the start routine's canonical frame
 * address); the slot remembers where and what, and every later sample
 * compares that one word before the fast path: once the start routine has
 * returned, start_thread's next call writes another return address there,
 * and the thread's samples go back to the checked, step-by-step unwinder.
 */
#include "sampler.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/resource.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>

#define FDS_HIGH 1024 /* libunwind's pipe at or above this (first_unwind_high) */

#include "../../common/clock.h"
#include "../../common/evformat.h"
#include "../../common/loader.h"

#define UNWIND_SKIP_MAX 8   /* handler frames above the signal frame */
#define UNWIND_SELF_MAX 16  /* profhost frames atop a synchronous stack */
#define UNWIND_RANGES 64
#define UNWIND_WALK_MAX 4096 /* frames a safety check walks at most */

struct range {
	uintptr_t lo, hi;
};

static struct {
	struct unwind_config cfg;
	struct range unsafe[UNWIND_RANGES];
	size_t nunsafe;
	struct range self[UNWIND_RANGES];
	size_t nself;
	struct range libc[UNWIND_RANGES]; /* libc's segments */
	size_t nlibc;
	/* start_thread's code (0, 0: not learnt yet), set once by
	 * unwind_learn_entry before any timer exists. */
	_Atomic uintptr_t entry_lo, entry_hi;
	_Atomic int recording;
	_Atomic pid_t pid;                /* the ticker's signals come from it */
	_Atomic uint32_t epoch;
	unsigned long long adds, subs;    /* sampler thread only */
	_Atomic uint64_t samples, lost, slow;
	struct sigaction old[NSIG];       /* written before `owned` is set */
	_Atomic int owned[NSIG];
	_Atomic int block_signo;
} uw = { .epoch = 1 };

/* True when `pc` lies in one of the ranges. Async-signal-safe. */
static bool in_ranges(const struct range *r, size_t n, uintptr_t pc)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (pc >= r[i].lo && pc < r[i].hi)
			return true;
	return false;
}

/* dl_iterate_phdr context: the loaded segments of every module holding
 * one of `addrs` go to `out`. */
struct find_ctx {
	const uintptr_t *addrs;
	size_t naddrs;
	struct range *out;
	size_t *nout;
};

/* dl_iterate_phdr callback (see struct find_ctx). */
static int find_module(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct find_ctx *c = arg;
	bool hit = false;
	size_t i, k;

	(void)size;
	for (i = 0; i < info->dlpi_phnum && !hit; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;

		if (ph->p_type != PT_LOAD)
			continue;
		for (k = 0; k < c->naddrs; k++)
			if (c->addrs[k] >= lo && c->addrs[k] < hi)
				hit = true;
	}
	if (!hit)
		return 0;
	for (i = 0; i < info->dlpi_phnum && *c->nout < UNWIND_RANGES; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];

		if (ph->p_type != PT_LOAD)
			continue;
		c->out[*c->nout].lo = info->dlpi_addr + ph->p_vaddr;
		c->out[*c->nout].hi = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
		(*c->nout)++;
	}
	return 0;
}

/* Fills `out` with the segments of the modules holding `addrs`. */
static void module_ranges(const uintptr_t *addrs, size_t naddrs,
			  struct range *out, size_t *nout)
{
	struct find_ctx c = { addrs, naddrs, out, nout };

	*nout = 0;
	dl_iterate_phdr(find_module, &c);
}

/* The allocator's exported entry points: a frame inside one of them, or
 * inside the static code of the allocator's source around them, may hold
 * an allocator lock. (What glibc does with its locks outside them, at
 * thread exit, is found by the start_thread check instead.) */
static const char *const alloc_funcs[] = {
	"malloc", "free", "calloc", "realloc", "reallocarray", "memalign",
	"posix_memalign", "aligned_alloc", "valloc", "pvalloc", "malloc_trim",
	"malloc_stats", "malloc_info", "mallinfo", "mallinfo2", "mallopt",
	"fork", "__libc_freeres",
};

/* The names the allocator's own source exports (glibc's malloc.c: each
 * also as __libc_<name> or __<name>, and __default_morecore): a symbol so
 * named belongs with the allocator's static helpers (see
 * symbols_cluster_range). */
static const char *const alloc_unit_names[] = {
	"malloc", "free", "cfree", "calloc", "realloc", "memalign",
	"aligned_alloc", "posix_memalign", "valloc", "pvalloc", "malloc_trim",
	"malloc_usable_size", "malloc_stats", "malloc_info", "mallinfo",
	"mallinfo2", "mallopt", "default_morecore",
};

/* True when `name`, without leading underscores and a "libc_" prefix, is
 * one of alloc_unit_names. */
static bool alloc_unit_member(const char *name)
{
	size_t i;

	while (*name == '_')
		name++;
	if (strncmp(name, "libc_", 5) == 0)
		name += 5;
	for (i = 0; i < sizeof alloc_unit_names / sizeof alloc_unit_names[0]; i++)
		if (strcmp(name, alloc_unit_names[i]) == 0)
			return true;
	return false;
}

/* Adds the code of the function at `addr` (per the symbolizer) to the
 * unsafe list: with `unit`, the whole allocator source it belongs to
 * (its static helpers hold the arena locks too: glibc's aligned_alloc
 * jumps to one, leaving no frame of its own), else the function alone.
 * A range already listed is not added again. */
static void add_function_range(struct symbols *sym, void *addr, bool unit)
{
	uint64_t lo, hi;
	size_t i;

	if (!addr || uw.nunsafe >= UNWIND_RANGES)
		return;
	if (unit ? symbols_cluster_range(sym, (uint64_t)(uintptr_t)addr,
					 alloc_unit_member, &lo, &hi) != 0 :
		   symbols_range(sym, (uint64_t)(uintptr_t)addr, &lo, &hi) != 0)
		return;
	for (i = 0; i < uw.nunsafe; i++)
		if (uw.unsafe[i].lo == (uintptr_t)lo && uw.unsafe[i].hi == (uintptr_t)hi)
			return;
	uw.unsafe[uw.nunsafe].lo = (uintptr_t)lo;
	uw.unsafe[uw.nunsafe].hi = (uintptr_t)hi;
	uw.nunsafe++;
}

/* Start-up (see sampler.h). */
/* The process's first unwind, with libunwind's descriptors put out of the
 * way. libunwind (1.6) checks memory it is unsure of by writing it to a
 * pipe it opens at its first unwind, and reopens the pipe (closing both
 * numbers first) whenever a read from it fails. A program that closes
 * descriptors it does not own (a daemon) and is handed the same numbers
 * for its own files would have them read, written and closed by
 * libunwind. So the free numbers below FDS_HIGH are held by placeholders
 * while libunwind opens its pipe, which then lands above every number
 * such a program is handed; after a program closed it, libunwind's next
 * failed read finds nothing there and opens a new pipe. Skipped when the
 * descriptor limit leaves no room, or when libunwind was already set up
 * (the program's own use of it). Calling thread; start-up or a window's
 * first setting up. */
static void first_unwind_high(void **ips, int n)
{
	struct rlimit rl;
	int *held, nheld = 0, high, fd, keep;

	high = FDS_HIGH;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    rl.rlim_cur < (rlim_t)FDS_HIGH + 64)
		high = rl.rlim_cur > 256 ? (int)rl.rlim_cur - 32 : 0;
	held = high > 0 ? malloc(sizeof *held * (size_t)high) : NULL;
	keep = held ? open("/dev/null", O_RDONLY | O_CLOEXEC) : -1;
	while (keep >= 0 && nheld < high &&
	       (fd = fcntl(keep, F_DUPFD_CLOEXEC, 0)) >= 0) {
		if (fd >= high) {
			close(fd);
			break;
		}
		held[nheld++] = fd;
	}
	unw_backtrace(ips, n);
	while (nheld > 0)
		close(held[--nheld]);
	if (keep >= 0)
		close(keep);
	free(held);
}

int unwind_setup(const struct unwind_config *cfg)
{
	uintptr_t mods[2], self[2], libc_malloc = 0;
	struct range r[UNWIND_RANGES];
	struct symbols *sym;
	size_t n = 0, nr, i;
	void *libc, *p, *ips[2];

	uw.cfg = *cfg;
	if (uw.cfg.depth < 1)
		uw.cfg.depth = 1;
	if (uw.cfg.depth > SAMPLER_DEPTH_MAX)
		uw.cfg.depth = SAMPLER_DEPTH_MAX;
	uw.nunsafe = 0;
	/* The allocator's functions, with their sizes from the symbol
	 * tables: libc's own, and those of a replacement allocator (a
	 * sanitizer's, jemalloc, ...) that interposes them. */
	sym = symbols_new();
	if (!sym || symbols_refresh(sym) != 0) {
		symbols_free(sym);
		return -1;
	}
	libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
	for (i = 0; i < sizeof alloc_funcs / sizeof alloc_funcs[0]; i++) {
		bool unit = alloc_unit_member(alloc_funcs[i]);

		p = libc ? dlsym(libc, alloc_funcs[i]) : NULL;
		if (i == 0)
			libc_malloc = (uintptr_t)p;
		add_function_range(sym, p, unit);
		p = dlsym(RTLD_DEFAULT, alloc_funcs[i]);
		if (p && libc && p != dlsym(libc, alloc_funcs[i]))
			add_function_range(sym, p, unit);
	}
	symbols_free(sym);
	if (libc)
		dlclose(libc);
	mods[0] = libc_malloc;
	module_ranges(mods, libc_malloc ? 1 : 0, uw.libc, &uw.nlibc);
	/* The whole dynamic loader (TLS, dlopen and their locks), found at
	 * the base address the kernel loaded it at (its symbols may be
	 * interposed: a sanitizer wraps __tls_get_addr); and libunwind
	 * itself (a thread inside it, the application's own use, may be
	 * setting up what unw_backtrace needs). */
	if (getauxval(AT_BASE))
		mods[n++] = (uintptr_t)getauxval(AT_BASE);
	mods[n++] = (uintptr_t)&unw_backtrace;
	module_ranges(mods, n, r, &nr);
	for (i = 0; i < nr && uw.nunsafe < UNWIND_RANGES; i++)
		uw.unsafe[uw.nunsafe++] = r[i];
	self[0] = (uintptr_t)&unwind_setup;
	self[1] = (uintptr_t)cfg->append;
	module_ranges(self, 2, uw.self, &uw.nself);
	unwind_poll_loader();
	/* libunwind sets its trace cache up once per process (pthread_once)
	 * at the first unw_backtrace: here, where no handler can interrupt
	 * it and call unw_backtrace again, which would wait on that once
	 * forever. */
	first_unwind_high(ips, 2);
	return uw.nunsafe && libc_malloc ? 0 : -1;
}

void unwind_set_depth(uint32_t depth)
{
	if (depth < 1)
		depth = 1;
	if (depth > SAMPLER_DEPTH_MAX)
		depth = SAMPLER_DEPTH_MAX;
	uw.cfg.depth = depth;
}

void unwind_set_recording(bool on)
{
	if (on) {
		atomic_store(&uw.samples, 0);
		atomic_store(&uw.lost, 0);
		atomic_store(&uw.slow, 0);
	}
	atomic_store_explicit(&uw.recording, on, memory_order_release);
}

void unwind_counts(struct unwind_counts *out)
{
	out->samples = atomic_load(&uw.samples);
	out->lost = atomic_load(&uw.lost);
	out->slow = atomic_load(&uw.slow);
}

void unwind_set_block_signal(int signo)
{
	atomic_store(&uw.block_signo, signo);
}

/* The slot a sampling signal names (a timer's, or the wall-clock ticker's
 * from this process), or NULL when the signal is not the sampler's.
 * Async-signal-safe. */
static struct sampler_slot *slot_of(const siginfo_t *si)
{
	uintptr_t p = (uintptr_t)si->si_value.sival_ptr;
	uintptr_t lo = (uintptr_t)uw.cfg.slots;
	uintptr_t hi = lo + uw.cfg.nslots * sizeof *uw.cfg.slots;

	if ((si->si_code != SI_TIMER &&
	     (si->si_code != SI_QUEUE ||
	      si->si_pid != atomic_load_explicit(&uw.pid, memory_order_relaxed))) ||
	    !lo || p < lo || p >= hi || (p - lo) % sizeof *uw.cfg.slots)
		return NULL;
	return (struct sampler_slot *)p;
}

/* The interrupted instruction of a signal's context. */
static uintptr_t context_pc(const void *ucv)
{
	const ucontext_t *uc = ucv;

#if defined(__x86_64__)
	return (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
	return (uintptr_t)uc->uc_mcontext.pc;
#else
#error "unwind.c: add this architecture's program counter"
#endif
}

/* What a checked walk of a stack found. */
struct walk {
	int n;              /* return addresses stored */
	bool unsafe;        /* a frame where an allocator or loader lock may
			       be held, or a thread starting or exiting */
	uintptr_t entry_at; /* where start_thread's return address lies */
	uintptr_t entry_ra; /* and its value (0: no normal start_thread) */
};

/* True when a frame lies where an allocator or loader lock may be held. */
static bool pc_unsafe(uintptr_t pc)
{
	return in_ranges(uw.unsafe, uw.nunsafe, pc);
}

/* Looks at frame `pc`, whose callee (one frame inner) is `callee` (0: none,
 * the frame is the innermost), with stack pointer `sp` after the unwinder
 * stepped into it: a frame of start_thread calling its own module (libc) or
 * interrupted in its own code means a thread starting or exiting; calling
 * the start routine, it gives the place of its return address. */
static void walk_entry(struct walk *w, uintptr_t pc, uintptr_t callee,
		       uintptr_t sp)
{
	uintptr_t lo = atomic_load_explicit(&uw.entry_lo, memory_order_relaxed);
	uintptr_t hi = atomic_load_explicit(&uw.entry_hi, memory_order_relaxed);

	if (!lo || pc < lo || pc >= hi)
		return;
	if (!callee || in_ranges(uw.libc, uw.nlibc, callee)) {
		w->unsafe = true;
		return;
	}
#if defined(__x86_64__)
	/* The call pushed the return address just below the callee's
	 * canonical frame address, which is the caller's stack pointer. */
	if (*(const uintptr_t *)(sp - sizeof(uintptr_t)) == pc) {
		w->entry_at = sp - sizeof(uintptr_t);
		w->entry_ra = pc;
	}
#else
	(void)sp; /* elsewhere the return address has no fixed place */
#endif
}

/*
 * Walks the stack with unw_step from `cursor` (set at the first frame):
 * slower than unw_backtrace, but it touches no thread-local storage and
 * is async-signal-safe. Stores the first `max` return addresses in ips
 * (the first one the frame's own pc) and looks at up to UNWIND_WALK_MAX
 * frames for the safety check.
 */
static void walk_cursor(unw_cursor_t *c, void **ips, int max, struct walk *w)
{
	unw_word_t ip, sp;
	uintptr_t callee = 0;
	int i;

	memset(w, 0, sizeof *w);
	for (i = 0; i < UNWIND_WALK_MAX; i++) {
		if (unw_get_reg(c, UNW_REG_IP, &ip) < 0 || ip == 0 ||
		    unw_get_reg(c, UNW_REG_SP, &sp) < 0)
			break;
		if (w->n < max)
			ips[w->n++] = (void *)ip;
		if (pc_unsafe((uintptr_t)ip))
			w->unsafe = true;
		walk_entry(w, (uintptr_t)ip, callee, (uintptr_t)sp);
		callee = (uintptr_t)ip;
		if (unw_step(c) <= 0)
			break;
	}
}

/* The checked walk from a signal's context. */
static void slow_unwind(void *ucv, void **ips, int max, struct walk *w)
{
	unw_cursor_t c;

	memset(w, 0, sizeof *w);
	if (unw_init_local2(&c, (unw_context_t *)ucv, UNW_INIT_SIGNAL_FRAME) < 0)
		return;
	walk_cursor(&c, ips, max, w);
}

bool unwind_stack_unsafe(const uint64_t *ips, int n)
{
	int i;

	for (i = 0; i < n; i++)
		if (pc_unsafe((uintptr_t)ips[i]))
			return true;
	return false;
}

/* Marks the slot's thread safe for fast unwinds at epoch `ep`, with the
 * place of its start_thread return address when known. The slot's own
 * thread (or its owner before the thread is sampled). */
static void mark_safe(struct sampler_slot *slot, uint32_t ep,
		      const struct walk *w)
{
	atomic_store_explicit(&slot->entry_at, w->entry_at, memory_order_relaxed);
	atomic_store_explicit(&slot->entry_ra, w->entry_ra, memory_order_relaxed);
	atomic_store_explicit(&slot->epoch, ep, memory_order_relaxed);
}

/* True when the slot's thread is known safe for unw_backtrace at `ep`: it
 * was checked at this epoch and is still inside its start routine. */
static bool known_safe(const struct sampler_slot *slot, uint32_t ep)
{
	uintptr_t at;

	if (atomic_load_explicit(&slot->epoch, memory_order_relaxed) != ep)
		return false;
	at = atomic_load_explicit(&slot->entry_at, memory_order_relaxed);
	return !at || *(const volatile uintptr_t *)at ==
		atomic_load_explicit(&slot->entry_ra, memory_order_relaxed);
}

/* Appends the sample; counts it. Returns its time, or 0 when it was not
 * recorded. */
static int64_t record(void *const *ips, int n, uint64_t weight, uint64_t flags)
{
	int64_t ts = clock_now_ns_signal();

	if (uw.cfg.append(EVBUF_SAMPLE, ts, ips,
			  (uint32_t)((size_t)n * sizeof(void *)), weight, flags) == 0) {
		atomic_fetch_add_explicit(&uw.samples, 1, memory_order_relaxed);
		return ts;
	}
	atomic_fetch_add_explicit(&uw.lost, 1, memory_order_relaxed);
	return 0;
}

/* Records one sample of the interrupted thread. Returns the sample's time,
 * or 0 when none was recorded. Async-signal-safe. */
static int64_t take_sample(struct sampler_slot *slot, const siginfo_t *si,
			   void *ucv)
{
	void *ips[SAMPLER_DEPTH_MAX + UNWIND_SKIP_MAX + 1];
	uintptr_t pc = context_pc(ucv);
	uint32_t ep = atomic_load_explicit(&uw.epoch, memory_order_acquire);
	int depth = (int)uw.cfg.depth, want, n, i;
	uint64_t weight = si->si_code == SI_QUEUE ?
		atomic_load_explicit(&slot->wall_weight, memory_order_relaxed) :
		1 + (si->si_overrun > 0 ? (uint64_t)si->si_overrun : 0);

	if (!known_safe(slot, ep)) {
		/* Look before touching thread-local storage. */
		struct walk w;

		slow_unwind(ucv, ips, depth + 1, &w);
		if (w.n == 0 || w.unsafe) {
			atomic_fetch_add_explicit(&uw.slow, 1, memory_order_relaxed);
			if (w.n == 0) {
				ips[0] = (void *)pc;
				return record(ips, 1, weight, EVBUF_STACK_TRUNCATED);
			}
			return record(ips, w.n > depth ? depth : w.n, weight,
				      w.n > depth ? EVBUF_STACK_TRUNCATED : 0);
		}
		mark_safe(slot, ep, &w);
	}
	want = depth + UNWIND_SKIP_MAX + 1;
	n = unw_backtrace(ips, want);
	for (i = 0; i < n && i <= UNWIND_SKIP_MAX; i++)
		if ((uintptr_t)ips[i] == pc)
			break;
	if (i >= n || i > UNWIND_SKIP_MAX) {
		/* The unwinder did not get through the signal frame: keep the
		 * one frame that is certain. */
		ips[0] = (void *)pc;
		return record(ips, 1, weight, EVBUF_STACK_TRUNCATED);
	}
	if (n - i > depth)
		return record(&ips[i], depth, weight, EVBUF_STACK_TRUNCATED);
	return record(&ips[i], n - i, weight, n == want ? EVBUF_STACK_TRUNCATED : 0);
}

/* After a wall-clock ticker's sample: notes its time and the thread's CPU
 * time now, which the ticker compares with the thread's at its next tick,
 * and hands the slot back to the ticker. Async-signal-safe. */
static void wall_sampled(struct sampler_slot *slot, int64_t ts)
{
	struct timespec cpu;

	if (ts && clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu) == 0) {
		atomic_store_explicit(&slot->cpu_after, (int64_t)cpu.tv_sec *
				      1000000000 + cpu.tv_nsec, memory_order_relaxed);
		atomic_store_explicit(&slot->last_ts, ts, memory_order_relaxed);
	}
	atomic_fetch_add_explicit(&slot->handled, 1, memory_order_release);
}

/* A signal on our signal that is not a sampler timer's: do what the
 * previous action would have done. After the application took the signal
 * over (and perhaps chains to us), ignore it. Async-signal-safe. */
static void chain(int signo, siginfo_t *si, void *uc)
{
	const struct sigaction *o;

	if (signo <= 0 || signo >= NSIG || !atomic_load(&uw.owned[signo]))
		return;
	o = &uw.old[signo];
	if (o->sa_flags & SA_SIGINFO) {
		if (o->sa_sigaction)
			o->sa_sigaction(signo, si, uc);
		return;
	}
	if (o->sa_handler == SIG_IGN)
		return;
	if (o->sa_handler == SIG_DFL) {
		/* SIGPROF's and real-time signals' default is to terminate:
		 * let it happen once this handler returns. */
		struct sigaction dfl;

		memset(&dfl, 0, sizeof dfl);
		dfl.sa_handler = SIG_DFL;
		sigaction(signo, &dfl, NULL);
		raise(signo);
		return;
	}
	o->sa_handler(signo);
}

/* The sampling signal's handler: a sampler timer's signal is a sample
 * (while recording), anything else goes to chain(). Keeps errno. */
void unwind_handler(int signo, siginfo_t *si, void *uc)
{
	int saved = errno;
	struct sampler_slot *slot = slot_of(si);
	int64_t ts = 0;

	if (!slot)
		chain(signo, si, uc);
	else if (atomic_load_explicit(&uw.recording, memory_order_acquire))
		ts = take_sample(slot, si, uc);
	if (slot && si->si_code == SI_QUEUE)
		wall_sampled(slot, ts);
	errno = saved;
}

int unwind_install(int signo)
{
	struct sigaction sa, old;
	int r;

	if (signo <= 0 || signo >= NSIG)
		return -1;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = unwind_handler;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	/* No handler of ours inside another (the sampler moves to another
	 * signal when the application takes its own: both may fire): one
	 * unwind at a time per thread. */
	sigemptyset(&sa.sa_mask);
	sigaddset(&sa.sa_mask, SIGPROF);
	for (r = SIGRTMIN; r <= SIGRTMAX; r++)
		sigaddset(&sa.sa_mask, r);
	if (sigaction(signo, NULL, &old) != 0)
		return -1;
	atomic_store(&uw.pid, getpid());
	if (!(old.sa_flags & SA_SIGINFO) || old.sa_sigaction != unwind_handler)
		uw.old[signo] = old;
	atomic_store(&uw.owned[signo], 1);
	if (sigaction(signo, &sa, NULL) != 0) {
		atomic_store(&uw.owned[signo], 0);
		return -1;
	}
	return 0;
}

bool unwind_owns(int signo)
{
	struct sigaction cur;

	if (signo <= 0 || signo >= NSIG || !atomic_load(&uw.owned[signo]) ||
	    sigaction(signo, NULL, &cur) != 0)
		return false;
	return (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == unwind_handler;
}

void unwind_disown(int signo)
{
	if (signo > 0 && signo < NSIG)
		atomic_store(&uw.owned[signo], 0);
}

void unwind_uninstall(int signo)
{
	if (!unwind_owns(signo))
		return;
	sigaction(signo, &uw.old[signo], NULL);
	atomic_store(&uw.owned[signo], 0);
}

void unwind_poll_loader(void)
{
	unsigned long long c[2];

	loader_counts(c);
	if (c[0] != uw.adds || c[1] != uw.subs) {
		uw.adds = c[0];
		uw.subs = c[1];
		atomic_fetch_add_explicit(&uw.epoch, 1, memory_order_release);
	}
}

/* Blocks the sampling signal on the calling thread (*old: the mask to put
 * back), so that its handler cannot run inside the caller's own libunwind
 * call (the same per-thread cache; the same once-only set-up). Returns
 * whether it blocked anything. */
static bool block_sampling(sigset_t *old)
{
	int sig = atomic_load(&uw.block_signo);
	sigset_t set;

	if (!sig)
		return false;
	sigemptyset(&set);
	sigaddset(&set, sig);
	pthread_sigmask(SIG_BLOCK, &set, old);
	return true;
}

/* The calling thread's checked walk (from here, outside any handler). */
static void walk_self(struct walk *w)
{
	void *ips[1];
	unw_context_t ctx;
	unw_cursor_t c;

	memset(w, 0, sizeof *w);
	if (unw_getcontext(&ctx) == 0 && unw_init_local(&c, &ctx) == 0)
		walk_cursor(&c, ips, 1, w);
}

uint32_t unwind_epoch(void)
{
	return atomic_load_explicit(&uw.epoch, memory_order_acquire);
}

uint32_t unwind_warm_self(struct sampler_slot *slot, uintptr_t *entry_at,
			  uintptr_t *entry_ra)
{
	void *ips[64];
	struct walk w;
	uint32_t ep = atomic_load_explicit(&uw.epoch, memory_order_acquire);
	sigset_t old;
	bool blocked = block_sampling(&old);

	/* Deep enough that the frames a sample unwinds are cached too. */
	unw_backtrace(ips, 64);
	*entry_at = *entry_ra = 0;
	if (atomic_load(&uw.entry_lo)) {
		walk_self(&w);
		*entry_at = w.entry_at;
		*entry_ra = w.entry_ra;
		if (slot)
			mark_safe(slot, ep, &w);
	} else {
		ep = 0; /* not learnt yet: the first sample checks */
	}
	if (blocked)
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	return ep;
}

int unwind_learn_entry(void)
{
	unw_context_t ctx;
	unw_cursor_t c;
	unw_proc_info_t pi;
	unw_word_t ip;
	int i;

	if (atomic_load(&uw.entry_lo))
		return 0;
	if (unw_getcontext(&ctx) != 0 || unw_init_local(&c, &ctx) != 0)
		return -1;
	for (i = 0; i < 64 && unw_step(&c) > 0; i++) {
		if (unw_get_reg(&c, UNW_REG_IP, &ip) < 0 || ip == 0)
			break;
		if (!in_ranges(uw.libc, uw.nlibc, (uintptr_t)ip))
			continue;
		/* The first libc frame under a thread's own code: the
		 * function that called the start routine. */
		if (unw_get_proc_info(&c, &pi) < 0 || pi.start_ip >= pi.end_ip)
			return -1;
		atomic_store(&uw.entry_hi, (uintptr_t)pi.end_ip);
		atomic_store(&uw.entry_lo, (uintptr_t)pi.start_ip);
		return 0;
	}
	return -1;
}

int sampler_backtrace_now(uint64_t *out, int max, bool *truncated)
{
	void *ips[SAMPLER_DEPTH_MAX + UNWIND_SELF_MAX + 1];
	int want, n, i, k;
	sigset_t old;
	bool blocked;

	*truncated = false;
	if (max <= 0)
		return 0;
	if (max > SAMPLER_DEPTH_MAX)
		max = SAMPLER_DEPTH_MAX;
	want = max + UNWIND_SELF_MAX + 1;
	blocked = block_sampling(&old);
	n = unw_backtrace(ips, want);
	if (blocked)
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	for (i = 0; i < n && i < UNWIND_SELF_MAX &&
		    in_ranges(uw.self, uw.nself, (uintptr_t)ips[i]); i++)
		;
	if (n - i > max || n == want)
		*truncated = true;
	for (k = 0; i < n && k < max; i++, k++)
		out[k] = (uint64_t)(uintptr_t)ips[i];
	return k;
}

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
 * the allocator's functions (libc's or an interposed malloc's) or in the
 * dynamic loader, the thread holds no allocator lock: that sample takes
 * the unw_backtrace path, which does the allocation there and then, and
 * the thread is marked safe for the epoch.
 */
#include "sampler.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <string.h>
#include <sys/auxv.h>
#include <ucontext.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include "../events/clock.h"
#include "../events/evbuf.h"

#define UNWIND_SKIP_MAX 8   /* handler frames above the signal frame */
#define UNWIND_SELF_MAX 16  /* profhost frames atop a synchronous stack */
#define UNWIND_RANGES 64
#define UNWIND_CHECK_MIN 64 /* frames a safety check looks at */

struct range {
	uintptr_t lo, hi;
};

static struct {
	struct unwind_config cfg;
	struct range unsafe[UNWIND_RANGES];
	size_t nunsafe;
	struct range self[UNWIND_RANGES];
	size_t nself;
	_Atomic int recording;
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

/* The allocator's entry points: a frame inside one of them may hold an
 * allocator lock. */
static const char *const alloc_funcs[] = {
	"malloc", "free", "calloc", "realloc", "reallocarray", "memalign",
	"posix_memalign", "aligned_alloc", "valloc", "pvalloc", "malloc_trim",
	"malloc_stats", "malloc_info", "mallinfo", "mallinfo2", "fork",
	"__libc_thread_freeres", "__libc_freeres",
};

/* Adds the range of the function at `addr` (per the symbolizer) to the
 * unsafe list. */
static void add_function_range(struct symbols *sym, void *addr)
{
	uint64_t lo, hi;

	if (addr && uw.nunsafe < UNWIND_RANGES &&
	    symbols_range(sym, (uint64_t)(uintptr_t)addr, &lo, &hi) == 0) {
		uw.unsafe[uw.nunsafe].lo = (uintptr_t)lo;
		uw.unsafe[uw.nunsafe].hi = (uintptr_t)hi;
		uw.nunsafe++;
	}
}

/* Start-up (see sampler.h). */
int unwind_setup(const struct unwind_config *cfg)
{
	uintptr_t mods[1], self[2], libc_malloc = 0;
	struct range r[UNWIND_RANGES];
	struct symbols *sym;
	size_t n = 0, nr, i;
	void *libc, *p;

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
		p = libc ? dlsym(libc, alloc_funcs[i]) : NULL;
		if (i == 0)
			libc_malloc = (uintptr_t)p;
		add_function_range(sym, p);
		p = dlsym(RTLD_DEFAULT, alloc_funcs[i]);
		if (p && libc && p != dlsym(libc, alloc_funcs[i]))
			add_function_range(sym, p);
	}
	symbols_free(sym);
	if (libc)
		dlclose(libc);
	/* The whole dynamic loader (TLS, dlopen and their locks), found at
	 * the base address the kernel loaded it at (its symbols may be
	 * interposed: a sanitizer wraps __tls_get_addr). */
	if (getauxval(AT_BASE))
		mods[n++] = (uintptr_t)getauxval(AT_BASE);
	module_ranges(mods, n, r, &nr);
	for (i = 0; i < nr && uw.nunsafe < UNWIND_RANGES; i++)
		uw.unsafe[uw.nunsafe++] = r[i];
	self[0] = (uintptr_t)&unwind_setup;
	self[1] = (uintptr_t)cfg->append;
	module_ranges(self, 2, uw.self, &uw.nself);
	unwind_poll_loader();
	return uw.nunsafe && libc_malloc ? 0 : -1;
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

/* The slot a timer signal names, or NULL when the signal is not one of the
 * sampler's timers. Async-signal-safe. */
static struct sampler_slot *slot_of(const siginfo_t *si)
{
	uintptr_t p = (uintptr_t)si->si_value.sival_ptr;
	uintptr_t lo = (uintptr_t)uw.cfg.slots;
	uintptr_t hi = lo + uw.cfg.nslots * sizeof *uw.cfg.slots;

	if (si->si_code != SI_TIMER || !lo || p < lo || p >= hi ||
	    (p - lo) % sizeof *uw.cfg.slots)
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

/* Unwinds from the signal's context with unw_step: slower than
 * unw_backtrace, but it touches no thread-local storage. Fills ips with the
 * interrupted instruction and the return addresses above it, at most max.
 * Async-signal-safe. */
static int slow_unwind(void *ucv, void **ips, int max)
{
	unw_cursor_t c;
	unw_word_t ip;
	int n = 0;

	if (unw_init_local2(&c, (unw_context_t *)ucv, UNW_INIT_SIGNAL_FRAME) < 0)
		return 0;
	do {
		if (unw_get_reg(&c, UNW_REG_IP, &ip) < 0 || ip == 0)
			break;
		ips[n++] = (void *)ip;
	} while (n < max && unw_step(&c) > 0);
	return n;
}

/* True when a frame lies where an allocator or loader lock may be held. */
static bool stack_unsafe(void *const *ips, int n)
{
	int i;

	for (i = 0; i < n; i++)
		if (in_ranges(uw.unsafe, uw.nunsafe, (uintptr_t)ips[i]))
			return true;
	return false;
}

bool unwind_stack_unsafe(const uint64_t *ips, int n)
{
	int i;

	for (i = 0; i < n; i++)
		if (in_ranges(uw.unsafe, uw.nunsafe, (uintptr_t)ips[i]))
			return true;
	return false;
}

/* Appends the sample; counts it. */
static void record(void *const *ips, int n, uint64_t weight, uint64_t flags)
{
	if (uw.cfg.append(EVBUF_SAMPLE, clock_now_ns_signal(), ips,
			  (uint32_t)((size_t)n * sizeof(void *)), weight, flags) == 0)
		atomic_fetch_add_explicit(&uw.samples, 1, memory_order_relaxed);
	else
		atomic_fetch_add_explicit(&uw.lost, 1, memory_order_relaxed);
}

/* Records one sample of the interrupted thread. Async-signal-safe. */
static void take_sample(struct sampler_slot *slot, const siginfo_t *si,
			void *ucv)
{
	void *ips[SAMPLER_DEPTH_MAX + UNWIND_SKIP_MAX + 1];
	uintptr_t pc = context_pc(ucv);
	uint32_t ep = atomic_load_explicit(&uw.epoch, memory_order_acquire);
	int depth = (int)uw.cfg.depth, want, n, i;
	uint64_t weight = 1 + (si->si_overrun > 0 ? (uint64_t)si->si_overrun : 0);

	if (atomic_load_explicit(&slot->epoch, memory_order_relaxed) != ep) {
		/* Not known safe: look before touching thread-local storage.
		 * Walk at least UNWIND_CHECK_MIN frames for the check. */
		want = (depth > UNWIND_CHECK_MIN ? depth : UNWIND_CHECK_MIN) + 1;
		n = slow_unwind(ucv, ips, want);
		if (n == 0 || stack_unsafe(ips, n)) {
			atomic_fetch_add_explicit(&uw.slow, 1, memory_order_relaxed);
			if (n == 0) {
				ips[0] = (void *)pc;
				record(ips, 1, weight, EVBUF_STACK_TRUNCATED);
			} else {
				record(ips, n > depth ? depth : n, weight,
				       n > depth ? EVBUF_STACK_TRUNCATED : 0);
			}
			return;
		}
		atomic_store_explicit(&slot->epoch, ep, memory_order_relaxed);
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
		record(ips, 1, weight, EVBUF_STACK_TRUNCATED);
	} else if (n - i > depth) {
		record(&ips[i], depth, weight, EVBUF_STACK_TRUNCATED);
	} else {
		record(&ips[i], n - i, weight, n == want ? EVBUF_STACK_TRUNCATED : 0);
	}
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

	if (!slot)
		chain(signo, si, uc);
	else if (atomic_load_explicit(&uw.recording, memory_order_acquire))
		take_sample(slot, si, uc);
	errno = saved;
}

int unwind_install(int signo)
{
	struct sigaction sa, old;

	if (signo <= 0 || signo >= NSIG)
		return -1;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = unwind_handler;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	if (sigaction(signo, NULL, &old) != 0)
		return -1;
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

/* dl_iterate_phdr callback: reads the loader's add/remove counters from
 * the first module and stops. */
static int loader_counts(struct dl_phdr_info *info, size_t size, void *arg)
{
	unsigned long long *c = arg;

	if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
		c[0] = info->dlpi_adds;
		c[1] = info->dlpi_subs;
	}
	return 1;
}

void unwind_poll_loader(void)
{
	unsigned long long c[2] = { 0, 0 };

	dl_iterate_phdr(loader_counts, c);
	if (c[0] != uw.adds || c[1] != uw.subs) {
		uw.adds = c[0];
		uw.subs = c[1];
		atomic_fetch_add_explicit(&uw.epoch, 1, memory_order_release);
	}
}

uint32_t unwind_warm_self(struct sampler_slot *slot)
{
	void *ips[64];
	uint32_t ep = atomic_load_explicit(&uw.epoch, memory_order_acquire);

	/* Deep enough that the frames a sample unwinds are cached too. */
	unw_backtrace(ips, 64);
	if (slot)
		atomic_store_explicit(&slot->epoch, ep, memory_order_relaxed);
	return ep;
}

int sampler_backtrace_now(uint64_t *out, int max, bool *truncated)
{
	void *ips[SAMPLER_DEPTH_MAX + UNWIND_SELF_MAX + 1];
	int sig = atomic_load(&uw.block_signo), want, n, i, k;
	sigset_t set, old;

	*truncated = false;
	if (max <= 0)
		return 0;
	if (max > SAMPLER_DEPTH_MAX)
		max = SAMPLER_DEPTH_MAX;
	want = max + UNWIND_SELF_MAX + 1;
	if (sig) {
		sigemptyset(&set);
		sigaddset(&set, sig);
		pthread_sigmask(SIG_BLOCK, &set, &old);
	}
	n = unw_backtrace(ips, want);
	if (sig)
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

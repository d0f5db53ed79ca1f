/*
 * nvtx — the NVTX3 injection and hot path, in the shim (see nvtx.h).
 *
 * Three paths per push or pop:
 *   quiet   outside a window: the entry point (a leaf) reads the capture
 *           word (and, for a push, the mode word) and moves the thread's
 *           depth in TLS; a push in the default domain with nothing to
 *           remember only counts. With a range trigger configured a push
 *           first compares its name (may_trigger); armed, it also keeps
 *           the name in its shadow level.
 *   inline  inside a window, a push or pop of the thread's top level
 *           with no trigger hit and no hook installed (push_fast,
 *           pop_fast): one clock read, one inline evbuf append, the level.
 *   full    everything else (range_push, range_pop): trigger callbacks,
 *           GPU-link and range-stack hooks, levels pushed before the
 *           window or below another domain's, wide strings.
 * All three keep the same shadow stack and record the same events.
 * Nothing here locks, except the creation calls (domains, registered
 * strings, category and thread names: nvtx_registry.c), which are rare and
 * take its lock, and the first push of a thread that needs its shadow
 * levels (anything but counting), which allocates them.
 */
#include "nvtx.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../common/clock.h"
#include "evbuf.h"
#include "nvtx_abi.h"
#include "nvtx_registry.h"

#define NVTX_EXPORT __attribute__((visibility("default")))

#define NVTX_LEVELS 64        /* shadow levels per thread; deeper ones count only */
#define NVTX_LEVEL_NAME 48    /* name bytes a shadow level keeps */

/* Mode bits (nvtx_mode). */
enum {
	MODE_RECORD = 1,       /* record NVTX events in windows */
	MODE_STEP_RANGE = 2,   /* a step range is configured */
	MODE_STEP_MARK = 4,    /* a step mark is configured */
	MODE_CAPTURE = 8,      /* a capture range is configured */
	MODE_ARMED = 16        /* shadow levels keep names */
};

/* Shadow level flags. */
enum {
	LV_STEP = 1,       /* this level is the step range */
	LV_CAPTURE = 2,    /* this level drives a capture-range window */
	LV_NAMED = 4,      /* name[] holds the name */
	LV_REGISTERED = 8, /* reg holds the name */
	LV_DROPPED = 16,   /* the push was dropped (buffers full): drop the pop */
	LV_FORCED = 32,    /* recorded whatever prof.capture{nvtx} says */
	LV_HOOKED = 64     /* the push hook pushed an id: the pop hook pops it,
			      recorded or not (CUPTI's per-thread stack stays
			      balanced across windows and recorder segments) */
};

/* Start/end range ids: sequence (bits 0-31), kernel tid (32-53), the tag of
 * the generation that recorded the start (54-61: 0 none, 255 dropped), and
 * the trigger bits (62 step, 63 capture). */
#define ID_TAG_SHIFT 54
#define ID_TAG_DROPPED 255u
#define ID_STEP (1ull << 62)
#define ID_CAPTURE (1ull << 63)

/* The configuration, immutable once published and never freed (a
 * reader may still hold an older one). */
struct nvtx_cfg {
	struct nvtx_config c;    /* strings point into the block below */
	struct nvtx_cfg *older;  /* the one it replaced */
	bool long_range;         /* a range trigger >= EVBUF_NAME_MAX bytes */
};

/* A message as NVTX passed it. */
struct nvtx_msg {
	int type;                /* NVTX_ABI_MESSAGE_* */
	const void *p;
};

struct nvtx_level {
	uint32_t domain;
	uint32_t category;
	uint32_t gen;            /* generation that recorded the push; 0 none */
	int64_t ts;              /* when it was pushed, when known (recorded
				    or armed: names kept); 0 unknown */
	uint16_t flags;          /* LV_* */
	uint16_t len;            /* bytes in name[] */
	union {
		char name[NVTX_LEVEL_NAME];
		const struct nvtx_string *reg;
	} n;
};

struct nvtx_tls;

/* A thread's shadow levels (its depth is in struct nvtx_tls). Every
 * shadow is on the `threads` list (threads_lock) until its thread exits,
 * so nvtx_open_ranges() can read other threads' levels. */
struct nvtx_thread {
	uint32_t seq;            /* last start/end sequence number */
	int32_t tid;
	struct nvtx_tls *tls;    /* the thread's position (its TLS: valid
				    while it is on the list) */
	struct nvtx_thread *next, *prev;
	struct nvtx_level lv[NVTX_LEVELS];
};

/* A thread's position in its shadow, in TLS so that the quiet path reads
 * it without a pointer. Levels below `mark` are written in t->lv[]; a level
 * at or above it was pushed on the quiet path in the default domain with
 * nothing to remember (no category, name or trigger): only counted, its
 * lv[] entry is stale until materialize() writes it. mark <= depth and
 * mark <= NVTX_LEVELS. */
struct nvtx_tls {
	uint32_t depth;          /* open levels, all domains */
	uint32_t mark;
	struct nvtx_thread *t;   /* NULL until needed; &no_thread: none */
};

static _Atomic uint32_t nvtx_mode = MODE_RECORD;
static _Atomic(struct nvtx_cfg *) nvtx_cfg;
static _Atomic int nvtx_is_attached;

static pthread_mutex_t cfg_lock = PTHREAD_MUTEX_INITIALIZER; /* nvtx_configure */
static struct nvtx_domain default_domain = { DOMAIN_MAGIC, 0, MATCH_STEP_RANGE |
					     MATCH_STEP_MARK | MATCH_CAPTURE,
					     (char *)NVTX_DEFAULT_DOMAIN };

static __thread struct nvtx_tls me __attribute__((tls_model("initial-exec")));
static pthread_key_t self_key;
static pthread_once_t self_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t threads_lock = PTHREAD_MUTEX_INITIALIZER;
static struct nvtx_thread *threads;      /* threads_lock */

/* A thread whose shadow could not be allocated works without one; its
 * depth stays at NO_THREAD_DEPTH, which no quiet path takes. */
static struct nvtx_thread no_thread;
#define NO_THREAD_DEPTH 0x40000000u

/* ------------------------------------------------------------ strings */

/* Converts NUL-ended UTF-32 `w` to UTF-8 in out[cap]; never splits a
 * character; invalid code points become U+FFFD. Returns the bytes written. */
static uint32_t utf8_from_wide(const wchar_t *w, char *out, uint32_t cap)
{
	uint32_t n = 0;

	for (; *w; w++) {
		uint32_t c = (uint32_t)*w;
		unsigned char b[4];
		uint32_t k;

		if (c >= 0xd800 && (c < 0xe000 || c > 0x10ffff))
			c = 0xfffd;
		if (c < 0x80) {
			b[0] = (unsigned char)c;
			k = 1;
		} else if (c < 0x800) {
			b[0] = (unsigned char)(0xc0 | c >> 6);
			b[1] = (unsigned char)(0x80 | (c & 0x3f));
			k = 2;
		} else if (c < 0x10000) {
			b[0] = (unsigned char)(0xe0 | c >> 12);
			b[1] = (unsigned char)(0x80 | (c >> 6 & 0x3f));
			b[2] = (unsigned char)(0x80 | (c & 0x3f));
			k = 3;
		} else {
			b[0] = (unsigned char)(0xf0 | c >> 18);
			b[1] = (unsigned char)(0x80 | (c >> 12 & 0x3f));
			b[2] = (unsigned char)(0x80 | (c >> 6 & 0x3f));
			b[3] = (unsigned char)(0x80 | (c & 0x3f));
			k = 4;
		}
		if (n + k > cap)
			break;
		memcpy(out + n, b, k);
		n += k;
	}
	return n;
}

/* A malloc'd NUL-ended UTF-8 copy of `w` (cut at EVBUF_NAME_MAX), or NULL. */
static char *dup_wide(const wchar_t *w)
{
	char buf[EVBUF_NAME_MAX];
	uint32_t n = w ? utf8_from_wide(w, buf, sizeof buf) : 0;
	char *s = malloc(n + 1);

	if (s) {
		memcpy(s, buf, n);
		s[n] = '\0';
	}
	return s;
}

/* A malloc'd copy of `s` cut at EVBUF_NAME_MAX bytes, or NULL. */
static char *dup_name(const char *s)
{
	size_t n = s ? strnlen(s, EVBUF_NAME_MAX) : 0;
	char *d = malloc(n + 1);

	if (d) {
		if (n)
			memcpy(d, s, n);
		d[n] = '\0';
	}
	return d;
}

/* ------------------------------------------------------------ handles */

/* The domain of a handle: NULL and anything that is not ours are the
 * default domain. */
static const struct nvtx_domain *domain_of(const void *h)
{
	const struct nvtx_domain *d = h;

	if (!d || d->magic != DOMAIN_MAGIC)
		return &default_domain;
	return d;
}

/* The registered string of a handle, or NULL. */
static const struct nvtx_string *string_of(const void *h)
{
	const struct nvtx_string *s = h;

	if (!s || s->magic != STRING_MAGIC)
		return NULL;
	return s;
}

/* ------------------------------------------------------------ threads */

static void self_free(void *p)
{
	struct nvtx_thread *t = p;

	if (t != &no_thread) {
		/* Off the list before the thread's TLS goes: a reader holds
		 * threads_lock while it reads t->tls. */
		pthread_mutex_lock(&threads_lock);
		if (t->prev)
			t->prev->next = t->next;
		else if (threads == t)
			threads = t->next;
		if (t->next)
			t->next->prev = t->prev;
		pthread_mutex_unlock(&threads_lock);
		free(t);
	}
	/* The thread is exiting: NVTX from a later destructor works without
	 * a shadow (as after a failed allocation), so none is put back on the
	 * list after its TLS may be gone. */
	me.t = &no_thread;
	me.depth = NO_THREAD_DEPTH;
	me.mark = 0;
}

/* In a child after fork(): the shadow list's lock may have been held by
 * a thread that does not exist there (the watchdog reading the list). */
static void threads_after_fork(void)
{
	pthread_mutex_init(&threads_lock, NULL);
}

static void self_key_init(void)
{
	pthread_atfork(NULL, NULL, threads_after_fork);
	if (pthread_key_create(&self_key, self_free) != 0)
		self_key = (pthread_key_t)-1;
}

/* The calling thread's shadow, created on first use (malloc: the NVTX
 * calls are not signal handlers). Never NULL. */
static struct nvtx_thread *thread_self(void)
{
	struct nvtx_thread *t = me.t;

	if (__builtin_expect(t != NULL, 1))
		return t;
	pthread_once(&self_once, self_key_init);
	t = calloc(1, sizeof *t);
	if (!t || pthread_setspecific(self_key, t) != 0) {
		free(t);
		t = &no_thread; /* no levels: the ones counted so far are lost */
		me.depth = NO_THREAD_DEPTH;
		me.mark = 0;
	} else {
		t->tid = (int32_t)syscall(SYS_gettid);
		t->tls = &me;
		pthread_mutex_lock(&threads_lock);
		t->next = threads;
		if (threads)
			threads->prev = t;
		threads = t;
		pthread_mutex_unlock(&threads_lock);
	}
	me.t = t;
	return t;
}

/* ------------------------------------------------------------ messages */

/* The bytes of an ASCII or registered message (*len), or "" for others
 * (wide strings are converted by the callers that need them). */
static const char *msg_plain(const struct nvtx_msg *m, uint32_t *len)
{
	const struct nvtx_string *s;

	if (m->type == NVTX_ABI_MESSAGE_ASCII && m->p) {
		*len = (uint32_t)strnlen(m->p, EVBUF_NAME_MAX);
		return m->p;
	}
	if (m->type == NVTX_ABI_MESSAGE_REGISTERED && (s = string_of(m->p))) {
		*len = s->len < EVBUF_NAME_MAX ? s->len : EVBUF_NAME_MAX;
		return s->s;
	}
	*len = 0;
	return "";
}

static int is_wide(const struct nvtx_msg *m)
{
	return m->type == NVTX_ABI_MESSAGE_UNICODE && m->p;
}

/* append_msg() for wide strings: converts on the stack, then appends. */
__attribute__((noinline)) static int append_wide(uint16_t kind, int64_t ts,
						 const wchar_t *w, uint64_t id,
						 uint64_t a)
{
	char buf[EVBUF_NAME_MAX];
	uint32_t len = utf8_from_wide(w, buf, sizeof buf);

	return evbuf_append_raw(kind, ts, buf, len, id, a);
}

/* Appends a record whose payload is the message's text. Returns 0, or -1
 * when dropped. */
static int append_msg(uint16_t kind, int64_t ts, const struct nvtx_msg *m,
		      uint64_t id, uint64_t a)
{
	const char *text;
	uint32_t len;

	if (is_wide(m))
		return append_wide(kind, ts, m->p, id, a);
	text = msg_plain(m, &len);
	return evbuf_append_raw(kind, ts, text, len, id, a);
}

/* Message of an attributes struct (NULL or too small: none). */
static struct nvtx_msg attr_msg(const struct nvtx_abi_attributes *a)
{
	struct nvtx_msg m = { NVTX_ABI_MESSAGE_UNKNOWN, NULL };

	if (a && (a->size == 0 || a->size >= sizeof *a)) {
		m.type = a->message_type;
		m.p = a->message.ascii;
	}
	return m;
}

static uint32_t attr_category(const struct nvtx_abi_attributes *a)
{
	if (a && (a->size == 0 ||
		  a->size >= offsetof(struct nvtx_abi_attributes, category) + 4))
		return a->category;
	return 0;
}

/* string_match() of a wide message. */
__attribute__((noinline)) static uint32_t wide_match(const struct nvtx_cfg *cfg,
						     const wchar_t *w)
{
	char buf[EVBUF_NAME_MAX];
	uint32_t len = utf8_from_wide(w, buf, sizeof buf);

	return string_match(&cfg->c, buf, len);
}

/* MATCH_* bits message m in domain d satisfies among `want`. Only called
 * when a trigger is configured. */
static uint32_t msg_match(const struct nvtx_cfg *cfg, const struct nvtx_domain *d,
			  const struct nvtx_msg *m, uint32_t want)
{
	const struct nvtx_string *s;
	const char *text;
	uint32_t len;

	want &= atomic_load_explicit(&d->match, memory_order_relaxed);
	if (!want || !cfg)
		return 0;
	if (m->type == NVTX_ABI_MESSAGE_REGISTERED) {
		s = string_of(m->p);
		return s ? atomic_load_explicit(&s->match, memory_order_relaxed) & want : 0;
	}
	if (is_wide(m))
		return wide_match(cfg, m->p) & want;
	text = msg_plain(m, &len);
	return string_match(&cfg->c, text, len) & want;
}

/* ------------------------------------------------------------ hot path */

static inline int recording(uint64_t st, uint32_t mode, int force)
{
	return (st & 1) && ((mode & MODE_RECORD) || force);
}

/* Tag of generation `gen` in range ids: 1..254. */
static inline uint32_t gen_tag(uint64_t gen)
{
	return (uint32_t)(gen % 254) + 1;
}

/* Keeps the name of a shadow level (its first NVTX_LEVEL_NAME bytes). */
static void level_name(struct nvtx_level *lv, const struct nvtx_msg *m)
{
	const struct nvtx_string *s;
	uint32_t len = 0;

	if (m->type == NVTX_ABI_MESSAGE_REGISTERED && (s = string_of(m->p))) {
		lv->n.reg = s;
		lv->flags |= LV_REGISTERED;
		return;
	}
	if (is_wide(m)) {
		len = utf8_from_wide(m->p, lv->n.name, NVTX_LEVEL_NAME);
	} else if (m->type == NVTX_ABI_MESSAGE_ASCII && m->p) {
		len = (uint32_t)strnlen(m->p, NVTX_LEVEL_NAME);
		memcpy(lv->n.name, m->p, len);
	}
	lv->len = (uint16_t)len;
	lv->flags |= LV_NAMED;
}

/* Asks the core whether a capture-range instance starting now drives a
 * window; stops asking when it says never again. */
static int capture_begin(const struct nvtx_cfg *cfg)
{
	int r = cfg->c.capture_begin(cfg->c.ctx);

	if (r < 0)
		atomic_fetch_and(&nvtx_mode, ~(uint32_t)MODE_CAPTURE);
	return r > 0;
}

/* Writes out the calling thread's plain levels (t is its shadow, not
 * no_thread) so the full path can read every level. */
static void materialize(struct nvtx_thread *t)
{
	uint32_t end = me.depth < NVTX_LEVELS ? me.depth : NVTX_LEVELS, i;

	for (i = me.mark; i < end; i++) {
		struct nvtx_level *lv = &t->lv[i];

		lv->domain = 0;
		lv->category = 0;
		lv->gen = 0;
		lv->ts = 0;
		lv->flags = 0;
		lv->len = 0;
	}
	me.mark = end;
}

/* Sets the calling thread's depth after the full path wrote its levels. */
static void set_depth(uint32_t depth)
{
	me.depth = depth;
	me.mark = depth < NVTX_LEVELS ? depth : NVTX_LEVELS;
}

/* Records the first `n` levels of thread t that the open window did not
 * record, as pushes that began before it (the thread just opened the
 * window inside them). */
static void replay_levels(struct nvtx_thread *t, uint32_t n)
{
	uint64_t st = atomic_load_explicit(&evbuf_state, memory_order_relaxed);
	uint32_t mode = atomic_load_explicit(&nvtx_mode, memory_order_acquire);
	uint32_t gen = (uint32_t)(st >> 1), i;
	int64_t now;

	if (!(st & 1) || t == &no_thread)
		return;
	if (n > NVTX_LEVELS)
		n = NVTX_LEVELS;
	materialize(t);
	now = clock_now_ns();
	for (i = 0; i < n; i++) {
		struct nvtx_level *lv = &t->lv[i];
		const char *name = NULL;
		uint32_t len = 0;

		if (lv->gen == gen || !recording(st, mode, lv->flags & LV_FORCED))
			continue;
		if (lv->flags & LV_NAMED) {
			name = lv->n.name;
			len = lv->len;
		} else if (lv->flags & LV_REGISTERED) {
			name = lv->n.reg->s;
			len = lv->n.reg->len < EVBUF_NAME_MAX ? lv->n.reg->len : EVBUF_NAME_MAX;
		}
		if (evbuf_append_raw(EVBUF_RANGE_PUSH, now, name, len, 0,
				     evbuf_nvtx_a(lv->domain, lv->category, EVBUF_A_EARLY)) == 0) {
			lv->gen = gen;
			lv->flags &= (uint16_t)~LV_DROPPED;
		}
	}
}

/* Range hooks the core installs while GPU capture links ranges to the
 * kernels they launch (nvtx_set_range_hooks). Looked at only when a push or
 * pop is recorded, so the idle path does not change. */
static uint64_t (*_Atomic range_push_hook)(void);
static void (*_Atomic range_pop_hook)(void);

void nvtx_set_range_hooks(uint64_t (*push)(void), void (*pop)(void))
{
	atomic_store_explicit(&range_push_hook, push, memory_order_release);
	atomic_store_explicit(&range_pop_hook, pop, memory_order_release);
}

/* Called after a push was recorded (the CPU sampler's range stacks, see
 * nvtx_set_pushed_hook). Looked at only then. */
static void (*_Atomic range_pushed_hook)(void);

void nvtx_set_pushed_hook(void (*pushed)(void))
{
	atomic_store_explicit(&range_pushed_hook, pushed, memory_order_release);
}

/* A push in domain d; `force` records even with prof.capture{nvtx=false}.
 * Returns the level (depth before the push). */
__attribute__((noinline))
static int range_push(const struct nvtx_domain *d, const struct nvtx_msg *m,
		      uint32_t category, int force)
{
	uint64_t st = atomic_load_explicit(&evbuf_state, memory_order_relaxed);
	uint32_t mode = atomic_load_explicit(&nvtx_mode, memory_order_acquire);
	struct nvtx_thread *t = thread_self();
	struct nvtx_level *lv = NULL;
	uint32_t depth = 0, flags = 0, gen = 0, len = 0;
	const char *text = NULL;
	int64_t pushed_at = 0;

	if (t != &no_thread) {
		materialize(t);
		depth = me.depth;
		set_depth(depth + 1);
		if (depth < NVTX_LEVELS)
			lv = &t->lv[depth];
	}
	if (__builtin_expect(mode & (MODE_STEP_RANGE | MODE_CAPTURE), 0)) {
		struct nvtx_cfg *cfg = atomic_load_explicit(&nvtx_cfg, memory_order_acquire);
		uint32_t hit = msg_match(cfg, d, m, (mode & MODE_STEP_RANGE ? MATCH_STEP_RANGE : 0) |
					 (mode & MODE_CAPTURE ? MATCH_CAPTURE : 0));
		if (hit & MATCH_STEP_RANGE)
			flags |= LV_STEP;
		if ((hit & MATCH_CAPTURE) && capture_begin(cfg)) {
			flags |= LV_CAPTURE;
			/* The window opened inside this thread's open ranges. */
			if (t != &no_thread)
				replay_levels(t, depth);
		}
		if (hit & MATCH_CAPTURE) /* a window may have opened */
			st = atomic_load_explicit(&evbuf_state, memory_order_relaxed);
	}
	if (__builtin_expect(recording(st, mode, force), 0)) {
		int64_t ts = clock_now_ns();
		uint64_t a = evbuf_nvtx_a(d->id, category, 0);

		pushed_at = ts;
		uint64_t (*hook)(void) = atomic_load_explicit(&range_push_hook,
							      memory_order_acquire);
		/* An external correlation id, pushed only for a tracked level
		 * (its pop must come back to the hook). */
		uint64_t id = hook && lv ? hook() : 0;
		int rc;

		if (id)
			flags |= LV_HOOKED;

		if (is_wide(m)) {
			rc = append_wide(EVBUF_RANGE_PUSH, ts, m->p, id, a);
		} else {
			text = msg_plain(m, &len);
			rc = evbuf_append_raw(EVBUF_RANGE_PUSH, ts, text, len, id, a);
		}
		if (rc == 0) {
			void (*pushed)(void) = atomic_load_explicit(&range_pushed_hook,
								   memory_order_acquire);

			gen = (uint32_t)(st >> 1);
			if (pushed)
				pushed();
		} else {
			flags |= LV_DROPPED;
		}
	}
	if (lv) {
		lv->domain = d->id;
		lv->category = category;
		lv->gen = gen;
		lv->ts = pushed_at || !(mode & MODE_ARMED) ? pushed_at : clock_now_ns();
		lv->flags = (uint16_t)(flags | (force ? LV_FORCED : 0));
		if (text && m->type == NVTX_ABI_MESSAGE_ASCII) {
			/* Recorded just now: the length is known. */
			if (len > NVTX_LEVEL_NAME)
				len = NVTX_LEVEL_NAME;
			memcpy(lv->n.name, text, len);
			lv->len = (uint16_t)len;
			lv->flags |= LV_NAMED;
		} else if (gen || (mode & MODE_ARMED) ||
			   m->type == NVTX_ABI_MESSAGE_REGISTERED) {
			/* A registered string costs one pointer store: always kept. */
			level_name(lv, m);
		}
	}
	return (int)depth;
}

/* Appends a pop that matches no recorded level (unbalanced, or untracked
 * beyond NVTX_LEVELS): the assembler pairs or counts it. */
static void append_bare_pop(uint64_t st, uint32_t mode, int force, uint32_t domain)
{
	if (recording(st, mode, force))
		evbuf_append_raw(EVBUF_RANGE_POP, clock_now_ns(), NULL, 0, 0,
				 evbuf_nvtx_a(domain, 0, 0));
}

/* A pop in domain d. Returns the level ended, or -1 when none was open.
 * (Fields of the level are read one by one, as the push wrote them: a wide
 * copy of a level just written stalls store forwarding.) */
__attribute__((noinline))
static int range_pop(const struct nvtx_domain *d, int force)
{
	uint64_t st = atomic_load_explicit(&evbuf_state, memory_order_relaxed);
	uint32_t mode = atomic_load_explicit(&nvtx_mode, memory_order_acquire);
	struct nvtx_thread *t = thread_self();
	struct nvtx_level *lv;
	uint32_t depth, i, len = 0, fl = 0, category, flags;
	const char *name = NULL;
	int64_t ts = 0;

	if (t == &no_thread) {
		append_bare_pop(st, mode, force, d->id);
		return 0;
	}
	materialize(t);
	depth = me.depth;
	if (depth == 0) {
		append_bare_pop(st, mode, force, d->id);
		return -1;
	}
	if (depth > NVTX_LEVELS) {
		/* The top level is untracked: assume it is this domain's. */
		set_depth(depth - 1);
		append_bare_pop(st, mode, force, d->id);
		return (int)(depth - 1);
	}
	for (i = depth; i-- > 0;)
		if (t->lv[i].domain == d->id)
			break;
	if (i == UINT32_MAX) { /* no open level of this domain */
		append_bare_pop(st, mode, force, d->id);
		return -1;
	}
	lv = &t->lv[i];
	category = lv->category;
	flags = lv->flags;
	if (__builtin_expect(recording(st, mode, force), 0) && !(flags & LV_DROPPED)) {
		if (lv->gen != (uint32_t)(st >> 1)) {
			/* The push happened before this window. */
			fl = EVBUF_A_EARLY;
			if (flags & LV_NAMED) {
				name = lv->n.name;
				len = lv->len;
			} else if (flags & LV_REGISTERED) {
				name = lv->n.reg->s;
				len = lv->n.reg->len < EVBUF_NAME_MAX ? lv->n.reg->len : EVBUF_NAME_MAX;
			}
		}
		ts = clock_now_ns();
		evbuf_append_raw(EVBUF_RANGE_POP, ts, name, len, 0,
				 evbuf_nvtx_a(d->id, category, fl));
	}
	if (flags & LV_HOOKED) { /* the push hook pushed an id: pop it */
		void (*hook)(void) = atomic_load_explicit(&range_pop_hook,
							  memory_order_acquire);
		if (hook)
			hook();
	}
	if (i + 1 < depth) /* another domain's levels above: close the gap */
		memmove(&t->lv[i], &t->lv[i + 1], (depth - i - 1) * sizeof *lv);
	set_depth(depth - 1);
	if (__builtin_expect(flags & (LV_STEP | LV_CAPTURE), 0)) {
		struct nvtx_cfg *cfg = atomic_load_explicit(&nvtx_cfg, memory_order_acquire);
		if ((flags & LV_STEP) && cfg)
			cfg->c.step(cfg->c.ctx);
		if ((flags & LV_CAPTURE) && cfg)
			cfg->c.capture_end(cfg->c.ctx, ts ? ts : clock_now_ns());
	}
	return (int)(depth - 1);
}

/* A start in domain d. Returns the range id (never 0). */
static uint64_t range_start(const struct nvtx_domain *d, const struct nvtx_msg *m,
			    uint32_t category)
{
	uint64_t st = atomic_load_explicit(&evbuf_state, memory_order_relaxed);
	uint32_t mode = atomic_load_explicit(&nvtx_mode, memory_order_acquire);
	struct nvtx_thread *t = thread_self();
	uint64_t id, rid, trig = 0;
	uint32_t seq = 1;

	if (t != &no_thread) {
		if (++t->seq == 0)
			t->seq = 1;
		seq = t->seq;
	}
	if (__builtin_expect(mode & (MODE_STEP_RANGE | MODE_CAPTURE), 0)) {
		struct nvtx_cfg *cfg = atomic_load_explicit(&nvtx_cfg, memory_order_acquire);
		uint32_t hit = msg_match(cfg, d, m, (mode & MODE_STEP_RANGE ? MATCH_STEP_RANGE : 0) |
					 (mode & MODE_CAPTURE ? MATCH_CAPTURE : 0));
		if (hit & MATCH_STEP_RANGE)
			trig |= ID_STEP;
		if ((hit & MATCH_CAPTURE) && capture_begin(cfg)) {
			trig |= ID_CAPTURE;
			replay_levels(t, me.depth);
		}
		if (hit & MATCH_CAPTURE)
			st = atomic_load_explicit(&evbuf_state, memory_order_relaxed);
	}
	id = trig | (uint64_t)((uint32_t)t->tid & 0x3fffff) << 32 | seq;
	if (__builtin_expect(recording(st, mode, 0), 0)) {
		rid = id | (uint64_t)gen_tag(st >> 1) << ID_TAG_SHIFT;
		if (append_msg(EVBUF_RANGE_START, clock_now_ns(), m, rid,
			       evbuf_nvtx_a(d->id, category, 0)) == 0)
			return rid;
		return id | (uint64_t)ID_TAG_DROPPED << ID_TAG_SHIFT;
	}
	return id;
}

/* An end of range `id` in domain d. */
static void range_end(const struct nvtx_domain *d, uint64_t id)
{
	uint64_t st = atomic_load_explicit(&evbuf_state, memory_order_relaxed);
	uint32_t mode = atomic_load_explicit(&nvtx_mode, memory_order_acquire);
	uint32_t tag = (uint32_t)(id >> ID_TAG_SHIFT) & 0xff;
	int64_t ts = 0;

	if (__builtin_expect(recording(st, mode, 0), 0) && tag != ID_TAG_DROPPED) {
		ts = clock_now_ns();
		evbuf_append_raw(EVBUF_RANGE_END, ts, NULL, 0, id,
				 evbuf_nvtx_a(d->id, 0, tag == gen_tag(st >> 1) ? 0 : EVBUF_A_EARLY));
	}
	if (__builtin_expect(id & (ID_STEP | ID_CAPTURE), 0)) {
		struct nvtx_cfg *cfg = atomic_load_explicit(&nvtx_cfg, memory_order_acquire);
		if ((id & ID_STEP) && cfg)
			cfg->c.step(cfg->c.ctx);
		if ((id & ID_CAPTURE) && cfg)
			cfg->c.capture_end(cfg->c.ctx, ts ? ts : clock_now_ns());
	}
}

/* A mark in domain d. */
static void mark(const struct nvtx_domain *d, const struct nvtx_msg *m,
		 uint32_t category, int force)
{
	uint64_t st = atomic_load_explicit(&evbuf_state, memory_order_relaxed);
	uint32_t mode = atomic_load_explicit(&nvtx_mode, memory_order_acquire);

	if (__builtin_expect(recording(st, mode, force), 0))
		append_msg(EVBUF_MARK, clock_now_ns(), m, 0, evbuf_nvtx_a(d->id, category, 0));
	if (__builtin_expect(mode & MODE_STEP_MARK, 0)) {
		struct nvtx_cfg *cfg = atomic_load_explicit(&nvtx_cfg, memory_order_acquire);
		if (msg_match(cfg, d, m, MATCH_STEP_MARK))
			cfg->c.step(cfg->c.ctx);
	}
}

/* ------------------------------------------------------------ the quiet path */

/* Outside a window, with no trigger configured and names not kept, a push
 * or pop only moves the thread's position in its shadow (struct nvtx_tls).
 * The entry points do that much as leaves without a stack frame; these
 * helpers return -2 (never a level) when another path must run. */

/* Nonzero when a push cannot take the quiet path: a window is open, a
 * range trigger is configured or names are kept. `st`, `mode`:
 * evbuf_state, nvtx_mode. (A pop can whenever no window is open.) */
static inline uint32_t push_not_quiet(uint64_t st, uint32_t mode)
{
	return ((uint32_t)st & 1) | (mode & (MODE_ARMED | MODE_STEP_RANGE | MODE_CAPTURE));
}

/* A push in the default domain with nothing to remember: counted only. */
static inline int push_plain_quiet(void)
{
	uint32_t depth = me.depth;

	if (depth >= NVTX_LEVELS)
		return -2;
	me.depth = depth + 1;
	return (int)depth;
}

/* A push that writes its level: a domain, a category, a registered name or
 * forced (prof_range_push). */
static inline int push_level_quiet(uint32_t domain, uint32_t category,
				   const struct nvtx_string *reg, int force)
{
	struct nvtx_thread *t = me.t;
	struct nvtx_level *lv;
	uint32_t depth = me.depth;

	if (!t || depth >= NVTX_LEVELS) /* no_thread: depth is NO_THREAD_DEPTH */
		return -2;
	materialize(t);
	lv = &t->lv[depth];
	lv->domain = domain;
	lv->category = category;
	lv->gen = 0;
	lv->ts = 0;
	lv->flags = (uint16_t)((reg ? LV_REGISTERED : 0) | (force ? LV_FORCED : 0));
	if (reg)
		lv->n.reg = reg;
	set_depth(depth + 1);
	return (int)depth;
}

/* A push while armed (names kept) outside a window: the level keeps its
 * name, as range_push() would. */
static int push_named_quiet(uint32_t domain, uint32_t category,
			    const struct nvtx_msg *m, int force)
{
	struct nvtx_thread *t = me.t;
	struct nvtx_level *lv;
	uint32_t depth = me.depth;

	if (!t || depth >= NVTX_LEVELS)
		return -2;
	materialize(t);
	lv = &t->lv[depth];
	lv->domain = domain;
	lv->category = category;
	lv->gen = 0;
	lv->ts = clock_now_ns(); /* armed: the watchdog may ask how long */
	lv->flags = (uint16_t)(force ? LV_FORCED : 0);
	level_name(lv, m);
	set_depth(depth + 1);
	return (int)depth;
}

static inline int push_quiet(uint32_t domain, uint32_t category,
			     const struct nvtx_string *reg, int force)
{
	if ((domain | category | force) == 0 && !reg)
		return push_plain_quiet();
	return push_level_quiet(domain, category, reg, force);
}

static inline int pop_quiet(uint32_t domain)
{
	uint32_t depth = me.depth;
	const struct nvtx_level *lv;

	if (depth - 1 >= NVTX_LEVELS) /* none open, untracked, or no_thread */
		return -2;
	if (depth > me.mark) {
		/* The top level is plain: the default domain's. */
		if (domain != 0)
			return -2;
	} else {
		lv = &me.t->lv[depth - 1];
		if (lv->domain != domain || (lv->flags & (LV_STEP | LV_CAPTURE | LV_HOOKED)))
			return -2;
		me.mark = depth - 1;
	}
	me.depth = depth - 1;
	return (int)(depth - 1);
}

/* Whether a push of message m in domain d, outside a window, may be a
 * range trigger (only then does range_push need to compare names):
 * exactly what msg_match() would answer, or 1 when it cannot tell cheaply. */
static int may_trigger(uint32_t mode, const struct nvtx_domain *d, const struct nvtx_msg *m)
{
	uint32_t want = (mode & MODE_STEP_RANGE ? MATCH_STEP_RANGE : 0) |
			(mode & MODE_CAPTURE ? MATCH_CAPTURE : 0);
	struct nvtx_cfg *cfg = want ? atomic_load_explicit(&nvtx_cfg, memory_order_acquire) : NULL;
	const struct nvtx_string *s;
	const char *text = "";

	if (!want)
		return 0;
	want &= atomic_load_explicit(&d->match, memory_order_relaxed);
	if (!want || !cfg)
		return 0;
	if (m->type == NVTX_ABI_MESSAGE_REGISTERED) {
		s = string_of(m->p);
		return s && (atomic_load_explicit(&s->match, memory_order_relaxed) & want);
	}
	if (is_wide(m) || cfg->long_range)
		return 1;
	if (m->type == NVTX_ABI_MESSAGE_ASCII && m->p)
		text = m->p;
	/* Triggers are shorter than EVBUF_NAME_MAX: name_is() on the first
	 * EVBUF_NAME_MAX bytes is strcmp. */
	return ((want & MATCH_STEP_RANGE) && cfg->c.step_range &&
		strcmp(text, cfg->c.step_range) == 0) ||
	       ((want & MATCH_CAPTURE) && cfg->c.capture_range &&
		strcmp(text, cfg->c.capture_range) == 0);
}

/* ------------------------------------------------------------ the recording path */

/* Inside a window, a push or pop of the thread's top level, written (not
 * plain) and in reach (below NVTX_LEVELS), whose name is no trigger, with
 * no hook installed, is recorded here: a clock read, one inline append
 * (compact records), the level. Everything else (GPU links, range stacks,
 * triggers, levels not at the top or pushed before the window) is
 * range_push() and range_pop(), which record the same thing. */

/* Whether push_fast() applies to a push of m in domain d. */
static inline int push_fast_ok(uint64_t st, uint32_t mode, int force,
			       const struct nvtx_domain *d, const struct nvtx_msg *m)
{
	uint32_t depth = me.depth;

	return (st & 1) && ((mode & MODE_RECORD) || force) && me.t &&
	       depth < NVTX_LEVELS && me.mark == depth &&
	       !atomic_load_explicit(&range_push_hook, memory_order_relaxed) &&
	       !atomic_load_explicit(&range_pushed_hook, memory_order_relaxed) &&
	       !may_trigger(mode, d, m);
}

/* Records a push of `text` (len bytes, at most EVBUF_NAME_MAX; `reg` its
 * registered string, or NULL for an ASCII name) in domain d. push_fast_ok()
 * said yes. Returns the level. */
__attribute__((always_inline))
static inline int push_fast(uint64_t st, const struct nvtx_domain *d,
			    uint32_t category, const char *text, uint32_t len,
			    const struct nvtx_string *reg, int force)
{
	uint32_t depth = me.depth, flags = force ? LV_FORCED : 0;
	struct nvtx_level *lv = &me.t->lv[depth];
	int64_t ts = clock_now_ns();

	if (evbuf_append_fast(st, EVBUF_RANGE_PUSH, ts, text, len, 0,
			      evbuf_nvtx_a(d->id, category, 0)) == 0) {
		lv->gen = (uint32_t)(st >> 1);
	} else {
		lv->gen = 0;
		flags |= LV_DROPPED;
	}
	lv->domain = d->id;
	lv->category = category;
	lv->ts = ts;
	if (reg) {
		lv->n.reg = reg;
		flags |= LV_REGISTERED;
	} else {
		uint32_t n = len < NVTX_LEVEL_NAME ? len : NVTX_LEVEL_NAME;
		evbuf_copy_small(lv->n.name, text, n);
		lv->len = (uint16_t)n;
		flags |= LV_NAMED;
	}
	lv->flags = (uint16_t)flags;
	me.depth = depth + 1;
	me.mark = depth + 1;
	return (int)depth;
}

/* Records a pop in domain `domain` when its level is the top one and was
 * recorded in this window. Returns the level, or -2. */
__attribute__((always_inline))
static inline int pop_fast(uint64_t st, uint32_t mode, uint32_t domain, int force)
{
	uint32_t depth = me.depth;
	const struct nvtx_level *lv;

	if (!(st & 1) || !((mode & MODE_RECORD) || force) || !me.t ||
	    depth - 1 >= NVTX_LEVELS || me.mark != depth)
		return -2;
	lv = &me.t->lv[depth - 1];
	if (lv->domain != domain || lv->gen != (uint32_t)(st >> 1) ||
	    (lv->flags & (LV_STEP | LV_CAPTURE | LV_DROPPED)) ||
	    atomic_load_explicit(&range_pop_hook, memory_order_relaxed))
		return -2;
	evbuf_append_fast(st, EVBUF_RANGE_POP, clock_now_ns(), NULL, 0, 0,
			  evbuf_nvtx_a(domain, lv->category, 0));
	me.depth = depth - 1;
	me.mark = depth - 1;
	return (int)(depth - 1);
}

/* The registered string of an attributes struct, or NULL. */
static inline const struct nvtx_string *attr_registered(const struct nvtx_abi_attributes *a)
{
	struct nvtx_msg m = attr_msg(a);

	return m.type == NVTX_ABI_MESSAGE_REGISTERED ? string_of(m.p) : NULL;
}

/* ------------------------------------------------------------ NVTX entry points */

static struct nvtx_msg msg_a(const char *s)
{
	struct nvtx_msg m = { NVTX_ABI_MESSAGE_ASCII, s };
	return m;
}

static struct nvtx_msg msg_w(const wchar_t *s)
{
	struct nvtx_msg m = { NVTX_ABI_MESSAGE_UNICODE, s };
	return m;
}

static void MarkEx(const struct nvtx_abi_attributes *a)
{
	struct nvtx_msg m = attr_msg(a);
	mark(&default_domain, &m, attr_category(a), 0);
}

static void MarkA(const char *s)
{
	struct nvtx_msg m = msg_a(s);
	mark(&default_domain, &m, 0, 0);
}

static void MarkW(const wchar_t *s)
{
	struct nvtx_msg m = msg_w(s);
	mark(&default_domain, &m, 0, 0);
}

static uint64_t RangeStartEx(const struct nvtx_abi_attributes *a)
{
	struct nvtx_msg m = attr_msg(a);
	return range_start(&default_domain, &m, attr_category(a));
}

static uint64_t RangeStartA(const char *s)
{
	struct nvtx_msg m = msg_a(s);
	return range_start(&default_domain, &m, 0);
}

static uint64_t RangeStartW(const wchar_t *s)
{
	struct nvtx_msg m = msg_w(s);
	return range_start(&default_domain, &m, 0);
}

static void RangeEnd(uint64_t id)
{
	range_end(&default_domain, id);
}

/* The other paths of the pushes and pops, out of line so that the quiet
 * path of each entry point stays a leaf without a stack frame. */
__attribute__((noinline)) static int push_ex(const struct nvtx_domain *d,
					     const struct nvtx_abi_attributes *a)
{
	uint64_t st = atomic_load_explicit(&evbuf_state, memory_order_relaxed);
	uint32_t mode = atomic_load_explicit(&nvtx_mode, memory_order_acquire);
	struct nvtx_msg m = attr_msg(a);
	uint32_t category = attr_category(a);

	if (!(st & 1)) {
		/* Outside a window, armed or a trigger configured: the name is
		 * not a trigger. */
		if (!may_trigger(mode, d, &m)) {
			int r = mode & MODE_ARMED ? push_named_quiet(d->id, category, &m, 0)
						  : push_quiet(d->id, category, attr_registered(a), 0);
			if (r != -2)
				return r;
		}
	} else if (push_fast_ok(st, mode, 0, d, &m)) {
		const struct nvtx_string *reg;

		if (m.type == NVTX_ABI_MESSAGE_ASCII && m.p)
			return push_fast(st, d, category, m.p,
					 (uint32_t)strnlen(m.p, EVBUF_NAME_MAX), NULL, 0);
		if (m.type == NVTX_ABI_MESSAGE_REGISTERED && (reg = string_of(m.p)))
			return push_fast(st, d, category, reg->s,
					 reg->len < EVBUF_NAME_MAX ? reg->len : EVBUF_NAME_MAX,
					 reg, 0);
	}
	return range_push(d, &m, category, 0);
}

__attribute__((noinline)) static int push_a(const char *s, int force)
{
	uint64_t st = atomic_load_explicit(&evbuf_state, memory_order_relaxed);
	uint32_t mode = atomic_load_explicit(&nvtx_mode, memory_order_acquire);
	struct nvtx_msg m = msg_a(s);

	if (!(st & 1)) {
		/* Outside a window, armed or a trigger configured: the name is
		 * not a trigger. */
		if (!may_trigger(mode, &default_domain, &m)) {
			int r = mode & MODE_ARMED ? push_named_quiet(0, 0, &m, force)
						  : push_quiet(0, 0, NULL, force);
			if (r != -2)
				return r;
		}
	} else if (s && push_fast_ok(st, mode, force, &default_domain, &m)) {
		return push_fast(st, &default_domain, 0, s,
				 (uint32_t)strnlen(s, EVBUF_NAME_MAX), NULL, force);
	}
	return range_push(&default_domain, &m, 0, force);
}

__attribute__((noinline)) static int push_w(const wchar_t *s)
{
	struct nvtx_msg m = msg_w(s);
	return range_push(&default_domain, &m, 0, 0);
}

__attribute__((noinline)) static int pop_slow(const struct nvtx_domain *d, int force)
{
	uint64_t st = atomic_load_explicit(&evbuf_state, memory_order_relaxed);
	uint32_t mode = atomic_load_explicit(&nvtx_mode, memory_order_acquire);
	int r = pop_fast(st, mode, d->id, force);

	return r != -2 ? r : range_pop(d, force);
}

/* Whether a push may take the quiet path now. */
static inline int push_is_quiet(void)
{
	uint64_t st = atomic_load_explicit(&evbuf_state, memory_order_relaxed);
	uint32_t mode = atomic_load_explicit(&nvtx_mode, memory_order_relaxed);

	return __builtin_expect(!push_not_quiet(st, mode), 1);
}

/* Whether a pop may take the quiet path now: no window is open. */
static inline int pop_is_quiet(void)
{
	return __builtin_expect(!evbuf_active(), 1);
}

static int RangePushEx(const struct nvtx_abi_attributes *a)
{
	int r = push_is_quiet() ? push_quiet(0, attr_category(a), attr_registered(a), 0) : -2;

	return r != -2 ? r : push_ex(&default_domain, a);
}

static int RangePushA(const char *s)
{
	int r = push_is_quiet() ? push_plain_quiet() : -2;

	return r != -2 ? r : push_a(s, 0);
}

static int RangePushW(const wchar_t *s)
{
	int r = push_is_quiet() ? push_plain_quiet() : -2;

	return r != -2 ? r : push_w(s);
}

static int RangePop(void)
{
	int r = pop_is_quiet() ? pop_quiet(0) : -2;

	return r != -2 ? r : pop_slow(&default_domain, 0);
}

static void NameCategoryA(uint32_t category, const char *name)
{
	nvtx_registry_category(0, category, dup_name(name));
}

static void NameCategoryW(uint32_t category, const wchar_t *name)
{
	nvtx_registry_category(0, category, dup_wide(name));
}

static void NameOsThreadA(uint32_t tid, const char *name)
{
	nvtx_registry_thread(tid, dup_name(name));
}

static void NameOsThreadW(uint32_t tid, const wchar_t *name)
{
	nvtx_registry_thread(tid, dup_wide(name));
}

static void DomainMarkEx(const void *domain, const struct nvtx_abi_attributes *a)
{
	struct nvtx_msg m = attr_msg(a);
	mark(domain_of(domain), &m, attr_category(a), 0);
}

static uint64_t DomainRangeStartEx(const void *domain, const struct nvtx_abi_attributes *a)
{
	struct nvtx_msg m = attr_msg(a);
	return range_start(domain_of(domain), &m, attr_category(a));
}

static void DomainRangeEnd(const void *domain, uint64_t id)
{
	range_end(domain_of(domain), id);
}

static int DomainRangePushEx(const void *domain, const struct nvtx_abi_attributes *a)
{
	const struct nvtx_domain *d = domain_of(domain);
	int r = push_is_quiet() ? push_quiet(d->id, attr_category(a), attr_registered(a), 0) : -2;

	return r != -2 ? r : push_ex(d, a);
}

static int DomainRangePop(const void *domain)
{
	const struct nvtx_domain *d = domain_of(domain);
	int r = pop_is_quiet() ? pop_quiet(d->id) : -2;

	return r != -2 ? r : pop_slow(d, 0);
}

static void DomainNameCategoryA(const void *domain, uint32_t category, const char *name)
{
	nvtx_registry_category(domain_of(domain)->id, category, dup_name(name));
}

static void DomainNameCategoryW(const void *domain, uint32_t category, const wchar_t *name)
{
	nvtx_registry_category(domain_of(domain)->id, category, dup_wide(name));
}

static void *DomainRegisterStringA(const void *domain, const char *s)
{
	return nvtx_registry_string(domain_of(domain)->id, dup_name(s));
}

static void *DomainRegisterStringW(const void *domain, const wchar_t *s)
{
	return nvtx_registry_string(domain_of(domain)->id, dup_wide(s));
}

static void *DomainCreateA(const char *name)
{
	return nvtx_registry_domain(dup_name(name));
}

static void *DomainCreateW(const wchar_t *name)
{
	return nvtx_registry_domain(dup_wide(name));
}

/* Domains are never forgotten: a name created twice is one domain, and
 * events recorded before the destroy keep their domain's name. */
static void DomainDestroy(const void *domain)
{
	(void)domain;
}

struct slot {
	unsigned id;
	nvtx_abi_fn fn;
};

#define SLOT(mod, name) { NVTX_ABI_##mod##_##name, (nvtx_abi_fn)name }

static const struct slot core_slots[] = {
	SLOT(CORE, MarkEx), SLOT(CORE, MarkA), SLOT(CORE, MarkW),
	SLOT(CORE, RangeStartEx), SLOT(CORE, RangeStartA), SLOT(CORE, RangeStartW),
	SLOT(CORE, RangeEnd),
	SLOT(CORE, RangePushEx), SLOT(CORE, RangePushA), SLOT(CORE, RangePushW),
	SLOT(CORE, RangePop),
	SLOT(CORE, NameCategoryA), SLOT(CORE, NameCategoryW),
	SLOT(CORE, NameOsThreadA), SLOT(CORE, NameOsThreadW),
};

static const struct slot core2_slots[] = {
	SLOT(CORE2, DomainMarkEx), SLOT(CORE2, DomainRangeStartEx),
	SLOT(CORE2, DomainRangeEnd), SLOT(CORE2, DomainRangePushEx),
	SLOT(CORE2, DomainRangePop),
	SLOT(CORE2, DomainNameCategoryA), SLOT(CORE2, DomainNameCategoryW),
	SLOT(CORE2, DomainRegisterStringA), SLOT(CORE2, DomainRegisterStringW),
	SLOT(CORE2, DomainCreateA), SLOT(CORE2, DomainCreateW),
	SLOT(CORE2, DomainDestroy),
};

/* Writes our functions into one module's slots. Returns 0 or -1. */
static int fill_module(const struct nvtx_abi_callbacks *cb, int module,
		       const struct slot *slots, size_t n)
{
	nvtx_abi_fn **table = NULL;
	unsigned int size = 0;
	size_t i;

	if (!cb->get_module_function_table(module, &table, &size) || !table)
		return -1;
	for (i = 0; i < n; i++)
		if (slots[i].id < size && table[slots[i].id])
			*table[slots[i].id] = slots[i].fn;
	return 0;
}

/* PROF_DISABLE set to a true value (the shim's own check does the rest). */
static int disabled_by_env(void)
{
	const char *v = getenv("PROF_DISABLE");

	return v && (strcmp(v, "1") == 0 || strcasecmp(v, "true") == 0 ||
		     strcasecmp(v, "yes") == 0 || strcasecmp(v, "on") == 0);
}

/*
 * The NVTX injection entry point: called once by each NVTX instance in the
 * process (each library embedding NVTX3), from that instance's first NVTX
 * call, on whatever thread made it. Fills that instance's CORE and CORE2
 * slots. Returns 1 (attached) or 0 (NVTX then makes every call a no-op).
 */
int (*nvtx_first_copy)(const void *(*get)(uint32_t id));

NVTX_EXPORT int InitializeInjectionNvtx2(nvtx_abi_get_export_table get)
{
	const struct nvtx_abi_callbacks *cb;
	const struct nvtx_abi_version_info *vi;

	if (nvtx_first_copy)
		return get ? nvtx_first_copy(get) : 0;
	if (!get || disabled_by_env())
		return 0;
	cb = get(NVTX_ABI_ETID_CALLBACKS);
	if (!cb || cb->struct_size < sizeof *cb || !cb->get_module_function_table)
		return 0;
	if (fill_module(cb, NVTX_ABI_MODULE_CORE, core_slots,
			sizeof core_slots / sizeof core_slots[0]) != 0)
		return 0;
	/* CORE2 (domains) is optional: an old NVTX has none. */
	fill_module(cb, NVTX_ABI_MODULE_CORE2, core2_slots,
		    sizeof core2_slots / sizeof core2_slots[0]);
	vi = get(NVTX_ABI_ETID_VERSIONINFO);
	if (vi && vi->struct_size >= sizeof *vi && vi->set_injection_nvtx_version)
		vi->set_injection_nvtx_version(NVTX_ABI_VERSION);
	atomic_store(&nvtx_is_attached, 1);
	return 1;
}

/* ------------------------------------------------------------ for the core */

/* A copy of s in the block at *p (advanced), or NULL for NULL. */
static const char *cfg_str(const char *s, char **p)
{
	char *d;

	if (!s)
		return NULL;
	d = *p;
	strcpy(d, s);
	*p += strlen(s) + 1;
	return d;
}

void nvtx_configure(const struct nvtx_config *c)
{
	const char *strs[] = { c->step_range, c->step_mark, c->step_domain,
			       c->capture_range, c->capture_domain };
	size_t size = sizeof(struct nvtx_cfg), i;
	struct nvtx_cfg *cfg;
	uint32_t mode;
	char *p;

	for (i = 0; i < sizeof strs / sizeof strs[0]; i++)
		if (strs[i])
			size += strlen(strs[i]) + 1;
	cfg = calloc(1, size);
	if (!cfg)
		return; /* no triggers: steps come from prof_step() only */
	cfg->c = *c;
	p = (char *)(cfg + 1);
	cfg->c.step_range = cfg_str(c->step_range, &p);
	cfg->c.step_mark = cfg_str(c->step_mark, &p);
	cfg->c.step_domain = cfg_str(c->step_domain, &p);
	cfg->c.capture_range = cfg_str(c->capture_range, &p);
	cfg->c.capture_domain = cfg_str(c->capture_domain, &p);
	cfg->long_range = (c->step_range && strlen(c->step_range) >= EVBUF_NAME_MAX) ||
			  (c->capture_range && strlen(c->capture_range) >= EVBUF_NAME_MAX);

	pthread_mutex_lock(&cfg_lock);
	cfg->older = atomic_load(&nvtx_cfg);
	atomic_store_explicit(&nvtx_cfg, cfg, memory_order_release);
	nvtx_registry_rematch(&cfg->c);
	atomic_store(&default_domain.match, domain_match(&cfg->c, NVTX_DEFAULT_DOMAIN));
	mode = (c->record ? MODE_RECORD : 0) |
	       (cfg->c.step_range && c->step ? MODE_STEP_RANGE : 0) |
	       (cfg->c.step_mark && c->step ? MODE_STEP_MARK : 0) |
	       (cfg->c.capture_range && c->capture_begin && c->capture_end ? MODE_CAPTURE : 0);
	mode |= atomic_load(&nvtx_mode) & MODE_ARMED;
	atomic_store_explicit(&nvtx_mode, mode, memory_order_release);
	pthread_mutex_unlock(&cfg_lock);
}

void nvtx_replay(void)
{
	if (me.depth > 0)
		replay_levels(thread_self(), me.depth);
}

void nvtx_arm(int on)
{
	if (on)
		atomic_fetch_or(&nvtx_mode, (uint32_t)MODE_ARMED);
	else
		atomic_fetch_and(&nvtx_mode, ~(uint32_t)MODE_ARMED);
}

int nvtx_attached(void)
{
	return atomic_load(&nvtx_is_attached);
}

void nvtx_prof_push(const char *name)
{
	if (!push_is_quiet() || push_level_quiet(0, 0, NULL, 1) == -2)
		push_a(name ? name : "(null)", 1);
}

void nvtx_prof_pop(void)
{
	if (!pop_is_quiet() || pop_quiet(0) == -2)
		pop_slow(&default_domain, 1);
}

void nvtx_prof_mark(const char *name)
{
	struct nvtx_msg m = msg_a(name ? name : "(null)");
	mark(&default_domain, &m, 0, 1);
}

size_t nvtx_open_ranges(struct nvtx_open_range *out, size_t max)
{
	struct nvtx_thread *t;
	size_t n = 0;

	pthread_mutex_lock(&threads_lock);
	for (t = threads; t && n < max; t = t->next) {
		uint32_t depth = t->tls->depth, mark = t->tls->mark, i;

		if (depth > NVTX_LEVELS)
			depth = NVTX_LEVELS; /* deeper ones are only counted */
		if (mark > depth)
			mark = depth;
		for (i = 0; i < depth && n < max; i++) {
			const struct nvtx_level *lv = &t->lv[i];
			struct nvtx_open_range *r = &out[n++];
			uint16_t flags = lv->flags, len = lv->len;

			memset(r, 0, sizeof *r);
			r->tid = t->tid;
			r->level = i;
			if (i >= mark) {
				/* counted only (nothing was armed) */
				continue;
			}
			r->domain = lv->domain;
			r->start_ns = lv->ts;
			if (flags & LV_NAMED) {
				if (len > NVTX_LEVEL_NAME)
					len = NVTX_LEVEL_NAME;
				memcpy(r->name, lv->n.name, len);
				r->name[len] = '\0';
			} else if (flags & LV_REGISTERED) {
				nvtx_registry_string_text(lv->n.reg, r->name,
							  sizeof r->name);
			}
		}
	}
	pthread_mutex_unlock(&threads_lock);
	return n;
}

/* pystacks — Python stack snapshots, merged at collect by
 * src/stacks/pymerge.c (see pystacks.h). */
#include "pystacks.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../stores.h"
#include "../../stacks/pymerge.h"
#include "../../common/grow.h"
#include "../../common/log.h"

#define PYS_WINDOWS (6 + PYSTACKS_REC_KEEP) /* open + closed windows not
					      yet collected, and recorder
					      segments */
#define PYS_CAPTURE_DEPTH 256 /* frames pystacks_capture_now keeps */

/* The snapshots of one window generation or recorder segment (gen 0: a
 * free slot). Snapshots may share text (off, len). */
struct pys_window {
	uint64_t gen;
	bool open;
	bool rec;           /* a recorder segment's: bounded, newest kept */
	bool dumped;        /* ... taken by a dump: kept for its collect */
	struct pymerge_snap *v;
	size_t n, cap;
	char *text;
	size_t tlen, tcap;
	uint64_t dropped;
};

static struct {
	pthread_mutex_t lock;
	struct pys_window w[PYS_WINDOWS];
	uintptr_t eval_lo, eval_hi;  /* _PyEval_EvalFrameDefault's code */
} pys = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* CPython's API for pystacks_capture_now (3.9+: the frame accessors),
 * looked up at run time; objects are opaque. */
static struct {
	int (*GILState_Check)(void);
	int (*IsFinalizing)(void);
	void *(*ThreadState_Get)(void);
	void *(*ThreadState_GetFrame)(void *tstate);
	void *(*Frame_GetCode)(void *frame);
	void *(*Frame_GetBack)(void *frame);
	int (*Frame_GetLineNumber)(void *frame);
	void *(*Object_GetAttrString)(void *o, const char *name);
	const char *(*Unicode_AsUTF8)(void *o);
	void (*DecRef)(void *o);
	void (*Err_Fetch)(void **type, void **value, void **tb);
	void (*Err_Restore)(void *type, void *value, void *tb);
	_Atomic int ok;
} cpy;

/* Looks up what pystacks_capture_now calls; cpy.ok when all are there. */
static void find_capi(void)
{
	static const struct {
		const char *name;
		size_t off;
	} need[] = {
		{ "PyGILState_Check", offsetof(__typeof__(cpy), GILState_Check) },
		{ "PyThreadState_Get", offsetof(__typeof__(cpy), ThreadState_Get) },
		{ "PyThreadState_GetFrame", offsetof(__typeof__(cpy), ThreadState_GetFrame) },
		{ "PyFrame_GetCode", offsetof(__typeof__(cpy), Frame_GetCode) },
		{ "PyFrame_GetBack", offsetof(__typeof__(cpy), Frame_GetBack) },
		{ "PyFrame_GetLineNumber", offsetof(__typeof__(cpy), Frame_GetLineNumber) },
		{ "PyObject_GetAttrString", offsetof(__typeof__(cpy), Object_GetAttrString) },
		{ "PyUnicode_AsUTF8", offsetof(__typeof__(cpy), Unicode_AsUTF8) },
		{ "Py_DecRef", offsetof(__typeof__(cpy), DecRef) },
		{ "PyErr_Fetch", offsetof(__typeof__(cpy), Err_Fetch) },
		{ "PyErr_Restore", offsetof(__typeof__(cpy), Err_Restore) },
	};
	void *sym;
	size_t i;

	for (i = 0; i < sizeof need / sizeof need[0]; i++) {
		sym = dlsym(RTLD_DEFAULT, need[i].name);
		if (!sym)
			return;
		memcpy((char *)&cpy + need[i].off, &sym, sizeof sym);
	}
	sym = dlsym(RTLD_DEFAULT, "Py_IsFinalizing");
	if (!sym)
		sym = dlsym(RTLD_DEFAULT, "_Py_IsFinalizing");
	memcpy(&cpy.IsFinalizing, &sym, sizeof sym);
	atomic_store(&cpy.ok, 1);
}

int pystacks_init(void)
{
	void *f = dlsym(RTLD_DEFAULT, "_PyEval_EvalFrameDefault");
	const ElfW(Sym) *sym = NULL;
	Dl_info info;

	if (!f || !dladdr1(f, &info, (void **)&sym, RTLD_DL_SYMENT) || !sym ||
	    sym->st_size == 0)
		return -1;
	pys.eval_lo = (uintptr_t)f;
	pys.eval_hi = pys.eval_lo + sym->st_size;
	if (!atomic_load(&cpy.ok))
		find_capi();
	return 0;
}

/* True when `file` is one of profhost's own Python files (the bridge's
 * wrappers and the profhost module's functions that push ranges). */
static bool own_file(const char *file)
{
	static const char *const own[] = {
		"/profhost/__init__.py", "/profhost/_bridge.py", "/profhost/_host.py",
		"/profhost/_imports.py", "/profhost/_steps.py", "/profhost/_nvtx.py",
		"/profhost/_pystacks.py", "/profhost/_modules.py",
	};
	size_t n = strlen(file), i, k;

	for (i = 0; i < sizeof own / sizeof own[0]; i++) {
		k = strlen(own[i]);
		if (n >= k && strcmp(file + n - k, own[i]) == 0)
			return true;
	}
	return false;
}

/* Appends frame `f`'s "function (file:line)\n" to buf[*len..cap), unless
 * it is one of profhost's own. GIL held. */
static void put_frame(void *f, char *buf, size_t *len, size_t cap)
{
	void *code = cpy.Frame_GetCode(f), *name, *file;
	const char *n = NULL, *fl = NULL;
	int w;

	if (!code)
		return;
	name = cpy.Object_GetAttrString(code, "co_qualname");
	if (!name)
		name = cpy.Object_GetAttrString(code, "co_name");
	file = cpy.Object_GetAttrString(code, "co_filename");
	if (name)
		n = cpy.Unicode_AsUTF8(name);
	if (file)
		fl = cpy.Unicode_AsUTF8(file);
	if (n && fl && !own_file(fl)) {
		w = snprintf(buf + *len, cap - *len, "%s (%s:%d)\n", n, fl,
			     cpy.Frame_GetLineNumber(f));
		if (w > 0 && (size_t)w < cap - *len)
			*len += (size_t)w;
	}
	if (name)
		cpy.DecRef(name);
	if (file)
		cpy.DecRef(file);
	cpy.DecRef(code);
}

void pystacks_capture_now(int32_t tid, int64_t ts)
{
	void *type, *value, *tb, *f, *back;
	char *buf;
	size_t len = 0, cap = 32768;
	int depth;

	if (!atomic_load_explicit(&cpy.ok, memory_order_relaxed) ||
	    !cpy.GILState_Check() || (cpy.IsFinalizing && cpy.IsFinalizing()))
		return;
	buf = malloc(cap);
	if (!buf)
		return;
	cpy.Err_Fetch(&type, &value, &tb); /* the caller's exception, if any */
	f = cpy.ThreadState_GetFrame(cpy.ThreadState_Get());
	for (depth = 0; f && depth < PYS_CAPTURE_DEPTH; depth++) {
		put_frame(f, buf, &len, cap);
		back = cpy.Frame_GetBack(f);
		cpy.DecRef(f);
		f = back;
	}
	if (f)
		cpy.DecRef(f);
	cpy.Err_Restore(type, value, tb);
	if (len)
		pystacks_add(tid, ts, buf, (uint32_t)len - 1);
	free(buf);
}

void pystacks_set_eval_range(uintptr_t lo, uintptr_t hi)
{
	pys.eval_lo = lo;
	pys.eval_hi = hi;
}

static void window_free(struct pys_window *w)
{
	free(w->v);
	free(w->text);
	memset(w, 0, sizeof *w);
}

/* The oldest recorder store other than `gen`'s that no dump waits for
 * (stores.h), or NULL; *n gets how many there are. pys.lock held. */
static struct pys_window *oldest_given_back(uint64_t gen, size_t *n)
{
	struct pys_window *old = NULL;
	size_t i;

	*n = 0;
	for (i = 0; i < PYS_WINDOWS; i++)
		if (pys.w[i].gen && pys.w[i].rec && !pys.w[i].dumped && pys.w[i].gen != gen) {
			(*n)++;
			if (!old || pys.w[i].gen < old->gen)
				old = &pys.w[i];
		}
	return old;
}

void pystacks_open(uint64_t gen, bool rec)
{
	struct pys_window *w = NULL, *old;
	size_t i, nrec;

	pthread_mutex_lock(&pys.lock);
	for (i = 0; i < PYS_WINDOWS; i++) {
		pys.w[i].open = false; /* one store takes snapshots at a time */
		if (pys.w[i].gen == gen)
			w = &pys.w[i];
	}
	/* the recorder gave those segments back */
	while (!w && rec && (old = oldest_given_back(gen, &nrec)) && nrec >= PYSTACKS_REC_KEEP)
		window_free(old);
	if (!w) { /* a free slot, else a store never collected */
		w = &pys.w[0];
		for (i = 1; i < PYS_WINDOWS; i++)
			if (capture_store_evict_before(pys.w[i].gen, pys.w[i].rec,
						       pys.w[i].dumped, w->gen, w->rec,
						       w->dumped))
				w = &pys.w[i];
		window_free(w);
		w->gen = gen;
		w->rec = rec;
	}
	w->open = true;
	pthread_mutex_unlock(&pys.lock);
}

void pystacks_close(uint64_t gen)
{
	size_t i;

	pthread_mutex_lock(&pys.lock);
	for (i = 0; i < PYS_WINDOWS; i++)
		if (pys.w[i].gen == gen)
			pys.w[i].open = false;
	pthread_mutex_unlock(&pys.lock);
}

void pystacks_rec_dumped(void)
{
	size_t i;

	pthread_mutex_lock(&pys.lock);
	for (i = 0; i < PYS_WINDOWS; i++)
		if (pys.w[i].gen && pys.w[i].rec)
			pys.w[i].dumped = true;
	pthread_mutex_unlock(&pys.lock);
}

void pystacks_rec_stop(void)
{
	size_t i;

	pthread_mutex_lock(&pys.lock);
	for (i = 0; i < PYS_WINDOWS; i++)
		if (pys.w[i].gen && pys.w[i].rec && !pys.w[i].dumped)
			window_free(&pys.w[i]);
	pthread_mutex_unlock(&pys.lock);
}

/* Makes room in w for one more snapshot and len bytes of text, within a
 * recorder segment's bounds when w->rec. Returns 0, or -1 when out of
 * memory or beyond the bounds. pys.lock held. */
static int reserve(struct pys_window *w, uint32_t len)
{
	size_t nmax = w->rec ? PYSTACKS_SEG_SNAPS_MAX : SIZE_MAX;
	size_t tmax = w->rec ? PYSTACKS_SEG_TEXT_MAX : SIZE_MAX;
	struct pymerge_snap *v;
	char *text;

	v = grow_array_max(w->v, &w->cap, w->n + 1, sizeof *v, 64, nmax);
	if (!v)
		return -1;
	w->v = v;
	if (w->tlen + len <= w->tcap)
		return 0; /* len 0 on an empty window asks for nothing */
	text = grow_array_max(w->text, &w->tcap, w->tlen + len, 1, 64, tmax);
	if (!text)
		return -1;
	w->text = text;
	return 0;
}

/* A recorder segment's store is full: keeps its newer half of snapshots
 * (their text moved to the front, shared text kept shared), counting the
 * others dropped. pys.lock held. */
static void keep_newest_half(struct pys_window *w)
{
	size_t from = w->n / 2, i, j, tlen = 0;
	uint32_t *old_off = malloc((w->n - from) * sizeof *old_off);
	char *text = malloc(w->tcap ? w->tcap : 1);

	if (!old_off || !text) { /* no memory to move: start the store anew */
		free(old_off);
		free(text);
		w->dropped += w->n;
		w->n = w->tlen = 0;
		return;
	}
	for (i = from; i < w->n; i++) {
		struct pymerge_snap s = w->v[i];
		size_t k = i - from;

		old_off[k] = s.off;
		s.off = (uint32_t)tlen;
		for (j = k; j-- > 0 && k - j <= PYMERGE_SHARE_LOOK;)
			if (old_off[j] == old_off[k] && w->v[j].len == s.len) {
				s.off = w->v[j].off; /* shared before: still shared */
				break;
			}
		if (s.off == tlen && tlen + s.len > w->tcap) {
			s.tid = 0; /* cannot happen: shared text is copied */
			s.len = 0; /* once; no sample is of thread 0 */
		} else if (s.off == tlen) {
			memcpy(text + tlen, w->text + old_off[k], s.len);
			tlen += s.len;
		}
		w->v[k] = s;
	}
	w->dropped += from;
	w->n -= from;
	free(w->text);
	w->text = text;
	w->tlen = tlen;
	free(old_off);
}

/* The offset of thread `tid`'s last snapshot in w when its frames are
 * frames[0..len) too (looked for among the last PYMERGE_SHARE_LOOK), else -1.
 * pys.lock held. */
static long same_as_last(const struct pys_window *w, int32_t tid,
			 const char *frames, uint32_t len)
{
	return pymerge_same_as_last(w->v, w->n, w->text, tid, frames, len);
}

bool pystacks_add(int32_t tid, int64_t ts, const char *frames, uint32_t len)
{
	struct pys_window *w = NULL;
	uint32_t need;
	long shared;
	size_t i;
	bool rec;

	pthread_mutex_lock(&pys.lock);
	for (i = 0; i < PYS_WINDOWS && !w; i++)
		if (pys.w[i].gen && pys.w[i].open)
			w = &pys.w[i];
	if (!w) {
		pthread_mutex_unlock(&pys.lock);
		return false; /* between windows: the bridge stops soon */
	}
	shared = same_as_last(w, tid, frames, len);
	need = shared >= 0 ? 0 : len; /* shared: only the entry is new */
	if (w->rec && reserve(w, need) != 0 && w->n > 1) {
		keep_newest_half(w);
		shared = same_as_last(w, tid, frames, len);
		need = shared >= 0 ? 0 : len;
	}
	if ((!w->rec && w->tlen + need > PYSTACKS_MAX_BYTES) || reserve(w, need) != 0) {
		w->dropped++;
		pthread_mutex_unlock(&pys.lock);
		return false;
	}
	if (need)
		memcpy(w->text + w->tlen, frames, need);
	w->v[w->n].ts = ts;
	w->v[w->n].tid = tid;
	w->v[w->n].off = shared >= 0 ? (uint32_t)shared : (uint32_t)w->tlen;
	w->v[w->n].len = len;
	w->n++;
	w->tlen += need;
	rec = w->rec;
	pthread_mutex_unlock(&pys.lock);
	return rec;
}

void pystacks_eval_range(uintptr_t *lo, uintptr_t *hi)
{
	*lo = pys.eval_lo;
	*hi = pys.eval_hi;
}

int64_t pystacks_tolerance_ns(uint32_t snapshot_hz)
{
	return pymerge_tolerance_ns(snapshot_hz);
}

/* Takes window `gen` out of the store into *out. True when found. */
static bool take(uint64_t gen, struct pys_window *out)
{
	size_t i;
	bool found = false;

	pthread_mutex_lock(&pys.lock);
	for (i = 0; i < PYS_WINDOWS; i++)
		if (pys.w[i].gen == gen) {
			*out = pys.w[i];
			memset(&pys.w[i], 0, sizeof pys.w[i]);
			found = true;
			break;
		}
	pthread_mutex_unlock(&pys.lock);
	return found;
}

/* A collect took generations gens[]: older recorder stores lose a dump's
 * mark (stores.h), and the next rotations free them. */
static void forget_stale_dumped(const uint64_t *gens, size_t ngens)
{
	uint64_t oldest = UINT64_MAX;
	size_t i;

	for (i = 0; i < ngens; i++)
		if (gens[i] && gens[i] < oldest)
			oldest = gens[i];
	pthread_mutex_lock(&pys.lock);
	for (i = 0; i < PYS_WINDOWS; i++)
		if (capture_store_mark_stale(pys.w[i].gen, pys.w[i].rec, oldest))
			pys.w[i].dumped = false;
	pthread_mutex_unlock(&pys.lock);
}

/* Appends store `src` to `dst` (its text after dst's) and frees src.
 * Returns 0, or -1 when out of memory (src freed all the same). */
static int append_store(struct pys_window *dst, struct pys_window *src)
{
	struct pymerge_snap *v = NULL;
	char *text = NULL;
	size_t i;

	dst->dropped += src->dropped;
	if (src->n == 0) {
		window_free(src);
		return 0;
	}
	if (dst->n == 0 && !dst->v) { /* the first: taken as it is */
		uint64_t dropped = dst->dropped;

		*dst = *src;
		dst->dropped = dropped;
		memset(src, 0, sizeof *src);
		return 0;
	}
	v = grow_array(dst->v, &dst->cap, dst->n + src->n, sizeof *v, 64);
	if (v)
		dst->v = v;
	if (v && src->tlen)
		text = grow_array(dst->text, &dst->tcap, dst->tlen + src->tlen, 1, 64);
	if (!v || (src->tlen && !text)) {
		window_free(src);
		return -1;
	}
	if (src->tlen) {
		dst->text = text;
		memcpy(dst->text + dst->tlen, src->text, src->tlen);
	}
	for (i = 0; i < src->n; i++) {
		dst->v[dst->n + i] = src->v[i];
		dst->v[dst->n + i].off += (uint32_t)dst->tlen;
	}
	dst->n += src->n;
	dst->tlen += src->tlen;
	window_free(src);
	return 0;
}

int pystacks_merge(const uint64_t *gens, size_t ngens, uint32_t snapshot_hz,
		   struct trace *t, struct err *e)
{
	struct pys_window w, one;
	size_t k;
	long merged;
	bool found = false;
	int rc = 0;

	memset(&w, 0, sizeof w);
	for (k = 0; k < ngens; k++) {
		if (!take(gens[k], &one))
			continue;
		found = true;
		if (append_store(&w, &one) != 0 && rc == 0)
			rc = err_set(e, "out of memory merging the Python stacks");
	}
	forget_stale_dumped(gens, ngens);
	if (!found)
		return 0;
	if (w.dropped)
		log_msg(LOG_DEBUG, "python stacks: %llu snapshots dropped (more than "
			"%u MiB in a window, or %u MiB in a recorder segment: its newest "
			"kept)", (unsigned long long)w.dropped, PYSTACKS_MAX_BYTES >> 20,
			PYSTACKS_SEG_TEXT_MAX >> 20);
	if (rc != 0 || w.n == 0 || t->nstacks == 0 || !pys.eval_lo)
		goto out;
	merged = pymerge_stacks(w.v, w.n, w.text, pys.eval_lo, pys.eval_hi, snapshot_hz, t);
	if (merged < 0)
		rc = err_set(e, "out of memory merging the Python stacks");
	else
		log_msg(LOG_DEBUG, "python stacks: %zu snapshots, %ld of %zu stacks "
			"show Python frames", w.n, merged, t->nstacks);
out:
	window_free(&w);
	return rc;
}

size_t pystacks_held_bytes(size_t *rec_stores)
{
	size_t i, bytes = 0;

	*rec_stores = 0;
	pthread_mutex_lock(&pys.lock);
	for (i = 0; i < PYS_WINDOWS; i++) {
		bytes += pys.w[i].cap * sizeof *pys.w[i].v + pys.w[i].tcap;
		*rec_stores += pys.w[i].gen && pys.w[i].rec;
	}
	pthread_mutex_unlock(&pys.lock);
	return bytes;
}

void pystacks_fini(void)
{
	size_t i;

	pthread_mutex_lock(&pys.lock);
	for (i = 0; i < PYS_WINDOWS; i++)
		window_free(&pys.w[i]);
	pthread_mutex_unlock(&pys.lock);
}

/* pystacks — Python stack snapshots and their merge (see pystacks.h). */
#include "pystacks.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "../util/log.h"

#define PYS_WINDOWS 6 /* open + closed windows not yet collected */

/* One snapshot: its frames are text[off, off + len). */
struct pys_snap {
	int64_t ts;
	int32_t tid;
	uint32_t off, len;
};

/* The snapshots of one window generation (gen 0: a free slot). */
struct pys_window {
	uint64_t gen;
	bool open;
	struct pys_snap *v;
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
	return 0;
}

static void window_free(struct pys_window *w)
{
	free(w->v);
	free(w->text);
	memset(w, 0, sizeof *w);
}

void pystacks_open(uint64_t gen)
{
	struct pys_window *w = NULL;
	size_t i;

	pthread_mutex_lock(&pys.lock);
	for (i = 0; i < PYS_WINDOWS && !w; i++)
		if (pys.w[i].gen == 0)
			w = &pys.w[i];
	if (!w) { /* windows never collected: reuse the oldest */
		w = &pys.w[0];
		for (i = 1; i < PYS_WINDOWS; i++)
			if (pys.w[i].gen < w->gen)
				w = &pys.w[i];
		window_free(w);
	}
	w->gen = gen;
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

/* Grows *p (of `size`-byte items, capacity *cap) to hold `need`. 0 or -1. */
static int grow(void **p, size_t *cap, size_t need, size_t size)
{
	size_t ncap = *cap ? *cap : 64;
	void *q;

	if (need <= *cap)
		return 0;
	while (ncap < need)
		ncap *= 2;
	q = realloc(*p, ncap * size);
	if (!q)
		return -1;
	*p = q;
	*cap = ncap;
	return 0;
}

void pystacks_add(int32_t tid, int64_t ts, const char *frames, uint32_t len)
{
	struct pys_window *w = NULL;
	size_t i;

	pthread_mutex_lock(&pys.lock);
	for (i = 0; i < PYS_WINDOWS && !w; i++)
		if (pys.w[i].gen && pys.w[i].open)
			w = &pys.w[i];
	if (!w) {
		pthread_mutex_unlock(&pys.lock);
		return; /* between windows: the bridge stops soon */
	}
	if (w->tlen + len > PYSTACKS_MAX_BYTES ||
	    grow((void **)&w->v, &w->cap, w->n + 1, sizeof *w->v) != 0 ||
	    grow((void **)&w->text, &w->tcap, w->tlen + len, 1) != 0) {
		w->dropped++;
		pthread_mutex_unlock(&pys.lock);
		return;
	}
	memcpy(w->text + w->tlen, frames, len);
	w->v[w->n].ts = ts;
	w->v[w->n].tid = tid;
	w->v[w->n].off = (uint32_t)w->tlen;
	w->v[w->n].len = len;
	w->n++;
	w->tlen += len;
	pthread_mutex_unlock(&pys.lock);
}

int64_t pystacks_tolerance_ns(uint32_t snapshot_hz)
{
	/* A sample lies at most half a period from the nearest snapshot when
	 * the snapshots keep their pace; they may be late by the GIL's switch
	 * interval (5 ms) when the thread runs Python code. */
	return snapshot_hz ? 1000000000LL / snapshot_hz + 5000000LL : 0;
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

int pystacks_merge(uint64_t gen, uint32_t snapshot_hz, struct trace *t,
		   struct err *e)
{
	struct pys_window w;

	(void)snapshot_hz;
	(void)t;
	(void)e;
	if (!take(gen, &w))
		return 0;
	if (w.dropped)
		log_msg(LOG_DEBUG, "python stacks: %llu snapshots dropped",
			(unsigned long long)w.dropped);
	window_free(&w);
	return 0;
}

void pystacks_fini(void)
{
	size_t i;

	pthread_mutex_lock(&pys.lock);
	for (i = 0; i < PYS_WINDOWS; i++)
		window_free(&pys.w[i]);
	pthread_mutex_unlock(&pys.lock);
}

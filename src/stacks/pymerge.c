/* pymerge — Python frames into native stacks (see pymerge.h). */
#include "pymerge.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "../common/grow.h"

#define PYS_PC_BASE 0xffff800000000000ull /* Python frames: no code there */
#define PYS_DEPTH_MAX 4096                 /* frames of a merged stack */

int64_t pymerge_tolerance_ns(uint32_t snapshot_hz)
{
	/* A sample lies at most half a period from the nearest snapshot when
	 * the snapshots keep their pace; they may be late by the GIL's switch
	 * interval (5 ms) when the thread runs Python code. */
	return snapshot_hz ? 1000000000LL / snapshot_hz + 5000000LL : 0;
}

long pymerge_same_as_last(const struct pymerge_snap *v, size_t n, const char *text,
			  int32_t tid, const char *frames, uint32_t len)
{
	size_t i, stop = n > PYMERGE_SHARE_LOOK ? n - PYMERGE_SHARE_LOOK : 0;

	for (i = n; i-- > stop;)
		if (v[i].tid == tid) {
			if (v[i].len == len && memcmp(text + v[i].off, frames, len) == 0)
				return (long)v[i].off;
			return -1;
		}
	return -1;
}

int pymerge_set_add(struct pymerge_set *s, int32_t tid, int64_t ts, const char *frames,
		    uint32_t len, size_t max_text)
{
	long shared = pymerge_same_as_last(s->v, s->n, s->text, tid, frames, len);
	uint32_t need = shared >= 0 ? 0 : len; /* shared: only the entry is new */
	struct pymerge_snap *v;
	char *text;

	if (s->tlen + need > max_text) {
		s->dropped++;
		return 0;
	}
	v = grow_array(s->v, &s->cap, s->n + 1, sizeof *v, 64);
	if (!v) {
		s->dropped++;
		return -1;
	}
	s->v = v;
	if (s->tlen + need > s->tcap) {
		text = grow_array(s->text, &s->tcap, s->tlen + need, 1, 64);
		if (!text) {
			s->dropped++;
			return -1;
		}
		s->text = text;
	}
	if (need)
		memcpy(s->text + s->tlen, frames, need);
	s->v[s->n].ts = ts;
	s->v[s->n].tid = tid;
	s->v[s->n].off = shared >= 0 ? (uint32_t)shared : (uint32_t)s->tlen;
	s->v[s->n].len = len;
	s->n++;
	s->tlen += need;
	return 0;
}

void pymerge_set_free(struct pymerge_set *s)
{
	free(s->v);
	free(s->text);
	memset(s, 0, sizeof *s);
}

static int cmp_snap(const void *pa, const void *pb)
{
	const struct pymerge_snap *a = pa, *b = pb;

	if (a->tid != b->tid)
		return a->tid < b->tid ? -1 : 1;
	return (a->ts > b->ts) - (a->ts < b->ts);
}

/* The snapshot of `tid` nearest to `ts` within `tol`, or NULL. v[0..n)
 * is sorted by (tid, ts). */
static const struct pymerge_snap *nearest(const struct pymerge_snap *v, size_t n,
					  int32_t tid, int64_t ts, int64_t tol)
{
	const struct pymerge_snap *best = NULL;
	size_t lo = 0, hi = n;
	int64_t d;

	while (lo < hi) { /* the first snapshot at or after (tid, ts) */
		size_t mid = lo + (hi - lo) / 2;
		const struct pymerge_snap *s = &v[mid];

		if (s->tid < tid || (s->tid == tid && s->ts < ts))
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < n && v[lo].tid == tid && (d = v[lo].ts - ts) <= tol) {
		best = &v[lo];
		tol = d;
	}
	if (lo > 0 && v[lo - 1].tid == tid && ts - v[lo - 1].ts <= tol)
		best = &v[lo - 1];
	return best;
}

/* The interpreter's eval code, [lo, hi). */
struct eval_range {
	uintptr_t lo, hi;
};

/* True when frame `f` of `t` lies in the interpreter's eval loop. */
static bool is_eval(const struct trace *t, uint32_t f, const struct eval_range *ev)
{
	uint64_t pc = t->frames[f].pc;

	return pc >= ev->lo && pc < ev->hi;
}

/* Merges snapshot `snap` (its frames in `text`) into stack `k`: the span
 * from its innermost to its outermost interpreter frame becomes the
 * snapshot's frames. `buf` holds PYS_DEPTH_MAX indexes. Returns 1 when
 * merged, 0 when the stack ran no Python, -1 when out of memory. */
static int merge_one(struct trace *t, size_t k, const struct pymerge_snap *snap,
		     const char *text, uint32_t module, uint32_t *buf,
		     const struct eval_range *ev)
{
	struct trace_stack s = t->stacks[k];
	long inner = -1, outer = -1, i;
	size_t n = 0, pos, end = snap->off + snap->len, room;

	if (s.depth > PYS_DEPTH_MAX / 2)
		return 0;
	for (i = 0; i < s.depth; i++)
		if (is_eval(t, t->stack_frames[s.first + i], ev)) {
			if (inner < 0)
				inner = i;
			outer = i;
		}
	if (inner < 0)
		return 0;
	for (i = 0; i < inner; i++)
		buf[n++] = t->stack_frames[s.first + i];
	/* Python frames, leaving room for the native frames outside the span */
	room = PYS_DEPTH_MAX - (size_t)(s.depth - outer);
	for (pos = snap->off; pos < end && n < room;) {
		const char *line = text + pos, *nl = memchr(line, '\n', end - pos);
		size_t len = nl ? (size_t)(nl - line) : end - pos;
		uint32_t name = trace_intern(t, line, len);
		long f;

		pos += len + 1;
		if (name == STRTAB_NONE)
			return -1;
		f = trace_add_frame(t, PYS_PC_BASE | name, name, module);
		if (f < 0)
			return -1;
		buf[n++] = (uint32_t)f;
	}
	for (i = outer + 1; i < s.depth && n < PYS_DEPTH_MAX; i++)
		buf[n++] = t->stack_frames[s.first + i];
	return trace_set_stack_frames(t, k, buf, n) == 0 ? 1 : -1;
}

long pymerge_stacks(struct pymerge_snap *v, size_t n, const char *text, uintptr_t eval_lo,
		    uintptr_t eval_hi, uint32_t snapshot_hz, struct trace *t)
{
	struct eval_range ev = { eval_lo, eval_hi };
	int64_t tol = pymerge_tolerance_ns(snapshot_hz);
	uint32_t *buf, module;
	long merged = 0;
	size_t k;

	if (n == 0 || t->nstacks == 0 || !eval_lo)
		return 0;
	qsort(v, n, sizeof *v, cmp_snap);
	buf = malloc(PYS_DEPTH_MAX * sizeof *buf);
	module = trace_intern(t, "python", 6);
	if (!buf || module == STRTAB_NONE) {
		free(buf);
		return -1;
	}
	for (k = 0; k < t->nstacks; k++) {
		const struct pymerge_snap *snap;
		int r;

		snap = nearest(v, n, t->stacks[k].tid, t->stacks[k].ts, tol);
		if (!snap)
			continue;
		r = merge_one(t, k, snap, text, module, buf, &ev);
		if (r < 0) {
			merged = -1;
			break;
		}
		merged += r;
	}
	free(buf);
	return merged;
}

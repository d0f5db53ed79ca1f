/*
 * cupti_salvage — the flight recorder's raw CUPTI records of a dead process
 * as trace events (see src/salvage/cupti_salvage.h). The records are copied and every
 * pointer in them, which points into the dead process, is replaced: a
 * kernel's or device's name by the file's copy (salvfile.h, GPU names),
 * the others by NULL; API calls are named from the file by callback id.
 * Then the records go through the converter a live dump uses
 * (cupti_records.c), so a salvaged window shows its GPU work as a dump
 * of the same steps would.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cupti_internal.h"
#include "../../common/evformat.h"
#include "../../common/grow.h"
#include "../../salvage/cupti_salvage.h"

#define LOST_KERNEL "(kernel name lost)"

/* One GPU name of the file (struct salv_gpu_name), NUL-ended; `rec`
 * the DEVICE record of a SALV_GPU_DEVICE entry (else NULL). */
struct gname {
	uint64_t key;
	uint32_t kind, order;
	char *text;
	CUpti_ActivityDevice5 *rec;
};

struct gnames {
	struct gname *v;
	size_t n, cap;
};

/* Orders by kind, key, then file order (the latest last). */
static int gname_cmp(const void *a, const void *b)
{
	const struct gname *x = a, *y = b;

	if (x->kind != y->kind)
		return x->kind < y->kind ? -1 : 1;
	if (x->key != y->key)
		return x->key < y->key ? -1 : 1;
	return x->order < y->order ? -1 : x->order > y->order;
}

/* Reads the file's GPU names into *g, sorted (gname_cmp). A damaged
 * record ends the list. 0, or -1 when memory ran out. */
static int gnames_load(const struct salv_header *hd, struct gnames *g)
{
	uint32_t used = atomic_load_explicit(&hd->gpu_used, memory_order_acquire), off = 0;

	if (used > SALV_GPU_BYTES)
		used = SALV_GPU_BYTES;
	while (used - off >= sizeof(struct salv_gpu_name)) {
		struct salv_gpu_name r;
		struct gname *p;
		uint64_t need;

		memcpy(&r, hd->gpu + off, sizeof r);
		need = ((uint64_t)sizeof r + r.dlen + r.len + 7) & ~(uint64_t)7;
		if (need > used - off || r.len > SALV_GPU_NAME_MAX || r.kind < SALV_GPU_KERNEL ||
		    r.kind > SALV_GPU_DEVICE ||
		    (r.kind == SALV_GPU_DEVICE) != (r.dlen == sizeof(CUpti_ActivityDevice5)))
			break;
		p = grow_array(g->v, &g->cap, g->n + 1, sizeof *p, 64);
		if (!p)
			return -1;
		g->v = p;
		p = &g->v[g->n];
		memset(p, 0, sizeof *p);
		p->key = r.key;
		p->kind = r.kind;
		p->order = (uint32_t)g->n;
		p->text = strndup(hd->gpu + off + sizeof r + r.dlen, r.len);
		if (!p->text)
			return -1;
		if (r.dlen) {
			p->rec = malloc(sizeof *p->rec);
			if (!p->rec) {
				free(p->text);
				return -1;
			}
			memcpy(p->rec, hd->gpu + off + sizeof r, sizeof *p->rec);
			p->rec->name = p->text;
		}
		g->n++;
		off += (uint32_t)need;
	}
	if (g->n)
		qsort(g->v, g->n, sizeof *g->v, gname_cmp);
	return 0;
}

/* Frees what gnames_load made; *g is empty after. */
static void gnames_free(struct gnames *g)
{
	size_t i;

	for (i = 0; i < g->n; i++) {
		free(g->v[i].text);
		free(g->v[i].rec);
	}
	free(g->v);
	memset(g, 0, sizeof *g);
}

/* The latest entry of (kind, key), or NULL. */
static const struct gname *gnames_find(const struct gnames *g, uint32_t kind, uint64_t key)
{
	size_t lo = 0, hi = g->n;

	/* the first entry after (kind, key) */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct gname *m = &g->v[mid];

		if (m->kind < kind || (m->kind == kind && m->key <= key))
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0 || g->v[lo - 1].kind != kind || g->v[lo - 1].key != key)
		return NULL;
	return &g->v[lo - 1];
}

/* cupti_conv_opts.api_name over the file's names. */
static const char *api_name(void *ctx, bool driver, uint32_t cbid)
{
	const struct gname *n = gnames_find(ctx, SALV_GPU_API, (uint64_t)driver << 32 | cbid);

	return n ? n->text : NULL;
}

/* The records to convert: packed copies (cupti_packed_next), their
 * pointers replaced (fix_record). */
struct recs {
	unsigned char *buf;
	size_t used, cap;
	uint64_t count, lost_kernels;
};

/* Replaces the pointers of record `r` (a copy): names from `g`, the rest
 * NULL (nothing the converter reads). Counts kernels without a name. */
static void fix_record(CUpti_Activity *r, const struct gnames *g, struct recs *s)
{
	const struct gname *n;

	switch (r->kind) {
	case CUPTI_ACTIVITY_KIND_KERNEL:
	case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
		CUpti_ActivityKernel10 *k = (void *)r;

		n = k->name ? gnames_find(g, SALV_GPU_KERNEL, (uintptr_t)k->name) : NULL;
		k->name = n ? n->text : LOST_KERNEL;
		if (!n)
			s->lost_kernels++;
		k->reserved0 = NULL;
		k->pAccessPolicyWindow = NULL;
		break;
	}
	case CUPTI_ACTIVITY_KIND_DEVICE: {
		CUpti_ActivityDevice5 *d = (void *)r;

		n = gnames_find(g, SALV_GPU_DEVICE, d->id);
		d->name = n ? n->text : "";
		break;
	}
	case CUPTI_ACTIVITY_KIND_MEMCPY:
		((CUpti_ActivityMemcpy6 *)(void *)r)->reserved0 = NULL;
		break;
	case CUPTI_ACTIVITY_KIND_MEMSET:
		((CUpti_ActivityMemset4 *)(void *)r)->reserved0 = NULL;
		break;
	case CUPTI_ACTIVITY_KIND_MEMORY2:
		((CUpti_ActivityMemory4 *)(void *)r)->name = NULL;
		((CUpti_ActivityMemory4 *)(void *)r)->source = NULL;
		break;
	case CUPTI_ACTIVITY_KIND_OVERHEAD:
		((CUpti_ActivityOverhead3 *)(void *)r)->overheadData = NULL;
		break;
	default:
		break;
	}
}

/* Copies the EVBUF_CUPTI records of t's trace.raw into s, fixed. 0, or
 * -1 when memory ran out. */
static int recs_gather(const struct trace *t, const struct gnames *g, struct recs *s)
{
	const struct trace_raw *r;
	size_t off = 0;

	while ((r = trace_raw_next(t, &off)) != NULL) {
		const CUpti_Activity *a = (const void *)(r + 1);
		size_t size, step;
		unsigned char *p;

		if (r->kind != EVBUF_CUPTI || r->len < sizeof *a)
			continue;
		size = cupti_record_size(a->kind);
		if (!size || r->len != size)
			continue;
		step = cupti_packed_size(a->kind);
		p = grow_array(s->buf, &s->cap, s->used + step, 1, 64 << 10);
		if (!p)
			return -1;
		s->buf = p;
		memcpy(s->buf + s->used, a, size);
		fix_record((CUpti_Activity *)(void *)(s->buf + s->used), g, s);
		s->used += step;
		s->count++;
	}
	return 0;
}

/* Calls fn(c, record) for each record of s, in the ring's order. */
static void recs_each(const struct recs *s, void (*fn)(struct cupti_conv *, const CUpti_Activity *),
		      struct cupti_conv *c)
{
	const CUpti_Activity *a;
	size_t off = 0;

	while ((a = cupti_packed_next(s->buf, s->used, &off)) != NULL)
		fn(c, a);
}

/* Pass 2 over one record; what lies past the window's end has no later
 * window to go to (the process is dead): dropped. */
static void add_one(struct cupti_conv *c, const CUpti_Activity *a)
{
	cupti_conv_add(c, a);
}

/* Adds the notes a user reads in summary.txt about the names. */
static int add_notes(const struct salv_header *hd, const struct recs *s, struct trace *t)
{
	char line[400];

	if (s->lost_kernels) {
		snprintf(line, sizeof line, "GPU: %llu kernel records show as \"%s\": their "
			 "names were not in the salvage file (%u GPU names did not fit "
			 "its %d KiB)", (unsigned long long)s->lost_kernels, LOST_KERNEL,
			 hd->gpu_lost, SALV_GPU_BYTES >> 10);
		if (trace_add_note(t, line) != 0)
			return -1;
	} else if (hd->gpu_lost) {
		snprintf(line, sizeof line, "GPU: %u names did not fit the salvage file's "
			 "%d KiB; CUDA API calls may show as numbers", hd->gpu_lost,
			 SALV_GPU_BYTES >> 10);
		if (trace_add_note(t, line) != 0)
			return -1;
	}
	return 0;
}

int cupti_salvage_convert(const struct salv_header *hd, int64_t start, int64_t end,
			  struct trace *t)
{
	struct gnames g = { 0 };
	struct recs s = { 0 };
	struct cupti_devices devs = { 0 };
	struct cupti_conv_opts o;
	struct cupti_conv c;
	size_t i;
	int rc = 0;

	if (gnames_load(hd, &g) != 0 || recs_gather(t, &g, &s) != 0) {
		t->oom = 1;
		rc = -1;
		goto out;
	}
	if (!s.count)
		goto out;
	memset(&o, 0, sizeof o);
	o.start = start;
	o.end = end;
	o.pid = t->meta.pid;
	o.show = (struct cupti_show){ true, true, true, true, true, true, true, true };
	o.api_name = api_name;
	o.api_name_ctx = &g;
	o.devices = &devs;
	o.recorder = true;
	if (cupti_conv_init(&c, t, &o) != 0) {
		t->oom = 1;
		rc = -1;
		goto out;
	}
	/* the devices first: CUPTI wrote theirs once, long before */
	for (i = 0; i < g.n; i++)
		if (g.v[i].rec)
			cupti_conv_scan(&c, (const CUpti_Activity *)(const void *)g.v[i].rec);
	recs_each(&s, cupti_conv_scan, &c);
	recs_each(&s, add_one, &c);
	cupti_conv_finish(&c);
	t->counters.gpu_dropped += c.zero_ts;
	cupti_conv_free(&c);
	if (t->oom || add_notes(hd, &s, t) != 0)
		rc = -1;
out:
	for (i = 0; i < devs.n; i++)
		free(devs.dev[i].name);
	free(devs.dev);
	free(s.buf);
	gnames_free(&g);
	return rc;
}

/* phb — writes the binary capture file (see phb.h and docs/output.md);
 * src/read/phb_read.c reads it. */
#include "phb.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "outfile.h"

/* ------------------------------------------------------------ encoding */

static void put16(unsigned char *p, uint16_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
}

static void put32(unsigned char *p, uint32_t v)
{
	int i;

	for (i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char *p, uint64_t v)
{
	int i;

	for (i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

/* ------------------------------------------------------------ writer */

/* A section being written: its bytes go to the outfile through `buf`, the
 * CRC follows them. */
struct phb_w {
	struct outfile *f;
	uLong crc;
	unsigned char buf[64 * 1024];
	size_t n;
};

static void w_flush(struct phb_w *w)
{
	if (w->n) {
		w->crc = crc32(w->crc, w->buf, (uInt)w->n);
		outfile_write(w->f, w->buf, w->n);
		w->n = 0;
	}
}

/* Room for `n` (< sizeof buf) bytes; returns where to put them. */
static unsigned char *w_room(struct phb_w *w, size_t n)
{
	unsigned char *p;

	if (sizeof w->buf - w->n < n)
		w_flush(w);
	p = w->buf + w->n;
	w->n += n;
	return p;
}

static void w_bytes(struct phb_w *w, const void *s, size_t n)
{
	const unsigned char *p = s;

	while (n > 0) {
		size_t k = sizeof w->buf - w->n;

		if (k == 0) {
			w_flush(w);
			continue;
		}
		if (k > n)
			k = n;
		memcpy(w->buf + w->n, p, k);
		w->n += k;
		p += k;
		n -= k;
	}
}

static void w_str(struct phb_w *w, const char *s, size_t len)
{
	if (!s) {
		put32(w_room(w, 4), PHB_NULL_STR);
		return;
	}
	put32(w_room(w, 4), (uint32_t)len);
	w_bytes(w, s, len);
}

/* Starts a section whose payload is `len` bytes. */
static void w_begin(struct phb_w *w, const char *tag, uint64_t len)
{
	unsigned char h[16];

	w_flush(w);
	memcpy(h, tag, 4);
	put32(h + 4, 0);
	put64(h + 8, len);
	outfile_write(w->f, h, sizeof h);
	w->crc = crc32(0L, Z_NULL, 0);
}

static void w_end(struct phb_w *w)
{
	unsigned char c[4];

	w_flush(w);
	put32(c, (uint32_t)w->crc);
	outfile_write(w->f, c, 4);
}

static size_t str_size(const char *s)
{
	return 4 + (s ? strlen(s) : 0);
}

static void write_cats(struct phb_w *w)
{
	uint64_t len = 4;
	unsigned c;

	for (c = 0; c < TRACE_CAT_COUNT; c++)
		len += str_size(phb_cat_name(c));
	w_begin(w, "CATS", len);
	put32(w_room(w, 4), TRACE_CAT_COUNT);
	for (c = 0; c < TRACE_CAT_COUNT; c++)
		w_str(w, phb_cat_name(c), strlen(phb_cat_name(c)));
	w_end(w);
}

/* A counter in a 32-bit field of the metadata (saturated). */
static uint32_t sat32(uint64_t v)
{
	return v < UINT32_MAX ? (uint32_t)v : UINT32_MAX;
}

static void write_meta(struct phb_w *w, const struct trace *t)
{
	const struct trace_meta *m = &t->meta;
	const struct trace_counters *c = &t->counters;
	const char *strs[4] = { m->program, m->hostname, m->run, m->reason };
	uint64_t len = 72 + 48;
	unsigned char *p;
	int i;

	for (i = 0; i < 4; i++)
		len += str_size(strs[i]);
	w_begin(w, "META", len);
	p = w_room(w, 72);
	put32(p, (uint32_t)m->rank);
	put32(p + 4, (uint32_t)m->world_size);
	put32(p + 8, m->window);
	put32(p + 12, sat32(c->windows_skipped)); /* 1.0: 0 */
	put64(p + 16, m->first_step);
	put64(p + 24, m->last_step);
	put64(p + 32, (uint64_t)m->start_ts);
	put64(p + 40, (uint64_t)m->end_ts);
	put64(p + 48, (uint64_t)m->base_time_ns);
	put32(p + 56, (uint32_t)m->pid);
	put32(p + 60, sat32(c->dropped_steps));
	put64(p + 64, (uint64_t)m->monotonic_offset_ns); /* 1.0: 0 */
	p = w_room(w, 48);
	put64(p, c->events);
	put64(p + 8, c->dropped_buffer);
	put64(p + 16, c->dropped_noslot);
	put64(p + 24, c->unbalanced_pops);
	put64(p + 32, c->clipped);
	put64(p + 40, c->gpu_dropped);
	for (i = 0; i < 4; i++)
		w_str(w, strs[i], strs[i] ? strlen(strs[i]) : 0);
	w_end(w);
}

static void write_strs(struct phb_w *w, const struct trace *t)
{
	uint64_t len = 4;
	uint32_t i;

	for (i = 0; i < t->names.n; i++)
		len += 4 + t->names.len[i];
	w_begin(w, "STRS", len);
	put32(w_room(w, 4), t->names.n);
	for (i = 0; i < t->names.n; i++)
		w_str(w, t->names.str[i], t->names.len[i]);
	w_end(w);
}

static void write_events(struct phb_w *w, const struct trace *t)
{
	size_t i;

	w_begin(w, "EVTS", 8 + (uint64_t)t->nev * PHB_EVENT_SIZE);
	put64(w_room(w, 8), t->nev);
	for (i = 0; i < t->nev; i++) {
		const struct trace_event *ev = &t->ev[i];
		unsigned char *p = w_room(w, PHB_EVENT_SIZE);

		put64(p, (uint64_t)ev->ts);
		put64(p + 8, (uint64_t)ev->dur);
		put64(p + 16, ev->id);
		put32(p + 24, (uint32_t)ev->pid);
		put32(p + 28, (uint32_t)ev->tid);
		put32(p + 32, ev->name);
		put32(p + 36, ev->args);
		put16(p + 40, ev->nargs);
		p[42] = ev->cat;
		p[43] = ev->ph;
		put32(p + 44, ev->flags);
	}
	w_end(w);
}

static void write_args(struct phb_w *w, const struct trace *t)
{
	size_t i;

	w_begin(w, "ARGS", 8 + (uint64_t)t->nargs * PHB_ARG_SIZE);
	put64(w_room(w, 8), t->nargs);
	for (i = 0; i < t->nargs; i++) {
		const struct trace_arg *a = &t->args[i];
		unsigned char *p = w_room(w, PHB_ARG_SIZE);
		uint64_t v = 0;

		switch (a->type) {
		case TRACE_ARG_INT: v = (uint64_t)a->v.i; break;
		case TRACE_ARG_UINT: v = a->v.u; break;
		case TRACE_ARG_DOUBLE: memcpy(&v, &a->v.d, 8); break;
		default: v = a->v.str; break;
		}
		put32(p, a->key);
		put32(p + 4, a->type);
		put64(p + 8, v);
	}
	w_end(w);
}

static void write_steps(struct phb_w *w, const struct trace *t)
{
	size_t i;

	w_begin(w, "STEP", 8 + (uint64_t)t->nsteps * PHB_STEP_SIZE);
	put64(w_room(w, 8), t->nsteps);
	for (i = 0; i < t->nsteps; i++) {
		const struct trace_step *s = &t->steps[i];
		unsigned char *p = w_room(w, PHB_STEP_SIZE);

		put64(p, s->step);
		put64(p + 8, (uint64_t)s->ts);
		put64(p + 16, (uint64_t)s->dur);
		put32(p + 24, (uint32_t)s->tid);
		put32(p + 28, s->partial ? 1 : 0);
	}
	w_end(w);
}

static void write_threads(struct phb_w *w, const struct trace *t)
{
	size_t i;

	w_begin(w, "THRD", 8 + (uint64_t)t->nthreads * PHB_THREAD_SIZE);
	put64(w_room(w, 8), t->nthreads);
	for (i = 0; i < t->nthreads; i++) {
		unsigned char *p = w_room(w, PHB_THREAD_SIZE);

		put32(p, (uint32_t)t->threads[i].pid);
		put32(p + 4, (uint32_t)t->threads[i].tid);
		put32(p + 8, t->threads[i].name);
	}
	w_end(w);
}

/* Minor version 1: the GPUs' process-level tracks (their names and sort
 * order in the trace). */
static void write_procs(struct phb_w *w, const struct trace *t)
{
	size_t i;

	w_begin(w, "PROC", 8 + (uint64_t)t->nprocs * PHB_PROC_SIZE);
	put64(w_room(w, 8), t->nprocs);
	for (i = 0; i < t->nprocs; i++) {
		unsigned char *p = w_room(w, PHB_PROC_SIZE);

		put32(p, (uint32_t)t->procs[i].pid);
		put32(p + 4, t->procs[i].name);
		put32(p + 8, (uint32_t)t->procs[i].sort);
	}
	w_end(w);
}

/* Minor version 1: the GPUs' properties (the trace's deviceProperties). */
static void write_devices(struct phb_w *w, const struct trace *t)
{
	uint64_t len = 8;
	size_t i;

	for (i = 0; i < t->ndevices; i++)
		len += PHB_DEVICE_SIZE + str_size(t->devices[i].name);
	w_begin(w, "DEVS", len);
	put64(w_room(w, 8), t->ndevices);
	for (i = 0; i < t->ndevices; i++) {
		const struct trace_device *d = &t->devices[i];
		unsigned char *p = w_room(w, PHB_DEVICE_SIZE);
		const int32_t v[11] = {
			d->id, d->compute_major, d->compute_minor, d->max_threads_per_block,
			d->max_threads_per_sm, d->regs_per_block, d->regs_per_sm, d->warp_size,
			d->shared_mem_per_block, d->shared_mem_per_sm, d->num_sms,
		};
		int k;

		for (k = 0; k < 11; k++)
			put32(p + 4 * k, (uint32_t)v[k]);
		put32(p + 44, 0);
		put64(p + 48, d->total_global_mem);
		w_str(w, d->name, d->name ? strlen(d->name) : 0);
	}
	w_end(w);
}

int phb_write_to(const struct trace *t, struct outfile *f, struct err *e)
{
	struct phb_w *w = malloc(sizeof *w);
	unsigned char h[16];

	if (!w)
		return err_set(e, "out of memory writing capture data");
	w->n = 0;
	w->f = f;
	memcpy(h, PHB_MAGIC, PHB_MAGIC_LEN);
	put16(h + 8, PHB_MAJOR);
	put16(h + 10, PHB_MINOR);
	put32(h + 12, 0);
	outfile_write(w->f, h, sizeof h);
	write_cats(w);
	write_meta(w, t);
	write_strs(w, t);
	write_events(w, t);
	write_args(w, t);
	write_steps(w, t);
	write_threads(w, t);
	write_procs(w, t);
	write_devices(w, t);
	w_begin(w, "END ", 0);
	w_end(w);
	free(w);
	return outfile_error(f, e);
}

int phb_write(const struct trace *t, const char *path, struct err *e)
{
	struct outfile *f = outfile_open(path, false, e);

	if (!f)
		return -1;
	if (phb_write_to(t, f, e) != 0) {
		outfile_abort(f);
		return -1;
	}
	return outfile_commit(f, e);
}

/*
 * evchunk — reading one chunk of an event pool: the walk the drain
 * (src/shim/evbuf.c) and the salvage reader (src/salvage/salvage_read.c)
 * share, so a salvaged process's records are read exactly as a window's
 * are. The records and chunks it reads are evformat.h's.
 *
 * Libc only, header-only (static inline): the shim and every program that
 * compiles evbuf.c get it without another source file.
 */
#ifndef PROFHOST_EVCHUNK_H
#define PROFHOST_EVCHUNK_H

#include <stdint.h>
#include <string.h>

#include "evformat.h"

/* A compact record as the visitors see it: a full header, the payload. */
struct evchunk_expanded {
	struct evbuf_rec r;
	char payload[EVBUF_NAME_MAX];
};

/* Size of a full record of `len` payload bytes, and of a compact one. */
static inline uint32_t evchunk_rec_size(uint32_t len)
{
	return (uint32_t)((sizeof(struct evbuf_rec) + len + 7) & ~(size_t)7);
}

static inline uint32_t evchunk_crec_size(uint32_t len)
{
	return (uint32_t)((sizeof(struct evbuf_crec) + len + 7) & ~(size_t)7);
}

/* Visits the record at p (at most `room` bytes of published data; a
 * compact one is expanded into *x first). Returns its size in the chunk,
 * or 0 when it is not a whole, valid record. */
static inline uint32_t evchunk_visit(const char *p, uint32_t room, evbuf_visit_fn fn,
				     void *ctx, int32_t tid, const char *name,
				     struct evchunk_expanded *x)
{
	const struct evbuf_crec *cr = (const struct evbuf_crec *)p;
	const struct evbuf_rec *r = (const struct evbuf_rec *)p;
	uint32_t size;

	if (cr->kind & EVBUF_COMPACT) {
		size = evchunk_crec_size(cr->len);
		if (cr->len > EVBUF_NAME_MAX || size > room)
			return 0;
		x->r.kind = (uint16_t)(cr->kind & ~EVBUF_COMPACT);
		x->r.size = (uint16_t)evchunk_rec_size(cr->len);
		x->r.len = cr->len;
		x->r.ts = cr->ts;
		x->r.id = 0;
		x->r.a = cr->a;
		memcpy(x->payload, cr + 1, cr->len);
		fn(ctx, tid, name, &x->r);
		return size;
	}
	if (room < sizeof *r || r->size < sizeof *r || r->size > room ||
	    evchunk_rec_size(r->len) != r->size)
		return 0;
	fn(ctx, tid, name, r);
	return r->size;
}

/*
 * Visits the records of chunk c, of which `used` bytes are published,
 * in order; an EVBUF_THREAD record switches the writer (on_thread, when
 * not NULL, hears of each). Returns the records visited; *bad is set to 1
 * when the walk stopped at a record that is not whole and valid (a late
 * writer's, or a damaged file's), else left alone. `x` is scratch.
 */
static inline uint64_t evchunk_walk(const struct evbuf_chunk *c, uint32_t used,
				    evbuf_visit_fn fn, void *ctx,
				    void (*on_thread)(void *tctx, int32_t tid),
				    void *tctx, struct evchunk_expanded *x, int *bad)
{
	uint64_t n = 0;
	uint32_t off = 0;
	int32_t tid = c->tid;
	char name[17];

	if (used > EVBUF_CHUNK_DATA)
		used = EVBUF_CHUNK_DATA;
	memcpy(name, c->thread_name, 16);
	name[16] = '\0';
	while (off + sizeof(struct evbuf_crec) <= used) {
		const char *p = (const char *)(c + 1) + off;
		const struct evbuf_rec *r = (const struct evbuf_rec *)p;
		uint32_t size;

		if (r->kind == EVBUF_THREAD) {
			/* another thread goes on in this chunk */
			if (used - off < evchunk_rec_size(16) ||
			    r->size != evchunk_rec_size(16) || r->len != 16) {
				*bad = 1;
				break;
			}
			tid = (int32_t)r->id;
			memcpy(name, r + 1, 16);
			if (on_thread)
				on_thread(tctx, tid);
			off += r->size;
			continue;
		}
		size = evchunk_visit(p, used - off, fn, ctx, tid, name, x);
		if (!size) {
			*bad = 1;
			break;
		}
		n++;
		off += size;
	}
	return n;
}

#endif

/* phb_read — reads the binary capture file back (see phb_read.h; the
 * format is export/phb.h's, which the writer shares). */
#include "phb_read.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

/* ------------------------------------------------------------ decoding */

static uint16_t get16(const unsigned char *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static uint64_t get64(const unsigned char *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

/* ------------------------------------------------------------ reader */

struct phb_r {
	const unsigned char *base;
	size_t len;
	const char *label;
	struct err *e;
	uint32_t *strmap;     /* file string id -> trace id */
	uint32_t nstr;
	uint8_t catmap[256];  /* file category -> enum trace_cat; 255 unknown */
	uint32_t ncats;
	int have_cats, have_strs;
	uint64_t nargs_file;
};

/* Sets "<label>: <what> at offset <off>"; returns -1. */
static int r_fail(struct phb_r *r, size_t off, const char *what)
{
	return err_set(r->e, "%s: %s at offset %zu", r->label, what, off);
}

/* A string at `*off` (u32 length + bytes) inside [.., end). NULL-length
 * strings give *s = NULL. Returns 0 or -1. */
static int r_str(struct phb_r *r, size_t *off, size_t end, const char **s,
		 uint32_t *len)
{
	uint32_t n;

	if (end - *off < 4)
		return r_fail(r, *off, "truncated string length");
	n = get32(r->base + *off);
	*off += 4;
	if (n == PHB_NULL_STR) {
		*s = NULL;
		*len = 0;
		return 0;
	}
	if (n > end - *off)
		return r_fail(r, *off - 4, "string longer than its section");
	*s = (const char *)r->base + *off;
	*len = n;
	*off += n;
	return 0;
}

static char *dup_n(const char *s, uint32_t n)
{
	char *d;

	if (!s)
		return NULL;
	d = malloc((size_t)n + 1);
	if (!d)
		return NULL;
	memcpy(d, s, n);
	d[n] = '\0';
	return d;
}

static int read_cats(struct phb_r *r, size_t off, size_t end)
{
	uint32_t n, i;

	if (end - off < 4)
		return r_fail(r, off, "truncated category table");
	n = get32(r->base + off);
	off += 4;
	if (n > 255)
		return r_fail(r, off - 4, "too many categories");
	for (i = 0; i < n; i++) {
		const char *s;
		uint32_t len;
		unsigned c;
		size_t at = off;

		if (r_str(r, &off, end, &s, &len) != 0)
			return -1;
		r->catmap[i] = 255;
		for (c = 0; c < TRACE_CAT_COUNT && s; c++) {
			const char *mine = phb_cat_name(c);

			if (strlen(mine) == len && memcmp(mine, s, len) == 0) {
				r->catmap[i] = (uint8_t)c;
				break;
			}
		}
		if (r->catmap[i] == 255) {
			char msg[160], name[65];
			uint32_t k;

			for (k = 0; k < len && k < 64 && s; k++)
				name[k] = s[k] >= 0x20 && s[k] < 0x7f ? s[k] : '?';
			name[k] = '\0';
			snprintf(msg, sizeof msg, "unknown event category '%s' (written by a newer profhost?)",
				 name);
			return r_fail(r, at, msg);
		}
	}
	r->ncats = n;
	r->have_cats = 1;
	return 0;
}

static int read_meta(struct phb_r *r, size_t off, size_t end, struct trace *t)
{
	const unsigned char *p = r->base + off;
	struct trace_meta *m = &t->meta;
	struct trace_counters *c = &t->counters;
	char **strs[4] = { &m->program, &m->hostname, &m->run, &m->reason };
	int i;

	if (end - off < 120)
		return r_fail(r, off, "truncated metadata");
	m->rank = (int32_t)get32(p);
	m->world_size = (int32_t)get32(p + 4);
	m->window = get32(p + 8);
	c->windows_skipped = get32(p + 12);
	m->first_step = get64(p + 16);
	m->last_step = get64(p + 24);
	m->start_ts = (int64_t)get64(p + 32);
	m->end_ts = (int64_t)get64(p + 40);
	m->base_time_ns = (int64_t)get64(p + 48);
	m->pid = (int32_t)get32(p + 56);
	c->dropped_steps = get32(p + 60);
	m->monotonic_offset_ns = (int64_t)get64(p + 64);
	p += 72;
	c->events = get64(p);
	c->dropped_buffer = get64(p + 8);
	c->dropped_noslot = get64(p + 16);
	c->unbalanced_pops = get64(p + 24);
	c->clipped = get64(p + 32);
	c->gpu_dropped = get64(p + 40);
	off += 120;
	for (i = 0; i < 4; i++) {
		const char *s;
		uint32_t len;

		if (r_str(r, &off, end, &s, &len) != 0)
			return -1;
		free(*strs[i]);
		*strs[i] = dup_n(s, len);
		if (s && !*strs[i])
			return err_set(r->e, "%s: out of memory", r->label);
	}
	return 0;
}

static int read_strs(struct phb_r *r, size_t off, size_t end, struct trace *t)
{
	uint32_t n, i;

	if (end - off < 4)
		return r_fail(r, off, "truncated string table");
	n = get32(r->base + off);
	off += 4;
	/* each string takes at least 4 bytes: a count past that is corrupt */
	if (n > (end - off) / 4)
		return r_fail(r, off - 4, "string count larger than the string table");
	r->strmap = malloc(((size_t)n + 1) * sizeof *r->strmap);
	if (!r->strmap)
		return err_set(r->e, "%s: out of memory", r->label);
	for (i = 0; i < n; i++) {
		const char *s;
		uint32_t len;
		size_t at = off;

		if (r_str(r, &off, end, &s, &len) != 0)
			return -1;
		if (!s)
			return r_fail(r, at, "null string in the string table");
		r->strmap[i] = trace_intern(t, s, len);
		if (r->strmap[i] == STRTAB_NONE)
			return err_set(r->e, "%s: out of memory", r->label);
	}
	r->nstr = n;
	r->have_strs = 1;
	return 0;
}

/* Maps a file string id; -1 when out of range. */
static int map_str(const struct phb_r *r, uint32_t id, uint32_t *out)
{
	if (id >= r->nstr)
		return -1;
	*out = r->strmap[id];
	return 0;
}

/* Reads a u64 element count and checks count * size fits the section. */
static int r_count(struct phb_r *r, size_t *off, size_t end, size_t size,
		   const char *what, uint64_t *n)
{
	char msg[96];

	if (end - *off < 8) {
		snprintf(msg, sizeof msg, "truncated %s count", what);
		return r_fail(r, *off, msg);
	}
	*n = get64(r->base + *off);
	*off += 8;
	if (*n > (end - *off) / size || *n * size != end - *off) {
		snprintf(msg, sizeof msg, "%s count %llu does not match the section length",
			 what, (unsigned long long)*n);
		return r_fail(r, *off - 8, msg);
	}
	return 0;
}

static int read_events(struct phb_r *r, size_t off, size_t end, struct trace *t,
		       uint64_t *nargs_needed)
{
	uint64_t n, i;
	char msg[160];

	if (!r->have_strs || !r->have_cats)
		return r_fail(r, off, "events before the string or category table");
	if (r_count(r, &off, end, PHB_EVENT_SIZE, "event", &n) != 0)
		return -1;
	*nargs_needed = 0;
	for (i = 0; i < n; i++, off += PHB_EVENT_SIZE) {
		const unsigned char *p = r->base + off;
		struct trace_event ev;
		uint32_t name;
		uint8_t cat = p[42], ph = p[43];

		ev.ts = (int64_t)get64(p);
		ev.dur = (int64_t)get64(p + 8);
		ev.id = (uint32_t)get64(p + 16); /* trace_event.id: 32 bits */
		ev.pid = (int32_t)get32(p + 24);
		ev.tid = (int32_t)get32(p + 28);
		ev.args = get32(p + 36);
		ev.nargs = get16(p + 40);
		ev.flags = get32(p + 44) & TRACE_F_ALL;
		if (map_str(r, get32(p + 32), &name) != 0) {
			snprintf(msg, sizeof msg, "event %llu names string %u (the file has %u)",
				 (unsigned long long)i, get32(p + 32), r->nstr);
			return r_fail(r, off + 32, msg);
		}
		if (cat >= r->ncats) {
			snprintf(msg, sizeof msg, "event %llu has category %u (the file has %u)",
				 (unsigned long long)i, cat, r->ncats);
			return r_fail(r, off + 42, msg);
		}
		if (ph != TRACE_PH_COMPLETE && ph != TRACE_PH_INSTANT &&
		    ph != TRACE_PH_FLOW_START && ph != TRACE_PH_FLOW_END) {
			snprintf(msg, sizeof msg, "event %llu has phase %u", (unsigned long long)i, ph);
			return r_fail(r, off + 43, msg);
		}
		if (ev.dur < 0) {
			snprintf(msg, sizeof msg, "event %llu has a negative duration",
				 (unsigned long long)i);
			return r_fail(r, off + 8, msg);
		}
		if ((uint64_t)ev.args + ev.nargs > *nargs_needed)
			*nargs_needed = (uint64_t)ev.args + ev.nargs;
		ev.name = name;
		ev.cat = r->catmap[cat];
		ev.ph = ph;
		{
			/* trace_add_event points a new event at the next args;
			 * the file says where its args are */
			struct trace_event *stored = trace_add_event(t, &ev);

			if (!stored)
				return err_set(r->e, "%s: out of memory", r->label);
			stored->args = ev.args;
			stored->nargs = ev.nargs;
		}
	}
	return 0;
}

static int read_args(struct phb_r *r, size_t off, size_t end, struct trace *t)
{
	uint64_t n, i;
	char msg[160];

	if (!r->have_strs)
		return r_fail(r, off, "arguments before the string table");
	if (r_count(r, &off, end, PHB_ARG_SIZE, "argument", &n) != 0)
		return -1;
	if (n > SIZE_MAX / sizeof *t->args)
		return r_fail(r, off - 8, "argument count too large");
	if (trace_reserve(t, 0, n ? n : 1) != 0)
		return err_set(r->e, "%s: out of memory", r->label);
	for (i = 0; i < n; i++, off += PHB_ARG_SIZE) {
		const unsigned char *p = r->base + off;
		struct trace_arg *a = &t->args[i];
		uint64_t v = get64(p + 8);

		if (map_str(r, get32(p), &a->key) != 0) {
			snprintf(msg, sizeof msg, "argument %llu names string %u (the file has %u)",
				 (unsigned long long)i, get32(p), r->nstr);
			return r_fail(r, off, msg);
		}
		a->type = get32(p + 4);
		switch (a->type) {
		case TRACE_ARG_INT: a->v.i = (int64_t)v; break;
		case TRACE_ARG_UINT: a->v.u = v; break;
		case TRACE_ARG_DOUBLE: memcpy(&a->v.d, &v, 8); break;
		case TRACE_ARG_STR:
		case TRACE_ARG_RAW: /* a string of JSON, e.g. a kernel's grid */
			if (v > UINT32_MAX || map_str(r, (uint32_t)v, &a->v.str) != 0) {
				snprintf(msg, sizeof msg, "argument %llu has string value %llu (the file has %u)",
					 (unsigned long long)i, (unsigned long long)v, r->nstr);
				return r_fail(r, off + 8, msg);
			}
			break;
		default:
			snprintf(msg, sizeof msg, "argument %llu has type %u",
				 (unsigned long long)i, a->type);
			return r_fail(r, off + 4, msg);
		}
		t->nargs = i + 1;
	}
	return 0;
}

static int read_steps(struct phb_r *r, size_t off, size_t end, struct trace *t)
{
	uint64_t n, i;

	if (r_count(r, &off, end, PHB_STEP_SIZE, "step", &n) != 0)
		return -1;
	for (i = 0; i < n; i++, off += PHB_STEP_SIZE) {
		const unsigned char *p = r->base + off;
		struct trace_step s;

		s.step = get64(p);
		s.ts = (int64_t)get64(p + 8);
		s.dur = (int64_t)get64(p + 16);
		s.tid = (int32_t)get32(p + 24);
		s.partial = get32(p + 28) != 0;
		if (s.dur < 0)
			return r_fail(r, off + 16, "step with a negative duration");
		if (trace_add_step(t, &s) != 0)
			return err_set(r->e, "%s: out of memory", r->label);
	}
	return 0;
}

static int read_threads(struct phb_r *r, size_t off, size_t end, struct trace *t)
{
	uint64_t n, i;
	char msg[128];

	if (!r->have_strs)
		return r_fail(r, off, "threads before the string table");
	if (r_count(r, &off, end, PHB_THREAD_SIZE, "thread", &n) != 0)
		return -1;
	for (i = 0; i < n; i++, off += PHB_THREAD_SIZE) {
		const unsigned char *p = r->base + off;
		uint32_t name;

		if (map_str(r, get32(p + 8), &name) != 0) {
			snprintf(msg, sizeof msg, "thread %llu names string %u (the file has %u)",
				 (unsigned long long)i, get32(p + 8), r->nstr);
			return r_fail(r, off + 8, msg);
		}
		if (trace_add_thread(t, (int32_t)get32(p), (int32_t)get32(p + 4),
				     trace_str(t, name)) != 0)
			return err_set(r->e, "%s: out of memory", r->label);
	}
	return 0;
}

static int read_procs(struct phb_r *r, size_t off, size_t end, struct trace *t)
{
	uint64_t n, i;
	char msg[128];

	if (!r->have_strs)
		return r_fail(r, off, "processes before the string table");
	if (r_count(r, &off, end, PHB_PROC_SIZE, "process", &n) != 0)
		return -1;
	for (i = 0; i < n; i++, off += PHB_PROC_SIZE) {
		const unsigned char *p = r->base + off;
		uint32_t name;

		if (map_str(r, get32(p + 4), &name) != 0) {
			snprintf(msg, sizeof msg, "process %llu names string %u (the file has %u)",
				 (unsigned long long)i, get32(p + 4), r->nstr);
			return r_fail(r, off + 4, msg);
		}
		if (trace_add_process(t, (int32_t)get32(p), trace_str(t, name),
				      (int32_t)get32(p + 8)) != 0)
			return err_set(r->e, "%s: out of memory", r->label);
	}
	return 0;
}

static int read_devices(struct phb_r *r, size_t off, size_t end, struct trace *t)
{
	uint64_t n, i;
	char msg[128];

	if (end - off < 8)
		return r_fail(r, off, "truncated device count");
	n = get64(r->base + off);
	off += 8;
	/* each device takes at least its fixed part and a string length */
	if (n > (end - off) / (PHB_DEVICE_SIZE + 4)) {
		snprintf(msg, sizeof msg, "device count %llu larger than its section",
			 (unsigned long long)n);
		return r_fail(r, off - 8, msg);
	}
	for (i = 0; i < n; i++) {
		const unsigned char *p = r->base + off;
		struct trace_device d = { 0 };
		const char *s;
		uint32_t len;
		char *name;
		int rc;

		if (end - off < PHB_DEVICE_SIZE)
			return r_fail(r, off, "truncated device");
		d.id = (int32_t)get32(p);
		d.compute_major = (int32_t)get32(p + 4);
		d.compute_minor = (int32_t)get32(p + 8);
		d.max_threads_per_block = (int32_t)get32(p + 12);
		d.max_threads_per_sm = (int32_t)get32(p + 16);
		d.regs_per_block = (int32_t)get32(p + 20);
		d.regs_per_sm = (int32_t)get32(p + 24);
		d.warp_size = (int32_t)get32(p + 28);
		d.shared_mem_per_block = (int32_t)get32(p + 32);
		d.shared_mem_per_sm = (int32_t)get32(p + 36);
		d.num_sms = (int32_t)get32(p + 40);
		d.total_global_mem = get64(p + 48);
		off += PHB_DEVICE_SIZE;
		if (r_str(r, &off, end, &s, &len) != 0)
			return -1;
		name = dup_n(s, len);
		if (s && !name)
			return err_set(r->e, "%s: out of memory", r->label);
		d.name = name;
		rc = trace_add_device(t, &d);
		free(name);
		if (rc != 0)
			return err_set(r->e, "%s: out of memory", r->label);
	}
	if (off != end)
		return r_fail(r, off, "device section longer than its devices");
	return 0;
}

/* A section tag as printable text (other bytes as '?'). */
static const char *tag_text(const unsigned char *h, char out[5])
{
	int i;

	for (i = 0; i < 4; i++)
		out[i] = h[i] >= 0x20 && h[i] < 0x7f ? (char)h[i] : '?';
	out[4] = '\0';
	return out;
}

int phb_is_phb(const void *buf, size_t len)
{
	return len >= PHB_MAGIC_LEN && memcmp(buf, PHB_MAGIC, PHB_MAGIC_LEN) == 0;
}

/* The sections every version-1 file has, in order (END last), then those
 * a later minor version added (PHB_REQUIRED of them are required). */
static const char *const phb_sections[] = { "CATS", "META", "STRS", "EVTS",
					    "ARGS", "STEP", "THRD", "END ",
					    "PROC", "DEVS" /* 1.1 */ };
#define PHB_REQUIRED 8
#define PHB_END 7
#define PHB_NSECTIONS (sizeof phb_sections / sizeof phb_sections[0])

int phb_parse(const void *buf, size_t len, const char *label,
	      struct trace *t, struct err *e)
{
	struct phb_r r = { .base = buf, .len = len, .label = label, .e = e };
	size_t off = 16;
	unsigned seen = 0;
	uint64_t nargs_needed = 0;
	int rc = -1, i;
	char msg[128];

	memset(r.catmap, 255, sizeof r.catmap);
	if (len < 16 || !phb_is_phb(buf, len)) {
		if (len < PHB_MAGIC_LEN || !phb_is_phb(buf, len))
			r_fail(&r, 0, "not a profhost capture file (bad magic)");
		else
			r_fail(&r, len, "truncated header");
		return -1;
	}
	if (get16(r.base + 8) != PHB_MAJOR) {
		snprintf(msg, sizeof msg, "capture format version %u.%u; this prof reads %u.x",
			 get16(r.base + 8), get16(r.base + 10), PHB_MAJOR);
		return r_fail(&r, 8, msg);
	}
	for (;;) {
		const unsigned char *h = r.base + off;
		char tag[5];
		uint64_t plen;
		size_t start, end;
		int known = -1;

		if (len - off < 16) {
			r_fail(&r, off, off == len ? "truncated: the file ends before its END section"
							 : "truncated section header");
			goto out;
		}
		plen = get64(h + 8);
		start = off + 16;
		if (plen > len - start || len - start - plen < 4) {
			snprintf(msg, sizeof msg, "truncated: section '%s' needs %llu bytes, %zu left",
				 tag_text(h, tag), (unsigned long long)plen + 4, len - start);
			for (i = 0; i < 4; i++)
				if (h[i] < 0x20 || h[i] > 0x7e)
					snprintf(msg, sizeof msg, "truncated or corrupt section header (length %llu, %zu bytes left)",
						 (unsigned long long)plen, len - start);
			r_fail(&r, off, msg);
			goto out;
		}
		end = start + (size_t)plen;
		{
			uLong crc = crc32(0L, Z_NULL, 0);
			size_t k = start;

			while (k < end) {
				size_t chunk = end - k > (1u << 30) ? (1u << 30) : end - k;

				crc = crc32(crc, r.base + k, (uInt)chunk);
				k += chunk;
			}
			if (get32(r.base + end) != (uint32_t)crc) {
				snprintf(msg, sizeof msg, "checksum mismatch in section '%s'",
					 tag_text(h, tag));
				r_fail(&r, off, msg);
				goto out;
			}
		}
		for (i = 0; i < (int)PHB_NSECTIONS; i++)
			if (memcmp(h, phb_sections[i], 4) == 0)
				known = i;
		if (known >= 0) {
			if (seen >> known & 1) {
				snprintf(msg, sizeof msg, "section '%s' appears twice", tag_text(h, tag));
				r_fail(&r, off, msg);
				goto out;
			}
			seen |= 1u << known;
		}
		switch (known) {
		case 0: if (read_cats(&r, start, end) != 0) goto out; break;
		case 1: if (read_meta(&r, start, end, t) != 0) goto out; break;
		case 2: if (read_strs(&r, start, end, t) != 0) goto out; break;
		case 3: if (read_events(&r, start, end, t, &nargs_needed) != 0) goto out; break;
		case 4: if (read_args(&r, start, end, t) != 0) goto out; break;
		case 5: if (read_steps(&r, start, end, t) != 0) goto out; break;
		case 6: if (read_threads(&r, start, end, t) != 0) goto out; break;
		case 8: if (read_procs(&r, start, end, t) != 0) goto out; break;
		case 9: if (read_devices(&r, start, end, t) != 0) goto out; break;
		default: break; /* a section of a later minor version */
		}
		off = end + 4;
		if (known == PHB_END)
			break;
	}
	for (i = 0; i < PHB_REQUIRED; i++)
		if (i != PHB_END && !(seen >> i & 1)) {
			snprintf(msg, sizeof msg, "section '%s' is missing", phb_sections[i]);
			r_fail(&r, off, msg);
			goto out;
		}
	if (nargs_needed > t->nargs) {
		snprintf(msg, sizeof msg, "events refer to %llu arguments, the file has %zu",
			 (unsigned long long)nargs_needed, t->nargs);
		r_fail(&r, off, msg);
		goto out;
	}
	rc = 0;
out:
	free(r.strmap);
	return rc;
}


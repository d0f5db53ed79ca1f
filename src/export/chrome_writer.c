/*
 * chrome_writer — the Chrome / Perfetto trace in Kineto's schema (see
 * chrome_writer.h).
 *
 * The header (everything but traceEvents) is a cJSON object, printed once.
 * The events are formatted by hand into a 64 KiB staging buffer that is
 * handed to the outfile whenever it fills: no printf and no allocation per
 * event (doubles in args are the one exception: they go through snprintf).
 */
#include "chrome_writer.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../events/query.h"
#include "../util/grow.h"
#include "../util/sortidx.h"
#include "utf8.h"
#include "version.h"

#define CW_BUF (64 * 1024)
#define CW_FIXED 512 /* room for an event's fields other than its strings */
#define CW_ESC 16    /* room for the longest escape of one input sequence */
#define CW_CACHE_MAX 4096 /* longest name whose escaped form is cached */
/* The cache of escaped names holds at most this much, for the strings of
 * the first CW_CACHE_NAMES ids: a window of millions of distinct names
 * writes the rest directly (same output), and the writer's memory (at
 * most 8 + 2 MiB) does not grow with them. */
#define CW_CACHE_BYTES ((size_t)8 << 20)
#define CW_CACHE_NAMES ((uint32_t)1 << 18)
#define CW_UNCACHED UINT32_MAX

/* Staging buffer in front of an outfile, and the escaped, quoted form of
 * each strtab string met so far (names repeat: each is escaped once). */
struct cw {
	struct outfile *out; /* NULL: the buffer must never fill */
	char *buf, *p, *end;
	int failed;          /* the outfile reported an error: stop writing */
	const struct trace *t;
	uint32_t *esc_off;   /* strtab id -> offset in esc, or CW_UNCACHED */
	uint32_t *esc_len;
	char *esc;
	size_t esc_used, esc_cap;
};

static const char cw_hex[] = "0123456789abcdef";
static const char cw_digits[] =
	"0001020304050607080910111213141516171819"
	"2021222324252627282930313233343536373839"
	"4041424344454647484950515253545556575859"
	"6061626364656667686970717273747576777879"
	"8081828384858687888990919293949596979899";

/* Hands the staged bytes to the outfile. 0 or -1 (sticky). */
static int cw_flush(struct cw *w)
{
	size_t n = (size_t)(w->p - w->buf);

	w->p = w->buf;
	if (w->failed)
		return -1;
	if (n > 0 && (!w->out || outfile_write(w->out, w->buf, n) != 0))
		w->failed = 1;
	return w->failed ? -1 : 0;
}

/* Makes sure `n` (< buffer size) bytes fit; flushes if not. */
static inline void cw_room(struct cw *w, size_t n)
{
	if ((size_t)(w->end - w->p) < n)
		cw_flush(w);
}

/* Appends bytes that the caller has made room for. */
static inline void cw_mem(struct cw *w, const char *s, size_t n)
{
	memcpy(w->p, s, n);
	w->p += n;
}

/* Appends a NUL-terminated literal that the caller has made room for. */
static inline void cw_lit(struct cw *w, const char *s)
{
	cw_mem(w, s, strlen(s));
}

/* Formats `v` in decimal at p; returns the end. At most 20 bytes. */
static inline char *fmt_u64(char *p, uint64_t v)
{
	char tmp[20], *q = tmp + sizeof tmp;
	size_t n;

	while (v >= 100) {
		q -= 2;
		memcpy(q, cw_digits + 2 * (v % 100), 2);
		v /= 100;
	}
	if (v >= 10) {
		q -= 2;
		memcpy(q, cw_digits + 2 * v, 2);
	} else {
		*--q = (char)('0' + v);
	}
	n = (size_t)(tmp + sizeof tmp - q);
	memcpy(p, q, n);
	return p + n;
}

/* Formats a signed `v` at p; returns the end. At most 20 bytes. */
static inline char *fmt_i64(char *p, int64_t v)
{
	if (v < 0) {
		*p++ = '-';
		return fmt_u64(p, 0 - (uint64_t)v);
	}
	return fmt_u64(p, (uint64_t)v);
}

/* Formats nanoseconds as microseconds with exactly three decimals, integer
 * arithmetic only (-1500 -> "-1.500"). At most 25 bytes. */
static inline char *fmt_us(char *p, int64_t ns)
{
	uint64_t u = (uint64_t)ns;
	unsigned r;

	if (ns < 0) {
		*p++ = '-';
		u = 0 - u;
	}
	p = fmt_u64(p, u / 1000);
	r = (unsigned)(u % 1000);
	p[0] = '.';
	p[1] = (char)('0' + r / 100);
	p[2] = (char)('0' + r / 10 % 10);
	p[3] = (char)('0' + r % 10);
	return p + 4;
}

/* Formats a double as %.15g if that reads back exactly, else %.17g,
 * as valid JSON: NaN and infinities become null, and whatever decimal
 * separator the C locale in force uses becomes '.'. At most 32 bytes. */
static char *fmt_double(char *p, double d)
{
	char tmp[40];
	int n, i, sep = 0;

	if (!isfinite(d)) {
		memcpy(p, "null", 4);
		return p + 4;
	}
	if (fabs(d) < 9007199254740992.0 && d == (double)(int64_t)d)
		return fmt_i64(p, (int64_t)d); /* integral: what %g prints, faster */
	snprintf(tmp, sizeof tmp, "%.15g", d);
	if (strtod(tmp, NULL) != d)
		snprintf(tmp, sizeof tmp, "%.17g", d);
	n = (int)strlen(tmp);
	for (i = 0; i < n; i++) {
		char c = tmp[i];

		if ((c >= '0' && c <= '9') || c == '-' || c == '+' || c == 'e') {
			*p++ = c;
			sep = 0;
		} else if (!sep) {
			*p++ = '.';
			sep = 1;
		}
	}
	return p;
}

/* Formats the duration of an event written at `ts` ns lasting `dur` ns.
 *
 * Readers add ts and dur as doubles: TensorBoard's plugin as they are,
 * speedscope after subtracting its thread's first ts, HTA before rounding
 * to whole us. With three decimals the sum can pass the double of the end
 * by a fraction of a ns, and spans that touch overlap there. So the
 * duration written is at most X = end - ts as doubles (the double of the
 * end minus that of the start, exact since ts >= dur): ts + dur is then at
 * most the end in exact arithmetic, after any exact shift too, and never
 * passes the start of what follows.
 *
 * One rule for every nesting: an event that `holds` another (cw_holds)
 * gets X itself, so its end reads as the double of its end, exactly, also
 * after a shift by a ts of its thread (exact while every ts of the thread
 * is within twice the shift: Sterbenz, as in Unix time by the week), and
 * what it holds, ending no later in ns, reads as ending no later. Other
 * events get three decimals when those are at most X, else four decimals
 * cut down to at most X (0.1 ns less). Either way the value is within
 * 0.25 ns of the exact duration while ts < 2^40 us (as export_unix_time()
 * keeps it), so readers that round each field to whole ns (Perfetto,
 * profhost) read the exact duration. At most 32 bytes. */
static char *fmt_dur(char *p, int64_t ts, int64_t dur, int holds)
{
	int64_t end, q;
	double T, G, X;

	if (dur <= 0 || ts < dur || dur > INT64_MAX / 10 ||
	    __builtin_add_overflow(ts, dur, &end))
		return fmt_us(p, dur); /* X might not be exact (not Unix time) */
	T = (double)ts / 1000.0;
	G = (double)end / 1000.0;
	X = G - T; /* exact (Sterbenz): T >= G / 2 */
	if (holds)
		return X == (double)dur / 1000.0 ? fmt_us(p, dur) : fmt_double(p, X);
	if ((double)dur / 1000.0 <= X)
		return fmt_us(p, dur);
	q = (int64_t)floor(X * 10000.0); /* in 0.1 ns */
	while (q > 0 && (double)q / 10000.0 > X)
		q--; /* X * 10000 rounded up past an integer */
	p = fmt_us(p, q / 10);
	*p++ = (char)('0' + q % 10);
	return p;
}

/* Printable ASCII that needs no escape in a JSON string. */
static inline int json_plain(unsigned char c)
{
	return c >= 0x20 && c < 0x7F && c != '"' && c != '\\';
}

/* Appends `len` bytes of `s` as a JSON string literal with its quotes,
 * flushing as needed (any length). */
static void cw_string(struct cw *w, const char *str, size_t len)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t i = 0;

	cw_room(w, CW_ESC);
	*w->p++ = '"';
	while (i < len) {
		size_t room, j, lim, k, bad;
		unsigned char c;

		cw_room(w, 2 * CW_ESC);
		room = (size_t)(w->end - w->p) - CW_ESC;
		lim = len - i < room ? len : i + room;
		for (j = i; j < lim && json_plain(s[j]); j++)
			;
		cw_mem(w, (const char *)s + i, j - i);
		i = j;
		if (i == len || i == lim)
			continue;
		c = s[i];
		if (c < 0x80) {
			char *p = w->p;

			*p++ = '\\';
			switch (c) {
			case '"': *p++ = '"'; break;
			case '\\': *p++ = '\\'; break;
			case '\b': *p++ = 'b'; break;
			case '\f': *p++ = 'f'; break;
			case '\n': *p++ = 'n'; break;
			case '\r': *p++ = 'r'; break;
			case '\t': *p++ = 't'; break;
			default: /* other controls, NUL and DEL */
				*p++ = 'u';
				*p++ = '0';
				*p++ = '0';
				*p++ = cw_hex[c >> 4];
				*p++ = cw_hex[c & 15];
			}
			w->p = p;
			i++;
			continue;
		}
		k = utf8_seq(s + i, len - i, &bad);
		if (k) {
			cw_mem(w, (const char *)s + i, k);
			i += k;
		} else {
			cw_mem(w, UTF8_REPLACEMENT, UTF8_REPLACEMENT_LEN);
			i += bad;
		}
	}
	cw_room(w, CW_ESC);
	*w->p++ = '"';
}

/* Returns the string of strtab id `id` and its length; "" for an unknown
 * id. Reads the table's public fields: no call per lookup. */
static inline const char *name_of(const struct trace *t, uint32_t id, size_t *len)
{
	if (id < t->names.n && t->names.str && t->names.str[id]) {
		*len = t->names.len ? t->names.len[id] : strlen(t->names.str[id]);
		return t->names.str[id];
	}
	*len = 0;
	return "";
}

/* Escapes strtab string `id` into the cache, if it is short and the
 * cache (at most CW_CACHE_BYTES) and memory allow; otherwise leaves it
 * uncached (written directly each time). */
static void cw_cache(struct cw *w, uint32_t id)
{
	size_t n, need;
	const char *s = name_of(w->t, id, &n);
	struct cw tmp;
	char *grown;

	if (n > CW_CACHE_MAX)
		return;
	need = 6 * n + 2 + 4 * CW_ESC;
	grown = grow_array_max(w->esc, &w->esc_cap, w->esc_used + need, 1, 64 * 1024,
			       CW_CACHE_BYTES);
	if (!grown)
		return; /* full (or no memory): written without the cache */
	w->esc = grown;
	memset(&tmp, 0, sizeof tmp);
	tmp.buf = tmp.p = w->esc + w->esc_used;
	tmp.end = tmp.buf + need;
	cw_string(&tmp, s, n);
	if (tmp.failed)
		return; /* cannot happen: `need` is the worst case */
	w->esc_off[id] = (uint32_t)w->esc_used;
	w->esc_len[id] = (uint32_t)(tmp.p - tmp.buf);
	w->esc_used += w->esc_len[id];
}

/* Appends strtab string `id` as a JSON string literal. */
static void cw_name(struct cw *w, uint32_t id)
{
	const char *s;
	size_t n;

	if (w->esc_off && id < w->t->names.n && id < CW_CACHE_NAMES) {
		if (w->esc_off[id] == CW_UNCACHED)
			cw_cache(w, id);
		if (w->esc_off[id] != CW_UNCACHED) {
			n = w->esc_len[id];
			cw_room(w, n);
			cw_mem(w, w->esc + w->esc_off[id], n);
			return;
		}
	}
	s = name_of(w->t, id, &n);
	cw_string(w, s, n);
}

/* Appends one argument value; the caller has made room for CW_FIXED. */
static void cw_arg_value(struct cw *w, const struct trace_arg *a)
{
	switch (a->type) {
	case TRACE_ARG_INT:
		w->p = fmt_i64(w->p, a->v.i);
		break;
	case TRACE_ARG_UINT:
		w->p = fmt_u64(w->p, a->v.u);
		break;
	case TRACE_ARG_DOUBLE:
		w->p = fmt_double(w->p, a->v.d);
		break;
	case TRACE_ARG_STR:
		cw_name(w, a->v.str);
		break;
	case TRACE_ARG_RAW: {
		size_t n;
		const char *s = name_of(w->t, a->v.str, &n);

		if (n == 0 || n > CW_FIXED / 2) {
			cw_lit(w, "null");
		} else {
			cw_mem(w, s, n);
		}
		break;
	}
	default:
		cw_lit(w, "null");
	}
}

/* Appends the "args" member of `ev` (its typed args, then its flags), or
 * nothing when it has neither. */
static void cw_args(struct cw *w, const struct trace *t,
		    const struct trace_event *ev)
{
	static const struct {
		uint32_t bit;
		const char *text;
	} flag_args[] = {
		{ TRACE_F_CLIPPED_START, "\"clipped_start\":true" },
		{ TRACE_F_CLIPPED_END, "\"clipped_end\":true" },
		{ TRACE_F_PARTIAL, "\"partial\":true" },
	};
	size_t nargs = ev->nargs, i;
	int first = 1;
	/* A range or operator linked to GPU work (or, for operators, to
	 * nothing but itself) carries its external id, as Kineto's do. */
	uint64_t ext = (ev->cat == TRACE_CAT_USER_ANNOTATION || ev->cat == TRACE_CAT_CPU_OP) &&
		ev->ph == TRACE_PH_COMPLETE ? ev->id : 0;

	if (ev->args > t->nargs || nargs > t->nargs - ev->args)
		nargs = 0; /* out of range: a builder bug; keep the file valid */
	if (nargs == 0 && !ext && !(ev->flags & (TRACE_F_CLIPPED_START |
						  TRACE_F_CLIPPED_END | TRACE_F_PARTIAL)))
		return;
	cw_room(w, CW_FIXED);
	cw_lit(w, ",\"args\":{");
	if (ext) {
		cw_lit(w, "\"External id\":");
		w->p = fmt_u64(w->p, ext);
		first = 0;
	}
	for (i = 0; i < nargs; i++) {
		const struct trace_arg *a = &t->args[ev->args + i];

		if (!first) {
			cw_room(w, CW_FIXED);
			*w->p++ = ',';
		}
		first = 0;
		cw_name(w, a->key);
		cw_room(w, CW_FIXED);
		*w->p++ = ':';
		cw_arg_value(w, a);
	}
	for (i = 0; i < sizeof flag_args / sizeof flag_args[0]; i++) {
		if (!(ev->flags & flag_args[i].bit))
			continue;
		cw_room(w, CW_FIXED);
		if (!first)
			*w->p++ = ',';
		first = 0;
		cw_lit(w, flag_args[i].text);
	}
	cw_room(w, CW_FIXED);
	*w->p++ = '}';
}

/* Appends one event object (no separator). `cats` holds each category's
 * name already quoted, with its length; `holds`: the event holds another
 * (cw_holds), its duration is written for that (fmt_dur). */
static void cw_event(struct cw *w, const struct trace *t,
		     const struct trace_event *ev, char *const *cats,
		     const size_t *catlen, int holds)
{
	char *p;

	cw_room(w, CW_FIXED);
	p = w->p;
	switch (ev->ph) {
	case TRACE_PH_INSTANT:
		memcpy(p, "{\"ph\":\"i\",\"s\":\"t\",\"cat\":", 24);
		p += 24;
		break;
	case TRACE_PH_FLOW_START:
		memcpy(p, "{\"ph\":\"s\",\"cat\":\"ac2g\"", 22);
		p += 22;
		break;
	case TRACE_PH_FLOW_END:
		memcpy(p, "{\"ph\":\"f\",\"bp\":\"e\",\"cat\":\"ac2g\"", 31);
		p += 31;
		break;
	default: /* TRACE_PH_COMPLETE */
		memcpy(p, "{\"ph\":\"X\",\"cat\":", 16);
		p += 16;
	}
	if (ev->ph != TRACE_PH_FLOW_START && ev->ph != TRACE_PH_FLOW_END) {
		unsigned c = ev->cat; /* 4 bits: a category or TRACE_CAT_COUNT's 16 */

		if (c > TRACE_CAT_COUNT)
			c = TRACE_CAT_COUNT;

		memcpy(p, cats[c], catlen[c]);
		p += catlen[c];
	}
	memcpy(p, ",\"name\":", 8);
	w->p = p + 8;
	cw_name(w, ev->name);

	cw_room(w, CW_FIXED);
	p = w->p;
	memcpy(p, ",\"pid\":", 7);
	p = fmt_i64(p + 7, ev->pid);
	memcpy(p, ",\"tid\":", 7);
	p = fmt_i64(p + 7, ev->tid);
	memcpy(p, ",\"ts\":", 6);
	p = fmt_us(p + 6, ev->ts);
	if (ev->ph == TRACE_PH_FLOW_START || ev->ph == TRACE_PH_FLOW_END) {
		memcpy(p, ",\"id\":", 6);
		p = fmt_u64(p + 6, ev->id);
	} else if (ev->ph != TRACE_PH_INSTANT) {
		memcpy(p, ",\"dur\":", 7);
		p = fmt_dur(p + 7, ev->ts, ev->dur, holds);
	}
	w->p = p;
	cw_args(w, t, ev);
	cw_room(w, CW_FIXED);
	*w->p++ = '}';
}

/* Whether complete event `ev` holds `next`, the next complete event in
 * nesting order (NULL: none): on its track (pid, tid), starting before it
 * ends, so that readers nest that one (and all it holds) in it. */
static int cw_holds(const struct trace_event *ev, const struct trace_event *next)
{
	int64_t end;

	if (!next || next->pid != ev->pid || next->tid != ev->tid)
		return 0;
	if (__builtin_add_overflow(ev->ts, ev->dur, &end))
		end = INT64_MAX;
	return next->ts < end;
}

/* For a trace in nesting order (t->nested, as every window's is): whether
 * t->ev[i] holds another (cw_holds), looking ahead to the next complete
 * event. Instants and flows hold nothing and are held by nothing here.
 * Over a whole trace the look-aheads read each event once: no memory. */
static int cw_holds_at(const struct trace *t, size_t i)
{
	size_t k;

	if (t->ev[i].ph != TRACE_PH_COMPLETE)
		return 0;
	for (k = i + 1; k < t->nev && t->ev[k].ph != TRACE_PH_COMPLETE; k++)
		;
	return cw_holds(&t->ev[i], k < t->nev ? &t->ev[k] : NULL);
}

/* For a trace not in nesting order: which events hold another
 * (cw_holds), swept through a sorted index. Returns a malloc'd array of
 * t->nev bytes, or NULL when out of memory (the caller then takes every
 * event as holding: the same nesting, longer numbers). Host thread. */
static uint8_t *cw_holders(const struct trace *t)
{
	const struct trace_event *next = NULL;
	uint8_t *holds;
	uint32_t *idx;
	size_t i, k;

	if (t->nev > UINT32_MAX)
		return NULL;
	holds = calloc(t->nev ? t->nev : 1, 1);
	idx = malloc((t->nev ? t->nev : 1) * sizeof *idx);
	if (!holds || !idx) {
		free(holds);
		free(idx);
		return NULL;
	}
	for (i = 0; i < t->nev; i++)
		idx[i] = (uint32_t)i;
	sortidx_u32(idx, t->nev, trace_event_cmp_at, (void *)t);
	for (k = t->nev; k-- > 0;) {
		const struct trace_event *ev = &t->ev[idx[k]];

		if (ev->ph != TRACE_PH_COMPLETE)
			continue;
		holds[idx[k]] = (uint8_t)cw_holds(ev, next);
		next = ev;
	}
	free(idx);
	return holds;
}

/* Appends "pid":P,"tid":T; the caller has made room for CW_FIXED. */
static void cw_pid_tid(struct cw *w, int32_t pid, int32_t tid)
{
	cw_lit(w, "\"pid\":");
	w->p = fmt_i64(w->p, pid);
	cw_lit(w, ",\"tid\":");
	w->p = fmt_i64(w->p, tid);
}

/* Appends a metadata event {"name":kind,"ph":"M","pid","tid","args":{...}}
 * whose one arg is a string (`s`, n bytes) or, when s is NULL, the integer
 * `v`; preceded by ",\n" when `sep`. */
static void cw_meta(struct cw *w, int sep, const char *kind, int32_t pid,
		    int32_t tid, const char *key, const char *s, size_t n,
		    int64_t v)
{
	cw_room(w, CW_FIXED);
	if (sep)
		cw_lit(w, ",\n");
	cw_lit(w, "{\"name\":\"");
	cw_lit(w, kind);
	cw_lit(w, "\",\"ph\":\"M\",");
	cw_pid_tid(w, pid, tid);
	cw_lit(w, ",\"args\":{\"");
	cw_lit(w, key);
	cw_lit(w, "\":");
	if (s) {
		cw_string(w, s, n);
	} else {
		w->p = fmt_i64(w->p, v);
	}
	cw_room(w, CW_FIXED);
	cw_lit(w, "}}");
}

/* Returns a malloc'd copy of the C string s (NULL: "") with every invalid
 * UTF-8 sequence replaced by U+FFFD, so cJSON emits valid JSON; NULL when
 * out of memory. */
static char *utf8_clean(const char *str)
{
	const unsigned char *s = (const unsigned char *)(str ? str : "");
	size_t len = strlen((const char *)s), i = 0, k, bad;
	char *out = malloc(3 * len + 1), *p = out;

	if (!out)
		return NULL;
	while (i < len) {
		if (s[i] < 0x80) {
			*p++ = (char)s[i++];
			continue;
		}
		k = utf8_seq(s + i, len - i, &bad);
		if (k) {
			memcpy(p, s + i, k);
			p += k;
			i += k;
		} else {
			memcpy(p, UTF8_REPLACEMENT, UTF8_REPLACEMENT_LEN);
			p += UTF8_REPLACEMENT_LEN;
			i += bad;
		}
	}
	*p = '\0';
	return out;
}

/* Adds key: string, the string made valid UTF-8. 0 or -1 (no memory). */
static int add_str(cJSON *o, const char *key, const char *s)
{
	char *clean = utf8_clean(s);
	int rc = clean && cJSON_AddStringToObject(o, key, clean) ? 0 : -1;

	free(clean);
	return rc;
}

/* Adds key: integer, written exactly (cJSON numbers are doubles, which would
 * round nanosecond epochs and 64-bit counters). 0 or -1. */
static int add_i64(cJSON *o, const char *key, int64_t v)
{
	char buf[24];

	*fmt_i64(buf, v) = '\0';
	return cJSON_AddRawToObject(o, key, buf) ? 0 : -1;
}

/* As add_i64 for unsigned values. */
static int add_u64(cJSON *o, const char *key, uint64_t v)
{
	char buf[24];

	*fmt_u64(buf, v) = '\0';
	return cJSON_AddRawToObject(o, key, buf) ? 0 : -1;
}

/* Adds "cpu_samples": how the window was sampled. 0 or -1. */
static int add_sampling(cJSON *ph, const struct trace *t)
{
	const struct trace_sampling *sm = &t->sampling;
	cJSON *o = cJSON_AddObjectToObject(ph, "cpu_samples");
	uint64_t n = 0;
	size_t i;
	int bad = 0;

	if (!o)
		return -1;
	for (i = 0; i < t->nstacks; i++)
		n += t->stacks[i].kind == TRACE_STACK_SAMPLE;
	bad |= add_u64(o, "hz", sm->hz);
	bad |= add_str(o, "clock", sm->wall_clock ? "wall" : "cpu");
	bad |= add_u64(o, "depth", sm->depth);
	bad |= add_i64(o, "period_ns", sm->period_ns);
	bad |= add_i64(o, "signal", sm->signal);
	bad |= add_u64(o, "samples", n);
	bad |= add_u64(o, "lost", sm->lost);
	bad |= add_u64(o, "slow_unwinds", sm->slow);
	return bad ? -1 : 0;
}

/* Adds "deviceProperties": one object per GPU with Kineto's keys. 0 or -1. */
static int add_devices(cJSON *root, const struct trace *t)
{
	cJSON *arr = cJSON_AddArrayToObject(root, "deviceProperties");
	size_t i;
	int bad = 0;

	if (!arr)
		return -1;
	for (i = 0; i < t->ndevices; i++) {
		const struct trace_device *d = &t->devices[i];
		cJSON *o = cJSON_CreateObject();

		if (!o || !cJSON_AddItemToArray(arr, o)) {
			cJSON_Delete(o);
			return -1;
		}
		bad |= add_i64(o, "id", d->id);
		bad |= add_str(o, "name", d->name);
		bad |= add_u64(o, "totalGlobalMem", d->total_global_mem);
		bad |= add_i64(o, "computeMajor", d->compute_major);
		bad |= add_i64(o, "computeMinor", d->compute_minor);
		bad |= add_i64(o, "maxThreadsPerBlock", d->max_threads_per_block);
		bad |= add_i64(o, "maxThreadsPerMultiprocessor", d->max_threads_per_sm);
		bad |= add_i64(o, "regsPerBlock", d->regs_per_block);
		bad |= add_i64(o, "regsPerMultiprocessor", d->regs_per_sm);
		bad |= add_i64(o, "warpSize", d->warp_size);
		bad |= add_i64(o, "sharedMemPerBlock", d->shared_mem_per_block);
		bad |= add_i64(o, "sharedMemPerMultiprocessor", d->shared_mem_per_sm);
		bad |= add_i64(o, "numSms", d->num_sms);
	}
	return bad ? -1 : 0;
}

/* Builds the document's header object (everything but traceEvents).
 * Returns NULL when out of memory. */
static cJSON *build_header(const struct trace *t)
{
	const struct trace_meta *m = &t->meta;
	const struct trace_counters *c = &t->counters;
	cJSON *root = cJSON_CreateObject(), *di, *ph, *cn;
	char name[1024];
	int bad = 0;

	if (!root)
		return NULL;
	snprintf(name, sizeof name, "%s/rank%d/%s%u",
		 m->run ? m->run : "profhost", m->rank,
		 m->recorder ? "recorder" : "window", (unsigned)m->window);
	bad |= add_i64(root, "schemaVersion", 1);
	bad |= add_devices(root, t);
	di = cJSON_AddObjectToObject(root, "distributedInfo");
	bad |= !di;
	if (di) {
		bad |= add_i64(di, "rank", m->rank);
		bad |= add_i64(di, "world_size", m->world_size);
	}
	bad |= add_str(root, "traceName", name);
	bad |= add_i64(root, "baseTimeNanoseconds", m->base_time_ns);
	bad |= add_str(root, "displayTimeUnit", "ms");
	ph = cJSON_AddObjectToObject(root, "profhost");
	bad |= !ph;
	if (ph) {
		bad |= add_str(ph, "version", PROFHOST_VERSION);
		bad |= add_u64(ph, "window", m->window);
		bad |= add_u64(ph, "first_step", m->first_step);
		bad |= add_u64(ph, "last_step", m->last_step);
		bad |= add_str(ph, "reason", m->reason);
		if (m->recorder)
			bad |= !cJSON_AddBoolToObject(ph, "recorder", 1);
		bad |= add_str(ph, "program", m->program);
		bad |= add_str(ph, "hostname", m->hostname);
		bad |= add_i64(ph, "pid", m->pid);
		bad |= add_i64(ph, "monotonic_offset_ns", m->monotonic_offset_ns);
		cn = cJSON_AddObjectToObject(ph, "counters");
		bad |= !cn;
		if (cn) {
			bad |= add_u64(cn, "events", c->events);
			bad |= add_u64(cn, "dropped_buffer", c->dropped_buffer);
			bad |= add_u64(cn, "dropped_memory", c->dropped_memory);
			bad |= add_u64(cn, "dropped_noslot", c->dropped_noslot);
			bad |= add_u64(cn, "unbalanced_pops", c->unbalanced_pops);
			bad |= add_u64(cn, "clipped", c->clipped);
			bad |= add_u64(cn, "gpu_dropped", c->gpu_dropped);
			bad |= add_u64(cn, "dropped_steps", c->dropped_steps);
			bad |= add_u64(cn, "windows_skipped", c->windows_skipped);
		}
		if (t->sampling.hz)
			bad |= add_sampling(ph, t);
	}
	if (bad) {
		cJSON_Delete(root);
		return NULL;
	}
	return root;
}

/* Writes the printed header without its closing brace, then opens
 * traceEvents. 0 or -1 (out of memory; I/O errors stick in w). */
static int cw_header(struct cw *w, const struct trace *t)
{
	cJSON *root = build_header(t);
	char *text;
	size_t n;

	if (!root)
		return -1;
	text = cJSON_Print(root);
	cJSON_Delete(root);
	if (!text)
		return -1;
	n = strlen(text);
	while (n > 0 && text[n - 1] != '}')
		n--;
	if (n > 0)
		n--; /* drop the closing brace: traceEvents follows */
	while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\t'))
		n--;
	cw_flush(w);
	if (!w->failed && outfile_write(w->out, text, n) != 0)
		w->failed = 1;
	cJSON_free(text);
	cw_room(w, CW_FIXED);
	cw_lit(w, ",\n\t\"traceEvents\":\t[\n");
	return 0;
}

/* Fills cats[]/catlen[] with each category's name as a quoted JSON string
 * (cats[TRACE_CAT_COUNT] is for out-of-range values). Returns 0 or -1. */
static int quote_cats(char **cats, size_t *catlen)
{
	unsigned c;

	for (c = 0; c <= TRACE_CAT_COUNT; c++) {
		const char *s = c < TRACE_CAT_COUNT ? trace_cat_name((enum trace_cat)c)
						    : "unknown";
		char local[256];
		struct cw w = { .buf = local, .p = local, .end = local + sizeof local };
		size_t n;

		if (!s)
			s = "unknown";
		n = strlen(s);
		if (n > 32)
			n = 32; /* keeps an event's fixed part within CW_FIXED */
		cw_string(&w, s, n);
		catlen[c] = (size_t)(w.p - local);
		cats[c] = malloc(catlen[c]);
		if (!cats[c])
			return -1;
		memcpy(cats[c], local, catlen[c]);
	}
	return 0;
}

/* The child of tree node `node` named name[0..len), or UINT32_MAX. */
static uint32_t tree_find(const struct query_tree *tr, uint32_t node, const char *name,
			  size_t len)
{
	uint32_t c;

	for (c = tr->nodes[node].first_child; c != UINT32_MAX; c = tr->nodes[c].next_sibling)
		if (tr->nodes[c].len == len && memcmp(tr->nodes[c].name, name, len) == 0)
			return c;
	return UINT32_MAX;
}

/* The node of the sample tree where sample event `ev` ends: its frames
 * followed from the root as query_sample_tree() laid them (the "stack"
 * argument outermost first, else the name), as deep as the tree goes. */
static uint32_t sample_leaf(const struct trace *t, const struct query_tree *tr,
			    const struct trace_event *ev)
{
	size_t len, k = 0;
	const char *stack = query_arg_str(t, ev, TRACE_ARG_STACK, &len);
	uint32_t node = 0;

	if (!stack) {
		stack = trace_str(t, ev->name);
		len = strtab_len(&t->names, ev->name);
	}
	while (k < len) {
		const char *semi = memchr(stack + k, ';', len - k);
		size_t flen = semi ? (size_t)(semi - (stack + k)) : len - k;
		uint32_t c = flen ? tree_find(tr, node, stack + k, flen) : node;

		if (c == UINT32_MAX)
			break;
		node = c;
		k += flen + 1;
	}
	return node;
}

/* Samples by thread, then time (speedscope weighs each sample by the time
 * to the next one of its thread): the events' nesting order. */
static int sample_cmp(const void *pa, const void *pb)
{
	return trace_event_cmp(*(const struct trace_event *const *)pa,
			       *(const struct trace_event *const *)pb);
}

/* Appends the Trace Event Format's sampled profile of the window's CPU
 * samples (cat cpu_sample), which chrome://tracing and speedscope show as
 * a sampled profile: "stackFrames" (each frame of the sample tree, id >= 1,
 * with its parent) and "samples" ({pid, tid, ts, name, sf, weight}, by
 * thread and time). Writes nothing when the trace has no samples. 0, or -1
 * when out of memory. Host thread. */
static int cw_samples(struct cw *w, const struct trace *t)
{
	struct query_filter f = { .cats = 1u << TRACE_CAT_SAMPLE };
	struct query_tree tr;
	const struct trace_event **sm;
	struct err e;
	size_t n = 0, i;
	int64_t dur;
	int first = 1;

	for (i = 0; i < t->nev; i++)
		n += query_match(t, &f, &t->ev[i], &dur);
	if (n == 0)
		return 0;
	sm = malloc(n * sizeof *sm);
	if (!sm || query_sample_tree(t, &f, &tr, &e) != 0) {
		free(sm);
		return -1;
	}
	for (i = n = 0; i < t->nev; i++)
		if (query_match(t, &f, &t->ev[i], &dur))
			sm[n++] = &t->ev[i];
	qsort(sm, n, sizeof *sm, sample_cmp);
	cw_room(w, CW_FIXED);
	cw_lit(w, ",\n\"stackFrames\":{");
	for (i = 1; i < tr.n && !w->failed; i++) {
		const struct query_node *nd = &tr.nodes[i];

		cw_room(w, CW_FIXED);
		cw_lit(w, i > 1 ? ",\n\"" : "\n\"");
		w->p = fmt_u64(w->p, i);
		cw_lit(w, "\":{\"name\":");
		cw_string(w, nd->name, nd->len);
		cw_room(w, CW_FIXED);
		cw_lit(w, ",\"category\":\"cpu\"");
		if (nd->parent) {
			cw_lit(w, ",\"parent\":");
			w->p = fmt_u64(w->p, nd->parent);
		}
		cw_lit(w, "}");
	}
	cw_room(w, CW_FIXED);
	cw_lit(w, "},\n\"samples\":[");
	for (i = 0; i < n && !w->failed; i++) {
		const struct trace_event *ev = sm[i];
		uint32_t leaf = sample_leaf(t, &tr, ev);
		double weight = 1;

		if (leaf == 0)
			continue; /* a sample with no frame */
		query_arg_num(t, ev, TRACE_ARG_WEIGHT, &weight);
		cw_room(w, CW_FIXED);
		cw_lit(w, first ? "\n{" : ",\n{");
		first = 0;
		cw_pid_tid(w, ev->pid, ev->tid);
		cw_lit(w, ",\"ts\":");
		w->p = fmt_us(w->p, ev->ts);
		cw_lit(w, ",\"name\":\"cpu_sample\",\"sf\":");
		w->p = fmt_u64(w->p, leaf);
		cw_lit(w, ",\"weight\":");
		w->p = fmt_double(w->p, weight);
		cw_lit(w, "}");
	}
	cw_room(w, CW_FIXED);
	cw_lit(w, "\n]");
	query_tree_free(&tr);
	free(sm);
	return 0;
}

/* Host thread. Streams the whole document; the caller commits or aborts
 * `out`. -1 with *e set: the outfile's own message for I/O errors. */
int chrome_writer_write(const struct trace *t, struct outfile *out,
			struct err *e)
{
	char *cats[TRACE_CAT_COUNT + 1] = { NULL };
	size_t catlen[TRACE_CAT_COUNT + 1];
	struct cw w;
	/* which events hold another: looked ahead in a trace in nesting
	 * order, an array for another */
	uint8_t *holds = t->nested ? NULL : cw_holders(t);
	size_t i;
	int rc = 0, sep;

	memset(&w, 0, sizeof w);
	w.out = out;
	w.buf = malloc(CW_BUF);
	w.p = w.buf;
	w.end = w.buf + CW_BUF;
	w.t = t;
	if (t->names.n > 0) { /* no cache (slower, same output) if no memory */
		size_t ncache = t->names.n < CW_CACHE_NAMES ? t->names.n : CW_CACHE_NAMES;

		w.esc_off = malloc(ncache * sizeof *w.esc_off);
		w.esc_len = malloc(ncache * sizeof *w.esc_len);
		if (!w.esc_off || !w.esc_len) {
			free(w.esc_off);
			w.esc_off = NULL;
		} else {
			memset(w.esc_off, 0xff, ncache * sizeof *w.esc_off);
		}
	}
	if (!w.buf || quote_cats(cats, catlen) != 0 || cw_header(&w, t) != 0) {
		rc = err_set(e, "out of memory writing the Chrome trace");
		goto done;
	}
	for (i = 0; i < t->nev && !w.failed; i++) {
		if (i > 0) {
			cw_room(&w, CW_FIXED);
			cw_mem(&w, ",\n", 2);
		}
		cw_event(&w, t, &t->ev[i], cats, catlen,
			 t->nested ? cw_holds_at(t, i) : holds ? holds[i] : 1);
	}
	sep = t->nev > 0;
	if (t->meta.program && t->meta.program[0]) {
		cw_meta(&w, sep, "process_name", t->meta.pid, 0, "name",
			t->meta.program, strlen(t->meta.program), 0);
		sep = 1;
	}
	for (i = 0; i < t->nprocs && !w.failed; i++) {
		const struct trace_process *pr = &t->procs[i];
		size_t n;
		const char *s = name_of(t, pr->name, &n);

		cw_meta(&w, sep, "process_name", pr->pid, 0, "name", s, n, 0);
		cw_meta(&w, 1, "process_sort_index", pr->pid, 0, "sort_index", NULL, 0,
			pr->sort);
		sep = 1;
	}
	for (i = 0; i < t->nthreads && !w.failed; i++) {
		const struct trace_thread *th = &t->threads[i];
		size_t n;
		const char *s = name_of(t, th->name, &n);

		cw_meta(&w, sep, "thread_name", th->pid, th->tid, "name", s, n, 0);
		cw_meta(&w, 1, "thread_sort_index", th->pid, th->tid,
			"sort_index", NULL, 0, (int64_t)i);
		sep = 1;
	}
	cw_room(&w, CW_FIXED);
	cw_lit(&w, "\n]");
	if (!w.failed && cw_samples(&w, t) != 0) {
		rc = err_set(e, "out of memory writing the Chrome trace's samples");
		goto done;
	}
	cw_room(&w, CW_FIXED);
	cw_lit(&w, "}\n");
	cw_flush(&w);
	if (w.failed) {
		if (outfile_error(out, e) == 0)
			err_set(e, "cannot write the Chrome trace");
		rc = -1;
	}
done:
	for (i = 0; i <= TRACE_CAT_COUNT; i++)
		free(cats[i]);
	free(w.buf);
	free(w.esc_off);
	free(w.esc_len);
	free(w.esc);
	free(holds);
	return rc;
}

/* Writes one escaped string literal through a small stack buffer. 0 or -1. */
int chrome_writer_string(struct outfile *out, const char *s, size_t len)
{
	char local[1024];
	struct cw w = { .out = out, .buf = local, .p = local,
			.end = local + sizeof local };

	cw_string(&w, s, len);
	return cw_flush(&w);
}

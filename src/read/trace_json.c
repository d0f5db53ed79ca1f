/* trace_json — a Chrome trace back into a struct trace (see trace_json.h). */
#include "trace_json.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/grow.h"

#define TJ_STACK_MAX 1024 /* frames followed up a stackFrames chain */

struct tj {
	const char *label;
	struct trace *t;
	struct err *e;
	size_t skipped;
};

static int tj_oom(struct tj *j)
{
	return err_set(j->e, "%s: out of memory", j->label);
}

/* A JSON number as ns from µs; false when not a finite number in range.
 * The product is rounded once, exactly (fma gives what d * 1000 lost), so
 * a three-decimal ts up to 2^43 us (libkineto's three-month base reaches
 * 7.9e12 us; the double is within half a ns) reads back to its
 * nanosecond. */
static bool us_to_ns(const cJSON *v, int64_t *out)
{
	double d, p, r;
	int64_t n;

	if (!cJSON_IsNumber(v))
		return false;
	d = v->valuedouble;
	p = d * 1000.0;
	if (!isfinite(p) || p > 9.2e18 || p < -9.2e18)
		return false;
	r = fma(d, 1000.0, -p); /* d * 1000 == p + r exactly */
	n = (int64_t)llround(p);
	r += p - (double)n;     /* what is left above n, exactly */
	if (r > 0.5)
		n++;
	else if (r < -0.5)
		n--;
	*out = n;
	return true;
}

/* An integer member, or `def`. */
static int64_t int_of(const cJSON *o, const char *key, int64_t def)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) ||
	    fabs(v->valuedouble) > 9.2e18)
		return def;
	return (int64_t)v->valuedouble;
}

static char *str_of(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsString(v) && v->valuestring ? strdup(v->valuestring) : NULL;
}

/* The category of a Kineto name; TRACE_CAT_COUNT when unknown. */
static enum trace_cat cat_of(const char *s, int ph)
{
	unsigned c;

	if (!s)
		return TRACE_CAT_COUNT;
	if (ph == 'i' && strcmp(s, "user_annotation") == 0)
		return TRACE_CAT_MARK;
	for (c = 0; c < TRACE_CAT_COUNT; c++)
		if (c != TRACE_CAT_MARK && strcmp(s, trace_cat_name((enum trace_cat)c)) == 0)
			return (enum trace_cat)c;
	if (strcmp(s, "mark") == 0)
		return TRACE_CAT_MARK;
	return TRACE_CAT_COUNT;
}

/* pid/tid: a number, else 0 (Kineto writes some tracks as strings). */
static int32_t id_of(const cJSON *o, const char *key)
{
	return (int32_t)int_of(o, key, 0);
}

/* Adds the event's args (numbers, strings, booleans; a torch operator's
 * input shapes and types, Kineto's lists, as their JSON text) and turns
 * profhost's flag args into flags. */
static int add_args(struct tj *j, const cJSON *args, uint32_t *flags)
{
	const cJSON *a;

	if (!cJSON_IsObject(args))
		return 0;
	cJSON_ArrayForEach(a, args) {
		const char *k = a->string;
		int rc = 0;

		if (!k)
			continue;
		if (cJSON_IsTrue(a)) {
			if (strcmp(k, "clipped_start") == 0) {
				*flags |= TRACE_F_CLIPPED_START;
				continue;
			}
			if (strcmp(k, "clipped_end") == 0) {
				*flags |= TRACE_F_CLIPPED_END;
				continue;
			}
			if (strcmp(k, "partial") == 0) {
				*flags |= TRACE_F_PARTIAL;
				continue;
			}
		}
		if (cJSON_IsBool(a)) {
			rc = trace_arg_int(j->t, k, cJSON_IsTrue(a) ? 1 : 0);
		} else if (cJSON_IsNumber(a)) {
			double d = a->valuedouble;

			if (isfinite(d) && d == floor(d) && fabs(d) < 9.2e18)
				rc = trace_arg_int(j->t, k, (int64_t)d);
			else
				rc = trace_arg_double(j->t, k, d);
		} else if (cJSON_IsString(a) && a->valuestring) {
			rc = trace_arg_str(j->t, k, a->valuestring, strlen(a->valuestring));
		} else if (cJSON_IsArray(a) && (strcmp(k, TRACE_ARG_INPUT_DIMS) == 0 ||
						strcmp(k, TRACE_ARG_INPUT_TYPE) == 0)) {
			char *json = cJSON_PrintUnformatted(a);

			rc = json ? trace_arg_raw(j->t, k, json) : -1;
			cJSON_free(json);
		}
		if (rc != 0)
			return tj_oom(j);
	}
	return 0;
}

/* "ProfilerStep#N" -> N. */
static bool step_number(const char *name, uint64_t *n)
{
	const char *p;
	char *end;

	if (!name || strncmp(name, "ProfilerStep#", 13) != 0)
		return false;
	p = name + 13;
	if (*p < '0' || *p > '9')
		return false;
	*n = strtoull(p, &end, 10);
	return *end == '\0';
}

/* Whether ev is a CPU event of the legacy form torch's autograd profiler
 * exports (torch.profiler without Kineto, as Debian's torch 1.13): a bare
 * event array, "pid": "CPU functions", no "cat". */
static bool legacy_cpu(const cJSON *ev)
{
	const cJSON *pid = cJSON_GetObjectItemCaseSensitive(ev, "pid");

	return cJSON_IsString(pid) && pid->valuestring &&
	       strcmp(pid->valuestring, "CPU functions") == 0;
}

static int schema_error(struct tj *j, int idx, const char *what)
{
	return err_set(j->e, "%s: traceEvents[%d]: %s", j->label, idx, what);
}

static int read_event(struct tj *j, const cJSON *ev, int idx)
{
	const cJSON *ph = cJSON_GetObjectItemCaseSensitive(ev, "ph");
	const cJSON *name = cJSON_GetObjectItemCaseSensitive(ev, "name");
	const cJSON *cat = cJSON_GetObjectItemCaseSensitive(ev, "cat");
	struct trace_event out = { 0 };
	uint32_t flags;
	const char *nm;
	int p;
	uint64_t stepno = 0;

	if (!cJSON_IsObject(ev))
		return schema_error(j, idx, "not an object");
	if (!cJSON_IsString(ph) || !ph->valuestring || strlen(ph->valuestring) != 1)
		return schema_error(j, idx, "'ph' is missing or not a one-letter string");
	p = ph->valuestring[0];
	nm = cJSON_IsString(name) && name->valuestring ? name->valuestring : "";
	if (p == 'M') {
		const cJSON *args = cJSON_GetObjectItemCaseSensitive(ev, "args");
		const cJSON *an = cJSON_GetObjectItemCaseSensitive(args, "name");

		if (strcmp(nm, "thread_name") == 0 && cJSON_IsString(an) && an->valuestring) {
			if (trace_add_thread(j->t, id_of(ev, "pid"), id_of(ev, "tid"),
					     an->valuestring) != 0)
				return tj_oom(j);
		} else if (strcmp(nm, "process_name") == 0 && cJSON_IsString(an) &&
			   an->valuestring && !j->t->meta.program) {
			j->t->meta.program = strdup(an->valuestring);
		}
		return 0;
	}
	if (p != 'X' && p != 'i' && p != 'I' && p != 's' && p != 'f') {
		j->skipped++;
		return 0;
	}
	if (!us_to_ns(cJSON_GetObjectItemCaseSensitive(ev, "ts"), &out.ts))
		return schema_error(j, idx, "'ts' is missing or not a number");
	if (p == 'X') {
		if (!us_to_ns(cJSON_GetObjectItemCaseSensitive(ev, "dur"), &out.dur))
			return schema_error(j, idx, "'dur' is missing or not a number");
		if (out.dur < 0)
			return schema_error(j, idx, "'dur' is negative");
		out.ph = TRACE_PH_COMPLETE;
	} else if (p == 's' || p == 'f') {
		out.ph = p == 's' ? TRACE_PH_FLOW_START : TRACE_PH_FLOW_END;
		out.id = (uint32_t)int_of(ev, "id", 0); /* trace_event.id: 32 bits */
	} else {
		out.ph = TRACE_PH_INSTANT;
	}
	if (out.ph == TRACE_PH_FLOW_START || out.ph == TRACE_PH_FLOW_END) {
		out.cat = TRACE_CAT_AC2G;
	} else if (out.ph == TRACE_PH_COMPLETE && !cat && legacy_cpu(ev)) {
		/* torch's legacy profiler: operators (and record_function
		 * ranges, which it does not tell apart) with no category */
		out.cat = step_number(nm, &stepno) ? TRACE_CAT_USER_ANNOTATION
						   : TRACE_CAT_CPU_OP;
	} else {
		enum trace_cat c = cat_of(cJSON_IsString(cat) ? cat->valuestring : NULL,
					  out.ph == TRACE_PH_INSTANT ? 'i' : p);

		if (c == TRACE_CAT_COUNT) {
			j->skipped++;
			return 0;
		}
		out.cat = (uint8_t)c;
	}
	if (out.ph == TRACE_PH_COMPLETE && out.cat == TRACE_CAT_USER_ANNOTATION &&
	    step_number(nm, &stepno))
		out.flags |= TRACE_F_STEP;
	out.pid = id_of(ev, "pid");
	out.tid = id_of(ev, "tid");
	out.name = trace_intern(j->t, nm, strlen(nm));
	if (out.name == STRTAB_NONE || !trace_add_event(j->t, &out))
		return tj_oom(j);
	flags = out.flags;
	if (add_args(j, cJSON_GetObjectItemCaseSensitive(ev, "args"), &flags) != 0)
		return -1;
	out.flags = flags & TRACE_F_ALL;
	j->t->ev[j->t->nev - 1].flags = out.flags;
	if (out.flags & TRACE_F_STEP) {
		struct trace_step s = { stepno, out.ts, out.dur, out.tid,
					(out.flags & TRACE_F_PARTIAL) != 0 };

		if (trace_add_step(j->t, &s) != 0)
			return tj_oom(j);
	}
	return 0;
}

/* The header: distributedInfo and profhost's own object. */
static void read_header(struct tj *j, const cJSON *root)
{
	const cJSON *di = cJSON_GetObjectItemCaseSensitive(root, "distributedInfo");
	const cJSON *ph = cJSON_GetObjectItemCaseSensitive(root, "profhost");
	const cJSON *cn = cJSON_GetObjectItemCaseSensitive(ph, "counters");
	struct trace_meta *m = &j->t->meta;
	struct trace_counters *c = &j->t->counters;

	m->rank = (int)int_of(di, "rank", 0);
	m->world_size = (int)int_of(di, "world_size", 1);
	m->base_time_ns = int_of(root, "baseTimeNanoseconds", 0);
	if (!cJSON_IsObject(ph))
		return;
	m->window = (uint32_t)int_of(ph, "window", 0);
	m->first_step = (uint64_t)int_of(ph, "first_step", 0);
	m->last_step = (uint64_t)int_of(ph, "last_step", 0);
	m->pid = (int32_t)int_of(ph, "pid", 0);
	m->monotonic_offset_ns = int_of(ph, "monotonic_offset_ns", 0);
	m->reason = str_of(ph, "reason");
	free(m->program);
	m->program = str_of(ph, "program");
	m->hostname = str_of(ph, "hostname");
	c->dropped_buffer = (uint64_t)int_of(cn, "dropped_buffer", 0);
	c->dropped_memory = (uint64_t)int_of(cn, "dropped_memory", 0);
	if (c->dropped_memory > c->dropped_buffer) /* a part of it, in any file */
		c->dropped_memory = c->dropped_buffer;
	c->dropped_noslot = (uint64_t)int_of(cn, "dropped_noslot", 0);
	c->dropped_steps = (uint64_t)int_of(cn, "dropped_steps", 0);
	c->windows_skipped = (uint64_t)int_of(cn, "windows_skipped", 0);
	c->unbalanced_pops = (uint64_t)int_of(cn, "unbalanced_pops", 0);
	c->clipped = (uint64_t)int_of(cn, "clipped", 0);
	c->gpu_dropped = (uint64_t)int_of(cn, "gpu_dropped", 0);
}

/* TEF samples: {"ts", "tid", "sf", "weight", "name"} with stackFrames
 * {"id": {"name", "parent"}}: each becomes a cpu_sample instant whose
 * "stack" arg lists the frames outermost first. */
static int read_samples(struct tj *j, const cJSON *root)
{
	const cJSON *samples = cJSON_GetObjectItemCaseSensitive(root, "samples");
	const cJSON *frames = cJSON_GetObjectItemCaseSensitive(root, "stackFrames");
	const cJSON *s;
	const char **chain = NULL;
	char *buf = NULL;
	size_t cap = 0;
	int rc = 0;

	if (!cJSON_IsArray(samples))
		return 0;
	chain = malloc(TJ_STACK_MAX * sizeof *chain);
	if (!chain)
		return tj_oom(j);
	cJSON_ArrayForEach(s, samples) {
		struct trace_event ev = { 0 };
		const cJSON *sf = cJSON_GetObjectItemCaseSensitive(s, "sf");
		const cJSON *w = cJSON_GetObjectItemCaseSensitive(s, "weight");
		char key[32];
		size_t depth = 0, need = 1, k, off = 0;

		if (!us_to_ns(cJSON_GetObjectItemCaseSensitive(s, "ts"), &ev.ts))
			continue;
		/* follow the parents up from the leaf */
		while (depth < TJ_STACK_MAX) {
			const cJSON *fr, *nm;

			if (cJSON_IsNumber(sf))
				snprintf(key, sizeof key, "%lld", (long long)sf->valuedouble);
			else if (cJSON_IsString(sf) && sf->valuestring)
				snprintf(key, sizeof key, "%s", sf->valuestring);
			else
				break;
			fr = cJSON_GetObjectItemCaseSensitive(frames, key);
			nm = cJSON_GetObjectItemCaseSensitive(fr, "name");
			if (!cJSON_IsObject(fr))
				break;
			chain[depth++] = cJSON_IsString(nm) && nm->valuestring ? nm->valuestring : "?";
			need += strlen(chain[depth - 1]) + 1;
			sf = cJSON_GetObjectItemCaseSensitive(fr, "parent");
		}
		if (need > cap) {
			char *nb = grow_array(buf, &cap, need, 1, 256);

			if (!nb) {
				rc = tj_oom(j);
				break;
			}
			buf = nb;
		}
		for (k = depth; k-- > 0;) {
			size_t n = strlen(chain[k]);

			memcpy(buf + off, chain[k], n);
			off += n;
			if (k)
				buf[off++] = ';';
		}
		buf[off] = '\0';
		ev.ph = TRACE_PH_INSTANT;
		ev.cat = TRACE_CAT_SAMPLE;
		ev.pid = id_of(s, "pid");
		ev.tid = id_of(s, "tid");
		ev.name = trace_intern(j->t, depth ? chain[0] : "?", strlen(depth ? chain[0] : "?"));
		if (ev.name == STRTAB_NONE || !trace_add_event(j->t, &ev) ||
		    trace_arg_str(j->t, TRACE_ARG_STACK, buf, off) != 0 ||
		    (cJSON_IsNumber(w) && trace_arg_double(j->t, TRACE_ARG_WEIGHT, w->valuedouble) != 0)) {
			rc = tj_oom(j);
			break;
		}
	}
	free(chain);
	free(buf);
	return rc;
}

int trace_json_parse(const char *buf, size_t len, const char *label,
		     struct trace *t, size_t *skipped, struct err *e)
{
	struct tj j = { label, t, e, 0 };
	const char *end = NULL;
	cJSON *root;
	const cJSON *events, *ev;
	int idx = 0, rc = 0;
	size_t i;
	int64_t lo = INT64_MAX, hi = INT64_MIN;

	if (skipped)
		*skipped = 0;
	root = cJSON_ParseWithLengthOpts(buf, len, &end, 0);
	if (!root) {
		size_t off = end && end >= buf && end <= buf + len ? (size_t)(end - buf) : 0;

		if (off >= len)
			return err_set(e, "%s: not valid JSON: it ends early at offset %zu (truncated?)",
				       label, len);
		return err_set(e, "%s: not valid JSON at offset %zu", label, off);
	}
	if (cJSON_IsArray(root)) {
		events = root;
	} else {
		events = cJSON_GetObjectItemCaseSensitive(root, "traceEvents");
		if (!cJSON_IsArray(events)) {
			cJSON_Delete(root);
			return err_set(e, "%s: not a Chrome trace (no traceEvents array)", label);
		}
		read_header(&j, root);
	}
	cJSON_ArrayForEach(ev, events) {
		if (read_event(&j, ev, idx++) != 0) {
			rc = -1;
			break;
		}
	}
	/* profhost's traces carry each sample twice, as a cpu_sample instant
	 * and in "samples": read them once */
	for (i = 0; i < t->nev && t->ev[i].cat != TRACE_CAT_SAMPLE; i++)
		;
	if (rc == 0 && !cJSON_IsArray(root) && i == t->nev)
		rc = read_samples(&j, root);
	cJSON_Delete(root);
	if (rc != 0)
		return -1;
	if (t->nev == 0 && j.skipped > 0)
		return err_set(e, "%s: none of its %zu events is one prof report reads (no "
			       "category it knows: Kineto's cpu_op, kernel, user_annotation, ...)",
			       label, j.skipped);
	for (i = 0; i < t->nev; i++) {
		if (t->ev[i].ts < lo)
			lo = t->ev[i].ts;
		if (t->ev[i].ts + t->ev[i].dur > hi)
			hi = t->ev[i].ts + t->ev[i].dur;
	}
	if (t->nev) {
		t->meta.start_ts = lo;
		t->meta.end_ts = hi;
	}
	if (t->nsteps && !t->meta.first_step && !t->meta.last_step) {
		t->meta.first_step = t->steps[0].step;
		t->meta.last_step = t->steps[t->nsteps - 1].step;
	}
	t->counters.events = t->nev;
	if (skipped)
		*skipped = j.skipped;
	return 0;
}

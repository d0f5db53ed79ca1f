/* op_stacks — the operators' folded call stacks (see op_stacks.h). */
#include "op_stacks.h"

#include <stdint.h>
#include <string.h>

#include "key_averages.h"

int op_stacks_parse_metric(const char *s, enum op_stacks_metric *out, struct err *e)
{
	if (s && strcmp(s, "self_cpu_time_total") == 0) {
		*out = OP_STACKS_SELF_CPU;
		return 0;
	}
	if (s && (strcmp(s, "self_cuda_time_total") == 0 ||
		  strcmp(s, "self_device_time_total") == 0)) {
		*out = OP_STACKS_SELF_CUDA;
		return 0;
	}
	return err_set(e, "unknown stacks metric '%s' (one of self_cpu_time_total, "
		       "self_cuda_time_total)", s ? s : "(null)");
}

/* The event's "Call stack" (its length in *len), or NULL. */
static const char *call_stack(const struct trace *t, const struct trace_event *ev,
			      size_t *len)
{
	size_t i;

	for (i = ev->args; i < (size_t)ev->args + ev->nargs && i < t->nargs; i++) {
		const struct trace_arg *a = &t->args[i];

		if (a->type == TRACE_ARG_STR &&
		    strcmp(trace_str(t, a->key), TRACE_ARG_CALL_STACK) == 0) {
			*len = strtab_len(&t->names, a->v.str);
			return *len ? trace_str(t, a->v.str) : NULL;
		}
	}
	return NULL;
}

bool op_stacks_any(const struct trace *t)
{
	size_t i, len;

	for (i = 0; i < t->nev; i++)
		if (t->ev[i].nargs && call_stack(t, &t->ev[i], &len))
			return true;
	return false;
}

/* What the visitor carries from one event to the next. */
struct fold {
	const struct trace *t;
	enum op_stacks_metric metric;
	struct outfile *out;
	int64_t sum_ns;     /* weights so far, ns */
	int64_t sum_us;     /* ... written, us: sum_ns / 1000 */
	int failed;
};

/* Writes entry s[0..len) with torch's translation (" ;\t\n" to '_'). */
static void put_entry(struct fold *f, const char *s, size_t len)
{
	char buf[256];
	size_t i, n = 0;

	for (i = 0; i < len; i++) {
		char c = s[i];

		buf[n++] = c == ' ' || c == ';' || c == '\t' || c == '\n' ? '_' : c;
		if (n == sizeof buf || i + 1 == len) {
			if (outfile_write(f->out, buf, n) != 0)
				f->failed = 1;
			n = 0;
		}
	}
}

/* key_averages_each's visitor: one line for an event with a call stack
 * and a weight. */
static void fold_event(void *ctx, size_t ev, int64_t self_cpu_ns, int64_t self_cuda_ns)
{
	struct fold *f = ctx;
	const struct trace_event *e = &f->t->ev[ev];
	int64_t w = f->metric == OP_STACKS_SELF_CPU ? self_cpu_ns : self_cuda_ns, us;
	const char *stack, *end, *p;
	size_t len;

	if (f->failed || w <= 0 || !e->nargs || !(stack = call_stack(f->t, e, &len)))
		return;
	f->sum_ns += w;
	us = f->sum_ns / 1000 - f->sum_us; /* the microseconds carried */
	if (us <= 0)
		return;
	f->sum_us += us;
	/* entries innermost first: written from the last */
	end = stack + len;
	while (end > stack) {
		for (p = end; p > stack && p[-1] != ';'; p--)
			;
		put_entry(f, p, (size_t)(end - p));
		if (p > stack && outfile_write(f->out, ";", 1) != 0)
			f->failed = 1;
		end = p > stack ? p - 1 : stack;
	}
	if (outfile_printf(f->out, " %lld\n", (long long)us) != 0)
		f->failed = 1;
}

int op_stacks_write(const struct trace *t, enum op_stacks_metric metric,
		    struct outfile *out, struct err *e)
{
	struct fold f = { t, metric, out, 0, 0, 0 };

	if (key_averages_each(t, fold_event, &f, e) != 0)
		return -1;
	if (f.failed)
		return outfile_error(out, e);
	return 0;
}

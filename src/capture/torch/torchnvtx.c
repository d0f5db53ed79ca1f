/* torchnvtx — torch's NVTX operator ranges as operator events (see
 * torchnvtx.h). */
#include "torchnvtx.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The fields torch appends to an operator's name, in its order. */
static const char *const fields[] = { ", seq = ", ", op_id = ", ", sizes = ",
				      ", input_op_ids = " };
#define NFIELDS (sizeof fields / sizeof fields[0])

/* A parsed range name: the operator and the values of the fields (not
 * NUL-ended; len 0 when absent). */
struct parsed {
	size_t op_len;
	const char *val[NFIELDS];
	size_t val_len[NFIELDS];
	bool any;   /* some field was there */
};

/* Parses `name` (len bytes). Each field's value runs to the next field or
 * the end. */
static void parse(const char *name, size_t len, struct parsed *p)
{
	const char *end = name + len, *at[NFIELDS];
	size_t i, j;

	memset(p, 0, sizeof *p);
	p->op_len = len;
	for (i = 0; i < NFIELDS; i++) {
		const char *s = name, *hit = NULL;
		size_t fl = strlen(fields[i]);

		while (s + fl <= end && (s = memchr(s, ',', (size_t)(end - s)))) {
			if ((size_t)(end - s) >= fl && memcmp(s, fields[i], fl) == 0) {
				hit = s;
				break;
			}
			s++;
		}
		at[i] = hit;
		if (hit && (size_t)(hit - name) < p->op_len)
			p->op_len = (size_t)(hit - name);
	}
	for (i = 0; i < NFIELDS; i++) {
		const char *v, *stop = end;

		if (!at[i])
			continue;
		v = at[i] + strlen(fields[i]);
		for (j = 0; j < NFIELDS; j++)
			if (at[j] && at[j] >= v && at[j] < stop)
				stop = at[j];
		p->val[i] = v;
		p->val_len[i] = (size_t)(stop - v);
		p->any = true;
	}
}

/* "ns::name": an operator of a namespace (aten::mm, c10d::allreduce_). */
static bool is_operator(const char *s, size_t n)
{
	size_t i = 0, ns;

	while (i < n && (isalnum((unsigned char)s[i]) || s[i] == '_'))
		i++;
	ns = i;
	if (ns == 0 || i + 2 >= n || s[i] != ':' || s[i + 1] != ':')
		return false;
	for (i += 2; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '.' &&
		    s[i] != ':')
			return false;
	return true;
}

/* True when v[0..n) is a list of lists of integers, as torch writes sizes. */
static bool is_dims(const char *v, size_t n)
{
	size_t i;

	if (n < 2 || v[0] != '[' || v[n - 1] != ']')
		return false;
	for (i = 0; i < n; i++)
		if (!strchr("[]-, 0123456789", v[i]))
			return false;
	return true;
}

/* True when v[0..n) is a decimal integer (n > 0, at most 19 digits). */
static bool is_number(const char *v, size_t n)
{
	size_t i = v && n && v[0] == '-' ? 1 : 0;

	if (!v || n <= i || n - i > 19)
		return false;
	for (; i < n; i++)
		if (!isdigit((unsigned char)v[i]))
			return false;
	return true;
}

int torchnvtx_convert(struct trace *t, size_t *converted, struct err *e)
{
	size_t i;

	*converted = 0;
	for (i = 0; i < t->nev; i++) {
		struct trace_event *ev = &t->ev[i];
		const char *name;
		struct parsed p;
		uint32_t op;
		bool is_op;

		if (ev->cat != TRACE_CAT_USER_ANNOTATION || ev->ph != TRACE_PH_COMPLETE ||
		    (ev->flags & TRACE_F_STEP) || ev->name >= t->names.n)
			continue;
		name = t->names.str[ev->name];
		parse(name, t->names.len[ev->name], &p);
		is_op = is_operator(name, p.op_len);
		if (!p.any && !is_op)
			continue;
		/* Strings keep their place when the table grows: `name` and the
		 * values in `p` stay valid. */
		op = trace_intern(t, name, p.op_len);
		if (op == STRTAB_NONE)
			goto oom;
		t->ev[i].name = op;
		if (is_op) {
			t->ev[i].cat = TRACE_CAT_CPU_OP;
			(*converted)++;
		}
		if (is_number(p.val[0], p.val_len[0])) {
			if (trace_arg_str_at(t, i, TRACE_ARG_SEQUENCE, p.val[0], p.val_len[0]) != 0)
				goto oom;
			t->args[t->nargs - 1].type = TRACE_ARG_RAW; /* digits: a JSON number */
		}
		if (p.val_len[2]) {
			if (trace_arg_str_at(t, i, TRACE_ARG_INPUT_DIMS, p.val[2], p.val_len[2]) != 0)
				goto oom;
			if (is_dims(p.val[2], p.val_len[2]))
				t->args[t->nargs - 1].type = TRACE_ARG_RAW;
		}
	}
	return 0;
oom:
	return err_set(e, "out of memory naming torch's operator events");
}

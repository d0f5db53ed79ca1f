/*
 * test_torchnvtx — torch's emit_nvtx range names become operator events:
 * "aten::addmm, seq = 12, sizes = [[32, 64], [64, 64], [64]]" is a cpu_op
 * named aten::addmm with "Sequence number" 12 and "Input Dims" as a JSON
 * list; record_function labels keep their category; other ranges, steps
 * and marks are left alone; existing arguments are kept.
 */
#include "check.h"

#include <string.h>

#include "capture/torch/torchnvtx.h"
#include "events/trace.h"

static size_t add(struct trace *t, const char *name, int cat, int ph, uint32_t flags)
{
	struct trace_event e = { 0 };

	e.ts = (int64_t)t->nev * 1000;
	e.dur = ph == TRACE_PH_COMPLETE ? 500 : 0;
	e.pid = e.tid = 1;
	e.name = trace_intern(t, name, strlen(name));
	e.cat = (uint8_t)cat;
	e.ph = (uint8_t)ph;
	e.flags = flags;
	trace_add_event(t, &e);
	return t->nev - 1;
}

/* The value of argument `key` of event i, with its type; NULL when absent. */
static const char *arg(const struct trace *t, size_t i, const char *key, uint32_t *type)
{
	const struct trace_event *e = &t->ev[i];
	uint16_t k;

	for (k = 0; k < e->nargs; k++) {
		const struct trace_arg *a = &t->args[e->args + k];

		if (strcmp(trace_str(t, a->key), key) == 0) {
			*type = a->type;
			return a->type == TRACE_ARG_STR || a->type == TRACE_ARG_RAW
				       ? trace_str(t, a->v.str) : "?";
		}
	}
	return NULL;
}

int main(void)
{
	struct trace t;
	struct err e;
	size_t n, mm, plain, seq, label, user, step, mark, odd, last;
	uint32_t type = 99;

	CHECK_EQ_INT(trace_init(&t), 0);
	mm = add(&t, "aten::addmm, seq = 12, sizes = [[32, 64], [64, 64], [64]]",
		 TRACE_CAT_USER_ANNOTATION, TRACE_PH_COMPLETE, 0);
	trace_arg_str(&t, "domain", "torch", 5); /* an argument it already had */
	plain = add(&t, "aten::empty", TRACE_CAT_USER_ANNOTATION, TRACE_PH_COMPLETE, 0);
	seq = add(&t, "aten::relu, seq = 7, op_id = 3", TRACE_CAT_USER_ANNOTATION,
		  TRACE_PH_COMPLETE, 0);
	label = add(&t, "## forward ##, seq = 5", TRACE_CAT_USER_ANNOTATION,
		    TRACE_PH_COMPLETE, 0);
	user = add(&t, "forward", TRACE_CAT_USER_ANNOTATION, TRACE_PH_COMPLETE, 0);
	step = add(&t, "ProfilerStep#3", TRACE_CAT_USER_ANNOTATION, TRACE_PH_COMPLETE,
		   TRACE_F_STEP);
	mark = add(&t, "aten::mark", TRACE_CAT_MARK, TRACE_PH_INSTANT, 0);
	odd = add(&t, "c10d::allreduce_, sizes = [[4], 'x']", TRACE_CAT_USER_ANNOTATION,
		  TRACE_PH_COMPLETE, 0);
	last = add(&t, "aten::mm, seq = 99", TRACE_CAT_USER_ANNOTATION, TRACE_PH_COMPLETE, 0);

	CHECK_EQ_INT(torchnvtx_convert(&t, &n, &e), 0);
	CHECK_EQ_INT(n, 5); /* addmm, empty, relu, allreduce_, mm */

	CHECK_EQ_STR(trace_str(&t, t.ev[mm].name), "aten::addmm");
	CHECK_EQ_INT(t.ev[mm].cat, TRACE_CAT_CPU_OP);
	CHECK_EQ_STR(arg(&t, mm, "Sequence number", &type), "12");
	CHECK_EQ_INT(type, TRACE_ARG_RAW);
	CHECK_EQ_STR(arg(&t, mm, "Input Dims", &type), "[[32, 64], [64, 64], [64]]");
	CHECK_EQ_INT(type, TRACE_ARG_RAW);
	CHECK_EQ_STR(arg(&t, mm, "domain", &type), "torch");

	CHECK_EQ_STR(trace_str(&t, t.ev[plain].name), "aten::empty");
	CHECK_EQ_INT(t.ev[plain].cat, TRACE_CAT_CPU_OP);
	CHECK(arg(&t, plain, "Sequence number", &type) == NULL);

	CHECK_EQ_STR(trace_str(&t, t.ev[seq].name), "aten::relu");
	CHECK_EQ_STR(arg(&t, seq, "Sequence number", &type), "7");
	CHECK(arg(&t, seq, "Input Dims", &type) == NULL);

	CHECK_EQ_STR(trace_str(&t, t.ev[label].name), "## forward ##");
	CHECK_EQ_INT(t.ev[label].cat, TRACE_CAT_USER_ANNOTATION);

	CHECK_EQ_STR(trace_str(&t, t.ev[user].name), "forward");
	CHECK_EQ_INT(t.ev[user].cat, TRACE_CAT_USER_ANNOTATION);
	CHECK_EQ_INT(t.ev[user].nargs, 0);
	CHECK_EQ_STR(trace_str(&t, t.ev[step].name), "ProfilerStep#3");
	CHECK_EQ_INT(t.ev[mark].cat, TRACE_CAT_MARK);
	CHECK_EQ_STR(trace_str(&t, t.ev[mark].name), "aten::mark");

	/* Sizes that are not a list of integer lists stay a string. */
	CHECK_EQ_STR(trace_str(&t, t.ev[odd].name), "c10d::allreduce_");
	CHECK_EQ_STR(arg(&t, odd, "Input Dims", &type), "[[4], 'x']");
	CHECK_EQ_INT(type, TRACE_ARG_STR);
	CHECK_EQ_STR(arg(&t, last, "Sequence number", &type), "99");

	trace_free(&t);
	return check_done();
}

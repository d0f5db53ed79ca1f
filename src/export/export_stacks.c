/* export_stacks — the window's stacks: stacks.txt and cpu_functions.txt
 * from its CPU samples (stacks.h), operator_stacks.txt from its
 * operators' call stacks (op_stacks.h; export_internal.h). */
#include "export_internal.h"

#include "op_stacks.h"
#include "stacks.h"

/* Reads stacks_metric into *metric (torch's default when NULL): 0, or -1
 * with *e naming the bad value. */
static int parse(const struct export_opts *o, enum op_stacks_metric *metric,
		 struct err *e)
{
	*metric = OP_STACKS_SELF_CPU;
	if (o->stacks_metric && op_stacks_parse_metric(o->stacks_metric, metric, e) != 0)
		return -1;
	return 0;
}

/* Checks stacks_metric. */
static int check(const struct export_opts *o, struct err *e)
{
	enum op_stacks_metric metric;

	return parse(o, &metric, e);
}

/* Writes stacks.txt and cpu_functions.txt. */
static int write_samples(const struct export_ctx *c, struct err *e)
{
	static const struct {
		const char *name;
		int (*write)(const struct trace *, struct outfile *, struct err *);
	} files[] = {
		{ "stacks.txt", stacks_write_folded },
		{ "cpu_functions.txt", stacks_write_functions },
	};
	size_t i;

	for (i = 0; i < sizeof files / sizeof files[0]; i++)
		if (export_write_listed(c, files[i].name, false, files[i].write, e) != 0)
			return -1;
	return 0;
}

/* Writes operator_stacks.txt. */
static int write_op_stacks(const struct export_ctx *c, enum op_stacks_metric metric,
			   struct err *e)
{
	static const char name[] = "operator_stacks.txt";
	struct outfile *f = outfile_openat(&c->res->out, name, false, e);

	if (!f)
		return -1;
	if (op_stacks_write(c->t, metric, f, e) != 0) {
		outfile_abort(f);
		return -1;
	}
	if (outfile_commit(f, e) != 0)
		return -1;
	export_note_file(c->res, &c->res->out, name);
	return 0;
}

/* Writes the sample files when the window was sampled (t->sampling.hz),
 * then operator_stacks.txt when its operators have call stacks. */
static int write_stacks(const struct export_ctx *c, struct err *e)
{
	enum op_stacks_metric metric;

	if (parse(c->o, &metric, e) != 0)
		return -1;
	if (c->t->sampling.hz && write_samples(c, e) != 0)
		return -1;
	if (op_stacks_any(c->t) && write_op_stacks(c, metric, e) != 0)
		return -1;
	return 0;
}

const struct export_output export_out_stacks = {
	"stacks", offsetof(struct export_opts, stacks), check, write_stacks
};

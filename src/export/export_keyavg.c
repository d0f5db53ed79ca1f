/* export_keyavg — key_averages.txt, torch's operator table
 * (key_averages.h; export_internal.h). */
#include "export_internal.h"

#include <stdlib.h>

#include "key_averages.h"

/* Reads sort_by and group_by into *sort and *group (torch's defaults when
 * NULL): 0, or -1 with *e naming the bad value. */
static int parse(const struct export_opts *o, enum key_avg_sort *sort,
		 enum key_avg_group *group, struct err *e)
{
	*sort = KEY_AVG_SORT_SELF_CPU_TIME_TOTAL;
	*group = KEY_AVG_BY_NAME;
	if (o->sort_by && key_averages_parse_sort(o->sort_by, sort, e) != 0)
		return -1;
	if (o->group_by && key_averages_parse_group(o->group_by, group, e) != 0)
		return -1;
	return 0;
}

/* Checks sort_by and group_by. */
static int check(const struct export_opts *o, struct err *e)
{
	enum key_avg_sort sort;
	enum key_avg_group group;

	return parse(o, &sort, &group, e);
}

/* Writes key_averages.txt into the window's directory. */
static int write_key_averages(const struct export_ctx *c, struct err *e)
{
	const struct export_opts *o = c->o;
	enum key_avg_sort sort;
	enum key_avg_group group;
	struct key_avg_opts ko;
	struct key_avg_table tab;
	char *text;
	int rc;

	if (parse(o, &sort, &group, e) != 0)
		return -1;
	ko = (struct key_avg_opts){ group, o->group_by_input_shape, o->group_by_stack_n };
	if (key_averages_build_with(c->t, &ko, sort, o->row_limit, &tab, e) != 0)
		return -1;
	text = key_averages_format(&tab, o->row_limit);
	key_averages_free(&tab);
	if (!text)
		return err_set(e, "out of memory formatting '%s/key_averages.txt'",
			       c->res->dir);
	rc = outfile_write_textat(&c->res->out, "key_averages.txt", text, e);
	free(text);
	if (rc == 0)
		export_note_file(c->res, &c->res->out, "key_averages.txt");
	return rc;
}

const struct export_output export_out_keyavg = {
	"key_averages", offsetof(struct export_opts, key_averages), check,
	write_key_averages
};

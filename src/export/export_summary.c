/* export_summary — summary.txt, written last: it lists every file of the
 * window and itself (summary.h; export_internal.h). */
#include "export_internal.h"

#include <stdio.h>
#include <stdlib.h>

#include "summary.h"

int export_write_summary(const struct trace *t, struct export_result *res,
			 struct err *e)
{
	const char *files[EXPORT_MAX_FILES + 1];
	char path[4352];
	size_t i;
	char *text;

	snprintf(path, sizeof path, "%s/summary.txt", res->dir);
	for (i = 0; i < res->nfiles; i++)
		files[i] = res->files[i];
	files[i++] = path;
	text = summary_render(t, res->dir, files, i, e);
	if (!text)
		return -1;
	if (outfile_write_textat(&res->out, "summary.txt", text, e) != 0) {
		free(text);
		return -1;
	}
	export_note_file(res, &res->out, "summary.txt");
	res->summary = text;
	return 0;
}

/* export_write_summary() as an output. */
static int write_summary(const struct export_ctx *c, struct err *e)
{
	return export_write_summary(c->t, c->res, e);
}

const struct export_output export_out_summary = {
	"summary", offsetof(struct export_opts, summary), NULL, write_summary
};

/* export_memtl — memory_timeline.json and .html (memory_timeline.h;
 * export_internal.h). */
#include "export_internal.h"

#include "memory_timeline.h"

/* Writes memory_timeline.json and .html when the window has GPU
 * allocations or frees. */
static int write_memory_timeline(const struct export_ctx *c, struct err *e)
{
	struct export_result *res = c->res;
	struct memory_timeline m;
	int rc = 0;

	if (memory_timeline_build(c->t, &m, e) != 0)
		return -1;
	if (m.ndev) {
		rc = memory_timeline_write_json(&m, c->t, &res->out, "memory_timeline.json", e);
		if (rc == 0) {
			export_note_file(res, &res->out, "memory_timeline.json");
			rc = memory_timeline_write_html(&m, c->t, &res->out,
							"memory_timeline.html", e);
			if (rc == 0)
				export_note_file(res, &res->out, "memory_timeline.html");
		}
	}
	memory_timeline_free(&m);
	return rc;
}

const struct export_output export_out_memtl = {
	"memory_timeline", offsetof(struct export_opts, memory_timeline), NULL,
	write_memory_timeline
};

/* export_files — what the outputs of a window share (export_internal.h). */
#include "export_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void export_note_file(struct export_result *res, const struct outdir *d,
		      const char *name)
{
	size_t n = strlen(d->path) + strlen(name) + 2;

	if (res->nfiles < EXPORT_MAX_FILES) {
		res->files[res->nfiles] = malloc(n);
		if (res->files[res->nfiles]) {
			snprintf(res->files[res->nfiles], n, "%s/%s", d->path, name);
			res->nfiles++;
		}
	}
}

int export_write_with(const struct trace *t, const struct outdir *d, const char *name,
		      bool gzip,
		      int (*write)(const struct trace *, struct outfile *, struct err *),
		      struct err *e)
{
	struct outfile *f = outfile_openat(d, name, gzip, e);

	if (!f)
		return -1;
	if (write(t, f, e) != 0) {
		outfile_abort(f);
		return -1;
	}
	return outfile_commit(f, e);
}

int export_write_listed(const struct export_ctx *c, const char *name, bool gzip,
			int (*write)(const struct trace *, struct outfile *, struct err *),
			struct err *e)
{
	if (export_write_with(c->t, &c->res->out, name, gzip, write, e) != 0)
		return -1;
	export_note_file(c->res, &c->res->out, name);
	return 0;
}

void export_window_name(const struct trace *t, char *out, size_t size)
{
	snprintf(out, size, "%s%u_steps%llu-%llu%s%s",
		 t->meta.recorder ? "recorder" : "window", t->meta.window,
		 (unsigned long long)t->meta.first_step,
		 (unsigned long long)t->meta.last_step,
		 t->meta.suffix && t->meta.suffix[0] ? "_" : "",
		 t->meta.suffix && t->meta.suffix[0] ? t->meta.suffix : "");
}

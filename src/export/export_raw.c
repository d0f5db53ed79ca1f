/* export_raw — capture.phb, the raw capture (phb.h; export_internal.h). */
#include "export_internal.h"

#include "phb.h"

/* Writes capture.phb into the window's directory. */
static int write_raw(const struct export_ctx *c, struct err *e)
{
	return export_write_listed(c, PHB_FILE, false, phb_write_to, e);
}

const struct export_output export_out_raw = {
	"raw", offsetof(struct export_opts, raw), NULL, write_raw
};

/*
 * cupti_salvage_none — cupti_salvage.h for a prof built without the CUDA
 * headers: the flight recorder's raw CUPTI records cannot be read, so
 * they are counted and said not converted.
 */
#include <stdio.h>

#include "../common/evformat.h"
#include "cupti_salvage.h"

int cupti_salvage_convert(const struct salv_header *hd, int64_t start, int64_t end,
			  struct trace *t)
{
	const struct trace_raw *r;
	unsigned long long n = 0;
	size_t off = 0;
	char line[300];

	(void)hd;
	(void)start;
	(void)end;
	while ((r = trace_raw_next(t, &off)) != NULL)
		n += r->kind == EVBUF_CUPTI;
	if (!n)
		return 0;
	snprintf(line, sizeof line, "GPU: %llu CUDA records not converted: this prof was "
		 "built without the CUDA headers (salvage the file with a prof built "
		 "with them)", n);
	return trace_add_note(t, line);
}

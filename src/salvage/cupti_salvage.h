/*
 * cupti_salvage — the GPU half of a salvage (salvage_read.c): the flight
 * recorder's raw CUPTI records (EVBUF_CUPTI) a dead process left in its
 * ring become trace events through the converter a live dump uses
 * (src/capture/cupti/cupti_records.c), named from the salvage file's GPU
 * names (src/common/salvfile.h).
 *
 * The salvage declares it and calls it; the CUPTI source implements it,
 * in src/capture/cupti/cupti_salvage.c (ph_cupti, built with the CUDA
 * headers only: it reads CUPTI's record layouts and calls the converter
 * that cupti_internal.h keeps to CUPTI's files), so nothing of src/salvage
 * includes a capture source's header. Without the CUDA headers `prof`
 * gets cupti_salvage_none.c here, which counts the records and says they
 * were not converted.
 */
#ifndef PROFHOST_CUPTI_SALVAGE_H
#define PROFHOST_CUPTI_SALVAGE_H

#include <stdint.h>

#include "../events/trace.h"
#include "../common/salvfile.h"

/*
 * Converts the EVBUF_CUPTI records `t` holds (trace.raw, before it is
 * freed) into kernels, copies, memsets, CUDA API calls, launch arrows and
 * GPU spans of ranges, each record once, clipped to [start, end] as a
 * window's are. Kernels whose name the file lacks are named
 * "(kernel name lost)"; that, names that did not fit the file and a
 * prof without CUDA support are said in notes. Returns 0, or -1 when
 * memory ran out (t->oom set). Not thread-safe.
 */
int cupti_salvage_convert(const struct salv_header *hd, int64_t start, int64_t end,
			  struct trace *t);

#endif

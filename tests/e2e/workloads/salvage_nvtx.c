/*
 * salvage_nvtx — NVTX ranges in a named domain and named categories, in a
 * loop that dies of SIGKILL, for the salvage tests
 * (tests/e2e/test_salvage.py): a salvaged trace names the domain and the
 * categories as a written window does.
 *
 *   salvage_nvtx DIE_AT
 *
 * Creates domain "salvage_dom" and names its category 3 "early_cat"
 * before the first step; names category 4 "late_cat" at step 5 (after
 * profhost made its salvage file). Each step pushes "early_range"
 * (category 3) before step 5 and "late_range" (category 4) from it on,
 * sleeps 1 ms, pops and calls prof_step(); in step DIE_AT, inside the
 * range, it sends itself SIGKILL. Prints "pid P" first.
 */
#include <nvtx3/nvToolsExt.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "prof_dl.h"

int main(int argc, char **argv)
{
	long die_at = argc > 1 ? atol(argv[1]) : 10, s;
	struct timespec ms = { 0, 1000000 };
	nvtxDomainHandle_t d;

	bind();
	printf("pid %d\n", (int)getpid());
	fflush(stdout);
	d = nvtxDomainCreateA("salvage_dom");
	nvtxDomainNameCategoryA(d, 3, "early_cat");
	for (s = 0; s < 1000; s++) {
		nvtxEventAttributes_t a;

		if (s == 5)
			nvtxDomainNameCategoryA(d, 4, "late_cat");
		memset(&a, 0, sizeof a);
		a.version = NVTX_VERSION;
		a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
		a.category = s < 5 ? 3 : 4;
		a.messageType = NVTX_MESSAGE_TYPE_ASCII;
		a.message.ascii = s < 5 ? "early_range" : "late_range";
		nvtxDomainRangePushEx(d, &a);
		nanosleep(&ms, NULL);
		if (s == die_at)
			kill(getpid(), SIGKILL);
		nvtxDomainRangePop(d);
		p_step();
	}
	return 0;
}

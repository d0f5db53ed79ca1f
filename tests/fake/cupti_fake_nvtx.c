/*
 * cupti_fake_nvtx — the fake's NVTX injection: it plays the part of Nsight
 * Systems' injection library, so a test can see the NVTX ranges profhost
 * emits under nsys. Point NVTX_INJECTION64_PATH at libcupti-fake.so; the
 * ranges started with nvtxRangeStartA/Ex and ended with nvtxRangeEnd are
 * counted and their names written to CUPTI_FAKE_STATS ("nvtx_ranges" line).
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <nvtx3/nvToolsExt.h>

#define FAKE_EXPORT __attribute__((visibility("default")))
#define MAX_NAMES 64

static pthread_mutex_t nv_lock = PTHREAD_MUTEX_INITIALIZER;
static char nv_names[MAX_NAMES][48];
static unsigned nv_starts, nv_ends;

static nvtxRangeId_t note(const char *name)
{
	nvtxRangeId_t id;

	pthread_mutex_lock(&nv_lock);
	if (nv_starts < MAX_NAMES)
		snprintf(nv_names[nv_starts], sizeof nv_names[0], "%s", name ? name : "");
	id = ++nv_starts;
	pthread_mutex_unlock(&nv_lock);
	return id;
}

static nvtxRangeId_t NVTX_API fake_range_start_a(const char *message)
{
	return note(message);
}

static nvtxRangeId_t NVTX_API fake_range_start_ex(const nvtxEventAttributes_t *a)
{
	return note(a && a->messageType == NVTX_MESSAGE_TYPE_ASCII ? a->message.ascii : "");
}

static void NVTX_API fake_range_end(nvtxRangeId_t id)
{
	(void)id;
	pthread_mutex_lock(&nv_lock);
	nv_ends++;
	pthread_mutex_unlock(&nv_lock);
}

FAKE_EXPORT int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get)
{
	const NvtxExportTableCallbacks *cb =
		(const NvtxExportTableCallbacks *)get(NVTX_ETID_CALLBACKS);
	NvtxFunctionTable table = NULL;
	unsigned int size = 0;

	if (!cb || !cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &table, &size) || !table)
		return 0;
	if (size > NVTX_CBID_CORE_RangeStartEx)
		*table[NVTX_CBID_CORE_RangeStartEx] = (NvtxFunctionPointer)fake_range_start_ex;
	if (size > NVTX_CBID_CORE_RangeStartA)
		*table[NVTX_CBID_CORE_RangeStartA] = (NvtxFunctionPointer)fake_range_start_a;
	if (size > NVTX_CBID_CORE_RangeEnd)
		*table[NVTX_CBID_CORE_RangeEnd] = (NvtxFunctionPointer)fake_range_end;
	return 1;
}

/* Appends the NVTX lines to the stats file (cupti_fake.c). */
void fake_nvtx_write(FILE *f);
void fake_nvtx_write(FILE *f)
{
	unsigned i;

	pthread_mutex_lock(&nv_lock);
	fprintf(f, "nvtx_starts %u\nnvtx_ends %u\nnvtx_ranges ", nv_starts, nv_ends);
	for (i = 0; i < nv_starts && i < MAX_NAMES; i++)
		fprintf(f, "%s%s", i ? "," : "", nv_names[i]);
	fprintf(f, "\n");
	pthread_mutex_unlock(&nv_lock);
}

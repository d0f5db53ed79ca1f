/*
 * nvtx_abi — the parts of the NVTX3 injection ABI that profhost uses.
 *
 * NVTX3 is header-only: every library that embeds it keeps its own table of
 * function pointers, and a tool attaches by exporting
 * InitializeInjectionNvtx2(getExportTable). The tool asks the export table
 * for the CALLBACKS table, asks that for the CORE and CORE2 module tables
 * (arrays of pointers to the library's function-pointer slots) and writes
 * its own functions into the slots it implements; NVTX turns the slots it
 * left alone into no-ops. The layouts and numbers below are that contract
 * (NVTX API version 3, nvToolsExt.h and nvtxDetail/nvtxTypes.h). They are
 * spelled out here so the shim builds without the CUDA toolkit;
 * nvtx_abi_check.c compares them with the real headers whenever those are
 * found.
 */
#ifndef PROFHOST_NVTX_ABI_H
#define PROFHOST_NVTX_ABI_H

#include <stddef.h>
#include <stdint.h>
#include <wchar.h>

#define NVTX_ABI_VERSION 3

/* Export tables (NvtxExportTableID). */
enum {
	NVTX_ABI_ETID_CALLBACKS = 1,
	NVTX_ABI_ETID_VERSIONINFO = 3
};

/* Callback modules (NvtxCallbackModule). */
enum {
	NVTX_ABI_MODULE_CORE = 1,
	NVTX_ABI_MODULE_CORE2 = 5
};

/* Slots of the CORE module (NvtxCallbackIdCore). */
enum {
	NVTX_ABI_CORE_MarkEx = 1,
	NVTX_ABI_CORE_MarkA = 2,
	NVTX_ABI_CORE_MarkW = 3,
	NVTX_ABI_CORE_RangeStartEx = 4,
	NVTX_ABI_CORE_RangeStartA = 5,
	NVTX_ABI_CORE_RangeStartW = 6,
	NVTX_ABI_CORE_RangeEnd = 7,
	NVTX_ABI_CORE_RangePushEx = 8,
	NVTX_ABI_CORE_RangePushA = 9,
	NVTX_ABI_CORE_RangePushW = 10,
	NVTX_ABI_CORE_RangePop = 11,
	NVTX_ABI_CORE_NameCategoryA = 12,
	NVTX_ABI_CORE_NameCategoryW = 13,
	NVTX_ABI_CORE_NameOsThreadA = 14,
	NVTX_ABI_CORE_NameOsThreadW = 15
};

/* Slots of the CORE2 module (NvtxCallbackIdCore2). */
enum {
	NVTX_ABI_CORE2_DomainMarkEx = 1,
	NVTX_ABI_CORE2_DomainRangeStartEx = 2,
	NVTX_ABI_CORE2_DomainRangeEnd = 3,
	NVTX_ABI_CORE2_DomainRangePushEx = 4,
	NVTX_ABI_CORE2_DomainRangePop = 5,
	NVTX_ABI_CORE2_DomainNameCategoryA = 8,
	NVTX_ABI_CORE2_DomainNameCategoryW = 9,
	NVTX_ABI_CORE2_DomainRegisterStringA = 10,
	NVTX_ABI_CORE2_DomainRegisterStringW = 11,
	NVTX_ABI_CORE2_DomainCreateA = 12,
	NVTX_ABI_CORE2_DomainCreateW = 13,
	NVTX_ABI_CORE2_DomainDestroy = 14
};

/* Message types (nvtxMessageType_t). */
enum {
	NVTX_ABI_MESSAGE_UNKNOWN = 0,
	NVTX_ABI_MESSAGE_ASCII = 1,
	NVTX_ABI_MESSAGE_UNICODE = 2,
	NVTX_ABI_MESSAGE_REGISTERED = 3
};

/* A function-pointer slot is written through this type (NvtxFunctionPointer). */
typedef void (*nvtx_abi_fn)(void);

typedef const void *(*nvtx_abi_get_export_table)(uint32_t id);

/* NvtxExportTableCallbacks. `table` receives an array of pointers to slots;
 * `size` the number of entries before its terminating NULL. */
struct nvtx_abi_callbacks {
	size_t struct_size;
	int (*get_module_function_table)(int module, nvtx_abi_fn ***table,
					 unsigned int *size);
};

/* NvtxExportTableVersionInfo. */
struct nvtx_abi_version_info {
	size_t struct_size;
	uint32_t version;
	uint32_t reserved0;
	void (*set_injection_nvtx_version)(uint32_t version);
};

/* nvtxEventAttributes_v2. Handles are opaque pointers the tool hands out. */
struct nvtx_abi_attributes {
	uint16_t version;
	uint16_t size;
	uint32_t category;
	int32_t color_type;
	uint32_t color;
	int32_t payload_type;
	int32_t reserved0;
	union {
		uint64_t u64;
		int64_t i64;
		double d;
		uint32_t u32;
		int32_t i32;
		float f;
	} payload;
	int32_t message_type;
	union {
		const char *ascii;
		const wchar_t *unicode;
		const void *registered;
	} message;
};

#endif

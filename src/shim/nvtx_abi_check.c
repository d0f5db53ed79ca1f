/*
 * nvtx_abi_check — compile-time proof that nvtx_abi.h matches the NVTX3
 * headers of the CUDA toolkit this build found. Built only when the
 * headers are there; it generates no code.
 */
#define NVTX_NO_IMPL
#include <nvtx3/nvToolsExt.h>

#include "nvtx_abi.h"

#define SAME_FIELD(a, fa, b, fb)                                              \
	_Static_assert(offsetof(a, fa) == offsetof(b, fb) &&                   \
			       sizeof(((a *)0)->fa) == sizeof(((b *)0)->fb),   \
		       #a "." #fa " differs from the NVTX headers")

_Static_assert((int)NVTX_VERSION == (int)NVTX_ABI_VERSION, "NVTX API version");
_Static_assert((int)NVTX_ETID_CALLBACKS == (int)NVTX_ABI_ETID_CALLBACKS, "ETID_CALLBACKS");
_Static_assert((int)NVTX_ETID_VERSIONINFO == (int)NVTX_ABI_ETID_VERSIONINFO, "ETID_VERSIONINFO");
_Static_assert((int)NVTX_CB_MODULE_CORE == (int)NVTX_ABI_MODULE_CORE, "MODULE_CORE");
_Static_assert((int)NVTX_CB_MODULE_CORE2 == (int)NVTX_ABI_MODULE_CORE2, "MODULE_CORE2");

_Static_assert((int)NVTX_CBID_CORE_MarkEx == (int)NVTX_ABI_CORE_MarkEx, "MarkEx");
_Static_assert((int)NVTX_CBID_CORE_MarkA == (int)NVTX_ABI_CORE_MarkA, "MarkA");
_Static_assert((int)NVTX_CBID_CORE_MarkW == (int)NVTX_ABI_CORE_MarkW, "MarkW");
_Static_assert((int)NVTX_CBID_CORE_RangeStartEx == (int)NVTX_ABI_CORE_RangeStartEx, "RangeStartEx");
_Static_assert((int)NVTX_CBID_CORE_RangeStartA == (int)NVTX_ABI_CORE_RangeStartA, "RangeStartA");
_Static_assert((int)NVTX_CBID_CORE_RangeStartW == (int)NVTX_ABI_CORE_RangeStartW, "RangeStartW");
_Static_assert((int)NVTX_CBID_CORE_RangeEnd == (int)NVTX_ABI_CORE_RangeEnd, "RangeEnd");
_Static_assert((int)NVTX_CBID_CORE_RangePushEx == (int)NVTX_ABI_CORE_RangePushEx, "RangePushEx");
_Static_assert((int)NVTX_CBID_CORE_RangePushA == (int)NVTX_ABI_CORE_RangePushA, "RangePushA");
_Static_assert((int)NVTX_CBID_CORE_RangePushW == (int)NVTX_ABI_CORE_RangePushW, "RangePushW");
_Static_assert((int)NVTX_CBID_CORE_RangePop == (int)NVTX_ABI_CORE_RangePop, "RangePop");
_Static_assert((int)NVTX_CBID_CORE_NameCategoryA == (int)NVTX_ABI_CORE_NameCategoryA, "NameCategoryA");
_Static_assert((int)NVTX_CBID_CORE_NameCategoryW == (int)NVTX_ABI_CORE_NameCategoryW, "NameCategoryW");
_Static_assert((int)NVTX_CBID_CORE_NameOsThreadA == (int)NVTX_ABI_CORE_NameOsThreadA, "NameOsThreadA");
_Static_assert((int)NVTX_CBID_CORE_NameOsThreadW == (int)NVTX_ABI_CORE_NameOsThreadW, "NameOsThreadW");

_Static_assert((int)NVTX_CBID_CORE2_DomainMarkEx == (int)NVTX_ABI_CORE2_DomainMarkEx, "DomainMarkEx");
_Static_assert((int)NVTX_CBID_CORE2_DomainRangeStartEx == (int)NVTX_ABI_CORE2_DomainRangeStartEx,
	       "DomainRangeStartEx");
_Static_assert((int)NVTX_CBID_CORE2_DomainRangeEnd == (int)NVTX_ABI_CORE2_DomainRangeEnd, "DomainRangeEnd");
_Static_assert((int)NVTX_CBID_CORE2_DomainRangePushEx == (int)NVTX_ABI_CORE2_DomainRangePushEx,
	       "DomainRangePushEx");
_Static_assert((int)NVTX_CBID_CORE2_DomainRangePop == (int)NVTX_ABI_CORE2_DomainRangePop, "DomainRangePop");
_Static_assert((int)NVTX_CBID_CORE2_DomainNameCategoryA == (int)NVTX_ABI_CORE2_DomainNameCategoryA,
	       "DomainNameCategoryA");
_Static_assert((int)NVTX_CBID_CORE2_DomainNameCategoryW == (int)NVTX_ABI_CORE2_DomainNameCategoryW,
	       "DomainNameCategoryW");
_Static_assert((int)NVTX_CBID_CORE2_DomainRegisterStringA == (int)NVTX_ABI_CORE2_DomainRegisterStringA,
	       "DomainRegisterStringA");
_Static_assert((int)NVTX_CBID_CORE2_DomainRegisterStringW == (int)NVTX_ABI_CORE2_DomainRegisterStringW,
	       "DomainRegisterStringW");
_Static_assert((int)NVTX_CBID_CORE2_DomainCreateA == (int)NVTX_ABI_CORE2_DomainCreateA, "DomainCreateA");
_Static_assert((int)NVTX_CBID_CORE2_DomainCreateW == (int)NVTX_ABI_CORE2_DomainCreateW, "DomainCreateW");
_Static_assert((int)NVTX_CBID_CORE2_DomainDestroy == (int)NVTX_ABI_CORE2_DomainDestroy, "DomainDestroy");

_Static_assert((int)NVTX_MESSAGE_TYPE_ASCII == (int)NVTX_ABI_MESSAGE_ASCII, "MESSAGE_TYPE_ASCII");
_Static_assert((int)NVTX_MESSAGE_TYPE_UNICODE == (int)NVTX_ABI_MESSAGE_UNICODE, "MESSAGE_TYPE_UNICODE");
_Static_assert((int)NVTX_MESSAGE_TYPE_REGISTERED == (int)NVTX_ABI_MESSAGE_REGISTERED,
	       "MESSAGE_TYPE_REGISTERED");

_Static_assert(sizeof(nvtxEventAttributes_t) == sizeof(struct nvtx_abi_attributes),
	       "nvtxEventAttributes_t size");
SAME_FIELD(nvtxEventAttributes_t, version, struct nvtx_abi_attributes, version);
SAME_FIELD(nvtxEventAttributes_t, size, struct nvtx_abi_attributes, size);
SAME_FIELD(nvtxEventAttributes_t, category, struct nvtx_abi_attributes, category);
SAME_FIELD(nvtxEventAttributes_t, colorType, struct nvtx_abi_attributes, color_type);
SAME_FIELD(nvtxEventAttributes_t, color, struct nvtx_abi_attributes, color);
SAME_FIELD(nvtxEventAttributes_t, payloadType, struct nvtx_abi_attributes, payload_type);
SAME_FIELD(nvtxEventAttributes_t, payload, struct nvtx_abi_attributes, payload);
SAME_FIELD(nvtxEventAttributes_t, messageType, struct nvtx_abi_attributes, message_type);
SAME_FIELD(nvtxEventAttributes_t, message, struct nvtx_abi_attributes, message);

_Static_assert(sizeof(NvtxExportTableCallbacks) == sizeof(struct nvtx_abi_callbacks),
	       "NvtxExportTableCallbacks size");
SAME_FIELD(NvtxExportTableCallbacks, GetModuleFunctionTable, struct nvtx_abi_callbacks,
	   get_module_function_table);
_Static_assert(sizeof(NvtxExportTableVersionInfo) == sizeof(struct nvtx_abi_version_info),
	       "NvtxExportTableVersionInfo size");
SAME_FIELD(NvtxExportTableVersionInfo, version, struct nvtx_abi_version_info, version);
SAME_FIELD(NvtxExportTableVersionInfo, SetInjectionNvtxVersion, struct nvtx_abi_version_info,
	   set_injection_nvtx_version);
_Static_assert(sizeof(NvtxFunctionPointer) == sizeof(nvtx_abi_fn), "NvtxFunctionPointer");
_Static_assert(sizeof(nvtxRangeId_t) == sizeof(uint64_t), "nvtxRangeId_t");

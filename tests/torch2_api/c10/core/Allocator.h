/*
 * torch 2.x's c10/core/Allocator.h (and the c10::Device it takes from
 * c10/core/Device.h), the part src/torchops/observer.cpp uses: the memory
 * reporter's base, declared with torch 2.x's names and signatures (see
 * ../../README.md; the totals are size_t there, int64_t in 1.13). For a
 * compile check only: nothing here is defined or linked.
 */
#pragma once

#include <cstddef>
#include <cstdint>

#include <c10/util/ThreadLocalDebugInfo.h>

namespace c10 {

enum class DeviceType : int8_t { CPU = 0, CUDA = 1 };
using DeviceIndex = int8_t;

struct Device final {
	DeviceType type() const noexcept;
	DeviceIndex index() const noexcept;
};

struct MemoryReportingInfoBase : public c10::DebugInfoBase {
	MemoryReportingInfoBase();
	~MemoryReportingInfoBase() override = default;
	virtual void reportMemoryUsage(void *ptr, int64_t alloc_size, size_t total_allocated,
				       size_t total_reserved, Device device) = 0;
	virtual void reportOutOfMemory(int64_t alloc_size, size_t total_allocated,
				       size_t total_reserved, Device device);
	virtual bool memoryProfilingEnabled() const = 0;
};

bool memoryProfilingEnabled();
void reportMemoryUsageToProfiler(void *ptr, int64_t alloc_size, size_t total_allocated,
				 size_t total_reserved, Device device);

} // namespace c10

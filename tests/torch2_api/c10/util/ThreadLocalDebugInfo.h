/*
 * torch 2.x's c10/util/ThreadLocalDebugInfo.h, the part
 * src/torchops/observer.cpp uses (its memory reporter's slot), declared
 * with torch 2.x's names and signatures (see ../../README.md). For a
 * compile check only: nothing here is defined or linked.
 */
#pragma once

#include <cstdint>
#include <memory>

namespace c10 {

enum class DebugInfoKind : uint8_t {
	PRODUCER_INFO = 0,
	MOBILE_RUNTIME_INFO,
	PROFILER_STATE,
	INFERENCE_CONTEXT,
	PARAM_COMMS_INFO,
	TEST_INFO,
	TEST_INFO_2,
};

class DebugInfoBase {
public:
	DebugInfoBase() = default;
	virtual ~DebugInfoBase() = default;
};

class ThreadLocalDebugInfo {
public:
	static DebugInfoBase *get(DebugInfoKind kind);
	static std::shared_ptr<ThreadLocalDebugInfo> current();
	static void _forceCurrentDebugInfo(std::shared_ptr<ThreadLocalDebugInfo> info);
	static void _push(DebugInfoKind kind, std::shared_ptr<DebugInfoBase> info);
	static std::shared_ptr<DebugInfoBase> _pop(DebugInfoKind kind);
	static std::shared_ptr<DebugInfoBase> _peek(DebugInfoKind kind);
};

} // namespace c10

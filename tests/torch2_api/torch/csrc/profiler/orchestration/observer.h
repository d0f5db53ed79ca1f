/*
 * torch 2.x's torch/csrc/profiler/orchestration/observer.h, the part
 * src/torchops/observer.cpp uses: the profiler state base its memory
 * reporter derives from, declared with torch 2.x's names and signatures
 * (see ../../../../README.md). For a compile check only: nothing here is
 * defined or linked.
 */
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <ATen/record_function.h>
#include <c10/core/Allocator.h>

namespace torch::profiler::impl {

enum class ProfilerState {
	Disabled = 0,
	CPU,
	CUDA,
	NVTX,
	ITT,
	PRIVATEUSE1,
	KINETO,
	KINETO_GPU_FALLBACK,
	KINETO_PRIVATEUSE1_FALLBACK,
	KINETO_ONDEMAND,
	NUM_PROFILER_STATES,
};

enum class ActiveProfilerType { NONE = 0, LEGACY, KINETO, NVTX, ITT, PRIVATEUSE1 };

struct ExperimentalConfig {
	ExperimentalConfig(std::vector<std::string> profiler_metrics = {},
			   bool profiler_measure_per_kernel = false, bool verbose = false,
			   std::vector<std::string> performance_events = {},
			   bool enable_cuda_sync_events = false, bool adjust_profiler_step = false,
			   bool adjust_timestamps = false);
};

struct ProfilerConfig {
	explicit ProfilerConfig(ProfilerState state, bool report_input_shapes = false,
				bool profile_memory = false, bool with_stack = false,
				bool with_flops = false, bool with_modules = false,
				ExperimentalConfig experimental_config = ExperimentalConfig(),
				std::string trace_id = "");
	bool disabled() const;
	bool global() const;
	ProfilerState state;
	bool profile_memory;
};

struct ProfilerStateBase : public c10::MemoryReportingInfoBase {
	explicit ProfilerStateBase(ProfilerConfig config);
	ProfilerStateBase(const ProfilerStateBase &) = delete;
	ProfilerStateBase(ProfilerStateBase &&) = delete;
	ProfilerStateBase &operator=(const ProfilerStateBase &) = delete;
	ProfilerStateBase &operator=(ProfilerStateBase &&) = delete;
	~ProfilerStateBase() override;

	static ProfilerStateBase *get(bool global);
	static void push(std::shared_ptr<ProfilerStateBase> &&state);
	static std::shared_ptr<ProfilerStateBase> pop(bool global);
	const ProfilerConfig &config() const;
	bool memoryProfilingEnabled() const override;
	virtual ActiveProfilerType profilerType() = 0;

protected:
	std::mutex state_mutex_;
	at::CallbackHandle handle_ = 0;
};

} // namespace torch::profiler::impl

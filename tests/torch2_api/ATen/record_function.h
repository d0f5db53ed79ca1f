/*
 * torch 2.x's RecordFunction API, the part src/capture/torch/observer.cpp uses,
 * declared with torch 2.x's names and signatures (see ../README.md). For a
 * compile check only: nothing here is defined or linked.
 */
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace c10 {

using string_view = std::string_view;

/* c10/util/ArrayRef.h: a non-owning view of a contiguous array. */
template <typename T>
class ArrayRef {
public:
	using iterator = const T *;
	constexpr ArrayRef() : data_(nullptr), size_(0) {}
	constexpr ArrayRef(const T *data, size_t size) : data_(data), size_(size) {}
	constexpr iterator begin() const { return data_; }
	constexpr iterator end() const { return data_ + size_; }
	constexpr bool empty() const { return size_ == 0; }
	constexpr const T *data() const { return data_; }
	constexpr size_t size() const { return size_; }
	const T &front() const { return data_[0]; }
	const T &back() const { return data_[size_ - 1]; }
	constexpr const T &operator[](size_t i) const { return data_[i]; }
	std::vector<T> vec() const { return std::vector<T>(data_, data_ + size_); }

private:
	const T *data_;
	size_t size_;
};

using IntArrayRef = ArrayRef<int64_t>;

} // namespace c10

namespace caffe2 {

/* c10/util/typeid.h */
class TypeMeta {
public:
	c10::string_view name() const noexcept;
};

} // namespace caffe2

namespace at {

/* aten/src/ATen/core/TensorBase.h */
class Tensor {
public:
	bool defined() const;
	c10::IntArrayRef sizes() const;
	caffe2::TypeMeta dtype() const noexcept;
};

} // namespace at

namespace c10 {

/* aten/src/ATen/core/ivalue.h */
struct IValue {
	bool isTensor() const;
	const at::Tensor &toTensor() const &;
	bool isInt() const;
	int64_t toInt() const;
	bool isScalar() const;
	bool isTensorList() const;
	bool isIntList() const;
	std::vector<int64_t> toIntVector() const;
	bool isDoubleList() const;
	bool isBoolList() const;
	bool isNone() const;
	std::string tagKind() const;
};

} // namespace c10

namespace at {

using c10::IValue;

/* aten/src/ATen/record_function.h */
enum class RecordScope : uint8_t {
	FUNCTION = 0,
	BACKWARD_FUNCTION,
	TORCHSCRIPT_FUNCTION,
	KERNEL_FUNCTION_DTYPE,
	CUSTOM_CLASS,
	BUILD_FEATURE,
	LITE_INTERPRETER,
	USER_SCOPE,
	STATIC_RUNTIME_OP,
	STATIC_RUNTIME_MODEL,
	NUM_SCOPES,
};

} // namespace at

namespace std {
template <>
struct hash<at::RecordScope> {
	size_t operator()(const at::RecordScope &sc) const noexcept
	{
		return static_cast<size_t>(sc);
	}
};
} // namespace std

namespace at {

struct ObserverContext {
	virtual ~ObserverContext() = default;

protected:
	ObserverContext() = default;
};

struct RecordFunction;

class RecordFunctionCallback {
public:
	using StartCallback = std::unique_ptr<ObserverContext> (*)(const RecordFunction &);
	using EndCallback = void (*)(const RecordFunction &, ObserverContext *);
	explicit RecordFunctionCallback(StartCallback start, EndCallback end = nullptr);
	RecordFunctionCallback &needsInputs(bool needs_inputs);
	RecordFunctionCallback &needsOutputs(bool needs_outputs);
	RecordFunctionCallback &needsIds(bool needs_ids);
	RecordFunctionCallback &samplingProb(double sampling_prob);
	RecordFunctionCallback &
	scopes(const std::unordered_set<RecordScope, std::hash<RecordScope>> &scopes);
};

typedef uint64_t CallbackHandle;
typedef uint64_t RecordFunctionHandle;

struct RecordFunction {
	RecordFunction(const RecordFunction &) = delete;
	RecordFunction &operator=(const RecordFunction &) = delete;
	virtual ~RecordFunction();
	const char *name() const;
	const char *overload_name() const;
	int64_t seqNr() const;
	c10::ArrayRef<const IValue> inputs() const;
	uint64_t threadId() const;
	uint64_t forwardThreadId() const;
	RecordScope scope() const;
	RecordFunctionHandle handle() const;
	bool isAsync() const;
	bool needsInputs() const;
};

CallbackHandle addGlobalCallback(RecordFunctionCallback cb);
void removeCallback(CallbackHandle handle);
bool hasGlobalCallbacks();

} // namespace at

/*
 * observer — profhost's operator collector inside torch: a global
 * RecordFunction observer (the API torch.profiler, emit_nvtx and emit_itt
 * use). The only C++ of profhost: everything behind the extern "C" entry
 * points below is the C core's (src/capture/torchops.c), reached through
 * the struct torchops_api it hands over.
 *
 * Built against the torch in the process: by CMake when torch's headers
 * are found, or on first use by the Python bridge (profhost/_ops.py, with
 * torch.utils.cpp_extension). Built and tested against torch 1.13; it uses
 * only RecordFunction calls torch 2.x keeps with the same signatures
 * (name, seqNr, forwardThreadId, scope, inputs, addGlobalCallback,
 * removeCallback, hasGlobalCallbacks), and for profile_memory c10's
 * ThreadLocalDebugInfo and MemoryReportingInfoBase and torch's
 * ProfilerStateBase (the totals' type differs: TotalOf below), so no #if
 * on TORCH_VERSION_MAJOR is needed yet. No torch 2.x can be installed here: the ctest
 * unit_torchops_torch2_api compiles this file against torch 2.x's
 * declarations of that API (tests/torch2_api/README.md says what differs).
 *
 * Threads: the callbacks run on whichever thread runs an operator; the
 * entry points are called by the bridge, one at a time (its lock).
 */
#include <ATen/record_function.h>
#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <torch/csrc/profiler/orchestration/observer.h>
#include <torch/version.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string>

extern "C" {
#include "torchops_abi.h"
}

namespace {

enum : uint32_t { kShapes = 1, kFlops = 2, kStack = 4, kMemory = 8 };

const torchops_api *g_api = nullptr;
uint32_t g_flags = 0;
at::CallbackHandle g_handle = 0;
std::atomic<uint64_t> g_installed{0}; // callbacks this library has added, minus removed

// A JSON list being written into a fixed buffer (no allocation on the hot
// path); `full` once something did not fit: the list is then not used.
struct Text {
    char buf[384];
    size_t n = 0;
    bool full = false;

    void put(const char *s, size_t len)
    {
        if (full || n + len > sizeof buf) {
            full = true;
            return;
        }
        std::memcpy(buf + n, s, len);
        n += len;
    }
    void put(char c) { put(&c, 1); }
    void put_int(int64_t v)
    {
        char tmp[24];
        size_t i = sizeof tmp;
        uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
        do {
            tmp[--i] = (char)('0' + u % 10);
            u /= 10;
        } while (u);
        if (v < 0)
            tmp[--i] = '-';
        put(tmp + i, sizeof tmp - i);
    }
};

// Product of a tensor's sizes (torch's formulas multiply as uint64).
uint64_t numel_of(c10::IntArrayRef s)
{
    uint64_t n = 1;
    for (int64_t d : s)
        n *= (uint64_t)d;
    return n;
}

bool tensor_at(c10::ArrayRef<const c10::IValue> in, size_t i)
{
    return i < in.size() && in[i].isTensor() && in[i].toTensor().defined();
}

// torch's computeFlops (torch/csrc/profiler/util.cpp) for the operators its
// with_flops covers; false when the operator has no formula or its inputs
// do not fit it.
bool op_flops(const char *name, c10::ArrayRef<const c10::IValue> in, uint64_t *out)
{
    if (std::strncmp(name, "aten::", 6) != 0)
        return false;
    const char *op = name + 6;
    bool mm = !std::strcmp(op, "mm"), addmm = !std::strcmp(op, "addmm");
    bool bmm = !std::strcmp(op, "bmm"), baddbmm = !std::strcmp(op, "baddbmm");
    if (mm || addmm || bmm || baddbmm) {
        size_t a = (mm || bmm) ? 0 : 1;
        if (!tensor_at(in, a) || !tensor_at(in, a + 1))
            return false;
        c10::IntArrayRef m1 = in[a].toTensor().sizes(), m2 = in[a + 1].toTensor().sizes();
        if (m1.empty() || m1.back() == 0)
            return false;
        uint64_t f = numel_of(m1) / (uint64_t)m1.back();
        if (bmm || baddbmm) {
            if (m1.front() == 0)
                return false;
            f /= (uint64_t)m1.front();
        }
        *out = 2 * f * numel_of(m2);
        return true;
    }
    if (!std::strcmp(op, "mul") || !std::strcmp(op, "add")) {
        if (!tensor_at(in, 0))
            return false;
        *out = numel_of(in[0].toTensor().sizes());
        return true;
    }
    if (!std::strcmp(op, "conv2d")) {
        if (!tensor_at(in, 0) || !tensor_at(in, 1) || in.size() < 7 ||
            !in[3].isIntList() || !in[4].isIntList() || !in[5].isIntList() || !in[6].isInt())
            return false;
        c10::IntArrayRef x = in[0].toTensor().sizes(), w = in[1].toTensor().sizes();
        std::vector<int64_t> stride = in[3].toIntVector(), pad = in[4].toIntVector(),
                             dil = in[5].toIntVector();
        int64_t groups = in[6].toInt();
        if (x.size() != 4 || w.size() != 4 || groups <= 0 || pad.size() != 2 ||
            dil.size() != 2 || stride.size() != 2 || stride[0] * stride[1] == 0)
            return false;
        uint64_t oh = (uint64_t)((x[2] + 2 * pad[0] - dil[0] * (w[2] - 1) - 1) / stride[0] + 1);
        uint64_t ow = (uint64_t)((x[3] + 2 * pad[1] - dil[1] * (w[3] - 1) - 1) / stride[1] + 1);
        *out = 2 * (uint64_t)x[0] * oh * ow * (uint64_t)w[2] * (uint64_t)w[3] *
               (uint64_t)x[1] * (uint64_t)w[0] / (uint64_t)groups;
        return true;
    }
    return false;
}

// Kineto's "Input Dims" and "Input type" of an operator's inputs. False
// when they do not fit (left out then).
bool shapes(c10::ArrayRef<const c10::IValue> in, Text &dims, Text &types)
{
    dims.put('[');
    types.put('[');
    for (size_t i = 0; i < in.size(); i++) {
        const c10::IValue &v = in[i];
        if (i) {
            dims.put(", ", 2);
            types.put(", ", 2);
        }
        dims.put('[');
        types.put('"');
        if (v.isTensor()) {
            const at::Tensor &t = v.toTensor();
            if (t.defined()) {
                c10::IntArrayRef s = t.sizes();
                for (size_t k = 0; k < s.size(); k++) {
                    if (k)
                        dims.put(", ", 2);
                    dims.put_int(s[k]);
                }
                auto tn = t.dtype().name();
                types.put(tn.data(), tn.size());
            }
        } else if (v.isScalar()) {
            types.put("Scalar", 6);
        } else if (v.isTensorList()) {
            types.put("TensorList", 10);
        } else if (v.isIntList() || v.isDoubleList() || v.isBoolList()) {
            types.put("ScalarList", 10);
        } else if (!v.isNone()) {
            std::string kind = v.tagKind();
            types.put(kind.data(), kind.size());
        }
        dims.put(']');
        types.put('"');
    }
    dims.put(']');
    types.put(']');
    return !dims.full && !types.full;
}

// ---- memory (prof.capture{profile_memory})
//
// torch reports each tensor allocation and free to the profiler state in
// the allocating thread's PROFILER_STATE debug-info slot
// (c10::reportMemoryUsageToProfiler: ThreadLocalDebugInfo::get, then
// memoryProfilingEnabled() and reportMemoryUsage()); its own profilers
// push their state there and at::ThreadLocalState carries it to the
// autograd engine's threads and to at::launch tasks. profhost's reporter
// goes into the slot of each thread that starts an operator while memory
// is on, when the slot is empty (mem_thread), and stays: a tensor freed
// between operators (Python dropping it) is reported too, and torch's CPU
// allocator forgets the blocks whose free it reported. Outside windows
// memoryProfilingEnabled() says no: torch then does nothing more.
//
// torch reads that slot as its own profiler's state (a ProfilerStateBase:
// profilerEnabled(), getProfilerConfig()), so the reporter is one, with
// the Disabled configuration: torch sees no profiler of its own running.
// torch refuses to start its profiler on a thread whose slot is taken;
// the bridge calls profhost_torchops_memory_aside() first (profhost/_ops.py
// wraps torch's entry points), which takes the reporter out. While torch's
// profiler holds a thread's slot its allocations go to it, not to profhost
// (said once: torchops_api.mem_aside); once it ends, the next operator
// puts the reporter back.

// The type torch passes the totals as: int64_t in 1.13, size_t in 2.x.
template <typename F>
struct TotalOf;
template <typename C, typename T>
struct TotalOf<void (C::*)(void *, int64_t, T, T, c10::Device)> {
    using type = T;
};
using Total = TotalOf<decltype(&c10::MemoryReportingInfoBase::reportMemoryUsage)>::type;

struct MemReporter final : public torch::profiler::impl::ProfilerStateBase {
    MemReporter()
        : ProfilerStateBase(torch::profiler::impl::ProfilerConfig(
                  torch::profiler::impl::ProfilerState::Disabled))
    {
    }

    // Any thread: the one allocating or freeing.
    void reportMemoryUsage(void *ptr, int64_t bytes, Total total_allocated,
                           Total total_reserved, c10::Device device) override
    {
        const torchops_api *api = g_api;
        if (!api)
            return;
        torchops_mem m;
        m.addr = (uint64_t)(uintptr_t)ptr;
        m.bytes = bytes;
        m.total_allocated = (int64_t)total_allocated;
        m.total_reserved = (int64_t)total_reserved;
        m.device_type = (int32_t)device.type();
        m.device_index = (int32_t)device.index();
        api->mem(&m);
    }

    bool memoryProfilingEnabled() const override
    {
        const torchops_api *api = g_api;
        return api && api->memory_on();
    }

    torch::profiler::impl::ActiveProfilerType profilerType() override
    {
        return torch::profiler::impl::ActiveProfilerType::NONE;
    }
};

// The reporter, made once by profhost_torchops_start (with kMemory) and
// never destroyed: threads' debug-info chains and torch's propagated
// states keep pointers to it until they end.
std::shared_ptr<c10::DebugInfoBase> *g_reporter = nullptr;
c10::DebugInfoBase *g_reporter_raw = nullptr;
thread_local bool t_aside_said; // this thread saw torch's profiler in the slot

// Puts the reporter into the calling thread's PROFILER_STATE slot when the
// slot is empty; when torch's profiler holds it, says so (once a thread).
// An operator's start, memory on.
void mem_thread(const torchops_api *api)
{
    c10::DebugInfoBase *cur = c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE);
    if (cur == g_reporter_raw)
        return;
    if (cur) {
        if (!t_aside_said) {
            t_aside_said = true;
            api->mem_aside();
        }
        return;
    }
    try {
        c10::ThreadLocalDebugInfo::_push(c10::DebugInfoKind::PROFILER_STATE, *g_reporter);
    } catch (...) {
        // out of memory: this operator's thread goes without
    }
}

// What the start callback leaves for the end callback about one operator.
struct Open {
    const at::RecordFunction *fn; // the operator (its end callback finds it)
    uint64_t gen;                 // the window its start fell in
    int64_t start;
    uint64_t ext;
    uint64_t flops;
    uint32_t stack;                // its Python call stack (with_stack), 0: none
    uint32_t text;                 // its dims, then types, start here in its text
    uint16_t dims_len, types_len;
    bool pushed, has_shapes, has_flops;
};

// Operators (torch's FUNCTION and BACKWARD_FUNCTION scopes: RecordFunctions
// the dispatcher and the autograd engine keep on the C++ stack) nest and
// end in the reverse order on the thread that started them, so their
// entries are kept on a per-thread stack, with their shapes' text: no
// allocation per operator. Deeper nesting than kDepth, or shapes beyond
// kText bytes along one nesting chain, are not recorded (no operator nests
// nearly that deep). Plain data, zero at thread start: thread_local needs
// no constructor then.
constexpr uint32_t kDepth = 128;
constexpr uint32_t kText = 16384;
struct Stack {
    uint32_t n;
    uint32_t text_used;
    Open open[kDepth];
    char text[kText];
};
thread_local Stack t_stack;

// record_function labels (USER_SCOPE) may end on another thread (futures)
// or out of order with other labels (a generator's `with`), so each keeps
// its entry in a context of its own, as torch's ObserverContext allows;
// they are few (a handful a step).
struct LabelCtx : public at::ObserverContext {
    Open o;
    char text[2 * sizeof(Text::buf)];
};

// Fills `o` for `fn` (not its start time): shapes into `text` from offset
// `used` (at most `cap` bytes there), FLOPs, the GPU link. Returns the text
// bytes it used.
uint32_t begin(const torchops_api *api, const at::RecordFunction &fn, Open &o, char *text,
               uint32_t used, uint32_t cap)
{
    o.fn = &fn;
    o.text = used;
    o.dims_len = o.types_len = 0;
    o.has_shapes = o.has_flops = false;
    o.pushed = false;
    o.ext = 0;
    o.stack = (g_flags & kStack) ? api->py_stack() : 0;
    if (g_flags & (kShapes | kFlops)) {
        try {
            c10::ArrayRef<const c10::IValue> in = fn.inputs();
            if (g_flags & kShapes) {
                Text dims, types;
                if (shapes(in, dims, types) && dims.n + types.n <= cap - used) {
                    std::memcpy(text + used, dims.buf, dims.n);
                    std::memcpy(text + used + dims.n, types.buf, types.n);
                    o.dims_len = (uint16_t)dims.n;
                    o.types_len = (uint16_t)types.n;
                    o.has_shapes = true;
                }
            }
            if (g_flags & kFlops)
                o.has_flops = op_flops(fn.name(), in, &o.flops);
        } catch (...) {
            // a tensor without sizes (nested, symbolic): no shapes, no FLOPs
            o.has_shapes = o.has_flops = false;
        }
    }
    if (fn.scope() != at::RecordScope::USER_SCOPE) {
        o.ext = api->ext_push();
        o.pushed = o.ext != 0;
    }
    return o.has_shapes ? (uint32_t)(o.dims_len + o.types_len) : 0;
}

// Hands the finished operator `o` (its shapes in `text`) to the core.
void finish(const torchops_api *api, const at::RecordFunction &fn, const Open &o,
            const char *text, int64_t end)
{
    if (o.pushed)
        api->ext_pop();
    torchops_op op;
    std::memset(&op, 0, sizeof op);
    op.end = end;
    const char *name = fn.name();
    op.name = name;
    op.name_len = (uint32_t)std::strlen(name);
    op.start = o.start;
    op.seq = fn.seqNr();
    op.fwd_tid = fn.forwardThreadId();
    op.ext_id = o.ext;
    op.stack = o.stack;
    switch (fn.scope()) {
    case at::RecordScope::BACKWARD_FUNCTION:
        op.scope = TORCHOPS_BACKWARD;
        break;
    case at::RecordScope::USER_SCOPE:
        op.scope = TORCHOPS_USER;
        break;
    default:
        op.scope = TORCHOPS_FUNCTION;
        break;
    }
    if (o.has_flops) {
        op.flags |= TORCHOPS_HAS_FLOPS;
        op.flops = o.flops;
    }
    if (o.has_shapes) {
        op.flags |= TORCHOPS_HAS_SHAPES;
        op.dims = text + o.text;
        op.dims_len = o.dims_len;
        op.types = text + o.text + o.dims_len;
        op.types_len = o.types_len;
    }
    api->op_in(&op, o.gen);
}

// Start callback: outside windows one call and a return; inside, an
// operator pushes its entry on the thread's stack (returns nullptr), a
// label allocates its context (nullptr when that fails) and is counted
// for its window (label_begin: the window is written once it ended, as a
// collective's label ends on the backend's thread, maybe after the window
// closed). Each is tagged with the window its start fell in. The start
// time is read last.
std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction &fn)
{
    const torchops_api *api = g_api;
    uint64_t gen = api ? api->window() : 0;
    if (!gen)
        return nullptr;
    if (g_reporter_raw && api->memory_on())
        mem_thread(api);
    if (fn.scope() == at::RecordScope::USER_SCOPE) {
        std::unique_ptr<LabelCtx> ctx(new (std::nothrow) LabelCtx);
        if (ctx) {
            begin(api, fn, ctx->o, ctx->text, 0, sizeof ctx->text);
            ctx->o.gen = gen;
            api->label_begin(gen);
            ctx->o.start = api->now();
        }
        return ctx;
    }
    Stack &st = t_stack;
    if (st.n == kDepth)
        return nullptr;
    Open &o = st.open[st.n];
    st.text_used += begin(api, fn, o, st.text, st.text_used, kText);
    st.n++;
    o.gen = gen;
    o.start = api->now();
    return nullptr;
}

// End callback: a label finishes from its context; an operator finds its
// entry on the thread's stack (the top one: operators end in order), pops
// it and hands it to the core with the window it began in (op_in: written
// there even when that window closed meanwhile). An operator whose start
// was not recorded (it began before the window) has no entry: nothing is
// written.
void on_end(const at::RecordFunction &fn, at::ObserverContext *base)
{
    const torchops_api *api = g_api;
    if (!api)
        return;
    if (base) {
        int64_t end = api->now();
        const LabelCtx *ctx = static_cast<const LabelCtx *>(base);
        finish(api, fn, ctx->o, ctx->text, end);
        return;
    }
    if (fn.scope() == at::RecordScope::USER_SCOPE)
        return; // a label that began before the window
    Stack &st = t_stack;
    uint32_t i = st.n;
    while (i && st.open[i - 1].fn != &fn)
        i--;
    if (!i)
        return;
    int64_t end = api->now();
    const Open &o = st.open[i - 1];
    st.n = i - 1;
    st.text_used = o.text;
    finish(api, fn, o, st.text, end);
}

} // namespace

extern "C" {

/* Registers the observer (once): `api` is the core's table, `flags` bit 0
 * records input shapes, bit 1 FLOPs, bit 2 each operator's Python call
 * stack, bit 3 tensor allocations (the memory reporter, made then and
 * kept). Returns 0, -1 for a table of another version, -2 when torch
 * refused the callback. */
__attribute__((visibility("default"))) int profhost_torchops_start(const torchops_api *api,
                                                                   uint32_t flags)
{
    if (!api || api->version != TORCHOPS_ABI_VERSION || api->size < sizeof(torchops_api))
        return -1;
    if (g_handle)
        return 0;
    g_api = api;
    g_flags = flags;
    if ((flags & kMemory) && !g_reporter) {
        try {
            g_reporter = new std::shared_ptr<c10::DebugInfoBase>(std::make_shared<MemReporter>());
            g_reporter_raw = g_reporter->get();
        } catch (...) {
            g_reporter = nullptr; // out of memory: no allocations recorded
        }
    }
    try {
        at::RecordFunctionCallback cb(on_start, on_end);
        cb.needsInputs((flags & (kShapes | kFlops)) != 0)
                        .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION,
                     at::RecordScope::USER_SCOPE});
        g_handle = at::addGlobalCallback(cb);
    } catch (...) {
        g_handle = 0;
        return -2;
    }
    g_installed.fetch_add(1);
    return 0;
}

/* Removes the observer; a no-op when it is not registered. */
__attribute__((visibility("default"))) void profhost_torchops_stop(void)
{
    if (!g_handle)
        return;
    at::removeCallback(g_handle);
    g_handle = 0;
    g_installed.fetch_sub(1);
}

/* The calling thread is about to start torch's own profiler, which
 * refuses a thread whose PROFILER_STATE slot is taken: takes profhost's
 * memory reporter out of it. Returns 1 when it was taken out, 0 when it
 * was not there, -1 when it lies under another entry (torch will refuse;
 * nothing is changed). */
__attribute__((visibility("default"))) int profhost_torchops_memory_aside(void)
{
    if (!g_reporter_raw ||
        c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE) != g_reporter_raw)
        return 0;
    try {
        if (c10::ThreadLocalDebugInfo::_peek(c10::DebugInfoKind::PROFILER_STATE).get() !=
            g_reporter_raw)
            return -1;
        c10::ThreadLocalDebugInfo::_pop(c10::DebugInfoKind::PROFILER_STATE);
    } catch (...) {
        return -1; // the newest entry is of another kind
    }
    t_aside_said = true;
    if (g_api && g_api->memory_on())
        g_api->mem_aside();
    return 1;
}

/* Callbacks of this observer now registered (0 or 1). */
__attribute__((visibility("default"))) uint64_t profhost_torchops_installed(void)
{
    return g_installed.load();
}

/* at::hasGlobalCallbacks(): whether torch holds any global observer
 * (profhost's, torch.profiler's, ...). */
__attribute__((visibility("default"))) int profhost_torchops_torch_has_callbacks(void)
{
    return at::hasGlobalCallbacks() ? 1 : 0;
}

/* The torch version these headers were: "major.minor.patch". */
__attribute__((visibility("default"))) const char *profhost_torchops_torch_version(void)
{
#ifdef TORCH_VERSION
    return TORCH_VERSION;
#else
    return "";
#endif
}

} // extern "C"

// bench_phase_sources.py's RecordFunction callbacks (not part of profhost):
// global callbacks restricted to chosen scopes, each doing what an observer
// that ignores its events does (count and return), so that a bench can
// measure what torch itself costs once such a callback is registered, per
// operator, per record_function label and per autograd node.
#include <ATen/record_function.h>

#include <atomic>
#include <cstdint>
#include <unordered_set>

namespace {

std::atomic<uint64_t> g_seen{0};
at::CallbackHandle g_handles[8];
int g_n = 0;

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction &)
{
    g_seen.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
}

void on_end(const at::RecordFunction &, at::ObserverContext *) {}

} // namespace

// Registers one global callback for the scopes in `mask` (bit 0 FUNCTION,
// bit 1 BACKWARD_FUNCTION, bit 2 USER_SCOPE). Returns 0, or -1.
extern "C" __attribute__((visibility("default"))) int phase_sources_add(int mask)
{
    std::unordered_set<at::RecordScope, std::hash<at::RecordScope>> scopes;
    if (mask & 1)
        scopes.insert(at::RecordScope::FUNCTION);
    if (mask & 2)
        scopes.insert(at::RecordScope::BACKWARD_FUNCTION);
    if (mask & 4)
        scopes.insert(at::RecordScope::USER_SCOPE);
    if (scopes.empty() || g_n == 8)
        return -1;
    at::RecordFunctionCallback cb(on_start, on_end);
    cb.scopes(scopes);
    g_handles[g_n++] = at::addGlobalCallback(cb);
    return 0;
}

// Removes every callback this library registered.
extern "C" __attribute__((visibility("default"))) void phase_sources_remove_all()
{
    while (g_n)
        at::removeCallback(g_handles[--g_n]);
}

// Start callbacks run so far (all scopes together).
extern "C" __attribute__((visibility("default"))) uint64_t phase_sources_seen()
{
    return g_seen.load();
}

#!/bin/sh
# Runs profhost's whole test suite, the way CI does: four builds, warnings
# as errors (-DPROFHOST_WERROR=ON), each tested under one `ctest`:
#   default (RelWithDebInfo)  everything: C unit tests, Lua specs, end-to-end
#   Release CPU-only (-O3,    everything but the Python, torch and REPL
#     PROFHOST_CUDA=OFF)      end-to-end tests (and the GPU bench's dry run,
#                             torch too): the optimizer and the build
#                             without the CUPTI source in one build (the
#                             Python bridge and the REPL are Python and Lua
#                             over the same C the other tests reach; the
#                             CUPTI source is tested at -O2 here and under
#                             the sanitizers; two builds for these took
#                             CI past its 30 minutes)
#   ASan + UBSan              everything
#   ThreadSanitizer           the C unit tests (but two labelled no_tsan,
#                             which test what TSan changes) and the
#                             `tsan`-labelled tests
#                             (the NVTX hot path at full size, in process and
#                             end to end; the output directories end to end,
#                             with an instrumented workload). The other
#                             end-to-end tests preload the TSan build into
#                             uninstrumented programs (Python, sleep, true),
#                             where the TSan runtime crashes, or time signals,
#                             which TSan delivers late.
# The builds that run no torch test leave the torch operator observer out
# (-DPROFHOST_TORCH=OFF). Each build prints its time; the whole took 11
# minutes on an otherwise idle 2-core machine (2026-11-27: 221, 116, 235
# and 76 s, builds up to date but for the changed files), and CI's
# machines, building everything, take about 2 times as long.
set -eu
cd "$(dirname "$0")/.."
jobs=$(nproc)
status=0
# run_suite NAME DIR "CTEST SELECTION" CMAKE-ARGS...
run_suite() {
    name=$1; dir=$2; select=$3; shift 3
    start=$(date +%s)
    echo "==== $name: configuring and building in $dir"
    mkdir -p "$dir"
    if ! cmake -S . -B "$dir" -DPROFHOST_WERROR=ON "$@" >"$dir/build.log" 2>&1 ||
       ! cmake --build "$dir" -j"$jobs" >>"$dir/build.log" 2>&1; then
        status=1
        tail -n 40 "$dir/build.log"
        echo "==== $name: BUILD FAILED (whole log: $dir/build.log)"
        return
    fi
    echo "==== $name: ctest $select"
    # shellcheck disable=SC2086 # the selection is several arguments
    if ! ctest --test-dir "$dir" --output-on-failure -j"$jobs" --timeout 900 $select; then
        status=1
        echo "==== $name: FAILED"
    fi
    echo "==== $name: $(( $(date +%s) - start )) s"
}
run_suite "default build" build-test "" -DCMAKE_BUILD_TYPE=RelWithDebInfo
not_these="e2e_python|e2e_torch|e2e_install_python|e2e_repl|bench_gpu_dry_run"
run_suite "Release CPU-only build (-O3, PROFHOST_CUDA=OFF)" build-test-cpu "-E $not_these" \
    -DCMAKE_BUILD_TYPE=Release -DPROFHOST_CUDA=OFF -DPROFHOST_TORCH=OFF
run_suite "ASan+UBSan build" build-test-asan "" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPROFHOST_SANITIZE=address,undefined
run_suite "ThreadSanitizer build" build-test-tsan "-L unit|tsan -LE no_tsan" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPROFHOST_SANITIZE=thread -DPROFHOST_TORCH=OFF
[ $status -eq 0 ] && echo "==== all test suites passed" || echo "==== some test suites FAILED"
exit $status

#!/bin/sh
# Runs profhost's whole test suite, the way CI does: five builds, warnings
# as errors (-DPROFHOST_WERROR=ON), each tested under one `ctest`:
#   default (RelWithDebInfo)  everything: C unit tests, Lua specs, end-to-end
#   Release (-O3)             everything but the Python, torch and REPL
#                             end-to-end tests
#   CPU-only                  the same, and not the CPU stacks either
#                             (what these two leave out keeps CI within
#                             its 30 minutes: Release differs from the
#                             default build by the optimizer, which the C
#                             tests reach the same way, and the REPL is
#                             Lua and a socket; CPU-only by the CUPTI
#                             source, which the Python bridge, the sampler
#                             and the REPL never reach without a GPU)
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
# Each build prints its time; the whole took 25 minutes on an otherwise
# idle 2-core machine (2026-11-27, before Release left out the Python
# tests: 3.5-6 minutes a build, ASan the longest; every build compiles the
# torch operator observer when libtorch-dev is in).
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
not_these="e2e_python|e2e_torch_ops|e2e_install_python|e2e_repl"
run_suite "Release build" build-test-release "-E $not_these" -DCMAKE_BUILD_TYPE=Release
run_suite "CPU-only build (PROFHOST_CUDA=OFF)" build-test-cpu "-E $not_these|e2e_stacks" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPROFHOST_CUDA=OFF
run_suite "ASan+UBSan build" build-test-asan "" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPROFHOST_SANITIZE=address,undefined
run_suite "ThreadSanitizer build" build-test-tsan "-L unit|tsan -LE no_tsan" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPROFHOST_SANITIZE=thread
[ $status -eq 0 ] && echo "==== all test suites passed" || echo "==== some test suites FAILED"
exit $status

#!/bin/sh
# Runs profhost's whole test suite, the way CI does: three builds (default,
# CPU-only, AddressSanitizer + UndefinedBehaviorSanitizer), each with all of
# its C unit tests, Lua specs and end-to-end tests under one `ctest`.
set -eu
cd "$(dirname "$0")/.."
jobs=$(nproc)
status=0
run_suite() {
    name=$1; dir=$2; shift 2
    echo "==== $name: configuring and building in $dir"
    cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
    cmake --build "$dir" -j"$jobs" >/dev/null
    echo "==== $name: ctest"
    if ! ctest --test-dir "$dir" --output-on-failure -j"$jobs" --timeout 600; then
        status=1
        echo "==== $name: FAILED"
    fi
}
run_suite "default build" build-test
run_suite "CPU-only build (PROFHOST_CUDA=OFF)" build-test-cpu -DPROFHOST_CUDA=OFF
run_suite "ASan+UBSan build" build-test-asan -DPROFHOST_SANITIZE=address,undefined
[ $status -eq 0 ] && echo "==== all test suites passed" || echo "==== some test suites FAILED"
exit $status

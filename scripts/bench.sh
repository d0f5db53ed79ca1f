#!/bin/sh
# Runs profhost's benchmarks on an optimized build (RelWithDebInfo, in
# build-bench/ or $BENCH_BUILD). Benchmarks print numbers; they assert
# nothing. docs/performance.md records results and the command used.
#
#   scripts/bench.sh [all|sampler|writer]
#     sampler   bench_sampler [SAMPLER_SECONDS, default 3]: CPU sampling's
#               handler cost, overhead at 999 Hz and achieved sample rate
#     writer    bench_writer: Chrome trace writer throughput
set -eu
cd "$(dirname "$0")/.."
dir=${BENCH_BUILD:-build-bench}
what=${1:-all}
case $what in
all|sampler|writer) ;;
*) echo "usage: scripts/bench.sh [all|sampler|writer]" >&2; exit 2 ;;
esac
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$dir" -j"$(nproc)" --target bench_sampler bench_writer >/dev/null
echo "# $(uname -r), $(nproc) CPUs, $(date -u +%Y-%m-%dT%H:%MZ)"
if [ "$what" = all ] || [ "$what" = sampler ]; then
    echo "== bench_sampler ${SAMPLER_SECONDS:-3}"
    "$dir/bin/bench_sampler" "${SAMPLER_SECONDS:-3}"
fi
if [ "$what" = all ] || [ "$what" = writer ]; then
    echo "== bench_writer"
    "$dir/bin/bench_writer"
fi

#!/bin/sh
# Benchmarks (not tests): each section is independent; run all of them, or
# name the ones to run: scripts/bench.sh torch
# Builds a RelWithDebInfo tree in build-bench first.
set -eu
cd "$(dirname "$0")/.."
build=${PROFHOST_BENCH_BUILD:-build-bench}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)" >/dev/null
SECTIONS="$*"
want() {
    [ -z "$SECTIONS" ] && return 0
    case " $SECTIONS " in *" $1 "*) return 0 ;; *) return 1 ;; esac
}

# ---- torch: profhost vs torch.profiler on one CPU training loop (issue 6).
# Needs torch for /usr/bin/python3 (Debian's python3-torch). Results and how
# to read them: docs/performance.md, "Python: profhost vs torch.profiler".
if want torch; then
    echo "==== torch: profhost vs torch.profiler"
    if /usr/bin/python3 -c "import torch" 2>/dev/null; then
        /usr/bin/python3 tests/bench/bench_torch.py --prof "$build/bin/prof" \
            --rounds "${BENCH_ROUNDS:-5}" --json "$build/bench_torch.json"
    else
        echo "skipped: /usr/bin/python3 has no torch (apt-get install python3-torch)"
    fi
fi

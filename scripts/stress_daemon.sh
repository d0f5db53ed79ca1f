#!/bin/sh
# The descriptor stress of issue #25: a daemon that closes descriptors
# 3-1023 as its first act, then opens FILES files of its own and writes a
# line to each at every one of 40 steps (tests/e2e/workloads/host_app.c,
# "daemon"), run RUNS times under profhost with the flight recorder and
# CPU samples at 999 Hz. Each file is compared, byte for byte, with what
# the program wrote; profhost must neither close, read nor write any of
# them. Before the fix of #25 a damaged file came in a few runs in a
# hundred (with 6 files, on two loaded cores), hence the loop.
#
#   scripts/stress_daemon.sh [BUILD] [RUNS] [FILES]
#
# BUILD is a build folder with the tests built (default build-test), RUNS
# defaults to 200, FILES to 6 (1-16). Prints each damaged file and, last,
#   daemon_fds: <R> runs, <F> files of 40 lines each: <D> damaged files in
#   <N> runs, <E> runs failed
# and exits 1 when a file was damaged or a run failed.
set -u
cd "$(dirname "$0")/.."
BUILD=${1:-build-test}
RUNS=${2:-200}
FILES=${3:-6}
STEPS=40
LIB=$(cd "$BUILD/lib" 2>/dev/null && pwd)/libprofhost.so
APP=$BUILD/tests/bin/host_app
if [ ! -f "$LIB" ] || [ ! -x "$APP" ]; then
    echo "stress_daemon: $BUILD has no lib/libprofhost.so or tests/bin/host_app:" \
         "build it first (scripts/build.sh $BUILD)" >&2
    exit 2
fi
case $FILES in
    [1-9]|1[0-6]) ;;
    *) echo "stress_daemon: FILES must be 1 to 16, got '$FILES'" >&2; exit 2 ;;
esac

tmp=$(mktemp -d /tmp/stress_daemon.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
printf 'prof.recorder{ steps = 5 }\nprof.capture{ cpu_samples = { hz = 999 } }\n' \
    > "$tmp/policy.lua"
# What the program writes into data<i>, to compare with.
i=0
while [ "$i" -lt "$FILES" ]; do
    awk -v n="$STEPS" -v f="$i" 'BEGIN { for (s = 0; s < n; s++) printf "step %d file %d\n", s, f }' \
        > "$tmp/want$i"
    i=$((i + 1))
done

damaged=0 bad_runs=0 failed=0 run=1
while [ "$run" -le "$RUNS" ]; do
    d=$tmp/run
    rm -rf "$d"
    mkdir -p "$d/data"
    LD_PRELOAD=$LIB PROF_SCRIPT=$tmp/policy.lua PROF_OUTPUT_DIR=$d/out \
        timeout 120 "$APP" daemon "$d/data" "$STEPS" "$FILES" \
        > "$d/stdout" 2> "$d/stderr"
    rc=$?
    if [ "$rc" -ne 0 ]; then
        failed=$((failed + 1))
        echo "run $run: host_app exited with $rc: $(tail -n 3 "$d/stderr")"
    fi
    here=0 i=0
    while [ "$i" -lt "$FILES" ]; do
        if ! cmp -s "$tmp/want$i" "$d/data/data$i"; then
            lines=$(wc -l < "$d/data/data$i" 2>/dev/null || echo none)
            echo "run $run: data$i damaged: $lines of $STEPS lines"
            here=$((here + 1))
        fi
        i=$((i + 1))
    done
    if [ "$here" -gt 0 ]; then
        damaged=$((damaged + here))
        bad_runs=$((bad_runs + 1))
        sed 's/^/    /' "$d/stderr"
    fi
    run=$((run + 1))
done
echo "daemon_fds: $RUNS runs, $FILES files of $STEPS lines each: $damaged damaged" \
     "files in $bad_runs runs, $failed runs failed"
[ "$damaged" -eq 0 ] && [ "$failed" -eq 0 ]

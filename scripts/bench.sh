#!/bin/sh
# Runs profhost's benchmarks and prints what docs/performance.md reports.
#
#   scripts/bench.sh [section ...]      (default: every section)
#
# Builds a RelWithDebInfo tree in build-bench/ first. Each section is
# independent; add new ones as a function and a line in SECTIONS.
# Sections: machine nvtx nvtx_instructions writer window_memory full_pool recorder_dump
# cupti sampler daemon_fds sampler_py torch torch_ops recorder_torch torch_memory jobwatch
# recorder_whole recorder_phases phase_sources.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-bench}
SECTIONS="machine nvtx nvtx_instructions writer window_memory full_pool recorder_dump cupti sampler daemon_fds sampler_py torch torch_ops recorder_torch torch_memory jobwatch recorder_whole recorder_phases phase_sources"

build() {
    cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    cmake --build "$BUILD" -j"$(nproc)" >/dev/null
}

# Watching the run directory for job requests (prof capture RUN): one
# process's watcher thread, its CPU and system calls per second.
section_jobwatch() {
    echo "==== job watcher (tests/bench/bench_jobwatch.py)"
    python3 tests/bench/bench_jobwatch.py "$BUILD" --seconds 10
}

# The machine the numbers come from.
section_machine() {
    echo "==== machine"
    grep -m1 "model name" /proc/cpuinfo | sed 's/^.*: /cpu: /'
    echo "cores: $(nproc)"
    echo "kernel: $(uname -r), clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"
    echo "transparent huge pages: $(cat /sys/kernel/mm/transparent_hugepage/enabled)"
    echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
}

# NVTX push+pop: no tool, profhost outside and inside a window.
section_nvtx() {
    echo "==== NVTX push+pop ($BUILD/bin/bench_nvtx --reps 9)"
    if [ -x "$BUILD/bin/bench_nvtx" ]; then
        "$BUILD/bin/bench_nvtx" --reps 9
    else
        echo "skipped: bench_nvtx not built (no NVTX headers)"
    fi
}

# NVTX push+pop in instructions: callgrind counts them exactly, where the
# times above move with the machine's load. Counted in the shim's
# RangePushA/RangePop and everything they call; the difference between a
# run of 2N pairs and one of N, so start-up and warm-up cancel out. The
# clock is clock_gettime (PROF_CLOCK=monotonic): under valgrind the TSC's
# switch-on time varies, and with it the count.
section_nvtx_instructions() {
    echo "==== NVTX push+pop, instructions per pair (valgrind --tool=callgrind)"
    if ! command -v valgrind >/dev/null || [ ! -x "$BUILD/bin/bench_nvtx" ]; then
        echo "skipped: needs valgrind and bench_nvtx"
        return
    fi
    dir=$(mktemp -d /tmp/bench_nvtx_ir.XXXXXX)
    printf 'prof.export{ chrome = false, key_averages = false, summary = false }\n' \
        > "$dir/outside.lua"
    printf 'prof.schedule{ skip_first = 3, active = 1, cycles = 1 }\nprof.capture{ buffer_mb = 256 }\nprof.export{ chrome = false, key_averages = false, summary = false }\n' \
        > "$dir/inside.lua"
    printf 'prof.recorder{ steps = 20, mb = 256 }\nprof.export{ chrome = false, key_averages = false, summary = false }\n' \
        > "$dir/recorder.lua"
    for mode in outside inside recorder; do
        n=1000000
        [ "$mode" != outside ] && n=200000
        one=$(nvtx_ir "$dir" "$mode" "$n")
        two=$(nvtx_ir "$dir" "$mode" $((2 * n)))
        echo "  $mode: $(( (two - one) / n )) instructions per pair"
    done
    rm -rf "$dir"
}

# Instructions callgrind counts in the NVTX entry points of one bench_nvtx
# child: nvtx_ir DIR MODE PAIRS (DIR holds MODE.lua).
nvtx_ir() {
    lib=$(cd "$BUILD/lib" && pwd)/libprofhost.so
    LD_PRELOAD=$lib NVTX_INJECTION64_PATH=$lib PROF_SCRIPT="$1/$2.lua" \
        PROF_OUTPUT_DIR="$1" PROF_LOG=quiet PROF_CLOCK=monotonic \
        valgrind --tool=callgrind --callgrind-out-file="$1/callgrind.out" \
            --collect-atstart=no --toggle-collect='RangePushA*' \
            --toggle-collect='RangePop*' \
            "$BUILD/bin/bench_nvtx" --child "$2" "$3" >/dev/null 2>&1
    callgrind_annotate "$1/callgrind.out" |
        awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1; exit }'
}

# The Chrome writer: events/s to a file, and memory while writing 10M events.
section_writer() {
    out=$(mktemp /tmp/bench_writer.XXXXXX.json)
    echo "==== Chrome writer ($BUILD/bin/bench_writer 10000000 $out)"
    "$BUILD/bin/bench_writer" 10000000 "$out"
    rm -f "$out"
}

# A whole 10M-event window under the host: 8 threads x 1M NVTX ranges (and
# 2M nested ones, each range named anew) in one capture range, every file
# and report written. Peak RSS of prof run and the profiled process
# (/usr/bin/time's maximum resident size) against the event pool it was
# given. WINDOW_MEMORY_BEFORE=<build dir of another commit> runs the same
# with that build first, for a before/after pair in one run. The report
# budget is raised so a slow machine measures the whole writing stage.
section_window_memory() {
    echo "==== a 10M-event window under prof run (peak RSS of the process)"
    have_stress || return 0
    dir=$(mktemp -d /tmp/bench_window.XXXXXX)
    printf 'prof.capture_range{ nvtx = "stress" }\nprof.capture{ buffer_mb = 1024 }\nprof.limits{ report_ms = 600000 }\n' \
        > "$dir/policy.lua"
    for b in ${WINDOW_MEMORY_BEFORE:+"$WINDOW_MEMORY_BEFORE"} "$BUILD"; do
        window_memory_run "$dir" "$b"
    done
    echo "the same, 1000 names a thread (as a program's ranges repeat):"
    window_memory_run "$dir" "$BUILD" --names 1000
    rm -rf "$dir"
}

# One run of section_window_memory with the host of build $2 (scratch
# folder $1); the workload is always $BUILD's nvtx_stress, and more
# arguments go to it.
window_memory_run() {
    d=$1 b=$2
    shift 2
    rm -rf "$d/out"
    # the program waits for the window's last file, so the whole writing
    # stage is measured, however slow the machine (an exiting program
    # waits at most 60 s for it)
    summary=$d/out/bench/rank0/window0_steps0-0/summary.txt
    PROF_LOG=quiet /usr/bin/time -f "%M %e" -o "$d/time" \
        "$b/bin/prof" run -s "$d/policy.lua" -o "$d/out" --set output.run=bench -- \
        "$BUILD/tests/bin/nvtx_stress" --threads 8 --ranges 1000000 --wait-for "$summary" \
        "$@" >/dev/null 2>&1
    [ -e "$summary" ] || summary=
    kept=$( [ -n "$summary" ] && grep -o '[0-9]* events written' "$summary" | cut -d' ' -f1)
    read -r kb wall < "$d/time"
    echo "$b: peak RSS $((kb / 1024)) MiB, $wall s wall; event pool 1024 MiB;" \
        "${kept:-?} events; files: $(du -sh "$d/out" | cut -f1)" \
        "$( [ -n "$summary" ] && echo "(all written)" || echo "(INCOMPLETE: no summary.txt)")"
}

# Full pools of FULL_POOL_MB (default "32 64 128 256") MiB: 8 threads
# offer ranges (4 x the pool in MiB x 10,000, a name each; then 1000 names
# a thread) to a window whose pool keeps what it holds; its peak RSS minus
# buffer_mb is the margin the bound promises fixed (docs/architecture.md,
# "A window's memory"). With WINDOW_MEMORY_BEFORE=<a build>, that build's
# host too, each pool measured with both one after the other.
section_full_pool() {
    echo "==== full pools under prof run (peak RSS of the process - buffer_mb)"
    have_stress || return 0
    dir=$(mktemp -d /tmp/bench_pool.XXXXXX)
    for names in 0 1000; do
        [ "$names" = 0 ] && echo "a name per range:" || echo "1000 names a thread:"
        for mb in ${FULL_POOL_MB:-32 64 128 256}; do
            for b in ${WINDOW_MEMORY_BEFORE:+"$WINDOW_MEMORY_BEFORE"} "$BUILD"; do
                full_pool_run "$dir" "$b" "$mb" "$names"
            done
        done
    done
    rm -rf "$dir"
}

# One window of section_full_pool: full_pool_run DIR BUILD MB NAMES.
full_pool_run() {
    d=$1 b=$2 mb=$3 names=$4
    rm -rf "$d/out"
    printf 'prof.capture_range{ nvtx = "stress" }\nprof.capture{ buffer_mb = %d }\nprof.limits{ report_ms = 600000 }\n' \
        "$mb" > "$d/policy.lua"
    summary=$d/out/bench/rank0/window0_steps0-0/summary.txt
    out=$("$b/bin/prof" run -s "$d/policy.lua" -o "$d/out" --set output.run=bench -- \
        "$BUILD/tests/bin/nvtx_stress" --threads 8 --ranges $((mb * 10000 / 2)) \
        --names "$names" --wait-for "$summary" 2>/dev/null)
    kb=$(echo "$out" | sed -n 's/^nvtx_stress: peak RSS \([0-9]*\) kB$/\1/p')
    kept=$( [ -e "$summary" ] && grep -o '[0-9]* events written' "$summary" | cut -d' ' -f1)
    lost=$( [ -e "$summary" ] && grep -o '[0-9]* events dropped: the trace built' "$summary" | cut -d' ' -f1)
    echo "  $b, buffer_mb $mb: peak $((kb / 1024)) MiB, margin $(( (kb - mb * 1024) / 1024 )) MiB;" \
        "${kept:-?} events kept, ${lost:-0} left out for the trace's room"
}

# The flight recorder's dump of 1M ranges: recorder_app's 10 steps of
# 100000 ranges each under prof.recorder, with and without a prof.dump of
# all of them at step 10, side by side: peak RSS and wall time of the run
# (the program waits at exit for the dump's files).
section_recorder_dump() {
    echo "==== a recorder dump of 1M ranges under prof run (peak RSS, wall)"
    dir=$(mktemp -d /tmp/bench_dump.XXXXXX)
    printf 'prof.recorder{ steps = 10, mb = 1024 }\nprof.limits{ report_ms = 600000 }\n' \
        > "$dir/nodump.lua"
    cp "$dir/nodump.lua" "$dir/dump.lua"
    printf 'prof.on_step(function(s) if s.step == 10 then prof.dump{ steps = 10, reason = "bench" } end end)\n' \
        >> "$dir/dump.lua"
    for r in 1 2 3; do
        for p in nodump dump; do
            rm -rf "$dir/out"
            PROF_LOG=quiet /usr/bin/time -f "%M %e" -o "$dir/time" \
                "$BUILD/bin/prof" run -s "$dir/$p.lua" -o "$dir/out" --set output.run=bench -- \
                "$BUILD/tests/bin/recorder_app" --steps 12 --ranges 100000 --sleep-us 0 \
                >/dev/null 2>&1
            read -r kb wall < "$dir/time"
            events=$(cat "$dir"/out/bench/rank0/recorder0_*/summary.txt 2>/dev/null |
                     grep -o '[0-9]* events written' | cut -d' ' -f1)
            echo "round $r, $p: peak RSS $((kb / 1024)) MiB, $wall s wall${events:+, $events events written}"
        done
    done
    rm -rf "$dir"
}

# GPU records through the host's record path, fed by the CUPTI fake: five
# windows of 10M records each with a pool that holds them, then with the
# default 128 MiB pool (which keeps 1M and drops the rest, counted). Built
# only with the CUDA headers (the fake is compiled from them).
section_cupti() {
    if [ ! -x "$BUILD/bin/bench_cupti" ]; then
        echo "==== GPU records: skipped (no CUDA headers: the CUPTI fake is not built)"
        return
    fi
    echo "==== GPU records ($BUILD/bin/bench_cupti 5000000 2048 5)"
    "$BUILD/bin/bench_cupti" 5000000 2048 5
    echo "==== GPU records, default pool ($BUILD/bin/bench_cupti 5000000 128 5)"
    "$BUILD/bin/bench_cupti" 5000000 128 5
}

# CPU sampling: handler cost at 30 frames, overhead of a two-thread
# CPU-bound workload at 999 Hz (CPU-time and wall clock), achieved rate.
section_sampler() {
    echo "==== CPU sampling ($BUILD/bin/bench_sampler ${SAMPLER_SECONDS:-3})"
    "$BUILD/bin/bench_sampler" "${SAMPLER_SECONDS:-3}"
}

# The descriptor stress of issue #25 (scripts/stress_daemon.sh): a daemon
# closing descriptors 3-1023, then writing 40 lines to each of 6 files,
# DAEMON_RUNS times (200) under the recorder and 999 Hz CPU samples; every
# file must be intact. About 1.2 s a run.
section_daemon_fds() {
    echo "==== a daemon closing descriptors, recorder + 999 Hz samples (scripts/stress_daemon.sh)"
    sh scripts/stress_daemon.sh "$BUILD" "${DAEMON_RUNS:-200}" 6 ||
        echo "daemon_fds: FAILED: damaged files or failed runs above"
}

# True when nvtx_stress is built; else says the section is skipped.
have_stress() {
    [ -x "$BUILD/tests/bin/nvtx_stress" ] && return 0
    echo "skipped: nvtx_stress not built (no NVTX headers)"
    return 1
}

# True when /usr/bin/python3 has torch; else says the section is skipped.
have_torch() {
    /usr/bin/python3 -c "import torch" 2>/dev/null && return 0
    echo "skipped: /usr/bin/python3 has no torch (apt-get install python3-torch)"
    return 1
}

# CPU sampling in a Python training loop: no sampling, the default (CPU
# time, 99 Hz), the wall clock at 99 Hz, both clocks at 999 Hz; alone, then
# beside two Python threads that sleep 5 ms at a time
# (tests/bench/bench_sampler_py.py). Needs torch for /usr/bin/python3.
section_sampler_py() {
    echo "==== CPU sampling in Python (tests/bench/bench_sampler_py.py)"
    have_torch || return 0
    /usr/bin/python3 tests/bench/bench_sampler_py.py --prof "$BUILD/bin/prof" \
        --rounds "${BENCH_ROUNDS:-5}"
    /usr/bin/python3 tests/bench/bench_sampler_py.py --prof "$BUILD/bin/prof" \
        --rounds "${BENCH_ROUNDS:-5}" --sleepers 2 --modes off,wall99,wall999
}

# ---- torch (issue 6): profhost against torch.profiler on one CPU training
# loop, side by side (tests/bench/bench_torch.py). Needs torch for
# /usr/bin/python3 (Debian's python3-torch). docs/performance.md, "Python:
# profhost vs torch.profiler", says how to read it.
section_torch() {
    echo "==== torch: profhost vs torch.profiler (tests/bench/bench_torch.py)"
    have_torch || return 0
    /usr/bin/python3 tests/bench/bench_torch.py --prof "$BUILD/bin/prof" \
        --rounds "${BENCH_ROUNDS:-5}" --json "$BUILD/bench_torch.json"
}

# ---- torch operators (issue 16): ns per operator with no profiler,
# torch.profiler and profhost's RecordFunction observer, record_shapes off
# and on, interleaved in one process per setting
# (tests/bench/bench_torch_ops.py). TORCH_OPS_BEFORE=<build dir of another
# commit> runs that build's observer beside this one. docs/performance.md,
# "Python: torch operators", says how to read it. About 2 minutes on 2
# busy cores with the defaults.
section_torch_ops() {
    echo "==== torch operators: ns per operator (tests/bench/bench_torch_ops.py)"
    have_torch || return 0
    /usr/bin/python3 tests/bench/bench_torch_ops.py --prof "$BUILD/bin/prof" \
        --rounds "${BENCH_ROUNDS:-3}" ${TORCH_OPS_BEFORE:+--before "$TORCH_OPS_BEFORE/bin/prof"} \
        --json "$BUILD/bench_torch_ops.json"
}

# The recorder's cost in a PyTorch CPU loop: profhost idle vs the recorder
# on, side by side (tests/bench/bench_torch.py --recorder).
section_recorder_torch() {
    echo "==== torch: the flight recorder on vs off, paired in each process (tests/bench/bench_torch.py --recorder)"
    have_torch || return 0
    /usr/bin/python3 tests/bench/bench_torch.py --prof "$BUILD/bin/prof" --recorder \
        --rounds "${BENCH_ROUNDS:-20}" --pairs "${BENCH_PAIRS:-10}" \
        --rec-steps "${BENCH_REC_STEPS:-20}" --json "$BUILD/bench_recorder_torch.json"
    # the step phases' own share (#29), the recorder on throughout
    /usr/bin/python3 tests/bench/bench_torch.py --prof "$BUILD/bin/prof" --phases-cost \
        --rounds 3 --rec-steps "${BENCH_REC_STEPS:-20}"
}

# ---- torch memory (issue 26): prof.capture{ profile_memory } against
# torch.profiler's profile_memory on the training loop (recorded steps on
# three clocks, whole run), per allocation on torch.add, and the recorder
# keeping operators and allocations. docs/performance.md, "Python: memory",
# says how to read it.
section_torch_memory() {
    echo "==== torch memory: profile_memory, profhost vs torch.profiler (tests/bench/bench_torch.py --memory)"
    have_torch || return 0
    /usr/bin/python3 tests/bench/bench_torch.py --prof "$BUILD/bin/prof" --memory \
        --rounds "${BENCH_ROUNDS:-5}" --json "$BUILD/bench_torch_memory.json"
    /usr/bin/python3 tests/bench/bench_torch.py --prof "$BUILD/bin/prof" --ops \
        --rounds "${BENCH_ROUNDS:-5}" --json "$BUILD/bench_torch_memory_ops.json"
    /usr/bin/python3 tests/bench/bench_torch_ops.py --prof "$BUILD/bin/prof" --memory \
        --rounds "${BENCH_ROUNDS:-3}" --json "$BUILD/bench_torch_ops_memory.json"
    /usr/bin/python3 tests/bench/bench_torch.py --prof "$BUILD/bin/prof" --recorder --memory \
        --rounds "${BENCH_ROUNDS:-3}" --json "$BUILD/bench_recorder_torch_memory.json"
}

# The recorder's default configuration against no profiler, as whole
# processes of 1,500 steps (tests/bench/bench_torch.py --recorder --whole):
# with two CPUs, two processes at a time side by side (--concurrent: 36
# rounds, about 6 minutes), else one after another (8 rounds, about 6
# minutes, and the A/A control shows that method's 2-3 % of noise).
section_recorder_whole() {
    echo "==== torch: the flight recorder against no profiler, whole processes (tests/bench/bench_torch.py --recorder --whole)"
    have_torch || return 0
    if [ "$(nproc)" -ge 2 ]; then
        /usr/bin/python3 tests/bench/bench_torch.py --prof "$BUILD/bin/prof" --recorder --whole \
            --concurrent --rounds "${BENCH_ROUNDS:-36}" --rec-steps "${BENCH_REC_STEPS:-20}" \
            --json "$BUILD/bench_recorder_whole.json"
    else
        /usr/bin/python3 tests/bench/bench_torch.py --prof "$BUILD/bin/prof" --recorder --whole \
            --rounds "${BENCH_ROUNDS:-8}" --rec-steps "${BENCH_REC_STEPS:-20}" \
            --json "$BUILD/bench_recorder_whole.json"
    fi
}

# The phases a recorder dump keeps between windows against a window's
# (tests/bench/bench_torch.py --phases-check): within 10 % per phase.
section_recorder_phases() {
    echo "==== torch: a recorder dump's step phases against a window's (tests/bench/bench_torch.py --phases-check)"
    have_torch || return 0
    /usr/bin/python3 tests/bench/bench_torch.py --prof "$BUILD/bin/prof" --phases-check \
        --rounds "${BENCH_ROUNDS:-5}" --json "$BUILD/bench_recorder_phases.json"
}

# What each possible source of the step phases costs torch itself
# (tests/bench/bench_phase_sources.py: no profhost in it).
section_phase_sources() {
    echo "==== torch: the cost of each source of step phases (tests/bench/bench_phase_sources.py)"
    have_torch || return 0
    /usr/bin/python3 tests/bench/bench_phase_sources.py --cycles "${BENCH_CYCLES:-21}" --n 1000
}

build
for s in ${*:-$SECTIONS}; do
    "section_$s"
done

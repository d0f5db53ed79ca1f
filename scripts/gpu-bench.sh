#!/bin/sh
# profhost against torch.profiler (Kineto) on a GPU training loop, for a
# machine with an NVIDIA GPU, its driver, CUDA 13 and a CUDA-capable torch
# 2.x in python3 (tests/bench/bench_gpu.py is the benchmark; its docstring
# says what it measures).
#
#   scripts/gpu-bench.sh [OPTION...] [build-dir]
#   scripts/gpu-bench.sh [OPTION...] --prebuilt PREFIX
#   scripts/gpu-bench.sh --dry-run [OPTION...] [build-dir]
#
# --prebuilt: a GPU machine without the build's dependencies runs a
# profhost built elsewhere, as scripts/gpu-smoke.sh --prebuilt does: PREFIX
# is its `cmake --install` prefix (its shared libraries found through
# LD_LIBRARY_PATH). Without it the script builds in build-dir (build-gpu).
# --dry-run: the CPU parts, for CI (no build, no GPU): the loop on the CPU
# under torch.profiler as this torch has it and under profhost, the
# comparison's self-test, and the comparison on the CUPTI fake's trace
# where build-dir has the fake; build-dir defaults to $PROFHOST_BUILD, else
# build. Exits non-zero when any of it fails.
# Options passed on to the benchmark:
#   --rounds N     interleaved rounds (3; dry run 1)
#   --steps N      steps a process (70; dry run 20)
#   --second graphs|compile|none
#                  the second variant of the loop (graphs: the whole step
#                  captured in a CUDA graph; compile: torch.compile)
#   --budget-s S   no round starts that would end past S seconds (420:
#                  the whole stays under 8 minutes; dry run 80)
#   --python PY    the Python with torch (python3; dry run /usr/bin/python3)
#   --keep DIR     keep the runs' traces in DIR
#   --json FILE    also write the results as JSON
# It prints the command, the machine and the results in a form to paste
# into docs/gpu.md; exits non-zero when a process failed or a trace is
# missing (a target not met is a result, printed as "NOT met").
set -eu
cd "$(dirname "$0")/.."
build='' prebuilt='' dry='' python=''
cmdline="scripts/gpu-bench.sh $*"
set -- "$@" --end-of-options
while [ "$1" != --end-of-options ]; do
    case $1 in
    --dry-run) dry=1; shift ;;
    --prebuilt|--python|--rounds|--steps|--second|--budget-s|--keep|--json)
        if [ $# -lt 3 ] || [ "$2" = --end-of-options ]; then
            echo "gpu-bench: $1 needs a value (see the comment at the top of $0)"
            exit 2
        fi
        case $1 in
        --prebuilt) prebuilt=$2 ;;
        --python) python=$2 ;;
        *) set -- "$@" "$1" "$2" ;;
        esac
        shift 2 ;;
    -*) echo "gpu-bench: unknown option '$1' (see the comment at the top of $0)"; exit 2 ;;
    *) build=$1; shift ;;
    esac
done
shift  # --end-of-options: what is left are the options for the benchmark

if [ -n "$dry" ]; then
    [ -n "$prebuilt" ] && { echo "gpu-bench: --dry-run takes a build-dir, not --prebuilt"; exit 2; }
    build=${build:-${PROFHOST_BUILD:-build}}
    if [ -z "$python" ]; then
        python=python3
        [ -x /usr/bin/python3 ] && python=/usr/bin/python3
    fi
    set -- "$@" --dry-run
else
    if command -v nvidia-smi >/dev/null 2>&1; then
        nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader ||
            nvidia-smi -L || true
    else
        echo "gpu-bench: nvidia-smi not found; trying anyway"
    fi
    python=${python:-python3}
    if [ -n "$prebuilt" ]; then
        build=$prebuilt
    else
        build=${build:-build-gpu}
        echo "==== building in $build"
        cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
        cmake --build "$build" -j"$(nproc)" >/dev/null
    fi
fi
if [ ! -x "$build/bin/prof" ]; then
    echo "gpu-bench: no $build/bin/prof (build profhost first, or name its build tree or prefix)"
    exit 2
fi
commit=$(git describe --always --dirty --abbrev=7 2>/dev/null || echo "unknown (no git here)")
echo "profhost commit $commit, prof $build/bin/prof"
exec "$python" tests/bench/bench_gpu.py --prof "$build/bin/prof" --build "$build" \
    --python "$python" --command "$cmdline" "$@"

#!/bin/sh
# GPU smoke test, for a machine with an NVIDIA GPU, its driver and CUDA 13
# (the CI machines have none: there, tests run against the CUPTI fake).
#
#   scripts/gpu-smoke.sh [--keep DIR] [build-dir]
#   scripts/gpu-smoke.sh [--keep DIR] --prebuilt PREFIX
#
# --prebuilt: a GPU machine without the build's dependencies (Lua, cJSON,
# libunwind headers) runs a profhost built elsewhere: PREFIX is its
# `cmake --install` prefix with the built bin/cuda_app copied into
# PREFIX/bin (their shared libraries found through LD_LIBRARY_PATH).
# --keep: the captured output folders stay in DIR (else they are removed).
#
# Builds profhost (with examples/cuda_app.cu), then runs under `prof run`:
#   1. examples/cuda_app.cu, the native program;
#   2. a PyTorch CUDA training loop, when `python3 -c "import torch"` finds
#      a CUDA-capable torch (skipped, and said, otherwise);
#   2b. examples/cuda_app.cu again with no window and the flight recorder
#      on, dumping at step 12: the dump holds the GPU work of its steps;
#   2c. examples/cuda_app.cu with the recorder on, killed with SIGKILL:
#      `prof run` salvages the ring, and the salvaged window names the
#      kernels from the names kept in the salvage file (real libcupti's
#      name pointers, dead with the process);
#   2d. examples/cuda_app.cu ending while a window records: the window
#      is written before the CUDA runtime's exit handler (after it, a
#      CUPTI call crashes the process);
#   2e. examples/cuda_app.cu with a kernel that spins ~4 s at step 10
#      and the watchdog at 1 s: the hang report lists that kernel in
#      flight on its stream and the open range around it;
#   3. examples/train.py (no profhost import) with record_shapes and
#      with_flops: optimizer steps, phases, torch's operator events (aten::
#      cpu_op with Input Dims, from profhost's RecordFunction observer) in
#      the trace and in key_averages.txt (Total FLOPs column), kernels linked
#      to the operators that launched them (External id), the summary's
#      FLOP/s per step as a share of the GPU's peak;
# and checks each trace (scripts/gpu_smoke_check.py): kernels, copies with
# bandwidth, ac2g arrows from launches to kernels, named GPU tracks, device
# properties, no GPU record dropped, ranges linked to their kernels.
# Exits non-zero when a check fails.
set -eu
cd "$(dirname "$0")/.."
build=build-gpu prebuilt= keep=
while [ $# -gt 0 ]; do
    case $1 in
    --prebuilt) prebuilt=${2:?"--prebuilt needs the install prefix"}; shift 2 ;;
    --keep) keep=${2:?"--keep needs a folder"}; shift 2 ;;
    -*) echo "gpu-smoke: unknown option '$1' (see the comment at the top of $0)"; exit 2 ;;
    *) build=$1; shift ;;
    esac
done
jobs=$(nproc)
if [ -n "$keep" ]; then
    mkdir -p "$keep"
    tmp=$(cd "$keep" && pwd)
else
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
fi
status=0

command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L || echo "gpu-smoke: nvidia-smi not found; trying anyway"

if [ -n "$prebuilt" ]; then
    build=$prebuilt
else
    echo "==== building in $build"
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    cmake --build "$build" -j"$jobs" >/dev/null
fi
if [ ! -x "$build/bin/cuda_app" ]; then
    echo "gpu-smoke: $build/bin/cuda_app was not built (is nvcc on PATH?)"
    exit 1
fi
prof="$build/bin/prof"

# check_app NAME POLICY [CHECK OPTION...]: runs cuda_app for 20 steps
# under POLICY, output in $tmp/NAME, and checks that output's kernels,
# copies and range links (scripts/gpu_smoke_check.py).
check_app() {
    name=$1 policy=$2
    shift 2
    if "$prof" run -s "$policy" -o "$tmp/$name" -- "$build/bin/cuda_app" 20; then
        python3 scripts/gpu_smoke_check.py "$tmp/$name" --copies \
            --kernel saxpy --kernel block_sum --kernel scale \
            --range forward --nvtx-range nvtx_forward "$@" || status=1
    else
        echo "FAIL cuda_app under $policy exited with $?"
        status=1
    fi
}
cat > "$tmp/policy.lua" <<'EOF'
prof.schedule { skip_first = 2, wait = 1, warmup = 1, active = 3, cycles = 2 }
prof.export { chrome = { gzip = true } }
EOF

echo "==== examples/cuda_app.cu"
check_app native "$tmp/policy.lua" --min-windows 2

echo "==== examples/cuda_app.cu, the flight recorder's dump (no window)"
cat > "$tmp/recorder.lua" <<'EOF'
prof.recorder { steps = 6 }
prof.on_step(function(s)
  if s.step == 12 then prof.dump { steps = 3, reason = "gpu-smoke" } end
end)
EOF
check_app recorder "$tmp/recorder.lua" --dumps

echo "==== examples/cuda_app.cu killed with SIGKILL, the recorder on: the salvage"
# Default CUPTI buffers and 100 steps kept: CUPTI hands a buffer over when
# it is full, so the host thread flushes it at each rotation of the
# recorder's segments; without that the salvage held no kernel (as in
# e2e_cupti_recorder's SalvageGpu).
printf 'prof.recorder { steps = 100 }\n' > "$tmp/salvage.lua"
"$prof" run -s "$tmp/salvage.lua" -o "$tmp/salvage" -- "$build/bin/cuda_app" 100000000 &
run_pid=$!
sleep 5
pkill -KILL -P "$run_pid" || true  # the target, prof run's child
rc=0
wait "$run_pid" || rc=$?
if [ "$rc" -eq 137 ]; then
    python3 scripts/gpu_smoke_check.py "$tmp/salvage" --dumps --copies \
        --kernel saxpy --kernel block_sum --kernel scale \
        --range forward --nvtx-range nvtx_forward || status=1
else
    echo "FAIL prof run of the killed cuda_app exited with $rc (137 expected)"
    status=1
fi

echo "==== examples/cuda_app.cu ends while a window records: the exit path writes it"
printf 'prof.schedule { skip_first = 2, active = 1000 }\n' > "$tmp/atexit.lua"
check_app atexit "$tmp/atexit.lua"

echo "==== examples/cuda_app.cu stuck in a kernel: the watchdog's hang report"
cat > "$tmp/hang.lua" <<'EOF'
prof.recorder { steps = 6 }
prof.watchdog { after_s = 1, factor = 10 }
EOF
if "$prof" run -s "$tmp/hang.lua" -o "$tmp/hang" -- "$build/bin/cuda_app" 14 hang; then
    rep=$(ls -d "$tmp"/hang/*/rank0/hang*_step*/hang_report.txt 2>/dev/null | head -1)
    if [ -z "$rep" ]; then
        echo "FAIL no hang report under $tmp/hang"
        status=1
    elif grep -q 'GPU [0-9]*, stream' "$rep" && grep -q '`spin' "$rep" && grep -q 'stuck' "$rep"; then
        echo "ok   hang report: the spinning kernel in flight, inside 'stuck'"
        sed -n '/^GPU/,/^$/p' "$rep"
    else
        echo "FAIL the hang report does not list the kernel 'spin' in flight inside 'stuck':"
        cat "$rep"
        status=1
    fi
else
    echo "FAIL cuda_app hang exited with $?"
    status=1
fi

echo "==== PyTorch"
if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    cat > "$tmp/train.py" <<'EOF'
import torch, profhost
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                            torch.nn.Linear(4096, 1024)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x_cpu = torch.randn(256, 1024).pin_memory()
for step in range(20):
    x = x_cpu.to("cuda", non_blocking=True)
    with profhost.range("forward"):
        torch.cuda.nvtx.range_push("nvtx_forward")
        loss = model(x).square().mean()
        torch.cuda.nvtx.range_pop()
    loss.backward()
    opt.step()
    opt.zero_grad()
    loss.item()  # a DtoH copy and a sync
    profhost.step()
print("train.py: done")
EOF
    if "$prof" run -s "$tmp/policy.lua" -o "$tmp/torch" -- python3 "$tmp/train.py"; then
        python3 scripts/gpu_smoke_check.py "$tmp/torch" --min-windows 2 --copies \
            --kernel gemm --range forward --nvtx-range nvtx_forward || status=1
    else
        echo "FAIL the PyTorch loop exited with $?"
        status=1
    fi
else
    echo "skip: no CUDA-capable PyTorch in python3"
fi

echo "==== examples/train.py: steps with no code change, phases, torch's operator events"
if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    cat > "$tmp/ops.lua" <<'EOF'
prof.schedule { skip_first = 5, wait = 2, warmup = 1, active = 3, cycles = 1 }
prof.capture { record_shapes = true, with_flops = true }
EOF
    if "$prof" run -s "$tmp/ops.lua" -o "$tmp/ops" -- python3 examples/train.py --device cuda --steps 30; then
        python3 - "$tmp/ops" <<'PYEOF' || status=1
import glob, gzip, json, os, sys
d = sorted(glob.glob(os.path.join(sys.argv[1], "*", "rank0", "window*")))[0]
path = os.path.join(d, "trace.json")
t = json.load(open(path) if os.path.exists(path) else gzip.open(path + ".gz"))
ops = [e for e in t["traceEvents"] if e.get("cat") == "cpu_op" and e["name"].startswith("aten::")]
shaped = [e for e in ops if "Input Dims" in e.get("args", {})]
kernels = [e for e in t["traceEvents"] if e.get("cat") == "kernel"]
# The data phase is written under torch's DataLoader label (docs/python.md).
phases = {"data" if e.get("name", "").startswith("enumerate(DataLoader)#") else e.get("name")
          for e in t["traceEvents"] if e.get("ph") == "X"} & {"data", "forward", "backward", "optimizer"}
table = open(os.path.join(d, "key_averages.txt")).read()
summary = open(os.path.join(d, "summary.txt")).read()
op_ids = {e["args"].get("External id") for e in ops}
linked = [k for k in kernels if k.get("args", {}).get("External id") in op_ids]
flops = [e for e in ops if "flops" in e.get("args", {})]
ok = (ops and shaped and kernels and phases == {"data", "forward", "backward", "optimizer"}
      and "aten::" in table and linked and flops and "FLOPs" in table.splitlines()[1]
      and "of peak" in summary and "RecordFunction observer" in summary)
print("%s aten:: cpu_op events: %d (%d with Input Dims, %d with flops), kernels: %d "
      "(%d linked to an operator), phases: %s, peak share in summary: %s" %
      ("ok  " if ok else "FAIL", len(ops), len(shaped), len(flops), len(kernels), len(linked),
       sorted(phases), "of peak" in summary))
sys.exit(0 if ok else 1)
PYEOF
    else
        echo "FAIL examples/train.py exited with $?"
        status=1
    fi
else
    echo "skip: no CUDA-capable PyTorch in python3"
fi

[ $status -eq 0 ] && echo "==== gpu-smoke: passed" || echo "==== gpu-smoke: FAILED"
exit $status

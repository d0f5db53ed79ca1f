"""profhost against torch.profiler (Kineto) on a GPU training loop (not a test).

scripts/gpu-bench.sh runs it (see there for --prebuilt); by hand:

    python3 tests/bench/bench_gpu.py --prof build/bin/prof [--rounds 3] [--steps 70]
    /usr/bin/python3 tests/bench/bench_gpu.py --prof build/bin/prof --dry-run

The loop: a small transformer (token and position embeddings, causal
self-attention, MLP, LayerNorm), AdamW, mixed precision (autocast to
bfloat16; float16 with a GradScaler where the GPU has no bfloat16), each
step ending with torch.cuda.synchronize(). Two variants: `eager`, and a
second one (--second): `graphs`, the whole step (forward, backward, AdamW
with capturable=True) captured once in a CUDA graph and replayed, or
`compile`, the model through torch.compile. Each variant runs three ways,
each in a fresh process, the three interleaved for --rounds rounds:

  none      no profiler
  torch     torch.profiler: CPU and CUDA activities, record_shapes, the
            schedule below, each window exported as a Chrome trace
  profhost  `prof run` with the same schedule, prof.capture{ record_shapes
            = true } (operators with their shapes) and GPU capture
            (CUPTI, on by default)

Per window (round by round) it compares the two traces: operator events
(cpu_op; profhost's count within 2 % of Kineto's), kernel events (equal
counts), and the GPU time per kernel name (each within 5 %). Per variant:
the median step time over all steps, the recorded steps and the steps
after the last window; each profiler's recorded-step overhead over `none`
and its whole-run extra time (the process's wall time over `none`'s), and
the ratio profhost / Kineto of both. Then the flight recorder always on
(prof.recorder{}: its cost per step, bench_torch.py's paired method: one
process a round switching it off and on in blocks of steps), and
profile_memory (skipped: profhost has none yet).

--dry-run runs the same code paths on the CPU, for CI: the loop on the
CPU (autocast to bfloat16 on the CPU when torch has it), torch.profiler as
this torch provides it (without Kineto, its legacy autograd profiler: the
output says which), the second variant skipped with a line, a self-test
of the trace comparison on made-up Kineto and profhost traces (one that
must pass, one that must fail on each criterion), and, where the build has
the CUPTI fake, the comparison run on a real profhost trace of
tests/e2e/workloads/cuda_fake_app (kernels with known counts and
durations). A dry run exits non-zero when any of that fails (77, ctest's
"skipped", when the Python has no torch); a GPU run
when a process fails or a trace is missing (a criterion not met is a
result, printed, not a failure).

The worker (--worker MODE) runs the loop and writes every step's time as
JSON; --info prints what the Python's torch has. Standard library only in
the runner.
"""

import argparse
import glob
import gzip
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_torch  # noqa: E402  (the schedule's actions and the paired recorder method)

# The schedules (torch.profiler.schedule's names): two windows each.
GPU_SCHEDULE = dict(skip_first=10, wait=5, warmup=5, active=10, repeat=2)
DRY_SCHEDULE = dict(skip_first=3, wait=2, warmup=1, active=3, repeat=2)
GPU_STEPS, DRY_STEPS = 70, 20
GPU_MODEL = dict(vocab=8192, dim=512, heads=8, layers=4, seq=256, batch=16)
DRY_MODEL = dict(vocab=256, dim=32, heads=2, layers=2, seq=16, batch=4)
# The recorder's paired runs: steps with it on first, then blocks of steps
# off-on, on-off, ... (bench_torch.PAIRED_POLICY).
GPU_PAIRED = dict(warmup=20, block=10, pairs=4)
DRY_PAIRED = dict(warmup=4, block=3, pairs=2)
REC_STEPS = 6  # prof.recorder{ steps }, as bench_torch.py --recorder
SKIP = 77  # a dry run without torch: ctest's SKIP_RETURN_CODE

OPS_TOLERANCE = 0.02     # profhost's operator count against Kineto's
TIME_TOLERANCE = 0.05    # GPU time per kernel name
# record_function labels in torch's legacy (pre-Kineto) export, which has
# no categories: everything else there is an operator.
LEGACY_LABELS = ("ProfilerStep#", "Optimizer.", "enumerate(DataLoader)#", "## ")


# ---------------------------------------------------------------- the worker

def amp_setup(torch, device, variant):
    """(autocast context factory, GradScaler or None, description)."""
    import contextlib

    if device == "cpu":
        try:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                torch.ones(2, 2) @ torch.ones(2, 2)
        except (RuntimeError, AttributeError, TypeError) as e:
            return contextlib.nullcontext, None, "off (autocast on the CPU: %s)" % e
        return (lambda: torch.autocast("cpu", dtype=torch.bfloat16)), None, \
            "autocast cpu bfloat16"
    # in a captured graph autocast's cast cache must be off (torch.cuda.graph's docs)
    cache = variant != "graphs"
    if torch.cuda.is_bf16_supported():
        return (lambda: torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=cache)), \
            None, "autocast cuda bfloat16"
    if variant == "graphs":
        return contextlib.nullcontext, None, "off (no bfloat16 on this GPU; a GradScaler " \
            "does not go into a captured graph)"
    return (lambda: torch.autocast("cuda", dtype=torch.float16)), \
        torch.cuda.amp.GradScaler(), "autocast cuda float16 with a GradScaler"


def build_model(torch, cfg):
    """The transformer: embeddings, `layers` pre-norm blocks of causal
    self-attention and a GELU MLP, a LayerNorm and the output head."""
    nn = torch.nn
    F = torch.nn.functional
    sdpa = getattr(F, "scaled_dot_product_attention", None)

    class Block(nn.Module):
        def __init__(self, d, h):
            super().__init__()
            self.h = h
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.h, d // self.h) \
                .permute(2, 0, 3, 1, 4)
            if sdpa is not None:
                a = sdpa(q, k, v, is_causal=True)
            else:  # torch 1.13
                att = (q @ k.transpose(-2, -1)) * (d // self.h) ** -0.5
                mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
                a = att.masked_fill(mask, float("-inf")).softmax(-1) @ v
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(cfg["vocab"], cfg["dim"])
            self.pos = nn.Embedding(cfg["seq"], cfg["dim"])
            self.blocks = nn.ModuleList(Block(cfg["dim"], cfg["heads"])
                                        for _ in range(cfg["layers"]))
            self.ln = nn.LayerNorm(cfg["dim"])
            self.head = nn.Linear(cfg["dim"], cfg["vocab"])

        def forward(self, idx):
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.ln(x))

    return Model(), ("scaled_dot_product_attention" if sdpa is not None
                     else "matmul, masked softmax, matmul")


def worker(args):
    """One process: the loop of --variant on --device for --steps steps in
    MODE (none, torch, profhost, paired; profhost and paired run under
    `prof run`); writes each step's wall and process CPU time and what ran
    to --out."""
    import torch

    F = torch.nn.functional
    dry = args.dry_run
    cfg = DRY_MODEL if dry else GPU_MODEL
    sched = DRY_SCHEDULE if dry else GPU_SCHEDULE
    device = "cpu" if dry else "cuda"
    cuda = device == "cuda"
    variant = args.variant
    if dry:
        torch.set_num_threads(1)
    torch.manual_seed(0)
    model, attention = build_model(torch, cfg)
    model = model.to(device)
    amp, scaler, amp_what = amp_setup(torch, device, variant)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, capturable=variant == "graphs")
    gen = torch.Generator().manual_seed(1)
    batches = []
    for _ in range(8):
        xy = torch.randint(0, cfg["vocab"], (2, cfg["batch"], cfg["seq"]), generator=gen)
        batches.append((xy[0].pin_memory(), xy[1].pin_memory()) if cuda else (xy[0], xy[1]))

    def loss_of(x, y):
        with amp():
            logits = model(x)
            return F.cross_entropy(logits.float().flatten(0, 1), y.flatten())

    manual = None
    if variant == "graphs" and args.worker in ("profhost", "paired"):
        # a replay calls no optimizer.step(): the steps are profhost.step()
        import profhost

        profhost.manual_steps()
        manual = profhost.step
    if variant == "compile":
        model = torch.compile(model)
    graph = None
    if variant == "graphs":
        static_x = batches[0][0].to(device)
        static_y = batches[0][1].to(device)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):  # warm-up iterations before the capture
                opt.zero_grad(set_to_none=True)
                loss_of(static_x, static_y).backward()
                opt.step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            static_loss = loss_of(static_x, static_y)
            static_loss.backward()
            opt.step()
        torch.cuda.synchronize()

    prof = None
    profiler = "none"
    if args.worker == "torch":
        from torch.profiler import ProfilerActivity, profile, schedule

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        n = [0]

        def ready(p):
            p.export_chrome_trace(os.path.join(args.trace_dir, "window%d.json" % n[0]))
            n[0] += 1

        prof = profile(activities=acts, record_shapes=True, schedule=schedule(**sched),
                       on_trace_ready=ready)
        kineto = getattr(torch.autograd, "kineto_available", lambda: True)()
        profiler = ("torch.profiler (Kineto), activities %s" % "+".join(
            a.name for a in acts)) if kineto else \
            "torch.profiler without Kineto (this torch has none): its legacy autograd " \
            "profiler, CPU only"
        prof.__enter__()

    times, cpu = [], []
    t0, c0 = time.perf_counter(), time.process_time()
    for s in range(args.steps):
        xb, yb = batches[s % len(batches)]
        if graph is not None:
            static_x.copy_(xb, non_blocking=True)
            static_y.copy_(yb, non_blocking=True)
            graph.replay()
        else:
            x, y = xb.to(device, non_blocking=True), yb.to(device, non_blocking=True)
            opt.zero_grad(set_to_none=True)
            loss = loss_of(x, y)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                opt.step()
        if cuda:
            torch.cuda.synchronize()  # the step's GPU work is in its time and its window
        if prof is not None:
            prof.step()
        if manual is not None:
            manual()
        t1, c1 = time.perf_counter(), time.process_time()
        times.append(t1 - t0)
        cpu.append(c1 - c0)
        t0, c0 = t1, c1
    if prof is not None:
        prof.__exit__(None, None, None)
    with open(args.out, "w") as f:
        json.dump({"mode": args.worker, "variant": variant, "times": times, "cpu": cpu,
                   "profiler": profiler, "amp": amp_what, "attention": attention}, f)


def info():
    """What this Python's torch has, as one JSON line."""
    import torch

    cuda = torch.cuda.is_available()
    print(json.dumps({
        "torch": torch.__version__, "cuda": cuda,
        "device": torch.cuda.get_device_name(0) if cuda else None,
        "cuda_version": torch.version.cuda,
        "kineto": getattr(torch.autograd, "kineto_available", lambda: True)(),
        "compile": hasattr(torch, "compile"),
        "graphs": cuda and hasattr(torch.cuda, "CUDAGraph"),
    }))


# ---------------------------------------------------------------- traces

def load_json(path):
    """A trace file, plain or gzipped, parsed."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        return json.loads(f.read().decode("utf-8"))


def window_stats(trace):
    """What a window's trace holds, for the comparisons: its form
    ('kineto' for a {"traceEvents": [...]} object, as Kineto and profhost
    write; 'legacy' for torch's pre-Kineto export, a bare list without
    categories), its operator events (cpu_op; in the legacy form every
    complete event but the record_function labels), its kernel events,
    and per kernel name the calls and total GPU time (µs)."""
    if isinstance(trace, dict):
        form, evs = "kineto", trace.get("traceEvents", [])
        ops = sum(1 for e in evs if e.get("cat") == "cpu_op")
        kernels = [e for e in evs if e.get("cat") == "kernel"]
    else:
        form, evs = "legacy", trace
        ops = sum(1 for e in evs if e.get("ph") == "X" and e.get("pid") != "CUDA functions"
                  and not e.get("name", "").startswith(LEGACY_LABELS))
        kernels = []
    per = {}
    for k in kernels:
        c = per.setdefault(k.get("name", "?"), [0, 0.0])
        c[0] += 1
        c[1] += float(k.get("dur", 0))
    return {"form": form, "ops": ops, "kernels": len(kernels),
            "per_kernel": {n: {"calls": c[0], "us": c[1]} for n, c in per.items()}}


def pct(a, b):
    """(a / b - 1) in percent; nan when b is 0."""
    return (a / b - 1) * 100 if b else float("nan")


def compare_window(kin, ph):
    """profhost's window (ph) against Kineto's (kin), both window_stats():
    the operator counts (within OPS_TOLERANCE), the kernel counts (equal,
    in all and name by name),
    and per kernel name the GPU time (within TIME_TOLERANCE; a name in one
    trace only is outside). Returns a dict of the figures and verdicts."""
    ops_ok = kin["ops"] > 0 and abs(ph["ops"] - kin["ops"]) <= OPS_TOLERANCE * kin["ops"]
    names = sorted(set(kin["per_kernel"]) | set(ph["per_kernel"]))
    total_k = sum(v["us"] for v in kin["per_kernel"].values())
    total_p = sum(v["us"] for v in ph["per_kernel"].values())
    rows = []
    for n in names:
        k = kin["per_kernel"].get(n, {"calls": 0, "us": 0.0})
        p = ph["per_kernel"].get(n, {"calls": 0, "us": 0.0})
        within = k["calls"] > 0 and p["calls"] > 0 and \
            abs(p["us"] - k["us"]) <= TIME_TOLERANCE * k["us"]
        rows.append({"name": n, "kineto_calls": k["calls"], "profhost_calls": p["calls"],
                     "kineto_us": k["us"], "profhost_us": p["us"], "within": within,
                     "share": max(k["us"], p["us"]) / max(total_k, total_p, 1e-9)})
    outside = [r for r in rows if not r["within"]]
    return {"ops_kineto": kin["ops"], "ops_profhost": ph["ops"],
            "ops_pct": pct(ph["ops"], kin["ops"]), "ops_ok": ops_ok,
            "kernels_kineto": kin["kernels"], "kernels_profhost": ph["kernels"],
            "kernels_ok": kin["kernels"] == ph["kernels"] and
            all(r["kineto_calls"] == r["profhost_calls"] for r in rows),
            "gpu_us_kineto": total_k, "gpu_us_profhost": total_p,
            "names": len(names), "outside": outside,
            "outside_share": sum(r["share"] for r in outside),
            "time_ok": bool(names) and not outside}


def verdict(ok):
    return "met" if ok else "NOT met"


def format_window(label, c, gpu=True, tlabel="Kineto"):
    """The lines printed for one window's comparison; tlabel names
    torch.profiler's side."""
    out = ["%s:" % label,
           "  operators  %s %7d  profhost %7d  %+6.2f %%  within 2 %%: %s"
           % (tlabel, c["ops_kineto"], c["ops_profhost"], c["ops_pct"], verdict(c["ops_ok"]))]
    if not gpu:
        out.append("  kernels    %s %7d  profhost %7d  (no GPU: not compared)"
                   % (tlabel, c["kernels_kineto"], c["kernels_profhost"]))
        return out
    out.append("  kernels    %s %7d  profhost %7d            equal: %s"
               % (tlabel, c["kernels_kineto"], c["kernels_profhost"], verdict(c["kernels_ok"])))
    out.append("  GPU time   %s %10.3f ms  profhost %10.3f ms  %+6.2f %%; %d kernel names, "
               "%d within 5 %%: %s" % (tlabel, c["gpu_us_kineto"] / 1e3, c["gpu_us_profhost"] / 1e3,
                                       pct(c["gpu_us_profhost"], c["gpu_us_kineto"]), c["names"],
                                       c["names"] - len(c["outside"]), verdict(c["time_ok"])))
    if c["outside"]:
        worst = sorted(c["outside"], key=lambda r: -r["share"])
        out.append("    outside 5 %% (%.2f %% of the GPU time): %s%s" % (
            100 * c["outside_share"], "; ".join(
                "%s %d/%d calls %.1f/%.1f us" % (r["name"][:60], r["kineto_calls"],
                                                r["profhost_calls"], r["kineto_us"],
                                                r["profhost_us"]) for r in worst[:5]),
            "; ..." if len(worst) > 5 else ""))
    return out


def profhost_windows(out_dir):
    """The trace files of profhost's windows under a `prof run -o` folder,
    by window index."""
    found = []
    for d in glob.glob(os.path.join(out_dir, "*", "rank0", "window*_steps*")):
        name = os.path.basename(d)
        for f in ("trace.json", "trace.json.gz"):
            if os.path.exists(os.path.join(d, f)):
                found.append((int(name[len("window"):name.index("_")]), os.path.join(d, f)))
                break
    return [p for _, p in sorted(found)]


def torch_windows(trace_dir):
    """The files torch.profiler's on_trace_ready wrote, by window index."""
    found = glob.glob(os.path.join(trace_dir, "window*.json"))
    return sorted(found, key=lambda p: int(os.path.basename(p)[len("window"):-len(".json")]))


# ---------------------------------------------------------------- step times

def step_parts(steps, sched):
    """The step indices the tables use: all, the recorded ones (and
    those of each window, record0, record1, ...), those after the last
    window (its export step left out) and the idle ones before the first
    window (the first two left out)."""
    actions = bench_torch.schedule_actions(steps, **sched)
    record = [i for i, a in enumerate(actions) if a == "record"]
    first = actions.index("warmup")
    out = {"all": list(range(steps)), "record": record,
           "after": list(range(record[-1] + 2, steps)), "before": list(range(2, first))}
    w = 0
    for i in record:
        if i - 1 not in record and i != record[0]:
            w += 1
        out.setdefault("record%d" % w, []).append(i)
    return out


def med_ms(xs):
    return statistics.median(xs) * 1e3 if xs else float("nan")


def overheads(runs, walls, parts):
    """runs: mode -> list of per-process step times (s); walls: mode ->
    list of whole-process wall times (s). Per mode the medians (ms) over
    every process's steps of each part, the recorded-step overhead over
    `none` (%, record_pct, and per window recordN_pct), the median
    whole-run time and its extra over `none`'s; and the ratios profhost /
    Kineto of these overheads (record, recordN, extra)."""
    rows = {}
    for m, procs in runs.items():
        r = {k: med_ms([p[i] for p in procs for i in idx]) for k, idx in parts.items()}
        r["run_s"] = statistics.median(walls[m]) if walls[m] else float("nan")
        rows[m] = r
    base = rows["none"]
    recs = [k for k in parts if k.startswith("record")]
    for m, r in rows.items():
        for k in recs:
            r[k + "_pct"] = pct(r[k], base[k])
        r["extra_s"] = r["run_s"] - base["run_s"]

    def ratio(a, b):
        return a / b if b > 0 else float("nan")

    ratios = {k: ratio(rows["profhost"][k + "_pct"], rows["torch"][k + "_pct"]) for k in recs}
    ratios["extra"] = ratio(rows["profhost"]["extra_s"], rows["torch"]["extra_s"])
    return rows, ratios


def format_overheads(rows, ratios, clock, tlabel="Kineto"):
    out = ["%-14s %11s %11s %11s %14s %10s %10s" % (
        "(" + clock + ")", "all steps", "recorded", "after last", "rec. overhead", "whole run",
        "extra")]
    for m, label in (("none", "none"), ("torch", tlabel), ("profhost", "profhost")):
        r = rows[m]
        out.append("%-14s %8.3f ms %8.3f ms %8.3f ms %13s %8.2f s %10s" % (
            label, r["all"], r["record"], r["after"],
            "-" if m == "none" else "%+.1f %%" % r["record_pct"], r["run_s"],
            "-" if m == "none" else "%+.2f s" % r["extra_s"]))
    out.append("profhost / %s: recorded-step overhead %.2f, whole-run extra time %.2f"
               % (tlabel, ratios["record"], ratios["extra"]))
    w = 0
    while "record%d" % w in ratios:
        k = "record%d" % w
        out.append("  window %d's recorded steps: none %.3f ms, %s %.3f ms (%+.1f %%), profhost "
                   "%.3f ms (%+.1f %%): ratio %.2f"
                   % (w, rows["none"][k], tlabel, rows["torch"][k], rows["torch"][k + "_pct"],
                      rows["profhost"][k], rows["profhost"][k + "_pct"], ratios[k]))
        w += 1
    return out


# ---------------------------------------------------------------- self-test

def synthetic(ops, kernels, labels=True, form="kineto"):
    """A made-up window trace: `ops` operators and `kernels` (name, calls,
    µs each), with the labels and categories that must not count."""
    evs = []
    t = 0.0
    if form == "legacy":
        if labels:
            evs += [{"name": "ProfilerStep#7", "ph": "X", "ts": 0, "dur": 1, "pid": "CPU functions"},
                    {"name": "Optimizer.step#AdamW.step", "ph": "X", "ts": 0, "dur": 1,
                     "pid": "CPU functions"},
                    {"name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
                     "ph": "X", "ts": 0, "dur": 1, "pid": "CPU functions"}]
        evs += [{"name": "aten::mm", "ph": "X", "ts": i, "dur": 1, "pid": "CPU functions"}
                for i in range(ops)]
        return evs
    if labels:
        evs += [{"name": "ProfilerStep#7", "cat": "user_annotation", "ph": "X", "ts": 0, "dur": 9},
                {"name": "forward", "cat": "user_annotation", "ph": "X", "ts": 0, "dur": 9},
                {"name": "cudaLaunchKernel", "cat": "cuda_runtime", "ph": "X", "ts": 0, "dur": 1},
                {"name": "ac2g", "cat": "ac2g", "ph": "s", "ts": 0, "id": 1},
                {"name": "ProfilerStep#7", "cat": "gpu_user_annotation", "ph": "X", "ts": 0,
                 "dur": 9}]
    evs += [{"name": "aten::addmm", "cat": "cpu_op", "ph": "X", "ts": i, "dur": 1}
            for i in range(ops)]
    for name, calls, us in kernels:
        for _ in range(calls):
            evs.append({"name": name, "cat": "kernel", "ph": "X", "ts": t, "dur": us})
            t += us
    return {"schemaVersion": 1, "traceEvents": evs}


def self_test(tmp):
    """The comparison and the tables on made-up traces with known answers.
    Returns the failures (strings); empty when all hold."""
    bad = []

    def check(what, got, want):
        if got != want:
            bad.append("%s: got %r, expected %r" % (what, got, want))

    kin = synthetic(1000, [("ampere_gemm", 40, 25.0), ("elementwise", 200, 2.0)])
    good = synthetic(990, [("ampere_gemm", 40, 25.5), ("elementwise", 200, 1.95)])
    path = os.path.join(tmp, "selftest.json.gz")
    with gzip.open(path, "wt") as f:
        json.dump(good, f)
    c = compare_window(window_stats(kin), window_stats(load_json(path)))
    check("operators counted (labels, API calls and flows left out)",
          (c["ops_kineto"], c["ops_profhost"]), (1000, 990))
    check("kernels counted", (c["kernels_kineto"], c["kernels_profhost"]), (240, 240))
    check("GPU time per trace (us)", (round(c["gpu_us_kineto"], 6),
                                      round(c["gpu_us_profhost"], 6)), (1400.0, 1410.0))
    check("a window within every target: verdicts", (c["ops_ok"], c["kernels_ok"], c["time_ok"]),
          (True, True, True))
    # 2 gemm fewer, 1 kernel more: the totals differ; the names' times
    # -5.5 %, +10 % and one name in profhost's trace only
    bad_tr = synthetic(975, [("ampere_gemm", 38, 24.87), ("elementwise", 200, 2.2),
                             ("only_here", 1, 3.0)])
    c = compare_window(window_stats(kin), window_stats(bad_tr))
    check("a window missing every target: verdicts", (c["ops_ok"], c["kernels_ok"], c["time_ok"]),
          (False, False, False))
    check("names outside 5 %", sorted(r["name"] for r in c["outside"]),
          ["ampere_gemm", "elementwise", "only_here"])
    check("operators -2.5 %", round(c["ops_pct"], 3), -2.5)
    text = "\n".join(format_window("w", c))
    for part in ("within 2 %: NOT met", "equal: NOT met", "3 kernel names, 0 within 5 %: NOT met",
                 "only_here 0/1 calls"):
        if part not in text:
            bad.append("the printed comparison lacks %r:\n%s" % (part, text))
    # exactly 2 % and exactly 5 % are within
    c = compare_window(window_stats(synthetic(100, [("k", 1, 100.0)])),
                       window_stats(synthetic(102, [("k", 1, 105.0)])))
    check("the tolerances' edges", (c["ops_ok"], c["time_ok"]), (True, True))
    leg = window_stats(synthetic(50, [], form="legacy"))
    check("legacy export: form and operators (labels left out)", (leg["form"], leg["ops"]),
          ("legacy", 50))
    # tables: 10 steps, recorded 4-5 (skip_first 2, wait 1, warmup 1, active 2, 1 cycle)
    sched = dict(skip_first=2, wait=1, warmup=1, active=2, repeat=1)
    parts = step_parts(10, sched)
    check("step parts", (parts["record"], parts["after"], parts["before"], parts["record0"]),
          ([4, 5], [7, 8, 9], [2], [4, 5]))
    two = step_parts(20, dict(skip_first=2, wait=1, warmup=1, active=2, repeat=2))
    check("step parts of two windows", (two["record"], two["record0"], two["record1"],
                                        two["after"]), ([4, 5, 8, 9], [4, 5], [8, 9],
                                                        list(range(11, 20))))
    base = [0.010] * 10
    slow = [0.010] * 10
    slow[4] = slow[5] = 0.015
    lite = [0.010] * 10
    lite[4] = lite[5] = 0.011
    rows, ratios = overheads({"none": [base, base], "torch": [slow, slow],
                              "profhost": [lite, lite]},
                             {"none": [10.0, 12.0], "torch": [15.0, 15.0],
                              "profhost": [12.0, 12.0]}, parts)
    check("recorded-step overheads (%)", (round(rows["torch"]["record_pct"], 6),
                                          round(rows["profhost"]["record_pct"], 6)), (50.0, 10.0))
    check("whole-run extra (s)", (rows["torch"]["extra_s"], rows["profhost"]["extra_s"]),
          (4.0, 1.0))
    check("ratios profhost / Kineto", (round(ratios["record"], 6), round(ratios["record0"], 6),
                                       round(ratios["extra"], 6)), (0.2, 0.2, 0.25))
    text = "\n".join(format_overheads(rows, ratios, "wall"))
    for part in ("+50.0 %", "+10.0 %", "+4.00 s", "recorded-step overhead 0.20, whole-run extra "
                 "time 0.25", "window 0's recorded steps: none 10.000 ms, Kineto 15.000 ms "
                 "(+50.0 %), profhost 11.000 ms (+10.0 %): ratio 0.20"):
        if part not in text:
            bad.append("the printed table lacks %r:\n%s" % (part, text))
    return bad


# ---------------------------------------------------------------- the fake

FAKE_SCENARIO = dict(steps=7, kernels=3, kernel_us=100, burst=2)
FAKE_POLICY = "prof.schedule { wait = 1, warmup = 1, active = 3, cycles = 1 }\n"


def fake_check(a, tmp):
    """The comparison on a real profhost trace of GPU work: cuda_fake_app
    on the CUPTI fake under `prof run`, its window (steps 2-4) against
    the Kineto-form trace those steps must give (per step 3 gemm_kernel of
    100 µs, one relu_kernel of 10 µs, 2 tiny_kernel of 1 µs, a graph of
    graph_k0..2 of 20 µs each). Returns (lines, failures), or (lines, None)
    when the build has no fake."""
    app = os.path.join(a.build, "tests", "bin", "cuda_fake_app")
    fake = os.path.join(a.build, "tests", "lib", "libcupti-fake.so")
    if not (os.path.exists(app) and os.path.exists(fake)):
        return ["fake: skipped: %s has no CUPTI fake (a -DPROFHOST_CUDA=OFF build)" % a.build], None
    policy = os.path.join(tmp, "fake.lua")
    with open(policy, "w") as f:
        f.write(FAKE_POLICY)
    out = os.path.join(tmp, "fake_out")
    shutil.rmtree(out, ignore_errors=True)  # a --keep folder used before
    s = FAKE_SCENARIO
    cmd = [a.prof, "run", "-s", policy, "-o", out, "--", app, "--steps", str(s["steps"]),
           "--kernels", str(s["kernels"]), "--kernel-us", str(s["kernel_us"]),
           "--burst", str(s["burst"]), "--graph"]
    r = subprocess.run(cmd, env=child_env(a, {"PROF_CUPTI_LIB": fake}), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
    if r.returncode:
        return [], ["fake: %s exited with %d:\n%s" % (" ".join(cmd), r.returncode, r.stderr)]
    wins = profhost_windows(out)
    if len(wins) != 1:
        return [], ["fake: %d windows under %s, expected 1" % (len(wins), out)]
    active = 3
    want = [("gemm_kernel", active * s["kernels"], float(s["kernel_us"])),
            ("relu_kernel", active, 10.0), ("tiny_kernel", active * s["burst"], 1.0)] + \
        [("graph_k%d" % i, active, 20.0) for i in range(3)]
    ph = window_stats(load_json(wins[0]))
    ph["ops"] = 1  # a C program: no operators
    kin = window_stats(synthetic(1, want, labels=False))
    c = compare_window(kin, ph)
    lines = ["fake: cuda_fake_app on the CUPTI fake under prof run, window steps 2-4, against "
             "the Kineto-form trace its scenario gives (a C program: no operators):"] + \
        format_window("fake window", c)[2:]
    bad = []
    if not (c["kernels_ok"] and c["time_ok"]) or c["kernels_profhost"] != sum(w[1] for w in want):
        bad.append("fake: profhost's window of the fake's kernels does not compare as the "
                   "scenario says: %s" % json.dumps(c))
    # one gemm_kernel fewer and relu_kernel 10 % longer: both must be caught
    off = window_stats(synthetic(1, [(n, k - (n == "gemm_kernel"), us * (1.1 if n == "relu_kernel"
                                                                           else 1.0))
                                     for n, k, us in want], labels=False))
    c2 = compare_window(off, ph)
    if c2["kernels_ok"] or sorted(r["name"] for r in c2["outside"]) != ["gemm_kernel",
                                                                         "relu_kernel"]:
        bad.append("fake: a trace with one gemm_kernel fewer and relu_kernel 10 %% longer "
                   "compared as %s" % json.dumps(c2))
    else:
        lines.append("  the same window against a trace with one gemm_kernel fewer and "
                     "relu_kernel 10 % longer: kernels NOT met, outside 5 %: gemm_kernel, "
                     "relu_kernel (as it must)")
    return lines, bad


# ---------------------------------------------------------------- the runner

def child_env(a, extra=None):
    """The environment of a child: no inherited PROF_* or LD_PRELOAD; in
    a sanitizer build, options that let the instrumented libprofhost.so
    load into an uninstrumented program (as tests/e2e/harness.py)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PROF_") and k != "LD_PRELOAD"}
    if os.environ.get("PROFHOST_SANITIZE"):
        env["ASAN_OPTIONS"] = "verify_asan_link_order=0:detect_leaks=0"
        env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
    env.update(extra or {})
    return env


POLICY = """-- bench_gpu.py: the same schedule as torch.profiler.schedule(%(s)s)
prof.schedule { skip_first = %(skip_first)d, wait = %(wait)d, warmup = %(warmup)d,
                active = %(active)d, cycles = %(repeat)d }
prof.capture { record_shapes = true }
"""


class Runner:
    """Runs workers, keeps their outputs under one folder."""

    def __init__(self, a, work):
        self.a = a
        self.work = work
        self.failures = []
        self.notes = {}  # what profhost said about itself, once each (paths aside)

    def run(self, mode, variant, tag, steps, extra_env=None):
        """One worker process; returns (its JSON, wall s, its folder) or
        None when it failed (said in self.failures)."""
        a = self.a
        d = os.path.join(self.work, variant, tag, mode)
        shutil.rmtree(d, ignore_errors=True)  # a --keep folder used before
        os.makedirs(d)
        out = os.path.join(d, "steps.json")
        cmd = [a.python, os.path.abspath(__file__), "--worker", mode, "--out", out,
               "--steps", str(steps), "--variant", variant, "--trace-dir", d] + \
            (["--dry-run"] if a.dry_run else [])
        env = child_env(a, extra_env)
        if mode in ("profhost", "paired"):
            policy = os.path.join(d, "policy.lua")
            with open(policy, "w") as f:
                if mode == "paired":
                    p = DRY_PAIRED if a.dry_run else GPU_PAIRED
                    f.write(bench_torch.PAIRED_POLICY.replace("@K@", str(p["block"]))
                            .replace("@W@", str(p["warmup"])).replace("@STEPS@", str(REC_STEPS))
                            .replace("@PHASES@", ""))
                else:
                    sched = DRY_SCHEDULE if a.dry_run else GPU_SCHEDULE
                    f.write(POLICY % dict(sched, s=", ".join("%s=%d" % kv
                                                             for kv in sched.items())))
            if mode == "paired":
                env["PROF_LOG"] = "info"  # the hook's print() lines say where it switched
            cmd = [a.prof, "run", "-s", policy, "-o", os.path.join(d, "prof_out"), "--"] + cmd
        t0 = time.perf_counter()
        try:
            r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               universal_newlines=True, timeout=a.timeout)
        except subprocess.TimeoutExpired:
            self.failures.append("%s %s %s: no end after %d s: %s" % (
                variant, tag, mode, a.timeout, " ".join(map(shlex.quote, cmd))))
            return None
        wall = time.perf_counter() - t0
        with open(os.path.join(d, "stderr.txt"), "w") as f:
            f.write(r.stderr)
        if r.returncode or not os.path.exists(out):
            tail = "\n".join(r.stderr.splitlines()[-15:])
            self.failures.append("%s %s %s: exited with %d: %s\n%s" % (
                variant, tag, mode, r.returncode, " ".join(map(shlex.quote, cmd)), tail))
            return None
        with open(out) as f:
            got = json.load(f)
        got["stderr"] = r.stderr
        if mode == "profhost":
            # what profhost says beyond its windows: GPU capture off, drops, ...
            for line in r.stderr.splitlines():
                if line.startswith("profhost: ") and not line.startswith(("profhost: window ",
                                                                           "profhost: wrote ")):
                    self.notes.setdefault(re.sub(r"\S*/\S*", "/", line), line)
        return got, wall, d


def compare_round(runner, variant, rnd, dirs, nwin):
    """The per-window comparisons of one round's torch and profhost runs;
    a missing window is a failure."""
    kin = torch_windows(dirs["torch"])
    ph = profhost_windows(os.path.join(dirs["profhost"], "prof_out"))
    if len(kin) != nwin or len(ph) != nwin:
        runner.failures.append("%s round %d: %d torch.profiler windows under %s and %d profhost "
                               "windows "
                               "under %s, expected %d each" % (variant, rnd + 1, len(kin),
                                                               dirs["torch"], len(ph),
                                                               dirs["profhost"], nwin))
    if ph:
        summary = os.path.join(os.path.dirname(ph[0]), "summary.txt")
        if os.path.exists(summary):
            with open(summary) as f:
                for line in f:
                    if line.strip().startswith("operator events:"):
                        note = "profhost: %s (its summary)" % line.strip()
                        runner.notes.setdefault(note, note)
    out = []
    for w, (kp, pp) in enumerate(zip(kin, ph)):
        c = compare_window(window_stats(load_json(kp)), window_stats(load_json(pp)))
        c["window"] = w
        c["round"] = rnd
        out.append(c)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", choices=["none", "torch", "profhost", "paired"])
    p.add_argument("--out")
    p.add_argument("--trace-dir")
    p.add_argument("--info", action="store_true")
    p.add_argument("--dry-run", action="store_true",
                   help="the CPU parts, for CI: see the docstring")
    p.add_argument("--rounds", type=int, help="interleaved rounds (3; dry run 1)")
    p.add_argument("--steps", type=int,
                   help="steps a process (%d; dry run %d)" % (GPU_STEPS, DRY_STEPS))
    p.add_argument("--second", choices=["graphs", "compile", "none"], default="graphs",
                   help="the second variant (graphs: the whole step in a CUDA graph)")
    p.add_argument("--variant", default="eager", help=argparse.SUPPRESS)
    p.add_argument("--budget-s", type=float,
                   help="no round starts that would end past this many seconds (420; dry 80)")
    p.add_argument("--timeout", type=int, default=300, help="seconds a process (300)")
    p.add_argument("--prof", default=os.path.join(os.environ.get("PROFHOST_BUILD", "build"),
                                                  "bin", "prof"))
    p.add_argument("--build", help="the build tree with the CUPTI fake (dry run; default: "
                   "--prof's ../)")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--keep", help="keep the runs' folders (traces) here")
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--command", help=argparse.SUPPRESS)  # the command line to print
    a = p.parse_args()
    if a.info:
        info()
        return 0
    if a.worker:
        a.steps = a.steps or (DRY_STEPS if a.dry_run else GPU_STEPS)
        worker(a)
        return 0
    return bench(a)


def bench(a):
    dry = a.dry_run
    a.rounds = a.rounds or (1 if dry else 3)
    a.steps = a.steps or (DRY_STEPS if dry else GPU_STEPS)
    a.budget_s = a.budget_s or (80 if dry else 420)
    a.build = a.build or os.path.dirname(os.path.dirname(os.path.abspath(a.prof)))
    sched = DRY_SCHEDULE if dry else GPU_SCHEDULE
    parts = step_parts(a.steps, sched) if a.steps > 0 else None
    need = bench_torch.schedule_actions(10 ** 4, **sched)
    last = max(i for i, x in enumerate(need) if x == "record")
    if parts is None or a.steps < last + 4:
        print("bench_gpu: --steps %d is too few: the schedule %s records up to step %d, and "
              "the table needs steps after it (at least %d)" % (a.steps, sched, last, last + 4))
        return 2
    if a.rounds < 1:
        print("bench_gpu: --rounds %d: at least 1" % a.rounds)
        return 2
    if not os.access(a.prof, os.X_OK):
        print("bench_gpu: no prof at %s (--prof names the build's bin/prof)" % a.prof)
        return 2
    t_start = time.perf_counter()
    print("$ %s" % (a.command or " ".join(map(shlex.quote, sys.argv))))
    print("date %s, host %s, load average %s" % (
        time.strftime("%Y-%m-%d %H:%M:%S %Z"), os.uname().nodename, bench_torch.load_average()))
    r = subprocess.run([a.python, os.path.abspath(__file__), "--info"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True, env=child_env(a))
    if r.returncode:
        if dry and "No module named 'torch'" in r.stderr:
            # ctest counts this exit status as skipped (SKIP_RETURN_CODE)
            print("==== gpu-bench dry run: skipped: %s has no torch" % a.python)
            return SKIP
        print("bench_gpu: %s cannot import torch:\n%s" % (a.python, r.stderr))
        return 1
    ti = json.loads(r.stdout.strip().splitlines()[-1])
    print("torch %s (%s), %s; Kineto %s" % (
        ti["torch"], a.python, ("CUDA %s, %s" % (ti["cuda_version"], ti["device"])) if ti["cuda"]
        else "no CUDA", "available" if ti["kineto"] else "not built in"))
    if not dry and not ti["cuda"]:
        print("bench_gpu: %s has no CUDA-capable torch: run this on a GPU machine, or "
              "--dry-run" % a.python)
        return 1
    keep = a.keep
    if keep:
        os.makedirs(keep, exist_ok=True)
        work = os.path.abspath(keep)
    else:
        work = tempfile.mkdtemp(prefix="bench-gpu-")
    try:
        return bench_in(a, ti, work, sched, parts, t_start)
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


def bench_in(a, ti, work, sched, parts, t_start):
    dry = a.dry_run
    runner = Runner(a, work)
    result = {"command": a.command, "torch": ti, "steps": a.steps, "schedule": sched,
              "variants": {}}
    checks = []  # dry run: failures of what it checks

    print("\n== self-test of the comparison on made-up Kineto and profhost traces")
    bad = self_test(work)
    print("self-test: %s" % ("passed (a window within the targets, one missing each, the "
                             "tolerances' edges, the legacy export, the tables and ratios)"
                             if not bad else "FAILED:\n  " + "\n  ".join(bad)))
    checks += bad
    if dry:
        lines, bad = fake_check(a, work)
        print("\n".join(lines))
        checks += bad or []

    variants = ["eager"]
    second = a.second
    if second == "none":
        print("second variant: none asked (--second none)")
    elif dry:
        print("second variant (%s): skipped in the dry run: %s" % (
            second, "CUDA graphs need a GPU" if second == "graphs" else
            "torch.compile is not in torch %s" % ti["torch"] if not ti["compile"] else
            "torch.compile on the CPU is not what is measured"))
    elif second == "compile" and not ti["compile"]:
        print("second variant (compile): skipped: torch %s has no torch.compile" % ti["torch"])
    elif second == "graphs" and not ti["graphs"]:
        print("second variant (graphs): skipped: no torch.cuda.CUDAGraph")
    else:
        variants.append(second)
    nwin = sched["repeat"]

    # warm-up, not counted: the operator observer built for this torch on
    # first use, file caches, torch.compile's caches
    t0 = time.perf_counter()
    warm_steps = sched["skip_first"] + sched["wait"] + sched["warmup"] + sched["active"] + 1
    for v in variants:
        runner.run("profhost", v, "warmup", warm_steps,
                   {"PROF_TORCH_OPS": "observer"} if not dry else None)
    print("warm-up (profhost, %d steps a variant; not counted): %.1f s"
          % (warm_steps, time.perf_counter() - t0))

    runs = {v: {m: {"wall": [], "cpu": []} for m in ("none", "torch", "profhost")}
            for v in variants}
    walls = {v: {m: [] for m in ("none", "torch", "profhost")} for v in variants}
    comps = {v: [] for v in variants}
    profilers = {}
    paired = []
    p = DRY_PAIRED if dry else GPU_PAIRED
    paired_steps = p["warmup"] + 2 * p["block"] * p["pairs"]
    rounds_done = 0
    last_round = 0.0
    for rnd in range(a.rounds):
        elapsed = time.perf_counter() - t_start
        if rnd > 0 and elapsed + last_round > a.budget_s:
            print("stopped after %d round(s): another (%.0f s) would end past --budget-s %.0f"
                  % (rnd, last_round, a.budget_s))
            break
        r0 = time.perf_counter()
        for v in variants:
            dirs = {}
            for m in ("none", "torch", "profhost"):
                env = None
                if m == "torch" and v == "graphs":
                    env = {"TEARDOWN_CUPTI": "0"}
                got = runner.run(m, v, "r%d" % rnd, a.steps, env)
                if got is None:
                    continue
                js, wall, d = got
                runs[v][m]["wall"].append(js["times"])
                runs[v][m]["cpu"].append(js["cpu"])
                walls[v][m].append(wall)
                dirs[m] = d
                profilers[m] = js["profiler"]
                result.setdefault("amp", js["amp"])
                result.setdefault("attention", js["attention"])
            if "torch" in dirs and "profhost" in dirs:
                comps[v] += compare_round(runner, v, rnd, dirs, nwin)
                if not a.keep:
                    for m in ("torch", "profhost"):
                        shutil.rmtree(dirs[m], ignore_errors=True)
        got = runner.run("paired", "eager", "r%d" % rnd, paired_steps)
        if got is not None:
            args = argparse.Namespace(block=p["block"], warmup=p["warmup"], steps=paired_steps)
            try:
                bench_torch.check_switches(got[0]["stderr"], args)
                paired.append(got[0]["times"])
            except SystemExit as e:
                runner.failures.append(str(e))
        rounds_done += 1
        last_round = time.perf_counter() - r0

    print("\n== the loop: a transformer (%s), AdamW, %s; attention: %s; %d steps a process, "
          "%d round(s) interleaved, schedule %s"
          % (", ".join("%s %d" % kv for kv in (DRY_MODEL if dry else GPU_MODEL).items()),
             result.get("amp", "?"), result.get("attention", "?"), a.steps, rounds_done, sched))
    print("torch.profiler mode: %s, record_shapes; profhost mode: prof run, the same schedule, "
          "prof.capture{ record_shapes = true }%s"
          % (profilers.get("torch", "?"), "" if dry else ", GPU capture (CUPTI)"))
    for key in sorted(runner.notes)[:8]:
        print(runner.notes[key])
    tlabel = "Kineto" if ti["kineto"] else "legacy"
    if not ti["kineto"]:
        print("(\"legacy\" below: torch.profiler's legacy profiler stands where Kineto would)")
    for v in variants:
        print("\n== %s: per window" % v)
        if v == "graphs":
            print("(the whole step replayed from one CUDA graph; profhost's steps from "
                  "profhost.step(), a replay calls no optimizer.step(); TEARDOWN_CUPTI=0 for "
                  "torch.profiler, so Kineto leaves CUPTI attached after a window, as "
                  "profhost does once a graph ran: a finalize breaks the graph's next launch)")
        for c in comps[v]:
            print("\n".join(format_window("round %d, window %d" % (c["round"] + 1, c["window"]),
                                          c, gpu=not dry, tlabel=tlabel)))
        crit = {"ops": all(c["ops_ok"] for c in comps[v]) and bool(comps[v]),
                "kernels": all(c["kernels_ok"] for c in comps[v]) and bool(comps[v]),
                "time": all(c["time_ok"] for c in comps[v]) and bool(comps[v])}
        vres = {"windows": comps[v], "criteria": crit}
        if all(runs[v][m]["wall"] for m in runs[v]):
            print("\n== %s: step times, medians over every process's steps" % v)
            for clock, what in (("wall", "wall-clock"), ("cpu", "process CPU")):
                rows, ratios = overheads({m: runs[v][m][clock] for m in runs[v]},
                                         walls[v], parts)
                print("\n".join(format_overheads(rows, ratios, what, tlabel)))
                vres[clock] = {"rows": rows, "ratios": ratios}
        result["variants"][v] = vres
        if dry:
            # on the CPU the operator counts are deterministic: the parsing
            # of both traces must agree within the target
            if not comps[v]:
                checks.append("%s: no window compared" % v)
            elif not crit["ops"]:
                checks.append("%s: operator counts differ by more than 2 %%" % v)
            if any(c["kernels_kineto"] or c["kernels_profhost"] for c in comps[v]):
                checks.append("%s: kernel events in a CPU run" % v)

    print("\n== the flight recorder always on (prof.recorder{ steps = %d }): cost per step"
          % REC_STEPS)
    rec = recorder_result(paired, runs["eager"]["none"]["wall"], p)
    print("\n".join(rec["lines"]))
    result["recorder"] = {k: v for k, v in rec.items() if k != "lines"}
    print("\n== profile_memory: skipped: profhost has no profile_memory yet (torch's allocator "
          "events per tensor); its memory timeline has only what CUPTI sees the driver hand "
          "out, so there is nothing like for like to compare")

    print("\n== summary (%.0f s)" % (time.perf_counter() - t_start))
    for v in variants:
        crit = result["variants"][v]["criteria"]
        w = result["variants"][v].get("wall")
        line = "%s: operators within 2 %%: %s" % (v, verdict(crit["ops"]))
        if not dry:
            line += "; kernels equal: %s; GPU time per kernel name within 5 %%: %s" % (
                verdict(crit["kernels"]), verdict(crit["time"]))
        if w:
            line += "; profhost / %s: recorded-step overhead %.2f, whole-run extra %.2f " \
                    "(wall)" % (tlabel, w["ratios"]["record"], w["ratios"]["extra"])
        print(line)
    if rec["median"] is not None:
        print("flight recorder always on: %+.2f %% per step (wall-clock, median of %d "
              "processes)" % ((rec["median"] - 1) * 100, len(rec["per_process"])))
    if dry:
        print("dry run on the CPU: the GPU comparisons (kernels, GPU time per kernel name) ran "
              "on made-up traces%s, not on this loop (no GPU here); %s"
              % (" and on the CUPTI fake's" if os.path.exists(
                  os.path.join(a.build, "tests", "lib", "libcupti-fake.so")) else "",
                 profilers.get("torch", "torch.profiler")))
    for f in runner.failures:
        print("FAIL %s" % f)
    for c in checks:
        print("FAIL %s" % c)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1, default=str)
    ok = not runner.failures and not checks
    print("==== gpu-bench%s: %s" % (" dry run" if dry else "", "passed" if ok else "FAILED"))
    return 0 if ok else 1


def recorder_result(paired, none_runs, p):
    """The recorder's cost from the paired processes (on/off ratios of
    median step times per block pair, bench_torch's method) and the
    method's noise from the `none` processes split into the same blocks."""
    k, w = p["block"], p["warmup"]
    if not paired:
        return {"lines": ["no paired process ran"], "median": None}
    per = [bench_torch.pair_ratios(t, k, w) for t in paired]
    meds = [statistics.median(x) for x in per if x]
    allp = [y for x in per for y in x]
    aa = [y for t in none_runs for y in bench_torch.pair_ratios(t, k, w)]
    med = statistics.median(meds) if meds else float("nan")
    lines = ["wall-clock, on/off per process (median of its %d block pairs of %d steps): %s; "
             "median %.4f (%+.2f %%); all %d pairs %.4f +- %.4f"
             % (p["pairs"], k, " ".join("%.4f" % x for x in meds), med, (med - 1) * 100,
                len(allp), statistics.median(allp) if allp else float("nan"),
                bench_torch.median_se(allp))]
    lines.append("A/A (the `none` processes' steps in the same blocks, nothing switched): %s"
                 % ("%.4f +- %.4f over %d pairs" % (statistics.median(aa),
                                                     bench_torch.median_se(aa), len(aa))
                    if aa else "too few steps"))
    return {"lines": lines, "median": med, "per_process": meds, "all_pairs": allp, "aa": aa}


if __name__ == "__main__":
    sys.exit(main())

"""profhost against torch.profiler on one CPU training loop (not a test).

Runs the same loop (a deep, narrow MLP: 16 blocks of Linear, LayerNorm and
GELU, width 64, on synthetic data through a DataLoader, SGD: many small
operators, where a profiler's cost per operator shows) in three ways, side
by side, several rounds interleaved:

  none      no profiler
  torch     torch.profiler: CPU activity, record_shapes, with_stack, the
            schedule below, each window exported as a Chrome trace
  profhost  the same script under `prof run` (no code change): the same
            schedule, optimizer steps as steps, step phases, CPU samples at
            999 Hz (where the sampler is built in)

and reports, per mode, the median time per step over all steps, over the
recorded (active) steps, and over the steps after the last window, with the
overhead of each profiler relative to `none`, in process CPU time (all
threads: the profilers' own threads included; steadier than wall-clock time
on a shared machine), in the training thread's CPU time (what the program's
own thread pays: profhost's host thread writing the previous window, its
pre-fault helper, left out) and in wall-clock time. "after/before" compares, within
each run, the steps after the last window with the idle steps before the
first one: a profiler that leaves the process slower shows there.

    python3 tests/bench/bench_torch.py --prof build/bin/prof
    python3 tests/bench/bench_torch.py --prof build/bin/prof --ops

--ops compares the operator collectors (#16): torch.profiler with
record_shapes only (no with_stack), profhost with
prof.capture{ record_shapes = true } and no CPU samples (its RecordFunction
observer), and counts the operator events each wrote per window (cpu_op
events in profhost's trace.json, operator events in torch's export).
    python3 tests/bench/bench_torch.py --prof build/bin/prof --rounds 5 --json out.json

--memory compares the tensor allocation recorders (#26): as --ops, with
torch.profiler's profile_memory=True and profhost's
prof.capture{ record_shapes = true, profile_memory = true }, and counts
the [memory] events profhost wrote per window. With --recorder it keeps
prof.capture{ profile_memory = true } in the recorder's policy: the
recorder then keeps operators and allocations between windows, and its
on/off ratio is what that costs.
    python3 tests/bench/bench_torch.py --prof build/bin/prof --memory
    python3 tests/bench/bench_torch.py --prof build/bin/prof --recorder --memory
--with-stack compares the operators' Python call stacks (#26): torch.profiler
with record_shapes and with_stack, each window also exported with
export_stacks("self_cpu_time_total"), against profhost with
prof.capture{ record_shapes = true, with_stack = true } and no CPU samples
(its observer and its tracking of every thread's Python stack, writing
operator_stacks.txt with each window), and counts the lines of both stacks
files per window.
    python3 tests/bench/bench_torch.py --prof build/bin/prof --with-stack

--recorder measures the flight recorder's cost (#15) inside each process
(pairing): the loop runs under `prof run` with prof.recorder{} and a policy
whose on_step hook switches the recorder off and on every --block steps
(prof.recorder{ enabled = ... }, after a --warmup with it on; the pairs
of blocks alternate off-on, on-off, so a steady drift cancels), and the
steps with the recorder on and off share one process, its placement and
its caches. Per process: the median step time of the on-blocks over that
of the off-blocks (the step whose end switches and the step after it
left out of both); then the median of these ratios over --rounds
processes. Each round also runs the loop with no profiler
("none") and under profhost with no recorder ("idle"); their steps split
into the same blocks give the method's noise (A/A: nothing switches).
On a shared VM a process's step time differs from the next process's by
several percent, far more than the 1 % target (#29), which is why separate
processes per mode (--separate, the earlier method) cannot resolve it.
    python3 tests/bench/bench_torch.py --prof build/bin/prof --recorder
    python3 tests/bench/bench_torch.py --prof build/bin/prof --recorder --separate

--recorder --whole measures everything profhost costs against no
profiler, as whole processes (#29): per round four processes of --steps
(1500) steps, `none`, `none` again (the A/A control), `idle` (profhost, no
recorder) and `recorder` (prof.recorder{ steps = --rec-steps }), in an
order that rotates by round; per process the median step after --warmup
(CPU and wall) and the whole run (the launcher's wall time, the process
tree's CPU time from getrusage, start-up and exit included); per round
each mode over that round's `none`, and the median over --rounds (8).
    python3 tests/bench/bench_torch.py --prof build/bin/prof --recorder --whole --rec-steps 20

--recorder --whole --concurrent runs the whole processes two at a time,
one per CPU (--cpus, else the first two this process may use), started
together: per round a subject beside a process with no profiler
(--subjects, in turn: `recorder` the recorder's default, `idle` profhost
with no recorder, `none2` no profiler, the A/A control; SUBJECT/idle runs
it beside profhost idle instead), the subject's CPU alternating every
len(subjects) rounds. A shared VM's speed moves by several percent from one
process to the next, and two processes side by side move together: the A/A
control reads within 0.2 % where the sequential method's reads 2-3 %. Per
round the subject over its baseline (per-step medians of process CPU, the
training thread's CPU and wall; whole-run CPU from getrusage and wall);
per kind the mean of the two CPUs' medians ± its standard error (the CPUs
differ by up to 1 % in a run), beside the median of all its rounds.
    python3 tests/bench/bench_torch.py --prof build/bin/prof --recorder --whole --concurrent --rounds 36 --rec-steps 20
    python3 tests/bench/bench_torch.py --prof build/bin/prof --recorder --whole --concurrent --rounds 10 --rec-steps 20 --subjects recorder/idle

--phases-check compares the step phases a recorder dump keeps between
windows (no module hooks: forward inferred) with a window's (module hooks),
in one process: a dump of 20 steps, a window of 20, a dump of 20, no
operator events (PROF_TORCH_OPS=off); per phase the two dumps' mean median
over the window's median, from each summary.txt; the median over --rounds
within 10 % (#29). Exits 1 when a phase is not.
    python3 tests/bench/bench_torch.py --prof build/bin/prof --phases-check --rounds 5

--phases-cost measures what timing the bridge's step phases costs between
windows (#29): per process, under `prof run` with prof.recorder{ steps =
--rec-steps }, the phases are timed in every other step (the bridge's
switch held off in the others), --steps (3000) steps; the median of each
mode's training-thread CPU time per step and their difference. The
wrappers stay installed in both halves, so their own calls are not in it:
--recorder --whole --concurrent --subjects recorder/idle [--no-phases]
measures the whole of the phases.
    python3 tests/bench/bench_torch.py --prof build/bin/prof --phases-cost --rounds 3 --rec-steps 20

The worker (--worker MODE) is what runs the loop; it writes the time of every
step as JSON. Needs torch (Debian's python3-torch: /usr/bin/python3).
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

# The schedule, for both profilers: torch.profiler.schedule's names.
SCHEDULE = dict(skip_first=20, wait=10, warmup=5, active=20, repeat=2)
STEPS = 130


def schedule_actions(steps, skip_first, wait, warmup, active, repeat):
    """torch.profiler.schedule's action for each step: 'none', 'warmup',
    'record'."""
    out = []
    cycle = wait + warmup + active
    for s in range(steps):
        if s < skip_first:
            out.append("none")
            continue
        k = s - skip_first
        if repeat and k // cycle >= repeat:
            out.append("none")
            continue
        m = k % cycle
        out.append("none" if m < wait else "warmup" if m < wait + warmup else "record")
    return out


# ---------------------------------------------------------------- the worker

def worker(mode, out_path, steps, threads, ops=False, device="cpu", memory=False,
           with_stack=False, blocks=16):
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(4096, 64), torch.randint(0, 10, (4096,)))
    loader = DataLoader(data, batch_size=32, shuffle=True, drop_last=True)
    n_blocks, blocks = blocks, []
    for _ in range(n_blocks):
        blocks += [nn.Linear(64, 64), nn.LayerNorm(64), nn.GELU()]
    model = nn.Sequential(*blocks, nn.Linear(64, 10)).to(device)
    cuda = device.startswith("cuda")
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    if mode == "phasecost":
        return phasecost_worker(out_path, steps, loader, model, opt, loss_fn)
    prof = None
    trace_dir = None
    if mode == "torch":
        from torch.profiler import ProfilerActivity, profile, schedule

        trace_dir = tempfile.mkdtemp(prefix="bench-torch-")
        n = [0]

        def ready(p):
            n[0] += 1
            p.export_chrome_trace(os.path.join(trace_dir, "window%d.json" % n[0]))
            if with_stack:
                p.export_stacks(os.path.join(trace_dir, "stacks%d.txt" % n[0]),
                                "self_cpu_time_total")

        prof = profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                       with_stack=not ops and not memory, profile_memory=memory,
                       schedule=schedule(**SCHEDULE), on_trace_ready=ready)
        prof.__enter__()

    times, cpu, thread = [], [], []
    step = 0
    t0 = time.perf_counter()
    c0 = time.process_time()
    h0 = time.thread_time()
    while step < steps:
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if prof is not None:
                prof.step()
            if cuda:
                torch.cuda.synchronize()  # the step's GPU work is in its time
            t1 = time.perf_counter()
            c1 = time.process_time()
            h1 = time.thread_time()
            times.append(t1 - t0)
            cpu.append(c1 - c0)
            thread.append(h1 - h0)
            t0, c0, h0 = t1, c1, h1
            step += 1
            if step >= steps:
                break
    if prof is not None:
        prof.__exit__(None, None, None)
    with open(out_path, "w") as f:
        json.dump({"mode": mode, "times": times, "cpu": cpu, "thread": thread,
                   "trace_dir": trace_dir if mode == "torch" else None}, f)


def phasecost_worker(out_path, steps, loader, model, opt, loss_fn):
    """--phases-cost's worker, under `prof run` with the recorder on: the
    bridge's step phases timed in every other step, not in the others
    (its private switch held off: a test of profhost's own, never an
    API), the training thread's CPU time of each step by mode."""
    from profhost import _phases

    set_on = _phases.set_on

    def mode(timed):
        _phases.set_on = set_on
        if not timed:
            _phases.set_on = lambda on, hooks=True: None
            _phases._on = False

    times = {"on": [], "off": []}
    it = iter(loader)
    for k in range(steps):
        timed = k % 2 == 1
        t0 = time.thread_time_ns()
        try:
            x, y = next(it)
        except StopIteration:
            it = iter(loader)
            x, y = next(it)
        loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if k >= 100:
            times["on" if timed else "off"].append(time.thread_time_ns() - t0)
        mode(not timed)   # the next step's
    mode(True)
    with open(out_path, "w") as f:
        json.dump(times, f)


def phasecost_main(args):
    """--phases-cost: per process, the recorder on throughout, the step
    phases timed in alternate steps (see phasecost_worker); the median
    step of each mode and their difference."""
    diffs, shares = [], []
    with tempfile.TemporaryDirectory(prefix="bench-torch-") as tmp:
        policy = os.path.join(tmp, "policy.lua")
        with open(policy, "w") as f:
            f.write(RECORDER_POLICY % (args.rec_steps, ""))
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("PROF_") and k != "LD_PRELOAD"}
        env["PROF_LOG"] = "quiet"
        for rnd in range(args.rounds):
            out = os.path.join(tmp, "phasecost-%d.json" % rnd)
            cmd = [args.prof, "run", "-s", policy, "-o", os.path.join(tmp, "prof_out"), "--",
                   args.python, os.path.abspath(__file__), "--worker", "phasecost",
                   "--out", out, "--steps", str(args.steps), "--threads", str(args.threads),
                   "--blocks", str(args.blocks)]
            subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
            with open(out) as f:
                got = json.load(f)
            on, off = statistics.median(got["on"]), statistics.median(got["off"])
            diffs.append((on - off) / 1e3)
            shares.append((on / off - 1) * 100)
            print("  process %d: step %.1f us with phases, %.1f us without: %+.1f us (%+.2f %%)"
                  % (rnd + 1, on / 1e3, off / 1e3, (on - off) / 1e3, (on / off - 1) * 100))
    print("phases timed or not, alternate steps, prof.recorder{ steps = %d }, %d MLP blocks, "
          "%d steps x %d processes: median %+.1f us a step (%+.2f %%)"
          % (args.rec_steps, args.blocks, args.steps, args.rounds, statistics.median(diffs),
             statistics.median(shares)))
    return 0


# ---------------------------------------------------------------- the runner

POLICY = """-- bench_torch.py: the same schedule as torch.profiler.schedule(%(s)s)
prof.schedule { skip_first = %(skip_first)d, wait = %(wait)d, warmup = %(warmup)d,
                active = %(active)d, cycles = %(repeat)d }
%(capture)s
"""
CAPTURE = "prof.capture { cpu_samples = { hz = 999 } }"
CAPTURE_OPS = "prof.capture { record_shapes = true }"
CAPTURE_MEMORY = "prof.capture { record_shapes = true, profile_memory = true }"
CAPTURE_STACK = "prof.capture { record_shapes = true, with_stack = true }"
# --recorder: no window either way; the recorder on or not.
IDLE_POLICY = "-- bench_torch.py --recorder: profhost loaded, no window\n"
RECORDER_POLICY = "-- bench_torch.py --recorder: no window, the recorder on\n" \
    "prof.recorder { steps = %d%s }\n"


# --recorder (paired): the recorder set up, switched off and on by the hook.
# A switch made in on_step(N) takes effect at the boundary that ends step
# N + 1 (docs/recorder.md): the hook asks now for the mode of step N + 2.
PAIRED_POLICY = """-- bench_torch.py --recorder: the recorder off and on in blocks of @K@ steps
prof.recorder { steps = @STEPS@@PHASES@ }
local K, W = @K@, @W@
-- on through the warm-up (steps 0..W-1), then blocks of K steps in pairs,
-- off-on, on-off, off-on, ... (ABBA: a steady drift cancels out)
local function on_at(n)
  if n < W then return true end
  local b = (n - W) // K
  return (b % 2 == 1) ~= ((b // 2) % 2 == 1)
end
prof.on_step(function(s)
  local n = s.step + 2
  local want = on_at(n)
  if want ~= on_at(n - 1) then
    prof.recorder { enabled = want }
    print(string.format("bench: recorder %s from step %d", want and "on" or "off", n))
  end
end)
"""


def paired_on(n, k, w):
    """The paired policy's on_at(n), in Python: whether step n ran with the
    recorder on."""
    if n < w:
        return True
    b = (n - w) // k
    return (b % 2 == 1) != ((b // 2) % 2 == 1)


def count_stack_lines(mode, tmp, trace_dir):
    """Lines of each window's stacks file: profhost's operator_stacks.txt,
    torch's export_stacks."""
    import glob

    pattern = (os.path.join(tmp, "prof_out", "*", "rank0", "window*", "operator_stacks.txt")
               if mode == "profhost" else
               os.path.join(trace_dir, "stacks*.txt") if mode == "torch" and trace_dir else None)
    out = []
    for path in sorted(glob.glob(pattern)) if pattern else []:
        with open(path) as f:
            out.append(sum(1 for _ in f))
    return out


def count_ops(mode, tmp, trace_dir, memory=False):
    """Operator events per window: profhost's cpu_op events, torch's
    operator events (its legacy export has no categories: all but the
    ProfilerStep labels); with `memory`, profhost's [memory] events."""
    import glob

    out = []
    if mode == "profhost":
        for path in sorted(glob.glob(os.path.join(tmp, "prof_out", "*", "rank0", "window*",
                                                  "trace.json"))):
            with open(path) as f:
                evs = json.load(f)["traceEvents"]
            if memory:
                out.append(sum(1 for e in evs if e.get("name") == "[memory]"))
                continue
            out.append(sum(1 for e in evs if e.get("cat") == "cpu_op"))
    elif mode == "torch" and trace_dir:
        for path in sorted(glob.glob(os.path.join(trace_dir, "window*.json"))):
            with open(path) as f:
                evs = json.load(f)
            if isinstance(evs, dict):
                evs = evs["traceEvents"]
                out.append(sum(1 for e in evs if e.get("cat") == "cpu_op"))
            else:
                out.append(sum(1 for e in evs if e.get("ph") == "X" and
                               not e["name"].startswith(("ProfilerStep#", "Optimizer.",
                                                          "enumerate(DataLoader)#"))))
    return out



def prepare(mode, args, tmp, rnd, out_dir="prof_out"):
    """The command line and environment of one run of `mode` (its policy
    written into `tmp`), and where its worker writes its step times."""
    out = os.path.join(tmp, "%s-%d.json" % (mode, rnd))
    cmd = [args.python, os.path.abspath(__file__), "--worker", mode, "--out", out,
           "--steps", str(args.steps), "--threads", str(args.threads),
           "--device", args.device, "--blocks", str(args.blocks)] + \
        (["--ops"] if args.ops else []) + \
        (["--memory"] if args.memory else []) + \
        (["--with-stack"] if args.with_stack else [])
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("PROF_") or k == "LD_PRELOAD":
            del env[k]
    if mode in ("profhost", "idle", "recorder", "paired"):
        policy = os.path.join(tmp, "policy-%s.lua" % out_dir)
        with open(policy, "w") as f:
            if mode == "paired":
                f.write(PAIRED_POLICY.replace("@K@", str(args.block))
                        .replace("@W@", str(args.warmup))
                        .replace("@STEPS@", str(args.rec_steps))
                        .replace("@PHASES@", ("" if args.recorder_phases else ", phases = false") +
                                  ("" if args.recorder_cuda else ", cuda = false")))
                if args.memory:
                    f.write("prof.capture { profile_memory = true }\n")
            elif mode == "profhost":
                f.write(POLICY % dict(SCHEDULE,
                                      s=", ".join("%s=%d" % kv for kv in SCHEDULE.items()),
                                      capture=CAPTURE_MEMORY if args.memory else
                                      CAPTURE_OPS if args.ops else
                                      CAPTURE_STACK if args.with_stack else CAPTURE))
            else:
                # --separate: steps = 20 as before; --whole: --rec-steps
                f.write(RECORDER_POLICY % (args.rec_steps if args.whole else 20,
                                           "" if args.recorder_phases else
                                           ", phases = false")
                        if mode == "recorder" else IDLE_POLICY)
        # paired: the hook's print() lines (info) say where it switched
        env["PROF_LOG"] = "info" if mode == "paired" else "quiet"
        cmd = [args.prof, "run", "-s", policy, "-o", os.path.join(tmp, out_dir), "--"] + cmd
    return cmd, env, out


def run_one(mode, args, tmp, rnd):
    cmd, env, out = prepare(mode, args, tmp, rnd)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE if mode == "paired" else None,
                       universal_newlines=True)
    wall = time.perf_counter() - t0
    if mode == "paired":
        check_switches(r.stderr, args)
    with open(out) as f:
        got = json.load(f)
    ops = count_ops(mode, tmp, got.get("trace_dir"), args.memory) \
        if args.ops or args.memory or args.with_stack else []
    if args.with_stack:
        ops = [ops, count_stack_lines(mode, tmp, got.get("trace_dir"))]
    if mode != "none":
        import shutil

        shutil.rmtree(os.path.join(tmp, "prof_out"), ignore_errors=True)
    run_one.thread = got.get("thread", [])
    return got["times"], got["cpu"], wall, ops


def med_ms(xs):
    return statistics.median(xs) * 1e3 if xs else float("nan")


def check_switches(stderr, args):
    """The steps where the paired policy's hook said it switched the
    recorder must be the blocks' first steps: else the modes assigned to
    the steps would be wrong."""
    import re

    said = [(m.group(1) == "on", int(m.group(2)))
            for m in re.finditer(r"bench: recorder (on|off) from step (\d+)", stderr)]
    want = [(paired_on(n, args.block, args.warmup), n) for n in range(2, args.steps + 1)
            if paired_on(n, args.block, args.warmup) !=
            paired_on(n - 1, args.block, args.warmup)]
    if said != want:
        sys.exit("bench_torch.py: the paired policy switched at %s, expected %s; its "
                 "log:\n%s" % (said, want, stderr))


def kept_steps(n, k, w):
    """(step, on) for the steps of a process of n steps that count: after
    the warm-up, the step whose end switches and the first step after a
    switch left out (what a switch starts on other threads, the pre-fault
    helper's pages, the Python bridge's hooks, may reach into it)."""
    for i in range(w, n):
        here = paired_on(i, k, w)
        if paired_on(i + 1, k, w) != here or paired_on(i - 1, k, w) != here:
            continue
        yield i, here


def pair_blocks(xs, k, w):
    """The kept steps of xs grouped by block pair: [(on steps, off
    steps)], in order, pairs with both."""
    pairs = {}
    for i, on in kept_steps(len(xs), k, w):
        pairs.setdefault((i - w) // (2 * k), ([], []))[0 if on else 1].append(xs[i])
    return [p for _, p in sorted(pairs.items()) if p[0] and p[1]]


def pair_ratios(xs, k, w):
    """For each pair of adjacent blocks (one off, one on), the median step
    time of its on-block over that of its off-block: a level shift of the
    process (on this VM a process's step time can move by several percent
    at any moment) spoils one pair, not the whole process."""
    return [statistics.median(on) / statistics.median(off) for on, off in pair_blocks(xs, k, w)]


def pair_diffs(xs, k, w):
    """As pair_ratios, the difference of the two medians in us: a cost that
    is the same in every step (profhost's per step) reads the same on any
    model, and is best measured on a short step."""
    return [(statistics.median(on) - statistics.median(off)) * 1e6
            for on, off in pair_blocks(xs, k, w)]


def median_se(xs):
    """The standard error of the median of xs (1.2533 sd / sqrt(n), as for
    a normal sample): what `+-` shows beside a median of pair ratios."""
    if len(xs) < 2:
        return float("nan")
    return 1.2533 * statistics.stdev(xs) / len(xs) ** 0.5


def load_average():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def paired_main(args):
    """--recorder (paired): per round, one process with the recorder
    switched off/on in blocks, one with no profiler, one with profhost and
    no recorder; per-process on/off ratios of median step times."""
    if args.steps == STEPS:
        args.steps = args.warmup + 2 * args.block * args.pairs
    k, w = args.block, args.warmup
    modes = ["none", "idle", "paired"]
    runs = {m: [] for m in modes}
    load0 = load_average()
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-torch-") as tmp:
        for rnd in range(args.rounds):
            for m in modes:
                times, cpu, _, _ = run_one(m, args, tmp, rnd)
                runs[m].append({"wall": times, "cpu": cpu, "thread": run_one.thread})
    took = time.perf_counter() - t_start
    print("paired: %d rounds of 3 processes (none, idle, recorder switched) x %d steps: "
          "warm-up %d (recorder on), then %d pairs of %d-step blocks, off-on, on-off, ...; "
          "prof.recorder{ steps = %d%s%s }%s, torch threads %d, device %s, %d MLP "
          "blocks; the steps on either side of a switch left out"
          % (args.rounds, args.steps, w, args.pairs, k, args.rec_steps,
             "" if args.recorder_phases else ", phases = false",
             "" if args.recorder_cuda else ", cuda = false",
             ", prof.capture{ profile_memory = true }" if args.memory else "",
             args.threads, args.device, args.blocks))
    result = {"method": "paired", "blocks": args.blocks, "steps": args.steps,
              "rounds": args.rounds, "block": k,
              "warmup": w, "pairs": args.pairs, "rec_steps": args.rec_steps,
              "phases": args.recorder_phases, "threads": args.threads,
              "load_average_start": load0, "load_average_end": load_average(),
              "seconds": took, "processes": {m: [] for m in modes}}
    for m in modes:
        for r in runs[m]:
            result["processes"][m].append({
                "cpu_s": r["cpu"], "wall_s": r["wall"], "thread_s": r["thread"],
                "recorder_on": [paired_on(i, k, w) if m == "paired" else False
                                for i in range(len(r["cpu"]))]})
    for clock, what in (("cpu", "process CPU time (all threads)"),
                        ("thread", "the training thread's CPU time (profhost's threads left out)"),
                        ("wall", "wall-clock time")):
        pairs = {m: [pair_ratios(r[clock], k, w) for r in runs[m]] for m in modes}
        per = {m: [statistics.median(x) for x in pairs[m]] for m in modes}
        pooled = {m: statistics.median([y for x in pairs[m] for y in x]) for m in modes}
        se = {m: median_se([y for x in pairs[m] for y in x]) for m in modes}
        med = statistics.median(per["paired"])
        print("%s:\n  recorder on/off, median of each process's %d block pairs: %s\n"
              "  median over processes: %.4f (%+.2f %%; target <= 1.01); over all %d pairs: "
              "%.4f +- %.4f\n  same blocks, nothing switched (A/A, the method's noise): "
              "none %s (all pairs %.4f +- %.4f), idle %s (all pairs %.4f +- %.4f)"
              % (what, args.pairs, " ".join("%.4f" % x for x in per["paired"]), med,
                 (med - 1) * 100, sum(len(x) for x in pairs["paired"]), pooled["paired"],
                 se["paired"], " ".join("%.4f" % x for x in per["none"]), pooled["none"],
                 se["none"], " ".join("%.4f" % x for x in per["idle"]), pooled["idle"],
                 se["idle"]))
        diffs = {m: [y for r in runs[m] for y in pair_diffs(r[clock], k, w)] for m in modes}
        dmed = {m: statistics.median(diffs[m]) for m in modes}
        dse = {m: median_se(diffs[m]) for m in modes}
        print("  recorder on - off, per step, over all pairs: %+.1f us +- %.1f (A/A: none "
              "%+.1f +- %.1f, idle %+.1f +- %.1f)"
              % (dmed["paired"], dse["paired"], dmed["none"], dse["none"], dmed["idle"],
                 dse["idle"]))
        lvl = {m: [med_ms(r[clock][w:]) for r in runs[m]] for m in modes}
        print("  per-step medians after the warm-up, per process (ms; across processes, "
              "not paired): none %s, idle %s, switched %s"
              % tuple(" ".join("%.2f" % x for x in lvl[m]) for m in modes))
        result[clock] = {"on_over_off": per["paired"], "median": med,
                         "median_all_pairs": pooled["paired"], "pair_ratios": pairs,
                         "aa_none": per["none"], "aa_idle": per["idle"],
                         "aa_none_all_pairs": pooled["none"],
                         "aa_idle_all_pairs": pooled["idle"], "se_all_pairs": se,
                         "levels_ms": lvl, "on_minus_off_us": dmed,
                         "on_minus_off_us_se": dse}
    print("load average %s at the start, %s at the end; %.0f s"
          % (load0, result["load_average_end"], took))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


def recorder_main(args):
    """--recorder: none, profhost idle and profhost with the recorder,
    interleaved rounds; medians per step after the first 10."""
    modes = ["none", "idle", "recorder"]
    got = {m: {"wall": [], "cpu": []} for m in modes}
    with tempfile.TemporaryDirectory(prefix="bench-torch-") as tmp:
        for rnd in range(args.rounds):
            for m in modes:
                times, cpu, _, _ = run_one(m, args, tmp, rnd)
                got[m]["wall"] += times[10:]
                got[m]["cpu"] += cpu[10:]
    print("%d steps x %d rounds, torch threads %d; medians per step after step 10"
          % (args.steps, args.rounds, args.threads))
    result = {"steps": args.steps, "rounds": args.rounds, "threads": args.threads}
    for clock, what in (("cpu", "process CPU time (all threads)"), ("wall", "wall-clock time")):
        r = {m: med_ms(got[m][clock]) for m in modes}
        print("%-32s none %.3f ms, profhost idle %.3f ms, recorder on %.3f ms: "
              "recorder/idle %.3f (target <= 1.02)"
              % (what, r["none"], r["idle"], r["recorder"], r["recorder"] / r["idle"]))
        result[clock] = dict(r, recorder_over_idle=r["recorder"] / r["idle"])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


# The per-step clocks of a worker's output; the other keys of a whole-process
# run ("run_cpu", "run_wall") are one figure for the whole run.
PER_STEP = ("cpu", "thread", "wall")


def run_level(r, key, w):
    """A whole-process run's level for `key`: its median step after the
    warm-up `w` on a per-step clock (s), else its whole-run figure (s)."""
    return statistics.median(r[key][w:]) if key in PER_STEP else r[key]


def finish_whole(args, result, load0, took):
    """The end of --whole's report: the target, the load, the time taken;
    the results written to --json."""
    print("target (#29): recorder over none at most +1 %% in CPU and wall time; "
          "load average %s at the start, %s at the end; %.0f s"
          % (load0, result["load_average_end"], took))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


def whole_main(args):
    """--recorder --whole: whole processes, interleaved: per round one
    process with no profiler, a second one (the A/A control), one under
    profhost with no recorder (idle) and one with the recorder's default
    configuration; the modes' order rotates from round to round. Per
    process: its median step (after the warm-up) and its whole run (the
    launcher's wall time, and the CPU time of the process tree from
    getrusage). Per round the ratio of each mode to that round's `none`;
    the median over rounds with its standard error."""
    import resource

    if args.steps == STEPS:
        args.steps = 1500
    modes = ["none", "none2", "idle", "recorder"]
    runs = {m: [] for m in modes}
    load0 = load_average()
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-torch-") as tmp:
        for rnd in range(args.rounds):
            order = modes[rnd % len(modes):] + modes[:rnd % len(modes)]
            for m in order:
                r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                times, cpu, wall, _ = run_one("none" if m == "none2" else m, args, tmp,
                                              2 * rnd + (m == "none2"))
                r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                runs[m].append({"wall": times, "cpu": cpu, "run_wall": wall,
                                "run_cpu": (r1.ru_utime + r1.ru_stime) -
                                           (r0.ru_utime + r0.ru_stime)})
    took = time.perf_counter() - t_start
    w = args.warmup
    print("whole processes: %d rounds of 4 processes (none, none again as the A/A control, "
          "profhost idle, prof.recorder{ steps = %d%s }) x %d steps, the order rotating "
          "by round; torch threads %d, device %s; per-step medians after step %d"
          % (args.rounds, args.rec_steps, "" if args.recorder_phases else ", phases = false",
             args.steps, args.threads, args.device, w))
    result = {"method": "whole", "steps": args.steps, "rounds": args.rounds,
              "rec_steps": args.rec_steps, "phases": args.recorder_phases,
              "load_average_start": load0, "load_average_end": load_average(),
              "seconds": took, "processes": runs}
    what = (("cpu", "per step, process CPU time (all threads)"),
            ("wall", "per step, wall-clock time"),
            ("run_cpu", "whole run, CPU time of the process tree (start-up and exit "
                        "included)"),
            ("run_wall", "whole run, wall-clock time of the launcher"))
    for key, label in what:
        def level(r):
            return run_level(r, key, w)
        ratios = {m: [level(r) / level(b) for r, b in zip(runs[m], runs["none"])]
                  for m in modes[1:]}
        print("%s:\n  %s" % (label, "\n  ".join(
            "%-9s over none: median of %d rounds %.4f (%+.2f %%) +- %.4f; rounds %s"
            % ({"none2": "A/A none", "idle": "idle", "recorder": "recorder"}[m],
               len(ratios[m]), statistics.median(ratios[m]),
               (statistics.median(ratios[m]) - 1) * 100, median_se(ratios[m]),
               " ".join("%.4f" % x for x in ratios[m]))
            for m in modes[1:])))
        lv = {m: [level(r) for r in runs[m]] for m in modes}
        unit = 1e3 if key in PER_STEP else 1.0
        print("  levels (%s; across processes): %s" % (
            "ms per step" if key in PER_STEP else "s",
            ", ".join("%s %s" % (m, " ".join("%.2f" % (x * unit) for x in lv[m]))
                      for m in modes)))
        result[key] = {m: {"ratios": ratios[m], "median": statistics.median(ratios[m]),
                           "se": median_se(ratios[m])} for m in modes[1:]}
    return finish_whole(args, result, load0, took)


def run_together(placed, args, tmp, rnd):
    """Starts one process per (mode, cpu) of `placed` at once, each held to
    its CPU, and waits for all. Per process: its step times (the worker's),
    its whole run's wall time (start to exit, as its launcher saw it) and
    CPU time (getrusage of that child: its own and its waited-for
    children's, start-up and exit included)."""
    import threading

    procs = []
    for i, (mode, cpu) in enumerate(placed):
        cmd, env, out = prepare("none" if mode == "none2" else mode, args, tmp,
                                2 * rnd + i, out_dir="prof_out-%d" % i)
        err = open(os.path.join(tmp, "stderr-%d" % i), "w+")
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err,
                             preexec_fn=lambda cpu=cpu: os.sched_setaffinity(0, {cpu}))
        procs.append({"mode": mode, "cpu": cpu, "p": p, "t0": t0, "out": out, "err": err})

    def reap(r):
        _, status, ru = os.wait4(r["p"].pid, 0)
        r["wall"] = time.perf_counter() - r["t0"]
        r["status"] = os.waitstatus_to_exitcode(status)
        r["run_cpu"] = ru.ru_utime + ru.ru_stime
        r["p"].returncode = r["status"]  # reaped here: Popen must not wait

    waiters = [threading.Thread(target=reap, args=(r,)) for r in procs]
    for t in waiters:
        t.start()
    for t in waiters:
        t.join()
    got = []
    for r in procs:
        r["err"].seek(0)
        text = r["err"].read()
        r["err"].close()
        if r["status"] != 0:
            sys.exit("bench_torch.py: the %s process (CPU %d) exited with %d:\n%s"
                     % (r["mode"], r["cpu"], r["status"], text[-2000:]))
        with open(r["out"]) as f:
            w = json.load(f)
        import shutil

        shutil.rmtree(os.path.join(tmp, "prof_out-%d" % len(got)), ignore_errors=True)
        got.append({"mode": r["mode"], "cpu_id": r["cpu"], "wall": w["times"], "cpu": w["cpu"],
                    "thread": w["thread"], "run_wall": r["wall"], "run_cpu": r["run_cpu"]})
    return got


def pick_cpus(spec):
    """Two CPUs of this process's affinity: `spec` ("0,1"), else the first
    two. Exits with a message when there are not two."""
    mine = sorted(os.sched_getaffinity(0))
    if spec:
        try:
            cpus = [int(x) for x in spec.split(",")]
        except ValueError:
            sys.exit("bench_torch.py: --cpus %r: give two CPU numbers, e.g. --cpus 0,1" % spec)
        if len(cpus) != 2 or cpus[0] == cpus[1] or not set(cpus) <= set(mine):
            sys.exit("bench_torch.py: --cpus %r: give two different CPUs of %s" % (spec, mine))
        return cpus
    if len(mine) < 2:
        sys.exit("bench_torch.py: --concurrent runs two processes at once, one per CPU; "
                 "this process may use only CPU %s (run it where two are free)" % mine)
    return mine[:2]


def concurrent_main(args):
    """--recorder --whole --concurrent: whole processes, two at a time, one
    per CPU, started together: per round a subject (--subjects, in turn:
    the recorder's default, profhost idle, `none` again as the A/A
    control) and its baseline (a process with no profiler, or profhost
    idle), so that both see the same machine while they run (a shared
    VM's speed moves by several percent from one process to the next; two
    processes side by side move together). Which CPU runs the subject
    alternates every len(subjects) rounds, so a difference between the two
    CPUs cancels. Per round the subject over its baseline: per-step medians
    after the warm-up (process CPU, the training thread's CPU, wall) and
    whole runs (CPU from getrusage, wall); per kind the mean of the
    medians of the rounds on either CPU (with its standard error), and the
    median of all its rounds."""
    if args.steps == STEPS:
        args.steps = 1500
    cpus = pick_cpus(args.cpus)
    kinds = []
    for spec in args.subjects.split(","):
        subject, _, base = spec.partition("/")
        if subject not in ("recorder", "idle", "none2") or base not in ("", "none", "idle"):
            sys.exit("bench_torch.py: --subjects %r: give subjects among recorder, idle and "
                     "none2, each beside none (the default) or as SUBJECT/idle, "
                     "comma-separated" % args.subjects)
        kinds.append((subject, base or "none"))
    n = len(kinds)
    rounds = {k: [] for k in kinds}
    load0 = load_average()
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-torch-") as tmp:
        for rnd in range(args.rounds):
            subject, base = kinds[rnd % n]
            swap = (rnd // n) % 2 == 1
            placed = [(subject, cpus[1] if swap else cpus[0]),
                      (base, cpus[0] if swap else cpus[1])]
            s, b = run_together(placed, args, tmp, rnd)
            rounds[(subject, base)].append({"subject": s, "base": b})
            if args.progress:
                sys.stderr.write("round %d/%d: %s on CPU %d, %s on CPU %d: %.1f s\n"
                                 % (rnd + 1, args.rounds, subject, s["cpu_id"], base,
                                    b["cpu_id"], max(s["run_wall"], b["run_wall"])))
    took = time.perf_counter() - t_start
    w = args.warmup
    print("whole processes, concurrent: %d rounds of 2 processes started together, one on "
          "CPU %d and one on CPU %d (the subject's CPU alternating every %d rounds): %s, in "
          "turn, each beside its baseline; %d steps each, prof.recorder{ steps = %d%s "
          "}, torch threads %d, device %s, %d MLP blocks; per-step medians after step %d"
          % (args.rounds, cpus[0], cpus[1], n,
             " / ".join("%s beside %s" % ({"recorder": "the recorder's default",
                                          "idle": "profhost idle",
                                          "none2": "none (A/A)"}[k[0]], k[1]) for k in kinds),
             args.steps, args.rec_steps, "" if args.recorder_phases else ", phases = false",
             args.threads, args.device, args.blocks, w))
    result = {"method": "whole_concurrent", "steps": args.steps, "rounds": args.rounds,
              "cpus": cpus, "rec_steps": args.rec_steps, "phases": args.recorder_phases,
              "blocks": args.blocks, "load_average_start": load0,
              "load_average_end": load_average(), "seconds": took,
              "pairs": {"%s/%s" % k: v for k, v in rounds.items()}}

    for key, label in (("cpu", "per step, process CPU time (all threads)"),
                       ("thread", "per step, the training thread's CPU time (profhost's "
                                  "threads left out)"),
                       ("wall", "per step, wall-clock time"),
                       ("run_cpu", "whole run, CPU time of the process tree (start-up "
                                   "and exit included)"),
                       ("run_wall", "whole run, wall-clock time of the launcher")):
        print("%s:" % label)
        result[key] = {}
        for kind in kinds:
            subject, base = kind
            ratios = [run_level(p["subject"], key, w) / run_level(p["base"], key, w)
                      for p in rounds[kind]]
            if not ratios:
                continue
            med = statistics.median(ratios)
            # The two CPUs differ (by up to 1 % in some runs): the median
            # of each CPU's rounds, then their mean, cancels that where the
            # median of all rounds picks between two clusters.
            sides = [[r for r, p in zip(ratios, rounds[kind]) if p["subject"]["cpu_id"] == c]
                     for c in cpus]
            sides = [x for x in sides if x]
            bal = sum(statistics.median(x) for x in sides) / len(sides)
            bal_se = math.sqrt(sum(median_se(x) ** 2 if len(x) > 1 else 0.0
                                   for x in sides)) / len(sides)
            print("  %-9s over %-4s beside it: %.4f (%+.2f %%) +- %.4f, the mean of the two "
                  "CPUs' medians (%s); median of all %d rounds %.4f; rounds %s"
                  % ({"none2": "A/A none", "idle": "idle", "recorder": "recorder"}[subject],
                     base, bal, (bal - 1) * 100, bal_se,
                     ", ".join("%+.2f %%" % ((statistics.median(x) - 1) * 100) for x in sides),
                     len(ratios), med, " ".join("%.4f" % x for x in ratios)))
            result[key]["%s/%s" % kind] = {"ratios": ratios, "median": med,
                                           "se": median_se(ratios), "balanced": bal,
                                           "balanced_se": bal_se}
        unit = 1e3 if key in PER_STEP else 1.0
        print("  levels of the baselines (%s; they move together with their subjects): %s"
              % ("ms per step" if key in PER_STEP else "s",
                 " ".join("%.2f" % (run_level(p["base"], key, w) * unit)
                          for k in kinds for p in rounds[k])))
    return finish_whole(args, result, load0, took)


# --phases-check: a recorder dump, a window, a second dump, in one
# process (the dumps on either side, so that a drift of the process's
# speed cancels). No operator events (PROF_TORCH_OPS=off): the window's
# steps cost what the dumps' do but for the module hooks.
PHASES_POLICY = """-- bench_torch.py --phases-check
prof.schedule { skip_first = %(skip)d, wait = 0, warmup = 2, active = %(n)d, cycles = 1 }
prof.recorder { steps = %(n)d }
prof.on_step(function(s)
  if s.step == %(dump0)d or s.step == %(dump1)d then
    assert(prof.dump { steps = %(n)d, reason = "phases check" })
  end
end)
"""
PHASES = ("data", "forward", "backward", "optimizer")


def summary_phases(path):
    """The `median` row of a summary.txt's step phases: {column: ms}."""
    with open(path) as f:
        lines = f.read().splitlines()
    for i, l in enumerate(lines):
        if l.startswith("Step phases (ms)"):
            cols = lines[i + 1].split()[1:]  # total, data, forward, ...
            for m in lines[i + 2:]:
                if m.split()[:1] == ["median"]:
                    return dict(zip(cols, (float(x) for x in m.split()[1:])))
    return None


def phases_main(args):
    """--phases-check: the step phases of recorder dumps (between windows:
    forward inferred, no module hooks) against a window's (module hooks),
    in one process, --rounds processes: per phase the mean of the two
    dumps' medians over the window's median; the median of that ratio over
    the rounds within 10 % (#29)."""
    import glob

    n = 20
    dump0 = 11 + n              # a dump of steps 12..31
    skip = dump0 + 1            # warm-up 32, 33; the window 34..53
    dump1 = skip + 2 + n + 10 + n - 1   # a dump of steps 64..83
    steps = dump1 + 5
    print("phases check: %d rounds of one process x %d steps: prof.dump of steps %d-%d, a "
          "window of steps %d-%d (module hooks), prof.dump of steps %d-%d (the recorder's "
          "phases between windows: forward inferred); no operator events "
          "(PROF_TORCH_OPS=off); the medians of each summary.txt"
          % (args.rounds, steps, dump0 - n + 1, dump0, skip + 2, skip + 1 + n,
             dump1 - n + 1, dump1))
    ratios = {ph: [] for ph in PHASES}
    result = {"rounds": []}
    with tempfile.TemporaryDirectory(prefix="bench-torch-") as tmp:
        for rnd in range(args.rounds):
            policy = os.path.join(tmp, "phases.lua")
            with open(policy, "w") as f:
                f.write(PHASES_POLICY % dict(skip=skip, n=n, dump0=dump0, dump1=dump1))
            out = os.path.join(tmp, "out%d" % rnd)
            env = {k: v for k, v in os.environ.items()
                   if not (k.startswith("PROF_") or k == "LD_PRELOAD")}
            env["PROF_TORCH_OPS"] = "off"
            env["PROF_LOG"] = "quiet"
            cmd = [args.prof, "run", "-s", policy, "-o", out, "--", args.python,
                   os.path.abspath(__file__), "--worker", "none", "--out",
                   os.path.join(tmp, "w%d.json" % rnd), "--steps", str(steps),
                   "--threads", str(args.threads), "--device", args.device]
            subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            win = glob.glob(os.path.join(out, "*", "rank0", "window0_*", "summary.txt"))
            dumps = sorted(glob.glob(os.path.join(out, "*", "rank0", "recorder*_*",
                                                  "summary.txt")))
            if len(win) != 1 or len(dumps) != 2:
                sys.exit("bench_torch.py --phases-check: expected one window and two dumps, "
                         "found %s and %s" % (win, dumps))
            w = summary_phases(win[0])
            d = [summary_phases(x) for x in dumps]
            row = {}
            for ph in PHASES:
                mean = (d[0][ph] + d[1][ph]) / 2
                row[ph] = (w[ph], d[0][ph], d[1][ph], mean / w[ph] if w[ph] else float("nan"))
                ratios[ph].append(row[ph][3])
            print("  round %d (%s, %s, %s): %s" % (
                rnd + 1, os.path.basename(os.path.dirname(dumps[0])),
                os.path.basename(os.path.dirname(win[0])),
                os.path.basename(os.path.dirname(dumps[1])), ", ".join(
                    "%s %.3f/%.3f/%.3f ms: %.3f" % (ph, x[1], x[0], x[2], x[3])
                    for ph, x in row.items())))
            result["rounds"].append({ph: list(x) for ph, x in row.items()})
    ok = all(abs(statistics.median(ratios[ph]) - 1) <= 0.10 for ph in PHASES)
    print("per phase, the dumps' mean over the window's (median of %d rounds): %s; "
          "within 10 %% (#29): %s" % (args.rounds, ", ".join(
              "%s %.3f" % (ph, statistics.median(ratios[ph])) for ph in PHASES),
              "yes" if ok else "NO"))
    result["median_ratio"] = {ph: statistics.median(ratios[ph]) for ph in PHASES}
    result["within_10_percent"] = ok
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", choices=["none", "torch", "profhost", "idle", "recorder",
                                        "paired", "phasecost"])
    p.add_argument("--out")
    p.add_argument("--steps", type=int, default=STEPS)
    p.add_argument("--threads", type=int, default=1, help="torch threads (1)")
    p.add_argument("--blocks", type=int, default=16,
                   help="the MLP's blocks (16); with --recorder, --blocks 1 makes a step "
                        "so short that profhost's fixed cost per step stands out of the "
                        "noise (read the paired run's us per step)")
    p.add_argument("--device", default="cpu",
                   help="where the loop runs (cpu; cuda on a GPU machine: each step "
                        "ends with torch.cuda.synchronize())")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (3)")
    p.add_argument("--prof", default=os.path.join(os.environ.get("PROFHOST_BUILD", "build"),
                                                  "bin", "prof"))
    p.add_argument("--python", default="/usr/bin/python3")
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--ops", action="store_true",
                   help="compare the operator collectors (record_shapes on both)")
    p.add_argument("--memory", action="store_true",
                   help="compare the allocation recorders: torch.profiler's profile_memory and "
                        "profhost's (record_shapes on both); with --recorder, the recorder "
                        "keeping operators and allocations")
    p.add_argument("--with-stack", action="store_true",
                   help="compare the operators' call stacks (record_shapes and with_stack "
                        "on both)")
    p.add_argument("--recorder", action="store_true",
                   help="the flight recorder's cost: profhost idle vs recorder on")
    p.add_argument("--no-phases", dest="recorder_phases", action="store_false",
                   help="with --recorder: prof.recorder{ phases = false }")
    p.add_argument("--no-cuda", dest="recorder_cuda", action="store_false",
                   help="with --recorder: prof.recorder{ cuda = false } (no GPU work "
                        "between windows; on a GPU machine, CUPTI's cost left out)")
    p.add_argument("--whole", action="store_true",
                   help="with --recorder: whole processes, none / none (A/A) / idle / "
                        "recorder interleaved by round (--steps 1500 unless given)")
    p.add_argument("--concurrent", action="store_true",
                   help="with --recorder --whole: two processes at once, one per CPU, "
                        "each subject beside a process with no profiler (needs two "
                        "CPUs; see --cpus)")
    p.add_argument("--cpus", help="with --concurrent: the two CPUs to use (e.g. 0,1; the "
                                  "first two this process may use)")
    p.add_argument("--subjects", default="recorder,idle,none2",
                   help="with --concurrent: what runs beside `none`, in turn: some of "
                        "recorder, idle, none2 (the A/A control), or SUBJECT/idle to run "
                        "it beside profhost idle (recorder,idle,none2)")
    p.add_argument("--progress", action="store_true",
                   help="with --concurrent: a line on stderr per round")
    p.add_argument("--phases-cost", action="store_true",
                   help="the step phases' own cost between windows: the recorder on, the "
                        "phases timed in alternate steps of one process (#29)")
    p.add_argument("--phases-check", action="store_true",
                   help="a dump's step phases against a window's in one process (#29)")
    p.add_argument("--separate", action="store_true",
                   help="with --recorder: separate processes per mode (the earlier method) "
                   "instead of pairing inside each process")
    p.add_argument("--block", type=int, default=10,
                   help="with --recorder: steps per off or on block (10)")
    p.add_argument("--warmup", type=int, default=20,
                   help="with --recorder: steps before the first block, recorder on (20)")
    p.add_argument("--pairs", type=int, default=8,
                   help="with --recorder: off/on block pairs per process (8); sets --steps")
    p.add_argument("--rec-steps", type=int, default=6,
                   help="with --recorder: prof.recorder{ steps } (6: segments of 3 steps, "
                   "so each on-block rotates and gives a segment back)")
    args = p.parse_args()
    if args.memory and args.with_stack:
        p.error("--memory and --with-stack compare different things: give one")
    if args.worker:
        worker(args.worker, args.out, args.steps, args.threads, args.ops, args.device,
               args.memory, args.with_stack, args.blocks)
        return 0
    if args.phases_check:
        return phases_main(args)
    if args.phases_cost:
        if args.steps == STEPS:
            args.steps = 3000
        return phasecost_main(args)
    if args.recorder:
        if args.whole:
            return concurrent_main(args) if args.concurrent else whole_main(args)
        return recorder_main(args) if args.separate else paired_main(args)

    actions = schedule_actions(args.steps, **SCHEDULE)
    record = [i for i, a in enumerate(actions) if a == "record"]
    after = [i for i in range(record[-1] + 2, args.steps)]  # +2: the export step
    modes = ["none", "torch", "profhost"]
    first = actions.index("warmup")
    parts = {"all": range(args.steps), "record": record, "after": after,
             "before": range(5, first)}
    got = {m: {c: {k: [] for k in parts} for c in ("wall", "cpu", "thread")} for m in modes}
    walls = {m: [] for m in modes}
    opcounts = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="bench-torch-") as tmp:
        for rnd in range(args.rounds):
            for m in modes:
                times, cpu, wall, ops = run_one(m, args, tmp, rnd)
                opcounts[m].append(ops)
                thread = run_one.thread
                for k, idx in parts.items():
                    got[m]["wall"][k] += [times[i] for i in idx]
                    got[m]["cpu"][k] += [cpu[i] for i in idx]
                    got[m]["thread"][k] += [thread[i] for i in idx]
                walls[m].append(wall)

    print("%d steps x %d rounds, schedule %s, torch threads %d; medians per step"
          % (args.steps, args.rounds, SCHEDULE, args.threads))
    result = {"steps": args.steps, "rounds": args.rounds, "schedule": SCHEDULE,
              "threads": args.threads, "clocks": {}}
    for clock, what in (("cpu", "process CPU time (all threads)"),
                        ("thread", "the training thread's CPU time (the profilers' own "
                                   "threads left out)"), ("wall", "wall-clock time")):
        base = {k: med_ms(got["none"][clock][k]) for k in parts}
        print("\n%s\n%-9s %12s %12s %12s %14s %12s %13s" % (
            what, "mode", "all steps", "recorded", "after last", "rec. overhead", "after ovh.",
            "after/before"))
        rows = []
        for m in modes:
            r = {k: med_ms(got[m][clock][k]) for k in parts}
            ovh = (r["record"] / base["record"] - 1) * 100
            aft = (r["after"] / base["after"] - 1) * 100
            ab = r["after"] / r["before"]
            rows.append(dict(mode=m, overhead_record_pct=ovh, overhead_after_pct=aft,
                             after_over_before=ab,
                             **{"median_%s_ms" % k: v for k, v in r.items()}))
            print("%-9s %9.3f ms %9.3f ms %9.3f ms %13.1f%% %11.1f%% %13.3f"
                  % (m, r["all"], r["record"], r["after"], ovh, aft, ab))
        t, ph = rows[1]["overhead_record_pct"], rows[2]["overhead_record_pct"]
        ratio = ph / t if t > 0 else float("nan")
        print("profhost's overhead in recorded steps / torch.profiler's: %.2f (target <= 0.5)"
              % ratio)
        result["clocks"][clock] = {"rows": rows, "ratio": ratio}
    print("\nwhole run, median wall: " + ", ".join(
        "%s %.2f s" % (m, statistics.median(walls[m])) for m in modes))
    result["run_wall_s"] = {m: statistics.median(walls[m]) for m in modes}
    base = result["run_wall_s"]["none"]
    extra = {m: result["run_wall_s"][m] - base for m in modes}
    print("whole run, extra wall over none: torch %.2f s, profhost %.2f s: ratio %.2f"
          % (extra["torch"], extra["profhost"],
             extra["profhost"] / extra["torch"] if extra["torch"] > 0 else float("nan")))
    if args.memory:
        print("[memory] events per window (round 1): profhost %s" % (opcounts["profhost"][0],))
        result["memory_events"] = opcounts
    elif args.ops:
        print("operator events per window (round 1): torch %s, profhost %s"
              % (opcounts["torch"][0], opcounts["profhost"][0]))
        result["operator_events"] = opcounts
    if args.with_stack:
        print("operator events per window (round 1): torch %s, profhost %s"
              % (opcounts["torch"][0][0], opcounts["profhost"][0][0]))
        print("stacks file lines per window (round 1): torch's export_stacks %s, "
              "profhost's operator_stacks.txt %s"
              % (opcounts["torch"][0][1], opcounts["profhost"][0][1]))
        result["operator_events_and_stack_lines"] = opcounts
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

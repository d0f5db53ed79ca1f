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
on a shared machine) and in wall-clock time. "after/before" compares, within
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

--recorder measures the flight recorder's cost (#15): the same loop under
`prof run` with a policy that opens no window, with and without
prof.recorder{ steps = 20 } (which records every step between windows),
and with no profiler; per step, all steps after the first 10.
    python3 tests/bench/bench_torch.py --prof build/bin/prof --recorder

The worker (--worker MODE) is what runs the loop; it writes the time of every
step as JSON. Needs torch (Debian's python3-torch: /usr/bin/python3).
"""

import argparse
import json
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

def worker(mode, out_path, steps, threads, ops=False):
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(4096, 64), torch.randint(0, 10, (4096,)))
    loader = DataLoader(data, batch_size=32, shuffle=True, drop_last=True)
    blocks = []
    for _ in range(16):
        blocks += [nn.Linear(64, 64), nn.LayerNorm(64), nn.GELU()]
    model = nn.Sequential(*blocks, nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    prof = None
    trace_dir = None
    if mode == "torch":
        from torch.profiler import ProfilerActivity, profile, schedule

        trace_dir = tempfile.mkdtemp(prefix="bench-torch-")
        n = [0]

        def ready(p):
            n[0] += 1
            p.export_chrome_trace(os.path.join(trace_dir, "window%d.json" % n[0]))

        prof = profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                       with_stack=not ops, schedule=schedule(**SCHEDULE), on_trace_ready=ready)
        prof.__enter__()

    times, cpu = [], []
    step = 0
    t0 = time.perf_counter()
    c0 = time.process_time()
    while step < steps:
        for x, y in loader:
            loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if prof is not None:
                prof.step()
            t1 = time.perf_counter()
            c1 = time.process_time()
            times.append(t1 - t0)
            cpu.append(c1 - c0)
            t0, c0 = t1, c1
            step += 1
            if step >= steps:
                break
    if prof is not None:
        prof.__exit__(None, None, None)
    with open(out_path, "w") as f:
        json.dump({"mode": mode, "times": times, "cpu": cpu,
                   "trace_dir": trace_dir if mode == "torch" else None}, f)


# ---------------------------------------------------------------- the runner

POLICY = """-- bench_torch.py: the same schedule as torch.profiler.schedule(%(s)s)
prof.schedule { skip_first = %(skip_first)d, wait = %(wait)d, warmup = %(warmup)d,
                active = %(active)d, cycles = %(repeat)d }
%(capture)s
"""
CAPTURE = "prof.capture { cpu_samples = { hz = 999 } }"
CAPTURE_OPS = "prof.capture { record_shapes = true }"
# --recorder: no window either way; the recorder on or not.
IDLE_POLICY = "-- bench_torch.py --recorder: profhost loaded, no window\n"
RECORDER_POLICY = "-- bench_torch.py --recorder: no window, the recorder on\n" \
    "prof.recorder { steps = 20%s }\n"


def count_ops(mode, tmp, trace_dir):
    """Operator events per window: profhost's cpu_op events, torch's
    operator events (its legacy export has no categories: all but the
    ProfilerStep labels)."""
    import glob

    out = []
    if mode == "profhost":
        for path in sorted(glob.glob(os.path.join(tmp, "prof_out", "*", "rank0", "window*",
                                                  "trace.json"))):
            with open(path) as f:
                evs = json.load(f)["traceEvents"]
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



def run_one(mode, args, tmp, rnd):
    out = os.path.join(tmp, "%s-%d.json" % (mode, rnd))
    cmd = [args.python, os.path.abspath(__file__), "--worker", mode, "--out", out,
           "--steps", str(args.steps), "--threads", str(args.threads)] + \
        (["--ops"] if args.ops else [])
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("PROF_") or k == "LD_PRELOAD":
            del env[k]
    if mode in ("profhost", "idle", "recorder"):
        policy = os.path.join(tmp, "policy.lua")
        with open(policy, "w") as f:
            if mode == "profhost":
                f.write(POLICY % dict(SCHEDULE,
                                      s=", ".join("%s=%d" % kv for kv in SCHEDULE.items()),
                                      capture=CAPTURE_OPS if args.ops else CAPTURE))
            else:
                f.write(RECORDER_POLICY % ("" if args.recorder_phases else
                                           ", phases = false")
                        if mode == "recorder" else IDLE_POLICY)
        env["PROF_LOG"] = "quiet"
        cmd = [args.prof, "run", "-s", policy, "-o", os.path.join(tmp, "prof_out"), "--"] + cmd
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    with open(out) as f:
        got = json.load(f)
    ops = count_ops(mode, tmp, got.get("trace_dir")) if args.ops else []
    if mode != "none":
        import shutil

        shutil.rmtree(os.path.join(tmp, "prof_out"), ignore_errors=True)
    return got["times"], got["cpu"], wall, ops


def med_ms(xs):
    return statistics.median(xs) * 1e3 if xs else float("nan")


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


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", choices=["none", "torch", "profhost", "idle", "recorder"])
    p.add_argument("--out")
    p.add_argument("--steps", type=int, default=STEPS)
    p.add_argument("--threads", type=int, default=1, help="torch threads (1)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (3)")
    p.add_argument("--prof", default=os.path.join(os.environ.get("PROFHOST_BUILD", "build"),
                                                  "bin", "prof"))
    p.add_argument("--python", default="/usr/bin/python3")
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--ops", action="store_true",
                   help="compare the operator collectors (record_shapes on both)")
    p.add_argument("--recorder", action="store_true",
                   help="the flight recorder's cost: profhost idle vs recorder on")
    p.add_argument("--no-phases", dest="recorder_phases", action="store_false",
                   help="with --recorder: prof.recorder{ phases = false }")
    args = p.parse_args()
    if args.worker:
        worker(args.worker, args.out, args.steps, args.threads, args.ops)
        return 0
    if args.recorder:
        return recorder_main(args)

    actions = schedule_actions(args.steps, **SCHEDULE)
    record = [i for i, a in enumerate(actions) if a == "record"]
    after = [i for i in range(record[-1] + 2, args.steps)]  # +2: the export step
    modes = ["none", "torch", "profhost"]
    first = actions.index("warmup")
    parts = {"all": range(args.steps), "record": record, "after": after,
             "before": range(5, first)}
    got = {m: {c: {k: [] for k in parts} for c in ("wall", "cpu")} for m in modes}
    walls = {m: [] for m in modes}
    opcounts = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="bench-torch-") as tmp:
        for rnd in range(args.rounds):
            for m in modes:
                times, cpu, wall, ops = run_one(m, args, tmp, rnd)
                opcounts[m].append(ops)
                for k, idx in parts.items():
                    got[m]["wall"][k] += [times[i] for i in idx]
                    got[m]["cpu"][k] += [cpu[i] for i in idx]
                walls[m].append(wall)

    print("%d steps x %d rounds, schedule %s, torch threads %d; medians per step"
          % (args.steps, args.rounds, SCHEDULE, args.threads))
    result = {"steps": args.steps, "rounds": args.rounds, "schedule": SCHEDULE,
              "threads": args.threads, "clocks": {}}
    for clock, what in (("cpu", "process CPU time (all threads)"), ("wall", "wall-clock time")):
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
    if args.ops:
        print("operator events per window (round 1): torch %s, profhost %s"
              % (opcounts["torch"][0], opcounts["profhost"][0]))
        result["operator_events"] = opcounts
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Nanoseconds per torch operator under each operator collector (not a test).

One tiny operator in a Python loop (torch.add of two 1-element tensors, no
autograd: one aten::add per call, where a collector's cost per operator is
most of the time), one block of --ops calls a step (profhost.step()), in
one process under `prof run` per record_shapes setting. A block is timed
as ten sub-blocks and counts its fastest (a sub-block is about a
millisecond: on a shared machine the fastest is the one that no other job
interrupted). Each cycle of the schedule is six steps:

  (left out)  the host writes the last window meanwhile
  none        no profiler: no callback registered in torch
  torch       torch.profiler.profile(activities=[CPU], record_shapes=...)
              around the block (its start, stop and event list not timed)
  armed       two steps: profhost's observer registered, not recording
              (the step before the warm-up, and the warm-up): torch's own
              cost of a global RecordFunction callback (the observer
              returns at once)
  profhost    the observer recording (the window's one recorded step)

so every mode is measured in the same process, interleaved, with the same
record_shapes (prof.capture{ record_shapes = ... }, torch's record_shapes).
A block's overhead is relative to the `none` block of its own cycle (the
machine's load drifts slowly against a cycle's few milliseconds); the
table gives, per mode, the median ns per call over all blocks of all
--rounds processes, and the median relative overhead times the median
`none` block, for the calling thread's CPU time (time.thread_time_ns: the
host's thread and the machine's other jobs left out, though not their
effect on the CPU's caches) and for wall-clock time. The ratios are of
the median relative overheads.
--before PROF runs the same with another build's prof in each round
(rows MODE@before), for a before/after pair measured side by side.
--memory runs, instead of the two record_shapes settings, record_shapes
off without and with profile_memory (torch.profiler's profile_memory=True,
prof.capture{ profile_memory = true }; rows MODE-noshapes+mem): each call
of torch.add allocates its 4-byte result and frees it, so the difference
is each profiler's cost of one allocation and one free.

    /usr/bin/python3 tests/bench/bench_torch_ops.py --prof build/bin/prof
    /usr/bin/python3 tests/bench/bench_torch_ops.py --prof build/bin/prof --rounds 3 \
        --before /tmp/old/build/bin/prof
    /usr/bin/python3 tests/bench/bench_torch_ops.py --prof build/bin/prof --memory

The worker (--worker) runs the loop and writes its blocks as JSON. Needs
torch (Debian's python3-torch: /usr/bin/python3).
"""

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

# prof run's schedule: idle steps, then cycles of four idle steps (wait:
# one left out while the host writes the last window, none, torch, and the
# step before the warm-up, where the bridge registers the observer), the
# warm-up and one recorded step.
SCHEDULE = dict(skip_first=3, wait=4, warmup=1, active=1)
POLICY = """-- bench_torch_ops.py
prof.schedule { skip_first = %(skip_first)d, wait = %(wait)d, warmup = %(warmup)d,
                active = %(active)d, cycles = %(cycles)d }
prof.capture { record_shapes = %(shapes)s, profile_memory = %(memory)s }
prof.export { key_averages = false, report = false, raw = false, memory_timeline = false }
"""


SUB = 10  # sub-blocks a block


def block(torch, n):
    """n calls of torch.add on 1-element tensors, in SUB sub-blocks; the
    fastest sub-block's (thread CPU ns, wall ns), scaled to n calls."""
    a, b = torch.ones(1), torch.ones(1)
    add = torch.add
    k = max(1, n // SUB)
    cpu = wall = None
    for _ in range(SUB):
        c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
        for _ in range(k):
            add(a, b)
        c, t = time.thread_time_ns() - c0, time.perf_counter_ns() - t0
        cpu = c if cpu is None else min(cpu, c)
        wall = t if wall is None else min(wall, t)
    return cpu * n // k, wall * n // k


def worker(args):
    """One block a step under prof run (profhost.step()). A step's mode
    follows the observer's state at its start and its place in the cycle:
    registered, `profhost` in the recorded step and `armed` before it; not
    registered, the cycle's second step is `none`, its third `torch`
    (torch.profiler around the block), its first is left out."""
    import torch
    import profhost
    from torch.profiler import ProfilerActivity, profile

    torch.set_num_threads(1)
    profhost.manual_steps()
    suffix = ("-shapes" if args.shapes else "-noshapes") + ("+mem" if args.memory else "")
    out = []
    cycle = SCHEDULE["wait"] + SCHEDULE["warmup"] + SCHEDULE["active"]
    steps = SCHEDULE["skip_first"] + cycle * args.blocks + 1
    block(torch, args.ops)  # warm-up
    for s in range(steps):
        ops = sys.modules.get("profhost._ops")
        lib = getattr(ops, "_lib", None)
        installed = bool(lib.profhost_torchops_installed()) if lib is not None else False
        k = s - SCHEDULE["skip_first"]
        slot = k % cycle
        events = 0
        if k < 0 or k // cycle >= args.blocks or (not installed and slot not in (1, 2)):
            block(torch, args.ops)  # left out (the host writes the last window)
            profhost.step()
            continue
        if installed:
            mode = "profhost" if slot == cycle - 1 else "armed"
            cpu, wall = block(torch, args.ops)
        elif slot == 2:
            mode = "torch"
            p = profile(activities=[ProfilerActivity.CPU], record_shapes=args.shapes,
                        profile_memory=args.memory)
            p.__enter__()
            cpu, wall = block(torch, args.ops)
            p.__exit__(None, None, None)
            events = sum(1 for e in p.events() if e.name == "aten::add")
        else:
            mode = "none"
            cpu, wall = block(torch, args.ops)
        out.append(dict(mode=mode + suffix, cpu=cpu, wall=wall, step=s, cycle=k // cycle,
                        events=events, path=getattr(ops, "_path", None)))
        profhost.step()
    with open(args.out, "w") as f:
        json.dump(out, f)


def run_worker(args, tmp, prof, shapes, rnd, memory=False):
    """One worker under `prof run` (build `prof`); its blocks, and the
    aten::add events of its first window's trace.json."""
    out = os.path.join(tmp, "worker-%d-%d.json" % (shapes, rnd))
    cmd = [args.python, os.path.abspath(__file__), "--worker", "--out", out,
           "--ops", str(args.ops), "--blocks", str(args.blocks)] + \
        (["--shapes"] if shapes else []) + (["--memory"] if memory else [])
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PROF_") and k != "LD_PRELOAD"}
    events = None
    if True:
        policy = os.path.join(tmp, "policy.lua")
        with open(policy, "w") as f:
            f.write(POLICY % dict(SCHEDULE, cycles=args.blocks,
                                  shapes="true" if shapes else "false",
                                  memory="true" if memory else "false"))
        env["PROF_LOG"] = "quiet"
        env["PROF_TORCH_OPS"] = "observer"
        outdir = os.path.join(tmp, "prof_out")
        cmd = [prof, "run", "-s", policy, "-o", outdir, "--"] + cmd
    r = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       universal_newlines=True)
    if r.returncode:
        sys.stderr.write(r.stderr)
        raise SystemExit("bench_torch_ops: %s failed (exit %d)" % (" ".join(cmd), r.returncode))
    with open(out) as f:
        got = json.load(f)
    if True:
        # the aten::add events of the first window: the observer did record
        traces = sorted(glob.glob(os.path.join(outdir, "*", "rank0", "window0*",
                                               "trace.json*")))
        if traces:
            import gzip
            import shutil

            opener = gzip.open if traces[0].endswith(".gz") else open
            with opener(traces[0], "rt") as f:
                evs = json.load(f)["traceEvents"]
            events = sum(1 for e in evs if e.get("cat") == "cpu_op" and e["name"] == "aten::add")
            shutil.rmtree(outdir, ignore_errors=True)
    return got, events


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", action="store_true")
    p.add_argument("--shapes", action="store_true")
    p.add_argument("--memory", action="store_true",
                   help="record_shapes off, without and with profile_memory")
    p.add_argument("--out")
    p.add_argument("--ops", type=int, default=1000, help="calls per block (1000)")
    p.add_argument("--blocks", type=int, default=40,
                   help="cycles per process (40)")
    p.add_argument("--rounds", type=int, default=3,
                   help="processes per setting and build, in turn (3)")
    p.add_argument("--prof", default=os.path.join(os.environ.get("PROFHOST_BUILD", "build"),
                                                  "bin", "prof"))
    p.add_argument("--python", default="/usr/bin/python3")
    p.add_argument("--before", help="another build's prof, run beside --prof (rows MODE@before)")
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args()
    if args.worker:
        worker(args)
        return 0

    # per mode: its blocks' ns per call (absolute), and per cycle its
    # relative overhead over the same cycle's none block (paired: the
    # machine's load drifts slowly against a cycle's few milliseconds)
    absn = {}
    rel = {}
    events = {}
    paths = set()
    with tempfile.TemporaryDirectory(prefix="bench-torch-ops-") as tmp:
        for rnd in range(args.rounds):
            if args.memory:  # shapes off, memory off and on
                runs = [(args.prof, "", 0, False), (args.prof, "", 0, True)]
            else:
                runs = [(args.prof, "", 0, False), (args.prof, "", 1, False)]
            if args.before:
                runs += [(args.before, "@before", s, m) for _, _, s, m in runs]
            for prof, tag, shapes, memory in runs:
                got, ev = run_worker(args, tmp, prof, shapes, rnd, memory)
                none = {}
                for b in got:
                    b["mode"] += tag
                    if b["mode"].startswith("none"):
                        none[b["cycle"]] = b
                    if b.get("events"):
                        events.setdefault(b["mode"], b["events"])
                    if b.get("path"):
                        paths.add(b["path"])
                for b in got:
                    for c in ("cpu", "wall"):
                        absn.setdefault((b["mode"], c), []).append(b[c] / args.ops)
                        n = none.get(b["cycle"])
                        if n and n[c] > 0:
                            rel.setdefault((b["mode"], c), []).append(b[c] / n[c] - 1)
                if ev is not None:
                    events[("profhost-shapes" if shapes else "profhost-noshapes") +
                           ("+mem" if memory else "") + tag] = ev
    med = {}
    for (m, c), v in absn.items():
        med.setdefault(m, {})[c] = statistics.median(v)
    for (m, c), v in rel.items():
        med[m][c + "_rel"] = statistics.median(v)
    for m, r in med.items():
        base = med["none" + m[m.index("-"):]]
        for c in ("cpu", "wall"):
            r[c + "_over"] = r[c + "_rel"] * base[c]
    print("torch.add on 1-element tensors, %d calls a block, %d cycles a process, "
          "%d rounds; medians, ns per call" % (args.ops, args.blocks, args.rounds))
    print("%-26s %10s %12s %10s %12s %10s" % ("mode", "thread CPU", "CPU overhead", "wall",
                                               "wall overh.", "aten::add"))
    ratios = {}
    for tag in ("", "@before") if args.before else ("",):
        for s in ("-noshapes", "-noshapes+mem") if args.memory else ("-noshapes", "-shapes"):
            for m in ("none", "torch", "armed", "profhost"):
                r = med.get(m + s + tag)
                if r:
                    print("%-26s %10.0f %12.0f %10.0f %12.0f %10s" % (
                        m + s + tag, r["cpu"], r["cpu_over"], r["wall"], r["wall_over"],
                        events.get(m + s + tag, "-")))
            t, a, ph = (med.get(m + s + tag) for m in ("torch", "armed", "profhost"))
            if not (t and a and ph):
                continue
            key = s[1:] + tag
            ratios[key] = {c: ph[c + "_rel"] / t[c + "_rel"] if t[c + "_rel"] > 0 else None
                           for c in ("cpu", "wall")}
            ratios[key]["observer_cpu_ns"] = ph["cpu_over"] - a["cpu_over"]
            ratios[key]["observer_cpu_rel"] = ph["cpu_rel"] - a["cpu_rel"]
            print("  record_shapes %s%s%s: profhost's overhead / torch.profiler's: thread CPU "
                  "%.2f, wall %.2f; torch's own (armed) %.0f ns, the observer's (recorded - "
                  "armed) %.0f ns of thread CPU (%.1f %% of the bare call)" % (
                      "on" if s == "-shapes" else "off",
                      ", profile_memory" if s.endswith("+mem") else "", tag,
                      ratios[key]["cpu"] or float("nan"), ratios[key]["wall"] or float("nan"),
                      a["cpu_over"], ph["cpu_over"] - a["cpu_over"],
                      100 * (ph["cpu_rel"] - a["cpu_rel"])))
    if paths != {"observer"}:
        print("WARNING: profhost's operator path was %s, not the observer" % sorted(paths))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"ops": args.ops, "blocks": args.blocks, "rounds": args.rounds,
                       "medians_ns": med, "ratios": ratios, "events": events}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

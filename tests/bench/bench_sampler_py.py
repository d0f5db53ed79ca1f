"""What CPU sampling costs a Python training loop (not a test).

Runs bench_torch.py's loop (a deep, narrow MLP on synthetic data through a
DataLoader, SGD, torch's default threads unless --threads) under `prof run`
with one long recording window, once per mode, each in a fresh process, the
modes interleaved (their order rotated each round) for several rounds:

  off       profhost with no CPU sampling (steps and phases only)
  cpu99     cpu_samples = {}                      (the default: CPU time, 99 Hz)
  wall99    cpu_samples = { clock = "wall" }      (99 Hz)
  cpu999    cpu_samples = { hz = 999 }
  wall999   cpu_samples = { hz = 999, clock = "wall" }
  snap      range_stacks = true: no signal at all, only the Python bridge's
            stack snapshots (100 per second, each taking the GIL), the part
            of the cost that is Python's own (not in the default modes)

With --sleepers N, N Python threads beside the loop wake every 5 ms.
Reports, per mode, the median time per recorded step, in wall-clock
time and in process CPU time (all threads, profhost's included), with the
overhead against `off`, and the samples the window recorded.

    python3 tests/bench/bench_sampler_py.py --prof build/bin/prof
    python3 tests/bench/bench_sampler_py.py --prof build/bin/prof --rounds 7 --modes off,wall999
    python3 tests/bench/bench_sampler_py.py --prof build/bin/prof --against old/bin/prof

Needs torch for /usr/bin/python3 (Debian's python3-torch).
"""

import argparse
import glob
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_torch  # noqa: E402  (the loop: bench_torch.worker)

SKIP, WARMUP, ACTIVE = 10, 2, 100
STEPS = SKIP + WARMUP + ACTIVE + 3  # +3: the step that closes the window and two more

CAPTURE = {
    "off": "",
    "cpu99": "prof.capture { cpu_samples = {} }",
    "wall99": 'prof.capture { cpu_samples = { clock = "wall" } }',
    "cpu999": "prof.capture { cpu_samples = { hz = 999 } }",
    "wall999": 'prof.capture { cpu_samples = { hz = 999, clock = "wall" } }',
    "snap": "prof.capture { range_stacks = true }",
}
DEFAULT_MODES = "off,cpu99,wall99,cpu999,wall999"


def run_one(mode, prof, args, tmp, rnd):
    """One run of `mode` under `prof`: the recorded steps' times (wall,
    process CPU) and the window's sample count."""
    tag = "%s-%s-%d" % (mode, "b" if prof != args.prof else "a", rnd)
    out = os.path.join(tmp, tag + ".json")
    outdir = os.path.join(tmp, "out-" + tag)
    policy = os.path.join(tmp, "%s.lua" % mode)
    with open(policy, "w") as f:
        f.write("prof.schedule { skip_first = %d, warmup = %d, active = %d, cycles = 1 }\n%s\n"
                % (SKIP, WARMUP, ACTIVE, CAPTURE[mode]))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PROF_") and k != "LD_PRELOAD"}
    env["PROF_LOG"] = "quiet"
    cmd = [prof, "run", "-s", policy, "-o", outdir, "--", args.python,
           os.path.abspath(__file__), "--worker", "--out", out,
           "--threads", str(args.threads), "--sleepers", str(args.sleepers)]
    r = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       text=True)
    if r.returncode != 0:
        sys.exit("bench_sampler_py: %s failed (%d):\n%s" % (mode, r.returncode, r.stderr))
    with open(out) as f:
        got = json.load(f)
    samples = 0
    for path in glob.glob(os.path.join(outdir, "*", "rank*", "window*", "trace.json*")):
        with (gzip.open if path.endswith(".gz") else open)(path, "rt") as f:
            samples += json.load(f).get("profhost", {}).get("cpu_samples", {}).get(
                "samples", 0)
    return got["times"], got["cpu"], samples


def worker(args):
    """The loop, beside `args.sleepers` Python threads that wake every 5 ms
    (what a progress bar's monitor or a heartbeat thread does)."""
    import threading
    import time

    def sleeper():
        while True:
            time.sleep(0.005)

    for _ in range(args.sleepers):
        threading.Thread(target=sleeper, daemon=True).start()
    bench_torch.worker("none", args.out, STEPS, args.threads)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--sleepers", type=int, default=0,
                   help="Python threads beside the loop that sleep 5 ms at a time (0)")
    p.add_argument("--prof", default=os.path.join(os.environ.get("PROFHOST_BUILD", "build"),
                                                  "bin", "prof"))
    p.add_argument("--python", default="/usr/bin/python3")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--modes", default=DEFAULT_MODES,
                   help="comma-separated, the first is the baseline (%s)" % DEFAULT_MODES)
    p.add_argument("--against", metavar="PROF",
                   help="also run each mode but 'off' under this other build's prof "
                        "(rows 'MODE@other'), interleaved with the first")
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args()
    if args.worker:
        worker(args)
        return 0
    modes = args.modes.split(",")
    for m in modes:
        if m not in CAPTURE:
            p.error("--modes: unknown mode %r (known: %s)" % (m, ", ".join(CAPTURE)))
    rec = range(SKIP + WARMUP, SKIP + WARMUP + ACTIVE)
    runs = [(m, m, args.prof) for m in modes]
    if args.against:
        runs += [(m + "@other", m, args.against) for m in modes if m != "off"]
    got = {label: {"wall": [], "cpu": [], "samples": []} for label, _, _ in runs}
    with tempfile.TemporaryDirectory(prefix="bench-sampler-py-") as tmp:
        for rnd in range(args.rounds):
            order = runs[rnd % len(runs):] + runs[:rnd % len(runs)]
            for label, m, prof in order:
                times, cpu, samples = run_one(m, prof, args, tmp, rnd)
                got[label]["wall"] += [times[i] for i in rec]
                got[label]["cpu"] += [cpu[i] for i in rec]
                got[label]["samples"].append(samples)
    print("%d recorded steps x %d rounds, torch threads %s, %d sleeping Python threads; "
          "medians per recorded step"
          % (len(rec), args.rounds, args.threads or "default", args.sleepers))
    print("%-14s %12s %9s %12s %9s %16s" % ("mode", "wall", "overhead", "CPU (all)",
                                           "overhead", "samples/window"))
    result = {"rounds": args.rounds, "threads": args.threads, "sleepers": args.sleepers,
              "rows": []}
    base = {c: statistics.median(got[modes[0]][c]) for c in ("wall", "cpu")}
    for m, _, _ in runs:
        w = statistics.median(got[m]["wall"])
        c = statistics.median(got[m]["cpu"])
        row = dict(mode=m, wall_ms=w * 1e3, cpu_ms=c * 1e3,
                   wall_overhead_pct=(w / base["wall"] - 1) * 100,
                   cpu_overhead_pct=(c / base["cpu"] - 1) * 100,
                   samples=statistics.median(got[m]["samples"]))
        result["rows"].append(row)
        print("%-14s %9.3f ms %8.1f%% %9.3f ms %8.1f%% %16d" % (
            m, row["wall_ms"], row["wall_overhead_pct"], row["cpu_ms"],
            row["cpu_overhead_pct"], row["samples"]))
    print("(overheads against the first mode, %s)" % modes[0])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

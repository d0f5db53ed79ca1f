#!/usr/bin/env python3
"""Checks the GPU side of profhost traces (used by scripts/gpu-smoke.sh).

    gpu_smoke_check.py OUT_DIR --kernel NAME_PART [--kernel ...] [--range NAME]
                       [--nvtx-range NAME] [--copies] [--min-windows N] [--dumps]

Looks at every window under OUT_DIR and fails (exit 1, one line per problem)
unless each window has: kernels whose names contain each NAME_PART; copies in
both directions with a positive bandwidth (--copies); an ac2g arrow from a
CUDA API call to every kernel it launched; GPU tracks named; the device's
properties; no GPU records dropped; and, for each --range, a
gpu_user_annotation span of that name covering kernels launched inside it.
--nvtx-range checks a range recorded through NVTX the same way, and only
warns when NVTX capture is not in this build. --dumps checks the flight
recorder's dumps (recorder<K>_steps<a>-<b>) instead of the windows, and
--min-windows counts them. Standard library only.
"""
import argparse
import glob
import gzip
import json
import os
import sys


def load(d):
    p = os.path.join(d, "trace.json")
    if os.path.exists(p):
        with open(p, "rb") as f:
            return json.loads(f.read().decode("utf-8"))
    with gzip.open(p + ".gz", "rb") as f:
        return json.loads(f.read().decode("utf-8"))


def check_window(d, a):
    problems, warnings = [], []
    t = load(d)
    ev = t["traceEvents"]
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    api = {e["args"]["correlation"]: e for e in ev
           if e.get("cat") in ("cuda_runtime", "cuda_driver") and "args" in e}
    if not kernels:
        problems.append("no kernel events")
    for part in a.kernel:
        if not any(part in k["name"] for k in kernels):
            problems.append("no kernel named like %r" % part)
    starts = {e["id"] for e in ev if e.get("cat") == "ac2g" and e.get("ph") == "s"}
    ends = {e["id"] for e in ev if e.get("cat") == "ac2g" and e.get("ph") == "f"}
    launched = [k for k in kernels if k["args"].get("correlation") in api]
    if not launched:
        problems.append("no kernel has its launching API call in the trace")
    unflowed = [k for k in launched if k["args"]["correlation"] not in (starts & ends)]
    # a graph launch draws one arrow for all its kernels
    if len(unflowed) > len(launched) // 2:
        problems.append("%d of %d launched kernels have no ac2g arrow" % (len(unflowed), len(launched)))
    if a.copies:
        for kind in ("HtoD", "DtoH"):
            cp = [e for e in ev if e.get("cat") == "gpu_memcpy" and
                  e.get("args", {}).get("copy kind") == kind]
            if not cp:
                problems.append("no %s copy" % kind)
            elif not all(e["args"]["memory bandwidth (GB/s)"] > 0 for e in cp):
                problems.append("a %s copy has no bandwidth" % kind)
    names = [e for e in ev if e.get("ph") == "M" and e.get("name") == "thread_name"
             and e.get("args", {}).get("name", "").startswith("stream ")]
    if not names:
        problems.append("no GPU stream track is named")
    if not t.get("deviceProperties"):
        problems.append("deviceProperties is empty")
    dropped = t.get("profhost", {}).get("counters", {}).get("gpu_dropped", 0)
    if dropped:
        problems.append("%d GPU records dropped" % dropped)
    for name, required in [(r, True) for r in a.range] + [(r, False) for r in a.nvtx_range]:
        cpu = [e for e in ev if e.get("cat") == "user_annotation" and e.get("name") == name]
        gpu = [e for e in ev if e.get("cat") == "gpu_user_annotation" and e.get("name") == name]
        msg = None
        if not cpu:
            msg = "no range %r on the CPU" % name
        elif not gpu:
            msg = "range %r has no gpu_user_annotation span" % name
        elif not any(g["ts"] <= k["ts"] and k["ts"] + k["dur"] <= g["ts"] + g["dur"] + 0.01
                     for g in gpu for k in kernels):
            msg = "range %r's GPU spans hold no kernel" % name
        if msg:
            (problems if required else warnings).append(msg)
    return problems, warnings


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--kernel", action="append", default=[])
    p.add_argument("--range", action="append", default=[])
    p.add_argument("--nvtx-range", action="append", default=[])
    p.add_argument("--copies", action="store_true")
    p.add_argument("--min-windows", type=int, default=1)
    p.add_argument("--dumps", action="store_true")
    a = p.parse_args()
    dirs = sorted(glob.glob(os.path.join(a.out, "*", "rank*",
                                         "recorder*_steps*" if a.dumps else "window*_steps*")))
    if len(dirs) < a.min_windows:
        print("FAIL %s: %d window(s), expected at least %d" % (a.out, len(dirs), a.min_windows))
        return 1
    bad = 0
    for d in dirs:
        problems, warnings = check_window(d, a)
        for w in warnings:
            print("warn %s: %s" % (d, w))
        for pr in problems:
            print("FAIL %s: %s" % (d, pr))
        bad += len(problems)
        if not problems:
            print("ok   %s" % d)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

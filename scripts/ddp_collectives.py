#!/usr/bin/python3
"""Statistical check of issue #25 (b): every collective of a recorded step
is in its window.

    /usr/bin/python3 scripts/ddp_collectives.py [BUILD] [RUNS]

Runs a 2-rank gloo DDP loop (torch in /usr/bin/python3; the ranks are
started with MASTER_ADDR/RANK/WORLD_SIZE, torchrun fails on Python 3.11)
under BUILD/bin/prof (default build-test) RUNS times (default 10), two
windows of 3 steps per rank, and counts the rank-windows whose steps lack
their gloo:all_reduce (DDP's one bucket: one a step) or c10d::allreduce_,
and the gloo:all_reduce events that ended after their window's last step
(kept by the start rule). Rank 1 sleeps 10 ms a step, so rank 0 waits in
the collective. Exits 1 when a window lacked one. A stress loop: not part
of ctest (the e2e test_torch_ops.py checks the rule deterministically).
"""
import glob
import json
import os
import socket
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROG = """
import sys, time
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
torch.set_num_threads(1)
dist.init_process_group('gloo')
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 4)))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(32, 64), torch.randint(0, 4, (32,))
for i in range(int(sys.argv[1])):
    if rank == 1:
        time.sleep(0.010)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
dist.destroy_process_group()
"""
POLICY = "prof.schedule { wait = 5, warmup = 1, active = 3, cycles = 2 }\n"


def one_run(prof, tmp, k):
    out = os.path.join(tmp, "out%d" % k)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    procs = []
    for rank in (0, 1):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("PROF_") and k not in ("LD_PRELOAD", "PYTHONPATH")}
        env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                    "RANK": str(rank), "WORLD_SIZE": "2"})
        procs.append(subprocess.Popen(
            [prof, "run", "-s", os.path.join(tmp, "policy.lua"), "-o", out,
             "--set", "output.run=ddp", "--", "/usr/bin/python3",
             os.path.join(tmp, "ddp.py"), "25"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    for p in procs:
        _, err = p.communicate(timeout=300)
        if p.returncode != 0:
            sys.exit("run %d failed: %s" % (k, err))
    windows, bad, late = 0, [], 0
    for d in sorted(glob.glob(os.path.join(out, "ddp", "rank*", "window*"))):
        with open(os.path.join(d, "trace.json")) as f:
            ev = json.load(f)["traceEvents"]
        steps = [e for e in ev if e.get("ph") == "X" and
                 e.get("name", "").startswith("ProfilerStep#")]
        end = max(s["ts"] + s["dur"] for s in steps)
        gloo = [e for e in ev if e.get("name") == "gloo:all_reduce"]
        c10d = [e for e in ev if e.get("name") == "c10d::allreduce_"]
        windows += 1
        late += sum(1 for e in gloo if e["ts"] + e["dur"] > end)
        if len(gloo) != len(steps) or len(c10d) != len(steps):
            bad.append("%s: %d steps, %d gloo:all_reduce, %d c10d::allreduce_"
                       % (os.path.relpath(d, out), len(steps), len(gloo), len(c10d)))
    return windows, bad, late


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build-test")
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    prof = os.path.join(build, "bin", "prof")
    windows, bad, late = 0, [], 0
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "ddp.py"), "w") as f:
            f.write(PROG)
        with open(os.path.join(tmp, "policy.lua"), "w") as f:
            f.write(POLICY)
        for k in range(runs):
            w, b, l = one_run(prof, tmp, k)
            windows, late = windows + w, late + l
            bad += ["run %d %s" % (k, x) for x in b]
    for line in bad:
        print(line)
    print("%d rank-windows in %d runs: %d lacked a collective of their steps; "
          "%d gloo:all_reduce ended after their window's last step (kept)"
          % (windows, runs, len(bad), late))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

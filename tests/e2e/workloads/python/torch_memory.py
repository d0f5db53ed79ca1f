"""A deterministic CPU loop that allocates (tests/e2e/test_torch_memory.py).

    torch_memory.py torch STEPS OUT.json   under torch.profiler (CPU,
        profile_memory, record_shapes; skip 3, wait 1, warm-up 1, 3
        recorded steps); writes OUT.json: per key_averages() row its
        calls, cpu_memory_usage and self_cpu_memory_usage (bytes) and the
        table torch prints
    torch_memory.py plain STEPS            the same loop, steps by
        profhost.step() (run it under profhost)
    torch_memory.py beside STEPS           as plain, with torch.profiler
        (profile_memory) of the program's own around step 6; prints one
        JSON line: torch's rows of that step, and whether torch's profiler
        is still enabled after it
    torch_memory.py grow STEPS             each step keeps one more 256 KiB
        tensor (aten::mul) and frees its other tensors; at step STEPS it
        SIGKILLs itself
"""
import json
import os
import signal
import sys
import time

import torch

torch.manual_seed(0)
torch.set_num_threads(1)
mode, steps = sys.argv[1], int(sys.argv[2])
x, w = torch.randn(64, 128), torch.randn(128, 256)


def gap():
    """20 us without an allocation. torch's profiler places allocations in
    operators by microsecond times (Debian's torch 1.13, and 2.x's Kineto
    path): an allocation or free in the same microsecond as an operator's
    start or end would count in it."""
    end = time.perf_counter_ns() + 20000
    while time.perf_counter_ns() < end:
        pass


def one_step():
    # each operator allocates its output (64 KiB), called directly (no
    # caller of the same span: torch's profiler would nest them by their
    # microsecond times, either way round); all three freed together
    a = torch.mm(x, w)
    gap()
    b = torch.clamp_min(a, 0.0)
    gap()
    c = torch._log_softmax(b, 1, False)
    gap()
    del a, b, c


def rows(prof):
    return {e.key: [e.count, e.cpu_memory_usage, e.self_cpu_memory_usage]
            for e in prof.key_averages()}


if mode == "torch":
    from torch.profiler import ProfilerActivity, profile, schedule

    def ready(p):
        with open(sys.argv[3], "w") as f:
            json.dump({"rows": rows(p), "table": p.key_averages().table(
                sort_by="self_cpu_memory_usage", row_limit=-1)}, f)

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True,
                 schedule=schedule(skip_first=3, wait=1, warmup=1, active=3, repeat=1),
                 on_trace_ready=ready) as prof:
        for _ in range(steps):
            one_step()
            prof.step()
elif mode in ("plain", "beside"):
    import profhost

    out = {}
    for i in range(steps):
        if mode == "beside" and i == 6:
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
                one_step()
            out["torch_rows"] = rows(prof)
        else:
            one_step()
        profhost.step()
    out["profiler_enabled"] = bool(torch.autograd._profiler_enabled())
    print(json.dumps(out))
elif mode == "grow":
    import profhost

    keep = []
    base = torch.ones(256, 256)  # 256 KiB of float32
    for i in range(steps + 1):
        one_step()
        keep.append(base.mul(2.0))
        if i == steps:
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        profhost.step()

"""A training loop that keeps its own torch.profiler, as users' scripts do.

Each --session OPTS@START runs torch.profiler.profile over the loop from
step START, with schedule(wait=1, warmup=1, active=2) (four steps), the
options in OPTS ('+'-joined: stack, shapes, memory, flops; or none) and an
on_trace_ready handler that writes export_chrome_trace to
OUT/session<i>.json. Sessions must not overlap each other (torch allows one
profiler per thread). Inside the model a record_function("my_block") label;
on a CUDA build with a GPU, emit_nvtx around the forward pass when no
session runs (on a CPU-only torch emit_nvtx raises, with or without
profhost).

At the end OUT/sessions.json lists each session: its options, its file, and
what torch itself says it recorded (some event with a Python stack, with
input shapes, with flops, with memory use), so a test can check that every
option reached torch.
"""
import argparse
import contextlib
import json
import os

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule
from torch.utils.data import DataLoader, TensorDataset

OPTIONS = {"stack": "with_stack", "shapes": "record_shapes", "memory": "profile_memory",
           "flops": "with_flops"}
LENGTH = 4  # wait 1 + warmup 1 + active 2


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(32, 64)
        self.b = nn.Linear(64, 4)

    def forward(self, x):
        with record_function("my_block"):
            return self.b(torch.relu(self.a(x)))


def parse_session(text):
    opts, _, start = text.partition("@")
    names = [] if opts == "none" else opts.split("+")
    for n in names:
        if n not in OPTIONS:
            raise SystemExit("unknown option %r in --session %r" % (n, text))
    return {"opts": names, "start": int(start)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--session", action="append", default=[], type=parse_session)
    args = p.parse_args()

    torch.manual_seed(0)
    model = Block()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    data = DataLoader(TensorDataset(torch.randn(512, 32), torch.randint(0, 4, (512,))),
                      batch_size=16)
    gpu_nvtx = torch.version.cuda is not None and torch.cuda.is_available()
    done, cur, left = [], None, 0
    it = iter(data)
    for step in range(args.steps):
        todo = [s for s in args.session if s["start"] == step]
        if todo and cur is None:
            s = todo[0]
            i = len(done)
            path = os.path.join(args.out, "session%d.json" % i)
            s["file"] = path

            def ready(prof, s=s):
                prof.export_chrome_trace(s["file"])
                evs = prof.events()
                s["stack"] = any(e.stack for e in evs)
                s["shapes"] = any(e.input_shapes and any(e.input_shapes)
                                  for e in evs if e.name == "aten::addmm")
                s["flops"] = any(e.flops for e in evs if e.name == "aten::addmm")
                s["memory"] = any(e.cpu_memory_usage for e in evs)

            cur = profile(activities=[ProfilerActivity.CPU],
                          schedule=schedule(wait=1, warmup=1, active=2, repeat=1),
                          on_trace_ready=ready,
                          **{OPTIONS[o]: True for o in s["opts"]})
            cur.start()
            left = LENGTH
            done.append(s)
        try:
            x, y = next(it)
        except StopIteration:
            it = iter(data)
            x, y = next(it)
        nvtx = (torch.autograd.profiler.emit_nvtx() if gpu_nvtx and cur is None
                else contextlib.nullcontext())
        with nvtx:
            loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if cur is not None:
            cur.step()
            left -= 1
            if left == 0:
                cur.stop()
                cur = None
    if cur is not None:
        cur.stop()
    with open(os.path.join(args.out, "sessions.json"), "w") as f:
        json.dump(done, f)
    print("done", args.steps, len(done))


if __name__ == "__main__":
    main()

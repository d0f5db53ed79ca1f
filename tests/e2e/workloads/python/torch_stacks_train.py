"""A deterministic CPU training loop whose operators have known Python call
stacks (tests/e2e/test_torch_stacks.py).

    torch_stacks_train.py STEPS torch OUT.json [STACKS.txt]
        under torch.profiler (CPU, record_shapes, with_stack; the schedule
        skip 3, wait 1, warm-up 1, 3 recorded steps); what it recorded is
        written to OUT.json: each operator's name, input shapes and stack,
        aten::addmm's rows of key_averages(group_by_input_shape=True) and
        the rows of key_averages(group_by_stack_n=5); with STACKS.txt, also
        torch's export_stacks("self_cpu_time_total") there
    torch_stacks_train.py STEPS plain
        no profiler of its own (run it under profhost); at the end it
        prints one JSON line: whether a profile function was set before
        the window (step 2), in the middle of the run (step 6) and after
        it, and in a child forked at step 6

The loop's forward operators are called from functions at least five
frames deep below the step (a model of nested modules, a loss helper), so
the first five entries of their stacks are frames torch and profhost both
see being called; the frames that were running when either began to
track (the loop and the module) are on lines both runs share.
"""
import json
import sys

import torch

torch.manual_seed(0)
torch.set_num_threads(1)
steps, mode = int(sys.argv[1]), sys.argv[2]


class Block(torch.nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.fc = torch.nn.Linear(n_in, n_out)

    def forward(self, x):
        return torch.tanh(self.fc(x))


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.Sequential(Block(16, 32), Block(32, 32))
        self.head = torch.nn.Linear(32, 4)

    def forward(self, x):
        return self.head(self.blocks(x))


model = Model()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x, y = torch.randn(8, 16), torch.randn(8, 4)


def loss_of(out):
    return torch.nn.functional.mse_loss(out, y, reduction="sum")


def one_step():
    opt.zero_grad()
    loss = loss_of(model(x))
    loss.backward()
    opt.step()


class NoProfiler:
    """Under profhost: notes at steps 2 and 6 whether a profile function
    is set, at step 6 also in a child forked there (a DataLoader's
    worker)."""

    def __init__(self):
        self.n = 0
        self.seen = {}

    def start(self):
        pass

    def step(self):
        self.n += 1
        if self.n == 2:
            self.seen["before"] = sys.getprofile() is not None
        if self.n != 6:
            return
        import os

        self.seen["in_window"] = sys.getprofile() is not None
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.write(w, b"1" if sys.getprofile() is not None else b"0")
            os._exit(0)
        os.close(w)
        self.seen["in_child"] = os.read(r, 1) == b"1"
        os.close(r)
        os.waitpid(pid, 0)

    def stop(self):
        if self.seen:
            self.seen["after"] = sys.getprofile() is not None
            print(json.dumps(self.seen))


def train(prof):
    for _ in range(steps):
        one_step(); prof.step()  # noqa: E702 (one line: the same line in either run)


def torch_profiler(path, stacks_path):
    from torch.profiler import ProfilerActivity, profile, schedule

    def ready(p):
        evs = list(p.events())
        out = {
            "ops": [{"name": e.name, "shapes": e.input_shapes, "stack": e.stack} for e in evs],
            "addmm_shapes": sorted([str(e.input_shapes), e.count]
                                   for e in p.key_averages(group_by_input_shape=True)
                                   if e.key == "aten::addmm"),
            "by_stack": sorted([e.key, e.stack, e.count]
                               for e in p.key_averages(group_by_stack_n=5)),
        }
        with open(path, "w") as f:
            json.dump(out, f)
        if stacks_path:
            p.export_stacks(stacks_path, "self_cpu_time_total")

    return profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=True,
                   schedule=schedule(skip_first=3, wait=1, warmup=1, active=3, repeat=1),
                   on_trace_ready=ready)


if mode == "torch":
    prof = torch_profiler(sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None)
else:
    prof = NoProfiler()
prof.start(); train(prof); prof.stop()  # noqa: E702 (the same line in either run)

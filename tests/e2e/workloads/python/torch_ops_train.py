"""A deterministic CPU training loop (tests/e2e/test_torch_ops.py).

    torch_ops_train.py STEPS torch OUT.json   under torch.profiler (CPU,
        record_shapes, with_flops; the schedule skip 3, wait 1, warm-up 1,
        3 recorded steps); what it recorded is written to OUT.json: calls
        per event name, aten::addmm's input shapes, FLOPs per operator
        (key_averages), and the events torch.profiler's own step labels
        make ("own": the same profiler and schedule over an empty loop)
    torch_ops_train.py STEPS plain             no profiler of its own (run it
        under profhost)

At the end it prints one JSON line: the operator path profhost used, its
observer's registered callbacks and at::hasGlobalCallbacks() after the last
window, and whether torch's profiler is enabled.
"""
import json
import sys

import torch

torch.manual_seed(0)
torch.set_num_threads(1)
steps, mode = int(sys.argv[1]), sys.argv[2]
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                            torch.nn.Linear(32, 32), torch.nn.Tanh(),
                            torch.nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x, y = torch.randn(8, 16), torch.randn(8, 4)


def one_step():
    opt.zero_grad()
    out = model(x)
    # reduction="sum": no aten::div_ calling aten::div_, which torch's
    # EventList folds or not by its events' microsecond times
    loss = torch.nn.functional.mse_loss(out * 2.0 + 1.0, y, reduction="sum")
    loss.backward()
    opt.step()


if mode == "torch":
    from torch.profiler import ProfilerActivity, profile, schedule

    path = sys.argv[3]

    def counts_of(evs):
        counts = {}
        for e in evs:
            counts[e.name] = counts.get(e.name, 0) + 1
        return counts

    own = {}

    def ready_own(p):
        own.update(counts_of(p.events()))

    def ready(p):
        # Debian's torch has no Kineto (its chrome trace is the legacy
        # format, without shapes): read its events instead.
        evs = list(p.events())
        out = {"counts": counts_of(evs), "own": own,
               "addmm_shapes": sorted(json.dumps(e.input_shapes) for e in evs
                                      if e.name == "aten::addmm"),
               "flops": {e.key: e.flops for e in p.key_averages() if e.flops},
               "backward_seq": sorted(e.sequence_nr for e in evs
                                      if e.name.endswith("Backward0") and e.sequence_nr >= 0
                                      and not e.name.startswith("autograd::engine::"))}
        with open(path, "w") as f:
            json.dump(out, f)

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_flops=True,
                 schedule=schedule(skip_first=3, wait=1, warmup=1, active=3, repeat=1),
                 on_trace_ready=ready_own) as prof:
        for _ in range(steps):
            prof.step()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_flops=True,
                 schedule=schedule(skip_first=3, wait=1, warmup=1, active=3, repeat=1),
                 on_trace_ready=ready) as prof:
        for _ in range(steps):
            one_step()
            prof.step()
else:
    for _ in range(steps):
        one_step()

ops = sys.modules.get("profhost._ops")
state = ops.observer_installed() if ops else None
print(json.dumps({"path": ops.path() if ops else None,
                  "installed": state[0] if state else None,
                  "torch_callbacks": state[1] if state else None,
                  "profiler_enabled": bool(torch.autograd._profiler_enabled())}))

"""A torch loop that records when each step boundary can have happened.

After each optimizer.step() (and, with --explicit, after each
profhost.step()) it appends time.monotonic_ns() (the host's clock) to a list,
written as JSON to --out at the end: {"opt": [...], "explicit": [...]};
with --probe, "hooks_on" says after each optimizer.step() whether the
bridge's phase hooks were in place.
"""
import argparse
import json
import sys
import time

import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=30)
p.add_argument("--explicit", action="store_true")
p.add_argument("--out", required=True)
p.add_argument("--adam", action="store_true")
p.add_argument("--explicit-forward", action="store_true",
               help="report the forward phase with profhost.phase (two model calls in it)")
p.add_argument("--probe", action="store_true",
               help="after each optimizer step, note whether the bridge's phase hooks are on")
args = p.parse_args()

if args.explicit or args.explicit_forward:
    import profhost

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
opt = (torch.optim.Adam if args.adam else torch.optim.SGD)(model.parameters(), lr=0.01)
data = torch.utils.data.DataLoader(
    torch.utils.data.TensorDataset(torch.randn(256, 32), torch.randint(0, 4, (256,))),
    batch_size=16)
opt_t, explicit_t, hooks_on = [], [], []
it = iter(data)
for i in range(args.steps):
    try:
        x, y = next(it)
    except StopIteration:
        it = iter(data)
        x, y = next(it)
    if args.explicit_forward:
        with profhost.phase("forward"):
            model(x)
            loss = nn.functional.cross_entropy(model(x), y)
    else:
        loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    opt_t.append(time.monotonic_ns())
    if args.probe:
        phases = sys.modules.get("profhost._phases")
        hooks_on.append(bool(phases and phases.is_on()))
    if args.explicit:
        profhost.step()
        explicit_t.append(time.monotonic_ns())
# Whose code runs now for a module call, a batch and a backward pass: after
# the last window these must be torch's own again.
hooked = [getattr(f, "__module__", "?")
          for f in (nn.Module.__call__,
                    torch.utils.data.dataloader._BaseDataLoaderIter.__next__,
                    torch.autograd.backward)]
with open(args.out, "w") as f:
    json.dump({"opt": opt_t, "explicit": explicit_t, "hooked_by": hooked, "hooks_on": hooks_on},
              f)
print("done", args.steps)

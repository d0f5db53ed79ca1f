"""A plain PyTorch training loop, for trying profhost on: no profhost in it.

A small MLP learns a synthetic classification task. It runs on the GPU when
there is one (or --device cuda), else on the CPU, where the default run takes
a few seconds. Run it under the host with no change:

    prof run -s examples/profile.lua -- python examples/train.py
    prof run -- python examples/train.py --steps 300 --workers 2

Each optimizer.step() is a step for profhost (see docs/python.md), so the
policy's schedule lands on exactly these iterations, and each captured step
is split into data loading, forward, backward and optimizer phases.
"""

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Synthetic(Dataset):
    """`n` random points in `dim` dimensions, labelled by a random linear map."""

    def __init__(self, n, dim, classes, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, dim, generator=g)
        self.y = (self.x @ torch.randn(dim, classes, generator=g)).argmax(1)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def make_model(dim, hidden, classes):
    return nn.Sequential(
        nn.Linear(dim, hidden), nn.ReLU(),
        nn.Linear(hidden, hidden), nn.ReLU(),
        nn.Linear(hidden, classes),
    )


def train_loop(model, loader, opt, loss_fn, device, steps):
    """Runs `steps` optimizer steps (looping over the data as needed);
    returns the last loss and the time per step in ms, one per step."""
    times, loss, step = [], None, 0
    model.train()
    t0 = time.perf_counter()
    while step < steps:
        for x, y in loader:
            x = x.to(device, non_blocking=True)
            y = y.to(device, non_blocking=True)
            loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if device.type == "cuda":
                torch.cuda.synchronize()
            t1 = time.perf_counter()
            times.append((t1 - t0) * 1e3)
            t0 = t1
            step += 1
            if step >= steps:
                break
    return loss.item(), times


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200, help="optimizer steps (200)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--dim", type=int, default=128, help="input size (128)")
    p.add_argument("--hidden", type=int, default=256, help="hidden size (256)")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--samples", type=int, default=4096, help="data set size (4096)")
    p.add_argument("--workers", type=int, default=0, help="DataLoader worker processes (0)")
    p.add_argument("--device", default="auto", help="auto (default), cpu or cuda")
    p.add_argument("--threads", type=int, default=0,
                   help="torch intra-op threads (0: torch's default)")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)

    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    data = Synthetic(args.samples, args.dim, args.classes)
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=True,
                        num_workers=args.workers, drop_last=True,
                        pin_memory=device.type == "cuda")
    model = make_model(args.dim, args.hidden, args.classes).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    loss, times = train_loop(model, loader, opt, loss_fn, device, args.steps)
    if not args.quiet:
        times.sort()
        print("train.py: %d steps on %s, loss %.3f, median step %.2f ms"
              % (args.steps, device, loss, times[len(times) // 2]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

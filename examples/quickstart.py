"""A small PyTorch training loop (CPU or GPU) for the demo.

It marks its steps with profhost.step() and its phases with profhost.range,
which do nothing when the program runs without profhost. Under profhost the
first profhost.step() takes over from the automatic (optimizer) steps, and
ranges named "forward", "backward" and "optimizer" are the program's own
phases, counted instead of the automatic ones (docs/python.md). Run it under
the host with:

    prof run -s examples/profile.lua -- python3 examples/quickstart.py
"""
import time

import profhost

try:
    import torch
except ImportError:  # the demo still runs, with a stand-in workload
    torch = None


def train_torch(steps):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.randn(64, 256, device=device)
    target = torch.randint(0, 10, (64,), device=device)
    for step in range(steps):
        with profhost.range("forward"):
            loss = torch.nn.functional.cross_entropy(model(data), target)
        with profhost.range("backward"):
            opt.zero_grad()
            loss.backward()
        with profhost.range("optimizer"):
            opt.step()
        profhost.step()
    print("trained %d steps on %s, final loss %.3f" % (steps, device, loss.item()))


def train_stand_in(steps):
    for step in range(steps):
        with profhost.range("work"):
            time.sleep(0.005)
        profhost.step()
    print("ran %d stand-in steps (install python3-torch for the real loop)" % steps)


if __name__ == "__main__":
    (train_torch if torch is not None else train_stand_in)(30)

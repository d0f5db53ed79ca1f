"""A small encoder model trained on the CPU, for prof.capture{ modules = true }.

The model, as named_modules() names it (each called once a step unless
said):
    Model (the root, by its class)
      embed
      encoder
        encoder.layers.0 .. encoder.layers.2
          encoder.layers.N.attn
            encoder.layers.N.attn.q
          encoder.layers.N.ff
        encoder.slow        deliberately slow: 30 ms of busy Python
      norm                  called twice a step
    CrossEntropyLoss (a second root: the loss module)

Each step prints "hooks <pre> <post>", the number of torch's global module
hooks at its end; after the loop, "after <pre> <post>".

Usage: modules_model.py STEPS
"""
import sys
import time

import torch
from torch import nn

SLOW_NS = 30_000_000


class Attn(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.q = nn.Linear(d, d)

    def forward(self, x):
        return torch.relu(self.q(x))


class Layer(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.attn = Attn(d)
        self.ff = nn.Linear(d, d)

    def forward(self, x):
        return self.ff(self.attn(x)) + x


class Slow(nn.Module):
    def forward(self, x):
        t0 = time.monotonic_ns()
        while time.monotonic_ns() - t0 < SLOW_NS:
            pass
        return x


class Encoder(nn.Module):
    def __init__(self, d, n):
        super().__init__()
        self.layers = nn.ModuleList([Layer(d) for _ in range(n)])
        self.slow = Slow()

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.slow(x)


class Model(nn.Module):
    def __init__(self, d=16, n=3, classes=4):
        super().__init__()
        self.embed = nn.Linear(8, d)
        self.encoder = Encoder(d, n)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, x):
        x = self.norm(self.embed(x))
        return self.head(self.norm(self.encoder(x)))


def global_hooks():
    mm = torch.nn.modules.module
    return len(mm._global_forward_pre_hooks), len(mm._global_forward_hooks)


def main():
    steps = int(sys.argv[1])
    torch.manual_seed(0)
    model = Model()
    loss_fn = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(4, 8), torch.randint(0, 4, (4,))
    for _ in range(steps):
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print("hooks %d %d" % global_hooks(), flush=True)
    print("after %d %d" % global_hooks(), flush=True)


if __name__ == "__main__":
    main()

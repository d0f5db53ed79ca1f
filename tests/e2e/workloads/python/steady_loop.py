"""A steady PyTorch CPU training loop: every step does the same work.

A DataLoader over a fixed tensor data set (no workers), an MLP of --blocks
Linear+ReLU blocks, a loss module, backward and SGD, on one intra-op thread
(so steps keep the same length on a busy machine). With --slow-at K, the
K-th iteration (from 0) sleeps --slow-ms more before its forward. Prints
"done N". Never calls profhost: its steps are the optimizer's.
"""
import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=40)
p.add_argument("--blocks", type=int, default=8)
p.add_argument("--width", type=int, default=128)
p.add_argument("--slow-at", type=int, default=-1)
p.add_argument("--slow-ms", type=float, default=300)
args = p.parse_args()

torch.set_num_threads(1)
torch.manual_seed(0)
layers = []
for _ in range(args.blocks):
    layers += [nn.Linear(args.width, args.width), nn.ReLU()]
model = nn.Sequential(*layers, nn.Linear(args.width, 10))
loss_fn = nn.CrossEntropyLoss()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = DataLoader(TensorDataset(torch.randn(32 * args.steps, args.width),
                                torch.randint(0, 10, (32 * args.steps,))), batch_size=32)
n = 0
for x, y in data:
    if n == args.slow_at:
        time.sleep(args.slow_ms / 1000)
    loss = loss_fn(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    n += 1
print("done", n)

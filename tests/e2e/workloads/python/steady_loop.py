"""A steady PyTorch CPU training loop: every step does the same work.

A DataLoader over a fixed tensor data set (no workers), an MLP of --blocks
Linear+ReLU blocks, a loss module, backward and SGD, on one intra-op thread
(so steps keep the same length on a busy machine). Prints "done N".
"""
import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=40)
p.add_argument("--blocks", type=int, default=8)
p.add_argument("--width", type=int, default=128)
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
    loss = loss_fn(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    n += 1
print("done", n)

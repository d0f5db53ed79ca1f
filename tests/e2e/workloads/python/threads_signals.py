"""An application with its own threads and its own signal handlers.

Worker threads compute while the main thread runs a loop (a torch training
loop, or with --no-torch plain Python); SIGALRM fires every 2 ms
(setitimer), SIGUSR2 and SIGTERM are sent to the process itself. Everything
is checked at the end; "ok" is printed only when all of it behaved.
"""
import argparse
import os
import signal
import sys
import threading

p = argparse.ArgumentParser()
p.add_argument("--no-torch", action="store_true")
p.add_argument("--steps", type=int, default=40)
args = p.parse_args()

counts = {"alrm": 0, "usr2": 0, "term": 0}


def handler(signum, frame):
    name = {signal.SIGALRM: "alrm", signal.SIGUSR2: "usr2", signal.SIGTERM: "term"}[signum]
    counts[name] += 1


for s in (signal.SIGALRM, signal.SIGUSR2, signal.SIGTERM):
    signal.signal(s, handler)
signal.setitimer(signal.ITIMER_REAL, 0.002, 0.002)

results = [None] * 3


def work(i):
    total = 0
    for k in range(200000):
        total += (k * (i + 1)) % 7
    results[i] = total


threads = [threading.Thread(target=work, args=(i,), name="worker%d" % i) for i in range(3)]
for t in threads:
    t.start()

if args.no_torch:
    acc = 0
    for step in range(args.steps):
        acc += sum(range(20000))
        if step == 5:
            os.kill(os.getpid(), signal.SIGUSR2)
        if step == 10:
            os.kill(os.getpid(), signal.SIGTERM)
else:
    import torch
    from torch import nn

    model = nn.Linear(64, 64)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(args.steps):
        loss = model(torch.randn(32, 64)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step == 5:
            os.kill(os.getpid(), signal.SIGUSR2)
        if step == 10:
            os.kill(os.getpid(), signal.SIGTERM)

for t in threads:
    t.join()
signal.setitimer(signal.ITIMER_REAL, 0, 0)
expected = [sum((k * (i + 1)) % 7 for k in range(200000)) for i in range(3)]
if results != expected:
    print("threads computed %r, expected %r" % (results, expected))
    sys.exit(1)
if counts["usr2"] != 1 or counts["term"] != 1 or counts["alrm"] == 0:
    print("handlers ran %r" % counts)
    sys.exit(1)
print("ok", counts["alrm"] > 0)

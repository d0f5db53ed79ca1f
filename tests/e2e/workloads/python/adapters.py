"""Drives examples/hf_callback.py or examples/lightning_callback.py the way
their frameworks call them, around a real torch loop, without transformers or
Lightning installed: `adapters.py hf|lightning STEPS`."""
import os
import sys
import time
import types

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "examples"))
import torch  # noqa: E402
from torch import nn  # noqa: E402

import hf_callback  # noqa: E402
import lightning_callback  # noqa: E402

which, steps = sys.argv[1], int(sys.argv[2])
t0 = time.monotonic()
while "profhost._bridge" not in sys.modules and time.monotonic() - t0 < 5:
    time.sleep(0.001)  # the host starts a few ms after the interpreter

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loader = torch.utils.data.DataLoader(
    torch.utils.data.TensorDataset(torch.randn(4096, 32), torch.randint(0, 4, (4096,))),
    batch_size=16)
batches = iter(loader)

if which == "hf":
    cb = hf_callback.ProfhostCallback()
    state = types.SimpleNamespace(global_step=0)
    cb.on_train_begin(None, state, None)
    for i in range(steps):
        x, y = next(batches)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        cb.on_pre_optimizer_step(None, state, None)
        opt.step()
        opt.zero_grad()
        cb.on_optimizer_step(None, state, None)
        state.global_step += 1
        cb.on_step_end(None, state, None)
else:
    cb = lightning_callback.ProfhostCallback()
    trainer = types.SimpleNamespace(global_step=0)
    cb.on_train_start(trainer, model)
    for i in range(steps):
        batch = next(batches)
        cb.on_train_batch_start(trainer, model, batch, i)

        def closure():
            loss = nn.functional.cross_entropy(model(batch[0]), batch[1])
            cb.on_before_backward(trainer, model, loss)
            loss.backward()
            cb.on_after_backward(trainer, model)
            cb.on_before_optimizer_step(trainer, model, opt)  # Lightning's order
            return loss

        opt.step(closure)  # forward and backward run inside optimizer.step
        opt.zero_grad()
        trainer.global_step += 1
        cb.on_train_batch_end(trainer, model, None, batch, i)
print("done", which, steps)

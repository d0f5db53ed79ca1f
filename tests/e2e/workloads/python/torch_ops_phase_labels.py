"""A program's own labels named like profhost's step phases
(tests/e2e/test_torch_ops.py, issue #26.4).

    torch_ops_phase_labels.py STEPS

Every step (an optimizer step): record_function("forward") around the
model and the loss, and loss.backward() inside prof_range_push("backward")
(profhost's C ABI, which the Python bridge does not see, as an NVTX range
from C; a no-op without profhost); optimizer.step() unlabelled (a label
around it would straddle the step boundary it ends with). Prints "done".
"""
import ctypes
import sys

import torch
from torch.autograd.profiler import record_function

torch.manual_seed(0)
torch.set_num_threads(1)
steps = int(sys.argv[1])
try:
    _lib = ctypes.CDLL(None)
    push, pop = _lib.prof_range_push, _lib.prof_range_pop
    push.argtypes = [ctypes.c_char_p]
except AttributeError:
    push = pop = None

model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(8, 32)
y = torch.randint(0, 4, (8,))

for _ in range(steps):
    opt.zero_grad()
    with record_function("forward"):
        loss = torch.nn.functional.cross_entropy(model(x), y)
    if push:
        push(b"backward")
    loss.backward()
    if pop:
        pop()
    opt.step()
print("done")

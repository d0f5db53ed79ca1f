"""record_function labels that end after the step boundary closing their
window (tests/e2e/test_torch_ops.py).

    torch_ops_late.py STEPS [OPEN_STEP]

Every step (an optimizer step): `late_label` begins before the optimizer
step, the step boundary, and ends just after it on another thread, through
a future, as c10d ends a collective's label (gloo:all_reduce) on its worker
thread after the training thread went on; `aten::mul` runs inside it. In
the last step of a window the label ends after the window closed.

With OPEN_STEP: `open_label` begins in that step and ends only 3 s later,
after the window's writer stopped waiting for it.
"""
import sys
import threading
import time

import torch
from torch.autograd.profiler import record_function

torch.manual_seed(0)
torch.set_num_threads(1)
steps = int(sys.argv[1])
open_step = int(sys.argv[2]) if len(sys.argv) > 2 else -1
w = torch.nn.Parameter(torch.randn(4, 4))
opt = torch.optim.SGD([w], lr=0.01)
x = torch.randn(2, 4)


def ended_later(name):
    """A label begun now whose end waits for its future (set by the caller)."""
    with record_function(name) as rf:
        torch.mul(x, 3.0)
        fut = torch.futures.Future()
        rf._call_end_callbacks_on_future(fut)
    return fut


held = None
for i in range(steps):
    opt.zero_grad()
    (x @ w).sum().backward()
    fut = ended_later("late_label")
    if i == open_step:
        held = ended_later("open_label")
    opt.step()  # the step boundary
    t = threading.Thread(target=fut.set_result, args=(torch.ones(1),))
    t.start()
    t.join()
if held is not None:
    time.sleep(3)
    held.set_result(torch.ones(1))
print("done")

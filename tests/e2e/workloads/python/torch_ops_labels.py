"""record_function labels that do not nest (tests/e2e/test_torch_ops.py).

    torch_ops_labels.py STEPS     run it under profhost

Every step (an optimizer step): a label ended on another thread through a
future (`async_label`), a label held by a generator across its yield and
closed inside another label (`gen_label` ends inside `inner_label`, which
began after it), and operators inside and around them (`aten::mul` in each
label, so a label lost or cut shows in their count too).
"""
import sys
import threading

import torch
from torch.autograd.profiler import record_function

torch.manual_seed(0)
torch.set_num_threads(1)
steps = int(sys.argv[1])
w = torch.nn.Parameter(torch.randn(4, 4))
opt = torch.optim.SGD([w], lr=0.01)
x = torch.randn(2, 4)


def held():
    with record_function("gen_label"):
        torch.mul(x, 2.0)
        yield


for _ in range(steps):
    with record_function("async_label") as rf:
        torch.mul(x, 3.0)
        fut = torch.futures.Future()
        rf._call_end_callbacks_on_future(fut)
    t = threading.Thread(target=fut.set_result, args=(torch.ones(1),))
    t.start()
    t.join()
    g = held()
    next(g)
    with record_function("inner_label"):
        torch.mul(x, 4.0)
        next(g, None)
    opt.zero_grad()
    (x @ w).sum().backward()
    opt.step()
print("done")

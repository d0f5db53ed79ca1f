"""A training loop that saves and copies its model and optimizer at chosen
steps (for test_python.RecorderPhases): under the flight recorder between
windows, and inside a window, profhost must leave nothing of its own in the
program's objects.

    recorder_objects.py OUT_DIR STEPS SAVE_AT [SAVE_AT ...]

After each step in SAVE_AT (numbered from 0, as profhost numbers them) it
writes OUT_DIR/model<N>.pt (torch.save of the whole model),
OUT_DIR/opt<N>.pt (of the whole optimizer) and OUT_DIR/state<N>.pt (their
state_dicts), deep-copies both, and prints "objects <N>: <hooks> <attrs>":
the hooks held by the modules of the model and of its copy, and the
attributes of the optimizer and of its copy beyond the class's usual ones
(both lists empty when profhost left nothing there).
"""

import copy
import os
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

OPT_ATTRS = {"defaults", "state", "param_groups", "_zero_grad_profile_name",
             "_hook_for_profile", "_optimizer_step_pre_hooks",
             "_optimizer_step_post_hooks", "_warned_capturable_if_run_uncaptured"}


def instance_hooks(model):
    """(module path, hook dict name) of every forward hook on an instance."""
    out = []
    for name, m in model.named_modules():
        for attr in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks"):
            if getattr(m, attr, None):
                out.append((name, attr))
    return out


def main():
    out, steps, save_at = sys.argv[1], int(sys.argv[2]), {int(a) for a in sys.argv[3:]}
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(512, 16), torch.randint(0, 4, (512,)))
    loader = DataLoader(data, batch_size=16, shuffle=True, drop_last=True)
    model = nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32), nn.GELU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    step = 0
    while step < steps:
        for x, y in loader:
            loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if step in save_at:
                torch.save(model, os.path.join(out, "model%d.pt" % step))
                torch.save(opt, os.path.join(out, "opt%d.pt" % step))
                torch.save({"model": model.state_dict(), "opt": opt.state_dict()},
                           os.path.join(out, "state%d.pt" % step))
                # deep copies (an EMA or evaluation copy); not stepped: an
                # optimizer step is a profhost step
                m2, o2 = copy.deepcopy(model), copy.deepcopy(opt)
                attrs = sorted((set(vars(opt)) | set(vars(o2))) - OPT_ATTRS)
                print("objects %d: %s %s" % (step, instance_hooks(model) +
                                             instance_hooks(m2), attrs))
                sys.stdout.flush()
            step += 1
            if step >= steps:
                break
    print("done %d" % steps)


if __name__ == "__main__":
    main()

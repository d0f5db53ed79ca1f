"""A Hugging Face Trainer callback that reports steps and phases to profhost.

profhost counts optimizer steps and times the phases of each step with no
code change (docs/python.md). Add this callback when you want the Trainer's
own notion of a step instead: one step per `state.global_step`, also with
gradient accumulation, and with optimizers that are not torch optimizers
(DeepSpeed). Run the training under `prof run`, which makes `profhost`
importable:

    from hf_callback import ProfhostCallback
    trainer = Trainer(model=model, args=args, train_dataset=ds,
                      callbacks=[ProfhostCallback()])
    trainer.train()

Phases: the optimizer phase comes from the Trainer's on_pre_optimizer_step /
on_optimizer_step (transformers >= 4.41; older versions keep profhost's own
timing of optimizer.step). The Trainer has no callback between forward and
backward, so data loading, forward and backward stay timed by profhost itself
(the DataLoader, nn.Module calls and autograd.backward), which sees them
fine in the Trainer's loop.

This file imports without transformers (the base class is then `object`),
and without profhost the callback does nothing.
"""

import time

try:
    import profhost
except ImportError:  # not under `prof run`: nothing to report to
    profhost = None

try:
    from transformers import TrainerCallback
except ImportError:
    TrainerCallback = object


class ProfhostCallback(TrainerCallback):
    """One profhost step per Trainer step; the optimizer phase."""

    def __init__(self):
        self._opt_t0 = None
        self._last_step = None

    def on_train_begin(self, args, state, control, **kwargs):
        if profhost is not None:
            profhost.manual_steps()  # the Trainer's steps, not optimizer.step()

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self._opt_t0 = time.monotonic_ns()

    def on_optimizer_step(self, args, state, control, **kwargs):
        if self._opt_t0 is not None and profhost is not None:
            profhost.record_phase("optimizer", self._opt_t0, time.monotonic_ns())
        self._opt_t0 = None

    def on_step_end(self, args, state, control, **kwargs):
        # Called once per optimizer update (after the last micro-batch of a
        # gradient-accumulation cycle), with global_step already advanced.
        if profhost is not None and state.global_step != self._last_step:
            self._last_step = state.global_step
            profhost.step()

    def on_evaluate(self, args, state, control, **kwargs):
        if profhost is not None:
            profhost.mark("evaluate")

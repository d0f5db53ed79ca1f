"""A Lightning callback that reports steps and phases to profhost.

profhost counts optimizer steps with no code change (docs/python.md), but
Lightning runs training_step and backward inside optimizer.step (as the
optimizer's closure), so profhost's own phase timing would see the whole
iteration as "optimizer". This callback reports the phases from Lightning's
hooks instead, and one step per optimizer update (trainer.global_step):

    from lightning_callback import ProfhostCallback
    trainer = lightning.Trainer(max_epochs=1, callbacks=[ProfhostCallback()])
    trainer.fit(model, datamodule)

Run it under `prof run`, which makes `profhost` importable. Phases:
  data       end of one batch to the start of the next (fetching the batch,
             plus Lightning's bookkeeping between batches)
  forward    on_train_batch_start to on_before_backward (training_step)
  backward   on_before_backward to on_after_backward
  optimizer  on_before_optimizer_step to on_train_batch_end
With gradient accumulation a step holds several forward/backward pairs.

Works with `lightning` (2.x) and `pytorch_lightning`; imports without either
(the base class is then `object`), and does nothing without profhost.
"""

import time

try:
    import profhost
except ImportError:  # not under `prof run`: nothing to report to
    profhost = None

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:
    try:
        from pytorch_lightning.callbacks import Callback
    except ImportError:
        Callback = object


def _now():
    return time.monotonic_ns()


class ProfhostCallback(Callback):
    """Steps at optimizer updates; data, forward, backward, optimizer phases."""

    def __init__(self):
        self._batch_end = None
        self._fwd_t0 = self._bwd_t0 = self._opt_t0 = None
        self._global_step = None

    def _record(self, name, t0, t1):
        if profhost is not None and t0 is not None:
            profhost.record_phase(name, t0, t1)

    def on_train_start(self, trainer, pl_module):
        if profhost is not None:
            profhost.manual_steps()  # trainer.global_step is the step
        self._global_step = trainer.global_step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        now = _now()
        self._record("data", self._batch_end, now)
        self._fwd_t0 = now

    def on_before_backward(self, trainer, pl_module, loss):
        now = _now()
        self._record("forward", self._fwd_t0, now)
        self._fwd_t0 = None
        self._bwd_t0 = now

    def on_after_backward(self, trainer, pl_module):
        self._record("backward", self._bwd_t0, _now())
        self._bwd_t0 = None

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self._opt_t0 = _now()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        now = _now()
        self._record("optimizer", self._opt_t0, now)
        self._opt_t0 = None
        if profhost is not None and trainer.global_step != self._global_step:
            self._global_step = trainer.global_step
            profhost.step()
        self._batch_end = _now()

    def on_train_epoch_end(self, trainer, pl_module):
        self._batch_end = None  # the next epoch's first fetch is not a step's data

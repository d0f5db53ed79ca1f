"""profhost._nvtx: torch's operator events through emit_nvtx. Not an API.

With a CUDA build of torch, torch's own NVTX emission (``emit_nvtx``) is
entered on the training thread from the step before a window to its end,
unless torch's own profiler is running on that thread (torch allows one
profiler per thread; the program's own wins, and one line says so). A
CPU-only torch is told to the host once (the summary notes it).

set_on runs under the bridge's lock (_host.lock), on any thread; emit_nvtx
is entered and left only on the training thread (torch's profiler state is
per thread).
"""

import sys
import _thread

from . import _host

ok = None          # None: not decided yet; then True / False
_ctx = None        # the entered emit_nvtx context
_tid = None        # the thread that entered it
_aside = False     # said once: torch's profiler runs, emit_nvtx stays off
_guard = None      # (module, original, guard) while _enable_profiler is guarded


def note_cuda():
    """Decides once whether torch can emit NVTX operator ranges (a CPU-only
    torch cannot: profhost._ops collects its operators)."""
    global ok
    if ok is not None:
        return
    version = sys.modules.get("torch.version")
    if version is None:
        return
    if getattr(version, "cuda", None) is None:
        ok = False
        return
    try:
        import torch

        ok = bool(torch.cuda.is_available())
    except Exception:
        ok = False


def _torch_profiler_on():
    """True while torch's own profiler (torch.profiler, emit_nvtx, ...) is
    enabled on this thread."""
    try:
        import torch

        return bool(torch.autograd._profiler_enabled())
    except Exception:
        return False


def _step_aside():
    """Says once that torch's profiler runs where emit_nvtx would: torch
    allows one profiler per thread, and the program's own wins."""
    global _aside
    if not _aside:
        _aside = True
        _host.warn("torch.profiler is running on the training thread: profhost "
                   "leaves torch's operator ranges (emit_nvtx) off while it runs")


def set_on(on, train_thread):
    """Enters or leaves torch's emit_nvtx on the training thread (the
    ident `train_thread`). Under _host.lock."""
    global _ctx, _tid
    if not ok:
        return
    me = _thread.get_ident()
    if on and _ctx is None:
        if me != train_thread:
            return
        if _torch_profiler_on():
            _step_aside()
            return
        try:
            import torch

            ctx = torch.autograd.profiler.emit_nvtx(
                record_shapes=_host.cfg.get("record_shapes") == "1")
            ctx.__enter__()
        except Exception:
            _host.debug_exc("emit_nvtx")
            return
        _ctx, _tid = ctx, me
        _guard_torch_profiler(True)
        _host.c_note(_host.NOTE_NVTX_ON)
    elif not on and _ctx is not None and me == _tid:
        _leave()


def _leave():
    """Leaves the entered emit_nvtx. On its thread, under _host.lock."""
    global _ctx
    ctx, _ctx = _ctx, None
    _guard_torch_profiler(False)
    try:
        ctx.__exit__(None, None, None)
    except Exception:
        _host.debug_exc("leaving emit_nvtx")


def _guard_torch_profiler(on):
    """While profhost's emit_nvtx is entered, torch.profiler starting on
    the same thread would fail ("Profiler is already enabled on this
    thread"): torch.autograd.profiler's _enable_profiler is guarded so that
    profhost leaves emit_nvtx first (one line says so)."""
    global _guard
    if not on:
        if _guard is not None:
            mod, original, guard = _guard
            if mod.__dict__.get("_enable_profiler") is guard:
                mod._enable_profiler = original
            _guard = None
        return
    mod = sys.modules.get("torch.autograd.profiler")
    original = getattr(mod, "_enable_profiler", None)
    if original is None or _guard is not None:
        return

    def _enable_profiler(*args, **kwargs):
        if _ctx is not None and _thread.get_ident() == _tid:
            with _host.lock:
                if _ctx is not None:
                    _step_aside()
                    _leave()
        return original(*args, **kwargs)

    mod._enable_profiler = _enable_profiler
    _guard = (mod, original, _enable_profiler)

"""profhost._bridge: the Python side of the profiling host. Not an API.

The host (src/capture/python/python.c) imports this module in the interpreter's main
thread, through Py_AddPendingCall, soon after the interpreter has started, and
calls ``_start(api_address, config)``; each time the window state changes it
calls ``_sync()`` the same way. profhost's public functions (profhost/
__init__.py) call the entry points below. The work is done by one module per
concern:

* ``_host``: the binding to the host's C table (ctypes, on first use), the
  configuration, the messages, the lock under which hooks are switched.
* ``_imports``: a finder in ``sys.meta_path`` that runs a hook right after a
  watched module (torch's optimizer module, a step function's module) has
  executed. Until torch is imported nothing else is loaded (not even
  ctypes).
* ``_steps``: steps with no code change (optimizer steps, or the return of
  ``prof.steps{python = "pkg.module:Class.method"}``), explicit steps
  winning over them.
* ``_phases``: step phases (data, forward, backward, optimizer) timed from
  the step before a window (or its warm-up) to its end.
* ``_nvtx``: with a CUDA build of torch, torch's own NVTX emission
  (``emit_nvtx``) over the same span, unless torch's own profiler runs on
  that thread.
* ``_pystacks``: snapshots of the Python stacks, merged by the host into the
  CPU samples, while a window records (and while the flight recorder keeps
  CPU samples between windows).
* ``_modules``: with ``prof.capture{ modules = true }``, each nn.Module call
  while a window records, named by its path in the model (loaded by the
  first window that asks for it).
* ``_excepthook``: with the flight recorder's ``dump_on_exception``, the
  recorder's dump on an uncaught exception in the main thread (chained to
  the program's own ``sys.excepthook``).

Everything that is on only around windows is switched in one place,
``_switch``, under ``_host.lock``.

Every hook fails open: an exception inside profhost is swallowed (shown with
PROF_LOG=debug), never raised into the application.
"""

import sys

from . import _excepthook, _host, _imports, _nvtx, _pystacks, _steps

# What the host and the tests see of the parts (a fake host table is made
# with _api_type()).
from ._host import API_VERSION as _API_VERSION, api_type as _api_type  # noqa: F401
from ._pystacks import set_rate as _set_stack_rate
from ._steps import explicit_step, manual_steps  # noqa: F401  (profhost.step())

_applying = 0            # _apply calls running (nested ones: same thread)
_resync = False


# ------------------------------------------------------------------ phases of the program's own

def own_phase(phase):
    """The program marks or reports `phase` itself (profhost.range of a
    phase name, profhost.phase, record_phase): the bridge stops timing it
    (the program's own wins)."""
    try:
        _steps.load_phases()
        _steps.phases.own(phase)
    except Exception:
        _host.debug_exc("a phase of the program's own")


def explicit_phase(phase, start, end):
    """profhost.record_phase(): the application reports a phase; the bridge
    stops timing that phase itself."""
    own_phase(phase)
    if not _host.down and _host.bind():
        _host.c_phase(phase, start, end)


# ------------------------------------------------------------------ start, sync

def _start(api_addr, config, step=None, fast=None):
    """Called once by the host, in the main thread; `step` and `fast`: its
    builtins (see _host.configure)."""
    _host.configure(api_addr, config, step, fast)
    _host.debug("automatic steps through %s" % ("the host's builtin" if step is not None
                                                 else "the host's table (ctypes)"))
    _host.debug("the step's hooks and phases between windows %s" % (
        "in C" if _host.lean_ctl is not None else "in Python"))
    _set_stack_rate(_host.cfg.get("py_stacks_hz", "0"))
    _hang_stacks(_host.cfg.get("hang_fd", "-1"), _host.cfg.get("hang_sig", "0"))
    import atexit

    atexit.register(_on_exit)
    if _host.cfg.get("dump_on_exception") == "1":
        _excepthook.install()
    _steps.bind(_apply, _sync)
    _steps.start(_host.cfg.get("steps", "off"))
    _imports.start()
    _sync()


def _hang_stacks(fd, sig):
    """prof.watchdog: faulthandler writes every thread's Python stack into
    the host's memory file when the host sends `sig`. It reads the thread
    states without the GIL, so a thread that holds the GIL and never lets
    go does not keep the watchdog from them."""
    try:
        fd, sig = int(fd), int(sig)
        if fd < 0 or sig <= 0:
            return
        import faulthandler

        faulthandler.register(sig, file=fd, all_threads=True, chain=False)
    except Exception:
        _host.debug_exc("faulthandler for the watchdog")


def _sync():
    """The window state changed (a pending call from the host, or the start):
    turns the phase hooks, NVTX emission and Python stack snapshots on or
    off."""
    if _host.down or not (_steps.torch_hooked or _pystacks.hz) or not _host.bind():
        return
    try:
        _apply(_host.c_state())
    except Exception:
        _host.debug_exc("sync")


def _on_exit():
    if _host.cfg.get("dump_on_exception") == "1":
        _excepthook.at_exit()
    if _ops is not None:
        with _host.lock:
            _ops.at_exit()
    sigint = _ends_in_sigint()
    _host.finalizing()
    if sigint:
        _host.exit_now()


def _ends_in_sigint():
    """Whether the interpreter will end the process by raising SIGINT on
    itself, with the default action, once its atexit handlers ran: Python
    >= 3.8 does so when the main module ended in an uncaught
    KeyboardInterrupt (that class itself, not a subclass), so that a shell
    sees the program die of SIGINT. No C exit handler or destructor runs
    then, so the host's exit path would not: what was recording, the
    recorder's dump on the exception included, would be lost and its
    salvage file left for the launcher. sys.last_value is the exception
    Python printed (set before sys.excepthook ran)."""
    exc = getattr(sys, "last_value", None)
    return type(exc) is KeyboardInterrupt and sys.version_info >= (3, 8)


def _apply(state):
    """Brings the hooks in line with the window state. Any thread; a call
    that interrupts another on the same thread (a pending call) leaves the
    work to it. Notes what it switched to in _steps.applied, where an
    automatic step sees that the state is unchanged and does not call
    this (see _steps._auto_step)."""
    global _resync, _applying
    if state & _host.EXPLICIT:
        _steps.note_explicit()
    with _host.lock:
        _applying += 1
        try:
            if _applying > 1:
                _resync = True
                _steps.note_applied(None)
                return
            while True:
                _resync = False
                _steps.note_applied(None)
                _switch(state)
                if not _resync:
                    break
                state = _host.c_state()
            _steps.note_applied(state)
        finally:
            _applying -= 1


def _switch(state):
    """Turns what runs only around windows on (from the step before a
    window or its warm-up to its end) or off, as the host's `state` says:
    whether the window records now, and asks for nn.Module calls. Phases
    also run while the flight recorder keeps steps between windows, and
    Python stack snapshots while it keeps CPU samples. Under _host.lock."""
    mode = state & _host.STATE_MASK
    on, recording = mode != _host.IDLE, mode == _host.RECORDING
    modules = bool(state & _host.MODULES)
    if _steps.torch_hooked:
        # the recorder alone: no module hooks (forward inferred, _phases)
        _steps.phases.set_on(on or bool(state & _host.RECORDER), hooks=on)
        if on:
            _nvtx.note_cuda()
        nvtx = _operators().sync(state)  # operator events: profhost._ops
        _nvtx.set_on(on and nvtx, _steps.train_thread())
        if modules or _modules is not None:
            _module_calls(on and recording and modules)
    rec_stacks = bool(state & _host.REC_STACKS)
    _pystacks.set_on(on or rec_stacks, recording or rec_stacks)


_ops = None  # profhost._ops, once torch is hooked


def _operators():
    """profhost._ops, bound to the host on first use. Under _host.lock."""
    global _ops
    if _ops is None:
        from . import _ops as ops

        ops.bind(_host.cfg, _host.table, _host.warn, _host.debug, _host.debug_exc)
        _ops = ops
    return _ops


_modules = None  # profhost._modules, once a window asked for module calls


def _module_calls(on):
    """Writes nn.Module calls (on) or not. Under _host.lock."""
    global _modules
    if _modules is None:
        from . import _modules as modules

        _modules = modules
    _modules.set_on(_steps.phases, on)

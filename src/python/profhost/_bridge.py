"""profhost._bridge: the Python side of the profiling host. Not an API.

The host (src/capture/python.c) imports this module in the interpreter's main
thread, through Py_AddPendingCall, soon after the interpreter has started, and
calls ``_start(api_address, config)``. From then on:

* **Steps with no code change.** In a process that imports torch, the end of
  each optimizer step is a step boundary (torch >= 2.0: the global optimizer
  step hooks; torch 1.13: each optimizer class's ``step`` is wrapped when
  torch wraps it for its own profiler). With ``prof.steps{python =
  "pkg.module:Class.method"}`` the return of that function is the step
  instead. The first explicit ``prof_step()`` (``profhost.step()``) turns
  both off: explicit steps win.
  The first ``profhost.step()`` right after an automatic step in the same
  pass of the loop body ends that same iteration: it is not counted again.
* **Step phases** (profhost._phases). From the step before a window (or its
  warm-up) to its end, the time spent in the DataLoader iterator's
  ``__next__``, in top-level ``nn.Module`` calls, in
  ``torch.autograd.backward`` and in ``optimizer.step`` is written as
  phases. Outside windows those hooks are removed. A phase the program
  reports or marks itself (``profhost.phase``, ``record_phase``, a
  ``profhost.range`` named like a phase) is not timed by the bridge.
* **Operator events.** With a CUDA build of torch, torch's own NVTX emission
  (``emit_nvtx``) is on from the step before a window to its end, unless
  torch's own profiler is running on that thread.

torch is usually imported after this module starts: a finder in
``sys.meta_path`` notices the import of ``torch.optim.optimizer`` (and of the
module of a ``prof.steps{python=...}`` function) and runs the hook right after
that module has executed; it removes itself once it has nothing left to
watch. Until torch is imported nothing else is loaded (not even ctypes).

Every hook fails open: an exception inside profhost is swallowed (shown with
PROF_LOG=debug), never raised into the application.
"""

import sys
import time
import _thread

# Window state from the host (pybridge_api.state): _ARMED is the step
# before a window opens or warms up, so that what a window's start costs
# (installing the hooks, entering emit_nvtx, starting the snapshot thread)
# is paid before its first recorded step.
_IDLE, _WARMUP, _RECORDING, _ARMED = 0, 1, 2, 3
_STATE_MASK = 3
_EXPLICIT = 16
_NOTE_TORCH_CPU_ONLY = 1
_NOTE_NVTX_ON = 2

_API_VERSION = 4
_OPTIMIZER_MODULE = "torch.optim.optimizer"

_now = time.monotonic_ns  # CLOCK_MONOTONIC: the host's clock

_cfg = {}
_api_addr = 0
_api = None          # the C table (ctypes), bound on first use
_c_state = _c_step = _c_phase = _c_note = _c_down = _c_pystack = _c_phase_named = None
_names = {}          # phase names given by str, as the bytes handed to C
_down = False        # the interpreter is finalizing
_steps = "off"       # "optimizer", "function" or "off"
_explicit = False    # explicit steps seen: ours no longer count
_py_steps = False    # steps come from profhost.step() (the bridge sees them)
_last_auto = None    # where the latest automatic step was called from
_watch = {}          # module name -> hook(module), not yet run
_deferred = []       # watched modules seen while still executing
_finder = None
_torch = False       # torch.optim has been hooked
_tls = None          # per-thread optimizer.step nesting (a threading.local)
_phases = None       # profhost._phases, once torch is hooked
_ops = None          # profhost._ops, once torch is hooked
_nvtx = None         # the entered emit_nvtx context
_nvtx_tid = None
_nvtx_ok = None      # None: not decided yet; then True / False
_nvtx_aside = False  # said once: torch's profiler runs, emit_nvtx stays off
_lock = _thread.RLock()  # guards the hooks' installation
_applying = 0            # _apply calls running (nested ones: same thread)
_resync = False


# ------------------------------------------------------------------ messages

def _debug(msg):
    if _cfg.get("log") == "3":
        try:
            sys.stderr.write("profhost: python bridge: %s\n" % msg)
        except Exception:
            pass


def _debug_exc(what):
    if _cfg.get("log") == "3":
        import traceback

        _debug("%s failed:\n%s" % (what, traceback.format_exc().rstrip()))


def _warn(msg):
    try:
        sys.stderr.write("profhost: %s\n" % msg)
    except Exception:
        pass


# ------------------------------------------------------------------ the C side

def _api_type():
    """The ctypes structure of the host's table."""
    import ctypes

    class _Api(ctypes.Structure):
        # struct pybridge_api (src/capture/python.c). `step` releases the
        # GIL (it may run policy hooks); the others are short and keep it.
        _fields_ = [
            ("version", ctypes.c_uint32),
            ("size", ctypes.c_uint32),
            ("state", ctypes.PYFUNCTYPE(ctypes.c_int)),
            ("step", ctypes.CFUNCTYPE(ctypes.c_int)),
            ("phase", ctypes.PYFUNCTYPE(None, ctypes.c_int, ctypes.c_int64,
                                        ctypes.c_int64)),
            ("note", ctypes.PYFUNCTYPE(None, ctypes.c_int)),
            ("down", ctypes.PYFUNCTYPE(None)),
            ("pystack", ctypes.PYFUNCTYPE(None, ctypes.c_int32, ctypes.c_int64,
                                          ctypes.c_char_p, ctypes.c_uint32)),
            ("phase_named", ctypes.PYFUNCTYPE(None, ctypes.c_int, ctypes.c_int64,
                                              ctypes.c_int64, ctypes.c_char_p)),
            ("torchops", ctypes.c_void_p),  # version 4: profhost._ops's
            ("note_text", ctypes.PYFUNCTYPE(None, ctypes.c_char_p)),
            ("ops_begin", ctypes.PYFUNCTYPE(None)),
            ("op_late", ctypes.PYFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32)),
            ("ops_end", ctypes.PYFUNCTYPE(None)),
        ]

    return _Api


def _bind():
    """Binds the host's C table (once). Returns False when it cannot be."""
    global _api, _c_state, _c_step, _c_phase, _c_note, _c_down, _c_pystack, _c_phase_named
    if _api is not None:
        return True
    if not _api_addr:
        return False
    import ctypes

    api_type = _api_type()
    api = api_type.from_address(_api_addr)
    if api.version != _API_VERSION or api.size < ctypes.sizeof(api_type):
        _debug("host table version %d, expected %d" % (api.version, _API_VERSION))
        return False
    _c_state, _c_step, _c_phase = api.state, api.step, api.phase
    _c_note, _c_down, _c_pystack = api.note, api.down, api.pystack
    _c_phase_named = api.phase_named
    _api = api
    return True


def _phase(phase, start, end, name=None):
    """Hands a phase to the host; `name` (a str): the name to write it
    under, when the host's phase queries take it for that phase."""
    if name is not None and _c_phase_named is not None:
        raw = _names.get(name)
        if raw is None:
            if len(_names) > 1000:
                _names.clear()
            raw = _names[name] = name.encode("utf-8", "replace")
        _c_phase_named(phase, start, end, raw)
    elif _c_phase is not None:
        _c_phase(phase, start, end)


def manual_steps():
    """profhost.manual_steps(): automatic steps stop now; profhost.step()
    ends each step."""
    global _explicit, _py_steps
    _explicit = _py_steps = True
    _set_merge()


def explicit_step():
    """profhost.step() is about to end a step on this thread. Returns True
    when this call ends the iteration whose automatic step was just counted
    (the first explicit step, called after the optimizer step in the same
    pass of the same loop): it must not be counted again."""
    global _explicit, _py_steps
    first = not _explicit
    _explicit = _py_steps = True
    try:
        _set_merge()
        if _phases is not None:
            _phases.before_step()
        return first and _same_iteration()
    except Exception:
        _debug_exc("profhost.step()")
        return False


def _same_iteration():
    """True when the caller's caller (profhost.step()'s caller) runs in the
    pass of the loop that made the latest automatic step."""
    if _last_auto is None:
        return False
    ident, sites = _last_auto
    if ident != _thread.get_ident():
        return False
    # The innermost frame that was also running when the automatic step
    # was called decides: is it further on now, in the same pass?
    f = _call_site(sys._getframe(1))  # whoever called profhost.step()
    for _ in range(8):
        if f is None:
            break
        for fid, code, lasti in sites:
            if fid == id(f) and code is f.f_code:
                return f.f_lasti > lasti
        f = f.f_back
    return False


def _load_phases():
    """Imports profhost._phases (once) and binds it to the host."""
    global _phases
    if _phases is None:
        from . import _phases as phases

        phases.bind(_phase, _debug_exc)
        _phases = phases
        _set_merge()


def own_phase(phase):
    """The program marks or reports `phase` itself (profhost.range of a
    phase name, profhost.phase, record_phase): the bridge stops timing it
    (the program's own wins)."""
    try:
        _load_phases()
        _phases.own(phase)
    except Exception:
        _debug_exc("a phase of the program's own")


def explicit_phase(phase, start, end):
    """profhost.record_phase(): the application reports a phase; the bridge
    stops timing that phase itself."""
    own_phase(phase)
    if not _down and _bind():
        _c_phase(phase, start, end)


# ------------------------------------------------------------------ start, sync

def _start(api_addr, config):
    """Called once by the host, in the main thread."""
    global _api_addr, _cfg, _steps
    _api_addr = api_addr
    _cfg = dict(l.split("=", 1) for l in config.splitlines() if "=" in l)
    _steps = _cfg.get("steps", "off")
    _set_stack_rate(_cfg.get("py_stacks_hz", "0"))
    import atexit

    atexit.register(_on_exit)
    _set_merge()
    _watch[_OPTIMIZER_MODULE] = _hook_optimizer
    if _steps == "function":
        modname, _, qual = _cfg.get("function", "").partition(":")
        if modname == "__main__":
            _warn("prof.steps{python = %r}: a function of the script run as "
                  "__main__ cannot be hooked; move it into a module that the "
                  "script imports" % _cfg.get("function"))
        else:
            _watch[modname] = lambda m: _hook_function(m, modname, qual)
    for name in list(_watch):
        mod = sys.modules.get(name)
        if mod is None:
            continue
        if _initializing(mod):
            _deferred.append(name)
        else:
            _fire(name, mod)
    if _watch or _deferred:
        _add_finder()
    _sync()


def _sync():
    """The window state changed (a pending call from the host, or the start):
    turns the phase hooks, NVTX emission and Python stack snapshots on or
    off."""
    if _down or not (_torch or _stack_hz) or not _bind():
        return
    try:
        _apply(_c_state())
    except Exception:
        _debug_exc("sync")


def _on_exit():
    global _down
    _down = True
    if _c_down is not None:
        _c_down()


def _set_merge():
    """Consecutive module calls are one forward phase only when the bridge
    sees every step boundary (see _phases.set_merge)."""
    if _phases is not None:
        _phases.set_merge(_py_steps or (_steps != "off" and not _explicit))


def _apply(state):
    """Brings the hooks in line with the window state. Any thread; a call
    that interrupts another on the same thread (a pending call) leaves the
    work to it."""
    global _explicit, _resync, _applying
    if state & _EXPLICIT and not _explicit:
        _explicit = True
        _set_merge()
    with _lock:
        _applying += 1
        try:
            if _applying > 1:
                _resync = True
                return
            while True:
                _resync = False
                want = (state & _STATE_MASK) != _IDLE
                if _torch:
                    _phases.set_on(want)
                    if want:
                        _note_cuda()
                    nvtx = _ops.sync(state)  # operator events (profhost._ops)
                    _set_nvtx(want and nvtx)
                _set_stacks(want, (state & _STATE_MASK) == _RECORDING)
                if not _resync:
                    break
                state = _c_state()
        finally:
            _applying -= 1


# ------------------------------------------------------------------ import hooks

def _initializing(mod):
    spec = getattr(mod, "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


def _fire(name, mod):
    hook = _watch.pop(name, None)
    if hook is not None:
        try:
            hook(mod)
        except Exception:
            _debug_exc("hooking %s" % name)
    if not _watch and not _deferred:
        _remove_finder()


def _run_deferred():
    for name in list(_deferred):
        mod = sys.modules.get(name)
        if mod is None:
            _deferred.remove(name)  # its import failed: watch it again
        elif not _initializing(mod):
            _deferred.remove(name)
            _fire(name, mod)


class _Finder(object):
    """Finds nothing itself: for a watched module it asks the finders after
    it, and arranges for the module's hook to run right after the module has
    executed (before `from module import name` binds anything)."""

    __slots__ = ()

    def find_spec(self, name, path=None, target=None):
        if _deferred:
            _run_deferred()
        if name not in _watch:
            return None
        spec = None
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                break
        if spec is None:
            return None
        if not _wrap_loader(spec.loader, name):
            _deferred.append(name)
        return spec

    def invalidate_caches(self):
        pass


def _wrap_loader(loader, name):
    """Makes loader.exec_module run the hook of `name` after it. False when
    the loader cannot take it."""
    run = getattr(loader, "exec_module", None)
    if run is None:
        return False

    def exec_module(module):
        if getattr(module, "__name__", None) != name:
            return run(module)
        try:
            del loader.exec_module
        except AttributeError:
            pass
        run(module)
        _fire(name, module)

    try:
        loader.exec_module = exec_module
    except (AttributeError, TypeError):
        return False
    return True


def _add_finder():
    global _finder
    if _finder is None:
        _finder = _Finder()
        sys.meta_path.insert(0, _finder)


def _remove_finder():
    global _finder
    if _finder is not None:
        try:
            sys.meta_path.remove(_finder)
        except ValueError:
            pass
        _finder = None


# ------------------------------------------------------------------ steps

_MY_DIR = __file__.rsplit("/", 1)[0] + "/"
_torch_dir = None    # torch's package directory, with a trailing "/"


def _call_site(frame):
    """The first frame from `frame` outwards that is neither profhost's nor
    torch's: the program's code that made the call."""
    while frame is not None:
        name = frame.f_code.co_filename
        if not (name.startswith(_MY_DIR) or (_torch_dir and name.startswith(_torch_dir))):
            break
        frame = frame.f_back
    return frame


def _remember_call_site():
    """Notes where this automatic step was called from (the program's frame
    and the frames around it, with the instruction each is at), for
    explicit_step()."""
    global _last_auto
    sites = []
    f = _call_site(sys._getframe(1))
    while f is not None and len(sites) < 8:
        sites.append((id(f), f.f_code, f.f_lasti))
        f = f.f_back
    _last_auto = (_thread.get_ident(), sites)


def _auto_step():
    """One automatic step (optimizer step or the named function). Raises
    nothing."""
    global _explicit, _last_step_ident
    try:
        if _explicit or _down or not _bind():
            return
        _last_step_ident = _thread.get_ident()
        _remember_call_site()
        if _phases is not None:
            _phases.before_step()
        state = _c_step()
        if state & _EXPLICIT:
            _explicit = True
            _set_merge()
        _apply(state)
    except Exception:
        _debug_exc("an automatic step")


def _hook_optimizer(mod):
    """torch.optim.optimizer has executed: hook optimizer steps."""
    global _torch, _tls, _torch_dir
    import threading

    class _Tls(threading.local):
        depth = 0       # optimizer.step nesting
        frame = None    # the frame running the outermost step

    _tls = _Tls()
    torch = sys.modules.get("torch")
    if getattr(torch, "__file__", None):
        _torch_dir = torch.__file__.rsplit("/", 1)[0] + "/"
    _load_phases()
    global _ops
    from . import _ops
    _ops.bind(_cfg, lambda: _api, _warn, _debug, _debug_exc)
    pre = getattr(mod, "register_optimizer_step_pre_hook", None)
    post = getattr(mod, "register_optimizer_step_post_hook", None)
    if pre is not None and post is not None:      # torch >= 2.0
        pre(_optimizer_pre)
        post(_optimizer_post)
    else:                                         # torch 1.13
        _hook_optimizer_classes(mod.Optimizer)
    _torch = True
    _debug("optimizer steps hooked (%s)" % ("global hooks" if pre else "class wrappers"))
    _sync()


def _optimizer_pre(opt, args, kwargs):
    """Before optimizer.step() (torch's global pre hook, or the wrapper)."""
    try:
        tl = _tls
        if tl.depth and not _phases.on_stack(tl.frame):
            # The outermost step raised and torch's global hooks ran no
            # post hook for it (torch >= 2.0): it is over, and was no step.
            tl.depth = 0
            _phases.optimizer_end(False)
        tl.depth += 1
        if tl.depth == 1:
            tl.frame = sys._getframe(1)
            _phases.optimizer_begin()
    except Exception:
        _debug_exc("the optimizer pre hook")
    return None


def _optimizer_post(opt, args, kwargs):
    """After optimizer.step() returned: the end of a step (the outermost)."""
    try:
        tl = _tls
        if tl.depth > 0:
            tl.depth -= 1
        if tl.depth:
            return None
        tl.frame = None
        _phases.optimizer_end(True)
        if _steps == "optimizer":
            _auto_step()
    except Exception:
        _debug_exc("the optimizer hook")
    return None


def _optimizer_failed():
    """optimizer.step raised: forget its phase, count no step."""
    try:
        tl = _tls
        if tl.depth > 0:
            tl.depth -= 1
        if not tl.depth:
            tl.frame = None
            _phases.optimizer_end(False)
    except Exception:
        _debug_exc("the optimizer hook")


def _hook_optimizer_classes(Optimizer):
    """torch 1.13: Optimizer.__init__ calls _hook_for_profile, which wraps
    the class's step once (marking it `hooked`); wrap it there too."""
    original = Optimizer.__dict__.get("_hook_for_profile")
    if original is None:
        _debug("this torch has neither optimizer step hooks nor "
               "_hook_for_profile: optimizer steps are not counted")
        return

    import functools

    @functools.wraps(original)
    def _hook_for_profile(self):
        original(self)
        try:
            _wrap_step(type(self))
        except Exception:
            _debug_exc("wrapping %s.step" % type(self).__name__)

    Optimizer._hook_for_profile = _hook_for_profile
    # Optimizers made before profhost started: their classes are marked.
    todo = list(Optimizer.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if getattr(cls.__dict__.get("step"), "hooked", False):
            _wrap_step(cls)


def _wrap_step(cls):
    import functools

    step = getattr(cls, "step", None)
    if step is None or getattr(step, "_profhost_step", False):
        return

    @functools.wraps(step)
    def wrapper(self, *args, **kwargs):
        _optimizer_pre(self, args, kwargs)
        try:
            out = step(self, *args, **kwargs)
        except BaseException:
            _optimizer_failed()
            raise
        _optimizer_post(self, args, kwargs)
        return out

    wrapper._profhost_step = True
    cls.step = wrapper


def _hook_function(mod, modname, qual):
    """The module of prof.steps{python = "module:qual"} has executed: make
    the return of that function a step."""
    import functools

    owner, parts = mod, qual.split(".")
    try:
        for part in parts[:-1]:
            owner = getattr(owner, part)
        name = parts[-1]
        raw = owner.__dict__[name] if name in getattr(owner, "__dict__", {}) \
            else getattr(owner, name)
    except AttributeError:
        _warn("prof.steps{python = \"%s:%s\"}: module %s has no %s; no Python "
              "function steps" % (modname, qual, modname, qual))
        return
    kind = type(raw) if isinstance(raw, (staticmethod, classmethod)) else None
    fn = raw.__func__ if kind else raw
    if not callable(fn):
        _warn("prof.steps{python = \"%s:%s\"}: %s is not a function; no Python "
              "function steps" % (modname, qual, qual))
        return
    depth = [0]  # per process; a step function running in two threads at
                 # once counts the outermost returns of both

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        depth[0] += 1
        try:
            out = fn(*args, **kwargs)
        finally:
            depth[0] -= 1
        if not depth[0]:
            _auto_step()
        return out

    setattr(owner, name, kind(wrapper) if kind else wrapper)
    if _steps == "function":
        _bind()
    _debug("steps: the return of %s:%s" % (modname, qual))


# ------------------------------------------------------------------ operator events

def _note_cuda():
    """Decides once whether torch can emit NVTX operator ranges; tells the
    host when it cannot because torch is CPU-only."""
    global _nvtx_ok
    if _nvtx_ok is not None:
        return
    version = sys.modules.get("torch.version")
    if version is None:
        return
    if getattr(version, "cuda", None) is None:
        _nvtx_ok = False  # profhost._ops collects the operators
        return
    try:
        import torch

        _nvtx_ok = bool(torch.cuda.is_available())
    except Exception:
        _nvtx_ok = False


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
    global _nvtx_aside
    if not _nvtx_aside:
        _nvtx_aside = True
        _warn("torch.profiler is running on the training thread: profhost "
              "leaves torch's operator ranges (emit_nvtx) off while it runs")


def _set_nvtx(on):
    """Enters or leaves torch's emit_nvtx on the training thread (torch's
    profiler state is per thread). Under _lock."""
    global _nvtx, _nvtx_tid
    if not _nvtx_ok:
        return
    me = _thread.get_ident()
    if on and _nvtx is None:
        if me != _train_thread():
            return
        if _torch_profiler_on():
            _step_aside()
            return
        try:
            import torch

            ctx = torch.autograd.profiler.emit_nvtx(
                record_shapes=_cfg.get("record_shapes") == "1")
            ctx.__enter__()
        except Exception:
            _debug_exc("emit_nvtx")
            return
        _nvtx, _nvtx_tid = ctx, me
        _guard_torch_profiler(True)
        _c_note(_NOTE_NVTX_ON)
    elif not on and _nvtx is not None and me == _nvtx_tid:
        _leave_nvtx()


def _leave_nvtx():
    """Leaves the entered emit_nvtx. On its thread, under _lock."""
    global _nvtx
    ctx, _nvtx = _nvtx, None
    _guard_torch_profiler(False)
    try:
        ctx.__exit__(None, None, None)
    except Exception:
        _debug_exc("leaving emit_nvtx")


_guard = None  # (module, original) while _enable_profiler is guarded


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
        if _nvtx is not None and _thread.get_ident() == _nvtx_tid:
            with _lock:
                if _nvtx is not None:
                    _step_aside()
                    _leave_nvtx()
        return original(*args, **kwargs)

    mod._enable_profiler = _enable_profiler
    _guard = (mod, original, _enable_profiler)


_main_ident = _thread.get_ident()  # imported in the main thread
_last_step_ident = None


def _train_thread():
    return _last_step_ident if _last_step_ident is not None else _main_ident


# ------------------------------------------------------------------ Python stacks
#
# The CPU sampler's signal handler must not read the interpreter (it could
# interrupt it anywhere, holding any lock). So while a window records, a
# thread of the bridge (started the step before, so that its start costs no
# recorded step) takes snapshots of every thread's Python stack with
# sys._current_frames() (under the GIL, like any Python code) at a modest
# rate, and hands each to the host with its time and the thread's kernel id.
# The host merges them into the native samples of the same thread by time
# (src/capture/python.c): a sample shows the Python frames of the snapshot
# nearest to it in place of the interpreter's own frames.

_stack_hz = 0
_stacks_on = False     # the snapshot thread runs
_stacks_rec = False    # and takes snapshots
_stacks_gen = 0
_STACK_DEPTH = 256


def _set_stack_rate(value):
    global _stack_hz
    try:
        _stack_hz = max(0, int(value))
    except ValueError:
        _stack_hz = 0
    if _stack_hz:
        import threading  # noqa: F401  (imported here, in the main thread:
        # threading takes the importing thread for the main one)


def _set_stacks(on, recording):
    """Starts or stops the snapshot thread, and has it take snapshots or
    not. Under _lock."""
    global _stacks_on, _stacks_gen, _stacks_rec
    if not _stack_hz:
        return
    _stacks_rec = on and recording
    if on == _stacks_on:
        return
    _stacks_on = on
    _stacks_gen += 1
    if on:
        _start_unsignalled(_stack_loop, (_stacks_gen,))


def _start_unsignalled(func, args):
    """Starts a thread of profhost's with every signal blocked from its
    first instruction (a thread inherits its creator's mask): the CPU
    sampler never samples it, not even before it has named itself, and the
    application's signals go to its own threads."""
    import signal

    old = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    try:
        _thread.start_new_thread(func, args)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _native_ids():
    threading = sys.modules.get("threading")
    if threading is None:
        return {}
    return {t.ident: t.native_id for t in threading.enumerate()
            if getattr(t, "native_id", None)}


def _name_this_thread():
    """Names the calling OS thread "profhost-pystk", so the CPU sampler
    leaves it out (it samples no thread of profhost's own)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(15, b"profhost-pystk", 0, 0, 0)  # PR_SET_NAME
    except Exception:
        pass


def _stack_loop(gen):
    _name_this_thread()
    period = 1.0 / _stack_hz
    me = _thread.get_ident()
    sleep = time.sleep
    names = {}
    taken = False  # a snapshot taken since recording (re)started
    while _stacks_on and _stacks_gen == gen and not _down:
        # Every period while recording, the first one at once: a window's
        # first samples need a snapshot near them.
        if taken or not _stacks_rec:
            sleep(period)
        if not _stacks_rec:
            taken = False
            continue
        taken = True
        try:
            frames = sys._current_frames()
            ts = _now()
            natives = _native_ids()
            for ident, f in frames.items():
                tid = natives.get(ident)
                if ident == me or tid is None:
                    continue
                parts = []
                while f is not None and len(parts) < _STACK_DEPTH:
                    code, line = f.f_code, f.f_lineno
                    if code.co_filename.startswith(_MY_DIR):  # profhost's own code
                        f = f.f_back
                        continue
                    name = names.get((code, line))
                    if name is None:
                        if len(names) > 50000:
                            names.clear()
                        name = "%s (%s:%d)" % (getattr(code, "co_qualname", code.co_name),
                                               code.co_filename, line or 0)
                        names[(code, line)] = name
                    parts.append(name)
                    f = f.f_back
                del f
                data = "\n".join(parts).encode("utf-8", "replace")
                _c_pystack(tid, ts, data, len(data))
            del frames
        except Exception:
            _debug_exc("Python stack snapshot")

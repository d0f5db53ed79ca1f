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
* **Step phases.** While a window warms up or records, the time spent in the
  DataLoader iterator's ``__next__``, in top-level ``nn.Module`` calls, in
  ``torch.autograd.backward`` and in ``optimizer.step`` is written as ranges
  named ``data``, ``forward``, ``backward`` and ``optimizer`` (never nested:
  while one phase runs on a thread, the others are not timed there). Outside
  windows those hooks are removed. ``profhost.phase`` / ``record_phase``
  report a phase explicitly; the bridge then stops timing that phase.
* **Operator events.** With a CUDA build of torch, torch's own NVTX emission
  (``emit_nvtx``) is on during warm-up and recording.

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

# Phase numbers: the order of pyb_phase_names in src/capture/python.c.
PHASE_DATA, PHASE_FORWARD, PHASE_BACKWARD, PHASE_OPTIMIZER = range(4)

# Window state from the host (pybridge_api.state).
_IDLE, _WARMUP, _RECORDING = 0, 1, 2
_STATE_MASK = 3
_EXPLICIT = 16
_NOTE_TORCH_CPU_ONLY = 1
_NOTE_NVTX_ON = 2

_API_VERSION = 2
_OPTIMIZER_MODULE = "torch.optim.optimizer"

_now = time.monotonic_ns  # CLOCK_MONOTONIC: the host's clock

_cfg = {}
_api_addr = 0
_api = None          # the C table (ctypes), bound on first use
_c_state = _c_step = _c_phase = _c_note = _c_down = _c_pystack = None
_down = False        # the interpreter is finalizing
_steps = "off"       # "optimizer", "function" or "off"
_explicit = False    # explicit steps seen: ours no longer count
_watch = {}          # module name -> hook(module), not yet run
_deferred = []       # watched modules seen while still executing
_finder = None
_torch = False       # torch.optim has been hooked
_tls = None          # per-thread phase state (a threading.local)
_phases_on = False
_patches = []        # (owner, attribute, original, wrapper) while phases are on
_nvtx = None         # the entered emit_nvtx context
_nvtx_tid = None
_nvtx_ok = None      # None: not decided yet; then True / False
_explicit_phases = set()  # phases the application reports itself
_lock = _thread.RLock()  # guards the hooks' installation
_applying = 0            # _apply calls running (nested ones: same thread)
_resync = False
_PHASE_TARGETS = 3   # Module.__call__, DataLoader __next__, autograd.backward


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

def _bind():
    """Binds the host's C table (once). Returns False when it cannot be."""
    global _api, _c_state, _c_step, _c_phase, _c_note, _c_down, _c_pystack
    if _api is not None:
        return True
    if not _api_addr:
        return False
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
        ]

    api = _Api.from_address(_api_addr)
    if api.version != _API_VERSION or api.size < ctypes.sizeof(_Api):
        _debug("host table version %d, expected %d" % (api.version, _API_VERSION))
        return False
    _c_state, _c_step, _c_phase = api.state, api.step, api.phase
    _c_note, _c_down, _c_pystack = api.note, api.down, api.pystack
    _api = api
    return True


def _phase(phase, start, end):
    if _c_phase is not None:
        _c_phase(phase, start, end)


def manual_steps():
    """profhost.manual_steps(): automatic steps stop now."""
    global _explicit
    _explicit = True


def explicit_phase(phase, start, end):
    """profhost.record_phase(): the application reports a phase; the bridge
    stops timing that phase itself."""
    _explicit_phases.add(phase)
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


def _apply(state):
    """Brings the hooks in line with the window state. Any thread; a call
    that interrupts another on the same thread (a pending call) leaves the
    work to it."""
    global _explicit, _resync, _applying
    if state & _EXPLICIT:
        _explicit = True
    with _lock:
        _applying += 1
        try:
            if _applying > 1:
                _resync = True
                return
            while True:
                _resync = False
                want = (state & _STATE_MASK) != _IDLE
                if want and len(_patches) < _PHASE_TARGETS:
                    _set_phases(True)
                elif not want and _phases_on:
                    _set_phases(False)
                _set_nvtx(want)
                _set_stacks((state & _STATE_MASK) == _RECORDING)
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

def _auto_step():
    """One automatic step (optimizer step or the named function)."""
    global _explicit, _last_step_ident
    if _explicit or _down or not _bind():
        return
    _last_step_ident = _thread.get_ident()
    state = _c_step()
    if state & _EXPLICIT:
        _explicit = True
    _apply(state)


def _hook_optimizer(mod):
    """torch.optim.optimizer has executed: hook optimizer steps."""
    global _torch, _tls
    import threading

    class _Tls(threading.local):
        busy = False    # a phase is being timed on this thread
        depth = 0       # optimizer.step nesting
        opt_t0 = 0      # start of the timed optimizer phase, 0 = none
        fn_depth = 0    # nesting of the prof.steps{python=...} function

    _tls = _Tls()
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
    tl = _tls
    tl.depth += 1
    if (tl.depth == 1 and _phases_on and not tl.busy and
            PHASE_OPTIMIZER not in _explicit_phases):
        tl.busy = True
        tl.opt_t0 = _now()
    return None


def _optimizer_post(opt, args, kwargs):
    tl = _tls
    if tl.depth > 0:
        tl.depth -= 1
    if tl.depth:
        return None
    if tl.opt_t0:
        _phase(PHASE_OPTIMIZER, tl.opt_t0, _now())
        tl.opt_t0 = 0
        tl.busy = False
    if _steps == "optimizer":
        _auto_step()
    return None


def _optimizer_failed():
    """optimizer.step raised: forget its phase, count no step."""
    tl = _tls
    if tl.depth > 0:
        tl.depth -= 1
    if not tl.depth and tl.opt_t0:
        tl.opt_t0 = 0
        tl.busy = False


def _hook_optimizer_classes(Optimizer):
    """torch 1.13: Optimizer.__init__ calls _hook_for_profile, which wraps
    the class's step once (marking it `hooked`); wrap it there too."""
    original = Optimizer.__dict__.get("_hook_for_profile")
    if original is None:
        _debug("this torch has neither optimizer step hooks nor "
               "_hook_for_profile: optimizer steps are not counted")
        return

    def _hook_for_profile(self):
        original(self)
        _wrap_step(type(self))

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


# ------------------------------------------------------------------ phases

def _timed(phase, original, data=False):
    """A wrapper timing `original` as `phase` on the calling thread, unless
    another phase is being timed there."""

    def wrapper(*args, **kwargs):
        tl = _tls
        if data and tl.busy and tl.depth:
            # A stale optimizer phase (its step raised and a pre hook ran
            # without its post hook): loading data is never inside a step.
            tl.busy, tl.depth, tl.opt_t0 = False, 0, 0
        if tl.busy or phase in _explicit_phases:
            return original(*args, **kwargs)
        tl.busy = True
        t0 = _now()
        try:
            return original(*args, **kwargs)
        finally:
            tl.busy = False
            _phase(phase, t0, _now())

    wrapper.__name__ = getattr(original, "__name__", "wrapper")
    wrapper.__qualname__ = getattr(original, "__qualname__", wrapper.__name__)
    wrapper.__doc__ = getattr(original, "__doc__", None)
    wrapper.__wrapped__ = original
    return wrapper


def _set_phases(on):
    """Installs the phase hooks not yet installed (on), or removes them all.
    Under _lock."""
    global _phases_on
    if not on:
        while _patches:
            owner, attr, original, wrapper = _patches.pop()
            if getattr(owner, attr, None) is wrapper:
                setattr(owner, attr, original)
        _phases_on = False
        return
    module = sys.modules.get("torch.nn.modules.module")
    loader = sys.modules.get("torch.utils.data.dataloader")
    autograd = sys.modules.get("torch.autograd")
    targets = []
    if module is not None and hasattr(module, "Module"):
        targets.append((module.Module, "__call__", PHASE_FORWARD, False))
    if loader is not None and hasattr(loader, "_BaseDataLoaderIter"):
        targets.append((loader._BaseDataLoaderIter, "__next__", PHASE_DATA, True))
    if autograd is not None and hasattr(autograd, "backward"):
        targets.append((autograd, "backward", PHASE_BACKWARD, False))
    done = set((id(p[0]), p[1]) for p in _patches)
    for owner, attr, phase, data in targets:
        original = owner.__dict__.get(attr)
        if original is None or (id(owner), attr) in done:
            continue
        wrapper = _timed(phase, original, data)
        setattr(owner, attr, wrapper)
        _patches.append((owner, attr, original, wrapper))
    _phases_on = True
    _note_cuda()


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
        _nvtx_ok = False
        if _c_note is not None:
            _c_note(_NOTE_TORCH_CPU_ONLY)
        return
    try:
        import torch

        _nvtx_ok = bool(torch.cuda.is_available())
    except Exception:
        _nvtx_ok = False


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
        try:
            import torch

            ctx = torch.autograd.profiler.emit_nvtx(
                record_shapes=_cfg.get("record_shapes") == "1")
            ctx.__enter__()
        except Exception:
            _debug_exc("emit_nvtx")
            return
        _nvtx, _nvtx_tid = ctx, me
        _c_note(_NOTE_NVTX_ON)
    elif not on and _nvtx is not None and me == _nvtx_tid:
        ctx, _nvtx = _nvtx, None
        try:
            ctx.__exit__(None, None, None)
        except Exception:
            _debug_exc("leaving emit_nvtx")


_main_ident = _thread.get_ident()  # imported in the main thread
_last_step_ident = None


def _train_thread():
    return _last_step_ident if _last_step_ident is not None else _main_ident


# ------------------------------------------------------------------ Python stacks
#
# The CPU sampler's signal handler must not read the interpreter (it could
# interrupt it anywhere, holding any lock). So while a window records, a
# thread of the bridge takes snapshots of every thread's Python stack with
# sys._current_frames() (under the GIL, like any Python code) at a modest
# rate, and hands each to the host with its time and the thread's kernel id.
# The host merges them into the native samples of the same thread by time
# (src/capture/python.c): a sample shows the Python frames of the snapshot
# nearest to it in place of the interpreter's own frames.

_MY_FILE = __file__
_stack_hz = 0
_stacks_on = False
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


def _set_stacks(on):
    """Starts or stops the snapshot thread. Under _lock."""
    global _stacks_on, _stacks_gen
    if not _stack_hz or on == _stacks_on:
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
    first = True
    while _stacks_on and _stacks_gen == gen and not _down:
        if not first:  # the first at once: a window's first stacks need one
            sleep(period)
        first = False
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
                    if code.co_filename == _MY_FILE:  # profhost's own wrappers
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

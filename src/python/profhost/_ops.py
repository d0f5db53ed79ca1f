"""profhost._ops: torch operator events for the bridge. Not an API.

The bridge (profhost._bridge) calls ``sync(state)`` whenever the window state
changes; this module picks, once, how operator events are collected, and
turns that path on and off around each window:

``observer``
    profhost's RecordFunction observer (src/capture/torch/observer.cpp), a
    global callback registered from the step before a window to its end
    and removed after it. Each operator goes straight into the calling
    thread's profhost buffer (src/capture/torch/torchops.c). The library comes
    from the build (when CMake found torch's headers and it matches the
    torch imported), else from a cache keyed by torch's version and build,
    else it is built there, once, with torch.utils.cpp_extension
    (profhost._opscache: loaded only where nobody but the user or root can
    have written it, else built in a private folder for the run; a corrupt
    cached library is rebuilt once).
``nvtx``
    torch's emit_nvtx (CUDA builds of torch): the bridge enters it.
``profiler``
    torch's own profiler, started at each window's first recorded step and
    stopped at its end; its events are handed to the host, which adds them
    to that window's trace.
``off``
    none.

``PROF_TORCH_OPS=observer|nvtx|profiler|off`` forces one (docs/environment.md);
unset, the first that works in that order. A forced observer is built at
once; otherwise a missing build runs in a background thread and the
fallback serves until it is ready. The summary says once which path is in
use and what it costs.
"""

import os
import sys
import _thread

from . import _opscache

_IDLE, _WARMUP, _RECORDING, _ARMED = 0, 1, 2, 3
_STATE_MASK = 3
_REC_OPS = 256       # the flight recorder keeps operators (profhost._host.REC_OPS)
_SHAPES, _FLOPS, _STACK, _MEMORY = 1, 2, 4, 8  # the observer's flags (observer.cpp)

# What each path costs, measured by tests/bench/bench_torch.py
# (docs/performance.md), for the summary's note.
_COST = {
    "observer": "in recorded steps about 0.7 us per operator with record_shapes, "
                "half of it torch's own for any registered callback "
                "(0.8-0.95 of torch.profiler's), nothing outside windows",
    "nvtx": "torch's emit_nvtx: a few us per operator in recorded steps",
    "profiler": "torch.profiler's own cost in recorded steps (several times "
                "the observer's) and a conversion after each window",
}

_cfg = {}
_api = None          # returns the bridge's bound C table (ctypes)
_warn = _debug = _debug_exc = None
_path = None         # the path in use, once decided
_forced = None       # PROF_TORCH_OPS's value, when set
_lib = None          # the observer library (ctypes.CDLL)
_lib_why = ""        # why there is none
_obs_on = False      # the observer is registered
_building = False    # a background build runs
_noted = None        # the path the summary was last told about
_prof = None         # torch's profiler while the profiler path records
_prof_tid = None


def bind(cfg, api, warn, debug, debug_exc):
    """The bridge's configuration, a function returning its bound C table,
    and its messages."""
    global _cfg, _api, _warn, _debug, _debug_exc, _forced
    _cfg, _api, _warn, _debug, _debug_exc = cfg, api, warn, debug, debug_exc
    forced = os.environ.get("PROF_TORCH_OPS", "").strip().lower()
    if forced in ("observer", "nvtx", "profiler", "off"):
        _forced = forced
    elif forced:
        _warn("PROF_TORCH_OPS=%s is not one of observer, nvtx, profiler, off; "
              "choosing the operator path by itself" % forced)


def _flags():
    return ((_SHAPES if _cfg.get("record_shapes") == "1" else 0) |
            (_FLOPS if _cfg.get("with_flops") == "1" else 0) |
            (_STACK if _with_stack() else 0) |
            (_MEMORY if _cfg.get("profile_memory") == "1" else 0))


def _with_stack():
    return _cfg.get("with_stack") == "1" and not _stacks_refused


def _note(line):
    """The summary's line about the path in use (once per path)."""
    global _noted
    if _noted == _path:
        return
    _noted = _path
    try:
        if _api().note_text:
            _api().note_text(line.encode("utf-8", "replace"))
    except Exception:
        _debug_exc("the operator path's note")


def sync(state):
    """Brings the operator path in line with the window state (under the
    bridge's lock, any thread). Returns True when the bridge's emit_nvtx
    should be on (the nvtx path). Between windows the observer also runs
    while the flight recorder keeps operators (prof.capture{profile_memory});
    the operators' call stacks (with_stack) are tracked in windows only,
    from their armed step to their end, as without the recorder."""
    rec_ops = bool(state & _REC_OPS)
    state &= _STATE_MASK
    want = state != _IDLE or rec_ops
    try:
        if want and _path is None:
            _decide()
        if _path == "observer":
            window = state != _IDLE
            _set_observer(want, window)
            if _obs_on:
                _set_stacks(window and _with_stack())
        elif _path == "profiler":
            _set_profiler(state == _RECORDING)
        if not want and _path != "observer" and _lib is not None and not _building:
            _switch_to_observer()
    except Exception:
        _debug_exc("operator events")
    return _path == "nvtx"


# ------------------------------------------------------------------ choosing

def _cuda_torch():
    try:
        import torch

        return torch.version.cuda is not None and torch.cuda.is_available()
    except Exception:
        return False


def _fallback():
    if _forced in ("nvtx", "profiler", "off"):
        return _forced
    return "nvtx" if _cuda_torch() else "profiler"


def _decide():
    """Picks the path (the first window's armed step)."""
    global _path
    if not _api().torchops:
        # A host with no operator table (a test's fake one): emit_nvtx,
        # where torch has CUDA, as before the observer.
        _path = "nvtx"
    elif _forced in ("nvtx", "profiler", "off"):
        _path = _forced
        if _path == "nvtx" and not _cuda_torch():
            _warn("PROF_TORCH_OPS=nvtx: this torch has no CUDA, so no emit_nvtx; "
                  "operator events come from torch's profiler")
            _path = "profiler"
    elif _load_observer(build=_forced == "observer"):
        _path = "observer"
    else:
        _path = _fallback()
        if _forced == "observer":
            _warn("PROF_TORCH_OPS=observer: %s; operator events come from %s" %
                  (_lib_why, "torch's emit_nvtx" if _path == "nvtx" else "torch's profiler"))
    _debug("operator events: %s" % _path)
    if _path != "observer" and _flags() & _MEMORY:
        _warn("prof.capture{profile_memory}: torch's tensor allocations are recorded by "
              "profhost's operator observer, not in use (%s); %s" %
              (_lib_why or "PROF_TORCH_OPS=%s" % _forced,
               "none are recorded until its build is ready" if _building else
               "none are recorded"))
    if _path == "off":
        _note("operator events: off (PROF_TORCH_OPS=off)")
    elif _path == "nvtx":
        _note("operator events: torch's emit_nvtx (NVTX ranges; %s)%s"
              % (_COST["nvtx"], "" if _forced else "; " + _lib_why))


def _switch_to_observer():
    """A background build finished: the next window uses the observer."""
    global _path
    if _forced in ("nvtx", "profiler", "off") or _path == "observer":
        return
    _path = "observer"


# ------------------------------------------------------------------ the observer

def _torch_cpu_lib():
    """The real path of the libtorch_cpu this process runs, or None."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                if "/libtorch_cpu." in line:
                    return os.path.realpath(line.split(None, 5)[-1].strip())
    except OSError:
        pass
    return None


def _prebuilt():
    """The observer the build made, when it was built for this torch."""
    share = _cfg.get("share", "")
    if not share or os.environ.get("PROF_TORCH_OPS_PREBUILT", "1") == "0":
        return None
    lib = os.path.normpath(os.path.join(share, "..", "..", "..", "lib",
                                        "libprofhost-torchops.so"))
    try:
        with open(lib + ".torch") as f:
            meta = dict(l.strip().split("=", 1) for l in f if "=" in l)
    except OSError:
        return None
    import torch

    version = torch.__version__.split("+")[0]
    if not version.startswith(meta.get("version", "?")):
        _debug("the built observer is for torch %s, not %s" % (meta.get("version"), version))
        return None
    if os.path.realpath(meta.get("torch_cpu", "")) != _torch_cpu_lib():
        _debug("the built observer links %s, not this process's torch" % meta.get("torch_cpu"))
        return None
    return lib


def _source():
    share = _cfg.get("share", "")
    return os.path.normpath(os.path.join(share, "..", "torchops", "observer.cpp"))


def _load_observer(build):
    """Loads the observer: the build's, the cache's, or (build=True) one
    built now (into the cache, or a private folder where the cache is not
    trusted; profhost._opscache). Without one and build=False, starts a
    background build. A cached library that is corrupt or does not load is
    rebuilt once. Returns True when it is loaded."""
    global _lib, _lib_why
    if _lib is not None:
        return True
    if not os.path.exists(_source()):
        _lib_why = "the observer's source is not installed (%s)" % _source()
        return False
    try:
        path = _prebuilt()
        if path is not None:
            return _open(path)
        where = _where()
        if where is not None:
            try:
                path = _opscache.lookup(where)
                if path is not None:
                    return _open(path)
            except _opscache.Problem as p:
                _untrusted(p)
            except _opscache.Corrupt as exc:
                if not _rebuild_once(where, exc):
                    return False
            except OSError as exc:  # dlopen's
                if not _rebuild_once(where, "it does not load: %s" % exc):
                    return False
        if not build:
            _start_build()
            return False
        return _build_and_open()
    except Exception as exc:
        _lib_why = "the observer could not be loaded (%s)" % exc
        _debug_exc("loading the observer")
        return False


_private = False     # the cache is not trusted: builds go to a private folder
_said = False        # the user was told so
_retry = None        # why the cached library is being rebuilt (once)
_retried = False


def _where():
    """The cache folder, made and checked, or None (then _private)."""
    if _private:
        return None
    try:
        return _opscache.prepare(_opscache.folder(_source(), _torch_cpu_lib))
    except _opscache.Problem as p:
        _untrusted(p)
        return None


def _untrusted(p):
    """The cache is not trusted: builds go to a private folder; said once."""
    global _private, _said
    _private = True
    if not _said:
        _said = True
        _warn("%s: %s; not loading code from it: the torch operator observer is built "
              "in a private folder for this run (%s)" % (_opscache.named(), p.what, p.fix))


def _rebuild_once(where, exc):
    """The cached library is corrupt or does not load: True when it is to
    be rebuilt (the first time), else False with _lib_why set."""
    global _retry, _retried, _lib_why
    if _retried:
        _lib_why = "the observer in %s does not load (%s)" % (where, exc)
        return False
    _retried = True
    _retry = str(exc)
    return True


def _build_and_open():
    """Builds the observer (the caller's thread; 30-60 s) and loads it.
    Returns True when it is loaded, else False with _lib_why set (and said,
    when it was a rebuild, as the fallback's warning would not)."""
    global _lib_why
    import torch

    try:
        if _private:
            path = _opscache.build(_opscache.private_folder(), _source())
        else:
            where = _where()
            if where is None:  # the cache turned out untrusted: said
                return _build_and_open()
            if _retry:
                _warn("rebuilding the torch operator observer for torch %s (once): %s"
                      % (torch.__version__, _retry))
            else:
                _warn("building the torch operator observer for torch %s (once; cached in %s)"
                      % (torch.__version__, where))
            path = _opscache.build_into(where, _source())
    except _opscache.Problem as p:
        _lib_why = "no private folder to build the observer in (%s; %s)" % (p.what, p.fix)
        return False
    except _opscache.BuildFailed as exc:
        _lib_why = "the observer could not be built (%s)" % exc
        _debug("building the observer failed:\n%s" % exc.log.rstrip())
        return False
    except OSError as exc:
        _lib_why = "the observer could not be built (%s)" % exc
        return False
    try:
        return _open(path)
    except OSError as exc:
        _lib_why = "the observer built in %s does not load (%s)" % (os.path.dirname(path), exc)
        if _forced != "observer":  # a forced one's fallback says it
            _warn("%s; operator events come from %s" % (_lib_why, "torch's emit_nvtx"
                  if _fallback() == "nvtx" else "torch's profiler"))
        return False


def _open(path):
    global _lib, _lib_why
    import ctypes

    lib = ctypes.CDLL(path)
    lib.profhost_torchops_start.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
    lib.profhost_torchops_start.restype = ctypes.c_int
    lib.profhost_torchops_stop.argtypes = []
    lib.profhost_torchops_stop.restype = None
    lib.profhost_torchops_installed.restype = ctypes.c_uint64
    lib.profhost_torchops_torch_has_callbacks.restype = ctypes.c_int
    lib.profhost_torchops_torch_version.restype = ctypes.c_char_p
    if hasattr(lib, "profhost_torchops_memory_aside"):
        lib.profhost_torchops_memory_aside.argtypes = []
        lib.profhost_torchops_memory_aside.restype = ctypes.c_int
    _lib = lib
    _lib_why = ""
    _debug("observer loaded from %s" % path)
    return True


def _start_build():
    global _building
    if _building:
        return
    _building = True
    import signal

    old = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    try:
        _thread.start_new_thread(_build_in_background, ())
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _build_in_background():
    global _building
    try:
        _build_and_open()
    except Exception:
        _debug_exc("building the observer")
    finally:
        _building = False


def _set_observer(on, window=True):
    """Registers the observer (on) or removes it; `window`: a window is
    armed or recording (call stacks are tracked then only)."""
    global _obs_on
    if on == _obs_on:
        return
    if on:
        if window and _with_stack():
            _set_stacks(True)
        rc = _lib.profhost_torchops_start(_api().torchops, _flags())
        if rc != 0:
            _debug("the observer did not start (%d)" % rc)
            _set_stacks(False)
            return
        _obs_on = True
        if _flags() & _MEMORY:
            _guard_torch_profiler()
        _note("operator events: profhost's RecordFunction observer (torch %s); %s"
              % (_lib.profhost_torchops_torch_version().decode(), _COST["observer"]))
    else:
        _lib.profhost_torchops_stop()
        _obs_on = False
        _set_stacks(False)


# ------------------------------------------------------------------ call stacks

_stacks_on = False       # every Python thread's stack is tracked (opstacks.h)
_stacks_refused = False  # with_stack cannot run here (said once)


def _refuse_stacks(why):
    global _stacks_refused
    if not _stacks_refused:
        _stacks_refused = True
        _warn("prof.capture{ with_stack = true }: %s; torch operators have no call stacks"
              % why)


def _torch_prefixes():
    """The path prefixes torch's Python tracer takes off file names, in its
    order (torch.profiler.python_tracer._prefix_regex)."""
    try:
        from torch.profiler.python_tracer import _prefix_regex

        return list(_prefix_regex())
    except Exception:
        import site

        import torch

        raw = (site.getsitepackages() + sys.path + [site.getuserbase()] +
               [site.getusersitepackages()] +
               [os.path.dirname(os.path.dirname(torch.__file__))])
        return [p + os.sep for p in sorted({os.path.abspath(p) for p in raw}, reverse=True)]


def _set_stacks(on):
    """Tracks every Python thread's call stack (on), for the observer's
    operators, or stops (src/capture/torch/opstacks.h). GIL held (the bridge's
    lock)."""
    global _stacks_on
    if on == _stacks_on:
        return
    import threading

    api = _api()
    if not on:
        threading.setprofile(None)
        api.stacks_off()
        _stacks_on = False
        return
    if not getattr(api, "stacks_on", None):
        _refuse_stacks("this Python has no frame API profhost can read (3.9 or later needed)")
        return
    if sys.getprofile() is not None or getattr(threading, "_profile_hook", None) is not None:
        _refuse_stacks("the program runs a profile function of its own (sys.setprofile, "
                       "threading.setprofile)")
        return
    try:
        import torch

        call_impl = id(torch.nn.Module._call_impl.__code__)
    except Exception:
        call_impl = 0
    prefixes = "\n".join(_torch_prefixes()).encode("utf-8", "surrogateescape")
    if api.stacks_on(prefixes, call_impl) != 0:
        _refuse_stacks("this Python's thread API is missing")
        return
    threading.setprofile(_new_thread)
    _stacks_on = True
    global _fork_hooked
    if not _fork_hooked and hasattr(os, "register_at_fork"):
        _fork_hooked = True
        os.register_at_fork(after_in_child=_forked)


_fork_hooked = False


def _forked():
    """A child forked while stacks are tracked (a DataLoader's workers):
    it records nothing (the host is the parent's), so it runs without the
    profile function."""
    global _stacks_on
    if _stacks_on:
        _stacks_on = False
        sys.setprofile(None)
        import threading

        threading.setprofile(None)


def _new_thread(frame, event, arg):
    """threading.setprofile's hook: a thread started while stacks are
    tracked is tracked too (the host's profile function replaces this
    one on its first event)."""
    try:
        _api().stacks_thread()
    except Exception:
        sys.setprofile(None)


_guarded = False     # torch's profiler entry points step profhost aside


def _guard_torch_profiler():
    """With profile_memory the observer's memory reporter sits in the
    PROFILER_STATE slot of each thread that ran an operator, and torch
    refuses to start its own profiler on such a thread ("Profiler is
    already enabled on this thread"): torch's entry points, wrapped once,
    take it out of the calling thread's slot first. torch's profiler then
    gets that thread's allocations while it runs (the observer says so
    once); the next operator after it puts the reporter back."""
    global _guarded
    if _guarded or not hasattr(_lib, "profhost_torchops_memory_aside"):
        return
    _guarded = True
    import importlib

    for name in ("torch.autograd", "torch.autograd.profiler", "torch.autograd.profiler_legacy"):
        try:
            mod = importlib.import_module(name)
        except Exception:
            continue
        for fn in ("_enable_profiler", "_enable_profiler_legacy"):
            orig = getattr(mod, fn, None)
            if orig is not None and not getattr(orig, "_profhost_aside", False):
                setattr(mod, fn, _aside(orig))


def _aside(orig):
    """`orig` (one of torch's _enable_profiler*), after profhost's memory
    reporter stepped aside on the calling thread."""
    lib = _lib

    def enable(*args, **kwargs):
        try:
            lib.profhost_torchops_memory_aside()
        except Exception:
            _debug_exc("stepping aside for torch's profiler")
        return orig(*args, **kwargs)

    enable._profhost_aside = True
    enable.__wrapped__ = orig
    enable.__name__ = getattr(orig, "__name__", "enable")
    enable.__doc__ = getattr(orig, "__doc__", None)
    return enable


def observer_installed():
    """(callbacks of profhost's observer registered, torch's
    at::hasGlobalCallbacks()), or None without the observer (tests)."""
    if _lib is None:
        return None
    return (int(_lib.profhost_torchops_installed()),
            bool(_lib.profhost_torchops_torch_has_callbacks()))


def path():
    """The operator path in use (None until the first window)."""
    return _path


# ------------------------------------------------------------------ torch's profiler

class _Op(object):
    """ctypes' struct torchops_op (src/capture/torch/torchops_abi.h), made on
    first use."""
    type = None


def _op_type():
    if _Op.type is None:
        import ctypes

        class Op(ctypes.Structure):
            _fields_ = [("name", ctypes.c_char_p), ("dims", ctypes.c_char_p),
                        ("types", ctypes.c_char_p), ("name_len", ctypes.c_uint32),
                        ("dims_len", ctypes.c_uint32), ("types_len", ctypes.c_uint32),
                        ("scope", ctypes.c_uint32), ("start", ctypes.c_int64),
                        ("end", ctypes.c_int64), ("seq", ctypes.c_int64),
                        ("fwd_tid", ctypes.c_uint64), ("flops", ctypes.c_uint64),
                        ("ext_id", ctypes.c_uint64), ("flags", ctypes.c_uint32),
                        ("stack", ctypes.c_uint32)]

        _Op.type = Op
    return _Op.type


# torch's RecordScope numbers: FUNCTION 0, BACKWARD_FUNCTION 1, USER_SCOPE 7.
_SCOPES = {0: 0, 1: 1, 7: 2}


def _set_profiler(on):
    """Starts torch's profiler at a window's first recorded step (on the
    training thread: torch's profiler state is per thread) and, when the
    window has ended, stops it and hands its events to the host."""
    global _prof, _prof_tid, _prof_base, _said_profiler_stack
    if on and _prof is None:
        steps = sys.modules.get("profhost._steps")
        if steps is not None and _thread.get_ident() != steps.train_thread():
            return
        import time
        import torch

        if torch.autograd._profiler_enabled():
            return  # the program's own torch.profiler runs on this thread
        api = _api()
        if not getattr(api, "ops_begin", None):
            return
        p = torch.autograd.profiler.profile(record_shapes=_cfg.get("record_shapes") == "1",
                                            with_flops=_cfg.get("with_flops") == "1")
        if _cfg.get("with_stack") == "1" and not _said_profiler_stack:
            _said_profiler_stack = True
            _warn("prof.capture{ with_stack = true }: operator call stacks come from "
                  "profhost's observer, and torch's profiler collects these operators (%s); "
                  "they have no call stacks" % (
                      "PROF_TORCH_OPS=%s" % _forced if _forced in ("profiler", "nvtx")
                      else _lib_why or "the observer's build is not ready yet"))
        api.ops_begin()
        try:
            _prof_base = _time_mark(torch, time, p)
        except BaseException:
            api.ops_end()  # no profiler runs: the window waits for no events
            raise
        _prof, _prof_tid = p, _thread.get_ident()
        why = ("PROF_TORCH_OPS=%s" % _forced if _forced in ("profiler", "nvtx")
               else _lib_why or "its build is not ready yet")
        _note("operator events: torch's profiler around each window (no observer: %s); %s"
              % (why, _COST["profiler"]))
    elif not on and _prof is not None and _thread.get_ident() == _prof_tid:
        p, _prof = _prof, None
        api = _api()
        try:
            p.__exit__(None, None, None)
            _hand_over(p, api)
        finally:
            api.ops_end()


_prof_base = 0
_said_profiler_stack = False
_BASE_MARK = "profhost#time_base"  # a label of profhost's own, not handed over
_prof_mark = 0     # CLOCK_MONOTONIC ns of _BASE_MARK's start (0: none)


def _time_mark(torch, time, p):
    """Starts torch's profiler `p`, then records _BASE_MARK in it and keeps
    when (_prof_mark: the first read before its start): torch times its
    events from a mark of its own, taken somewhere in enabling, which
    Python cannot read; _hand_over places them by _BASE_MARK instead. The
    op is called once before the profiler starts (recording nothing), so
    its first call's lookup (up to ~100 us) is not inside the reads; the
    read before it makes events early by at most the few us between, never
    late, so an operator that ends a window's last step stays in it.
    Returns the base to use without the mark: now, after enabling (the
    time before it was early by all of enabling, hundreds of us on a first
    window: its labels then landed a step early, beside profhost's
    phases)."""
    global _prof_mark
    _prof_mark = 0
    try:
        # not record_function(): torch 1.13's makes a handle tensor, an
        # aten::zeros the window would count. torch.ops is missing while
        # torch is still being imported (a whole-process window starts
        # then): no mark for that window.
        ops = torch.ops.profiler
        enter, leave = ops._record_function_enter_new, ops._record_function_exit
        leave._RecordFunction(enter(_BASE_MARK, None))  # not recording yet
    except (AttributeError, RuntimeError):
        p.__enter__()
        return time.monotonic_ns()  # torch < 1.12, or torch half imported: no mark
    p.__enter__()
    t0 = time.monotonic_ns()
    leave._RecordFunction(enter(_BASE_MARK, None))
    _prof_mark = t0
    return time.monotonic_ns()


def at_exit():
    """The interpreter ends (the bridge's atexit handler, under the bridge's
    lock) while torch's profiler runs for a window still open: a whole-
    process window (prof.schedule{ whole = true }), or a window the process
    ends in. Its events are handed over now, while Python still runs, so
    the window the host's exit path writes has them (later, nothing could
    stop torch's profiler and they would be lost)."""
    try:
        if _prof is not None and _thread.get_ident() == _prof_tid:
            _set_profiler(False)
    except Exception:
        _debug_exc("handing torch's profiler's events over at exit")


def _hand_over(p, api):
    """torch's profiler's events, as operators of the window (times from
    the profiler's start, in us)."""
    import ctypes
    import json
    import threading

    op = _op_type()()
    tid = threading.get_native_id()
    shapes = _cfg.get("record_shapes") == "1"
    events = p.function_events
    base = _prof_base
    for e in events:
        if e.name == _BASE_MARK:
            if _prof_mark:
                base = _prof_mark - int(e.time_range.start * 1000)
            break
    for e in events:
        if e.name == _BASE_MARK:
            continue
        if getattr(e, "device_type", None) is not None and "CPU" not in str(e.device_type):
            continue
        name = e.name.encode("utf-8", "replace")
        op.name, op.name_len = name, len(name)
        op.scope = _SCOPES.get(int(getattr(e, "scope", 0) or 0), 0)
        op.start = base + int(e.time_range.start * 1000)
        op.end = base + int(e.time_range.end * 1000)
        op.seq = e.sequence_nr if e.sequence_nr is not None else -1
        op.fwd_tid = e.fwd_thread or 0
        op.flags = 0
        op.dims = op.types = None
        op.dims_len = op.types_len = 0
        if shapes and e.input_shapes is not None:
            dims = json.dumps(e.input_shapes).encode()
            types = ("[%s]" % ", ".join('""' for _ in e.input_shapes)).encode()
            op.dims, op.dims_len = dims, len(dims)
            op.types, op.types_len = types, len(types)
            op.flags |= 2
        if e.flops:
            op.flops = int(e.flops)
            op.flags |= 1
        api.op_late(ctypes.addressof(op), tid)

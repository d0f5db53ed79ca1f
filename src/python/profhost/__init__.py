"""profhost: mark steps and label work for the profhost profiling host.

The functions call the host's C ABI (include/profhost/prof.h) in the running
process. When the process was not started under the host (no ``prof run``, no
LD_PRELOAD of libprofhost.so) they do nothing, quietly, so the calls can stay
in the code::

    import profhost

    for batch in loader:
        with profhost.range("forward"):
            loss = model(batch)
        ...
        profhost.step()

    @profhost.range("evaluate")
    def evaluate(model): ...

The host is looked up once, on first use, among the symbols already loaded in
the process (``ctypes.CDLL(None)``); nothing is loaded by this module. Every
function may be called from any thread.

Importing this package is cheap (ctypes is imported on first use): the host
imports it into every Python process it runs in (see profhost._bridge).
"""

import _thread
import sys as _sys
import time as _time

__all__ = ["step", "manual_steps", "mark", "range", "phase", "record_phase",
           "capture_now", "dump", "loaded", "abi_version"]

# The step phases, in the host's order (src/capture/python/python.c).
PHASES = ("data", "forward", "backward", "optimizer")

_lock = _thread.allocate_lock()
_fns = None  # None until bound; then a dict, empty when there is no host


def _signatures(ctypes):
    """The C ABI this module calls: name -> (argtypes, restype)."""
    return {
        "prof_step": ([], None),
        "prof_range_push": ([ctypes.c_char_p], None),
        "prof_range_pop": ([], None),
        "prof_mark": ([ctypes.c_char_p], None),
        "prof_capture_now": ([ctypes.c_uint, ctypes.c_char_p], ctypes.c_int),
        "prof_abi_version": ([], ctypes.c_int),
        "prof_dump": ([ctypes.c_uint, ctypes.c_char_p], ctypes.c_int),
    }


# Functions a host older than this module may lack: looked up when there.
_OPTIONAL = ("prof_dump",)


def _lookup():
    """Looks the host's functions up in the process; {} when any is missing."""
    import ctypes

    try:
        lib = ctypes.CDLL(None)
        # A range push keeps the GIL (it is short): with range_stacks the
        # host then reads the Python frames that pushed it.
        with_gil = ctypes.PyDLL(None)
    except OSError:
        return {}
    found = {}
    for name, (argtypes, restype) in _signatures(ctypes).items():
        try:
            fn = getattr(with_gil if name == "prof_range_push" else lib, name)
        except AttributeError:
            if name in _OPTIONAL:
                continue
            return {}
        fn.argtypes = argtypes
        fn.restype = restype
        found[name] = fn
    return found


def _bind():
    """Returns the dict of the host's functions (empty when no host).

    The lookup runs once, under a lock; later calls read one reference.
    """
    global _fns
    fns = _fns
    if fns is not None:
        return fns
    with _lock:
        if _fns is None:
            _fns = _lookup()
        return _fns


def _encode(name):
    """Turns a name into the bytes handed to C: bytes as they are, str as
    UTF-8 (bytes smuggled in by os.fsdecode come back out; other unencodable
    characters become '?'), anything else as str(name). The C side reads up
    to the first NUL byte.
    """
    if isinstance(name, bytes):
        return name
    if not isinstance(name, str):
        name = str(name)
    try:
        return name.encode("utf-8", errors="surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate outside U+DC80..U+DCFF
        return name.encode("utf-8", errors="replace")


def loaded():
    """True when the profiling host is loaded in this process."""
    return "prof_step" in _bind()


def abi_version():
    """The ABI version of the loaded host (an int), or None without a host."""
    fn = _bind().get("prof_abi_version")
    return int(fn()) if fn is not None else None


def step():
    """Marks the end of the current step and the start of the next one.

    The first call turns the host's automatic steps (optimizer steps, or
    prof.steps{python=...} returns) off. When it comes right after the
    automatic step of the same iteration (after optimizer.step() in the same
    pass of the loop), that iteration already ended there: this first call
    is then not counted again.
    """
    fn = _bind().get("prof_step")
    if fn is None:
        return
    bridge = _sys.modules.get("profhost._bridge")
    if bridge is not None and bridge.explicit_step():
        return
    fn()


def manual_steps():
    """From now on only step() ends a step: the host stops counting optimizer
    steps (or prof.steps{python=...} returns) by itself. Without this call
    that happens at the first step(). Nothing happens without a host.
    """
    bridge = _sys.modules.get("profhost._bridge")
    if bridge is not None:
        bridge.manual_steps()


def mark(name):
    """Records an instant event called ``name`` on the calling thread."""
    fn = _bind().get("prof_mark")
    if fn is not None:
        fn(_encode(name))


def _phase_index(name):
    try:
        return PHASES.index(name)
    except ValueError:
        raise ValueError("profhost: unknown phase %r (the phases are %s)"
                         % (name, ", ".join(PHASES))) from None


def record_phase(name, start_ns, end_ns):
    """Reports that the calling thread spent [start_ns, end_ns] in phase
    ``name`` ("data", "forward", "backward" or "optimizer"), times from
    time.monotonic_ns(). For callbacks that see a phase begin in one method
    and end in another (examples/hf_callback.py, lightning_callback.py).

    Once a phase is reported this way, the host stops timing that phase by
    itself: the application's own phases win. Kept only while a window
    records; nothing happens without a host.
    """
    i = _phase_index(name)
    bridge = _sys.modules.get("profhost._bridge")
    if bridge is not None:
        bridge.explicit_phase(i, int(start_ns), int(end_ns))


class phase:
    """``with profhost.phase("forward"): ...``: the block is that step phase
    (see record_phase)."""

    __slots__ = ("_name", "_phase", "_t0")

    def __init__(self, name):
        self._phase = _phase_index(name)
        self._name = name
        self._t0 = 0

    def __enter__(self):
        bridge = _sys.modules.get("profhost._bridge")
        if bridge is not None:
            bridge.own_phase(self._phase)
        self._t0 = _time.monotonic_ns()
        return self

    def __exit__(self, exc_type, exc, tb):
        record_phase(self._name, self._t0, _time.monotonic_ns())
        return False


def capture_now(steps, reason=None):
    """Asks for a capture window of ``steps`` steps from the next step boundary.

    Returns True when the host queued the request, False otherwise (no host,
    host disabled, or steps == 0). ``steps`` must be an int in [0, 2**32):
    anything else raises, with or without a host, so a mistake shows up
    before the code runs under the profiler.
    """
    import operator

    steps = operator.index(steps)
    if steps < 0 or steps > 0xFFFFFFFF:
        raise ValueError("capture_now: steps must be in [0, 2**32), got %d" % steps)
    fn = _bind().get("prof_capture_now")
    if fn is None:
        return False
    return fn(steps, None if reason is None else _encode(reason)) == 0


def dump(steps=None, reason=None):
    """Asks the flight recorder (``prof.recorder{}`` in the policy) to write
    its last ``steps`` complete steps, the step that just ended included, as
    a ``recorder<K>_steps<a>-<b>`` folder (docs/recorder.md). ``steps``
    None: the recorder's own ``steps``.

    Returns True when the host took the dump (or merged it into an earlier
    one that holds these steps), False otherwise (no host, the recorder is
    off, a window is recording these steps, the run's max_dumps are written,
    no step completed yet; the host says why on stderr). ``steps`` must be
    None or an int in [1, 2**32): anything else raises, with or without a
    host.
    """
    import operator

    if steps is None:
        steps = 0
    else:
        steps = operator.index(steps)
        if steps < 1 or steps > 0xFFFFFFFF:
            raise ValueError("dump: steps must be None or in [1, 2**32), got %d" % steps)
    fn = _bind().get("prof_dump")
    if fn is None:
        return False
    return fn(steps, None if reason is None else _encode(reason)) == 0


class range:  # noqa: A001 - the name mirrors the C ABI (prof_range_push/pop)
    """A named range on the calling thread: a context manager and a decorator.

    ``with profhost.range("load"):`` pushes on entry and pops on exit, also
    when the block raises. ``@profhost.range("load")`` wraps each call of the
    decorated function the same way. One object may be entered again, nested
    and used from several threads: it holds only the name.

    A range named like a phase ("data", "forward", "backward", "optimizer")
    is the program's own mark of that phase: the host stops timing that
    phase by itself (as with record_phase), so it is counted once.
    """

    __slots__ = ("_name", "_phase")

    def __init__(self, name):
        self._name = _encode(name)
        try:
            self._phase = PHASES.index(self._name.decode("utf-8"))
        except ValueError:
            self._phase = -1

    def __enter__(self):
        if self._phase >= 0:
            bridge = _sys.modules.get("profhost._bridge")
            if bridge is not None:
                bridge.own_phase(self._phase)
        fn = _bind().get("prof_range_push")
        if fn is not None:
            fn(self._name)
        return self

    def __exit__(self, exc_type, exc, tb):
        fn = _bind().get("prof_range_pop")
        if fn is not None:
            fn()
        return False

    def __call__(self, func):
        import functools

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with self:
                return func(*args, **kwargs)

        return wrapper

    def __repr__(self):
        return "profhost.range(%r)" % self._name.decode("utf-8", "surrogateescape")

"""profhost._host: the bridge's binding to the host. Not an API.

The host (src/capture/python/python.c) hands profhost._bridge._start the address of
its C table, struct pybridge_api, and a configuration of "key=value" lines.
This module keeps both: the table is bound with ctypes on first use (never
before torch or a Python stack rate needs it, so a process that never
imports torch never loads ctypes), and its functions are read from here by
the bridge's other modules (c_state, c_step, ...: None until bound).

It also holds what every part of the bridge shares: the configuration, the
"interpreter is finalizing" flag, the lock under which hooks are switched
on and off, and the messages (debug lines with PROF_LOG=debug, warnings).
"""

import struct
import sys
import time
import _thread

# Window state from the host (pybridge_api.state): ARMED is the step
# before a window opens or warms up, so that what a window's start costs
# (installing the hooks, entering emit_nvtx, starting the snapshot thread)
# is paid before its first recorded step.
IDLE, WARMUP, RECORDING, ARMED = 0, 1, 2, 3
STATE_MASK = 3
EXPLICIT = 16
MODULES = 32         # the window records nn.Module calls (prof.capture{modules})
RECORDER = 64        # the flight recorder keeps steps between windows (phases)
REC_STACKS = 128     # ... and CPU samples: Python stack snapshots run then too
REC_OPS = 256        # ... and torch's operators and allocations (profile_memory)
NOTE_TORCH_CPU_ONLY = 1
NOTE_NVTX_ON = 2

API_VERSION = 9

MY_DIR = __file__.rsplit("/", 1)[0] + "/"  # profhost's package directory

now = time.monotonic_ns  # CLOCK_MONOTONIC: the host's clock

cfg = {}             # the host's configuration (see configure)
down = False         # the interpreter is finalizing
lock = _thread.RLock()  # guards the hooks' installation (every part's)

_api_addr = 0
_api = None          # the C table (ctypes), bound on first use
c_state = c_step = c_phase = c_note = c_down = c_pystack = c_phase_named = None
c_phases = None
step_fn = None       # the host's step builtin (see configure), or None
# The host's other builtins of the step (see configure), or None each
lean_begin = lean_end = opt_pre = opt_post = opt_failed = None
lean_ctl = lean_applied = lean_flush = lean_last = None
_lean_bits = 0       # what lean_ctl was last told (see lean())

# lean_ctl's bit for the automatic steps (src/capture/python/pylean.h;
# the phases' bits are profhost._phases's, _C_*)
LEAN_AUTO = 128
# what opt_pre, opt_post and opt_failed ask of Python
PY_END_FAILED, PY_BEGIN, PY_END_OK, PY_AUTO, PY_APPLY = 1, 2, 4, 8, 16
c_module = c_module_call = c_dump = c_exit_now = None
_names = {}          # phase names given by str, as the bytes handed to C


def configure(api_addr, config, step=None, fast=None):
    """Keeps the table's address, parses the host's configuration and keeps
    the host's builtins: `step`, step(kept) makes an automatic step with
    the phases kept for it (a list of (phase, start, end, name) tuples,
    or None) and returns the window state, a C function called directly,
    where ctypes cost 2-10 us a step (#29); `fast`, the tuple of the
    others (src/capture/python/pylean.h): the optimizer step's hooks, the
    automatic step and the phases between windows in C, each a few
    microseconds of cold Python a step otherwise (#29). None (a host
    without them, a test's fake table): steps go through the table, and
    the hooks and phases run in Python."""
    global _api_addr, cfg, step_fn
    global lean_begin, lean_end, opt_pre, opt_post, opt_failed
    global lean_ctl, lean_applied, lean_flush, lean_last
    _api_addr = api_addr
    cfg = dict(l.split("=", 1) for l in config.splitlines() if "=" in l)
    step_fn = step
    if step is not None and fast is not None:
        (lean_begin, lean_end, opt_pre, opt_post, opt_failed,
         lean_ctl, lean_applied, lean_flush, lean_last) = fast


def lean(bits, mask):
    """Sets the `mask` bits of the builtins' switches (LEAN_*) to `bits`.
    Any thread (profhost.step()'s sets the automatic steps' bit); under
    the bridge's lock, taken here too, so that no update is lost."""
    global _lean_bits
    with lock:
        _lean_bits = (_lean_bits & ~mask) | (bits & mask)
        if lean_ctl is not None:
            lean_ctl(_lean_bits)


# ------------------------------------------------------------------ messages

def debug(msg):
    if cfg.get("log") == "3":
        try:
            sys.stderr.write("profhost: python bridge: %s\n" % msg)
        except Exception:
            pass


def debug_exc(what):
    if cfg.get("log") == "3":
        import traceback

        debug("%s failed:\n%s" % (what, traceback.format_exc().rstrip()))


def warn(msg):
    try:
        sys.stderr.write("profhost: %s\n" % msg)
    except Exception:
        pass


# ------------------------------------------------------------------ the C side

def api_type():
    """The ctypes structure of the host's table."""
    import ctypes

    class _Api(ctypes.Structure):
        # struct pybridge_api (src/capture/python/python.c). `step` releases the
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
            ("module", ctypes.PYFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64,
                                         ctypes.c_char_p)),
            ("torchops", ctypes.c_void_p),  # profhost._ops's observer table
            ("note_text", ctypes.PYFUNCTYPE(None, ctypes.c_char_p)),
            ("ops_begin", ctypes.PYFUNCTYPE(None)),
            ("op_late", ctypes.PYFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32)),
            ("ops_end", ctypes.PYFUNCTYPE(None)),
            # (version 5) the recorder's dump on an uncaught exception;
            # releases the GIL (it takes the host's window lock)
            ("dump", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p)),
            # (version 6) the host's exit path, now; releases the GIL (the
            # host thread writes what was recording meanwhile)
            ("exit_now", ctypes.CFUNCTYPE(None)),
            # (version 7) prof.capture{ with_stack }: every Python thread's
            # call stack tracked for the operators (GIL held)
            ("stacks_on", ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)),
            ("stacks_thread", ctypes.PYFUNCTYPE(None)),
            ("stacks_off", ctypes.PYFUNCTYPE(None)),
            # (version 8) an nn.Module call as torch's with_modules writes
            # one: start, end, name, path, Python id, parent's id, module id
            ("module_call", ctypes.PYFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64,
                                              ctypes.c_char_p, ctypes.c_char_p,
                                              ctypes.c_uint64, ctypes.c_uint64,
                                              ctypes.c_uint64)),
            # (version 9) phases handed over at once (packed records, see
            # phases_out), then a step when the int is not 0;
            # returns the state
            ("phases", ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint32,
                                         ctypes.c_int)),
        ]

    return _Api


def bind():
    """Binds the host's C table (once). Returns False when it cannot be."""
    global _api, c_state, c_step, c_phase, c_note, c_down, c_pystack, c_phase_named
    global c_module, c_module_call, c_dump, c_exit_now, c_phases
    if _api is not None:
        return True
    if not _api_addr:
        return False
    import ctypes

    atype = api_type()
    api = atype.from_address(_api_addr)
    if api.version != API_VERSION or api.size < ctypes.sizeof(atype):
        debug("host table version %d, expected %d" % (api.version, API_VERSION))
        return False
    c_state, c_step, c_phase = api.state, api.step, api.phase
    c_note, c_down, c_pystack = api.note, api.down, api.pystack
    c_phase_named = api.phase_named
    c_module = api.module if api.module else None  # NULL in a fake table
    c_module_call = api.module_call if api.module_call else None
    c_dump = api.dump if api.dump else None
    c_exit_now = api.exit_now if api.exit_now else None
    c_phases = api.phases if api.phases else None
    _api = api
    return True


def table():
    """The bound C table (ctypes), or None before bind()."""
    return _api


def _raw(name):
    """A phase name (str) as the bytes handed to C, cached."""
    raw = _names.get(name)
    if raw is None:
        if len(_names) > 1000:
            _names.clear()
        raw = _names[name] = name.encode("utf-8", "replace")
    return raw


def phase(phase, start, end, name=None):
    """Hands a phase to the host; `name` (a str): the name to write it
    under, when the host's phase queries take it for that phase."""
    if name is not None and c_phase_named is not None:
        c_phase_named(phase, start, end, _raw(name))
    elif c_phase is not None:
        c_phase(phase, start, end)


# One record of the table's `phases`: struct pyb_phase_rec (python.c),
# then its name.
_pack_phase = struct.Struct("<iIqq").pack


def phases_out(kept, step):
    """Hands phases kept by profhost._phases ((phase, start, end, name)
    tuples, name None for the phase's own) to the host, then, with `step`,
    an automatic step; one call into C for both. Returns the host's
    state. Only where the table has the entry (see
    profhost._steps.set_merge)."""
    parts = []
    for phase, start, end, name in kept:
        raw = b"" if name is None else _raw(name)
        parts.append(_pack_phase(phase, len(raw), start, end))
        parts.append(raw)
    records = b"".join(parts)
    return c_phases(records, len(records), 1 if step else 0)


def exit_now():
    """The process ends with no C exit handler run (see
    _bridge._ends_in_sigint): the host runs its exit path now, writing what
    was recording and removing its salvage file. Fails open."""
    try:
        if bind() and c_exit_now is not None:
            c_exit_now()
    except Exception:
        debug_exc("the host's exit path")


def finalizing():
    """The interpreter exits (atexit): the host's table is used no more."""
    global down
    down = True
    lean(0, LEAN_AUTO)
    if c_down is not None:
        c_down()

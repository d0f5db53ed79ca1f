"""profhost._pystacks: Python stack snapshots for the CPU sampler. Not an API.

The CPU sampler's signal handler must not read the interpreter (it could
interrupt it anywhere, holding any lock). So while a window records (or the
flight recorder keeps CPU samples between windows), a
thread of the bridge (started the step before, so that its start costs no
recorded step) takes snapshots of every thread's Python stack with
sys._current_frames() (under the GIL, like any Python code) at a modest
rate, and hands each to the host with its time and the thread's kernel id.
The host merges them into the native samples of the same thread by time
(src/capture/python/python.c): a sample shows the Python frames of the snapshot
nearest to it in place of the interpreter's own frames.

set_rate runs once, in the main thread; set_on under the bridge's lock
(_host.lock); the snapshot thread reads the switches without a lock (a
stale read costs one period).
"""

import sys
import time
import _thread

from . import _host

hz = 0            # snapshots per second; 0: off
on = False        # the snapshot thread runs
rec = False       # and takes snapshots
gen = 0           # bumped each time the thread starts: an old one exits
_STACK_DEPTH = 256


def set_rate(value):
    """The rate from the host's configuration (py_stacks_hz)."""
    global hz
    try:
        hz = max(0, int(value))
    except ValueError:
        hz = 0
    if hz:
        import threading  # noqa: F401  (imported here, in the main thread:
        # threading takes the importing thread for the main one)


def set_on(want, recording):
    """Starts or stops the snapshot thread, and has it take snapshots or
    not. Under _host.lock."""
    global on, gen, rec
    if not hz:
        return
    rec = want and recording
    if want == on:
        return
    on = want
    gen += 1
    if want:
        _start_unsignalled(_loop, (gen,))


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


def _loop(my_gen):
    _name_this_thread()
    period = 1.0 / hz
    me = _thread.get_ident()
    sleep = time.sleep
    names = {}
    my_dir = _host.MY_DIR
    taken = False  # a snapshot taken since recording (re)started
    while on and gen == my_gen and not _host.down:
        # Every period while recording, the first one at once: a window's
        # first samples need a snapshot near them.
        if taken or not rec:
            sleep(period)
        if not rec:
            taken = False
            continue
        taken = True
        try:
            frames = sys._current_frames()
            ts = _host.now()
            natives = _native_ids()
            for ident, f in frames.items():
                tid = natives.get(ident)
                if ident == me or tid is None:
                    continue
                parts = []
                while f is not None and len(parts) < _STACK_DEPTH:
                    code, line = f.f_code, f.f_lineno
                    if code.co_filename.startswith(my_dir):  # profhost's own code
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
                _host.c_pystack(tid, ts, data, len(data))
            del frames
        except Exception:
            _host.debug_exc("Python stack snapshot")

"""profhost._excepthook: the flight recorder's dump on an uncaught exception
in the main thread. Not an API.

With ``prof.recorder{}`` and its ``dump_on_exception`` (the default), the
host says ``dump_on_exception=1`` and ``install()`` puts ``hook`` in
``sys.excepthook``, chained to the hook that was there (the program's own,
or Python's): ours asks the host for the dump (reason ``exception:
ZeroDivisionError: division by zero``), then calls it, so what the program
prints and its exit status stay its own. A program that replaces
``sys.excepthook`` later keeps its hook; the dump is then asked at exit
(``at_exit``, from ``sys.last_value``, which Python sets for an uncaught
exception before calling the hook), still before the interpreter is gone.
The host writes the dump before the process ends. Fails open: nothing here
raises into the program.
"""

import sys

from . import _host

REASON_MAX = 120  # characters; the host keeps 127 bytes

_prev = None      # the hook ours chains to
_asked = False    # the dump was asked (once per process)


def install():
    """Chains ``hook`` in front of the current ``sys.excepthook`` (once)."""
    global _prev
    if sys.excepthook is hook:
        return
    _prev = sys.excepthook
    sys.excepthook = hook


def hook(exc_type, exc, tb):
    """sys.excepthook: the dump, then the hook that was there before."""
    dump(exc_type, exc)
    prev = _prev if _prev is not None else sys.__excepthook__
    return prev(exc_type, exc, tb)


def at_exit():
    """The interpreter exits: an uncaught exception that did not reach our
    hook (the program replaced sys.excepthook) is dumped now."""
    exc = getattr(sys, "last_value", None)
    if exc is not None and not _asked:
        dump(type(exc), exc)


def reason(exc_type, exc):
    """"exception: <type>: <message>" on one line, at most REASON_MAX
    characters."""
    name = getattr(exc_type, "__name__", None) or str(exc_type)
    try:
        text = str(exc)
    except Exception:
        text = ""
    text = " ".join(text.split())
    r = "exception: %s: %s" % (name, text) if text else "exception: %s" % name
    if len(r) > REASON_MAX:
        r = r[:REASON_MAX - 3] + "..."
    return r


def dump(exc_type, exc):
    """Asks the host for the recorder's dump (once)."""
    global _asked
    if _asked or _host.down:
        return
    _asked = True
    try:
        phases = sys.modules.get("profhost._phases")
        if phases is not None:
            phases.flush()  # the failing step's phases, kept for its end
        if _host.bind() and _host.c_dump is not None:
            rc = _host.c_dump(reason(exc_type, exc).encode("utf-8", "replace"))
            _host.debug("uncaught %s: recorder dump %s" % (
                getattr(exc_type, "__name__", exc_type), "asked" if rc == 0 else "refused"))
    except Exception:
        _host.debug_exc("the recorder's dump on an uncaught exception")

"""profhost._modules: nn.Module calls as ranges. Not an API.

With ``prof.capture{ modules = true }``, while a window records, each
``nn.Module`` call on any thread is handed to the host as a range named by
the module's path in its model, as ``named_modules()`` gives it and torch's
``with_modules`` shows it (``encoder.layers.3.attn``); a root module (one
called with no module call around it) is named by its class
(``TransformerModel``). The host writes them as ``python_function`` events
(Kineto's category for Python calls, torch's own for module calls), and the
``modules`` report ranks them by self time.

No hooks of its own: the step phases' global module hooks (_phases, on
from the step before a window to its end) call this module's ``pre`` and
``post`` with the time they took, so a root module's range and the forward
phase begin and end at the same instants and nest. The observer is set
only while a window records (``set_on``); a call that began before is not
written.

Names come from the root's ``named_modules()``, walked when a module
called inside it has no name yet, and are kept per module object in weak
dictionaries (a module freed is forgotten): a submodule added later is
found by walking again (at most a few times a root); a module called
inside a root but not among its named modules, and a root, are named by
their class. A module keeps its first name. State is per thread; nothing
raises into the application.
"""

import threading
import weakref

from . import _host

_MAX_DEPTH = 256      # module calls kept open per thread (deeper: not written)
_MAX_WALKS = 8        # named_modules() walks of one root, at most

_names = weakref.WeakKeyDictionary()   # module -> name as bytes
_walks = weakref.WeakKeyDictionary()   # root module -> times walked
_gen = 0              # bumped each time recording starts: stacks reset


class _State(threading.local):
    gen = -1
    stack = None      # [(module, start_ns)], outermost first
    root = None       # the module of the outermost open call


_tls = _State()


def set_on(phases, on):
    """Sets the observer of the phases' module hooks (`phases`, _phases) while
    a window that asks for module calls records (on), removes it otherwise.
    Under _host.lock."""
    global _gen
    want = on and _host.c_module is not None
    if want and phases.observer() is not _Observer:
        _gen += 1
        phases.set_observer(_Observer)
    elif not want and phases.observer() is _Observer:
        phases.set_observer(None)


def _state():
    st = _tls
    if st.gen != _gen:
        st.gen = _gen
        st.stack = []
        st.root = None
    return st


def _class_name(module):
    return type(module).__name__.encode("utf-8", "replace")


def _walk(root):
    """Names the modules under `root` by their paths, keeping the names
    already given (by an earlier walk, of this root or another)."""
    _walks[root] = _walks.get(root, 0) + 1
    for path, sub in root.named_modules():
        if path and sub not in _names:
            _names[sub] = path.encode("utf-8", "replace")


def _name(module, root):
    """The name of `module`, called inside a call of `root` (None: it is
    the outermost call itself). A module not named yet has the root walked
    (again: a submodule may have been added since; at most _MAX_WALKS
    times a root), else is named by its class."""
    name = _names.get(module)
    if name is not None:
        return name
    if root is not None and _walks.get(root, 0) < _MAX_WALKS:
        _walk(root)
        name = _names.get(module)
    if name is None:
        name = _names[module] = _class_name(module)
    return name


class _Observer(object):
    """What the phases' module hooks call (static methods: no instance)."""

    @staticmethod
    def pre(module, t):
        """A module call begins at `t` on this thread."""
        try:
            st = _state()
            if len(st.stack) < _MAX_DEPTH:
                if not st.stack:
                    st.root = module
                st.stack.append((module, t))
        except Exception:
            _host.debug_exc("a module's start")

    @staticmethod
    def post(module, t):
        """A module call ends at `t` on this thread: its range is written.
        Calls above it on the stack that never ended (they raised) are
        dropped; a call that did not begin while recording is ignored."""
        try:
            st = _state()
            stack = st.stack
            i = len(stack) - 1
            while i >= 0 and stack[i][0] is not module:
                i -= 1
            if i < 0:
                return
            start = stack[i][1]
            del stack[i:]
            name = _name(module, None if i == 0 else st.root)
            if not stack:
                st.root = None
            if not _host.down:
                _host.c_module(start, t, name)
        except Exception:
            _host.debug_exc("a module's end")

    @staticmethod
    def reset():
        """The thread's outermost module call raised without its hook:
        every open call on this thread is forgotten."""
        st = _state()
        st.stack = []
        st.root = None

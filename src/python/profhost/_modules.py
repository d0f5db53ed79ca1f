"""profhost._modules: nn.Module calls as torch's with_modules writes them. Not an API.

With ``prof.capture{ modules = true }``, while a window records, each
``nn.Module`` call on any thread is handed to the host, which writes it as
torch.profiler's ``with_modules`` does: a ``python_function`` event (Kineto's
category for Python calls) named ``nn.Module: <class>_<module id>``
(``nn.Module: Linear_0``), with the args TensorBoard's module view reads:
``Python id`` (the call's, unique in the process), ``Python parent id`` (the
module call it was made in, null for a root) and ``Python module id`` (the
module's number among those of its class, in the order first seen: the
``_0`` of its name). profhost adds the module's path in its model, as
``named_modules()`` gives it (``encoder.layers.3.attn``): its own tables
show path and class (``encoder.layers.3.attn (MultiheadAttention)``). A
root module (one called with no module call around it) has no path.

No hooks of its own: the step phases' global module hooks (_phases, on
from the step before a window to its end) call this module's ``pre`` and
``post`` with the time they took, so a root module's call and the forward
phase begin and end at the same instants and nest. The observer is set
only while a window records (``set_on``); a call that began before is not
written.

Paths come from the root's ``named_modules()``, walked when a module
called inside it has no path yet, and are kept per module object in weak
dictionaries (a module freed is forgotten): a submodule added later is
found by walking again (at most a few times a root); a module called
inside a root but not among its named modules, and a root, have none. A
module keeps what it was first given (its path, its id). State is per
thread; nothing raises into the application.
"""

import itertools
import threading
import weakref

from . import _host

_MAX_DEPTH = 256      # module calls kept open per thread (deeper: not written)
_MAX_WALKS = 8        # named_modules() walks of one root, at most

_info = weakref.WeakKeyDictionary()    # module -> (name, path) as bytes, module id
_paths = weakref.WeakKeyDictionary()   # module -> path as bytes, from walks
_walks = weakref.WeakKeyDictionary()   # root module -> times walked
_class_ids = weakref.WeakKeyDictionary()  # class -> its next module id
_info_lock = threading.Lock()  # a module's first call: one id per module
_call_ids = itertools.count(1)  # Python ids of calls (next() is atomic)
_gen = 0              # bumped each time recording starts: stacks reset


class _State(threading.local):
    gen = -1
    stack = None      # [(module, start_ns, Python id)], outermost first
    root = None       # the module of the outermost open call


_tls = _State()


def set_on(phases, on):
    """Sets the observer of the phases' module hooks (`phases`, _phases) while
    a window that asks for module calls records (on), removes it otherwise.
    Under _host.lock."""
    global _gen
    want = on and _host.c_module_call is not None
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


def _walk(root):
    """Gives the modules under `root` their paths, keeping the paths
    already given (by an earlier walk, of this root or another)."""
    _walks[root] = _walks.get(root, 0) + 1
    for path, sub in root.named_modules():
        if path and sub not in _paths:
            _paths[sub] = path.encode("utf-8", "replace")


def _module_info(module, root):
    """(name, path, module id) of `module`, called inside a call of `root`
    (None: it is the outermost call itself), given at its first call: torch's
    name, ``nn.Module: <class>_<id>`` with the module's number among its
    class's, and its path (b"": none). A module with no path yet has the
    root walked (again: a submodule may have been added since; at most
    _MAX_WALKS times a root)."""
    info = _info.get(module)
    if info is not None:
        return info
    with _info_lock:
        info = _info.get(module)
        if info is not None:
            return info   # another thread's first call got there first
        path = None
        if root is not None:
            path = _paths.get(module)
            if path is None and _walks.get(root, 0) < _MAX_WALKS:
                _walk(root)
                path = _paths.get(module)
        cls = type(module)
        mid = _class_ids.get(cls, 0)
        _class_ids[cls] = mid + 1
        name = ("nn.Module: %s_%d" % (cls.__name__, mid)).encode("utf-8", "replace")
        info = _info[module] = (name, path or b"", mid)
    return info


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
                st.stack.append((module, t, next(_call_ids)))
        except Exception:
            _host.debug_exc("a module's start")

    @staticmethod
    def post(module, t):
        """A module call ends at `t` on this thread: it is written, with the
        Python id of the call it was made in. Calls above it on the stack
        that never ended (they raised) are dropped; a call that did not
        begin while recording is ignored."""
        try:
            st = _state()
            stack = st.stack
            i = len(stack) - 1
            while i >= 0 and stack[i][0] is not module:
                i -= 1
            if i < 0:
                return
            _, start, pyid = stack[i]
            parent = stack[i - 1][2] if i > 0 else 0
            del stack[i:]
            name, path, mid = _module_info(module, None if i == 0 else st.root)
            if not stack:
                st.root = None
            if not _host.down:
                _host.c_module_call(start, t, name, path, pyid, parent, mid)
        except Exception:
            _host.debug_exc("a module's end")

    @staticmethod
    def reset():
        """The thread's outermost module call raised without its hook:
        every open call on this thread is forgotten."""
        st = _state()
        st.stack = []
        st.root = None

"""profhost._phases: the step phases of the Python bridge. Not an API.

Imported by profhost._steps once torch's optimizer module is there. While
phases are on (a window is armed, warms up or records: see _bridge), the
time a thread spends in

  data       the DataLoader iterator's ``__next__``, written under torch's
             own name for it, ``enumerate(DataLoader)#<iterator>.__next__``
             (what TensorBoard's plugin counts as DataLoader time; the
             host's phase queries take it for data)
  forward    top-level ``nn.Module`` calls: the model, and a loss module
             called after it, are one phase while nothing else (data,
             backward, optimizer, a step boundary) comes between them
  backward   ``torch.autograd.backward`` (``loss.backward()``)
  optimizer  ``optimizer.step()`` (the bridge's step hooks call
             optimizer_begin / optimizer_end)

is reported through ``emit(phase, start_ns, end_ns, name)``. Phases never
nest on a thread: while one is timed there, the others are not.

Between windows, for the flight recorder alone (set_on(True, hooks=False)),
the module hooks stay off: they send every nn.Module call through torch's
slow call path, 1-2 % of a step on a model of small modules, more than the
recorder itself costs. forward is then the time from the end of the
thread's last data fetch, backward or step boundary to the start of its
next backward: the model and the loss with whatever the loop does between
them (moving the batch to the device, zero_grad); with gradient
accumulation, each micro-batch's. Without a backward (an inference loop)
no forward is written between windows.

Where the host hands the bridge its builtins (src/capture/python/pylean.h,
CPython 3.11 and later), lean mode is theirs: the wrappers call begin()
and end() around the original, the optimizer step's hooks (profhost._steps)
call theirs, and each thread's state and kept phases are in C, following
the rules below (_sync_c tells them the mode). Otherwise Python does it:

Between windows, on the thread that makes the automatic steps, a phase is
not handed to the host when it ends but kept (st.pending) and handed
over with the step that ends it: one call into the host a step
where there were five (four phases and the step). Each call through ctypes
costs some microseconds on a real step, whose work has pushed ctypes' and
the host's code and data out of the caches (#29). The host places the
kept timestamps on its clock between the calibration points around them
(src/capture/python/pyclock.h). Phases kept when the mode changes, when
the thread's steps stop being automatic, or before an uncaught exception's
dump (flush()) are handed over then; those of a step that never ends (the
process hangs or is killed in it) are not written.

How each is hooked, and why:

* forward: torch's global module hooks (``register_module_forward_pre_hook``
  and ``register_module_forward_hook``), never a replacement of
  ``nn.Module.__call__``. torch's Python tracer (``torch.profiler`` with
  ``with_stack=True``) tells module calls from other calls by comparing a
  frame's code object with ``nn.Module.__call__.__code__``, read once per
  process when the tracer first starts. Had ``__call__`` been replaced at
  that moment, torch would take the replacement's code for "a module call"
  for the rest of the process, and read a ``self`` local from every frame
  running that code; torch 1.13 dereferences the missing local and dies
  with SIGSEGV (issue #12.1).
* data, backward: a wrapper on ``_BaseDataLoaderIter.__next__`` and one on
  ``torch.autograd.backward``, each a function of its own that carries the
  original's name, qualified name, module, doc, attributes and
  ``__wrapped__`` (so ``inspect.signature`` gives the original's). They are
  re-entrant, let exceptions through untouched and do nothing while phases
  are off. Turning phases off puts the exact original object back, unless
  another library has wrapped ours meanwhile: theirs then stays, with ours
  inside it, inert until phases are on again.

While the hooks are on, an observer (profhost._modules, set by the bridge
while a window records module calls) is told of every module call, nested
ones too, with the instant the forward phase uses, so the two nest.

A program that reports a phase itself (``profhost.phase``,
``profhost.record_phase``, or a ``profhost.range`` named like a phase) owns
that phase from then on: the bridge stops timing it (own()).

Every function here runs on the application's threads; state is per
thread, except the switches set under the bridge's lock. None raises into
the application: a failure of profhost's own code is swallowed (shown with
PROF_LOG=debug) and the wrapped call goes on untouched.
"""

import functools
import sys
import threading
import time

# Phase numbers: enum query_phase's (src/events/query.h), as the host's
# table takes them, and the order of profhost.PHASES.
DATA, FORWARD, BACKWARD, OPTIMIZER = range(4)
NONE = -1

_now = time.monotonic_ns  # CLOCK_MONOTONIC: the host's clock
_emit = None              # emit(phase, start_ns, end_ns, name=None), set by bind()
_report = None            # report(what): prints the exception being handled
_hand = None              # hand(kept, step): kept phases to the host, set by bind()
_PENDING_MAX = 64         # kept phases handed over at once without a step

_on = False      # phases are timed
_lean = False    # ... without the module hooks: forward inferred (above)
_gen = 0         # bumped each time phases turn on: per-thread states reset
_merge = False   # the bridge sees every step boundary (see set_merge)
_batch = False   # lean phases wait for their step (see the top, set_batch)
_owned = set()   # phases the program reports itself
_patches = []    # _Patch of each wrapped callable, installed or not
_handles = []    # torch's handles of the module hooks while on
_observer = None  # pre(module, t), post(module, t), reset(): told of every
                  # module call while the hooks are on (profhost._modules)
# The host's builtins (src/capture/python/pylean.h), set by bind(), or
# None: begin(phase), end(name), flush(mark), and set(bits, mask) for
# their switches (profhost._host.lean)
_c_begin = _c_end = _c_flush = _c_set = None
_cfast = False   # lean phases are timed by the host's builtins (_c_begin)


class _State(object):
    """What one thread is timing (each thread's: _tls.st)."""
    __slots__ = ("gen", "cur", "t0", "mods", "top", "fwd0", "fwd1", "mark", "steps",
                 "pending")

    def __init__(self):
        self.gen = -1       # _gen when this state was last reset
        self.cur = NONE     # the phase timed now on this thread
        self.t0 = 0         # its start
        self.mods = 0       # nn.Module call nesting on this thread
        self.top = None     # the frame running the top-level module call (torch's)
        self.fwd0 = 0       # a forward phase that ended, not yet written:
        self.fwd1 = 0       # [fwd0, fwd1], fwd1 = 0 when none
        self.mark = 0       # lean: where an inferred forward starts (0: none)
        self.steps = False  # this thread has made an automatic step (before_step)
        self.pending = None  # lean: kept (phase, start, end, name) tuples, or None


class _Local(threading.local):
    """Each thread's _State, made on its first use there. A hook reads the
    thread-local once and then plain slots: each read of a threading.local's
    attribute looks up the thread's dict first, several times the cost of a
    slot, and a step's hooks read a dozen (#29)."""

    def __init__(self):
        self.st = _State()


_tls = _Local()


def bind(emit, report, hand=None, lean=None):
    """Sets where phases go, emit(phase, start_ns, end_ns, name=None), how
    an exception of profhost's own is reported, report(what), where kept
    phases go, hand(kept, step) (None: none are kept), and the host's
    builtins that time lean phases in C, lean = (begin, end, flush,
    set) (None: Python times them)."""
    global _emit, _report, _hand, _c_begin, _c_end, _c_flush, _c_set
    _emit, _report, _hand = emit, report, hand
    if lean is not None:
        _c_begin, _c_end, _c_flush, _c_set = lean


# profhost._host.lean's bits (src/capture/python/pylean.h)
_C_ON, _C_HOOKS, _C_BATCH, _C_OWNED_SHIFT, _C_GEN_SHIFT = 1, 2, 4, 3, 16
_C_MASK = 3 | _C_BATCH | (15 << _C_OWNED_SHIFT) | (0x7fff << _C_GEN_SHIFT)


def _sync_c():
    """Tells the host's builtins the mode, the owned phases and the
    generation (see the top). Under the bridge's lock."""
    global _cfast
    _cfast = _on and _lean and _c_begin is not None
    if _c_set is None:
        return
    bits = (_C_ON if _cfast else _C_HOOKS if _on else 0)
    if _batch:
        bits |= _C_BATCH
    for phase in _owned:
        bits |= 1 << (_C_OWNED_SHIFT + phase)
    bits |= (_gen & 0x7fff) << _C_GEN_SHIFT
    _c_set(bits, _C_MASK)


def _reset(st):
    if st.pending:
        _hand_over(st)
    st.gen = _gen
    st.cur = NONE
    st.mods = 0
    st.top = None
    st.fwd1 = 0
    st.mark = 0


def _state():
    st = _tls.st
    if st.gen != _gen:
        _reset(st)
    return st


def _flush(st):
    """Writes the thread's pending forward phase, if any."""
    if st.fwd1:
        end, st.fwd1 = st.fwd1, 0
        _emit(FORWARD, st.fwd0, end)


def _put(st, phase, t0, t1, name=None):
    """Lean mode: a phase that ended, kept for this thread's next step
    (see the top), or written now where none is coming."""
    if _batch and st.steps:
        pending = st.pending
        if pending is None:
            pending = st.pending = []
        pending.append((phase, t0, t1, name))
        if len(pending) >= _PENDING_MAX:
            _hand_over(st)
        return
    if st.pending:
        _hand_over(st)
    _emit(phase, t0, t1, name)


def _take(st):
    """This thread's kept phases, taken from it (None: none)."""
    kept, st.pending = st.pending, None
    return kept


def _hand_over(st):
    """Hands this thread's kept phases to the host now, without a step."""
    _hand(_take(st), False)


def flush():
    """Hands the calling thread's kept phases over now (before a dump the
    program's exception asks for). Raises nothing."""
    try:
        st = _tls.st
        if st.pending:
            _hand_over(st)
        if _c_flush is not None:
            _c_flush(False)
    except Exception:
        _report("handing phases over")


def on_stack(frame):
    """True while `frame` runs on the calling thread (it is the caller's or
    one further out)."""
    f = sys._getframe(1)
    while f is not None:
        if f is frame:
            return True
        f = f.f_back
    return False


def _settle(st):
    """Called where a phase starts or a step ends while st.mods says a
    module call runs: when that top-level call is no longer on the stack it
    raised (torch < 2.1 runs no forward hook then), and is forgotten."""
    if st.top is not None and on_stack(st.top):
        return
    st.mods = 0
    st.top = None
    if _observer is not None:
        _observer.reset()
    if st.cur == FORWARD:
        st.cur = NONE


def _inside(st, phase):
    """True when `phase` starting now is inside another phase on this
    thread (it is not timed then). An optimizer step whose post hook never
    came (its step raised, torch's global hooks) is over when data is
    fetched: data is never fetched inside a step."""
    if st.mods:
        _settle(st)
    if st.cur == OPTIMIZER and phase == DATA:
        st.cur = NONE
    return st.cur != NONE


# ------------------------------------------------------------------ forward
#
# The two hooks run for every module call (nested ones too): they do the
# least they can there.

def _forward_pre(module, args):
    try:
        st = _tls.st
        if st.gen != _gen:
            _reset(st)
        obs = _observer
        if st.mods:
            st.mods += 1   # a module inside the top-level one
            if obs is not None:
                obs.pre(module, _now())
            return None
        st.mods = 1
        st.top = sys._getframe(1)
        t = 0
        if st.cur == NONE and _on and FORWARD not in _owned:
            if st.fwd1 and _merge:
                st.t0 = st.fwd0   # the loss after the model: one forward
                st.fwd1 = 0
            else:
                _flush(st)
                st.t0 = t = _now()
            st.cur = FORWARD
        if obs is not None:
            obs.pre(module, t or _now())  # the phase's instant: they nest
    except Exception:
        _report("the forward pre-hook")
    return None


def _forward_post(module, args, output):
    try:
        st = _tls.st
        if st.gen != _gen:
            _reset(st)    # hooks installed during the call
            return None
        obs = _observer
        mods = st.mods
        if mods != 1:
            if mods:
                st.mods = mods - 1   # nested
            if obs is not None:
                obs.post(module, _now())
            return None
        st.mods = 0
        st.top = None
        t = 0
        if st.cur == FORWARD:
            st.cur = NONE
            t = end = _now()
            if _merge:
                st.fwd0, st.fwd1 = st.t0, end
            else:
                _emit(FORWARD, st.t0, end)
        if obs is not None:
            obs.post(module, t or _now())
    except Exception:
        _report("the forward hook")
    return None


def _module_hooks(on):
    """Registers torch's global module hooks (on) or removes them."""
    if not on:
        while _handles:
            _handles.pop().remove()
        return
    mod = sys.modules.get("torch.nn.modules.module")
    pre = getattr(mod, "register_module_forward_pre_hook", None)
    post = getattr(mod, "register_module_forward_hook", None)
    if pre is None or post is None or _handles:
        return
    _handles.append(pre(_forward_pre))
    try:
        # torch >= 2.1: the hook also runs when forward raises.
        _handles.append(post(_forward_post, always_call=True))
    except TypeError:
        _handles.append(post(_forward_post))


# ------------------------------------------------------------------ wrappers

def _wraps(fn, inner):
    """True when `fn` is `inner` or wraps it (its __wrapped__ chain)."""
    for _ in range(32):
        if fn is inner:
            return True
        fn = getattr(fn, "__wrapped__", None)
        if fn is None:
            return False
    return False


class _Patch(object):
    """One wrapped attribute: owner.attr is `original`, or `wrapper` while
    installed, or someone else's wrapper around ours."""

    __slots__ = ("owner", "attr", "original", "wrapper")

    def __init__(self, owner, attr, original, wrapper):
        self.owner, self.attr = owner, attr
        self.original, self.wrapper = original, wrapper

    def install(self):
        """Puts ours in the way of the attribute. False when the attribute
        is neither the original nor (a wrapper of) ours: someone replaced
        it, and it needs a wrapper of its own."""
        cur = self.owner.__dict__.get(self.attr)
        if _wraps(cur, self.wrapper):
            return True
        if cur is not self.original:
            return False
        setattr(self.owner, self.attr, self.wrapper)
        return True

    def remove(self):
        """Puts the original back, unless someone wrapped ours meanwhile:
        theirs stays, ours inert inside it."""
        if self.owner.__dict__.get(self.attr) is self.wrapper:
            setattr(self.owner, self.attr, self.original)


def _make_wrapper(phase, original):
    """A wrapper timing calls of `original` as `phase`, looking like it."""

    def call(*args, **kwargs):
        if _cfast:
            # Between windows, the recorder alone, on every step: the
            # host's builtins time the phase and keep it with the
            # thread's per-thread state in C (pylean.h), each a few
            # microseconds of cold Python a step otherwise (#29).
            if not _c_begin(phase):
                return original(*args, **kwargs)
            try:
                return original(*args, **kwargs)
            finally:
                name = None
                if phase == DATA and args:   # _phase_name
                    name = getattr(args[0], "_profile_name", None)
                    if not isinstance(name, str):
                        name = _phase_name(phase, args)
                _c_end(name)
        if not _on or phase in _owned:
            return original(*args, **kwargs)
        if _lean:
            # Between windows (the recorder alone), on every step: the path
            # below with its helpers inlined, _put's kept list too (a
            # Python call on a cold step costs microseconds, more than the
            # rest, #29). No module hook runs in this mode, so no module
            # call nests on the thread (st.mods) and no forward waits to
            # be written (st.fwd1): _inside and _flush reduce to the test
            # on st.cur. An inferred forward (_infer_forward) is kept with
            # the backward that ends it.
            try:
                st = _tls.st
                if st.gen != _gen:
                    _reset(st)
                cur = st.cur
                if cur != NONE and (cur != OPTIMIZER or phase != DATA):
                    st = None          # inside another phase: not timed
                else:
                    t0 = _now()
                    st.cur = phase
                    fwd = st.mark      # where an inferred forward starts
                    st.mark = 0
                    if phase != BACKWARD or fwd >= t0 or FORWARD in _owned:
                        fwd = 0
            except Exception:
                _report("starting a phase")
                st = None
            if st is None:
                return original(*args, **kwargs)
            try:
                return original(*args, **kwargs)
            finally:
                try:
                    if st.cur == phase:
                        st.cur = NONE
                    t1 = st.mark = _now()
                    name = None
                    if phase == DATA and args:   # _phase_name
                        name = getattr(args[0], "_profile_name", None)
                        if not isinstance(name, str):
                            name = _phase_name(phase, args)
                    if _batch and st.steps:      # _put
                        kept = st.pending
                        if kept is None:
                            kept = st.pending = []
                        if fwd:
                            kept.append((FORWARD, fwd, t0, None))
                        kept.append((phase, t0, t1, name))
                        if len(kept) >= _PENDING_MAX:
                            _hand_over(st)
                    else:
                        if fwd:
                            _put(st, FORWARD, fwd, t0)
                        _put(st, phase, t0, t1, name)
                except Exception:
                    _report("ending a phase")
        try:
            st = _state()
            if _inside(st, phase):
                st = None
            else:
                _flush(st)
                st.cur = phase
                t0 = _now()
        except Exception:
            _report("starting a phase")
            st = None
        if st is None:
            return original(*args, **kwargs)
        try:
            if st.mark:
                _infer_forward(st, phase, t0)
        except Exception:
            _report("inferring a forward phase")
        try:
            return original(*args, **kwargs)
        finally:
            try:
                if st.cur == phase:
                    st.cur = NONE
                t1 = _now()
                _emit(phase, t0, t1, _phase_name(phase, args))
                if phase != OPTIMIZER and _lean:
                    st.mark = t1   # (the wrappers time data and backward)
            except Exception:
                _report("ending a phase")

    return functools.update_wrapper(call, original)


def _infer_forward(st, phase, t):
    """Lean mode: `phase` starts at `t` on this thread with a mark set (a
    data fetch, a backward or a step boundary before it): a backward
    writes the time since the mark as forward; any phase uses the mark
    up."""
    start, st.mark = st.mark, 0
    if phase == BACKWARD and _lean and FORWARD not in _owned and start < t:
        _put(st, FORWARD, start, t)


def _phase_name(phase, args):
    """The name a phase is written under: a DataLoader fetch under torch's
    label for it (its iterator's _profile_name), else None (the phase's)."""
    if phase != DATA or not args:
        return None
    name = getattr(args[0], "_profile_name", None)
    if not isinstance(name, str):
        name = "enumerate(DataLoader)#%s.__next__" % type(args[0]).__name__
    return name


def _targets():
    """(owner, attribute, phase) of each callable wrapped; those whose
    module is not imported are left out."""
    out = []
    loader = sys.modules.get("torch.utils.data.dataloader")
    autograd = sys.modules.get("torch.autograd")
    if loader is not None and hasattr(loader, "_BaseDataLoaderIter"):
        out.append((loader._BaseDataLoaderIter, "__next__", DATA))
    if autograd is not None:
        out.append((autograd, "backward", BACKWARD))
    return out


def _wrappers(on):
    if not on:
        for p in _patches:
            p.remove()
        return
    for owner, attr, phase in _targets():
        mine = [p for p in _patches if p.owner is owner and p.attr == attr]
        if mine and mine[-1].install():
            continue
        original = owner.__dict__.get(attr)
        if original is None:
            continue
        p = _Patch(owner, attr, original, _make_wrapper(phase, original))
        p.install()
        _patches.append(p)


# ------------------------------------------------------------------ switches

def _present():
    """Which of the hooked modules are imported (they may come later)."""
    m = sys.modules
    return (m.get("torch.nn.modules.module") is not None,
            m.get("torch.utils.data.dataloader") is not None,
            m.get("torch.autograd") is not None)


_covered = None  # _present() when the hooks were last installed


def set_on(on, hooks=True):
    """Turns phase timing on (hooks installed, also those of modules
    imported since; hooks=False: the module hooks stay off and forward is
    inferred, see the top) or off (hooks removed). Under the bridge's
    lock."""
    global _on, _gen, _covered, _lean
    if not on:
        if _on:
            _on = False
            _module_hooks(False)
            _wrappers(False)
            _sync_c()
        return
    lean = not hooks
    if not _on or lean != _lean:
        _gen += 1   # per-thread states start over in the new mode
    elif _covered == _present():
        return
    _covered = _present()
    _lean = lean
    _wrappers(True)
    _module_hooks(not lean)
    _on = True
    _sync_c()


def is_on():
    return _on


def set_observer(obs):
    """Tells `obs` (pre(module, t), post(module, t), reset(); None: no one)
    of every module call while the hooks are on. Under the bridge's lock."""
    global _observer
    _observer = obs


def observer():
    return _observer


def set_batch(on):
    """Whether lean phases wait for their step (see the top): only while
    steps are automatic (an optimizer step, prof.steps{python=...}), which
    hand them over."""
    global _batch
    batch = bool(on) and (_hand is not None or _c_begin is not None)
    if batch != _batch:
        _batch = batch
        _sync_c()


def set_merge(merge):
    """Whether consecutive top-level module calls may be one forward phase:
    only when the bridge sees every step boundary on the stepping thread
    (automatic steps, profhost.step()), where it calls before_step(); with
    steps from NVTX, CUDA or a timer each call is written at its end."""
    global _merge
    _merge = merge


def own(phase):
    """The program reports `phase` itself: stop timing it. Raises nothing
    (nor do the functions below)."""
    if phase not in _owned:
        _owned.add(phase)
        try:
            _sync_c()
        except Exception:
            _report("owning a phase")
        if phase == FORWARD:
            _flush_safely(_state())


def _flush_safely(st):
    try:
        _flush(st)
    except Exception:
        _report("writing a forward phase")


def before_step(automatic=False):
    """A step boundary comes from this thread: the step's forward phase is
    written first, and a forward that raised without a hook is forgotten.
    Lean: the next step's forward may start here. An `automatic` step's
    caller gets the phases kept for it (a list, see the top) to hand over
    with the step; else None."""
    if _cfast:
        # the host's builtins: an automatic step's (they make it) marks
        # the thread and takes its kept phases itself
        if not automatic:
            _c_flush(True)
        return None
    if _lean and _on:
        # no module hook, no pending forward in this mode (see _make_wrapper)
        st = _tls.st
        if st.gen != _gen:
            _reset(st)
        st.mark = _now()
        if not automatic:
            if st.pending:
                _hand_over(st)
            return None
        st.steps = True
        kept, st.pending = st.pending, None   # _take, inlined
        return kept
    st = _tls.st
    if not _on and st.gen == _gen and not st.mods and not st.fwd1:
        return None   # phases off, nothing waits: what follows would do nothing
    st = _state()
    if st.mods:
        _settle(st)
    _flush_safely(st)
    if _lean and _on:
        st.mark = _now()


def optimizer_begin():
    """The outermost optimizer.step() of this thread starts."""
    if not _on or OPTIMIZER in _owned:
        return
    if _lean:
        # no module hook, no pending forward in this mode (see _make_wrapper)
        st = _tls.st
        if st.gen != _gen:
            _reset(st)
        if st.cur == NONE:
            st.mark = 0
            st.cur = OPTIMIZER
            st.t0 = _now()
        return
    st = _state()
    if _inside(st, OPTIMIZER):
        return
    _flush_safely(st)
    st.mark = 0
    st.cur = OPTIMIZER
    st.t0 = _now()


def optimizer_end(ok):
    """The outermost optimizer.step() of this thread returned (ok) or
    raised."""
    st = _tls.st
    if st.gen != _gen:
        _reset(st)
    if st.cur != OPTIMIZER:
        return
    st.cur = NONE
    if ok:
        try:
            if _lean:
                _put(st, OPTIMIZER, st.t0, _now())
            else:
                _emit(OPTIMIZER, st.t0, _now())
        except Exception:
            _report("writing the optimizer phase")

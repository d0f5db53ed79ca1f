"""profhost._steps: step boundaries with no code change. Not an API.

* In a process that imports torch, the end of each optimizer step is a
  step boundary (torch >= 2.0: the global optimizer step hooks; torch 1.13:
  each optimizer class's ``step`` is wrapped when torch wraps it for its own
  profiler). With ``prof.steps{python = "pkg.module:Class.method"}`` the
  return of that function is the step instead (_imports runs the hooks once
  those modules have executed).
* The first explicit ``prof_step()`` (``profhost.step()``) turns both off:
  explicit steps win. The first ``profhost.step()`` right after an
  automatic step in the same pass of the loop body ends that same
  iteration: it is not counted again.
* Hooking torch's optimizer module also loads the step phases
  (profhost._phases); this module keeps them (``phases``) and tells them
  whether consecutive module calls may merge (set_merge).

An automatic step calls the host's step function, then hands the window
state it returns to the bridge (``bind``'s apply). Where the host hands
the bridge its builtins (src/capture/python/pylean.h), the optimizer
step's hooks are theirs: the nesting, the optimizer phase and the
automatic step itself are made in C, and Python is asked only for what it
alone can do (_c_after). Hooks run on the application's threads and fail
open.
"""

import sys
import _thread

from . import _host

OPTIMIZER_MODULE = "torch.optim.optimizer"

mode = "off"         # "optimizer", "function" or "off"
explicit = False     # explicit steps seen: ours no longer count
py_steps = False     # steps come from profhost.step() (the bridge sees them)
torch_hooked = False  # torch.optim has been hooked
phases = None        # profhost._phases, once loaded (load_phases)
_last_auto = None    # where the latest automatic step was called from
_tls = None          # per-thread optimizer.step nesting (a threading.local's .st)
_torch_dir = None    # torch's package directory, with a trailing "/"
_apply = None        # apply(state): the bridge brings its hooks in line
# (state, when, len(sys.modules)) of the bridge's last switch (its apply
# sets it; None: none, or one under way)
applied = None
_REAPPLY_NS = 100000000  # an automatic step re-applies an unchanged state after
_sync = None         # sync(): the same, with the host's state now
_main_ident = _thread.get_ident()  # imported in the main thread
# the host's builtins of the optimizer step (_host.opt_pre, ...), or None
_c_pre = _c_post = _c_failed = None


def bind(apply, sync):
    """The bridge's callbacks: apply(state) after an automatic step (unless
    the state is the one `applied` notes, see _auto_step), sync() once
    torch is hooked."""
    global _apply, _sync
    _apply, _sync = apply, sync


def note_applied(state):
    """The bridge's switch applied `state` now (None: one is under way):
    noted for the automatic steps here and in the host's builtins."""
    global applied
    applied = None if state is None else (state, _host.now(), len(sys.modules))
    if _host.lean_applied is not None:
        _host.lean_applied(state)


def start(step_mode):
    """Watches the modules whose execution starts steps (through _imports).
    Main thread, at the bridge's start."""
    global mode
    from . import _imports

    mode = step_mode
    set_merge()
    _imports.watch(OPTIMIZER_MODULE, _hook_optimizer)
    if mode == "function":
        func = _host.cfg.get("function", "")
        modname, _, qual = func.partition(":")
        if modname == "__main__":
            _host.warn("prof.steps{python = %r}: a function of the script run as "
                       "__main__ cannot be hooked; move it into a module that the "
                       "script imports" % func)
        else:
            _imports.watch(modname, lambda m: _hook_function(m, modname, qual))


def _last():
    """(ident, frames) of the latest automatic step, or None; the host's
    builtins note them where they make the steps (see _auto_step)."""
    if _host.lean_last is not None:
        return _host.lean_last()
    return _last_auto


def train_thread():
    """The ident of the thread that makes the steps (the latest automatic
    step's, else the main thread's)."""
    last = _last()
    return last[0] if last is not None else _main_ident


# ------------------------------------------------------------------ explicit steps

def manual_steps():
    """profhost.manual_steps(): automatic steps stop now; profhost.step()
    ends each step."""
    global explicit, py_steps
    explicit = py_steps = True
    set_merge()


def explicit_step():
    """profhost.step() is about to end a step on this thread. Returns True
    when this call ends the iteration whose automatic step was just counted
    (the first explicit step, called after the optimizer step in the same
    pass of the same loop): it must not be counted again."""
    global explicit, py_steps
    first = not explicit
    explicit = py_steps = True
    try:
        set_merge()
        if phases is not None:
            phases.before_step()
        return first and _same_iteration()
    except Exception:
        _host.debug_exc("profhost.step()")
        return False


def note_explicit():
    """The host saw an explicit prof_step() (the C ABI): ours stop."""
    global explicit
    if not explicit:
        explicit = True
        set_merge()


def _same_iteration():
    """True when the caller's caller (profhost.step()'s caller) runs in the
    pass of the loop that made the latest automatic step."""
    last = _last()
    if last is None:
        return False
    ident, raw = last
    if ident != _thread.get_ident():
        return False
    # what _call_site would have kept at the step: from the program's
    # frame, 8 frames
    first = 0
    while first < len(raw) and _internal(raw[first][1]):
        first += 1
    sites = raw[first:first + 8]
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


# ------------------------------------------------------------------ phases

def load_phases():
    """Imports profhost._phases (once) and binds it to the host."""
    global phases
    if phases is None:
        from . import _phases

        lean = None
        if _host.lean_ctl is not None:
            lean = (_host.lean_begin, _host.lean_end, _host.lean_flush, _host.lean)
        _phases.bind(_host.phase, _host.debug_exc, _host.phases_out, lean)
        phases = _phases
        set_merge()


def set_merge():
    """Consecutive module calls are one forward phase only when the bridge
    sees every step boundary (see _phases.set_merge)."""
    if phases is not None:
        phases.set_merge(py_steps or (mode != "off" and not explicit))
        # kept phases go with automatic steps: through the host's builtins,
        # or the table's entry (a test's fake table may have none)
        phases.set_batch(mode != "off" and not explicit and
                         (_host.lean_ctl is not None or
                          (_host.bind() and _host.c_phases is not None)))
    # optimizer steps are automatic steps the host's builtins make
    _host.lean(_host.LEAN_AUTO if mode == "optimizer" and not explicit and not _host.down
               else 0, _host.LEAN_AUTO)


# ------------------------------------------------------------------ automatic steps

_SITE_FRAMES = 24  # profhost's and torch's frames above the program's, and 8


def _internal(code):
    """True for a code object of profhost's or torch's."""
    name = code.co_filename
    return name.startswith(_host.MY_DIR) or bool(_torch_dir and name.startswith(_torch_dir))


def _call_site(frame):
    """The first frame from `frame` outwards that is neither profhost's nor
    torch's: the program's code that made the call."""
    while frame is not None and _internal(frame.f_code):
        frame = frame.f_back
    return frame


def _auto_step():
    """One automatic step (optimizer step or the named function). Raises
    nothing. The bridge's switch runs only when the state changed, a
    module was imported since (the wrappers of a module imported later),
    or 0.1 s went by (what the switch polls: the operator observer's
    build, CUDA's start): a step of a few ms does not pay it every time
    (#29). Each step's cost here is counted in microseconds of a cold
    step, so this is written out flat."""
    global explicit, _last_auto
    try:
        fn = _host.step_fn
        if explicit or _host.down or (fn is None and not _host.bind()):
            return
        if _host.lean_last is None:
            # Where this step was called from, for explicit_step(), which
            # picks the program's frame and the 8 around it out of these:
            # the frames from sys._getframe(2) outwards (this function and
            # its caller, the optimizer hook or the step function's
            # wrapper, are profhost's: skipped, and no frame object is made
            # for them), with the instruction each is at; only their reads
            # on every step (the filtering took ~5 us of a cold step, #29).
            # The host's builtins note them in C (their last()).
            sites = []
            f = sys._getframe(2)
            while f is not None and len(sites) < _SITE_FRAMES:
                sites.append((id(f), f.f_code, f.f_lasti))
                f = f.f_back
            _last_auto = (_thread.get_ident(), sites)
        kept = phases.before_step(True) if phases is not None else None
        if fn is not None:
            state = fn(kept)
        else:
            state = _host.phases_out(kept, True) if kept else _host.c_step()
        if state & _host.EXPLICIT:
            explicit = True
            set_merge()
        last = applied
        if (last is None or last[0] != state or last[2] != len(sys.modules) or
                _host.now() - last[1] >= _REAPPLY_NS):
            _apply(state)
    except Exception:
        _host.debug_exc("an automatic step")


def _hook_optimizer(mod):
    """torch.optim.optimizer has executed: hook optimizer steps."""
    global torch_hooked, _tls, _torch_dir, _c_pre, _c_post, _c_failed
    import threading

    class _Step(object):
        __slots__ = ("depth", "frame")

        def __init__(self):
            self.depth = 0       # optimizer.step nesting
            self.frame = None    # the frame running the outermost step

    class _Tls(threading.local):
        # one threading.local read a hook, then slots (see _phases._Local)
        def __init__(self):
            self.st = _Step()

    _tls = _Tls()
    torch_mod = sys.modules.get("torch")
    if getattr(torch_mod, "__file__", None):
        _torch_dir = torch_mod.__file__.rsplit("/", 1)[0] + "/"
    load_phases()
    _c_pre, _c_post, _c_failed = _host.opt_pre, _host.opt_post, _host.opt_failed
    pre = getattr(mod, "register_optimizer_step_pre_hook", None)
    post = getattr(mod, "register_optimizer_step_post_hook", None)
    if pre is not None and post is not None:      # torch >= 2.0
        pre(_optimizer_pre)
        post(_optimizer_post)
    else:                                         # torch 1.13
        _hook_optimizer_classes(mod.Optimizer)
    torch_hooked = True
    _host.debug("optimizer steps hooked (%s)" % ("global hooks" if pre else "class wrappers"))
    _sync()


def _c_after(r):
    """Does what the host's builtin of the optimizer step asked for, `r`
    (_host.PY_* bits, the state in bits 8 and up): the phases' own hooks
    around a window, Python's automatic step there, the bridge's switch
    after the builtin's step."""
    global explicit
    try:
        if r & _host.PY_END_FAILED:
            phases.optimizer_end(False)
        if r & _host.PY_BEGIN:
            phases.optimizer_begin()
        if r & _host.PY_END_OK:
            phases.optimizer_end(True)
        if r & _host.PY_AUTO and mode == "optimizer":
            _auto_step()
        if r & _host.PY_APPLY:
            state = r >> 8
            if state & _host.EXPLICIT:
                explicit = True
                set_merge()
            _apply(state)
    except Exception:
        _host.debug_exc("the optimizer hook")


def _optimizer_pre(opt, args, kwargs, hooked=True):
    """Before optimizer.step(): torch's global pre hook, or (hooked False)
    the wrapper of torch 1.13, which sees a step raise itself."""
    pre = _c_pre
    if pre is not None:   # the host's builtin: depth, phase in C
        r = pre(sys._getframe(1) if hooked else None)
        if r is not None:
            _c_after(r)
        return None
    try:
        tl = _tls.st
        if tl.depth and tl.frame is not None and not phases.on_stack(tl.frame):
            # The outermost step raised and torch's global hooks ran no
            # post hook for it (torch >= 2.0): it is over, and was no step.
            tl.depth = 0
            phases.optimizer_end(False)
        tl.depth += 1
        if tl.depth == 1:
            # (a frame object made on every step only where it is needed)
            tl.frame = sys._getframe(1) if hooked else None
            phases.optimizer_begin()
    except Exception:
        _host.debug_exc("the optimizer pre hook")
    return None


def _optimizer_post(opt, args, kwargs):
    """After optimizer.step() returned: the end of a step (the outermost)."""
    post = _c_post
    if post is not None:  # the host's builtin: the step too
        r = post()
        if r is not None:
            _c_after(r)
        return None
    try:
        tl = _tls.st
        if tl.depth > 0:
            tl.depth -= 1
        if tl.depth:
            return None
        tl.frame = None
        phases.optimizer_end(True)
        if mode == "optimizer":
            _auto_step()
    except Exception:
        _host.debug_exc("the optimizer hook")
    return None


def _optimizer_failed():
    """optimizer.step raised: forget its phase, count no step."""
    failed = _c_failed
    if failed is not None:
        r = failed()
        if r is not None:
            _c_after(r)
        return
    try:
        tl = _tls.st
        if tl.depth > 0:
            tl.depth -= 1
        if not tl.depth:
            tl.frame = None
            phases.optimizer_end(False)
    except Exception:
        _host.debug_exc("the optimizer hook")


def _hook_optimizer_classes(Optimizer):
    """torch 1.13: Optimizer.__init__ calls _hook_for_profile, which wraps
    the class's step once (marking it `hooked`); wrap it there too."""
    original = Optimizer.__dict__.get("_hook_for_profile")
    if original is None:
        _host.debug("this torch has neither optimizer step hooks nor "
                    "_hook_for_profile: optimizer steps are not counted")
        return

    import functools

    @functools.wraps(original)
    def _hook_for_profile(self):
        original(self)
        try:
            _wrap_step(type(self))
        except Exception:
            _host.debug_exc("wrapping %s.step" % type(self).__name__)

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
        pre = _c_pre
        if pre is not None:   # _optimizer_pre's and _post's paths, inlined
            r = pre(None)
            if r is not None:
                _c_after(r)
            try:
                out = step(self, *args, **kwargs)
            except BaseException:
                _optimizer_failed()
                raise
            r = _c_post()
            if r is not None:
                _c_after(r)
            return out
        _optimizer_pre(self, args, kwargs, False)
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
        _host.warn("prof.steps{python = \"%s:%s\"}: module %s has no %s; no Python "
                   "function steps" % (modname, qual, modname, qual))
        return
    kind = type(raw) if isinstance(raw, (staticmethod, classmethod)) else None
    fn = raw.__func__ if kind else raw
    if not callable(fn):
        _host.warn("prof.steps{python = \"%s:%s\"}: %s is not a function; no Python "
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
    if mode == "function":
        _host.bind()
    _host.debug("steps: the return of %s:%s" % (modname, qual))

"""profhost._imports: the bridge's import hooks. Not an API.

torch is usually imported after the bridge starts: a finder in
``sys.meta_path`` notices the import of a watched module (torch's optimizer
module, the module of a ``prof.steps{python=...}`` function) and runs its
hook right after that module has executed, before ``from module import
name`` binds anything. It removes itself once it has nothing left to watch.
A watched module already imported when watching starts is hooked at once
(or, while it is still executing, at the next import).

Runs on whichever thread imports; hooks fail open (an exception is shown
with PROF_LOG=debug, never raised into the import).
"""

import sys

from . import _host

_watch = {}          # module name -> hook(module), not yet run
_deferred = []       # watched modules seen while still executing
_finder = None


def watch(name, hook):
    """Runs hook(module) once module `name` has executed (see start)."""
    _watch[name] = hook


def start():
    """Hooks the watched modules already imported; installs the finder for
    the others. Main thread, at the bridge's start."""
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


def _initializing(mod):
    spec = getattr(mod, "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


def _fire(name, mod):
    hook = _watch.pop(name, None)
    if hook is not None:
        try:
            hook(mod)
        except Exception:
            _host.debug_exc("hooking %s" % name)
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

"""The Python bridge's hooks and wrappers, against a fake host table.

Each test runs a script in a fresh /usr/bin/python3 with torch: it imports
profhost._bridge and starts it with a C table made of ctypes callbacks (the
layout of struct pybridge_api), so the test sets the window state itself and
sees every phase the bridge reports. What is held, for every hook the bridge
installs (the DataLoader iterator's __next__, torch.autograd.backward,
torch's global module hooks, the optimizer step wrapper of torch 1.13):

- identity: the wrapped object keeps its name, qualified name, module, doc,
  attributes and signature (inspect.signature), nn.Module.__call__ is never
  replaced, and turning phases off restores the exact original objects;
- re-entrancy: nested and recursive calls, threads, exceptions passing
  through unchanged, and the phase timing recovering after them;
- another library wrapping the same attribute after the bridge (and
  unwrapping again) keeps working, with each phase counted once;
- torch.profiler with_stack=True beside the bridge (issue #12.1).

Skipped (with the reason) when /usr/bin/python3 has no torch.
"""
import os
import subprocess
import textwrap
import unittest

from test_python import HAS_TORCH

SOURCE = os.environ.get("PROFHOST_SOURCE") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
MODULE_DIR = os.path.join(SOURCE, "src", "python")
PYTHON = "/usr/bin/python3"



# Starts the bridge with a fake host table; `events` gets (phase, start,
# end) of each reported phase, `steps` the time of each automatic step.
PRELUDE = r'''
import ctypes, functools, inspect, sys, threading, time
import torch
from torch import nn
import torch.utils.data.dataloader as dl
from torch.utils.data import DataLoader, Dataset, TensorDataset

ORIG_NEXT = dl._BaseDataLoaderIter.__dict__["__next__"]
ORIG_BACKWARD = torch.autograd.backward
ORIG_CALL = nn.Module.__dict__["__call__"]
ORIG_CODE = ORIG_CALL.__code__
ORIG_SGD_STEP = torch.optim.SGD.__dict__["step"]

from profhost import _bridge, _nvtx, _phases, _pystacks

NAMES = ("data", "forward", "backward", "optimizer")
IDLE, WARMUP, RECORDING, ARMED = 0, 1, 2, 3
MODULES = 32   # flag: the window records nn.Module calls
RECORDER = 64  # flag: the flight recorder keeps steps between windows
state = [RECORDING]
steps = []
events = []
modcalls = []  # (name, start, end) of each nn.Module call written
modargs = []   # (name, path, Python id, parent's id, module id) of each

Api = _bridge._api_type()
F = dict(Api._fields_)


def _step():
    steps.append(time.monotonic_ns())
    return state[0]


named = []   # (phase, name) of each phase given a name of its own


def _named(p, a, b, name):
    named.append((NAMES[p], name.decode()))
    events.append((NAMES[p], a, b))


KEEP = [F["state"](lambda: state[0]), F["step"](_step),
        F["phase"](lambda p, a, b: events.append((NAMES[p], a, b))),
        F["note"](lambda bits: None), F["down"](lambda: None),
        F["pystack"](lambda *a: None), F["phase_named"](_named),
        F["module"](lambda a, b, name: modcalls.append((name.decode(), a, b))),
        F["module_call"](lambda a, b, name, path, i, parent, mid: (
            modcalls.append((name.decode(), a, b)),
            modargs.append((name.decode(), path.decode(), i, parent, mid))))]
api = Api()
api.version, api.size = _bridge._API_VERSION, ctypes.sizeof(Api)
(api.state, api.step, api.phase, api.note, api.down, api.pystack,
 api.phase_named, api.module, api.module_call) = KEEP
_bridge._start(ctypes.addressof(api), "steps=optimizer\nlog=3\n")


def set_state(s):
    state[0] = s
    _bridge._sync()


def names():
    return [e[0] for e in events]


def boundary():
    """What a step boundary does first: the step's forward is written."""
    _phases.before_step()


def check_no_overlap():
    ev = sorted(events, key=lambda e: e[1])
    for a, b in zip(ev, ev[1:]):
        assert a[2] <= b[1], ("overlap", a, b)


def loader(n=8, bs=2):
    return DataLoader(TensorDataset(torch.randn(n, 4), torch.randint(0, 2, (n,))), batch_size=bs)


model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
loss_fn = nn.CrossEntropyLoss()
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def train_step(x, y):
    loss = loss_fn(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
'''


@unittest.skipUnless(HAS_TORCH, "torch is not installed for /usr/bin/python3")
class Wrappers(unittest.TestCase):
    def run_script(self, body, log=True):
        env = {k: v for k, v in os.environ.items()
               if k not in ("LD_PRELOAD", "PYTHONPATH") and not k.startswith("PROF_")}
        env["PYTHONPATH"] = MODULE_DIR
        code = PRELUDE + textwrap.dedent(body) + "\nprint('ok')\n"
        r = subprocess.run([PYTHON, "-c", code], env=env, capture_output=True, text=True,
                           timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stdout.splitlines()[-1:], ["ok"], r.stdout + r.stderr)
        # log=3: anything the bridge swallowed would be printed.
        if log:
            self.assertNotIn("failed", r.stderr)
        self.stderr = r.stderr
        return r.stdout

    def test_identity_and_signature_while_on_and_after(self):
        self.run_script('''
            assert _phases.is_on()
            nxt = dl._BaseDataLoaderIter.__dict__["__next__"]
            for w, o in ((nxt, ORIG_NEXT), (torch.autograd.backward, ORIG_BACKWARD)):
                assert w is not o and w.__wrapped__ is o
                for a in ("__name__", "__qualname__", "__module__", "__doc__"):
                    assert getattr(w, a) == getattr(o, a), a
                assert inspect.signature(w) == inspect.signature(o)
                assert w.__code__ is not o.__code__
            # nn.Module.__call__ is never replaced (torch's Python tracer
            # keys module calls on its code object)
            assert nn.Module.__dict__["__call__"] is ORIG_CALL
            assert nn.Module.__call__.__code__ is ORIG_CODE
            # torch 1.13's optimizer step wrapper: torch's marks kept
            step = torch.optim.SGD.__dict__["step"]
            assert inspect.signature(step) == inspect.signature(ORIG_SGD_STEP)
            for a in ("__name__", "__qualname__", "__module__", "__doc__"):
                assert getattr(step, a) == getattr(ORIG_SGD_STEP, a), a
            assert step.__wrapped__.hooked and step.hooked   # torch's mark on its wrapper
            hook = torch.optim.Optimizer.__dict__["_hook_for_profile"]
            assert hook.__wrapped__.__qualname__ == hook.__qualname__ == "Optimizer._hook_for_profile"
            assert inspect.signature(hook) == inspect.signature(hook.__wrapped__)
            set_state(IDLE)
            assert not _phases.is_on()
            assert dl._BaseDataLoaderIter.__dict__["__next__"] is ORIG_NEXT
            assert torch.autograd.backward is ORIG_BACKWARD
            assert not nn.modules.module._global_forward_pre_hooks
            assert not nn.modules.module._global_forward_hooks
            set_state(ARMED)
            assert dl._BaseDataLoaderIter.__dict__["__next__"] is nxt  # the same wrapper again
            set_state(IDLE)
            assert dl._BaseDataLoaderIter.__dict__["__next__"] is ORIG_NEXT
        ''')

    def test_one_phase_each_per_step_and_forward_holds_the_loss(self):
        out = self.run_script('''
            for x, y in loader():
                train_step(x, y)
            print(names())
            check_no_overlap()
            # (the last fetch, which ends the epoch, is data loading too)
            assert names() == ["data", "forward", "backward", "optimizer"] * 4 + ["data"], names()
            assert len(steps) == 4
            # data is written under torch's name for the fetch (TensorBoard's
            # DataLoader category)
            assert set(named) == {("data", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__")}
            assert len(named) == 5
            # the forward phase spans the model and the loss module
            fwd = [e for e in events if e[0] == "forward"]
            assert all(b > a for _, a, b in fwd)
            # gradient accumulation: two forward/backward pairs in a step
            del events[:]
            for i, (x, y) in enumerate(loader()):
                loss_fn(model(x), y).backward()
                if i % 2:
                    opt.step()
            micro = ["data", "forward", "backward"]
            assert names() == (micro + micro + ["optimizer"]) * 2 + ["data"], names()
            check_no_overlap()
        ''')
        self.assertIn("['data', 'forward', 'backward', 'optimizer'", out)

    def test_recorder_alone_infers_forward_without_module_hooks(self):
        # Between windows (the flight recorder's state bit, no window
        # armed) torch's module hooks stay off: forward is the time from
        # the end of the data fetch (or the step boundary) to backward.
        self.run_script('''
            set_state(RECORDER)
            assert _phases.is_on()
            assert not nn.modules.module._global_forward_pre_hooks
            assert not nn.modules.module._global_forward_hooks
            for x, y in loader():
                train_step(x, y)
            check_no_overlap()
            assert names() == ["data", "forward", "backward", "optimizer"] * 4 + ["data"], names()
            for i, e in enumerate(events):
                if e[0] == "forward":   # from data's end to backward's start
                    assert events[i - 1][0] == "data" and e[1] == events[i - 1][2], (events[i - 1], e)
                    assert events[i + 1][0] == "backward" and e[2] == events[i + 1][1], (e, events[i + 1])
            # without a DataLoader: from the step boundary (the optimizer
            # step's end) to backward
            x, y = torch.randn(2, 4), torch.randint(0, 2, (2,))
            train_step(x, y)
            del events[:]
            for _ in range(2):
                train_step(x, y)
            assert names() == ["forward", "backward", "optimizer"] * 2, names()
            assert events[3][1] >= events[2][2] and events[3][2] == events[4][1], events
            # gradient accumulation without a DataLoader: the second
            # micro-batch's forward starts where the first backward ended
            del events[:]
            for _ in range(2):
                loss_fn(model(x), y).backward()
            opt.step()
            assert names() == ["forward", "backward"] * 2 + ["optimizer"], names()
            assert events[2][1] == events[1][2], events
            # nothing marked (a fresh mode, no step or fetch yet): none
            set_state(IDLE)
            set_state(RECORDER)
            del events[:]
            train_step(x, y)
            assert names() == ["backward", "optimizer"], names()
            # a window arming puts the hooks on: forward is timed exactly
            set_state(ARMED | RECORDER)
            assert nn.modules.module._global_forward_pre_hooks
            del events[:]
            for x, y in loader():
                train_step(x, y)
            assert names() == ["data", "forward", "backward", "optimizer"] * 4 + ["data"], names()
            set_state(RECORDER)
            assert not nn.modules.module._global_forward_pre_hooks
            # the program's own forward wins: none is inferred
            _phases.own(1)
            del events[:]
            for x, y in loader():
                train_step(x, y)
            assert "forward" not in names(), names()
        ''')

    def test_reentrant_and_recursive_calls(self):
        self.run_script('''
            class Rec(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.lin = nn.Linear(4, 4)

                def forward(self, x, depth=3):
                    return self.lin(x) if depth == 0 else self(x, depth - 1)

            class Nested(Dataset):
                """Each item fetched through an inner DataLoader."""
                def __len__(self):
                    return 4

                def __getitem__(self, i):
                    return next(iter(loader(2, 1)))[0][0]

            rec = Rec()
            for x in DataLoader(Nested(), batch_size=2):
                rec(x).sum().backward()
            # one data phase per outer batch (the inner fetches are inside
            # it), one forward per top-level call however deep it recurses
            assert names() == ["data", "forward", "backward"] * 2 + ["data"], names()
            check_no_overlap()

            # backward inside a module's forward belongs to that forward
            class Inner(nn.Module):
                def forward(self, x):
                    model(x).sum().backward()
                    return x
            del events[:]
            Inner()(torch.randn(2, 4))
            boundary()
            assert names() == ["forward"], names()

            # threads: each its own phases
            del events[:]
            def work():
                for x, y in loader(4, 2):
                    loss_fn(model(x), y).backward()
            ts = [threading.Thread(target=work) for _ in range(3)]
            for t in ts: t.start()
            for t in ts: t.join()
            assert sorted(set(names())) == ["backward", "data", "forward"]
            assert names().count("data") == 9 and names().count("backward") == 6, names()
        ''')

    def test_exceptions_pass_through_and_timing_recovers(self):
        self.run_script('''
            class Bad(Dataset):
                def __len__(self):
                    return 4

                def __getitem__(self, i):
                    raise KeyError("item %d" % i)

            try:
                next(iter(DataLoader(Bad())))
                raise AssertionError("no exception")
            except KeyError as e:
                assert "item 0" in str(e)

            class Boom(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.lin = nn.Linear(4, 4)

                def forward(self, x):
                    self.lin(x)
                    raise ValueError("boom")

            try:
                Boom()(torch.randn(2, 4))
                raise AssertionError("no exception")
            except ValueError as e:
                assert str(e) == "boom"
            try:
                torch.autograd.backward(torch.zeros(2))   # no grad: raises
                raise AssertionError("no exception")
            except RuntimeError:
                pass
            class BadOpt(torch.optim.SGD):
                def step(self, closure=None):
                    raise OSError("step")
            bad = BadOpt(model.parameters(), lr=0.1)
            try:
                bad.step()
                raise AssertionError("no exception")
            except OSError:
                pass
            assert steps == []    # a step that raised is no step
            del events[:]
            for x, y in loader(4, 2):
                train_step(x, y)
            assert names() == ["data", "forward", "backward", "optimizer"] * 2 + ["data"], names()
            assert len(steps) == 2
            check_no_overlap()

            # profhost's own failures never reach the program
            def broken(*a):
                raise MemoryError("profhost's own")
            _phases._emit = broken
            for x, y in loader(4, 2):
                train_step(x, y)
            try:
                Boom()(torch.randn(2, 4))
            except ValueError as e:
                assert str(e) == "boom"
            assert len(steps) == 4
        ''', log=False)

    def test_recorder_alone_exceptions_nesting_and_threads(self):
        # The wrappers' path between windows (lean: its helpers inlined,
        # #29) keeps the window path's rules: exceptions pass through
        # unchanged and timing recovers, a fetch inside a fetch is one data
        # phase, each thread times its own, profhost's own failure never
        # reaches the program.
        self.run_script('''
            set_state(RECORDER)
            assert _phases.is_on() and _phases._lean
            class Bad(Dataset):
                def __len__(self):
                    return 4

                def __getitem__(self, i):
                    raise KeyError("item %d" % i)

            try:
                next(iter(DataLoader(Bad())))
                raise AssertionError("no exception")
            except KeyError as e:
                assert "item 0" in str(e)
            try:
                torch.autograd.backward(torch.zeros(2))   # no grad: raises
                raise AssertionError("no exception")
            except RuntimeError:
                pass
            class BadOpt(torch.optim.SGD):
                def step(self, closure=None):
                    raise OSError("step")
            bad = BadOpt(model.parameters(), lr=0.1)
            try:
                bad.step()
                raise AssertionError("no exception")
            except OSError:
                pass
            assert steps == []    # a step that raised is no step
            del events[:]
            for x, y in loader(4, 2):
                train_step(x, y)
            assert names() == ["data", "forward", "backward", "optimizer"] * 2 + ["data"], names()
            check_no_overlap()

            class Nested(Dataset):
                """Each item fetched through an inner DataLoader."""
                def __len__(self):
                    return 4

                def __getitem__(self, i):
                    return next(iter(loader(2, 1)))[0][0]

            del events[:]
            for x in DataLoader(Nested(), batch_size=2):
                model(x).sum().backward()
            # one data phase per outer batch; forward inferred from its end
            assert names() == ["data", "forward", "backward"] * 2 + ["data"], names()
            check_no_overlap()

            del events[:]
            def work():
                for x, y in loader(4, 2):
                    loss_fn(model(x), y).backward()
            ts = [threading.Thread(target=work) for _ in range(3)]
            for t in ts: t.start()
            for t in ts: t.join()
            assert names().count("data") == 9 and names().count("backward") == 6, names()
            assert names().count("forward") == 6, names()

            def broken(*a):
                raise MemoryError("profhost's own")
            _phases._emit = broken
            n = len(steps)
            for x, y in loader(4, 2):
                train_step(x, y)
            try:
                torch.autograd.backward(torch.zeros(2))
            except RuntimeError:
                pass
            assert len(steps) == n + 2
        ''', log=False)

    def test_recorder_alone_hands_a_steps_phases_over_with_it(self):
        # Between windows, on the thread whose optimizer steps are the
        # steps, a step's phases are kept and reach the host in the one
        # call that makes the step (#29): the same phases, in order, the
        # data fetch under the DataLoader's name. What is kept when the
        # mode changes or steps stop being automatic is handed over then.
        self.run_script('''
            import struct
            from profhost import _host, _steps
            calls = []   # (records, step) of each call of the table's phases
            kept = set()  # (phase, name) of each record

            def _phases_cb(addr, n, step):
                raw, off, recs = ctypes.string_at(addr, n), 0, []
                while off + 24 <= n:
                    p, ln, a, b = struct.unpack_from("<iIqq", raw, off)
                    off += 24
                    recs.append((NAMES[p], raw[off:off + ln].decode(), a, b))
                    events.append((NAMES[p], a, b))
                    off += ln
                assert off == n, (off, n)
                calls.append(([r[0] for r in recs], step))
                kept.update((r[0], r[1]) for r in recs)
                return _step() if step else state[0]

            cb = F["phases"](_phases_cb)
            _host.bind()
            _host.c_phases = cb
            _steps.set_merge()
            set_state(RECORDER)
            assert _phases._batch
            del events[:]
            for x, y in loader(8, 2):
                train_step(x, y)
            # the first step was made by the table's step (no step of this
            # thread yet): its phases went one by one; then one call a step
            assert [c for c in calls] == [(["data", "forward", "backward", "optimizer"], 1)] * 3, calls
            assert len(steps) == 4, steps
            assert names() == ["data", "forward", "backward", "optimizer"] * 4, names()
            check_no_overlap()
            assert kept == {("data", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"),
                            ("forward", ""), ("backward", ""), ("optimizer", "")}, kept
            assert _phases._tls.st.pending, "the last fetch (StopIteration) waits for its step"
            # a window arming: what was kept is handed over, without a step
            n = len(steps)
            set_state(ARMED | RECORDER)
            x, y = torch.randn(2, 4), torch.randint(0, 2, (2,))
            train_step(x, y)
            assert calls[-1] == (["data"], 0), calls[-1]
            assert not _phases._tls.st.pending
            assert names()[-4:] == ["data", "forward", "backward", "optimizer"], names()
            assert len(steps) == n + 1
            # back between windows; then explicit steps: nothing waits
            set_state(RECORDER)
            train_step(x, y)
            train_step(x, y)
            _steps.manual_steps()
            assert not _phases._batch
            del calls[:]
            del events[:]
            loss_fn(model(x), y).backward()
            assert calls == [], calls
            assert names()[-2:] == ["forward", "backward"], names()
        ''')

    def test_recorder_alone_steps_through_the_hosts_builtin(self):
        # With the host's step builtin (handed to _start; here a Python
        # stand-in), an automatic step is one call of it with the kept
        # phases as tuples, no ctypes crossing: the same phases, in order,
        # the data fetch under the DataLoader's name, each step once.
        self.run_script('''
            from profhost import _host, _steps
            calls = []   # the kept list of each call

            def builtin(kept):
                calls.append(list(kept) if kept is not None else None)
                for p, a, b, name in kept or ():
                    events.append((NAMES[p], a, b))
                return _step()

            through_ctypes = []   # steps made through the table (none)

            def table_phases(addr, n, step):
                if step:
                    through_ctypes.append(n)
                return state[0]

            _host.bind()
            _host.c_step = lambda: through_ctypes.append(0) or state[0]
            # (the table's phases: hand-overs without a step only)
            _host.c_phases = F["phases"](table_phases)
            _host.step_fn = builtin
            _steps.set_merge()
            set_state(RECORDER)
            del events[:]
            n = len(steps)
            for x, y in loader(8, 2):
                train_step(x, y)
            assert len(steps) == n + 4, steps
            assert len(calls) == 4, calls
            # the first step's phases went one by one (no step of this
            # thread yet to wait for); then each step brings its own
            assert calls[0] is None or calls[0] == [], calls[0]
            for kept in calls[1:]:
                assert [NAMES[k[0]] for k in kept] == ["data", "forward", "backward",
                                                       "optimizer"], kept
                assert all(type(k) is tuple and len(k) == 4 for k in kept), kept
                assert all(isinstance(k[1], int) and k[1] <= k[2] for k in kept), kept
                assert kept[0][3] == "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", kept
                assert [k[3] for k in kept[1:]] == [None, None, None], kept
            assert names() == ["data", "forward", "backward", "optimizer"] * 4, names()
            assert through_ctypes == [], through_ctypes
            check_no_overlap()
        ''')

    def test_wrapped_again_by_another_library(self):
        self.run_script('''
            ours = dl._BaseDataLoaderIter.__dict__["__next__"]
            fetched = []

            def their_wrap(fn):
                @functools.wraps(fn)
                def theirs(self):
                    fetched.append(1)
                    return fn(self)
                return theirs

            dl._BaseDataLoaderIter.__next__ = theirs = their_wrap(ours)
            set_state(IDLE)                 # ours stays inside theirs, inert
            assert dl._BaseDataLoaderIter.__dict__["__next__"] is theirs
            del events[:]
            for x, y in loader(4, 2):
                pass
            assert events == [] and len(fetched) == 3
            set_state(RECORDING)            # no second wrapper of ours
            assert dl._BaseDataLoaderIter.__dict__["__next__"] is theirs
            for x, y in loader(4, 2):
                pass
            assert names() == ["data"] * 3, names()
            # they unwrap (put back what they found: ours); off restores
            # the original exactly
            dl._BaseDataLoaderIter.__next__ = ours
            set_state(IDLE)
            assert dl._BaseDataLoaderIter.__dict__["__next__"] is ORIG_NEXT
            # someone replaces it outright while we are off: ours wraps
            # theirs when on, and theirs comes back when off
            def replaced(self):
                return ORIG_NEXT(self)
            dl._BaseDataLoaderIter.__next__ = replaced
            set_state(RECORDING)
            cur = dl._BaseDataLoaderIter.__dict__["__next__"]
            assert cur is not replaced and cur.__wrapped__ is replaced
            del events[:]
            for x, y in loader(4, 2):
                pass
            assert names() == ["data"] * 3, names()
            set_state(IDLE)
            assert dl._BaseDataLoaderIter.__dict__["__next__"] is replaced
            # a module hook of someone else's beside ours
            seen = []
            h = nn.modules.module.register_module_forward_hook(lambda m, i, o: seen.append(m))
            set_state(RECORDING)
            del events[:]
            model(torch.randn(2, 4))
            boundary()
            h.remove()
            set_state(IDLE)
            assert len(seen) == 4 and names() == ["forward"]
            assert not nn.modules.module._global_forward_hooks
        ''')

    def test_torch_profiler_with_stack_beside_the_hooks(self):
        # The SIGSEGV of issue #12.1: torch's tracer started while the
        # bridge's hooks are in place, then both keep going.
        self.run_script('''
            with torch.profiler.profile(with_stack=True, record_shapes=True) as prof:
                for x, y in loader():
                    train_step(x, y)
            assert names().count("forward") == 4
            names_torch = set(e.name for e in prof.events())
            assert "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__" in names_torch
            set_state(IDLE)
            with torch.profiler.profile(with_stack=True) as prof:
                for x, y in loader():
                    train_step(x, y)
            set_state(RECORDING)
            with torch.profiler.profile(with_stack=True) as prof:
                for x, y in loader():
                    train_step(x, y)
        ''')

    def test_window_start_costs_nothing_once_armed(self):
        # All the work of a window's start happens when the bridge is armed
        # (the step before the window or its warm-up): the first recorded
        # step only flips a switch (issue #12.2).
        self.run_script('''
            _bridge._set_stack_rate("100")
            set_state(IDLE)
            mm = nn.modules.module
            calls = []
            for name in ("register_module_forward_pre_hook", "register_module_forward_hook"):
                def counting(*a, _f=getattr(mm, name), **k):
                    h = _f(*a, **k)
                    calls.append(h)   # registered (not a refused keyword)
                    return h
                setattr(mm, name, counting)
            gen = _pystacks.gen
            set_state(ARMED)
            assert len(calls) == 2 and _pystacks.gen == gen + 1
            assert not _pystacks.rec
            nxt = dl._BaseDataLoaderIter.__dict__["__next__"]
            assert nxt is not ORIG_NEXT
            set_state(RECORDING)
            assert len(calls) == 2 and _pystacks.gen == gen + 1
            assert _pystacks.rec
            assert dl._BaseDataLoaderIter.__dict__["__next__"] is nxt
            set_state(IDLE)
            assert not _phases.is_on() and not _pystacks.on
        ''')

    def test_module_calls_named_by_path_while_recording(self):
        # prof.capture{ modules = true } (#16.4): the phases' module hooks
        # hand each nn.Module call to the host with its path in the model,
        # named and numbered as torch's with_modules does (#28).
        self.run_script('''
            import re
            from profhost import _modules

            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.a = nn.Linear(4, 4)
                    self.blocks = nn.ModuleList([nn.Linear(4, 4), nn.ReLU()])
                    self.loose = [nn.Tanh()]   # not registered: named by its class

                def forward(self, x):
                    x = self.a(x)
                    for b in self.blocks:
                        x = b(x)
                    x = self.loose[0](x)
                    if hasattr(self, "late"):
                        x = self.late(x)
                    return x

            class Boom(nn.Module):
                def forward(self, x):
                    raise ValueError("boom")

            def calls():
                """Each call written since the last: its path, else (a root,
                a module not registered in it) its class."""
                out = [p or re.match(r"nn\.Module: (\w+)_\d+$", n).group(1)
                       for n, p, _, _, _ in modargs]
                assert [n for n, _, _ in modcalls] == [a[0] for a in modargs]
                del modcalls[:]
                del modargs[:]
                return out

            net, x = Net(), torch.randn(2, 4)
            set_state(IDLE)
            # armed, warming up, recording without modules: nothing written
            for s in (ARMED, WARMUP, RECORDING):
                set_state(s)
                net(x)
                assert calls() == [], s
            set_state(RECORDING | MODULES)
            net(x)
            whole = modcalls[-1]
            assert all(whole[1] <= a <= b <= whole[2] for _, a, b in modcalls), modcalls
            # torch's names: the class and the module's number in its class
            # (first seen first), the path apart; each call its own Python
            # id, its parent's that of the call it was made in (0: a root)
            first = list(modargs)
            assert [(n, p, m) for n, p, _, _, m in first] == [
                ("nn.Module: Linear_0", "a", 0), ("nn.Module: Linear_1", "blocks.0", 1),
                ("nn.Module: ReLU_0", "blocks.1", 0), ("nn.Module: Tanh_0", "", 0),
                ("nn.Module: Net_0", "", 0)], first
            root = first[-1][2]
            assert [a[3] for a in first] == [root, root, root, root, 0], first
            assert sorted(a[2] for a in first) == list(range(root, root + 5)), first
            assert calls() == ["a", "blocks.0", "blocks.1", "Tanh", "Net"]
            net(x)                                    # the same names, new ids
            assert [a[:2] + a[4:] for a in modargs] == [a[:2] + a[4:] for a in first]
            assert min(a[2] for a in modargs) > root + 4
            calls()
            walks = _modules._walks[net]
            net(x)                                    # names are kept
            assert calls() == ["a", "blocks.0", "blocks.1", "Tanh", "Net"]
            assert _modules._walks[net] == walks
            net.late = nn.Linear(4, 4)                # added later: found by its path
            net(x)
            assert calls() == ["a", "blocks.0", "blocks.1", "Tanh", "late", "Net"]
            # a module that raises (torch < 2.1 runs no hook then): once a
            # step boundary has settled it, calls nest and are named right
            seq = nn.Sequential(nn.Linear(4, 4), Boom())
            try:
                seq(x)
            except ValueError:
                pass
            boundary()
            calls()
            net(x)
            assert calls() == ["a", "blocks.0", "blocks.1", "Tanh", "late", "Net"]
            # other threads: their own calls, their own nesting
            t = threading.Thread(target=net, args=(x,))
            t.start()
            t.join()
            assert calls() == ["a", "blocks.0", "blocks.1", "Tanh", "late", "Net"]
            # recording without modules, then idle: the observer and torch's
            # global hooks are gone
            set_state(RECORDING)
            assert _phases.observer() is None
            net(x)
            assert calls() == []
            set_state(RECORDING | MODULES)
            assert _phases.observer() is not None
            set_state(IDLE)
            assert _phases.observer() is None
            assert not nn.modules.module._global_forward_pre_hooks
            assert not nn.modules.module._global_forward_hooks
            net(x)
            assert calls() == []
        ''')

    def test_emit_nvtx_steps_aside_for_torch_profiler(self):
        # With a CUDA torch the bridge enters emit_nvtx while armed; torch
        # allows one profiler per thread, so the script's own
        # torch.profiler must still start (this torch is CPU-only: a
        # stand-in emit_nvtx that enables nothing plays the bridge's part).
        out = self.run_script('''
            entered = []

            class FakeNvtx:
                def __init__(self, record_shapes=False):
                    pass

                def __enter__(self):
                    entered.append("in")

                def __exit__(self, *a):
                    entered.append("out")

            torch.autograd.profiler.emit_nvtx = FakeNvtx
            _nvtx.ok = True
            set_state(IDLE)
            set_state(ARMED)
            assert entered == ["in"], entered
            prof = torch.profiler.profile()
            prof.start()                       # profhost leaves emit_nvtx first
            assert entered == ["in", "out"], entered
            for x, y in loader(4, 2):
                train_step(x, y)
            set_state(RECORDING)               # torch's profiler runs: stays off
            assert entered == ["in", "out"], entered
            prof.stop()
            assert any(e.name == "aten::addmm" for e in prof.events())
            set_state(IDLE)
            set_state(ARMED)                   # torch's is off again: back on
            assert entered == ["in", "out", "in"], entered
            set_state(IDLE)
            assert entered == ["in", "out", "in", "out"], entered
            import torch.autograd.profiler as tap
            assert tap._enable_profiler is torch._C._autograd._enable_profiler
        ''')
        self.assertEqual(self.stderr.count(
            "profhost: torch.profiler is running on the training thread: profhost leaves "
            "torch's operator ranges (emit_nvtx) off while it runs\n"), 1, self.stderr)

    def test_program_phases_win(self):
        self.run_script('''
            import profhost
            x, y = torch.randn(2, 4), torch.randint(0, 2, (2,))
            with profhost.range("forward"):
                loss = loss_fn(model(x), y)
            loss.backward()
            # the program marked forward itself: the bridge times it no more
            assert "forward" not in names(), names()
            with profhost.phase("backward"):
                loss_fn(model(x), y).backward()
            assert names() == ["backward", "backward"], names()  # the automatic one, then the program's
            loss_fn(model(x), y).backward()
            assert names() == ["backward", "backward"], names()
        ''')


if __name__ == "__main__":
    unittest.main(verbosity=2)

"""What each possible source of the step phases costs torch (not a test; #29).

The flight recorder keeps the step phases (data, forward, backward,
optimizer) between windows, on every step, so their source must cost
next to nothing. This bench measures, in one process with no profiler,
what torch itself costs once each candidate is in place, per unit of the
work it would slow down:

  none          nothing registered
  user          a global RecordFunction callback for USER_SCOPE only (the
                record_function labels: the DataLoader's
                `enumerate(DataLoader)#...__next__`, `Optimizer.step#...`)
  backward      one for BACKWARD_FUNCTION only (every autograd node)
  all           one for FUNCTION, BACKWARD_FUNCTION and USER_SCOPE, as
                profhost's operator observer registers inside windows
  module_hooks  torch's global module forward pre- and post-hooks (empty
                Python functions), what the bridge times `forward` with
                inside windows
  wrappers      Python wrappers of the kind the bridge puts on
                `_BaseDataLoaderIter.__next__` and `torch.autograd.backward`
                between windows (a function that reads the clock before and
                after the call and keeps the times), and on `Optimizer.step`

The callbacks (tests/bench/phase_sources_cb.cpp, built here with
torch.utils.cpp_extension into a temporary folder) count their calls and
return, as an observer does that ignores what it sees. Each block of work
runs in every mode, the modes interleaved in cycles; a block is timed as
SUB sub-blocks and counts its fastest (the one no other job interrupted),
in the thread's CPU time and in wall-clock time; a mode's cost is the
median over cycles of its block minus the `none` block of the same cycle,
divided by the units of work:

  op       ns per operator: torch.add of two 1-element tensors, no autograd
  label    ns per record_function label (`with record_function(...)`)
  node     ns per autograd node: backward through a chain of 100 muls
  module   ns per nn.Module call (an nn.Identity)
  step     % of one step of tests/bench/bench_torch.py's loop (16 blocks of
           Linear, LayerNorm, GELU; DataLoader; SGD; about 1,900 operators)

    /usr/bin/python3 tests/bench/bench_phase_sources.py [--cycles 15]

Needs torch, a C++ compiler and ninja (torch.utils.cpp_extension).
"""

import argparse
import ctypes
import functools
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "phase_sources_cb.cpp")
MODES = ["none", "user", "backward", "all", "module_hooks", "wrappers"]
MASKS = {"user": 4, "backward": 2, "all": 7}
SUB = 5


def build(work):
    """Builds phase_sources_cb.cpp in `work`; returns the loaded library."""
    from torch.utils import cpp_extension

    cpp_extension.load(name="phase_sources_cb", sources=[SOURCE], extra_cflags=["-O2"],
                       build_directory=work, is_python_module=False, verbose=False)
    lib = ctypes.CDLL(os.path.join(work, "phase_sources_cb.so"))
    lib.phase_sources_add.argtypes = [ctypes.c_int]
    lib.phase_sources_add.restype = ctypes.c_int
    lib.phase_sources_seen.restype = ctypes.c_uint64
    return lib


class Wrappers(object):
    """Python wrappers like the bridge's between windows: the clock read
    before and after the call, the span kept (a list append stands for the
    host's phase call)."""

    def __init__(self, torch):
        import torch.utils.data.dataloader as dl

        self.spans = []
        self.targets = [(dl._BaseDataLoaderIter, "__next__"), (torch.autograd, "backward"),
                        (torch.optim.SGD, "step")]
        self.saved = [(o, a, o.__dict__[a]) for o, a in self.targets]

    def _wrap(self, fn):
        spans, now = self.spans, time.monotonic_ns

        @functools.wraps(fn)
        def call(*args, **kwargs):
            t0 = now()
            try:
                return fn(*args, **kwargs)
            finally:
                spans.append((t0, now()))
                if len(spans) > 4096:
                    del spans[:]

        return call

    def on(self):
        for o, a, fn in self.saved:
            setattr(o, a, self._wrap(fn))

    def off(self):
        for o, a, fn in self.saved:
            setattr(o, a, fn)


class Modes(object):
    """Switches the candidates on and off."""

    def __init__(self, torch, lib):
        self.torch, self.lib = torch, lib
        self.handles = []
        self.wrappers = Wrappers(torch)

    def on(self, mode):
        if mode in MASKS:
            if self.lib.phase_sources_add(MASKS[mode]) != 0:
                sys.exit("bench_phase_sources.py: the callback was not registered")
        elif mode == "module_hooks":
            mod = sys.modules["torch.nn.modules.module"]
            self.handles = [mod.register_module_forward_pre_hook(lambda m, a: None),
                            mod.register_module_forward_hook(lambda m, a, o: None)]
        elif mode == "wrappers":
            self.wrappers.on()

    def off(self, mode):
        if mode in MASKS:
            self.lib.phase_sources_remove_all()
        while self.handles:
            self.handles.pop().remove()
        if mode == "wrappers":
            self.wrappers.off()


def timed(fn, units):
    """fn() SUB times; the fastest run's (thread CPU ns, wall ns) per unit."""
    cpu = wall = None
    for _ in range(SUB):
        c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
        fn()
        c, t = time.thread_time_ns() - c0, time.perf_counter_ns() - t0
        cpu = c if cpu is None else min(cpu, c)
        wall = t if wall is None else min(wall, t)
    return cpu / units, wall / units


def workloads(torch, n):
    """name -> (function running one sub-block, units of work in it)."""
    from torch import nn
    from torch.autograd.profiler import record_function
    from torch.utils.data import DataLoader, TensorDataset

    a, b = torch.ones(1), torch.ones(1)
    add = torch.add

    def ops():
        for _ in range(n):
            add(a, b)

    def labels():
        for _ in range(n):
            with record_function("bench"):
                pass

    x = torch.ones(1, requires_grad=True)
    chain = 100

    def nodes():
        for _ in range(max(1, n // chain)):
            y = x
            for _ in range(chain):
                y = y * 1.0
            y.sum().backward()

    ident = nn.Identity()

    def modules():
        for _ in range(n):
            ident(a)

    torch.manual_seed(0)
    data = TensorDataset(torch.randn(4096, 64), torch.randint(0, 10, (4096,)))
    loader = DataLoader(data, batch_size=32, shuffle=True, drop_last=True)
    blocks = []
    for _ in range(16):
        blocks += [nn.Linear(64, 64), nn.LayerNorm(64), nn.GELU()]
    model = nn.Sequential(*blocks, nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    it = [iter(loader)]
    steps = 4

    def step():
        for _ in range(steps):
            try:
                xb, yb = next(it[0])
            except StopIteration:
                it[0] = iter(loader)
                xb, yb = next(it[0])
            loss = loss_fn(model(xb), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

    # the nodes of one backward: the chain's muls, the sum and the leaf's
    # AccumulateGrad
    return {"op": (ops, n), "label": (labels, n),
            "node": (nodes, max(1, n // chain) * (chain + 2)),
            "module": (modules, n), "step": (step, steps)}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cycles", type=int, default=15, help="cycles of all modes (15)")
    p.add_argument("--n", type=int, default=400, help="units of work a sub-block (400)")
    args = p.parse_args()
    import torch

    torch.set_num_threads(1)
    work = tempfile.mkdtemp(prefix="bench-phase-sources-")
    try:
        lib = build(work)
    finally:
        pass
    modes = Modes(torch, lib)
    loads = workloads(torch, args.n)
    for fn, _ in loads.values():  # warm-up
        fn()
    got = {w: {m: {"cpu": [], "wall": []} for m in MODES} for w in loads}
    seen = {}
    load0 = open("/proc/loadavg").read().split()[:3]
    t_start = time.perf_counter()
    for cycle in range(args.cycles):
        for w, (fn, units) in loads.items():
            order = MODES if cycle % 2 == 0 else MODES[:1] + MODES[:0:-1]
            for m in order:
                modes.on(m)
                s0 = lib.phase_sources_seen()
                try:
                    cpu, wall = timed(fn, units)
                finally:
                    modes.off(m)
                seen.setdefault((w, m), (lib.phase_sources_seen() - s0) / (SUB * units))
                got[w][m]["cpu"].append(cpu)
                got[w][m]["wall"].append(wall)
    took = time.perf_counter() - t_start
    shutil.rmtree(work, ignore_errors=True)
    print("torch %s, %d cycles of %d modes, the modes' order reversed every other cycle; "
          "a block: the fastest of %d sub-blocks; load average %s at the start, %s at the "
          "end; %.0f s" % (torch.__version__, args.cycles, len(MODES), SUB, " ".join(load0),
                           " ".join(open("/proc/loadavg").read().split()[:3]), took))
    unit = {"op": "ns per operator", "label": "ns per label", "node": "ns per autograd node",
            "module": "ns per module call", "step": "% of a step"}
    for clock in ("cpu", "wall"):
        print("\n%s: each mode's median over cycles of (its block - the none block of the "
              "same cycle)" % ("thread CPU time" if clock == "cpu" else "wall-clock time"))
        print("%-8s %-22s %10s" % ("work", "unit", "none") +
              "".join(" %13s" % m for m in MODES[1:]))
        for w in loads:
            base = [x for x in got[w]["none"][clock]]
            row = "%-8s %-22s %10.0f" % (w, unit[w], statistics.median(base) if w != "step"
                                         else statistics.median(base) / 1e3)
            for m in MODES[1:]:
                d = statistics.median([x - y for x, y in zip(got[w][m][clock], base)])
                if w == "step":
                    row += " %12.2f%%" % (100.0 * d / statistics.median(base))
                else:
                    row += " %13.0f" % d
            print(row + ("  (none: us per step)" if w == "step" else ""))
    print("\ncallbacks run per unit of work (start callbacks; sanity): " + ", ".join(
        "%s/%s %.2f" % (w, m, seen[(w, m)]) for w in loads for m in ("user", "backward", "all")))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""End to end: nn.Module calls as ranges (prof.capture{ modules = true }, #16.4).

A small encoder model (workloads/python/modules_model.py) trains under
`prof run` with two scheduled windows. What a user sees:

- every module call of a recorded step is a python_function event as
  torch's with_modules writes one (#28): named `nn.Module: <class>_<n>`,
  with its Python id, the Python id of the module call it was made in
  (null for a root) and its module id, and with the module's path in the
  model (none for a root); as many per step as the model makes, each
  nested in its parent module's call and the root in the step's forward
  phase;
- TensorBoard's module view (its parser's rules, tb_module_view) reads
  the model's hierarchy from them;
- modules.txt in each window directory (and a section of report.txt, and
  `prof report` on the saved window) ranks the modules by self time, each
  shown by its path and class (a root by its class), the deliberately slow
  one first;
- without modules = true there are no module events and no modules.txt;
- torch's global module hooks are gone once the last window has ended.

And examples/train.py, captured as a user would look at it
(prof.capture{ record_shapes, with_flops, modules, cpu_samples },
prof.export{ tensorboard }), read by the readers' own rules (#28): in the
doubles a reader adds ts + dur in, plain and after subtracting the first
ts, no event of any window ends after the event that holds it; speedscope's
own importer (test_formats.speedscope_import) reads the window's ranges
without a warning and each step is a root of its own.

Needs torch in /usr/bin/python3 (skipped without it).
"""
import collections
import gzip
import glob
import json
import os
import re
import shutil
import math
import tempfile
import unittest

from harness import PROF, PYTHON, TempDirTest, run, load_trace, step_spans, window_dirs
from test_formats import speedscope_import
from test_python import (EXPECTED, NEEDS_TORCH, SCHEDULE, TRAIN, WORKLOADS, PythonTest,
                         read)

MODEL = os.path.join(WORKLOADS, "modules_model.py")
STEPS = 15

# The calls of one step: module (its path, a root by its class) -> count
# (see modules_model.py).
PER_STEP = {"Model": 1, "embed": 1, "encoder": 1, "encoder.slow": 1, "norm": 2, "head": 1,
            "CrossEntropyLoss": 1}
for _i in range(3):
    for _sub in ("", ".attn", ".attn.q", ".ff"):
        PER_STEP["encoder.layers.%d%s" % (_i, _sub)] = 1
ROOTS = ("Model", "CrossEntropyLoss")
# Each module's class.
CLASS = {"Model": "Model", "embed": "Linear", "encoder": "Encoder", "encoder.slow": "Slow",
         "norm": "LayerNorm", "head": "Linear", "CrossEntropyLoss": "CrossEntropyLoss"}
for _i in range(3):
    CLASS.update({"encoder.layers.%d" % _i: "Layer", "encoder.layers.%d.attn" % _i: "Attn",
                  "encoder.layers.%d.attn.q" % _i: "Linear",
                  "encoder.layers.%d.ff" % _i: "Linear"})
# What profhost's tables show: path and class, a root by its class.
LABEL = {m: (m if m in ROOTS else "%s (%s)" % (m, c)) for m, c in CLASS.items()}
TORCH_NAME = re.compile(r"^nn\.Module: (\w+)_(\d+)$")


def parent_of(name):
    """The module whose call holds a call of `name`: the nearest called
    module up its path (encoder.layers, a ModuleList, is never called), the
    root (Model) for a top-level submodule, None for a root."""
    if name in ROOTS:
        return None
    while "." in name:
        name = name.rsplit(".", 1)[0]
        if name in PER_STEP:
            return name
    return "Model"


def module_events(trace):
    return [e for e in trace["traceEvents"]
            if e.get("cat") == "python_function" and e.get("ph") == "X"]


def module_of(e):
    """The module a module event is a call of: its path, else (a root) its
    class from its name."""
    path = e.get("args", {}).get("module path")
    if path:
        return path
    m = TORCH_NAME.match(e["name"])
    return m.group(1) if m else e["name"]


def span_ns(e):
    """An event's [start, end] in whole ns (its JSON times are us with ns
    decimals; summing the doubles would round)."""
    start = round(e["ts"] * 1000)
    return start, start + round(e["dur"] * 1000)


def within(inner, outer):
    """inner lies in outer, on the same thread (ends may touch)."""
    (a, b), (c, d) = span_ns(inner), span_ns(outer)
    return inner["tid"] == outer["tid"] and c <= a and b <= d


def innermost_parent(e, events):
    """The shortest other event that holds `e`, or None."""
    best = None
    for o in events:
        if o is e or not within(e, o) or span_ns(o) == span_ns(e):
            continue
        if best is None or o["dur"] < best["dur"]:
            best = o
    return best


TABLE_ROW = re.compile(r"^\s*(\d+)  (\S.*?)\s{2,}\d")


def table_rows(text):
    """The data rows of a modules table: (rank, module as shown), in order."""
    out = []
    for line in text.splitlines():
        m = TABLE_ROW.match(line)
        if m and m.group(2) in LABEL.values():
            out.append((int(m.group(1)), m.group(2)))
    return out


# ------------------------------------------------ TensorBoard's module view

# Categories and names the plugin (torch_tb_profiler 0.4.3, its last
# release) makes nodes of its per-thread operator tree from (trace.py
# create_trace_event, node.py create_operator_node): operators, and of the
# user_annotation ranges only steps, DataLoader fetches, optimizer steps
# and collectives; python_function events with a "Python module id".
def _tb_node(e):
    cat = (e.get("cat") or "").lower()
    name = e.get("name", "")
    if cat == "python_function":
        return (e.get("args") or {}).get("Python module id") is not None
    if cat == "cpu_op":
        return True
    if cat == "user_annotation":
        return (name.startswith("ProfilerStep#") or name.startswith("Optimizer.step") or
                (name.startswith("enumerate(DataLoader)#") and name.endswith(".__next__")))
    return False


def tb_module_view(events):
    """TensorBoard's module view of a trace's events, by its parser's rules
    (torch_tb_profiler 0.4.3: profiler/module_op.py aggegate_module_view,
    _build_module_hierarchy and _process_module_statistics; the tree of
    op_tree.py build_tree_relationship), applied as its code has them:

    - the hierarchy: python_function events by "Python id", linked by
      "Python parent id"; from each event no other names as parent, up the
      parents, each module event (one with a "Python module id") takes the
      nearest module above it as its parent; modules without one are
      roots; a module is (name, module id) with its children, and equal
      trees count once;
    - the modules: module nodes of each thread's tree (by tid; nodes sorted
      by start, the longer first, with end = ts + dur in doubles, each put
      under the innermost open node it starts inside of, dropped when it
      ends after it);
    - no view (None) without both; each module of the hierarchy must be
      among the modules (else the plugin's KeyError: the test fails).

    Returns the roots as (name without "nn.Module: ", [children]), children
    and roots sorted, or None."""
    def args(e):
        return e.get("args") or {}
    py = [e for e in events if e.get("ph") == "X" and e.get("cat") == "python_function"]
    by_id = {args(e).get("Python id"): e for e in py}
    children = collections.defaultdict(list)
    for e in py:
        children[args(e).get("Python id")]
        children[args(e).get("Python parent id")].append(args(e).get("Python id"))
    is_module = {i: args(e).get("Python module id") is not None for i, e in by_id.items()}
    module_parent = {}
    seen = set()
    for leaf in [i for i, c in children.items() if not c]:
        e, current = by_id[leaf], None
        while e is not None:
            i = args(e).get("Python id")
            if is_module[i]:
                if current is not None:
                    module_parent[current] = i
                current = i
                module_parent.setdefault(i, None)
            if (i, current) in seen:
                break
            seen.add((i, current))
            e = by_id.get(args(e).get("Python parent id"))
    kids = collections.defaultdict(list)
    for c, p in module_parent.items():
        kids[p].append(c)

    def tree(i):
        e = by_id[i]
        return ((e["name"], e["args"]["Python module id"]),
                tuple(sorted(tree(c) for c in kids[i])))
    roots = sorted(set(tree(i) for i, p in module_parent.items() if p is None))

    in_tree = set()
    threads = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and _tb_node(e):
            threads[int(e["tid"])].append(e)
    for evs in threads.values():
        nodes = sorted(({"e": e, "start": e["ts"], "end": e["ts"] + e["dur"]} for e in evs),
                       key=lambda n: (n["start"], -n["end"]))
        stack = [{"start": -math.inf, "end": math.inf}]
        for n in nodes:
            while True:
                tail = stack[-1]
                if n["start"] < tail["end"]:
                    if n["end"] <= tail["end"]:
                        stack.append(n)
                        if n["e"]["cat"] == "python_function":
                            in_tree.add((n["e"]["name"], n["e"]["args"]["Python module id"]))
                    break
                stack.pop()
    if not in_tree or not roots:
        return None

    def stats(node):
        (name, mid), subs = node
        assert (name, mid) in in_tree, "the plugin's KeyError: %s (module id %s)" % (name, mid)
        return (name.replace("nn.Module: ", ""), [stats(c) for c in subs])
    return sorted(stats(r) for r in roots)


def view_edges(view):
    """(parent, child) names of a module view, each edge once."""
    out = set()
    for name, subs in view:
        for child in subs:
            out.add((name, child[0]))
        out |= view_edges(subs)
    return out


@NEEDS_TORCH
class Modules(PythonTest):
    def run_model(self, capture):
        r, out = self.prof_run([MODEL, str(STEPS)],
                               policy_text=SCHEDULE + "prof.capture { %s }\n" % capture)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([tuple(map(int, l.split()[1:])) for l in r.stdout.splitlines()
                          if l.startswith("after")], [(0, 0)],
                         "torch's global module hooks left after the last window:\n" + r.stdout)
        dirs = window_dirs(out)
        self.assertEqual([os.path.basename(d) for d in dirs],
                         ["window%d_steps%d-%d" % (i, a, b) for i, (a, b) in enumerate(EXPECTED)])
        return r, dirs

    def test_module_calls_are_events_as_torch_writes_them(self):
        r, dirs = self.run_model("modules = true")
        # The hooks were in place while windows ran (the "after" line,
        # checked in run_model, is not vacuous).
        during = [tuple(map(int, l.split()[1:])) for l in r.stdout.splitlines()
                  if l.startswith("hooks")]
        self.assertEqual(len(during), STEPS)
        self.assertTrue(any(pre >= 1 and post >= 1 for pre, post in during), during)
        names = {}  # module -> its name, the same in every window
        for d in dirs:
            trace = load_trace(d)
            mods = module_events(trace)
            spans = step_spans(trace)
            self.assertEqual(len(spans), 3)
            for n, span in spans:
                inside = [e for e in mods if within(e, span)]
                self.assertEqual(dict(collections.Counter(module_of(e) for e in inside)),
                                 PER_STEP, "step %d" % n)
            self.assertEqual(len(mods), 3 * sum(PER_STEP.values()))
            forwards = [e for e in trace["traceEvents"]
                        if e.get("ph") == "X" and e.get("name") == "forward"]
            ids = collections.Counter(e.get("args", {}).get("Python id") for e in mods)
            self.assertEqual(max(ids.values()), 1)  # one Python id a call
            for e in mods:
                module, args = module_of(e), e.get("args", {})
                # named as torch names it: the class and the module's number
                # among those of its class (its "Python module id")
                m = TORCH_NAME.match(e["name"])
                self.assertTrue(m, e["name"])
                self.assertEqual(m.group(1), CLASS[module], e)
                self.assertEqual(int(m.group(2)), args["Python module id"], e)
                self.assertEqual(names.setdefault(module, e["name"]), e["name"])
                self.assertEqual("module path" in args, module not in ROOTS, e)
                # its parent: the call it was made in, by time and by id
                parent = innermost_parent(e, mods)
                self.assertEqual(parent and module_of(parent), parent_of(module),
                                 "%s at %s" % (module, e["ts"]))
                self.assertIn("Python parent id", args)
                self.assertEqual(args["Python parent id"],
                                 parent and parent.get("args", {}).get("Python id"), e)
                if module in ROOTS:
                    # The roots lie in the step's forward phase: module calls
                    # and phases nest (they share their instants).
                    self.assertTrue(any(within(e, f) for f in forwards), e)
            slow = [e["dur"] for e in mods if module_of(e) == "encoder.slow"]
            self.assertTrue(all(dur >= 30000 for dur in slow), slow)  # us: its busy loop
        # one name a module: the eight Linear modules are Linear_0 .. _7
        self.assertEqual(len(set(names.values())), len(PER_STEP))
        self.assertEqual(sorted(n for m, n in names.items() if CLASS[m] == "Linear"),
                         ["nn.Module: Linear_%d" % i for i in range(8)])

    def test_tensorboard_module_view_shows_the_model(self):
        # the file TensorBoard reads (prof.export{ tensorboard = true })
        r, out = self.prof_run([MODEL, str(STEPS)],
                               policy_text=SCHEDULE + "prof.capture { modules = true }\n"
                               "prof.export { tensorboard = true }\n")
        self.assertEqual(r.returncode, 0, r.stderr)
        files = sorted(glob.glob(os.path.join(out, "*", "tensorboard", "*", "*.pt.trace.json.gz")))
        self.assertEqual(len(files), 2, files)
        for f in files:
            with gzip.open(f, "rt", encoding="utf-8") as fh:
                events = json.load(fh)["traceEvents"]
            view = tb_module_view(events)
            self.assertIsNotNone(view, f)
            mods = [e for e in events if e.get("cat") == "python_function"]
            label = {e["name"].replace("nn.Module: ", ""): module_of(e) for e in mods}
            self.assertEqual(sorted(label[name] for name, _ in view), sorted(ROOTS))
            # every parent and child of the model, as the view has them
            self.assertEqual({(label[a], label[b]) for a, b in view_edges(view)},
                             {(parent_of(m), m) for m in PER_STEP if parent_of(m)})

    def test_modules_report_ranks_the_slow_module_first(self):
        r, dirs = self.run_model("modules = true")
        for d in dirs:
            text = read(os.path.join(d, "modules.txt"))
            rows = table_rows(text)
            # each module once, by its path and class (a root by its class)
            self.assertEqual(sorted(name for _, name in rows), sorted(LABEL.values()), text)
            self.assertEqual(rows[0], (1, "encoder.slow (Slow)"), text)
            self.assertIn("modules.txt", read(os.path.join(d, "summary.txt")))
            report = read(os.path.join(d, "report.txt"))
            section = report[report.index("Modules (self time)"):]
            self.assertEqual(table_rows(section)[0], (1, "encoder.slow (Slow)"))
        # Offline, from the saved window: the same ranking.
        rep = run([PROF, "report", dirs[0]])
        self.assertEqual(rep.returncode, 0, rep.stderr)
        section = rep.stdout[rep.stdout.index("Modules (self time)"):]
        self.assertEqual(table_rows(section)[0], (1, "encoder.slow (Slow)"), rep.stdout)

    def test_no_module_ranges_without_modules(self):
        r, dirs = self.run_model("modules = false")
        for d in dirs:
            trace = load_trace(d)
            self.assertEqual(module_events(trace), [])
            self.assertTrue(any(e.get("name") == "forward" for e in trace["traceEvents"]))
            self.assertFalse(os.path.exists(os.path.join(d, "modules.txt")))
            self.assertIn("No module calls in this window", read(os.path.join(d, "report.txt")))


def late_ends(trace):
    """The events that end after an event holding them, as a reader that
    adds ts + dur in doubles sees them: plain, after subtracting the first
    ts of the trace, and after subtracting the first ts of their thread
    (speedscope). What holds what is taken in whole ns (each field rounded,
    which reads back exactly), per thread (pid, tid), as the readers nest:
    by start, the longer first; an event is held by every open event it
    starts inside of. Two events of the same extent may nest either way and
    are not compared with each other. Returns lines saying what ended after
    what (empty: none); an event that ends after its holder in ns too (the
    two overlap) is also one."""
    def ns(e):
        start = round(e["ts"] * 1000)
        return start, start + round(e["dur"] * 1000)

    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    first = min(e["ts"] for e in events)
    tracks = collections.defaultdict(list)
    for e in events:
        tracks[(e["pid"], e["tid"])].append(e)
    out = []
    for key, evs in tracks.items():
        evs.sort(key=lambda e: (ns(e)[0], -ns(e)[1]))
        shifts = (0.0, first, evs[0]["ts"])
        stack = []
        for e in evs:
            start, end = ns(e)
            while stack and ns(stack[-1])[1] <= start:
                stack.pop()
            for a in stack:
                if ns(a) == (start, end):
                    continue
                if end > ns(a)[1]:
                    out.append("%s overlaps %s in ns" % (e["name"], a["name"]))
                for f in shifts:
                    if (e["ts"] - f) + e["dur"] > (a["ts"] - f) + a["dur"]:
                        out.append("%s (%s) at %.3f ends after %s (%s), shift %r" % (
                            e["name"], e["cat"], e["ts"], a["name"], a["cat"], f))
            stack.append(e)
    return out


@NEEDS_TORCH
class TrainLoop(TempDirTest):
    """examples/train.py under the capture #28 looked at, run once for the
    class: three recorded steps in each of two windows."""

    POLICY = ("prof.schedule { skip_first = 5, wait = 2, warmup = 1, active = 3, cycles = 2 }\n"
              "prof.capture { record_shapes = true, with_flops = true, modules = true,\n"
              "               cpu_samples = { hz = 199 } }\n"
              "prof.export { tensorboard = true }\n")

    @classmethod
    def setUpClass(cls):
        cls.run_dir = tempfile.mkdtemp(prefix="profhost-e2e-train-")
        policy = os.path.join(cls.run_dir, "policy.lua")
        with open(policy, "w") as f:
            f.write(cls.POLICY)
        out = os.path.join(cls.run_dir, "out")
        cls.result = run([PROF, "run", "-s", policy, "-o", out, "--", PYTHON, TRAIN,
                          "--steps", "25", "--quiet"], timeout=300, cwd=cls.run_dir)
        cls.dirs = window_dirs(out)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.run_dir, ignore_errors=True)

    def setUp(self):
        super().setUp()
        self.assertEqual(self.result.returncode, 0, self.result.stderr)
        self.assertEqual([os.path.basename(d) for d in self.dirs],
                         ["window0_steps8-10", "window1_steps14-16"])

    def test_no_event_ends_after_the_event_holding_it(self):
        for d in self.dirs:
            trace = load_trace(d)
            mods = [e for e in trace["traceEvents"] if e.get("cat") == "python_function"]
            self.assertGreater(len(mods), 0)  # module calls are there to nest
            self.assertEqual(late_ends(trace), [], d)

    def test_module_events_as_torch_writes_them(self):
        model = {"0": "Linear", "1": "ReLU", "2": "Linear", "3": "ReLU", "4": "Linear"}
        for d in self.dirs:
            trace = load_trace(d)
            mods = module_events(trace)
            self.assertEqual(len(mods), 3 * 7)  # the model, its 5 layers, the loss
            for e in mods:
                args = e.get("args", {})
                self.assertIn("Python id", args, e)
                self.assertIn("Python parent id", args, e)
                m = TORCH_NAME.match(e["name"])
                self.assertTrue(m, e["name"])
                self.assertEqual(m.group(1), model.get(args.get("module path")) or
                                 m.group(1) in ("Sequential", "CrossEntropyLoss") and m.group(1))
            # modules.txt: each module by its path and class
            text = read(os.path.join(d, "modules.txt"))
            shown = [re.match(r"^\s*\d+  (\S.*?)\s{2,}\d", l) for l in text.splitlines()]
            self.assertEqual(sorted(m.group(1) for m in shown if m),
                             ["0 (Linear)", "1 (ReLU)", "2 (Linear)", "3 (ReLU)", "4 (Linear)",
                              "CrossEntropyLoss", "Sequential"], text)
        # TensorBoard's module view of each window: the model and the loss
        files = sorted(glob.glob(os.path.join(os.path.dirname(os.path.dirname(self.dirs[0])),
                                              "tensorboard", "*", "*.pt.trace.json.gz")))
        self.assertEqual(len(files), 2, files)
        for f in files:
            with gzip.open(f, "rt", encoding="utf-8") as fh:
                view = tb_module_view(json.load(fh)["traceEvents"])
            self.assertEqual(view, [("CrossEntropyLoss_0", []),
                                    ("Sequential_0", [("Linear_0", []), ("Linear_1", []),
                                                      ("Linear_2", []), ("ReLU_0", []),
                                                      ("ReLU_1", [])])], f)

    def test_speedscope_reads_the_ranges_without_a_warning(self):
        for d in self.dirs:
            # speedscope shows the samples of a file that has them: the
            # ranges alone, as it reads a file without samples
            trace = load_trace(d)
            del trace["samples"], trace["stackFrames"]
            path = os.path.join(self.tmp, "ranges.json")
            with open(path, "w") as f:
                json.dump(trace, f)
            read = speedscope_import(self, path, warnings=True)
            self.assertEqual(read["warnings"], [], d)
            steps = [s["name"] for _, s in step_spans(trace)]
            tid = step_spans(trace)[0][1]["tid"]
            main = [p for p in read["profiles"] if p["name"].endswith("(tid %d)" % tid)]
            self.assertEqual(len(main), 1)
            self.assertEqual([r for r in main[0]["roots"] if r.startswith("ProfilerStep#")],
                             steps)


if __name__ == "__main__":
    unittest.main(verbosity=2)

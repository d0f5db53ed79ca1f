"""End to end: nn.Module calls as ranges (prof.capture{ modules = true }, #16.4).

A small encoder model (workloads/python/modules_model.py) trains under
`prof run` with two scheduled windows. What a user sees:

- every module call of a recorded step is a python_function event named by
  the module's path in the model (the root by its class), as many per step
  as the model makes, each nested in its parent module's call and the root
  in the step's forward phase;
- modules.txt in each window directory (and a section of report.txt, and
  `prof report` on the saved window) ranks the modules by self time, the
  deliberately slow one first;
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
import json
import os
import shutil
import tempfile
import unittest

from harness import PROF, PYTHON, TempDirTest, run, load_trace, step_spans, window_dirs
from test_formats import speedscope_import
from test_python import (EXPECTED, NEEDS_TORCH, SCHEDULE, TRAIN, WORKLOADS, PythonTest,
                         read)

MODEL = os.path.join(WORKLOADS, "modules_model.py")
STEPS = 15

# The calls of one step: module name -> count (see modules_model.py).
PER_STEP = {"Model": 1, "embed": 1, "encoder": 1, "encoder.slow": 1, "norm": 2, "head": 1,
            "CrossEntropyLoss": 1}
for _i in range(3):
    for _sub in ("", ".attn", ".attn.q", ".ff"):
        PER_STEP["encoder.layers.%d%s" % (_i, _sub)] = 1
ROOTS = ("Model", "CrossEntropyLoss")


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


def table_rows(text):
    """The data rows of a modules table: (rank, module name), in order."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) > 2 and parts[0].isdigit() and parts[1] in PER_STEP:
            out.append((int(parts[0]), parts[1]))
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

    def test_module_calls_are_ranges_named_by_path(self):
        r, dirs = self.run_model("modules = true")
        # The hooks were in place while windows ran (the "after" line,
        # checked in run_model, is not vacuous).
        during = [tuple(map(int, l.split()[1:])) for l in r.stdout.splitlines()
                  if l.startswith("hooks")]
        self.assertEqual(len(during), STEPS)
        self.assertTrue(any(pre >= 1 and post >= 1 for pre, post in during), during)
        for d in dirs:
            trace = load_trace(d)
            mods = module_events(trace)
            spans = step_spans(trace)
            self.assertEqual(len(spans), 3)
            for n, span in spans:
                inside = [e for e in mods if within(e, span)]
                self.assertEqual(dict(collections.Counter(e["name"] for e in inside)), PER_STEP,
                                 "step %d" % n)
            self.assertEqual(len(mods), 3 * sum(PER_STEP.values()))
            forwards = [e for e in trace["traceEvents"]
                        if e.get("ph") == "X" and e.get("name") == "forward"]
            for e in mods:
                parent = innermost_parent(e, mods)
                self.assertEqual(parent and parent["name"], parent_of(e["name"]),
                                 "%s at %s" % (e["name"], e["ts"]))
                if e["name"] in ROOTS:
                    # The roots lie in the step's forward phase: module calls
                    # and phases nest (they share their instants).
                    self.assertTrue(any(within(e, f) for f in forwards), e)
            slow = [e["dur"] for e in mods if e["name"] == "encoder.slow"]
            self.assertTrue(all(dur >= 30000 for dur in slow), slow)  # us: its busy loop

    def test_modules_report_ranks_the_slow_module_first(self):
        r, dirs = self.run_model("modules = true")
        for d in dirs:
            text = read(os.path.join(d, "modules.txt"))
            rows = table_rows(text)
            self.assertEqual(sorted(name for _, name in rows), sorted(PER_STEP), text)
            self.assertEqual(rows[0], (1, "encoder.slow"), text)
            self.assertIn("modules.txt", read(os.path.join(d, "summary.txt")))
            report = read(os.path.join(d, "report.txt"))
            section = report[report.index("Modules (self time)"):]
            self.assertEqual(table_rows(section)[0], (1, "encoder.slow"))
        # Offline, from the saved window: the same ranking.
        rep = run([PROF, "report", dirs[0]])
        self.assertEqual(rep.returncode, 0, rep.stderr)
        section = rep.stdout[rep.stdout.index("Modules (self time)"):]
        self.assertEqual(table_rows(section)[0], (1, "encoder.slow"), rep.stdout)

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

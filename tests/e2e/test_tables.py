"""End to end: key_averages.txt and summary.txt of a workload with known
timings (tests/e2e/workloads/nested_app.c: per step "outer" sleeps 2 ms,
then "inner" inside it sleeps 3 ms), checked against those timings and
against the window's own trace."""
import json
import os
import re
import shutil
import subprocess
import unittest

from harness import PROF, PYTHON, TESTBIN, TempDirTest, load_trace, run, step_spans, window_dirs

NESTED_APP = os.path.join(TESTBIN, "nested_app")
SCHEDULE = "prof.schedule { wait = 1, warmup = 1, active = 6, cycles = 1 }\n"
UNIT_MS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def ms(text):
    """'2.019ms' / '950.000us' / '1.250s' -> milliseconds."""
    m = re.fullmatch(r"(\d+\.\d{3})(us|ms|s)", text)
    if not m:
        raise AssertionError("not a torch time: %r" % text)
    return float(m.group(1)) * UNIT_MS[m.group(2)]


def parse_key_averages(text):
    """{name: {column: cell}} from torch's layout, plus the footer line."""
    lines = text.splitlines()
    seps = [i for i, l in enumerate(lines) if l.startswith("-")]
    if len(seps) != 3:
        raise AssertionError("expected 3 dashed lines:\n" + text)
    header = re.split(r"\s{2,}", lines[seps[0] + 1].strip())
    rows = {}
    for line in lines[seps[1] + 1:seps[2]]:
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) != len(header):
            raise AssertionError("row %r does not match header %r" % (line, header))
        rows[cells[0]] = dict(zip(header, cells))
    return header, rows, lines[seps[2] + 1:]


def quantile(xs, q):
    """Linear interpolation between closest ranks (what summary.txt uses)."""
    xs = sorted(xs)
    rank = q * (len(xs) - 1)
    lo = int(rank)
    if lo + 1 >= len(xs):
        return xs[-1]
    return xs[lo] + (xs[lo + 1] - xs[lo]) * (rank - lo)


class Tables(TempDirTest):
    def run_nested(self, policy_text, steps=12):
        policy = self.write("policy.lua", policy_text)
        out = os.path.join(self.tmp, "out")
        shutil.rmtree(out, ignore_errors=True)
        r = run([PROF, "run", "-s", policy, "-o", out, "--", NESTED_APP, "--steps", str(steps)])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("done %d" % steps, r.stdout)
        self.timings = {}
        for line in r.stdout.splitlines():
            if line.startswith("timing "):
                _, step, outer_ns, inner_ns = line.split()
                self.timings[int(step)] = (int(outer_ns) / 1e6, int(inner_ns) / 1e6)
        dirs = window_dirs(out)
        self.assertEqual(len(dirs), 1, dirs)
        return dirs[0]

    def test_key_averages_matches_known_timings(self):
        d = self.run_nested(SCHEDULE)
        trace = load_trace(d)
        steps = step_spans(trace)
        n = len(steps)
        self.assertEqual(n, 6)
        with open(os.path.join(d, "key_averages.txt")) as f:
            text = f.read()
        header, rows, footer = parse_key_averages(text)
        self.assertEqual(header, ["Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total",
                                  "CPU time avg", "# of Calls"])
        self.assertEqual(set(rows), {"ProfilerStep*", "outer", "inner"})

        outer, inner, step = rows["outer"], rows["inner"], rows["ProfilerStep*"]
        self.assertEqual(int(outer["# of Calls"]), n)
        self.assertEqual(int(inner["# of Calls"]), n)
        self.assertEqual(int(step["# of Calls"]), n)
        # Sleeps never return early: at least the nominal times. And within
        # 10 % of what the program measured around its own pushes and pops
        # for the captured steps (a busy machine makes sleeps overrun).
        measured_outer = sum(self.timings[k][0] for k, _ in steps)
        measured_inner = sum(self.timings[k][1] for k, _ in steps)
        for value, nominal, truth in (
                (ms(outer["Self CPU"]), 2.0 * n, measured_outer - measured_inner),
                (ms(outer["CPU total"]), 5.0 * n, measured_outer),
                (ms(inner["Self CPU"]), 3.0 * n, measured_inner),
                (ms(inner["CPU total"]), 3.0 * n, measured_inner)):
            self.assertGreaterEqual(value, nominal * 0.999, text)
            self.assertGreaterEqual(value, truth * 0.90, text)
            self.assertLessEqual(value, truth * 1.10, text)
        self.assertAlmostEqual(ms(outer["CPU time avg"]), ms(outer["CPU total"]) / n, delta=0.002)

        # The same numbers from the trace's own events: total = sum of
        # durations, outer's self = its durations minus inner's.
        def durs(name):
            return [e["dur"] / 1000.0 for e in trace["traceEvents"]
                    if e.get("ph") == "X" and e.get("name") == name]
        self.assertAlmostEqual(ms(outer["CPU total"]), sum(durs("outer")), delta=0.01)
        self.assertAlmostEqual(ms(inner["CPU total"]), sum(durs("inner")), delta=0.01)
        self.assertAlmostEqual(ms(outer["Self CPU"]), sum(durs("outer")) - sum(durs("inner")),
                               delta=0.01)
        step_ms = [e["dur"] / 1000.0 for _, e in steps]
        self.assertAlmostEqual(ms(step["CPU total"]), sum(step_ms), delta=0.01)
        self.assertAlmostEqual(ms(step["Self CPU"]), sum(step_ms) - sum(durs("outer")), delta=0.01)

        # Sorted by self CPU time; percentages against the sum of self time,
        # which is everything the steps cover.
        self.assertEqual(list(rows), sorted(rows, key=lambda k: -ms(rows[k]["Self CPU"])))
        self.assertEqual(len(footer), 1, text)
        self.assertTrue(footer[0].startswith("Self CPU time total: "), text)
        total = ms(footer[0][len("Self CPU time total: "):])
        self.assertAlmostEqual(total, sum(step_ms), delta=0.01)
        self.assertAlmostEqual(sum(float(r["Self CPU %"].rstrip("%")) for r in rows.values()),
                               100.0, delta=0.02)
        self.assertEqual(step["CPU total %"], "100.00%")

    def test_summary_lists_steps_stats_ranges_and_files(self):
        d = self.run_nested(SCHEDULE)
        trace = load_trace(d)
        steps = step_spans(trace)
        a, b = steps[0][0], steps[-1][0]
        with open(os.path.join(d, "summary.txt")) as f:
            text = f.read()
        lines = text.splitlines()
        self.assertLessEqual(len(lines), 40, text)
        self.assertTrue(lines[0].startswith("profhost summary: window 0, steps %d-%d (schedule), "
                                            "rank 0" % (a, b)), text)
        self.assertTrue(d.endswith("window0_steps%d-%d" % (a, b)))
        self.assertIn("\nSteps: %d captured (%d-%d)\n" % (len(steps), a, b), text)

        # min / median / p90 / max of the ProfilerStep spans' durations
        m = re.search(r"^Step time: min (\S+)  median (\S+)  p90 (\S+)  max (\S+)  \((\d+) steps\)$",
                      text, re.M)
        self.assertIsNotNone(m, text)
        durs = [e["dur"] / 1000.0 for _, e in steps]
        for got, want in zip(m.groups()[:4], (min(durs), quantile(durs, 0.5),
                                               quantile(durs, 0.9), max(durs))):
            self.assertAlmostEqual(ms(got), want, delta=0.002)
        self.assertEqual(int(m.group(5)), len(steps))
        self.assertGreaterEqual(min(durs), 5.0)

        # top ranges by self time: inner (3 ms a step) before outer (2 ms),
        # each once a step — by what the program measured, since a busy
        # machine can stretch a 2 ms sleep past a 3 ms one.
        top = re.findall(r"^  (\S+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(\S+)%$", text, re.M)
        names = [t[0] for t in top]
        inner_self = sum(self.timings[k][1] for k, _ in steps)
        outer_self = sum(self.timings[k][0] for k, _ in steps) - inner_self
        if inner_self > 1.2 * outer_self:
            self.assertLess(names.index("inner"), names.index("outer"), text)
        elif outer_self > 1.2 * inner_self:
            self.assertLess(names.index("outer"), names.index("inner"), text)
        for name, calls, self_ms, _, _ in top:
            if name in ("inner", "outer"):
                self.assertEqual(int(calls), len(steps))
        self.assertIn("\nDrops: none\n", text)
        m = re.search(r"(\d+) events written", text)
        self.assertEqual(int(m.group(1)), trace["profhost"]["counters"]["events"])

        # every file of the window, summary.txt itself last
        self.assertIn("\nDirectory: %s\n" % d, text)
        files = re.search(r"^Files: (.*)$", text, re.M).group(1).split()
        self.assertEqual(files[-1], "summary.txt")
        self.assertEqual(sorted(files), sorted(os.listdir(d)))

    def test_policy_picks_sort_rows_and_grouping(self):
        # every row has 6 calls: the tie goes to the row first seen, the step
        d = self.run_nested(SCHEDULE + 'prof.export { key_averages = { sort_by = "count", '
                                       'row_limit = 1 }, summary = false }\n')
        with open(os.path.join(d, "key_averages.txt")) as f:
            _, rows, footer = parse_key_averages(f.read())
        self.assertEqual(list(rows), ["ProfilerStep*"])
        self.assertEqual(int(rows["ProfilerStep*"]["# of Calls"]), 6)
        self.assertFalse(os.path.exists(os.path.join(d, "summary.txt")))

        # ranges pushed through the C ABI carry no NVTX domain
        d = self.run_nested(SCHEDULE + 'prof.export { key_averages = { group_by = "domain" } }\n')
        with open(os.path.join(d, "key_averages.txt")) as f:
            _, rows, _ = parse_key_averages(f.read())
        self.assertEqual(list(rows), ["(none)"])
        self.assertEqual(int(rows["(none)"]["# of Calls"]), 18)
        self.assertEqual(rows["(none)"]["Self CPU %"], "100.00%")

    @unittest.skipUnless(subprocess.run([PYTHON, "-c", "import torch"], stderr=subprocess.DEVNULL)
                         .returncode == 0, "torch is not installed for /usr/bin/python3")
    def test_report_groups_by_shape_and_stack_as_torch(self):
        # The same operators (names, us times, input shapes, call stacks)
        # as a Kineto trace.json for prof report, and as torch's own
        # FunctionEvents: the tables are the same text.
        trace = {"traceEvents": [
            {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts,
             "dur": end - ts, "args": dict({"Input Dims": shapes},
                                            **({"Call stack": ";".join(stack)} if stack else {}))}
            for name, ts, end, shapes, stack in run_json(GROUPED_OPS)]}
        path = self.write("trace.json", json.dumps(trace))
        for shapes, stack_n in ((True, 0), (False, 2), (True, 5)):
            r = run([PROF, "report", path, "--key-averages",
                     "--set", "export.key_averages.group_by_input_shape=%s" % str(shapes).lower(),
                     "--set", "export.key_averages.group_by_stack_n=%d" % stack_n])
            self.assertEqual(r.returncode, 0, r.stderr)
            want = subprocess.run([PYTHON, "-c", GROUPED_OPS + TORCH_TABLE % (shapes, stack_n)],
                                  stdout=subprocess.PIPE, check=True, text=True).stdout
            self.assertEqual(r.stdout, want)
            self.assertIn("Input Shapes" if shapes else "Source Location", r.stdout)
        r = run([PROF, "report", path, "--key-averages", "--format", "json"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("--key-averages prints text only (not --format json)", r.stderr)


# Operators as (name, start us, end us, input shapes, stack innermost
# first).
GROUPED_OPS = """
A = "torch/nn/modules/linear.py(113): forward"
B = "nn.Module: Linear_0"
OPS = [
    ("aten::linear", 0, 100, [[8, 16], [32, 16], [32]], [A, B, "train.py(20): step"]),
    ("aten::addmm", 10, 60, [[32], [8, 16], [16, 32], [], []], [A, B, "train.py(20): step"]),
    ("aten::linear", 200, 280, [[8, 32], [4, 32], [4]], [A, B, "train.py(21): step"]),
    ("aten::addmm", 210, 250, [[4], [8, 32], [32, 4], [], []], [A, B, "train.py(21): step"]),
    ("aten::addmm", 300, 330, [[32], [8, 16], [16, 32], [], []],
     ["<built-in method addmm of type object at 0x7f00>", "model.py(7): block",
      "model.py(3): run", "train.py(40): loop", "train.py(50): main", "train.py(60): <module>"]),
    ("aten::relu", 400, 410, [[8, 32]], []),
    ("aten::relu", 500, 504, [[8, 32]], ["a/" + "x" * 90 + ".py(1): f"]),
]
"""

# torch's own table of GROUPED_OPS (group_by_input_shape, group_by_stack_n).
TORCH_TABLE = """
from torch.autograd.profiler_util import EventList, FunctionEvent
evs = EventList([FunctionEvent(id=i, name=n, thread=1, start_us=s, end_us=e, input_shapes=sh,
                               stack=st) for i, (n, s, e, sh, st) in enumerate(OPS)])
evs._build_tree()
print(evs.key_averages(group_by_input_shapes=%s, group_by_stack_n=%d)
      .table(sort_by="self_cpu_time_total", row_limit=50), end="")
"""


def run_json(code):
    """OPS of `code`, run in torch's Python."""
    return json.loads(subprocess.run([PYTHON, "-c", code + "import json\nprint(json.dumps(OPS))"],
                                     stdout=subprocess.PIPE, check=True, text=True).stdout)


if __name__ == "__main__":
    unittest.main()

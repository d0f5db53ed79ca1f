"""End to end: a script that keeps its own torch.profiler runs under profhost.

The promise (docs/python.md, "Beside torch.profiler"): whatever options the
script gives torch.profiler (with_stack, record_shapes, profile_memory,
with_flops, a schedule, record_function labels inside), and whether its
steps overlap profhost's windows or not, the script runs to completion and
both profilers write correct files. Issue #12.1: with_stack=True died with
SIGSEGV when torch's Python tracer first started while profhost's phase
hooks were in place.

Debian's torch 1.13 is built without Kineto: its export_chrome_trace writes
the legacy form, a JSON list of "X" events with pid "CPU functions" and no
arguments. So torch's file is checked for what that form holds (a
ProfilerStep#N per active step, the DataLoader's and record_function's
labels, operators), and what each option recorded is checked with torch's
own event list (the workload writes it to sessions.json). emit_nvtx inside
the loop only runs on a CUDA build with a GPU (scripts/gpu-smoke.sh).

Skipped (with the reason) when /usr/bin/python3 has no torch.
"""
import json
import os
import unittest

from harness import SOURCE, load_trace, step_spans, window_dirs
from test_python import HAS_TORCH, PythonTest, phase_events

WORKLOAD = os.path.join(SOURCE, "tests", "e2e", "workloads", "python",
                        "torch_profiler_beside.py")
ALL = ("stack", "shapes", "memory", "flops")


@unittest.skipUnless(HAS_TORCH, "torch is not installed for /usr/bin/python3")
class BesideTorchProfiler(PythonTest):
    def run_beside(self, policy, sessions, steps):
        """Runs the workload under profhost with torch.profiler sessions
        ("opts@start"); returns (sessions.json, profhost's window dirs)."""
        out = os.path.join(self.tmp, "torch")
        os.makedirs(out)
        args = [WORKLOAD, "--out", out, "--steps", str(steps)]
        for s in sessions:
            args += ["--session", s]
        r, prof_out = self.prof_run(args, policy_text=policy, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("done %d %d" % (steps, len(sessions)), r.stdout)
        with open(os.path.join(out, "sessions.json")) as f:
            got = json.load(f)
        self.assertEqual(len(got), len(sessions))
        for s in got:
            self.check_torch_file(s)
        return got, window_dirs(prof_out)

    def check_torch_file(self, s):
        """torch's export parses and holds its two active steps, the
        DataLoader's label, the record_function label and operators; each
        option given recorded what it records (and no other did: flops
        needs the shapes, so it records them too)."""
        with open(s["file"]) as f:
            events = json.load(f)
        self.assertIsInstance(events, list)
        names = [e["name"] for e in events]
        steps = sorted(n for n in names if n.startswith("ProfilerStep#"))
        self.assertEqual(len(steps), 2, (s, steps))
        self.assertIn("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", names)
        self.assertGreaterEqual(names.count("my_block"), 2)
        self.assertIn("aten::addmm", names)
        for e in events:
            self.assertEqual((e["ph"], e["pid"]), ("X", "CPU functions"))
            self.assertGreaterEqual(e["dur"], 0)
        for opt in ALL:
            want = opt in s["opts"] or (opt == "shapes" and "flops" in s["opts"])
            self.assertEqual(s[opt], want, (opt, s))

    def check_profhost(self, dirs, expected):
        """profhost's windows are the scheduled ones, each step holding the
        phases once."""
        self.assertEqual([[n for n, _ in step_spans(load_trace(d))] for d in dirs], expected)
        for d in dirs:
            trace = load_trace(d)
            self.check_phases(trace)
            phases = [e["phase"] for e in phase_events(trace)]
            for name in ("data", "forward", "backward", "optimizer"):
                self.assertEqual(phases.count(name), len(step_spans(trace)), (d, name))

    def test_overlapping_with_stack_first(self):
        # profhost records steps 2-3, 6-7, 10-11, ...; each torch session
        # warms up and records over one of them, the first with every
        # option (its Python tracer starts while profhost's hooks are in).
        policy = "prof.schedule { wait = 1, warmup = 1, active = 2, cycles = 5 }\n"
        sessions = ["stack+shapes+memory+flops@1", "stack@5", "shapes+memory@9",
                    "flops@13", "none@17"]
        _, dirs = self.run_beside(policy, sessions, 21)
        self.check_profhost(dirs, [[2, 3], [6, 7], [10, 11], [14, 15], [18, 19]])

    def test_overlapping_at_other_offsets_with_cpu_samples(self):
        # Shifted by one and two steps: torch starts recording inside
        # profhost's window, or profhost's window inside torch's; CPU
        # samples and the Python stack thread run beside torch's tracer.
        policy = ("prof.schedule { wait = 1, warmup = 1, active = 2, cycles = 4 }\n"
                  "prof.capture { cpu_samples = { hz = 250 } }\n")
        sessions = ["stack+memory@0", "stack+shapes@5", "stack+flops@9", "stack@13"]
        _, dirs = self.run_beside(policy, sessions, 17)
        self.check_profhost(dirs, [[2, 3], [6, 7], [10, 11], [14, 15]])

    def test_not_overlapping(self):
        # profhost's window ends before torch's first session starts (the
        # hooks are gone when its tracer starts), then torch again after.
        policy = "prof.schedule { wait = 0, warmup = 1, active = 2, cycles = 1 }\n"
        sessions = ["stack+shapes+memory+flops@4", "stack@8"]
        _, dirs = self.run_beside(policy, sessions, 13)
        self.check_profhost(dirs, [[1, 2]])


if __name__ == "__main__":
    unittest.main(verbosity=2)

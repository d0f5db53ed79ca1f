"""End to end: programs that never end a step (issue #26.5).

An inference script (`with torch.no_grad(): model(x)`) or a native tool
has no step, so no window of steps ever opens. `prof.schedule{ whole =
true }` (or `--set schedule.whole=true` on top of any policy) records the
whole process as one window, written at exit, whose one step is the
process, complete, and the summary reads it as one step. A capture range
records a region: its window is the region, with no step of its own (the
program may be inside its first step when the region ends).

The torch tests need torch in /usr/bin/python3 and are skipped without it.
"""
import os
import unittest

from harness import (NEEDS_TORCH, PROF, PYTHON, TESTBIN, TempDirTest, base_env, load_trace, run,
                     step_spans, window_dirs)

NESTED_APP = os.path.join(TESTBIN, "nested_app")




# A model called 5 times with no optimizer: two Linear layers, so 10 addmm.
INFER = """\
import sys
import torch
torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
x = torch.randn(16, 64)
with torch.no_grad():
    model(x)  # before the region
    if sys.argv[1:] == ["region"]:
        import profhost
        with profhost.range("infer"):
            for _ in range(5):
                y = model(x)
    else:
        for _ in range(4):
            y = model(x)
print("done", tuple(y.shape))
"""


class NoSteps(TempDirTest):
    def prof_run(self, cmd, policy_text=None, sets=(), env=None):
        out = os.path.join(self.tmp, "out")
        args = [PROF, "run", "-o", out]
        if policy_text is not None:
            args += ["-s", self.write("policy.lua", policy_text)]
        for s in sets:
            args += ["--set", s]
        r = run(args + ["--"] + cmd, timeout=300, cwd=self.tmp, env=base_env(env or {}))
        return r, out

    def one_window(self, r, out, reason):
        """The run wrote exactly window0_steps0-0, whose one step is
        complete and spans the window; returns (trace, summary text)."""
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("no capture window was reached", r.stderr)
        dirs = window_dirs(out)
        self.assertEqual([os.path.basename(d) for d in dirs], ["window0_steps0-0"], r.stderr)
        trace = load_trace(dirs[0])
        steps = step_spans(trace)
        self.assertEqual([n for n, _ in steps], [0])
        span = steps[0][1]
        self.assertNotIn("partial", span.get("args", {}))
        with open(os.path.join(dirs[0], "summary.txt")) as f:
            summary = f.read()
        self.assertIn("window 0, steps 0-0 (%s)" % reason, summary)
        self.assertIn("Steps: 1 captured (0)\n", summary)
        self.assertRegex(summary, r"Step time: min \S+ +median \S+ +p90 \S+ +max \S+ +\(1 step\)")
        self.assertNotIn("partial", summary)
        return trace, summary

    def ops(self, trace, name):
        return [e for e in trace["traceEvents"]
                if e.get("ph") == "X" and e.get("name") == name and e.get("cat") == "cpu_op"]

    @NEEDS_TORCH
    def test_inference_script_whole_with_the_default_policy(self):
        """`prof run --set schedule.whole=true -- python infer.py` with the
        built-in default policy: one window from start to exit, every
        model call's operators in it."""
        script = self.write("infer.py", INFER)
        r, out = self.prof_run([PYTHON, script], sets=["schedule.whole=true"])
        self.assertIn("done (16, 10)", r.stdout)
        self.assertIn("profhost: process ending: writing window 0, the whole process "
                      "as one step (it never stepped)", r.stderr)
        trace, summary = self.one_window(r, out, "whole process")
        self.assertEqual(len(self.ops(trace, "aten::addmm")), 10)  # 5 calls x 2 layers
        with open(os.path.join(window_dirs(out)[0], "key_averages.txt")) as f:
            ka = f.read()
        self.assertRegex(ka, r"\n +aten::addmm .* 10  \n")

    @NEEDS_TORCH
    def test_inference_script_whole_through_torchs_profiler(self):
        """The same without profhost's operator observer (not built yet, or
        PROF_TORCH_OPS=profiler): torch's profiler starts while torch is
        still being imported, and its operators are still the window's."""
        script = self.write("infer.py", INFER)
        r, out = self.prof_run([PYTHON, script], sets=["schedule.whole=true"],
                               env={"PROF_TORCH_OPS": "profiler"})
        self.assertIn("done (16, 10)", r.stdout)
        trace, summary = self.one_window(r, out, "whole process")
        self.assertEqual(len(self.ops(trace, "aten::addmm")), 10)  # 5 calls x 2 layers
        self.assertIn("operator events: torch's profiler around each window "
                      "(no observer: PROF_TORCH_OPS=profiler)", summary)
        self.assertNotIn("did not come in time", summary)

    @NEEDS_TORCH
    def test_inference_region_by_capture_range(self):
        """A region of a script without steps: the window is the range, with
        no step made up of it; the model call before it is not in the
        window."""
        script = self.write("infer.py", INFER)
        r, out = self.prof_run([PYTHON, script, "region"],
                               policy_text='prof.capture_range{ nvtx = "infer" }\n')
        self.assertEqual(r.returncode, 0, r.stderr)
        dirs = window_dirs(out)
        self.assertEqual([os.path.basename(d) for d in dirs], ["window0_steps0-0"], r.stderr)
        trace = load_trace(dirs[0])
        self.assertEqual(trace["profhost"]["reason"], "nvtx range 'infer'")
        self.assertEqual(step_spans(trace), [])
        self.assertEqual(len(self.ops(trace, "aten::addmm")), 10)  # the 5 calls inside
        rng = [e for e in trace["traceEvents"] if e.get("name") == "infer" and e.get("ph") == "X"]
        self.assertEqual(len(rng), 1)
        for e in self.ops(trace, "aten::addmm"):
            self.assertGreaterEqual(e["ts"], rng[0]["ts"] - 0.001)
        with open(os.path.join(dirs[0], "summary.txt")) as f:
            self.assertIn("Steps: 0 captured\n", f.read())

    def test_native_program_whole(self):
        """A C program that never calls prof_step(): its ranges, all of
        them, in one window written at exit."""
        r, out = self.prof_run([NESTED_APP, "--no-steps", "4"],
                               policy_text="prof.schedule{ whole = true }\n")
        self.assertIn("done 4", r.stdout)
        trace, summary = self.one_window(r, out, "whole process")
        names = [e["name"] for e in trace["traceEvents"]
                 if e.get("ph") == "X" and e.get("name") in ("outer", "inner")]
        self.assertEqual(sorted(names), ["inner"] * 4 + ["outer"] * 4)
        self.assertRegex(summary, r"\n  outer +4 ")

    def test_native_program_that_steps_keeps_its_steps(self):
        """whole = true with steps: every step in the one window, the rest
        after the last step partial, as at any exit."""
        r, out = self.prof_run([NESTED_APP, "--steps", "3"],
                               policy_text="prof.schedule{ whole = true }\n")
        self.assertEqual(r.returncode, 0, r.stderr)
        dirs = window_dirs(out)
        self.assertEqual([os.path.basename(d) for d in dirs], ["window0_steps0-3"])
        steps = step_spans(load_trace(dirs[0]))
        self.assertEqual([n for n, _ in steps], [0, 1, 2, 3])
        self.assertNotIn("partial", steps[2][1].get("args", {}))
        self.assertTrue(steps[3][1]["args"].get("partial"))

    def test_whole_beside_window_keys_is_one_clear_line(self):
        r, _ = self.prof_run([NESTED_APP, "--no-steps", "1"],
                             policy_text="prof.schedule{ whole = true, active = 3 }\n")
        lines = [l for l in r.stderr.splitlines() if "prof.schedule" in l]
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertRegex(lines[0], r"policy\.lua:1: prof\.schedule: 'whole = true' records "
                         r"the whole process in one window, so 'active' has no meaning with it")


if __name__ == "__main__":
    unittest.main(verbosity=2)

"""End to end: the hang watchdog (prof.watchdog, prof.on_hang) and the view
of a hang across ranks (prof report). A C loop whose step 5 sleeps inside
"allreduce" longer than after_s: one hang report names the range and how
long it was open, holds the stalled thread's stack, on_hang runs, the log
says when steps resumed. A 2-rank PyTorch gloo job where rank 1 sleeps
inside a range while rank 0 waits in a collective: both ranks report, and
`prof report` names rank 1 as the odd one out."""
import glob
import json
import os
import re
import unittest

from harness import PROF, TESTBIN, TempDirTest, profhost_lines, run

APP = os.path.join(TESTBIN, "hang_app")

POLICY = """
prof.watchdog{ after_s = 1 }
prof.recorder{ steps = 4 }
prof.on_hang(function(h)
  local names = {}
  for _, t in ipairs(h.threads) do
    for _, r in ipairs(t.ranges) do
      names[#names + 1] = string.format("%d:%s:%.1f", t.tid, r.name, r.open_s or -1)
    end
  end
  print(string.format("on_hang hang=%d step=%d stalled=%.1f ranges=%s",
                      h.hang, h.step, h.stalled_s, table.concat(names, ",")))
end)
"""


def hang_dirs(out):
    return sorted(glob.glob(os.path.join(out, "*", "rank*", "hang*_step*")))


class CLoop(TempDirTest):
    def test_one_report_names_the_range_and_the_stack(self):
        policy = self.write("policy.lua", POLICY)
        out = os.path.join(self.tmp, "out")
        r = run([PROF, "run", "-s", policy, "-o", out, "--", APP, "--steps", "10",
                 "--hang-at", "5", "--hang-ms", "3500", "--helper"], timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("done 10", r.stdout)
        dirs = hang_dirs(out)
        # One report for the one hang, named by its step.
        self.assertEqual([os.path.basename(d) for d in dirs], ["hang0_step5"], r.stderr)
        with open(os.path.join(dirs[0], "hang_report.txt")) as f:
            text = f.read()
        # The stalled thread is inside allreduce (inside work), open for
        # about the watchdog's second when the report was written.
        m = re.search(r"inside `allreduce` for (\d+\.\d) s", text)
        self.assertTrue(m, text)
        self.assertGreaterEqual(float(m.group(1)), 0.9)
        self.assertLess(float(m.group(1)), 3.5)
        self.assertIn("inside `work` for", text)
        # The helper thread's range too, on its own thread.
        self.assertRegex(text, r'thread \d+ "loader"\n  inside `fetch` for \d+\.\d s')
        # The stalled thread's stack is there, down to the function that sleeps.
        main = text[text.index("(main thread)"):]
        main = main[:main.index("\n\n")]
        self.assertIn("stall_here", main)
        self.assertIn("nanosleep", main)
        self.assertIn("step 5 has not ended after", text)
        self.assertRegex(text, r"step 4: \d+\.\d+ ms")
        self.assertIn("Python stacks: none (not a Python process)", text)
        with open(os.path.join(dirs[0], "hang.json")) as f:
            h = json.load(f)
        self.assertEqual(h["step"], 5)
        self.assertEqual(h["rank"], 0)
        stepping = [t for t in h["threads"] if t["steps"]]
        self.assertEqual(len(stepping), 1)
        self.assertEqual([x["name"] for x in stepping[0]["ranges"]], ["work", "allreduce"])
        # on_hang ran once, with the threads' ranges.
        hooks = [l for l in r.stderr.splitlines() if "on_hang hang=" in l]
        self.assertEqual(len(hooks), 1, r.stderr)
        self.assertIn("step=5", hooks[0])
        self.assertRegex(hooks[0], r":allreduce:\d\.\d")
        self.assertRegex(hooks[0], r":fetch:\d\.\d")
        # The log says where the report went and how long the step stalled.
        lines = profhost_lines(r.stderr)
        self.assertTrue(any("hang report 0 -> " + dirs[0] in l for l in lines), lines)
        resumed = [l for l in lines if "steps resumed" in l]
        self.assertEqual(len(resumed), 1, lines)
        m = re.search(r"step 5 ended after (\d+\.\d) s", resumed[0])
        self.assertTrue(m, resumed[0])
        self.assertGreaterEqual(float(m.group(1)), 3.4)
        # With the recorder on, a dump of the last steps comes with it.
        dumps = glob.glob(os.path.join(out, "*", "rank0", "recorder0_steps*"))
        self.assertEqual(len(dumps), 1, r.stderr)
        with open(os.path.join(dumps[0], "summary.txt")) as f:
            self.assertIn("(hang 0)", f.read())

    def test_steady_loop_and_dump_off(self):
        policy = self.write("policy.lua", """
prof.watchdog{ after_s = 1, dump = false }
prof.recorder{ steps = 4 }
""")
        out = os.path.join(self.tmp, "out")
        # No hang: no report.
        r = run([PROF, "run", "-s", policy, "-o", out, "--", APP, "--steps", "20",
                 "--hang-at", "-1"], timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(hang_dirs(out), [])
        self.assertNotIn("watchdog", r.stderr)
        # A hang with dump = false: the report, no dump.
        r = run([PROF, "run", "-s", policy, "-o", out, "--", APP, "--steps", "8",
                 "--hang-at", "3", "--hang-ms", "1600"], timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(hang_dirs(out)), 1, r.stderr)
        self.assertEqual(glob.glob(os.path.join(out, "*", "rank0", "recorder*")), [])

    def test_bad_key_is_one_line(self):
        policy = self.write("policy.lua", "prof.watchdog{ after = 3 }\n")
        r = run([PROF, "run", "-s", policy, "-o", os.path.join(self.tmp, "out"), "--",
                 APP, "--steps", "1"], timeout=60)
        # The program runs on, unprofiled; the line names the key and the fix.
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("policy.lua:1: prof.watchdog: unknown key 'after' (valid keys: "
                      "after_s, dump, factor); profiling is off", r.stderr)


if __name__ == "__main__":
    unittest.main()

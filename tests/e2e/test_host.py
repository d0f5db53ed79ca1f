"""End to end: real programs under the host, checked through what a user sees:
the windows written, the steps and ranges in each trace, the exit status, and
the one-line errors for bad policies."""
import glob
import os
import re
import signal
import subprocess
import unittest

from harness import (BUILD, LIB, PROF, PYTHON, SANITIZE, TESTBIN, TempDirTest, base_env,
                     load_trace, profhost_lines, run, step_spans, window_dirs)

STEPS_APP = os.path.join(TESTBIN, "steps_app")

# torch.profiler.schedule(skip_first=5, wait=3, warmup=2, active=4, repeat=3):
# cycles of 9 steps after step 5; active steps are the last 4 of each cycle.
SCHEDULE = "prof.schedule { skip_first = 5, wait = 3, warmup = 2, active = 4, cycles = 3 }\n"
EXPECTED = [(10, 13), (19, 22), (28, 31)]


class ScheduledWindows(TempDirTest):
    def check_windows(self, out, expected, ranges=1):
        dirs = window_dirs(out)
        self.assertEqual([os.path.basename(d) for d in dirs],
                         ["window%d_steps%d-%d" % (i, a, b) for i, (a, b) in enumerate(expected)])
        for i, (d, (a, b)) in enumerate(zip(dirs, expected)):
            trace = load_trace(d)
            self.assertEqual(trace["schemaVersion"], 1)
            self.assertEqual(trace["profhost"]["window"], i)
            self.assertEqual(trace["profhost"]["first_step"], a)
            self.assertEqual(trace["profhost"]["last_step"], b)
            steps = step_spans(trace)
            self.assertEqual([n for n, _ in steps], list(range(a, b + 1)))
            for e in (e for _, e in steps):
                self.assertEqual(e["cat"], "user_annotation")
            # Steps tile the window: each starts where the previous ended.
            for (_, e1), (_, e2) in zip(steps, steps[1:]):
                self.assertAlmostEqual(e1["ts"] + e1["dur"], e2["ts"], delta=0.002)
            names = [e["name"] for e in trace["traceEvents"] if e.get("ph") == "X"]
            self.assertEqual(names.count("outer"), b - a + 1)
            self.assertEqual(names.count("inner0"), (b - a + 1) * (1 if ranges else 0))
            marks = [e for e in trace["traceEvents"] if e.get("ph") == "i"]
            self.assertEqual(len(marks), b - a + 1)
            # Every range lies inside a step of the same thread.
            for e in trace["traceEvents"]:
                if e.get("name") in ("outer", "inner0"):
                    self.assertTrue(any(s["ts"] <= e["ts"] and
                                        e["ts"] + e["dur"] <= s["ts"] + s["dur"] + 0.001
                                        for _, s in steps), e)
        self.assertEqual(glob.glob(os.path.join(out, "**", "*.tmp.*"), recursive=True), [])

    def test_prof_run_writes_exactly_the_scheduled_windows(self):
        policy = self.write("policy.lua", SCHEDULE)
        out = os.path.join(self.tmp, "out")
        r = run([PROF, "run", "-s", policy, "-o", out, "--", STEPS_APP, "--steps", "40"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("done 40", r.stdout)
        self.check_windows(out, EXPECTED)
        self.assertIn("wrote 3 window", r.stderr)

    def test_preload_without_launcher(self):
        policy = self.write("policy.lua", SCHEDULE)
        out = os.path.join(self.tmp, "out")
        env = base_env({"PROF_SCRIPT": policy, "PROF_OUTPUT_DIR": out, "LD_PRELOAD": LIB})
        r = run([STEPS_APP, "--steps", "40"], env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.check_windows(out, EXPECTED)
        # One line per window on rank 0, pointing at its directory (plus, on
        # a machine with CUPTI but no GPU, one line saying GPU capture is off).
        lines = [l for l in profhost_lines(r.stderr) if "GPU capture is off" not in l]
        self.assertEqual(len(lines), 3, r.stderr)
        for line, d in zip(lines, window_dirs(out)):
            self.assertIn(d, line)

    def test_set_overrides_a_policy_field(self):
        policy = self.write("policy.lua", SCHEDULE)
        out = os.path.join(self.tmp, "out")
        r = run([PROF, "run", "-s", policy, "-o", out, "--set", "schedule.active=2",
                 "--set", "schedule.cycles=1", STEPS_APP, "--steps", "40"])
        self.assertEqual(r.returncode, 0, r.stderr)
        # skip 5, wait 3, warmup 2, active 2: steps 10-11, one cycle.
        self.check_windows(out, [(10, 11)])

    def test_python_script_with_profhost_step(self):
        script = self.write("loop.py", (
            "import time, profhost\n"
            "assert profhost.loaded()\n"
            "for i in range(12):\n"
            "    with profhost.range('work'):\n"
            "        time.sleep(0.002)\n"
            "    profhost.step()\n"
            "print('ok')\n"))
        policy = self.write("policy.lua", "prof.schedule { wait = 2, warmup = 1, active = 3, cycles = 2 }\n")
        out = os.path.join(self.tmp, "out")
        r = run([PROF, "run", "-s", policy, "-o", out, "--", PYTHON, script])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("ok", r.stdout)
        dirs = window_dirs(out)
        self.assertEqual([os.path.basename(d) for d in dirs],
                         ["window0_steps3-5", "window1_steps9-11"])
        trace = load_trace(dirs[0])
        self.assertEqual([n for n, _ in step_spans(trace)], [3, 4, 5])
        work = [e for e in trace["traceEvents"] if e.get("name") == "work"]
        self.assertEqual(len(work), 3)
        for e in work:
            self.assertGreaterEqual(e["dur"], 2000 * 0.9)
        # The run directory is named after the script.
        self.assertTrue(os.path.basename(os.path.dirname(os.path.dirname(dirs[0]))).startswith("loop-"))

    def test_capture_now_from_a_step_hook(self):
        policy = self.write("policy.lua", (
            "prof.on_step(function(s)\n"
            "  if s.step == 7 then prof.capture_now { steps = 3, reason = 'step 7 was slow' } end\n"
            "end)\n"))
        out = os.path.join(self.tmp, "out")
        r = run([PROF, "run", "-s", policy, "-o", out, STEPS_APP, "--steps", "20"])
        self.assertEqual(r.returncode, 0, r.stderr)
        dirs = window_dirs(out)
        # Requested while step 8 runs: the window opens at the next boundary.
        self.assertEqual([os.path.basename(d) for d in dirs], ["window0_steps9-11"])
        trace = load_trace(dirs[0])
        self.assertEqual(trace["profhost"]["reason"], "step 7 was slow")
        self.assertEqual([n for n, _ in step_spans(trace)], [9, 10, 11])

    def test_a_refused_capture_now_says_why_once(self):
        # The second request in the same step is refused by the host; the
        # message names prof.capture_now once (not "capture_now: " again).
        policy = self.write("policy.lua", (
            "prof.on_step(function(s)\n"
            "  if s.step == 7 then\n"
            "    prof.capture_now { steps = 3 }\n"
            "    prof.capture_now { steps = 3 }\n"
            "  end\n"
            "end)\n"))
        out = os.path.join(self.tmp, "out")
        r = run([PROF, "run", "-s", policy, "-o", out, STEPS_APP, "--steps", "20"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("profhost: %s:4: prof.capture_now: a capture request is already queued "
                      "(in prof.on_step; hook disabled)" % policy, profhost_lines(r.stderr))
        self.assertEqual([os.path.basename(d) for d in window_dirs(out)], ["window0_steps9-11"])

    def test_gzip_and_tensorboard_layout(self):
        policy = self.write("policy.lua", (
            "prof.schedule { wait = 1, active = 2, cycles = 1 }\n"
            "prof.export { chrome = { gzip = true }, tensorboard = true }\n"))
        out = os.path.join(self.tmp, "out")
        env = base_env({"RANK": "3", "WORLD_SIZE": "8"})
        r = run([PROF, "run", "-s", policy, "-o", out, STEPS_APP, "--steps", "6"], env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        dirs = window_dirs(out)
        self.assertEqual(len(dirs), 1)
        self.assertTrue(dirs[0].endswith("rank3/window0_steps1-2"), dirs[0])
        self.assertTrue(os.path.exists(os.path.join(dirs[0], "trace.json.gz")))
        trace = load_trace(dirs[0])
        self.assertEqual(trace["distributedInfo"], {"rank": 3, "world_size": 8})
        # one folder per window in the TensorBoard folder (docs/output.md)
        tb = glob.glob(os.path.join(out, "*", "tensorboard", "*", "*.pt.trace.json.gz"))
        self.assertEqual(len(tb), 1, tb)
        self.assertEqual(os.path.basename(os.path.dirname(tb[0])), "window0_steps1-2")
        self.assertRegex(os.path.basename(tb[0]), r"^.+_\d+\.\d+\.pt\.trace\.json\.gz$")


class ExitPaths(TempDirTest):
    POLICY = "prof.schedule { wait = 8, active = 6, cycles = 1 }\n"  # steps 8-13

    def test_sigterm_mid_window_keeps_the_trace_and_dies_of_sigterm(self):
        policy = self.write("policy.lua", self.POLICY)
        out = os.path.join(self.tmp, "out")
        env = base_env({"PROF_SCRIPT": policy, "PROF_OUTPUT_DIR": out, "LD_PRELOAD": LIB})
        r = run([STEPS_APP, "--steps", "40", "--term-at", "10"], env=env)
        self.assertEqual(r.returncode, -signal.SIGTERM, r.stderr)
        self.assertNotIn("done", r.stdout)
        dirs = window_dirs(out)
        self.assertEqual([os.path.basename(d) for d in dirs], ["window0_steps8-10"])
        trace = load_trace(dirs[0])
        steps = step_spans(trace)
        self.assertEqual([n for n, _ in steps], [8, 9, 10])
        self.assertTrue(steps[-1][1]["args"].get("partial"))
        # The ranges open when the signal came are clipped at the end.
        clipped = [e for e in trace["traceEvents"] if e.get("args", {}).get("clipped_end")]
        self.assertEqual(sorted(e["name"] for e in clipped), ["inner0", "outer"])

    def test_sigterm_through_the_launcher(self):
        policy = self.write("policy.lua", self.POLICY)
        out = os.path.join(self.tmp, "out")
        r = run([PROF, "run", "-s", policy, "-o", out, STEPS_APP, "--steps", "40", "--term-at", "9"])
        self.assertEqual(r.returncode, 128 + signal.SIGTERM, r.stderr)
        self.assertEqual([os.path.basename(d) for d in window_dirs(out)], ["window0_steps8-9"])

    def test_exit_status_is_the_programs(self):
        policy = self.write("policy.lua", self.POLICY)
        out = os.path.join(self.tmp, "out")
        r = run([PROF, "run", "-s", policy, "-o", out, STEPS_APP, "--steps", "12", "--exit", "3"])
        self.assertEqual(r.returncode, 3, r.stderr)
        # Exit during the window (step 12 of 8-13): written with what it recorded.
        self.assertEqual([os.path.basename(d) for d in window_dirs(out)], ["window0_steps8-12"])
        trace = load_trace(window_dirs(out)[0])
        self.assertTrue(step_spans(trace)[-1][1]["args"].get("partial"))

    def test_segfault_still_writes_best_effort(self):
        policy = self.write("policy.lua", self.POLICY)
        out = os.path.join(self.tmp, "out")
        env = base_env({"PROF_SCRIPT": policy, "PROF_OUTPUT_DIR": out, "LD_PRELOAD": LIB})
        if os.environ.get("PROFHOST_SANITIZE"):
            self.skipTest("AddressSanitizer owns SIGSEGV in a sanitizer build")
        r = run([STEPS_APP, "--steps", "40", "--segv-at", "9"], env=env)
        self.assertEqual(r.returncode, -signal.SIGSEGV, r.stderr)
        self.assertEqual([os.path.basename(d) for d in window_dirs(out)], ["window0_steps8-9"])

    def test_no_window_means_no_files_and_no_output_at_quiet(self):
        policy = self.write("policy.lua", "prof.schedule { skip_first = 100, active = 1 }\n")
        out = os.path.join(self.tmp, "out")
        env = base_env({"PROF_SCRIPT": policy, "PROF_OUTPUT_DIR": out, "LD_PRELOAD": LIB,
                        "PROF_LOG": "quiet"})
        r = run([STEPS_APP, "--steps", "10"], env=env)
        self.assertEqual(r.returncode, 0)
        self.assertEqual(r.stderr, "")
        self.assertFalse(os.path.exists(out))


class BadPolicies(TempDirTest):
    CASES = {
        "syntax": ("prof.schedule { active = 3\nprof.output { dir = 'x' }\n",
                   r"policy\.lua:\d+:"),
        "unknown_key": ("prof.schedule { wait = 1,\n  activ = 3 }\n",
                        r"policy\.lua:1: prof\.schedule: unknown key 'activ'"),
        "zero_active": ("\nprof.schedule { active = 0 }\n",
                        r"policy\.lua:2: prof\.schedule: 'active'.*got 0"),
        "os_exit": ("prof.schedule { active = 1 }\nos.exit(3)\n",
                    r"policy\.lua:2: .*os\.exit"),
        "loop_at_load": ("local x = 0\nwhile true do x = x + 1 end\n",
                         r"policy\.lua:2: .*budget"),
        "hook_loops": ("prof.schedule { wait = 2, active = 2 }\n"
                       "prof.on_step(function(s)\n  while true do end\nend)\n",
                       r"policy\.lua:3: .*budget"),
    }

    def run_case(self, name, strict):
        text, pattern = self.CASES[name]
        policy = self.write("policy.lua", text)
        out = os.path.join(self.tmp, "out")
        env = base_env({"PROF_STRICT": "1"} if strict else None)
        r = run([PROF, "run", "-s", policy, "-o", out, STEPS_APP, "--steps", "10",
                 "--sleep-us", "100", "--exit", "4"], env=env, timeout=60)
        return r, pattern

    def test_bad_policy_reports_one_line_and_the_target_runs_on(self):
        for name in self.CASES:
            with self.subTest(name):
                r, pattern = self.run_case(name, strict=False)
                self.assertEqual(r.returncode, 4, r.stderr)
                self.assertIn("done 10", r.stdout)
                lines = [l for l in profhost_lines(r.stderr) if "window" not in l]
                self.assertEqual(len(lines), 1, r.stderr)
                self.assertRegex(lines[0], pattern)

    def test_strict_makes_a_bad_policy_fatal(self):
        for name in self.CASES:
            with self.subTest(name):
                r, pattern = self.run_case(name, strict=True)
                self.assertEqual(r.returncode, 70, r.stderr)
                self.assertRegex(r.stderr, pattern)
                self.assertIn("PROF_STRICT=1", r.stderr)

    def test_bad_environment_values(self):
        for var, value, pattern in (("PROF_LOG", "verbose", r"PROF_LOG='verbose'.*quiet, info or debug"),
                                    ("PROF_STRICT", "maybe", r"PROF_STRICT='maybe'"),
                                    ("PROF_DISABLE", "perhaps", r"PROF_DISABLE='perhaps'")):
            with self.subTest(var):
                env = base_env({"LD_PRELOAD": LIB, var: value,
                                "PROF_OUTPUT_DIR": os.path.join(self.tmp, "o")})
                r = run([STEPS_APP, "--steps", "3", "--sleep-us", "10"], env=env)
                self.assertEqual(r.returncode, 0)
                lines = profhost_lines(r.stderr)
                self.assertEqual(len(lines), 1, r.stderr)
                self.assertRegex(lines[0], pattern)

    def test_disabled_host_does_nothing(self):
        policy = self.write("policy.lua", "prof.schedule { active = 2 }\n")
        out = os.path.join(self.tmp, "out")
        env = base_env({"PROF_SCRIPT": policy, "PROF_OUTPUT_DIR": out, "LD_PRELOAD": LIB,
                        "PROF_DISABLE": "1"})
        r = run([STEPS_APP, "--steps", "5", "--sleep-us", "10"], env=env)
        self.assertEqual(r.returncode, 0)
        self.assertEqual(r.stderr, "")
        self.assertFalse(os.path.exists(out))


class InstallTree(TempDirTest):
    def test_installed_prof_runs_from_its_prefix(self):
        prefix = os.path.join(self.tmp, "prefix")
        r = run(["cmake", "--install", BUILD, "--prefix", prefix])
        self.assertEqual(r.returncode, 0, r.stderr)
        for rel in ("bin/prof", "lib/libprofhost.so", "lib/libprofhost-core.so",
                    "include/profhost/prof.h", "share/profhost/lua/prof/init.lua",
                    "share/profhost/python/profhost/__init__.py"):
            self.assertTrue(os.path.exists(os.path.join(prefix, rel)), rel)
        policy = self.write("policy.lua", "prof.schedule { wait = 1, active = 2, cycles = 1 }\n")
        out = os.path.join(self.tmp, "out")
        r = run([os.path.join(prefix, "bin", "prof"), "run", "-s", policy, "-o", out,
                 STEPS_APP, "--steps", "5", "--sleep-us", "100"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([os.path.basename(d) for d in window_dirs(out)], ["window0_steps1-2"])
        self.assertIn(os.path.join(prefix, "lib", "libprofhost.so"), run(
            [os.path.join(prefix, "bin", "prof"), "run", "--", "sh", "-c", "echo $LD_PRELOAD"]).stdout)


class SymbolHygiene(TempDirTest):
    def test_exports_only_the_public_abi(self):
        r = run(["nm", "-D", "--defined-only", LIB])
        names = sorted(l.split()[-1] for l in r.stdout.splitlines() if l.strip())
        self.assertTrue(names, r.stderr)
        for n in names:
            self.assertTrue(n.startswith("prof_") or n in ("InitializeInjection",
                                                           "InitializeInjectionNvtx2"), n)
        self.assertIn("prof_step", names)

    def test_target_with_lua51_cjson_and_backtrace_is_unchanged(self):
        app = os.path.join(TESTBIN, "hygiene_app")
        self.assertTrue(os.path.exists(app), "hygiene_app not built (install liblua5.1-0-dev)")
        plain = run([app])
        self.assertEqual(plain.returncode, 0, plain.stderr)
        policy = self.write("policy.lua", "prof.schedule { active = 1 }\n")
        env = base_env({"LD_PRELOAD": LIB, "PROF_SCRIPT": policy,
                        "PROF_OUTPUT_DIR": os.path.join(self.tmp, "out")})
        hosted = run([app], env=env)
        self.assertEqual(hosted.returncode, 0, hosted.stderr)
        self.assertEqual(hosted.stdout, plain.stdout)
        self.assertIn("lua: Lua 5.1 true 0.5", plain.stdout)
        self.assertIn("backtrace: ok", plain.stdout)
        # glibc's backtrace() (AddressSanitizer's interceptor in a sanitizer
        # build), never libunwind's.
        self.assertRegex(plain.stdout, r"backtrace from: %s" %
                         (r"libasan\.so\.\d+" if SANITIZE else r"libc\.so\.6"))
        self.assertIn("lua_newstate from: liblua5.1.so.0", plain.stdout)
        self.assertIn("unw_backtrace from: (none)", plain.stdout)
        self.assertIn("deflate from: (none)", plain.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)

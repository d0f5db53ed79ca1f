"""End to end: the flight recorder (prof.recorder, prof.dump). A steady
loop with one slow step, a policy that dumps on a step slower than 3x the
median: the dump holds that slow step, by number and duration; memory
stays bounded over many steps; dumps are counted against max_dumps; bad
keys give one line."""
import glob
import os
import re
import resource
import shutil
import signal
import tempfile
import unittest

from harness import (LIB, PROF, PYTHON, SANITIZE, SOURCE, TESTBIN, TempDirTest, base_env,
                     load_trace, profhost_lines, run, step_spans, window_dirs)
from test_python import HAS_TORCH, PHASES, inside, phase_events

APP = os.path.join(TESTBIN, "recorder_app")
STEADY_LOOP = os.path.join(SOURCE, "tests", "e2e", "workloads", "python", "steady_loop.py")

SLOW_POLICY = """
prof.recorder{ steps = 10 }
prof.on_step(function(s)
  -- 3x the median, and at least 100 ms: on a loaded test machine a 1 ms
  -- step can take tens of ms
  if s.step >= 5 and s.duration_ms > 3 * s.median_ms and s.duration_ms > 100 then
    prof.dump{ steps = 3, reason = "slow" }
  end
end)
"""


def recorder_dirs(out):
    return sorted(glob.glob(os.path.join(out, "*", "rank*", "recorder*_steps*")))


def slow_step_dumps(test, out, steps, stderr):
    """The dump folders of SLOW_POLICY's run whose steps are `steps`
    ("35-37"): one. A loaded machine can make another step slower than the
    policy's bar, and the policy then dumps that one too, as it should: the
    dumps of those steps are not the subject."""
    dirs = [d for d in recorder_dirs(out)
            if os.path.basename(d).split("_steps")[1] == steps]
    test.assertEqual(len(dirs), 1, (recorder_dirs(out), stderr))
    return dirs


class Dumps(TempDirTest):
    def test_dump_holds_the_slow_step(self):
        policy = self.write("policy.lua", SLOW_POLICY)
        out = os.path.join(self.tmp, "out")
        r = run([PROF, "run", "-s", policy, "-o", out, "--", APP, "--steps", "60",
                 "--slow-at", "37", "--slow-ms", "200"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("done 60", r.stdout)
        self.assertEqual(window_dirs(out), [])
        d = slow_step_dumps(self, out, "35-37", r.stderr)[0]
        for name in ("trace.json", "summary.txt", "key_averages.txt", "capture.phb"):
            self.assertTrue(os.path.exists(os.path.join(d, name)) or
                            os.path.exists(os.path.join(d, name + ".gz")), name)
        trace = load_trace(d)
        self.assertEqual(trace["profhost"]["reason"], "slow")
        self.assertTrue(trace["profhost"]["recorder"])
        self.assertEqual(trace["profhost"]["first_step"], 35)
        self.assertEqual(trace["profhost"]["last_step"], 37)
        steps = step_spans(trace)
        self.assertEqual([n for n, _ in steps], [35, 36, 37])
        durs = {n: e["dur"] for n, e in steps}
        # The slow step by duration (us): 200 ms more than the others.
        self.assertGreaterEqual(durs[37], 200000)
        self.assertLess(durs[35], 100000)
        self.assertLess(durs[36], 100000)
        events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
        work = [e for e in events if e["name"] == "work"]
        # One "work" per step, each inside its step; nothing from before.
        self.assertEqual(len(work), 3)
        for w, (_, s) in zip(sorted(work, key=lambda e: e["ts"]), steps):
            self.assertGreaterEqual(w["ts"], s["ts"] - 0.001)
            self.assertLessEqual(w["ts"] + w["dur"], s["ts"] + s["dur"] + 0.001)
        self.assertTrue(any(w["dur"] >= 200000 for w in work))
        self.assertEqual(len([e for e in trace["traceEvents"]
                              if e.get("ph") == "i" and e["name"] == "tick"]), 3)
        # The range around the whole loop, open across segments: once,
        # from the dump's start.
        train = [e for e in events if e["name"] == "train"]
        self.assertEqual(len(train), 1)
        self.assertLessEqual(train[0]["ts"], steps[0][1]["ts"] + 0.001)
        with open(os.path.join(d, "summary.txt")) as f:
            summary = f.read()
        self.assertRegex(summary, r"recorder dump \d+, steps 35-37 \(slow\)")

    @unittest.skipUnless(HAS_TORCH, "torch is not installed for /usr/bin/python3")
    def test_torch_loop_dump_holds_the_slow_step(self):
        # A PyTorch loop that never calls profhost: its steps are the
        # optimizer's; iteration 25 sleeps 300 ms in its step.
        policy = self.write("policy.lua", SLOW_POLICY)
        out = os.path.join(self.tmp, "out")
        r = run([PROF, "run", "-s", policy, "-o", out, "--", PYTHON, STEADY_LOOP,
                 "--steps", "40", "--blocks", "2", "--slow-at", "25", "--slow-ms", "300"],
                timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("done 40", r.stdout)
        # The dump of the 300 ms step: the one whose last step is longest (a
        # loaded machine may make another step slow enough for a dump too).
        dirs = recorder_dirs(out)
        self.assertGreaterEqual(len(dirs), 1, r.stderr)
        dirs = [max(dirs, key=lambda d: step_spans(load_trace(d))[-1][1]["dur"])]
        trace = load_trace(dirs[0])
        steps = step_spans(trace)
        self.assertEqual(len(steps), 3, r.stderr)
        slow, last = max(steps, key=lambda p: p[1]["dur"]), steps[-1]
        # The slow step is the dump's last, by number and by duration.
        self.assertEqual(slow[0], last[0])
        self.assertEqual(trace["profhost"]["last_step"], last[0])
        self.assertTrue(os.path.basename(dirs[0]).endswith("-%d" % last[0]), dirs[0])
        self.assertGreaterEqual(last[1]["dur"], 300000)
        self.assertEqual(trace["profhost"]["reason"], "slow")
        # Between windows the bridge times the step phases for the recorder:
        # every dumped step holds each of them.
        phases = phase_events(trace)
        for n, s in steps:
            self.assertEqual(set(p["phase"] for p in phases if inside(p, s)), set(PHASES),
                             "step %d" % n)

    def test_dump_holds_cpu_samples_of_the_slow_step(self):
        # Wall-clock samples between windows: the slow step's 300 ms in
        # nanosleep are in the dump, nothing from before its first step.
        policy = self.write("policy.lua", SLOW_POLICY +
                            'prof.capture{ cpu_samples = { hz = 200, clock = "wall" } }\n')
        out = os.path.join(self.tmp, "out")
        r = run([PROF, "run", "-s", policy, "-o", out, "--", APP, "--steps", "60",
                 "--slow-at", "37", "--slow-ms", "300"])
        self.assertEqual(r.returncode, 0, r.stderr)
        dirs = slow_step_dumps(self, out, "35-37", r.stderr)
        trace = load_trace(dirs[0])
        self.assertEqual(trace["profhost"]["cpu_samples"]["clock"], "wall")
        steps = dict(step_spans(trace))
        samples = [e for e in trace["traceEvents"] if e.get("cat") == "cpu_sample"]
        first = steps[35]["ts"]
        self.assertEqual([e for e in samples if e["ts"] < first - 1000], [])
        slow = steps[37]
        in_slow = [e for e in samples if e["tid"] == slow["tid"] and
                   slow["ts"] <= e["ts"] <= slow["ts"] + slow["dur"]]
        sleeping = [e for e in in_slow if "nanosleep" in e["args"]["stack"]]
        # 300 ms at 200 Hz: 60 periods, most in nanosleep (a loaded
        # machine may delay ticks: each late one weighs more).
        self.assertGreaterEqual(sum(e["args"].get("weight", 1) for e in sleeping), 30,
                                [e["args"]["stack"] for e in in_slow][:5])
        with open(os.path.join(dirs[0], "stacks.txt")) as f:
            self.assertIn("nanosleep", f.read())

    def test_recorder_cpu_samples_off(self):
        policy = self.write("policy.lua", SLOW_POLICY.replace(
            "prof.recorder{ steps = 10 }", "prof.recorder{ steps = 10, cpu_samples = false }") +
            'prof.capture{ cpu_samples = { hz = 200, clock = "wall" } }\n')
        out = os.path.join(self.tmp, "out")
        r = run([PROF, "run", "-s", policy, "-o", out, "--", APP, "--steps", "60",
                 "--slow-at", "37", "--slow-ms", "200"])
        self.assertEqual(r.returncode, 0, r.stderr)
        dirs = slow_step_dumps(self, out, "35-37", r.stderr)
        trace = load_trace(dirs[0])
        self.assertEqual([e for e in trace["traceEvents"] if e.get("cat") == "cpu_sample"], [])

    def test_max_dumps_bounds_the_dumps(self):
        policy = self.write("policy.lua", """
prof.recorder{ steps = 4, max_dumps = 2 }
-- no built-in reports: while one runs on the host thread the VM is busy
-- and a step hook is skipped (as for any hook)
prof.export{ report = false }
refused = 0
prof.on_step(function(s)
  if s.step % 10 == 9 then
    local ok, why = prof.dump{ steps = 2, reason = "every tenth" }
    if not ok then
      assert(why:find("max_dumps", 1, true), why)
      refused = refused + 1
    end
  end
end)
""")
        out = os.path.join(self.tmp, "out")
        r = run([PROF, "run", "-s", policy, "-o", out, "--", APP, "--steps", "45",
                 "--sleep-us", "200"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([os.path.basename(d) for d in recorder_dirs(out)],
                         ["recorder0_steps8-9", "recorder1_steps18-19"], r.stderr)
        # The refusals were answers, not errors.
        self.assertNotIn("error", r.stderr.lower())

    def test_dump_storm_writes_every_dump_it_takes(self):
        # a dump on every 0.2 ms step: they come faster than the host
        # thread writes them. A dump taken is written; one that would wait
        # behind a full queue is refused (and does not count against
        # max_dumps), never taken and then skipped.
        policy = self.write("policy.lua", """
prof.recorder{ steps = 4, max_dumps = 8 }
prof.export{ report = false }
prof.on_step(function(s) prof.dump{ steps = 1, reason = "storm" } end)
""")
        out = os.path.join(self.tmp, "out")
        r = run([PROF, "run", "-s", policy, "-o", out, "--", APP, "--steps", "400",
                 "--sleep-us", "200"])
        self.assertEqual(r.returncode, 0, r.stderr)
        names = [os.path.basename(d).split("_")[0] for d in recorder_dirs(out)]
        self.assertEqual(sorted(names), ["recorder%d" % k for k in range(8)], r.stderr)
        self.assertNotIn("skipping window", r.stderr)
        self.assertNotIn("is not written", r.stderr)

    def test_dump_without_recorder_is_refused(self):
        policy = self.write("policy.lua", """
prof.on_step(function(s)
  if s.step == 3 then
    local ok, why = prof.dump{ steps = 2 }
    assert(ok == false and why:find("recorder is off", 1, true), tostring(why))
  end
end)
""")
        out = os.path.join(self.tmp, "out")
        r = run([PROF, "run", "-s", policy, "-o", out, "--", APP, "--steps", "10",
                 "--sleep-us", "200"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(recorder_dirs(out), [])
        self.assertNotIn("assert", r.stderr)

    def test_scheduled_windows_still_work_with_the_recorder(self):
        policy = self.write("policy.lua", """
prof.recorder{ steps = 4 }
prof.schedule{ wait = 5, active = 3, cycles = 2 }
prof.export{ report = false }
local done, during = false, nil
prof.on_step(function(s)
  if s.step == 6 then
    -- inside window 0: refused, the window holds these steps
    local ok, why = prof.dump{ steps = 1 }
    assert(not ok and why:find("window 0 is recording", 1, true), tostring(why))
  end
  -- a hook is skipped while the host thread's VM is busy: try until taken
  if s.step >= 30 and not done then
    done = prof.dump{ steps = 3, reason = "after" }
  end
end)
""")
        out = os.path.join(self.tmp, "out")
        r = run([PROF, "run", "-s", policy, "-o", out, "--", APP, "--steps", "40",
                 "--sleep-us", "300"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual([os.path.basename(d) for d in window_dirs(out)],
                         ["window0_steps5-7", "window1_steps13-15"], r.stderr)
        for d in window_dirs(out):
            trace = load_trace(d)
            a = trace["profhost"]["first_step"]
            self.assertEqual([n for n, _ in step_spans(trace)], [a, a + 1, a + 2])
            self.assertEqual(len([e for e in trace["traceEvents"]
                                  if e.get("name") == "work"]), 3)
        dumps = [os.path.basename(d) for d in recorder_dirs(out)]
        self.assertEqual(len(dumps), 1, r.stderr)
        m = re.match(r"recorder0_steps(\d+)-(\d+)$", dumps[0])
        self.assertTrue(m, dumps)
        a, b = int(m.group(1)), int(m.group(2))
        self.assertEqual(b - a, 2)
        self.assertGreaterEqual(b, 30)
        trace = load_trace(recorder_dirs(out)[0])
        self.assertEqual([n for n, _ in step_spans(trace)], [a, a + 1, b])
        self.assertNotIn("assert", r.stderr)


class Api(TempDirTest):
    """prof_dump() in C and profhost.dump() in Python, and merging."""

    def prof_run(self, policy_text, args, env=None, cwd=None):
        policy = self.write("policy.lua", policy_text)
        out = os.path.join(self.tmp, "out")
        r = run([PROF, "run", "-s", policy, "-o", out, "--"] + args, env=env,
                cwd=cwd)
        return r, out

    def test_prof_dump_from_c_writes_the_slow_step(self):
        r, out = self.prof_run("prof.recorder{ steps = 10 }\n",
                               [APP, "--steps", "60", "--slow-at", "37",
                                "--slow-ms", "150", "--dump", "3"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("dump 0\n", r.stdout)
        dirs = recorder_dirs(out)
        self.assertEqual([os.path.basename(d) for d in dirs], ["recorder0_steps35-37"],
                         r.stderr)
        trace = load_trace(dirs[0])
        self.assertEqual(trace["profhost"]["reason"], "slow step")
        steps = step_spans(trace)
        self.assertEqual([n for n, _ in steps], [35, 36, 37])
        self.assertGreaterEqual(dict(steps)[37]["dur"], 150000)
        with open(os.path.join(dirs[0], "summary.txt")) as f:
            self.assertIn("recorder dump 0, steps 35-37 (slow step)", f.read())

    def test_repeated_requests_merge_into_one_dump(self):
        # Three requests right after the slow step (nothing completed in
        # between): all taken, one folder, the merge said once (debug).
        r, out = self.prof_run("prof.recorder{ steps = 10 }\n",
                               [APP, "--steps", "50", "--slow-at", "30",
                                "--slow-ms", "50", "--dump", "3", "--dump-times", "3"],
                               env=base_env({"PROF_LOG": "debug"}))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.count("dump 0\n"), 3, r.stdout)
        self.assertEqual([os.path.basename(d) for d in recorder_dirs(out)],
                         ["recorder0_steps28-30"], r.stderr)
        self.assertEqual(r.stderr.count("merged into recorder dump 0"), 1, r.stderr)

    def test_policy_requests_merge_and_later_steps_dump_again(self):
        r, out = self.prof_run("""
prof.recorder{ steps = 10 }
prof.export{ report = false }
prof.on_step(function(s)
  if s.step == 20 then
    assert(prof.dump{ steps = 3, reason = "first" })
    -- the same steps again, and fewer of them: merged, still true
    assert(prof.dump{ steps = 3, reason = "again" })
    assert(prof.dump{ steps = 1, reason = "fewer" })
  elseif s.step == 21 then
    -- step 21 completed since: a dump of its own
    assert(prof.dump{ steps = 3, reason = "next" })
  end
end)
""", [APP, "--steps", "30", "--sleep-us", "300"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("assert", r.stderr)
        dirs = recorder_dirs(out)
        self.assertEqual([os.path.basename(d) for d in dirs],
                         ["recorder0_steps18-20", "recorder1_steps21-21"], r.stderr)
        self.assertEqual(load_trace(dirs[0])["profhost"]["reason"], "first")
        self.assertEqual(load_trace(dirs[1])["profhost"]["reason"], "next")

    def test_status_lists_dumps_and_reports_name_them(self):
        r, out = self.prof_run("""
prof.recorder{ steps = 4 }
local told = false
prof.on_step(function(s)
  if s.step == 10 then assert(prof.dump{ steps = 2, reason = "first" }) end
  -- once the first is written, prof.status() lists it: said through the
  -- second dump's reason (a hook is skipped while a report runs: retried)
  if s.step > 12 and not told then
    local st = prof.status()
    if st.dumps_written == 1 then
      told = prof.dump{ steps = 1, reason = string.format("status %d %s %d",
        st.dumps_written, st.dumps[1]:match("[^/]+$"), st.windows_written) }
    end
  end
end)
""", [APP, "--steps", "500", "--sleep-us", "2000", "--slow-at", "10", "--slow-ms", "150"])
        self.assertEqual(r.returncode, 0, r.stderr)
        dirs = recorder_dirs(out)
        self.assertEqual(len(dirs), 2, r.stderr)
        self.assertEqual(load_trace(dirs[1])["profhost"]["reason"],
                         "status 1 recorder0_steps9-10 0")
        # The built-in reports name the dump, not a window.
        self.assertIn("findings (recorder dump 0, rank 0):", r.stderr)
        self.assertNotIn("findings (window", r.stderr)
        with open(os.path.join(dirs[0], "report.txt")) as f:
            report = f.read()
        self.assertTrue(report.startswith("profhost report: recorder dump 0, steps 9-10 (first)"),
                        report[:200])
        with open(os.path.join(dirs[0], "summary.txt")) as f:
            self.assertIn("\nDump: ", f.read())
        # prof run's last line counts the dumps apart.
        self.assertIn("profhost: wrote 2 recorder dumps under ", r.stderr)

    def test_window_hooks_run_for_dumps_and_tell_them_apart(self):
        r, out = self.prof_run("""
prof.recorder{ steps = 4 }
prof.schedule{ wait = 3, active = 2, cycles = 1 }
prof.export{ report = false }
local ended
prof.on_window_end(function(w)
  ended = string.format("%s %d %s", tostring(w.recorder), w.window, w.dir:match("[^/]+$"))
end)
prof.on_trace_ready(function(t)
  t:write("hooks.txt", ended .. "\\n" .. string.format("%s %d %s", tostring(t.recorder),
    t.window, t.reason))
end)
local done = false
prof.on_step(function(s)
  if s.step >= 20 and not done then done = prof.dump{ steps = 2, reason = "d" } end
end)
""", [APP, "--steps", "200", "--sleep-us", "1000"])
        self.assertEqual(r.returncode, 0, r.stderr)
        wins, dumps = window_dirs(out), recorder_dirs(out)
        self.assertEqual([os.path.basename(d) for d in wins], ["window0_steps3-4"], r.stderr)
        self.assertEqual(len(dumps), 1, r.stderr)
        with open(os.path.join(wins[0], "hooks.txt")) as f:
            self.assertEqual(f.read(), "false 0 window0_steps3-4\nfalse 0 schedule")
        with open(os.path.join(dumps[0], "hooks.txt")) as f:
            self.assertEqual(f.read(), "true 0 %s\ntrue 0 d" % os.path.basename(dumps[0]))

    def test_prof_dump_refusal_is_said_once(self):
        r, out = self.prof_run("prof.schedule{ wait = 100, active = 1 }\n",
                               [APP, "--steps", "40", "--slow-at", "10", "--slow-ms", "1",
                                "--dump", "2", "--dump-times", "3"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.count("dump -1\n"), 3, r.stdout)
        said = [l for l in profhost_lines(r.stderr) if "prof_dump" in l]
        self.assertEqual(len(said), 1, r.stderr)
        self.assertIn("prof_dump: the recorder is off: turn it on with "
                      "prof.recorder{ steps = 20 }", said[0])
        self.assertEqual(recorder_dirs(out), [])

    def test_profhost_dump_from_python(self):
        script = self.write("loop.py", """
import time
import profhost
for i in range(40):
    time.sleep(0.002 if i != 25 else 0.15)
    profhost.step()
    if i == 25:
        print("dump", profhost.dump(steps=3, reason="py slow"))
        print("again", profhost.dump())
    if i == 30:
        try:
            profhost.dump(steps=0)
        except ValueError as e:
            print("bad", e)
print("done")
""")
        r, out = self.prof_run("prof.recorder{ steps = 8 }\n", [PYTHON, script],
                               cwd=self.tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("dump True\n", r.stdout)
        self.assertIn("again True\n", r.stdout)  # merged
        self.assertIn("bad dump: steps must be None or in [1, 2**32), got 0", r.stdout)
        dirs = recorder_dirs(out)
        self.assertEqual([os.path.basename(d) for d in dirs], ["recorder0_steps23-25"],
                         r.stderr)
        trace = load_trace(dirs[0])
        self.assertEqual(trace["profhost"]["reason"], "py slow")
        steps = step_spans(trace)
        self.assertEqual([n for n, _ in steps], [23, 24, 25])
        self.assertGreaterEqual(dict(steps)[25]["dur"], 150000)

    def test_profhost_dump_without_host_is_false(self):
        script = self.write("plain.py", "import profhost\nprint(profhost.dump(2))\n")
        env = base_env({"PYTHONPATH": os.path.join(os.path.dirname(os.path.dirname(
            os.path.dirname(os.path.abspath(__file__)))), "src", "python")})
        r = run([PYTHON, script], env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "False\n")


def no_core():
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


class AutomaticDumps(TempDirTest):
    """Dying of a fatal signal, SIGTERM/SIGINT or an uncaught Python
    exception writes the recorder's last steps; the exit status or signal
    stays the program's; each can be turned off."""

    POLICY = "prof.recorder{ steps = 5%s }\nprof.export{ report = false }\n"

    def crash(self, how, keys="", direct=True):
        """recorder_app dying of `how` in step 21 (step 20 the last whole
        one). Returns (CompletedProcess, out dir)."""
        policy = self.write("policy.lua", self.POLICY % keys)
        out = os.path.join(self.tmp, "out-" + how + keys.replace(" ", ""))
        args = [APP, "--steps", "100", "--sleep-us", "300", "--crash-at", "20",
                "--crash", how]
        if direct:
            env = base_env({"PROF_SCRIPT": policy, "PROF_OUTPUT_DIR": out,
                            "LD_PRELOAD": LIB})
            r = subprocess_run(args, env)
        else:
            r = subprocess_run([PROF, "run", "-s", policy, "-o", out, "--"] + args,
                               base_env())
        return r, out

    def assert_dump(self, r, out, reason, steps=(16, 17, 18, 19, 20, 21)):
        """One dump of the recorder's 5 steps before the one that ended the
        process, and that one, partial."""
        dirs = recorder_dirs(out)
        self.assertEqual([os.path.basename(d) for d in dirs],
                         ["recorder0_steps%d-%d" % (steps[0], steps[-1])], r.stderr)
        trace = load_trace(dirs[0])
        self.assertEqual(trace["profhost"]["reason"], reason)
        self.assertTrue(trace["profhost"]["recorder"])
        spans = step_spans(trace)
        self.assertEqual([n for n, _ in spans], list(steps))
        self.assertEqual([bool(e.get("args", {}).get("partial")) for _, e in spans],
                         [False] * (len(steps) - 1) + [True])
        with open(os.path.join(dirs[0], "summary.txt")) as f:
            self.assertIn("recorder dump 0, steps %d-%d (%s)" % (steps[0], steps[-1], reason),
                          f.read())
        self.assertEqual(window_dirs(out), [])

    def test_fatal_signals_dump_and_die_the_same(self):
        # AddressSanitizer owns SIGSEGV, SIGBUS and SIGFPE in a sanitizer build.
        kinds = [("abort", signal.SIGABRT), ("ill", signal.SIGILL)]
        if not SANITIZE:
            kinds += [("segv", signal.SIGSEGV), ("fpe", signal.SIGFPE), ("bus", signal.SIGBUS)]
        for how, sig in kinds:
            with self.subTest(how):
                r, out = self.crash(how)
                self.assertEqual(r.returncode, -sig, r.stderr)
                self.assertNotIn("done", r.stdout)
                self.assert_dump(r, out, "crash: " + sig.name)

    def test_sigterm_and_sigint_dump_and_die_the_same(self):
        for how, sig in (("term", signal.SIGTERM), ("int", signal.SIGINT)):
            with self.subTest(how):
                r, out = self.crash(how)
                self.assertEqual(r.returncode, -sig, r.stderr)
                self.assert_dump(r, out, "signal: " + sig.name)

    def test_sigterm_through_the_launcher(self):
        r, out = self.crash("term", direct=False)
        self.assertEqual(r.returncode, 128 + signal.SIGTERM, r.stderr)
        self.assert_dump(r, out, "signal: SIGTERM")

    def test_keys_off_write_nothing(self):
        for how, sig, key in (("abort", signal.SIGABRT, "dump_on_crash"),
                              ("term", signal.SIGTERM, "dump_on_signal")):
            with self.subTest(key):
                r, out = self.crash(how, ", %s = false" % key)
                self.assertEqual(r.returncode, -sig, r.stderr)
                self.assertEqual(recorder_dirs(out), [], r.stderr)
        # The other key stays on.
        r, out = self.crash("abort", ", dump_on_signal = false")
        self.assertEqual(r.returncode, -signal.SIGABRT, r.stderr)
        self.assert_dump(r, out, "crash: SIGABRT")

    def test_window_recording_writes_the_window_not_a_dump(self):
        policy = self.write("policy.lua", "prof.recorder{ steps = 5 }\n"
                            "prof.schedule{ wait = 18, active = 10, cycles = 1 }\n"
                            "prof.export{ report = false }\n")
        out = os.path.join(self.tmp, "out")
        env = base_env({"PROF_SCRIPT": policy, "PROF_OUTPUT_DIR": out, "LD_PRELOAD": LIB})
        r = subprocess_run([APP, "--steps", "100", "--sleep-us", "300", "--crash-at", "20",
                            "--crash", "abort"], env)
        self.assertEqual(r.returncode, -signal.SIGABRT, r.stderr)
        self.assertEqual([os.path.basename(d) for d in window_dirs(out)],
                         ["window0_steps18-21"], r.stderr)
        self.assertEqual(recorder_dirs(out), [])

    PY_SCRIPT = """
import sys, time
import profhost
# The host starts its Python bridge (which chains sys.excepthook) soon
# after the interpreter starts: wait for it, so a loaded machine does not
# decide the outcome.
deadline = time.time() + 30
while "profhost._bridge" not in sys.modules and time.time() < deadline:
    time.sleep(0.01)
%s
for i in range(40):
    time.sleep(0.002)
    profhost.step()
    if i == 20:
        print("hook is", getattr(sys.excepthook, "__name__", "?"), flush=True)
        %s
"""

    def py_run(self, keys="", prelude="", env=None, fail="1 / 0", direct=False):
        """PY_SCRIPT under prof run (direct: under LD_PRELOAD alone, its
        salvage file in a folder of its own, self.salvage), ending in
        `fail` in step 21."""
        policy = self.write("policy.lua", self.POLICY % keys)
        script = self.write("loop.py", self.PY_SCRIPT % (prelude, fail))
        out = os.path.join(self.tmp, "out")
        if not direct:
            r = run([PROF, "run", "-s", policy, "-o", out, "--", PYTHON, script],
                    env=env, cwd=self.tmp)
            return r, out
        self.salvage = tempfile.mkdtemp(prefix="profhost-e2e-rec-",
                                        dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        self.addCleanup(shutil.rmtree, self.salvage, True)
        env = base_env({"PROF_SCRIPT": policy, "PROF_OUTPUT_DIR": out, "LD_PRELOAD": LIB,
                        "PROF_SALVAGE_DIR": self.salvage})
        return run([PYTHON, script], env=env, cwd=self.tmp), out

    def test_uncaught_python_exception_dumps(self):
        r, out = self.py_run()
        self.assertEqual(r.returncode, 1, r.stderr)
        # Python's own hook still ran after ours: the traceback is there.
        self.assertIn("Traceback (most recent call last)", r.stderr)
        self.assertIn("ZeroDivisionError: division by zero", r.stderr)
        self.assert_dump(r, out, "exception: ZeroDivisionError: division by zero")

    def test_programs_hook_set_later_keeps_its_identity_and_still_dumps(self):
        r, out = self.py_run(prelude="""
def my_hook(t, v, tb):
    sys.stderr.write("my hook: %s\\n" % t.__name__)
sys.excepthook = my_hook  # the bridge has started: ours is replaced
""")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("hook is my_hook", r.stdout)
        self.assertIn("my hook: ZeroDivisionError", r.stderr)
        self.assert_dump(r, out, "exception: ZeroDivisionError: division by zero")

    def test_programs_hook_set_earlier_runs_after_ours(self):
        # A hook the program had when the bridge started (the bridge starts
        # early, before site-packages' own code runs, so it is made so here
        # by installing again): ours asks for the dump, then the program's
        # runs.
        r, out = self.py_run(prelude="""
def early_hook(t, v, tb):
    sys.stderr.write("early hook: %s\\n" % t.__name__)
sys.excepthook = early_hook
from profhost import _excepthook
_excepthook.install()
""", env=base_env({"PROF_LOG": "debug"}))
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("hook is hook", r.stdout)  # ours, chained in front
        asked = r.stderr.find("uncaught ZeroDivisionError: recorder dump asked")
        early = r.stderr.find("early hook: ZeroDivisionError")
        self.assertGreaterEqual(asked, 0, r.stderr)
        self.assertGreater(early, asked, r.stderr)
        self.assertNotIn("Traceback", r.stderr)  # the program's hook replaced Python's
        self.assert_dump(r, out, "exception: ZeroDivisionError: division by zero")

    def test_uncaught_keyboard_interrupt_dumps_once(self):
        # Python >= 3.8 ends an uncaught KeyboardInterrupt by raising SIGINT
        # on itself with the default action, after its atexit handlers: no
        # C exit handler runs. One dump, the exception's, nothing left to
        # salvage, and the process dies of SIGINT (prof run: 130, as a
        # shell shows it). Before, the dump was lost or written, and the
        # launcher salvaged the recorder's rest beside it "after SIGINT".
        r, out = self.py_run(fail="raise KeyboardInterrupt")
        self.assertEqual(r.returncode, 128 + signal.SIGINT, r.stderr)
        self.assertIn("\nKeyboardInterrupt\n", r.stderr)
        self.assertNotIn("salvaged", r.stderr)
        self.assert_dump(r, out, "exception: KeyboardInterrupt")
        shutil.rmtree(out)
        r, out = self.py_run(fail="raise KeyboardInterrupt", direct=True)
        self.assertEqual(r.returncode, -signal.SIGINT, r.stderr)
        self.assert_dump(r, out, "exception: KeyboardInterrupt")
        self.assertEqual(os.listdir(self.salvage), [])

    def test_keyboard_interrupt_with_the_exception_key_off_leaves_nothing(self):
        # No dump asked; the recorder's salvage file goes all the same.
        r, out = self.py_run(keys=", dump_on_exception = false",
                             fail="raise KeyboardInterrupt", direct=True)
        self.assertEqual(r.returncode, -signal.SIGINT, r.stderr)
        self.assertEqual(recorder_dirs(out), [], r.stderr)
        self.assertEqual(os.listdir(self.salvage), [])

    def test_sigint_in_python_raises_keyboard_interrupt(self):
        # The host starts before the interpreter, which installs its SIGINT
        # handler only over the default disposition: profhost leaves SIGINT
        # alone in a Python process, so Ctrl-C still raises
        # KeyboardInterrupt, which the program may catch. Uncaught, it is
        # dumped as the exception. (Before, profhost's handler kept
        # Python's out: the program died of the signal.)
        r, out = self.py_run(prelude=(
            "import os, signal\n"
            "h = signal.getsignal(signal.SIGINT)\n"
            "print('SIGINT handler is', getattr(h, '__name__', h), flush=True)\n"
            "try:\n"
            "    os.kill(os.getpid(), signal.SIGINT)\n"
            "    time.sleep(5)\n"
            "except KeyboardInterrupt:\n"
            "    print('caught', flush=True)\n"),
            fail="os.kill(os.getpid(), signal.SIGINT); time.sleep(5)")
        self.assertIn("SIGINT handler is default_int_handler\ncaught\n", r.stdout)
        self.assertEqual(r.returncode, 128 + signal.SIGINT, r.stderr)
        self.assertNotIn("salvaged", r.stderr)
        self.assert_dump(r, out, "exception: KeyboardInterrupt")

    def test_exception_key_off_writes_nothing(self):
        r, out = self.py_run(keys=", dump_on_exception = false")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("ZeroDivisionError", r.stderr)
        self.assertEqual(recorder_dirs(out), [], r.stderr)


def subprocess_run(args, env):
    """run() without core files (the crashes are on purpose)."""
    import subprocess

    return subprocess.run(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=120, preexec_fn=no_core)


class Memory(TempDirTest):
    def test_pool_does_not_grow(self):
        # 4 MiB of recorder memory; ~3000 steps of 200 ranges (~19 KB of
        # records each: ~57 MB in all) must not grow the process.
        policy = self.write("policy.lua", """
prof.recorder{ steps = 4, mb = 4 }
prof.on_step(function(s)
  if s.step == 2995 then assert(prof.dump{ steps = 2, reason = "end" }) end
end)
""")
        out = os.path.join(self.tmp, "out")
        r = run([PROF, "run", "-s", policy, "-o", out, "--", APP, "--steps", "3000",
                 "--sleep-us", "0", "--ranges", "200", "--rss-at", "300"], timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        rss = {}
        for line in r.stdout.splitlines():
            if line.startswith("rss "):
                _, at, kb = line.split()
                rss[at] = int(kb)
        self.assertIn("300", rss, r.stdout)
        self.assertIn("end", rss, r.stdout)
        self.assertLess(rss["end"] - rss["300"], 8 * 1024, rss)
        # ... and it still records: the last steps whole, nothing dropped
        # (old segments were given back, so new ones had room).
        dirs = recorder_dirs(out)
        self.assertEqual([os.path.basename(d) for d in dirs], ["recorder0_steps2994-2995"])
        trace = load_trace(dirs[0])
        self.assertEqual(trace["profhost"]["counters"].get("dropped_noslot", 0), 0)
        self.assertEqual(trace["profhost"]["counters"].get("dropped_buffer", 0), 0)
        names = [e.get("name") for e in trace["traceEvents"]]
        self.assertEqual(names.count("r"), 400, sorted(set(names)))


    def test_step_larger_than_the_ring_keeps_its_newest_part(self):
        # The slow step pushes 200k ranges (~16 MB of records), then sleeps,
        # then pushes 100 more: with mb = 4 (three 1 MiB segments) the step
        # alone outgrows the ring. Its pool filling opens new segments inside
        # it, the oldest go back: the dump holds the step's end, and says so.
        policy = self.write("policy.lua", SLOW_POLICY.replace(
            "prof.recorder{ steps = 10 }", "prof.recorder{ steps = 4, mb = 4 }"))
        out = os.path.join(self.tmp, "out")
        r = run([PROF, "run", "-s", policy, "-o", out, "--", APP, "--steps", "30",
                 "--slow-at", "20", "--slow-ms", "300", "--big", "200000"])
        self.assertEqual(r.returncode, 0, r.stderr)
        dirs = [d for d in recorder_dirs(out) if d.endswith("-20")]
        self.assertEqual(len(dirs), 1, (recorder_dirs(out), r.stderr))
        trace = load_trace(dirs[0])
        names = [e["name"] for e in trace["traceEvents"] if e.get("ph") == "X"]
        self.assertEqual(names.count("late"), 100)
        self.assertLess(names.count("early"), 200000 // 2)
        self.assertIn(20, dict(step_spans(trace)))
        with open(os.path.join(dirs[0], "summary.txt")) as f:
            summary = f.read()
        self.assertRegex(summary, r"step 20 alone outgrew the flight recorder's pools: its "
                         r"first [0-9.]+ ms were given back, this dump holds its newest part "
                         r"\(raise prof\.recorder\{ mb = \.\.\. \}, now 4\)")
        self.assertIn("alone outgrew", r.stderr)

    def test_full_segment_drops_and_names_the_setting(self):
        # A segment whose pool fills is replaced by the host thread (the
        # test above); while the host thread is busy writing dump 0 (its
        # window-end hook spins 50 ms), steps 51-52 of 5000 ranges each
        # (about 400 kB, the segment's pool is 256 kB) fill their segment
        # and the rest drops: dump 1 counts it and names the setting.
        # Dump 1 is the program's (prof_dump() right after step 52): a
        # policy hook of step 52 is skipped when the host thread already
        # runs the window-end hook ("policy busy"), which it does when
        # writing dump 0 takes less than two steps.
        policy = self.write("policy.lua", """
prof.recorder{ steps = 4, mb = 1 }
prof.limits{ hook_ms = 5000 }
prof.on_step(function(s)
  if s.step == 50 then assert(prof.dump{ steps = 2, reason = "x" }) end
end)
prof.on_window_end(function(w)
  local t = os.clock()
  while os.clock() - t < 0.05 do end
end)
""")
        out = os.path.join(self.tmp, "out")
        r = run([PROF, "run", "-s", policy, "-o", out, "--", APP, "--steps", "60",
                 "--sleep-us", "0", "--ranges", "5000", "--slow-at", "52", "--slow-ms", "0",
                 "--dump", "2"])
        self.assertIn("dump 0\n", r.stdout)  # prof_dump() took it
        self.assertEqual(r.returncode, 0, r.stderr)
        # Which way the ring runs out depends on timing: the open segment
        # fills (buffers full), or the rotation that would replace it finds
        # the next segment's pool still held by dump 0's writing (noslot,
        # seen in an ASan build). Either way dump 1 counts the loss and
        # names the recorder's setting.
        self.assertRegex(r.stderr, r"profhost: recorder dump 1: \d+ events dropped because "
                         r"(the event buffers were full|its next event buffer was still held "
                         r"by a dump being written) \(raise prof\.recorder\{ mb = \.\.\. \}, "
                         r"now 1")
        dirs = recorder_dirs(out)
        self.assertEqual([os.path.basename(d) for d in dirs],
                         ["recorder0_steps49-50", "recorder1_steps51-52"], r.stderr)
        dirs = dirs[1:]
        trace = load_trace(dirs[0])
        counters = trace["profhost"]["counters"]
        self.assertGreater(counters["dropped_buffer"] + counters["dropped_noslot"], 0)
        with open(os.path.join(dirs[0], "summary.txt")) as f:
            summary = f.read()
        self.assertIn("raise prof.recorder{mb=...}", summary)
        self.assertNotIn("prof.schedule", summary)
        # The report's finding names the recorder's setting, not buffer_mb.
        with open(os.path.join(dirs[0], "report.txt")) as f:
            report = f.read()
        self.assertIn("the numbers above undercount; raise prof.recorder{ mb = ... } or "
                      "lower its steps", report)
        self.assertNotIn("buffer_mb", report)


class Switch(TempDirTest):
    """prof.recorder{ enabled = ... } from a hook: pauses and resumes the
    recorder at the next step boundary."""

    def prof_run(self, policy_text, steps=40):
        policy = self.write("policy.lua", policy_text)
        out = os.path.join(self.tmp, "out")
        r = run([PROF, "run", "-s", policy, "-o", out, "--", APP, "--steps", str(steps),
                 "--sleep-us", "300"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("done %d" % steps, r.stdout)
        return r, out

    def test_off_then_on_from_on_step(self):
        # Off from step 10's hook: step 11 still records, then the segments
        # go back; a dump while off says so; on again from step 20's hook:
        # the recorder holds steps 22 on, and a dump of 20 steps holds
        # exactly those.
        r, out = self.prof_run("""
prof.recorder{ steps = 20 }
prof.export{ report = false }
prof.on_step(function(s)
  if s.step == 10 then
    local t = prof.recorder{ enabled = false }
    print("off", t.on, t.steps)
  elseif s.step == 15 then
    print("dump while off", prof.dump{ steps = 3, reason = "off" })
    print("held while off", prof.status().recorder.enabled, prof.status().recorder.held_steps)
  elseif s.step == 20 then
    print("on", prof.recorder{}.on)
  elseif s.step == 30 then
    print("dump", prof.dump{ steps = 20, reason = "after on" })
  end
end)
""")
        lines = profhost_lines(r.stderr)
        said = "\n".join(lines)
        self.assertIn("policy.lua: off\tfalse\t20", said)
        self.assertRegex(said, r"policy\.lua: dump while off\tfalse\tthe recorder is off "
                               r"\(paused by prof\.recorder\{ enabled = false \}\): resume it "
                               r"with prof\.recorder\{ enabled = true \}")
        self.assertIn("policy.lua: held while off\tfalse\t0", said)
        self.assertIn("policy.lua: on\ttrue", said)
        self.assertIn("policy.lua: dump\ttrue", said)
        dirs = recorder_dirs(out)
        self.assertEqual([os.path.basename(d) for d in dirs], ["recorder0_steps22-30"], r.stderr)
        trace = load_trace(dirs[0])
        self.assertEqual([n for n, _ in step_spans(trace)], list(range(22, 31)))
        self.assertEqual(trace["profhost"]["reason"], "after on")
        work = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e["name"] == "work"]
        self.assertEqual(len(work), 9)

    def test_paused_from_the_start_and_resumed(self):
        r, out = self.prof_run("""
prof.recorder{ steps = 5, enabled = false }
prof.export{ report = false }
prof.on_step(function(s)
  if s.step == 3 then
    print("dump while paused", (prof.dump{ steps = 2 }))
  elseif s.step == 8 then
    prof.recorder{ enabled = true, steps = 5 }
  elseif s.step == 20 then
    print("dump", prof.dump{ steps = 3, reason = "resumed" })
  end
end)
""", steps=25)
        said = "\n".join(profhost_lines(r.stderr))
        self.assertIn("policy.lua: dump while paused\tfalse", said)
        self.assertIn("policy.lua: dump\ttrue", said)
        self.assertEqual([os.path.basename(d) for d in recorder_dirs(out)],
                         ["recorder0_steps18-20"], r.stderr)

    def test_a_window_is_not_disturbed(self):
        # Paused while a scheduled window records (steps 5-9): the window
        # is whole; the recorder stays off after it until enabled again.
        r, out = self.prof_run("""
prof.recorder{ steps = 10 }
prof.schedule{ skip_first = 5, wait = 0, warmup = 0, active = 5, cycles = 1 }
prof.export{ report = false }
prof.on_step(function(s)
  if s.step == 6 then prof.recorder{ enabled = false }
  elseif s.step == 14 then print("dump", (prof.dump{ steps = 3 }))
  elseif s.step == 15 then prof.recorder{ enabled = true }
  elseif s.step == 25 then print("dump", (prof.dump{ steps = 30 }))
  end
end)
""", steps=30)
        wins = window_dirs(out)
        self.assertEqual(len(wins), 1, r.stderr)
        self.assertEqual([n for n, _ in step_spans(load_trace(wins[0]))], list(range(5, 10)))
        said = "\n".join(profhost_lines(r.stderr))
        self.assertIn("policy.lua: dump\tfalse", said)
        self.assertIn("policy.lua: dump\ttrue", said)
        self.assertEqual([os.path.basename(d) for d in recorder_dirs(out)],
                         ["recorder0_steps17-25"], r.stderr)

    @unittest.skipUnless(HAS_TORCH, "torch is not installed for /usr/bin/python3")
    def test_torch_phases_come_back_after_resuming(self):
        # A PyTorch loop: paused from step 4's hook, resumed from step 10's;
        # the dump at step 20 holds the steps since, each with every step
        # phase the Python bridge times for the recorder.
        policy = self.write("policy.lua", """
prof.recorder{ steps = 20 }
prof.export{ report = false }
local paused, resumed, done = false, false, false
prof.on_step(function(s)
  if s.step >= 4 and not paused then paused = true; prof.recorder{ enabled = false } end
  if s.step >= 10 and not resumed then resumed = true; prof.recorder{ enabled = true } end
  if s.step >= 20 and not done then done = assert(prof.dump{ steps = 20, reason = "back" }) end
end)
""")
        out = os.path.join(self.tmp, "out")
        r = run([PROF, "run", "-s", policy, "-o", out, "--", PYTHON, STEADY_LOOP,
                 "--steps", "25", "--blocks", "2"], timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        dirs = recorder_dirs(out)
        self.assertEqual(len(dirs), 1, r.stderr)
        trace = load_trace(dirs[0])
        steps = step_spans(trace)
        # Resumed at the boundary that ended step 11 (or a later one, had
        # a hook been skipped): none of the paused steps.
        self.assertGreaterEqual(steps[0][0], 12, r.stderr)
        self.assertEqual(steps[-1][0], trace["profhost"]["last_step"])
        phases = phase_events(trace)
        for n, s in steps:
            self.assertEqual(set(p["phase"] for p in phases if inside(p, s)), set(PHASES),
                             "step %d" % n)

    def test_bad_switches_give_one_line(self):
        for text, pattern in (
                ("prof.recorder{}\nprof.on_step(function(s) prof.recorder{ mb = 16 } end)\n",
                 r"policy\.lua:2: prof\.recorder: 'mb' cannot change while the process runs "
                 r"\(it is 256; only 'enabled' can: prof\.recorder\{ enabled = false \}\); "
                 r"set it in the policy file"),
                ("prof.recorder{}\nprof.on_step(function(s) prof.recorder{ enabled = 1 } end)\n",
                 r"policy\.lua:2: prof\.recorder: 'enabled' must be a boolean"),
                ("prof.recorder{}\nprof.on_step(function(s) prof.recorder(false) end)\n",
                 r"policy\.lua:2: prof\.recorder: expected a table, got boolean false "
                 r"\(e\.g\. prof\.recorder\{ enabled = false \}\)"),
                ("prof.on_step(function(s) prof.recorder{ enabled = true } end)\n",
                 r"policy\.lua:1: prof\.recorder: no recorder was set up when the policy file "
                 r"loaded; put prof\.recorder\{ \.\.\. \} in the policy file")):
            with self.subTest(text):
                policy = self.write("policy.lua", text)
                out = os.path.join(self.tmp, "out")
                r = run([PROF, "run", "-s", policy, "-o", out, "--", APP, "--steps", "5",
                         "--sleep-us", "100"], timeout=60)
                self.assertIn("done 5", r.stdout)
                lines = [l for l in profhost_lines(r.stderr) if "window" not in l]
                self.assertEqual(len(lines), 1, r.stderr)
                self.assertRegex(lines[0], pattern)


class PythonFrames(TempDirTest):
    """Between windows the recorder keeps the Python bridge's stack
    snapshots with the CPU samples: a dump's samples show Python frames
    "function (file:line)" as a window's do, and a paused recorder stops
    the snapshot thread."""

    LOOP = """
import os, sys, time
import profhost

def busy(seconds):
    end = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < end:
        n += 1
    return n

def slow_reduce(seconds):
    return busy(seconds)

def snapshot_thread():
    for task in os.listdir("/proc/self/task"):
        try:
            with open("/proc/self/task/%s/comm" % task) as f:
                if f.read().strip() == "profhost-pystk":
                    return True
        except OSError:
            pass
    return False

for i in range(int(sys.argv[1])):
    if i == int(sys.argv[2]):
        slow_reduce(0.4)
        if sys.argv[3] == "kill":
            os.kill(os.getpid(), 9)
    else:
        busy(0.004)
    if sys.argv[3] == "probe" and i in (8, 18, 32):
        time.sleep(0.1)  # a few snapshot periods: the thread starts or ends
        print("step", i, "snapshots", snapshot_thread(), flush=True)
    profhost.step()
print("done")
"""

    def prof_run(self, policy_text, steps, slow_at, probe=False, kill=False):
        script = self.write("loop.py", self.LOOP)
        policy = self.write("policy.lua", policy_text)
        out = os.path.join(self.tmp, "out")
        r = run([PROF, "run", "-s", policy, "-o", out, "--", PYTHON, script, str(steps),
                 str(slow_at), "kill" if kill else "probe" if probe else "-"],
                cwd=self.tmp, timeout=300)
        if kill:
            self.assertEqual(r.returncode, 128 + 9, r.stderr)
            return r, out
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("done", r.stdout)
        return r, out

    def check_python_frames(self, trace, stacks, step):
        """The samples of `step` (its span) show slow_reduce by file and
        line in place of the interpreter's frames."""
        frames = (r"<module> \([^;]*loop\.py:\d+\);slow_reduce \([^;]*loop\.py:\d+\);"
                  r"busy \([^;]*loop\.py:\d+\)")
        self.assertRegex(stacks, frames)
        for line in stacks.splitlines():
            if "slow_reduce (" in line:
                self.assertNotIn("_PyEval_EvalFrameDefault", line)
        self.assertNotRegex(stacks, r"/profhost/_\w+\.py")
        # Many of the slow step's samples of the main thread show it (a
        # sample takes a snapshot at most 15 ms away: on a loaded machine
        # the snapshot thread may miss some of them).
        samples = [e for e in trace["traceEvents"] if e.get("cat") == "cpu_sample" and
                   e["tid"] == step["tid"] and
                   step["ts"] <= e["ts"] <= step["ts"] + step["dur"]]
        named = [e for e in samples if "slow_reduce (" in e["args"]["stack"]]
        self.assertGreaterEqual(len(samples), 3)
        self.assertGreaterEqual(len(named), len(samples) // 4,
                                [e["args"]["stack"] for e in samples][:5])

    def test_dump_shows_the_slow_steps_python_function(self):
        # The slow step spends 400 ms in slow_reduce -> busy, pure Python:
        # the dump's CPU samples name both, by file and line, in place of
        # the interpreter's own frames.
        r, out = self.prof_run(SLOW_POLICY + "prof.capture{ cpu_samples = { hz = 200 } }\n",
                               40, 25)
        # the 400 ms step's dump (a loaded machine may make another step
        # slow enough for one too)
        dirs = recorder_dirs(out)
        self.assertGreaterEqual(len(dirs), 1, r.stderr)
        dirs = [max(dirs, key=lambda d: step_spans(load_trace(d))[-1][1]["dur"])]
        trace = load_trace(dirs[0])
        steps = step_spans(trace)
        slow = max(steps, key=lambda p: p[1]["dur"])
        self.assertEqual(slow[0], steps[-1][0])
        self.assertGreaterEqual(slow[1]["dur"], 400000)
        with open(os.path.join(dirs[0], "stacks.txt")) as f:
            self.check_python_frames(trace, f.read(), slow[1])

    def test_sigkill_salvage_shows_the_python_frames(self):
        # The process dies of SIGKILL at the end of its 400 ms step: the
        # snapshots went into the ring with the samples, and the launcher's
        # salvage puts them into the stacks as a dump does.
        r, out = self.prof_run("prof.recorder{ steps = 10 }\n"
                               "prof.capture{ cpu_samples = { hz = 200 } }\n", 40, 25,
                               kill=True)
        dirs = recorder_dirs(out)
        self.assertEqual(len(dirs), 1, r.stderr)
        trace = load_trace(dirs[0])
        self.assertIn("salvaged after SIGKILL", trace["profhost"]["reason"])
        steps = step_spans(trace)
        self.assertEqual(steps[-1][0], 25, [n for n, _ in steps])
        # the slow one (the others take 4 ms); a salvaged partial step
        # ends at its last record, a CPU-time sample, which a loaded
        # machine may have taken well before the kill
        self.assertGreaterEqual(steps[-1][1]["dur"], 200000)
        with open(os.path.join(dirs[0], "stacks.txt")) as f:
            self.check_python_frames(trace, f.read(), steps[-1][1])

    def test_snapshots_follow_the_recorder(self):
        # With CPU samples kept the snapshot thread runs between windows;
        # paused (step 10) it stops, resumed (step 20) it runs again.
        # Without the recorder's CPU samples it never runs between windows.
        policy = """
prof.recorder{ steps = 6 }
prof.capture{ cpu_samples = { hz = 200 } }
prof.export{ report = false }
prof.on_step(function(s)
  if s.step == 10 then prof.recorder{ enabled = false }
  elseif s.step == 20 then prof.recorder{ enabled = true } end
end)
"""
        r, _ = self.prof_run(policy, 36, -1, probe=True)
        self.assertIn("step 8 snapshots True\n", r.stdout)
        self.assertIn("step 18 snapshots False\n", r.stdout)
        self.assertIn("step 32 snapshots True\n", r.stdout)
        r, _ = self.prof_run(policy.replace("steps = 6 }", "steps = 6, cpu_samples = false }"),
                             36, -1, probe=True)
        self.assertIn("step 8 snapshots False\n", r.stdout)
        self.assertIn("step 32 snapshots False\n", r.stdout)


class BadKeys(TempDirTest):
    def test_bad_recorder_keys_give_one_line(self):
        for text, pattern in (
                ("prof.recorder{ steps = 0 }\n",
                 r"policy\.lua:1: prof\.recorder: 'steps' must be an integer from 1 to 10000, got 0"),
                ("prof.recorder{ mb = -3 }\n",
                 r"policy\.lua:1: prof\.recorder: 'mb' must be an integer from 1 to 65536, got -3"),
                ("prof.recorder{ stepz = 3 }\n",
                 r"policy\.lua:1: prof\.recorder: unknown key 'stepz' \(valid keys: cpu_samples, "
                 r"cuda, dump_on_crash, dump_on_exception, dump_on_signal, enabled, job, max_dumps, mb, "
                 r"phases, steps\)"),
                ("prof.recorder{ dump_on_crash = 1 }\n",
                 r"policy\.lua:1: prof\.recorder: 'dump_on_crash' must be"),
                ("prof.on_step(function(s) prof.dump{ steps = 'x' } end)\n",
                 r"policy\.lua:1: prof\.dump: 'steps'")):
            with self.subTest(text):
                policy = self.write("policy.lua", text)
                out = os.path.join(self.tmp, "out")
                r = run([PROF, "run", "-s", policy, "-o", out, "--", APP, "--steps", "5",
                         "--sleep-us", "100"], timeout=60)
                self.assertIn("done 5", r.stdout)
                lines = [l for l in profhost_lines(r.stderr) if "window" not in l]
                self.assertEqual(len(lines), 1, r.stderr)
                self.assertRegex(lines[0], pattern)


if __name__ == "__main__":
    unittest.main()

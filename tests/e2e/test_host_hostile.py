"""End to end: the host under hostile programs and floods (issues #12, #13,
#17): steps from many threads, step and window floods with little memory, a
daemon closing profhost's descriptors, thread churn, bad environment values,
PROF_STRICT's exit, the less common fatal signals, a second copy of the shim,
and the first recorded step of each window on a steady loop.

Registered apart from e2e_host and run alone (RUN_SERIAL): its floods keep
both CPUs busy, and its timing test compares steps of one run with each
other."""
import glob
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
import unittest

from harness import (LIB, PROF, SANITIZE, TESTBIN, TempDirTest, alone, base_env, load_part,
                     load_trace, profhost_lines, run, step_spans, window_dirs)

HOST_APP = os.path.join(TESTBIN, "host_app")


def run_rss(cmd, env, timeout=120):
    """Runs cmd with stdout/stderr to files; returns (returncode, stdout,
    stderr, peak RSS of that process in KiB, wall seconds)."""
    with tempfile.TemporaryFile("w+") as fo, tempfile.TemporaryFile("w+") as fe:
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, env=env, stdout=fo, stderr=fe, text=True)
        deadline = t0 + timeout
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                p.kill()
                os.wait4(p.pid, 0)
                fe.seek(0)
                raise AssertionError("timed out after %d s: %s" % (timeout, fe.read()[-2000:]))
            time.sleep(0.02)
        wall = time.monotonic() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        fo.seek(0)
        fe.seek(0)
        return p.returncode, fo.read(), fe.read(), ru.ru_maxrss, wall


def hosted_env(tmp, policy, extra=None):
    env = base_env({"LD_PRELOAD": LIB, "PROF_SCRIPT": policy,
                    "PROF_OUTPUT_DIR": os.path.join(tmp, "out")})
    if extra:
        env.update(extra)
    return env


@alone
class SteppingThreads(TempDirTest):
    """#13.5: steps from several threads are ordered and non-negative, and
    prof report reads every window profhost wrote."""

    def test_eight_stepping_threads(self):
        policy = self.write("policy.lua",
                            "prof.schedule { wait = 100, active = 5000, cycles = 3 }\n")
        out = os.path.join(self.tmp, "out")
        r = run([PROF, "run", "-s", policy, "-o", out, "--", HOST_APP, "threads", "8", "1500"],
                timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        dirs = window_dirs(out)
        self.assertEqual(len(dirs), 3, r.stderr)
        for d in dirs:
            trace = load_trace(d)
            steps = step_spans(trace)
            self.assertEqual(len(steps), 5000, d)
            negative = [e for _, e in steps if e["dur"] < 0]
            self.assertEqual(negative, [], d)
            # Boundaries from any thread are ordered: each step starts where
            # the one before it ended.
            by_number = sorted(steps, key=lambda p: p[0])
            for (_, a), (_, b) in zip(by_number, by_number[1:]):
                self.assertLessEqual(a["ts"], b["ts"])
            rep = run([PROF, "report", d])
            self.assertEqual(rep.returncode, 0, rep.stderr)
            self.assertNotIn("negative", rep.stderr)


@alone
class Floods(TempDirTest):
    """#13.6: memory stays bounded for steps and queued windows; drops are
    counted and said; exit is prompt."""

    # Peak RSS allowed to the target (KiB). Without the bound it was 5.5 GB
    # for the step flood; a sanitizer build's own shadow memory comes on top.
    RSS_LIMIT = 400 * 1024 if SANITIZE else 150 * 1024

    def test_step_flood_with_one_mib(self):
        policy = self.write("policy.lua", "prof.capture { buffer_mb = 1 }\n"
                            "prof.schedule { wait = 1, active = 100000000 }\n")
        rc, out, err, rss, wall = run_rss([HOST_APP, "threads", "8", "3000"],
                                          hosted_env(self.tmp, policy), timeout=200)
        self.assertEqual(rc, 0, err)
        steps = int(re.search(r"steps (\d+)", out).group(1))
        self.assertLess(rss, self.RSS_LIMIT, "peak RSS %d KiB for %d steps" % (rss, steps))
        self.assertLess(wall, 3 + 20, err)
        dirs = window_dirs(os.path.join(self.tmp, "out"))
        self.assertEqual(len(dirs), 1, err)
        trace = load_trace(dirs[0])
        counters = trace["profhost"]["counters"]
        kept = len(step_spans(trace))
        self.assertEqual(kept, 4096)  # 1 MiB / 256 bytes a step
        # Every step but the partial last one is either kept or counted.
        self.assertGreaterEqual(kept + counters["dropped_steps"], steps - 8)
        with open(os.path.join(dirs[0], "summary.txt")) as f:
            summary = f.read()
        self.assertNotIn("Drops: none", summary)
        self.assertRegex(summary, r"%d steps not recorded" % counters["dropped_steps"])
        self.assertRegex(err, r"profhost: window 0: \d+ steps not recorded")

    def test_window_flood_queue_is_bounded(self):
        policy = self.write("policy.lua", "prof.capture { buffer_mb = 1 }\n"
                            "prof.schedule { wait = 20, active = 2, cycles = 0 }\n")
        rc, out, err, rss, wall = run_rss([HOST_APP, "threads", "8", "3000"],
                                          hosted_env(self.tmp, policy), timeout=200)
        self.assertEqual(rc, 0, err)
        self.assertLess(rss, self.RSS_LIMIT, err[-2000:])
        self.assertLess(wall, 3 + 20, err[-2000:])
        self.assertRegex(err, r"windows close faster than they are written: skipping")
        dirs = window_dirs(os.path.join(self.tmp, "out"))
        self.assertTrue(dirs)
        skipped = 0
        for d in dirs:
            with open(os.path.join(d, "trace.json")) as f:
                skipped += json.load(f)["profhost"]["counters"]["windows_skipped"]
        tail = re.search(r"the last (\d+) windows were not written", err)
        skipped += int(tail.group(1)) if tail else 0
        self.assertGreater(skipped, 0)
        # Written and skipped windows together are every window the schedule
        # opened: the highest written index, or more when the tail was skipped.
        last = max(int(re.search(r"window(\d+)_", os.path.basename(d)).group(1))
                   for d in dirs)
        self.assertGreaterEqual(len(dirs) + skipped, last + 1)
        said = []
        for d in dirs:
            with open(os.path.join(d, "summary.txt")) as f:
                if "earlier windows not written" in f.read():
                    said.append(d)
        self.assertTrue(said or tail, "no summary says windows were skipped")


class ClosedDescriptors(TempDirTest):
    """#13.3: a daemon that closes descriptors 3-1023 and opens its own
    files: its files are byte-identical to a run without profhost, no
    profhost thread spins, and one line says what happened."""

    def daemon(self, env):
        data = os.path.join(self.tmp, "data")
        os.makedirs(data, exist_ok=True)
        r = run([HOST_APP, "daemon", data, "40"], env=env, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        files = {}
        for name in sorted(os.listdir(data)):
            with open(os.path.join(data, name), "rb") as f:
                files[name] = f.read()
        idle = int(re.search(r"idle_cpu_ms (\d+)", r.stdout).group(1))
        return files, idle, r.stderr

    def test_daemon_closing_descriptors(self):
        plain, _, _ = self.daemon(base_env())
        self.assertEqual(sorted(plain), ["data0", "data1", "data2"])
        for name, text in (("windows", "prof.schedule { wait = 2, active = 3, cycles = 3 }\n"),
                           ("samples", "prof.schedule { wait = 2, active = 3, cycles = 3 }\n"
                                       "prof.capture { cpu_samples = { hz = 200 } }\n")):
            with self.subTest(name):
                policy = self.write("policy.lua", text)
                files, idle, err = self.daemon(hosted_env(self.tmp, policy))
                self.assertEqual(files, plain)
                # 500 ms of sleep: a spinning thread would take ~500 ms of CPU.
                self.assertLess(idle, 100, err)
                said = [l for l in profhost_lines(err) if "descriptor" in l]
                self.assertEqual(len(said), 1, err)
                self.assertRegex(said[0], r"closed or reused profhost's descriptor \d+")
                self.assertEqual(len(window_dirs(os.path.join(self.tmp, "out"))), 3, err)
                shutil.rmtree(os.path.join(self.tmp, "out"))


@alone
class ThreadChurnAndMemoryLimits(TempDirTest):
    """#13.8: threads that start and end all the time leave their chunks to
    the pool instead of using it up; a pool that cannot be mapped under a
    memory limit is said as such, not as "raise buffer_mb"."""

    def test_churning_threads_keep_their_events(self):
        # 3000 threads, one range each, in a pool of 256 chunks of 64 KiB:
        # with a chunk per thread 90 % of them were lost.
        policy = self.write("policy.lua", "prof.capture { buffer_mb = 16 }\n"
                            "prof.schedule { wait = 0, active = 100000 }\n")
        rc, out, err, _, _ = run_rss([HOST_APP, "churn", "3000"],
                                     hosted_env(self.tmp, policy), timeout=200)
        self.assertEqual(rc, 0, err)
        dirs = window_dirs(os.path.join(self.tmp, "out"))
        self.assertEqual(len(dirs), 1, err)
        trace = load_trace(dirs[0])
        self.assertEqual(trace["profhost"]["counters"]["dropped_buffer"], 0)
        work = [e for e in trace["traceEvents"] if e.get("name") == "work" and e.get("ph") == "X"]
        self.assertEqual(len(work), 3000)
        # each range on its own thread, not on the thread whose chunk it took
        self.assertGreater(len({e["tid"] for e in work}), 2900)
        self.assertNotIn("buffer_mb", err)

    @unittest.skipIf(SANITIZE, "a sanitizer's shadow memory does not fit a small address space")
    def test_unmappable_buffer_is_said(self):
        import resource
        policy = self.write("policy.lua", "prof.capture { buffer_mb = 2048 }\n"
                            "prof.schedule { wait = 1, active = 3, cycles = 1 }\n")
        limit = 1024 << 20

        def cap():
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        p = subprocess.run([HOST_APP, "steady", "6", "2000"], env=hosted_env(self.tmp, policy),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=120, preexec_fn=cap)
        self.assertEqual(p.returncode, 0, p.stderr)
        said = [l for l in profhost_lines(p.stderr) if "could not be mapped" in l]
        self.assertEqual(len(said), 1, p.stderr)
        self.assertRegex(said[0], r"window 0: \d+ events dropped because its event buffer of "
                         r"2048 MiB could not be mapped \(Cannot allocate memory; a memory "
                         r"limit such as ulimit -v\?\): lower prof.capture\{buffer_mb")
        self.assertNotIn("earlier windows were still being written", p.stderr)
        dirs = window_dirs(os.path.join(self.tmp, "out"))
        self.assertEqual(len(dirs), 1, p.stderr)
        with open(os.path.join(dirs[0], "summary.txt")) as f:
            self.assertIn("event buffer could not be mapped", f.read())


class SmallerOnes(TempDirTest):
    """#13.8 and #17.8: bad environment values, PROF_STRICT's exit, the
    less common fatal signals, a second copy of the shim."""

    def test_bad_clock_and_world_size_are_said(self):
        for var, value, pattern in (
                ("PROF_CLOCK", "xyz", r"PROF_CLOCK='xyz' is not understood \(use monotonic"),
                ("WORLD_SIZE", "0", r"WORLD_SIZE='0' is not an integer of at least 1")):
            with self.subTest(var):
                env = base_env({"LD_PRELOAD": LIB, var: value, "PROF_REPL_SIGNAL": "0",
                                "PROF_OUTPUT_DIR": os.path.join(self.tmp, "o")})
                r = run([HOST_APP, "steady", "3", "100"], env=env)
                self.assertEqual(r.returncode, 0, r.stderr)
                lines = [l for l in profhost_lines(r.stderr) if "no CUDA driver" not in l]
                self.assertEqual(len(lines), 1, r.stderr)
                self.assertRegex(lines[0], pattern)

    def test_strict_exit_writes_the_window_and_flushes_output(self):
        policy = self.write("policy.lua", "prof.schedule { wait = 2, active = 10 }\n"
                            "prof.on_step(function(s)\n"
                            "  if s.step == 6 then error('boom') end\nend)\n")
        r = run([HOST_APP, "steady", "20", "500"],
                env=hosted_env(self.tmp, policy, {"PROF_STRICT": "1"}))
        self.assertEqual(r.returncode, 70, r.stderr)
        self.assertIn("boom", r.stderr)
        self.assertEqual(r.stdout.split(), ["step", "0"] + sum(
            (["step", str(i)] for i in range(1, 7)), []))
        dirs = window_dirs(os.path.join(self.tmp, "out"))
        self.assertEqual([os.path.basename(d) for d in dirs], ["window0_steps2-7"], r.stderr)
        self.assertEqual([n for n, _ in step_spans(load_trace(dirs[0]))], list(range(2, 8)))

    def test_quit_xcpu_usr2_write_the_window(self):
        policy = self.write("policy.lua", "prof.schedule { active = 5 }\n")
        for sig in (signal.SIGQUIT, signal.SIGXCPU, signal.SIGUSR2):
            with self.subTest(sig.name):
                out = os.path.join(self.tmp, sig.name)
                env = hosted_env(self.tmp, policy, {"PROF_OUTPUT_DIR": out})
                p = subprocess.Popen([HOST_APP, "sleep", "20000"], env=env, cwd=self.tmp,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     preexec_fn=lambda: __import__("resource").setrlimit(
                                         __import__("resource").RLIMIT_CORE, (0, 0)))
                time.sleep(1.5)
                p.send_signal(sig)
                _, err = p.communicate(timeout=60)
                self.assertEqual(p.returncode, -sig, err)
                self.assertEqual([os.path.basename(d) for d in window_dirs(out)],
                                 ["window0_steps0-1"], err)

    def test_second_copy_of_the_shim_stays_off(self):
        copy_dir = os.path.join(self.tmp, "copy")
        os.makedirs(copy_dir)
        for name in ("libprofhost.so", "libprofhost-core.so"):
            shutil.copy(os.path.join(os.path.dirname(LIB), name), copy_dir)
        copy = os.path.join(copy_dir, "libprofhost.so")
        env = base_env({"LD_PRELOAD": LIB, "PROF_PYTHON": "0", "PROF_REPL_SIGNAL": "0",
                        "PROF_OUTPUT_DIR": os.path.join(self.tmp, "o")})
        r = run(["/usr/bin/python3", "-c", "import ctypes; ctypes.CDLL(%r); print('ok')" % copy],
                env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "ok\n")
        lines = [l for l in profhost_lines(r.stderr) if "no CUDA driver" not in l]
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertRegex(lines[0], r"a second copy of libprofhost\.so was loaded \(%s" %
                         re.escape(os.path.realpath(copy)))


@alone
class FirstStep(TempDirTest):
    """#12.2: a window's opening costs the stepping thread nothing inside
    the window's first recorded step: on a steady loop (1 ms of busy work
    a step, stricter than the 2.1 ms of the report; 2.1 ms with CPU
    samples), each window's first step is within 15 % of that window's
    own median. A loaded machine can
    stretch any step, so each window is judged by the median over runs.
    The windows are 40 steps apart, so the host thread has written the
    first before the second opens (its writing competes for the CPUs of a
    2-core machine, which is another matter than the window's start)."""

    RUNS = 7

    def first_ratios(self, samples, step_us):
        text = "prof.schedule { wait = 40, warmup = 1, active = 10, cycles = 2 }\n"
        if samples:
            text += "prof.capture { cpu_samples = { hz = 999 } }\n"
        policy = self.write("policy.lua", text)
        ratios = [[], []]
        blamed = 0
        for i in range(self.RUNS):
            out = os.path.join(self.tmp, "out%d" % i)
            r = run([HOST_APP, "steady", "110", str(step_us)],
                    env=hosted_env(self.tmp, policy, {"PROF_OUTPUT_DIR": out}))
            self.assertEqual(r.returncode, 0, r.stderr)
            dirs = window_dirs(out)
            self.assertEqual(len(dirs), 2, r.stderr)
            for k, d in enumerate(dirs):
                steps = step_spans(load_trace(d))
                durs = [e["dur"] for _, e in steps]
                ratios[k].append(durs[0] / statistics.median(durs))
                # A finding that blames the program for the first step.
                blamed += bool(re.search(r"step %d took" % steps[0][0], r.stderr))
        # Preemption on a loaded machine may stretch a first step now and
        # then, as any other; a cost of profhost's would do it every time.
        self.assertLessEqual(blamed, self.RUNS // 2, "first steps named slow in findings")
        return ratios

    def check(self, samples, step_us):
        for k, rs in enumerate(self.first_ratios(samples, step_us)):
            self.assertLessEqual(statistics.median(rs), 1.15,
                                 "window %d: first step / median per run: %s" %
                                 (k, ", ".join("%.2f" % x for x in rs)))

    def test_first_step_not_inflated(self):
        self.check(samples=False, step_us=1000)

    def test_first_step_not_inflated_with_cpu_samples(self):
        if SANITIZE:
            self.skipTest("a sanitizer build's own cost drowns the measure")
        # The 2.1 ms steps: a timer sample costs its thread an
        # unwind, and the first one through the signal frame is colder.
        self.check(samples=True, step_us=2100)


# Floods, many stepping or churning threads and the first step's timing
# run alone (e2e_host_hostile_alone); the rest beside other tests.
load_tests = load_part

if __name__ == "__main__":
    unittest.main(verbosity=2)

"""End to end: NVTX3 programs under the host. The example app's ranges, as
the app itself logged them, against the trace: each appears once, nested per
thread, with its name, domain, category and duration; windows land on the
steps its NVTX range defines; capture ranges record exactly while a named
range is open; 8 threads x 125k ranges lose, duplicate and tear nothing;
hostile names give valid JSON."""
import glob
import json
import os
import re
import subprocess
import unittest

from harness import (BUILD, LIB, PROF, SANITIZE, SOURCE, TESTBIN, TempDirTest, base_env,
                     load_trace, mono_ns, profhost_lines, run, step_spans, window_dirs)

APP = os.path.join(BUILD, "examples", "nvtx_app")
STRESS = os.path.join(TESTBIN, "nvtx_stress")
HOSTILE = os.path.join(TESTBIN, "nvtx_hostile")
STEPS_POLICY = os.path.join(SOURCE, "examples", "nvtx_steps.lua")
SLEEP_US = 2000
US = 1000.0  # ns per trace microsecond
STRESS_RANGES = int(os.environ.get("NVTX_STRESS_RANGES", "12500" if SANITIZE else "125000"))


def ranges(trace, tid=None):
    """The X events (not ProfilerStep spans), optionally of one thread."""
    return [e for e in trace["traceEvents"]
            if e.get("ph") == "X" and not e["name"].startswith("ProfilerStep#")
            and (tid is None or e["tid"] == tid)]


def thread_names(trace):
    return {e["tid"]: e["args"]["name"] for e in trace["traceEvents"]
            if e.get("ph") == "M" and e["name"] == "thread_name"}


def tid_named(trace, name):
    tids = [t for t, n in thread_names(trace).items() if n == name]
    assert len(tids) == 1, (name, thread_names(trace))
    return tids[0]


def read_log(path):
    """The app's own log: (tid, t0 ns, t1 ns, domain, name) per range."""
    out = []
    with open(path) as f:
        for line in f:
            tid, t0, t1, dom, name = line.rstrip("\n").split(" ", 4)
            out.append((int(tid), int(t0), int(t1), dom, name))
    return out


class NestingMixin:
    def assert_nested(self, events):
        """Events of one thread form a tree: each lies inside the enclosing
        one or after it (1 ns of rounding slack)."""
        evs = sorted(events, key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in evs:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"] + 0.001:
                stack.pop()
            if stack:
                outer = stack[-1]
                self.assertLessEqual(e["ts"] + e["dur"], outer["ts"] + outer["dur"] + 0.001,
                                     "%r overlaps %r without nesting" % (e, outer))
            stack.append(e)


@unittest.skipUnless(os.path.exists(APP), "examples/nvtx_app not built (no NVTX headers)")
class ExampleApp(TempDirTest, NestingMixin):
    def run_app(self, policy_text=None, policy=None, steps=12, workers=2, env=None):
        if policy is None:
            policy = self.write("policy.lua", policy_text)
        out = os.path.join(self.tmp, "out")
        log = os.path.join(self.tmp, "app.log")
        r = run([PROF, "run", "-s", policy, "-o", out, "--", APP, "--steps", str(steps),
                 "--workers", str(workers), "--sleep-us", str(SLEEP_US), "--log", log],
                env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("nvtx_app: %d steps" % steps, r.stdout)
        return out, read_log(log), r

    def test_windows_land_on_nvtx_steps_and_ranges_appear_once(self):
        out, log, _ = self.run_app(policy=STEPS_POLICY)
        dirs = window_dirs(out)
        self.assertEqual([os.path.basename(d) for d in dirs], ["window0_steps6-8"])
        trace = load_trace(dirs[0])
        counters = trace["profhost"]["counters"]
        self.assertEqual(counters["dropped_buffer"], 0)
        self.assertEqual(counters["unbalanced_pops"], 0)
        trainer = tid_named(trace, "trainer")
        names = thread_names(trace)
        self.assertIn("worker-0", names.values())
        self.assertIn("worker-1", names.values())

        # The steps are the app's train_step ranges: step k is the k-th
        # (from 0), ProfilerStep#k ends where it ends.
        logged_steps = [l for l in log if l[4] == "train_step"]
        self.assertEqual(len(logged_steps), 12)
        steps = step_spans(trace)
        self.assertEqual([n for n, _ in steps], [6, 7, 8])
        mine = ranges(trace, trainer)
        train = sorted((e for e in mine if e["name"] == "train_step"), key=lambda e: e["ts"])
        self.assertEqual(len(train), 3)
        for (n, span), e in zip(steps, train):
            self.assertEqual(span["tid"], trainer)
            end, span_end = e["ts"] + e["dur"], span["ts"] + span["dur"]
            self.assertGreaterEqual(span_end, end - 0.001)
            self.assertLess(span_end - end, 500, "step %d ends %.1f us after its range" %
                            (n, span_end - end))
            self.assertGreaterEqual(e["ts"], span["ts"])
            # The app's own clock agrees (back on the CLOCK_MONOTONIC timeline).
            t0, t1 = logged_steps[n][1], logged_steps[n][2]
            self.assertAlmostEqual(mono_ns(trace, e["ts"]), t0, delta=2e6)
            self.assertLessEqual(e["dur"] * US, t1 - t0 + 50e3)
            self.assertEqual(e["args"], {"domain": "nvtx_app", "category": "compute"})
            self.assertNotIn("clipped_start", e["args"])

        # Inside the window, every range of the trainer appears exactly once
        # per step, unclipped, inside its step, with its domain/category.
        by_name = {}
        for e in mine:
            by_name.setdefault(e["name"], []).append(e)
        self.assertEqual(sorted(by_name), ["backward", "forward", "handoff", "train_step"])
        for name, evs in by_name.items():
            self.assertEqual(len(evs), 3, name)
            for e in evs:
                self.assertFalse(e.get("args", {}).get("clipped_start"), e)
                self.assertFalse(e.get("args", {}).get("clipped_end"), e)
                self.assertTrue(any(t["ts"] <= e["ts"] and
                                    e["ts"] + e["dur"] <= t["ts"] + t["dur"] + 0.001
                                    for t in train), e)
        for e in by_name["forward"]:
            self.assertEqual(e["args"], {"domain": "nvtx_app", "category": "compute"})
            self.assertGreaterEqual(e["dur"], SLEEP_US)
        for e in by_name["backward"]:  # a wide string, default domain
            self.assertNotIn("args", e)
            self.assertGreaterEqual(e["dur"], SLEEP_US)
        for e in by_name["handoff"]:   # ended by the helper thread
            self.assertEqual(e["args"], {"category": "io"})
            self.assertGreaterEqual(e["dur"], SLEEP_US / 2)
        # Durations match what the app measured around each range.
        logged = {}
        for l in log:
            logged.setdefault(l[4], []).append(l[2] - l[1])
        for name in ("forward", "backward", "handoff"):
            for e, dur_ns in zip(sorted(by_name[name], key=lambda e: e["ts"]),
                                 logged[name][6:9]):
                self.assertLessEqual(e["dur"] * US, dur_ns + 50e3, name)
                self.assertGreaterEqual(e["dur"] * US, dur_ns * 0.5, name)
        marks = [e for e in trace["traceEvents"] if e.get("ph") == "i"]
        self.assertEqual([m["name"] for m in marks], ["step_done"] * 3)
        for m in marks:
            self.assertEqual(m["args"], {"domain": "nvtx_app", "category": "compute"})
        self.assert_nested(mine + [s for _, s in steps])

        # Workers: their tasks form one unbroken run per thread; only the
        # first and the last may cross the window's edges (clipped).
        # The window begins at the step boundary that opened it; its first
        # step once profhost opened it (tens to hundreds of microseconds
        # later): ranges open across the boundary start at the window's
        # start, clipped.
        first_step = steps[0][1]["ts"]
        clipped = [e["ts"] for e in trace["traceEvents"] if e.get("ph") == "X" and
                   e.get("args", {}).get("clipped_start")]
        window_start = min(clipped + [first_step])
        self.assertLess(first_step - window_start, 50000)  # us
        window_end = steps[-1][1]["ts"] + steps[-1][1]["dur"]
        for w in (0, 1):
            tid = tid_named(trace, "worker-%d" % w)
            evs = sorted(ranges(trace, tid), key=lambda e: e["ts"])
            self.assertGreater(len(evs), 5)
            ks = []
            for e in evs:
                m = re.fullmatch(r"task w%d#(\d+)" % w, e["name"])
                self.assertIsNotNone(m, e["name"])
                ks.append(int(m.group(1)))
            self.assertEqual(ks, list(range(ks[0], ks[0] + len(ks))))
            for i, e in enumerate(evs):
                args = e.get("args", {})
                self.assertEqual(bool(args.get("clipped_start")),
                                 i == 0 and e["ts"] <= window_start + 0.001 and
                                 args.get("clipped_start", False), e)
                if i not in (0, len(evs) - 1):
                    self.assertEqual(args, {}, e)
                self.assertGreaterEqual(e["ts"], window_start - 0.001)
                self.assertLessEqual(e["ts"] + e["dur"], window_end + 1000)
            self.assert_nested(evs)

    def test_capture_range_records_exactly_while_the_range_is_open(self):
        out, log, r = self.run_app(
            'prof.capture_range{ nvtx = "forward", domain = "nvtx_app", count = 2 }\n')
        dirs = window_dirs(out)
        self.assertEqual([os.path.basename(d) for d in dirs],
                         ["window0_steps0-0", "window1_steps0-0"])
        for d in dirs:
            trace = load_trace(d)
            self.assertEqual(trace["profhost"]["reason"], "nvtx range 'forward'")
            trainer = tid_named(trace, "trainer")
            mine = ranges(trace, trainer)
            fwd = [e for e in mine if e["name"] == "forward"]
            self.assertEqual(len(fwd), 1)
            self.assertNotIn("clipped_start", fwd[0]["args"])
            self.assertNotIn("clipped_end", fwd[0]["args"])
            # train_step encloses forward: cut at both window edges (the
            # capturing thread records its open ranges when the window opens).
            step = [e for e in mine if e["name"] == "train_step"]
            self.assertEqual(len(step), 1)
            self.assertEqual(step[0]["args"]["domain"], "nvtx_app")
            self.assertTrue(step[0]["args"].get("clipped_start"))
            self.assertTrue(step[0]["args"].get("clipped_end"))
            self.assertLessEqual(step[0]["ts"], fwd[0]["ts"])
            # Nothing from after forward ended (backward, handoff).
            self.assertEqual(sorted(e["name"] for e in mine), ["forward", "train_step"])
            end = fwd[0]["ts"] + fwd[0]["dur"]
            for e in ranges(trace):
                self.assertLessEqual(e["ts"], end + 0.001, e)
                # Armed while a capture range may open: worker tasks that
                # began before the window keep their names.
                self.assertNotEqual(e["name"], "(began before the window)")

    def test_capture_range_combines_with_schedule_and_steps(self):
        out, _, _ = self.run_app(
            'prof.steps{ nvtx = "train_step" }\n'
            'prof.schedule{ skip_first = 3, active = 2, cycles = 1 }\n'
            'prof.capture_range{ nvtx = "handoff", count = 1 }\n')
        dirs = window_dirs(out)
        # The first handoff (step 0), then the scheduled steps 3-4.
        self.assertEqual([os.path.basename(d) for d in dirs],
                         ["window0_steps0-0", "window1_steps3-4"])
        first = load_trace(dirs[0])
        self.assertEqual(first["profhost"]["reason"], "nvtx range 'handoff'")
        self.assertEqual([e["name"] for e in ranges(first) if e["name"] == "handoff"],
                         ["handoff"])
        self.assertEqual(step_spans(first), [])
        second = load_trace(dirs[1])
        self.assertEqual(second["profhost"]["reason"], "schedule")
        self.assertEqual([n for n, _ in step_spans(second)], [3, 4])
        self.assertEqual(sum(e["name"] == "handoff" for e in ranges(second)), 2)

    def test_preload_without_injection_path_says_how_to_fix_it(self):
        policy = self.write("policy.lua", "prof.schedule{ active = 1 }\n")
        out = os.path.join(self.tmp, "out")
        env = base_env({"PROF_SCRIPT": policy, "PROF_OUTPUT_DIR": out, "LD_PRELOAD": LIB})
        r = run([APP, "--steps", "3", "--workers", "1", "--sleep-us", "500"], env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        hints = [l for l in profhost_lines(r.stderr) if "NVTX_INJECTION64_PATH" in l]
        self.assertEqual(len(hints), 1, r.stderr)
        self.assertIn("NVTX_INJECTION64_PATH=" + os.path.realpath(LIB), hints[0])
        # With the variable set, NVTX attaches and nothing is said.
        env["NVTX_INJECTION64_PATH"] = LIB
        out2 = os.path.join(self.tmp, "out2")
        env["PROF_OUTPUT_DIR"] = out2
        r = run([APP, "--steps", "3", "--workers", "1", "--sleep-us", "500"], env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertFalse([l for l in profhost_lines(r.stderr) if "NVTX_INJECTION64" in l],
                         r.stderr)
        trace = load_trace(window_dirs(out2)[0])
        self.assertEqual(sum(e["name"] == "forward" for e in ranges(trace)), 3)

    def test_preload_only_with_nvtx_steps_says_why_no_window_came(self):
        policy = self.write("policy.lua", 'prof.steps{ nvtx = "train_step" }\n'
                                          'prof.schedule{ skip_first = 2, active = 1 }\n')
        env = base_env({"PROF_SCRIPT": policy, "PROF_OUTPUT_DIR": os.path.join(self.tmp, "out"),
                        "LD_PRELOAD": LIB})
        r = run([APP, "--steps", "4", "--workers", "0", "--sleep-us", "200"], env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(window_dirs(os.path.join(self.tmp, "out")), [])
        hints = [l for l in profhost_lines(r.stderr) if "NVTX_INJECTION64_PATH" in l]
        self.assertEqual(len(hints), 1, r.stderr)

    def test_nvtx_capture_off_records_no_nvtx_but_still_steps(self):
        out, _, _ = self.run_app(
            'prof.steps{ nvtx = "train_step" }\n'
            'prof.schedule{ skip_first = 2, active = 2, cycles = 1 }\n'
            'prof.capture{ nvtx = false }\n')
        dirs = window_dirs(out)
        self.assertEqual([os.path.basename(d) for d in dirs], ["window0_steps2-3"])
        trace = load_trace(dirs[0])
        self.assertEqual(ranges(trace), [])
        self.assertEqual([n for n, _ in step_spans(trace)], [2, 3])


@unittest.skipUnless(os.path.exists(STRESS), "nvtx_stress not built (no NVTX headers)")
class Stress(TempDirTest):
    def test_threads_lose_duplicate_and_tear_nothing(self):
        policy = self.write("policy.lua", 'prof.capture_range{ nvtx = "stress" }\n'
                                          'prof.capture{ buffer_mb = 512 }\n')
        out = os.path.join(self.tmp, "out")
        r = run([PROF, "run", "-s", policy, "-o", out, "--", STRESS, "--threads", "8",
                 "--ranges", str(STRESS_RANGES)], timeout=600)
        self.assertEqual(r.returncode, 0, r.stderr)
        dirs = window_dirs(out)
        self.assertEqual(len(dirs), 1)
        trace = load_trace(dirs[0])
        counters = trace["profhost"]["counters"]
        self.assertEqual(counters["dropped_buffer"], 0)
        self.assertEqual(counters["dropped_noslot"], 0)
        self.assertEqual(counters["unbalanced_pops"], 0)
        self.assertEqual(counters["clipped"], 0)
        seen = {}
        leaves = {}
        pattern = re.compile(r"t(\d)#(\d+)")
        by_tid = {}
        for e in trace["traceEvents"]:
            if e.get("ph") != "X" or e["name"] == "stress":
                continue
            by_tid.setdefault(e["tid"], []).append(e)
        for tid, evs in by_tid.items():
            evs.sort(key=lambda e: (e["ts"], -e["dur"]))
            parent = None
            for e in evs:
                if e["name"] == "leaf":
                    self.assertIsNotNone(parent)
                    self.assertGreaterEqual(e["ts"], parent["ts"])
                    self.assertLessEqual(e["ts"] + e["dur"], parent["ts"] + parent["dur"] + 0.001)
                    leaves[tid] = leaves.get(tid, 0) + 1
                    continue
                m = pattern.fullmatch(e["name"])
                self.assertIsNotNone(m, "torn name %r" % e["name"])
                key = (int(m.group(1)), int(m.group(2)))
                self.assertNotIn(key, seen, "duplicated %r" % e["name"])
                seen[key] = tid
                parent = e
        self.assertEqual(len(seen), 8 * STRESS_RANGES)
        for t in range(8):
            tids = {seen[(t, k)] for k in range(STRESS_RANGES)}
            self.assertEqual(len(tids), 1, "thread %d's ranges on several tids" % t)
        self.assertEqual(sum(leaves.values()), 8 * ((STRESS_RANGES + 3) // 4))


# docs/architecture.md, "A window's memory": a window peaks within
# prof.capture{buffer_mb} + WINDOW_MEMORY_MARGIN_MB, the process's own
# memory included, whatever its names (the windows below peak at 16.6-16.8
# MiB over a 32 MiB pool and 18.2-18.3 MiB over a 64 MiB one with a name per
# range, 10-11 MiB when names repeat).
WINDOW_MEMORY_MARGIN_MB = 24


def drops(summary):
    """The summary's two counts of records a window's memory could not
    hold: (the event buffers were full, the trace would have outgrown
    buffer_mb), 0 where a line is absent."""
    full = re.search(r"(\d+) events dropped: the event buffers were full", summary)
    memory = re.search(r"(\d+) events dropped: the trace built from the event buffers "
                       r"would have outgrown prof.capture\{buffer_mb=...\}", summary)
    return (int(full.group(1)) if full else 0, int(memory.group(1)) if memory else 0)


@unittest.skipUnless(os.path.exists(STRESS), "nvtx_stress not built (no NVTX headers)")
@unittest.skipIf(SANITIZE, "a sanitizer's shadow memory is not the host's")
class WindowMemory(TempDirTest):
    def full_pool(self, buffer_mb, *stress_args):
        """nvtx_stress, 8 threads and `stress_args`, offered to a pool of
        `buffer_mb` MiB in one capture range: its peak resident size (VmHWM,
        KiB, printed once the window's files are written), the window's
        folder and its summary."""
        policy = self.write("policy%d.lua" % buffer_mb,
                            'prof.capture_range{ nvtx = "stress" }\n'
                            'prof.capture{ buffer_mb = %d }\n'
                            'prof.limits{ report_ms = 600000 }\n' % buffer_mb)
        out = os.path.join(self.tmp, "out%d" % buffer_mb)
        summary_path = os.path.join(out, "mem", "rank0", "window0_steps0-0", "summary.txt")
        r = run([PROF, "run", "-s", policy, "-o", out, "--set", "output.run=mem", "--",
                 STRESS, "--threads", "8", "--wait-for", summary_path] + list(stress_args),
                timeout=600)
        self.assertEqual(r.returncode, 0, r.stderr)
        peak_kib = int(re.search(r"nvtx_stress: peak RSS (\d+) kB", r.stdout).group(1))
        dirs = window_dirs(out)
        self.assertEqual(len(dirs), 1, r.stderr)
        with open(os.path.join(dirs[0], "summary.txt")) as f:
            return peak_kib, dirs[0], f.read()

    def test_peak_memory_is_set_by_buffer_mb(self):
        """Ranges each named anew (8 threads x N, and N/4 nested "leaf"
        ranges each) offered to full pools of 32 and 64 MiB: each name takes
        ~30 bytes in the trace beside its event, so the trace of a full
        pool would be ~1.6 x the pool (the 32 MiB window peaked at 69 MiB
        so, the 64 MiB one at 120 MiB). The trace keeps what fits in
        buffer_mb, the window's first records, and counts the rest as the
        summary says, and the process peaks at the pool plus a fixed margin
        (16.6-16.8 MiB for 32 MiB, 18.2-18.3 MiB for 64 MiB here): at
        most buffer_mb + 24 MiB, growing by less than
        2 MiB when the pool doubles. This window peaked at 282 MiB before
        the window's writing streamed (docs/performance.md, "A full
        pool")."""
        margins = []
        for mb, ranges_ in ((32, 200000), (64, 400000)):
            peak_kib, wdir, summary = self.full_pool(mb, "--ranges", str(ranges_))
            for name in ("trace.json", "key_averages.txt", "report.txt", "summary.txt"):
                self.assertTrue(os.path.exists(os.path.join(wdir, name)), name)
            kept = int(re.search(r"(\d+) events written", summary).group(1))
            full, memory = drops(summary)
            self.assertGreater(full, 0)    # the pool was full: the rest counted
            self.assertGreater(memory, 0)  # and what the trace had no room for
            # what fits is kept: ~65 bytes of trace a range (~16,000 a MiB);
            # a cut much before the budget's end would keep fewer
            self.assertGreater(kept, 12000 * mb, summary)
            # every one of the 8 x 1.25 N ranges and "stress" is either in
            # the trace or counted, once (a range the cut fell in, its
            # push kept and its pop not, is both, at most 2 a thread)
            self.assertGreaterEqual(kept + full + memory, 10 * ranges_ + 1)
            self.assertLessEqual(kept + full + memory, 10 * ranges_ + 1 + 16)
            margins.append(peak_kib - mb * 1024)
            self.assertLessEqual(margins[-1], WINDOW_MEMORY_MARGIN_MB * 1024,
                                 "%d MiB pool: peak %d KiB, %d KiB over it" %
                                 (mb, peak_kib, margins[-1]))
        self.assertLess(margins[1] - margins[0], 2 * 1024,
                        "the margin over the pool grew from %d to %d KiB" % tuple(margins))

    def test_repeated_names_peak_at_the_pool_plus_a_fixed_margin(self):
        """Full pools of 32 and 64 MiB of ranges whose names repeat (1000 a
        thread), as a program's do: the trace takes what the records took
        (40 bytes a range, so nothing is left out for its room), the drain
        hands the pool back as it builds it, and the tables and reports
        keep nothing per event, so the process peaks at the pool plus the
        same ~10 MiB for both (asserted: at most buffer_mb + 20 MiB, and the
        margin grows by less than 2 MiB when the pool doubles). With 48-byte events the margin grew by
        6.3 MiB; while query_aggregate held an index, a group and a self
        time per event the 32 MiB window peaked at ~69 MiB
        (docs/performance.md, "A full pool")."""
        margins = []
        for mb in (32, 64):
            peak_kib, wdir, summary = self.full_pool(mb, "--ranges", "300000",
                                                     "--names", "1000")
            full, memory = drops(summary)
            self.assertGreater(full, 0)     # the pool was full
            self.assertEqual(memory, 0)     # and its trace fit in buffer_mb
            with open(os.path.join(wdir, "report.txt")) as f:
                report = f.read()
            # the reports ran over every event: the nested "leaf" (one a
            # fourth range) is a row of the ranges table with its instances
            leaf = re.search(r"^ +[\d.]+ +[\d,]+ +([\d,]+) .* leaf$", report, re.M)
            self.assertIsNotNone(leaf, report)
            self.assertGreater(int(leaf.group(1).replace(",", "")), 100000)
            margins.append(peak_kib - mb * 1024)
            self.assertLessEqual(margins[-1], 20 * 1024,
                                 "%d MiB pool: peak %d KiB, %d KiB over it" %
                                 (mb, peak_kib, margins[-1]))
        self.assertLess(margins[1] - margins[0], 2 * 1024,
                        "the margin over the pool grew from %d to %d KiB" % tuple(margins))


@unittest.skipUnless(os.path.exists(HOSTILE), "nvtx_hostile not built (no NVTX headers)")
class HostileNames(TempDirTest):
    def test_hostile_names_give_valid_json(self):
        policy = self.write("policy.lua", 'prof.capture_range{ nvtx = "hostile" }\n')
        out = os.path.join(self.tmp, "out")
        # Bytes: the console summary passes the names' bytes through.
        r = subprocess.run([PROF, "run", "-s", policy, "-o", out, "--", HOSTILE],
                           env=base_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        dirs = window_dirs(out)
        self.assertEqual(len(dirs), 1)
        with open(os.path.join(dirs[0], "trace.json"), "rb") as f:
            raw = f.read()
        trace = json.loads(raw.decode("utf-8"))  # strict UTF-8, strict JSON
        names = [e["name"] for e in ranges(trace)]
        marks = [e["name"] for e in trace["traceEvents"] if e.get("ph") == "i"]
        for name in ('quote " backslash \\ slash /',
                     "newline \n tab \t cr \r bell \a esc \x1b del \x7f",
                     "non-ascii caf\u00e9 \u4e2d\u6587 \U0001F600",
                     "</script><script>alert(1)</script>", ""):
            self.assertIn(name, names)
            self.assertIn(name, marks)
        invalid = [n for n in names if n.startswith("invalid ")]
        self.assertEqual(len(invalid), 1)
        self.assertTrue(invalid[0].endswith(" end"))
        self.assertIn("\ufffd", invalid[0])
        self.assertIn(" lone \ufffd cut ", invalid[0])
        big = [n for n in names if n.startswith("big:")]
        self.assertEqual([len(n) for n in big], [4096])
        self.assertIn("wide \"\n\u00e9 \ufffd \ufffd", names)
        reg = [e for e in ranges(trace) if e["name"].startswith("registered")]
        self.assertEqual(len(reg), 1)
        self.assertEqual(reg[0]["name"], "registered \"\\\n\ufffd")
        self.assertEqual(reg[0]["args"]["domain"], "dom \"quoted\"\n\ufffd")
        self.assertEqual(reg[0]["args"]["category"], "cat \"\n\ufffd")
        self.assertIn("thread \"\n\ufffd", thread_names(trace).values())


if __name__ == "__main__":
    unittest.main()

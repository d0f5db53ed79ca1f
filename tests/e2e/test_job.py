"""End to end: job-wide requests through the run directory (docs/jobs.md).

Many ranks of a made-up job (tests/e2e/workloads/job_app.c: steps that
sleep, no torch) under one `prof run`, on one machine; ranks in UTS
namespaces of their own (`unshare -u`, where this user may) stand in for
hosts. `prof capture RUN --steps N` gives every rank one window of the
same N steps; a request file of another user's, or a bad one, is ignored
with one line and changes nothing.
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time
import unittest

from harness import (PROF, SANITIZE, TESTBIN, TempDirTest, base_env, load_trace, run,
                     step_spans)

APP = os.path.join(TESTBIN, "job_app")
RUN_NAME = "job"


def _uts_ok():
    """Whether `unshare -u` gives this user a host name of its own."""
    if not shutil.which("unshare"):
        return False
    try:
        r = subprocess.run(["unshare", "-u", "sh", "-c", "hostname profhost-uts && hostname"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                           timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0 and r.stdout.strip() == "profhost-uts"


UTS_OK = _uts_ok()


def job_windows(run_dir, suffix="_job"):
    """{rank: [window folder, ...]} of the job-wide windows under run_dir."""
    out = {}
    for d in sorted(glob.glob(os.path.join(run_dir, "rank*", "window*_steps*" + suffix))):
        rank = int(os.path.basename(os.path.dirname(d))[len("rank"):])
        out.setdefault(rank, []).append(d)
    return out


def traced_steps(window):
    """The step numbers of a window's ProfilerStep spans."""
    return [n for n, _ in step_spans(load_trace(window))]


class Job(TempDirTest):
    """Starts `n` ranks of job_app under one prof run, in the background."""

    def start(self, n, policy, steps, step_ms=20, hosts=1, extra=(), lead_s=2.0,
              rank_env=None, env=None, ranks=None):
        self.out = os.path.join(self.tmp, "out")
        self.run_dir = os.path.join(self.out, RUN_NAME)
        pol = self.write("policy.lua", 'prof.output{ run = "%s" }\n%s' % (RUN_NAME, policy))
        start_at = int((time.time() + lead_s) * 1000)
        args = " ".join([APP, "--steps", str(steps), "--step-ms", str(step_ms),
                         "--start-at", str(start_at)] + list(extra))
        lines = ["#!/bin/sh", "for i in %s; do" % " ".join(
            str(r) for r in (ranks if ranks is not None else range(n))), "  E="]
        for r, assign in sorted((rank_env or {}).items()):
            lines.append("  [ $i -eq %d ] && E='%s'" % (r, assign))
        if hosts > 1 and UTS_OK:
            lines.append("  env $E RANK=$i WORLD_SIZE=%d unshare -u sh -c "
                         "\"hostname host$(($i %% %d)) && exec %s\" > /dev/null &" % (n, hosts, args))
        else:
            lines.append("  env $E RANK=$i WORLD_SIZE=%d %s > /dev/null &" % (n, args))
        lines += ["  echo $! >> %s/pids" % self.tmp, "done", "wait", ""]
        launcher = self.write("launch.sh", "\n".join(lines))
        os.chmod(launcher, 0o755)
        self.pol = pol
        self.proc = subprocess.Popen([PROF, "run", "-s", pol, "-o", self.out, launcher],
                                     env=base_env(env), stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.start_at = start_at / 1000.0

    def finish(self, timeout=120):
        out, err = self.proc.communicate(timeout=timeout)
        self.assertEqual(self.proc.returncode, 0, err[-4000:])
        return err

    def wait_for(self, what, timeout):
        """Polls what() until true; the seconds it took."""
        t0 = time.time()
        while not what():
            if time.time() - t0 > timeout:
                self.fail("timed out after %g s" % timeout)
            time.sleep(0.1)
        return time.time() - t0

    def tearDown(self):
        if getattr(self, "proc", None) and self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()
        super().tearDown()

    def capture(self, *args):
        r = run([PROF, "capture", self.run_dir] + list(args), timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        m = re.search(r"records steps (\d+)-(\d+)", r.stdout)
        self.assertTrue(m, r.stdout)
        return int(m.group(1)), int(m.group(2))

    def check_same_steps(self, n, first, last):
        wins = job_windows(self.run_dir)
        self.assertEqual(sorted(wins), list(range(n)), wins)
        for rank, dirs in wins.items():
            self.assertEqual(len(dirs), 1, dirs)
            self.assertTrue(dirs[0].endswith("_steps%d-%d_job" % (first, last)), dirs)
            self.assertEqual(traced_steps(dirs[0]), list(range(first, last + 1)), dirs[0])
        return wins


class Capture(Job):
    POLICY = "prof.job{ poll_ms = 200 }\n"

    def test_16_ranks_record_the_same_3_steps(self):
        self.start(16, self.POLICY, steps=300)
        time.sleep(max(0, self.start_at - time.time()) + 0.5)
        first, last = self.capture("--steps", "3")
        self.assertEqual(last - first, 2)
        self.wait_for(lambda: len(job_windows(self.run_dir)) == 16 or self.proc.poll() is not None, 60)
        err = self.finish()
        self.check_same_steps(16, first, last)
        # nothing else: no window of the schedule, no second one
        self.assertEqual(glob.glob(os.path.join(self.run_dir, "rank*", "window*")),
                         glob.glob(os.path.join(self.run_dir, "rank*", "window*_job")))
        self.assertNotIn("late", err)
        # prof report RUN: the capture side by side
        r = run([PROF, "report", self.run_dir])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"^Job-wide capture of steps %d-%d \(asked by prof capture "
                         r"\(pid \d+ on .*\)\): 16 ranks wrote it\n" % (first, last))
        self.assertRegex(r.stdout, r"\n +%d +16 +" % last)

    def test_64_ranks_on_4_hosts_within_seconds(self):
        self.start(64, self.POLICY, steps=500, hosts=4, lead_s=4.0)
        time.sleep(max(0, self.start_at - time.time()) + 0.5)
        t0 = time.time()
        first, last = self.capture("--steps", "3")
        took = self.wait_for(lambda: sum(len(v) for v in job_windows(self.run_dir).values())
                             == 64, 60)
        took = time.time() - t0
        print("64 windows of steps %d-%d written %.1f s after prof capture" % (first, last, took))
        # the lead (2 polls + 1 s), 3 steps of 20 ms, 64 windows written on
        # a loaded two-core machine: a few seconds
        self.assertLess(took, 20)
        self.finish()
        wins = self.check_same_steps(64, first, last)
        if UTS_OK:
            hosts = {load_trace(d[0])["profhost"]["hostname"] for d in wins.values()}
            self.assertEqual(hosts, {"host0", "host1", "host2", "host3"})

    def test_late_rank_starts_at_its_next_step_and_says_so(self):
        self.start(2, self.POLICY, steps=200)
        time.sleep(max(0, self.start_at - time.time()) + 1.0)
        r = run([PROF, "capture", self.run_dir, "--steps", "2", "--first", "5"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("record steps 5-6", r.stdout)
        self.wait_for(lambda: len(job_windows(self.run_dir)) == 2, 30)
        self.finish()
        for rank, dirs in job_windows(self.run_dir).items():
            steps = traced_steps(dirs[0])
            self.assertEqual(len(steps), 2)
            self.assertGreater(steps[0], 40)
            reason = load_trace(dirs[0])["profhost"]["reason"]
            self.assertRegex(reason, r"^job capture \d+-\d+-[0-9a-f]+ \(late: asked from step 5\)$")
        r = run([PROF, "report", self.run_dir])
        self.assertIn("Job-wide capture of steps 5-6 (asked by prof capture", r.stdout)
        self.assertIn("2 ranks wrote it (2 of them late: other steps, left out of the step "
                      "table)", r.stdout)

    def test_a_second_request_while_one_waits_is_refused(self):
        # the first asks for steps far ahead; the second, meanwhile, is
        # refused by every rank in one line; prof report says nobody
        # recorded it and shows the first
        self.start(2, self.POLICY, steps=250)
        time.sleep(max(0, self.start_at - time.time()) + 0.5)
        r = run([PROF, "capture", self.run_dir, "--steps", "2", "--first", "200"])
        self.assertEqual(r.returncode, 0, r.stderr)
        time.sleep(0.5)
        r = run([PROF, "capture", self.run_dir, "--steps", "2", "--first", "150"])
        self.assertEqual(r.returncode, 0, r.stderr)
        second = re.search(r"\(request (\S+)\)", r.stdout).group(1)
        err = self.finish()
        lines = [l for l in err.splitlines() if "is not recorded here" in l]
        # the two ranks and the launcher's shell (a process of the run:
        # it queued the first request too, at a step it never reaches)
        self.assertEqual(len(lines), 3, err[-3000:])
        for l in lines:
            self.assertEqual(l, "profhost: job capture %s (steps 150-151) is not recorded "
                             "here: a capture request is already queued" % second)
        self.check_same_steps(2, 200, 201)
        r = run([PROF, "report", self.run_dir])
        self.assertTrue(r.stdout.startswith(
            "Job-wide requests no rank recorded (the latest first; each rank's log says why): "
            "capture-%s\nJob-wide capture of steps 200-201 " % second), r.stdout)

    def test_from_the_repl_of_one_rank(self):
        self.start(4, self.POLICY, steps=300)
        time.sleep(max(0, self.start_at - time.time()) + 0.5)
        with open(os.path.join(self.tmp, "pids")) as f:
            pid = f.read().split()[2]
        r = run([PROF, "attach", pid, "-e", 'print(prof.capture_now{ steps = 2, job = true })'],
                timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "true")
        self.wait_for(lambda: len(job_windows(self.run_dir)) == 4, 30)
        self.finish()
        steps = {tuple(traced_steps(d[0])) for d in job_windows(self.run_dir).values()}
        self.assertEqual(len(steps), 1, steps)
        self.assertEqual(len(steps.pop()), 2)


def dump_dirs(run_dir, suffix):
    """{rank: [recorder folder, ...]} of the dumps named `suffix`."""
    out = {}
    for d in sorted(glob.glob(os.path.join(run_dir, "rank*", "recorder*_steps*_" + suffix))):
        rank = int(os.path.basename(os.path.dirname(d))[len("rank"):])
        out.setdefault(rank, []).append(d)
    return out


def summary(folder):
    with open(os.path.join(folder, "summary.txt")) as f:
        return f.read()


class Dumps(Job):
    """prof.recorder{ job = true }: one rank's dump, every rank's steps."""

    # a slow step: 10x the median and over 250 ms (20 ms steps on a loaded
    # two-core machine take tens of ms, not 250), from step 40 on. The
    # ranks do not wait for each other (no collective): when rank 5's slow
    # step ends they are 20 steps further, and a poll later 10 more: they
    # keep 60. max_dumps is high: a step the machine made slow anyway is
    # dumped by every rank too, as it should be, and must not use them up.
    POLICY = """
prof.job{ poll_ms = 200 }
prof.recorder{ steps = 60, job = true, max_dumps = 100 }
prof.on_step(function(s)
  if s.step >= 40 and s.duration_ms > 10 * s.median_ms and s.duration_ms > 250 then
    prof.dump{ steps = 5, reason = "slow step" }
  end
end)
"""

    def test_rank_5_slow_gives_16_dumps_of_the_same_steps(self):
        self.start(16, self.POLICY, steps=150, extra=["--slow-rank", "5", "--slow-at", "60",
                                                      "--slow-ms", "400"])
        self.wait_for(lambda: len(dump_dirs(self.run_dir, "by-rank5")) == 16 or
                      self.proc.poll() is not None, 60)
        err = self.finish()
        dumps = dump_dirs(self.run_dir, "by-rank5")
        self.assertEqual(sorted(dumps), list(range(16)), err[-3000:])
        for rank, dirs in dumps.items():
            self.assertEqual(len(dirs), 1, dirs)
            self.assertTrue(dirs[0].endswith("_steps56-60_by-rank5"), dirs)
            self.assertEqual(traced_steps(dirs[0]), [56, 57, 58, 59, 60], dirs[0])
            if rank != 5:
                self.assertIn("job dump: rank 5's of steps 56-60 (slow step)",
                              summary(dirs[0]))
        # the slow step is rank 5's alone
        durs = {}
        for rank, dirs in dumps.items():
            spans = dict(step_spans(load_trace(dirs[0])))
            durs[rank] = spans[60]["dur"] / 1000.0
        self.assertGreater(durs[5], 400, durs)
        self.assertLess(max(v for r, v in durs.items() if r != 5), 250, durs)
        # one publication of those steps, rank 5's
        names = [n for n in os.listdir(os.path.join(self.run_dir, "job")) if "steps56-60" in n]
        self.assertEqual(len(names), 1, names)
        self.assertRegex(names[0], r"^dump-\d+-steps56-60$")
        # prof report RUN: the dump side by side, rank 5 named
        r = run([PROF, "report", self.run_dir])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("Job-wide dump of steps 56-60, rank 5's (slow step): 16 ranks wrote it",
                      r.stdout)
        self.assertRegex(r.stdout, r"\n  rank 5 \(\S+\) was slow: its forward took \d+\.\d ms "
                         r"more than the ranks' median")
        self.assertIn("the others did not wait for it", r.stdout)
        self.assertRegex(r.stdout, r"\n +60 +16 +[\d.]+ +4\d\d\.\d+  rank 5 4\d\d\.\d+, ")

    def test_a_rank_that_no_longer_holds_the_steps_says_so(self):
        # rank 0 dumps 30 steps; rank 1, about 30 steps ahead by then, keeps
        # 40: its folder holds the asked steps it still had, and its
        # summary says which it lacked
        self.start(2, self.POLICY.replace("steps = 5", "steps = 30"), steps=120,
                   extra=["--slow-rank", "0", "--slow-at", "60", "--slow-ms", "400"],
                   rank_env={1: "PROF_SET=recorder.steps=40"})
        self.wait_for(lambda: len(dump_dirs(self.run_dir, "by-rank0")) == 2 or
                      self.proc.poll() is not None, 60)
        err = self.finish()
        dumps = dump_dirs(self.run_dir, "by-rank0")
        self.assertEqual(sorted(dumps), [0, 1], err[-3000:])
        self.assertTrue(dumps[0][0].endswith("_steps31-60_by-rank0"), dumps)
        first = int(re.search(r"_steps(\d+)-60_", dumps[1][0]).group(1))
        self.assertGreater(first, 31)
        self.assertEqual(traced_steps(dumps[1][0]), list(range(first, 61)))
        self.assertIn("job dump of steps 31-60: this rank no longer held steps 31-%d "
                      "(prof.recorder{ steps } keeps the last 40)" % (first - 1),
                      summary(dumps[1][0]))


    def test_a_rank_killed_by_sigkill_is_answered_by_the_others(self):
        # ranks 0 and 2 under one prof run; rank 1 under its own, killed
        # by SIGKILL in step 60: its prof run salvages its recorder and
        # tells the job, whose other ranks still run (without a collective
        # to wait in: they keep 40 steps, as many as they run meanwhile)
        env = {"PROF_RUN_ID": "sigkill-job"}
        policy = "prof.job{ poll_ms = 200 }\nprof.recorder{ steps = 40, job = true }\n"
        self.start(3, policy, steps=150, env=env, ranks=[0, 2])
        r = run([PROF, "run", "-s", self.pol, "-o", self.out, "env", "RANK=1", "WORLD_SIZE=3",
                 APP, "--steps", "150", "--step-ms", "20", "--start-at",
                 str(int(self.start_at * 1000)), "--kill-at", "60"], env=base_env(env))
        self.assertEqual(r.returncode, 128 + 9, r.stderr)
        m = re.search(r"told the job's other ranks of rank 1's salvaged dump \(steps "
                      r"(\d+)-60\): ", r.stderr)
        self.assertTrue(m, r.stderr)
        first = int(m.group(1))
        self.wait_for(lambda: len(dump_dirs(self.run_dir, "by-rank1")) == 3 or
                      self.proc.poll() is not None, 60)
        err = self.finish()
        dumps = dump_dirs(self.run_dir, "by-rank1")
        self.assertEqual(sorted(dumps), [0, 1, 2], err[-3000:])
        for rank, dirs in dumps.items():
            self.assertTrue(dirs[0].endswith("_steps%d-60_by-rank1" % first),
                            (dirs, summary(dirs[0]), err[-3000:]))
            self.assertEqual(traced_steps(dirs[0]), list(range(first, 61)), dirs[0])
        self.assertIn("job dump: rank 1's of steps %d-60 (salvaged after SIGKILL)" % first,
                      summary(dumps[0][0]))


def synth_job(run_dir, n, slow, extra_ms=100.0):
    """A job-wide dump of steps 10-14 by rank `slow` in a run of n ranks that
    meet in an allreduce each step: rank `slow`'s forward of step 14 takes
    extra_ms more, and the others wait for it inside allreduce."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import synth_trace
    MS = synth_trace.MS
    os.makedirs(os.path.join(run_dir, "job"))
    with open(os.path.join(run_dir, "job", "dump-29000000-steps10-14"), "w") as f:
        f.write("profhost-job 1\nkind dump\ncreated_ns 1740000000000000000\nrank %d\npid 1\n"
                "first 10\nlast 14\npartial 0\nhost node%d\nreason slow step\n" % (slow, slow))
    for r in range(n):
        b = synth_trace.Builder(rank=r, world_size=n)
        t = 1000 * MS
        for s in range(10, 15):
            x = extra_ms * MS if s == 14 else 0
            b.step(s, t, 20 * MS + x)
            b.phase("data", t, 1 * MS)
            b.phase("forward", t + 1 * MS, 8 * MS + (x if r == slow else 0))
            c = t + 9 * MS + (x if r == slow else 0)
            b.phase("backward", c, 9 * MS + (0 if r == slow else x))
            b.x("user_annotation", "allreduce", c + 2 * MS, 6 * MS + (0 if r == slow else x))
            b.phase("optimizer", t + 18 * MS + x, 2 * MS)
            t += 20 * MS + x
        doc = b.doc()
        doc["profhost"]["hostname"] = "node%d" % (r // 8)
        d = os.path.join(run_dir, "rank%d" % r, "recorder0_steps10-14_by-rank%d" % slow)
        os.makedirs(d)
        with open(os.path.join(d, "trace.json"), "w") as f:
            json.dump(doc, f)


class Report(TempDirTest):
    """prof report RUN: a job-wide dump side by side across ranks, in
    memory that does not grow with the ranks."""

    def report(self, run_dir):
        """prof report run_dir's text and its peak memory (KiB)."""
        with open(os.path.join(self.tmp, "report.txt"), "w+") as out:
            p = subprocess.Popen([PROF, "report", run_dir], stdout=out,
                                 stderr=subprocess.STDOUT)
            _, status, ru = os.wait4(p.pid, 0)
            p.returncode = os.waitstatus_to_exitcode(status)
            out.seek(0)
            text = out.read()
        self.assertEqual(p.returncode, 0, text)
        return text, ru.ru_maxrss

    def test_the_slow_rank_and_what_the_others_waited_in(self):
        run_dir = os.path.join(self.tmp, "run")
        synth_job(run_dir, 16, 11)
        text, _ = self.report(run_dir)
        self.assertIn("Job-wide dump of steps 10-14, rank 11's (slow step): 16 ranks wrote it\n",
                      text)
        self.assertIn("  rank 11 (node1) was slow: its forward took 100.0 ms more than the "
                      "ranks' median (140.0 ms against 40.0 ms, over 5 steps)\n", text)
        self.assertIn("  the others were waiting in backward (inside `allreduce`): 100.0 ms "
                      "more than rank 11 there (median 145.0 ms against 45.0 ms)\n", text)
        self.assertRegex(text, r"\n +14 +16 +120\.000 +120\.000  rank 0 120\.000, ")
        # side by side: each rank's row, the others most inside allreduce
        self.assertRegex(text, r"\n +11 node1 +200\.000 +5\.000 +140\.000 +45\.000 .* "
                         r"forward 140\.000\n")
        self.assertRegex(text, r"\n +3 node0 +200\.000 +5\.000 +40\.000 +145\.000 .* "
                         r"allreduce 130\.000\n")

    def test_4096_ranks_in_the_memory_of_128(self):
        small, big = os.path.join(self.tmp, "r128"), os.path.join(self.tmp, "r4096")
        synth_job(small, 128, 77)
        synth_job(big, 4096, 3001)
        text, rss_small = self.report(small)
        self.assertIn("rank 77 (node9) was slow: its forward took 100.0 ms", text)
        text, rss_big = self.report(big)
        self.assertIn("Job-wide dump of steps 10-14, rank 3001's (slow step): 4096 ranks "
                      "wrote it\n", text)
        self.assertIn("rank 3001 (node375) was slow: its forward took 100.0 ms", text)
        self.assertIn("the others were waiting in backward (inside `allreduce`)", text)
        self.assertNotIn("Ranks side by side", text)  # too many to show
        # 32 times the ranks, the same memory: one rank's trace at a time
        # (AddressSanitizer keeps freed memory in quarantine: not there)
        print("prof report: %d KiB for 128 ranks, %d KiB for 4096" % (rss_small, rss_big))
        if not SANITIZE:
            self.assertLess(rss_big - rss_small, 1024, (rss_small, rss_big))


class Hangs(Job):
    """A hang on one rank brings every rank's hang report: the ranks that
    wait show the range they wait in."""

    def test_every_rank_reports_rank_2s_hang(self):
        policy = ("prof.job{ poll_ms = 200 }\nprof.recorder{ steps = 10, job = true }\n"
                  "prof.watchdog{ after_s = 30, factor = 0 }\n")
        # rank 2 alone has a 1 s limit; its step 40 lasts 4 s longer, and
        # the others wait for it in their allreduce (--sync)
        self.start(4, policy, steps=80,
                   extra=["--slow-rank", "2", "--slow-at", "40", "--slow-ms", "4000", "--sync"],
                   rank_env={2: "PROF_SET=watchdog.after_s=1"})
        err = self.finish()
        reports = {}
        for d in glob.glob(os.path.join(self.run_dir, "rank*", "hang*_step*")):
            rank = int(os.path.basename(os.path.dirname(d))[len("rank"):])
            reports.setdefault(rank, []).append(d)
        self.assertEqual(sorted(reports), [0, 1, 2, 3], err[-3000:])
        for rank, dirs in reports.items():
            self.assertEqual(len(dirs), 1, dirs)
            self.assertTrue(dirs[0].endswith("_step40_by-rank2"), dirs)
            with open(os.path.join(dirs[0], "hang.json")) as f:
                hang = json.load(f)
            ranges = [r["name"] for t in hang["threads"] for r in t.get("ranges", [])]
            if rank == 2:
                self.assertNotIn("asked_by", hang)
                self.assertIn("forward", ranges)
            else:
                self.assertEqual(hang["asked_by"]["rank"], 2)
                self.assertEqual(hang["asked_by"]["step"], 40)
                self.assertIn("allreduce", ranges, hang)
                with open(os.path.join(dirs[0], "hang_report.txt")) as f:
                    self.assertIn("asked by rank 2's hang (its step 40", f.read())
        self.assertEqual(len(glob.glob(os.path.join(self.run_dir, "job", "hang-*-step40"))), 1)


class Refused(Job):
    """Requests a process must not honour: one line each, nothing else."""

    def one_rank(self):
        self.out = os.path.join(self.tmp, "out")
        self.run_dir = os.path.join(self.out, RUN_NAME)
        pol = self.write("policy.lua", 'prof.output{ run = "%s" }\nprof.job{ poll_ms = 100 }\n'
                         % RUN_NAME)
        self.proc = subprocess.Popen([PROF, "run", "-s", pol, "-o", self.out, APP,
                                      "--steps", "150", "--step-ms", "20"],
                                     env=base_env(), stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        time.sleep(1.0)
        os.makedirs(os.path.join(self.run_dir, "job"), exist_ok=True)

    def plant(self, text, owner=None):
        name = "capture-%d-1-abcd" % int(time.time() * 1000)
        path = os.path.join(self.run_dir, "job", name)
        with open(path + ".tmp", "w") as f:
            f.write(text)
        if owner is not None:
            os.chown(path + ".tmp", owner, owner)
        os.rename(path + ".tmp", path)
        return path

    @unittest.skipUnless(os.geteuid() == 0, "needs root to give a file to another user")
    def test_request_of_another_user_is_ignored_with_one_line(self):
        self.one_rank()
        path = self.plant("profhost-job 1\nkind capture\ncreated_ns %d\nsteps 2\nfirst 0\n"
                          % time.time_ns(), owner=65534)
        err = self.finish()
        lines = [l for l in err.splitlines() if "job request" in l]
        self.assertEqual(lines, ["profhost: job request '%s' ignored: it belongs to uid 65534, "
                                 "not to you (uid 0); only your own requests, written by "
                                 "prof capture, are honoured" % path], err)
        self.assertEqual(job_windows(self.run_dir), {})
        self.assertEqual(glob.glob(os.path.join(self.run_dir, "rank*", "window*")), [])

    def test_bad_request_is_ignored_with_one_line(self):
        self.one_rank()
        path = self.plant("profhost-job 1\nkind capture\ncreated_ns %d\nsteps 0\n"
                          % time.time_ns())
        err = self.finish()
        lines = [l for l in err.splitlines() if "job request" in l]
        self.assertEqual(lines, ["profhost: job request '%s' ignored: line 4: 'steps' must be "
                                 "an integer from 1 to 100000, got '0'; only your own requests, "
                                 "written by prof capture, are honoured" % path], err)
        self.assertEqual(glob.glob(os.path.join(self.run_dir, "rank*", "window*")), [])


class Cli(TempDirTest):
    def test_bad_arguments(self):
        for args, msg in (([], "missing the run directory"),
                          (["x", "--steps", "0"], "--steps needs a number of steps from 1 to 100000"),
                          (["x", "--first", "-3"], "--first needs a step number from 1"),
                          (["x", "--first", "3", "--lead", "2"], "--lead has no use with --first"),
                          (["x", "--wat"], "unknown option '--wat'")):
            r = run([PROF, "capture"] + args)
            self.assertEqual(r.returncode, 2, (args, r.stderr))
            self.assertIn("prof capture: " + msg, r.stderr)
            self.assertIn("(usage: prof capture RUN", r.stderr)

    def test_no_process_reads_it(self):
        run_dir = os.path.join(self.tmp, "out", "nobody")
        r = run([PROF, "capture", run_dir, "--wait", "0.3"])
        self.assertEqual(r.returncode, 1)
        self.assertIn("prof capture: no process of %s read the request within 0.3 s" % run_dir,
                      r.stderr)
        names = os.listdir(os.path.join(run_dir, "job"))
        self.assertEqual(len(names), 1)
        self.assertRegex(names[0], r"^capture-\d+-\d+-[0-9a-f]{4}$")
        with open(os.path.join(run_dir, "job", names[0])) as f:
            self.assertRegex(f.read(), r"^profhost-job 1\nkind capture\ncreated_ns \d+\nsteps 3\n"
                             r"first 0\nlead_ms 0\nfrom prof capture \(pid \d+ on .*\)\n$")


if __name__ == "__main__":
    unittest.main(verbosity=2)

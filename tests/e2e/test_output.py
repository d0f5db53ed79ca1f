"""End to end: where the host writes, under hostile and reused directories.

Another user who can write to the output directory (-o /tmp/x, prof_out in
/tmp) must not be able to make the host write anywhere else: pre-made run
and window directories and a temporary file planted as a link to the
victim's file are refused with one line and the victim's file is left
untouched. A run name reused by a later launch does not mix the launches.
"""
import os
import re
import subprocess
import time
import unittest

from harness import (LIB, PROF, TESTBIN, TempDirTest, as_other_user, base_env,
                     ensure_other_user, profhost_lines, run, window_dirs)

STEPS_APP = os.path.join(TESTBIN, "steps_app")
# One window of steps 1-3, nothing else.
ONE_WINDOW = "prof.schedule{ wait = 0, warmup = 0, active = 3, cycles = 1 }\n"


def output_lines(stderr):
    """The host's lines about where it writes (not, e.g., the GPU's absence)."""
    return [l for l in profhost_lines(stderr) if "directory" in l]


def as_other(cmd):
    """Runs cmd (a list) as the other user; returns the CompletedProcess."""
    return run(as_other_user(cmd), env=base_env())


class OtherUserPlantsLinks(TempDirTest):
    """The victim (root here) profiles into a world-writable directory in
    which another user prepared the run: its directories, and trace.json's
    temporary name as a link to the victim's file (pids are guessable; the
    test knows it)."""

    def setUp(self):
        super().setUp()
        ids = ensure_other_user()
        if ids is None:
            self.skipTest("needs root to create a second user and act as it "
                          "(CI runs as root)")
        self.uid = ids[0]
        os.chmod(self.tmp, 0o755)
        self.shared = os.path.join(self.tmp, "shared")
        os.mkdir(self.shared)
        os.chmod(self.shared, 0o1777)  # like /tmp
        self.victim = os.path.join(self.tmp, "victim.txt")
        with open(self.victim, "w") as f:
            f.write("the victim's data\n")
        self.policy = self.write("policy.lua", ONE_WINDOW)

    def start_victim(self, out):
        """Starts steps_app under the host, held before exec so its pid is
        known; returns the Popen (released by writing a line)."""
        env = base_env({"PROF_SCRIPT": self.policy, "PROF_OUTPUT_DIR": out,
                        "PROF_RUN_ID": "run1"})
        return subprocess.Popen(["sh", "-c", 'read _; exec env LD_PRELOAD="$1" "$0" --steps 6',
                                 STEPS_APP, LIB],
                                env=env, cwd=self.tmp, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def window_name(self):
        """The window directory name the policy gives, from a clean run."""
        out = os.path.join(self.tmp, "clean")
        r = run([STEPS_APP, "--steps", "6"], env=base_env({
            "LD_PRELOAD": LIB, "PROF_SCRIPT": self.policy, "PROF_OUTPUT_DIR": out,
            "PROF_RUN_ID": "run1"}))
        self.assertEqual(r.returncode, 0, r.stderr)
        dirs = window_dirs(out)
        self.assertEqual(len(dirs), 1, r.stderr)
        return os.path.basename(dirs[0])

    def test_planted_link_is_refused_and_the_victim_file_untouched(self):
        window = self.window_name()
        out = os.path.join(self.shared, "out")
        victim = self.start_victim(out)
        pid = victim.pid
        # The attacker prepares everything, as itself.
        plant = ("set -e; umask 0; mkdir -p \"$1/run1/rank0/$2\" \"$1/run1/rank0/$2.pid$3\"; "
                 "for d in \"$1/run1/rank0/$2\" \"$1/run1/rank0/$2.pid$3\"; do "
                 "for f in trace.json summary.txt capture.phb key_averages.txt; do "
                 "ln -s \"$4\" \"$d/$f.tmp.$3\"; done; done")
        r = as_other(["sh", "-c", plant, "sh", out, window, str(pid), self.victim])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(os.stat(os.path.join(out, "run1")).st_uid, self.uid)
        stdout, stderr = victim.communicate("go\n", timeout=60)
        self.assertEqual(victim.returncode, 0, stderr)
        self.assertEqual(stdout, "done 6\n")
        with open(self.victim) as f:
            self.assertEqual(f.read(), "the victim's data\n")
        self.assertEqual(output_lines(stderr), [
            "profhost: refusing output directory '%s/run1': it belongs to uid %d, not to "
            "you (uid 0), so its owner could redirect what profhost writes there (remove "
            "it, or write elsewhere: prof run -o DIR, PROF_OUTPUT_DIR or prof.output{ dir "
            "= ... })" % (out, self.uid)])

    def test_world_writable_run_directory_is_refused(self):
        # Made by the victim's own user but left open to everyone (umask 0).
        out = os.path.join(self.shared, "out2")
        os.makedirs(os.path.join(out, "run1"))
        os.chmod(os.path.join(out, "run1"), 0o777)
        victim = self.start_victim(out)
        stdout, stderr = victim.communicate("go\n", timeout=60)
        self.assertEqual((victim.returncode, stdout), (0, "done 6\n"), stderr)
        self.assertEqual(output_lines(stderr), [
            "profhost: refusing output directory '%s/run1': it is writable by every user "
            "(mode 777), who could plant files where profhost writes (chmod go-w it, or "
            "write elsewhere)" % out])
        self.assertEqual(os.listdir(os.path.join(out, "run1")), [])

    def test_run_directory_made_by_the_host_is_private_to_the_user(self):
        # The shared directory is the attacker's; what the host makes in it
        # is not, and the windows are written there.
        out = os.path.join(self.shared, "out3")
        r = as_other(["mkdir", "-m", "0777", out])
        self.assertEqual(r.returncode, 0, r.stderr)
        victim = self.start_victim(out)
        stdout, stderr = victim.communicate("go\n", timeout=60)
        self.assertEqual((victim.returncode, stdout), (0, "done 6\n"), stderr)
        dirs = window_dirs(out)
        self.assertEqual(len(dirs), 1, stderr)
        for d in (os.path.join(out, "run1"), os.path.dirname(dirs[0]), dirs[0]):
            st = os.stat(d)
            self.assertEqual((st.st_uid, st.st_mode & 0o777), (0, 0o755), d)
        self.assertTrue(os.path.isfile(os.path.join(dirs[0], "trace.json")))


class RunReuse(TempDirTest):
    """A run directory belongs to one launch (its PROF_RUN_ID, which prof run
    sets once for every process it starts)."""

    def run_app(self, out, run_id, rank="0", policy=None):
        env = {"LD_PRELOAD": LIB, "PROF_SCRIPT": policy or self.policy,
               "PROF_OUTPUT_DIR": out, "RANK": rank}
        if run_id:
            env["PROF_RUN_ID"] = run_id
        r = run([STEPS_APP, "--steps", "6"], env=base_env(env), cwd=self.tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r

    def setUp(self):
        super().setUp()
        self.policy = self.write("policy.lua", ONE_WINDOW + 'prof.output{ run = "x" }\n')

    def test_a_later_launch_gets_its_own_directory(self):
        out = os.path.join(self.tmp, "out")
        self.run_app(out, "launch-1")
        self.run_app(out, "launch-1", rank="1")  # another rank of the same launch
        r = self.run_app(out, "launch-2")
        self.assertIn("profhost: run directory '%s/x' holds another run; this run writes "
                      "to '%s/x.2' (name each run: prof.output{ run = ... } or PROF_RUN_ID)"
                      % (out, out), profhost_lines(r.stderr))
        self.assertEqual(sorted(os.listdir(os.path.join(out, "x"))),
                         [".profhost-run", "rank0", "rank1"])
        self.assertEqual(sorted(os.listdir(os.path.join(out, "x.2"))),
                         [".profhost-run", "rank0"])
        self.assertEqual(len(os.listdir(os.path.join(out, "x", "rank0"))), 1)
        with open(os.path.join(out, "x.2", ".profhost-run")) as f:
            self.assertEqual(f.read(), "launch-2\n")
        # prof report on the first run sees its two ranks, one window each
        r = run([PROF, "report", os.path.join(out, "x")])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith("profhost run report: x, 2 ranks, 2 windows\n"),
                        r.stdout)

    def test_two_launches_under_prof_run(self):
        out = os.path.join(self.tmp, "out")
        for i in range(2):
            if i:
                time.sleep(1.1)  # prof run's run id counts seconds
            r = run([PROF, "run", "-s", self.policy, "-o", out, "--", STEPS_APP,
                     "--steps", "6"], env=base_env(), cwd=self.tmp)
            self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(sorted(d for d in os.listdir(out)), ["x", "x.2"])
        self.assertRegex(r.stderr, r"profhost: wrote 1 window\(s\) under %s/x\.2/rank0\n"
                         % re.escape(out))

    def test_ranks_launched_a_second_apart_share_the_run(self):
        # Two ranks of one job, each under its own prof run (as when torchrun
        # is not used): each prof run makes up its run id from the second it
        # started in, so two ranks started across a second boundary (a busy
        # machine) have different ones, given here outright. They still
        # share one run directory: they rendezvous at one MASTER_ADDR:
        # MASTER_PORT, and each started before the other wrote its marker.
        # A later launch at the same rendezvous is another run.
        out = os.path.join(self.tmp, "out")

        def launch(run_ids):
            procs = []
            for rank, run_id in enumerate(run_ids):
                env = base_env({"PROF_RUN_ID": run_id, "MASTER_ADDR": "127.0.0.1",
                                "MASTER_PORT": "29500", "RANK": str(rank),
                                "WORLD_SIZE": "2"})
                # the window (steps 1-3) is written 1.5 s in: both have started
                procs.append(subprocess.Popen(
                    [PROF, "run", "-s", self.policy, "-o", out, "--", STEPS_APP, "--steps",
                     "4", "--sleep-us", "500000"], env=env, cwd=self.tmp,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
            for p in procs:
                _, err = p.communicate(timeout=120)
                self.assertEqual(p.returncode, 0, err)
            return err

        launch(["app-20260101-120000", "app-20260101-120001"])
        self.assertEqual(sorted(os.listdir(out)), ["x"])
        self.assertEqual(sorted(os.listdir(os.path.join(out, "x"))),
                         [".profhost-run", "rank0", "rank1"])
        r = run([PROF, "report", os.path.join(out, "x")])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith("profhost run report: x, 2 ranks, 2 windows\n"),
                        r.stdout)
        err = launch(["app-20260101-120100", "app-20260101-120100"])
        self.assertEqual(sorted(os.listdir(out)), ["x", "x.2"])
        self.assertEqual(sorted(os.listdir(os.path.join(out, "x.2"))),
                         [".profhost-run", "rank0", "rank1"])
        self.assertIn("under %s/x.2/rank1" % out, err)



class FullDisk(TempDirTest):
    """An output folder whose file system fills up: the program runs on
    undisturbed, and each file profhost could not write is named in one
    line that says what to do."""

    def test_a_full_file_system_is_said_with_what_to_do(self):
        out = os.path.join(self.tmp, "out")
        os.mkdir(out)
        policy = self.write("policy.lua", "prof.schedule{ wait = 0, warmup = 0, active = 3, "
                                          "cycles = 4 }\n")
        # a 64 KiB tmpfs (a mount namespace of its own): the first window
        # or two fit, the next ones do not
        script = ('mount -t tmpfs -o size=64k tmpfs "$OUT" || exit 97\n'
                  'LD_PRELOAD="$LIB" PROF_SCRIPT="$POLICY" PROF_OUTPUT_DIR="$OUT" '
                  '"$APP" --steps 12\n')
        env = base_env({"LIB": LIB, "POLICY": policy, "OUT": out, "APP": STEPS_APP})
        user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
        try:
            r = run(["unshare"] + user + ["--mount", "--", "bash", "-c", script], env=env,
                    cwd=self.tmp)
        except FileNotFoundError:
            self.skipTest("no unshare here")
        if r.returncode == 97 or "unshare failed" in r.stderr:
            self.skipTest("cannot mount a tmpfs here: " + r.stderr.strip()[-200:])
        self.assertEqual(r.returncode, 0, r.stderr)
        full = [l for l in profhost_lines(r.stderr) if "No space left on device" in l]
        self.assertTrue(full, r.stderr)
        for line in full:
            self.assertRegex(line, r"cannot \w+ '%s/" % re.escape(out))
            self.assertTrue(line.endswith("(free some space there, or write the output to "
                                          "another folder)"), line)


if __name__ == "__main__":
    unittest.main(verbosity=2)

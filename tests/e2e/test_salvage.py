"""End to end: salvage after SIGKILL and _exit() (docs/recorder.md). A
target that dies inside a window, or with the flight recorder on, leaves
its recent past in its salvage file; `prof run` writes it as a window
folder marked "salvaged", with the target's exit status unchanged, and
`prof salvage PATH` does the same for a process started without the
launcher. Bad files give one line; a clean run leaves no file. A salvage
file is untrusted: another user's is refused, and so is a run folder it
names through '..', a link or a folder others own or can write (`-o DIR`
writes it elsewhere). Files of processes that ended with nothing to
salvage them are found by `prof salvage --all`, the next `prof run` and
the host's start; a taken name gets another; a PROF_SALVAGE_DIR of
another user's is refused."""
import fcntl
import glob
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

from harness import (LIB, PROF, SALVAGE_DIR, SANITIZE, TESTBIN, TempDirTest, base_env,
                     ensure_other_user, load_trace, profhost_lines, run, step_spans)

APP = os.path.join(TESTBIN, "salvage_app")
NVTX_APP = os.path.join(TESTBIN, "salvage_nvtx")

WINDOW_POLICY = "prof.schedule{ wait = 2, warmup = 1, active = 100 }\n"
RECORDER_POLICY = "prof.recorder{ steps = 6 }\n"


def salvaged_dirs(out):
    return sorted(glob.glob(os.path.join(out, "*", "rank*", "*_steps*")))


class SalvageTest(TempDirTest):
    def setUp(self):
        super().setUp()
        if not os.path.isdir("/dev/shm"):
            self.skipTest("no /dev/shm here")
        self.shm = tempfile.mkdtemp(prefix="profhost-e2e-salvage-", dir="/dev/shm")

    def tearDown(self):
        shutil.rmtree(self.shm, ignore_errors=True)
        super().tearDown()

    def prof_run(self, policy, *args):
        out = os.path.join(self.tmp, "out")
        r = run([PROF, "run", "-s", self.write("policy.lua", policy), "-o", out, "--",
                 APP] + list(args))
        return r, out

    def preload(self, policy, *args):
        """Runs the app under the host without the launcher."""
        out = os.path.join(self.tmp, "out")
        env = base_env({"LD_PRELOAD": LIB, "PROF_SCRIPT": self.write("policy.lua", policy),
                        "PROF_OUTPUT_DIR": out, "PROF_SALVAGE_DIR": self.shm})
        return run([APP] + list(args), env=env), out

    def files(self):
        return sorted(glob.glob(os.path.join(self.shm, "*.salvage")))

    def check_salvaged(self, d, first, last, how):
        """d holds steps first..last-1 whole and step `last` partial."""
        for name in ("trace.json", "summary.txt", "key_averages.txt", "capture.phb",
                     "report.txt", "report.html"):
            self.assertTrue(os.path.exists(os.path.join(d, name)), name)
        trace = load_trace(d)
        self.assertIn("salvaged " + how, trace["profhost"]["reason"])
        self.assertEqual(trace["profhost"]["last_step"], last)
        steps = [n for n, _ in step_spans(trace)]
        self.assertEqual(steps, list(range(first, last + 1)))
        work = [e for e in trace["traceEvents"]
                if e.get("ph") == "X" and e["name"] == "work"]
        self.assertEqual(len(work), last - first + 1)
        with open(os.path.join(d, "summary.txt")) as f:
            summary = f.read()
        self.assertIn("salvaged " + how, summary)
        self.assertIn("torn records dropped", summary)
        return trace


class Launcher(SalvageTest):
    def test_sigkill_in_a_window(self):
        r, out = self.prof_run(WINDOW_POLICY, "--die-at", "20")
        self.assertEqual(r.returncode, 128 + 9, r.stderr)
        self.assertNotIn("no capture window was reached", r.stderr)
        dirs = salvaged_dirs(out)
        self.assertEqual([os.path.basename(d) for d in dirs], ["window0_steps3-20"], r.stderr)
        trace = self.check_salvaged(dirs[0], 3, 20, "after SIGKILL")
        self.assertEqual(trace["profhost"]["first_step"], 3)
        self.assertIn("salvaged window 0", r.stderr)
        pid = int(r.stdout.split()[1])
        self.assertEqual(glob.glob(os.path.join(SALVAGE_DIR, "prof-salvage-*", "profhost-%d-*" % pid)), [])

    def test_sigkill_with_the_recorder(self):
        r, out = self.prof_run(RECORDER_POLICY, "--die-at", "30")
        self.assertEqual(r.returncode, 128 + 9, r.stderr)
        dirs = salvaged_dirs(out)
        self.assertEqual(len(dirs), 1, r.stderr)
        self.assertTrue(os.path.basename(dirs[0]).startswith("recorder0_steps"), dirs)
        trace = load_trace(dirs[0])
        self.assertTrue(trace["profhost"]["recorder"])
        steps = [n for n, _ in step_spans(trace)]
        # at least the last `steps` complete steps and the one it died in
        self.assertEqual(steps[-7:], list(range(24, 31)))
        self.check_salvaged(dirs[0], steps[0], 30, "after SIGKILL")

    def test_a_forked_child_does_not_hold_the_file(self):
        # the child outlives its parent: had it kept the file's lock, the
        # file would read as a live process's
        r, out = self.prof_run(WINDOW_POLICY, "--die-at", "20", "--fork-ms", "3000")
        self.assertEqual(r.returncode, 128 + 9, r.stderr)
        self.assertNotIn("still running", r.stderr)
        dirs = salvaged_dirs(out)
        self.assertEqual([os.path.basename(d) for d in dirs], ["window0_steps3-20"], r.stderr)
        self.check_salvaged(dirs[0], 3, 20, "after SIGKILL")

    def test_exit_3(self):
        r, out = self.prof_run(WINDOW_POLICY, "--die-at", "10", "--how", "exit")
        self.assertEqual(r.returncode, 3, r.stderr)
        dirs = salvaged_dirs(out)
        self.assertEqual([os.path.basename(d) for d in dirs], ["window0_steps3-10"], r.stderr)
        self.check_salvaged(dirs[0], 3, 10, "after _exit(3)")

    def test_a_shell_that_never_steps_leaves_no_dump(self):
        # sh starts the two ranks and waits: it never steps, and (dash)
        # ends in _exit(0), leaving its recorder's salvage file. Only the
        # ranks' dumps are written, each in its rank's folder; before, the
        # shell (rank 0 by the environment) left an empty
        # rank0/recorder0_steps0-0 beside the real rank 0's.
        out = os.path.join(self.tmp, "out")
        script = ('echo "sh $$"; RANK=0 WORLD_SIZE=2 "$0" --die-at 20 & '
                  'RANK=1 WORLD_SIZE=2 "$0" --die-at 20 & wait')
        r = run([PROF, "run", "-s", self.write("policy.lua", RECORDER_POLICY), "-o", out,
                 "--", "sh", "-c", script, APP])
        self.assertEqual(r.returncode, 0, r.stderr)
        pids = sorted(int(l.split()[1]) for l in r.stdout.splitlines() if l.startswith("pid "))
        self.assertEqual(len(pids), 2, r.stdout)
        dirs = salvaged_dirs(out)
        self.assertEqual([os.path.basename(os.path.dirname(d)) for d in dirs],
                         ["rank0", "rank1"], r.stderr)
        for d in dirs:
            self.assertRegex(os.path.basename(d), r"^recorder0_steps\d+-20$")
        self.assertEqual(sorted(load_trace(d)["profhost"]["pid"] for d in dirs), pids)
        self.assertEqual(r.stderr.count("profhost: salvaged"), 2, r.stderr)
        shell = int(r.stdout.split("sh ", 1)[1].split()[0])
        self.assertEqual(glob.glob("/dev/shm/prof-salvage-*/profhost-%d-*" % shell), [])

    def test_exit_before_the_first_step_leaves_nothing(self):
        # _exit(3) inside step 0: the recorder holds no step, and the
        # process ended on its own
        r, out = self.prof_run(RECORDER_POLICY, "--die-at", "0", "--how", "exit")
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertNotIn("salvaged", r.stderr)
        self.assertEqual(salvaged_dirs(out), [])
        pid = int(r.stdout.split()[1])
        self.assertEqual(glob.glob("/dev/shm/prof-salvage-*/profhost-%d-*" % pid), [])

    def test_sigkill_before_the_first_step_keeps_what_it_recorded(self):
        # killed inside step 0 (as a process hung before its first step
        # is): what the recorder holds of that step is written
        r, out = self.prof_run(RECORDER_POLICY, "--die-at", "0")
        self.assertEqual(r.returncode, 128 + 9, r.stderr)
        dirs = salvaged_dirs(out)
        self.assertEqual([os.path.basename(d) for d in dirs], ["recorder0_steps0-0"], r.stderr)
        self.check_salvaged(dirs[0], 0, 0, "after SIGKILL")

    @unittest.skipIf(SANITIZE, "AddressSanitizer owns SIGSEGV in a sanitizer build")
    def test_crash_path_that_writes_the_window_leaves_nothing_to_salvage(self):
        r, out = self.prof_run(WINDOW_POLICY, "--die-at", "10", "--how", "segv")
        self.assertEqual(r.returncode, 128 + 11, r.stderr)
        self.assertNotIn("salvaged", r.stderr)
        dirs = salvaged_dirs(out)
        self.assertEqual([os.path.basename(d) for d in dirs], ["window0_steps3-10"], r.stderr)
        self.assertNotIn("salvaged", load_trace(dirs[0])["profhost"]["reason"])

    @unittest.skipIf(SANITIZE, "AddressSanitizer owns SIGSEGV in a sanitizer build")
    def test_crash_with_the_recorder_dumps_once(self):
        # the exit path writes the recorder's crash dump and the file goes:
        # one folder, nothing salvaged besides it
        r, out = self.prof_run(RECORDER_POLICY, "--die-at", "20", "--how", "segv")
        self.assertEqual(r.returncode, 128 + 11, r.stderr)
        self.assertNotIn("salvaged", r.stderr)
        dirs = salvaged_dirs(out)
        self.assertEqual(len(dirs), 1, r.stderr)
        self.assertEqual(load_trace(dirs[0])["profhost"]["reason"], "crash: SIGSEGV")

    @unittest.skipIf(SANITIZE, "AddressSanitizer owns SIGSEGV in a sanitizer build")
    def test_a_caught_crash_is_the_exit_path_s_business(self):
        # the exit path writes what its settings say (automatic dumps);
        # the salvage file goes, nothing is written "salvaged"
        r, out = self.prof_run(RECORDER_POLICY, "--die-at", "20", "--how", "segv")
        self.assertEqual(r.returncode, 128 + 11, r.stderr)
        self.assertNotIn("salvaged", r.stderr)
        for d in salvaged_dirs(out):
            self.assertNotIn("salvaged", load_trace(d)["profhost"]["reason"])
        pid = int(r.stdout.split()[1])
        self.assertEqual(glob.glob(os.path.join(SALVAGE_DIR, "prof-salvage-*", "profhost-%d-*" % pid)), [])

    def test_sigterm_that_cannot_wait_for_the_host_keeps_the_file(self):
        # window 0's on_trace_ready hook holds the host thread for 4 s;
        # window 1 records when SIGTERM comes: the exit path gives up
        # after exit_ms (1 s), says so, and leaves the salvage file, which
        # prof run writes (before, the file went with the window: nothing
        # said)
        policy = ('prof.limits{ report_ms = 60000, exit_ms = 1000 }\n'
                  'prof.schedule{ wait = 2, active = 10, cycles = 2 }\n'
                  'prof.on_trace_ready(function(t)\n'
                  '  if t.window == 0 then\n'
                  '    local t0 = os.clock()\n'
                  '    while os.clock() - t0 < 4 do end\n'
                  '  end\n'
                  'end)\n')
        r, out = self.prof_run(policy, "--die-at", "18", "--how", "term")
        self.assertEqual(r.returncode, 128 + 15, r.stderr)
        gave_up = [l for l in r.stderr.splitlines()
                   if "gave up after 1000 ms (prof.limits{ exit_ms })" in l]
        self.assertEqual(len(gave_up), 1, r.stderr)
        dirs = [os.path.basename(d) for d in salvaged_dirs(out)]
        self.assertEqual(dirs, ["window0_steps2-11", "window1_steps14-18"], r.stderr)
        trace = load_trace(salvaged_dirs(out)[1])
        self.assertIn("salvaged after SIGTERM", trace["profhost"]["reason"])
        self.assertEqual([n for n, _ in step_spans(trace)], list(range(14, 19)))

    def test_clean_run_writes_its_window_itself(self):
        r, out = self.prof_run(WINDOW_POLICY, "--steps", "12")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("salvaged", r.stderr)
        dirs = salvaged_dirs(out)
        self.assertEqual(len(dirs), 1, r.stderr)
        self.assertNotIn("salvaged", load_trace(dirs[0])["profhost"]["reason"])

    def test_sigkill_names_the_recorder_s_cpu_samples(self):
        policy = ('prof.capture{ cpu_samples = { hz = 499 } }\n'
                  'prof.recorder{ steps = 6 }\n')
        r, out = self.prof_run(policy, "--die-at", "30", "--spin", "--sleep-us", "40000")
        self.assertEqual(r.returncode, 128 + 9, r.stderr)
        dirs = salvaged_dirs(out)
        self.assertEqual(len(dirs), 1, r.stderr)
        trace = load_trace(dirs[0])
        self.assertEqual(trace["profhost"]["cpu_samples"]["hz"], 499)
        # the sampler's signal, as a window's trace names it (not 0)
        self.assertEqual(trace["profhost"]["cpu_samples"]["signal"], signal.SIGPROF)
        samples = [e for e in trace["traceEvents"] if e.get("cat") == "cpu_sample"]
        self.assertGreaterEqual(len(samples), 5)
        named = [e for e in samples if e["name"] == "salvage_spin_work"]
        self.assertGreater(len(named), len(samples) // 2, samples[:5])
        self.assertIn("main;salvage_spin_work", named[0]["args"]["stack"])
        with open(os.path.join(dirs[0], "stacks.txt")) as f:
            self.assertIn("salvage_spin_work", f.read())
        with open(os.path.join(dirs[0], "summary.txt")) as f:
            self.assertNotIn("changed or removed", f.read())

    @unittest.skipUnless(os.path.exists(NVTX_APP), "salvage_nvtx not built (no NVTX headers)")
    def test_sigkill_keeps_nvtx_domain_and_category_names(self):
        # the domain and category 3 are named before the salvage file
        # exists, category 4 after
        out = os.path.join(self.tmp, "out")
        r = run([PROF, "run", "-s", self.write("policy.lua", WINDOW_POLICY), "-o", out,
                 "--", NVTX_APP, "12"])
        self.assertEqual(r.returncode, 128 + 9, r.stderr)
        dirs = salvaged_dirs(out)
        self.assertEqual(len(dirs), 1, r.stderr)
        ev = load_trace(dirs[0])["traceEvents"]
        early = [e for e in ev if e.get("name") == "early_range" and e.get("ph") == "X"]
        late = [e for e in ev if e.get("name") == "late_range" and e.get("ph") == "X"]
        self.assertEqual(len(early), 2, r.stderr)  # steps 3 and 4
        self.assertEqual(len(late), 8)             # 5..12, the last cut short
        for e in early:
            self.assertEqual(e["args"], {"domain": "salvage_dom", "category": "early_cat"})
        for e in late:
            self.assertEqual(e["args"]["domain"], "salvage_dom")
            self.assertEqual(e["args"]["category"], "late_cat")

    def test_sigkill_names_range_stacks_of_a_window(self):
        # no sampler thread: the table is written the step before the window
        policy = "prof.capture{ range_stacks = true }\n" + WINDOW_POLICY
        r, out = self.prof_run(policy, "--die-at", "12")
        self.assertEqual(r.returncode, 128 + 9, r.stderr)
        dirs = salvaged_dirs(out)
        self.assertEqual(len(dirs), 1, r.stderr)
        work = [e for e in load_trace(dirs[0])["traceEvents"]
                if e.get("ph") == "X" and e["name"] == "work"]
        self.assertEqual(len(work), 10)
        for e in work:
            self.assertIn(";main", e["args"]["stack"])

    def test_a_replaced_program_keeps_addresses_and_says_so(self):
        app = os.path.join(self.tmp, "salvage_app")
        shutil.copy(APP, app)
        out = os.path.join(self.tmp, "out")
        policy = ('prof.capture{ cpu_samples = { hz = 499 } }\n'
                  'prof.recorder{ steps = 6 }\n')
        env = base_env({"LD_PRELOAD": LIB, "PROF_SCRIPT": self.write("policy.lua", policy),
                        "PROF_OUTPUT_DIR": out, "PROF_SALVAGE_DIR": self.shm})
        r = run([app, "--die-at", "30", "--spin", "--sleep-us", "40000"], env=env)
        self.assertEqual(r.returncode, -9, r.stderr)
        os.unlink(app)
        shutil.copy("/bin/true", app)  # another build at the same path
        s = run([PROF, "salvage", self.files()[0]])
        self.assertEqual(s.returncode, 0, s.stderr)
        d = salvaged_dirs(out)[0]
        samples = [e for e in load_trace(d)["traceEvents"] if e.get("cat") == "cpu_sample"]
        self.assertGreaterEqual(len(samples), 5)
        self.assertEqual([e for e in samples if e["name"] == "salvage_spin_work"], [])
        self.assertTrue(any(e["name"].startswith("salvage_app+0x") for e in samples))
        with open(os.path.join(d, "summary.txt")) as f:
            summary = f.read()
        self.assertEqual(summary.count("changed or removed"), 1, summary)
        self.assertIn(app, summary)


class Standalone(SalvageTest):
    def test_clean_exit_leaves_no_file(self):
        r, _ = self.preload(WINDOW_POLICY, "--steps", "12")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.files(), [])

    def test_prof_salvage_after_sigkill(self):
        r, out = self.preload(WINDOW_POLICY, "--die-at", "15")
        self.assertEqual(r.returncode, -9, r.stderr)
        files = self.files()
        self.assertEqual(len(files), 1)
        pid = int(r.stdout.split()[1])
        self.assertTrue(os.path.basename(files[0]).startswith("profhost-%d-" % pid))
        self.assertEqual(os.stat(files[0]).st_mode & 0o777, 0o600)
        s = run([PROF, "salvage", files[0]])
        self.assertEqual(s.returncode, 0, s.stderr)
        self.assertEqual(self.files(), [])
        dirs = salvaged_dirs(out)
        self.assertEqual([os.path.basename(d) for d in dirs], ["window0_steps3-15"], s.stderr)
        self.check_salvaged(dirs[0], 3, 15, "after its process ended")

    def test_exec_leaves_no_file_and_gets_its_own(self):
        # the recorder starts in `nice` and in the program it execs (same
        # pid, same second): that program must get a salvage file of its
        # own, and nice's must not stay behind
        for argv in (["nice", APP, "--steps", "12"],
                     ["sh", "-c", 'exec "$0" --steps 12', APP]):
            out = os.path.join(self.tmp, "out")
            env = base_env({"LD_PRELOAD": LIB,
                            "PROF_SCRIPT": self.write("policy.lua", RECORDER_POLICY),
                            "PROF_OUTPUT_DIR": out, "PROF_SALVAGE_DIR": self.shm})
            r = run(argv, env=env)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertNotIn("no salvage file", r.stderr)
            self.assertEqual(self.files(), [], argv)

    def test_exec_then_sigkill_salvages_the_program(self):
        out = os.path.join(self.tmp, "out")
        env = base_env({"LD_PRELOAD": LIB,
                        "PROF_SCRIPT": self.write("policy.lua", RECORDER_POLICY),
                        "PROF_OUTPUT_DIR": out, "PROF_SALVAGE_DIR": self.shm})
        r = run(["sh", "-c", 'exec "$0" --die-at 15', APP], env=env)
        self.assertEqual(r.returncode, -9, r.stderr)
        self.assertNotIn("no salvage file", r.stderr)
        pid = int(r.stdout.split()[1])
        files = self.files()
        self.assertEqual(len(files), 1, files)
        self.assertTrue(os.path.basename(files[0]).startswith("profhost-%d-" % pid))
        s = run([PROF, "salvage", files[0]])
        self.assertEqual(s.returncode, 0, s.stderr)
        dirs = salvaged_dirs(out)
        self.assertEqual(len(dirs), 1, s.stderr)
        self.assertIn("of process %d " % pid, s.stderr)
        steps = [n for n, _ in step_spans(load_trace(dirs[0]))]
        self.assertEqual(steps[-7:], list(range(9, 16)))

    def test_no_file_before_anything_records(self):
        r, _ = self.preload("prof.schedule{ wait = 1000, active = 1 }\n", "--die-at", "5")
        self.assertEqual(r.returncode, -9, r.stderr)
        self.assertEqual(self.files(), [])

    def test_prof_salvage_of_a_recorder_that_never_stepped(self):
        # Its end is not known here: written when it recorded something
        # before it died (salvage_app killed inside step 0), removed with
        # a line when it recorded nothing (sleep, killed).
        r, out = self.preload(RECORDER_POLICY, "--die-at", "0")
        self.assertEqual(r.returncode, -9, r.stderr)
        files = self.files()
        self.assertEqual(len(files), 1)
        s = run([PROF, "salvage", files[0]])
        self.assertEqual(s.returncode, 0, s.stderr)
        dirs = salvaged_dirs(out)
        self.assertEqual([os.path.basename(d) for d in dirs], ["recorder0_steps0-0"], s.stderr)
        self.check_salvaged(dirs[0], 0, 0, "after its process ended")
        shutil.rmtree(out)

        env = base_env({"LD_PRELOAD": LIB, "PROF_SCRIPT": os.path.join(self.tmp, "policy.lua"),
                        "PROF_OUTPUT_DIR": out, "PROF_SALVAGE_DIR": self.shm})
        p = subprocess.Popen(["sleep", "60"], env=env)
        try:
            deadline = time.time() + 30
            while not self.files() and time.time() < deadline:
                time.sleep(0.01)
            # The file appears once its header is written; the host marks
            # the recorder in it just after (milliseconds, more under a
            # sanitizer): killed before that, it held nothing recording.
            time.sleep(1.0)
        finally:
            p.kill()
            p.wait()
        files = self.files()
        self.assertEqual(len(files), 1)
        s = run([PROF, "salvage", files[0]])
        self.assertEqual(s.returncode, 0, s.stderr)
        self.assertEqual(s.stderr, "prof salvage: '%s' held the flight recorder of a process "
                         "that ended before its first step, with nothing recorded; removed "
                         "it\n" % files[0])
        self.assertEqual(self.files(), [])
        self.assertEqual(salvaged_dirs(out), [])

    def test_file_without_a_recording_is_just_removed(self):
        # its window was written; it died after
        r, out = self.preload("prof.schedule{ wait = 1, active = 2, cycles = 1 }\n",
                              "--die-at", "30")
        self.assertEqual(r.returncode, -9, r.stderr)
        files = self.files()
        self.assertEqual(len(files), 1)
        s = run([PROF, "salvage", files[0]])
        self.assertEqual(s.returncode, 0, s.stderr)
        self.assertIn("held nothing recording", s.stderr)
        self.assertEqual(self.files(), [])
        self.assertEqual([os.path.basename(d) for d in salvaged_dirs(out)],
                         ["window0_steps1-2"])  # its own, not a salvaged one

    def test_bad_files_give_one_line(self):
        r, _ = self.preload(WINDOW_POLICY, "--die-at", "15")
        self.assertEqual(r.returncode, -9, r.stderr)
        good = self.files()[0]
        cases = {}
        foreign = self.write("foreign.salvage", "hello, not a salvage file\n" * 100)
        cases[foreign] = "is not a profhost salvage file"
        short = os.path.join(self.tmp, "short.salvage")
        with open(good, "rb") as f, open(short, "wb") as g:
            g.write(f.read(4096))
        cases[short] = "is truncated"
        cut = os.path.join(self.tmp, "cut.salvage")
        with open(good, "rb") as f, open(cut, "wb") as g:
            g.write(f.read(1100 * 1024))  # past the 1 MiB header
        cases[cut] = "is truncated or damaged"
        cases[os.path.join(self.tmp, "missing.salvage")] = "cannot open salvage file"
        link = os.path.join(self.tmp, "link.salvage")
        os.symlink(good, link)
        cases[link] = "is a symbolic link; give the path of the salvage file itself"
        for path, want in cases.items():
            s = run([PROF, "salvage", path])
            self.assertEqual(s.returncode, 1, path)
            lines = s.stderr.strip().splitlines()
            self.assertEqual(len(lines), 1, s.stderr)
            self.assertIn(want, lines[0])
            self.assertIn(path, lines[0])
        # the good file is left alone by all this, and still salvages
        self.assertEqual(run([PROF, "salvage", good]).returncode, 0)

    def test_a_program_that_closes_its_descriptors_is_still_salvaged(self):
        # a daemon closing 3-1023 in step 2 takes profhost's descriptor of
        # the salvage file with them, before the recorder's later segments
        # are mapped: those must still go into the file (not its memory),
        # and the file the program opens then must stay the program's
        data = os.path.join(self.tmp, "data")
        r, out = self.preload(RECORDER_POLICY, "--close-fds-at", "2", data,
                              "--die-at", "30")
        self.assertEqual(r.returncode, -9, r.stderr)
        with open(data) as f:
            self.assertEqual(f.read(), "".join("step %d\n" % s for s in range(2, 31)))
        files = self.files()
        self.assertEqual(len(files), 1)
        s = run([PROF, "salvage", files[0]])
        self.assertEqual(s.returncode, 0, s.stderr)
        self.assertNotIn("lost", s.stderr)
        dirs = salvaged_dirs(out)
        self.assertEqual(len(dirs), 1, s.stderr)
        steps = [n for n, _ in step_spans(load_trace(dirs[0]))]
        self.assertEqual(steps[-7:], list(range(24, 31)))
        self.check_salvaged(dirs[0], steps[0], 30, "after its process ended")

    def test_closed_stdio_stays_closed(self):
        # `prog <&- >&-`: profhost's own descriptors (the salvage file, the
        # REPL's pipe) must not take the numbers 0-2, or the program's
        # writes to its closed stdout would land in them (and wreck the
        # salvage file's header) instead of failing as without profhost
        script = 'exec "$0" "$@" <&- >&-'
        args = [APP, "--print", "--die-at", "10"]
        said = lambda err: [l for l in err.splitlines() if l.startswith("salvage_app: ")]
        plain = run(["bash", "-c", script] + args)
        self.assertEqual(plain.returncode, -9, plain.stderr)
        failed = said(plain.stderr)
        self.assertEqual(failed, ["salvage_app: stdout: Bad file descriptor",
                                  "salvage_app: stdin: Bad file descriptor"] * 11)
        out = os.path.join(self.tmp, "out")
        env = base_env({"LD_PRELOAD": LIB,
                        "PROF_SCRIPT": self.write("policy.lua", RECORDER_POLICY),
                        "PROF_OUTPUT_DIR": out, "PROF_SALVAGE_DIR": self.shm})
        r = run(["bash", "-c", script] + args, env=env)
        self.assertEqual(r.returncode, -9, r.stderr)
        self.assertEqual(said(r.stderr), failed, r.stderr)
        files = self.files()
        self.assertEqual(len(files), 1)
        s = run([PROF, "salvage", files[0]])
        self.assertEqual(s.returncode, 0, s.stderr)
        self.assertEqual(len(salvaged_dirs(out)), 1, s.stderr)

    def test_relative_salvage_dir_is_where_the_process_started(self):
        # PROF_SALVAGE_DIR=salv, started in self.shm: the program changes
        # its directory before the file is made (then it must still be
        # made there), or after (then a clean exit must still remove it)
        os.mkdir(os.path.join(self.shm, "salv"))
        env = base_env({"LD_PRELOAD": LIB,
                        "PROF_SCRIPT": self.write("policy.lua", RECORDER_POLICY),
                        "PROF_OUTPUT_DIR": os.path.join(self.tmp, "out"),
                        "PROF_SALVAGE_DIR": "salv"})
        left = lambda: glob.glob(os.path.join(self.shm, "salv", "*.salvage"))
        env["PROF_SCRIPT"] = self.write("window.lua", WINDOW_POLICY)  # made at step 1
        r = run([APP, "--chdir-at", "0", "/", "--die-at", "15"], env=env, cwd=self.shm)
        self.assertEqual(r.returncode, -9, r.stderr)
        self.assertNotIn("no salvage file", r.stderr)
        self.assertEqual(len(left()), 1, r.stderr)
        s = run([PROF, "salvage", left()[0]])
        self.assertEqual(s.returncode, 0, s.stderr)
        self.assertEqual(left(), [])
        env["PROF_SCRIPT"] = self.write("policy.lua", RECORDER_POLICY)  # made at start
        r = run([APP, "--chdir-at", "5", "/", "--steps", "12"], env=env, cwd=self.shm)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(left(), [], r.stderr)

    def test_live_file_is_refused(self):
        env = base_env({"LD_PRELOAD": LIB,
                        "PROF_SCRIPT": self.write("policy.lua", WINDOW_POLICY),
                        "PROF_OUTPUT_DIR": os.path.join(self.tmp, "out"),
                        "PROF_SALVAGE_DIR": self.shm})
        with subprocess.Popen([APP, "--steps", "100000", "--sleep-us", "2000"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True) as p:
            try:
                p.stdout.readline()
                # made when the first window is prepared, a few steps in
                deadline = time.monotonic() + 20
                while not self.files() and time.monotonic() < deadline:
                    time.sleep(0.05)
                files = self.files()
                self.assertEqual(len(files), 1)
                s = run([PROF, "salvage", files[0]])
                self.assertEqual(s.returncode, 1)
                self.assertIn("still running", s.stderr)
                self.assertEqual(len(s.stderr.strip().splitlines()), 1)
                self.assertEqual(self.files(), files)
            finally:
                p.kill()
                p.wait()


def recorded_run_dir(path, out):
    """The offset and text of the run folder salvage file `path` records
    (it starts with `out` + "/")."""
    with open(path, "rb") as f:
        head = f.read(16384)
    at = head.index((out + "/").encode())
    return at, head[at:head.index(b"\0", at)].decode()


def forge_run_dir(path, at, text):
    """Writes `text` as the run folder salvage file `path` records (its
    4096-byte field at offset `at`)."""
    data = text.encode()
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(data + b"\0" * (4096 - len(data)))


def one_line(test, r):
    """The one line r printed on stderr (asserted to be one)."""
    lines = r.stderr.strip().splitlines()
    test.assertEqual(len(lines), 1, r.stderr)
    return lines[0]


class Untrusted(SalvageTest):
    """A salvage file is untrusted input: only the caller's own is read, as
    root too, and the run folder it names is written only when it is a
    plain absolute path into a folder of the caller's that no one else can
    write; `-o DIR` writes it elsewhere."""

    def orphan(self):
        """A salvage file left by a process run with LD_PRELOAD alone and
        killed in a window (steps 3-15): (its path, its output folder)."""
        r, out = self.preload(WINDOW_POLICY, "--die-at", "15")
        self.assertEqual(r.returncode, -9, r.stderr)
        files = self.files()
        self.assertEqual(len(files), 1, r.stderr)
        return files[0], out

    def test_another_users_file_is_refused_as_root(self):
        # the file: planted by another user, its run folder edited
        # to lead out of the output folder
        ids = ensure_other_user()
        if ids is None:
            self.skipTest("needs root to give the file to another user")
        path, out = self.orphan()
        evil = "evil-" + os.path.basename(self.tmp)
        at, _ = recorded_run_dir(path, out)
        forge_run_dir(path, at, out + "/../../" + evil)
        os.chown(path, ids[0], ids[1])
        escaped = os.path.join(os.path.dirname(self.tmp), evil)
        try:
            s = run([PROF, "salvage", path])
            self.assertEqual(s.returncode, 1, s.stderr)
            self.assertEqual(one_line(self, s),
                             "prof salvage: '%s' belongs to profhost-e2e (uid %d), not to "
                             "you (root, uid 0): a salvage file is read only by the user "
                             "whose process wrote it (salvage it as that user, or remove "
                             "it)" % (path, ids[0]))
            # --all leaves it alone too: it is not this user's
            a = run([PROF, "salvage", "--all", self.shm])
            self.assertEqual(a.returncode, 0, a.stderr)
            self.assertEqual(one_line(self, a), "prof salvage: no salvage files of "
                             "processes that ended in '%s'" % self.shm)
            self.assertFalse(os.path.exists(escaped))
            self.assertEqual(salvaged_dirs(out), [])
            self.assertEqual(self.files(), [path])
        finally:
            shutil.rmtree(escaped, ignore_errors=True)

    def test_run_folders_that_are_refused(self):
        path, out = self.orphan()
        at, recorded = recorded_run_dir(path, out)
        run_name = os.path.basename(recorded)
        evil = "evil-" + os.path.basename(self.tmp)
        escaped = os.path.join(os.path.dirname(self.tmp), evil)
        elsewhere = os.path.join(self.tmp, "elsewhere")
        os.mkdir(elsewhere)
        os.symlink(elsewhere, os.path.join(self.tmp, "link"))
        shared = os.path.join(self.tmp, "shared")
        os.mkdir(shared)
        os.chmod(shared, 0o777)
        cases = [
            (out + "/../../" + evil, "it has a '..' part"),
            (out + "/./" + run_name, "it has a '.' part"),
            ("out/" + run_name, "it is not an absolute path"),
            (self.tmp + "/link/out/" + run_name,
             "'%s/link' is a symbolic link or not a directory" % self.tmp),
            (self.tmp + "/link", "'%s/link' is a symbolic link" % self.tmp),
            (shared + "/" + run_name, "'%s' is writable by every user (mode 777)" % shared),
            (shared + "/new/" + run_name,
             "'%s/new' does not exist, and is made only in a folder of yours that no one "
             "else can write: '%s' is writable by every user (mode 777)" % (shared, shared)),
        ]
        ids = ensure_other_user()
        if ids is not None:
            theirs = os.path.join(self.tmp, "theirs")
            os.mkdir(theirs)
            os.mkdir(os.path.join(theirs, "run"))
            os.chown(theirs, ids[0], ids[1])
            os.chown(os.path.join(theirs, "run"), ids[0], ids[1])
            said = "belongs to uid %d, not to you (uid 0)" % ids[0]
            cases += [(theirs + "/" + run_name, "'%s' %s" % (theirs, said)),
                      (theirs + "/new/" + run_name,
                       "'%s/new' does not exist, and is made only in a folder of yours "
                       "that no one else can write: '%s' %s" % (theirs, theirs, said))]
            mine = os.path.join(self.tmp, "mine")
            os.mkdir(mine)
            os.mkdir(os.path.join(mine, "run"))
            os.chown(os.path.join(mine, "run"), ids[0], ids[1])
            cases.append((mine + "/run", "'%s/run' %s" % (mine, said)))
        try:
            for recorded_as, why in cases:
                forge_run_dir(path, at, recorded_as)
                s = run([PROF, "salvage", path])
                self.assertEqual(s.returncode, 1, s.stderr)
                self.assertEqual(one_line(self, s),
                                 "prof salvage: refusing the run folder '%s' that '%s' "
                                 "names: %s (write it elsewhere: prof salvage -o DIR %s)"
                                 % (recorded_as, path, why, path))
                self.assertEqual(self.files(), [path])
            # nothing was made anywhere: not outside, not through the link,
            # not in the folders others own or can write
            self.assertFalse(os.path.exists(escaped))
            self.assertFalse(os.path.exists(out))
            self.assertEqual(os.listdir(elsewhere), [])
            self.assertEqual(os.listdir(shared), [])
            # -o DIR: the run folder goes there, named as the file's last part
            forge_run_dir(path, at, out + "/../../" + evil)
            chosen = os.path.join(self.tmp, "chosen")
            s = run([PROF, "salvage", "-o", chosen, path])
            self.assertEqual(s.returncode, 0, s.stderr)
            self.assertEqual(self.files(), [])
            dirs = salvaged_dirs(chosen)
            self.assertEqual([os.path.relpath(d, chosen) for d in dirs],
                             [evil + "/rank0/window0_steps3-15"], s.stderr)
            self.check_salvaged(dirs[0], 3, 15, "after its process ended")
            self.assertFalse(os.path.exists(escaped))
        finally:
            shutil.rmtree(escaped, ignore_errors=True)

    def test_o_dir_names_the_run_folder_safely(self):
        path, out = self.orphan()
        at, _ = recorded_run_dir(path, out)
        forge_run_dir(path, at, out + "/we\tird\nname*")
        s = run([PROF, "salvage", path])
        self.assertEqual(s.returncode, 1, s.stderr)
        self.assertIn("refusing the run folder '%s/we?ird?name*' that '%s' names: it has "
                      "control characters" % (out, path), one_line(self, s))
        chosen = os.path.join(self.tmp, "chosen")
        s = run([PROF, "salvage", "--output", chosen, path])
        self.assertEqual(s.returncode, 0, s.stderr)
        self.assertEqual([os.path.relpath(d, chosen) for d in salvaged_dirs(chosen)],
                         ["we_ird_name_/rank0/window0_steps3-15"], s.stderr)
        self.assertFalse(os.path.exists(out))

    def test_the_recorded_run_folder_is_used_when_it_is_safe(self):
        # made through the same no-follow code: the output folder the file
        # names does not exist yet (the process died before writing)
        path, out = self.orphan()
        self.assertFalse(os.path.exists(out))
        s = run([PROF, "salvage", path])
        self.assertEqual(s.returncode, 0, s.stderr)
        self.assertEqual([os.path.basename(d) for d in salvaged_dirs(out)],
                         ["window0_steps3-15"], s.stderr)
        self.assertEqual(os.stat(out).st_mode & 0o777, 0o755)


class Orphans(SalvageTest):
    """Salvage files of processes that ended with nothing to salvage them
    (run with LD_PRELOAD alone, or their `prof run` died first) do not stay
    holding memory: `prof salvage --all` salvages or removes them, the next
    `prof run` salvages them, and the host's start says they are there."""

    def kill_preloaded(self, policy=RECORDER_POLICY, salvage_dir=None, die_at="30"):
        """Runs the app with LD_PRELOAD alone until SIGKILL at step die_at;
        returns its pid and output folder."""
        out = os.path.join(self.tmp, "out")
        env = base_env({"LD_PRELOAD": LIB, "PROF_SCRIPT": self.write("policy.lua", policy),
                        "PROF_OUTPUT_DIR": out, "PROF_SALVAGE_DIR": salvage_dir or self.shm})
        r = run([APP, "--die-at", die_at], env=env)
        self.assertEqual(r.returncode, -9, r.stderr)
        return int(r.stdout.split()[1]), out

    def check_recorder(self, out, pid, stderr):
        dirs = salvaged_dirs(out)
        self.assertEqual(len(dirs), 1, stderr)
        self.assertTrue(os.path.basename(dirs[0]).startswith("recorder0_steps"), dirs)
        trace = load_trace(dirs[0])
        self.assertEqual(trace["profhost"]["pid"], pid)
        self.assertEqual([n for n, _ in step_spans(trace)][-7:], list(range(24, 31)))
        self.check_salvaged(dirs[0], [n for n, _ in step_spans(trace)][0], 30,
                            "after its process ended")

    def test_all_after_sigkill_salvages_and_leaves_the_running(self):
        env = base_env({"LD_PRELOAD": LIB,
                        "PROF_SCRIPT": self.write("live.lua", RECORDER_POLICY),
                        "PROF_OUTPUT_DIR": os.path.join(self.tmp, "live"),
                        "PROF_SALVAGE_DIR": self.shm})
        with subprocess.Popen([APP, "--steps", "100000", "--sleep-us", "2000"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True) as live:
            try:
                live.stdout.readline()
                deadline = time.monotonic() + 20
                while not self.files() and time.monotonic() < deadline:
                    time.sleep(0.05)
                live_files = self.files()
                self.assertEqual(len(live_files), 1)
                pid, out = self.kill_preloaded()
                self.assertEqual(len(self.files()), 2)
                s = run([PROF, "salvage", "--all", self.shm])
                self.assertEqual(s.returncode, 0, s.stderr)
                self.assertIn("salvaged recorder dump 0 of process %d " % pid, s.stderr)
                self.assertEqual(s.stderr.strip().splitlines()[-1],
                                 "prof salvage: 1 salvage file of processes that ended in "
                                 "'%s': 1 salvaged, 0 removed, 0 left in place; 1 of "
                                 "running processes left alone" % self.shm)
                self.assertEqual(self.files(), live_files)
                self.check_recorder(out, pid, s.stderr)
            finally:
                live.kill()
                live.wait()

    def test_all_discard_frees_without_writing(self):
        # what an orphan holds is bounded by its pools (docs/recorder.md):
        # buffer_mb + the recorder's mb + the 1 MiB header; here a window
        # of 4 MiB recorded while the recorder's 8 MiB were held
        policy = ("prof.capture{ buffer_mb = 4 }\n"
                  "prof.recorder{ steps = 6, mb = 8 }\n"
                  "prof.schedule{ wait = 20, active = 100 }\n")
        pid, out = self.kill_preloaded(policy, die_at="35")
        files = self.files()
        self.assertEqual(len(files), 1)
        held = os.stat(files[0]).st_blocks * 512
        self.assertGreater(held, 1 << 20)
        self.assertLessEqual(held, (4 + 8 + 1) << 20)
        s = run([PROF, "salvage", "--all", "--discard", self.shm])
        self.assertEqual(s.returncode, 0, s.stderr)
        self.assertEqual(s.stderr.strip().splitlines(), [
            "prof salvage: removed '%s' without salvaging it (%d MiB freed)"
            % (files[0], (held + (1 << 20) - 1) >> 20),
            "prof salvage: 1 salvage file of processes that ended in '%s': 0 salvaged, "
            "1 removed, 0 left in place" % self.shm])
        self.assertEqual(self.files(), [])
        self.assertEqual(salvaged_dirs(out), [])

    def test_arguments(self):
        for args, want in ((["--discard", "f"], "--discard goes with --all"),
                           (["--all", "--discard", "-o", "d"],
                            "--discard writes nothing: no -o with it"),
                           (["a", "b"], "one FILE at a time (or --all)"),
                           ([], "missing FILE"),
                           (["--bogus"], "unknown option '--bogus'"),
                           (["-o"], "-o needs a DIR")):
            r = run([PROF, "salvage"] + args)
            self.assertEqual(r.returncode, 2, args)
            self.assertEqual(one_line(self, r),
                             "prof salvage: %s (usage: prof salvage [-o DIR] FILE | prof "
                             "salvage --all [--discard] [-o DIR] [FOLDER...])" % want)
        missing = os.path.join(self.tmp, "missing")
        r = run([PROF, "salvage", "--all", missing])
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertEqual(one_line(self, r),
                         "prof salvage: cannot search '%s': no such folder" % missing)

    def test_next_prof_run_salvages_them_first(self):
        pid, out = self.kill_preloaded()
        self.assertEqual(len(self.files()), 1)
        env = base_env({"PROF_SALVAGE_DIR": self.shm})
        other = os.path.join(self.tmp, "other")
        r = run([PROF, "run", "-s", self.write("clean.lua", WINDOW_POLICY), "-o", other,
                 "--", APP, "--steps", "8"], env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        said = [l for l in r.stderr.splitlines() if "salvaged" in l]
        self.assertEqual(len(said), 1, r.stderr)
        self.assertIn("salvaged recorder dump 0 of process %d " % pid, said[0])
        self.assertEqual(self.files(), [])
        self.check_recorder(out, pid, r.stderr)
        # its own launch folder went at its end
        self.assertEqual(glob.glob(os.path.join(self.shm, "prof-salvage-*")), [])

    def test_a_launch_whose_prof_run_died_first(self):
        # prof run is killed while its command runs; the command dies of
        # SIGKILL later: its file stays in the dead launcher's folder
        env = base_env({"PROF_SALVAGE_DIR": self.shm})
        out = os.path.join(self.tmp, "out")
        prof = subprocess.Popen([PROF, "run", "-s", self.write("policy.lua", RECORDER_POLICY),
                                 "-o", out, "--", APP, "--die-at", "30", "--sleep-us", "20000"],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True)
        pid = int(prof.stdout.readline().split()[1])
        prof.kill()
        prof.wait()
        prof.stdout.read()  # EOF: the command ended too
        prof.stdout.close()
        left = glob.glob(os.path.join(self.shm, "prof-salvage-*", "profhost-%d-*" % pid))
        self.assertEqual(len(left), 1)
        # a running launcher's folder (held by its lock) is left to it
        busy = os.path.join(self.shm, "prof-salvage-busy00")
        os.mkdir(busy, 0o700)
        shutil.copy(left[0], busy)
        hold = os.open(busy, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(hold, fcntl.LOCK_EX)
            s = run([PROF, "salvage", "--all", self.shm])
        finally:
            os.close(hold)
        self.assertEqual(s.returncode, 0, s.stderr)
        self.assertEqual(s.stderr.strip().splitlines()[-1],
                         "prof salvage: 1 salvage file of processes that ended in '%s': "
                         "1 salvaged, 0 removed, 0 left in place" % self.shm)
        self.check_recorder(out, pid, s.stderr)
        # the dead launcher's folder went with its file; the busy one stays
        self.assertEqual(glob.glob(os.path.join(self.shm, "prof-salvage-*")), [busy])
        self.assertEqual(len(os.listdir(busy)), 1)

    def test_host_start_says_what_they_hold(self):
        self.kill_preloaded()
        self.kill_preloaded()
        held = sum(os.stat(f).st_blocks * 512 for f in self.files())
        self.assertEqual(len(self.files()), 2)
        env = base_env({"LD_PRELOAD": LIB, "PROF_SALVAGE_DIR": self.shm,
                        "PROF_SCRIPT": self.write("quiet.lua", "prof.schedule{ wait = 1000 }\n"),
                        "PROF_OUTPUT_DIR": os.path.join(self.tmp, "quiet")})
        r = run([APP, "--steps", "3"], env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(profhost_lines(r.stderr), [
            "profhost: 2 salvage files of processes that ended hold %d MiB of memory in '%s' "
            "until salvaged: `prof salvage --all '%s'` writes what they recorded into their "
            "run folders and frees it (add --discard to only free it)"
            % ((held + (1 << 20) - 1) >> 20, self.shm, self.shm)])
        self.assertEqual(len(self.files()), 2)  # said, not touched

    def test_a_taken_name_gets_another(self):
        # another user planted files at every name the process could take
        # this minute: it must still get a salvage file of its own
        ids = ensure_other_user()
        if ids is None:
            self.skipTest("needs root to plant files as another user")
        out = os.path.join(self.tmp, "out")
        env = base_env({"LD_PRELOAD": LIB, "PROF_SCRIPT": self.write("policy.lua", RECORDER_POLICY),
                        "PROF_OUTPUT_DIR": out, "PROF_SALVAGE_DIR": self.shm, "APP": APP})
        p = subprocess.Popen(["sh", "-c", 'echo $$; read _; exec "$APP" --die-at 20'],
                             env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        pid = int(p.stdout.readline())
        now = int(time.time())
        planted = []
        for t in range(now - 2, now + 60):
            name = os.path.join(self.shm, "profhost-%d-%d.salvage" % (pid, t))
            with open(name, "w") as f:
                f.write("planted\n")
            os.chown(name, ids[0], ids[1])
            planted.append(name)
        out_text, err = p.communicate("go\n", timeout=120)
        self.assertEqual(p.returncode, -9, err)
        self.assertNotIn("no salvage file", err)
        mine = [f for f in self.files() if f not in planted]
        self.assertEqual(len(mine), 1, err)
        self.assertRegex(os.path.basename(mine[0]),
                         r"^profhost-%d-\d+-[0-9a-f]{8}\.salvage$" % pid)
        for name in planted:
            with open(name) as f:
                self.assertEqual(f.read(), "planted\n")
        s = run([PROF, "salvage", mine[0]])
        self.assertEqual(s.returncode, 0, s.stderr)
        self.assertEqual(len(salvaged_dirs(out)), 1, s.stderr)

    def test_a_salvage_dir_of_another_user_is_refused(self):
        ids = ensure_other_user()
        if ids is None:
            self.skipTest("needs root to give a folder to another user")
        theirs = os.path.join(self.shm, "theirs")
        os.mkdir(theirs)
        os.chown(theirs, ids[0], ids[1])
        os.chmod(theirs, 0o777)
        out = os.path.join(self.tmp, "out")
        env = base_env({"LD_PRELOAD": LIB, "PROF_SCRIPT": self.write("policy.lua", RECORDER_POLICY),
                        "PROF_OUTPUT_DIR": out, "PROF_SALVAGE_DIR": theirs})
        r = run([APP, "--die-at", "10"], env=env)
        pid = int(r.stdout.split()[1])
        # the default took the file: this process's, removed here
        default = glob.glob("/dev/shm/profhost-%d-*.salvage" % pid)
        for f in default:
            os.unlink(f)
        self.assertEqual(r.returncode, -9, r.stderr)
        self.assertEqual(profhost_lines(r.stderr), [
            "profhost: PROF_SALVAGE_DIR '%s' is refused: it belongs to uid %d, not to you "
            "(uid 0); the salvage file goes to /dev/shm instead (name a folder of yours that "
            "no one else can write, e.g. mkdir -m 700 on a tmpfs, or unset "
            "PROF_SALVAGE_DIR)" % (theirs, ids[0])])
        self.assertEqual(len(default), 1)
        self.assertEqual(os.listdir(theirs), [])
        # prof run: the same refusal, and the launch salvages as usual
        out2 = os.path.join(self.tmp, "out2")
        r = run([PROF, "run", "-s", self.write("window.lua", WINDOW_POLICY), "-o", out2, "--",
                 APP, "--die-at", "12"], env=base_env({"PROF_SALVAGE_DIR": theirs}))
        self.assertEqual(r.returncode, 128 + 9, r.stderr)
        self.assertEqual(r.stderr.splitlines()[0],
                         "prof run: PROF_SALVAGE_DIR '%s' is refused: it belongs to uid %d, "
                         "not to you (uid 0); the launch keeps its salvage files in /dev/shm "
                         "instead (name a tmpfs folder of yours that no one else can write, "
                         "or unset PROF_SALVAGE_DIR)" % (theirs, ids[0]))
        self.assertEqual([os.path.basename(d) for d in salvaged_dirs(out2)],
                         ["window0_steps3-12"], r.stderr)
        self.assertEqual(os.listdir(theirs), [])


class SmallTmpfs(SalvageTest):
    """A salvage folder on a tmpfs too small for the event pools (a
    container's 64 MiB /dev/shm against the default 128 MiB window): the
    pools stay in the process's memory, and a salvage of its file must say
    that their events were lost, not pass the steps off as a quiet run."""

    def in_small_tmpfs(self, policy, *args):
        """Runs the app on an 8 MiB tmpfs as its PROF_SALVAGE_DIR (a mount
        namespace of its own), then `prof salvage` of what it left."""
        mnt = os.path.join(self.tmp, "tmpfs")
        os.mkdir(mnt)
        script = ('mount -t tmpfs -o size=8m tmpfs "$SALV" || exit 97\n'
                  'LD_PRELOAD="$LIB" PROF_SCRIPT="$POLICY" PROF_OUTPUT_DIR="$OUT" '
                  'PROF_SALVAGE_DIR="$SALV" "$APP" "$@"\n'
                  'echo "app $?"\n'
                  'exec "$PROF" salvage "$SALV"/*.salvage\n')
        env = base_env({"LIB": LIB, "POLICY": self.write("policy.lua", policy),
                        "OUT": os.path.join(self.tmp, "out"), "SALV": mnt, "APP": APP,
                        "PROF": PROF})
        user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
        try:
            r = run(["unshare"] + user + ["--mount", "--", "bash", "-c", script, "sh"] +
                    list(args), env=env)
        except FileNotFoundError:
            self.skipTest("no unshare here")
        if r.returncode == 97 or "unshare failed" in r.stderr:
            self.skipTest("cannot mount a tmpfs here: " + r.stderr.strip()[-200:])
        self.assertIn("app 137", r.stdout, r.stderr)
        return r, os.path.join(self.tmp, "out")

    def test_a_window_whose_pool_did_not_fit_says_its_events_were_lost(self):
        r, out = self.in_small_tmpfs(WINDOW_POLICY, "--die-at", "15")
        self.assertEqual(r.returncode, 0, r.stderr)
        # the process said so while it ran, once
        warned = [l for l in r.stderr.splitlines() if "is not in the salvage file" in l]
        self.assertEqual(len(warned), 1, r.stderr)
        self.assertIn("an event pool of 128 MiB", warned[0])
        self.assertIn("prof.capture{ buffer_mb }", warned[0])
        said = [l for l in r.stderr.splitlines() if "salvaged window 0" in l]
        self.assertEqual(len(said), 1, r.stderr)
        self.assertIn("its events were lost", said[0])
        self.assertIn("tmpfs had no room", said[0])
        dirs = salvaged_dirs(out)
        # no record tells where the last step ended: the complete ones
        self.assertEqual([os.path.basename(d) for d in dirs], ["window0_steps3-14"], r.stderr)
        trace = load_trace(dirs[0])
        # the steps are the file's; the records stayed in the process
        self.assertEqual([n for n, _ in step_spans(trace)][:12], list(range(3, 15)))
        self.assertEqual([e for e in trace["traceEvents"] if e.get("name") == "work"], [])
        with open(os.path.join(dirs[0], "summary.txt")) as f:
            summary = f.read()
        self.assertIn("event pool was not in the salvage file", summary)
        self.assertIn("prof.capture{ buffer_mb }", summary)

    def test_recorder_segments_that_did_not_fit_are_counted(self):
        r, out = self.in_small_tmpfs("prof.recorder{ steps = 6, mb = 64 }\n", "--die-at", "30")
        self.assertEqual(r.returncode, 0, r.stderr)
        warned = [l for l in r.stderr.splitlines() if "is not in the salvage file" in l]
        self.assertEqual(len(warned), 1, r.stderr)
        self.assertIn("an event pool of 16 MiB", warned[0])
        self.assertIn("prof.recorder{ mb }", warned[0])
        said = [l for l in r.stderr.splitlines() if "salvaged recorder dump 0" in l]
        self.assertEqual(len(said), 1, r.stderr)
        self.assertRegex(said[0], r"the events of (\d) of its \1 segments were lost")
        dirs = salvaged_dirs(out)
        self.assertEqual(len(dirs), 1, r.stderr)
        with open(os.path.join(dirs[0], "summary.txt")) as f:
            summary = f.read()
        self.assertRegex(summary, r"(\d) of the recorder's \1 segments were not in the "
                                  r"salvage file")
        self.assertIn("prof.recorder{ mb }", summary)


if __name__ == "__main__":
    unittest.main()

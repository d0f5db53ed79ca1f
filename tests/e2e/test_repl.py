"""End to end: the REPL inside running processes (prof attach), checked the
way a user meets it: the values and files a command gives back, the exit
statuses of -e, what happens to the target's steps, and an interactive
session on a pseudo-terminal."""
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import time
import unittest

from harness import (BUILD, LIB, PROF, PYTHON, TESTBIN, TempDirTest, alone, base_env,
                     load_part, load_trace, run, step_spans)

STEPS_APP = os.path.join(TESTBIN, "steps_app")
PYMOD = os.path.join(BUILD, "share", "profhost", "python")
OTHER_USER = "profhost-e2e"

# A policy with no schedule: the only windows are the ones the REPL asks for.
NO_SCHEDULE = "-- nothing scheduled\n"


class Target:
    """A program running under the host in the background."""

    def __init__(self, test, argv, policy=NO_SCHEDULE, env=None):
        self.test = test
        self.out = os.path.join(test.tmp, "out")
        policy_path = test.write("policy-%d.lua" % len(test.targets), policy)
        full = {"LD_PRELOAD": LIB, "PROF_SCRIPT": policy_path, "PROF_OUTPUT_DIR": self.out,
                "XDG_RUNTIME_DIR": test.tmp, "PYTHONPATH": PYMOD}
        full.update(env or {})
        self.stdout_path = os.path.join(test.tmp, "target-%d.out" % len(test.targets))
        self.stderr_path = os.path.join(test.tmp, "target-%d.err" % len(test.targets))
        self.proc = subprocess.Popen(argv, env=base_env(full), cwd=test.tmp,
                                     stdout=open(self.stdout_path, "w"),
                                     stderr=open(self.stderr_path, "w"))
        self.pid = self.proc.pid
        test.targets.append(self)

    def stderr(self):
        with open(self.stderr_path) as f:
            return f.read()

    def stdout(self):
        with open(self.stdout_path) as f:
            return f.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class ReplTest(TempDirTest):
    def setUp(self):
        super().setUp()
        self.targets = []

    def tearDown(self):
        for t in self.targets:
            t.stop()
        super().tearDown()

    def attach(self, pid, code, *extra, timeout=60, prefix=()):
        """prof attach PID -e CODE; the CompletedProcess."""
        env = base_env({"XDG_RUNTIME_DIR": self.tmp})
        return run(list(prefix) + [PROF, "attach", str(pid), "-e", code] + list(extra),
                   env=env, timeout=timeout)

    def value(self, pid, expr):
        """The printed value of a Lua expression in the target."""
        r = self.attach(pid, "=" + expr)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout.strip()

    def step(self, pid):
        return int(self.value(pid, "prof.status().step"))

    def c_target(self, policy=NO_SCHEDULE, env=None, steps=10000000, sleep_us=2000):
        t = Target(self, [STEPS_APP, "--steps", str(steps), "--sleep-us", str(sleep_us)],
                   policy=policy, env=env)
        self.wait_for_steps(t.pid)
        return t

    def wait_for_steps(self, pid, n=5):
        """Waits until the target has done n steps (the host is up)."""
        deadline = time.time() + 30
        while time.time() < deadline:
            r = self.attach(pid, "=prof.status().step")
            if r.returncode == 0 and int(r.stdout.strip()) >= n:
                return
            time.sleep(0.1)
        self.fail("the target never got going: " + r.stderr)

    def rate(self, pid, seconds=1.0):
        """Steps per second over `seconds`."""
        a = self.step(pid)
        t0 = time.time()
        time.sleep(seconds)
        b = self.step(pid)
        return (b - a) / (time.time() - t0)

    def check_window(self, dir_, first, last):
        trace = load_trace(dir_)
        self.assertEqual([n for n, _ in step_spans(trace)], list(range(first, last + 1)))
        self.assertEqual(trace["profhost"]["first_step"], first)
        self.assertEqual(trace["profhost"]["last_step"], last)


class AttachToC(ReplTest):
    def test_capture_now_records_exactly_three_steps_and_status_shows_it(self):
        t = self.c_target()
        self.assertEqual(self.value(t.pid, "prof.status().windows_written"), "0")
        r = self.attach(t.pid, "w = prof.capture_now{ steps = 3 }\n"
                               "print(w.state, w.dir, w.first_step, w.last_step, #w.files)")
        self.assertEqual(r.returncode, 0, r.stderr)
        state, dir_, first, last, nfiles = r.stdout.strip().splitlines()[-1].split("\t")
        first, last = int(first), int(last)
        self.assertEqual(state, "written")
        self.assertEqual(last - first + 1, 3)
        self.assertTrue(os.path.isdir(dir_), dir_)
        self.assertTrue(os.path.basename(dir_).endswith("_steps%d-%d" % (first, last)))
        self.assertGreaterEqual(int(nfiles), 1)
        self.check_window(dir_, first, last)
        # status() reflects it.
        r = self.attach(t.pid, "local s = prof.status()\n"
                               "print(s.windows_written, s.outputs[#s.outputs], s.recording, "
                               "s.dropped, s.profiling, s.capture.buffer_mb)")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip().split("\t"),
                         ["1", dir_, "false", "0", "on", "128"])
        self.assertIn("REPL open at", t.stderr())

    def test_socket_is_private_and_removed_at_exit(self):
        t = self.c_target(steps=1500)
        sock = os.path.join(self.tmp, "profhost", "%d.sock" % t.pid)
        # The first attach opened it; it stays, private to the user.
        self.assertEqual(os.stat(sock).st_mode & 0o777, 0o600)
        self.assertEqual(os.stat(os.path.dirname(sock)).st_mode & 0o777, 0o700)
        self.assertEqual(self.value(t.pid, "prof.status().repl.socket"), '"%s"' % sock)
        # It goes when the process ends...
        self.assertEqual(t.proc.wait(60), 0)
        self.assertFalse(os.path.exists(sock))
        # ...and one left by a killed process goes when another opens its own.
        killed = self.c_target()
        stale = os.path.join(self.tmp, "profhost", "%d.sock" % killed.pid)
        killed.proc.kill()
        killed.proc.wait()
        self.assertTrue(os.path.exists(stale))
        self.c_target()
        self.assertFalse(os.path.exists(stale))

    def test_kill_usr1_then_attach(self):
        t = Target(self, [STEPS_APP, "--steps", "100000", "--sleep-us", "2000"])
        sock = os.path.join(self.tmp, "profhost", "%d.sock" % t.pid)
        time.sleep(0.5)
        self.assertFalse(os.path.exists(sock))
        os.kill(t.pid, signal.SIGUSR1)
        deadline = time.time() + 10
        while not os.path.exists(sock) and time.time() < deadline:
            time.sleep(0.02)
        self.assertTrue(os.path.exists(sock))
        r = self.attach(t.pid, "=1 + 1", "--no-signal")
        self.assertEqual((r.returncode, r.stdout), (0, "2\n"), r.stderr)
        self.assertIsNone(t.proc.poll())

    def test_an_application_handler_is_chained_to(self):
        usr1 = os.path.join(TESTBIN, "usr1_preload.so")
        t = Target(self, [STEPS_APP, "--steps", "100000", "--sleep-us", "2000"],
                   env={"LD_PRELOAD": LIB + ":" + usr1})
        self.wait_for_steps(t.pid)
        r = self.attach(t.pid, "=2 + 2")
        self.assertEqual((r.returncode, r.stdout), (0, "4\n"), r.stderr)
        os.kill(t.pid, signal.SIGUSR1)
        deadline = time.time() + 10
        while t.stderr().count("app handler ran") < 2 and time.time() < deadline:
            time.sleep(0.05)
        err = t.stderr()
        # Said once; the application's handler still runs on every signal.
        self.assertEqual(err.count("SIGUSR1 already has a handler in this process; "
                                   "the REPL signal chains to it"), 1, err)
        self.assertEqual(err.count("app handler ran"), 2, err)
        self.assertIsNone(t.proc.poll())

    def test_errors_and_exit_statuses(self):
        t = self.c_target()
        r = self.attach(t.pid, "local function f() error('boom') end f()")
        self.assertEqual(r.returncode, 1)
        self.assertIn("stdin:1: boom", r.stderr)
        self.assertIn("stack traceback:", r.stderr)
        r = self.attach(t.pid, "for i = 1, 2 do")
        self.assertEqual(r.returncode, 1)
        self.assertIn("incomplete", r.stderr)
        r = self.attach(t.pid, "print('a') print('b')")
        self.assertEqual((r.returncode, r.stdout), (0, "a\nb\n"))
        # The target never saw any of it.
        self.assertNotIn("boom", t.stderr())

    def test_cannot_attach_says_why(self):
        # No such process.
        dead = subprocess.Popen(["true"])
        dead.wait()
        r = self.attach(dead.pid, "1")
        self.assertEqual(r.returncode, 2)
        self.assertIn("no such process", r.stderr)
        # Not running profhost.
        plain = subprocess.Popen(["sleep", "30"])
        try:
            r = self.attach(plain.pid, "1")
            self.assertEqual(r.returncode, 2)
            self.assertIn("not running profhost", r.stderr)
        finally:
            plain.kill()
            plain.wait()
        # REPL turned off.
        t = Target(self, [STEPS_APP, "--steps", "100000", "--sleep-us", "2000"],
                   env={"PROF_REPL_SIGNAL": "0"})
        time.sleep(0.3)
        r = self.attach(t.pid, "1")
        self.assertEqual(r.returncode, 2)
        self.assertIn("REPL turned off", r.stderr)
        self.assertIsNone(t.proc.poll())
        # Bad arguments.
        r = run([PROF, "attach"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("missing the process id", r.stderr)
        r = run([PROF, "attach", "abc"])
        self.assertEqual(r.returncode, 2)

    @alone
    def test_runaway_loop_is_interrupted_and_the_step_rate_recovers(self):
        t = self.c_target(env={"PROF_SET": "limits.repl_ms=1500"})
        before = self.rate(t.pid)
        a = self.step(t.pid)
        t0 = time.time()
        r = self.attach(t.pid, "while true do end")
        took = time.time() - t0
        b = self.step(t.pid)
        self.assertEqual(r.returncode, 1)
        self.assertIn("command exceeded its 1500 ms time budget", r.stderr)
        self.assertLess(took, 10)
        # The target kept stepping meanwhile (the machine may be shared: the
        # bounds are loose), and afterwards at its old rate.
        self.assertGreater(b - a, before * took * 0.25, (before, took, b - a))
        # Up to six 1 s readings, the best counted: a burst of load on a
        # shared machine (102 steps/s against 177 before was seen) is not
        # the lasting slow-down this looks for.
        after = 0
        for _ in range(6):
            after = max(after, self.rate(t.pid))
            if after > before * 0.6:
                break
        self.assertGreater(after, before * 0.6, (before, after))
        # A pcall cannot hide it either.
        r = self.attach(t.pid, "while true do pcall(function() while true do end end) end")
        self.assertEqual(r.returncode, 1)
        self.assertIn("time budget", r.stderr)

    @alone
    def test_second_client_is_busy_and_an_idle_client_does_not_slow_steps(self):
        t = self.c_target()
        before = self.rate(t.pid)
        first = subprocess.Popen([PROF, "attach", str(t.pid)], env=base_env({"XDG_RUNTIME_DIR": self.tmp}),
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE)
        try:
            banner = first.stdout.readline().decode()
            self.assertIn("process %d (steps_app)" % t.pid, banner)
            while "prof.help()" not in banner:
                banner = first.stdout.readline().decode()
                self.assertNotEqual(banner, "", "the first client ended")
            r = self.attach(t.pid, "1")
            self.assertEqual(r.returncode, 2)
            self.assertIn("busy: another client (pid %d)" % first.pid, r.stderr)
            # The attached, idle client costs the target nothing.
            time.sleep(1.0)
            first.stdin.write(b"=prof.status().step\n")
            first.stdin.flush()
            s1 = int(first.stdout.readline())
            time.sleep(1.0)
            first.stdin.write(b"=prof.status().step\n")
            first.stdin.flush()
            s2 = int(first.stdout.readline())
            self.assertGreater(s2 - s1, before * 0.4, (before, s2 - s1))
        finally:
            first.stdin.close()
            first.wait(20)
        self.assertEqual(first.returncode, 0)
        self.assertEqual(self.value(t.pid, "'free again'"), '"free again"')

    @alone
    def test_client_gone_mid_command_leaves_the_host_healthy(self):
        t = self.c_target()
        client = subprocess.Popen([PROF, "attach", str(t.pid), "-e", "while true do end"],
                                  env=base_env({"XDG_RUNTIME_DIR": self.tmp}),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(1.0)
        client.kill()
        client.wait()
        # Well before the 10 s budget: the server noticed and stopped.
        t0 = time.time()
        r = self.attach(t.pid, "=prof.status().profiling")
        self.assertEqual((r.returncode, r.stdout), (0, '"on"\n'), r.stderr)
        self.assertLess(time.time() - t0, 5)
        r = self.attach(t.pid, "=prof.capture_now{ steps = 2 }.steps")
        # While it waits, the prompt may say "recording steps a-b ..."
        # (docs/repl.md): only when the window opens before the answer.
        lines = r.stdout.splitlines()
        self.assertEqual((r.returncode, lines[-1:]), (0, ["2"]), r.stderr)
        for line in lines[:-1]:
            m = re.fullmatch(r"recording steps (\d+)-(\d+) \.\.\.", line)
            self.assertTrue(m and int(m.group(2)) == int(m.group(1)) + 1, r.stdout)
        # And the process still ends as it should.
        t.proc.send_signal(signal.SIGTERM)
        self.assertEqual(t.proc.wait(20), -signal.SIGTERM)

    def test_target_exiting_while_attached_is_reported(self):
        t = self.c_target(steps=1000, sleep_us=5000)
        client = subprocess.Popen([PROF, "attach", str(t.pid)],
                                  env=base_env({"XDG_RUNTIME_DIR": self.tmp}),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE)
        t.proc.wait(60)
        try:
            client.wait(20)     # stdin stays open: only the exit ends it
        except subprocess.TimeoutExpired:
            client.kill()
            self.fail("prof attach did not notice the process ending")
        err = client.stderr.read().decode()
        client.stdin.close()
        self.assertEqual(client.returncode, 0, err)
        self.assertIn("process %d is exiting" % t.pid, err)
        self.assertEqual(t.proc.returncode, 0)

    def test_stacks_of_every_thread(self):
        t = self.c_target(policy="prof.schedule{ wait = 1, active = 1, cycles = 1 }\n")
        r = self.attach(t.pid, "=prof.stacks()")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r'thread %d "steps_app" \(main thread\):\n  #0 ' % t.pid)
        self.assertRegex(r.stdout, r"nanosleep")
        self.assertRegex(r.stdout, r'"profhost-ctl" \(profhost\'s control thread')
        self.assertRegex(r.stdout, r'"profhost" \(profhost\'s host thread\): blocks signals')
        # A window has run: evbuf's pre-fault helper is there too.
        self.assertRegex(r.stdout, r'"profhost-pf" \(profhost\'s pre-fault thread\): blocks signals')
        # The job watcher (prof.job{ poll_ms }, on by default: docs/jobs.md).
        self.assertRegex(r.stdout, r'"profhost-job" \(profhost\'s job watcher\): blocks signals')
        r = self.attach(t.pid, "local s = prof.stacks() return #s, s[1].tid, s[1].state")
        self.assertEqual(r.stdout.strip().split("\t"), ["5", str(t.pid), '"ok"'])

    def test_live_schedule_change(self):
        t = self.c_target()
        r = self.attach(t.pid, "local s = prof.status().step + 20\n"
                               "prof.schedule{ skip_first = s, wait = 0, warmup = 0, active = 2, cycles = 1 }\n"
                               "print(s, prof.status().next_window.first_step)")
        self.assertEqual(r.returncode, 0, r.stderr)
        s, nxt = map(int, r.stdout.split())
        self.assertEqual(nxt, s)
        deadline = time.time() + 30
        while time.time() < deadline and self.value(t.pid, "prof.status().windows_written") != "1":
            time.sleep(0.1)
        d = self.value(t.pid, "prof.status().outputs[1]").strip('"')
        self.assertTrue(d.endswith("_steps%d-%d" % (s, s + 1)), d)
        self.check_window(d, s, s + 1)
        self.assertIn("the schedule changed", t.stderr())
        # Not every section can change while running.
        r = self.attach(t.pid, "prof.output{ dir = 'elsewhere' }")
        self.assertEqual(r.returncode, 1)
        self.assertIn("cannot change while the process runs", r.stderr)

    def test_recorder_paused_and_resumed(self):
        # prof.recorder{ enabled = false } at the prompt: from the next
        # boundary the recorder holds nothing and a dump says it is off;
        # prof.recorder{} resumes it and a dump holds the steps since.
        t = self.c_target(policy="prof.recorder{ steps = 2000 }\nprof.export{ report = false }\n")
        r = self.attach(t.pid, "print(prof.recorder{ enabled = false }.on, prof.status().step)")
        self.assertEqual(r.returncode, 0, r.stderr)
        on, paused_in = r.stdout.split()
        self.assertEqual(on, "false")
        paused_in = int(paused_in)
        self.wait_for_steps(t.pid, paused_in + 3)
        self.assertEqual(self.value(t.pid, "prof.status().recorder.held_steps"), "0")
        r = self.attach(t.pid, "print(prof.dump{ steps = 2 })")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("false\tthe recorder is off (paused by prof.recorder{ enabled = false })",
                      r.stdout)
        # The steps keep going while the command runs: the step of the call
        # lies between the two reads.
        r = self.attach(t.pid, "local a = prof.status().step\n"
                               "print(prof.recorder{}.on, a, prof.status().step)")
        self.assertEqual(r.returncode, 0, r.stderr)
        on, before, resumed_in = r.stdout.split()
        self.assertEqual(on, "true")
        before, resumed_in = int(before), int(resumed_in)
        self.wait_for_steps(t.pid, resumed_in + 4)
        r = self.attach(t.pid, "print(prof.dump{ steps = 2000 }, prof.status().step)")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith("true\t"), r.stdout)
        deadline = time.time() + 30
        while time.time() < deadline and self.value(t.pid, "prof.status().dumps_written") != "1":
            time.sleep(0.1)
        d = self.value(t.pid, "prof.status().dumps[1]").strip('"')
        steps = [n for n, _ in step_spans(load_trace(d))]
        # The first step held is the one the boundary after the call began.
        self.assertGreaterEqual(steps[0], before + 1, d)
        self.assertLessEqual(steps[0], resumed_in + 1, d)
        self.assertEqual(steps, list(range(steps[0], steps[-1] + 1)))
        # Only `enabled` changes live.
        r = self.attach(t.pid, "prof.recorder{ mb = 3 }")
        self.assertEqual(r.returncode, 1)
        self.assertIn("prof.recorder: 'mb' cannot change while the process runs", r.stderr)

    def test_idle_client_is_dropped(self):
        t = self.c_target(env={"PROF_REPL_IDLE": "1"})
        client = subprocess.Popen([PROF, "attach", str(t.pid)],
                                  env=base_env({"XDG_RUNTIME_DIR": self.tmp}),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE)
        try:
            client.wait(20)     # stdin stays open: the client is idle
        except subprocess.TimeoutExpired:
            client.kill()
            self.fail("the idle client was not dropped")
        err = client.stderr.read().decode()
        client.stdin.close()
        self.assertIn("idle for 1 s: disconnected", err)
        self.assertEqual(self.value(t.pid, "1"), "1")


class OtherUser(ReplTest):
    def setUp(self):
        super().setUp()
        if os.geteuid() != 0:
            self.skipTest("needs root to create a second user (useradd) and run as it")
        if subprocess.run(["id", OTHER_USER], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode != 0:
            subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                            "/usr/sbin/nologin", OTHER_USER], check=True)
        self.uid = int(subprocess.run(["id", "-u", OTHER_USER], stdout=subprocess.PIPE,
                                      text=True, check=True).stdout)

    def test_a_peer_of_another_uid_is_refused(self):
        t = self.c_target()     # its socket is open now
        sock = os.path.join(self.tmp, "profhost", "%d.sock" % t.pid)
        # prof attach as that user: refused before connecting.
        r = self.attach(t.pid, "1", prefix=["setpriv", "--reuid=" + OTHER_USER,
                                           "--regid=" + OTHER_USER, "--clear-groups"])
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("permission denied", r.stderr)
        # A client of that uid that can reach the socket anyway (it is given
        # CAP_DAC_OVERRIDE): the server checks SO_PEERCRED and refuses.
        probe = ("import socket, sys\n"
                 "s = socket.socket(socket.AF_UNIX)\n"
                 "s.connect(sys.argv[1])\n"
                 "data = b''\n"
                 "while True:\n"
                 "    chunk = s.recv(4096)\n"
                 "    if not chunk: break\n"
                 "    data += chunk\n"
                 "print(chr(data[0]), data[5:].decode())\n")
        r = run(["setpriv", "--reuid=" + OTHER_USER, "--regid=" + OTHER_USER, "--clear-groups",
                 "--inh-caps=+dac_override", "--ambient-caps=+dac_override",
                 PYTHON, "-c", probe, sock], env=base_env())
        if r.returncode != 0 and "Operation not permitted" in r.stderr:
            self.skipTest("cannot grant CAP_DAC_OVERRIDE here: " + r.stderr)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(),
                         "F refused: uid %d may not attach to process %d, which runs as uid 0"
                         % (self.uid, t.pid))
        self.assertIn("refused a connection from uid %d" % self.uid, t.stderr())
        # The owner still gets in.
        self.assertEqual(self.value(t.pid, "2"), "2")


PY_LOOP = """
import os, signal, sys, time, profhost
calls = []
if "--replace" in sys.argv:
    signal.signal(signal.SIGUSR1, lambda *a: calls.append(1))
if "--fork" in sys.argv:
    child = os.fork()
    if child == 0:
        with open("child.pid", "w") as f:
            f.write(str(os.getpid()))
        for i in range(100000):
            profhost.step()
            time.sleep(0.002)
        os._exit(0)
with open("parent.pid", "w") as f:
    f.write(str(os.getpid()))
for i in range(100000):
    profhost.step()
    time.sleep(0.002)
    if os.path.exists("stop"):
        break
print("handler calls", len(calls), flush=True)
"""


class AttachToPython(ReplTest):
    def py_target(self, *args):
        script = self.write("loop.py", PY_LOOP)
        t = Target(self, [PYTHON, script] + list(args))
        self.wait_for_steps(t.pid)
        return t

    def read_pid(self, name):
        deadline = time.time() + 20
        path = os.path.join(self.tmp, name)
        while time.time() < deadline:
            if os.path.exists(path):
                with open(path) as f:
                    text = f.read()
                if text:
                    return int(text)
            time.sleep(0.05)
        self.fail("no " + name)

    def test_capture_now_in_python(self):
        t = self.py_target()
        self.assertEqual(self.value(t.pid, "prof.status().program"), '"loop"')
        r = self.attach(t.pid, "local w = prof.capture_now{ steps = 3, reason = 'look' }\n"
                               "print(w.dir, w.first_step, w.last_step, w.reason)")
        self.assertEqual(r.returncode, 0, r.stderr)
        dir_, first, last, reason = r.stdout.strip().splitlines()[-1].split("\t")
        self.assertEqual((int(last) - int(first), reason), (2, "look"))
        self.check_window(dir_, int(first), int(last))
        self.assertEqual(self.value(t.pid, "prof.status().windows_written"), "1")

    def test_attach_after_python_replaced_the_handler(self):
        t = Target(self, [PYTHON, self.write("loop.py", PY_LOOP), "--replace"])
        self.read_pid("parent.pid")
        # Trigger file only (no signal): the application's handler never runs.
        t0 = time.time()
        r = self.attach(t.pid, "=prof.status().pid", "--no-signal")
        self.assertEqual((r.returncode, r.stdout.strip()), (0, str(t.pid)), r.stderr)
        self.assertLess(time.time() - t0, 10)
        # With the signal too (the process catches it): still attaches.
        r = self.attach(t.pid, "=prof.status().pid")
        self.assertEqual((r.returncode, r.stdout.strip()), (0, str(t.pid)), r.stderr)
        self.write("stop", "")
        self.assertEqual(t.proc.wait(20), 0)
        self.assertIn("handler calls 0", t.stdout())

    def test_forked_child_has_its_own_repl(self):
        t = Target(self, [PYTHON, self.write("loop.py", PY_LOOP), "--fork"])
        parent = self.read_pid("parent.pid")
        child = self.read_pid("child.pid")
        self.assertEqual(parent, t.pid)
        self.wait_for_steps(parent)
        r = self.attach(child, "local s = prof.status() print(s.pid, s.profiling)")
        self.assertEqual(r.returncode, 0, r.stderr)
        pid, profiling = r.stdout.strip().split("\t")
        self.assertEqual(int(pid), child)
        self.assertTrue(profiling.startswith("off: a child forked"), profiling)
        r = self.attach(child, "prof.capture_now{ steps = 1 }")
        self.assertEqual(r.returncode, 1)
        self.assertIn("forked from process %d" % parent, r.stderr)
        # Both are attachable, each on its own socket.
        self.assertEqual(self.value(parent, "prof.status().pid"), str(parent))
        self.assertTrue(os.path.exists(os.path.join(self.tmp, "profhost", "%d.sock" % child)))
        self.assertTrue(os.path.exists(os.path.join(self.tmp, "profhost", "%d.sock" % parent)))
        os.kill(child, signal.SIGKILL)


class Interactive(ReplTest):
    """A session on a pseudo-terminal, keys as a user types them."""

    def spawn(self, pid):
        env = base_env({"XDG_RUNTIME_DIR": self.tmp, "TERM": "xterm"})
        child, fd = pty.fork()
        if child == 0:
            os.execve(PROF, [PROF, "attach", str(pid)], env)
        self.child, self.fd, self.buf = child, fd, b""

    def expect(self, text, timeout=20):
        """Reads until `text` (a regex) shows; returns what was read."""
        pat = re.compile(text.encode() if isinstance(text, str) else text)
        deadline = time.time() + timeout
        while True:
            m = pat.search(self.buf)
            if m:
                out, self.buf = self.buf[:m.end()], self.buf[m.end():]
                return out.decode(errors="replace")
            left = deadline - time.time()
            if left <= 0:
                self.fail("no %r in %r" % (text, self.buf))
            r, _, _ = select.select([self.fd], [], [], left)
            if r:
                try:
                    data = os.read(self.fd, 4096)
                except OSError:
                    data = b""
                if not data:
                    self.fail("the session ended before %r: %r" % (text, self.buf))
                self.buf += data

    def send(self, keys):
        os.write(self.fd, keys.encode() if isinstance(keys, str) else keys)

    def exit_status(self, timeout=20):
        deadline = time.time() + timeout
        while time.time() < deadline:
            pid, status = os.waitpid(self.child, os.WNOHANG)
            if pid:
                return os.WEXITSTATUS(status)
            r, _, _ = select.select([self.fd], [], [], 0.05)
            if r:
                try:
                    os.read(self.fd, 4096)   # keep the terminal drained
                except OSError:
                    pass
        self.fail("prof attach did not end: %r" % self.buf)

    def test_prompt_continuation_ctrl_c_and_history(self):
        t = self.c_target()
        self.spawn(t.pid)
        try:
            self.expect(r"prof\.help\(\) lists")
            self.expect(r"\r> ")
            self.send("1 + 1\r")
            self.expect(r"\r\n2\r\n")
            self.expect(r"> ")
            # A chunk that needs more lines gets the continuation prompt.
            self.send("for i = 1, 2 do\r")
            self.expect(r"\r>> ")
            self.send("print(i * 10) end\r")
            self.expect(r"10\r\n20\r\n")
            # Ctrl-C interrupts the running command, not the target.
            self.send("while true do end\r")
            time.sleep(0.5)
            self.send(b"\x03")
            self.expect(r"stdin:1: interrupted")
            self.expect(r"\r> ")
            self.assertIsNone(t.proc.poll())
            # Ctrl-C at a continuation prompt drops the unfinished chunk.
            self.send("if true then\r")
            self.expect(r">> ")
            self.send(b"\x03")
            self.expect(r"\^C\r\n")
            self.expect(r"\r> ")
            self.send("y = 1\r")
            self.expect(r"y = 1\x1b\[0K[^\n]*\r\n\r> ")
            self.send("=y\r")
            self.expect(r"\r\n1\r\n")
            self.send("y = 7\r")
            self.expect(r"y = 7\x1b\[0K[^\n]*\r\n\r> ")
            # Up, up: "=y" again, from the history.
            self.send(b"\x1b[A\x1b[A\r")
            self.expect(r"=y\x1b\[0K[^\n]*\r\n7\r\n")
            # Line editing: left arrow, insert, Ctrl-A.
            self.send(b"4 + 2" + b"\x1b[D" * 4 + b"0\x01=\r")
            self.expect(r"\r\n42\r\n")
            # Keys typed while a command runs wait for the next prompt.
            self.send("prof.sleep(300)\r")
            time.sleep(0.1)
            self.send("=6 * 7\r")
            self.expect(r"\r\n42\r\n")
            self.expect(r"\r> ")
            # Ctrl-D leaves; the target goes on.
            self.send(b"\x04")
            self.assertEqual(self.exit_status(), 0)
            self.assertIsNone(t.proc.poll())
        finally:
            try:
                os.kill(self.child, signal.SIGKILL)
                os.waitpid(self.child, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            os.close(self.fd)


# The tests that compare step rates or run a runaway loop run alone
# (e2e_repl_alone).
load_tests = load_part

if __name__ == "__main__":
    unittest.main()

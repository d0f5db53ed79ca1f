"""End-to-end tests of the `prof` command (src/cli).

They run the built `prof` with ordinary commands (env, sh -c, ...) and check
what a user sees: exit statuses, messages, and the environment the command
gets. The library `prof run` preloads is a do-nothing stand-in compiled here
(PROF_LIB), so these tests do not depend on the host library.

Environment: PROFHOST_BUILD (the build directory, holding bin/prof) and
PROFHOST_SOURCE (the source tree), both set by ctest.
"""

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
import zlib

from harness import as_other_user, ensure_other_user

BUILD = os.environ.get("PROFHOST_BUILD", "")
SOURCE = os.environ.get("PROFHOST_SOURCE", "")
PROF = os.path.join(BUILD, "bin", "prof")
USAGE = "(usage: prof run [-s policy.lua] [-o dir] [--set key=value]... -- cmd args...)"
NO_WINDOW = "profhost: no capture window was reached; nothing written\n"

# Filled by setUpModule: a scratch directory and two stand-in libraries.
TMP = ""
STUB = ""   # stands in for libprofhost.so
OTHER = ""  # an unrelated library already in LD_PRELOAD


def compile_lib(path, source):
    src = path + ".c"
    with open(src, "w") as f:
        f.write(source)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", path, src], check=True)


def setUpModule():
    global TMP, STUB, OTHER
    if not BUILD or not os.access(PROF, os.X_OK):
        raise RuntimeError("set PROFHOST_BUILD to a build directory holding bin/prof")
    TMP = os.path.realpath(tempfile.mkdtemp(prefix="test_cli."))
    STUB = os.path.join(TMP, "libstub.so")
    OTHER = os.path.join(TMP, "libother.so")
    compile_lib(STUB, "void stub_for_prof_tests(void) {}\n")
    compile_lib(OTHER, "void other_for_prof_tests(void) {}\n")


def tearDownModule():
    if TMP:
        shutil.rmtree(TMP, ignore_errors=True)


def clean_env(**extra):
    """The test's environment without anything prof sets or reads, plus extra."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PROF_") and k not in (
               "LD_PRELOAD", "PYTHONPATH", "NVTX_INJECTION64_PATH",
               "CUDA_INJECTION64_PATH")}
    env["PROF_LIB"] = STUB
    for k, v in extra.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    if "LD_PRELOAD" in env:
        # prof itself starts with this LD_PRELOAD. In a -DPROFHOST_SANITIZE
        # build, ASan refuses to run when a preloaded library comes before
        # its runtime; the stand-in libraries interpose nothing, so the
        # check is turned off (it only concerns prof, not the command).
        opts = env.get("ASAN_OPTIONS", "")
        env["ASAN_OPTIONS"] = (opts + ":" if opts else "") + "verify_asan_link_order=0"
    return env


def prof(*args, env=None, cwd=None, exe=None, timeout=60):
    """Runs prof with args; returns the CompletedProcess (text output)."""
    return subprocess.run([exe or PROF] + list(args), env=env or clean_env(),
                          cwd=cwd or TMP, capture_output=True, text=True,
                          timeout=timeout)


def parse_env0(out):
    """Parses the output of `env -0` into a dict."""
    return dict(item.split("=", 1) for item in out.split("\0") if item)


def run_env(*opts, env=None, cwd=None, exe=None):
    """Runs `prof run <opts> env -0`; returns (the command's env, result)."""
    r = prof("run", *opts, "env", "-0", env=env, cwd=cwd, exe=exe)
    return parse_env0(r.stdout), r


class Scratch(unittest.TestCase):
    """Gives each test its own directory (self.dir)."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(dir=TMP)

    def path(self, *names):
        return os.path.join(self.dir, *names)


class TopLevel(unittest.TestCase):
    def test_help(self):
        for args in (["--help"], ["-h"], ["help"]):
            r = prof(*args)
            self.assertEqual(r.returncode, 0, args)
            self.assertIn("usage: prof run", r.stdout)
            self.assertIn("--version", r.stdout)
            self.assertEqual(r.stderr, "")

    def test_run_help(self):
        for args in (["run", "--help"], ["run", "-h"], ["help", "run"]):
            r = prof(*args)
            self.assertEqual(r.returncode, 0, args)
            for opt in ("--script", "--output", "--set", "PROF_LIB"):
                self.assertIn(opt, r.stdout)
            self.assertEqual(r.stderr, "")

    def test_version_matches_project(self):
        with open(os.path.join(SOURCE, "CMakeLists.txt")) as f:
            version = re.search(r"project\(profhost VERSION ([0-9.]+)", f.read()).group(1)
        r = prof("--version")
        self.assertEqual(r.returncode, 0)
        self.assertEqual(r.stdout, "prof (profhost) %s\n" % version)

    def test_unknown_command_and_option(self):
        for args, word in ((["frobnicate"], "'frobnicate'"), (["--bogus"], "'--bogus'"),
                           (["help", "nope"], "'nope'"), ([], "missing command")):
            r = prof(*args)
            self.assertEqual(r.returncode, 2, args)
            self.assertEqual(r.stdout, "")
            self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
            self.assertTrue(r.stderr.startswith("prof: "), r.stderr)
            self.assertIn(word, r.stderr)
            self.assertIn("usage: prof run", r.stderr)


class BadArguments(Scratch):
    def check_usage_error(self, args, words):
        marker = self.path("ran")
        r = prof("run", *args, "touch", marker)
        self.assertEqual(r.returncode, 2, args)
        self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
        self.assertTrue(r.stderr.startswith("prof run: " + words), r.stderr)
        self.assertTrue(r.stderr.endswith(USAGE + "\n"), r.stderr)
        self.assertFalse(os.path.exists(marker), "the command ran anyway")

    def test_missing_command(self):
        for args in (["run"], ["run", "--"], ["run", "-s", "p.lua"], ["run", "--set", "a=1"]):
            r = prof(*args)
            self.assertEqual(r.returncode, 2, args)
            self.assertEqual(r.stderr, "prof run: missing command " + USAGE + "\n")

    def test_unknown_option(self):
        self.check_usage_error(["-x"], "unknown option '-x'")
        self.check_usage_error(["--scripts=a"], "unknown option '--scripts=a'")

    def test_bad_set(self):
        for kv in ("novalue", "=v", "a-b=1", "sp ace=1"):
            self.check_usage_error(["--set", kv], "--set '%s' is not key=value" % kv)
        self.check_usage_error(["--set", "a=1\nb=2"], "--set 'a' has a newline")

    def test_missing_value(self):
        for opt in ("-s", "--script", "-o", "--output", "--set"):
            r = prof("run", opt)
            self.assertEqual(r.returncode, 2, opt)
            self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
            self.assertIn("'%s' needs" % opt, r.stderr)

    def test_empty_output_dir(self):
        self.check_usage_error(["-o", ""], "option '-o' needs a non-empty directory")

    def test_missing_policy_file(self):
        marker = self.path("ran")
        r = prof("run", "-s", "no-such-policy.lua", "touch", marker, cwd=self.dir)
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stderr, "prof run: cannot read policy file 'no-such-policy.lua': "
                                   "No such file or directory\n")
        self.assertFalse(os.path.exists(marker))
        r = prof("run", "-s", self.dir, "true")
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stderr, "prof run: cannot read policy file '%s': Is a directory\n"
                         % self.dir)

    def test_fifo_policy_file(self):
        os.mkfifo(self.path("fifo.lua"))
        marker = self.path("ran")
        r = prof("run", "-s", "fifo.lua", "touch", marker, cwd=self.dir, timeout=20)
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stderr, "prof run: cannot read policy file 'fifo.lua': it is a "
                                   "FIFO (named pipe), not a regular file\n")
        self.assertFalse(os.path.exists(marker))


class Environment(Scratch):
    def test_environment_of_the_command(self):
        with open(self.path("policy.lua"), "w") as f:
            f.write("-- empty policy\n")
        env = clean_env(LD_PRELOAD=OTHER, PYTHONPATH="/previous/py:/more",
                        PROF_LIB=os.path.relpath(STUB, self.dir),
                        PROF_LAUNCHER_NOTES="/stale/notes")
        before = time.time()
        child, r = run_env("-s", "policy.lua", "--set", "schedule.active=5",
                           "-o", "out", "--set", "name.x=a b=c", "--",
                           env=env, cwd=self.dir)
        after = time.time()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(child["LD_PRELOAD"], STUB + ":" + OTHER)
        self.assertEqual(child["NVTX_INJECTION64_PATH"], STUB)
        self.assertEqual(child["CUDA_INJECTION64_PATH"], STUB)
        self.assertEqual(child["PROF_SCRIPT"], self.path("policy.lua"))
        self.assertEqual(child["PROF_OUTPUT_DIR"], self.path("out"))
        self.assertEqual(child["PROF_SET"], "schedule.active=5\nname.x=a b=c")
        self.assertEqual(child["PYTHONPATH"],
                         os.path.realpath(os.path.join(BUILD, "share", "profhost", "python"))
                         + ":/previous/py:/more")
        m = re.fullmatch(r"env-(\d{8}-\d{6})", child["PROF_RUN_ID"])
        self.assertIsNotNone(m, child["PROF_RUN_ID"])
        stamp = time.mktime(time.strptime(m.group(1), "%Y%m%d-%H%M%S"))
        self.assertTrue(before - 2 <= stamp <= after + 1, (before, stamp, after))
        notes = child["PROF_LAUNCHER_NOTES"]
        self.assertTrue(os.path.isabs(notes), notes)
        self.assertNotEqual(notes, "/stale/notes")
        self.assertEqual(r.stderr, NO_WINDOW)

    def test_nsight_systems_keeps_its_injection_libraries(self):
        # Under nsys, its own CUDA/NVTX injection must stay in place; without
        # a value to keep, prof's library is set as usual.
        env = clean_env(NSYS_PROFILING_SESSION_ID="7", CUDA_INJECTION64_PATH="/nsys/inj.so",
                        NVTX_INJECTION64_PATH="/nsys/inj.so")
        child, r = run_env(env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(child["CUDA_INJECTION64_PATH"], "/nsys/inj.so")
        self.assertEqual(child["NVTX_INJECTION64_PATH"], "/nsys/inj.so")
        self.assertEqual(child["LD_PRELOAD"], STUB)
        child, r = run_env(env=clean_env(NSYS_PROFILING_SESSION_ID="7"))
        self.assertEqual(child["CUDA_INJECTION64_PATH"], STUB)
        # Without nsys, a stale value is replaced.
        child, r = run_env(env=clean_env(CUDA_INJECTION64_PATH="/old/inj.so"))
        self.assertEqual(child["CUDA_INJECTION64_PATH"], STUB)

    def test_without_options_sets_only_the_basics(self):
        child, r = run_env()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(child["LD_PRELOAD"], STUB)
        for var in ("PROF_SCRIPT", "PROF_OUTPUT_DIR", "PROF_SET"):
            self.assertNotIn(var, child)

    def test_library_not_twice_and_first(self):
        both = STUB + ":" + OTHER
        for previous, want in ((STUB, STUB), (STUB + ":" + OTHER, both),
                               (OTHER + ":" + STUB, both), (OTHER + " " + STUB, both),
                               (os.path.join(TMP, ".", "libstub.so"), STUB)):
            child, r = run_env(env=clean_env(LD_PRELOAD=previous))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(child["LD_PRELOAD"], want, previous)

    def test_run_id(self):
        child, _ = run_env(env=clean_env(PROF_RUN_ID="shared-run"))
        self.assertEqual(child["PROF_RUN_ID"], "shared-run")
        r = prof("run", "/usr/bin/env", "-0")
        self.assertRegex(parse_env0(r.stdout)["PROF_RUN_ID"], r"^env-\d{8}-\d{6}$")

    def test_absolute_paths_kept(self):
        policy = self.path("p.lua")
        open(policy, "w").close()
        child, r = run_env("--script=" + policy, "--output=/abs/out/")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(child["PROF_SCRIPT"], policy)
        self.assertEqual(child["PROF_OUTPUT_DIR"], "/abs/out")

    def test_options_in_any_order_and_command_args_untouched(self):
        open(self.path("p.lua"), "w").close()
        r = prof("run", "--set", "a=1", "-sp.lua", "--set=b=2", "-o", "o", "sh", "-c",
                 'printf "%s|" "$PROF_SET" "$PROF_SCRIPT" "$@"', "sh", "-s", "--set", "x", "--",
                 cwd=self.dir)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "a=1\nb=2|%s|-s|--set|x|--|" % self.path("p.lua"))

    def test_dash_dash_for_a_command_starting_with_dash(self):
        script = self.path("-odd")
        with open(script, "w") as f:
            f.write("#!/bin/sh\necho odd ran\n")
        os.chmod(script, 0o755)
        r = prof("run", "--", "./-odd", cwd=self.dir)
        self.assertEqual((r.returncode, r.stdout), (0, "odd ran\n"))
        r = prof("run", "-odd", cwd=self.dir)  # -o dd, then no command
        self.assertEqual(r.returncode, 2)

    def test_python_module_importable_in_the_command(self):
        r = prof("run", "/usr/bin/python3", "-c",
                 "import profhost; print(profhost.__file__); print(profhost.loaded())")
        self.assertEqual(r.returncode, 0, r.stderr)
        share = os.path.realpath(os.path.join(BUILD, "share", "profhost", "python"))
        self.assertEqual(r.stdout, os.path.join(share, "profhost", "__init__.py")
                         + "\nFalse\n")


class Library(Scratch):
    def install_tree(self, with_lib=True):
        """A copy of prof in <dir>/prefix/bin, the stub as the library."""
        prefix = self.path("prefix")
        os.makedirs(os.path.join(prefix, "bin"))
        shutil.copy2(PROF, os.path.join(prefix, "bin", "prof"))
        if with_lib:
            os.makedirs(os.path.join(prefix, "lib"))
            shutil.copy2(STUB, os.path.join(prefix, "lib", "libprofhost.so"))
        return prefix

    def test_found_next_to_the_executable(self):
        prefix = self.install_tree()
        os.symlink(os.path.join(prefix, "bin", "prof"), self.path("prof-link"))
        for exe in (os.path.join(prefix, "bin", "prof"), self.path("prof-link")):
            child, r = run_env(env=clean_env(PROF_LIB=None), exe=exe)
            self.assertEqual(r.returncode, 0, r.stderr)
            lib = os.path.join(prefix, "lib", "libprofhost.so")
            self.assertEqual(child["LD_PRELOAD"], lib)
            self.assertEqual(child["NVTX_INJECTION64_PATH"], lib)
            self.assertEqual(child["CUDA_INJECTION64_PATH"], lib)
            self.assertEqual(child["PYTHONPATH"],
                             os.path.join(prefix, "share", "profhost", "python"))

    def test_missing_next_to_the_executable(self):
        prefix = self.install_tree(with_lib=False)
        marker = self.path("ran")
        r = prof("run", "touch", marker, env=clean_env(PROF_LIB=None),
                 exe=os.path.join(prefix, "bin", "prof"))
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stderr.count("\n"), 1, r.stderr)
        self.assertIn(os.path.join(prefix, "lib", "libprofhost.so"), r.stderr)
        self.assertIn("set PROF_LIB=/path/to/libprofhost.so", r.stderr)
        self.assertFalse(os.path.exists(marker))

    def test_prof_lib_pointing_nowhere(self):
        marker = self.path("ran")
        r = prof("run", "touch", marker, env=clean_env(PROF_LIB="/no/such/libprofhost.so"))
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stderr, "prof run: PROF_LIB='/no/such/libprofhost.so' cannot be "
                                   "used: No such file or directory\n")
        self.assertFalse(os.path.exists(marker))
        r = prof("run", "true", env=clean_env(PROF_LIB=self.dir))
        self.assertEqual(r.returncode, 2)
        self.assertIn("PROF_LIB='%s' is not a file" % self.dir, r.stderr)

    def test_install_tree_has_the_examples(self):
        prefix = self.path("installed")
        r = subprocess.run(["cmake", "--install", BUILD, "--prefix", prefix],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        share = os.path.join(prefix, "share", "profhost")
        for name in os.listdir(os.path.join(SOURCE, "examples")):
            self.assertTrue(os.path.exists(os.path.join(share, "examples", name)), name)
        for name in ("profile.lua", "quickstart.py", "reports/dataloader_stall.lua"):
            self.assertTrue(os.path.isfile(os.path.join(share, "examples", name)), name)
        # the installed prof runs a command with an installed example policy
        env = clean_env(PROF_LIB=None, PROF_OUTPUT_DIR=self.path("out"))
        env["ASAN_OPTIONS"] = "verify_asan_link_order=0:detect_leaks=0"
        r = prof("run", "-s", os.path.join(share, "examples", "profile.lua"), "true",
                 env=env, exe=os.path.join(prefix, "bin", "prof"))
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_build_tree_layout(self):
        # A static program ignores LD_PRELOAD, so the real (possibly
        # sanitized) library is named but never loaded.
        src = self.path("dumpenv.c")
        with open(src, "w") as f:
            f.write("#include <stdio.h>\nextern char **environ;\n"
                    "int main(void) { for (char **e = environ; *e; e++) "
                    "{ fputs(*e, stdout); putchar(0); } return 0; }\n")
        exe = self.path("dumpenv")
        if subprocess.run(["cc", "-static", "-o", exe, src],
                          capture_output=True).returncode != 0:
            self.skipTest("cc -static does not work here")
        r = prof("run", exe, env=clean_env(PROF_LIB=None))
        self.assertEqual(r.returncode, 0, r.stderr)
        child = parse_env0(r.stdout)
        lib = os.path.realpath(os.path.join(BUILD, "lib", "libprofhost.so"))
        self.assertEqual(child["LD_PRELOAD"], lib)
        self.assertTrue(os.path.isfile(lib))


class ExitStatus(Scratch):
    def test_exit_code_passed_on(self):
        for code in (0, 1, 3, 42, 255):
            r = prof("run", "sh", "-c", "exit %d" % code)
            self.assertEqual(r.returncode, code)

    def test_killed_by_signal(self):
        for sig in (signal.SIGTERM, signal.SIGKILL, signal.SIGSEGV):
            r = prof("run", "sh", "-c", "kill -%d $$" % sig)
            self.assertEqual(r.returncode, 128 + sig, sig)
            self.assertEqual(r.stderr, NO_WINDOW)

    def test_command_not_found(self):
        r = prof("run", "no-such-command-for-prof")
        self.assertEqual(r.returncode, 127)
        self.assertEqual(r.stderr, "prof run: cannot run 'no-such-command-for-prof': "
                                   "No such file or directory\n")
        r = prof("run", self.path("missing", "cmd"))
        self.assertEqual(r.returncode, 127)

    def test_not_executable(self):
        script = self.path("plain.sh")
        with open(script, "w") as f:
            f.write("echo should not run\n")
        os.chmod(script, 0o644)
        r = prof("run", script)
        self.assertEqual(r.returncode, 126)
        self.assertEqual(r.stdout, "")
        self.assertEqual(r.stderr, "prof run: cannot run '%s': Permission denied\n" % script)

    def test_command_exiting_127_still_reports(self):
        r = prof("run", "sh", "-c", "exit 127")
        self.assertEqual((r.returncode, r.stderr), (127, NO_WINDOW))


class Signals(Scratch):
    def start(self, script):
        """Starts prof run sh -c script; waits until the script ran
        `echo $$ > "$READY"`. prof and the command are killed at cleanup."""
        ready = self.path("ready")
        if os.path.exists(ready):
            os.unlink(ready)
        p = subprocess.Popen([PROF, "run", "sh", "-c", script], env=clean_env(READY=ready),
                             cwd=self.dir, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        self.addCleanup(self.kill, p)
        deadline = time.time() + 30
        while True:
            if os.path.exists(ready):
                with open(ready) as f:
                    pid = f.read()
                if pid.endswith("\n"):
                    self.addCleanup(self.kill, None, int(pid))
                    return p
            if time.time() > deadline or p.poll() is not None:
                self.fail("the command did not start")
            time.sleep(0.02)

    @staticmethod
    def kill(p, pid=None):
        if p is not None and p.poll() is None:
            p.kill()
            p.communicate()
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def test_sigterm_forwarded(self):
        p = self.start('trap "echo got TERM; exit 7" TERM; echo $$ > "$READY"; '
                       'while :; do sleep 0.05; done')
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=10)
        self.assertEqual((p.returncode, out), (7, "got TERM\n"))

    def test_sigterm_kills_the_command(self):
        p = self.start('echo $$ > "$READY"; exec sleep 30')
        t0 = time.time()
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=10)
        self.assertEqual(p.returncode, 128 + signal.SIGTERM)
        self.assertLess(time.time() - t0, 10)
        self.assertEqual(err, NO_WINDOW)

    def test_other_forwarded_signals(self):
        for sig in (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
            p = self.start('trap "echo got %d; exit 9" %d; echo $$ > "$READY"; '
                           'while :; do sleep 0.05; done' % (sig, sig))
            p.send_signal(sig)
            out, _ = p.communicate(timeout=10)
            self.assertEqual((p.returncode, out), (9, "got %d\n" % sig), sig)

    def test_sigint_to_prof_alone_is_ignored(self):
        p = self.start('echo $$ > "$READY"; while [ ! -e stop ]; do sleep 0.05; done; '
                       'echo finished; exit 4')
        p.send_signal(signal.SIGINT)
        p.send_signal(signal.SIGQUIT)
        time.sleep(0.3)
        self.assertIsNone(p.poll(), "prof died of SIGINT/SIGQUIT")
        open(self.path("stop"), "w").close()
        out, _ = p.communicate(timeout=10)
        self.assertEqual((p.returncode, out), (4, "finished\n"))

    def test_command_gets_default_dispositions(self):
        # prof ignores SIGINT itself; the command must not inherit that.
        r = prof("run", "sh", "-c", "kill -INT $$; exit 0")
        self.assertEqual(r.returncode, 128 + signal.SIGINT)


class LauncherNotes(Scratch):
    WRITE = ('for w in "$@"; do printf "window\\t%s\\n" "$w" >> "$PROF_LAUNCHER_NOTES"; '
             'printf "future_key\\tsomething\\n" >> "$PROF_LAUNCHER_NOTES"; done; '
             'echo "$PROF_LAUNCHER_NOTES" > notes-path; exit 5')

    def run_writer(self, windows, run_id="myrun"):
        return prof("run", "sh", "-c", self.WRITE, "sh", *windows, cwd=self.dir,
                    env=clean_env(PROF_RUN_ID=run_id))

    def test_windows_listed(self):
        root = self.path("prof_out", "myrun")
        windows = [os.path.join(root, "rank0", "window1_steps10-12"),
                   os.path.join(root, "rank1", "window1_steps10-12"),
                   os.path.join(root, "rank0", "window2_steps20-22")]
        r = self.run_writer(windows)
        self.assertEqual(r.returncode, 5)
        self.assertEqual(r.stderr, "profhost: wrote 3 window(s) under %s\n" % root
                         + "".join("  %s\n" % w for w in windows))

    def test_one_window(self):
        root = self.path("out", "myrun")
        w = os.path.join(root, "rank0", "window1_steps3-5")
        r = self.run_writer([w, w])  # the same window twice is listed once
        self.assertEqual(r.stderr, "profhost: wrote 1 window(s) under %s\n  %s\n" % (root, w))

    def test_recorder_dumps_counted_apart(self):
        root = self.path("prof_out", "myrun")
        windows = [os.path.join(root, "rank0", "window0_steps10-12"),
                   os.path.join(root, "rank0", "recorder0_steps3-5"),
                   os.path.join(root, "rank0", "window1_steps20-22")]
        r = self.run_writer(windows)
        self.assertEqual(r.stderr, "profhost: wrote 2 windows and 1 recorder dump under %s\n"
                         % root + "".join("  %s\n" % w for w in windows))
        r = self.run_writer(windows[1:2])
        self.assertEqual(r.stderr, "profhost: wrote 1 recorder dump under %s\n  %s\n"
                         % (root, windows[1]))

    def test_windows_outside_a_run_dir(self):
        windows = ["/data/a/x/w1", "/data/a/y/w2", "/data/ab/w3"]
        r = self.run_writer(windows)
        self.assertTrue(r.stderr.startswith("profhost: wrote 3 window(s) under /data\n"),
                        r.stderr)

    def test_no_window(self):
        r = self.run_writer([])
        self.assertEqual((r.returncode, r.stderr), (5, NO_WINDOW))

    def test_profiling_disabled_says_so(self):
        r = prof("run", "sh", "-c", "exit 3", cwd=self.dir, env=clean_env(PROF_DISABLE="1"))
        self.assertEqual((r.returncode, r.stderr),
                         (3, "profhost: profiling was off (PROF_DISABLE=1); nothing written\n"))
        r = prof("run", "true", cwd=self.dir, env=clean_env(PROF_DISABLE="0"))
        self.assertEqual((r.returncode, r.stderr), (0, NO_WINDOW))

    def test_notes_file_fresh_and_removed(self):
        r = prof("run", "sh", "-c",
                 'test -f "$PROF_LAUNCHER_NOTES" && test ! -s "$PROF_LAUNCHER_NOTES" && '
                 'stat -c %a "$(dirname "$PROF_LAUNCHER_NOTES")" && '
                 'echo "$PROF_LAUNCHER_NOTES"', env=clean_env(TMPDIR=self.dir))
        self.assertEqual(r.returncode, 0, r.stderr)
        mode, notes = r.stdout.split()
        self.assertEqual(mode, "700")
        self.assertEqual(os.path.dirname(os.path.dirname(notes)), self.dir)
        self.assertFalse(os.path.exists(os.path.dirname(notes)), "temp dir left behind")


class RealHost(Scratch):
    """With the real host library: prof attach's refusals that name what to
    do instead (it reads /proc/PID/maps for the library), and the host's
    refusal of a policy it cannot read."""

    def real_env(self, **extra):
        env = clean_env(PROF_LIB=os.path.join(BUILD, "lib", "libprofhost.so"),
                        XDG_RUNTIME_DIR=self.dir, PROF_OUTPUT_DIR=self.path("out"), **extra)
        env["ASAN_OPTIONS"] = "verify_asan_link_order=0:detect_leaks=0"
        return env

    def wait_for(self, pred, what):
        deadline = time.time() + 20
        while time.time() < deadline:
            v = pred()
            if v:
                return v
            time.sleep(0.05)
        self.fail("timed out waiting for " + what)

    def test_launcher_pid_names_the_child(self):
        launcher = subprocess.Popen([PROF, "run", "--", "sleep", "30"], env=self.real_env(),
                                    cwd=self.dir, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
        try:
            def child():
                with open("/proc/%d/task/%d/children" % (launcher.pid, launcher.pid)) as f:
                    kids = f.read().split()
                if not kids:
                    return None
                with open("/proc/%s/maps" % kids[0]) as f:
                    return kids[0] if "/libprofhost-core.so" in f.read() else None
            kid = self.wait_for(child, "the command under prof run")
            r = prof("attach", str(launcher.pid), "-e", "1", env=self.real_env())
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertEqual(r.stderr, "prof attach: process %d is not running profhost, but "
                             "its child %s is: prof attach %s\n" % (launcher.pid, kid, kid))
        finally:
            launcher.terminate()
            launcher.wait()

    def test_fifo_policy_or_module_never_hangs_the_target(self):
        # Before main: PROF_SCRIPT naming a FIFO, and a policy that requires
        # a module that is a FIFO. The target runs on, profiling off.
        os.mkfifo(self.path("fifo.lua"))
        os.mkfifo(self.path("mod.lua"))
        with open(self.path("policy.lua"), "w") as f:
            f.write("-- needs a module\nrequire('mod')\n")
        for script, msg in (
                ("fifo.lua", "profhost: PROF_SCRIPT: '%s' is a FIFO (named pipe), not a "
                             "regular file; profiling is off for this process\n"
                 % self.path("fifo.lua")),
                ("policy.lua", "profhost: %s:2: module 'mod': %s is a FIFO (named pipe), not "
                               "a regular file; profiling is off for this process\n"
                 % (self.path("policy.lua"), self.path("mod.lua")))):
            env = self.real_env(PROF_SCRIPT=self.path(script))
            env["LD_PRELOAD"] = env["PROF_LIB"]
            r = subprocess.run(["sh", "-c", "echo ran"], env=env, cwd=self.dir,
                               capture_output=True, text=True, timeout=20)
            self.assertEqual((r.returncode, r.stdout), (0, "ran\n"), r.stderr)
            self.assertEqual(r.stderr, msg)

    def test_disabled_process_says_so(self):
        env = self.real_env(PROF_DISABLE="yes")
        env["LD_PRELOAD"] = env["PROF_LIB"]
        target = subprocess.Popen(["sleep", "30"], env=env, stderr=subprocess.DEVNULL)
        try:
            def loaded():
                with open("/proc/%d/maps" % target.pid) as f:
                    return "/libprofhost.so" in f.read()
            self.wait_for(loaded, "the library in the target")
            r = prof("attach", str(target.pid), "-e", "1", env=self.real_env())
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertEqual(r.stderr, "prof attach: process %d runs with PROF_DISABLE=yes: "
                             "profhost is off there\n" % target.pid)
        finally:
            target.kill()
            target.wait()


class ReportInputs(Scratch):
    """prof report bounds memory before reading: a gzip bomb stops at the
    limit (peak RSS measured), devices and FIFOs are refused at once."""
    JSON_LIMIT_MB = 512  # TRACE_JSON_MAX_BYTES

    def report(self, path):
        """Runs prof report PATH; (status, stderr, peak RSS in MiB)."""
        with open(self.path("err"), "w+") as err:
            p = subprocess.Popen([PROF, "report", path], env=clean_env(), cwd=self.dir,
                                 stdout=subprocess.DEVNULL, stderr=err)
            deadline = time.time() + 120
            while True:
                pid, status, usage = os.wait4(p.pid, os.WNOHANG)
                if pid:
                    break
                if time.time() > deadline:
                    p.kill()
                    self.fail("prof report %s did not end" % path)
                time.sleep(0.02)
            p.returncode = os.waitstatus_to_exitcode(status)
            err.seek(0)
            return p.returncode, err.read(), usage.ru_maxrss / 1024.0

    def gzip_bomb(self, name, total_mb, first=b"[", fill=b" ", size_field=None):
        """`first` and total_mb MiB of `fill`, gzipped as 64 MiB members; the
        last member's size field is size_field when given."""
        member = zlib.compressobj(9, zlib.DEFLATED, 31)
        one = member.compress(fill * (64 << 20)) + member.flush()
        path = self.path(name)
        with open(path, "wb") as f:
            if first:
                c = zlib.compressobj(9, zlib.DEFLATED, 31)
                f.write(c.compress(first) + c.flush())
            for _ in range(total_mb // 64):
                f.write(one)
            if size_field is not None:
                f.seek(-4, os.SEEK_END)
                f.write(size_field.to_bytes(4, "little"))
        return path

    def test_gzip_bomb_stops_at_the_limit(self):
        bomb = self.gzip_bomb("bomb.json.gz", 1024)
        self.assertLess(os.path.getsize(bomb), 4 << 20)
        rc, err, peak = self.report(bomb)
        self.assertEqual(rc, 1)
        self.assertEqual(err, "prof report: %s: more than 512 MiB of JSON once decompressed, "
                         "more than this reader takes (prof report parses JSON whole; use "
                         "the window's capture.phb)\n" % bomb)
        self.assertLess(peak, self.JSON_LIMIT_MB + 128)

    def test_gzip_size_field_refuses_before_inflating(self):
        bomb = self.gzip_bomb("sized.json.gz", 1024, size_field=1 << 30)
        rc, err, peak = self.report(bomb)
        self.assertEqual(rc, 1)
        self.assertEqual(err, "prof report: %s: 1024 MiB of JSON once decompressed (gzip's "
                         "size field), more than the 512 MiB of JSON this reader takes "
                         "(prof report parses JSON whole; use the window's capture.phb)\n"
                         % bomb)
        self.assertLess(peak, 128)

    def test_large_plain_file_refused_by_its_size(self):
        big = self.path("big.json")
        with open(big, "wb") as f:
            f.write(b"[")
            f.truncate(600 << 20)  # sparse: costs no disk
        rc, err, peak = self.report(big)
        self.assertEqual(rc, 1)
        self.assertEqual(err, "prof report: %s: 600 MiB of JSON, more than the 512 MiB of "
                         "JSON this reader takes (prof report parses JSON whole; use the "
                         "window's capture.phb)\n" % big)
        self.assertLess(peak, 128)

    def test_zeros_refused_from_the_first_bytes(self):
        zeros = self.gzip_bomb("zeros.gz", 1024, first=b"", fill=b"\0")
        rc, err, peak = self.report(zeros)
        self.assertEqual((rc, err), (1, "prof report: %s: neither a profhost capture "
                                        "(capture.phb) nor a JSON trace: unexpected byte "
                                        "0x00 at offset 0\n" % zeros))
        self.assertLess(peak, 128)

    def test_devices_and_fifos_refused(self):
        fifo = self.path("fifo")
        os.mkfifo(fifo)
        for path, kind in (("/dev/zero", "a character device"), (fifo, "a FIFO (named pipe)")):
            rc, err, peak = self.report(path)
            self.assertEqual((rc, err), (1, "prof report: %s: %s, not a regular file\n"
                                            % (path, kind)))
            self.assertLess(peak, 128)


TORCH_LEGACY_TRACE = """
import sys
import torch
from torch.profiler import profile, record_function, schedule
model = torch.nn.Linear(32, 32)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
with profile(schedule=schedule(wait=1, warmup=1, active=2),
             on_trace_ready=lambda p: p.export_chrome_trace(sys.argv[1])) as p:
    for i in range(5):
        with record_function("forward"):
            loss = model(torch.randn(8, 32)).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
        p.step()
"""


class ReportTorchTraces(Scratch):
    """prof report on what torch.profiler exported: Debian's torch 1.13 has
    no Kineto, so export_chrome_trace writes the legacy form (a bare list,
    "pid": "CPU functions", no "cat")."""

    def test_legacy_torch_trace_is_read(self):
        trace = self.path("torch_trace.json")
        r = subprocess.run(["/usr/bin/python3", "-c", TORCH_LEGACY_TRACE, trace],
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0 and "No module named 'torch'" in r.stderr:
            self.skipTest("Debian's python3-torch is not installed")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(trace) as f:
            first = f.read(200)
        self.assertTrue(first.startswith('[{"name": '), first)
        self.assertIn('"pid": "CPU functions"', first)
        self.assertNotIn('"cat"', first)
        r = prof("report", trace)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr, "")
        self.assertIn("steps 1-2", r.stdout.splitlines()[0])
        self.assertIn("(2 complete steps)", r.stdout)
        cpu = r.stdout[r.stdout.index("\nCPU time\n"):]
        for op in ("aten::addmm", "aten::mm", "aten::sum"):
            self.assertRegex(cpu, r"\n  %s +\d+ " % re.escape(op))
        self.assertNotRegex(r.stdout, r"Window: .*, 0 events")

    def test_trace_with_nothing_readable_fails(self):
        trace = self.path("other.json")
        with open(trace, "w") as f:
            f.write('[{"name": "a", "ph": "X", "ts": 1, "dur": 2, "pid": 1, "tid": 1, '
                    '"cat": "my_tool"}, {"name": "b", "ph": "X", "ts": 4, "dur": 2, '
                    '"pid": 1, "tid": 1}]')
        r = prof("report", trace)
        self.assertEqual((r.returncode, r.stdout), (1, ""))
        self.assertEqual(r.stderr, "prof report: %s: none of its 2 events is one prof report "
                         "reads (no category it knows: Kineto's cpu_op, kernel, "
                         "user_annotation, ...)\n" % trace)


class Scripts(Scratch):
    """The README's commands: install-deps.sh as root and as a user with
    sudo (apt-get and sudo are stand-ins that log their arguments), and the
    test command, exactly what CI runs."""

    def setUp(self):
        super().setUp()
        # a directory another user can read, with a copy of the script
        self.pub = tempfile.mkdtemp(prefix="test_cli_scripts.")
        os.chmod(self.pub, 0o777)
        self.script = os.path.join(self.pub, "install-deps.sh")
        shutil.copy2(os.path.join(SOURCE, "scripts", "install-deps.sh"), self.script)
        os.chmod(self.script, 0o755)
        self.log = os.path.join(self.pub, "log")

    def tearDown(self):
        shutil.rmtree(self.pub, ignore_errors=True)

    def stand_ins(self, *names):
        """A directory of stand-in commands that log "<name> <args>"."""
        d = os.path.join(self.pub, "bin-" + "-".join(names))
        os.mkdir(d)
        os.chmod(d, 0o755)
        for n in names:
            with open(os.path.join(d, n), "w") as f:
                f.write('#!/bin/sh\necho "%s $*" >> "%s"\n' % (n, self.log))
            os.chmod(os.path.join(d, n), 0o755)
        return d

    def logged(self):
        if not os.path.exists(self.log):
            return []
        with open(self.log) as f:
            return f.read().splitlines()

    def run_script(self, path, as_other=False):
        cmd = ["sh", self.script]
        if as_other:
            cmd = as_other_user(cmd)
        env = clean_env(PATH=path)
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)

    def test_install_deps_as_root_runs_apt_get_itself(self):
        if os.geteuid() != 0:
            self.skipTest("needs root")
        bindir = self.stand_ins("apt-get", "sudo", "npm")
        r = self.run_script(bindir + ":/usr/bin:/bin")
        self.assertEqual(r.returncode, 0, r.stderr)
        log = self.logged()
        self.assertEqual(log[0], "apt-get update")
        self.assertTrue(log[1].startswith("apt-get install -y --no-install-recommends "
                                          "build-essential cmake "), log[1])
        self.assertTrue(log[2].startswith("npm install -g speedscope@"), log)
        self.assertEqual(len(log), 3, log)

    def test_install_deps_as_a_user_asks_sudo(self):
        if ensure_other_user() is None:
            self.skipTest("needs root to act as another user")
        bindir = self.stand_ins("apt-get", "sudo", "npm")
        with open(self.log, "w"):
            pass
        os.chmod(self.log, 0o666)
        r = self.run_script(bindir + ":/usr/bin:/bin", as_other=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.logged(), ["sudo sh " + self.script])

    def test_install_deps_as_a_user_without_sudo(self):
        if ensure_other_user() is None:
            self.skipTest("needs root to act as another user")
        if any(os.access(os.path.join(d, "sudo"), os.X_OK) for d in ("/usr/bin", "/bin")):
            self.skipTest("sudo is installed here")
        bindir = self.stand_ins("apt-get", "npm")
        r = self.run_script(bindir + ":/usr/bin:/bin", as_other=True)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr, "install-deps.sh: needs root to install packages: run it "
                                   "as root, or install sudo\n")
        self.assertEqual(self.logged(), [])

    def test_readme_commands_are_what_ci_runs(self):
        with open(os.path.join(SOURCE, "README.md")) as f:
            readme = f.read()
        with open(os.path.join(SOURCE, ".ci", "run")) as f:
            ci = [l for l in f.read().splitlines()
                  if l.startswith("sh ")]
        blocks = re.findall(r"```sh\n(.*?)```", readme, re.S)
        self.assertEqual(blocks[0], "sh scripts/install-deps.sh && sh scripts/demo.sh\n")
        self.assertEqual(blocks[1], "sh scripts/test.sh\n")
        self.assertEqual(ci, ["sh scripts/install-deps.sh", "sh scripts/test.sh"])


if __name__ == "__main__":
    unittest.main(verbosity=2)

"""Shared helpers for profhost's end-to-end tests.

The tests run real programs under the host, from the build tree named by
PROFHOST_BUILD (set by ctest), and read what the host wrote.
"""
import atexit
import glob
import gzip
import json
import os
import pwd
import shutil
import subprocess
import tempfile
import unittest
from fractions import Fraction

BUILD = os.environ.get("PROFHOST_BUILD", "")
SOURCE = os.environ.get("PROFHOST_SOURCE",
                        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SANITIZE = os.environ.get("PROFHOST_SANITIZE", "")
BUILD_TYPE = os.environ.get("PROFHOST_BUILD_TYPE", "")  # CMAKE_BUILD_TYPE
# A file whose few timing-sensitive tests must run alone (ctest RUN_SERIAL)
# is two ctest tests: PROFHOST_E2E_PART=alone runs the tests marked
# @alone, =beside the others, beside other test files; unset, all of them.
E2E_PART = os.environ.get("PROFHOST_E2E_PART", "")
PROF = os.path.join(BUILD, "bin", "prof")
LIB = os.path.join(BUILD, "lib", "libprofhost.so")
TESTBIN = os.path.join(BUILD, "tests", "bin")
PYTHON = "/usr/bin/python3"


def has_torch():
    """Whether torch imports in PYTHON (Debian's python3-torch); asked once."""
    global _HAS_TORCH
    if _HAS_TORCH is None:
        try:
            _HAS_TORCH = subprocess.run([PYTHON, "-c", "import torch"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        timeout=120).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            _HAS_TORCH = False
    return _HAS_TORCH


_HAS_TORCH = None

# Skips a test or class where torch is not installed for PYTHON.
NEEDS_TORCH = unittest.skipUnless(has_torch(), "torch is not installed for /usr/bin/python3")


def alone(test):
    """Marks a test (or a class of them) that compares the program's speed
    at two moments, or loads the CPUs on purpose: it runs in its file's
    `alone` part."""
    test.e2e_alone = True
    return test


def load_part(loader, tests, pattern):
    """A load_tests() for a file split in parts: the tests of E2E_PART."""
    def keep(test):
        marked = (getattr(type(test), "e2e_alone", False) or
                  getattr(getattr(test, test._testMethodName, None), "e2e_alone", False))
        return not E2E_PART or (E2E_PART == "alone") == marked

    def walk(suite):
        for t in suite:
            if isinstance(t, unittest.TestSuite):
                yield from walk(t)
            elif keep(t):
                yield t
    return unittest.TestSuite(walk(tests))


def _make_salvage_dir():
    """This test process's own salvage folder (a private tmpfs folder), so
    that no test reads, salvages or is told about salvage files of other
    tests or of the user's own processes in /dev/shm (the host and `prof
    run` look for orphaned ones at their start), and none of its own land
    there. None without /dev/shm."""
    if not os.path.isdir("/dev/shm"):
        return None
    path = tempfile.mkdtemp(prefix="profhost-e2e-salvdir-", dir="/dev/shm")
    atexit.register(shutil.rmtree, path, True)
    return path


SALVAGE_DIR = _make_salvage_dir()


def base_env(extra=None):
    """The environment for a child: no inherited PROF_* variables but
    PROF_SALVAGE_DIR, this test process's SALVAGE_DIR, and, in a sanitizer
    build, options that let an instrumented libprofhost.so be preloaded into
    an uninstrumented program."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PROF_") and k not in ("LD_PRELOAD", "PYTHONPATH")}
    if SALVAGE_DIR:
        env["PROF_SALVAGE_DIR"] = SALVAGE_DIR
    if SANITIZE:
        env["ASAN_OPTIONS"] = "verify_asan_link_order=0:detect_leaks=0"
        env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
    if extra:
        env.update(extra)
    return env


def run(cmd, env=None, timeout=120, cwd=None, input=None):
    """Runs cmd; returns CompletedProcess with text stdout/stderr."""
    return subprocess.run(cmd, env=env if env is not None else base_env(), cwd=cwd,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=timeout, input=input)


def profhost_lines(stderr):
    """The lines the host printed (they start with 'profhost: ')."""
    return [l for l in stderr.splitlines() if l.startswith("profhost: ")]


def window_dirs(out_dir):
    """Every window directory under out_dir, sorted by window index."""
    dirs = glob.glob(os.path.join(out_dir, "*", "rank*", "window*_steps*"))

    def key(d):
        name = os.path.basename(d)
        return int(name[len("window"):name.index("_")])
    return sorted(dirs, key=key)


def load_trace(window_dir):
    """Parses the window's trace.json or trace.json.gz."""
    plain = os.path.join(window_dir, "trace.json")
    if os.path.exists(plain):
        with open(plain, "rb") as f:
            return json.loads(f.read().decode("utf-8"))
    with gzip.open(os.path.join(window_dir, "trace.json.gz"), "rb") as f:
        return json.loads(f.read().decode("utf-8"))


def mono_ns(trace, us):
    """A trace time (µs since baseTimeNanoseconds, as a JSON reader has it) as the
    CLOCK_MONOTONIC ns the host recorded it at: exactly, since the double
    is within half a nanosecond of the written value."""
    return round(Fraction(us) * 1000) + trace["profhost"]["monotonic_offset_ns"]


def step_spans(trace):
    """(step number, event) of each ProfilerStep#N span on the CPU, in time
    order (GPU captures add gpu_user_annotation spans of the same names)."""
    out = []
    for e in trace["traceEvents"]:
        if e.get("ph") == "X" and e.get("name", "").startswith("ProfilerStep#") and \
                e.get("cat") == "user_annotation":
            out.append((int(e["name"][len("ProfilerStep#"):]), e))
    out.sort(key=lambda p: p[1]["ts"])
    return out


class TempDirTest(unittest.TestCase):
    """A test case with a fresh temporary directory in self.tmp."""

    def setUp(self):
        if not BUILD or not os.path.exists(LIB):
            self.fail("PROFHOST_BUILD must name a build tree with lib/libprofhost.so "
                      "(run the tests through ctest)")
        self.tmp = tempfile.mkdtemp(prefix="profhost-e2e-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)
        # what a test's processes left is not the next test's business
        for path in glob.glob(os.path.join(SALVAGE_DIR or "/nonexistent", "*")):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)

    def write(self, name, text):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(text)
        return path


OTHER_USER = "profhost-e2e"


def ensure_other_user():
    """A second user for tests that act as another user (created when
    missing): its (uid, gid), or None when this process cannot (not root).
    Run a command as it with as_other_user()."""
    if os.geteuid() != 0:
        return None
    if subprocess.run(["id", OTHER_USER], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode != 0:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                        "/usr/sbin/nologin", OTHER_USER], check=True)
    pw = pwd.getpwnam(OTHER_USER)
    return pw.pw_uid, pw.pw_gid


def as_other_user(cmd):
    """cmd (a list) prefixed to run as OTHER_USER, with no supplementary
    groups, and without PROF_SALVAGE_DIR (this user's SALVAGE_DIR is not
    theirs: the host would refuse it)."""
    return ["setpriv", "--reuid=" + OTHER_USER, "--regid=" + OTHER_USER,
            "--clear-groups", "env", "-u", "PROF_SALVAGE_DIR"] + list(cmd)

"""End-to-end tests of the `profhost` Python module (src/python/profhost).

Each test runs a short script in a fresh /usr/bin/python3. "With a host"
means a fake libprofhost compiled here and preloaded (LD_PRELOAD): it exports
the C ABI of include/profhost/prof.h and logs every call to $FAKE_PROF_LOG,
one line per call, so the tests see exactly what reached C and in what order.

Environment: PROFHOST_SOURCE (the source tree), set by ctest.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

SOURCE = os.environ.get("PROFHOST_SOURCE") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
MODULE_DIR = os.path.join(SOURCE, "src", "python")
PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable

FAKE_HOST = r"""
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

static int log_fd = -1;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local int depth;

__attribute__((constructor)) static void fake_open(void)
{
	const char *path = getenv("FAKE_PROF_LOG");
	if (path)
		log_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

static void fake_log(const char *what, const char *arg)
{
	char line[8192];
	int n = snprintf(line, sizeof line, "%s%s%s\n", what, arg ? " " : "", arg ? arg : "");
	pthread_mutex_lock(&log_lock);
	if (log_fd >= 0 && write(log_fd, line, (size_t)n) != n)
		abort();
	pthread_mutex_unlock(&log_lock);
}

EXPORT int prof_abi_version(void) { fake_log("abi", NULL); return 7; }
EXPORT void prof_step(void) { fake_log("step", NULL); }
EXPORT void prof_mark(const char *name) { fake_log("mark", name ? name : "(null)"); }
EXPORT void prof_range_push(const char *name)
{
	depth++;
	fake_log("push", name ? name : "(null)");
}
EXPORT void prof_range_pop(void)
{
	fake_log(depth > 0 ? "pop" : "pop-unbalanced", NULL);
	if (depth > 0)
		depth--;
}
#ifndef PARTIAL
EXPORT int prof_capture_now(unsigned steps, const char *reason)
{
	char arg[4200];
	snprintf(arg, sizeof arg, "%u %s", steps, reason ? reason : "(null)");
	fake_log("capture", arg);
	return steps > 0 ? 0 : -1;
}
#endif
"""

TMP = ""
FAKE = ""     # the full fake host
PARTIAL = ""  # a fake host lacking prof_capture_now


def setUpModule():
    global TMP, FAKE, PARTIAL
    TMP = tempfile.mkdtemp(prefix="test_python_module.")
    src = os.path.join(TMP, "fake_host.c")
    with open(src, "w") as f:
        f.write(FAKE_HOST)
    FAKE = os.path.join(TMP, "libfakehost.so")
    PARTIAL = os.path.join(TMP, "libpartialhost.so")
    for out, extra in ((FAKE, []), (PARTIAL, ["-DPARTIAL"])):
        subprocess.run(["cc", "-shared", "-fPIC", "-fvisibility=hidden", "-pthread",
                        "-o", out, src] + extra, check=True)


def tearDownModule():
    if TMP:
        shutil.rmtree(TMP, ignore_errors=True)


class Module(unittest.TestCase):
    def setUp(self):
        self.log = tempfile.mktemp(dir=TMP, suffix=".log")

    def run_py(self, code, host=None):
        """Runs code in a fresh python with the module importable (and the
        given host preloaded). Returns (stdout, log lines as bytes)."""
        env = {k: v for k, v in os.environ.items()
               if k not in ("LD_PRELOAD", "PYTHONPATH") and not k.startswith("PROF_")}
        env["PYTHONPATH"] = MODULE_DIR
        env["FAKE_PROF_LOG"] = self.log
        env["PYTHONIOENCODING"] = "utf-8"
        if host:
            env["LD_PRELOAD"] = host
        r = subprocess.run([PYTHON, "-c", textwrap.dedent(code)], env=env,
                           capture_output=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr.decode(errors="replace"))
        self.assertEqual(r.stderr, b"")
        lines = []
        if os.path.exists(self.log):
            with open(self.log, "rb") as f:
                lines = f.read().splitlines()
        return r.stdout.decode("utf-8"), lines

    SCRIPT = """
        import profhost
        print(profhost.loaded(), profhost.abi_version())
        profhost.step()
        profhost.mark("mark-ascii")
        profhost.mark("\u00e9\u2192\u65e5\u672c")
        with profhost.range("outer"):
            with profhost.range("inner") as r:
                profhost.step()

        @profhost.range("decorated")
        def double(x):
            profhost.mark("in double")
            return 2 * x

        print(double(21), double.__name__)
        try:
            with profhost.range("boom"):
                raise KeyError("inside")
        except KeyError:
            print("KeyError passed through")
        print(profhost.capture_now(3, "slow step"), profhost.capture_now(0))
        profhost.capture_now(2)
    """

    def test_without_host_everything_is_a_no_op(self):
        out, log = self.run_py(self.SCRIPT)
        self.assertEqual(out, "False None\n42 double\nKeyError passed through\nFalse False\n")
        self.assertEqual(log, [])

    def test_calls_arrive_in_order(self):
        out, log = self.run_py(self.SCRIPT, host=FAKE)
        self.assertEqual(out, "True 7\n42 double\nKeyError passed through\nTrue False\n")
        want = ["abi", "step", "mark mark-ascii", "mark \u00e9\u2192\u65e5\u672c",
                "push outer", "push inner", "step", "pop", "pop",
                "push decorated", "mark in double", "pop",
                "push boom", "pop",
                "capture 3 slow step", "capture 0 (null)", "capture 2 (null)"]
        self.assertEqual([line.decode("utf-8") for line in log], want)

    def test_names_that_are_not_valid_utf8_or_not_str(self):
        out, log = self.run_py(r"""
            import profhost
            profhost.mark("\udcff\udcfe")   # bytes 0xff 0xfe, as os.fsdecode gives them
            profhost.mark(b"raw\xc0")
            profhost.mark(12)
            with profhost.range("\ud800"):  # a lone surrogate cannot be UTF-8
                pass
            print("ok")
        """, host=FAKE)
        self.assertEqual(out, "ok\n")
        self.assertEqual(log[:3], [b"mark \xff\xfe", b"mark raw\xc0", b"mark 12"])
        self.assertEqual(log[3:], [b"push ?", b"pop"])

    def test_exception_in_decorated_function_pops_and_propagates(self):
        out, log = self.run_py("""
            import profhost

            @profhost.range("fails")
            def fails():
                raise ValueError("bad")

            try:
                fails()
            except ValueError as e:
                print("caught", e)
            profhost.step()
        """, host=FAKE)
        self.assertEqual(out, "caught bad\n")
        self.assertEqual(log, [b"push fails", b"pop", b"step"])

    def test_threads(self):
        out, log = self.run_py("""
            import threading, profhost
            start = threading.Barrier(8)

            def work(i):
                start.wait()          # all threads make their first call together
                for _ in range(200):
                    with profhost.range("t%d" % i):
                        profhost.step()

            threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
            for t in threads: t.start()
            for t in threads: t.join()
            print(profhost.loaded())
        """, host=FAKE)
        self.assertEqual(out, "True\n")
        self.assertEqual(log.count(b"step"), 1600)
        self.assertEqual(log.count(b"pop"), 1600)
        for i in range(8):
            self.assertEqual(log.count(b"push t%d" % i), 200)
        self.assertNotIn(b"pop-unbalanced", log)

    def test_partial_host_is_not_used(self):
        out, log = self.run_py("""
            import profhost
            with profhost.range("r"):
                profhost.step()
            print(profhost.loaded(), profhost.capture_now(1))
        """, host=PARTIAL)
        self.assertEqual(out, "False False\n")
        self.assertEqual(log, [])

    def test_bad_step_counts_raise_with_or_without_host(self):
        code = """
            import profhost
            for bad in (-1, 2**32, 1.5, "3"):
                try:
                    profhost.capture_now(bad)
                except (ValueError, TypeError) as e:
                    print(type(e).__name__)
        """
        for host in (None, FAKE):
            out, log = self.run_py(code, host=host)
            self.assertEqual(out, "ValueError\nValueError\nTypeError\nTypeError\n")
            self.assertEqual(log, [])


if __name__ == "__main__":
    unittest.main(verbosity=2)

"""End to end: where the torch operator observer's first-use build is
loaded from (src/python/profhost/_opscache.py, _ops.py; issue #25).

A library planted in the observer cache by another user, or left writable
by others, is never loaded (its constructor would leave a marker file):
the bridge says so once and builds into a private folder, and operators
are still recorded. A corrupt cached library is rebuilt once; a rebuild
that fails leaves the fallback, said once. The default cache
(~/.cache/profhost/torchops) works as before: built once, then loaded
without a word.

Needs torch in /usr/bin/python3 (Debian's python3-torch) and a C compiler;
the other user's case needs root.
"""
import hashlib
import json
import os
import unittest

from harness import (BUILD, PROF, PYTHON, TempDirTest, base_env, ensure_other_user,
                     load_trace, run, window_dirs)
from test_torch_ops import NEEDS_TORCH, POLICY, STEPS, WORKLOAD, op_events

SHARE = os.path.join(BUILD, "share", "profhost")
LIB = "profhost_torchops.so"
PRIVATE = ("not loading code from it: the torch operator observer is built in a private "
           "folder for this run")

MARKER_C = r"""
#include <fcntl.h>
#include <unistd.h>
__attribute__((constructor)) static void planted(void)
{
	int fd = open(MARKER, O_WRONLY | O_CREAT, 0644);
	if (fd >= 0)
		close(fd);
}
"""


@NEEDS_TORCH
class ObserverCache(TempDirTest):
    def setUp(self):
        TempDirTest.setUp(self)
        self.marker = os.path.join(self.tmp, "planted-constructor-ran")
        self.tmpdir = os.path.join(self.tmp, "tmpdir")  # the run's TMPDIR
        os.mkdir(self.tmpdir, 0o700)

    def folder(self, cache):
        """The cache folder the bridge uses for this torch with
        PROF_TORCH_OPS_CACHE=cache, as the bridge computes it."""
        code = ("import sys\nsys.path.insert(0, %r)\nimport torch\n"
                "from profhost import _ops, _opscache\n"
                "print(_opscache.folder(%r, _ops._torch_cpu_lib))\n"
                % (os.path.join(SHARE, "python"), os.path.join(SHARE, "torchops", "observer.cpp")))
        r = run([PYTHON, "-c", code], env=base_env({"PROF_TORCH_OPS_CACHE": cache}), timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout.strip()

    def plant(self, folder):
        """A library whose constructor makes self.marker, at the cached
        library's path in `folder`, with its right digest beside it (an
        intruder can write that too). Returns its path."""
        src = self.write("planted.c", MARKER_C)
        path = os.path.join(folder, LIB)
        r = run(["cc", "-shared", "-fPIC", "-DMARKER=\"%s\"" % self.marker, "-o", path, src])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.write_digest(folder)
        return path

    def write_digest(self, folder):
        with open(os.path.join(folder, LIB), "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        with open(os.path.join(folder, LIB + ".sha256"), "w") as f:
            f.write(digest + "\n")

    def prof_run(self, extra_env, out):
        env = base_env({"PROF_TORCH_OPS": "observer", "PROF_TORCH_OPS_PREBUILT": "0",
                        "TMPDIR": self.tmpdir})
        env.pop("XDG_CACHE_HOME", None)
        env.update(extra_env)
        policy = self.write("policy.lua", POLICY)
        out = os.path.join(self.tmp, out)
        r = run([PROF, "run", "-s", policy, "-o", out, "--", PYTHON, WORKLOAD, str(STEPS),
                 "plain"], env=env, timeout=600, cwd=self.tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        dirs = window_dirs(out)
        self.assertEqual([os.path.basename(d) for d in dirs], ["window0_steps5-7"], r.stderr)
        with open(os.path.join(dirs[0], "summary.txt")) as f:
            summary = f.read()
        state = json.loads(r.stdout.strip().splitlines()[-1])
        return load_trace(dirs[0]), summary, state, r

    def assert_observer_recorded(self, trace, summary, state, r):
        self.assertIn("operator events: profhost's RecordFunction observer", summary)
        self.assertEqual(state["path"], "observer", r.stderr)
        self.assertEqual(len([e for e in op_events(trace) if e["name"] == "aten::addmm"]), 3 * 3)

    def assert_private_build(self, r, why, fix):
        """Not loaded; said once, exactly; nothing of the private folder left
        after the run."""
        self.assertFalse(os.path.exists(self.marker), "the planted library was loaded")
        lines = [l for l in r.stderr.splitlines() if PRIVATE in l]
        self.assertEqual(lines, ["profhost: %s; %s (%s)" % (why, PRIVATE, fix)], r.stderr)
        self.assertNotIn("building the torch operator observer", r.stderr)
        self.assertEqual(os.listdir(self.tmpdir), [])

    def test_other_users_cache_not_loaded(self):
        ids = ensure_other_user()
        if ids is None:
            self.skipTest("needs root to act as another user")
        uid, gid = ids
        cache = os.path.join(self.tmp, "shared-cache")
        folder = self.folder(cache)
        os.makedirs(folder)
        self.plant(folder)
        for d, _, files in os.walk(cache):
            for p in [d] + [os.path.join(d, f) for f in files]:
                os.chown(p, uid, gid)
                os.chmod(p, 0o777)
        trace, summary, state, r = self.prof_run({"PROF_TORCH_OPS_CACHE": cache}, "out")
        self.assert_private_build(
            r, "PROF_TORCH_OPS_CACHE=%s: %s is owned by uid %d, not by you (uid 0) or root"
            % (cache, folder, uid), "choose a folder of your own")
        self.assert_observer_recorded(trace, summary, state, r)

    def test_library_writable_by_group_not_loaded(self):
        cache = os.path.join(self.tmp, "cache")
        folder = self.folder(cache)
        os.makedirs(folder, 0o700)
        os.chmod(cache, 0o700)
        lib = self.plant(folder)
        os.chmod(lib, 0o775)
        trace, summary, state, r = self.prof_run({"PROF_TORCH_OPS_CACHE": cache}, "out")
        self.assert_private_build(
            r, "PROF_TORCH_OPS_CACHE=%s: %s has mode 0775 (group or others can write to it)"
            % (cache, lib), "chmod go-w " + lib)
        self.assert_observer_recorded(trace, summary, state, r)
        with open(lib, "rb") as f:  # left as it was: not the bridge's to touch
            self.assertIn(self.marker.encode(), f.read())

    def test_corrupt_library_rebuilt_once(self):
        cache = os.path.join(self.tmp, "cache")
        folder = self.folder(cache)
        os.makedirs(folder, 0o700)
        os.chmod(cache, 0o700)
        lib = os.path.join(folder, LIB)
        rebuilding = "profhost: rebuilding the torch operator observer for torch 1.13"
        # Cut short (no digest matches it): not handed to dlopen, rebuilt.
        try:
            with open(os.path.join(BUILD, "lib", "libprofhost-torchops.so"), "rb") as f:
                good = f.read()
        except OSError:  # CMake found no torch: any ELF start will do
            good = b"\x7fELF\x02\x01\x01" + b"\0" * 8192
        with open(lib, "wb") as f:
            f.write(good[:len(good) // 2])
        os.chmod(lib, 0o755)
        trace, summary, state, r = self.prof_run({"PROF_TORCH_OPS_CACHE": cache}, "out")
        said = [l for l in r.stderr.splitlines() if l.startswith(rebuilding)]
        self.assertEqual(len(said), 1, r.stderr)
        self.assertTrue(said[0].endswith(" (once): %s is not the library that was built there "
                                         "(no digest)" % lib), said[0])
        self.assert_observer_recorded(trace, summary, state, r)
        # Garbage with its own digest: dlopen refuses it, it is rebuilt.
        with open(lib, "wb") as f:
            f.write(b"\x7fELF" + b"\x55" * 4096)
        self.write_digest(folder)
        trace, summary, state, r = self.prof_run({"PROF_TORCH_OPS_CACHE": cache}, "out2")
        said = [l for l in r.stderr.splitlines() if l.startswith(rebuilding)]
        self.assertEqual(len(said), 1, r.stderr)
        self.assertIn(" (once): it does not load: %s: " % lib, said[0])
        self.assert_observer_recorded(trace, summary, state, r)
        self.assertEqual(sorted(os.listdir(folder)), [LIB, LIB + ".sha256"])
        # The rebuild fails too (no compiler): the fallback, said once.
        with open(lib, "wb") as f:
            f.write(b"\x7fELF" + b"\x55" * 4096)
        trace, summary, state, r = self.prof_run({"PROF_TORCH_OPS_CACHE": cache,
                                                  "CXX": "/bin/false"}, "out3")
        self.assertEqual(len([l for l in r.stderr.splitlines() if l.startswith(rebuilding)]), 1,
                         r.stderr)
        fell_back = [l for l in r.stderr.splitlines() if "PROF_TORCH_OPS=observer: " in l]
        self.assertEqual(len(fell_back), 1, r.stderr)
        self.assertIn("the observer could not be built", fell_back[0])
        self.assertTrue(fell_back[0].endswith("; operator events come from torch's profiler"),
                        fell_back[0])
        self.assertEqual(state["path"], "profiler")
        self.assertTrue(any(e["name"] == "aten::addmm" for e in op_events(trace)))

    def test_default_cache(self):
        # ~/.cache/profhost/torchops (HOME a fresh folder): built once,
        # its levels made private, then loaded without a word.
        home = os.path.join(self.tmp, "home")
        os.mkdir(home, 0o755)
        env = {"HOME": home}
        trace, summary, state, r = self.prof_run(env, "out")
        cache = os.path.join(home, ".cache", "profhost", "torchops")
        folders = os.listdir(cache)
        self.assertEqual(len(folders), 1, folders)
        self.assertIn("profhost: building the torch operator observer for torch 1.13", r.stderr)
        self.assertIn("(once; cached in %s)" % os.path.join(cache, folders[0]), r.stderr)
        self.assertNotIn(PRIVATE, r.stderr)
        self.assert_observer_recorded(trace, summary, state, r)
        for d in (os.path.join(home, ".cache"), os.path.dirname(cache), cache,
                  os.path.join(cache, folders[0])):
            self.assertEqual(os.stat(d).st_mode & 0o777, 0o700, d)
        self.assertEqual(sorted(os.listdir(os.path.join(cache, folders[0]))),
                         [LIB, LIB + ".sha256"])
        trace, summary, state, r = self.prof_run(env, "out2")
        self.assertNotIn("building the torch operator observer", r.stderr)
        self.assertNotIn(PRIVATE, r.stderr)
        self.assert_observer_recorded(trace, summary, state, r)
        self.assertFalse(os.path.exists(self.marker))


if __name__ == "__main__":
    unittest.main()

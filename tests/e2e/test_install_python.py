"""End to end: `prof install-python` (#16.5). After it, the literal
`PROF_SCRIPT=policy.lua python train.py` runs under profhost with no
LD_PRELOAD, with subprocesses profiled as under prof run; without
PROF_SCRIPT the same interpreter runs with no profhost in it and writes
nothing; `--uninstall` takes it away; bad arguments get one line.

The interpreter is a virtual environment of Debian's /usr/bin/python3
(made with --without-pip), so the machine's own site-packages are never
touched."""
import os
import re
import shutil
import subprocess
import unittest

from harness import LIB, PROF, PYTHON, SANITIZE, TempDirTest, base_env, run, window_dirs

STEPMOD = "def step():\n    sum(range(2000))\n"

PROGRAM = '''
import os, subprocess, sys
import stepmod
for i in range(12):
    stepmod.step()
maps = open("/proc/self/maps").read()
print("self", "libprofhost.so" in maps)
print("threads", sorted(open("/proc/self/task/%s/comm" % t).read().strip()
                        for t in os.listdir("/proc/self/task")))
child = subprocess.run(["cat", "/proc/self/maps"], stdout=subprocess.PIPE, text=True).stdout
print("child", "libprofhost.so" in child)
'''

POLICY = ('prof.steps { python = "stepmod:step" }\n'
          "prof.schedule { skip_first = 2, wait = 1, warmup = 1, active = 3, cycles = 1 }\n")


NO_LATE_LOAD = ("an instrumented libprofhost.so cannot be loaded into an uninstrumented "
                "interpreter after it started (no LD_PRELOAD here)")


class InstallPython(TempDirTest):

    def setUp(self):
        super().setUp()
        self.venv = os.path.join(self.tmp, "venv")
        r = run([PYTHON, "-m", "venv", "--without-pip", self.venv])
        if r.returncode != 0:
            self.skipTest("no venv module: " + r.stderr.strip()[-200:])
        self.python = os.path.join(self.venv, "bin", "python")
        self.write("stepmod.py", STEPMOD)
        self.program = self.write("program.py", PROGRAM)
        self.policy = self.write("policy.lua", POLICY)
        self.out = os.path.join(self.tmp, "out")

    def run_program(self, **extra):
        env = base_env({"PROF_OUTPUT_DIR": self.out})
        env.update(extra)
        return run([self.python, self.program], env=env, cwd=self.tmp)

    @unittest.skipIf(SANITIZE, NO_LATE_LOAD)
    def test_install_run_uninstall(self):
        r = run([PROF, "install-python", "--python", self.python])
        self.assertEqual(r.returncode, 0, r.stderr)
        pth = os.path.join(self.venv, "lib", "python%d.%d" % tuple(
            int(x) for x in re.search(r"Python (\d+)\.(\d+)", r.stdout).groups()),
            "site-packages", "profhost.pth")
        self.assertIn("wrote %s for %s" % (pth, self.python), r.stdout)
        self.assertIn("--uninstall removes it", r.stdout)
        self.assertTrue(os.path.isfile(pth))

        # PROF_SCRIPT alone: the scheduled window, profhost in this process
        # and in the program it starts.
        r = self.run_program(PROF_SCRIPT=self.policy)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("self True", r.stdout)
        self.assertIn("child True", r.stdout)
        dirs = window_dirs(self.out)
        self.assertEqual([os.path.basename(d) for d in dirs], ["window0_steps4-6"], r.stderr)

        # Without PROF_SCRIPT: no profhost, no thread of its own, nothing written.
        os.rename(self.out, self.out + ".1")
        r = self.run_program()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("self False", r.stdout)
        self.assertIn("child False", r.stdout)
        self.assertNotIn("profhost", r.stdout.split("threads", 1)[1].split("\n")[0])
        self.assertEqual(r.stderr, "")
        self.assertFalse(os.path.exists(self.out))

        # Uninstalled: PROF_SCRIPT does nothing any more.
        r = run([PROF, "install-python", "--python", self.python, "--uninstall"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "prof install-python: removed %s\n" % pth)
        self.assertFalse(os.path.exists(pth))
        r = self.run_program(PROF_SCRIPT=self.policy)
        self.assertIn("self False", r.stdout)
        self.assertFalse(os.path.exists(self.out))
        r = run([PROF, "install-python", "--python", self.python, "--uninstall"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("nothing to remove", r.stdout)

    @unittest.skipIf(SANITIZE, NO_LATE_LOAD)
    def test_under_prof_run_it_stays_out_of_the_way(self):
        # prof run preloads the library: the .pth sees it and loads nothing
        # more (one window, no second copy said).
        self.assertEqual(run([PROF, "install-python", "--python", self.python]).returncode, 0)
        r = run([PROF, "run", "-s", self.policy, "-o", self.out, "--", self.python,
                 self.program], cwd=self.tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("second copy", r.stderr)
        self.assertEqual(len(window_dirs(self.out)), 1, r.stderr)

    def test_a_library_gone_or_broken_is_said_once(self):
        # The .pth names a copy of the library (PROF_LIB), which then goes,
        # or is replaced by a file that is no library. site.py runs a
        # virtual environment's .pth files twice: still one line each time,
        # and the program runs unprofiled.
        lib = os.path.join(self.tmp, "lib", "libprofhost.so")
        os.makedirs(os.path.dirname(lib))
        shutil.copyfile(LIB, lib)
        env = base_env({"PROF_LIB": lib})
        r = run([PROF, "install-python", "--python", self.python], env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        os.unlink(lib)
        r = self.run_program(PROF_SCRIPT=self.policy)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("self False", r.stdout)
        self.assertEqual(r.stderr.splitlines(), [
            "profhost: PROF_SCRIPT is set but %s, which profhost.pth names, is gone: run "
            "prof install-python again, or prof install-python --uninstall" % lib])
        with open(lib, "w") as f:
            f.write("not a library\n")
        r = self.run_program(PROF_SCRIPT=self.policy)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("self False", r.stdout)
        lines = r.stderr.splitlines()
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertTrue(lines[0].startswith("profhost: PROF_SCRIPT is set but %s cannot be "
                                            "loaded (" % lib), r.stderr)
        self.assertFalse(os.path.exists(self.out))

    def test_bad_arguments(self):
        r = run([PROF, "install-python", "--python", os.path.join(self.tmp, "nope")])
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr.splitlines()[-1],
                         "prof install-python: cannot run '%s'" % os.path.join(self.tmp, "nope"))
        r = run([PROF, "install-python", "--pyton", "x"])
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stderr, "prof install-python: unknown argument '--pyton' (usage: "
                         "prof install-python [--python PATH] [--uninstall])\n")
        r = run([PROF, "install-python", "--python"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("--python needs a value", r.stderr)
        r = run([PROF, "install-python", "--python", "/bin/true"])
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr, "prof install-python: '/bin/true' did not say where its "
                         "site-packages are (is it a Python 3 interpreter?)\n")


if __name__ == "__main__":
    unittest.main()

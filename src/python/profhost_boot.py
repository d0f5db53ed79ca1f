"""Loads profhost into this Python process at start-up.

Run by the line `prof install-python` writes into a site-packages
directory (profhost.pth), and only when PROF_SCRIPT is set, so that
`PROF_SCRIPT=policy.lua python train.py` runs under profhost with no
LD_PRELOAD. `PROFHOST_LIB` (the host library, an absolute path) is given by
that line. What it does, in order:

- nothing the second time in a process: site.py runs a virtual
  environment's .pth files twice (its venv() and its main() each add that
  site-packages, and each runs the file's import line), so a failure would
  be said twice;
- nothing when profhost is already in the process (prof run, LD_PRELOAD, a
  parent's preload inherited by this child);
- loads the library (its constructor starts the host, which reads
  PROF_SCRIPT, PROF_DISABLE and the rest as under LD_PRELOAD);
- waits (at most 2 s, a few ms in practice) for the host's Python bridge,
  so the program's first steps are seen as under LD_PRELOAD;
- sets NVTX_INJECTION64_PATH and CUDA_INJECTION64_PATH to it before torch
  loads (left alone under Nsight Systems, as prof run does), and puts it
  first in LD_PRELOAD for the programs this one starts, so subprocesses are
  profiled as they are under prof run.

A failure is said in one line on stderr, once per process, and the program
runs unprofiled.
"""
import os
import sys


def _say(msg):
    sys.stderr.write("profhost: %s\n" % msg)


def _in_process():
    """Whether a libprofhost.so is mapped into this process already."""
    try:
        with open("/proc/self/maps") as f:
            return any(line.rstrip().endswith("/libprofhost.so") for line in f)
    except OSError:
        return False


def _first_time():
    """True the first time this file runs in this process. runpy gives each
    run fresh globals: the mark is kept on the sys module (not in the
    environment, which the program's children inherit; a child boots on its
    own)."""
    if getattr(sys, "_profhost_boot_ran", False):
        return False
    sys._profhost_boot_ran = True
    return True


def _boot(lib):
    if not _first_time() or _in_process():
        return
    if not os.path.isfile(lib):
        _say("PROF_SCRIPT is set but %s, which profhost.pth names, is gone: run "
             "prof install-python again, or prof install-python --uninstall" % lib)
        return
    import ctypes
    try:
        ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
    except OSError as e:
        _say("PROF_SCRIPT is set but %s cannot be loaded (%s): the program runs "
             "unprofiled; use prof run instead" % (lib, e))
        return
    nsys = os.environ.get("NSYS_PROFILING_SESSION_ID")
    for name in ("NVTX_INJECTION64_PATH", "CUDA_INJECTION64_PATH"):
        if not (nsys and os.environ.get(name)):
            os.environ[name] = lib
    rest = [p for p in os.environ.get("LD_PRELOAD", "").replace(" ", ":").split(":")
            if p and p != lib]
    os.environ["LD_PRELOAD"] = ":".join([lib] + rest)
    _wait_for_bridge()


def _waiter_alive():
    """Whether the host's thread that starts the bridge (profhost-py) runs."""
    for t in os.listdir("/proc/self/task"):
        try:
            with open("/proc/self/task/%s/comm" % t) as f:
                if f.read().strip() == "profhost-py":
                    return True
        except OSError:
            pass
    return False


def _wait_for_bridge():
    """Lets the bridge start before the program's first line. Under
    LD_PRELOAD the host is there before the interpreter starts and its
    bridge comes during start-up; loaded here, the host's thread asks the
    interpreter for it (a pending call) only now, and a short program could
    be over first. Pending calls run between this loop's bytecodes: wait
    until the bridge is imported, or the thread is gone and one more turn
    ran its call (PROF_PYTHON=0, PROF_DISABLE: no thread), at most 2 s."""
    import time
    deadline = time.monotonic() + 2.0
    gone = False
    while "profhost._bridge" not in sys.modules and time.monotonic() < deadline:
        if not _waiter_alive():
            if gone:
                return
            gone = True
        time.sleep(0.0005)


_boot(PROFHOST_LIB)  # noqa: F821 (given by profhost.pth)

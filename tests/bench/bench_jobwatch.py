#!/usr/bin/env python3
"""bench_jobwatch — what watching the run directory for job requests costs
one process (docs/jobs.md, docs/performance.md "Watching for job requests").

    bench_jobwatch.py BUILD [--seconds S] [--polls-ms 1000,100,10]

For each poll interval, runs one rank of tests/e2e/workloads/job_app (steps
of 20 ms that sleep) under `prof run` with prof.job{ poll_ms = P }, and
reads its profhost-job thread:
  - the CPU time it used (/proc/PID/task/TID/schedstat: ns on a CPU,
    exact), over S seconds, per look and per second;
  - the system calls it made over the same S seconds (strace -c on that
    thread only, when strace is there): per second, by name.
Then the same while requests arrive: one `prof capture` every second, to
show what a look that finds a change costs (the folder read, the request
read, the first step decided or read).
No timing is asserted; it prints numbers for docs/performance.md.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time


def find_thread(pid, name, timeout=10):
    t0 = time.time()
    while time.time() - t0 < timeout:
        for tid in os.listdir("/proc/%d/task" % pid):
            try:
                with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
                    if f.read().strip() == name:
                        return int(tid)
            except OSError:
                pass
        time.sleep(0.05)
    raise SystemExit("no thread %s in process %d" % (name, pid))


def cpu_ns(pid, tid):
    with open("/proc/%d/task/%d/schedstat" % (pid, tid)) as f:
        return int(f.read().split()[0])


def child_pid(launcher, name, timeout=10):
    """The pid of `name` started by prof run (its child)."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        r = subprocess.run(["pgrep", "-P", str(launcher.pid), "-x", name],
                           stdout=subprocess.PIPE, text=True)
        if r.stdout.split():
            return int(r.stdout.split()[0])
        time.sleep(0.05)
    raise SystemExit("no %s under prof run" % name)


def strace_counts(tid, seconds):
    """{syscall: calls} the thread made in `seconds` (strace -c), or None."""
    if not shutil.which("strace"):
        return None
    r = subprocess.run(["timeout", "-s", "INT", str(seconds), "strace", "-c", "-p", str(tid)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    counts = {}
    for line in r.stderr.splitlines():
        m = re.match(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$", line)
        if m and m.group(2) != "total":
            counts[m.group(2)] = int(m.group(1))
    return counts


def measure(build, poll_ms, seconds, requests):
    prof = os.path.join(build, "bin", "prof")
    app = os.path.join(build, "tests", "bin", "job_app")
    tmp = tempfile.mkdtemp(prefix="bench_jobwatch-")
    try:
        pol = os.path.join(tmp, "p.lua")
        with open(pol, "w") as f:
            f.write('prof.output{ run = "bench" }\nprof.job{ poll_ms = %d }\n'
                    'prof.export{ chrome = false, key_averages = false, report = false }\n'
                    % poll_ms)
        # the folder is there, unchanged, as in a run someone asked before
        os.makedirs(os.path.join(tmp, "out", "bench", "job"))
        steps = int((seconds * 2 + 6) * 1000 / 20)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PROF_")}
        p = subprocess.Popen([prof, "run", "-s", pol, "-o", os.path.join(tmp, "out"), app,
                              "--steps", str(steps), "--step-ms", "20"],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        pid = child_pid(p, "job_app")
        tid = find_thread(pid, "profhost-job")
        time.sleep(1.0)
        run_dir = os.path.join(tmp, "out", "bench")
        c0, t0 = cpu_ns(pid, tid), time.time()
        if requests:
            for _ in range(int(seconds)):
                subprocess.run([prof, "capture", run_dir, "--steps", "1", "--wait", "0"],
                               stdout=subprocess.DEVNULL)
                time.sleep(1.0)
        else:
            time.sleep(seconds)
        c1, t1 = cpu_ns(pid, tid), time.time()
        counts = None if requests else strace_counts(tid, min(seconds, 5))
        p.kill()
        p.wait()
        looks = (t1 - t0) * 1000.0 / poll_ms
        return (c1 - c0) / (t1 - t0), (c1 - c0) / looks, counts, min(seconds, 5)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--polls-ms", default="1000,100,10")
    a = ap.parse_args()
    print("job watcher: one process, its profhost-job thread (CPU from schedstat)")
    for poll in [int(x) for x in a.polls_ms.split(",")]:
        per_s, per_look, counts, cs = measure(a.build, poll, a.seconds, False)
        line = "poll_ms %5d, nothing asked: %8.1f us CPU a second, %6.2f us a look" % (
            poll, per_s / 1e3, per_look / 1e3)
        if counts is not None:
            line += "; system calls a second: " + ", ".join(
                "%s %.1f" % (k, v / cs) for k, v in sorted(counts.items()))
        print(line)
    per_s, per_look, _, _ = measure(a.build, 1000, a.seconds, True)
    print("poll_ms  1000, a request a second: %8.1f us CPU a second (each look reads "
          "the folder and one request)" % (per_s / 1e3))
    return 0


if __name__ == "__main__":
    sys.exit(main())

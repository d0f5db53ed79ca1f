"""End to end: trace.json as the tools people open it with read it
(docs/output.md, "trace.json" and "Holistic Trace Analysis").

- speedscope: its own importer (the `speedscope` npm package, driven by
  speedscope_import.mjs) reads the Trace Event Format samples of trace.json
  with the frame names of stacks.txt, and lays consecutive ProfilerStep#N
  spans side by side rather than nested.
- TensorBoard's profiler plugin: its rule for building a thread's tree
  (torch_tb_profiler/profiler/op_tree.py, build_tree_relationship, applied
  here as its code has it) keeps every step and every range: spans that
  touch do not overlap when ts + dur is added in doubles.
- Holistic Trace Analysis (which cannot be installed here: no PyPI): its
  discovery and parsing rules, applied as its code has them (HTA commit
  f4d0062c, hta/common/trace_file.py create_rank_to_trace_dict_from_dir,
  hta/common/trace_parser.py _parse_trace_dataframe_json and
  round_down_time_stamps, hta/common/trace.py _align_all_ranks), find one
  file per rank in the documented folder of a two-rank run, and the ranks
  line up in time although one ran on another "host": a time namespace
  whose CLOCK_MONOTONIC is ten days ahead. (HTA then also drops each
  rank's last step from its analysis, align_and_filter_trace's
  _filter_irrelevant_gpu_kernels: that moves no time and is left out here.
  HTA itself at that commit, run by hand on this test's folder with
  Debian's pandas, loaded both ranks and put each rank's "outer" ranges
  within 3 us of the Unix time the rank read.)
"""
import gzip
import json
import math
import os
import re
import shutil
import subprocess
import unittest

from harness import (LIB, PROF, SOURCE, TESTBIN, TempDirTest, base_env, load_trace, run,
                     step_spans, window_dirs)

STACKS_APP = os.path.join(TESTBIN, "stacks_app")
STEPS_APP = os.path.join(TESTBIN, "steps_app")
IMPORTER = os.path.join(SOURCE, "tests", "e2e", "speedscope_import.mjs")
NODE = shutil.which("node")


def speedscope_dir():
    """The installed speedscope package (scripts/install-deps.sh puts it in
    npm's global folder), or None."""
    if os.environ.get("SPEEDSCOPE_DIR"):
        return os.environ["SPEEDSCOPE_DIR"]
    npm = shutil.which("npm")
    if not npm:
        return None
    r = subprocess.run([npm, "root", "-g"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                       text=True, timeout=60)
    d = os.path.join(r.stdout.strip(), "speedscope")
    return d if r.returncode == 0 and os.path.isdir(d) else None


def speedscope_import(test, path, warnings=False):
    """What speedscope's importer read from `path` (see speedscope_import.mjs):
    its profiles, or with `warnings` {"profiles": ..., "warnings": [line,
    ...]}, what it warned about while reading."""
    pkg = speedscope_dir()
    if not NODE or not pkg:
        test.skipTest("node or the speedscope npm package is missing "
                      "(scripts/install-deps.sh installs both)")
    r = run([NODE, IMPORTER, pkg, path], timeout=120)
    test.assertEqual(r.returncode, 0, r.stderr)
    read = json.loads(r.stdout)
    return read if warnings else read["profiles"]


def read_folded(path):
    """{thread: {stack (frames after the thread, ';'-joined): count}}."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            stack, count = line.rstrip("\n").rsplit(" ", 1)
            thread, frames = stack.split(";", 1)
            out.setdefault(thread, {})[frames] = int(count)
    return out


def tb_tree_errors(events):
    """TensorBoard's build_tree_relationship on one thread's complete events
    (op_tree.py): sorted by (start, -end) with end = ts + dur in doubles,
    each pushed under the innermost open node that it starts inside of;
    one that starts inside a node but ends after it is "Error in input
    data: ranges on the same thread should not intersect" and dropped.
    Returns (the dropped events, the events directly under the root)."""
    nodes = sorted(({"e": e, "start": e["ts"], "end": e["ts"] + e["dur"]} for e in events),
                   key=lambda n: (n["start"], -n["end"]))
    root = {"start": -math.inf, "end": math.inf, "children": []}
    stack, dropped = [root], []
    for n in nodes:
        n["children"] = []
        while True:
            tail = stack[-1]
            if n["start"] < tail["end"]:
                if n["end"] <= tail["end"]:
                    tail["children"].append(n)
                    stack.append(n)
                else:
                    dropped.append(n["e"])
                break
            stack.pop()
    return dropped, [c["e"] for c in root["children"]]


# ------------------------------------------------------------ HTA's rules

HTA_RANK = re.compile(r'"rank":\s+(\d+)')  # trace_file.py


def hta_rank_files(folder):
    """create_rank_to_trace_dict_from_dir: the folder's files ending in .gz
    or .json (not its subfolders); each one's rank from the first line that
    matches '"rank":\\s+(\\d+)' (0 when none); a later file of the same rank
    replaces the earlier. Returns ({rank: path}, [replaced paths])."""
    files = [f for f in os.listdir(folder) if f.endswith(".gz") or f.endswith(".json")]
    ranks, replaced = {}, []
    for f in sorted(files):
        path = os.path.join(folder, f)
        with (gzip.open(path, "rb") if path.endswith("gz") else open(path, "r")) as fh:
            data = ""
            for line in fh:
                data = line.decode() if isinstance(line, bytes) else line
                if HTA_RANK.search(data):
                    break
            m = HTA_RANK.search(data)
        rank = int(m.group(1)) if m else 0
        if rank in ranks:
            replaced.append(ranks[rank])
        ranks[rank] = path
    return ranks, replaced


def hta_parse(path):
    """_parse_trace_dataframe_json: (metadata = every top-level key but
    traceEvents, the events), then round_down_time_stamps (float ts: ts
    rounded up and end = ts + dur rounded down, to whole µs) and
    _compress_df's first rules (events without dur or cat are dropped, and
    those of cat "Trace")."""
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as fh:
        trace = json.loads(fh.read())
    meta = {k: v for k, v in trace.items() if k != "traceEvents"}
    events = []
    for e in trace["traceEvents"]:
        if e.get("dur") is None or e.get("cat") is None or e.get("cat") == "Trace":
            continue
        e = dict(e)
        end = e["ts"] + e["dur"]
        e["ts"] = math.ceil(e["ts"])
        e["dur"] = math.floor(end) - e["ts"]
        events.append(e)
    return meta, events


def hta_align(traces):
    """_align_all_ranks: every rank's ts minus the smallest ts of all ranks.
    Returns that smallest ts."""
    min_ts = min(min(e["ts"] for e in evs) for _, evs in traces.values() if evs)
    for _, evs in traces.values():
        for e in evs:
            e["ts"] -= min_ts
    return min_ts


def time_namespace_works():
    r = subprocess.run(["unshare", "--time", "--monotonic", "864000", "true"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return r.returncode == 0, r.stderr.strip()


class Readers(TempDirTest):
    def profile(self, policy, cmd):
        p = self.write("policy.lua", policy)
        out = os.path.join(self.tmp, "out")
        r = run([PROF, "run", "-s", p, "-o", out, "--"] + cmd)
        self.assertEqual(r.returncode, 0, r.stderr)
        dirs = window_dirs(out)
        self.assertEqual(len(dirs), 1, r.stderr)
        return dirs[0]

    def test_speedscope_reads_the_samples_with_the_names_of_stacks_txt(self):
        wdir = self.profile(
            "prof.schedule { skip_first = 1, active = 10, cycles = 1 }\n"
            'prof.capture { cpu_samples = { hz = 499, clock = "wall" } }\n',
            [STACKS_APP, "--steps", "14", "--late", "3", "--brief", "4", "--deep", "20"])
        folded = read_folded(os.path.join(wdir, "stacks.txt"))
        profiles = speedscope_import(self, os.path.join(wdir, "trace.json"))
        seen = {}
        for p in profiles:
            # "<program> (pid P), <thread> (tid T)": speedscope names a
            # profile after the trace's process_name and thread_name
            m = re.match(r"^stacks_app \(pid \d+\), (.*) \(tid \d+\)$", p["name"])
            self.assertTrue(m, p["name"])
            stacks = {";".join(s["frames"]) for s in p["samples"] if s["weight"] > 0}
            seen[m.group(1)] = stacks
        self.assertGreaterEqual(set(seen), {"stacks_app", "burner", "sleeper", "deep"})
        for thread, stacks in folded.items():
            got = seen.get(thread, set())
            # everything speedscope shows is a line of stacks.txt ...
            self.assertLessEqual(got, set(stacks), thread)
            # ... and every stack sampled twice or more is shown (speedscope
            # drops a thread's last sample: it has no time to the next one)
            self.assertLessEqual({s for s, n in stacks.items() if n >= 2}, got, thread)
        self.assertTrue(any("recurse;recurse;recurse" in s for s in seen["deep"]))
        # Perfetto's reading is unchanged: one cpu_sample instant per sample
        trace = load_trace(wdir)
        instants = [e for e in trace["traceEvents"] if e.get("cat") == "cpu_sample"]
        self.assertEqual(len(instants), len(trace["samples"]))
        self.assertEqual(len(instants), sum(sum(s.values()) for s in folded.values()))

    def test_touching_steps_never_overlap_for_the_readers(self):
        wdir = self.profile("prof.schedule { wait = 1, active = 120, cycles = 1 }\n",
                            [STEPS_APP, "--steps", "125", "--sleep-us", "100", "--ranges", "2"])
        trace = load_trace(wdir)
        steps = step_spans(trace)
        self.assertEqual(len(steps), 120)
        # consecutive steps touch: in doubles, one ends exactly where the
        # next begins (ts + dur <= next ts, never past it)
        for (n, a), (_, b) in zip(steps, steps[1:]):
            self.assertLessEqual(a["ts"] + a["dur"], b["ts"], n)
            self.assertEqual(a["ts"] + a["dur"], b["ts"], n)
        tid = steps[0][1]["tid"]
        mine = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("tid") == tid
                and e.get("cat") == "user_annotation"]
        # TensorBoard's tree keeps all of them, each step at the top
        dropped, top = tb_tree_errors(mine)
        self.assertEqual(dropped, [])
        self.assertEqual(sorted(e["name"] for e in top),
                         sorted(s["name"] for _, s in steps))
        # speedscope (no samples here: it reads the ranges) puts every step
        # at the top of the main thread's call tree, not in a staircase
        profiles = speedscope_import(self, os.path.join(wdir, "trace.json"))
        main = [p for p in profiles if p["name"].endswith("(tid %d)" % tid)]
        self.assertEqual(len(main), 1, [p["name"] for p in profiles])
        self.assertEqual(sorted(r for r in main[0]["roots"] if r.startswith("ProfilerStep#")),
                         sorted(s["name"] for _, s in steps))

    def test_hta_loads_a_two_rank_run_on_two_hosts(self):
        ok, why = time_namespace_works()
        if not ok:
            self.skipTest("no time namespace here (unshare --time: %s): cannot run a rank "
                          "with another host's CLOCK_MONOTONIC" % why)
        policy = self.write("policy.lua", "prof.schedule { wait = 2, active = 4, cycles = 1 }\n"
                                          "prof.export { tensorboard = true }\n")
        out = os.path.join(self.tmp, "out")
        procs = []
        for rank in (0, 1):
            env = base_env({"PROF_SCRIPT": policy, "PROF_OUTPUT_DIR": out,
                            "PROF_RUN_ID": "hta-run", "RANK": str(rank), "WORLD_SIZE": "2"})
            cmd = ["env", "LD_PRELOAD=" + LIB, STEPS_APP, "--steps", "8", "--sleep-us",
                   "3000", "--wall"]
            if rank == 1:  # another "host": booted ten days earlier
                cmd = ["unshare", "--time", "--monotonic", "864000", "--"] + cmd
            procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
        wall = {}
        for rank, p in enumerate(procs):
            stdout, stderr = p.communicate(timeout=120)
            self.assertEqual(p.returncode, 0, stderr)
            wall[rank] = {int(s): (int(a), int(b)) for s, a, b in
                          re.findall(r"^outer (\d+) (\d+) (\d+)$", stdout, re.M)}
        # the documented folder: <run>/tensorboard/window<K>_steps<a>-<b>/
        folders = os.listdir(os.path.join(out, "hta-run", "tensorboard"))
        self.assertEqual(folders, ["window0_steps2-5"])
        folder = os.path.join(out, "hta-run", "tensorboard", folders[0])
        files, replaced = hta_rank_files(folder)
        self.assertEqual(sorted(files), [0, 1])
        self.assertEqual(replaced, [])
        traces = {r: hta_parse(f) for r, f in files.items()}
        for r, (meta, events) in traces.items():
            self.assertEqual(meta["distributedInfo"]["rank"], r)
            self.assertTrue(any(e["name"].startswith("ProfilerStep#") for e in events))
        min_ts = hta_align(traces)
        # Steps 2-5 of both ranks: where HTA puts each rank's "outer" range
        # agrees with the Unix time the rank itself read around its push,
        # and so the ranks line up with each other.
        bases = {r: meta["baseTimeNanoseconds"] for r, (meta, _) in traces.items()}
        self.assertEqual(bases[0], bases[1])
        outer = {r: sorted(e["ts"] for e in evs if e["name"] == "outer")
                 for r, (_, evs) in traces.items()}
        for r in (0, 1):
            self.assertEqual(len(outer[r]), 4)
        for k, step in enumerate(range(2, 6)):
            for r in (0, 1):
                a, b = wall[r][step]
                # HTA's own conversion (trace_event_timestamp_to_unixtime_ns);
                # its ts were rounded up to whole µs, and the clock profhost
                # reads stays within microseconds of CLOCK_MONOTONIC
                unix = int((outer[r][k] + min_ts) * 1e3) + bases[r]
                self.assertGreaterEqual(unix, a - 50000, (r, step))
                self.assertLessEqual(unix, b + 1000 + 50000, (r, step))
            (a0, b0), (a1, b1) = wall[0][step], wall[1][step]
            gap = (outer[1][k] - outer[0][k]) * 1e3
            self.assertGreaterEqual(gap, a1 - b0 - 1000 - 100000, step)
            self.assertLessEqual(gap, b1 - a0 + 1000 + 100000, step)


if __name__ == "__main__":
    unittest.main(verbosity=2)

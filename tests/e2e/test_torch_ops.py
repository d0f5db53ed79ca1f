"""End to end: torch operators under profhost (src/torchops/observer.cpp,
src/capture/torchops.c, src/python/profhost/_ops.py).

One deterministic CPU training loop, run once under torch.profiler (CPU,
record_shapes, with_flops) and once under profhost with the same schedule:
the same operators with the same call counts, aten::addmm's input shapes
and FLOPs as torch has them, backward functions linked to their forward
operators by sequence number, and no observer left in torch after the
last window. Each operator path the bridge can fall back to is forced with
PROF_TORCH_OPS and checked by its summary line and its events.

Needs torch in /usr/bin/python3 (Debian's python3-torch); skipped without.
"""
import json
import math
import os
import re
import subprocess
import unittest

from harness import (NEEDS_TORCH, PROF, PYTHON, SOURCE, TempDirTest, base_env, load_trace, run,
                     window_dirs)
from test_formats import tb_tree_errors

WORKLOAD = os.path.join(SOURCE, "tests", "e2e", "workloads", "python", "torch_ops_train.py")
LABELS = os.path.join(SOURCE, "tests", "e2e", "workloads", "python", "torch_ops_labels.py")
LATE = os.path.join(SOURCE, "tests", "e2e", "workloads", "python", "torch_ops_late.py")
PHASE_LABELS = os.path.join(SOURCE, "tests", "e2e", "workloads", "python",
                            "torch_ops_phase_labels.py")
STEPS = 10
POLICY = ("prof.schedule { skip_first = 3, wait = 1, warmup = 1, active = 3, cycles = 1 }\n"
          "prof.capture { record_shapes = true, with_flops = true, peak_tflops = 0.5 }\n")
PHASES = ("data", "forward", "backward", "optimizer")





def _has_gloo():
    try:
        return subprocess.run([PYTHON, "-c", "import torch.distributed as d; "
                               "assert d.is_available() and d.is_gloo_available()"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def op_events(trace):
    """The window's operator and label events (cpu_op, user_annotation),
    without profhost's steps and phases."""
    return [e for e in trace["traceEvents"]
            if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")
            and not e["name"].startswith("ProfilerStep#") and e["name"] not in PHASES]


def torch_view(events):
    """The events as torch's EventList counts them: an event that is the
    only child of a parent of the same name is dropped (torch's
    _remove_dup_nodes; aten::div_ calls aten::div_)."""
    by_tid = {}
    for e in events:
        by_tid.setdefault(e["tid"], []).append(e)
    keep = []
    for evs in by_tid.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        children = {id(e): [] for e in evs}
        parent = {}
        stack = []
        for e in evs:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] < e["ts"] + e["dur"] - 0.001:
                stack.pop()
            if stack:
                parent[id(e)] = stack[-1]
                children[id(stack[-1])].append(e)
            stack.append(e)
        for e in evs:
            p = parent.get(id(e))
            if p is not None and p["name"] == e["name"] and len(children[id(p)]) == 1:
                continue
            keep.append(e)
    return keep


def counts(events):
    out = {}
    for e in events:
        out[e["name"]] = out.get(e["name"], 0) + 1
    return out


@NEEDS_TORCH
class TorchOps(TempDirTest):
    def prof_run(self, extra_env=None, policy=POLICY, out="out"):
        path = self.write("policy.lua", policy)
        out = os.path.join(self.tmp, out)
        env = base_env(extra_env)
        r = run([PROF, "run", "-s", path, "-o", out, "--", PYTHON, WORKLOAD, str(STEPS),
                 "plain"], env=env, timeout=600, cwd=self.tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        dirs = window_dirs(out)
        self.assertEqual([os.path.basename(d) for d in dirs], ["window0_steps5-7"], r.stderr)
        with open(os.path.join(dirs[0], "summary.txt")) as f:
            summary = f.read()
        with open(os.path.join(dirs[0], "key_averages.txt")) as f:
            table = f.read()
        state = json.loads(r.stdout.strip().splitlines()[-1])
        return load_trace(dirs[0]), summary, table, state, r

    def torch_run(self):
        out = os.path.join(self.tmp, "torch.json")
        r = run([PYTHON, WORKLOAD, str(STEPS), "torch", out], timeout=600, cwd=self.tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out) as f:
            return json.load(f)

    def check_same_operators(self, trace, ref):
        """Call counts per name as torch's profiler has them, but for the
        events torch.profiler's own step labels make."""
        want = dict(ref["counts"])
        for name, n in ref["own"].items():
            want[name] = want.get(name, 0) - n
        want = {k: v for k, v in want.items() if v}
        raw = counts(op_events(trace))
        folded = counts(torch_view(op_events(trace)))
        self.assertEqual(set(raw), set(want))
        for name in raw:
            if raw[name] == folded[name]:
                self.assertEqual(raw[name], want[name], name)
            else:
                # torch folds the same-named only child by its events' us
                # times: a tie can keep one (aten::div_ in aten::div_)
                self.assertGreaterEqual(want[name], folded[name], name)
                self.assertLessEqual(want[name], raw[name], name)

    def test_observer_matches_torch_profiler(self):
        trace, summary, table, state, r = self.prof_run()
        ref = self.torch_run()
        self.assertIn("operator events: profhost's RecordFunction observer (torch 1.13", summary)
        self.assertEqual(r.stderr.count("RecordFunction observer"), 1, r.stderr)  # said once
        self.check_same_operators(trace, ref)
        events = op_events(trace)
        # aten::addmm: the input shapes, each call's, as torch records them
        addmm = [e for e in events if e["name"] == "aten::addmm"]
        self.assertEqual(sorted(json.dumps(e["args"]["Input Dims"]) for e in addmm),
                         ref["addmm_shapes"])
        for e in addmm:
            self.assertEqual(e["cat"], "cpu_op")
            self.assertEqual(e["args"]["Input type"][:3], ["float", "float", "float"])
            self.assertIsInstance(e["args"]["External id"], int)
        # FLOPs: torch's formulas, torch's totals
        for name, flops in ref["flops"].items():
            self.assertEqual(sum(e["args"].get("flops", 0) for e in events
                                 if e["name"] == name), flops, name)
        # key_averages.txt: torch's "Total <unit>FLOPs" column, scaled as
        # torch scales it (by the smallest total), aten::addmm's as torch's
        smallest = min(ref["flops"].values())
        k = int(max(0, min(math.log10(smallest) / 3, 5)))
        unit = ["FLOPs", "KFLOPs", "MFLOPs", "GFLOPs", "TFLOPs", "PFLOPs"][k]
        lines = table.splitlines()
        self.assertTrue(lines[1].rstrip().endswith("Total " + unit), lines[1])
        row = [l for l in lines if l.split()[:1] == ["aten::addmm"]][0]
        self.assertEqual(row.split()[-1], "%.3f" % (ref["flops"]["aten::addmm"] * 10 ** (-3 * k)))
        row = [l for l in lines if l.split()[:1] == ["aten::relu"]][0]
        self.assertEqual(row.split()[-1], "--")  # no formula
        # The summary: FLOP/s per step, the share of the policy's peak
        self.assertIn("FLOPs (torch operators, torch's formulas)", summary)
        self.assertIn("peak 0.5 TFLOP/s", summary)
        per_step = sum(ref["flops"].values()) / 3 / 1e9
        for n in (5, 6, 7):
            m = re.search(r"\n +%d +([0-9.]+) +([0-9.]+) +([0-9.]+)%%\n" % n, summary)
            self.assertIsNotNone(m, summary)
            self.assertAlmostEqual(float(m.group(1)), per_step, places=6)
            self.assertAlmostEqual(float(m.group(3)), float(m.group(2)) / 500 * 100, delta=0.002)
        # Backward functions carry their forward operator's sequence number
        # and thread (torch's id of it); forward operators Fwd thread id 0.
        fwd = {e["args"]["Sequence number"]: e for e in events
               if e["cat"] == "cpu_op" and e["args"].get("Fwd thread id") == 0
               and "Sequence number" in e["args"]}
        bwd = [e for e in events if e["name"].endswith("Backward0") and
               not e["name"].startswith("autograd::engine::evaluate_function: ")]
        self.assertEqual(len(bwd), len(ref["backward_seq"]))
        self.assertEqual(len(bwd), 3 * 11)  # each step: 11 backward functions
        for e in bwd:
            self.assertNotEqual(e["args"]["Fwd thread id"], 0, e)
            self.assertIn(e["args"]["Sequence number"], fwd, e)
        # TensorBoard's plugin builds one tree per thread: nothing of the
        # window's complete events is dropped as intersecting
        by_tid = {}
        for e in trace["traceEvents"]:
            if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation"):
                by_tid.setdefault(e["tid"], []).append(e)
        for tid, evs in by_tid.items():
            self.assertEqual(tb_tree_errors(evs)[0], [], tid)
        # record_function labels are user_annotation, as in Kineto's traces
        self.assertEqual({e["cat"] for e in events if e["name"].startswith("Optimizer.")},
                         {"user_annotation"})
        # After the last window: no observer left in torch.
        self.assertEqual(state, {"path": "observer", "installed": 0,
                                 "torch_callbacks": False, "profiler_enabled": False})

    def test_profiler_fallback(self):
        trace, summary, table, state, r = self.prof_run({"PROF_TORCH_OPS": "profiler"})
        ref = self.torch_run()
        self.assertIn("operator events: torch's profiler around each window", summary)
        self.check_same_operators(trace, ref)
        events = op_events(trace)
        addmm = [e for e in events if e["name"] == "aten::addmm"]
        self.assertEqual(sorted(json.dumps(e["args"]["Input Dims"]) for e in addmm),
                         ref["addmm_shapes"])
        self.assertEqual(sum(e["args"]["flops"] for e in addmm), ref["flops"]["aten::addmm"])
        # every operator lies inside the window's steps
        steps = [e for e in trace["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")]
        lo = min(e["ts"] for e in steps)
        hi = max(e["ts"] + e["dur"] for e in steps)
        for e in events:
            self.assertTrue(lo <= e["ts"] and e["ts"] + e["dur"] <= hi + 0.001, e)
        self.assertEqual(state, {"path": "profiler", "installed": None,
                                 "torch_callbacks": None, "profiler_enabled": False})

    def test_nvtx_forced_on_cpu_torch(self):
        trace, summary, table, state, r = self.prof_run({"PROF_TORCH_OPS": "nvtx"})
        self.assertIn("PROF_TORCH_OPS=nvtx: this torch has no CUDA, so no emit_nvtx; "
                      "operator events come from torch's profiler", r.stderr)
        self.assertEqual(state["path"], "profiler")
        self.assertTrue(any(e["name"] == "aten::addmm" for e in op_events(trace)))

    def test_first_use_build(self):
        # Without the build's observer: PROF_TORCH_OPS=observer builds it
        # against the imported torch, once, into the cache (kept in the
        # build tree, so a build of profhost compiles it once); a second
        # run loads it from there without a word.
        cache = os.path.join(os.environ.get("PROFHOST_BUILD", self.tmp), "torchops-cache")
        env = {"PROF_TORCH_OPS": "observer", "PROF_TORCH_OPS_PREBUILT": "0",
               "PROF_TORCH_OPS_CACHE": cache}
        trace, summary, table, state, r = self.prof_run(env)
        self.assertIn("operator events: profhost's RecordFunction observer", summary)
        self.assertEqual(state["path"], "observer")
        self.assertEqual(state["installed"], 0)
        # one folder per torch and observer source (an older source's stays)
        built = [d for d in os.listdir(cache) if d.startswith("torch-")]
        self.assertTrue(any(os.path.exists(os.path.join(cache, d, "profhost_torchops.so"))
                            for d in built), built)
        self.assertTrue(any(e["name"] == "aten::addmm" for e in op_events(trace)))
        trace, summary, table, state, r = self.prof_run(env, out="out2")
        self.assertNotIn("building the torch operator observer", r.stderr)
        self.assertEqual(state["path"], "observer")

    def test_off(self):
        trace, summary, table, state, r = self.prof_run({"PROF_TORCH_OPS": "off"})
        self.assertIn("operator events: off (PROF_TORCH_OPS=off)", summary)
        self.assertEqual([e for e in op_events(trace) if e["cat"] == "cpu_op"], [])
        self.assertEqual(state["path"], "off")

    def test_bad_value(self):
        trace, summary, table, state, r = self.prof_run({"PROF_TORCH_OPS": "kineto"})
        self.assertIn("PROF_TORCH_OPS=kineto is not one of observer, nvtx, profiler, off",
                      r.stderr)
        self.assertEqual(state["path"], "observer")

    def check_phase_labels_counted_once(self, extra_env=None):
        """A program that labels phases itself (record_function "forward",
        a C range "backward"; #26.4): each label is one row of one call per
        step in key_averages.txt, as under torch.profiler, not two
        (profhost's own phase range of that name gives way), no share above
        100 %, and the step phases are the program's ranges; the phase it
        does not label (optimizer) stays profhost's."""
        policy = "prof.schedule { skip_first = 3, wait = 1, warmup = 1, active = 3, cycles = 1 }\n"
        path = self.write("policy.lua", policy)
        out = os.path.join(self.tmp, "out")
        r = run([PROF, "run", "-s", path, "-o", out, "--", PYTHON, PHASE_LABELS, str(STEPS)],
                env=base_env(extra_env), timeout=600, cwd=self.tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("done", r.stdout)
        dirs = window_dirs(out)
        self.assertEqual([os.path.basename(d) for d in dirs], ["window0_steps5-7"], r.stderr)
        trace = load_trace(dirs[0])
        with open(os.path.join(dirs[0], "key_averages.txt")) as f:
            table = f.read()
        with open(os.path.join(dirs[0], "summary.txt")) as f:
            summary = f.read()
        for name in ("forward", "backward", "optimizer"):
            ranges = [e for e in trace["traceEvents"]
                      if e.get("ph") == "X" and e.get("name") == name and
                      e.get("cat") == "user_annotation"]
            self.assertEqual(len(ranges), 3, name)
            row = re.search(r"\n +%s +\S+ +\S+ +\S+ +\S+ +\S+ +(\d+)  \n" % name, table)
            self.assertIsNotNone(row, (name, table))
            self.assertEqual(row.group(1), "3", (name, table))
        # the three forward ranges are the program's labels (External id), not
        # profhost's own phase ranges
        labels = {e["args"]["External id"] for e in trace["traceEvents"]
                  if e.get("name") == "forward" and "External id" in e.get("args", {})}
        self.assertEqual(len(labels), 3)
        for pct in re.findall(r"(\d+\.\d+)%", table):
            self.assertLessEqual(float(pct), 100.0, table)
        m = re.search(r"\n +share +100\.0% +(\S+)% +(\S+)% +(\S+)% +(\S+)% +(\S+)%", summary)
        self.assertIsNotNone(m, summary)
        self.assertGreater(float(m.group(2)), 0.0)  # forward: the label
        self.assertGreater(float(m.group(3)), 0.0)  # backward: the C range
        self.assertGreater(float(m.group(4)), 0.0)  # optimizer: profhost's own
        # five shares, each rounded to 0.1 %
        self.assertLessEqual(sum(float(g) for g in m.groups()), 100.0 + 5 * 0.05 + 1e-9)

    def test_phase_labels_counted_once(self):
        self.check_phase_labels_counted_once()

    def test_phase_labels_counted_once_profiler_fallback(self):
        # torch's profiler's labels come after the window's assembly
        self.check_phase_labels_counted_once({"PROF_TORCH_OPS": "profiler"})

    def test_labels_that_do_not_nest(self):
        # A record_function label ended on another thread (a future) and
        # one closed inside a label that began after it: the observer keeps
        # operators on a per-thread stack, labels apart, so each is one
        # event per recorded step and no operator is lost around them.
        path = self.write("policy.lua", POLICY)
        out = os.path.join(self.tmp, "out")
        r = run([PROF, "run", "-s", path, "-o", out, "--", PYTHON, LABELS, str(STEPS)],
                env=base_env({"PROF_TORCH_OPS": "observer"}), timeout=600, cwd=self.tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        dirs = window_dirs(out)
        self.assertEqual([os.path.basename(d) for d in dirs], ["window0_steps5-7"], r.stderr)
        evs = op_events(load_trace(dirs[0]))
        got = counts(evs)
        for label in ("async_label", "gen_label", "inner_label"):
            self.assertEqual(got.get(label), 3, (label, got))
            self.assertEqual({e["cat"] for e in evs if e["name"] == label},
                             {"user_annotation"})
        self.assertEqual(got.get("aten::mul"), 9, got)
        self.assertEqual(got.get("aten::matmul"), 3, got)
        main_tid = next(e["tid"] for e in evs if e["name"] == "aten::matmul")
        # the future's label ends (and is written) on the thread that completed it
        self.assertTrue(all(e["tid"] != main_tid for e in evs if e["name"] == "async_label"),
                        [e for e in evs if e["name"] == "async_label"])
        # gen_label began before inner_label and ended inside it
        gen = sorted((e for e in evs if e["name"] == "gen_label"), key=lambda e: e["ts"])
        inner = sorted((e for e in evs if e["name"] == "inner_label"), key=lambda e: e["ts"])
        for a, b in zip(gen, inner):
            self.assertLess(a["ts"], b["ts"])
            self.assertLess(a["ts"] + a["dur"], b["ts"] + b["dur"])

    def window_of(self, policy, cmd, env=None, out="out"):
        """Runs cmd under prof run; the one window's directory and trace."""
        path = self.write("policy.lua", policy)
        out = os.path.join(self.tmp, out)
        r = run([PROF, "run", "-s", path, "-o", out, "--"] + cmd,
                env=base_env(env or {"PROF_TORCH_OPS": "observer"}), timeout=600, cwd=self.tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        dirs = window_dirs(out)
        self.assertEqual([os.path.basename(d) for d in dirs], ["window0_steps5-7"], r.stderr)
        return dirs[0], load_trace(dirs[0])

    def test_labels_that_end_after_their_window(self):
        # An operator belongs to the window its start fell in (#25): a
        # label begun before each step's boundary and ended just after it,
        # on another thread (as c10d ends gloo:all_reduce), is in the
        # window for each of its 3 steps, the last one ending after the
        # window closed. A label still open 1 s after the window closed is
        # left out, and the summary says so.
        d, trace = self.window_of(POLICY, [PYTHON, LATE, str(STEPS), "7"])
        evs = op_events(trace)
        late = sorted((e for e in evs if e["name"] == "late_label"), key=lambda e: e["ts"])
        steps = sorted((e for e in trace["traceEvents"] if e.get("ph") == "X" and
                        e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"])
        self.assertEqual([s["name"] for s in steps],
                         ["ProfilerStep#5", "ProfilerStep#6", "ProfilerStep#7"])
        self.assertEqual(len(late), 3, late)
        for e, s in zip(late, steps):
            self.assertEqual(e["cat"], "user_annotation")
            self.assertGreaterEqual(e["ts"], s["ts"])
            self.assertLess(e["ts"], s["ts"] + s["dur"])
        # each ends after its step: the last one after the window closed
        for e, s in zip(late, steps):
            self.assertGreater(e["ts"] + e["dur"], s["ts"] + s["dur"], (e, s))
        main_tid = next(e["tid"] for e in evs if e["name"] == "aten::matmul")
        self.assertTrue(all(e["tid"] != main_tid for e in late), late)
        self.assertNotIn("open_label", counts(evs))
        with open(os.path.join(d, "summary.txt")) as f:
            summary = f.read()
        self.assertIn("1 record_function label begun in this window had not ended 1000 ms "
                      "after it closed: left out", summary)

    @unittest.skipUnless(_has_gloo(), "torch.distributed with gloo is not available")
    def test_collective_that_ends_after_its_window(self):
        # Two gloo ranks (started with MASTER_ADDR/RANK/WORLD_SIZE: torchrun
        # fails on Python 3.11). In the window's last step rank 0 starts an
        # all-reduce (async_op) that rank 1 joins only once rank 0's window
        # has closed: gloo begins its gloo:all_reduce label on its worker
        # thread in the window and ends it there after the window closed.
        # It is in rank 0's window (the rule: where its start fell), once.
        import socket
        prog = self.write("late_ddp.py", (
            "import sys, time\n"
            "import torch, torch.distributed as dist\n"
            "torch.set_num_threads(1)\n"
            "dist.init_process_group('gloo')\n"
            "rank = dist.get_rank()\n"
            "store = dist.distributed_c10d._get_default_store()\n"
            "w = torch.nn.Parameter(torch.randn(4, 4))\n"
            "opt = torch.optim.SGD([w], lr=0.01)\n"
            "x = torch.randn(2, 4)\n"
            "for i in range(int(sys.argv[1])):\n"
            "    opt.zero_grad()\n"
            "    (x @ w).sum().backward()\n"
            "    work = None\n"
            "    if i == 7 and rank == 0:\n"
            "        work = dist.all_reduce(torch.ones(8), async_op=True)\n"
            "        time.sleep(0.2)  # gloo's thread has begun it\n"
            "    elif i == 7:\n"
            "        store.wait(['closed'])\n"
            "        dist.all_reduce(torch.ones(8))\n"
            "    opt.step()  # the step boundary: after step 7, rank 0's window closes\n"
            "    if work is not None:\n"
            "        store.set('closed', '1')\n"
            "        work.wait()\n"
            "dist.destroy_process_group()\n"))
        policy = self.write("policy.lua", POLICY)
        out = os.path.join(self.tmp, "out")
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        procs = []
        for rank in (0, 1):
            env = base_env({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                            "RANK": str(rank), "WORLD_SIZE": "2",
                            "PROF_TORCH_OPS": "observer"})
            procs.append(subprocess.Popen(
                [PROF, "run", "-s", policy, "-o", out, "--set", "output.run=late", "--",
                 PYTHON, prog, str(STEPS)], env=env, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True, cwd=self.tmp))
        for p in procs:
            _, err = p.communicate(timeout=300)
            self.assertEqual(p.returncode, 0, err)
        for rank in (0, 1):
            d = os.path.join(out, "late", "rank%d" % rank, "window0_steps5-7")
            trace = load_trace(d)
            steps = sorted((e for e in trace["traceEvents"] if e.get("ph") == "X" and
                            e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"])
            last = steps[-1]
            gloo = [e for e in op_events(trace) if e["name"] == "gloo:all_reduce"]
            self.assertEqual(len(gloo), 1, (rank, gloo))
            self.assertGreaterEqual(gloo[0]["ts"], last["ts"])
            self.assertLess(gloo[0]["ts"], last["ts"] + last["dur"])
            if rank == 0:
                self.assertGreater(gloo[0]["ts"] + gloo[0]["dur"], last["ts"] + last["dur"])


if __name__ == "__main__":
    unittest.main()

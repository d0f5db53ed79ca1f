"""End to end: torch's tensor allocations under prof.capture{profile_memory}
(src/torchops/observer.cpp's memory reporter, src/capture/torchops.c,
key_averages.txt's memory columns, the flight recorder and salvage).

One deterministic CPU loop, run under torch.profiler (profile_memory,
record_shapes) and under profhost with the matching options and schedule:
the operators that only allocate their output have torch's Self CPU Mem;
the [memory] events read as TensorBoard's plugin reads them; torch's own
profiler started beside profhost's on the same thread works and gets the
thread's allocations while it runs; a loop that keeps one more tensor each
step and is SIGKILLed leaves a salvage that shows the growth and the
operator that allocated it.

Needs torch in /usr/bin/python3 (Debian's python3-torch); skipped without.
"""
import glob
import json
import os
import unittest

from harness import PROF, PYTHON, SOURCE, TempDirTest, base_env, load_trace, run, window_dirs
from test_torch_ops import NEEDS_TORCH

WORKLOAD = os.path.join(SOURCE, "tests", "e2e", "workloads", "python", "torch_memory.py")
STEPS = 10
POLICY = ("prof.schedule { skip_first = 3, wait = 1, warmup = 1, active = 3, cycles = 1 }\n"
          "prof.capture { record_shapes = true, profile_memory = true }\n")
ONLY_ALLOCATE = ("aten::clamp_min", "aten::_log_softmax")


def table_rows(text):
    """key_averages.txt as {name: {column header: cell}}, the cells cut at
    the columns the dashed line marks (they are right-aligned)."""
    lines = text.splitlines()
    spans, pos = [], 0
    for dashes in lines[0].split("  "):
        if dashes:
            spans.append((pos, pos + len(dashes)))
        pos += len(dashes) + 2
    cut = lambda line: [line[a:b].strip() for a, b in spans]
    headers = cut(lines[1])
    rows = {}
    for line in lines[3:]:
        if line.startswith("---"):
            break
        cells = cut(line)
        rows[cells[0]] = dict(zip(headers, cells))
    return headers, rows


def torch_format_memory(nbytes):
    """torch's _format_memory (torch/autograd/profiler_util.py)."""
    kb, mb, gb = 1024, 1024 * 1024, 1024 * 1024 * 1024
    if abs(nbytes) >= gb:
        return "{:.2f} Gb".format(nbytes * 1.0 / gb)
    if abs(nbytes) >= mb:
        return "{:.2f} Mb".format(nbytes * 1.0 / mb)
    if abs(nbytes) >= kb:
        return "{:.2f} Kb".format(nbytes * 1.0 / kb)
    return str(nbytes) + " b"


def memory_events(trace):
    return [e for e in trace["traceEvents"] if e.get("name") == "[memory]"]


def op_bytes(trace, name):
    """The bytes of the [memory] events inside `name`'s operator events,
    on their thread (the operators of this loop have no children that
    allocate)."""
    total = 0
    mem = memory_events(trace)
    for op in trace["traceEvents"]:
        if op.get("ph") != "X" or op.get("name") != name:
            continue
        for m in mem:
            if m["tid"] == op["tid"] and op["ts"] <= m["ts"] < op["ts"] + op["dur"]:
                total += m["args"]["Bytes"]
    return total


def tb_memory(trace):
    """TensorBoard's plugin (torch-tb-profiler 0.4.3) reading a trace's
    memory: trace.py's create_event takes every "ph": "i" event named
    "[memory]" as a MemoryEvent (args "Device Type" through DeviceType(),
    0 CPU and 1 CUDA, else None; "Device Id", "Addr", "Bytes" default 0,
    "Total Allocated" and "Total Reserved" default NaN); memory_parser.py's
    find_memory_nodes walks each thread's records against that thread's
    tree of complete events (a record is in a node when start <= ts < end)
    and names an allocation by the innermost operator node (cat cpu_op)
    holding it, and its parent; get_preprocessed_records then gives each
    free the name of the allocation of its Addr. Returns the records as
    dicts, in time order."""
    records = []
    for e in trace["traceEvents"]:
        if e.get("ph") != "i" or e.get("name") != "[memory]":
            continue
        args = e.get("args", {})
        dtype = args.get("Device Type")
        records.append({"tid": e.get("tid"), "ts": e.get("ts"),
                        "device_type": dtype if dtype in (0, 1) else None,
                        "device_id": args.get("Device Id"), "addr": args.get("Addr"),
                        "bytes": args.get("Bytes", 0),
                        "total_allocated": args.get("Total Allocated", float("nan")),
                        "total_reserved": args.get("Total Reserved", float("nan")),
                        "op_name": None, "parent_op_name": None})
    ops = {}
    for e in trace["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation"):
            ops.setdefault(e["tid"], []).append(e)
    for r in records:
        holding = [e for e in ops.get(r["tid"], [])
                   if e["ts"] <= r["ts"] < e["ts"] + e["dur"]]
        holding.sort(key=lambda e: (e["ts"], -e["dur"]))
        if holding and holding[-1]["cat"] == "cpu_op" and r["bytes"] > 0:
            r["op_name"] = holding[-1]["name"]
            if len(holding) > 1:
                r["parent_op_name"] = holding[-2]["name"]
    records.sort(key=lambda r: r["ts"])
    alloc = {}
    for r in records:
        if r["addr"] is None:
            continue
        if r["bytes"] > 0:
            alloc[r["addr"]] = r
        elif r["addr"] in alloc:
            r["op_name"] = alloc[r["addr"]]["op_name"]
            r["parent_op_name"] = alloc[r["addr"]]["parent_op_name"]
            del alloc[r["addr"]]
    return records


@NEEDS_TORCH
class TorchMemory(TempDirTest):
    def prof_run(self, mode, policy=POLICY, out="out", extra_env=None):
        out = os.path.join(self.tmp, out)
        r = run([PROF, "run", "-s", self.write("policy.lua", policy), "-o", out, "--", PYTHON,
                 WORKLOAD, mode, str(STEPS)], env=base_env(extra_env), timeout=600,
                cwd=self.tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        dirs = window_dirs(out)
        self.assertEqual([os.path.basename(d) for d in dirs], ["window0_steps5-7"], r.stderr)
        with open(os.path.join(dirs[0], "key_averages.txt")) as f:
            table = f.read()
        with open(os.path.join(dirs[0], "summary.txt")) as f:
            summary = f.read()
        return load_trace(dirs[0]), table, summary, r

    def torch_run(self):
        out = os.path.join(self.tmp, "torch.json")
        r = run([PYTHON, WORKLOAD, "torch", str(STEPS), out], timeout=600, cwd=self.tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out) as f:
            return json.load(f)

    def test_self_cpu_mem_as_torch_has_it(self):
        trace, table, summary, r = self.prof_run("plain")
        ref = self.torch_run()
        headers, rows = table_rows(table)
        # torch's columns, in torch's order
        self.assertEqual(headers[5:9], ["CPU time avg", "CPU Mem", "Self CPU Mem", "# of Calls"])
        _, torch_rows = table_rows(ref["table"])
        for name in ONLY_ALLOCATE:
            calls, mem, self_mem = ref["rows"][name]
            self.assertEqual(calls, 3, name)
            self.assertGreater(self_mem, 0, name)
            # the bytes: profhost's [memory] events inside the operator
            self.assertEqual(op_bytes(trace, name), self_mem, name)
            # the table: torch's cells, as torch formats them
            self.assertEqual(rows[name]["Self CPU Mem"], torch_format_memory(self_mem), name)
            self.assertEqual(rows[name]["Self CPU Mem"], torch_rows[name]["Self CPU Mem"], name)
            self.assertEqual(rows[name]["CPU Mem"], torch_rows[name]["CPU Mem"], name)
            self.assertEqual(rows[name]["# of Calls"], "3", name)
        # the steps: what was allocated and freed in them (all of it)
        self.assertEqual(rows["ProfilerStep*"]["CPU Mem"], "0 b")
        self.assertEqual(rows["ProfilerStep*"]["Self CPU Mem"], "-576.00 Kb")
        # Kineto's [memory] events: cpu_instant_event, thread scope, the
        # allocator's totals, on the operators' thread
        mem = memory_events(trace)
        self.assertEqual(len(mem), 3 * 6)  # per step: 3 outputs, 3 frees
        tids = {e["tid"] for e in trace["traceEvents"] if e.get("cat") == "cpu_op"}
        for e in mem:
            self.assertEqual((e["ph"], e["cat"], e["s"]), ("i", "cpu_instant_event", "t"))
            self.assertEqual(set(e["args"]), {"Total Reserved", "Total Allocated", "Bytes",
                                              "Addr", "Device Id", "Device Type"})
            self.assertEqual((e["args"]["Device Type"], e["args"]["Device Id"]), (0, -1))
            self.assertIn(abs(e["args"]["Bytes"]), (64 * 1024,))
            self.assertIn(e["tid"], tids)
        self.assertNotIn("torch's own profiler", r.stderr)

    def test_tensorboard_reads_the_memory_events(self):
        trace, table, summary, r = self.prof_run("plain")
        records = tb_memory(trace)
        self.assertEqual(len(records), 18)
        allocs = [m for m in records if m["bytes"] > 0]
        frees = [m for m in records if m["bytes"] < 0]
        self.assertEqual(len(allocs), 9)
        self.assertEqual(len(frees), 9)
        for m in records:
            self.assertEqual((m["device_type"], m["device_id"]), (0, -1))  # "CPU"
            self.assertEqual(m["total_reserved"], 0)
            self.assertGreaterEqual(m["total_allocated"], 0)
            # every allocation and every free is named by the operator that
            # allocated the block
            self.assertIsNotNone(m["op_name"], m)
        self.assertEqual(sorted(m["op_name"] for m in allocs),
                         sorted(["aten::mm", "aten::clamp_min", "aten::_log_softmax"] * 3))
        self.assertTrue(all(m["parent_op_name"].startswith("ProfilerStep#") for m in allocs))
        # the curve: the allocator's running total, one block after another
        peaks = [m["total_allocated"] for m in records]
        self.assertEqual(max(peaks) - min(peaks), 3 * 64 * 1024)

    def test_memory_timeline_for_the_cpu(self):
        trace, table, summary, r = self.prof_run("plain")
        d = window_dirs(os.path.join(self.tmp, "out"))[0]
        with open(os.path.join(d, "memory_timeline.json")) as f:
            mt = json.load(f)
        self.assertEqual(len(mt["devices"]), 1)
        cpu = mt["devices"][0]
        self.assertEqual((cpu["device"], cpu["device_type"], cpu["source"]), (-1, "CPU", "torch"))
        self.assertEqual((cpu["allocations"], cpu["frees"]), (9, 9))
        # each step: the three outputs one after another (the peak), then
        # freed together
        kib = 64 * 1024
        self.assertEqual([b for _, b in cpu["points"]],
                         [kib, 2 * kib, 3 * kib, 2 * kib, kib, 0] * 3)
        self.assertEqual(cpu["peak"]["bytes"], 3 * kib)
        self.assertEqual(cpu["peak"]["t_us"], cpu["points"][2][0])
        self.assertEqual(sorted((o["operator"], o["bytes"], o["tensors"]) for o in cpu["at_peak"]),
                         [("aten::_log_softmax", kib, 1), ("aten::clamp_min", kib, 1),
                          ("aten::mm", kib, 1)])
        self.assertEqual(cpu["at_end"], {"bytes": 0, "tensors": 0, "by_operator": []})
        with open(os.path.join(d, "memory_timeline.html")) as f:
            html = f.read()
        self.assertIn("<h2>CPU (torch tensors)</h2>", html)
        self.assertIn("peak 192.0 KiB at %.3f ms" % (cpu["points"][2][0] / 1000), html)
        self.assertIn("<td style=\"text-align:left\">aten::clamp_min</td><td>64.0 KiB</td>", html)
        for remote in ("http:", "https:", "<script", "src=", "href=", "@import"):
            self.assertNotIn(remote, html)

    def test_off_by_default(self):
        policy = POLICY.replace("profile_memory = true", "profile_memory = false")
        trace, table, summary, r = self.prof_run("plain", policy=policy)
        self.assertEqual(memory_events(trace), [])
        headers, rows = table_rows(table)
        self.assertNotIn("CPU Mem", headers)
        self.assertIn("aten::clamp_min", rows)

    def test_other_operator_paths_say_they_record_none(self):
        trace, table, summary, r = self.prof_run("plain", extra_env={"PROF_TORCH_OPS": "profiler"})
        self.assertEqual(r.stderr.count(
            "profhost: prof.capture{profile_memory}: torch's tensor allocations are recorded by "
            "profhost's operator observer, not in use (PROF_TORCH_OPS=profiler); none are "
            "recorded"), 1, r.stderr)
        self.assertEqual(memory_events(trace), [])

    def test_beside_the_programs_torch_profiler(self):
        # The program runs torch.profiler(profile_memory=True) around step
        # 6, inside profhost's window (steps 5-7), on the thread whose
        # PROFILER_STATE slot holds profhost's reporter: torch starts (it
        # would refuse a taken slot), gets that step's allocations, and
        # profhost's window has steps 5 and 7's, says so once and puts its
        # reporter back after.
        trace, table, summary, r = self.prof_run("beside")
        state = json.loads(r.stdout.strip().splitlines()[-1])
        self.assertFalse(state["profiler_enabled"])
        for name in ONLY_ALLOCATE:
            self.assertEqual(state["torch_rows"][name], [1, 64 * 1024, 64 * 1024], name)
        headers, rows = table_rows(table)
        for name in ONLY_ALLOCATE:
            self.assertEqual(rows[name]["# of Calls"], "3", name)  # operators: all three
            self.assertEqual(rows[name]["Self CPU Mem"], "128.00 Kb", name)  # memory: two
        steps = {int(e["name"].split("#")[1]): e for e in trace["traceEvents"]
                 if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")}
        per_step = {n: [m for m in memory_events(trace)
                        if s["ts"] <= m["ts"] < s["ts"] + s["dur"]] for n, s in steps.items()}
        self.assertEqual({n: len(m) for n, m in per_step.items()}, {5: 6, 6: 0, 7: 6})
        self.assertEqual(r.stderr.count("torch's own profiler runs on a thread"), 1, r.stderr)
        self.assertIn("torch's own profiler ran beside profhost's profile_memory", summary)


@NEEDS_TORCH
class RecorderMemory(TempDirTest):
    def setUp(self):
        super().setUp()
        if not os.path.isdir("/dev/shm"):
            self.skipTest("no /dev/shm here")

    def test_sigkill_salvage_shows_the_growth_and_its_operator(self):
        # No window: the flight recorder keeps operators and allocations
        # between windows; the loop keeps one more 256 KiB tensor
        # (aten::mul) each step and SIGKILLs itself at step 20.
        policy = self.write("policy.lua", "prof.recorder { steps = 6 }\n"
                            "prof.capture { profile_memory = true }\n")
        out = os.path.join(self.tmp, "out")
        r = run([PROF, "run", "-s", policy, "-o", out, "--", PYTHON, WORKLOAD, "grow", "20"],
                timeout=600, cwd=self.tmp)
        self.assertEqual(r.returncode, 128 + 9, r.stderr)
        dirs = sorted(glob.glob(os.path.join(out, "*", "rank0", "recorder0_steps*")))
        self.assertEqual(len(dirs), 1, r.stderr)
        self.assertIn("after SIGKILL", r.stderr)
        trace = load_trace(dirs[0])
        first, last = trace["profhost"]["first_step"], trace["profhost"]["last_step"]
        self.assertEqual(last, 20)
        self.assertLessEqual(first, 14)
        kept = last - first + 1  # the steps the dump holds, the last partial
        # each step kept its aten::mul output: allocated, never freed
        records = tb_memory(trace)
        grown = [m for m in records if m["bytes"] == 256 * 1024 and m["op_name"] == "aten::mul"]
        self.assertEqual(len(grown), kept)
        for g in grown:
            self.assertEqual([m for m in records if m["bytes"] < 0 and m["addr"] == g["addr"]
                              and m["ts"] > g["ts"]], [], g)
        # key_averages.txt: the growth is aten::mul's, all of it its own
        with open(os.path.join(dirs[0], "key_averages.txt")) as f:
            headers, rows = table_rows(f.read())
        want = torch_format_memory(kept * 256 * 1024)
        self.assertEqual(rows["aten::mul"]["Self CPU Mem"], want)
        self.assertEqual(rows["aten::mul"]["CPU Mem"], want)
        self.assertEqual(rows["aten::mul"]["# of Calls"], str(kept))
        for name in ONLY_ALLOCATE:  # allocated and freed each step
            self.assertEqual(rows[name]["# of Calls"], str(kept), name)
        # memory_timeline: the CPU's series grows step by step, and what is
        # still allocated at the end is aten::mul's
        with open(os.path.join(dirs[0], "memory_timeline.json")) as f:
            mt = json.load(f)
        cpu = mt["devices"][0]
        self.assertEqual((cpu["device_type"], cpu["source"]), ("CPU", "torch"))
        self.assertEqual(cpu["at_end"]["by_operator"],
                         [{"operator": "aten::mul", "bytes": kept * 256 * 1024, "tensors": kept}])
        # at the end of each complete step one more 256 KiB (the points'
        # times are from the dump's start, start_ns on the trace's clock)
        start_us = mt["start_ns"] / 1000
        ends = sorted(e["ts"] + e["dur"] for e in trace["traceEvents"]
                      if e.get("cat") == "user_annotation" and
                      e["name"].startswith("ProfilerStep#"))[:-1]
        at_ends = []
        for end in ends:
            before = [b for t, b in cpu["points"] if t + start_us <= end]
            at_ends.append(before[-1] if before else 0)
        self.assertEqual([b - a for a, b in zip(at_ends, at_ends[1:])],
                         [256 * 1024] * (len(at_ends) - 1))
        with open(os.path.join(dirs[0], "memory_timeline.html")) as f:
            html = f.read()
        self.assertIn("Still allocated at the end (%.1f MiB in %d tensors" %
                      (kept * 0.25, kept), html)


if __name__ == "__main__":
    unittest.main()

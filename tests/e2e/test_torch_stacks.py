"""End to end: torch operators' input shapes and Python call stacks under
profhost against torch.profiler's (#26).

One deterministic CPU training loop (workloads/python/torch_stacks_train.py),
run once under torch.profiler (record_shapes, with_stack) and once under
profhost (prof.capture{ record_shapes = true, with_stack = true }), the same
steps recorded:

- key_averages.txt grouped by input shape has torch's "Input Shapes" rows of
  aten::addmm, with torch's counts;
- trace:key_averages{ group_by_stack_n = 5 } (the Lua trace API) has torch's
  "Source Location" rows, the same entries (file(line): function, module
  calls, C functions) and counts, for the forward operators; prof report
  --key-averages prints the same table from the saved window;
- operator_stacks.txt (torch's export_stacks) holds the loop's stacks, its
  weights summing to the self CPU time of the operators that have stacks,
  each operator of a microsecond or more on a line of its own;
- the profile function that tracks the stacks is set in the window, and
  neither before nor after it nor in a child forked in it; also when
  profile_memory's flight recorder keeps the operator observer on between
  windows, the window's operators then having their stacks and its
  allocations both.

torch 1.13 puts some backward operators under forward stacks (its tracer
matches them by time), and names the bound methods of Parameters "of Tensor
object": those operators are left out of the comparisons. Needs torch in
/usr/bin/python3 (Debian's python3-torch); skipped without.
"""
import json
import os
import re
import unittest

from harness import (NEEDS_TORCH, PROF, PYTHON, SOURCE, TempDirTest, base_env, load_trace, run,
                     window_dirs)

WORKLOAD = os.path.join(SOURCE, "tests", "e2e", "workloads", "python", "torch_stacks_train.py")
STEPS = 10
# forward operators: their stacks are the frames both tracers see called
FORWARD = ("aten::addmm", "aten::linear", "aten::tanh", "aten::mse_loss")
POLICY = """
prof.schedule { skip_first = 3, wait = 1, warmup = 1, active = 3, cycles = 1 }
prof.capture { record_shapes = true, with_stack = true }
prof.export { key_averages = { group_by_input_shape = true, row_limit = 0 } }
prof.on_trace_ready(function(trace)
  local rows = trace:key_averages { group_by_stack_n = 5, row_limit = 0 }
  trace:write_json("by_stack.json", rows)
  trace:write("by_stack.txt", rows.text)
end)
"""



def norm(entry):
    """An entry without the object address torch and profhost both print
    for a bound C method ("... of Tensor object at 0x7f...>")."""
    return re.sub(r" at 0x[0-9a-f]+>", ">", entry)


def norm_folded(stack):
    """A folded stack's entries without the addresses (translated: "_at_0x...>")."""
    return re.sub(r"_at_0x[0-9a-f]+>", ">", stack)


def self_times(trace):
    """Each counted event's self time (ns), by index in traceEvents: on
    each thread the innermost open event owns each instant, as
    key_averages.txt counts it."""
    cats = ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver")
    evs = [(i, e) for i, e in enumerate(trace["traceEvents"])
           if e.get("ph") == "X" and e.get("cat") in cats]
    by_thread = {}
    for i, e in evs:
        ts, dur = round(e["ts"] * 1000), max(0, round(e["dur"] * 1000))
        by_thread.setdefault((e["pid"], e["tid"]), []).append((ts, -dur, i))
    out = {}
    for items in by_thread.values():
        items.sort()
        stack, cursor = [], 0

        def close(upto):
            nonlocal cursor
            while stack:
                end, i = stack[-1]
                if end > upto:
                    out[i] += upto - cursor
                    cursor = upto
                    return
                if end > cursor:
                    out[i] += end - cursor
                    cursor = end
                stack.pop()

        for ts, negdur, i in items:
            close(ts)
            if not stack:
                cursor = ts
            out[i] = 0
            stack.append((ts - negdur, i))
        close(float("inf"))
    return out


@NEEDS_TORCH
class TorchStacks(TempDirTest):
    def test_shapes_and_stacks_match_torch_profiler(self):
        ref_path, ref_stacks = os.path.join(self.tmp, "ref.json"), os.path.join(self.tmp,
                                                                                 "ref.txt")
        r = run([PYTHON, WORKLOAD, str(STEPS), "torch", ref_path, ref_stacks], timeout=600,
                cwd=self.tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(ref_path) as f:
            ref = json.load(f)
        policy = self.write("policy.lua", POLICY)
        out = os.path.join(self.tmp, "out")
        r = run([PROF, "run", "-s", policy, "-o", out, "--", PYTHON, WORKLOAD, str(STEPS),
                 "plain"], env=base_env(), timeout=600, cwd=self.tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("with_stack", r.stderr)  # no warning: it ran
        # tracked in the window; not after it, nor in a child forked in it
        self.assertEqual(json.loads(r.stdout.strip().splitlines()[-1]),
                         {"before": False, "in_window": True, "in_child": False,
                          "after": False})
        dirs = window_dirs(out)
        self.assertEqual([os.path.basename(d) for d in dirs], ["window0_steps5-7"], r.stderr)
        d = dirs[0]
        trace = load_trace(d)

        # Input Shapes: aten::addmm's rows, torch's shapes and counts
        with open(os.path.join(d, "key_averages.txt")) as f:
            table = f.read()
        header = table.splitlines()[1]
        self.assertIn("Input Shapes", header)
        rows = [l for l in table.splitlines() if l.split()[:1] == ["aten::addmm"]]
        calls_end = header.index("# of Calls") + len("# of Calls")
        got = sorted([l[calls_end:].strip(), int(l[:calls_end].split()[-1])] for l in rows)
        self.assertEqual(got, ref["addmm_shapes"])
        self.assertEqual(len(got), 3)  # three Linear layers: three shapes

        # Source Location (the Lua trace API): the forward operators' rows
        with open(os.path.join(d, "by_stack.json")) as f:
            by_stack = json.load(f)
        mine = sorted([r["name"], [norm(s) for s in r["stack"]], r["count"]]
                      for r in by_stack if r["name"] in FORWARD)
        want = sorted([k, [norm(s) for s in st], n] for k, st, n in ref["by_stack"]
                      if k in FORWARD)
        self.assertEqual(mine, want)
        self.assertTrue(any(r[0] == "aten::addmm" and len(r[1]) == 5 and
                            r[1][0] == "<built-in function linear>" and
                            re.fullmatch(r"torch/nn/modules/linear\.py\(\d+\): forward", r[1][1])
                            for r in mine), mine)
        # ... and prof report reads the same table back from the window
        with open(os.path.join(d, "by_stack.txt")) as f:
            lua_text = f.read()
        self.assertIn("Source Location", lua_text)
        r = run([PROF, "report", d, "--key-averages",
                 "--set", "export.key_averages.group_by_stack_n=5",
                 "--set", "export.key_averages.row_limit=0"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, lua_text)

        # operator_stacks.txt: torch's export_stacks format, exact weights
        with open(os.path.join(d, "operator_stacks.txt")) as f:
            lines = f.read().splitlines()
        weights, stacks = [], set()
        for line in lines:
            m = re.fullmatch(r"(\S+) (\d+)", line)
            self.assertIsNotNone(m, line)
            weights.append(int(m.group(2)))
            stacks.add(norm_folded(m.group(1)))
        selfs = self_times(trace)
        with_stack = [i for i, e in enumerate(trace["traceEvents"])
                      if e.get("args", {}).get("Call stack") and i in selfs]
        # every operator of the window but profhost's own steps and phases
        # has a stack
        ops = [i for i in selfs if trace["traceEvents"][i]["cat"] == "cpu_op"]
        self.assertEqual(len([i for i in ops if i in with_stack]), len(ops))
        total = sum(selfs[i] for i in with_stack)
        self.assertEqual(sum(weights), total // 1000)
        self.assertGreaterEqual(len(lines), sum(1 for i in with_stack if selfs[i] >= 1000))
        self.assertLessEqual(len(lines), len(with_stack))
        # the loop's stacks: torch's, for the operators under module calls
        with open(ref_stacks) as f:
            theirs = {norm_folded(l.rsplit(" ", 1)[0])
                      for l in f.read().splitlines() if "nn.Module:_" in l}
        self.assertTrue(theirs)
        self.assertEqual(theirs - stacks, set())
        one = next(s for s in stacks if s.endswith("<built-in_function_linear>"))
        self.assertRegex(one, r"^torch_stacks_train\.py\(\d+\):_<module>;"
                              r"torch_stacks_train\.py\(\d+\):_train;"
                              r"torch_stacks_train\.py\(\d+\):_one_step;nn\.Module:_Model_0;")

    def test_stacks_in_windows_only_beside_the_memory_recorder(self):
        # profile_memory with the recorder keeps the observer on from the
        # first step: the stacks are still tracked from the window's armed
        # step to its end only, and its operators have them
        policy = self.write("policy.lua", POLICY.replace(
            "with_stack = true }", "with_stack = true, profile_memory = true }\n"
            "prof.recorder { steps = 6 }"))
        out = os.path.join(self.tmp, "out")
        r = run([PROF, "run", "-s", policy, "-o", out, "--", PYTHON, WORKLOAD, str(STEPS),
                 "plain"], env=base_env(), timeout=600, cwd=self.tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("with_stack", r.stderr)
        self.assertEqual(json.loads(r.stdout.strip().splitlines()[-1]),
                         {"before": False, "in_window": True, "in_child": False,
                          "after": False})
        dirs = window_dirs(out)
        self.assertEqual([os.path.basename(d) for d in dirs], ["window0_steps5-7"], r.stderr)
        evs = load_trace(dirs[0])["traceEvents"]
        ops = [e for e in evs if e.get("cat") == "cpu_op"]
        self.assertTrue(ops)
        self.assertEqual([e["name"] for e in ops if not e["args"].get("Call stack")], [])
        self.assertTrue(any(e.get("name") == "[memory]" for e in evs))
        with open(os.path.join(dirs[0], "key_averages.txt")) as f:
            header = f.read().splitlines()[1]
        self.assertRegex(header, r"CPU Mem +Self CPU Mem +# of Calls +Input Shapes +$")


if __name__ == "__main__":
    unittest.main()

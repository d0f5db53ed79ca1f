"""End to end: the flight recorder keeps GPU work between windows (#15.1).

cuda_fake_app runs on the CUPTI fake's simulated GPU with prof.recorder{} on
and no window recording the dumped steps: a dump must hold the kernels,
copies, memsets and CUDA API calls of its steps, as a window would (names,
GPU times inside the dumped steps, launch arrows, ranges linked to the GPU
work they launched), nothing from before its first step; the GPU records
are held by the recorder's bounded ring and go with its oldest segments;
with CUDA capture off the recorder does not touch CUPTI.
"""
import glob
import os
import unittest

from harness import TempDirTest, load_trace, run, step_spans, window_dirs
from test_cupti import APP, FAKE, PROF, CuptiTest, events, read_stats

# The first step hook from step N on dumps (one may be skipped while the
# host thread writes a window: "policy busy").
DUMP_AT = """
prof.recorder{ steps = 10%s }
local done = false
prof.on_step(function(s)
  if s.step >= %d and not done then
    done = assert(prof.dump{ steps = 3, reason = "gpu" })
  end
end)
"""


def recorder_dirs(out):
    return sorted(glob.glob(os.path.join(out, "*", "rank*", "recorder*_steps*")))


class RecorderGpu(CuptiTest):
    def dump(self, policy, *args):
        """Runs the app; returns its result, the dump's trace and the step
        numbers it holds (3 in a row, named in its folder)."""
        r = self.prof_run(policy, *args)
        dirs = recorder_dirs(self.out)
        self.assertEqual(len(dirs), 1, r.stderr)
        t = load_trace(dirs[0])
        a, b = t["profhost"]["first_step"], t["profhost"]["last_step"]
        self.assertEqual(b - a, 2)
        self.assertEqual(os.path.basename(dirs[0]), "recorder0_steps%d-%d" % (a, b))
        return r, t, list(range(a, b + 1))

    def check_gpu_of_steps(self, t, nsteps, kernel_us=100.0, burst=0):
        steps = step_spans(t)
        self.assertEqual(len(steps), nsteps)
        first, last = steps[0][1], steps[-1][1]
        lo, hi = first["ts"], last["ts"] + last["dur"]

        # 3 gemm (runtime launch) + 1 relu (driver launch) per step, two
        # copies and a memset: the dumped steps' work, no more.
        gemm = events(t, "kernel", "gemm_kernel")
        relu = events(t, "kernel", "relu_kernel")
        copies = events(t, "gpu_memcpy")
        sets = events(t, "gpu_memset")
        self.assertEqual((len(gemm), len(relu), len(copies), len(sets)),
                         (3 * nsteps, nsteps, 2 * nsteps, nsteps))
        for k in gemm:
            self.assertAlmostEqual(k["dur"], kernel_us, places=3)
            self.assertEqual((k["pid"], k["tid"]), (0, 7))
            self.assertEqual(k["args"]["grid"], [128, 1, 1])
        # GPU times inside the dumped steps, one per step and stream.
        for e in gemm + relu + copies + sets:
            self.assertGreaterEqual(e["ts"], lo - 0.001, e)
            self.assertLessEqual(e["ts"] + e["dur"], hi + 0.001, e)
        for _, s in steps:
            inside = [k for k in gemm if s["ts"] <= k["ts"] <= s["ts"] + s["dur"]]
            self.assertEqual(len(inside), 3)

        # The API calls, named, and one arrow per kernel from its launch.
        api = events(t, "cuda_runtime")
        names = {e["name"] for e in api}
        self.assertTrue({"cudaLaunchKernel", "cudaMemcpyAsync", "cudaMemcpy",
                         "cudaMemsetAsync", "cudaDeviceSynchronize"} <= names, names)
        launch = [e for e in api if e["name"] == "cudaLaunchKernel"]
        self.assertEqual(len(launch), (3 + burst) * nsteps)
        drv = events(t, "cuda_driver", "cuLaunchKernel")
        self.assertEqual(len(drv), nsteps)
        for e in api + drv:
            self.assertGreaterEqual(e["ts"], lo - 0.001, e)
        by_corr = {e["args"]["correlation"]: e for e in api + drv}
        starts = {e["id"]: e for e in events(t, "ac2g", ph="s")}
        ends = {e["id"]: e for e in events(t, "ac2g", ph="f")}
        self.assertEqual(len(starts), (7 + burst) * nsteps)  # kernels, copies, memset
        for k in gemm + relu:
            c = k["args"]["correlation"]
            call, s, f = by_corr[c], starts[c], ends[c]
            self.assertEqual((s["pid"], s["tid"]), (call["pid"], call["tid"]))
            self.assertTrue(call["ts"] <= s["ts"] <= call["ts"] + call["dur"])
            self.assertAlmostEqual(f["ts"], k["ts"], places=3)
            self.assertEqual((f["pid"], f["tid"]), (0, 7))

        # Each step's "forward" range is linked to the four kernels it
        # launched, and has its GPU span.
        for _, s in steps:
            fwd = [e for e in events(t, "user_annotation", "forward")
                   if s["ts"] <= e["ts"] <= s["ts"] + s["dur"]]
            self.assertEqual(len(fwd), 1)
            ext = fwd[0]["args"]["External id"]
            mine = [k for k in gemm + relu if k["args"].get("External id") == ext]
            self.assertEqual(len(mine), 4)
            gpu = [e for e in events(t, "gpu_user_annotation", "forward")
                   if e["args"]["External id"] == ext]
            self.assertEqual(len(gpu), 1)
            self.assertAlmostEqual(gpu[0]["ts"], min(k["ts"] for k in mine), places=3)
        self.assertEqual(t["profhost"]["counters"]["gpu_dropped"], 0)
        return steps

    def test_dump_between_windows_holds_its_steps_gpu_work(self):
        # A window (steps 2-3) first: the recorder starts again after it,
        # and the dump of steps 9-11 holds their GPU work, as the window
        # holds its own.
        policy = ("prof.schedule { wait = 1, warmup = 1, active = 2, cycles = 1 }\n" +
                  DUMP_AT % ("", 11))
        r, t, held = self.dump(policy, "--steps", "1000")
        self.assertIn("done 1000", r.stdout)
        self.assertGreaterEqual(held[0], 9)
        self.assertTrue(t["profhost"]["recorder"])
        self.assertEqual([n for n, _ in self.check_gpu_of_steps(t, 3)], held)
        # The window is as it always was: its own two steps' GPU work.
        w = load_trace(window_dirs(self.out)[0])
        self.assertEqual(len(events(w, "kernel", "gemm_kernel")), 6)
        self.assertEqual(len(events(w, "ac2g", ph="s")), 14)
        self.assertEqual(w["profhost"]["counters"]["gpu_dropped"], 0)

    def test_dump_with_no_window_at_all(self):
        # CUPTI was never enabled for a window: the recorder enables it,
        # and kernels launched from a second thread link the same way.
        r, t, held = self.dump(DUMP_AT % ("", 6), "--steps", "300", "--threads")
        self.assertEqual([n for n, _ in self.check_gpu_of_steps(t, 3)], held)
        st = read_stats(self.stats)
        self.assertEqual(st["subscribes"], 1)
        self.assertEqual(st["ts_before_enable"], 1)

    def test_old_segments_take_their_gpu_records_with_them(self):
        # 2000 steps of 43 kernels through a 2 MiB ring and a 1 MiB CUPTI
        # pool (64 KiB buffers, completed every few steps): the records
        # (~25 MB in all) go with the segments that held them, so memory
        # stays bounded; CUPTI's buffers come back (nothing dropped); and a
        # dump of the last steps, whose records sit in completed buffers
        # copied into the ring, holds exactly those steps' work.
        policy = "prof.capture{ buffer_mb = 1 }\n" + DUMP_AT % (", mb = 2", 1990)
        r, t, held = self.dump(policy, "--steps", "2000", "--kernel-us", "2",
                               "--burst", "40", "--rss-at", "300")
        self.assertGreaterEqual(held[0], 1988)
        steps = self.check_gpu_of_steps(t, 3, kernel_us=2.0, burst=40)
        self.assertEqual([n for n, _ in steps], held)
        self.assertEqual(len(events(t, "kernel", "tiny_kernel")), 3 * 40)
        # The device's properties, written by CUPTI once, long gone with
        # the first segment, are still the dump's.
        dev = t["deviceProperties"]
        self.assertEqual([d["name"] for d in dev], ["Fake GPU (CUPTI fake)"])
        rss = {}
        for line in r.stdout.splitlines():
            if line.startswith("rss "):
                _, at, kb = line.split()
                rss[at] = int(kb)
        self.assertIn("end", rss, r.stdout)
        self.assertLess(rss["end"] - rss["300"], 8 * 1024, rss)
        self.assertGreater(read_stats(self.stats)["buffers_completed"], 100)


    def test_paused_then_resumed_recorder_keeps_gpu_work_again(self):
        # Paused from step 10's hook (CUPTI's kinds go off with the
        # recorder's segments), resumed from step 30's: a dump after that
        # holds its steps' GPU work as before.
        policy = """
prof.recorder{ steps = 10 }
local paused, resumed, done = false, false, false
prof.on_step(function(s)
  if s.step >= 10 and not paused then paused = true; prof.recorder{ enabled = false } end
  if s.step >= 30 and not resumed then resumed = true; prof.recorder{ enabled = true } end
  if s.step >= 40 and not done then
    done = assert(prof.dump{ steps = 3, reason = "gpu" })
  end
end)
"""
        r, t, held = self.dump(policy, "--steps", "300")
        self.assertGreaterEqual(held[0], 38)
        self.assertEqual([n for n, _ in self.check_gpu_of_steps(t, 3)], held)
        paused = read_stats(self.stats)
        # Against the same run never paused: each kind was turned off on
        # pausing and on again on resuming (twice the enables), and the
        # paused steps' GPU work was not recorded (fewer records).
        self.prof_run("prof.recorder{ steps = 10 }\n", "--steps", "300")
        always = read_stats(self.stats)
        self.assertGreater(always["enables"], 0)
        self.assertEqual(paused["enables"], 2 * always["enables"])
        self.assertEqual(paused["disables"], paused["enables"])
        self.assertLess(paused["records"], always["records"])


class RecorderCudaOff(CuptiTest):
    def test_recorder_without_cuda_capture_leaves_cupti_alone(self):
        policy = "prof.capture{ cuda = false }\n" + DUMP_AT % ("", 6)
        r, t, held = RecorderGpu.dump(self, policy, "--steps", "300")
        self.assertEqual([n for n, _ in step_spans(t)], held)
        self.assertEqual(len(events(t, "user_annotation", "forward")), 3)
        self.assertEqual([e for e in t["traceEvents"]
                          if e.get("cat") in ("kernel", "gpu_memcpy", "cuda_runtime")], [])
        if os.path.exists(self.stats):
            st = read_stats(self.stats)
            self.assertEqual(st.get("enables", 0), 0)


if __name__ == "__main__":
    unittest.main()

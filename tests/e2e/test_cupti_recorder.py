"""End to end: the flight recorder keeps GPU work between windows (#15.1).

cuda_fake_app runs on the CUPTI fake's simulated GPU with prof.recorder{} on
and no window recording the dumped steps: a dump must hold the kernels,
copies, memsets and CUDA API calls of its steps, as a window would (names,
GPU times inside the dumped steps, launch arrows, ranges linked to the GPU
work they launched), nothing from before its first step; the GPU records
are held by the recorder's bounded ring and go with its oldest segments;
with CUDA capture off the recorder does not touch CUPTI. A process that
dies of SIGKILL or ends in _exit() with the recorder on leaves its GPU
work in its salvage file: the salvaged window (`prof run`'s, or `prof
salvage`'s) shows its kernels by name, its copies and the launch arrows
(#15.4).
"""
import glob
import os
import shutil
import tempfile
import unittest

from harness import LIB, TempDirTest, base_env, load_trace, run, step_spans, window_dirs
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

    def test_cuda_false_leaves_gpu_capture_to_the_windows(self):
        # prof.recorder{ cuda = false }: the window (steps 2-3) holds its
        # GPU work as always; the dump after it holds the steps, ranges
        # included, and no GPU work; CUPTI is finalized after the window,
        # as with no recorder (no CUPTI cost between windows).
        policy = ("prof.schedule { wait = 1, warmup = 1, active = 2, cycles = 1 }\n" +
                  DUMP_AT % (", cuda = false", 11))
        r, t, held = self.dump(policy, "--steps", "300")
        self.assertEqual([n for n, _ in step_spans(t)], held)
        self.assertEqual(len(events(t, "user_annotation", "forward")), 3)
        self.assertEqual([e for e in t["traceEvents"]
                          if e.get("cat") in ("kernel", "gpu_memcpy", "cuda_runtime")], [])
        w = load_trace(window_dirs(self.out)[0])
        self.assertEqual(len(events(w, "kernel", "gemm_kernel")), 6)
        st = read_stats(self.stats)
        self.assertEqual(st["finalizes"], 1)
        self.assertEqual(st["enabled_now"], 0)

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


# 64 KiB CUPTI buffers, completed every few dozen steps: a SIGKILL at step
# 300 finds the GPU work of most of the last 100 steps in the ring (what
# sits in CUPTI's unfinished buffer, or in one completed and not yet handed
# to profhost, dies with the process: a few dozen steps at most).
SALVAGE_POLICY = "prof.capture{ buffer_mb = 1 }\nprof.recorder{ steps = 100 }\n"
DIE_AT = "300"


class SalvageGpu(CuptiTest):
    def setUp(self):
        super().setUp()
        if not os.path.isdir("/dev/shm"):
            self.skipTest("no /dev/shm here")
        self.shm = tempfile.mkdtemp(prefix="profhost-e2e-salvgpu-", dir="/dev/shm")

    def tearDown(self):
        shutil.rmtree(self.shm, ignore_errors=True)
        super().tearDown()

    def launcher(self, *args, policy=SALVAGE_POLICY):
        path = self.write("policy.lua", policy)
        return run([PROF, "run", "-s", path, "-o", self.out, "--", APP, "--steps", "1000",
                    "--die-at", DIE_AT] + list(args), env=self.env())

    def check_gpu(self, how):
        """The one salvaged window holds the GPU work of its steps, named
        and linked as a live dump's; returns its trace."""
        dirs = recorder_dirs(self.out)
        self.assertEqual(len(dirs), 1, dirs)
        self.assertTrue(os.path.basename(dirs[0]).endswith("-" + DIE_AT), dirs)
        t = load_trace(dirs[0])
        self.assertIn("salvaged " + how, t["profhost"]["reason"])
        steps = step_spans(t)
        lo = steps[0][1]["ts"]
        hi = steps[-1][1]["ts"] + steps[-1][1]["dur"]

        gemm = events(t, "kernel", "gemm_kernel")
        relu = events(t, "kernel", "relu_kernel")
        kernels = events(t, "kernel")
        # most of the last 100 steps' kernels, every one named (a step
        # may be cut at either end: the window's start, the last buffer)
        cats = {}
        for e in t["traceEvents"]:
            cats[e.get("cat")] = cats.get(e.get("cat"), 0) + 1
        why = (cats, {k["name"] for k in kernels}, t["profhost"].get("counters"),
               t["profhost"].get("notes"), [n for n, _ in steps][:1])
        self.assertGreaterEqual(len(relu), 40, why)
        self.assertLessEqual(abs(len(gemm) - 3 * len(relu)), 6, why)
        self.assertEqual(len(kernels), len(gemm) + len(relu), {k["name"] for k in kernels})
        for k in gemm:
            self.assertAlmostEqual(k["dur"], 100.0, places=3)
            self.assertEqual(k["args"]["grid"], [128, 1, 1])
        for e in kernels:
            self.assertGreaterEqual(e["ts"], lo - 0.001, e)
            self.assertLessEqual(e["ts"] + e["dur"], hi + 0.001, e)
        # the copies and memsets, named by direction
        htod = events(t, "gpu_memcpy", "Memcpy HtoD (Pageable -> Device)")
        dtoh = events(t, "gpu_memcpy", "Memcpy DtoH (Device -> Pageable)")
        self.assertGreaterEqual(min(len(htod), len(dtoh)), 40)
        self.assertGreaterEqual(len(events(t, "gpu_memset")), 40)
        # the API calls by name, and one arrow from each launch to its kernel
        api = events(t, "cuda_runtime") + events(t, "cuda_driver")
        names = {e["name"] for e in api}
        self.assertTrue({"cudaLaunchKernel", "cuLaunchKernel", "cudaMemcpyAsync",
                         "cudaMemcpy", "cudaMemsetAsync"} <= names, names)
        by_corr = {e["args"]["correlation"]: e for e in api}
        starts = {e["id"]: e for e in events(t, "ac2g", ph="s")}
        ends = {e["id"]: e for e in events(t, "ac2g", ph="f")}
        for k in kernels:
            c = k["args"]["correlation"]
            call, s, f = by_corr[c], starts[c], ends[c]
            self.assertEqual((s["pid"], s["tid"]), (call["pid"], call["tid"]))
            self.assertTrue(call["ts"] <= s["ts"] <= call["ts"] + call["dur"])
            self.assertAlmostEqual(f["ts"], k["ts"], places=3)
        # "forward" ranges linked to the kernels they launched
        linked = [k for k in kernels if "External id" in k["args"]]
        self.assertEqual(len(linked), len(kernels))
        self.assertGreaterEqual(len(events(t, "gpu_user_annotation", "forward")), 40)
        self.assertEqual([d["name"] for d in t["deviceProperties"]],
                         ["Fake GPU (CUPTI fake)"])
        with open(os.path.join(dirs[0], "summary.txt")) as f:
            summary = f.read()
        self.assertIn("gemm_kernel", summary)
        self.assertIn("Copies: HtoD", summary)
        self.assertNotIn("kernel name lost", summary)
        self.assertNotIn("not converted", summary)
        return t

    def test_sigkill_under_prof_run_keeps_the_gpu_work(self):
        r = self.launcher()
        self.assertEqual(r.returncode, 128 + 9, r.stderr)
        self.check_gpu("after SIGKILL")

    def test_sigkill_with_default_buffers_keeps_the_gpu_work(self):
        # CUPTI hands a buffer over only when it is full, and a default
        # buffer holds far more than these steps' records: without the
        # flush at each rotation of the recorder the salvage had no kernel.
        r = self.launcher(policy="prof.recorder{ steps = 100 }\n")
        self.assertEqual(r.returncode, 128 + 9, r.stderr)
        self.check_gpu("after SIGKILL")

    def test_exit_under_prof_run_keeps_the_gpu_work(self):
        r = self.launcher("--how", "exit")
        self.assertEqual(r.returncode, 3, r.stderr)
        self.check_gpu("after _exit(3)")

    def test_prof_salvage_of_a_process_started_without_the_launcher(self):
        env = self.env(LD_PRELOAD=LIB, PROF_SCRIPT=self.write("policy.lua", SALVAGE_POLICY),
                       PROF_OUTPUT_DIR=self.out, PROF_SALVAGE_DIR=self.shm)
        r = run([APP, "--steps", "1000", "--die-at", DIE_AT], env=env)
        self.assertEqual(r.returncode, -9, r.stderr)
        files = glob.glob(os.path.join(self.shm, "*.salvage"))
        self.assertEqual(len(files), 1)
        s = run([PROF, "salvage", files[0]])
        self.assertEqual(s.returncode, 0, s.stderr)
        self.check_gpu("after its process ended")


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

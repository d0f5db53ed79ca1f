"""End to end: GPU capture through CUPTI, on the CUPTI fake (tests/fake).

cuda_fake_app is a "CUDA program" whose GPU is simulated by libcupti-fake.so;
the host finds that library as the process's CUPTI (or through
PROF_CUPTI_LIB) and must turn what it reports into the trace a user opens:
kernels with their arguments and launch arrows, copies with their bandwidth,
ranges linked to the GPU work they launched, drops counted, and one clear
line whenever GPU capture cannot run while the CPU trace is still written.
"""
import glob
import json
import os
import unittest

from harness import (BUILD, LIB, PROF, TESTBIN, TempDirTest, base_env, load_trace,
                     profhost_lines, run, step_spans, window_dirs)

APP = os.path.join(TESTBIN, "cuda_fake_app")
FAKE = os.path.join(BUILD, "tests", "lib", "libcupti-fake.so")
REAL_CUPTI = "/usr/local/cuda/lib64/libcupti.so.13"
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def events(trace, cat=None, name=None, ph="X"):
    return [e for e in trace["traceEvents"]
            if (cat is None or e.get("cat") == cat) and (name is None or e.get("name") == name)
            and (ph is None or e.get("ph") == ph)]


def read_stats(path):
    """The fake's counters (ints) and its list of NVTX ranges (a list)."""
    out = {}
    with open(path) as f:
        for line in f:
            k, _, v = line.rstrip("\n").partition(" ")
            out[k] = int(v) if v.isdigit() else [n for n in v.split(",") if n]
    return out


def gpu_lines(stderr):
    return [l for l in profhost_lines(stderr) if "GPU" in l or "CUPTI" in l]


class CuptiTest(TempDirTest):
    def setUp(self):
        super().setUp()
        if not os.path.exists(APP) or not os.path.exists(FAKE):
            self.fail("cuda_fake_app or libcupti-fake.so not built")
        self.out = os.path.join(self.tmp, "out")
        self.stats = os.path.join(self.tmp, "fake.stats")

    def env(self, **extra):
        env = base_env({"PROF_CUPTI_LIB": FAKE, "CUPTI_FAKE_STATS": self.stats})
        env.update(extra)
        return env

    def prof_run(self, policy, *args, env=None):
        path = self.write("policy.lua", policy)
        r = run([PROF, "run", "-s", path, "-o", self.out, "--", APP] + list(args),
                env=env or self.env())
        self.assertEqual(r.returncode, 0, r.stderr)
        return r

    def preload(self, policy, *args, **extra):
        path = self.write("policy.lua", policy)
        env = self.env(LD_PRELOAD=LIB, PROF_SCRIPT=path, PROF_OUTPUT_DIR=self.out, **extra)
        r = run([APP] + list(args), env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r


class Trace(CuptiTest):
    POLICY = "prof.schedule { wait = 1, warmup = 1, active = 2, cycles = 1 }\n"

    def test_kernels_copies_api_calls_and_flows(self):
        r = self.prof_run(self.POLICY, "--steps", "6")
        self.assertIn("done 6", r.stdout)
        dirs = window_dirs(self.out)
        self.assertEqual([os.path.basename(d) for d in dirs], ["window0_steps2-3"])
        t = load_trace(dirs[0])

        # Kernels: 3 gemm (runtime) + 1 relu (driver) per step, 2 steps.
        gemm = events(t, "kernel", "gemm_kernel")
        relu = events(t, "kernel", "relu_kernel")
        self.assertEqual((len(gemm), len(relu)), (6, 2))
        for k in gemm:
            self.assertAlmostEqual(k["dur"], 100.0, places=3)
            self.assertEqual((k["pid"], k["tid"]), (0, 7))
            a = k["args"]
            self.assertEqual((a["device"], a["stream"], a["context"]), (0, 7, 1))
            self.assertEqual(a["grid"], [128, 1, 1])
            self.assertEqual(a["block"], [256, 1, 1])
            self.assertEqual(a["registers per thread"], 32)
            self.assertEqual(a["shared memory"], 1024 + 4096)
            self.assertIn("queued", a)
        # Kernels on one stream run back to back, never overlapping.
        on7 = sorted((e for e in t["traceEvents"] if e.get("cat") in GPU_CATS and
                      e.get("tid") == 7), key=lambda e: e["ts"])
        for a, b in zip(on7, on7[1:]):
            self.assertLessEqual(a["ts"] + a["dur"], b["ts"] + 0.001)

        # API calls, named without CUPTI's version suffix, with cbid and correlation.
        api = events(t, "cuda_runtime")
        names = {e["name"] for e in api}
        self.assertTrue({"cudaLaunchKernel", "cudaMemcpyAsync", "cudaMemcpy",
                         "cudaMemsetAsync", "cudaDeviceSynchronize"} <= names, names)
        launch = [e for e in api if e["name"] == "cudaLaunchKernel"]
        self.assertEqual(len(launch), 6)
        self.assertTrue(all(e["args"]["cbid"] == 211 for e in launch))
        drv = events(t, "cuda_driver", "cuLaunchKernel")
        self.assertEqual(len(drv), 2)

        # One ac2g arrow per kernel, from inside its launch call to its start.
        by_corr = {e["args"]["correlation"]: e for e in api + drv}
        starts = {e["id"]: e for e in events(t, "ac2g", ph="s")}
        ends = {e["id"]: e for e in events(t, "ac2g", ph="f")}
        for k in gemm + relu:
            c = k["args"]["correlation"]
            call, s, f = by_corr[c], starts[c], ends[c]
            self.assertEqual((s["pid"], s["tid"]), (call["pid"], call["tid"]))
            self.assertTrue(call["ts"] <= s["ts"] <= call["ts"] + call["dur"])
            self.assertEqual((f["pid"], f["tid"], f["ts"]), (0, 7, k["ts"]))
            self.assertGreaterEqual(k["ts"], call["ts"])
        self.assertEqual({by_corr[k["args"]["correlation"]]["name"] for k in relu},
                         {"cuLaunchKernel"})

        # Copies: bytes, direction, bandwidth = bytes / duration.
        h2d = events(t, "gpu_memcpy", "Memcpy HtoD (Pageable -> Device)")
        d2h = events(t, "gpu_memcpy", "Memcpy DtoH (Device -> Pageable)")
        self.assertEqual((len(h2d), len(d2h)), (2, 2))
        for e, nbytes, us in [(x, 1 << 20, 50.0) for x in h2d] + [(x, 256 << 10, 20.0) for x in d2h]:
            self.assertEqual(e["args"]["bytes"], nbytes)
            self.assertAlmostEqual(e["dur"], us, places=3)
            self.assertAlmostEqual(e["args"]["memory bandwidth (GB/s)"], nbytes / (us * 1000), places=6)
        self.assertEqual({e["args"]["copy kind"] for e in h2d + d2h}, {"HtoD", "DtoH"})
        sets = events(t, "gpu_memset")
        self.assertEqual(len(sets), 2)
        self.assertEqual(sets[0]["args"]["bytes"], 4096)
        syncs = events(t, "cuda_sync", "Context Sync")
        self.assertEqual(len(syncs), 2)

        # GPU work launched in a step lies after the step began, and the CPU
        # calls lie inside the steps.
        steps = step_spans(t)
        first, last = steps[0][1], steps[-1][1]
        for e in api + drv:
            self.assertTrue(first["ts"] <= e["ts"] and e["ts"] + e["dur"] <= last["ts"] + last["dur"] + 0.01, e)
        for e in gemm + relu + h2d + d2h + sets:
            self.assertGreaterEqual(e["ts"], first["ts"])

        # Tracks: pid = device, tid = stream, named; the device's properties.
        meta = [e for e in t["traceEvents"] if e.get("ph") == "M"]
        pname = [e for e in meta if e["name"] == "process_name" and e["pid"] == 0]
        self.assertTrue(pname and pname[0]["args"]["name"].startswith("GPU 0"), pname)
        self.assertIn({"name": "stream 7"}, [e["args"] for e in meta
                                            if e["name"] == "thread_name" and e["pid"] == 0])
        dev = t["deviceProperties"]
        self.assertEqual(len(dev), 1)
        self.assertEqual(dev[0]["id"], 0)
        self.assertEqual(dev[0]["name"], "Fake GPU (CUPTI fake)")
        self.assertEqual(dev[0]["numSms"], 132)
        self.assertEqual(t["profhost"]["counters"]["gpu_dropped"], 0)

        # prof run started GPU capture through the driver's InitializeInjection,
        # registered the clock before enabling anything, and finalized CUPTI
        # after the last window.
        st = read_stats(self.stats)
        self.assertEqual(st["injections"], 1)
        self.assertEqual(st["subscribes"], 1)
        self.assertEqual(st["ts_before_enable"], 1)
        self.assertEqual(st["finalizes"], 1)
        self.assertEqual(st["enabled_now"], 0)
        self.assertEqual(gpu_lines(r.stderr), [])

    def test_ranges_link_to_the_gpu_work_they_launched(self):
        for threads in ([], ["--threads"]):
            with self.subTest(threads=bool(threads)):
                self.out = os.path.join(self.tmp, "out%d" % len(threads))
                self.prof_run(self.POLICY, "--steps", "6", *threads)
                t = load_trace(window_dirs(self.out)[0])
                kernels = events(t, "kernel")
                for step_no, step in step_spans(t):
                    fwd = [e for e in events(t, "user_annotation", "forward")
                           if step["ts"] <= e["ts"] <= step["ts"] + step["dur"]]
                    self.assertEqual(len(fwd), 1)
                    fwd = fwd[0]
                    mine = [k for k in kernels if fwd["ts"] <= k["ts"] - 0.001 and
                            k["name"] in ("gemm_kernel", "relu_kernel") and
                            k["ts"] < step["ts"] + step["dur"]]
                    self.assertEqual(len(mine), 4)
                    ext = fwd["args"]["External id"]
                    self.assertTrue(all(k["args"]["External id"] == ext for k in mine))
                    gpu = [e for e in events(t, "gpu_user_annotation", "forward")
                           if e["args"]["External id"] == ext]
                    self.assertEqual(len(gpu), 1, fwd)
                    g = gpu[0]
                    self.assertEqual((g["pid"], g["tid"]), (0, 7))
                    self.assertAlmostEqual(g["ts"], min(k["ts"] for k in mine), places=3)
                    self.assertAlmostEqual(g["ts"] + g["dur"],
                                           max(k["ts"] + k["dur"] for k in mine), places=3)
                    copy = events(t, "gpu_user_annotation", "copy")
                    self.assertEqual(len(copy), 2)
                    stepg = events(t, "gpu_user_annotation", "ProfilerStep#%d" % step_no)
                    self.assertEqual(len(stepg), 1)
                    self.assertLessEqual(stepg[0]["ts"], g["ts"])

    def test_tables_and_summary_show_gpu_time(self):
        r = self.prof_run(self.POLICY, "--steps", "6", "--graph")
        d = window_dirs(self.out)[0]
        with open(os.path.join(d, "key_averages.txt")) as f:
            table = f.read()
        header = [l for l in table.splitlines() if "Name" in l][0]
        for col in ("Self CUDA", "Self CUDA %", "CUDA total", "CUDA time avg"):
            self.assertIn(col, header)
        cols = [c.strip() for c in header.split("  ") if c.strip()]

        def cell(name, col):
            for line in table.splitlines():
                parts = [p for p in line.split("  ") if p.strip()]
                if parts and parts[0].strip() == name:
                    return parts[cols.index(col)].strip()
            self.fail("no row %s in\n%s" % (name, table))
        # "forward" launched 3 x 100 us + 10 us per step, over 2 steps; the
        # graph launch, outside any range, owns its 3 x 20 us.
        self.assertEqual(cell("forward", "Self CUDA"), "620.000us")
        self.assertEqual(cell("forward", "CUDA total"), "620.000us")
        self.assertEqual(cell("forward", "CUDA time avg"), "310.000us")
        self.assertEqual(cell("copy", "Self CUDA"), "140.000us")
        self.assertEqual(cell("cudaGraphLaunch", "Self CUDA"), "120.000us")
        self.assertEqual(cell("cudaLaunchKernel", "Self CUDA"), "0.000us")
        self.assertEqual(cell("ProfilerStep*", "CUDA total"), "890.000us")
        self.assertIn("Self CUDA time total: 890.000us", table)
        with open(os.path.join(d, "summary.txt")) as f:
            summary = f.read()
        self.assertRegex(summary, r"GPU 0: busy \d+\.\d\d% of the window \(890\.000us of ")
        self.assertIn("gemm_kernel         6     600.000us", summary)
        self.assertIn("HtoD 2.0 MiB in 2 (20.97 GB/s); DtoH 512.0 KiB in 2 (13.11 GB/s)", summary)
        # The graph ran while CUPTI was attached: no finalize after the last
        # window (on a real GPU the graph's next launch fails after one, and
        # the fake's too: the app would have exited 1).
        self.assertEqual(read_stats(self.stats)["finalizes"], 0)
        self.assertRegex(summary, r"Synchronization: \d+\.\d+(us|ms|s) waiting in 2 calls")
        self.assertIn("GPU 0: busy", r.stderr)  # rank 0 prints the summary
        # The raw capture of a GPU window reads back (prof report).
        if os.path.exists(os.path.join(d, "capture.phb")):
            rep = run([PROF, "report", d])
            self.assertEqual(rep.returncode, 0, rep.stderr)
            self.assertIn("gemm_kernel", rep.stdout)

    def test_memory_timeline(self):
        # Each step allocates 1 MiB and frees the previous step's block; a
        # 4 MiB block lives from step 2 to step 4 (of 6).
        self.prof_run(self.POLICY, "--steps", "6", "--memory")
        d = window_dirs(self.out)[0]
        with open(os.path.join(d, "memory_timeline.json")) as f:
            mt = json.load(f)
        self.assertEqual((mt["first_step"], mt["last_step"]), (2, 3))
        self.assertEqual(len(mt["devices"]), 1)
        dev = mt["devices"][0]
        self.assertEqual(dev["device"], 0)
        self.assertEqual((dev["allocations"], dev["frees"]), (3, 2))
        pts = dev["points"]
        self.assertEqual([b for _, b in pts], [1 << 20, 1 << 20, 5 << 20, 6 << 20, 5 << 20])
        self.assertEqual([t for t, _ in pts], sorted(t for t, _ in pts))
        self.assertTrue(all(0 <= t <= mt["window_us"] for t, _ in pts))
        self.assertEqual(dev["peak"]["bytes"], 6 << 20)
        self.assertEqual(dev["peak"]["t_us"], pts[3][0])
        # The same series in the trace, as Kineto-style [memory] instants.
        t = load_trace(d)
        mem = sorted(events(t, "gpu_memory", "[memory]", ph="i"), key=lambda e: e["ts"])
        self.assertEqual([e["args"]["Total Allocated"] for e in mem], [b for _, b in pts])
        # TensorBoard's memory view skips an event without Total Reserved
        self.assertEqual([e["args"].get("Total Reserved") for e in mem], [b for _, b in pts])
        self.assertEqual([e["args"]["Bytes"] for e in mem],
                         [1 << 20, -(1 << 20), 4 << 20, 1 << 20, -(1 << 20)])
        with open(os.path.join(d, "memory_timeline.html")) as f:
            html = f.read()
        self.assertIn("<svg", html)
        self.assertIn("peak 6.0 MiB at %.3f ms" % (pts[3][0] / 1000), html)
        for remote in ("http:", "https:", "<script", "src=", "href=", "@import"):
            self.assertNotIn(remote, html)
        # No allocations, no timeline.
        self.out = os.path.join(self.tmp, "out2")
        self.prof_run(self.POLICY, "--steps", "6")
        self.assertEqual(glob.glob(os.path.join(window_dirs(self.out)[0], "memory_timeline*")), [])

    def test_kinds_follow_the_policy(self):
        policy = self.POLICY + "prof.capture { cuda = { memcpy = false, driver = false, sync = false } }\n"
        self.prof_run(policy, "--steps", "6")
        t = load_trace(window_dirs(self.out)[0])
        self.assertEqual(events(t, "gpu_memcpy"), [])
        self.assertEqual(events(t, "cuda_driver"), [])
        self.assertEqual(events(t, "cuda_sync"), [])
        self.assertEqual(len(events(t, "kernel")), 8)
        self.assertEqual(len(events(t, "cuda_runtime", "cudaLaunchKernel")), 6)

    def test_cuda_off_leaves_cupti_alone(self):
        r = self.prof_run(self.POLICY + "prof.capture { cuda = false }\n", "--steps", "6")
        t = load_trace(window_dirs(self.out)[0])
        self.assertEqual([e for e in t["traceEvents"] if e.get("cat") in GPU_CATS], [])
        st = read_stats(self.stats)
        self.assertEqual((st["subscribes"], st["enables"]), (0, 0))
        self.assertEqual(gpu_lines(r.stderr), [])


class Windows(CuptiTest):
    def test_each_window_holds_only_its_steps_gpu_work(self):
        policy = "prof.schedule { wait = 2, warmup = 1, active = 2, cycles = 3 }\n"
        self.prof_run(policy, "--steps", "16")
        dirs = window_dirs(self.out)
        self.assertEqual([os.path.basename(d) for d in dirs],
                         ["window0_steps3-4", "window1_steps8-9", "window2_steps13-14"])
        seen = set()
        for d in dirs:
            t = load_trace(d)
            steps = step_spans(t)
            lo, hi = steps[0][1]["ts"], steps[-1][1]["ts"] + steps[-1][1]["dur"]
            launches = events(t, "cuda_runtime", "cudaLaunchKernel")
            # 3 launches per recorded step: none from warm-up or idle steps.
            self.assertEqual(len(launches), 6)
            for e in launches:
                self.assertTrue(lo <= e["ts"] <= hi)
            corr = {k["args"]["correlation"] for k in events(t, "kernel")}
            self.assertEqual(len(events(t, "kernel")), 8)
            self.assertFalse(corr & seen)
            seen |= corr
        st = read_stats(self.stats)
        self.assertEqual(st["finalizes"], 1)

    def test_back_to_back_windows_split_at_the_boundary(self):
        # No gap between windows: records of the next window arrive with the
        # previous window's flush and must wait for their own window.
        policy = "prof.schedule { active = 2, cycles = 3 }\n"
        self.prof_run(policy, "--steps", "6")
        dirs = window_dirs(self.out)
        self.assertEqual(len(dirs), 3)
        for d in dirs:
            t = load_trace(d)
            self.assertEqual(len(events(t, "cuda_runtime", "cudaLaunchKernel")), 6, d)
            self.assertEqual(len(events(t, "kernel", "gemm_kernel")), 6, d)

    def test_preload_reuses_the_cupti_the_process_loaded(self):
        # No prof run, no PROF_CUPTI_LIB: the app's own libcupti (the fake,
        # linked in) is found in the process and reused; extra
        # InitializeInjection calls change nothing.
        policy = self.write("policy.lua", "prof.schedule { wait = 1, active = 2, cycles = 1 }\n")
        env = base_env({"LD_PRELOAD": LIB, "PROF_SCRIPT": policy, "PROF_OUTPUT_DIR": self.out,
                        "CUPTI_FAKE_STATS": self.stats, "PROF_LOG": "debug"})
        r = run([APP, "--steps", "5", "--inject-twice"], env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("libcupti-fake.so (already loaded by the process)", r.stderr)
        t = load_trace(window_dirs(self.out)[0])
        self.assertEqual(len(events(t, "kernel", "gemm_kernel")), 6)
        st = read_stats(self.stats)
        self.assertEqual(st["subscribes"], 1)
        self.assertEqual(st["injections"], 0)


class StepsFromCuda(CuptiTest):
    def check_steps(self, policy, boundary_call, boundary_cat):
        r = self.prof_run(policy, "--steps", "8", "--graph", "--no-prof-step")
        dirs = window_dirs(self.out)
        self.assertEqual([os.path.basename(d) for d in dirs], ["window0_steps2-3"], r.stderr)
        t = load_trace(dirs[0])
        steps = step_spans(t)
        self.assertEqual([n for n, _ in steps], [2, 3])
        calls = events(t, boundary_cat, boundary_call)
        for _, s in steps[:-1]:  # the call closing the window is not in it
            end = s["ts"] + s["dur"]
            # The step ends right after the call that counts it returns.
            before = [c for c in calls if c["ts"] + c["dur"] <= end + 0.001]
            self.assertTrue(before, s)
            self.assertLess(end - max(c["ts"] + c["dur"] for c in before), 50.0)
        # One launch of "forward" per step: the steps hold whole iterations.
        # A boundary counted inside "forward" (the kernel trigger) also shows
        # the range the window opened in, clipped at the window's start.
        fwd = events(t, "user_annotation", "forward")
        early = [e for e in fwd if e.get("args", {}).get("clipped_start")]
        self.assertEqual(len(fwd) - len(early), 2)
        self.assertLessEqual(len(early), 1)
        # It starts where the window began: at the boundary that opened it,
        # its first step once profhost opened it (microseconds later).
        for e in early:
            self.assertLessEqual(e["ts"], steps[0][1]["ts"] + 0.002)
            self.assertLess(steps[0][1]["ts"] - e["ts"], 50000)
        st = read_stats(self.stats)
        self.assertEqual(st["finalizes"], 0)  # the callbacks keep counting steps
        return r

    def test_steps_from_a_cuda_call(self):
        self.check_steps("prof.schedule { wait = 1, warmup = 1, active = 2, cycles = 1 }\n"
                         "prof.steps { cuda = \"cudaGraphLaunch\" }\n",
                         "cudaGraphLaunch", "cuda_runtime")

    def test_steps_from_kernel_names(self):
        self.check_steps("prof.schedule { wait = 1, warmup = 1, active = 2, cycles = 1 }\n"
                         "prof.steps { kernel = \"^relu_k\" }\n",
                         "cuLaunchKernel", "cuda_driver")

    def test_unusable_step_triggers_are_said(self):
        r = self.prof_run("prof.steps { cuda = \"cudaNoSuchCall\", kernel = \"(gemm)\" }\n",
                          "--steps", "3")
        lines = profhost_lines(r.stderr)
        self.assertEqual(len([l for l in lines if "cudaNoSuchCall" in l and
                              "no CUDA runtime or driver API" in l]), 1, r.stderr)
        self.assertEqual(len([l for l in lines if "(gemm)" in l and "captures" in l]), 1,
                         r.stderr)


class NsightSystems(CuptiTest):
    def test_schedule_drives_the_cuda_profiler_api_and_marks_steps(self):
        # Under nsys: no CUPTI subscription; each window is bracketed by
        # cudaProfilerStart/Stop and its steps are NVTX ranges (the fake
        # plays nsys's NVTX injection). The CPU windows are still written.
        env = self.env(NSYS_PROFILING_SESSION_ID="1", NVTX_INJECTION64_PATH=FAKE)
        r = self.prof_run("prof.schedule { wait = 1, active = 2, cycles = 2 }\n",
                          "--steps", "7", env=env)
        st = read_stats(self.stats)
        self.assertEqual(st["subscribes"], 0)
        self.assertEqual((st["profiler_starts"], st["profiler_stops"]), (2, 2))
        self.assertEqual(st["nvtx_ranges"], ["ProfilerStep#1", "ProfilerStep#2",
                                             "ProfilerStep#4", "ProfilerStep#5"])
        self.assertEqual(st["nvtx_ends"], 4)
        lines = gpu_lines(r.stderr)
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertIn("Nsight Systems is profiling this process", lines[0])
        self.assertIn("--capture-range=cudaProfilerApi", lines[0])
        dirs = window_dirs(self.out)
        self.assertEqual([os.path.basename(d) for d in dirs],
                         ["window0_steps1-2", "window1_steps4-5"])
        t = load_trace(dirs[0])
        self.assertEqual(len(events(t, "user_annotation", "forward")), 2)
        self.assertEqual(events(t, "kernel"), [])


class Drops(CuptiTest):
    def test_a_full_record_pool_drops_and_counts(self):
        # 1 MiB of GPU record pool, ~3 MiB of records per window.
        policy = ("prof.schedule { active = 2, cycles = 1 }\n"
                  "prof.capture { buffer_mb = 1 }\n")
        r = self.prof_run(policy, "--steps", "3", "--burst", "6000")
        t = load_trace(window_dirs(self.out)[0])
        st = read_stats(self.stats)
        dropped = t["profhost"]["counters"]["gpu_dropped"]
        self.assertGreater(st["dropped"], 0)
        self.assertEqual(dropped, st["dropped"])
        tiny = len(events(t, "kernel", "tiny_kernel"))
        self.assertLess(tiny, 12000)
        self.assertGreater(tiny, 0)
        warn = [l for l in profhost_lines(r.stderr) if "GPU records dropped" in l]
        self.assertEqual(len(warn), 1, r.stderr)
        self.assertIn("%d GPU records dropped" % dropped, warn[0])
        self.assertIn("buffer_mb", warn[0])

    def test_unfinished_gpu_work_has_no_timestamps_and_is_counted(self):
        # The last step launches a long kernel and ends the window at once:
        # the forced flush finds it unfinished.
        policy = "prof.schedule { active = 3, cycles = 1 }\n"
        r = self.prof_run(policy, "--steps", "3", "--late")
        t = load_trace(window_dirs(self.out)[0])
        self.assertEqual(t["profhost"]["counters"]["gpu_dropped"], 1)
        self.assertEqual(events(t, "kernel", "late_kernel"), [])
        self.assertEqual(len(events(t, "cuda_runtime", "cudaLaunchKernel")), 10)
        self.assertIn("1: no timestamps", r.stderr)


class Failures(CuptiTest):
    """Each outcome that stops GPU capture: one line, the CPU trace written."""
    POLICY = "prof.schedule { wait = 1, active = 2, cycles = 2 }\n"

    def check(self, r, expect, range_name="forward"):
        lines = gpu_lines(r.stderr)
        self.assertEqual(len(lines), 1, r.stderr)
        for text in expect:
            self.assertIn(text, lines[0])
        dirs = window_dirs(self.out)
        self.assertEqual(len(dirs), 2)
        for d in dirs:
            t = load_trace(d)
            self.assertEqual(len(step_spans(t)), 2)
            self.assertEqual(len(events(t, "user_annotation", range_name)), 2)
            self.assertEqual([e for e in t["traceEvents"] if e.get("cat") in GPU_CATS], [])
        return lines[0]

    def test_no_driver(self):
        r = self.preload(self.POLICY, "--steps", "7", CUPTI_FAKE_MODE="no_driver")
        self.check(r, ["no CUDA driver or GPU", "CUPTI_ERROR_UNKNOWN", "cuptiSubscribe",
                       "CPU capture goes on"])
        self.assertTrue(r.stderr.startswith("profhost: no CUDA driver"))

    def steps_app(self, **extra):
        """A CPU-only program (no libcupti of its own) under the host."""
        path = self.write("policy.lua", self.POLICY)
        env = self.env(LD_PRELOAD=LIB, PROF_SCRIPT=path, PROF_OUTPUT_DIR=self.out, **extra)
        r = run([os.path.join(TESTBIN, "steps_app"), "--steps", "7"], env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r

    @unittest.skipUnless(os.path.exists(REAL_CUPTI), "no CUDA 13 libcupti at " + REAL_CUPTI)
    def test_real_cupti_without_a_driver(self):
        r = self.steps_app(PROF_CUPTI_LIB=REAL_CUPTI)
        self.check(r, ["no CUDA driver or GPU", "CUPTI_ERROR_UNKNOWN", "CPU capture goes on"],
                   "outer")

    def test_insufficient_privileges(self):
        r = self.preload(self.POLICY, "--steps", "7", CUPTI_FAKE_MODE="insufficient_privileges")
        self.check(r, ["CUPTI_ERROR_INSUFFICIENT_PRIVILEGES",
                       "NVreg_RestrictProfilingToAdminUsers=0", "CAP_SYS_ADMIN"])

    def test_another_subscriber(self):
        r = self.preload(self.POLICY, "--steps", "7", CUPTI_FAKE_MODE="multiple_subscribers")
        self.check(r, ["another CUPTI client", "steps aside"])

    def test_cupti_of_cuda_12(self):
        r = self.preload(self.POLICY, "--steps", "7", CUPTI_FAKE_MODE="old_version")
        self.check(r, ["CUPTI API version 24", "PROF_CUPTI_LIB"])

    def test_prof_cupti_lib_that_cannot_load(self):
        r = self.steps_app(PROF_CUPTI_LIB=os.path.join(self.tmp, "nope.so"))
        self.check(r, ["PROF_CUPTI_LIB", "nope.so", "GPU capture is off"], "outer")


if __name__ == "__main__":
    unittest.main(verbosity=2)

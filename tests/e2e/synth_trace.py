"""Synthetic profhost traces for the report tests.

Builds trace.json documents in profhost's own schema (Kineto's: see
docs/output.md) for planted scenarios whose answers are known: where the
step time goes, how busy the GPU is, who waits for whom. GPU events use the
names and args the CUPTI capture writes (kernel on pid = device, tid =
stream; gpu_memcpy with "bytes"; cuda_runtime launches and synchronizes),
CPU samples are cpu_sample instants with a "stack" argument (frames
outermost first, ';'-separated), memory events are "[memory]" instants with
"Total Allocated".

    python3 synth_trace.py dataloader out/trace.json
"""
import json
import sys

PID = 4242
TID = 4242          # the main (stepping) thread
LOADER_TID = 4243   # a second CPU thread
DEVICE = 0
STREAM = 7
MS = 1000.0         # trace times are microseconds


class Builder:
    def __init__(self, rank=0, world_size=1, window=0):
        self.events = []
        self.rank = rank
        self.world_size = world_size
        self.window = window
        self.steps = []

    def x(self, cat, name, ts, dur, pid=PID, tid=TID, args=None):
        e = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid,
             "ts": round(ts, 3), "dur": round(dur, 3)}
        if args:
            e["args"] = args
        self.events.append(e)
        return e

    def instant(self, cat, name, ts, pid=PID, tid=TID, args=None):
        e = {"ph": "i", "s": "t", "cat": cat, "name": name, "pid": pid, "tid": tid,
             "ts": round(ts, 3)}
        if args:
            e["args"] = args
        self.events.append(e)

    def step(self, n, ts, dur):
        self.steps.append(n)
        self.x("user_annotation", "ProfilerStep#%d" % n, ts, dur)

    def phase(self, name, ts, dur):
        self.x("user_annotation", name, ts, dur)

    def kernel(self, name, ts, dur, stream=STREAM):
        self.x("kernel", name, ts, dur, pid=DEVICE, tid=stream,
               args={"device": DEVICE, "stream": stream, "correlation": len(self.events)})

    def launch(self, ts, dur=0.01 * MS):
        self.x("cuda_runtime", "cudaLaunchKernel", ts, dur)

    def memcpy(self, ts, dur, nbytes, kind="Memcpy HtoD (Pageable -> Device)"):
        self.x("gpu_memcpy", kind, ts, dur, pid=DEVICE, tid=STREAM,
               args={"bytes": nbytes, "memory bandwidth (GB/s)": nbytes / (dur * 1e3)})

    def sample(self, ts, stack, tid=TID):
        self.instant("cpu_sample", stack.split(";")[-1], ts, tid=tid, args={"stack": stack})

    def memory(self, ts, total, nbytes):
        self.instant("user_annotation", "[memory]", ts,
                     args={"Device Id": DEVICE, "Bytes": nbytes, "Total Allocated": total})

    def doc(self):
        meta = [{"name": "thread_name", "ph": "M", "pid": PID, "tid": TID,
                 "args": {"name": "python"}},
                {"name": "thread_name", "ph": "M", "pid": PID, "tid": LOADER_TID,
                 "args": {"name": "pin_memory"}},
                {"name": "process_name", "ph": "M", "pid": PID, "tid": 0,
                 "args": {"name": "train"}}]
        return {
            "schemaVersion": 1, "deviceProperties": [],
            "distributedInfo": {"rank": self.rank, "world_size": self.world_size},
            "traceName": "synth/rank%d/window%d" % (self.rank, self.window),
            "baseTimeNanoseconds": 1700000000000000000, "displayTimeUnit": "ms",
            "profhost": {"version": "synthetic", "window": self.window,
                         "first_step": min(self.steps) if self.steps else 0,
                         "last_step": max(self.steps) if self.steps else 0,
                         "reason": "schedule", "program": "train", "hostname": "synth",
                         "pid": PID,
                         "counters": {"events": len(self.events), "dropped_buffer": 0,
                                      "dropped_noslot": 0, "unbalanced_pops": 0,
                                      "clipped": 0, "gpu_dropped": 0}},
            "traceEvents": self.events + meta,
        }


def dataloader(steps=6, first=10, data_ms=8.0, rank=0, world_size=1, slow=1.0):
    """Input-bound: each step waits data_ms in DataLoader.__next__ (the GPU
    idles), then runs 2 ms of kernels."""
    b = Builder(rank, world_size)
    t = 1000 * MS
    total = 0
    for i in range(steps):
        d = data_ms * slow * MS
        fwd, bwd, opt = 0.8 * MS, 1.2 * MS, 0.3 * MS
        dur = d + fwd + bwd + opt + 0.2 * MS
        b.step(first + i, t, dur)
        b.phase("data", t, d)
        b.x("user_annotation", "DataLoader.__next__", t + 0.01 * MS, d - 0.02 * MS)
        k = 0
        while k * 0.5 * MS < d:
            b.sample(t + k * 0.5 * MS + 0.1 * MS,
                     "main;train;DataLoader.__next__;_next_data;time.sleep")
            k += 1
        c = t + d
        b.phase("forward", c, fwd)
        b.launch(c + 0.01 * MS)
        b.kernel("volta_sgemm_128x64_nn", c + 0.05 * MS, 0.7 * MS)
        b.sample(c + 0.3 * MS, "main;train;forward;Linear.forward")
        c += fwd
        b.phase("backward", c, bwd)
        b.launch(c + 0.01 * MS)
        b.kernel("volta_sgemm_128x64_tn", c + 0.05 * MS, 1.0 * MS)
        c += bwd
        b.phase("optimizer", c, opt)
        b.launch(c + 0.01 * MS)
        b.kernel("multi_tensor_apply_kernel", c + 0.02 * MS, 0.2 * MS)
        total += 1 << 20
        b.memory(c + 0.02 * MS, total, 1 << 20)
        t += dur
    return b.doc()


def gpu_bound(steps=6, first=10):
    """GPU-bound: the CPU launches a step's kernels in 0.5 ms, then waits in
    cudaDeviceSynchronize while the GPU runs 9.5 ms of kernels back to
    back."""
    b = Builder()
    t = 1000 * MS
    for i in range(steps):
        dur = 10 * MS
        b.step(first + i, t, dur)
        b.phase("data", t, 0.1 * MS)
        b.phase("forward", t + 0.1 * MS, 0.2 * MS)
        b.phase("backward", t + 0.3 * MS, 0.2 * MS)
        b.phase("optimizer", t + 0.5 * MS, dur - 0.5 * MS)
        g = t + 0.15 * MS
        for k in range(19):
            b.launch(t + 0.1 * MS + k * 0.02 * MS)
            name = "ampere_fp16_s1688gemm_fp16_256x128" if k % 2 == 0 else "elementwise_kernel"
            kd = 0.7 * MS if k % 2 == 0 else 0.3 * MS
            b.kernel(name, g, kd)
            g += kd
        b.x("cuda_runtime", "cudaDeviceSynchronize", t + 0.5 * MS, dur - 0.55 * MS)
        t += dur
    return b.doc()


def sync_bound(steps=6, first=10):
    """Synchronize-bound: each step does 10 times: launch a 0.3 ms kernel,
    cudaStreamSynchronize on it, then 0.4 ms of CPU work. CPU and GPU take
    turns; neither is busy."""
    b = Builder()
    t = 1000 * MS
    for i in range(steps):
        dur = 10 * 0.72 * MS
        b.step(first + i, t, dur)
        b.phase("forward", t, dur)
        c = t
        for k in range(10):
            b.launch(c, 0.01 * MS)
            b.kernel("reduce_kernel", c + 0.01 * MS, 0.3 * MS)
            b.x("cuda_runtime", "cudaStreamSynchronize", c + 0.01 * MS, 0.31 * MS)
            b.x("user_annotation", "postprocess", c + 0.32 * MS, 0.39 * MS)
            c += 0.72 * MS
        t += dur
    return b.doc()


def comm(steps=4, first=10, rank=0, world_size=2):
    """Data-parallel step: 6 ms of compute kernels on stream 7, an
    all-reduce (ncclKernel) on stream 13 from 4 ms to 8 ms: 2 ms of it
    hidden behind compute, 2 ms exposed."""
    b = Builder(rank, world_size)
    t = 1000 * MS
    for i in range(steps):
        dur = 9 * MS
        b.step(first + i, t, dur)
        b.phase("forward", t, 2 * MS)
        b.phase("backward", t + 2 * MS, 6 * MS)
        for k in range(6):
            b.kernel("volta_sgemm_128x64_nn", t + k * MS, MS)
        b.kernel("ncclKernel_AllReduce_RING_LL_Sum_float", t + 4 * MS, 4 * MS, stream=13)
        t += dur
    return b.doc()


SCENARIOS = {"comm": comm, "dataloader": dataloader, "gpu_bound": gpu_bound, "sync_bound": sync_bound}


def main(argv):
    if len(argv) != 3 or argv[1] not in SCENARIOS:
        sys.stderr.write("usage: synth_trace.py {%s} out.json\n" % "|".join(SCENARIOS))
        return 2
    with open(argv[2], "w") as f:
        json.dump(SCENARIOS[argv[1]](), f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

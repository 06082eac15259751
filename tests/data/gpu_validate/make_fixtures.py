#!/usr/bin/env python3
"""Writes the hand-made traces and stats that scripts/gpu_validate.py is tested on.

Run it from anywhere; it writes next to itself. The consistent pair (good.pt.trace.json,
good.stats.json) mimics three recorded steps of examples/cuda_training_loop as dlprof writes them
with Activity::CUDA: ProfilerStep#2-4, ranges named after the kernels they launch, cuda_runtime
launch calls, kernels on device 0 stream 7, ac2g flows and gpu_user_annotation spans, plus one
kernel launched after the last step (which the checks must leave out). Each other file breaks
exactly one check:
  wrong_count.stats.json   (a) one launch more than the trace holds
  unlinked.pt.trace.json   (b) one kernel of twelve without an External id
  wrong_time.stats.json    (c) CUDA-event time 5% above the kernels' time
  misordered.pt.trace.json (d) a kernel starting before its launch call
  misnamed.pt.trace.json   (e) a launch range named differently from its kernel
graph_good.pt.trace.json mimics `cuda_training_loop --graph --with-stack`: two replays of a graph by
cudaGraphLaunch, each kernel naming the launch range that captured its node and that range's call
stack. graph_misnamed.pt.trace.json breaks (g2): one kernel names another kernel's range.
"""
import copy
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
PID, TID, DEVICE, STREAM = 4242, 4242, 0, 7
STEP_US = 1000.0
# (kernel name as the trace writes it, the range dlprof::cuda::launch opens, parent range, kernel µs)
LAUNCHES = [
    ("void (anonymous namespace)::gemm_tiled<false, false>(int, int, int, float const*, float const*, float*)",
     "gemm_tiled<false, false>", "forward", 210.5),
    ("(anonymous namespace)::bias_relu_forward(int, int, float const*, float*)", "bias_relu_forward", "forward", 18.25),
    ("(anonymous namespace)::softmax_cross_entropy(int, int, float const*, float const*, int const*, float*, float*)",
     "softmax_cross_entropy", "forward", 4.125),
    ("void (anonymous namespace)::sgd_update<float>(int, float, float const*, float*)", "sgd_update<float>", "optimizer",
     22.0),
]
RECORDED_STEPS = [2, 3, 4]


class TraceBuilder:
    def __init__(self):
        self.events = []
        self.next_external_id = 1
        self.next_correlation = 100
        self.by_kernel = {}

    def annotation(self, name, ts, dur):
        external_id = self.next_external_id
        self.next_external_id += 1
        self.events.append({"ph": "X", "cat": "user_annotation", "name": name, "pid": PID, "tid": TID,
                            "ts": round(ts, 3), "dur": round(dur, 3), "args": {"External id": external_id}})
        return external_id

    def launch(self, kernel_name, range_name, ts, gpu_ts, kernel_us):
        """A launch range at ts (10 µs), its cudaLaunchKernel call, the kernel at gpu_ts and their links."""
        external_id = self.annotation(range_name, ts, 10.0)
        correlation = self.next_correlation
        self.next_correlation += 1
        call_ts = ts + 2.0
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": PID, "tid": TID,
                            "ts": round(call_ts, 3), "dur": 6.0,
                            "args": {"External id": external_id, "cbid": 211, "correlation": correlation}})
        self.events.append({"ph": "s", "id": correlation, "pid": PID, "tid": TID, "ts": round(call_ts, 3),
                            "cat": "ac2g", "name": "ac2g"})
        self.events.append({"ph": "X", "cat": "kernel", "name": kernel_name, "pid": DEVICE, "tid": STREAM,
                            "ts": round(gpu_ts, 3), "dur": kernel_us,
                            "args": {"External id": external_id, "queued": 0, "device": DEVICE, "context": 1,
                                     "stream": STREAM, "correlation": correlation, "registers per thread": 32,
                                     "shared memory": 8192, "grid": [64, 32, 1], "block": [16, 16, 1]}})
        self.events.append({"ph": "f", "id": correlation, "pid": DEVICE, "tid": STREAM, "ts": round(gpu_ts, 3),
                            "cat": "ac2g", "name": "ac2g", "bp": "e"})
        self.events.append({"ph": "X", "cat": "gpu_user_annotation", "name": range_name, "pid": DEVICE, "tid": STREAM,
                            "ts": round(gpu_ts, 3), "dur": kernel_us, "args": {"External id": external_id}})
        return gpu_ts + kernel_us

    def step(self, number, start):
        self.annotation(f"ProfilerStep#{number}", start, STEP_US - 1.0)
        parents = {}
        cpu_ts, gpu_ts = start + 50.0, start + 60.0
        for kernel_name, range_name, parent, kernel_us in LAUNCHES:
            if parent not in parents:
                parents[parent] = cpu_ts
                self.annotation(parent, cpu_ts, 48.0)
                cpu_ts += 5.0
            gpu_ts = self.launch(kernel_name, range_name, cpu_ts, max(gpu_ts, cpu_ts + 9.0), kernel_us) + 1.5
            cpu_ts += 15.0
            self.by_kernel.setdefault(range_name, [0, 0.0])
            self.by_kernel[range_name][0] += 1
            self.by_kernel[range_name][1] += kernel_us / 1000.0


def good_trace():
    builder = TraceBuilder()
    for i, number in enumerate(RECORDED_STEPS):
        builder.step(number, i * STEP_US)
    # Launched after the last step (as in Profiler::stop()): not part of the recorded steps.
    builder.launch(LAUNCHES[0][0], LAUNCHES[0][1], len(RECORDED_STEPS) * STEP_US + 20.0,
                   len(RECORDED_STEPS) * STEP_US + 40.0, 200.0)
    trace = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "fake H100"}],
             "traceEvents": builder.events, "traceName": "fake", "baseTimeNanoseconds": 1700000000000000000}
    kernels = sum(count for count, _ in builder.by_kernel.values())
    sum_ms = sum(ms for _, ms in builder.by_kernel.values())
    # CUDA events see a little more than the kernels (launch latency inside the pair): +0.5%.
    stats = {"program": "cuda_training_loop", "host_memory": "pinned", "batch_size": 2048,
             "recorded_steps": RECORDED_STEPS, "kernel_launches": kernels,
             "kernel_event_timing": {"count": kernels, "sum_ms": round(sum_ms * 1.005, 6),
                                     "by_kernel": {name: {"count": count, "sum_ms": round(ms * 1.005, 6)}
                                                   for name, (count, ms) in builder.by_kernel.items()}},
             "mean_step_ms": 1.0}
    return trace, stats


def graph_trace():
    """Two steps, each a train_step_graph range whose cudaGraphLaunch replays LAUNCHES as graph 1."""
    builder = TraceBuilder()
    for i, number in enumerate(RECORDED_STEPS[1:]):
        start = i * STEP_US
        builder.annotation(f"ProfilerStep#{number}", start, STEP_US - 1.0)
        external_id = builder.annotation("train_step_graph", start + 50.0, 20.0)
        correlation = builder.next_correlation
        builder.next_correlation += 1
        builder.events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": PID, "tid": TID,
                               "ts": start + 52.0, "dur": 15.0,
                               "args": {"External id": external_id, "cbid": 311, "correlation": correlation}})
        gpu_ts = start + 70.0
        for node, (kernel_name, range_name, _, kernel_us) in enumerate(LAUNCHES, start=1):
            builder.events.append({"ph": "X", "cat": "kernel", "name": kernel_name, "pid": DEVICE, "tid": STREAM,
                                   "ts": round(gpu_ts, 3), "dur": kernel_us,
                                   "args": {"External id": external_id, "device": DEVICE, "context": 1,
                                            "stream": STREAM, "correlation": correlation, "graph id": 1,
                                            "graph node id": 4294967296 + node, "captured by": range_name,
                                            "capture call stack": "cuda_training_loop+0x2f1a0;cuda_training_loop+0x2c0b4;"
                                                                  "cuda_training_loop+0x1e9c8;libc.so.6+0x2724a"}})
            gpu_ts += kernel_us + 1.5
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "fake H100"}],
            "traceEvents": builder.events, "traceName": "fake", "baseTimeNanoseconds": 1700000000000000000}


def kernels_of(trace):
    return [e for e in trace["traceEvents"] if e.get("cat") == "kernel"]


def write(name, value):
    with open(os.path.join(HERE, name), "w", encoding="utf-8") as file:
        json.dump(value, file, indent=1)
        file.write("\n")


def main():
    trace, stats = good_trace()
    write("good.pt.trace.json", trace)
    write("good.stats.json", stats)

    wrong_count = copy.deepcopy(stats)
    wrong_count["kernel_launches"] += 1
    write("wrong_count.stats.json", wrong_count)

    wrong_time = copy.deepcopy(stats)
    wrong_time["kernel_event_timing"]["sum_ms"] = round(wrong_time["kernel_event_timing"]["sum_ms"] * 1.05, 6)
    write("wrong_time.stats.json", wrong_time)

    unlinked = copy.deepcopy(trace)
    del kernels_of(unlinked)[4]["args"]["External id"]
    write("unlinked.pt.trace.json", unlinked)

    misordered = copy.deepcopy(trace)
    kernel = kernels_of(misordered)[5]
    call = next(e for e in misordered["traceEvents"]
                if e.get("cat") == "cuda_runtime" and e["args"]["correlation"] == kernel["args"]["correlation"])
    kernel["ts"] = round(call["ts"] - 1.0, 3)
    write("misordered.pt.trace.json", misordered)

    misnamed = copy.deepcopy(trace)
    external_id = kernels_of(misnamed)[6]["args"]["External id"]
    next(e for e in misnamed["traceEvents"] if e.get("cat") == "user_annotation"
         and e["args"]["External id"] == external_id)["name"] = "cudaLaunchKernel"
    write("misnamed.pt.trace.json", misnamed)

    graph = graph_trace()
    write("graph_good.pt.trace.json", graph)
    kernels_of(graph)[2]["args"]["captured by"] = LAUNCHES[0][1]
    write("graph_misnamed.pt.trace.json", graph)


if __name__ == "__main__":
    main()

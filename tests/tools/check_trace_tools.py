"""Opens dlprof traces with the tools users open them with and checks what those tools see.

Usage: check_trace_tools.py TRACE_DIR [--expect-steps 2,3,4] [--gpu] [--torch-ops aten::conv2d,...]

* Holistic Trace Analysis (pip: HolisticTraceAnalysis): TraceAnalysis(trace_dir) loads every
  file, finds rank 0 through its `"rank": N` regex, and assigns events to ProfilerStep iterations.
* TensorBoard's profiler plugin (pip: torch-tb-profiler 0.4.3): its RunLoader discovers the file
  by name, parses it and builds the Overview with one row per ProfilerStep. Release 0.4.3 keeps no
  `user_annotation` slice but ProfilerStep#N and NCCL ops (create_trace_event returns None for the
  rest), so its DataLoader/CPU Exec columns stay empty for range-only traces, torch's own
  included; the step rows and their durations are what it can show.
With --gpu, the trace's GPU side too: HTA's five analyses (temporal breakdown, kernel-type
breakdown, idle-time breakdown, communication/computation overlap, kernel launch statistics) and
the plugin's GPU overview (kernel time, GPU summary from deviceProperties and kernel args).
With --torch-ops (a LibTorch trainer's trace with record_shapes and profile_memory), the plugin's
Operator view must list those ops with their calls and host times, and its Memory view must show
a CPU peak.
Exits non-zero with a message naming what a tool could not see.
"""
import argparse
import logging
import sys


def fail(message):
    print(f"check_trace_tools: {message}", file=sys.stderr)
    sys.exit(1)


def check_hta(trace_dir, expected_steps):
    from hta.trace_analysis import TraceAnalysis

    analysis = TraceAnalysis(trace_dir=trace_dir)
    ranks = sorted(analysis.t.traces.keys())
    if ranks != [0]:
        fail(f"HTA: expected rank [0], found {ranks}")
    symbols = analysis.t.symbol_table.get_sym_table()
    steps = sorted(int(s.split("#")[1]) for s in symbols if s.startswith("ProfilerStep#"))
    if expected_steps and steps != expected_steps:
        fail(f"HTA: expected ProfilerStep numbers {expected_steps}, found {steps}")
    frame = analysis.t.get_trace(0)
    iterations = sorted(i for i in frame["iteration"].unique() if i >= 0)
    if expected_steps and not set(iterations) <= set(expected_steps):
        fail(f"HTA: events assigned to iterations {iterations}, outside {expected_steps}")
    print(f"HTA: rank 0, {len(frame)} events kept, ProfilerSteps {steps}, iterations {iterations}")


def check_hta_gpu(trace_dir):
    from hta.trace_analysis import TraceAnalysis

    analysis = TraceAnalysis(trace_dir=trace_dir)
    temporal = analysis.get_temporal_breakdown(visualize=False)
    compute_us = float(temporal["compute_time(us)"].iloc[0])
    if compute_us <= 0:
        fail(f"HTA temporal breakdown: no compute time\n{temporal}")
    kernel_types, kernels = analysis.get_gpu_kernel_breakdown(visualize=False)
    types = set(kernel_types["kernel_type"])
    for expected in ("COMPUTATION", "COMMUNICATION", "MEMORY"):
        if not any(expected in t for t in types):
            fail(f"HTA kernel breakdown: no {expected} kernels in {sorted(types)}")
    idle = analysis.get_idle_time_breakdown(visualize=False)[0]
    if set(idle["idle_category"]) - {"host_wait", "kernel_wait", "other"} or idle.empty:
        fail(f"HTA idle-time breakdown: unexpected result\n{idle}")
    overlap = analysis.get_comm_comp_overlap(visualize=False)
    overlap_pct = float(overlap["comp_comm_overlap_pctg"].iloc[0])
    if not 0 < overlap_pct <= 100:
        fail(f"HTA communication/computation overlap: {overlap_pct}%")
    launches = analysis.get_cuda_kernel_launch_stats(visualize=False)
    if 0 not in launches or launches[0].empty or (launches[0]["launch_delay"] < 0).any():
        fail(f"HTA kernel launch stats: {launches}")
    print(f"HTA GPU: compute {compute_us:.0f} us ({float(temporal['compute_time_pctg'].iloc[0])}%), "
          f"kernel types {sorted(types)}, {len(kernels)} kernel names, idle rows {len(idle)}, "
          f"comm/comp overlap {overlap_pct}%, {len(launches[0])} launches")


def check_tensorboard_gpu(trace_dir):
    from torch_tb_profiler import io
    from torch_tb_profiler.profiler.loader import RunLoader

    profile = list(RunLoader("dlprof", trace_dir, io.Cache()).load().profiles.values())[0]
    if not (profile.has_kernel and profile.has_memcpy_or_memset):
        fail("TensorBoard plugin: kernels or copies not recognised")
    roles = {child["name"]: child["value"] for child in profile.overview["performance"][0]["children"]}
    if roles.get("Kernel", 0) <= 0:
        fail(f"TensorBoard plugin: no Kernel time in the step breakdown {roles}")
    summary = {row["title"]: row["value"] for row in profile.gpu_summary}
    for key in ("Name", "Compute Capability", "GPU Utilization", "Est. SM Efficiency", "Est. Achieved Occupancy"):
        if not summary.get(key):
            fail(f"TensorBoard plugin: GPU summary lacks {key}: {summary}")
    print(f"TensorBoard plugin GPU: step breakdown (us) {roles}, summary {summary}")


def check_tensorboard(trace_dir, expected_steps):
    from torch_tb_profiler import io
    from torch_tb_profiler.profiler.loader import RunLoader

    run = RunLoader("dlprof", trace_dir, io.Cache()).load()
    profiles = list(run.profiles.values())
    if not profiles:
        fail("TensorBoard plugin: no profile parsed (file name or content rejected)")
    overview = profiles[0].overview
    steps = [int(row[0]) for row in overview["steps"]["rows"]]
    if expected_steps and steps != expected_steps:
        fail(f"TensorBoard plugin: expected steps {expected_steps}, found {steps}")
    average_step_us = overview["performance"][0]["value"]
    if average_step_us <= 0:
        fail(f"TensorBoard plugin: average step time {average_step_us} us")
    roles = {child["name"]: child["value"] for child in overview["performance"][0]["children"]}
    print(f"TensorBoard plugin: steps {steps}, average step breakdown (us) {roles}")


def check_tensorboard_torch(trace_dir, expected_ops):
    from torch_tb_profiler import io
    from torch_tb_profiler.profiler.loader import RunLoader

    profile = list(RunLoader("dlprof", trace_dir, io.Cache()).load().profiles.values())[0]
    views = [getattr(view, "display_name", str(view)) for view in profile.views]
    if "Operator" not in views or "Memory" not in views:
        fail(f"TensorBoard plugin: expected Operator and Memory views, found {views}")
    operators = {row["name"]: row for row in profile.operation_table_by_name["data"]}
    missing = [op for op in expected_ops if op not in operators]
    if missing:
        fail(f"TensorBoard plugin: Operator view lacks {missing}")
    for op in expected_ops:
        if operators[op]["calls"] <= 0 or operators[op]["host_total_duration"] <= 0:
            fail(f"TensorBoard plugin: Operator view row {operators[op]}")
    peaks = profile.get_memory_curve()["metadata"]["peaks"]
    if "CPU" not in peaks:
        fail(f"TensorBoard plugin: Memory view has no CPU peak: {peaks}")
    print(f"TensorBoard plugin: {len(operators)} operators, memory {peaks}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("trace_dir")
    parser.add_argument("--expect-steps", default="")
    parser.add_argument("--gpu", action="store_true", help="also check the GPU analyses")
    parser.add_argument("--torch-ops", default="", help="ops the Operator view must list (comma-separated)")
    args = parser.parse_args()
    expected_steps = [int(s) for s in args.expect_steps.split(",") if s]
    logging.disable(logging.WARNING)
    check_hta(args.trace_dir, expected_steps)
    check_tensorboard(args.trace_dir, expected_steps)
    if args.torch_ops:
        check_tensorboard_torch(args.trace_dir, args.torch_ops.split(","))
    if args.gpu:
        check_hta_gpu(args.trace_dir)
        check_tensorboard_gpu(args.trace_dir)


if __name__ == "__main__":
    main()

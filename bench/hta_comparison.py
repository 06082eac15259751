#!/usr/bin/env python3
"""dlprof's load + full analysis of a trace against Holistic Trace Analysis's load + temporal +
kernel-type breakdown, on the same file, in the same run: wall time and peak memory.

    python3 bench/hta_comparison.py --analysis-bench build-bench/bench/analysis_bench \
        --hta-python build/venv-trace-tools/bin/python [--trace DIR] [--runs 5]

HTA runs in a process of its own per repetition (its time excludes importing HTA and pandas; its
memory is the process's peak RSS, and also the growth over the RSS after the imports). dlprof's
time is analysis_bench's BM_load_and_analyze median (Google Benchmark) and its memory the peak RSS
of `analysis_bench --peak-rss`, a process that loads and analyses the file once. Prints a
Markdown table for bench/RESULTS.md.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HTA_SCRIPT = r"""
import resource, sys, time, json
import logging
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
base_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
analysis = TraceAnalysis(trace_dir=sys.argv[1])
temporal = analysis.get_temporal_breakdown(visualize=False)
kernel_types = analysis.get_gpu_kernel_breakdown(visualize=False)
seconds = time.perf_counter() - start
peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"seconds": seconds, "peak_kib": peak_kib, "base_kib": base_kib}))
"""

SETS = {
    "hta-1rank-v100-resnet-ns": "v100_resnet_ns",
    "hta-2rank-a100-sampled": "a100_sampled_rank0",
    "hta-1rank-a100-simple-add": "a100_simple_add",
}


def run_hta(python, trace_dir, runs):
    results = []
    for _ in range(runs):
        out = subprocess.run([python, "-c", HTA_SCRIPT, trace_dir], check=True, capture_output=True, text=True).stdout
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def run_dlprof(bench, label, trace_file, runs):
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run([bench, f"--benchmark_filter=^BM_load_and_analyze/{label}(/|$)", f"--benchmark_repetitions={runs}",
                        "--benchmark_report_aggregates_only=true", f"--benchmark_out={out.name}",
                        "--benchmark_out_format=json"], check=True, capture_output=True)
        document = json.load(open(out.name))
    median = next(b for b in document["benchmarks"] if b.get("aggregate_name") == "median")
    seconds = median["real_time"] / 1e3  # ms
    peak = subprocess.run([bench, "--peak-rss", trace_file], check=True, capture_output=True, text=True).stdout.split()
    return {"seconds": seconds, "mb_per_s": median["MB/s"], "peak_kib": int(peak[1]), "context": document["context"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--analysis-bench", required=True)
    parser.add_argument("--hta-python", required=True)
    parser.add_argument("--traces", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data", "reference-traces"))
    parser.add_argument("--set", default="hta-1rank-v100-resnet-ns", choices=sorted(SETS))
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    trace_dir = os.path.join(args.traces, args.set)
    trace_file = os.path.join(trace_dir, sorted(os.listdir(trace_dir))[0])
    hta = run_hta(args.hta_python, trace_dir, args.runs)
    dlprof = run_dlprof(args.analysis_bench, SETS[args.set], trace_file, args.runs)

    hta_seconds = statistics.median(r["seconds"] for r in hta)
    hta_peak = statistics.median(r["peak_kib"] for r in hta) / 1024
    hta_growth = statistics.median(r["peak_kib"] - r["base_kib"] for r in hta) / 1024
    speedup = hta_seconds / dlprof["seconds"]
    memory_ratio = (dlprof["peak_kib"] / 1024) / hta_peak
    print(f"# {dlprof['context']['date']}  {args.set}  {dlprof['context']['num_cpus']} CPUs  medians of {args.runs}")
    print()
    print("| | wall time | peak RSS (MiB) |")
    print("| --- | ---: | ---: |")
    print(f"| HTA 0.5.0: TraceAnalysis + get_temporal_breakdown + get_gpu_kernel_breakdown | {hta_seconds * 1e3:.0f} ms "
          f"| {hta_peak:.1f} (+{hta_growth:.1f} over its imports) |")
    print(f"| dlprof: read_trace + every analysis of the report (`BM_load_and_analyze`) | {dlprof['seconds'] * 1e3:.1f} ms "
          f"({dlprof['mb_per_s']:.0f} MB/s of JSON) | {dlprof['peak_kib'] / 1024:.1f} |")
    print()
    verdict_time = "met" if speedup >= 25 else "MISSED"
    verdict_memory = "met" if memory_ratio <= 1 / 3 else "MISSED"
    print(f"dlprof is {speedup:.1f}x faster than HTA (target >= 25x: {verdict_time}); its peak memory is "
          f"{memory_ratio:.3f}x HTA's (target <= 0.333: {verdict_memory}); against HTA's growth over its imports: "
          f"{(dlprof['peak_kib'] / 1024) / hta_growth:.3f}x")
    return 0 if speedup >= 25 and memory_ratio <= 1 / 3 else 1


if __name__ == "__main__":
    sys.exit(main())

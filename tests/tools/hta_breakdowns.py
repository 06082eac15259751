"""Prints what Holistic Trace Analysis 0.5.0 computes for each rank of a trace set, as JSON: the
oracle the HTA-compatible analyses of dlprof/analysis/ are compared with.

Usage: hta_breakdowns.py TRACE_DIR [--include-last-step]

Each rank is loaded on its own (TraceAnalysis(trace_files={rank: path})), so that the kernel-type
shares are per rank (HTA's get_gpu_kernel_breakdown pools all loaded ranks). Times are µs, as HTA
gives them. With --include-last-step, HTA keeps the last ProfilerStep
(include_last_profiler_step=True); set HTA_DISABLE_NS_ROUNDING=1 as well to get dlprof's default
(exact) analyses.
"""
import argparse
import gzip
import json
import logging
import math
import os
import re
import sys


def rank_of(path):
    # HTA's own rule: the first `"rank": N` in the file, else 0.
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as lines:
        for line in lines:
            match = re.search(r'"rank":\s+(\d+)', line)
            if match:
                return int(match.group(1))
    return 0


def number(value):
    value = float(value)
    return None if math.isnan(value) else value


def analyse(trace_dir, path, rank, include_last_step):
    from hta.trace_analysis import TraceAnalysis

    analysis = TraceAnalysis(trace_files={rank: path}, trace_dir=trace_dir,
                             include_last_profiler_step=include_last_step)
    temporal = analysis.get_temporal_breakdown(visualize=False).iloc[0]
    kernel_types, kernels = analysis.get_gpu_kernel_breakdown(visualize=False)
    overlap = analysis.get_comm_comp_overlap(visualize=False).iloc[0]
    idle, _ = analysis.get_idle_time_breakdown(ranks=[rank], visualize=False)
    launches = analysis.get_cuda_kernel_launch_stats(ranks=[rank], visualize=False)[rank]
    return {
        "rank": rank,
        "temporal_breakdown": {
            "idle_us": number(temporal["idle_time(us)"]),
            "compute_us": number(temporal["compute_time(us)"]),
            "non_compute_us": number(temporal["non_compute_time(us)"]),
            "kernel_time_us": number(temporal["kernel_time(us)"]),
            "idle_pct": number(temporal["idle_time_pctg"]),
            "compute_pct": number(temporal["compute_time_pctg"]),
            "non_compute_pct": number(temporal["non_compute_time_pctg"]),
        },
        "kernel_type_breakdown": [
            {"type": row["kernel_type"], "time_us": number(row["sum"]), "pct": number(row["percentage"])}
            for _, row in kernel_types.iterrows()
        ],
        "top_kernels": [
            {"type": row["kernel_type"], "name": row["name"], "sum_us": number(row["sum (us)"])}
            for _, row in kernels.iterrows()
        ],
        "comm_comp_overlap_pct": number(overlap["comp_comm_overlap_pctg"]),
        "idle_time_breakdown": [
            {"stream": int(row["stream"]), "category": row["idle_category"], "idle_us": number(row["idle_time"])}
            for _, row in idle.iterrows()
        ],
        "launches": len(launches),
        "launch_delay_sum_us": number(launches["launch_delay"].sum()) if len(launches) else 0.0,
        "cpu_duration_sum_us": number(launches["cpu_duration"].sum()) if len(launches) else 0.0,
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("trace_dir")
    parser.add_argument("--include-last-step", action="store_true")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    paths = sorted(os.path.join(args.trace_dir, name) for name in os.listdir(args.trace_dir)
                   if name.endswith(".json") or name.endswith(".gz"))
    ranks = [analyse(args.trace_dir, path, rank_of(path), args.include_last_step) for path in paths]
    json.dump({"ranks": sorted(ranks, key=lambda r: r["rank"])}, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()

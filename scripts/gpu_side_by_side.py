#!/usr/bin/env python3
"""dlprof beside torch.profiler (LibTorch's Kineto profiler) on one CUDA training loop.

    scripts/gpu_side_by_side.py --program build/gpu-validate-torch/bench/torch_profiler_side_by_side \\
        --out DIR [--rounds 3] [--batch-size 256] [--launches 1000]

Runs bench/torch_profiler_side_by_side once per profiler (none, dlprof, torch) and workload (train,
launch) in each round, in a rotated order, so that neither profiler always runs first or last, and
reports:
  - the multiset of GPU kernel names in the 5 recorded steps of the train workload, dlprof's
    against torch.profiler's, with every difference listed (memcpy and memset too);
  - the share of kernels linked to an op (a kernel's External id equals a cpu_op's) by each;
  - the step-time overhead of each against no profiler: medians of all rounds' active steps;
  - the CPU cost per kernel launch of each, each launch one ATen op and one kernel: the launching
    thread's CPU time in the launch loop (median, less no profiler's, over the launches), and the
    same for the loop's wall time and the whole step's;
  - the time each takes to close its window (stop, or disableProfiler and save).
The first round's traces are kept in DIR/<workload>/<profiler>.pt.trace.json; the summary goes to
DIR/side_by_side.json. Exits 1 when a run fails or the kernel multisets differ, 77 when the
program finds no CUDA device. Standard library only.
"""
import argparse
import collections
import json
import os
import shutil
import statistics
import subprocess
import sys

PROFILERS = ["none", "dlprof", "torch"]
WORKLOADS = ["train", "launch"]
PREFIX = "side-by-side: "


def run(program, profiler, workload, log_dir, args):
    command = [program, "--profiler", profiler, "--workload", workload, "--log-dir", log_dir,
               "--batch-size", str(args.batch_size), "--launches", str(args.launches)]
    try:
        completed = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        raise SystemExit(f"gpu_side_by_side: {' '.join(command)} ran past {args.timeout} s")
    if completed.returncode == 77:
        print(completed.stdout.strip())
        sys.exit(77)
    lines = [line for line in completed.stdout.splitlines() if line.startswith(PREFIX)]
    if completed.returncode != 0 or not lines:
        sys.stderr.write(completed.stdout[-2000:] + completed.stderr[-4000:])
        raise SystemExit(f"gpu_side_by_side: {' '.join(command)} failed with status {completed.returncode}")
    return json.loads(lines[-1][len(PREFIX):])


def trace_summary(path):
    with open(path) as stream:
        events = json.load(stream)["traceEvents"]
    op_ids = {e.get("args", {}).get("External id") for e in events if e.get("cat") == "cpu_op"} - {None}
    kernels = [e for e in events if e.get("cat") == "kernel"]
    linked = [e for e in kernels if e.get("args", {}).get("External id") in op_ids]
    return {
        "kernels": collections.Counter(e["name"] for e in kernels),
        "copies": collections.Counter(f"{e.get('cat')}: {e['name']}" for e in events
                                      if e.get("cat") in ("gpu_memcpy", "gpu_memset")),
        "api_calls": collections.Counter(e["name"] for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")),
        "kernel_count": len(kernels),
        "linked_to_op": len(linked),
        "cpu_ops": sum(1 for e in events if e.get("cat") == "cpu_op"),
        "steps": sum(1 for e in events if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X"),
        "events": len(events),
    }


def multiset_differences(mine, theirs):
    """Lines naming each name whose count differs: 'name: dlprof N, torch M'."""
    return [f"{name}: dlprof {mine.get(name, 0)}, torch {theirs.get(name, 0)}"
            for name in sorted(set(mine) | set(theirs)) if mine.get(name, 0) != theirs.get(name, 0)]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--program", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--launches", type=int, default=1000)
    parser.add_argument("--timeout", type=float, default=120, help="seconds one run may take")
    args = parser.parse_args()

    step_ms = {(p, w): [] for p in PROFILERS for w in WORKLOADS}
    loop_cpu_ms = {p: [] for p in PROFILERS}
    loop_wall_ms = {p: [] for p in PROFILERS}
    close_ms = {(p, w): [] for p in PROFILERS for w in WORKLOADS}
    for round_index in range(args.rounds):
        order = PROFILERS[round_index % 3:] + PROFILERS[:round_index % 3]
        for workload in WORKLOADS:
            for profiler in order:
                log_dir = os.path.join(args.out, "runs", f"round{round_index}", workload)
                result = run(args.program, profiler, workload, log_dir, args)
                step_ms[profiler, workload] += result["active_step_ms"]
                close_ms[profiler, workload].append(result["close_ms"])
                if workload == "launch":
                    loop_cpu_ms[profiler] += result["launch_loop_cpu_ms"]
                    loop_wall_ms[profiler] += result["launch_loop_wall_ms"]
        print(f"round {round_index + 1}/{args.rounds}: " + ", ".join(
            f"{p}/{w} {statistics.median(step_ms[p, w][-5:]):.3f} ms" for w in WORKLOADS for p in order), flush=True)

    summary = {"batch_size": args.batch_size, "launches_per_step": args.launches, "rounds": args.rounds,
               "median_step_ms": {}, "overhead_pct": {}, "cost_per_launch_us": {}, "close_ms": {}, "traces": {}}
    for workload in WORKLOADS:
        for profiler in PROFILERS:
            summary["median_step_ms"][f"{workload}/{profiler}"] = statistics.median(step_ms[profiler, workload])
        for profiler in PROFILERS[1:]:
            bare = summary["median_step_ms"][f"{workload}/none"]
            mine = summary["median_step_ms"][f"{workload}/{profiler}"]
            summary["overhead_pct"][f"{workload}/{profiler}"] = 100 * (mine - bare) / bare
            summary["close_ms"][f"{workload}/{profiler}"] = statistics.median(close_ms[profiler, workload])
            if workload == "launch":
                cpu, cpu_bare = statistics.median(loop_cpu_ms[profiler]), statistics.median(loop_cpu_ms["none"])
                wall, wall_bare = statistics.median(loop_wall_ms[profiler]), statistics.median(loop_wall_ms["none"])
                summary["cost_per_launch_us"][profiler] = {
                    "cpu": 1000 * (cpu - cpu_bare) / args.launches,
                    "launch_loop_wall": 1000 * (wall - wall_bare) / args.launches,
                    "step": 1000 * (mine - bare) / args.launches}
        if workload == "launch":
            summary["launch_us_without_profiler"] = {
                "cpu": 1000 * statistics.median(loop_cpu_ms["none"]) / args.launches,
                "launch_loop_wall": 1000 * statistics.median(loop_wall_ms["none"]) / args.launches}

    failed = False
    for workload in WORKLOADS:
        kept = os.path.join(args.out, workload)
        os.makedirs(kept, exist_ok=True)
        summaries = {}
        for profiler in PROFILERS[1:]:
            source = os.path.join(args.out, "runs", "round0", workload, f"{profiler}.pt.trace.json")
            shutil.copy(source, os.path.join(kept, f"{profiler}.pt.trace.json"))
            summaries[profiler] = trace_summary(source)
        kernels = multiset_differences(summaries["dlprof"]["kernels"], summaries["torch"]["kernels"])
        copies = multiset_differences(summaries["dlprof"]["copies"], summaries["torch"]["copies"])
        summary["traces"][workload] = {
            profiler: {key: dict(value) if key == "api_calls" else value for key, value in s.items()
                       if key not in ("kernels", "copies")}
            for profiler, s in summaries.items()}
        summary["traces"][workload]["kernel_differences"] = kernels
        summary["traces"][workload]["copy_differences"] = copies
        summary["traces"][workload]["distinct_kernels"] = len(summaries["torch"]["kernels"])
        failed |= bool(kernels)
    shutil.rmtree(os.path.join(args.out, "runs"))
    with open(os.path.join(args.out, "side_by_side.json"), "w") as stream:
        json.dump(summary, stream, indent=2)

    print(f"\nbatch {args.batch_size}, {args.launches} launches per launch step, {args.rounds} rounds "
          f"(medians of {5 * args.rounds} active steps each)")
    for workload in WORKLOADS:
        traces = summary["traces"][workload]
        print(f"\n{workload}: no profiler {summary['median_step_ms'][f'{workload}/none']:.3f} ms per step")
        if workload == "launch":
            bare = summary["launch_us_without_profiler"]
            print(f"  a launch without a profiler: {bare['cpu']:.2f} us of CPU, {bare['launch_loop_wall']:.2f} us of wall time")
        for profiler in PROFILERS[1:]:
            t = traces[profiler]
            line = (f"  {profiler:6}: {summary['median_step_ms'][f'{workload}/{profiler}']:.3f} ms "
                    f"({summary['overhead_pct'][f'{workload}/{profiler}']:+.2f} %), close {summary['close_ms'][f'{workload}/{profiler}']:.1f} ms; "
                    f"{t['kernel_count']} kernels, {t['linked_to_op']} linked to an op "
                    f"({100 * t['linked_to_op'] / max(t['kernel_count'], 1):.1f} %), {t['cpu_ops']} ops, {t['steps']} steps, "
                    f"{t['events']} events")
            if workload == "launch":
                cost = summary["cost_per_launch_us"][profiler]
                line += (f"; per launch: {cost['cpu']:+.2f} us of the launching thread's CPU, "
                         f"{cost['launch_loop_wall']:+.2f} us of the launch loop's wall time, {cost['step']:+.2f} us of the step's")
            print(line)
            calls = collections.Counter(t["api_calls"])
            print(f"          CUDA calls in the trace: {sum(calls.values())}: "
                  + ", ".join(f"{name} {count}" for name, count in calls.most_common(6)))
        print(f"  kernel names: {traces['distinct_kernels']} distinct; "
              + ("the multisets match" if not traces["kernel_differences"] else "DIFFER: " + "; ".join(traces["kernel_differences"])))
        if traces["copy_differences"]:
            print("  copies and memsets differ: " + "; ".join(traces["copy_differences"]))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

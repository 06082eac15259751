#!/usr/bin/env python3
"""Per-op overhead of each profiler mode of bench/torch_bench.cpp, from its JSON output.

    build-bench/bench/torch_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \\
        --benchmark_out=torch.json --benchmark_out_format=json
    python3 bench/torch_overhead.py torch.json            # or: torch_bench --benchmark_format=json | python3 bench/torch_overhead.py

For every workload (tiny_mlp, mnist_cnn) and mode, with the step time t (median of the
repetitions when there are aggregates, CPU time unless --real):

    overhead per op = (t(mode) - t(no_profiler)) / ops_per_step

as the benchmark timed it: dlprof's recording modes include building a trace every W steps (inside
prof.step(), on the training thread); LibTorch's profilers are restarted every W steps with timing
paused, so their figure is collection only. `close` is the time each spent closing its windows, per
recorded op (counter close_ns_per_op), so the table also gives both on one footing:

    collect only = overhead - close (dlprof)     | overhead (LibTorch's)
    with trace   = overhead (dlprof)             | overhead + close (LibTorch's)

Ratios are against record_profile and kineto_state_collector of the same workload, per column.

The paired_<mode> benchmarks (counter paired_overhead_ns_per_op) measure the same overhead inside one
benchmark, W recorded steps alternating with W bare steps, so that the machine's drift between
repetitions cancels; they get a table of their own, with the difference of the step times' 10th, 25th
and 50th percentiles beside the means'.

The in_callbacks benchmark (counters <mode>_ns_per_op) gives the time spent inside each collector's
own callbacks, the collectors taking turns window by window: the steadiest figure for mnist_cnn,
whose step time drifts by more than any collector costs. The same turns' whole steps (counters
<mode>_step_ns_per_op) take in what the callbacks leave out, such as LibTorch boxing the inputs;
two empty callbacks taking turns with them (floor_callback, floor_callback_inputs) measure that
boxing (boxing_step_ns_per_op).
Standard library only.
"""
import argparse
import json
import re
import sys

MODES = [
    "no_profiler",
    "dlprof_idle",
    "dlprof_ops",
    "dlprof_ops_shapes",
    "record_profile",
    "kineto_state_collector",
    "kineto_state_collector_shapes",
]
DLPROF_RECORDING = {"dlprof_ops", "dlprof_ops_shapes"}
UNIT_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


def load(stream):
    """{run_name: entry}: the median aggregate when there is one, else the mean of the iterations."""
    doc = json.load(stream)
    medians, runs = {}, {}
    for entry in doc.get("benchmarks", []):
        if entry.get("error_occurred"):
            continue
        # "tiny_mlp/paired_dlprof_ops/min_time:0.500/manual_time" -> "tiny_mlp/paired_dlprof_ops"
        name = re.sub(r"(/min_time:[0-9.]+|/manual_time)+$", "", entry.get("run_name", entry["name"]))
        if entry.get("run_type") == "aggregate":
            if entry.get("aggregate_name") == "median":
                medians[name] = entry
        else:
            runs.setdefault(name, []).append(entry)
    results = dict(medians)
    for name, entries in runs.items():
        if name in results:
            continue
        merged = dict(entries[0])
        for key, value in entries[0].items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                merged[key] = sum(e[key] for e in entries) / len(entries)
        results[name] = merged
    return doc.get("context", {}), results


def step_ns(entry, real):
    return entry["real_time" if real else "cpu_time"] * UNIT_NS[entry.get("time_unit", "ns")]


def ratio(a, b):
    if a is None or b is None or b <= 0:
        return None
    return a / b


def fmt(value, spec):
    if value is None:
        width = "".join(c for c in spec.split(".")[0] if c.isdigit())
        return format("n/a", ">" + width) if width else "n/a"
    return format(value, spec)

def verdict(what, value, target):
    state = "n/a" if value is None else ("met" if value <= target else "MISSED")
    print(f"{what:<78} {fmt(value, '>6.3f')}  target <= {target:<4} {state}")


def print_separate(workload, results, real):
    """The table of the separate benchmarks: each mode against no_profiler."""
    base = results.get(f"{workload}/no_profiler")
    if base is None:
        return
    ops = base.get("ops_per_step")
    base_ns = step_ns(base, real)
    modes = [m for m in MODES if f"{workload}/{m}" in results]
    modes += sorted(n.split("/", 1)[1] for n in results if n.startswith(workload + "/")
                    and n.split("/", 1)[1] not in MODES
                    and not n.split("/", 1)[1].startswith(("paired_", "in_callbacks")))
    rows = {}
    for mode in modes:
        entry = results[f"{workload}/{mode}"]
        t = step_ns(entry, real)
        overhead = (t - base_ns) / ops
        close = entry.get("close_ns_per_op")
        if mode in DLPROF_RECORDING:
            collect, complete = (overhead - close if close is not None else None), overhead
        elif close is not None:
            collect, complete = overhead, overhead + close
        else:
            collect = complete = overhead
        rows[mode] = (t, overhead, close, collect, complete)

    def col(mode, index):
        return rows[mode][index] if mode in rows else None

    print(f"\n## {workload}: {ops:g} ops per step; overhead per op = (mode - no_profiler) / ops_per_step")
    header = (f"| {'mode':<38} | {'step (us)':>10} | {'overhead/op (ns)':>16} | {'close/op (ns)':>13} | "
              f"{'collect only (ns)':>17} | {'with trace (ns)':>15} | {'x RecordProfile':>15} | {'x KINETO-state':>14} |")
    print(header)
    print("|" + "|".join("-" * (len(cell) + 0) if i == 0 else "-" * (len(cell) - 1) + ":" for i, cell in
                         enumerate(header.split("|")[1:-1])) + "|")
    for mode in modes:
        t, overhead, close, collect, complete = rows[mode]
        recording = mode not in ("no_profiler", "dlprof_idle") and not mode.startswith("floor_")
        vs_rp = ratio(overhead, col("record_profile", 1)) if recording else None
        vs_k = ratio(overhead, col("kineto_state_collector", 1)) if recording else None
        print(f"| {mode:<38} | {t / 1e3:>10.2f} | {overhead:>16.1f} | {fmt(close, '>13.1f')} | "
              f"{fmt(collect, '>17.1f')} | {fmt(complete, '>15.1f')} | {fmt(vs_rp, '>15.3f')} | {fmt(vs_k, '>14.3f')} |")

    print()
    idle = ratio(col("dlprof_idle", 0), base_ns)
    print(f"dlprof_idle / no_profiler step time: {fmt(idle, '.3f')} (observer removed while idle: expect 1 within noise)")

    verdict("dlprof_ops_shapes / record_profile, per-op overhead as timed",
            ratio(col("dlprof_ops_shapes", 1), col("record_profile", 1)), 0.5)
    verdict("dlprof_ops_shapes / kineto_state_collector, per-op overhead as timed",
            ratio(col("dlprof_ops_shapes", 1), col("kineto_state_collector", 1)), 1.0)
    verdict("  like for like, collection only (dlprof's trace building left out)",
            ratio(col("dlprof_ops_shapes", 3), col("kineto_state_collector", 3)), 1.0)
    verdict("  like for like, with trace building (LibTorch's close added)",
            ratio(col("dlprof_ops_shapes", 4), col("kineto_state_collector", 4)), 1.0)
    verdict("  against the KINETO-state collector with shapes, as timed",
            ratio(col("dlprof_ops_shapes", 1), col("kineto_state_collector_shapes", 1)), 1.0)
    verdict("dlprof_ops (no shapes) / kineto_state_collector, as timed",
            ratio(col("dlprof_ops", 1), col("kineto_state_collector", 1)), 1.0)


def print_paired(workload, results):
    """The table of the paired_<mode> benchmarks (counter paired_overhead_ns_per_op)."""
    paired = {n.split("/", 1)[1][len("paired_"):]: e for n, e in results.items()
              if n.startswith(workload + "/paired_")}
    paired = dict(sorted(paired.items(), key=lambda item: (MODES.index(item[0]) if item[0] in MODES else len(MODES),
                                                          item[0])))
    if not paired:
        return

    def po(mode):
        entry = paired.get(mode)
        return None if entry is None else entry.get("paired_overhead_ns_per_op")

    print(f"\n### {workload}, paired: W recorded steps alternating with W bare steps in one benchmark "
          "(thread CPU time; drift cancels)")
    header = (f"| {'mode':<38} | {'bare step (us)':>14} | {'overhead/op (ns)':>16} | {'x RecordProfile':>15} | "
              f"{'x KINETO-state':>14} | {'p10 (ns)':>8} | {'p25 (ns)':>8} | {'p50 (ns)':>8} |")
    print(header)
    print("|" + "|".join("-" * len(cell) if i == 0 else "-" * (len(cell) - 1) + ":" for i, cell in
                         enumerate(header.split("|")[1:-1])) + "|")
    for mode, entry in paired.items():
        print(f"| {mode:<38} | {entry.get('paired_bare_us', 0):>14.2f} | {fmt(po(mode), '>16.1f')} | "
              f"{fmt(ratio(po(mode), po('record_profile')), '>15.3f')} | "
              f"{fmt(ratio(po(mode), po('kineto_state_collector')), '>14.3f')} | "
              + " | ".join(fmt(entry.get(f"paired_{q}_overhead_ns_per_op"), '>8.1f') for q in ("p10", "p25", "p50"))
              + " |")
    print()
    verdict("paired: dlprof_ops_shapes / record_profile", ratio(po("dlprof_ops_shapes"), po("record_profile")), 0.5)
    verdict("paired: dlprof_ops_shapes / kineto_state_collector",
            ratio(po("dlprof_ops_shapes"), po("kineto_state_collector")), 1.0)
    verdict("paired: dlprof_ops_shapes / kineto_state_collector_shapes",
            ratio(po("dlprof_ops_shapes"), po("kineto_state_collector_shapes")), 1.0)
    verdict("paired: dlprof_ops / kineto_state_collector", ratio(po("dlprof_ops"), po("kineto_state_collector")), 1.0)


IN_CALLBACKS_MODES = ["probes_only", "dlprof_ops", "dlprof_ops_shapes", "record_profile", "kineto_state_collector",
                      "kineto_state_collector_shapes"]


def print_in_callbacks(workload, results):
    """The in_callbacks benchmark's figures: time inside each collector's callbacks."""
    entry = results.get(workload + "/in_callbacks")
    if entry is None:
        return
    print(f"\n### {workload}, in callbacks: time inside each collector's own callbacks, collectors taking turns "
          "(probes_only is the probes' own cost, subtracted from the others)")
    header = f"| {'collector':<38} | {'ns per op':>10} |"
    print(header)
    print(f"|{'-' * 40}|{'-' * 11}:|")
    for mode in IN_CALLBACKS_MODES:
        print(f"| {mode:<38} | {fmt(entry.get(f'{mode}_ns_per_op'), '>10.1f')} |")
    print()
    verdict("in callbacks: dlprof_ops_shapes / record_profile", entry.get("dlprof_ops_shapes_per_record_profile"), 0.5)
    verdict("in callbacks: dlprof_ops_shapes / kineto_state_collector",
            entry.get("dlprof_ops_shapes_per_kineto_state_collector"), 1.0)
    verdict("in callbacks: dlprof_ops_shapes / kineto_state_collector_shapes",
            entry.get("dlprof_ops_shapes_per_kineto_state_collector_shapes"), 1.0)
    if entry.get("dlprof_ops_shapes_step_ns_per_op") is None:
        return
    print(f"\n### {workload}, whole steps of the same turns, less probes_only's (input boxing and all)")
    print(header)
    print(f"|{'-' * 40}|{'-' * 11}:|")
    for mode in IN_CALLBACKS_MODES[1:] + ["floor_callback", "floor_callback_inputs", "boxing"]:
        print(f"| {mode:<38} | {fmt(entry.get(f'{mode}_step_ns_per_op'), '>10.1f')} |")
    print()
    verdict("whole steps: dlprof_ops_shapes / record_profile", entry.get("dlprof_ops_shapes_step_per_record_profile"), 0.5)
    verdict("whole steps: dlprof_ops_shapes / kineto_state_collector",
            entry.get("dlprof_ops_shapes_step_per_kineto_state_collector"), 1.0)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("json", nargs="?", help="torch_bench JSON output (default: stdin)")
    parser.add_argument("--real", action="store_true", help="use real (wall) time instead of CPU time")
    args = parser.parse_args()
    with (open(args.json) if args.json else sys.stdin) as stream:
        context, results = load(stream)

    workloads = []
    for name in results:
        workload = name.split("/", 1)[0]
        if workload not in workloads:
            workloads.append(workload)
    print(f"# {context.get('date', '')}  libtorch {context.get('libtorch', '?')}  "
          f"{context.get('num_cpus', '?')} CPUs  time: {'real' if args.real else 'CPU'}, "
          f"{'median of repetitions' if any(n for n in results if results[n].get('aggregate_name') == 'median') else 'mean'}")
    for workload in workloads:
        print_separate(workload, results, args.real)
        print_paired(workload, results)
        print_in_callbacks(workload, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())

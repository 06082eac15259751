#!/usr/bin/env python3
"""Checks the roofline workload's traces (bench/torch_profiler_side_by_side --workload roofline)
on a GPU machine: a large BF16 matmul must reach a plausible share of the GPU's dense peak and
never pass it, every op's FLOPs and bytes per second are printed against the peaks, and dlprof's
trace must hold the GPU's clocks and power read from NVML, with plausible values.

Usage: gpu_roofline_check.py --dlprof TRACE [--torch TRACE] [--summary OUT.json]

The peaks are the datasheets' dense figures (never the 2:4-sparse ones, which are twice as
large), for the GPUs these machines have:
  H100 SXM5 / H200 SXM: BF16 989.4 TFLOP/s, TF32 494.7, FP32 (CUDA cores) 66.9;
                        HBM 3.35 TB/s (H100) and 4.8 TB/s (H200)
                        (NVIDIA H100 and H200 Tensor Core GPU datasheets).
Exits 1 when a check fails.
"""
import argparse
import json
import statistics
import subprocess
import sys

PEAKS = {  # name fragment: (BF16 dense TFLOP/s, TF32 dense, FP32 CUDA cores, memory TB/s)
    "H200": (989.4, 494.7, 66.9, 4.8),
    "H100 80GB HBM3": (989.4, 494.7, 66.9, 3.35),
    "H100 PCIe": (756.0, 378.0, 51.2, 2.0),
}

BIG = [[8192, 8192], [8192, 8192]]


def load(path):
    with open(path) as f:
        return json.load(f)


def peaks_of(trace):
    for device in trace.get("deviceProperties", []):
        for fragment, peaks in PEAKS.items():
            if fragment in device.get("name", ""):
                return device["name"], peaks
    names = [d.get("name") for d in trace.get("deviceProperties", [])]
    return (names[0] if names else "unknown"), None


def kernels_by_op(trace):
    """The ops (cpu_op) and, for each, the kernels that carry its External id."""
    events = trace["traceEvents"]
    ops = [e for e in events if e.get("cat") == "cpu_op" and e.get("ph") == "X"]
    by_external = {}
    for e in events:
        if e.get("cat") == "kernel":
            by_external.setdefault(e.get("args", {}).get("External id"), []).append(e)
    return [(op, by_external.get(op.get("args", {}).get("External id"), [])) for op in ops]


def op_rows(trace):
    """One row per (op name, input dims, input types): calls, FLOPs, kernel µs."""
    rows = {}
    for op, kernels in kernels_by_op(trace):
        args = op.get("args", {})
        key = (op["name"], json.dumps(args.get("Input Dims")), json.dumps(args.get("Input type")))
        row = rows.setdefault(key, {"calls": 0, "flops": 0, "kernel_us": 0.0, "kernels": set()})
        row["calls"] += 1
        row["flops"] += int(args.get("flops", 0) or 0)
        for k in kernels:
            row["kernel_us"] += float(k.get("dur", 0))
            row["kernels"].add(k["name"][:60])
    return rows


def check_matmul(label, trace, problems, summary):
    device, peaks = peaks_of(trace)
    matmuls = [(op, kernels) for op, kernels in kernels_by_op(trace)
               if op["name"] == "aten::mm" and op.get("args", {}).get("Input Dims") == BIG
               and "BFloat16" in json.dumps(op.get("args", {}).get("Input type"))]
    if not matmuls:
        problems.append(f"{label}: no BF16 8192^3 aten::mm op")
        return
    expected = 2 * 8192 ** 3
    flops_args = {int(op["args"].get("flops", 0) or 0) for op, _ in matmuls}
    unlinked = sum(1 for _, kernels in matmuls if not kernels)
    kernel_us = sum(float(k["dur"]) for _, kernels in matmuls for k in kernels)
    achieved = len(matmuls) * expected / (kernel_us * 1e-6) / 1e12 if kernel_us else 0.0
    line = (f"{label}: {len(matmuls)} BF16 8192^3 matmuls on {device}, flops arg {sorted(flops_args)} "
            f"(2MNK = {expected}), {unlinked} without a kernel, kernel time {kernel_us / len(matmuls):.1f} us each: "
            f"{achieved:.1f} TFLOP/s")
    share = None
    if peaks:
        share = achieved / peaks[0]
        line += f" = {100 * share:.1f} % of the dense BF16 peak ({peaks[0]} TFLOP/s)"
    print(line)
    summary[label] = {"device": device, "matmuls": len(matmuls), "kernel_us_each": kernel_us / len(matmuls),
                      "tflops": achieved, "share_of_dense_peak": share, "flops_args": sorted(flops_args)}
    if flops_args != {expected} and label == "dlprof":
        problems.append(f"{label}: the matmuls' flops arg is {sorted(flops_args)}, not 2MNK = {expected}")
    if unlinked:
        problems.append(f"{label}: {unlinked} matmuls have no kernel linked to them")
    if share is not None and not (0.3 <= share <= 1.0):
        problems.append(f"{label}: the BF16 matmul runs at {100 * share:.1f} % of the dense peak, "
                        "outside the plausible 30-100 %")


def print_ops(label, trace):
    device, peaks = peaks_of(trace)
    print(f"{label}: ops with their kernels' time (FLOPs from the trace's flops arg):")
    for (name, dims, types), row in sorted(op_rows(trace).items(), key=lambda item: -item[1]["kernel_us"]):
        if row["kernel_us"] <= 0:
            continue
        rate = row["flops"] / (row["kernel_us"] * 1e-6) / 1e12 if row["flops"] else None
        print(f"  {name:32} {dims[:44]:44} {types[:40]:40} calls {row['calls']:3} kernel {row['kernel_us']:10.1f} us"
              + (f"  {rate:7.1f} TFLOP/s" if rate is not None else "") + f"  {sorted(row['kernels'])[:2]}")


def check_counters(trace, problems, summary):
    events = trace["traceEvents"]
    counters = {}
    for e in events:
        if e.get("ph") == "C" and isinstance(e.get("pid"), int) and "value" in e.get("args", {}):
            counters.setdefault((e["pid"], e["name"]), []).append((float(e["ts"]), float(e["args"]["value"])))
    names = sorted({name for _, name in counters})
    print(f"dlprof: device counter tracks: {names}")
    sm = counters.get((0, "SM clock (MHz)"), [])
    memory = counters.get((0, "Memory clock (MHz)"), [])
    power = counters.get((0, "Power (W)"), [])
    limited = {reason: counters.get((0, f"Clock limited by {reason}"), []) for reason in ("power", "temperature")}
    limited["otherwise"] = counters.get((0, "Clock limited otherwise"), [])
    if len(sm) < 5:
        problems.append(f"dlprof: {len(sm)} SM clock readings on GPU 0, expected one every 10 ms")
        return
    sm_values = [v for _, v in sm]
    power_values = [v for _, v in power]
    gaps = [b[0] - a[0] for a, b in zip(sm, sm[1:])]
    share_limited = {reason: (statistics.mean(v for _, v in samples) if samples else None)
                     for reason, samples in limited.items()}
    print(f"dlprof: {len(sm)} readings of GPU 0, median gap {statistics.median(gaps) / 1000:.1f} ms; "
          f"SM clock {min(sm_values):.0f}-{max(sm_values):.0f} MHz (mean {statistics.mean(sm_values):.0f}); "
          f"memory clock {statistics.mean(v for _, v in memory) if memory else float('nan'):.0f} MHz; "
          f"power {min(power_values, default=0):.0f}-{max(power_values, default=0):.0f} W; share of readings with "
          f"the clock limited: " + ", ".join(f"{k} {100 * v:.0f} %" for k, v in share_limited.items() if v is not None))
    summary["counters"] = {"readings": len(sm), "median_gap_ms": statistics.median(gaps) / 1000,
                           "sm_mhz": [min(sm_values), statistics.mean(sm_values), max(sm_values)],
                           "power_w": [min(power_values, default=0), max(power_values, default=0)],
                           "limited_share": share_limited}
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=clocks.max.sm,clocks.sm,power.draw,power.limit",
                              "--format=csv,noheader,nounits", "-i", "0"], capture_output=True, text=True, timeout=20)
        print(f"nvidia-smi now (max SM MHz, SM MHz, power W, power limit W): {smi.stdout.strip()}")
        summary["nvidia_smi"] = smi.stdout.strip()
        max_sm = float(smi.stdout.split(",")[0])
        if max(sm_values) > max_sm * 1.01:
            problems.append(f"dlprof: an SM clock reading of {max(sm_values):.0f} MHz passes the maximum {max_sm:.0f}")
    except (OSError, ValueError, subprocess.SubprocessError) as error:
        print(f"nvidia-smi: {error}")
    if not all(100 <= v <= 4000 for v in sm_values):
        problems.append(f"dlprof: SM clock readings outside 100-4000 MHz: {sorted(set(sm_values))[:5]}")
    if power_values and not all(0 < v <= 1500 for v in power_values):
        problems.append(f"dlprof: power readings outside (0, 1500] W: {sorted(set(power_values))[:5]}")
    if any(v not in (0.0, 1.0) for samples in limited.values() for _, v in samples):
        problems.append("dlprof: a clock-limit track holds a value other than 0 or 1")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dlprof", required=True)
    parser.add_argument("--torch")
    parser.add_argument("--summary")
    args = parser.parse_args()
    problems, summary = [], {}
    dlprof_trace = load(args.dlprof)
    check_matmul("dlprof", dlprof_trace, problems, summary)
    check_counters(dlprof_trace, problems, summary)
    print_ops("dlprof", dlprof_trace)
    if args.torch:
        torch_trace = load(args.torch)
        check_matmul("torch", torch_trace, problems, summary)
        print_ops("torch", torch_trace)
    if args.summary:
        with open(args.summary, "w") as f:
            json.dump(summary, f, indent=1)
    for problem in problems:
        print(f"gpu-roofline: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

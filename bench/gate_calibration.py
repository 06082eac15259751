#!/usr/bin/env python3
"""The regression gate measured on the demo: its false alarms and its catches.

A/A: pairs of runs of one binary with one command line; the gate (dlprof-report --baseline A
--fail-if-slower T% B) must fail at most its stated false-alarm rate of them. A/B: pairs whose NEW
runs the demo with --slowdown P (forward works P % of a step longer); the gate must catch at least
95 % of them at the step count it says it needs, which a pilot pair gives first.

  bench/gate_calibration.py build/main/examples/libtorch_training build/main/tools/dlprof-report \\
      --pairs 20 --threshold 2 --slowdown 3

Prints one line per pair and a summary (bench/RESULTS.md, "Regression gate").
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

EXIT_PASS, EXIT_REGRESSION, EXIT_NOT_COMPARABLE = 0, 3, 4


def run_demo(demo, log_dir, steps, slowdown, batch_size):
    shutil.rmtree(log_dir, ignore_errors=True)
    command = [demo, "--steps", str(steps), "--active", str(steps - 3), "--num-workers", "0",
               "--batch-size", str(batch_size), "--log-dir", log_dir]
    if slowdown:
        command += ["--slowdown", str(slowdown)]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def gate(report, base, new, threshold):
    result = subprocess.run([report, "--baseline", base, "--fail-if-slower", f"{threshold}%", new],
                            capture_output=True, text=True)
    if result.returncode not in (EXIT_PASS, EXIT_REGRESSION, EXIT_NOT_COMPARABLE):
        sys.exit(f"dlprof-report failed ({result.returncode}): {result.stderr}")
    text = " ".join(result.stdout.split())
    change = re.search(r"step_time > \+[0-9.]+ %: \w+: ([+-][0-9.]+) %", text)
    smallest = re.search(r"catches 95 % of the time here: ([0-9.]+) %", text)
    needed = re.search(r"record (\d+) steps a run", text)
    return (result.returncode, float(change.group(1)) if change else None,
            float(smallest.group(1)) if smallest else None, int(needed.group(1)) if needed else None, text)


def pairs(args, work, label, steps, slowdown):
    outcomes = []
    for pair in range(args.pairs):
        base, new = os.path.join(work, f"{label}-{pair}-base"), os.path.join(work, f"{label}-{pair}-new")
        run_demo(args.demo, base, steps, 0, args.batch_size)
        run_demo(args.demo, new, steps, slowdown, args.batch_size)
        status, change, smallest, needed, text = gate(args.report, base, new, args.threshold)
        outcomes.append((status, change, smallest, needed))
        print(f"{label} pair {pair + 1:2}: exit {status}, change {change:+.2f} %, smallest detectable "
              f"{smallest} %, steps needed {needed}", flush=True)
        if status == EXIT_NOT_COMPARABLE:
            print(f"  {text}", flush=True)
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(new, ignore_errors=True)
    return outcomes


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("demo")
    parser.add_argument("report")
    parser.add_argument("--pairs", type=int, default=20)
    parser.add_argument("--threshold", type=float, default=2.0, help="--fail-if-slower, in percent")
    parser.add_argument("--slowdown", type=int, default=3, help="the demo's --slowdown for NEW in A/B, in percent")
    parser.add_argument("--steps", type=int, default=0, help="steps a run (default: what the pilot pair says it needs)")
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="dlprof-gate-")
    started = time.monotonic()
    try:
        steps = args.steps
        if not steps:
            pilot_base, pilot_new = os.path.join(work, "pilot-base"), os.path.join(work, "pilot-new")
            run_demo(args.demo, pilot_base, 23, 0, args.batch_size)
            run_demo(args.demo, pilot_new, 23, 0, args.batch_size)
            _, _, smallest, needed, _ = gate(args.report, pilot_base, pilot_new, args.threshold)
            steps = max(needed or 0, 8) + 3  # recorded steps, plus the 3 the demo skips and warms up
            print(f"pilot (20 steps a run): smallest detectable {smallest} %, the gate asks for {needed} steps a run", flush=True)
        print(f"{args.pairs} pairs a kind, {steps - 3} recorded steps a run, --fail-if-slower {args.threshold}%", flush=True)
        same = pairs(args, work, "A/A", steps, 0)
        slower = pairs(args, work, "A/B", steps, args.slowdown)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    false_alarms = sum(status == EXIT_REGRESSION for status, *_ in same)
    caught = sum(status == EXIT_REGRESSION for status, *_ in slower)
    refused = sum(status == EXIT_NOT_COMPARABLE for status, *_ in same + slower)
    changes = sorted(change for _, change, _, _ in slower if change is not None)
    print(f"A/A: {false_alarms} false alarm(s) in {len(same)} pairs (stated rate 1 %)")
    print(f"A/B (--slowdown {args.slowdown}): caught {caught} of {len(slower)} ({100 * caught / len(slower):.0f} %), "
          f"measured change median {changes[len(changes) // 2]:+.2f} %")
    print(f"not comparable: {refused}; {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()

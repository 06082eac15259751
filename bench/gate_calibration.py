#!/usr/bin/env python3
"""The regression gate measured on the demo: its false alarms and its catches.

Two pools of demo runs are made, interleaved so that both see the same machine: A runs of one
command line, and B runs of the same with --slowdown P (the data loading works P % of a step
longer). A pilot asks the gate how many runs a side it needs to catch the threshold (it judges by
runs when --baseline is given several). Then random draws of runs from the pools are gated with
`dlprof-report --baseline A1 --baseline A2 ... --fail-if-slower T% NEW1 NEW2 ...`:

  A/A  k BASE runs and k other NEW runs, all from pool A: a failure is a false alarm, and the
       gate must fail at most its stated rate (1 %) of them;
  A/B  k BASE runs from pool A and k NEW runs from pool B: the gate must catch at least 95 %.

Draws share runs, so their outcomes are not independent: the rates estimate how often the gate
fails a fresh set of runs of this machine, with fewer effective trials than draws.

  bench/gate_calibration.py build/main/examples/libtorch_training build/main/tools/dlprof-report \\
      --a-runs 80 --b-runs 80 --steps 20 --threshold 3 --slowdown 3 --work pools

Runs already in --work are kept, so pools can be made once (--pools-only) and gated again (--runs
K to choose the runs a side, --only aa|ab for one kind of draw).

Prints the pilot, each kind's rate and the runs it took (bench/RESULTS.md, "Regression gate").
"""
import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

EXIT_PASS, EXIT_REGRESSION, EXIT_NOT_COMPARABLE = 0, 3, 4


def run_demo(args, log_dir, slowdown):
    command = [args.demo, "--steps", str(args.steps + 3), "--active", str(args.steps), "--num-workers", "0",
               "--batch-size", str(args.batch_size), "--log-dir", log_dir]
    if slowdown:
        command += ["--slowdown", str(slowdown)]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def gate(args, base, new):
    command = [args.report]
    for run in base:
        command += ["--baseline", run]
    command += ["--fail-if-slower", f"{args.threshold}%"] + list(new)
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode not in (EXIT_PASS, EXIT_REGRESSION, EXIT_NOT_COMPARABLE):
        sys.exit(f"dlprof-report failed ({result.returncode}): {result.stderr}")
    text = " ".join(result.stdout.split())
    change = re.search(r"step_time > \+[0-9.]+ %: \w+: ([+-][0-9.]+) %", text)
    spread = re.search(r"runs differ by ([0-9.]+) %", text)
    runs = re.search(r"compare (\d+) runs a side", text)
    return (result.returncode, float(change.group(1)) if change else None, float(spread.group(1)) if spread else None,
            int(runs.group(1)) if runs else None, text)


def draws(args, kind, pool_base, pool_new, k, rng):
    outcomes = []
    for _ in range(args.draws):
        if pool_base is pool_new:
            chosen = rng.sample(pool_base, 2 * k)
            base, new = chosen[:k], chosen[k:]
        else:
            base, new = rng.sample(pool_base, k), rng.sample(pool_new, k)
        status, change, spread, needed, text = gate(args, base, new)
        outcomes.append((status, change, spread, needed))
        if status == EXIT_NOT_COMPARABLE:
            reasons = re.findall(r"Not comparable: (.*?)(?= step_time|$)", text)
            print(f"  {kind} not comparable: {'; '.join(reasons) or text}", flush=True)
    failed = sum(status == EXIT_REGRESSION for status, _, _, _ in outcomes)
    refused = sum(status == EXIT_NOT_COMPARABLE for status, _, _, _ in outcomes)
    changes = sorted(change for _, change, _, _ in outcomes if change is not None)
    spreads = sorted(spread for _, _, spread, _ in outcomes if spread is not None)
    asked = sorted(needed for _, _, _, needed in outcomes if needed is not None)
    print(f"{kind}: {k} runs a side, {len(outcomes)} draws: failed {failed} ({100 * failed / len(outcomes):.1f} %), "
          f"not comparable {refused}; change median {changes[len(changes) // 2]:+.2f} % "
          f"(range {changes[0]:+.2f} to {changes[-1]:+.2f}), runs' spread median {spreads[len(spreads) // 2]:.2f} %; runs a side "
          f"the gate asked for: median {asked[len(asked) // 2] if asked else None} (quartiles "
          f"{asked[len(asked) // 4] if asked else None} to {asked[3 * len(asked) // 4] if asked else None})", flush=True)
    return failed, refused


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("demo")
    parser.add_argument("report")
    parser.add_argument("--a-runs", type=int, default=40, help="runs of the unchanged demo")
    parser.add_argument("--b-runs", type=int, default=20, help="runs with --slowdown")
    parser.add_argument("--steps", type=int, default=40, help="recorded steps a run")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--threshold", type=float, default=3.0, help="--fail-if-slower, in percent")
    parser.add_argument("--slowdown", type=int, default=3, help="the demo's --slowdown for pool B, in percent")
    parser.add_argument("--runs", type=int, default=0, help="runs a side (default: what the pilot says the gate needs)")
    parser.add_argument("--draws", type=int, default=100, help="gate calls a kind")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--work", default="", help="keep the runs here (default: a temporary directory)")
    parser.add_argument("--pilot", type=int, default=10, help="runs a side of the pilot that asks the gate what it needs")
    parser.add_argument("--pools-only", action="store_true", help="make the pools (in --work) and stop")
    parser.add_argument("--only", choices=("aa", "ab"), help="gate draws of one kind alone (A/A, or A/B)")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    work = args.work or tempfile.mkdtemp(prefix="dlprof-gate-")
    started = time.monotonic()
    try:
        pool_a, pool_b = [], []
        for i in range(max(args.a_runs, args.b_runs)):
            for pool, count, label, slowdown in ((pool_a, args.a_runs, "a", 0), (pool_b, args.b_runs, "b", args.slowdown)):
                if i < count:
                    run = os.path.join(work, f"{label}{i:03}")
                    if not os.path.isdir(run):
                        run_demo(args, run, slowdown)
                    pool.append(run)
        print(f"pools: {len(pool_a)} runs A, {len(pool_b)} runs B (--slowdown {args.slowdown}), {args.steps} steps a run, "
              f"batch {args.batch_size}; {time.monotonic() - started:.0f} s", flush=True)
        if args.pools_only:
            return
        k = args.runs
        pilot_k = min(args.pilot, len(pool_a) // 2)
        _, _, spread, needed, _ = gate(args, pool_a[:pilot_k], pool_a[pilot_k:2 * pilot_k])
        print(f"pilot ({pilot_k} runs against {pilot_k}): runs differ by {spread} %; to catch {args.threshold} % the gate asks "
              f"for {needed} runs a side", flush=True)
        if not k:
            k = needed or len(pool_b)
        cap = len(pool_b) if args.only == "ab" else len(pool_a) // 2 if args.only == "aa" else min(len(pool_a) // 2, len(pool_b))
        if k > cap:
            print(f"the pools allow {cap} runs a side, fewer than the {k} asked for: measured at {cap}", flush=True)
            k = cap
        false_alarms = caught = None
        if args.only != "ab":
            false_alarms, _ = draws(args, "A/A", pool_a, pool_a, k, rng)
        if args.only != "aa":
            caught, _ = draws(args, f"A/B (--slowdown {args.slowdown})", pool_a, pool_b, k, rng)
        print(f"false alarms {false_alarms}/{args.draws} (stated rate 1 %), caught {caught}/{args.draws} (required 95 %); "
              f"{time.monotonic() - started:.0f} s", flush=True)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Holistic Trace Analysis and `dlprof-report --hta-compat --format json` on the same traces must
agree: per rank, the temporal breakdown and the communication/computation overlap within 0.5
percentage points (HTA's NaN, no communication kernels, where dlprof finds none), and each kernel
type's time within 1 %.

Usage: check_hta_agreement.py DLPROF_REPORT TRACE_SET_DIR...

Runs HTA 0.5.0 (hta_breakdowns.py, each rank loaded on its own) and dlprof-report on every set;
prints one line per compared number; exits 1 on any disagreement, 77 (CTest's skip code) when HTA
cannot be imported.
"""
import json
import os
import subprocess
import sys

TEMPORAL_TOLERANCE_PP = 0.5
KERNEL_TYPE_TOLERANCE = 0.01

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def hta_numbers(trace_dir):
    import logging

    import hta_breakdowns

    logging.disable(logging.WARNING)
    paths = sorted(os.path.join(trace_dir, name) for name in os.listdir(trace_dir)
                   if name.endswith(".json") or name.endswith(".gz"))
    numbers = {}
    for path in paths:
        rank = hta_breakdowns.rank_of(path)
        numbers[rank] = hta_breakdowns.analyse(trace_dir, path, rank, include_last_step=False)
    return numbers


def dlprof_numbers(dlprof_report, trace_dir):
    completed = subprocess.run([dlprof_report, "--hta-compat", "--format", "json", trace_dir], capture_output=True,
                               text=True)
    if completed.returncode != 0:
        raise SystemExit(f"dlprof-report failed on {trace_dir}: {completed.stderr.strip()}")
    return {entry["rank"]: entry for entry in json.loads(completed.stdout)["ranks"]}


def compare_set(dlprof_report, trace_dir):
    failures = 0
    hta = hta_numbers(trace_dir)
    ours = dlprof_numbers(dlprof_report, trace_dir)
    name = os.path.basename(os.path.normpath(trace_dir))
    if sorted(hta) != sorted(ours):
        print(f"FAIL {name}: ranks differ: HTA {sorted(hta)}, dlprof {sorted(ours)}")
        return 1
    for rank in sorted(hta):
        theirs, mine = hta[rank]["temporal_breakdown"], ours[rank]["temporal_breakdown"]
        for key in ("idle_pct", "compute_pct", "non_compute_pct"):
            difference = abs(theirs[key] - mine[key])
            ok = difference <= TEMPORAL_TOLERANCE_PP
            failures += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {name} rank {rank} {key}: HTA {theirs[key]:.3f}, dlprof {mine[key]:.3f} "
                  f"({difference:.3f} pp, at most {TEMPORAL_TOLERANCE_PP})")
        their_overlap, my_overlap = hta[rank]["comm_comp_overlap_pct"], ours[rank]["comm_comp_overlap"]
        if their_overlap is None or their_overlap != their_overlap:  # NaN: no communication kernels
            ok = my_overlap["communication_us"] == 0
            difference_text = "HTA NaN (no communication kernels)"
        else:
            ok = my_overlap["overlap_pct"] is not None and abs(their_overlap - my_overlap["overlap_pct"]) <= TEMPORAL_TOLERANCE_PP
            difference_text = f"HTA {their_overlap:.3f}"
        failures += not ok
        mine_text = "none" if my_overlap["overlap_pct"] is None else f"{my_overlap['overlap_pct']:.3f}"
        print(f"{'ok  ' if ok else 'FAIL'} {name} rank {rank} comm_comp_overlap_pct: {difference_text}, dlprof "
              f"{mine_text} (communication {my_overlap['communication_us']:.0f} us)")
        their_types = {row["type"]: row["time_us"] for row in hta[rank]["kernel_type_breakdown"]}
        my_types = {row["type"]: row["time_us"] for row in ours[rank]["kernel_type_breakdown"]}
        for kind in sorted(set(their_types) | set(my_types)):
            theirs_us, mine_us = their_types.get(kind), my_types.get(kind)
            if theirs_us is None or mine_us is None:
                failures += 1
                print(f"FAIL {name} rank {rank} {kind}: HTA {theirs_us}, dlprof {mine_us} (type missing on one side)")
                continue
            relative = abs(theirs_us - mine_us) / theirs_us if theirs_us else abs(mine_us)
            ok = relative <= KERNEL_TYPE_TOLERANCE
            failures += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {name} rank {rank} {kind}: HTA {theirs_us:.0f} us, dlprof {mine_us:.0f} us "
                  f"({100 * relative:.3f}%, at most {100 * KERNEL_TYPE_TOLERANCE:.0f}%)")
    return failures


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        import hta.trace_analysis  # noqa: F401
    except ImportError as error:
        print(f"SKIP: Holistic Trace Analysis cannot be imported ({error}); scripts/test.sh installs it")
        return 77
    failures = sum(compare_set(sys.argv[1], trace_dir) for trace_dir in sys.argv[2:])
    print(f"{failures} disagreement(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

"""Opens dlprof traces with the tools users open them with and checks what those tools see.

Usage: check_trace_tools.py TRACE_DIR [--expect-steps 2,3,4]

* Holistic Trace Analysis (pip: HolisticTraceAnalysis): TraceAnalysis(trace_dir) loads every
  file, finds rank 0 through its `"rank": N` regex, and assigns events to ProfilerStep iterations.
* TensorBoard's profiler plugin (pip: torch-tb-profiler 0.4.3): its RunLoader discovers the file
  by name, parses it and builds the Overview with one row per ProfilerStep. Release 0.4.3 keeps no
  `user_annotation` slice but ProfilerStep#N and NCCL ops (create_trace_event returns None for the
  rest), so its DataLoader/CPU Exec columns stay empty for range-only traces, torch's own
  included; the step rows and their durations are what it can show.
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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("trace_dir")
    parser.add_argument("--expect-steps", default="")
    args = parser.parse_args()
    expected_steps = [int(s) for s in args.expect_steps.split(",") if s]
    logging.disable(logging.WARNING)
    check_hta(args.trace_dir, expected_steps)
    check_tensorboard(args.trace_dir, expected_steps)


if __name__ == "__main__":
    main()

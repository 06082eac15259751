#!/usr/bin/env python3
"""Checks a GPU trace of examples/cuda_training_loop against what the program measured itself.

Usage: gpu_validate.py --trace TRACE --stats STATS [--time-tolerance-percent 2] [--min-linked-percent 99]
       gpu_validate.py --graph-trace TRACE --graph-report REPORT

TRACE is a Kineto/torch.profiler Chrome-trace JSON file (.pt.trace.json, optionally .gz) or a
directory, of which the newest trace is read. STATS is the JSON the program writes with --stats:
the steps it recorded, the kernels it launched in them and their GPU time from CUDA events.

A kernel belongs to the recorded steps when the cuda_runtime call that launched it (same
`correlation`) lies inside a ProfilerStep#N slice (the kernel's own start when the call is
missing). Checks, each printed with its figures:
  steps  the trace's ProfilerStep numbers are the steps the program recorded;
  (a)    the number of those kernels is the number of launches the program made in those steps;
  (b)    at least --min-linked-percent of them carry an `External id` that a CPU user_annotation
         (a range) carries too;
  (c)    their summed `dur` is within --time-tolerance-percent of the CUDA-event sum;
  (d)    each starts no earlier than its cuda_runtime launch call, and that call lies inside the
         CPU slice of the range whose External id the kernel carries;
  (e)    the range a kernel links to is named after it, as dlprof::cuda::launch names ranges
         (demangled name without return type, parameters or "(anonymous namespace)::").
Also printed: ac2g flow pairs, gpu_user_annotation events, and time per kernel in both sources.

With --graph-trace, TRACE is a trace of `cuda_training_loop --graph --with-stack` and REPORT the
JSON dlprof-report wrote of it. Checks:
  (g1)   the trace holds work that CUDA graphs replayed (`graph node id`), launched by cudaGraphLaunch;
  (g2)   every such kernel, copy and fill names the range that captured its node (`captured by`), and
         a kernel's is the launch range named after it;
  (g3)   each of them carries that range's `capture call stack`;
  (g4)   the report's cuda_graphs section counts all of it as captured, and names who captured it.
Exit status: 0 when every check passes, 1 when one fails (the last line then reads
"FAILED: (a), (c)"), 2 when an input cannot be read. Python standard library only.
"""
import argparse
import glob
import gzip
import json
import os
import sys

# Timestamps are µs with three decimals: comparisons allow half a nanosecond of float error.
EPSILON_US = 0.0005


def fail_input(message):
    print(f"gpu_validate: {message}", file=sys.stderr)
    sys.exit(2)


def newest_trace(path):
    if not os.path.isdir(path):
        return path
    candidates = glob.glob(os.path.join(path, "*.pt.trace.json")) + glob.glob(os.path.join(path, "*.pt.trace.json.gz"))
    if not candidates:
        fail_input(f"no *.pt.trace.json[.gz] in {path}")
    return max(candidates, key=os.path.getmtime)


def load_json(path):
    try:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as file:
            return json.load(file)
    except (OSError, ValueError) as error:
        fail_input(f"cannot read {path}: {error}")


def display_name(name):
    """The name dlprof::cuda::launch gives a kernel's range (dlprof::cuda::detail::kernel_display_name)."""
    if name.endswith(")"):  # the parameter list: the last top-level parenthesised group
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            if name[i] == ")":
                depth += 1
            elif name[i] == "(":
                depth -= 1
                if depth == 0:
                    name = name[:i]
                    break
    depth = 0  # the return type: up to the last space outside template arguments and parentheses
    for i in range(len(name) - 1, -1, -1):
        if name[i] in ">)":
            depth += 1
        elif name[i] in "<(":
            depth -= 1
        elif name[i] == " " and depth == 0:
            name = name[i + 1:]
            break
    return name.replace("(anonymous namespace)::", "")


def contains(slice_event, ts):
    return slice_event["ts"] - EPSILON_US <= ts <= slice_event["ts"] + slice_event.get("dur", 0) + EPSILON_US


class Report:
    def __init__(self):
        self.failed = []

    def check(self, label, passed, text):
        print(f"  {label:<7} {text:<92} {'ok' if passed else 'FAIL'}")
        if not passed:
            self.failed.append(label)

    @staticmethod
    def figure(text):
        print(f"          {text}")


def check_graphs(trace_path, report_path):
    """The --graph-trace checks (see the module's docstring)."""
    trace_path = newest_trace(trace_path)
    events = load_json(trace_path).get("traceEvents", [])
    report_json = load_json(report_path)
    calls = {e["args"]["correlation"]: e.get("name") for e in events
             if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    replayed = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                and e.get("args", {}).get("graph node id")]
    launched_by_graph = [e for e in replayed if "GraphLaunch" in str(calls.get(e["args"].get("correlation")))]
    report = Report()
    print(f"gpu_validate: {trace_path}")
    report.check("(g1)", bool(replayed) and len(launched_by_graph) == len(replayed),
                 f"work graphs replayed: {len(replayed)}, launched by a graph launch: {len(launched_by_graph)}")
    captured = [e for e in replayed if e["args"].get("captured by")]
    kernels = [e for e in captured if e.get("cat") == "kernel"]
    named = [e for e in kernels if e["args"]["captured by"] == display_name(e.get("name", ""))]
    report.check("(g2)", bool(replayed) and len(captured) == len(replayed) and len(named) == len(kernels),
                 f"naming the range that captured them: {len(captured)}/{len(replayed)}; kernels whose capturing "
                 f"launch is named after them: {len(named)}/{len(kernels)}")
    for kernel in [e for e in kernels if e not in named][:3]:
        report.figure(f"kernel {display_name(kernel.get('name', ''))!r} captured by {kernel['args']['captured by']!r}")
    stacks = [e for e in replayed if e["args"].get("capture call stack")]
    report.check("(g3)", bool(replayed) and len(stacks) == len(replayed),
                 f"with the capturing range's call stack: {len(stacks)}/{len(replayed)}")
    if stacks:
        report.figure(f"e.g. {stacks[0]['args']['captured by']!r}: {stacks[0]['args']['capture call stack'][:160]!r}")
    try:
        graphs = report_json["ranks"][0]["cuda_graphs"]
        rows = graphs.get("graphs", [])
        section_ok = bool(rows) and graphs.get("captured_work") == graphs.get("work") and all(r.get("captured_by") for r in rows)
        text = (f"report: {graphs.get('captured_work')} of {graphs.get('work')} pieces of replayed work captured; "
                + "; ".join(f"graph {r.get('graph_id')}: captured by {r.get('captured_by')!r} at {r.get('captured_at')!r}"
                            for r in rows[:2]))
    except (KeyError, IndexError, TypeError, AttributeError) as error:
        section_ok, text = False, f"report: no cuda_graphs section ({error!r})"
    report.check("(g4)", section_ok, text)
    if report.failed:
        print("FAILED: " + ", ".join(report.failed))
        return 1
    print("all checks passed")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", help="trace file, or a directory (its newest trace)")
    parser.add_argument("--stats", help="the JSON cuda_training_loop --stats wrote")
    parser.add_argument("--graph-trace", help="a trace of cuda_training_loop --graph --with-stack, or its directory")
    parser.add_argument("--graph-report", help="dlprof-report --format json of --graph-trace")
    parser.add_argument("--time-tolerance-percent", type=float, default=2.0)
    parser.add_argument("--min-linked-percent", type=float, default=99.0)
    parser.add_argument("--containment-tolerance-us", type=float, default=0.0,
                        help="slack for (d): how far a launch call may stick out of its range (default 0)")
    options = parser.parse_args()
    if options.graph_trace or options.graph_report:
        if not (options.graph_trace and options.graph_report):
            parser.error("--graph-trace and --graph-report go together")
        return check_graphs(options.graph_trace, options.graph_report)
    if not (options.trace and options.stats):
        parser.error("--trace and --stats are required (or --graph-trace and --graph-report)")

    trace_path = newest_trace(options.trace)
    trace = load_json(trace_path)
    stats = load_json(options.stats)
    try:
        events = trace["traceEvents"]
        recorded_steps = sorted(int(step) for step in stats["recorded_steps"])
        launches = int(stats["kernel_launches"])
        timing = stats["kernel_event_timing"]
        event_ms = float(timing["sum_ms"])
        timed = int(timing["count"])
        timed_by_kernel = timing.get("by_kernel", {})
        # Kernels the program launched only to time the others (not its own work, not counted).
        helper_kernels = set(stats.get("timing_helper_kernels", []))
    except (KeyError, TypeError, ValueError) as error:
        fail_input(f"missing or malformed field: {error!r}")

    slices = [e for e in events if e.get("ph") == "X"]
    annotations = [e for e in slices if e.get("cat") == "user_annotation"]
    steps = [e for e in annotations if e.get("name", "").startswith("ProfilerStep#")]
    launch_calls = {}
    for e in slices:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            correlation = e["args"]["correlation"]
            if e["cat"] == "cuda_runtime" or correlation not in launch_calls:
                launch_calls[correlation] = e
    ranges_by_external_id = {}
    for e in annotations:
        if "External id" in e.get("args", {}):
            ranges_by_external_id.setdefault(e["args"]["External id"], []).append(e)

    def launch_call(kernel):
        return launch_calls.get(kernel.get("args", {}).get("correlation"))

    def in_recorded_steps(kernel):
        call = launch_call(kernel)
        ts = call["ts"] if call else kernel["ts"]
        return any(contains(step, ts) for step in steps)

    all_kernels = [e for e in slices
                   if e.get("cat") == "kernel" and display_name(e.get("name", "")) not in helper_kernels]
    kernels = [k for k in all_kernels if in_recorded_steps(k)]
    report = Report()
    print(f"gpu_validate: {trace_path}")
    print(f"              {options.stats}")

    trace_steps = sorted(int(s["name"].split("#", 1)[1]) for s in steps)
    report.check("steps", trace_steps == recorded_steps and bool(trace_steps),
                 f"ProfilerStep numbers: trace {trace_steps}, program {recorded_steps}")

    report.check("(a)", len(kernels) == launches,
                 f"kernels in recorded steps: trace {len(kernels)}, launched {launches}")
    report.figure(f"kernel events in the trace: {len(all_kernels)} ({len(all_kernels) - len(kernels)} outside the steps)")

    linked = [k for k in kernels if k.get("args", {}).get("External id") in ranges_by_external_id]
    linked_percent = 100.0 * len(linked) / len(kernels) if kernels else 0.0
    report.check("(b)", bool(kernels) and linked_percent >= options.min_linked_percent,
                 f"kernels linked to a range: {len(linked)}/{len(kernels)} ({linked_percent:.1f}%, "
                 f"need >= {options.min_linked_percent:g}%)")

    trace_ms = sum(k.get("dur", 0) for k in kernels) / 1000.0
    difference = 100.0 * (trace_ms - event_ms) / event_ms if event_ms > 0 else float("inf")
    report.check("(c)", abs(difference) <= options.time_tolerance_percent,
                 f"kernel time: trace {trace_ms:.3f} ms, CUDA events {event_ms:.3f} ms ({difference:+.2f}%, "
                 f"need within {options.time_tolerance_percent:g}%)")
    if timed != launches:
        report.figure(f"note: {timed} launches were timed with CUDA events, {launches} counted")

    missing_call = before_call = 0
    worst_order_us = 0.0
    outside_range = 0
    worst_outside_us = 0.0
    for kernel in kernels:
        call = launch_call(kernel)
        if call is None:
            missing_call += 1
            continue
        if kernel["ts"] < call["ts"] - EPSILON_US:
            before_call += 1
            worst_order_us = max(worst_order_us, call["ts"] - kernel["ts"])
        ranges = ranges_by_external_id.get(kernel.get("args", {}).get("External id"))
        if ranges is None:
            continue  # unlinked: counted by (b)
        slack = options.containment_tolerance_us
        if not any(r["ts"] - slack - EPSILON_US <= call["ts"] <= r["ts"] + r.get("dur", 0) + slack + EPSILON_US
                   for r in ranges):
            outside_range += 1
            worst_outside_us = max(worst_outside_us, min(
                max(r["ts"] - call["ts"], call["ts"] - r["ts"] - r.get("dur", 0)) for r in ranges))
    report.check("(d)", bool(kernels) and missing_call == before_call == outside_range == 0,
                 f"launch call found {len(kernels) - missing_call}/{len(kernels)}, kernel after it "
                 f"{len(kernels) - missing_call - before_call}, call inside its range "
                 f"{len(linked) - outside_range}/{len(linked)}")
    if before_call:
        report.figure(f"worst: a kernel starts {worst_order_us:.3f} us before its launch call")
    if outside_range:
        report.figure(f"worst: a launch call lies {worst_outside_us:.3f} us outside its range")

    named = 0
    misnamed = set()
    for kernel in linked:
        range_names = {r.get("name") for r in ranges_by_external_id[kernel["args"]["External id"]]}
        kernel_name = display_name(kernel.get("name", ""))
        if kernel_name in range_names:
            named += 1
        else:
            misnamed.add((kernel_name, ", ".join(sorted(range_names))))
    report.check("(e)", bool(linked) and named == len(linked),
                 f"kernels whose range is named after them: {named}/{len(linked)}")
    for kernel_name, range_names in sorted(misnamed)[:5]:
        report.figure(f"kernel {kernel_name!r} in range {range_names!r}")

    flows = {}
    for e in events:
        if e.get("cat") == "ac2g" and e.get("ph") in ("s", "f"):
            flows.setdefault(e.get("id"), set()).add(e["ph"])
    flow_pairs = sum(1 for phases in flows.values() if phases == {"s", "f"})
    gpu_annotations = sum(1 for e in slices if e.get("cat") == "gpu_user_annotation")
    print(f"  figures ac2g flow pairs: {flow_pairs}; gpu_user_annotation events: {gpu_annotations}")

    by_kernel = {}
    for kernel in kernels:
        entry = by_kernel.setdefault(display_name(kernel.get("name", "")), [0, 0.0])
        entry[0] += 1
        entry[1] += kernel.get("dur", 0) / 1000.0
    print(f"  {'kernel':<40} {'trace':>16} {'CUDA events':>20}")
    for name in sorted(set(by_kernel) | set(timed_by_kernel)):
        count, ms = by_kernel.get(name, (0, 0.0))
        timed_entry = timed_by_kernel.get(name, {})
        print(f"  {name:<40} {count:>4} {ms:>9.3f} ms {timed_entry.get('count', 0):>6} "
              f"{timed_entry.get('sum_ms', 0.0):>9.3f} ms")

    if report.failed:
        print("FAILED: " + ", ".join(report.failed))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

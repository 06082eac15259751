"""Checks a trace file against the writer checklist of docs/trace-format.md §6 (what torch.profiler's
files give TensorBoard, HTA and Perfetto). Standard library only.

Usage: check_trace_checklist.py TRACE_DIR_OR_FILE [--expect-steps 3,4,5]

Checked: (1) the file name; (2) the top-level keys, distributedInfo pretty-printed; (3) times in
µs with at most 3 decimals, `X` slices nested strictly per (pid, tid); (4) ProfilerStep#N slices;
(5) the launch chain of every kernel, copy and fill (runtime call with its correlation, device,
stream, External id of a CPU slice, ac2g s/f pair); (6) Kineto's kernel args; (7) DataLoader
naming; (8) `[memory]` args; (9) modern categories only. Prints one line per item and exits 1
naming every item that fails.
"""
import argparse
import decimal
import gzip
import json
import os
import re
import sys

NAME = re.compile(r"^.+\.\d+\.pt\.trace\.json(\.gz)?$")
TOP_LEVEL = ("schemaVersion", "deviceProperties", "distributedInfo", "displayTimeUnit", "baseTimeNanoseconds",
             "traceEvents", "traceName")
CATEGORIES = {"cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "kernel", "gpu_memcpy", "gpu_memset",
              "gpu_user_annotation", "cpu_instant_event", "ac2g", "fwdbwd", "cuda_sync", "overhead", "counter",
              "python_function", "Trace"}
KERNEL_ARGS = ("queued", "device", "context", "stream", "correlation", "registers per thread", "shared memory",
               "blocks per SM", "warps per SM", "grid", "block", "est. achieved occupancy %")
MEMORY_ARGS = ("Device Type", "Device Id", "Addr", "Bytes", "Total Allocated", "Total Reserved")


def trace_file(path):
    if os.path.isfile(path):
        return path
    files = sorted((os.path.join(path, f) for f in os.listdir(path) if NAME.match(f)), key=os.path.getmtime)
    if not files:
        sys.exit(f"check_trace_checklist: no *.pt.trace.json in {path}")
    return files[-1]


def three_decimals(value):
    return (value * 1000) == int(value * 1000)


def check(path, expected_steps):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        text = f.read()
    # Exact decimals: µs since the base time take 16 significant digits, more than a double holds.
    trace = json.loads(text, parse_float=decimal.Decimal)
    events = trace.get("traceEvents", [])
    slices = [e for e in events if e.get("ph") == "X"]
    results = []

    results.append(("1 name", bool(NAME.match(os.path.basename(path))), os.path.basename(path)))
    missing = [k for k in TOP_LEVEL if k not in trace]
    info = trace.get("distributedInfo", {})
    top_ok = (not missing and trace.get("schemaVersion") == 1 and trace.get("displayTimeUnit") == "ms"
              and all(k in info for k in ("backend", "rank", "world_size")) and '"rank": ' in text)
    results.append(("2 top level", top_ok, f"missing {missing}" if missing else f"distributedInfo {info}"))

    times_ok = all(three_decimals(e["ts"]) and three_decimals(e.get("dur", 0)) for e in events if "ts" in e)
    overlaps = 0
    first_overlap = ""
    rows = {}
    for e in slices:
        rows.setdefault((e["pid"], e["tid"]), []).append(e)
    for row in rows.values():
        row.sort(key=lambda e: (e["ts"], -e["dur"]))
        open_slices = []
        for e in row:
            end = e["ts"] + e["dur"]
            while open_slices and open_slices[-1]["ts"] + open_slices[-1]["dur"] <= e["ts"]:
                open_slices.pop()
            if open_slices and end > open_slices[-1]["ts"] + open_slices[-1]["dur"]:
                overlaps += 1
                outer = open_slices[-1]
                first_overlap = first_overlap or (f", first: {e['name']!r} [{e['ts']}, {end}] in {e['cat']} row "
                                                  f"({e['pid']}, {e['tid']}) crosses {outer['name']!r} "
                                                  f"[{outer['ts']}, {outer['ts'] + outer['dur']}]")
            open_slices.append(e)
    results.append(("3 time and nesting", times_ok and overlaps == 0, f"{overlaps} partial overlaps{first_overlap}"))

    steps = sorted(int(e["name"].split("#")[1]) for e in slices
                   if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#"))
    results.append(("4 steps", bool(steps) and (not expected_steps or steps == expected_steps), f"{steps}"))

    work = [e for e in slices if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    calls = {e["args"]["correlation"] for e in slices
             if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    cpu_ids = {e["args"]["External id"] for e in slices
               if e.get("cat") in ("cpu_op", "user_annotation") and "External id" in e.get("args", {})}
    flows = {}
    for e in events:
        if e.get("cat") == "ac2g":
            flows.setdefault(e["id"], set()).add(e["ph"])
    broken = [e["name"] for e in work
              if e["args"].get("correlation") not in calls or e["args"].get("External id") not in cpu_ids
              or "device" not in e["args"] or e["args"].get("stream", 0) <= 0
              or flows.get(e["args"]["correlation"]) != {"s", "f"}]
    results.append(("5 launch chain", not broken, f"{len(work)} GPU events, {len(broken)} broken {broken[:3]}"))

    kernels = [e for e in work if e["cat"] == "kernel"]
    bad_args = [e["name"] for e in kernels if any(k not in e["args"] for k in KERNEL_ARGS)]
    results.append(("6 kernel args", not bad_args, f"{len(kernels)} kernels, {len(bad_args)} lacking args"))

    loaders = {e["name"] for e in slices if "DataLoader" in e["name"] and e.get("cat") == "user_annotation"}
    misnamed = [n for n in loaders if not re.match(r"^enumerate\(DataLoader\)#\w+\.__next__$", n)]
    results.append(("7 names", not misnamed, f"DataLoader ranges {sorted(loaders)}"))

    memory = [e for e in events if e.get("name") == "[memory]"]
    bad_memory = [e for e in memory if e.get("cat") != "cpu_instant_event" or e.get("ph") != "i"
                  or any(k not in e.get("args", {}) for k in MEMORY_ARGS)]
    results.append(("8 memory", not bad_memory, f"{len(memory)} events, {len(bad_memory)} malformed"))

    categories = {e.get("cat") for e in events if "cat" in e}
    results.append(("9 categories", categories <= CATEGORIES, f"{sorted(categories)}"))

    print(f"check_trace_checklist: {path}")
    for label, ok, detail in results:
        print(f"  {label:<20} {'ok' if ok else 'FAIL':<5} {detail}")
    failed = [label for label, ok, _ in results if not ok]
    if failed:
        sys.exit(f"check_trace_checklist: failed {failed}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("path")
    parser.add_argument("--expect-steps", default="")
    args = parser.parse_args()
    check(trace_file(args.path), [int(s) for s in args.expect_steps.split(",") if s])


if __name__ == "__main__":
    main()

"""TensorBoard's profiler plugin's Memory view and `dlprof-report --format json`'s `memory_by_op`
on the same traces must agree: per device and op, the allocation counts, the bytes allocated and
the size increase, self and total, and the calls. The plugin counts the calls of the ops its
memory walk reaches: it skips the subtree of a node it never placed an allocation near, so its
calls may be fewer than dlprof's (every call); they are printed, never more.

Usage: check_tb_memory_agreement.py DLPROF_REPORT TRACE_DIR...

The plugin is torch-tb-profiler 0.4.3, run in this process on each file (RunProfileData.parse, then
MemorySnapshot.get_memory_statistics, the table behind its Memory view). It places an allocation
in the op whose [start, end) holds it; dlprof's ends are closed: an allocation at an op's very
end is that op's for dlprof and its parent's for the plugin. Such allocations are rare in a real
trace; each one that moves a figure is counted, printed and allowed (at most ALLOWED_AT_END_PCT
of the allocations). Exits 1 on any other difference, 77 (CTest's skip code) when the plugin
cannot be imported.
"""
import json
import logging
import os
import subprocess
import sys
import tempfile

ALLOWED_AT_END_PCT = 1.0
# The plugin's MemoryMetrics order, and dlprof's keys for each.
METRICS = (("self size increase", "self_size_increase"), ("self bytes", "self_allocated_bytes"),
           ("self allocations", "self_allocations"), ("size increase", "size_increase"),
           ("bytes", "allocated_bytes"), ("allocations", "allocations"))


def plugin_table(path):
    """{device ("CPU", "GPU0"): {op: [six metrics, calls]}}, and the allocations at an op's end."""
    from torch_tb_profiler.profiler.data import RunProfileData

    with tempfile.TemporaryDirectory() as cache_dir:
        profile = RunProfileData.parse("worker", "span", path, cache_dir)
    if profile.memory_snapshot is None:
        return {}, 0
    table = profile.memory_snapshot.get_memory_statistics(profile.tid2tree)
    ends = set()
    for root in profile.tid2tree.values():
        stack = list(root.children)
        while stack:
            node = stack.pop()
            ends.add((node.tid, node.end_time))
            stack.extend(node.children)
    at_end = sum(1 for record in profile.memory_snapshot.memory_records if (record.tid, record.ts) in ends)
    return {device: {op: list(values) for op, values in ops.items()} for device, ops in table.items()}, at_end


def dlprof_table(dlprof_report, trace_dir):
    completed = subprocess.run([dlprof_report, "--format", "json", "--top", "10000", trace_dir], capture_output=True,
                               text=True)
    if completed.returncode != 0:
        raise SystemExit(f"dlprof-report failed on {trace_dir}: {completed.stderr.strip()}")
    ranks = json.loads(completed.stdout)["ranks"]
    if len(ranks) != 1:
        raise SystemExit(f"{trace_dir}: one trace (one rank) a directory, not {len(ranks)}")
    table = {}
    for device in ranks[0]["memory_by_op"]:
        name = "CPU" if device["device_type"] == "CPU" else f"GPU{device['device']}"
        table[name] = {op["name"]: [op[key] for _, key in METRICS] + [op["calls"]] for op in device["ops"]}
    return table


def compare(trace_dir, dlprof_report):
    paths = sorted(os.path.join(trace_dir, file) for file in os.listdir(trace_dir)
                   if file.endswith(".json") or file.endswith(".gz"))
    if len(paths) != 1:
        raise SystemExit(f"{trace_dir}: one trace file expected, found {len(paths)}")
    theirs, at_end = plugin_table(paths[0])
    mine = dlprof_table(dlprof_report, trace_dir)
    problems, fewer_calls, compared = [], [], 0
    for device in sorted(set(theirs) | set(mine)):
        their_ops, my_ops = theirs.get(device, {}), mine.get(device, {})
        for op in sorted(set(their_ops) | set(my_ops)):
            their_row, my_row = their_ops.get(op), my_ops.get(op)
            if their_row is None or my_row is None:
                problems.append(f"{device} {op}: plugin {their_row}, dlprof {my_row}")
                continue
            compared += 1
            for index, (metric, _) in enumerate(METRICS):
                if their_row[index] != my_row[index]:
                    problems.append(f"{device} {op} {metric}: plugin {their_row[index]}, dlprof {my_row[index]}")
            if their_row[-1] > my_row[-1]:
                problems.append(f"{device} {op} calls: plugin {their_row[-1]}, dlprof {my_row[-1]}")
            elif their_row[-1] < my_row[-1]:
                fewer_calls.append(f"{device} {op}: plugin {their_row[-1]}, dlprof {my_row[-1]}")
    records = sum(row[5] for ops in theirs.values() for row in ops.values())
    allowed = at_end > 0 and records > 0 and 100.0 * at_end / max(records, 1) <= ALLOWED_AT_END_PCT
    name = os.path.basename(os.path.normpath(trace_dir))
    print(f"{'ok  ' if not problems or allowed else 'FAIL'} {name}: {compared} (device, op) rows compared, "
          f"devices {sorted(theirs)}, {len(problems)} difference(s), {at_end} allocation(s) at an op's end")
    for problem in problems:
        print(f"     {problem}")
    for fewer in fewer_calls:
        print(f"     fewer calls in the plugin's table (its walk skips ops under a node it never reached): {fewer}")
    return 0 if not problems or allowed else len(problems)


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        import torch_tb_profiler.profiler.data  # noqa: F401
    except ImportError as error:
        print(f"SKIP: torch-tb-profiler cannot be imported ({error}); scripts/test.sh installs it")
        return 77
    logging.disable(logging.ERROR)
    failures = sum(compare(trace_dir, sys.argv[1]) for trace_dir in sys.argv[2:])
    print(f"{failures} disagreement(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

"""TensorBoard's profiler plugin and `dlprof-report --format json` on the same traces must agree:
per rank and step, the step's duration and each role of TensorBoard's step-time breakdown
(Kernel, Memcpy, Memset, Communication, Runtime, DataLoader, CPU Exec, Other) within 1 % of the
step's duration; per GPU, utilization, est. SM efficiency and est. achieved occupancy within 1
percentage point, and unknown on both sides or on neither. (Tensor Core % is dlprof's own, see
step_breakdown.hpp, and is not compared.)

Usage: check_tb_agreement.py DLPROF_REPORT TRACE_SET_DIR...

The plugin is torch-tb-profiler 0.4.3, the release on PyPI, run in this process on each file
(RunProfileData.parse, the parser behind its Overview). dlprof follows the plugin's current
sources, so the check corrects the three bugs of 0.4.3 that those sources fix, each where it
changes the plugin's input, and counts what each correction touched:
  - cuda_runtime ignored: 0.4.3 has no `cuda_runtime` in EventTypeMap, so it sees no runtime
    call, its Runtime is 0 and no step is carried over to the device time of the work it
    launched. Corrected: `cuda_runtime` is a runtime call.
  - user_annotation dropped: 0.4.3's create_trace_event keeps no `user_annotation` slice but
    ProfilerStep#N and its five collectives, so ranges are not CPU Exec or DataLoader. Corrected:
    every user_annotation slice is kept, as an op of that type.
  - GPU-side ProfilerStep copies: 0.4.3 reads a `gpu_user_annotation` ProfilerStep#N (Kineto's
    copy of the step on the GPU timeline) as a second step. Corrected together with dlprof's
    deviation below: gpu_user_annotation slices are left out.
and applies dlprof's deliberate deviations (step_breakdown.hpp lists them with their reasons):
  - gpu_user_annotation slices are GPU-side copies of ranges, not CPU execution: left out.
  - Communication ops are any nccl:* or gloo:* name: the trace's names join the plugin's lists.
A trace without ops and without ProfilerStep gives the plugin a step from sys.maxsize to
-sys.maxsize - 1 (its span of no op); where it has no other CPU slice either (a GPU-only trace)
dlprof reports no step, and the check expects none.
Prints per set and rank the largest difference of each role (% of the step) and of each GPU
figure (percentage points), the corrections applied and every difference over the tolerance;
exits 1 on any disagreement, 77 (CTest's skip code) when the plugin cannot be imported.
"""
import collections
import contextlib
import json
import logging
import os
import subprocess
import sys
import tempfile

TOLERANCE_PCT = 1.0
# The plugin's ProfileRole order, and the keys dlprof's JSON gives each role.
ROLES = ("Kernel", "Memcpy", "Memset", "Communication", "Runtime", "DataLoader", "CPU Exec", "Other")
DLPROF_KEYS = ("kernel_us", "memcpy_us", "memset_us", "communication_us", "runtime_us", "dataloader_us", "cpu_exec_us",
               "other_us")
# The GPU summary's figures, in % (the plugin's None and dlprof's null: unknown).
GPU_METRICS = ("utilization", "est. SM efficiency", "est. achieved occupancy")


@contextlib.contextmanager
def corrected_plugin(corrections):
    """The plugin as its current sources and dlprof's deviations read a trace; `corrections` counts
    the events each correction changed."""
    from torch_tb_profiler.profiler import trace

    original_create = trace.create_trace_event
    original_map = dict(trace.EventTypeMap)
    original_nccl, original_gloo = list(trace.NcclOpNameSet), list(trace.GlooOpNameSet)

    def create_trace_event(event, is_pytorch_lightning):
        category = (event.get("cat") or "").lower()
        name = event.get("name") or ""
        if category == "gpu_user_annotation":
            corrections["gpu_user_annotation left out"] += 1
            return None
        if category == "cuda_runtime":
            corrections["cuda_runtime read as runtime"] += 1
        for names, plugin_names, prefix in ((trace.NcclOpNameSet, original_nccl, "nccl:"),
                                            (trace.GlooOpNameSet, original_gloo, "gloo:")):
            if name.startswith(prefix) and name not in plugin_names:
                if name not in names:
                    names.append(name)
                corrections[f"{name} a collective"] += 1
        created = original_create(event, is_pytorch_lightning)
        if created is None and category == "user_annotation":
            corrections["user_annotation kept"] += 1
            return trace.OperatorEvent(trace.EventTypes.USER_ANNOTATION, event)
        return created

    trace.create_trace_event = create_trace_event
    trace.EventTypeMap["cuda_runtime"] = trace.EventTypes.RUNTIME
    try:
        yield
    finally:
        trace.create_trace_event = original_create
        trace.EventTypeMap.clear()
        trace.EventTypeMap.update(original_map)
        # event_parser imported these lists by name: restore them in place.
        trace.NcclOpNameSet[:] = original_nccl
        trace.GlooOpNameSet[:] = original_gloo


def plugin_numbers(path):
    """The rank, [(step name, duration_us, [us per role])], {device: (utilization %, est. SM
    efficiency %, est. achieved occupancy %)} and the corrections applied."""
    from torch_tb_profiler.profiler.data import RunProfileData

    corrections = collections.Counter()
    with tempfile.TemporaryDirectory() as cache_dir, corrected_plugin(corrections):
        profile = RunProfileData.parse("worker", "span", path, cache_dir)
    rank = (profile.distributed_info or {}).get("rank", 0)
    steps = []
    for name, costs in zip(profile.steps_names, profile.steps_costs):
        duration = costs.costs[len(ROLES)]
        if duration < 0:  # the whole-trace span of a trace without CPU ops
            continue
        steps.append((name, duration, costs.costs[:len(ROLES)]))
    gpus = {}
    if steps:
        metrics = profile.gpu_metrics_parser
        for device in metrics.gpu_ids:
            efficiency = metrics.avg_approximated_sm_efficiency_per_device[device]
            gpus[device] = (100.0 * metrics.gpu_utilization[device], None if efficiency is None else 100.0 * efficiency,
                            metrics.avg_occupancy_per_device[device])
    return rank, steps, gpus, corrections


def dlprof_numbers(dlprof_report, trace_dir):
    """{rank: (steps, gpus)}, shaped as plugin_numbers gives them."""
    completed = subprocess.run([dlprof_report, "--format", "json", trace_dir], capture_output=True, text=True)
    if completed.returncode != 0:
        raise SystemExit(f"dlprof-report failed on {trace_dir}: {completed.stderr.strip()}")
    ranks = {}
    for entry in json.loads(completed.stdout)["ranks"]:
        steps = [("0" if step["number"] < 0 else str(step["number"]), step["total_us"],
                  [step[key] for key in DLPROF_KEYS]) for step in entry["step_breakdown"]]
        gpus = {gpu["device"]: (gpu["utilization_pct"], gpu["sm_efficiency_pct"], gpu["achieved_occupancy_pct"])
                for gpu in entry["gpus"]}
        ranks[entry["rank"]] = (steps, gpus)
    return ranks


def compare_steps(theirs, mine, largest, problems):
    for (step, their_total, their_roles), (_, my_total, my_roles) in zip(theirs, mine):
        pairs = [("Total", their_total, my_total)] + list(zip(ROLES, their_roles, my_roles))
        for role, their_us, my_us in pairs:
            difference_pct = 100.0 * abs(their_us - my_us) / their_total if their_total > 0 else abs(my_us)
            largest[role] = max(largest[role], difference_pct)
            if difference_pct > TOLERANCE_PCT:
                problems.append(f"step {step} {role}: plugin {their_us:.3f} us, dlprof {my_us:.3f} us "
                                f"({difference_pct:.3f}% of the step)")


def compare_gpus(theirs, mine, largest, problems):
    if sorted(theirs) != sorted(mine):
        problems.append(f"GPUs differ: plugin {sorted(theirs)}, dlprof {sorted(mine)}")
        return
    for device in sorted(theirs):
        for metric, their_pct, my_pct in zip(GPU_METRICS, theirs[device], mine[device]):
            if their_pct is None or my_pct is None:
                if (their_pct is None) != (my_pct is None):
                    problems.append(f"GPU {device} {metric}: plugin {their_pct}, dlprof {my_pct} (unknown on one side)")
                continue
            difference = abs(their_pct - my_pct)
            largest[metric] = max(largest[metric], difference)
            if difference > TOLERANCE_PCT:
                problems.append(f"GPU {device} {metric}: plugin {their_pct:.3f}%, dlprof {my_pct:.3f}% "
                                f"({difference:.3f} pp)")


def compare_set(dlprof_report, trace_dir):
    name = os.path.basename(os.path.normpath(trace_dir))
    paths = sorted(os.path.join(trace_dir, file) for file in os.listdir(trace_dir)
                   if file.endswith(".json") or file.endswith(".gz"))
    ours = dlprof_numbers(dlprof_report, trace_dir)
    failures = 0
    for path in paths:
        rank, their_steps, their_gpus, corrections = plugin_numbers(path)
        my_steps, my_gpus = ours.get(rank, (None, None))
        applied = ", ".join(f"{what} ({count})" for what, count in sorted(corrections.items())) or "none"
        if my_steps is None or [step[0] for step in my_steps] != [step[0] for step in their_steps]:
            failures += 1
            print(f"FAIL {name} rank {rank}: steps differ: plugin {[step[0] for step in their_steps]}, "
                  f"dlprof {None if my_steps is None else [step[0] for step in my_steps]}")
            continue
        largest = dict.fromkeys(("Total",) + ROLES, 0.0)
        largest_gpu = dict.fromkeys(GPU_METRICS, 0.0)
        problems = []
        compare_steps(their_steps, my_steps, largest, problems)
        compare_gpus(their_gpus, my_gpus, largest_gpu, problems)
        failures += len(problems)
        roles = ", ".join(f"{role} {pct:.3f}%" for role, pct in largest.items())
        gpus = ", ".join(f"{metric} {pp:.3f}" for metric, pp in largest_gpu.items())
        unknown = sorted({metric for values in their_gpus.values() for metric, value in zip(GPU_METRICS, values)
                          if value is None})
        print(f"{'FAIL' if problems else 'ok  '} {name} rank {rank}, {len(their_steps)} step(s)\n"
              f"     largest differences, % of the step (at most {TOLERANCE_PCT}): {roles}\n"
              f"     GPUs {sorted(their_gpus)}, largest differences in pp (at most {TOLERANCE_PCT}): {gpus}"
              f"{'; unknown on both sides: ' + ', '.join(unknown) if unknown else ''}\n"
              f"     corrections: {applied}")
        for problem in problems:
            print(f"     {problem}")
    return failures


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        import torch_tb_profiler.profiler.data  # noqa: F401
    except ImportError as error:
        print(f"SKIP: torch-tb-profiler cannot be imported ({error}); scripts/test.sh installs it")
        return 77
    logging.disable(logging.ERROR)  # the plugin's complaints about slices that do not nest, among others
    failures = sum(compare_set(sys.argv[1], trace_dir) for trace_dir in sys.argv[2:])
    print(f"{failures} disagreement(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

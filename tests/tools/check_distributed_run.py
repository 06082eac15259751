#!/usr/bin/env python3
"""Runs examples/distributed_training on N ranks under Open MPI's mpirun on this machine (loopback)
and checks what every rank wrote: one trace per rank in one directory, each with its own rank in
distributedInfo (backend, world_size, pg_count, pg_config) and the gradient all-reduces as c10d
records them (record_param_comms ops with their args, and LibTorch's gloo:all_reduce ops).

    check_distributed_run.py TRAINING_BINARY OUT_DIR [--ranks 4] [--report DLPROF_REPORT
        [--expect-straggler R]] [-- extra training flags]

With --report, dlprof-report reads the directory: every rank compared with its collectives, and the
straggler it names (--expect-straggler R: rank R, with evidence and a recommendation; otherwise none).

Exits 77 (CTest's skip) naming the reason when mpirun is not installed.
"""
import argparse
import glob
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def fail(message):
    print(f"check_distributed_run: {message}", file=sys.stderr)
    sys.exit(1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("training")
    parser.add_argument("out_dir")
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--report", help="dlprof-report, to check what it says of the ranks")
    parser.add_argument("--expect-straggler", type=int, help="the rank dlprof-report must name the straggler")
    parser.add_argument("--launcher", choices=["mpirun", "env"], default="mpirun",
                        help="mpirun, or env: the processes started here with torchrun's variables (RANK, WORLD_SIZE, ...)")
    parser.add_argument("--expect-dead", type=int, help="the rank that kills itself (--die-rank): the others must "
                        "fail its collectives, write what they recorded and exit 1; the report names it missing")
    parser.add_argument("--hta-python", help="a Python with HTA: it must read every rank of the directory, and its "
                        "per-rank communication/computation overlap agree with dlprof-report's within 0.5 pp")
    parser.add_argument("--tb-python", help="a Python with torch-tb-profiler: its distributed view must show every rank, "
                        "each with as many all-reduces as its trace holds (and with --expect-straggler, that rank "
                        "synchronizing least)")
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    args.extra = extra
    shutil.rmtree(args.out_dir, ignore_errors=True)
    if args.launcher == "mpirun":
        status = run_under_mpirun(args)
    else:
        status = run_with_environment(args)
    if status is not None:
        return status

    expected_ranks = [r for r in range(args.ranks) if r != args.expect_dead]
    traces = sorted(glob.glob(os.path.join(args.out_dir, "*.pt.trace.json")))
    if len(traces) != len(expected_ranks):
        fail(f"expected {len(expected_ranks)} traces in {args.out_dir}, found {len(traces)}: {traces}")
    ranks = set()
    for path in traces:
        with open(path, encoding="utf-8") as file:
            trace = json.load(file)
        info = trace.get("distributedInfo", {})
        name = os.path.basename(path)
        if info.get("backend") != "gloo" or info.get("world_size") != args.ranks or info.get("pg_count") != 1:
            fail(f"{name}: distributedInfo {info}")
        group = info["pg_config"][0]
        if group.get("pg_size") != args.ranks or group.get("ranks") != list(range(args.ranks)):
            fail(f"{name}: pg_config {info['pg_config']}")
        offset = trace.get("dlprof_clock_offset")
        if not offset or offset.get("reference_rank") != 0 or offset.get("uncertainty_ns", -1) < 0:
            fail(f"{name}: dlprof_clock_offset {offset}")
        if abs(offset["offset_ns"]) > offset["uncertainty_ns"] + 1_000_000:
            fail(f"{name}: ranks on one machine share a clock, but the offset is {offset}")
        rank = info.get("rank")
        if not name.startswith(f"rank{rank}."):
            fail(f"{name}: distributedInfo says rank {rank}")
        ranks.add(rank)
        events = trace["traceEvents"]
        comms = [e for e in events if e.get("name") == "record_param_comms"]
        if not comms:
            fail(f"{name}: no record_param_comms op")
        # As torch.profiler records them: LibTorch's own gloo:all_reduce op, one per all-reduce, on
        # Gloo's worker thread, and nothing of that name on the training thread.
        backend_ops = [e for e in events if e.get("name") == "gloo:all_reduce"]
        if len(backend_ops) != len(comms) or any(e.get("cat") != "cpu_op" or e.get("tid") == comms[0]["tid"]
                                                 for e in backend_ops):
            fail(f"{name}: {len(comms)} record_param_comms ops, but gloo:all_reduce events "
                 f"{[(e.get('cat'), e.get('tid')) for e in backend_ops]}")
        for op in comms:
            a = op["args"]
            if (a.get("Collective name") != "allreduce" or a.get("dtype") != "Float" or a.get("In msg nelems", 0) <= 0
                    or a.get("Group size") != args.ranks or a.get("Rank") != rank
                    or a.get("Process Group Ranks") != str(list(range(args.ranks)))):
                fail(f"{name}: record_param_comms args {a}")
        sequences = sorted(op["args"]["Seq"] for op in comms)
        if len(set(sequences)) != len(sequences):
            fail(f"{name}: repeated Seq numbers {sequences}")
        print(f"{name}: rank {rank}, {len(comms)} all-reduces, Seq {sequences[0]}..{sequences[-1]}")
    if ranks != set(expected_ranks):
        fail(f"ranks {sorted(ranks)} in the traces, expected {expected_ranks}")
    if args.report:
        check_report(args)
    return 0


def run_under_mpirun(args):
    """Runs the ranks under mpirun; returns CTest's skip status without it."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        print("SKIPPED: mpirun is not installed (Debian: openmpi-bin); the multi-process test needs a launcher")
        return 77
    environment = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                       OMPI_MCA_rmaps_base_oversubscribe="1")
    command = [mpirun, "-np", str(args.ranks), "-x", f"MASTER_PORT={free_port()}", "-x", "MASTER_ADDR=127.0.0.1",
               args.training, "--log-dir", args.out_dir, *args.extra]
    run = subprocess.run(command, env=environment, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=240)
    print(run.stdout)
    if run.returncode != 0:
        fail(f"{' '.join(command)} exited {run.returncode}:\n{run.stderr}")
    return None


def run_with_environment(args):
    """Starts the ranks as torchrun does (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT) and waits for them."""
    port = free_port()
    children = []
    for rank in range(args.ranks):
        environment = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(args.ranks), LOCAL_RANK=str(rank),
                           MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        for variable in [v for v in environment if v.startswith(("OMPI_", "PMI_", "SLURM_"))]:
            del environment[variable]
        children.append(subprocess.Popen([args.training, "--log-dir", args.out_dir, *args.extra], env=environment,
                                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         text=True))
    outcomes = [child.communicate(timeout=240) + (child.returncode,) for child in children]
    for rank, (out, err, status) in enumerate(outcomes):
        print(f"rank {rank} exited {status}: {out.strip()} {err.strip()[-400:]}")
        if rank == args.expect_dead:
            if status != -9:
                fail(f"rank {rank} was to kill itself with SIGKILL, but exited {status}")
        elif args.expect_dead is not None:
            if status != 1 or "a collective failed" not in err:
                fail(f"rank {rank}, whose peer died, exited {status}: {err[-2000:]}")
        elif status != 0:
            fail(f"rank {rank} exited {status}: {err[-2000:]}")
    return None


def check_report(args):
    run = subprocess.run([args.report, "--format", "json", args.out_dir], capture_output=True, text=True, timeout=120)
    if run.returncode != 0:
        fail(f"dlprof-report exited {run.returncode}: {run.stderr}")
    report = json.loads(run.stdout)
    collectives = report.get("collectives")
    if not collectives:
        fail("dlprof-report found no collectives")
    expected_ranks = [r for r in range(args.ranks) if r != args.expect_dead]
    if args.expect_dead is not None:
        missing = f"no trace of rank {args.expect_dead} of {args.ranks}"
        if not any(missing in problem for problem in collectives["problems"]):
            fail(f"dlprof-report does not say '{missing}': {collectives['problems']}")
    elif collectives["problems"]:
        fail(f"dlprof-report saw problems in a clean run: {collectives['problems']}")
    if sorted(r["rank"] for r in collectives["ranks"]) != expected_ranks:
        fail(f"dlprof-report compared ranks {[r['rank'] for r in collectives['ranks']]}")
    types = {t["name"]: t for t in collectives["types"]}
    if "allreduce" not in types or types["allreduce"]["busbw_gbps"] <= 0:
        fail(f"no all-reduce with a bandwidth: {collectives['types']}")
    for instance in collectives["instances"]:
        if args.expect_dead is None and instance["ranks"] != args.ranks:
            fail(f"a collective matched on {instance['ranks']} ranks, not {args.ranks}: {instance}")
    if args.hta_python:
        check_hta(args, report)
    if args.tb_python:
        check_tensorboard(args)
    straggler = collectives["straggler"]
    advice = [r for r in report["recommendations"] if r["id"] == "straggler"]
    for rank in collectives["ranks"]:
        print(f"rank {rank['rank']}: step {rank['step_us'] / 1e3:.3f} ms, forward {rank['forward_us'] / 1e3:.3f} ms, "
              f"waiting {rank['waiting_us'] / 1e3:.3f} ms, last at {rank['last_arrivals']}")
    if args.expect_straggler is None:
        return
    if not straggler or straggler["rank"] != args.expect_straggler:
        fail(f"expected rank {args.expect_straggler} named the straggler, got {straggler}")
    if straggler["phase"] != "forward" or straggler["last_arrivals"] == 0:
        fail(f"the straggler's evidence: {straggler}")
    if not advice or f"Rank {args.expect_straggler} arrives last" not in advice[0]["text"]:
        fail(f"no straggler recommendation naming rank {args.expect_straggler}: {report['recommendations']}")
    print(f"straggler: {advice[0]['text']}")
    # The straggler against the median rank: its forward range takes it longer, beyond noise.
    slow = report["slow_rank"]
    if not slow or slow["rank"] != args.expect_straggler or not slow["straggler"]:
        fail(f"expected rank {args.expect_straggler} as the slow rank, got {slow}")
    if not slow["keys"] or slow["keys"][0]["key"] != "forward":
        fail(f"the slow rank's keys should lead with forward: {slow['keys']}")
    print(f"slow rank: {slow['rank']} against rank {slow['median_rank']}: "
          + ", ".join(f"{key['key']} {key['delta_us'] / 1e3:+.3f} ms" for key in slow["keys"]))


HTA_SCRIPT = r"""
import json, math, sys
from hta.trace_analysis import TraceAnalysis
analysis = TraceAnalysis(trace_dir=sys.argv[1])
overlap = analysis.get_comm_comp_overlap(visualize=False)
result = {int(r): (None if math.isnan(p) else float(p)) for r, p in zip(overlap["rank"], overlap["comp_comm_overlap_pctg"])}
print("HTA_RESULT " + json.dumps({"ranks": sorted(int(r) for r in analysis.t.traces.keys()), "overlap": result}))
"""


def check_hta(args, report):
    run = subprocess.run([args.hta_python, "-c", HTA_SCRIPT, args.out_dir], capture_output=True, text=True, timeout=240)
    lines = [line for line in run.stdout.splitlines() if line.startswith("HTA_RESULT ")]
    if run.returncode != 0 or not lines:
        fail(f"HTA could not read {args.out_dir} ({run.returncode}):\n{run.stderr[-3000:]}")
    hta = json.loads(lines[-1][len("HTA_RESULT "):])
    if hta["ranks"] != [r for r in range(args.ranks) if r != args.expect_dead]:
        fail(f"HTA read ranks {hta['ranks']}")
    for rank in report["ranks"]:
        ours = rank["comm_comp_overlap"]
        theirs = hta["overlap"][str(rank["rank"])]
        if theirs is None:  # no communication kernels: HTA's NaN
            if ours["communication_us"] != 0:
                fail(f"rank {rank['rank']}: HTA finds no communication kernels, dlprof {ours}")
        elif ours["communication_us"] == 0 or abs(ours["overlap_pct"] - theirs) > 0.5:
            fail(f"rank {rank['rank']}: comm/comp overlap HTA {theirs}%, dlprof {ours}")
    print(f"HTA read ranks {hta['ranks']}; comm/comp overlap per rank HTA {hta['overlap']} agrees with dlprof-report")


TB_SCRIPT = r"""
import json, sys
def main():
    from torch_tb_profiler import io
    from torch_tb_profiler.profiler.loader import RunLoader
    run = RunLoader("dlprof", sys.argv[1], io.Cache()).load()
    views = [p for p in run.profiles.values() if type(p).__name__ == "DistributedRunProfile"]
    if not views:
        print("TB_RESULT " + json.dumps(None))
        return
    view = views[0]
    calls = {worker: {row[0]: row[1] for row in table["rows"]} for worker, table in view.comm_ops["data"].items()}
    waits = {worker: times[1] for worker, times in view.steps_to_wait["data"]["all"].items()}
    print("TB_RESULT " + json.dumps({"calls": calls, "synchronizing_us": waits}))
if __name__ == "__main__":
    main()
"""


def check_tensorboard(args):
    """TensorBoard's profiler plugin reads every rank into its distributed view (workers named as
    tensorboard_trace_handler names them, rank<R>), with each rank's all-reduces counted once."""
    run = subprocess.run([args.tb_python, "-c", TB_SCRIPT, args.out_dir], capture_output=True, text=True, timeout=240)
    lines = [line for line in run.stdout.splitlines() if line.startswith("TB_RESULT ")]
    if run.returncode != 0 or not lines:
        fail(f"TensorBoard's plugin could not read {args.out_dir} ({run.returncode}):\n{run.stderr[-3000:]}")
    tb = json.loads(lines[-1][len("TB_RESULT "):])
    if tb is None:
        fail("TensorBoard's plugin shows no distributed view of the ranks")
    expected = {f"rank{r}" for r in range(args.ranks) if r != args.expect_dead}
    if set(tb["calls"]) != expected:
        fail(f"TensorBoard's distributed view shows workers {sorted(tb['calls'])}, expected {sorted(expected)}")
    for path in glob.glob(os.path.join(args.out_dir, "*.pt.trace.json")):
        with open(path, encoding="utf-8") as file:
            trace = json.load(file)
        worker = f"rank{trace['distributedInfo']['rank']}"
        recorded = sum(1 for e in trace["traceEvents"] if e.get("name") == "record_param_comms")
        if tb["calls"][worker].get("gloo:all_reduce") != recorded:
            fail(f"TensorBoard counts {tb['calls'][worker]} for {worker}, whose trace holds {recorded} all-reduces")
    # The straggler waits less than most ranks: compared with the others' median, since on a loaded
    # machine (ranks sharing two cores with other tests) any one rank may be descheduled for as
    # long as the straggler is late.
    waits = tb["synchronizing_us"]
    if args.expect_straggler is not None:
        straggler = f"rank{args.expect_straggler}"
        others = sorted(wait for worker, wait in waits.items() if worker != straggler)
        if not others or waits.get(straggler, float("inf")) >= statistics.median(others):
            fail(f"TensorBoard's synchronizing time {waits}: rank {args.expect_straggler}, the straggler, "
                 "should wait less than the other ranks' median")
    print(f"TensorBoard's distributed view: workers {sorted(tb['calls'])}, all-reduces counted once, "
          f"synchronizing time (us) {waits}")


if __name__ == "__main__":
    sys.exit(main())

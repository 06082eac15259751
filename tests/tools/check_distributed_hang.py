#!/usr/bin/env python3
"""Two ranks of examples/distributed_training over Gloo, started as torchrun starts them, under
DLPROF_MODE=flight-recorder; rank 1 stops calling collectives at a step, so rank 0 waits inside its
all-reduce. Rank 0's flight recorder must dump that step while it still runs, once, naming the
collective it waits in, and dlprof-report must say so; neither rank is killed by dlprof. (Rank 1's
step never ends either: it may dump it once, inside no collective.)

    check_distributed_hang.py TRAINING_BINARY DLPROF_REPORT OUT_DIR
"""
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

HANG_STEP = 25
STEPS = 60


def fail(message):
    print(f"check_distributed_hang: {message}", file=sys.stderr)
    sys.exit(1)


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def dumps_of(out_dir, rank):
    return sorted(glob.glob(os.path.join(out_dir, f"rank{rank}.*.pt.trace.json")))


def main():
    training, report, out_dir = sys.argv[1:4]
    shutil.rmtree(out_dir, ignore_errors=True)
    port = free_port()
    children = []
    for rank in range(2):
        environment = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                           MASTER_PORT=str(port), DLPROF_MODE="flight-recorder", DLPROF_FLIGHT_STEPS="3",
                           DLPROF_SLOW_STEP_FACTOR="3")
        for variable in [v for v in environment if v.startswith(("OMPI_", "PMI_", "SLURM_"))]:
            del environment[variable]
        children.append(subprocess.Popen(
            [training, "--log-dir", out_dir, "--steps", str(STEPS), "--timeout-s", "120", "--hang-rank", "1",
             "--hang-at-step", str(HANG_STEP)],
            env=environment, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    try:
        deadline = time.monotonic() + 200
        while not dumps_of(out_dir, 0):
            if time.monotonic() > deadline:
                fail("rank 0 wrote no dump while it waited for rank 1")
            for rank, child in enumerate(children):
                if child.poll() is not None:
                    fail(f"rank {rank} exited {child.returncode} before rank 0's dump: {child.stderr.read()[-2000:]}")
            time.sleep(0.1)
        time.sleep(1.5)  # a second dump of the same hang would be written by now
        dumps = dumps_of(out_dir, 0)
        if len(dumps) != 1:
            fail(f"one dump per hang, found {dumps}")
        if len(dumps_of(out_dir, 1)) > 1:  # its step never ends either: one dump at most
            fail(f"rank 1 dumped its idle step more than once: {dumps_of(out_dir, 1)}")
        for rank, child in enumerate(children):
            if child.poll() is not None:
                fail(f"rank {rank} ended ({child.returncode}): dlprof never ends the job it watches")
        with open(dumps[0], encoding="utf-8") as file:
            reason = json.load(file).get("dlprof_flight_recorder", "")
        expected = [f"hang: step {HANG_STEP} has run ", "the thread calling step() is inside gloo:all_reduce (record_param_comms) for ",
                    "within all_reduce_gradients"]
        missing = [text for text in expected if text not in reason]
        if missing:
            fail(f"the dump's reason lacks {missing}: {reason!r}")
        text = subprocess.run([report, dumps[0]], capture_output=True, text=True, timeout=120)
        words = " ".join(text.stdout.split())  # the report wraps its lines at 100 columns
        if text.returncode != 0 or f"Flight-recorder dump: hang: step {HANG_STEP} has run " not in words or \
                "inside gloo:all_reduce (record_param_comms)" not in words:
            fail(f"dlprof-report does not name the hang (exit {text.returncode}):\n{text.stdout[:3000]}{text.stderr}")
        print(f"rank 0's dump: {reason}")
    finally:
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGKILL)
            child.communicate()


if __name__ == "__main__":
    main()

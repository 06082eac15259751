#!/usr/bin/env python3
"""Makes a synthetic N-rank trace set from one rank's trace, for measuring dlprof-report over many ranks.

    python3 bench/make_rank_set.py --ranks 64 -o /tmp/ranks-64 TRACE [--slow-rank R --slow-ms M] [--skew-ms S]

Every rank gets a copy of TRACE (a dlprof or torch.profiler trace, .json or .json.gz) as its own file,
rank<R>.pt.trace.json, with distributedInfo's rank, world_size and pg_config set for N ranks and each
record_param_comms op's "Rank", "Group size" and "Process Group Ranks" to match. Each rank's clock is
shifted by a random offset of up to a second, written as dlprof_clock_offset (what dlprof-report undoes);
its collectives are entered up to --skew-ms later than rank 0's at random, and those of --slow-rank
--slow-ms later still, so that the set has arrival skew and a straggler.
"""
import argparse
import copy
import gzip
import json
import os
import random
import sys


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as file:
        return json.load(file)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("--ranks", type=int, required=True)
    parser.add_argument("-o", "--out", required=True, help="the directory the set is written to (created)")
    parser.add_argument("--skew-ms", type=float, default=0.2, help="random lateness of each rank's collectives")
    parser.add_argument("--slow-rank", type=int, default=-1)
    parser.add_argument("--slow-ms", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.ranks < 1:
        parser.error("--ranks must be at least 1")
    base = load(args.trace)
    random.seed(args.seed)
    os.makedirs(args.out, exist_ok=True)
    ranks_text = "[" + ", ".join(str(r) for r in range(args.ranks)) + "]"
    for rank in range(args.ranks):
        trace = copy.deepcopy(base) if rank + 1 < args.ranks else base
        offset_ns = 0 if rank == 0 else random.randint(-10**9, 10**9)
        late_us = 0.0 if rank == 0 else random.uniform(0, args.skew_ms * 1000)
        if rank == args.slow_rank:
            late_us += args.slow_ms * 1000
        info = trace.setdefault("distributedInfo", {})
        info.update({"backend": info.get("backend", "gloo"), "rank": rank, "world_size": args.ranks, "pg_count": 1,
                     "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cpu:gloo",
                                    "pg_size": args.ranks, "ranks": list(range(args.ranks))}]})
        # A time t of this rank is t + offset_ns on rank 0's clock: its own clock reads offset_ns less.
        trace["dlprof_clock_offset"] = {"reference_rank": 0, "offset_ns": offset_ns, "uncertainty_ns": 50_000,
                                        "round_trips": 16}
        events = trace["traceEvents"]
        calls = [e for e in events if e.get("name") == "record_param_comms" and "Collective name" in e.get("args", {})]
        for call in calls:
            call["args"].update({"Rank": rank, "Group size": args.ranks, "Process Group Ranks": ranks_text})
            # The call and what nests in it start late_us later; their ends stay.
            start, end = call["ts"], call["ts"] + call.get("dur", 0)
            entered = min(start + late_us, end)
            for event in events:
                if event.get("tid") != call.get("tid") or event.get("pid") != call.get("pid") or "dur" not in event:
                    continue
                if start <= event["ts"] and event["ts"] + event["dur"] <= end and event["ts"] < entered:
                    event["dur"] = max(0.0, event["ts"] + event["dur"] - entered)
                    event["ts"] = entered
        shift_us = -offset_ns / 1000.0
        for event in events:
            if isinstance(event.get("ts"), (int, float)):
                event["ts"] += shift_us
        with open(os.path.join(args.out, f"rank{rank}.pt.trace.json"), "w", encoding="utf-8") as file:
            json.dump(trace, file)
    print(f"{args.ranks} ranks written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

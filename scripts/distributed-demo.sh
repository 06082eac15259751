#!/usr/bin/env bash
# Data-parallel training on 4 ranks under Open MPI's mpirun on this machine (loopback), every rank
# profiled (examples/distributed_training.cpp), then dlprof-report over the ranks' traces: each
# rank's phases, the collectives with their bandwidths and arrival skew, and the straggler.
# Installs what it needs (LibTorch, Gloo's headers, Open MPI), builds, and runs as root.
# Extra arguments go to the trainer; by default rank 2 computes 30 ms longer each step:
#   scripts/distributed-demo.sh                       # rank 2 is the straggler
#   scripts/distributed-demo.sh --slow-rank -1        # no straggler
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
cmake -S . -B build/demo -G Ninja -DCMAKE_BUILD_TYPE=Release -DDLPROF_BUILD_TESTS=OFF -DDLPROF_BUILD_BENCH=OFF >/dev/null
cmake --build build/demo --target distributed_training dlprof_report
log_dir=./log/distributed
rm -rf "$log_dir"
arguments=(--slow-rank 2 --slow-ms 30 "$@")
# Open MPI refuses root unless told; 4 ranks may be more than this machine's cores.
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  mpirun -np 4 --oversubscribe -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT="${MASTER_PORT:-29500}" \
  build/demo/examples/distributed_training --log-dir "$log_dir" "${arguments[@]}"
echo
exec build/demo/tools/dlprof-report "$log_dir"

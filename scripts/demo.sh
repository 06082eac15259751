#!/usr/bin/env bash
# The main demo: installs dependencies (LibTorch among them), builds, and trains a small CNN with
# LibTorch, profiled end to end (examples/libtorch_training.cpp). It prints the summary (top ops
# by self time and by FLOPs, peak memory) and writes a trace under ./log/libtorch_training/.
# Where LibTorch cannot be built against, it says so and runs the CPU example without LibTorch
# (examples/cpu_training_loop.cpp) instead.
# Extra arguments go to the demo, e.g. `scripts/demo.sh --num-workers 0`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
cmake -S . -B build/demo -G Ninja -DCMAKE_BUILD_TYPE=Release -DDLPROF_BUILD_TESTS=OFF -DDLPROF_BUILD_BENCH=OFF >/dev/null
if cmake --build build/demo --target help | grep -q '^libtorch_training:'; then
  cmake --build build/demo --target libtorch_training
  exec build/demo/examples/libtorch_training --log-dir ./log/libtorch_training "$@"
fi
echo "demo: LibTorch was not found (dlprof::torch is not built): running the CPU example without LibTorch" >&2
cmake --build build/demo --target cpu_training_loop
exec build/demo/examples/cpu_training_loop --log-dir ./log/cpu_training_loop "$@"

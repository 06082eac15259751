#!/usr/bin/env bash
# The main demo: installs dependencies, builds, and runs a CPU training loop profiled end to end.
# It prints the step breakdown and summary table and writes a trace under ./log/.
# Extra arguments go to the demo, e.g. `scripts/demo.sh --num-workers 4`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
cmake -S . -B build/demo -G Ninja -DCMAKE_BUILD_TYPE=Release -DDLPROF_BUILD_TESTS=OFF -DDLPROF_BUILD_BENCH=OFF >/dev/null
cmake --build build/demo --target cpu_training_loop
exec build/demo/examples/cpu_training_loop --log-dir ./log/cpu_training_loop "$@"

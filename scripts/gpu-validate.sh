#!/usr/bin/env bash
# Validates GPU collection end to end on a machine with an NVIDIA GPU and the CUDA toolkit:
#  1. builds examples/cuda_training_loop (Release) into build/gpu-validate;
#  2. runs it with --stats and checks its trace against what it measured itself
#     (scripts/gpu_validate.py: kernel count, kernel-to-range links, kernel time against CUDA
#     events, launch/kernel ordering, range names);
#  3. runs it with the profiler off and on, alternately, and prints the step-time overhead of
#     collecting CPU ranges and CUPTI activity;
#  4. runs it under DLPROF_MODE=flight-recorder with CUDA activity and checks that a dump asked for
#     by the trigger file holds kernels;
#  5. where Python's PyTorch brings a LibTorch with NCCL, builds examples/distributed_training
#     against it and trains one rank over NCCL: its trace must hold the all-reduces as
#     record_param_comms ops with their args, NCCL kernels linked to them, and distributedInfo
#     with backend nccl, pg_config and nccl_version.
# Exits 1 when a check of step 2, 4 or 5 fails (after the others have run), 0 otherwise.
#
# Environment:
#   DLPROF_DEPS_PREFIX  an install prefix holding what the machine's packages lack: fmt's headers
#                       and CMake package (include/fmt/, lib/cmake/fmt/), and zlib if it has no
#                       zlib development package. Passed to CMake as CMAKE_PREFIX_PATH. Defaults
#                       to .carry/deps when scripts/gpu-carry.sh has filled it.
#   GPU_VALIDATE_RUNS   profiler-off/profiler-on run pairs for the overhead figure (default 3)
#   CUDAARCHS           GPU architectures to build for (CMake's variable; default 80;90)
# Extra arguments go to every run of the example, e.g. `scripts/gpu-validate.sh --host-memory pageable`.
set -euo pipefail
cd "$(dirname "$0")/.."

build=build/gpu-validate
runs=${GPU_VALIDATE_RUNS:-3}
configure=(-S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DDLPROF_WITH_CUDA=ON -DDLPROF_BUILD_TESTS=OFF
           -DDLPROF_BUILD_BENCH=OFF -DDLPROF_BUILD_EXAMPLES=ON)
if [[ -z ${DLPROF_DEPS_PREFIX:-} && -d .carry/deps ]]; then
  DLPROF_DEPS_PREFIX=$PWD/.carry/deps
fi
if [[ -n ${DLPROF_DEPS_PREFIX:-} ]]; then
  configure+=(-DCMAKE_PREFIX_PATH="$DLPROF_DEPS_PREFIX" -DZLIB_ROOT="$DLPROF_DEPS_PREFIX")
fi
if command -v ninja >/dev/null; then
  configure+=(-G Ninja)
fi

echo "== build ($build)"
cmake "${configure[@]}" >/dev/null
cmake --build "$build" --target cuda_training_loop -j "$(nproc)"
example=$build/examples/cuda_training_loop
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || true

echo "== trace checked against the program's own measurements"
rm -rf "$build/log" "$build/stats.json"
"$example" --steps 12 --log-dir "$build/log" --stats "$build/stats.json" "$@"
validation=0
python3 scripts/gpu_validate.py --trace "$build/log" --stats "$build/stats.json" || validation=$?
if ((validation > 1)); then
  exit "$validation"  # unreadable input: nothing else to learn
fi

echo "== step-time overhead of profiling ($runs run(s) each way, 20 steps recorded per run)"
mean_step_ms() {  # the example's "Mean step wall time: X ms" line
  local output ms
  output=$("$example" --steps 22 --active 20 --log-dir "$build/overhead-log" "$@")
  ms=$(sed -n 's/^Mean step wall time: \([0-9.]*\) ms.*/\1/p' <<<"$output")
  if [[ -z $ms ]]; then
    echo "gpu-validate: no 'Mean step wall time' line in the output of $example $*" >&2
    exit 1
  fi
  echo "$ms"
}
off=()
on=()
for ((run = 1; run <= runs; ++run)); do
  off+=("$(mean_step_ms --profile off "$@")")
  on+=("$(mean_step_ms --profile on "$@")")
  echo "run $run: profiler off ${off[-1]} ms, on ${on[-1]} ms per step"
done
rm -rf "$build/overhead-log"
python3 - "${off[*]}" "${on[*]}" <<'EOF'
import statistics, sys
off = [float(x) for x in sys.argv[1].split()]
on = [float(x) for x in sys.argv[2].split()]
off_ms, on_ms = statistics.median(off), statistics.median(on)
print(f"median step time: profiler off {off_ms:.3f} ms, on {on_ms:.3f} ms: "
      f"overhead {on_ms - off_ms:+.3f} ms ({100 * (on_ms - off_ms) / off_ms:+.2f}%)")
EOF

echo "== flight recorder with CUDA activity: a dump holds the kept steps' kernels"
rm -rf "$build/flight-log"
: >"$build/flight-trigger"  # present from the start: the first step() dumps
DLPROF_MODE=flight-recorder DLPROF_ACTIVITIES=cpu,cuda DLPROF_FLIGHT_STEPS=5 DLPROF_TRIGGER_FILE="$build/flight-trigger" \
  "$example" --steps 12 --log-dir "$build/flight-log" "$@" >/dev/null
python3 - "$build/flight-log" <<'EOF' || validation=1
import glob, json, sys
files = sorted(glob.glob(sys.argv[1] + "/*.pt.trace.json"))
if not files:
    sys.exit("gpu-validate: the flight recorder wrote no dump")
trace = json.load(open(files[0]))
kernels = [e for e in trace["traceEvents"] if e.get("cat") == "kernel"]
linked = [e for e in kernels if e.get("args", {}).get("External id")]
print(f"flight-recorder dump: {trace.get('dlprof_flight_recorder')!r}: {len(kernels)} kernels, {len(linked)} linked to a range")
if not kernels:
    sys.exit("gpu-validate: the flight recorder's dump has no kernels")
EOF

echo "== one rank over NCCL: collectives recorded, NCCL kernels linked to them"
torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null || true)
if [[ -z $torch_prefix ]]; then
  echo "skipped: Python has no PyTorch, so there is no LibTorch with NCCL to build against"
else
  nccl_build=$build-nccl
  nccl_configure=(-S . -B "$nccl_build" -DCMAKE_BUILD_TYPE=Release -DDLPROF_WITH_CUDA=ON -DDLPROF_WITH_TORCH=ON
                  -DDLPROF_BUILD_TESTS=OFF -DDLPROF_BUILD_BENCH=OFF -DDLPROF_BUILD_EXAMPLES=ON
                  -DCMAKE_PREFIX_PATH="${DLPROF_DEPS_PREFIX:+$DLPROF_DEPS_PREFIX;}$torch_prefix")
  if [[ -n ${DLPROF_DEPS_PREFIX:-} ]]; then
    nccl_configure+=(-DZLIB_ROOT="$DLPROF_DEPS_PREFIX")
  fi
  if command -v ninja >/dev/null; then
    nccl_configure+=(-G Ninja)
  fi
  cmake "${nccl_configure[@]}" >/dev/null
  if ! cmake --build "$nccl_build" --target distributed_training -j "$(nproc)"; then
    echo "gpu-validate: distributed_training does not build against $torch_prefix" >&2
    validation=1
  else
    rm -rf "$nccl_build/log"
    RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=${GPU_VALIDATE_PORT:-29531} \
      "$nccl_build/examples/distributed_training" --backend nccl --steps 6 --log-dir "$nccl_build/log" || validation=1
    python3 - "$nccl_build/log" <<'EOF' || validation=1
import glob, json, sys
files = sorted(glob.glob(sys.argv[1] + "/*.pt.trace.json"))
if not files:
    sys.exit("gpu-validate: the NCCL run wrote no trace")
trace = json.load(open(files[0]))
events = trace["traceEvents"]
info = trace.get("distributedInfo", {})
comms = [e for e in events if e.get("name") == "record_param_comms" and e.get("args", {}).get("Collective name") == "allreduce"]
# A kernel carries the External id of the innermost op or range that launched it: the all-reduce's
# record_param_comms op or the nccl:all_reduce range inside it.
ranges = [e for e in events if e.get("name", "").startswith("nccl:all_reduce")]
external = {e.get("args", {}).get("External id") for e in comms + ranges} - {None}
nccl = [e for e in events if e.get("cat") == "kernel" and "nccl" in e.get("name", "").lower()]
linked = [e for e in nccl if e.get("args", {}).get("External id") in external]
print(f"NCCL run: backend {info.get('backend')!r}, nccl_version {info.get('nccl_version')!r}, "
      f"{len(info.get('pg_config', []))} group(s); {len(comms)} all-reduces recorded, {len(nccl)} NCCL kernels, "
      f"{len(linked)} linked to an all-reduce")
problems = []
if info.get("backend") != "nccl" or not info.get("nccl_version") or not info.get("pg_config"):
    problems.append("distributedInfo lacks backend nccl, nccl_version or pg_config")
if not comms:
    problems.append("no record_param_comms all-reduce")
if not nccl:
    problems.append("no NCCL kernel")
elif len(linked) < len(nccl):
    problems.append(f"{len(nccl) - len(linked)} NCCL kernels not linked to their all-reduce")
if problems:
    sys.exit("gpu-validate: " + "; ".join(problems))
EOF
  fi
fi

if ((validation != 0)); then
  echo "gpu-validate: the trace checks failed (see above)" >&2
fi
exit "$validation"

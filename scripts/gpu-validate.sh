#!/usr/bin/env bash
# Validates GPU collection end to end on a machine with an NVIDIA GPU and the CUDA toolkit:
#  1. builds examples/cuda_training_loop (Release) into build/gpu-validate;
#  2. runs it with --stats and checks its trace against what it measured itself
#     (scripts/gpu_validate.py: kernel count, kernel-to-range links, kernel time against CUDA
#     events, launch/kernel ordering, range names);
#  3. runs it with --graph --with-stack: every kernel and fill a CUDA graph replays must name the
#     launch range that captured its node (its kernel's) and that range's call stack, and
#     dlprof-report must say so in its CUDA graphs section;
#  4. runs it with the profiler off and on, alternately, and prints the step-time overhead of
#     collecting CPU ranges and CUPTI activity;
#  5. runs it under DLPROF_MODE=flight-recorder with CUDA activity and checks that a dump asked for
#     by the trigger file holds kernels;
#  6. runs it under the flight recorder with CUDA activity until it dies of SIGSEGV (--crash-at):
#     the process must die of that signal, and dlprof-report must read the crash file, marked with
#     the signal and holding the steps before it;
#  7. where Python's PyTorch brings a LibTorch with CUDA, builds examples/distributed_training and
#     bench/torch_profiler_side_by_side against it, then
#     - trains one rank over NCCL: its trace must hold the all-reduces as record_param_comms ops
#       with their args, NCCL kernels linked to them, and distributedInfo with backend nccl,
#       pg_config and nccl_version;
#     - runs dlprof beside torch.profiler (LibTorch's Kineto profiler) on the same training loop
#       (scripts/gpu_side_by_side.py): the kernel multisets, the kernels linked to ops, the
#       step-time overhead and the CPU cost per kernel launch of each;
#     - runs the roofline workload under both (scripts/gpu_roofline_check.py): a BF16 matmul must
#       reach a plausible share of the dense peak and never pass it, and dlprof's trace must hold
#       the GPU's clocks, power and clock limits read from NVML; dlprof-report reads both traces;
#  8. where Python has PyTorch, records reference traces with torch.profiler itself
#     (scripts/gpu_reference_traces.py: memory, stacks, modules and FLOPs, with and without a leak)
#     into GPU_VALIDATE_OUT, and dlprof-report reads them.
# Exits 1 when a check of step 2, 3, 5, 6, 7 or 8 fails (after the others have run), 0 otherwise.
#
# Environment:
#   DLPROF_DEPS_PREFIX  an install prefix holding what the machine's packages lack: fmt's headers
#                       and CMake package (include/fmt/, lib/cmake/fmt/), and zlib if it has no
#                       zlib development package. Passed to CMake as CMAKE_PREFIX_PATH. Defaults
#                       to .carry/deps when scripts/gpu-carry.sh has filled it.
#   GPU_VALIDATE_RUNS   profiler-off/profiler-on run pairs for the overhead figure (default 3)
#   GPU_VALIDATE_ROUNDS rounds of the side-by-side runs (default 3)
#   GPU_VALIDATE_OUT    a directory that receives what is worth keeping, as one archive
#                       (gpu-validate.tar.gz): the side-by-side summary and its train traces
#                       (gzip), the roofline traces, summary and reports, the reference traces,
#                       the crash file, the flight recorder's dump
#   CUDAARCHS           GPU architectures to build for (CMake's variable; default 80;90)
# Extra arguments go to every run of the example, e.g. `scripts/gpu-validate.sh --host-memory pageable`.
set -euo pipefail
cd "$(dirname "$0")/.."

build=build/gpu-validate
torch_build=$build-torch
runs=${GPU_VALIDATE_RUNS:-3}
out=${GPU_VALIDATE_OUT:-}
if [[ -z ${DLPROF_DEPS_PREFIX:-} && -d .carry/deps ]]; then
  DLPROF_DEPS_PREFIX=$PWD/.carry/deps
fi
generator=()
if command -v ninja >/dev/null; then
  generator=(-G Ninja)
fi
common=(-DCMAKE_BUILD_TYPE=Release -DDLPROF_USE_CUDA=ON -DDLPROF_BUILD_TESTS=OFF -DDLPROF_BUILD_EXAMPLES=ON
        "${generator[@]}")
deps_prefix=()
if [[ -n ${DLPROF_DEPS_PREFIX:-} ]]; then
  common+=(-DZLIB_ROOT="$DLPROF_DEPS_PREFIX")
  deps_prefix=(-DCMAKE_PREFIX_PATH="$DLPROF_DEPS_PREFIX")
fi
torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null || true)
# A PyTorch wheel's include directory carries its own fmt (PyTorch 2.11's is fmt 12), which the
# compiler finds before the one dlprof links: used header-only, nothing links against another
# fmt's library.
torch_flags=()
if [[ -n $torch_prefix && -f $torch_prefix/../../include/fmt/format-inl.h ]]; then
  torch_flags=(-DCMAKE_CXX_FLAGS=-DFMT_HEADER_ONLY)
fi
if [[ -n $out ]]; then
  mkdir -p "$out"
fi

# Both builds at once: the CUDA example and dlprof-report, and what builds against LibTorch.
echo "== build ($build${torch_prefix:+ and $torch_build})"
cmake -S . -B "$build" "${common[@]}" "${deps_prefix[@]}" -DDLPROF_BUILD_BENCH=OFF >/dev/null
torch_built=0
if [[ -n $torch_prefix ]]; then
  cmake -S . -B "$torch_build" "${common[@]}" "${torch_flags[@]}" -DDLPROF_USE_TORCH=ON -DDLPROF_BUILD_BENCH=ON \
    -DCMAKE_PREFIX_PATH="${DLPROF_DEPS_PREFIX:+$DLPROF_DEPS_PREFIX;}$torch_prefix" >/dev/null
  cmake --build "$torch_build" --target distributed_training torch_profiler_side_by_side -j "$(nproc)" \
    >"$torch_build.log" 2>&1 &
  torch_builder=$!
fi
cmake --build "$build" --target cuda_training_loop dlprof_report -j "$(nproc)"
if [[ -n $torch_prefix ]]; then
  if wait "$torch_builder"; then
    torch_built=1
  else
    grep -E 'error' -A5 "$torch_build.log" | head -60
  fi
fi
example=$build/examples/cuda_training_loop
report=$build/tools/dlprof-report
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || true
python3 -c 'import torch; print(f"PyTorch {torch.__version__}, CUDA {torch.version.cuda}")' 2>/dev/null || true

echo "== trace checked against the program's own measurements"
rm -rf "$build/log" "$build/stats.json"
"$example" --steps 12 --log-dir "$build/log" --stats "$build/stats.json" "$@"
validation=0
python3 scripts/gpu_validate.py --trace "$build/log" --stats "$build/stats.json" || validation=$?
if ((validation > 1)); then
  exit "$validation"  # unreadable input: nothing else to learn
fi

echo "== CUDA graphs: each replayed kernel names the launch that captured it"
rm -rf "$build/graph-log"
"$example" --steps 7 --active 4 --graph --with-stack --log-dir "$build/graph-log" "$@" >/dev/null || validation=1
"$report" --format json "$build/graph-log" >"$build/graph-report.json" || validation=1
python3 scripts/gpu_validate.py --graph-trace "$build/graph-log" --graph-report "$build/graph-report.json" || validation=1
"$report" "$build/graph-log" | sed -n '/^CUDA graphs/,/^$/p'

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

if [[ -n $out ]]; then
  for dump in "$build"/flight-log/*.pt.trace.json; do
    gzip -c "$dump" >"$out/flight-dump.pt.trace.json.gz"
  done
fi

echo "== a crash with CUDA activity: the flight recorder's crash file"
rm -rf "$build/crash-log"
crash_status=0
DLPROF_MODE=flight-recorder DLPROF_ACTIVITIES=cpu,cuda DLPROF_FLIGHT_STEPS=3 \
  "$example" --steps 12 --crash-at 8 --log-dir "$build/crash-log" "$@" >/dev/null 2>"$build/crash.stderr" || crash_status=$?
crash_files=("$build"/crash-log/*.dlprof-crash)
if ((crash_status != 128 + 11)); then
  echo "gpu-validate: --crash-at 8 exited with status $crash_status, not 139 (SIGSEGV)" >&2
  tail -5 "$build/crash.stderr" >&2
  validation=1
elif [[ ! -f ${crash_files[0]} ]]; then
  echo "gpu-validate: the crash left no .dlprof-crash file in $build/crash-log" >&2
  validation=1
else
  if [[ -n $out ]]; then
    cp "${crash_files[0]}" "$out/"
  fi
  "$report" --format json "$build/crash-log" >"$build/crash-report.json" || validation=1
  python3 - "$build/crash-report.json" <<'EOF' || validation=1
import json, sys
rank = json.load(open(sys.argv[1]))["ranks"][0]
steps = [s["step"] for s in rank["step_breakdown"]]
print(f"crash file: died of SIGSEGV; dlprof-report reads it: {rank['flight_recorder_dump']!r}, steps {steps}")
if "SIGSEGV" not in str(rank["flight_recorder_dump"]) or not steps:
    sys.exit("gpu-validate: the crash file's report names no SIGSEGV or holds no step")
EOF
fi

echo "== one rank over NCCL: collectives recorded, NCCL kernels linked to them"
if [[ -z $torch_prefix ]]; then
  echo "skipped: Python has no PyTorch, so there is no LibTorch with NCCL to build against"
else
  nccl_build=$torch_build
  if ((torch_built == 0)); then
    echo "gpu-validate: distributed_training or torch_profiler_side_by_side does not build against $torch_prefix" \
      "($torch_build.log)" >&2
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
work = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
        and e.get("args", {}).get("External id") in external]
world = int(info.get("world_size", 1) or 1)
print(f"NCCL run: backend {info.get('backend')!r}, nccl_version {info.get('nccl_version')!r}, "
      f"{len(info.get('pg_config', []))} group(s), world size {world}; {len(comms)} all-reduces recorded, "
      f"{len(nccl)} NCCL kernels, {len(linked)} linked to an all-reduce; GPU work linked to an all-reduce: "
      + (", ".join(f"{e.get('cat')} {e.get('name')}" for e in work[:4]) or "none"))
problems = []
if info.get("backend") != "nccl" or not info.get("nccl_version") or not info.get("pg_config"):
    problems.append("distributedInfo lacks backend nccl, nccl_version or pg_config")
if not comms:
    problems.append("no record_param_comms all-reduce")
if not nccl and world == 1:
    # One rank has nothing to exchange: NCCL copies the buffer or, in place, does nothing.
    print("one rank: NCCL runs no ring kernel, so the kernel link is checked only with two ranks or more")
elif not nccl:
    problems.append("no NCCL kernel")
elif len(linked) < len(nccl):
    problems.append(f"{len(nccl) - len(linked)} NCCL kernels not linked to their all-reduce")
if problems:
    sys.exit("gpu-validate: " + "; ".join(problems))
EOF

    echo "== dlprof beside torch.profiler on the same training loop"
    rm -rf "$torch_build/side-by-side"
    python3 scripts/gpu_side_by_side.py --program "$torch_build/bench/torch_profiler_side_by_side" \
      --out "$torch_build/side-by-side" --rounds "${GPU_VALIDATE_ROUNDS:-3}" || validation=1
    if [[ -n $out && -f $torch_build/side-by-side/side_by_side.json ]]; then
      cp "$torch_build/side-by-side/side_by_side.json" "$out/"
      for profiler in dlprof torch; do
        gzip -c "$torch_build/side-by-side/train/$profiler.pt.trace.json" >"$out/train-$profiler.pt.trace.json.gz"
      done
    fi

    echo "== the roofline workload: a BF16 matmul against the dense peak, the GPU's clocks beside it"
    roofline=$torch_build/roofline
    rm -rf "$roofline"
    for profiler in dlprof torch; do
      "$torch_build/bench/torch_profiler_side_by_side" --profiler "$profiler" --workload roofline --launches 40 \
        --warmup-steps 5 --log-dir "$roofline" || validation=1
    done
    python3 scripts/gpu_roofline_check.py --dlprof "$roofline/dlprof.pt.trace.json" --torch "$roofline/torch.pt.trace.json" \
      ${out:+--summary "$out/roofline.json"} || validation=1
    for profiler in dlprof torch; do
      "$report" "$roofline/$profiler.pt.trace.json" >"$roofline/$profiler-report.txt" || validation=1
      echo "-- dlprof-report of the $profiler trace"
      head -30 "$roofline/$profiler-report.txt"
      if [[ -n $out ]]; then
        cp "$roofline/$profiler-report.txt" "$out/roofline-$profiler-report.txt"
        gzip -c "$roofline/$profiler.pt.trace.json" >"$out/roofline-$profiler.pt.trace.json.gz"
      fi
    done
  fi
fi

echo "== reference traces of torch.profiler itself: memory, stacks, modules, FLOPs"
if [[ -z $torch_prefix || -z $out ]]; then
  echo "skipped: needs Python's PyTorch and GPU_VALIDATE_OUT to keep the traces in"
else
  python3 scripts/gpu_reference_traces.py "$out/reference-traces" || validation=1
  for name in transformer leak; do
    "$report" "$out/reference-traces/$name" >"$out/reference-traces/$name-report.txt" 2>&1 || validation=1
    head -25 "$out/reference-traces/$name-report.txt"
  done
fi

# The device tool brings a few files of a call back: what is kept goes back as one archive.
if [[ -n $out ]]; then
  tar -czf "$out.tar.gz" -C "$out" . && rm -rf "${out:?}"/* && mv "$out.tar.gz" "$out/gpu-validate.tar.gz"
fi

if ((validation != 0)); then
  echo "gpu-validate: the trace checks failed (see above)" >&2
fi
exit "$validation"

#!/usr/bin/env bash
# Builds dlprof's tests and examples on a GPU machine, against the CUDA toolkit, CUPTI and the
# LibTorch of its Python's PyTorch (2.x, CUDA), and runs every test there: the GPU-only tests that
# skip elsewhere run, and dlprof::torch is checked against LibTorch 2.x as well as Debian's 1.13.
#
# What the machine lacks comes from .carry (scripts/gpu-carry.sh fills it on a Debian machine):
# fmt, zlib, nlohmann_json and RapidJSON as an install prefix in .carry/deps, GoogleTest's
# sources in .carry/googletest (built and installed into .carry/deps on first use).
#
# Environment:
#   DLPROF_DEPS_PREFIX  the install prefix of what the machine lacks (default .carry/deps)
#   CUDAARCHS           GPU architectures to build for (CMake's variable; default 90)
#   GPU_TEST_LOG_DIR    where the build and test logs go (default build/gpu-test)
# Extra arguments go to ctest, e.g. `scripts/gpu-test.sh -R Torch`.
set -euo pipefail
cd "$(dirname "$0")/.."

build=build/gpu-test
deps=${DLPROF_DEPS_PREFIX:-$PWD/.carry/deps}
logs=${GPU_TEST_LOG_DIR:-$build}
export CUDAARCHS=${CUDAARCHS:-90}
mkdir -p "$logs"
generator=()
if command -v ninja >/dev/null; then
  generator=(-G Ninja)
fi

if [[ ! -d $deps/lib/cmake/GTest && -d .carry/googletest ]]; then
  echo "== GoogleTest into $deps"
  cmake -S .carry/googletest -B build/googletest "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_INSTALL_PREFIX="$deps" -DCMAKE_INSTALL_LIBDIR=lib >/dev/null
  cmake --build build/googletest -j "$(nproc)" >/dev/null
  cmake --install build/googletest >/dev/null
fi

prefix_path=$deps
torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null || true)
if [[ -n $torch_prefix ]]; then
  prefix_path+=";$torch_prefix"
  echo "== LibTorch: $(python3 -c 'import torch; print(torch.__version__)') at $torch_prefix"
fi
# A PyTorch wheel's include directory carries its own fmt (PyTorch 2.11's is fmt 12), which the
# compiler finds before the one dlprof links: used header-only, nothing links against another
# fmt's library.
torch_flags=()
if [[ -n $torch_prefix && -f $torch_prefix/../../include/fmt/format-inl.h ]]; then
  torch_flags=(-DCMAKE_CXX_FLAGS=-DFMT_HEADER_ONLY)
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || true

echo "== build ($build; log in $logs/build.log)"
cmake -S . -B "$build" "${generator[@]}" "${torch_flags[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLPROF_WERROR=ON \
  -DDLPROF_USE_CUDA=ON -DDLPROF_USE_TORCH=ON -DDLPROF_BUILD_BENCH=OFF \
  -DCMAKE_PREFIX_PATH="$prefix_path" -DZLIB_ROOT="$deps" >"$logs/configure.log" 2>&1 ||
  { tail -40 "$logs/configure.log"; exit 1; }
grep '^-- dlprof' "$logs/configure.log" || true
cmake --build "$build" -j "$(nproc)" >"$logs/build.log" 2>&1 || { grep -E 'error|Error' -A5 "$logs/build.log" | head -80; exit 1; }

echo "== tests (log in $logs/ctest.log)"
status=0
ctest --test-dir "$build" -j "$(nproc)" --output-on-failure "$@" >"$logs/ctest.log" 2>&1 || status=$?
grep -E 'tests passed|tests failed|\*\*\*|Failed|SKIPPED|Skipped' "$logs/ctest.log" | head -60
exit "$status"

#!/usr/bin/env bash
# Builds and runs every test: installs dependencies, then
#  1. the main build with -Wall -Wextra -Werror (all tests, consumer-package tests included, and
#     the demo's trace opened by Holistic Trace Analysis and TensorBoard's profiler plugin);
#  2. AddressSanitizer + UndefinedBehaviorSanitizer (all unit tests);
#  3. ThreadSanitizer (the unit tests of code that runs on several threads: rings, ranges, the
#     Profiler's writer, publisher and watcher, the flight recorder, the GPU clock sampler, the
#     reader's two-thread parse and the report's parallel analyses; tests/CMakeLists.txt lists
#     the single-threaded ones it leaves out).
# Each configuration lives in its own build/<name> directory.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh

# Holistic Trace Analysis, TensorBoard's profiler plugin, Playwright and jsonschema in a virtual
# environment, made again when the pinned list changes: the tests open the demo's trace with the
# first two, drive the report page in Debian's chromium with Playwright and check the report's
# JSON against its schema. Python compiles the modules the tests import when they first do, not
# every module installed.
tools_venv=build/venv-trace-tools
tools_requirements=scripts/trace-tools-requirements.txt
if ! cmp -s "$tools_requirements" "$tools_venv/requirements.txt"; then
  rm -rf "$tools_venv"
  python3 -m venv "$tools_venv"
  "$tools_venv/bin/pip" install -q --disable-pip-version-check --no-deps --no-compile -r "$tools_requirements"
  cp "$tools_requirements" "$tools_venv/requirements.txt"
fi

jobs=$(nproc)
configure_and_build() {
  local name=$1
  shift
  cmake -S . -B "build/$name" -G Ninja -DDLPROF_WERROR=ON "$@" >/dev/null
  cmake --build "build/$name" -j "$jobs"
}

echo "== main build (-Wall -Wextra -Werror) (at ${SECONDS} s)"
# Line tables only (-g1, the CUDA example's host code too): stack traces name files and lines, and
# compiling takes a quarter less than with full debug information. The tools and the Profiler's
# runtime library are compiled at -O2, and the ThreadSanitizer build compiles the unit tests at
# -O1: they give the warnings that need the optimiser's flow analysis. Here the test programs,
# the examples and the benchmarks (built, not run, so that they keep compiling) are compiled at
# -O0, in four fifths of -O1's time; unit_tests at -O1, whose tests of large traces take a minute
# more of CPU at -O0 than -O1's compile does.
configure_and_build main -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
  -DCMAKE_CUDA_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DDLPROF_TEST_OPTIMIZATION=-O0 -DDLPROF_UNIT_TEST_OPTIMIZATION=-O1 \
  -DDLPROF_TRACE_TOOLS_PYTHON="$PWD/$tools_venv/bin/python"
ctest --test-dir build/main -j "$jobs" --output-on-failure

# UndefinedBehaviorSanitizer without its type-mismatch checks (alignment, null), which instrument
# every memory access and take a third of this build's time: AddressSanitizer reports a null or
# wild access itself, and x86-64 reads misaligned data as it reads aligned.
echo "== AddressSanitizer + UndefinedBehaviorSanitizer (at ${SECONDS} s)"
configure_and_build asan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-g1" -DDLPROF_SANITIZE=address,undefined \
  -DDLPROF_SANITIZE_EXCLUDE=alignment,null -DDLPROF_BUILD_BENCH=OFF -DDLPROF_BUILD_EXAMPLES=OFF \
  -DDLPROF_USE_TORCH=OFF  # LibTorch is not built with the sanitizers
# verify_asan_link_order=0: a library preloaded into every process (stdbuf's, a launcher's) comes
# before the ASan runtime, which otherwise refuses to start.
# intercept_tls_get_addr=0: GCC 12's LeakSanitizer keeps its own record of each thread's dynamic
# TLS blocks, and after a dlopen'ed library with TLS (libunwind, for recorded stacks) it can hold
# one whose start is a small integer: its scan at exit then faults ("Tracer caught signal 11").
# Static TLS, stacks and the heap are still scanned.
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:verify_asan_link_order=0:intercept_tls_get_addr=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build/asan -j "$jobs" --output-on-failure -L dlprof

# -O1 compiles in two thirds of -O2's time. There g++ 12 warns of maybe-uninitialized std::optional
# members and of a mismatched delete in range_test's own operator new, where there are none; the
# main build keeps both warnings, at -O2.
echo "== ThreadSanitizer (at ${SECONDS} s)"
configure_and_build tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DCMAKE_CXX_FLAGS="-Wno-maybe-uninitialized -Wno-mismatched-new-delete" -DDLPROF_SANITIZE=thread \
  -DDLPROF_BUILD_BENCH=OFF -DDLPROF_BUILD_EXAMPLES=OFF -DDLPROF_USE_TORCH=OFF
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
  ctest --test-dir build/tsan -j "$jobs" --output-on-failure -L dlprof

echo "== all tests passed (at ${SECONDS} s)"

#!/usr/bin/env bash
# Installs what dlprof's build, tests, benchmarks and demo need on Debian 12, as root.
# Idempotent: packages already present are left alone. The CUDA toolkit is optional: when
# /usr/local/cuda (or nvcc on PATH) exists, ranges are also NVTX3 ranges and GPU collection and
# the CUDA example are built. libtorch-dev (LibTorch 1.13, CPU) gives dlprof::torch, rapidjson-dev
# the trace reader (dlprof::import), libdeflate-dev its fast inflating of gzip traces, chromium the
# test that renders dlprof-report's HTML page, libgloo-dev (Gloo's headers, which LibTorch's c10d headers
# include) and openmpi-bin (mpirun) the distributed example and its multi-process test, libunwind8
# the fast unwinder that stacks use where it is present (opened at run time), libdw-dev (elfutils)
# dlprof-report's symboliser of call stacks, and binutils' addr2line the benchmark it is compared with.
set -euo pipefail

packages=(cmake ninja-build g++ clang libfmt-dev zlib1g-dev libdeflate-dev nlohmann-json3-dev rapidjson-dev libgtest-dev libgmock-dev
          libbenchmark-dev python3 python3-venv libtorch-dev chromium libgloo-dev openmpi-bin libunwind8
          libdw-dev binutils)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "dlprof: missing Debian packages (${missing[*]}); run this script as root" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

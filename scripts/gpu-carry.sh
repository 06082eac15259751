#!/usr/bin/env bash
# Gathers, into .carry/deps (git-ignored), what a GPU machine lacks to build dlprof's CUDA
# example: fmt's headers, library and CMake package, and zlib's headers and library, from this
# machine's Debian packages (scripts/install_deps.sh installs them). The device tool copies the
# folder across when asked to carry `.carry`; scripts/gpu-validate.sh then finds it there.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh >/dev/null

deps=.carry/deps
multiarch=$(gcc -print-multiarch)
rm -rf "$deps"
mkdir -p "$deps/include" "$deps/lib/$multiarch/cmake"
cp -a /usr/include/fmt /usr/include/zlib.h /usr/include/zconf.h "$deps/include/"
cp -a /usr/lib/"$multiarch"/cmake/fmt "$deps/lib/$multiarch/cmake/"
cp -a /usr/lib/"$multiarch"/libfmt.so* /usr/lib/"$multiarch"/libz.so* "$deps/lib/$multiarch/"
echo "gpu-carry: $(du -sh "$deps" | cut -f1) in $deps"

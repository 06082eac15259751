#!/usr/bin/env bash
# Gathers, into .carry (git-ignored), what a GPU machine lacks to build dlprof and its tests, from
# this machine's Debian packages (scripts/install_deps.sh installs them):
#   .carry/deps        fmt's headers, library and CMake package; zlib's headers and library;
#                      nlohmann_json's headers and CMake package; RapidJSON's headers (an
#                      install prefix);
#   .carry/googletest  GoogleTest's sources (scripts/gpu-test.sh builds them there).
# The device tool copies the folder across when asked to carry `.carry`; scripts/gpu-validate.sh
# and scripts/gpu-test.sh then find it there.
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
mkdir -p "$deps/share/cmake"
cp -a /usr/include/nlohmann /usr/include/rapidjson "$deps/include/"
cp -a /usr/share/cmake/nlohmann_json "$deps/share/cmake/"
rm -rf .carry/googletest
cp -a /usr/src/googletest .carry/googletest
echo "gpu-carry: $(du -sh .carry | cut -f1) in .carry"

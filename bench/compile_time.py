#!/usr/bin/env python3
"""What including dlprof costs a file that is instrumented, against NVTX3's own C++ header.

Each case is a translation unit that includes one header and opens one range; each is compiled
--runs times with the same compiler and flags (g++ -std=c++17 -O2 by default, as a Release build
of a trainer compiles it), and the median wall time is compared with the NVTX3 one's.

    python3 bench/compile_time.py [--runs 5] [--cxx g++] [--fmt-header-only]

The dlprof cases use fmt as the dlprof::dlprof target gives it: the compiled library
(FMT_HEADER_ONLY unset) unless --fmt-header-only says otherwise. The "runtime library" cases are
files of a program that links dlprof::runtime (DLPROF_RUNTIME_LIBRARY=1), where the Profiler's
runtime is compiled once, in the library, rather than in the file.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CUDA_INCLUDE = "/usr/local/cuda/include"

ONE_RANGE = "int train_step(int x) { DLPROF_RANGE(\"step\"); return x + 1; }\n"
A_LOOP = ("int main() {\n"
          "  dlprof::Profiler prof(dlprof::ProfilerOptions{}.schedule(dlprof::schedule(1, 1, 2))\n"
          "                        .on_trace_ready(dlprof::tensorboard_trace_handler(\"log\")));\n"
          "  prof.start();\n"
          "  for (int i = 0; i < 8; ++i) { DLPROF_RANGE(\"step\"); prof.step(); }\n"
          "  prof.stop();\n"
          "}\n")
PROFILER = "#include <dlprof/profiler.hpp>\n"
RUNTIME_LIBRARY = "#define DLPROF_RUNTIME_LIBRARY 1\n"

CASES = [
    ("nvtx3", "#include <nvtx3/nvtx3.hpp>\n"
              "int train_step(int x) { nvtx3::scoped_range r{\"step\"}; return x + 1; }\n"),
    ("dlprof/annotate.hpp", "#include <dlprof/annotate.hpp>\n" + ONE_RANGE),
    ("dlprof/profiler.hpp", PROFILER + ONE_RANGE),
    ("dlprof/profiler.hpp, runtime library", RUNTIME_LIBRARY + PROFILER + ONE_RANGE),
    ("dlprof/profiler.hpp + a loop", PROFILER + A_LOOP),
    ("dlprof/profiler.hpp + a loop, runtime library", RUNTIME_LIBRARY + PROFILER + A_LOOP),
]


def compile_seconds(cxx, flags, source_path, object_path):
    start = time.perf_counter()
    subprocess.run([cxx, *flags, "-c", source_path, "-o", object_path], check=True)
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--cxx", default=os.environ.get("CXX", "g++"))
    parser.add_argument("--opt", default="-O2")
    parser.add_argument("--fmt-header-only", action="store_true")
    args = parser.parse_args()

    flags = ["-std=c++17", args.opt, f"-I{ROOT}/include"]
    if os.path.isdir(os.path.join(CUDA_INCLUDE, "nvtx3")):
        flags += [f"-I{CUDA_INCLUDE}", "-DDLPROF_HAS_NVTX=1"]
    else:
        sys.exit(f"compile_time.py: NVTX3 headers not found under {CUDA_INCLUDE}")
    dlprof_flags = flags + (["-DFMT_HEADER_ONLY=1"] if args.fmt_header_only else [])

    results = {}
    with tempfile.TemporaryDirectory() as work:
        sources = []
        for index, (label, text) in enumerate(CASES):
            path = os.path.join(work, f"case{index}.cpp")
            with open(path, "w") as f:
                f.write(text)
            sources.append((label, path, flags if label == "nvtx3" else dlprof_flags))
        # Interleaved runs: a machine that slows down mid-run slows every case alike.
        times = {label: [] for label, _, _ in sources}
        for _ in range(args.runs):
            for label, path, case_flags in sources:
                times[label].append(compile_seconds(args.cxx, case_flags, path, path + ".o"))
        for label, _, case_flags in sources:
            preprocessed = subprocess.run([args.cxx, *case_flags, "-E", os.path.join(work, f"case{[s[0] for s in sources].index(label)}.cpp")],
                                          check=True, capture_output=True, text=True).stdout
            results[label] = (statistics.median(times[label]), preprocessed.count("\n"))

    baseline = results["nvtx3"][0]
    version = subprocess.run([args.cxx, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    print(f"{version}, {' '.join(flags[:2])}, fmt {'header-only' if args.fmt_header_only else 'compiled'}, "
          f"median of {args.runs}")
    print(f"{'translation unit':48} {'seconds':>8} {'x NVTX3':>8} {'lines':>8}")
    for label, (seconds, lines) in results.items():
        print(f"{label:48} {seconds:8.2f} {seconds / baseline:8.2f} {lines:8d}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""dlprof-report against Holistic Trace Analysis as a user runs them, whole processes on the same trace
file: wall time from start to exit and peak RSS, each the median of --runs.

    python3 bench/report_vs_hta.py --dlprof-report build/main/tools/dlprof-report \
        --hta-python build/venv-trace-tools/bin/python [--runs 3] [--no-hta] TRACE...

dlprof: `dlprof-report --format json -o /dev/null TRACE`, one process (reading the trace and every
analysis of the report). HTA 0.5: one Python process that imports HTA, then runs
TraceAnalysis(trace_dir) + get_temporal_breakdown(visualize=False) +
get_gpu_kernel_breakdown(visualize=False); trace_dir is a temporary directory holding only a symlink
to TRACE named rank-0.pt.trace.json(.gz). HTA's logging is left as it is; what it prints is kept and
its warnings are listed under the table. Its time without the imports (measured inside its script)
is given for reference. The peak RSS of a process is its ru_maxrss from os.wait4. The runs of the
two alternate (dlprof, HTA, dlprof, HTA, ...), so that a change in the host's load falls on both.
Each TRACE is a file (.json or .json.gz); --no-hta runs dlprof-report only (for traces too large for
HTA). Prints a Markdown table: medians, the ratios HTA/dlprof of time and dlprof/HTA of peak
memory, and dlprof's peak RSS over the size of the uncompressed JSON.
"""
import argparse
import datetime
import gzip
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HTA_SCRIPT = r"""
import json, sys, time
started = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
imported = time.perf_counter()
analysis = TraceAnalysis(trace_dir=sys.argv[1])
temporal = analysis.get_temporal_breakdown(visualize=False)
kernel_types = analysis.get_gpu_kernel_breakdown(visualize=False)
done = time.perf_counter()
print("HTA_RESULT " + json.dumps({"import_s": imported - started, "analysis_s": done - imported}), flush=True)
"""


def run_process(command):
    """Runs command to its end: (wall seconds, peak RSS in KiB, exit status, its stdout + stderr)."""
    with tempfile.TemporaryFile() as output:
        started = time.perf_counter()
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - started
        child.returncode = os.waitstatus_to_exitcode(status)
        output.seek(0)
        text = output.read().decode("utf-8", "replace")
    return seconds, usage.ru_maxrss, child.returncode, text


def json_size(path):
    if not path.endswith(".gz"):
        return os.path.getsize(path)
    size = 0
    with gzip.open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            size += len(chunk)
    return size


def hta_warnings(text):
    keep = []
    for line in text.splitlines():
        if line.startswith("HTA_RESULT"):
            continue
        lowered = line.lower()
        if any(word in lowered for word in ("warn", "error", "rounding", "deprecat", "could not", "fail")):
            if line not in keep:
                keep.append(line)
    return keep


def measure(trace, args):
    trace = os.path.abspath(trace)
    row = {"trace": trace, "json_bytes": json_size(trace), "dlprof": [], "hta": [], "warnings": []}
    dlprof_command = [args.dlprof_report, "--format", "json", "-o", "/dev/null", trace]
    with tempfile.TemporaryDirectory(prefix="report-vs-hta-") as trace_dir:
        name = "rank-0.pt.trace.json" + (".gz" if trace.endswith(".gz") else "")
        os.symlink(trace, os.path.join(trace_dir, name))
        for _ in range(args.runs):
            seconds, peak_kib, status, text = run_process(dlprof_command)
            if status != 0:
                raise SystemExit(f"{' '.join(dlprof_command)} exited with {status}:\n{text}")
            row["dlprof"].append({"seconds": seconds, "peak_kib": peak_kib})
            print(f"  dlprof-report {os.path.basename(trace)}: {seconds:.2f} s, {peak_kib / 1024:.0f} MiB", file=sys.stderr)
            if args.no_hta:
                continue
            seconds, peak_kib, status, text = run_process([args.hta_python, "-c", HTA_SCRIPT, trace_dir])
            result = [line for line in text.splitlines() if line.startswith("HTA_RESULT ")]
            if status != 0 or not result:
                raise SystemExit(f"HTA exited with {status}:\n{text}")
            inside = json.loads(result[-1].split(" ", 1)[1])
            row["hta"].append({"seconds": seconds, "peak_kib": peak_kib, **inside})
            for line in hta_warnings(text):
                if line not in row["warnings"]:
                    row["warnings"].append(line)
            print(f"  HTA {os.path.basename(trace)}: {seconds:.2f} s ({inside['analysis_s']:.2f} s without imports), "
                  f"{peak_kib / 1024:.0f} MiB", file=sys.stderr)
    return row


def median(runs, key):
    return statistics.median(r[key] for r in runs)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dlprof-report", required=True, help="the dlprof-report binary")
    parser.add_argument("--hta-python", help="a Python with Holistic Trace Analysis installed")
    parser.add_argument("--runs", type=int, default=3, help="runs of each, the median is reported (default 3)")
    parser.add_argument("--no-hta", action="store_true", help="run dlprof-report only")
    parser.add_argument("traces", nargs="+", metavar="TRACE", help="trace files (.json or .json.gz)")
    args = parser.parse_args()
    if not args.no_hta and not args.hta_python:
        parser.error("--hta-python is required unless --no-hta")
    for trace in args.traces:
        if not os.path.isfile(trace):
            parser.error(f"{trace} is not a file")

    load_before = os.getloadavg()
    started = time.perf_counter()
    rows = [measure(trace, args) for trace in args.traces]
    elapsed = time.perf_counter() - started
    load_after = os.getloadavg()

    print(f"# {datetime.datetime.now().isoformat(timespec='seconds')}  {platform.node()}  {os.cpu_count()} CPUs  "
          f"medians of {args.runs} whole-process runs; load average {load_before[0]:.2f} before, "
          f"{load_after[0]:.2f} after; {elapsed:.0f} s in all")
    print()
    if args.no_hta:
        print("| trace | JSON (MB) | dlprof-report wall | dlprof peak RSS (MiB) | dlprof RSS / JSON |")
        print("| --- | ---: | ---: | ---: | ---: |")
    else:
        print("| trace | JSON (MB) | dlprof-report wall | dlprof peak RSS (MiB) | dlprof RSS / JSON "
              "| HTA wall | HTA without imports | HTA peak RSS (MiB) | time HTA / dlprof | peak RSS dlprof / HTA |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for row in rows:
        mb = row["json_bytes"] / 1e6
        d_s, d_kib = median(row["dlprof"], "seconds"), median(row["dlprof"], "peak_kib")
        cells = [os.path.join(*row["trace"].split(os.sep)[-2:]), f"{mb:.1f}", f"{d_s:.3f} s", f"{d_kib / 1024:.0f}",
                 f"{d_kib * 1024 / row['json_bytes']:.2f}"]
        if not args.no_hta:
            h_s, h_kib = median(row["hta"], "seconds"), median(row["hta"], "peak_kib")
            h_inside = median(row["hta"], "analysis_s")
            cells += [f"{h_s:.2f} s", f"{h_inside:.2f} s", f"{h_kib / 1024:.0f}", f"{h_s / d_s:.1f}x",
                      f"{d_kib / h_kib:.3f}"]
        print("| " + " | ".join(cells) + " |")
    print()
    for row in rows:
        runs = ", ".join(f"{r['seconds']:.3f}" for r in row["dlprof"])
        line = f"- {row['trace']}: dlprof-report runs {runs} s"
        if row["hta"]:
            runs = ", ".join(f"{r['seconds']:.2f}" for r in row["hta"])
            imports = statistics.median(r["import_s"] for r in row["hta"])
            line += f"; HTA runs {runs} s (its imports {imports:.2f} s)"
        print(line)
        for warning in row["warnings"]:
            print(f"  - HTA printed: `{warning.strip()[:300]}`")
    return 0


if __name__ == "__main__":
    sys.exit(main())

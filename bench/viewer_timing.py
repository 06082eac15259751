#!/usr/bin/env python3
"""How fast dlprof-report's page opens and draws in headless Chromium, and how much it weighs.

  viewer_timing.py DLPROF_REPORT TRACE [--runs N] [--out DIR]
  viewer_timing.py DLPROF_REPORT --synthetic STEPS [--runs N] [--out DIR]

Writes the page of TRACE (DLPROF_REPORT --format html), then, N times in a fresh tab:
  - Overview: from the navigation's start to the first frame drawn after the page's load event
    (the page parsed, its data and script run, the Overview laid out and painted);
  - Trace: from the Trace tab's click to the second frame after it (the timeline's data decoded,
    its rows laid out and drawn);
  - a zoom: from the "+" button's click to the frame after it, and a pan by dragging;
and prints each figure's median and largest, with the page's size. Debian's Chromium, through
Playwright, as the tests run it (build/venv-trace-tools has Playwright).

--synthetic STEPS times a trace larger than a browser holds at ease: STEPS steps of 1,000 ops
each on one thread, an op and the runtime call inside it launching a kernel (3,001 slices a
step), written in torch.profiler's format to OUT/synthetic.json.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

NEXT_FRAMES = "new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))"


def write_synthetic_trace(path, steps):
    events = []
    time = 0.0
    correlation = 0
    for step in range(steps):
        start = time
        for op in range(1000):
            correlation += 1
            events.append({"ph": "X", "cat": "cpu_op", "name": f"aten::op_{op % 40}", "pid": 1, "tid": 1, "ts": time + 1,
                           "dur": 8, "args": {"External id": correlation}})
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": time + 2,
                           "dur": 3, "args": {"correlation": correlation, "External id": correlation}})
            events.append({"ph": "X", "cat": "kernel", "name": f"kernel_{op % 40}", "pid": 0, "tid": 7, "ts": time + 6,
                           "dur": 7, "args": {"device": 0, "stream": 7, "correlation": correlation, "External id": correlation,
                                              "grid": [64, 1, 1], "block": [256, 1, 1]}})
            time += 10
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1, "ts": start,
                       "dur": time - start})
        time += 5
    with open(path, "w", encoding="utf-8") as file:
        json.dump({"schemaVersion": 1, "deviceProperties": [], "traceEvents": events}, file)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("report")
    parser.add_argument("trace", nargs="?")
    parser.add_argument("--synthetic", type=int, metavar="STEPS")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--out", default=None, help="where the page is written (default: a temporary directory)")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    out = args.out or tempfile.mkdtemp(prefix="dlprof-viewer-")
    os.makedirs(out, exist_ok=True)
    if args.synthetic:
        args.trace = os.path.join(out, "synthetic.json")
        write_synthetic_trace(args.trace, args.synthetic)
    page_path = os.path.join(out, "report.html")
    subprocess.run([args.report, "--format", "html", "-o", page_path, args.trace], check=True)
    size = os.path.getsize(page_path)

    figures = {"overview_ms": [], "trace_ms": [], "zoom_ms": [], "pan_ms": []}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/lib/chromium/chromium", args=["--no-sandbox"])
        for _ in range(args.runs):
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto("file://" + os.path.abspath(page_path), wait_until="load")
            figures["overview_ms"].append(page.evaluate(
                f"async () => {{ await {NEXT_FRAMES}; return performance.now(); }}"))
            figures["trace_ms"].append(page.evaluate(f"""async () => {{
                const start = performance.now();
                document.querySelector("nav.tabs a[href='#trace']").click();
                await {NEXT_FRAMES};
                return performance.now() - start; }}"""))
            figures["zoom_ms"].append(page.evaluate(f"""async () => {{
                const start = performance.now();
                Array.from(document.querySelectorAll('section#trace button.zoom')).find(b => b.textContent === '+').click();
                await {NEXT_FRAMES};
                return performance.now() - start; }}"""))
            box = page.locator("section#trace canvas.tracks").bounding_box()
            page.mouse.move(box["x"] + box["width"] / 2, box["y"] + 10)
            page.mouse.down()
            figures["pan_ms"].append(page.evaluate(f"""async () => {{
                const start = performance.now();
                window.dispatchEvent(new MouseEvent('mousemove', {{clientX: {box['x'] + box['width'] / 2 - 200}, clientY: {box['y'] + 10}}}));
                await {NEXT_FRAMES};
                return performance.now() - start; }}"""))
            page.mouse.up()
            page.close()
        browser.close()
    slices = None
    with open(page_path, encoding="utf-8") as file:
        text = file.read()
        slices = text.count('"d": [')
    print(f"page: {size / 1e6:.2f} MB ({size} bytes), {slices} timeline rows; {args.runs} runs in a fresh tab each")
    for name, values in figures.items():
        print(f"{name:12s} median {statistics.median(values):8.1f}   max {max(values):8.1f}")


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""How fast dlprof-report's page opens and draws in headless Chromium, and how much it weighs.

  viewer_timing.py DLPROF_REPORT TRACE [--runs N] [--out DIR]

Writes the page of TRACE (DLPROF_REPORT --format html), then, N times in a fresh tab:
  - Overview: from the navigation's start to the first frame drawn after the page's load event
    (the page parsed, its data and script run, the Overview laid out and painted);
  - Trace: from the Trace tab's click to the second frame after it (the timeline's data decoded,
    its rows laid out and drawn);
  - a zoom: from the "+" button's click to the frame after it, and a pan by dragging;
and prints each figure's median and largest, with the page's size. Debian's Chromium, through
Playwright, as the tests run it (build/venv-trace-tools has Playwright).
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

NEXT_FRAMES = "new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("report")
    parser.add_argument("trace")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--out", default=None, help="where the page is written (default: a temporary directory)")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    out = args.out or tempfile.mkdtemp(prefix="dlprof-viewer-")
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

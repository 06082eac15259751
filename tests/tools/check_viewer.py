#!/usr/bin/env python3
"""Drives dlprof-report's HTML page in headless Chromium as a reader would, with Playwright.

  check_viewer.py DLPROF_REPORT OUT TRACE...

For each TRACE (a trace file, or a directory of one run's traces) it writes the page
(DLPROF_REPORT --format html -o OUT/<name>.html), opens it from its file, then:
  - switches to every view by its tab, and checks that only that view shows and that each chart
    in it is drawn (a non-zero size and marks);
  - Operator: sorts by a column (by clicking its header, twice), filters by a name, groups by
    input shape, and clicks an op, whose kernels and call sites then show;
  - Kernel: clicks the longest kernel, whose op and module then show, and follows the link to
    its op in the Operator view;
  - Trace: zooms to a step, clicks a slice on the first row and reads its details, zooms in with
    the keyboard and the buttons (the drawing changes), searches a name and steps to a match; on
    a trace with GPU work, follows a launching op's flow to its kernel and back; where autograd
    numbers the ops, follows a backward op to its forward and back;
  - Module: folds the first module with children, whose rows then hide;
  - Flame graph: clicks a box of each graph, which then spans the graph;
  - opens the page with a view's hash (#kernel), which shows that view first;
and fails on any console error or uncaught exception. It saves a screenshot of each view as
OUT/<name>-<view>.png (and OUT/<name>-operator-detail.png, an op clicked) for a person to look
at.

Exits 77 (the test is skipped) where Playwright or Chromium is not installed; 1 with a message
naming the problem otherwise.
"""
import os
import re
import shutil
import subprocess
import sys
import time

SKIPPED = 77
VIEWS = ["overview", "operator", "kernel", "trace", "memory", "module", "distributed", "flame", "roofline", "diff"]


def fail(message):
    print(f"FAILED: {message}")
    sys.exit(1)


def chromium():
    """Debian's browser, never one Playwright downloads."""
    for candidate in ("/usr/lib/chromium/chromium", shutil.which("chromium"), shutil.which("chromium-browser")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


class PageCheck:
    def __init__(self, browser, path, screenshots):
        self.path = os.path.abspath(path)
        self.name = re.sub(r"\.html$", "", os.path.basename(path))
        self.screenshots = screenshots
        self.problems = []
        self.page = browser.new_page(viewport={"width": 1400, "height": 900})
        self.page.set_default_timeout(10000)
        self.page.on("console", lambda message: self.problems.append(f"console {message.type}: {message.text}")
                     if message.type in ("error", "warning") else None)
        self.page.on("pageerror", lambda error: self.problems.append(f"uncaught: {error}"))

    def expect(self, condition, message):
        if not condition:
            fail(f"{self.name}: {message}")

    def open(self, hash_part=""):
        self.page.goto("file://" + self.path + hash_part)
        self.page.wait_for_load_state("load")

    def show(self, view):
        self.page.click(f"nav.tabs a[href='#{view}']")
        # The hash changes at once; the page switches views on the hashchange event that follows.
        self.page.wait_for_function("id => document.getElementById(id).classList.contains('active')", arg=view)
        shown = self.page.eval_on_selector_all("section.view", "views => views.filter(v => getComputedStyle(v).display !== 'none').map(v => v.id)")
        self.expect(shown == [view], f"the {view} tab shows {shown}")
        self.expect(self.page.evaluate("location.hash") == f"#{view}", f"the {view} tab does not set the URL's hash")
        charts = self.page.eval_on_selector_all(
            f"section#{view} svg.chart",
            "charts => charts.map(c => { const b = c.getBBox(); return [c.id, b.width, b.height, c.querySelectorAll('.mark').length]; })")
        for chart_id, width, height, marks in charts:
            self.expect(width > 0 and height > 0 and marks > 0, f"chart {chart_id} in {view} is not drawn ({width}x{height}, {marks} marks)")
        self.page.screenshot(path=os.path.join(self.screenshots, f"{self.name}-{view}.png"))
        return len(charts)

    def rows(self, selector):
        return self.page.eval_on_selector_all(selector, "rows => rows.map(r => Array.from(r.cells).map(c => c.textContent))")

    def check_operator(self):
        view = "section#operator "
        table = view + ".interactive-view > .master-detail > .table-box table.interactive"
        self.expect(self.page.locator(table).count() == 1, "the Operator view has no table")
        headers = self.page.eval_on_selector_all(table + " thead th", "cells => cells.map(c => c.textContent)")
        calls = next(i for i, text in enumerate(headers) if text.startswith("Calls"))
        for descending in (True, False):
            self.page.click(f"{table} thead th >> nth={calls}")
            values = [int(row[calls]) for row in self.rows(table + " tbody tr")]
            self.expect(values == sorted(values, reverse=descending), f"sorting by Calls ({'down' if descending else 'up'}) gives {values[:8]}")
        names = [row[0] for row in self.rows(table + " tbody tr")]
        if not names:
            self.expect(self.page.inner_text(view + ".interactive-view > p.muted").startswith("0 rows"), "an empty op table without saying so")
            return None
        device_self = next((i for i, text in enumerate(headers) if text.startswith("Device self")), None)
        self.page.click(f"{table} thead th >> nth={device_self}")  # the ops that launched the most GPU time first
        # The first of them whose detail names kernels it launched, else the first.
        chosen = 0
        for row in range(min(len(names), 8)):
            self.page.click(f"{table} tbody tr >> nth={row}")
            if "Kernels it launched" in self.page.inner_text(view + ".detail"):
                chosen = row
                break
        first = self.rows(table + " tbody tr")[chosen]
        self.page.click(f"{table} tbody tr >> nth={chosen}")
        self.page.evaluate("window.scrollTo(0, 0)")
        self.page.screenshot(path=os.path.join(self.screenshots, f"{self.name}-operator-detail.png"))
        self.page.fill(view + "input.filter", "^" + re.escape(first[0]) + "$")
        filtered = [row[0] for row in self.rows(table + " tbody tr")]
        self.expect(filtered == [first[0]], f"the filter '^{first[0]}$' leaves {filtered[:5]}")
        self.page.click(f"{table} tbody tr >> nth=0")
        detail = self.page.inner_text(view + ".detail")
        self.expect(first[0] in detail, f"clicking {first[0]} shows: {detail[:200]}")
        launched = "Kernels it launched" in detail
        self.expect(launched or "launched no GPU work" in detail, f"the op's detail names no kernels: {detail[:300]}")
        self.expect("Call sites" in detail or "No call sites" in detail, f"the op's detail names no call sites: {detail[:300]}")
        self.page.select_option(view + "select.group", "shape")
        headers = self.page.eval_on_selector_all(table + " thead th", "cells => cells.map(c => c.textContent)")
        self.expect("Input shapes" in headers, f"grouping by input shape gives the columns {headers}")
        self.page.select_option(view + "select.group", "name")
        self.page.fill(view + "input.filter", "")
        return first[0] if launched else None

    def check_kernel(self):
        view = "section#kernel "
        rows = self.rows(view + "table.interactive tbody tr")
        if not rows:
            self.expect("0 of 0 kernels" in self.page.inner_text(view), "an empty kernel table without saying so")
            return
        self.page.click(view + "table.interactive tbody tr >> nth=0")
        detail = self.page.inner_text(view + ".detail")
        self.expect("Launched by op" in detail and "In module" in detail, f"clicking a kernel shows: {detail[:300]}")
        link = self.page.locator(view + ".detail a[href='#operator']")
        if link.count():
            op = rows[0][1]
            link.click()
            self.page.wait_for_function("() => document.getElementById('operator').classList.contains('active')")
            names = [row[0] for row in self.rows("section#operator .interactive-view > .master-detail > .table-box table.interactive tbody tr")]
            self.expect(names and all(name == op for name in names), f"the link to {op} shows the ops {names[:5]}")
            self.page.fill("section#operator input.filter", "")

    def canvas_image(self):
        return self.page.locator("section#trace canvas.tracks").screenshot()

    def check_trace(self, op_with_kernels):
        view = "section#trace "
        steps = self.page.locator(view + ".steps button.step")
        if steps.count() > 1:
            steps.nth(1).click()
        box = self.page.locator(view + "canvas.tracks").bounding_box()
        self.expect(box and box["width"] > 200 and box["height"] > 0, f"the timeline's canvas is {box}")
        # Across the first row until a click lands on a slice (a GPU-only row has gaps).
        for x in range(1, 50):
            self.page.mouse.click(box["x"] + box["width"] * x / 50, box["y"] + 10)
            detail = self.page.inner_text(view + ".detail")
            if detail:
                break
        self.expect(re.search(r"Duration\s", detail), f"a click on the first row shows no slice: {detail[:200]}")
        before = self.canvas_image()
        self.page.locator(view + "canvas.tracks").focus()
        self.page.keyboard.press("w")
        self.page.keyboard.press("w")
        self.page.click(view + "button.zoom >> text=+")
        self.expect(self.canvas_image() != before, "zooming in does not change the drawing")
        self.page.click(view + "button.zoom >> text=reset")
        target = op_with_kernels or detail.splitlines()[0]
        self.page.fill(view + "input.search", target)
        self.page.press(view + "input.search", "Enter")
        found = self.page.inner_text(view + ".matches")
        self.expect(re.match(r"1 of \d+ matches", found), f"searching '{target}' gives '{found}'")
        detail = self.page.inner_text(view + ".detail")
        self.expect(target in detail.splitlines()[0], f"the first match of '{target}' shows: {detail[:200]}")
        if op_with_kernels:
            # A call of the op itself (the search matches names that hold it too) that launched
            # GPU work, among the first matches.
            for _ in range(60):
                if detail.splitlines()[0] == target and re.search(r"^launched( inside it)?: ", detail, re.M):
                    break
                self.page.press(view + "input.search", "Enter")
                detail = self.page.inner_text(view + ".detail")
            self.expect(detail.splitlines()[0] == target and re.search(r"^launched( inside it)?: ", detail, re.M),
                        f"no call of {target} among the first matches links to a kernel: {detail[:400]}")
            self.page.click(view + ".detail ul.links li:has-text('launched') a >> nth=0")
            kernel = self.page.inner_text(view + ".detail")
            self.expect("launched by: " in kernel and "launched inside op: " in kernel,
                        f"the kernel links back to no launch and op: {kernel[:400]}")

    def check_backward(self):
        """A backward op's flow to its forward op and back, where the trace numbers them."""
        view = "section#trace "
        self.page.fill(view + "input.search", "Backward")
        self.page.press(view + "input.search", "Enter")
        if not self.page.inner_text(view + ".matches").startswith("1 of"):
            return False
        for _ in range(20):
            detail = self.page.inner_text(view + ".detail")
            if "its forward: " in detail:
                backward = detail.splitlines()[0]
                self.page.click(view + ".detail ul.links li:has-text('its forward: ') a >> nth=0")
                forward = self.page.inner_text(view + ".detail")
                self.expect("its backward: " in forward and backward in forward,
                            f"the forward op of {backward} does not link back to it: {forward[:400]}")
                return True
            self.page.press(view + "input.search", "Enter")
        return False

    def check_module(self):
        toggles = self.page.locator("section#module table.modules .toggle:has-text('\u25BE')")
        if toggles.count() == 0:
            self.expect("No module ranges" in self.page.inner_text("section#module"), "no module tree and no note why")
            return
        toggle = toggles.first.element_handle()
        visible = self.page.locator("section#module table.modules tbody tr:visible").count()
        toggle.click()
        folded = self.page.locator("section#module table.modules tbody tr:visible").count()
        self.expect(folded < visible, f"folding a module leaves {folded} of {visible} rows")
        toggle.click()
        unfolded = self.page.locator("section#module table.modules tbody tr:visible").count()
        self.expect(unfolded == visible, f"unfolding it shows {unfolded} of {visible} rows")

    def check_flame_graphs(self):
        zoomed = self.page.eval_on_selector_all("section#flame svg.flame-graph", """graphs => graphs.map(svg => {
            const boxes = Array.from(svg.querySelectorAll('g.flame'));
            if (boxes.length < 2) return null;
            const target = boxes.slice(1).sort((a, b) => parseFloat(b.getAttribute('data-w')) - parseFloat(a.getAttribute('data-w')))[0];
            const rect = target.querySelector('rect').getBoundingClientRect();
            return [svg.id, target.querySelector('title').textContent.split('\\n')[0], rect.x + 2, rect.y + rect.height / 2];
        }).filter(x => x)""")
        for graph_id, name, x, y in zoomed:
            self.page.mouse.click(x, y)
            geometry = self.page.eval_on_selector(f"svg#{graph_id}", """(svg, name) => {
                const pad = Number(svg.getAttribute('data-pad')), full = svg.viewBox.baseVal.width - 2 * pad;
                const box = Array.from(svg.querySelectorAll('g.flame')).find(b => b.querySelector('title').textContent.split('\\n')[0] === name
                    && b.style.display !== 'none' && Math.abs(parseFloat(b.querySelector('rect').getAttribute('width')) - full) < 0.5);
                let outside = 0;
                svg.querySelectorAll('g.flame').forEach(b => {
                    if (b.style.display === 'none') return;
                    const r = b.querySelector('rect'), x = parseFloat(r.getAttribute('x')), w = parseFloat(r.getAttribute('width'));
                    if (x < pad - 0.2 || x + w > pad + full + 0.2) outside++;
                });
                return [!!box, outside];
            }""", name)
            self.expect(geometry[0] and geometry[1] == 0, f"clicking {name} in {graph_id} does not zoom it to the graph's width ({geometry})")
        return len(zoomed)

    def run(self):
        started = time.monotonic()
        self.open()
        charts = 0
        for view in VIEWS:
            charts += self.show(view)
            if view == "operator":
                op_with_kernels = self.check_operator()
            elif view == "kernel":
                self.check_kernel()
                self.show("kernel")
            elif view == "trace":
                self.check_trace(op_with_kernels)
                backward = self.check_backward()
                self.page.screenshot(path=os.path.join(self.screenshots, f"{self.name}-trace.png"))
            elif view == "module":
                self.check_module()
            elif view == "flame":
                flame_graphs = self.check_flame_graphs()
        self.open("#kernel")
        shown = self.page.eval_on_selector_all("section.view", "views => views.filter(v => getComputedStyle(v).display !== 'none').map(v => v.id)")
        self.expect(shown == ["kernel"], f"opened with #kernel, the page shows {shown}")
        if self.problems:
            fail(f"{self.name}: " + "; ".join(self.problems[:10]))
        print(f"ok: {self.name}: {len(VIEWS)} views, {charts} charts drawn, {flame_graphs} flame graphs zoomed, "
              f"{'an op with kernels followed' if op_with_kernels else 'no GPU kernels'}, "
              f"{'a backward op to its forward and back' if backward else 'no forward-backward pair'}, console clean "
              f"({time.monotonic() - started:.1f} s)")


def page_name(trace):
    name = os.path.basename(os.path.normpath(trace))
    return re.sub(r"(\.pt)?(\.trace)?\.json(\.gz)?$", "", name)


def main():
    if len(sys.argv) < 4:
        print(__doc__)
        sys.exit(2)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("SKIPPED: Playwright is not installed (scripts/test.sh installs it in build/venv-trace-tools)")
        sys.exit(SKIPPED)
    browser_path = chromium()
    if browser_path is None:
        print("SKIPPED: Chromium is not installed (Debian: apt-get install chromium)")
        sys.exit(SKIPPED)
    report, out, traces = sys.argv[1], sys.argv[2], sys.argv[3:]
    os.makedirs(out, exist_ok=True)
    pages = []
    for trace in traces:
        page = os.path.join(out, page_name(trace) + ".html")
        result = subprocess.run([report, "--format", "html", "-o", page, trace], capture_output=True, text=True, check=False)
        if result.returncode != 0:
            fail(f"dlprof-report exited with {result.returncode} on {trace}: {result.stderr[-1000:]}")
        pages.append(page)
    with sync_playwright() as playwright:
        # As root (CI) Chromium needs --no-sandbox.
        browser = playwright.chromium.launch(executable_path=browser_path, args=["--no-sandbox"])
        for page in pages:
            PageCheck(browser, page, out).run()
        browser.close()


if __name__ == "__main__":
    main()

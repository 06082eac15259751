#!/usr/bin/env python3
"""Checks what dlprof-report wrote.

  check_report.py text FILE --expect REGEX [--expect REGEX...]
      Each REGEX matches some line of FILE, and no line is wider than 120 columns.
  check_report.py json FILE --ranks 0,1 [--stragglers] [--hta-compat]
      FILE parses as JSON and has the keys scripts rely on, for exactly these ranks.
  check_report.py html FILE --charts N
      FILE is well-formed HTML (every element closed, in order), refers to nothing outside itself
      and holds N charts, each an <svg class="chart">.
  check_report.py chromium FILE
      Headless Chromium renders FILE: the page's script reports every chart drawn with a non-zero
      size and marks in it (<pre id="render-check">), and the console stays clean. Where the page
      has flame graphs, a copy of it clicks a box of each: the box must then span the graph and
      every box shown must lie inside it. Exits 77 (the test is skipped) where Chromium is not
      installed.
Exit status 1 with a message naming the problem otherwise.
"""
import argparse
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

SKIPPED = 77
VOID_ELEMENTS = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


def fail(message):
    print(f"FAILED: {message}")
    sys.exit(1)


def check_text(path, patterns):
    with open(path, encoding="utf-8") as file:
        text = file.read()
    for pattern in patterns:
        if not re.search(pattern, text, re.M):
            fail(f"no line matches /{pattern}/")
    wide = [line for line in text.splitlines() if len(line) > 120]
    if wide:
        fail(f"{len(wide)} lines wider than 120 columns, e.g.\n{wide[0]}")
    print(f"ok: {len(text.splitlines())} lines")


def check_json(path, ranks, stragglers, hta_compat):
    with open(path, encoding="utf-8") as file:
        report = json.load(file)
    if report["hta_compat"] != hta_compat:
        fail(f"hta_compat is {report['hta_compat']}")
    found = [rank["rank"] for rank in report["ranks"]]
    if found != ranks:
        fail(f"ranks {found}, expected {ranks}")
    temporal_keys = {"idle_us", "compute_us", "non_compute_us", "kernel_time_us", "idle_pct", "compute_pct", "non_compute_pct"}
    for rank in report["ranks"]:
        missing = temporal_keys - rank["temporal_breakdown"].keys()
        if missing:
            fail(f"rank {rank['rank']}: temporal_breakdown lacks {sorted(missing)}")
        temporal = rank["temporal_breakdown"]
        parts = temporal["idle_us"] + temporal["compute_us"] + temporal["non_compute_us"]
        if abs(parts - temporal["kernel_time_us"]) > 1e-3:
            fail(f"rank {rank['rank']}: idle + compute + non-compute = {parts} us, kernel time {temporal['kernel_time_us']} us")
        for row in rank["kernel_type_breakdown"]:
            if set(row) != {"type", "time_us", "pct"}:
                fail(f"rank {rank['rank']}: kernel_type_breakdown row {row}")
        if not rank["step_breakdown"]:
            fail(f"rank {rank['rank']}: no step_breakdown")
        if "gpu_utilization" not in rank:
            fail(f"rank {rank['rank']}: no gpu_utilization")
    findings = report["recommendations"]
    for advice in findings:
        if set(advice) != {"id", "text", "evidence", "action", "impact_us", "share_pct", "severity", "ranks", "worst_rank"}:
            fail(f"recommendation {advice}")
        if not all(isinstance(advice[key], str) and advice[key] for key in ("id", "text", "evidence", "action")):
            fail(f"recommendation {advice}: an empty text")
        if advice["severity"] not in ("high", "medium", "low", "risk", "note"):
            fail(f"recommendation {advice}: severity")
        if not advice["ranks"] or advice["worst_rank"] not in advice["ranks"] or advice["ranks"] != sorted(set(advice["ranks"])):
            fail(f"recommendation {advice}: ranks")
        saves_time = advice["severity"] not in ("risk", "note")
        if saves_time and (advice["impact_us"] < 50 or advice["share_pct"] < 2):
            fail(f"recommendation {advice}: under the floors (50 us and 2 % of the median step)")
    timed = [a for a in findings if a["severity"] not in ("risk", "note")]
    if findings[:len(timed)] != timed or [a["impact_us"] for a in timed] != sorted((a["impact_us"] for a in timed), reverse=True):
        fail("recommendations not ranked by the time they save, risks and notes last")
    if len({a["id"] for a in findings}) != len(findings):
        fail("a rule given more than once: the ranks of a finding are grouped")
    verdict = report["verdict"]
    if verdict["bound"] not in ("gpu_compute", "communication_wait", "memory_copies", "input", "host", "no_steps"):
        fail(f"verdict {verdict}")
    if verdict["bound"] != "no_steps" and not (0 < verdict["bound_pct"] <= 100 and verdict["median_step_us"] > 0):
        fail(f"verdict {verdict}")
    if [a["id"] for a in verdict["top_actions"]] != [a["id"] for a in timed[:3]]:
        fail(f"verdict's top actions {verdict['top_actions']} are not the first three findings that save time")
    comparison = report["rank_comparison"]
    if stragglers and (comparison is None or not comparison["stragglers"]):
        fail("no stragglers table")
    if not stragglers and comparison is not None:
        fail("a rank comparison for a single rank")
    print(f"ok: {len(found)} rank(s), {len(report['recommendations'])} recommendation(s)")


class StructureChecker(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.open = []
        self.charts = 0
        self.svgs = 0
        self.problems = []

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if tag == "svg":
            self.svgs += 1
            if "chart" in (attributes.get("class") or "").split():
                self.charts += 1
        for name in ("src", "href"):
            value = attributes.get(name)
            if value is not None and not value.startswith(("#", "data:")):
                self.problems.append(f"<{tag} {name}=\"{value}\"> refers outside the page")
        if tag not in VOID_ELEMENTS:
            self.open.append((tag, self.getpos()))

    def handle_startendtag(self, tag, attrs):
        if tag == "svg":
            self.problems.append("an empty <svg/>")

    def handle_endtag(self, tag):
        if not self.open or self.open[-1][0] != tag:
            expected = self.open[-1] if self.open else ("nothing", None)
            self.problems.append(f"</{tag}> at line {self.getpos()[0]} closes <{expected[0]}> of line {expected[1]}")
            return
        self.open.pop()


def check_html(path, charts):
    with open(path, encoding="utf-8") as file:
        text = file.read()
    checker = StructureChecker()
    checker.feed(text)
    checker.close()
    if checker.open:
        checker.problems.append(f"<{checker.open[-1][0]}> of line {checker.open[-1][1][0]} never closed")
    for pattern in (r"url\(", r"@import", r"https?://(?!www\.w3\.org/2000/svg\")"):
        if re.search(pattern, text):
            checker.problems.append(f"the page refers outside itself ({pattern})")
    if checker.svgs != checker.charts:
        checker.problems.append(f"{checker.svgs} <svg> elements, {checker.charts} of them charts")
    if checker.charts != charts:
        checker.problems.append(f"{checker.charts} charts, expected {charts}")
    if checker.problems:
        fail("; ".join(checker.problems))
    print(f"ok: well-formed, {checker.charts} charts")


# Clicks the second-widest box of each flame graph (one with a parent and, often, children) and
# writes into <pre id="zoom-check"> how the graph then looks: "<id> clicked=<x>,<width>
# span=<graph width> outside=<boxes shown outside the clicked one's span or below-and-narrower>".
ZOOM_CHECK_SCRIPT = """
<pre id="zoom-check" hidden></pre>
<script>
(function () {
  var lines = [];
  document.querySelectorAll('svg.flame-graph').forEach(function (svg) {
    var boxes = Array.from(svg.querySelectorAll('g.flame'));
    if (boxes.length < 2) return;
    var target = boxes.slice(1).sort(function (a, b) {
      return parseFloat(b.getAttribute('data-w')) - parseFloat(a.getAttribute('data-w'));
    })[0];
    target.querySelector('rect').dispatchEvent(new MouseEvent('click', {bubbles: true}));
    var pad = Number(svg.getAttribute('data-pad')), full = svg.viewBox.baseVal.width - 2 * pad;
    var rect = target.querySelector('rect');
    var x = parseFloat(rect.getAttribute('x')), w = parseFloat(rect.getAttribute('width'));
    var outside = 0;
    boxes.forEach(function (box) {
      if (box.style.display === 'none') return;
      var r = box.querySelector('rect');
      var bx = parseFloat(r.getAttribute('x')), bw = parseFloat(r.getAttribute('width'));
      if (bx < pad - 0.2 || bx + bw > pad + full + 0.2) outside++;
    });
    lines.push(svg.id + ' clicked=' + (x - pad).toFixed(1) + ',' + w.toFixed(1) + ' span=' + full.toFixed(1) +
               ' outside=' + outside);
  });
  document.getElementById('zoom-check').textContent = lines.join('\\n');
})();
</script>
"""


def run_chromium(browser, path):
    with tempfile.TemporaryDirectory() as profile:
        # As root (CI) Chromium needs --no-sandbox; the profile directory keeps runs apart.
        result = subprocess.run(
            [browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", f"--user-data-dir={profile}",
             "--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000", "--dump-dom",
             "file://" + os.path.abspath(path)],
            capture_output=True, text=True, timeout=180, check=False)
    if result.returncode != 0:
        fail(f"chromium exited with {result.returncode}: {result.stderr[-2000:]}")
    console = [line for line in result.stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]
    if console:
        fail("the console is not clean:\n" + "\n".join(console))
    return result


def check_flame_graph_zoom(browser, page, flame_graphs):
    with tempfile.TemporaryDirectory() as directory:
        copy = os.path.join(directory, "zoom.html")
        with open(copy, "w", encoding="utf-8") as file:
            file.write(page.replace("</body>", ZOOM_CHECK_SCRIPT + "</body>"))
        result = run_chromium(browser, copy)
    match = re.search(r'<pre id="zoom-check"[^>]*>(.*?)</pre>', result.stdout, re.S)
    lines = match.group(1).strip().splitlines() if match else []
    if len(lines) != flame_graphs:
        fail(f"the zoom was checked on {len(lines)} of {flame_graphs} flame graphs: {lines}")
    for line in lines:
        zoomed = re.fullmatch(r"(\S+) clicked=([-\d.]+),([\d.]+) span=([\d.]+) outside=(\d+)", line)
        if zoomed is None:
            fail(f"the zoom check wrote '{line}'")
        x, width, span, outside = (float(zoomed.group(i)) for i in range(2, 6))
        if abs(x) > 0.2 or abs(width - span) > 0.2 or outside != 0:
            fail(f"a click does not zoom the box to the graph's width: {line}")
    print("ok: flame graphs zoom\n" + "\n".join(lines))


def check_in_chromium(path):
    browser = next((shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome") if shutil.which(name)), None)
    if browser is None:
        print("SKIPPED: Chromium is not installed (Debian: apt-get install chromium)")
        sys.exit(SKIPPED)
    with open(path, encoding="utf-8") as file:
        page = file.read()
    charts = len(re.findall(r'<svg class="chart[^"]*" id="([^"]+)"', page))
    result = run_chromium(browser, path)
    match = re.search(r'<pre id="render-check"[^>]*>(.*?)</pre>', result.stdout, re.S)
    if match is None:
        fail("the dumped page has no render-check")
    lines = match.group(1).strip().splitlines()
    if lines[0] != f"charts={charts}":
        fail(f"the script saw '{lines[0]}', the page has {charts} charts (did it run?)")
    for line in lines[1:]:
        drawn = re.fullmatch(r"(\S+) (\d+)x(\d+) marks=(\d+)", line)
        if drawn is None or int(drawn.group(2)) == 0 or int(drawn.group(3)) == 0 or int(drawn.group(4)) == 0:
            fail(f"a chart is not drawn: {line}")
    print(f"ok: {charts} charts drawn, console clean\n" + "\n".join(lines[1:]))
    flame_graphs = len(re.findall(r'<svg class="chart flame-graph"', page))
    if flame_graphs:
        check_flame_graph_zoom(browser, page, flame_graphs)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    text_command = commands.add_parser("text")
    text_command.add_argument("file")
    text_command.add_argument("--expect", action="append", default=[])
    json_command = commands.add_parser("json")
    json_command.add_argument("file")
    json_command.add_argument("--ranks", required=True, help="comma-separated, in order")
    json_command.add_argument("--stragglers", action="store_true")
    json_command.add_argument("--hta-compat", action="store_true")
    html_command = commands.add_parser("html")
    html_command.add_argument("file")
    html_command.add_argument("--charts", type=int, required=True)
    chromium_command = commands.add_parser("chromium")
    chromium_command.add_argument("file")
    args = parser.parse_args()
    if args.command == "text":
        check_text(args.file, args.expect)
    elif args.command == "json":
        check_json(args.file, [int(rank) for rank in args.ranks.split(",")], args.stragglers, args.hta_compat)
    elif args.command == "html":
        check_html(args.file, args.charts)
    else:
        check_in_chromium(args.file)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Checks what dlprof-report wrote.

  check_report.py text FILE --expect REGEX [--expect REGEX...]
      Each REGEX matches some line of FILE, and no line is wider than 120 columns.
  check_report.py json FILE --ranks 0,1 [--stragglers] [--hta-compat]
      FILE parses as JSON and has the keys scripts rely on, for exactly these ranks.
  check_report.py html FILE --charts N
      FILE is well-formed HTML (every element closed, in order), refers to nothing outside itself
      and holds N charts, each an <svg class="chart">.
Exit status 1 with a message naming the problem otherwise.
"""
import argparse
import html.parser
import json
import re
import sys

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
    args = parser.parse_args()
    if args.command == "text":
        check_text(args.file, args.expect)
    elif args.command == "json":
        check_json(args.file, [int(rank) for rank in args.ranks.split(",")], args.stragglers, args.hta_compat)
    else:
        check_html(args.file, args.charts)


if __name__ == "__main__":
    main()

"""`dlprof-report --format json` writes what docs/report.schema.json describes: every report, with and
without --hta-compat, validates against the schema (JSON Schema draft 2020-12: each object's keys
and their types, the closed sets of values, and no key the schema does not list where an object's
keys are fixed), and its "schema_version" is the schema's.

Usage: check_report_schema.py SCHEMA DLPROF_REPORT TRACE_PATH...

Each TRACE_PATH is a trace file or a directory of per-rank traces. Runs DLPROF_REPORT on each twice,
`--format json` and `--hta-compat --format json`, into a temporary directory; prints one line per
report ("ok: PATH (FLAGS)") and, for a report that does not validate, every error with its JSON
path. Exits 1 on any failure, 77 (CTest's skip code) when jsonschema cannot be imported.
"""
import json
import os
import subprocess
import sys
import tempfile

SKIPPED = 77
FLAG_SETS = (["--format", "json"], ["--hta-compat", "--format", "json"])


def json_path(error):
    """The failing value's place in the report: $.ranks[0].gpus[1].name."""
    path = "$"
    for part in error.absolute_path:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def check_report(validator, schema_version, report_path):
    """The problems of one report, as lines of text."""
    with open(report_path, encoding="utf-8") as file:
        report = json.load(file)
    problems = []
    for error in sorted(validator.iter_errors(report), key=lambda e: (list(map(str, e.absolute_path)), e.message)):
        problems.append(f"{json_path(error)}: {error.message}")
    if isinstance(report, dict) and report.get("schema_version") != schema_version:
        problems.append(f"$.schema_version: {report.get('schema_version')!r}, the schema describes {schema_version}")
    return problems


def main():
    if len(sys.argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        import jsonschema
    except ImportError as error:
        print(f"SKIP: jsonschema cannot be imported ({error}); scripts/test.sh installs it")
        return SKIPPED
    schema_path, dlprof_report, trace_paths = sys.argv[1], sys.argv[2], sys.argv[3:]
    with open(schema_path, encoding="utf-8") as file:
        schema = json.load(file)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
    schema_version = schema["properties"]["schema_version"]["const"]

    failures = 0
    with tempfile.TemporaryDirectory(prefix="dlprof-report-schema-") as scratch:
        for index, trace_path in enumerate(trace_paths):
            for flags in FLAG_SETS:
                flags_text = " ".join(flags)
                out = os.path.join(scratch, f"{index}-{'hta' if '--hta-compat' in flags else 'default'}.json")
                completed = subprocess.run([dlprof_report, *flags, "-o", out, trace_path], capture_output=True, text=True)
                if completed.returncode != 0:
                    failures += 1
                    print(f"FAIL: {trace_path} ({flags_text}): dlprof-report exited {completed.returncode}: "
                          f"{completed.stderr.strip()}")
                    continue
                problems = check_report(validator, schema_version, out)
                if problems:
                    failures += 1
                    print(f"FAIL: {trace_path} ({flags_text}): {len(problems)} error(s)")
                    for problem in problems:
                        print(f"  {problem}")
                else:
                    print(f"ok: {trace_path} ({flags_text})")
    print(f"{failures} report(s) failed of {len(trace_paths) * len(FLAG_SETS)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

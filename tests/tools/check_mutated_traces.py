"""Real traces with their metadata rewritten must read as the originals do: the same events and
the same analyses, with what was odd said in the report's "read" section, never an error.

Usage: check_mutated_traces.py DLPROF_REPORT TRACE_SET_DIR...

Each trace file of each set is rewritten once per mutation below (top-level keys other than
traceEvents, every deviceProperties field and every distributedInfo field), and
`dlprof-report --format json` runs on the original and on each rewrite, one file at a time. The
sections that come from events only must be equal; the rewrite must read with exit status 0.
  numbers-as-text    numbers become strings holding them ("cupti_version": "28"), text becomes a number
  text-not-numbers   numbers become strings that hold no number ("abc"), text becomes true
  null               every value null
  objects            every value wrapped in an object
  unknown-keys       unknown keys at the top, in each device, in distributedInfo, in events and args
  reordered          keys in reverse order at the top and in every event and its args
  fields-missing     each deviceProperties entry keeps only its id; distributedInfo keeps only rank
Prints one line per file and mutation; exits 1 on any difference.
"""
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile

# What the analyses compute from events alone: deviceProperties feed the GPU rows (SM efficiency,
# names) and the recommendations (compute capability), which a rewrite may change on purpose.
EVENT_SECTIONS = ("temporal_breakdown", "kernel_type_breakdown", "kernels_by_type", "step_breakdown", "average_step",
                  "gpu_utilization", "idle_time_breakdown", "comm_comp_overlap", "launch_stats", "top_ops",
                  "top_kernels", "gpu_activities", "api_calls", "dropped_events", "dropped_gpu_records")


RAW_NUMBER_MARK = "\x00number:"
RAW_NUMBER_WRITTEN = re.compile(r'"\\u0000number:([-+.0-9eE]+)"')


class RawNumber(str):
    """A fractional number's text, as the trace wrote it (Kineto's ts values have more digits than a
    float keeps): a marked string that `to_json` writes back unquoted."""

    @property
    def text(self):
        return self[len(RAW_NUMBER_MARK):]


def parse_raw_number(text):
    return RawNumber(RAW_NUMBER_MARK + text)


def load_text(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as file:
        return file.read()


def to_json(value):
    """JSON text of `value`, fractional numbers as they were written."""
    return RAW_NUMBER_WRITTEN.sub(r"\1", json.dumps(value))


def map_metadata(trace, change):
    """`change(value)` on every top-level value but traceEvents and on every field of the
    deviceProperties entries and of distributedInfo."""
    for key in list(trace):
        if key == "traceEvents":
            continue
        value = trace[key]
        if key == "deviceProperties" and isinstance(value, list):
            trace[key] = [{k: change(v) for k, v in device.items()} if isinstance(device, dict) else change(device)
                          for device in value]
        elif key == "distributedInfo" and isinstance(value, dict):
            trace[key] = {k: change(v) for k, v in value.items()}
        else:
            trace[key] = change(value)


def numbers_as_text(value):
    if isinstance(value, RawNumber):
        return value.text
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return 7
    return value


def text_not_numbers(value):
    if isinstance(value, RawNumber):
        return "abc"
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return "abc"
    if isinstance(value, str):
        return True
    return value


def reversed_keys(value):
    if isinstance(value, dict):
        return {key: reversed_keys(value[key]) for key in reversed(list(value))}
    if isinstance(value, list):
        return [reversed_keys(element) for element in value]
    return value


def mutate(trace, mutation):
    if mutation == "numbers-as-text":
        map_metadata(trace, numbers_as_text)
    elif mutation == "text-not-numbers":
        map_metadata(trace, text_not_numbers)
    elif mutation == "null":
        map_metadata(trace, lambda value: None)
    elif mutation == "objects":
        map_metadata(trace, lambda value: {"value": value})
    elif mutation == "unknown-keys":
        trace["dlprof_test_unknown"] = {"nested": [1, "two", None], "flag": True}
        for device in trace.get("deviceProperties", []):
            device["unknownField"] = [1, 2]
        if isinstance(trace.get("distributedInfo"), dict):
            trace["distributedInfo"]["unknown_field"] = {"a": 1}
        for event in trace["traceEvents"]:
            event["unknown_event_key"] = {"x": [1]}
            if isinstance(event.get("args"), dict):
                event["args"]["unknown arg"] = {"y": None}
    elif mutation == "reordered":
        trace = reversed_keys(trace)
    elif mutation == "fields-missing":
        trace["deviceProperties"] = [{"id": device["id"]} for device in trace.get("deviceProperties", [])
                                     if isinstance(device, dict) and "id" in device]
        if isinstance(trace.get("distributedInfo"), dict):
            trace["distributedInfo"] = {k: v for k, v in trace["distributedInfo"].items() if k == "rank"}
    return trace


MUTATIONS = ("numbers-as-text", "text-not-numbers", "null", "objects", "unknown-keys", "reordered", "fields-missing")


def report(dlprof_report, path):
    completed = subprocess.run([dlprof_report, "--format", "json", path], capture_output=True, text=True)
    if completed.returncode != 0:
        return None, completed.stderr.strip()
    ranks = json.loads(completed.stdout)["ranks"]
    return ranks[0], ""


def check_file(dlprof_report, path, scratch):
    original, error = report(dlprof_report, path)
    if original is None:
        print(f"FAIL {path}: the original does not read: {error}")
        return 1
    failures = 0
    text = load_text(path)
    for mutation in MUTATIONS:
        trace = mutate(json.loads(text, parse_float=parse_raw_number), mutation)
        if not isinstance(trace, dict):
            raise SystemExit(f"{path}: a bare array of events has no metadata to rewrite")
        rewritten = os.path.join(scratch, f"{mutation}.json")
        with open(rewritten, "w", encoding="utf-8") as file:
            file.write(to_json(trace))
        mutated, error = report(dlprof_report, rewritten)
        name = f"{os.path.basename(os.path.dirname(path))}/{os.path.basename(path)} {mutation}"
        if mutated is None:
            failures += 1
            print(f"FAIL {name}: does not read: {error}")
            continue
        differing = [section for section in EVENT_SECTIONS if original.get(section) != mutated.get(section)]
        if mutated["read"]["skipped_events"] != 0:
            differing.append("read.skipped_events")
        failures += bool(differing)
        noted = len(mutated["read"]["notes"])
        print(f"{'FAIL' if differing else 'ok  '} {name}: "
              f"{'differs in ' + ', '.join(differing) if differing else 'same events and analyses'}; "
              f"{mutated['read']['ignored_values']} value(s) ignored, {noted} note(s)")
    return failures


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    failures = 0
    with tempfile.TemporaryDirectory() as scratch:
        for trace_dir in sys.argv[2:]:
            for name in sorted(os.listdir(trace_dir)):
                if name.endswith(".json") or name.endswith(".gz"):
                    failures += check_file(sys.argv[1], os.path.join(trace_dir, name), scratch)
    print(f"{failures} difference(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

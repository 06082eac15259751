#!/usr/bin/env python3
"""Make a Kineto trace N times longer: the events of a torch.profiler trace, copied N times one after
the other, as if the profiler had recorded N times as many steps of the same run.

    python3 bench/make_long_trace.py --times 10 -o /tmp/long-10x/rank-0.pt.trace.json
    python3 bench/make_long_trace.py --times 100 -o /tmp/long-100x/rank-0.pt.trace.json.gz
    python3 bench/make_long_trace.py --input OTHER.pt.trace.json.gz --times 3 -o /tmp/x.json --verify

The input (default: the V100 ResNet reference trace, ProfilerStep#101-105, 68,692 events, 15.4 MB of
JSON) is a Kineto trace, a JSON object with "traceEvents" and top-level metadata, gzipped or not.
Copy k (0-based) of every event is shifted later by k periods, a period being the span of the
original's events (first start to last end, rounded up to a whole microsecond) plus --gap-us, so
the copies follow one another without overlapping on any thread or stream. In copy k:

  - "ProfilerStep#S" names (CPU user_annotation and GPU gpu_user_annotation slices alike) become
    S + k * (number of steps), so the steps continue: 101..105, 106..110, ...;
  - args "correlation" and the flow events' "id" (ac2g flows use the correlation as id, fwdbwd
    flows ids of their own) are shifted by k * C, "External id"/"external id" by k * E,
    "Sequence number" by k * Q and "Ev Idx" by k * V, each offset the power of ten above the
    original's largest value of that kind (C above the largest correlation and flow id alike), so
    ids stay unique across copies and every link stays within its copy;
  - timestamps keep their sub-microsecond digits exactly (the shift is a whole number of
    microseconds, added to the integer part of the number as written).

The metadata events ("ph": "M": process_name, thread_name, ...), the whole-trace "Trace" span and
the instant marks on string pids ("Iteration Start: PyTorch Profiler", "Record Window End") are
written once, not copied: the span is stretched to cover all copies, and a mark later than the
first event is moved to the same place in the last copy. The top-level keys and the text around
"traceEvents" are written as in the input, and each event exactly as Kineto wrote it (one event is
a few lines), only the numbers above changed: --times 1 gives back the input byte for byte.

Output (-o) is plain JSON, or gzip when the path ends in .gz. Events are written copy by copy as
they are made, so memory does not grow with --times (about 260 MB for the V100 trace; --times 10,
155 MB of JSON, takes 4 s and --times 100, 1.57 GB, 30 s on a busy 2-core host). For Holistic Trace
Analysis put the file alone in a directory under a rank-like name (rank-0.pt.trace.json). --verify
reads the output back whole with json (about 1 GB of memory for --times 10) and checks the event
count, the ProfilerStep names, the correlation/External id ranges and the flows. Prints the number
of events and the size at the end. Standard library only.
"""
import argparse
import copy
import gzip
import json
import os
import re
import sys
import time
from decimal import Decimal

DEFAULT_INPUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "reference-traces",
                             "hta-1rank-v100-resnet-ns", "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")

# The numbers a copy changes, found in an event's own text. Keys are matched with their quotes, so
# "id" does not match "External id" or "Fwd thread id"; a quote inside a name is written \" and
# cannot open a match. Each template is checked against the parsed event below.
FIELD = re.compile(r'"(ts|id|correlation|External id|external id|Sequence number|Ev Idx)": (-?\d+)(\.\d+)?'
                   r'|"ProfilerStep#(\d+)"')
KIND_OF_KEY = {"ts": "ts", "id": "flow", "correlation": "flow", "External id": "ext", "external id": "ext",
               "Sequence number": "seq", "Ev Idx": "evidx"}
FLOW_PHASES = ("s", "t", "f")


def read_text(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return data.decode("utf-8")


def split_events(text):
    """(prefix, [(event text, parsed event)], separator, trailer) with every event's exact text."""
    match = re.search(r'"traceEvents"\s*:\s*\[', text)
    if not match:
        raise SystemExit("no traceEvents array in the input")
    decoder = json.JSONDecoder(parse_float=Decimal)
    ws = re.compile(r"[\s,]*")
    pos = ws.match(text, match.end()).end()
    prefix = text[:pos]
    events = []
    separator = None
    last_end = pos
    while text[pos] != "]":
        event, end = decoder.raw_decode(text, pos)
        events.append((text[pos:end], event))
        last_end = end
        pos = ws.match(text, end).end()
        if separator is None and text[pos] != "]":
            separator = text[end:pos]
    if not events:
        raise SystemExit("the input has no events")
    return prefix, events, separator or ",\n  ", text[last_end:]


def is_copied(event):
    """Metadata, the whole-trace span and the instant marks on string pids are written once."""
    phase = event.get("ph")
    if phase == "M" or event.get("cat") == "Trace":
        return False
    if phase in ("i", "I") and isinstance(event.get("pid"), str):
        return False
    return True


def template(text, event):
    """A %-format of the event's text with one %d per number that changes, and (kind, base) per %d."""
    parts, slots, at = [], [], 0
    for m in FIELD.finditer(text):
        key = m.group(1)
        if key is None:
            kind, start, end = "step", m.start(4), m.end(4)
            base = int(m.group(4))
        else:
            if key == "id" and event.get("ph") not in FLOW_PHASES:
                continue
            kind, start, end = KIND_OF_KEY[key], m.start(2), m.end(2)
            base = int(m.group(2))  # ts: the integer part; the fraction stays in the text
        parts.append(text[at:start].replace("%", "%%"))
        parts.append("%d")
        slots.append((kind, base))
        at = end
    parts.append(text[at:].replace("%", "%%"))
    return "".join(parts), tuple(slots)


def power_of_ten_above(value):
    power = 10
    while power <= value:
        power *= 10
    return power


def expected_copy(event, k, offsets):
    """What copy k of a parsed event must parse to, for the check of the templates."""
    def shift(value, kind):
        return value + k * offsets[kind]
    event = copy.deepcopy(event)
    if "ts" in event:
        event["ts"] = event["ts"] + k * offsets["ts"]
    if event.get("ph") in FLOW_PHASES and "id" in event:
        event["id"] = shift(event["id"], "flow")
    args = event.get("args", {})
    for key in ("correlation", "External id", "external id", "Sequence number", "Ev Idx"):
        if isinstance(args.get(key), int):
            args[key] = shift(args[key], KIND_OF_KEY[key])
    step = re.fullmatch(r"ProfilerStep#(\d+)", str(event.get("name", "")))
    if step:
        event["name"] = "ProfilerStep#%d" % shift(int(step.group(1)), "step")
    return event


def scaled(value, digits):
    return int(Decimal(value).scaleb(digits))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", default=DEFAULT_INPUT, help="Kineto trace (.json or .json.gz); default: %(default)s")
    parser.add_argument("--times", type=int, default=10, help="number of copies (default 10)")
    parser.add_argument("--gap-us", type=int, default=1000, help="gap between copies in microseconds (default 1000)")
    parser.add_argument("-o", "--output", required=True, help="output path; gzip when it ends in .gz")
    parser.add_argument("--verify", action="store_true", help="read the output back whole and check it")
    args = parser.parse_args()
    if args.times < 1:
        parser.error("--times must be at least 1")

    started = time.perf_counter()
    text = read_text(args.input)
    prefix, events, separator, trailer = split_events(text)
    del text

    copied = [(t, e) for t, e in events if is_copied(e)]
    if not copied:
        raise SystemExit("the input has no events to copy")
    first_copied = next(i for i, (_, e) in enumerate(events) if is_copied(e))
    leading = [(t, e) for t, e in events[:first_copied]]
    trailing = [(t, e) for t, e in events[first_copied:] if not is_copied(e)]

    # The period: the copied events' span, in whole microseconds, plus the gap.
    starts = [Decimal(e["ts"]) for _, e in copied if "ts" in e]
    ends = [Decimal(e["ts"]) + Decimal(e.get("dur", 0) or 0) for _, e in copied if "ts" in e]
    first_start = min(starts)
    span = max(ends) - first_start
    period = int(span.to_integral_value(rounding="ROUND_CEILING")) + args.gap_us

    def max_of(values):
        return max(values, default=0)
    flows = [e["id"] for _, e in copied if e.get("ph") in FLOW_PHASES and isinstance(e.get("id"), int)]
    arg_values = {key: [e["args"][key] for _, e in copied if isinstance(e.get("args", {}).get(key), int)]
                  for key in ("correlation", "External id", "external id", "Sequence number", "Ev Idx")}
    steps = [int(m.group(1)) for _, e in copied for m in [re.fullmatch(r"ProfilerStep#(\d+)", str(e.get("name", "")))] if m]
    offsets = {
        "ts": period,
        "flow": power_of_ten_above(max(max_of(flows), max_of(arg_values["correlation"]))),
        "ext": power_of_ten_above(max(max_of(arg_values["External id"]), max_of(arg_values["external id"]))),
        "seq": power_of_ten_above(max_of(arg_values["Sequence number"])),
        "evidx": power_of_ten_above(max_of(arg_values["Ev Idx"])),
        "step": (max(steps) - min(steps) + 1) if steps else 0,
    }

    templates = [template(t, e) for t, e in copied]
    # Check every template against its parsed event: copy 1 must parse to the expected event.
    check_k = 1
    for (fmt, slots), (original, event) in zip(templates, copied):
        if fmt % tuple(base for _, base in slots) != original:
            raise SystemExit("could not make a template of this event:\n" + original)
        rendered = fmt % tuple(base + check_k * offsets[kind] for kind, base in slots)
        if json.loads(rendered, parse_float=Decimal) != expected_copy(event, check_k, offsets):
            raise SystemExit("could not make a template of this event:\n" + rendered)

    # The events written once: the span stretched, late marks moved to the last copy.
    last_shift = (args.times - 1) * period

    def once(text, event):
        if args.times == 1:
            return text
        if event.get("cat") == "Trace" and "dur" in event:
            dur = event["dur"]
            digits = -Decimal(dur).as_tuple().exponent if isinstance(dur, Decimal) else 0
            new = Decimal(dur) + last_shift
            return re.sub(r'"dur": [0-9.]+', '"dur": ' + (f"{new:.{digits}f}" if digits > 0 else str(new)), text, count=1)
        if event.get("ph") in ("i", "I") and "ts" in event and Decimal(event["ts"]) > first_start:
            return re.sub(r'"ts": (\d+)', lambda m: '"ts": %d' % (int(m.group(1)) + last_shift), text, count=1)
        return text

    output = args.output
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    raw = open(output, "wb")
    sink = gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) if output.endswith(".gz") else raw
    written = 0
    count = 0

    def write(chunk):
        nonlocal written
        data = chunk.encode("utf-8")
        sink.write(data)
        written += len(data)

    pieces = [prefix]
    for t, e in leading:
        pieces.append(once(t, e))
        pieces.append(separator)
    count += len(leading)
    write("".join(pieces))
    kinds = list(offsets)
    for k in range(args.times):
        copy_offsets = {kind: k * offsets[kind] for kind in kinds}
        pieces = [fmt % tuple(base + copy_offsets[kind] for kind, base in slots) for fmt, slots in templates]
        last = k == args.times - 1 and not trailing
        write(separator.join(pieces) + ("" if last else separator))
        count += len(pieces)
        del pieces
    if trailing:
        write(separator.join(once(t, e) for t, e in trailing))
        count += len(trailing)
    write(trailer)
    if sink is not raw:
        sink.close()
    raw.close()
    seconds = time.perf_counter() - started

    print(f"input: {len(events)} events ({len(copied)} copied, {len(events) - len(copied)} written once), "
          f"{len(steps)} ProfilerStep slices, period {period} us")
    print(f"offsets per copy: ts +{period} us, correlation/flow id +{offsets['flow']}, External id +{offsets['ext']}, "
          f"Sequence number +{offsets['seq']}, Ev Idx +{offsets['evidx']}, ProfilerStep# +{offsets['step']}")
    size = f"{written} bytes of JSON ({written / 1e6:.1f} MB)"
    if output.endswith(".gz"):
        size += f", {os.path.getsize(output) / 1e6:.1f} MB gzipped"
    print(f"wrote {output}: {count} events, {size}, in {seconds:.1f} s")

    if args.verify:
        starts = {(e.get("cat"), e.get("id")) for _, e in copied if e.get("ph") == "s"}
        orphan_ends = sum(1 for _, e in copied if e.get("ph") == "f" and (e.get("cat"), e.get("id")) not in starts)
        return verify(output, args.times, len(events), len(copied), steps, offsets, orphan_ends)
    return 0


def verify(path, times, n_input, n_copied, steps, offsets, orphan_ends):
    """Reads the output back whole and checks it: counts, unique ids per copy, links, steps."""
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        document = json.load(f)
    events = document["traceEvents"]
    problems = []
    expected = n_copied * times + (n_input - n_copied)
    if len(events) != expected:
        problems.append(f"{len(events)} events, expected {expected}")
    names = [e["name"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    if steps:
        want = [f"ProfilerStep#{s + k * offsets['step']}" for k in range(times) for s in steps]
        if sorted(names) != sorted(want) or len(set(names)) != len(names):
            problems.append("ProfilerStep# names are not each step once")
    for key in ("correlation", "External id"):
        # Within the original an External id is shared by an op and what it launches; copies must
        # not share any: each copy's values must lie in its own range.
        by_copy = {}
        for e in events:
            value = e.get("args", {}).get(key)
            if isinstance(value, int):
                by_copy.setdefault(value // offsets["flow" if key == "correlation" else "ext"], set()).add(value)
        if len(by_copy) != times:
            problems.append(f"{key}: values in {len(by_copy)} ranges, expected {times}")
    correlations = [e["args"]["correlation"] for e in events if "correlation" in e.get("args", {})]
    runtime = [c for e in events if e.get("cat") == "cuda_runtime" for c in [e["args"].get("correlation")] if c is not None]
    if len(set(runtime)) != len(runtime):
        problems.append("a runtime call's correlation is repeated")
    # Kineto writes some ac2g flow ends with no start (8,928 of the V100 trace's 15,023, on runtime
    # calls): each copy must have as many as the original, no more.
    flow_starts = {(e["cat"], e["id"]) for e in events if e.get("ph") == "s"}
    flow_ends = [(e["cat"], e["id"]) for e in events if e.get("ph") == "f"]
    orphans = sum(1 for end in flow_ends if end not in flow_starts)
    if orphans != times * orphan_ends:
        problems.append(f"{orphans} flow ends have no start, expected {times} x {orphan_ends}")
    ac2g = {e["id"] for e in events if e.get("ph") == "s" and e.get("cat") == "ac2g"}
    if not ac2g <= set(correlations):
        problems.append("an ac2g flow id is no correlation")
    print(f"verify: {len(events)} events, {len(names)} ProfilerStep slices ({names[0] if names else '-'} .. "
          f"{names[-1] if names else '-'}), {len(set(correlations))} distinct correlations, {len(flow_ends)} flow ends "
          f"({orphans} with no start): "
          + ("OK" if not problems else "; ".join(problems)))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Reads a run folder's TensorBoard event files back with TensorBoard's own readers and checks
them against metrics.jsonl and diagnostics.jsonl: every number of every line is there, under
its tag and step, equal at float precision (events hold 32-bit floats), once, and nothing
else is. Exit 0 when they agree, 1 (printing the differences) when not, and 1 when tensorboard
is not installed (tools/setup.sh installs it).

Usage: check_tensorboard.py RUN_DIR [RUN_DIR ...]
"""
import json
import math
import os
import struct
import sys

try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader
except ImportError:  # tools/setup.sh installs it into the venv: its absence is a failure
    print("FAIL: tensorboard is not installed in", sys.executable, "(run tools/setup.sh)")
    sys.exit(1)


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def metric_tag(key):
    if key.startswith("val_"):
        return "eval/" + key
    if key.startswith("task_"):
        return "tasks/" + key[len("task_"):]
    return "train/" + key


def layer_name(i):
    return "entry" if i == 0 else "block_%02d" % (i - 1)


def expected_points(run):
    """(tag, step) -> value from the run's JSONL files."""
    want = {}
    with open(os.path.join(run, "metrics.jsonl")) as f:
        for line in f:
            j = json.loads(line)
            for k, v in j.items():
                if k == "step" or isinstance(v, bool) or not isinstance(v, (int, float)):
                    continue
                if math.isfinite(v):
                    want[(metric_tag(k), j["step"])] = v
    diag = os.path.join(run, "diagnostics.jsonl")
    if os.path.exists(diag):
        with open(diag) as f:
            for line in f:
                j = json.loads(line)
                for what in ("rms", "l2", "stream_grad", "lens"):
                    for stream, values in j.get(what, {}).items():
                        for i, v in enumerate(values):
                            want[("diagnostics/%s_%s/%s" % (what, stream, layer_name(i)), j["step"])] = v
                for what in ("attn_grad", "mlp_grad"):
                    for l, v in enumerate(j.get(what, [])):
                        want[("diagnostics/%s/%s" % (what, layer_name(l + 1)), j["step"])] = v
                for g in j.get("gains", []):
                    if g["ratio"] is None:
                        continue
                    tag = ("diagnostics/gain_ratio_final" if g["layer"] < 0 else
                           "diagnostics/gain_ratio_%s/%s" % (g["branch"], layer_name(g["layer"] + 1)))
                    want[(tag, j["step"])] = g["ratio"]
                for m in j.get("moe", []):  # Mixture-of-Experts layers
                    block = layer_name(m["layer"] + 1)
                    want[("diagnostics/moe_max_share/" + block, j["step"])] = max(m["share"])
                    want[("diagnostics/moe_entropy/" + block, j["step"])] = m["entropy"]
                    want[("diagnostics/moe_idle/" + block, j["step"])] = m["idle"]
    return want


def raw_points(folder):
    """Every scalar of every events file, read record by record (no de-duplication)."""
    points, files = [], sorted(os.listdir(folder))
    for name in files:
        first = True
        for event in LegacyEventFileLoader(os.path.join(folder, name)).Load():
            if first:
                if event.file_version != "brain.Event:2":
                    raise SystemExit("FAIL: %s does not start with the file_version event" % name)
                first = False
            for v in event.summary.value:
                points.append((v.tag, event.step, v.simple_value))
    return points, files


def check(run):
    folder = os.path.join(run, "tensorboard")
    want = expected_points(run)
    errors = []
    points, files = raw_points(folder)
    seen = {}
    for tag, step, value in points:
        if (tag, step) in seen:
            errors.append("%s step %d written twice" % (tag, step))
        seen[(tag, step)] = value
    # TensorBoard's accumulator over the folder, as the TensorBoard UI reads it.
    acc = EventAccumulator(folder, size_guidance={"scalars": 0})
    acc.Reload()
    board = {}
    for tag in acc.Tags()["scalars"]:
        for e in acc.Scalars(tag):
            board[(tag, e.step)] = e.value
    for name, got in (("raw", seen), ("EventAccumulator", board)):
        for key in sorted(set(want) | set(got)):
            if key not in got:
                errors.append("%s: %s step %d missing" % (name, key[0], key[1]))
            elif key not in want:
                errors.append("%s: %s step %d not in the JSONL files" % (name, key[0], key[1]))
            elif got[key] != f32(want[key]):
                errors.append("%s: %s step %d: %r != float(%r)" % (name, key[0], key[1], got[key], want[key]))
    for e in errors[:20]:
        print("FAIL:", run, e)
    if errors:
        return False
    print("%s: %d points in %d events file(s) = metrics.jsonl and diagnostics.jsonl at float precision"
          % (run, len(want), len(files)))
    return True


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    ok = all([check(run) for run in sys.argv[1:]])
    sys.exit(0 if ok else 1)

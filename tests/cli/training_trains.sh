#!/usr/bin/env bash
# Training trains: every scheme, 40 steps of configs/tiny on the built-in corpus in float64,
# must lower the validation loss from the initial weights' (eval.at_start) by at least
# MARGIN nats, and its curve (the initial and final validation losses and the 40 training
# losses of the fixed seed) must equal tests/data/training_curves.json to 1e-7 relative, so
# that any change in the numerics shows up in review. In float64 the curves of different thread
# counts and CPU kernels (ATEN_CPU_CAPABILITY) differ by far less (the largest difference is
# printed), while a change of the numerics moves them by far more. After an intended change of the numerics, regenerate the file with
#   NORMLAB_UPDATE_CURVES=1 ctest --test-dir build -R training_trains
# and commit it with the change.
# Usage: training_trains.sh NORMLAB SOURCE_DIR CORPUS_DIR PYTHON WORK_DIR
set -euo pipefail
normlab=$1 src=$2 kjv=$3 python=$4 work=$5
MARGIN=2.0
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=1
source "$(dirname "${BASH_SOURCE[0]}")/scheme_training.sh"
schemes=$(every_scheme)
train_40_steps "$src/configs/tiny/lm.yaml" fp64 $schemes
"$python" - "$work" "$src/tests/data/training_curves.json" "$MARGIN" $schemes <<'PY'
import json, os, sys
work, golden_path, margin, schemes = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4:]
curves, failures = {}, []
for s in schemes:
    lines = [json.loads(l) for l in open(os.path.join(work, s, "metrics.jsonl"))]
    val = {l["step"]: l["val_loss"] for l in lines if "val_loss" in l}
    loss = [l["loss"] for l in lines if "loss" in l]
    curves[s] = {"val_loss_start": val.get(0), "val_loss_end": val.get(40), "loss": loss}
    if val.get(0) is None or val.get(40) is None or len(loss) != 40:
        failures.append(f"{s}: incomplete metrics (val at 0: {val.get(0)}, at 40: {val.get(40)}, {len(loss)} losses)")
        continue
    drop = val[0] - val[40]
    print(f"{s:17s} val loss {val[0]:.4f} -> {val[40]:.4f} (drop {drop:.3f})")
    if not drop >= margin:
        failures.append(f"{s}: validation loss fell by {drop:.4f} in 40 steps, less than {margin}")
if os.environ.get("NORMLAB_UPDATE_CURVES"):
    with open(golden_path, "w") as f:
        json.dump(curves, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {golden_path}: check the change in review")
else:
    golden = json.load(open(golden_path))
    worst = [0.0, ""]
    def rel(a, b):
        r = abs(a - b) / max(abs(b), 1e-300)
        if r > worst[0]:
            worst[:] = [r, s]
        return r
    for s in schemes:
        g, c = golden.get(s), curves[s]
        if g is None:
            failures.append(f"{s}: not in {golden_path} (NORMLAB_UPDATE_CURVES=1 writes it)")
            continue
        for key in ("val_loss_start", "val_loss_end"):
            if c[key] is not None and rel(c[key], g[key]) > 1e-7:
                failures.append(f"{s}: {key} {c[key]!r}, pinned {g[key]!r}")
        for i, (a, b) in enumerate(zip(c["loss"], g["loss"])):
            if rel(a, b) > 1e-7:
                failures.append(f"{s}: training loss of step {i + 1} is {a!r}, pinned {b!r} "
                                f"(relative {rel(a, b):.2g})")
                break
for f in failures:
    print("FAIL:", f)
if failures:
    sys.exit(1)
if not os.environ.get("NORMLAB_UPDATE_CURVES"):
    print(f"PASS: {len(schemes)} schemes lower the validation loss by at least {margin} nats in 40 "
          f"steps; every curve equals the pinned one (largest difference {worst[0]:.1e} relative, {worst[1] or '-'}; "
          "bound 1e-7)")
PY

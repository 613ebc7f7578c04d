#!/usr/bin/env bash
# Training trains with Mixture-of-Experts blocks: every scheme, 40 steps of configs/moe/tiny.yaml
# (8 experts of width 64, top-2, in every block) on the built-in corpus in float64, must lower
# the validation loss from the initial weights' by at least MARGIN nats, the same margin the
# dense training_trains demands, and no expert may starve: in each of the last 10 steps every
# (layer, expert) got tokens (moe_idle_experts 0) and the load-balancing loss stays below
# LB_MAX (1 is perfectly balanced; all of a layer's tokens on two experts would give about 4).
# Measured (2026-12-04, 2-core Intel Xeon): drops 2.49 (deep_norm) to 3.82 (resi_dual), the
# load-balancing loss at most 1.118 over the last 10 steps (resi_dual), final 1.03-1.09. With
# OLMoE's weight 0.01 instead of tiny.yaml's 0.1, 1 to 4 (layer, expert) pairs got no token in
# some of the last 10 steps for every scheme (load-balancing loss up to 1.98).
# Prints each scheme's drop and its load-balancing figures.
# Usage: training_trains_moe.sh NORMLAB SOURCE_DIR CORPUS_DIR PYTHON WORK_DIR
# Env:   NORMLAB_MOE_CONFIG (default configs/moe/tiny.yaml, relative to SOURCE_DIR) and
#        NORMLAB_MOE_PRECISION (default fp64): the same check on another model, e.g.
#        configs/moe/small.yaml in fp32 (docs/moe.md gives its figures)
set -euo pipefail
normlab=$1 src=$2 kjv=$3 python=$4 work=$5
MARGIN=2.0 LB_MAX=1.25
config=$src/${NORMLAB_MOE_CONFIG:-configs/moe/tiny.yaml} precision=${NORMLAB_MOE_PRECISION:-fp64}
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=1
source "$(dirname "${BASH_SOURCE[0]}")/scheme_training.sh"
schemes=$(every_scheme)
train_40_steps "$config" "$precision" $schemes
"$python" - "$work" "$MARGIN" "$LB_MAX" $schemes <<'PY'
import json, os, sys
work, margin, lb_max, schemes = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4:]
failures = []
for s in schemes:
    lines = [json.loads(l) for l in open(os.path.join(work, s, "metrics.jsonl"))]
    val = {l["step"]: l["val_loss"] for l in lines if "val_loss" in l}
    steps = [l for l in lines if "moe_lb_loss" in l]
    if val.get(0) is None or val.get(40) is None or len(steps) != 40:
        failures.append(f"{s}: incomplete metrics")
        continue
    drop = val[0] - val[40]
    last = steps[-10:]
    idle = max(l["moe_idle_experts"] for l in last)
    lb = max(l["moe_lb_loss"] for l in last)
    print(f"{s:17s} val loss {val[0]:.4f} -> {val[40]:.4f} (drop {drop:.3f}); last 10 steps: "
          f"lb at most {lb:.3f}, idle experts at most {idle}, final lb {steps[-1]['moe_lb_loss']:.3f}")
    if not drop >= margin:
        failures.append(f"{s}: validation loss fell by {drop:.4f} in 40 steps, less than {margin}")
    if idle != 0 or not lb < lb_max:
        failures.append(f"{s}: experts starve (idle {idle}, load-balancing loss {lb:.3f})")
for f in failures:
    print("FAIL: " + f)
print("FAIL" if failures else "PASS")
sys.exit(1 if failures else 0)
PY

#!/usr/bin/env python3
"""The report of tools/bf16_band.sh: per scheme, the bf16 loss curve against the fp32 curve of the
same seed (same initial weights and batches), set against the band given by two fp32 seeds.

  precision gap(t) = |loss_bf16,s0(t) - loss_fp32,s0(t)|
  seed gap(t)      = |loss_fp32,s1(t) - loss_fp32,s0(t)|

Both are averaged over all steps and over the last quarter of the steps; a scheme is within the
band when its mean precision gap is below its mean seed gap (bf16 moves the curve less than a
change of seed does). Also prints each curve's final loss (mean of its last 10 steps) and exits
non-zero if any scheme is outside the band or any bf16 loss is not finite.

Usage: bf16_band_report.py WORK   (WORK/fp32 and WORK/bf16: the two sweeps of bf16_band.sh)
"""
import glob
import json
import math
import os
import sys


def curve(run):
    with open(os.path.join(run, "metrics.jsonl")) as f:
        return [json.loads(line)["loss"] for line in f if '"loss"' in line]


def main():
    work = sys.argv[1]
    rows, bad = [], []
    for run in sorted(glob.glob(os.path.join(work, "bf16", "runs", "*-s0"))):
        name = os.path.basename(run)
        scheme = name.split("-lr")[0]
        bf = curve(run)
        f0 = curve(os.path.join(work, "fp32", "runs", name))
        f1 = curve(os.path.join(work, "fp32", "runs", name[:-1] + "1"))
        n = min(len(bf), len(f0), len(f1))
        if n == 0 or len(bf) != len(f0) or len(f1) != len(f0):
            bad.append(f"{scheme}: curves of {len(bf)}, {len(f0)}, {len(f1)} steps")
            continue
        if not all(math.isfinite(x) for x in bf):
            bad.append(f"{scheme}: a bf16 loss is not finite")
            continue
        tail = max(1, n // 4)
        prec = [abs(b - a) for a, b in zip(f0, bf)]
        seed = [abs(b - a) for a, b in zip(f0, f1)]
        mean = lambda xs: sum(xs) / len(xs)
        final = lambda xs: mean(xs[-10:])
        rows.append((scheme, n, mean(prec), mean(seed), mean(prec[-tail:]), mean(seed[-tail:]),
                     final(f0), final(f1), final(bf)))
        if not mean(prec) < mean(seed):
            bad.append(f"{scheme}: mean precision gap {mean(prec):.4f} >= mean seed gap {mean(seed):.4f}")
    print("| scheme | steps | mean bf16 gap | mean seed gap | last-quarter bf16 gap | last-quarter seed gap "
          "| final fp32 s0 | final fp32 s1 | final bf16 s0 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]:.4f} | {r[3]:.4f} | {r[4]:.4f} | {r[5]:.4f} | {r[6]:.4f} | {r[7]:.4f} "
              f"| {r[8]:.4f} |")
    for b in bad:
        print("OUTSIDE THE BAND: " + b)
    if not rows:
        print("bf16_band_report: no runs under " + work)
        sys.exit(1)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The table of tools/repro_bf16.sh: final validation perplexity of each model and peak learning
rate in bf16 (the sweeps under WORK) beside fp32 (the published CPU-scale tables: pre_norm,
siamese_hybrid and the Hyper-Connections models from hyper_cpu_scale/runs.csv, post_norm and
deep_norm from cpu_scale/sweep.csv, whose initial weights differ in their last bits), with each
run's status, spikes and largest gradient norm. Prints markdown.

Usage: repro_bf16_report.py WORK
"""
import csv
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LRS = ["1e-3", "3e-3", "1e-2", "3e-2"]
# model -> (sweep folder under WORK, scheme, fp32 table, its key column, its key)
MODELS = [
    # pre_norm and siamese_hybrid from the Hyper-Connections study: drawn with today's
    # initialisation (float64, rounded); post_norm and deep_norm exist only in the first study.
    ("pre_norm", "schemes", "pre_norm", "hyper_cpu_scale/runs.csv", "model", "pre_norm"),
    ("post_norm", "schemes", "post_norm", "cpu_scale/sweep.csv", "scheme", "post_norm"),
    ("deep_norm", "schemes", "deep_norm", "cpu_scale/sweep.csv", "scheme", "deep_norm"),
    ("siamese_hybrid", "schemes", "siamese_hybrid", "hyper_cpu_scale/runs.csv", "model", "siamese_hybrid"),
    ("hyper 2xDHC", "hyper_dhc2", "hyper", "hyper_cpu_scale/runs.csv", "model", "hyper 2xDHC"),
    ("siamese_hybrid x 2xDHC", "siamese_hybrid_dhc2", "siamese_hybrid", "hyper_cpu_scale/runs.csv", "model",
     "siamese_hybrid x 2xDHC"),
]


def fp32_cell(table, column, key, lr):
    with open(os.path.join(ROOT, "docs", "results", table)) as f:
        for row in csv.DictReader(f):
            if row[column] == key and float(row["lr"]) == float(lr) and row["seed"] == "0":
                return row
    return None


def bf16_cell(work, folder, scheme, lr):
    run = os.path.join(work, folder, "runs", f"{scheme}-lr{lr}-s0")
    path = os.path.join(run, "summary.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def show(ppl, status):
    if status not in ("completed",):
        return f"{status}" + (f" ({ppl:.2f})" if ppl else "")
    return f"{ppl:.2f}"


def main():
    work = sys.argv[1]
    print("| model | lr | fp32 val ppl | bf16 val ppl | bf16 / fp32 | fp32 spikes / max grad norm "
          "| bf16 spikes / max grad norm |")
    print("|---|---|---|---|---|---|---|")
    for name, folder, scheme, table, column, key in MODELS:
        for lr in LRS:
            b = bf16_cell(work, folder, scheme, lr)
            if b is None:
                continue
            f = fp32_cell(table, column, key, lr)
            fp = float(f["val_perplexity"]) if f else float("nan")
            bp = float(b.get("val_perplexity", float("nan")))
            fs = f"{f['spikes']} / {float(f['max_grad_norm']):.1f}" if f else "-"
            bs = f"{b.get('spikes', '-')} / {float(b.get('max_grad_norm', float('nan'))):.1f}"
            print(f"| {name} | {lr} | {show(fp, f['status'] if f else '-')} | {show(bp, b.get('status', '?'))} "
                  f"| {bp / fp:.3f} | {fs} | {bs} |")


if __name__ == "__main__":
    main()

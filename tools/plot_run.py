#!/usr/bin/env python3
"""The loss curve of one normlab run: training loss (thin, with a moving average) and
validation loss (dots) against the step, from RUN_DIR/metrics.jsonl.

Usage: plot_run.py RUN_DIR [--out RUN_DIR/loss.png]
Exit codes: 0 written, 2 no metrics in RUN_DIR, 3 matplotlib missing.
"""
import argparse
import json
import os
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    out = a.out or os.path.join(a.run_dir, "loss.png")
    steps, losses, val_steps, val_losses = [], [], [], []
    path = os.path.join(a.run_dir, "metrics.jsonl")
    try:
        with open(path) as f:
            for line in f:
                try:
                    m = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if m.get("loss") is not None:
                    steps.append(m["step"])
                    losses.append(m["loss"])
                if m.get("val_loss") is not None:
                    val_steps.append(m["step"])
                    val_losses.append(m["val_loss"])
    except OSError as e:
        print(f"plot_run: {path}: {e.strerror}", file=sys.stderr)
        return 2
    if not steps:
        print(f"plot_run: {path} holds no training steps", file=sys.stderr)
        return 2
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_run: matplotlib is missing (tools/setup.sh installs it in .venv)", file=sys.stderr)
        return 3
    smooth, avg = [], 0.0
    for i, v in enumerate(losses, start=1):  # debiased exponential moving average (TensorBoard's)
        avg = 0.9 * avg + 0.1 * v
        smooth.append(avg / (1.0 - 0.9 ** i))
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot(steps, losses, color="tab:blue", alpha=0.3, linewidth=0.8, label="training loss")
    ax.plot(steps, smooth, color="tab:blue", linewidth=1.8, label="training loss (moving average)")
    if val_steps:
        ax.plot(val_steps, val_losses, "o-", color="tab:orange", label="validation loss")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats per token)")
    ax.set_title(os.path.basename(os.path.normpath(a.run_dir)))
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

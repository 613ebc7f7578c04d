#!/usr/bin/env python3
"""Plots of a normlab sweep folder (`normlab sweep` runs this when matplotlib is available).

Usage: plot_sweep.py SWEEP_DIR [--smooth 0.9]

Reads SWEEP_DIR/summary.json and every run's metrics.jsonl and writes
  SWEEP_DIR/loss_curves.png  training loss against step, one panel per scheme, one line per
                             learning rate (seeds share a colour, dashed after the first);
                             validation losses as dots; a cross where a run diverged
  SWEEP_DIR/ppl_vs_lr.png    final validation perplexity against learning rate (log axis),
                             one line per scheme (mean over completed seeds); diverged cells
                             as crosses along the top edge
Exit codes: 0 written, 2 bad folder, 3 matplotlib missing.
"""
import argparse
import json
import math
import os
import sys


def read_metrics(path):
    steps, losses, val_steps, val_losses, diverged = [], [], [], [], None
    if not os.path.exists(path):
        return steps, losses, val_steps, val_losses, diverged
    with open(path) as f:
        for line in f:
            try:
                m = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a kill
            if m.get("diverged"):
                diverged = m["step"]
            if m.get("loss") is not None:
                steps.append(m["step"])
                losses.append(m["loss"])
            if m.get("val_loss") is not None:
                val_steps.append(m["step"])
                val_losses.append(m["val_loss"])
    return steps, losses, val_steps, val_losses, diverged


def ema(values, beta):
    beta = min(beta, max(0.0, 1.0 - 5.0 / max(1, len(values))))  # short runs: lighter smoothing
    out, avg = [], None
    for v in values:
        avg = v if avg is None else beta * avg + (1 - beta) * v
        out.append(avg)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweep_dir")
    ap.add_argument("--smooth", type=float, default=0.9, help="EMA factor of the loss curves (0 = raw)")
    args = ap.parse_args()
    summary_path = os.path.join(args.sweep_dir, "summary.json")
    if not os.path.exists(summary_path):
        print(f"plot_sweep: {summary_path}: not found (is this a sweep folder?)", file=sys.stderr)
        return 2
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_sweep: matplotlib is not installed (pip install matplotlib)", file=sys.stderr)
        return 3

    runs = json.load(open(summary_path))["runs"]
    schemes = list(dict.fromkeys(r["scheme"] for r in runs))
    lrs = sorted(set(r["lr"] for r in runs))
    seeds = list(dict.fromkeys(r["seed"] for r in runs))
    cmap = plt.get_cmap("viridis")
    colour = {lr: cmap(i / max(1, len(lrs) - 1)) for i, lr in enumerate(lrs)}

    # Loss curves.
    cols = min(3, len(schemes))
    rows = math.ceil(len(schemes) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), squeeze=False, sharey=True)
    # The y range spans the healthy runs: from the lowest loss to a little above the first one
    # (about ln(vocabulary) at initialisation); exploding runs leave the top edge.
    metrics = {r["run"]: read_metrics(os.path.join(args.sweep_dir, r["run_dir"], "metrics.jsonl")) for r in runs}
    firsts = [m[1][0] for m in metrics.values() if m[1] and math.isfinite(m[1][0])]
    lows = [min(m[1]) for m in metrics.values() if m[1]]
    top = max(firsts) * 1.15 if firsts else None
    for ax, scheme in zip(axes.flat, schemes):
        for r in runs:
            if r["scheme"] != scheme:
                continue
            steps, losses, vs, vl, div = metrics[r["run"]]
            style = "-" if r["seed"] == seeds[0] else "--"
            label = f"lr {r['lr']:.3g}" + (f" s{r['seed']}" if len(seeds) > 1 else "")
            if steps:
                ax.plot(steps, ema(losses, args.smooth), style, color=colour[r["lr"]], lw=1.2, label=label)
            if vs:
                ax.plot(vs, vl, "o", color=colour[r["lr"]], ms=3)
            if div is not None:
                y = ema(losses, args.smooth)[-1] if losses else (top or 0)
                ax.plot([div], [min(y, top) if top else y], "x", color="red", ms=9, mew=2, clip_on=False)
        if top and lows:
            ax.set_ylim(min(lows) * 0.95, top)
        ax.set_title(scheme)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in axes.flat[len(schemes):]:
        ax.axis("off")
    for ax in axes[:, 0]:
        ax.set_ylabel("training loss" + (f" (EMA {args.smooth})" if args.smooth else ""))
    fig.suptitle("training loss per scheme (x: diverged; dots: validation loss)")
    fig.tight_layout()
    fig.savefig(os.path.join(args.sweep_dir, "loss_curves.png"), dpi=110)
    plt.close(fig)

    # Final perplexity against learning rate.
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    finite = [r["val_perplexity"] for r in runs if r["status"] == "completed" and r["val_perplexity"] is not None]
    top = max(finite) * 1.15 if finite else 1.0
    for i, scheme in enumerate(schemes):
        xs, ys, dx = [], [], []
        for lr in lrs:
            cell = [r for r in runs if r["scheme"] == scheme and r["lr"] == lr]
            if any(r["status"] == "diverged" for r in cell):
                dx.append(lr)
            elif cell and all(r["status"] == "completed" and r["val_perplexity"] is not None for r in cell):
                xs.append(lr)
                ys.append(sum(r["val_perplexity"] for r in cell) / len(cell))
        line, = ax.plot(xs, ys, "o-", label=scheme)
        if dx:  # nudged sideways per scheme so that coinciding crosses stay visible
            nudge = 1.0 + 0.06 * (i - (len(schemes) - 1) / 2)
            ax.plot([x * nudge for x in dx], [top] * len(dx), "x", color=line.get_color(), ms=10, mew=2)
    ax.set_xscale("log")
    ax.set_xlabel("peak learning rate")
    ax.set_ylabel("final validation perplexity")
    ax.set_title("perplexity against learning rate (x at the top: diverged)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(args.sweep_dir, "ppl_vs_lr.png"), dpi=110)
    plt.close(fig)
    print(f"plots: {args.sweep_dir}/loss_curves.png, {args.sweep_dir}/ppl_vs_lr.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Plots of normlab diagnostics (`normlab train` with diagnostics.every > 0, `normlab analyze`).

Usage: plot_diagnostics.py DIAGNOSTICS.jsonl OUT_DIR

Writes into OUT_DIR (each only when the data for it is there):
  stream_norms.png   RMS of each stream against depth (the newest line solid; with several
                     lines, earlier steps fainter)
  grad_norms.png     gradient norm of each block's branch weights (attention and MLP together)
                     over training, one line per block; beside it the gradient reaching each
                     stream against depth at the newest step
  gains.png          X-side and Y-side input gains of the shared branches per layer (two-stream)
  logit_lens.png     top-1 agreement of each stream alone with the model, against depth
  pruning.png        loss increase with each block skipped in turn
  moe_routing.png    MoE models: heat map of each expert's share of each layer's assignments
  hyper.png          hyper: per sub-layer, the connections' spectral norm (A_r; mHC: H_res),
                     their mean depth weight (|beta|; mHC: H_post) and their distance from the
                     init, over training (one line per sub-layer, the newest step at the end)
Exit codes: 0 written, 2 bad input, 3 matplotlib missing.
"""
import json
import math
import os
import sys


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    path, out = sys.argv[1], sys.argv[2]
    lines = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    lines.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # a line cut by a kill
    except OSError as e:
        print(f"plot_diagnostics: {path}: {e}", file=sys.stderr)
        return 2
    if not lines:
        print(f"plot_diagnostics: {path}: no diagnostics lines", file=sys.stderr)
        return 2
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_diagnostics: matplotlib is not installed (pip install matplotlib)", file=sys.stderr)
        return 3
    os.makedirs(out, exist_ok=True)
    last = lines[-1]
    layers = lambda n: list(range(-1, n - 1))  # entry = -1
    written = []

    # Stream norms against depth.
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    shown = lines if len(lines) <= 4 else [lines[0], lines[len(lines) // 3], lines[2 * len(lines) // 3], lines[-1]]
    for k, d in enumerate(shown):
        newest = d is last
        for s, style in (("x", "-"), ("y", "--")):
            if s in d["rms"]:
                v = d["rms"][s]
                ax.plot(layers(len(v)), v, style, color=f"C{'xy'.index(s)}", alpha=1.0 if newest else 0.25 + 0.5 * k / len(shown),
                        label=f"{s} stream" + (f" (step {d['step']})" if newest or k == 0 else ""))
    ax.set_xlabel("layer (-1: embedding)")
    ax.set_ylabel("RMS of the stream")
    ax.set_title("stream RMS against depth")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "stream_norms.png"), dpi=110)
    plt.close(fig)
    written.append("stream_norms.png")

    # Gradients.
    with_grads = [d for d in lines if "attn_grad" in d]
    if with_grads:
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
        n = len(with_grads[-1]["attn_grad"])
        cmap = plt.get_cmap("viridis")
        steps = [d["step"] for d in with_grads]
        for l in range(n):
            g = [math.hypot(d["attn_grad"][l], d["mlp_grad"][l]) for d in with_grads]
            a1.plot(steps, g, "o-" if len(steps) < 3 else "-", color=cmap(l / max(1, n - 1)), label=f"block {l}", ms=3)
        a1.set_yscale("log")
        a1.set_xlabel("step")
        a1.set_ylabel("||grad|| of the block's attention + MLP weights")
        a1.set_title("branch gradient norms over training")
        a1.grid(alpha=0.3)
        if n <= 16:
            a1.legend(fontsize=6, ncol=2)
        for s, style in (("x", "-"), ("y", "--")):
            if s in with_grads[-1]["stream_grad"]:
                v = with_grads[-1]["stream_grad"][s]
                a2.plot(layers(len(v)), v, style + "o", ms=3, label=f"{s} stream")
        a2.set_yscale("log")
        a2.set_xlabel("layer (-1: embedding)")
        a2.set_ylabel("||dL/dh||")
        a2.set_title(f"gradient reaching each stream (step {with_grads[-1]['step']})")
        a2.grid(alpha=0.3)
        a2.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(out, "grad_norms.png"), dpi=110)
        plt.close(fig)
        written.append("grad_norms.png")

    # Input gains of the shared branches.
    gains = [g for g in last.get("gains", []) if g["layer"] >= 0]
    if gains:
        fig, ax = plt.subplots(figsize=(6.5, 4.2))
        for b, colour in (("attn", "C0"), ("mlp", "C1")):
            rows = [g for g in gains if g["branch"] == b]
            ax.plot([g["layer"] for g in rows], [g["x"] for g in rows], "-o", color=colour, ms=3, label=f"{b}: X side")
            ax.plot([g["layer"] for g in rows], [g["y"] for g in rows], "--o", color=colour, ms=3, label=f"{b}: Y side")
        for g in last.get("gains", []):
            if g["layer"] < 0:
                ax.set_title(f"branch input gains (final fusion: X {g['x']:.2f}, Y {g['y']:.2f})")
        ax.set_xlabel("layer")
        ax.set_ylabel("mean gain")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(out, "gains.png"), dpi=110)
        plt.close(fig)
        written.append("gains.png")

    # Logit lens.
    if "lens" in last:
        fig, ax = plt.subplots(figsize=(6.5, 4.2))
        for s, style in (("x", "-o"), ("y", "--o")):
            if s in last["lens"]:
                v = last["lens"][s]
                ax.plot(layers(len(v)), v, style, ms=3, label=f"{s} stream alone")
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("layer (-1: embedding)")
        ax.set_ylabel("top-1 agreement with the model")
        ax.set_title(f"logit lens per stream (step {last['step']})")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(out, "logit_lens.png"), dpi=110)
        plt.close(fig)
        written.append("logit_lens.png")

    # Pruning.
    with_pruning = [d for d in lines if "pruning" in d]
    if with_pruning:
        d = with_pruning[-1]
        fig, ax = plt.subplots(figsize=(6.5, 4.2))
        ax.bar(range(len(d["pruning"])), [p - d["pruning_base"] for p in d["pruning"]])
        ax.set_xlabel("block skipped")
        ax.set_ylabel("loss increase (nats)")
        ax.set_title(f"single-block pruning (base loss {d['pruning_base']:.3f}, step {d['step']})")
        ax.grid(alpha=0.3, axis="y")
        fig.tight_layout()
        fig.savefig(os.path.join(out, "pruning.png"), dpi=110)
        plt.close(fig)
        written.append("pruning.png")

    # MoE routing: share of each layer's assignments per expert (balanced: 1/E everywhere).
    with_moe = [d for d in lines if "moe" in d]
    if with_moe:
        d = with_moe[-1]
        share = [m["share"] for m in d["moe"]]
        E = len(share[0])
        fig, ax = plt.subplots(figsize=(max(4.0, 0.35 * E + 2.5), max(3.0, 0.35 * len(share) + 1.8)))
        im = ax.imshow(share, aspect="auto", cmap="viridis", vmin=0.0)
        ax.set_yticks(range(len(share)), [str(m["layer"]) for m in d["moe"]])
        ax.set_xlabel("expert")
        ax.set_ylabel("block")
        idle = sum(m["idle"] for m in d["moe"])
        ax.set_title(f"routed share per expert (1/E = {1 / E:.3f}; idle: {idle}; step {d['step']})")
        fig.colorbar(im, ax=ax)
        fig.tight_layout()
        fig.savefig(os.path.join(out, "moe_routing.png"), dpi=110)
        plt.close(fig)
        written.append("moe_routing.png")

    # Hyper-Connections: the connections' statistics over training, one line per sub-layer.
    with_hyper = [d for d in lines if "hyper" in d]
    if with_hyper:
        mhc = with_hyper[-1]["hyper"][0]["variant"] == "mhc"
        keys = (("h_res_spectral", "||H_res||_2"), ("h_post_abs", "mean H_post"), ("h_res_dist", "||H_res - 1/n||_F")) if mhc \
            else (("a_r_spectral", "||A_r||_2 (static)"), ("beta_abs", "mean |beta| (static)"), ("alpha_dist", "||alpha - init||_F (static)"))
        fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
        steps = [d["step"] for d in with_hyper]
        n = len(with_hyper[-1]["hyper"])
        for ax, (key, title) in zip(axes, keys):
            for i in range(n):
                h = with_hyper[-1]["hyper"][i]
                ax.plot(steps, [d["hyper"][i][key] if i < len(d["hyper"]) else math.nan for d in with_hyper],
                        "-" if h["branch"] == "attn" else "--", color=plt.cm.viridis(i / max(1, n - 1)),
                        lw=1, label=f"{h['layer']}.{h['branch']}" if n <= 8 else None)
            ax.set_xlabel("step")
            ax.set_title(title)
            ax.grid(alpha=0.3)
        if n <= 8:
            axes[0].legend(fontsize=7)
        fig.suptitle("Hyper-Connections per sub-layer (layer.branch; attn solid, mlp dashed; colour: depth)")
        fig.tight_layout()
        fig.savefig(os.path.join(out, "hyper.png"), dpi=110)
        plt.close(fig)
        written.append("hyper.png")

    print("plots: " + ", ".join(os.path.join(out, w) for w in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Sanity checks of the reference itself (no C++ involved).

    python tests/reference/self_check.py [--golden tests/data/golden]

The checks of the building blocks are in block_checks.py, those of the schemes and the whole
model in scheme_checks.py, those of the Hyper-Connections references in hyper_checks.py and
siamese_hyper_checks.py; this script reports them (check, maxdiff and tokens_for are passed to
each) and checks the golden files.

Exits non-zero when any check fails. When the golden directory exists, it must hold exactly
the cases of make_goldens.py, and every golden is reloaded and recomputed from its stored
weights, tokens and config.
"""

import argparse
import itertools
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_goldens  # noqa: E402  (first: it sets the thread count before torch starts)

import torch  # noqa: E402

import block_checks  # noqa: E402
import compare_goldens  # noqa: E402
import hyper_checks  # noqa: E402
import scheme_checks  # noqa: E402
import siamese_hyper_checks  # noqa: E402

FAILURES = []


def check(name, ok, detail=""):
    status = "PASS" if ok else "FAIL"
    print(f"[{status}] {name}" + (f"  ({detail})" if detail else ""))
    if not ok:
        FAILURES.append(name)


def maxdiff(a, b):
    return (a - b).abs().max().item()


def tokens_for(cfg, seed=123):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, cfg["vocab_size"], (cfg["batch_size"], cfg["seq_len"] + 1), generator=g)


# ---------------------------------------------------------------------------
# Goldens
# ---------------------------------------------------------------------------

def check_golden_file(case, scheme, overrides, T, cfg):
    """Problems with one golden file (an empty list when it is right)."""
    ref = make_goldens.reference_for(scheme, overrides)  # hyper_ref for hyper
    problems = []
    if cfg != ref.make_config(scheme, **overrides):
        problems.append("config differs from make_goldens.py's case")
        return problems
    shapes = ref.param_shapes(cfg)
    expected = ({f"param.{n}" for n in shapes} | {f"grad.{n}" for n in shapes}
                | {"tokens", "logits", "loss"})
    if set(T) != expected:
        problems.append(f"tensor names: missing {sorted(expected - set(T))}, extra {sorted(set(T) - expected)}")
        return problems
    for n, s in shapes.items():
        if tuple(T[f"param.{n}"].shape) != s or tuple(T[f"grad.{n}"].shape) != s:
            problems.append(f"bad shape for {n}")
        if T[f"param.{n}"].dtype != torch.float32 or T[f"grad.{n}"].dtype != torch.float64:
            problems.append(f"bad dtype for {n} (param float32, grad float64)")
        if T[f"grad.{n}"].abs().max().item() == 0.0 and cfg.get("hyper_variant") != "mhc":
            problems.append(f"zero gradient for {n}")  # (mHC stores its rounding noise as 0)
    B, S = cfg["batch_size"], cfg["seq_len"]
    if T["tokens"].dtype != torch.int64 or tuple(T["tokens"].shape) != (B, S + 1):
        problems.append("tokens shape/dtype")
    if tuple(T["logits"].shape) != (B, S, cfg["vocab_size"]) or tuple(T["loss"].shape) != ():
        problems.append("logits/loss shape")
    if T["logits"].dtype != torch.float64 or T["loss"].dtype != torch.float64:
        problems.append("logits/loss dtype (float64)")
    if problems:
        return problems
    P32 = {n: T[f"param.{n}"] for n in shapes}
    logits, loss, grads = ref.logits_loss_grads(P32, cfg, T["tokens"])
    dl = maxdiff(logits, T["logits"]) / logits.abs().max().item()
    dloss = abs(loss.item() - T["loss"].item()) / abs(loss.item())
    gmax = max(grads[n].abs().max().item() for n in shapes)  # the scale compare_goldens uses
    dg = max(maxdiff(grads[n], T[f"grad.{n}"]) / max(grads[n].abs().max().item(), gmax, 1e-300)
             for n in shapes)
    if max(dl, dloss, dg) > compare_goldens.OUTPUT_RTOL:
        problems.append(f"recompute mismatch logits {dl:.1e} loss {dloss:.1e} grads {dg:.1e}")
    if cfg["norm_eps"] >= 1e-2:
        # eps-sensitive: the embedding's mean square is far below eps, and the logits move by
        # percents when eps becomes the default 1e-5.
        ms = P32["embed.weight"].double().pow(2).mean().item()
        P64 = {n: t.double() for n, t in P32.items()}
        moved = maxdiff(ref.model_forward(P64, dict(cfg, norm_eps=1e-5), T["tokens"])[0],
                        logits) / logits.abs().max().item()
        if ms > 0.1 * cfg["norm_eps"] or moved < 1e-2:
            problems.append(f"not eps-sensitive: mean(embed^2) {ms:.1e}, logits move {moved:.1e} "
                            "when eps is 1e-5")
    return problems


def check_goldens(folder):
    from safetensors import safe_open
    from safetensors.torch import load_file

    files = sorted(f[: -len(".safetensors")] for f in os.listdir(folder) if f.endswith(".safetensors"))
    cases = {name: (scheme, overrides) for name, scheme, overrides in make_goldens.CASES}
    check("golden folder holds exactly make_goldens.py's cases", files == sorted(cases),
          f"{len(files)} files, {len(cases)} cases; missing {sorted(set(cases) - set(files))}, "
          f"extra {sorted(set(files) - set(cases))}")
    all_logits = {}
    for case in files:
        if case not in cases:
            continue
        path = os.path.join(folder, case + ".safetensors")
        with safe_open(path, "pt") as h:
            cfg = json.loads(h.metadata()["config"])
        T = load_file(path)
        problems = check_golden_file(case, *cases[case], T, cfg)
        all_logits[case] = T["logits"]
        check(f"golden {case} reloads and recomputes", not problems, "; ".join(problems))
    pairs = [(a, b) for a, b in itertools.combinations(all_logits, 2)
             if all_logits[a].shape == all_logits[b].shape]
    if pairs:
        worst = min((maxdiff(all_logits[a], all_logits[b]), a, b) for a, b in pairs)
        check("golden logits of one shape all pairwise different", worst[0] > 1e-3,
              f"closest pair {worst[1]} / {worst[2]}: {worst[0]:.3e}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--golden", default=os.path.join(HERE, "..", "data", "golden"))
    args = ap.parse_args()
    torch.manual_seed(0)
    block_checks.run(check, maxdiff)
    scheme_checks.run(check, maxdiff, tokens_for)
    hyper_checks.run(check, maxdiff, tokens_for, args.golden if os.path.isdir(args.golden) else None)
    siamese_hyper_checks.run(check, maxdiff, tokens_for)
    if os.path.isdir(args.golden):
        check_goldens(args.golden)
    else:
        print(f"(no golden folder at {args.golden}; skipped golden checks)")
    if FAILURES:
        print(f"\n{len(FAILURES)} check(s) FAILED")
        sys.exit(1)
    print("\nall checks passed")


if __name__ == "__main__":
    main()

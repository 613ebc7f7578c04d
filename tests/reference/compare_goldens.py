#!/usr/bin/env python3
"""Compare regenerated golden files with the committed ones, within bounds from the arithmetic.

    python tests/reference/compare_goldens.py MADE_DIR COMMITTED_DIR [--expect-fail MARGIN]

Every file must hold the same tensor names, dtypes and shapes and the same config metadata.
Then, per tensor:

- integer tensors (the tokens): equal;
- the float32 weights: within WEIGHT_ULPS units in the last place of float32 per element. They
  are drawn by a seeded generator through float32 arithmetic and libm (log, cos), whose last
  bit may differ between CPUs and C libraries;
- the float64 outputs (logits, loss, every gradient): per element
  |made - committed| <= OUTPUT_RTOL * max|committed| (gradients: at least the case's largest
  gradient instead of max|committed|; see OUTPUT_RTOL for why). This bound holds
  for outputs computed from the same weights; where the weights themselves differ in their last
  bits, the outputs are recomputed here, with the reference, from the committed weights and
  tokens, and compared with the same bound.

Prints the largest difference seen (as a fraction of its bound) and exits 1 when a file is out
of bounds. With --expect-fail MARGIN (the mutation check), the roles flip: every file must fail,
each by at least MARGIN times its bound, and the smallest factor is printed.
"""

import argparse
import json
import os
import sys

import torch
from safetensors import safe_open
from safetensors.torch import load_file

HERE = os.path.dirname(os.path.abspath(__file__))

# float64 outputs: both sides compute in float64 (unit roundoff u = 2^-53 = 1.1e-16) from the same
# inputs, so only the order of floating-point operations differs (vector width, FMA, the
# summation order of a BLAS or of a reduction kernel). Every output element is the end of a
# chain of at most about 100 reductions (4 layers forward and backward, about a dozen sequential
# reductions each), each of length n <= 64 (d_model, d_ff, sequence, vocabulary of these cases),
# whose reordering error is at most n * u relative to the sum of the magnitudes of its terms
# (Higham, gamma_n). Normalised activations and weights of order 0.02 to 1 keep those sums within
# a small factor of the tensor's largest entry, so 100 * 64 * u = 7e-13 of max|tensor| bounds
# the first-order difference; 1e-12 rounds it up. Measured (docs/testing.md): at most 1.7e-14
# between files written with ATen's portable kernels and MKL's reproducible mode and files
# written with the AVX-512, AVX2 or portable kernels of one Intel Xeon, a factor of 58 below the
# bound; LayerNorm's eps changed by +1e-3 moves the outputs by 4.7e9 times the bound, and by a
# factor 1 + 1e-3 still by 4.7e4 times (check.sh mutant).
# A gradient whose terms cancel (a tensor far smaller than the case's largest gradient, e.g.
# mHC's connection scales in its first block, where the streams are still equal) keeps the
# error of its terms, which are of the order of the case's largest gradient, not of the result:
# gradients are compared on the scale max(max|tensor|, the case's largest gradient).
OUTPUT_RTOL = 1e-12
# float32 weights: one unit in the last place per element.
WEIGHT_ULPS = 1


def metadata(path):
    with safe_open(path, "pt") as f:
        return f.metadata() or {}


def ulps32(a, b):
    """Largest |a - b| in units in the last place of float32 at b (elementwise, float32 inputs)."""
    if a.numel() == 0:
        return 0.0
    spacing = torch.nextafter(b.abs(), torch.tensor(float("inf"), dtype=b.dtype)) - b.abs()
    return ((a.double() - b.double()).abs() / spacing.double()).max().item()


def output_ratio(made, committed, floor=0.0):
    """max |made - committed| / (OUTPUT_RTOL * max(max|committed|, floor)): at most 1 within
    bounds."""
    scale = max(committed.abs().max().item(), floor)
    diff = (made - committed).abs().max().item()
    if scale == 0.0:
        return 0.0 if diff == 0.0 else float("inf")
    return diff / (OUTPUT_RTOL * scale)


def recompute(committed, cfg):
    """The reference's outputs from the committed weights and tokens (make_goldens' layout)."""
    sys.path.insert(0, HERE)
    import normlab_ref as ref
    params = {k[len("param."):]: t for k, t in committed.items() if k.startswith("param.")}
    if cfg.get("moe_n_experts"):  # the MoE goldens (moe_ref.py)
        import moe_ref
        return {k: v.double() for k, v in moe_ref.outputs(params, cfg, committed["tokens"]).items()}
    if "hyper_n" in cfg:  # Hyper-Connections: hyper (hyper_ref.py) or SiameseNorm x HC
        import hyper_ref
        import siamese_hyper_ref
        ref = hyper_ref if cfg["scheme"] == "hyper" else siamese_hyper_ref
    logits, loss, grads = ref.logits_loss_grads(params, cfg, committed["tokens"])
    out = {"logits": logits.double(), "loss": loss.double().reshape(())}
    out.update({f"grad.{n}": g.double() for n, g in grads.items()})
    return out


def compare_file(made_path, committed_path):
    """(problems, worst output ratio, its tensor, worst weight ulps, recomputed?)"""
    problems = []
    made, committed = load_file(made_path), load_file(committed_path)
    m_meta, c_meta = metadata(made_path), metadata(committed_path)
    if json.loads(m_meta.get("config", "null")) != json.loads(c_meta.get("config", "null")):
        problems.append("config metadata differs")
    if sorted(made) != sorted(committed):
        problems.append(f"tensor names differ: missing {sorted(set(committed) - set(made))}, "
                        f"extra {sorted(set(made) - set(committed))}")
        return problems, float("inf"), "", 0.0, False
    for k in committed:
        if made[k].dtype != committed[k].dtype or made[k].shape != committed[k].shape:
            problems.append(f"{k}: {made[k].dtype}{list(made[k].shape)} vs "
                            f"{committed[k].dtype}{list(committed[k].shape)}")
    if problems:
        return problems, float("inf"), "", 0.0, False
    worst_ulps, weights_equal = 0.0, True
    for k, c in committed.items():
        m = made[k]
        if not c.is_floating_point():
            if not torch.equal(m, c):
                problems.append(f"{k}: integer tensor differs")
        elif k.startswith("param."):
            u = ulps32(m, c)
            worst_ulps = max(worst_ulps, u)
            weights_equal = weights_equal and u == 0.0
            if u > WEIGHT_ULPS:
                problems.append(f"{k}: {u:.0f} float32 ulps (bound {WEIGHT_ULPS})")
    outputs = {k: made[k] for k in committed if not k.startswith("param.") and committed[k].is_floating_point()}
    recomputed = not weights_equal and not problems
    if recomputed:
        outputs = recompute(committed, json.loads(c_meta["config"]))
    worst, worst_name = 0.0, ""
    grad_scale = max((committed[k].abs().max().item() for k in outputs if k.startswith("grad.")),
                     default=0.0)
    for k, m in outputs.items():
        r = output_ratio(m, committed[k], grad_scale if k.startswith("grad.") else 0.0)
        if r > worst:
            worst, worst_name = r, k
        if r > 1.0:
            problems.append(f"{k}: {r * OUTPUT_RTOL:.2e} of its scale (bound {OUTPUT_RTOL:.0e})")
    return problems, worst, worst_name, worst_ulps, recomputed


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1].strip())
    ap.add_argument("made")
    ap.add_argument("committed")
    ap.add_argument("--expect-fail", type=float, default=0.0, metavar="MARGIN",
                    help="every file must be out of bounds by at least MARGIN times its bound")
    args = ap.parse_args(argv)
    made = sorted(f for f in os.listdir(args.made) if f.endswith(".safetensors"))
    committed = sorted(f for f in os.listdir(args.committed) if f.endswith(".safetensors"))
    if args.expect_fail:
        missing = sorted(set(made) - set(committed))
        if missing or not made:
            print(f"FAIL: no committed file for {missing or 'any file'}")
            return 1
    elif made != committed:
        print("FAIL: the file names differ from the committed ones: "
              f"missing {sorted(set(committed) - set(made))}, extra {sorted(set(made) - set(committed))}")
        return 1
    failed, worst, smallest_miss = [], (0.0, "", ""), (float("inf"), "")
    worst_ulps, recomputed = 0.0, []
    for f in made:
        problems, ratio, name, ulps, re = compare_file(os.path.join(args.made, f),
                                                       os.path.join(args.committed, f))
        worst_ulps = max(worst_ulps, ulps)
        if re:
            recomputed.append(f)
        if problems:
            failed.append(f)
            if not args.expect_fail:
                print(f"FAIL: {f}: " + "; ".join(problems))
        if ratio > worst[0]:
            worst = (ratio, f, name)
        smallest_miss = min(smallest_miss, (ratio, f))
    if args.expect_fail:
        ok = len(failed) == len(made) and smallest_miss[0] >= args.expect_fail
        print(f"mutant: {len(failed)} of {len(made)} files out of bounds; the closest is {smallest_miss[1]} at "
              f"{smallest_miss[0]:.1e} times the bound ({smallest_miss[0] * OUTPUT_RTOL:.1e} of max|ref|; "
              f"required: at least {args.expect_fail:.0e} times)")
        return 0 if ok else 1
    print(f"largest output difference: {worst[0] * OUTPUT_RTOL:.2e} of max|ref| ({worst[2]} in {worst[1]}), "
          f"{worst[0]:.1e} of the bound {OUTPUT_RTOL:.0e}; weights: at most {worst_ulps:.0f} float32 ulps"
          + (f"; recomputed from the committed weights: {' '.join(recomputed)}" if recomputed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

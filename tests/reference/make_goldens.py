#!/usr/bin/env python3
"""Write the golden files used by the C++ unit tests.

    python tests/reference/make_goldens.py --out tests/data/golden

Deterministic: every case has a fixed seed. Weights are drawn and rounded to float32 (and
stored so), the whole computation runs in float64 from those float32 values, and logits, loss
and gradients are stored as float64 (tokens as int64).

Run to run on one machine the files are byte-identical (one thread, fixed seeds). Between
machines the float64 outputs may differ in their last bits (the vector width of ATen's kernels,
FMA, the BLAS's summation order), and so may a float32 weight drawn through libm: CTest's
golden_regenerate compares a fresh generation with tests/data/golden within the bounds that
compare_goldens.py derives, never byte for byte.
"""

import argparse
import fnmatch
import json
import os
import sys

# Before torch is imported (read when the libraries start): one thread, so that a run repeats
# bitwise on one machine.
os.environ["OMP_NUM_THREADS"] = "1"
os.environ["MKL_NUM_THREADS"] = "1"

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hyper_ref  # noqa: E402
import normlab_ref as ref  # noqa: E402
import siamese_hyper_ref  # noqa: E402

torch.set_num_threads(1)

# The ten schemes run on the default model of normlab_ref (vocab 64, d_model 32, 4 layers,
# 4 heads of 8 sharing 2 kv heads, d_ff 48). Every other case runs on a compact model, so
# that the committed files stay small: vocab 32, d_model 16, 4 heads of 4 sharing 2 kv heads
# (two query heads per kv head, so the head grouping still matters), d_ff 24, 4 layers.
COMPACT = {"vocab_size": 32, "d_model": 16, "n_heads": 4, "n_kv_heads": 2, "d_ff": 24}
# Eps-sensitive: mean(x^2) of the embedding (std 0.02, so 4e-4) is far below norm_eps (1e-2),
# so the norms that see the embedding (and the q/k/v norms after them) are dominated by eps.
EPS = {"norm_eps": 1e-2, "embed_std": 0.02}


def compact(**overrides):
    return {**COMPACT, **overrides}


# (case name, scheme, config overrides). The seed of a case is its index + 1.
CASES = [
    ("pre_norm", "pre_norm", {}),
    ("post_norm", "post_norm", {}),
    ("deep_norm", "deep_norm", {}),
    ("hybrid_norm", "hybrid_norm", {}),
    ("hybrid_norm_star", "hybrid_norm_star", {}),
    ("peri_norm", "peri_norm", {}),
    ("mix_ln", "mix_ln", {}),
    ("resi_dual", "resi_dual", {}),
    ("siamese", "siamese", {}),
    ("siamese_hybrid", "siamese_hybrid", {}),
    ("pre_norm_qkvnorm_tied", "pre_norm", compact(qkv_norm=True, tie_embeddings=True)),
    ("pre_norm_layernorm", "pre_norm", compact(norm_type="layernorm")),
    ("pre_norm_zloss", "pre_norm", compact(z_loss=1e-3)),
    ("siamese_no_depth_scale", "siamese", compact(siamese_depth_scale=False)),
    ("siamese_no_input_norm", "siamese", compact(siamese_input_norm=False)),
    ("siamese_paper_fusion", "siamese", compact(siamese_output_fusion="paper")),
    ("siamese_hybrid_no_depth_scale", "siamese_hybrid", compact(siamese_depth_scale=False)),
    ("siamese_hybrid_no_input_norm", "siamese_hybrid", compact(siamese_input_norm=False)),
    ("siamese_hybrid_paper_fusion", "siamese_hybrid", compact(siamese_output_fusion="paper")),
    ("deep_norm_alpha1", "deep_norm", compact(deep_norm_alpha=1.0)),
    # eps-sensitive
    ("eps_pre_norm", "pre_norm", compact(**EPS)),
    ("eps_post_norm", "post_norm", compact(**EPS)),
    ("eps_hybrid_norm", "hybrid_norm", compact(**EPS)),
    ("eps_siamese", "siamese", compact(**EPS)),
    ("eps_siamese_hybrid", "siamese_hybrid", compact(**EPS)),
    ("eps_pre_norm_layernorm", "pre_norm", compact(**EPS, norm_type="layernorm")),
    # full multi-head attention (n_kv_heads == n_heads)
    ("mha_pre_norm", "pre_norm", compact(n_kv_heads=4)),
    ("mha_siamese_hybrid", "siamese_hybrid", compact(n_kv_heads=4)),
    # q/k/v norms where they are optional
    ("qkvnorm_siamese", "siamese", compact(qkv_norm=True)),
    ("qkvnorm_deep_norm", "deep_norm", compact(qkv_norm=True)),
    ("qkvnorm_resi_dual", "resi_dual", compact(qkv_norm=True)),
    # tied embeddings on the two-stream schemes
    ("tied_siamese", "siamese", compact(tie_embeddings=True)),
    ("tied_siamese_hybrid", "siamese_hybrid", compact(tie_embeddings=True)),
    # LayerNorm
    ("layernorm_hybrid_norm", "hybrid_norm", compact(norm_type="layernorm")),
    ("layernorm_peri_norm", "peri_norm", compact(norm_type="layernorm")),
    ("layernorm_siamese_hybrid", "siamese_hybrid", compact(norm_type="layernorm")),
    # Mix-LN splits (the default of 4 layers is 1 Post-Norm block)
    ("mix_ln_split0", "mix_ln", compact(mix_ln_post_layers=0)),
    ("mix_ln_split2", "mix_ln", compact(mix_ln_post_layers=2)),
    # a longer sequence
    ("t64_pre_norm", "pre_norm", compact(seq_len=64)),
    ("t64_siamese_hybrid", "siamese_hybrid", compact(seq_len=64)),
    # Hyper-Connections (hyper_ref.py): DHC x2 on the default model, SHC and DHC at n = 2 and 4,
    # mHC at n = 4
    ("hyper", "hyper", {}),
    ("hyper_shc2", "hyper", compact(hyper_dynamic=False)),
    ("hyper_shc4", "hyper", compact(hyper_n=4, hyper_dynamic=False)),
    ("hyper_dhc4", "hyper", compact(hyper_n=4)),
    ("hyper_dhc4_no_tanh", "hyper", compact(hyper_n=4, hyper_tanh=False)),
    ("hyper_mhc4", "hyper", compact(hyper_n=4, hyper_variant="mhc")),
    # SiameseNorm x Hyper-Connections (siamese_hyper_ref.py): Y as 2 DHC streams, siamese_hybrid
    # on the default model (as hyper's 2xDHC), siamese on the compact one
    ("siamese_hybrid_hyper_dhc2", "siamese_hybrid", {"hyper_n": 2}),
    ("siamese_hyper_dhc2", "siamese", compact(hyper_n=2)),
    # full-width q/k norms (OLMo-2, OLMoE): grouped-query (k's norm narrower than q's), with
    # LayerNorm, and on a two-stream scheme
    ("qknorm_full_pre_norm", "pre_norm", compact(qk_norm="full")),
    ("qknorm_full_layernorm", "pre_norm", compact(qk_norm="full", norm_type="layernorm")),
    ("qknorm_full_siamese", "siamese", compact(qk_norm="full")),
    # OLMo 2's reordered norm: on the default model, and with its full-width q/k norms
    ("reordered_norm", "reordered_norm", {}),
    ("reordered_norm_qknorm_full", "reordered_norm", compact(qk_norm="full")),
]


def reference_for(scheme, overrides=None):
    """The reference module of a case: hyper_ref for hyper, siamese_hyper_ref for siamese and
    siamese_hybrid with hyper_* keys (Y as hyper-streams), normlab_ref for the others."""
    if scheme == "hyper":
        return hyper_ref
    if scheme in siamese_hyper_ref.SCHEMES and any(k.startswith("hyper_") for k in overrides or {}):
        return siamese_hyper_ref
    return ref


def make_tokens(cfg, seed):
    g = torch.Generator().manual_seed(10_000 + seed)
    return torch.randint(0, cfg["vocab_size"], (cfg["batch_size"], cfg["seq_len"] + 1),
                         generator=g, dtype=torch.int64)


def build_case(index, scheme, overrides):
    seed = index + 1
    r = reference_for(scheme, overrides)
    cfg = r.make_config(scheme, **overrides)
    params = r.init_params(cfg, seed, dtype=torch.float32)
    tokens = make_tokens(cfg, seed)
    logits, loss, grads = r.logits_loss_grads(params, cfg, tokens)
    tensors = {}
    for name, p in params.items():
        tensors[f"param.{name}"] = p.to(torch.float32).contiguous()
    tensors["tokens"] = tokens.contiguous()
    tensors["logits"] = logits.to(torch.float64).contiguous()
    tensors["loss"] = loss.to(torch.float64).reshape(()).contiguous()
    for name, g in grads.items():
        tensors[f"grad.{name}"] = g.to(torch.float64).contiguous()
    return cfg, tensors


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1].strip())
    ap.add_argument("--out", required=True, help="output directory, e.g. tests/data/golden")
    ap.add_argument("--cases", default="*",
                    help="comma-separated shell patterns of the case names to write (default: all)")
    args = ap.parse_args(argv)
    patterns = args.cases.split(",")
    os.makedirs(args.out, exist_ok=True)
    for index, (case, scheme, overrides) in enumerate(CASES):
        if not any(fnmatch.fnmatchcase(case, p) for p in patterns):
            continue  # the seed stays the case's index: a subset gives the same files
        cfg, tensors = build_case(index, scheme, overrides)
        path = os.path.join(args.out, f"{case}.safetensors")
        save_file(tensors, path, metadata={"config": json.dumps(cfg, sort_keys=True)})
        n_params = sum(1 for k in tensors if k.startswith("param."))
        print(f"wrote {path}  scheme={scheme} params={n_params} "
              f"loss={tensors['loss'].item():.6f} bytes={os.path.getsize(path)}")


if __name__ == "__main__":
    main()

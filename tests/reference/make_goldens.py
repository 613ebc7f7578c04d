#!/usr/bin/env python3
"""Write the golden files used by the C++ unit tests.

    python tests/reference/make_goldens.py --out tests/data/golden

Deterministic: every case has a fixed seed. Weights are drawn, rounded to float32, the
whole computation runs in float64 from those float32 values, and everything is stored as
float32 (tokens as int64).
"""

import argparse
import json
import os
import sys

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import normlab_ref as ref  # noqa: E402

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
    ("pre_norm_qkvnorm_tied", "pre_norm", {"qkv_norm": True, "tie_embeddings": True}),
    ("pre_norm_layernorm", "pre_norm", {"norm_type": "layernorm"}),
    ("pre_norm_zloss", "pre_norm", {"z_loss": 1e-3}),
    ("siamese_no_depth_scale", "siamese", {"siamese_depth_scale": False}),
    ("siamese_no_input_norm", "siamese", {"siamese_input_norm": False}),
    ("siamese_paper_fusion", "siamese", {"siamese_output_fusion": "paper"}),
    ("siamese_hybrid_no_depth_scale", "siamese_hybrid", {"siamese_depth_scale": False}),
    ("siamese_hybrid_no_input_norm", "siamese_hybrid", {"siamese_input_norm": False}),
    ("siamese_hybrid_paper_fusion", "siamese_hybrid", {"siamese_output_fusion": "paper"}),
    ("deep_norm_alpha1", "deep_norm", {"deep_norm_alpha": 1.0}),
]


def make_tokens(cfg, seed):
    g = torch.Generator().manual_seed(10_000 + seed)
    return torch.randint(0, cfg["vocab_size"], (cfg["batch_size"], cfg["seq_len"] + 1),
                         generator=g, dtype=torch.int64)


def build_case(index, scheme, overrides):
    seed = index + 1
    cfg = ref.make_config(scheme, **overrides)
    params = ref.init_params(cfg, seed, dtype=torch.float32)
    tokens = make_tokens(cfg, seed)
    logits, loss, grads = ref.logits_loss_grads(params, cfg, tokens)
    tensors = {}
    for name, p in params.items():
        tensors[f"param.{name}"] = p.to(torch.float32).contiguous()
    tensors["tokens"] = tokens.contiguous()
    tensors["logits"] = logits.to(torch.float32).contiguous()
    tensors["loss"] = loss.to(torch.float32).reshape(()).contiguous()
    for name, g in grads.items():
        tensors[f"grad.{name}"] = g.to(torch.float32).contiguous()
    return cfg, tensors


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1].strip())
    ap.add_argument("--out", required=True, help="output directory, e.g. tests/data/golden")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    for index, (case, scheme, overrides) in enumerate(CASES):
        cfg, tensors = build_case(index, scheme, overrides)
        path = os.path.join(args.out, f"{case}.safetensors")
        save_file(tensors, path, metadata={"config": json.dumps(cfg, sort_keys=True)})
        n_params = sum(1 for k in tensors if k.startswith("param."))
        print(f"wrote {path}  scheme={scheme} params={n_params} "
              f"loss={tensors['loss'].item():.6f} bytes={os.path.getsize(path)}")


if __name__ == "__main__":
    main()

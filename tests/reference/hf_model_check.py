#!/usr/bin/env python3
"""src/train/hf/modeling_normlab.py (the model of `normlab export --format hf`) against the
independent reference (normlab_ref.py; moe_ref.py for the Mixture-of-Experts cases, hyper_ref.py
for Hyper-Connections, siamese_hyper_ref.py for SiameseNorm x Hyper-Connections) in float64,
for every scheme and switch, on the reference's own random weights: the logits agree to 1e-12
relative, and a batch with left and right padding (attention_mask) gives each sequence its
unpadded logits.

Usage: hf_model_check.py   (prints PASS; exits 1 on a difference or without transformers)
"""
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "..", "src", "train", "hf"))
try:
    import torch
    from configuration_normlab import NormlabConfig
    from modeling_normlab import NormlabForCausalLM
except ImportError as e:  # tools/setup.sh --tests installs torch and transformers into the venv
    print(f"FAIL: {e} (run tools/setup.sh --tests)")
    sys.exit(1)
import normlab_ref as R  # noqa: E402
import moe_ref  # noqa: E402
import hyper_ref  # noqa: E402
import siamese_hyper_ref  # noqa: E402

TOL = 1e-12
CASES = [(s, {}) for s in R.SCHEMES] + [
    ("siamese", dict(siamese_depth_scale=False, siamese_input_norm=False, siamese_output_fusion="paper")),
    ("siamese_hybrid", dict(siamese_input_norm=False, siamese_output_fusion="paper", tie_embeddings=True)),
    ("pre_norm", dict(qkv_norm=True, norm_type="layernorm", n_kv_heads=4)),
    ("peri_norm", dict(tie_embeddings=True, n_kv_heads=1)),
    ("deep_norm", dict(deep_norm_alpha=1.7)),
    ("mix_ln", dict(mix_ln_post_layers=3)),
    ("resi_dual", dict(qkv_norm=True, norm_type="layernorm")),
    # full-width q/k norms (OLMo-2, OLMoE), also on a two-stream scheme and with experts
    ("pre_norm", dict(qk_norm="full")),
    ("siamese", dict(qk_norm="full", norm_type="layernorm", n_kv_heads=1)),
    ("pre_norm", dict(qk_norm="full", moe_n_experts=4, moe_top_k=2)),
    # OLMo 2's block: reordered norm with full-width q/k norms
    ("reordered_norm", dict(qk_norm="full", n_kv_heads=4)),
    ("reordered_norm", dict(qk_norm="full", norm_type="layernorm", tie_embeddings=True)),
    # Mixture-of-Experts MLPs (moe_ref.py)
    ("pre_norm", dict(moe_n_experts=4, moe_top_k=2)),
    ("siamese_hybrid", dict(moe_n_experts=4, moe_top_k=1, moe_renormalize=True)),
    ("deep_norm", dict(moe_n_experts=3, moe_top_k=2, moe_every=2, moe_d_expert=20)),
    # Hyper-Connections (hyper_ref.py) on its non-init weights: DHC, SHC, no tanh, mHC
    ("hyper", dict(hyper_n=2)),
    ("hyper", dict(hyper_n=4, hyper_dynamic=False, tie_embeddings=True)),
    ("hyper", dict(hyper_n=4, hyper_tanh=False, norm_type="layernorm", qkv_norm=True)),
    ("hyper", dict(hyper_n=1)),
    ("hyper", dict(hyper_variant="mhc", hyper_n=4)),
    # SiameseNorm x Hyper-Connections (siamese_hyper_ref.py): Y as hyper-streams, non-init weights
    ("siamese_hybrid", dict(hyper_n=2)),
    ("siamese_hybrid", dict(hyper_n=4, hyper_dynamic=False, siamese_input_norm=False, tie_embeddings=True)),
    ("siamese_hybrid", dict(hyper_variant="mhc", hyper_n=2, siamese_output_fusion="paper")),
    ("siamese", dict(hyper_variant="mhc", hyper_n=4)),
    ("siamese", dict(hyper_n=2, hyper_tanh=False, norm_type="layernorm")),
    ("siamese", dict(hyper_n=1, siamese_depth_scale=False, siamese_output_fusion="paper")),
]


def reference_of(scheme, overrides):
    if scheme == "hyper":
        return hyper_ref
    if any(k.startswith("hyper_") for k in overrides):
        return siamese_hyper_ref
    return moe_ref if any(k.startswith("moe_") for k in overrides) else R


def hf_model(cfg, params):
    hyper = {k[6:]: v for k, v in cfg.items() if k.startswith("hyper_")}
    siamese_hyper = hyper if cfg["scheme"] in siamese_hyper_ref.SCHEMES else None
    hc = NormlabConfig(
        scheme=cfg["scheme"], vocab_size=cfg["vocab_size"], d_model=cfg["d_model"],
        n_layers=cfg["n_layers"], n_heads=cfg["n_heads"], n_kv_heads=cfg["n_kv_heads"],
        d_ff=cfg["d_ff"], rope_theta=cfg["rope_theta"], norm_eps=cfg["norm_eps"],
        norm_type=cfg["norm_type"], qkv_norm=cfg["qkv_norm"],
        qk_norm=cfg.get("qk_norm", "none"), tie_embeddings=cfg["tie_embeddings"],
        siamese=dict(depth_scale=cfg["siamese_depth_scale"], input_norm=cfg["siamese_input_norm"],
                     output_fusion=cfg["siamese_output_fusion"], hyper=siamese_hyper),
        deep_norm_alpha=cfg["deep_norm_alpha"], mix_ln_post_layers=cfg["mix_ln_post_layers"],
        moe={k[4:]: v for k, v in cfg.items() if k.startswith("moe_")},
        hyper=hyper if cfg["scheme"] == "hyper" else None)
    model = NormlabForCausalLM(hc).double()
    # the export's names: "model." + normlab's, the untied head as lm_head
    weights = {("lm_head.weight" if n == "head.weight" else "model." + n): t for n, t in params.items()}
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if missing or unexpected:
        raise KeyError(f"{cfg['scheme']}: missing {missing}, unexpected {unexpected}")
    return model.eval()


def main():
    bad = 0
    for scheme, overrides in CASES:
        ref_module = reference_of(scheme, overrides)
        cfg = ref_module.make_config(scheme, **overrides)
        params = ref_module.init_params(cfg, seed=1, dtype=torch.float64)
        model = hf_model(cfg, params)
        tokens = torch.randint(0, cfg["vocab_size"], (2, 10), generator=torch.Generator().manual_seed(0))
        # logits of tokens[:, :-1]
        ref = ref_module.model_forward(params, cfg, tokens)[0]
        scale = ref.abs().max()
        with torch.no_grad():
            out = model(tokens[:, :-1]).logits
            # row 0 left-padded by 2, row 1 right-padded by 2
            ids = torch.zeros(2, 11, dtype=torch.long)
            mask = torch.zeros(2, 11, dtype=torch.long)
            ids[0, 2:], mask[0, 2:] = tokens[0, :-1], 1
            ids[1, :9], mask[1, :9] = tokens[1, :-1], 1
            padded = model(ids, attention_mask=mask).logits
        d = ((out - ref).abs().max() / scale).item()
        dp = max((padded[0, 2:] - ref[0]).abs().max().item(), (padded[1, :9] - ref[1]).abs().max().item()) / scale.item()
        ok = d <= TOL and dp <= TOL
        bad += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {scheme} {overrides or ''}: {d:.1e}, padded {dp:.1e}")
    if bad:
        print(f"FAIL: {bad} cases differ by more than {TOL} relative")
        sys.exit(1)
    print("PASS")


if __name__ == "__main__":
    main()

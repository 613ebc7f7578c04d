"""Independent PyTorch reference of the normlab decoder-only model family.

Plain, functional PyTorch. Parameters live in a flat dict ``name -> tensor`` whose
names are exactly the ones the C++ implementation loads. Every normalization scheme has
its own forward function that reads like the paper's update rules as docs/paper.md states
them (sections Schemes, Stream initialisation and final fusion, and Conventions).

This module holds the config, the parameter names and their initialisation, and the whole
model (embedding, scheme, head, loss); the building blocks (norms, RoPE, attention, MLP) are in
blocks_ref.py and the schemes' forwards in schemes_ref.py. Both are re-exported here.

Usage:
    cfg = make_config("siamese_hybrid")
    params = init_params(cfg, seed=0, dtype=torch.float64)
    logits, loss = model_forward(params, cfg, tokens)

All computation happens in the dtype of the parameters; use float64 for goldens.
"""

import math
import zlib

import torch
import torch.nn.functional as F

# The blocks and the schemes' forwards live in modules of their own; they are re-exported here,
# so that `import normlab_ref as ref` gives the whole reference.
from blocks_ref import (  # noqa: F401
    attention,
    causal_attention,
    head_dim,
    layer_norm,
    mlp,
    norm,
    rms_norm,
    rope,
)
from schemes_ref import (  # noqa: F401
    FORWARDS,
    _siamese_output,
    deep_norm_alpha,
    depth_scale,
    forward_deep_norm,
    forward_hybrid_norm,
    forward_hybrid_norm_star,
    forward_mix_ln,
    forward_peri_norm,
    forward_post_norm,
    forward_pre_norm,
    forward_reordered_norm,
    forward_resi_dual,
    forward_siamese,
    forward_siamese_hybrid,
    mix_ln_post_layers,
    qkv_norm_on,
)

SCHEMES = (
    "pre_norm",
    "post_norm",
    "deep_norm",
    "hybrid_norm",
    "hybrid_norm_star",
    "peri_norm",
    "mix_ln",
    "resi_dual",
    "siamese",
    "siamese_hybrid",
    "reordered_norm",
)

DEFAULT_CONFIG = {
    "scheme": "pre_norm",
    "vocab_size": 64,
    "d_model": 32,
    "n_layers": 4,
    "n_heads": 4,
    "n_kv_heads": 2,
    "d_ff": 48,
    "rope_theta": 10000.0,
    "norm_eps": 1e-5,
    "norm_type": "rmsnorm",
    "tie_embeddings": False,
    "qkv_norm": False,
    "z_loss": 0.0,
    "siamese_depth_scale": True,
    "siamese_input_norm": True,
    "siamese_output_fusion": "code",
    "deep_norm_alpha": None,
    "mix_ln_post_layers": None,
    # Initialisation only (how init_params draws embed.weight; not a model key): None for the
    # default rule below, a number for that std (the goldens' small-embedding cases).
    "embed_std": None,
    "batch_size": 2,
    "seq_len": 8,
}


# Keys a config holds only when given (so that the configs written into the goldens made
# before them stay as they were), with the value their absence means.
OPTIONAL_CONFIG = {
    "qk_norm": "none",  # "full": one norm over all of q and one over all of k (OLMo-2, OLMoE)
}


def make_config(scheme, **overrides):
    cfg = dict(DEFAULT_CONFIG)
    cfg["scheme"] = scheme
    for key, value in overrides.items():
        if key not in cfg and key not in OPTIONAL_CONFIG:
            raise KeyError(f"unknown config key {key}")
        cfg[key] = value
    if scheme not in SCHEMES:
        raise ValueError(f"unknown scheme {scheme}")
    return cfg


# ---------------------------------------------------------------------------
# Parameter lists (exact names; ordered)
# ---------------------------------------------------------------------------

def _common_params(cfg):
    V, d = cfg["vocab_size"], cfg["d_model"]
    names = {"embed.weight": (V, d)}
    if not cfg["tie_embeddings"]:
        names["head.weight"] = (V, d)
    return names


def _branch_params(cfg, l, use_qkv_norm):
    d, d_ff = cfg["d_model"], cfg["d_ff"]
    H, KV, hd = cfg["n_heads"], cfg["n_kv_heads"], head_dim(cfg)
    b = f"blocks.{l}"
    names = {
        f"{b}.attn.qkv.weight": ((H + 2 * KV) * hd, d),
        f"{b}.attn.out.weight": (d, H * hd),
    }
    if use_qkv_norm:
        names[f"{b}.attn.q_norm.weight"] = (hd,)
        names[f"{b}.attn.k_norm.weight"] = (hd,)
        names[f"{b}.attn.v_norm.weight"] = (hd,)
    elif cfg.get("qk_norm", "none") == "full":
        names[f"{b}.attn.q_norm.weight"] = (H * hd,)
        names[f"{b}.attn.k_norm.weight"] = (KV * hd,)
    names[f"{b}.mlp.up.weight"] = (2 * d_ff, d)
    names[f"{b}.mlp.down.weight"] = (d, d_ff)
    return names


def param_shapes(cfg):
    """Ordered dict name -> shape of exactly the parameters of cfg['scheme']."""
    scheme, L, d = cfg["scheme"], cfg["n_layers"], cfg["d_model"]
    shapes = _common_params(cfg)
    for l in range(L):
        b = f"blocks.{l}"
        if scheme in ("pre_norm", "post_norm", "deep_norm", "mix_ln", "resi_dual"):
            shapes.update(_branch_params(cfg, l, qkv_norm_on(cfg)))
            block_norms = ["attn_norm", "mlp_norm"]
        elif scheme == "hybrid_norm":
            shapes.update(_branch_params(cfg, l, True))
            block_norms = ["mlp_norm"]
        elif scheme == "hybrid_norm_star":
            shapes.update(_branch_params(cfg, l, True))
            block_norms = ["attn_norm", "mlp_norm"] if l == 0 else ["mlp_norm"]
        elif scheme == "peri_norm":
            shapes.update(_branch_params(cfg, l, qkv_norm_on(cfg)))
            block_norms = ["attn_norm", "attn_out_norm", "mlp_norm", "mlp_out_norm"]
        elif scheme == "reordered_norm":
            shapes.update(_branch_params(cfg, l, qkv_norm_on(cfg)))
            block_norms = ["attn_out_norm", "mlp_out_norm"]
        elif scheme == "siamese":
            shapes.update(_branch_params(cfg, l, qkv_norm_on(cfg)))
            block_norms = []
            for s in ("attn", "mlp"):
                block_norms += [f"{s}_post_norm", f"{s}_y_norm"]
                if cfg["siamese_input_norm"]:
                    block_norms.append(f"{s}_in_norm")
        elif scheme == "siamese_hybrid":
            shapes.update(_branch_params(cfg, l, True))
            shapes[f"{b}.c1"] = (d,)
            block_norms = ["attn_y_norm", "mlp_norm", "mlp_y_norm"]
            if cfg["siamese_input_norm"]:
                block_norms.append("mlp_in_norm")
        else:
            raise ValueError(scheme)
        for n in block_norms:
            shapes[f"{b}.{n}.weight"] = (d,)

    if scheme in ("pre_norm", "hybrid_norm", "hybrid_norm_star", "peri_norm", "mix_ln", "reordered_norm"):
        end_norms = ["final_norm"]
    elif scheme in ("post_norm", "deep_norm"):
        end_norms = []
    elif scheme == "resi_dual":
        end_norms = ["final_norm_y"]
    elif scheme in ("siamese", "siamese_hybrid"):
        end_norms = ["final_norm_x", "final_norm_y"]
        if cfg["siamese_output_fusion"] == "code":
            end_norms.append("final_norm")
        elif cfg["siamese_output_fusion"] != "paper":
            raise ValueError(cfg["siamese_output_fusion"])
    for n in end_norms:
        shapes[f"{n}.weight"] = (d,)
    return shapes


def init_params(cfg, seed, dtype=torch.float32):
    """Random weights, rounded to float32, then cast to `dtype`.

    Each parameter is drawn from its own generator seeded by (seed, name), so two
    configs that share a parameter name get the same values for the same seed.
    Matrices: normal with std 1/sqrt(fan_in), except the embedding: cfg['embed_std'] when
    set, else std 1 when the head is untied, std 1/sqrt(d) when tied (so that tied logits
    stay O(1)).
    1-D parameters (norm gains, c1): uniform in [0.5, 1.5].
    """
    params = {}
    for name, shape in param_shapes(cfg).items():
        g = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
        if len(shape) == 1:
            t = 0.5 + torch.rand(shape, generator=g, dtype=torch.float64)
        elif name == "embed.weight" and cfg["embed_std"] is not None:
            t = torch.randn(shape, generator=g, dtype=torch.float64) * cfg["embed_std"]
        elif name == "embed.weight" and not cfg["tie_embeddings"]:
            t = torch.randn(shape, generator=g, dtype=torch.float64)
        else:
            t = torch.randn(shape, generator=g, dtype=torch.float64) / math.sqrt(shape[1])
        params[name] = t.to(torch.float32).to(dtype)
    return params


# ---------------------------------------------------------------------------
# Whole model
# ---------------------------------------------------------------------------

def model_forward(P, cfg, tokens, return_trace=False):
    """tokens: (B, T+1) int64. Returns (logits (B, T, V), loss scalar[, trace])."""
    expected = set(param_shapes(cfg))
    if set(P) != expected:
        raise KeyError(f"parameter mismatch: missing {sorted(expected - set(P))}, "
                       f"extra {sorted(set(P) - expected)}")
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    E = P["embed.weight"][inputs]                              # (B, T, d)
    Z, trace = FORWARDS[cfg["scheme"]](P, cfg, E)
    W_head = P["embed.weight"] if cfg["tie_embeddings"] else P["head.weight"]
    logits = Z @ W_head.t()                                    # (B, T, V)
    V = logits.shape[-1]
    loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
    if cfg["z_loss"] > 0:
        lse = torch.logsumexp(logits, dim=-1)
        loss = loss + cfg["z_loss"] * lse.pow(2).mean()
    if return_trace:
        return logits, loss, trace
    return logits, loss


def logits_loss_grads(P32, cfg, tokens):
    """Float64 forward/backward from float32 weights.

    Returns (logits, loss, grads) in float64; grads is name -> d loss / d param.
    """
    P = {n: t.detach().to(torch.float64).requires_grad_(True) for n, t in P32.items()}
    logits, loss = model_forward(P, cfg, tokens)
    names = list(P)
    grads = torch.autograd.grad(loss, [P[n] for n in names])
    return logits.detach(), loss.detach(), dict(zip(names, grads))

"""The schemes of the PyTorch reference (normlab_ref.py): one forward per normalization scheme,
reading like the paper's update rules as docs/paper.md states them (sections Schemes, Stream
initialisation and final fusion), built from the blocks of blocks_ref.py.

Each forward takes (P, cfg, E), the parameters, the config and the token embeddings (B, T, d),
and returns (Z, trace): the final hidden states before the head and, for the two-stream
schemes, the stream states for checks. FORWARDS maps a scheme's name to its forward;
normlab_ref.py re-exports all of them.

The forwards look `mlp` up in this module when they run, so that moe_ref.py can replace it by
the Mixture-of-Experts branch while it runs.
"""

import math

from blocks_ref import attention, mlp, norm


def qkv_norm_on(cfg):
    return cfg["qkv_norm"]


def depth_scale(cfg, l):
    return math.sqrt(2.0 * (l + 1)) if cfg["siamese_depth_scale"] else 1.0


def deep_norm_alpha(cfg):
    a = cfg["deep_norm_alpha"]
    return a if a is not None else (2.0 * cfg["n_layers"]) ** 0.25


def mix_ln_post_layers(cfg):
    p = cfg["mix_ln_post_layers"]
    return p if p is not None else int(math.floor(0.25 * cfg["n_layers"]))


# ---------------------------------------------------------------------------
# Schemes. Each returns (Z, trace); trace records stream states for checks.
# ---------------------------------------------------------------------------

def forward_pre_norm(P, cfg, X):
    qn = qkv_norm_on(cfg)
    for l in range(cfg["n_layers"]):
        b = f"blocks.{l}"
        X = X + attention(P, f"{b}.attn", norm(P, f"{b}.attn_norm", X, cfg), cfg, qn)
        X = X + mlp(P, f"{b}.mlp", norm(P, f"{b}.mlp_norm", X, cfg), cfg)
    return norm(P, "final_norm", X, cfg), {}


def forward_post_norm(P, cfg, X):
    qn = qkv_norm_on(cfg)
    for l in range(cfg["n_layers"]):
        b = f"blocks.{l}"
        X = norm(P, f"{b}.attn_norm", X + attention(P, f"{b}.attn", X, cfg, qn), cfg)
        X = norm(P, f"{b}.mlp_norm", X + mlp(P, f"{b}.mlp", X, cfg), cfg)
    return X, {}


def forward_deep_norm(P, cfg, X):
    qn = qkv_norm_on(cfg)
    alpha = deep_norm_alpha(cfg)
    for l in range(cfg["n_layers"]):
        b = f"blocks.{l}"
        X = norm(P, f"{b}.attn_norm", alpha * X + attention(P, f"{b}.attn", X, cfg, qn), cfg)
        X = norm(P, f"{b}.mlp_norm", alpha * X + mlp(P, f"{b}.mlp", X, cfg), cfg)
    return X, {}


def forward_hybrid_norm(P, cfg, X):
    for l in range(cfg["n_layers"]):
        b = f"blocks.{l}"
        X = X + attention(P, f"{b}.attn", X, cfg, True)
        Xt = norm(P, f"{b}.mlp_norm", X, cfg)
        X = Xt + mlp(P, f"{b}.mlp", Xt, cfg)
    return norm(P, "final_norm", X, cfg), {}


def forward_hybrid_norm_star(P, cfg, X):
    for l in range(cfg["n_layers"]):
        b = f"blocks.{l}"
        if l == 0:
            # Pre-Norm block, q/k/v norms kept
            X = X + attention(P, f"{b}.attn", norm(P, f"{b}.attn_norm", X, cfg), cfg, True)
            X = X + mlp(P, f"{b}.mlp", norm(P, f"{b}.mlp_norm", X, cfg), cfg)
        else:
            # HybridNorm block
            X = X + attention(P, f"{b}.attn", X, cfg, True)
            Xt = norm(P, f"{b}.mlp_norm", X, cfg)
            X = Xt + mlp(P, f"{b}.mlp", Xt, cfg)
    return norm(P, "final_norm", X, cfg), {}


def forward_peri_norm(P, cfg, X):
    qn = qkv_norm_on(cfg)
    for l in range(cfg["n_layers"]):
        b = f"blocks.{l}"
        A = attention(P, f"{b}.attn", norm(P, f"{b}.attn_norm", X, cfg), cfg, qn)
        X = X + norm(P, f"{b}.attn_out_norm", A, cfg)
        M = mlp(P, f"{b}.mlp", norm(P, f"{b}.mlp_norm", X, cfg), cfg)
        X = X + norm(P, f"{b}.mlp_out_norm", M, cfg)
    return norm(P, "final_norm", X, cfg), {}


def forward_reordered_norm(P, cfg, X):
    """OLMo 2's reordered norm (arXiv 2501.00656): X = X + N_out(F(X)), the branch reads X as is."""
    qn = qkv_norm_on(cfg)
    for l in range(cfg["n_layers"]):
        b = f"blocks.{l}"
        X = X + norm(P, f"{b}.attn_out_norm", attention(P, f"{b}.attn", X, cfg, qn), cfg)
        X = X + norm(P, f"{b}.mlp_out_norm", mlp(P, f"{b}.mlp", X, cfg), cfg)
    return norm(P, "final_norm", X, cfg), {}


def forward_mix_ln(P, cfg, X):
    qn = qkv_norm_on(cfg)
    n_post = mix_ln_post_layers(cfg)
    for l in range(cfg["n_layers"]):
        b = f"blocks.{l}"
        if l < n_post:
            # Post-Norm block
            X = norm(P, f"{b}.attn_norm", X + attention(P, f"{b}.attn", X, cfg, qn), cfg)
            X = norm(P, f"{b}.mlp_norm", X + mlp(P, f"{b}.mlp", X, cfg), cfg)
        else:
            # Pre-Norm block
            X = X + attention(P, f"{b}.attn", norm(P, f"{b}.attn_norm", X, cfg), cfg, qn)
            X = X + mlp(P, f"{b}.mlp", norm(P, f"{b}.mlp_norm", X, cfg), cfg)
    return norm(P, "final_norm", X, cfg), {}


def forward_resi_dual(P, cfg, E):
    qn = qkv_norm_on(cfg)
    X, Y = E, E
    trace = {"X0": X, "Y0": Y}
    for l in range(cfg["n_layers"]):
        b = f"blocks.{l}"
        O = attention(P, f"{b}.attn", X, cfg, qn)
        X = norm(P, f"{b}.attn_norm", X + O, cfg)
        Y = Y + O
        O = mlp(P, f"{b}.mlp", X, cfg)
        X = norm(P, f"{b}.mlp_norm", X + O, cfg)
        Y = Y + O
    trace.update(XL=X, YL=Y)
    return X + norm(P, "final_norm_y", Y, cfg), trace


def _siamese_output(P, cfg, X, Y):
    if cfg["siamese_output_fusion"] == "code":
        return norm(P, "final_norm", norm(P, "final_norm_x", X, cfg) + norm(P, "final_norm_y", Y, cfg), cfg)
    if cfg["siamese_output_fusion"] == "paper":
        return norm(P, "final_norm_x", X, cfg) + norm(P, "final_norm_y", Y, cfg)
    raise ValueError(cfg["siamese_output_fusion"])


def forward_siamese(P, cfg, E):
    """SiameseNorm, post-pre variant."""
    qn = qkv_norm_on(cfg)
    X, Y = E, E
    trace = {"X0": X, "Y0": Y}
    for l in range(cfg["n_layers"]):
        b = f"blocks.{l}"
        c = depth_scale(cfg, l)
        # attention sub-layer
        X = norm(P, f"{b}.attn_post_norm", X, cfg)
        H = X + norm(P, f"{b}.attn_y_norm", Y, cfg)
        if cfg["siamese_input_norm"]:
            H = norm(P, f"{b}.attn_in_norm", H, cfg)
        O = attention(P, f"{b}.attn", H, cfg, qn)
        X = X + O / c
        Y = Y + O
        # MLP sub-layer
        X = norm(P, f"{b}.mlp_post_norm", X, cfg)
        H = X + norm(P, f"{b}.mlp_y_norm", Y, cfg)
        if cfg["siamese_input_norm"]:
            H = norm(P, f"{b}.mlp_in_norm", H, cfg)
        O = mlp(P, f"{b}.mlp", H, cfg)
        X = X + O / c
        Y = Y + O
    trace.update(XL=X, YL=Y)
    return _siamese_output(P, cfg, X, Y), trace


def forward_siamese_hybrid(P, cfg, E):
    """SiameseNorm, hybrid-pre variant (X is a HybridNorm stream)."""
    X, Y = E, E
    trace = {"X0": X, "Y0": Y}
    for l in range(cfg["n_layers"]):
        b = f"blocks.{l}"
        c = depth_scale(cfg, l)
        # attention sub-layer
        H = P[f"{b}.c1"] * X + norm(P, f"{b}.attn_y_norm", Y, cfg)
        A = attention(P, f"{b}.attn", H, cfg, True)
        X = X + A / c
        Y = Y + A
        # MLP sub-layer
        Xt = norm(P, f"{b}.mlp_norm", X, cfg)
        H = Xt + norm(P, f"{b}.mlp_y_norm", Y, cfg)
        if cfg["siamese_input_norm"]:
            H = norm(P, f"{b}.mlp_in_norm", H, cfg)
        G = mlp(P, f"{b}.mlp", H, cfg)
        Y = Y + G
        X = Xt + G / c
    trace.update(XL=X, YL=Y)
    return _siamese_output(P, cfg, X, Y), trace


FORWARDS = {
    "pre_norm": forward_pre_norm,
    "post_norm": forward_post_norm,
    "deep_norm": forward_deep_norm,
    "hybrid_norm": forward_hybrid_norm,
    "hybrid_norm_star": forward_hybrid_norm_star,
    "peri_norm": forward_peri_norm,
    "mix_ln": forward_mix_ln,
    "resi_dual": forward_resi_dual,
    "siamese": forward_siamese,
    "siamese_hybrid": forward_siamese_hybrid,
    "reordered_norm": forward_reordered_norm,
}

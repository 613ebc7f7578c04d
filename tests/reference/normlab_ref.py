"""Independent PyTorch reference of the normlab decoder-only model family.

Plain, functional PyTorch. Parameters live in a flat dict ``name -> tensor`` whose
names are exactly the ones the C++ implementation loads. Every normalization scheme has
its own forward function that reads like the paper's update rules as docs/paper.md states
them (sections Schemes, Stream initialisation and final fusion, and Conventions).

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


def make_config(scheme, **overrides):
    cfg = dict(DEFAULT_CONFIG)
    cfg["scheme"] = scheme
    for key, value in overrides.items():
        if key not in cfg:
            raise KeyError(f"unknown config key {key}")
        cfg[key] = value
    if scheme not in SCHEMES:
        raise ValueError(f"unknown scheme {scheme}")
    return cfg


def head_dim(cfg):
    return cfg["d_model"] // cfg["n_heads"]


# ---------------------------------------------------------------------------
# Normalization
# ---------------------------------------------------------------------------

def _compute_dtype(x):
    # float64 stays float64; anything else is computed in float32.
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def rms_norm(x, w, eps):
    """w * x * rsqrt(mean(x^2, -1) + eps)."""
    xc = x.to(_compute_dtype(x))
    y = xc * torch.rsqrt(xc.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (w.to(xc.dtype) * y).to(x.dtype)


def layer_norm(x, w, eps):
    """w * (x - mean) / sqrt(var_biased + eps); no bias."""
    xc = x.to(_compute_dtype(x))
    mean = xc.mean(dim=-1, keepdim=True)
    var = (xc - mean).pow(2).mean(dim=-1, keepdim=True)
    y = (xc - mean) / torch.sqrt(var + eps)
    return (w.to(xc.dtype) * y).to(x.dtype)


def norm(P, name, x, cfg):
    """Apply the model-width norm whose gain is P[name + '.weight']."""
    w = P[name + ".weight"]
    if cfg["norm_type"] == "rmsnorm":
        return rms_norm(x, w, cfg["norm_eps"])
    if cfg["norm_type"] == "layernorm":
        return layer_norm(x, w, cfg["norm_eps"])
    raise ValueError(cfg["norm_type"])


# ---------------------------------------------------------------------------
# Branches: attention and SwiGLU MLP
# ---------------------------------------------------------------------------

def rope(x, theta):
    """Rotate-half RoPE. x: (B, T, heads, hd); positions 0..T-1."""
    T, hd = x.shape[1], x.shape[3]
    i = torch.arange(hd // 2, dtype=torch.float64)
    inv_freq = theta ** (-2.0 * i / hd)                       # (hd/2,)
    pos = torch.arange(T, dtype=torch.float64)
    angle = pos[:, None] * inv_freq[None, :]                  # (T, hd/2)
    angle = torch.cat([angle, angle], dim=-1)                 # (T, hd), duplicated halves
    cos = angle.cos().to(x.dtype)[None, :, None, :]
    sin = angle.sin().to(x.dtype)[None, :, None, :]
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    rotated = torch.cat([-x2, x1], dim=-1)
    return x * cos + rotated * sin


def causal_attention(q, k, v):
    """q: (B, T, H, hd); k, v: (B, T, KV, hd). Returns (B, T, H, hd)."""
    B, T, H, hd = q.shape
    KV = k.shape[2]
    group = H // KV
    # query head h uses kv head h // group
    k = k.repeat_interleave(group, dim=2)
    v = v.repeat_interleave(group, dim=2)
    q = q.transpose(1, 2)                                     # (B, H, T, hd)
    k = k.transpose(1, 2)
    v = v.transpose(1, 2)
    scores = q @ k.transpose(-2, -1) / math.sqrt(hd)          # (B, H, T, T)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    scores = scores.masked_fill(~mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return (probs @ v).transpose(1, 2)                        # (B, T, H, hd)


def attention(P, prefix, x, cfg, use_qkv_norm):
    """Attention branch of block `prefix` (e.g. 'blocks.0.attn') on input x: (B, T, d)."""
    B, T, d = x.shape
    H, KV, hd = cfg["n_heads"], cfg["n_kv_heads"], head_dim(cfg)
    qkv = x @ P[prefix + ".qkv.weight"].t()
    q = qkv[..., : H * hd].reshape(B, T, H, hd)
    k = qkv[..., H * hd: (H + KV) * hd].reshape(B, T, KV, hd)
    v = qkv[..., (H + KV) * hd:].reshape(B, T, KV, hd)
    if use_qkv_norm:
        # per-head norm of the model's norm type (gain of size hd shared by all heads), before RoPE
        q = norm(P, prefix + ".q_norm", q, cfg)
        k = norm(P, prefix + ".k_norm", k, cfg)
        v = norm(P, prefix + ".v_norm", v, cfg)
    q = rope(q, cfg["rope_theta"])
    k = rope(k, cfg["rope_theta"])
    o = causal_attention(q, k, v).reshape(B, T, H * hd)
    return o @ P[prefix + ".out.weight"].t()


def mlp(P, prefix, x, cfg):
    """SwiGLU: u = x up^T; value = u[:d_ff], gate = u[d_ff:]; down(silu(gate) * value)."""
    d_ff = cfg["d_ff"]
    u = x @ P[prefix + ".up.weight"].t()
    value, gate = u[..., :d_ff], u[..., d_ff:]
    return (F.silu(gate) * value) @ P[prefix + ".down.weight"].t()


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

    if scheme in ("pre_norm", "hybrid_norm", "hybrid_norm_star", "peri_norm", "mix_ln"):
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
}


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

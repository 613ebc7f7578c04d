"""The building blocks of the PyTorch reference (normlab_ref.py): RMSNorm and LayerNorm, RoPE,
causal grouped-query attention and the SwiGLU MLP, on a flat parameter dict ``name -> tensor``.

Written from docs/paper.md (section Conventions), not from the C++. Every scheme's forward
(schemes_ref.py) is made of these; normlab_ref.py re-exports them.
"""

import math

import torch
import torch.nn.functional as F


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
    q, k = qkv[..., : H * hd], qkv[..., H * hd: (H + KV) * hd]
    if cfg.get("qk_norm", "none") == "full":
        # OLMo-2 / OLMoE: one norm over the whole q projection, one over the whole k projection,
        # before the split into heads; v is not normalised
        assert not use_qkv_norm, "qk_norm full excludes the per-head q/k/v norms"
        q = norm(P, prefix + ".q_norm", q, cfg)
        k = norm(P, prefix + ".k_norm", k, cfg)
    q = q.reshape(B, T, H, hd)
    k = k.reshape(B, T, KV, hd)
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

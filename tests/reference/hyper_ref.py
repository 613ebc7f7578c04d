"""Hyper-Connections in the independent PyTorch reference.

Written from the Hyper-Connections paper (Zhu et al., "Hyper-Connections", arXiv 2409.19606:
section 2, Eqs. 1-14, and the packed form of its Algorithm 2), not from the C++ sources. The
Pre-Norm block, its norms, attention and MLP come from normlab_ref; only the residual
connections differ.

The hyper hidden matrix of a token is H in R^{n x d} (n streams). Each sub-layer k (attention
k = 2l, MLP k = 2l + 1) is one HC layer with the matrix

    HC = [[0,   B  ],       B   in R^{1 x n}   (the depth connection, beta)
          [A_m, A_r]]       A_m in R^{n x 1}, A_r in R^{n x n}  (the width connection)

    h_in = A_m^T H                 (the branch input, a d-vector)
    o    = F_k(Norm_k(h_in))       (the Pre-Norm branch, its norm inside)
    H'   = B^T o^T + A_r^T H       (row j: beta_j o + sum_i A_r[i, j] H_i)

Static (SHC): A_m, A_r, B are learned per layer ("static_alpha" = [A_m | A_r], "static_beta"
= B). Dynamic (DHC, Eqs. 5-8), with Hb = LN(H) normalised over d per stream, no gain or bias:

    alpha(H) = s_alpha * tanh(Hb W_alpha) + static_alpha     W_alpha in R^{d x (n+1)}
    beta(H)  = s_beta  * tanh(Hb W_beta)  + static_beta      W_beta  in R^{d}

(tanh optional). The embedding is copied into the n streams; after the last layer the streams
are summed, then the final norm and the head. The LayerNorm's eps is the model's norm_eps.

mHC (hyper_variant "mhc"; Xie et al., "mHC: Manifold-Constrained Hyper-Connections", arXiv
2512.24880, Eqs. 3 and 7-8): x_{l+1} = H_res x_l + H_post^T F(H_pre x_l), with x_l the n x d
state, and the coefficients from x~ = RMSNorm(vec(x_l)) (1 x nd, no gain, eps norm_eps):

    H~_pre  = a_pre  (x~ phi_pre)  + b_pre         H_pre  = sigmoid(H~_pre)           (1 x n)
    H~_post = a_post (x~ phi_post) + b_post        H_post = 2 sigmoid(H~_post)        (1 x n)
    H~_res  = a_res mat(x~ phi_res) + b_res        H_res  = Sinkhorn-Knopp(exp(H~_res)) (n x n)

phi = [phi_pre | phi_post | phi_res] (nd x (n^2 + 2n)), one projection; Sinkhorn-Knopp
alternates row and column normalisation, 20 iterations (row first).

Config keys added to normlab_ref's: hyper_variant ("hc" or "mhc"), hyper_n, hyper_dynamic,
hyper_tanh (the last two for hc only).
"""

import math
import zlib

import torch
import torch.nn.functional as F

import normlab_ref as ref

HYPER_KEYS = {"hyper_variant": "hc", "hyper_n": 2, "hyper_dynamic": True, "hyper_tanh": True}
SINKHORN_ITERATIONS = 20


def make_config(scheme="hyper", **overrides):
    if scheme != "hyper":
        raise ValueError(f"hyper_ref models the hyper scheme only, not {scheme}")
    cfg = dict(ref.DEFAULT_CONFIG)
    cfg.update(HYPER_KEYS)
    cfg["scheme"] = "hyper"
    for key, value in overrides.items():
        if key not in cfg:
            raise KeyError(f"unknown config key {key}")
        cfg[key] = value
    if cfg["hyper_variant"] not in ("hc", "mhc"):
        raise ValueError(f"hyper_variant {cfg['hyper_variant']}")
    if cfg["hyper_n"] not in (1, 2, 4, 8):
        raise ValueError(f"hyper_n {cfg['hyper_n']}")
    return cfg


def _pre_norm_cfg(cfg):
    return dict(cfg, scheme="pre_norm")


def _hc_layers(cfg):
    """(prefix, sub-layer index k) of every HC layer, in order."""
    return [(f"blocks.{l}.{s}_hc", 2 * l + i)
            for l in range(cfg["n_layers"]) for i, s in enumerate(("attn", "mlp"))]


def param_shapes(cfg):
    """The Pre-Norm model's parameters plus each HC layer's."""
    n, d = cfg["hyper_n"], cfg["d_model"]
    shapes = ref.param_shapes(_pre_norm_cfg(cfg))
    for prefix, _ in _hc_layers(cfg):
        if cfg["hyper_variant"] == "mhc":
            shapes[f"{prefix}.phi"] = (n * d, n * n + 2 * n)
            shapes[f"{prefix}.b_pre"] = (n,)
            shapes[f"{prefix}.b_post"] = (n,)
            shapes[f"{prefix}.b_res"] = (n, n)
            for a in ("a_pre", "a_post", "a_res"):
                shapes[f"{prefix}.{a}"] = (1,)
            continue
        shapes[f"{prefix}.static_alpha"] = (n, n + 1)
        shapes[f"{prefix}.static_beta"] = (n,)
        if cfg["hyper_dynamic"]:
            shapes[f"{prefix}.w_alpha"] = (d, n + 1)
            shapes[f"{prefix}.w_beta"] = (d,)
            shapes[f"{prefix}.s_alpha"] = (1,)
            shapes[f"{prefix}.s_beta"] = (1,)
    return shapes


def paper_init(cfg):
    """The paper's initialisation of the HC parameters (Eq. 14; App. J): beta = 1, A_m the
    one-hot e_(k mod n), A_r = I, W = 0, s = 0.01. Float64."""
    n, d = cfg["hyper_n"], cfg["d_model"]
    out = {}
    for prefix, k in _hc_layers(cfg):
        alpha = torch.zeros(n, n + 1, dtype=torch.float64)
        alpha[k % n, 0] = 1.0
        alpha[:, 1:] = torch.eye(n, dtype=torch.float64)
        out[f"{prefix}.static_alpha"] = alpha
        out[f"{prefix}.static_beta"] = torch.ones(n, dtype=torch.float64)
        if cfg["hyper_dynamic"]:
            out[f"{prefix}.w_alpha"] = torch.zeros(d, n + 1, dtype=torch.float64)
            out[f"{prefix}.w_beta"] = torch.zeros(d, dtype=torch.float64)
            out[f"{prefix}.s_alpha"] = torch.full((1,), 0.01, dtype=torch.float64)
            out[f"{prefix}.s_beta"] = torch.full((1,), 0.01, dtype=torch.float64)
    return out


def init_params(cfg, seed, dtype=torch.float32):
    """Random weights for the goldens, rounded to float32 then cast to `dtype`.

    The Pre-Norm weights are normlab_ref's for the same seed. The HC parameters are the paper's
    init moved away from it, so that every term of the equations matters: static alpha and
    beta plus uniform noise in [-0.2, 0.2], W normal with std 1/sqrt(d) (tanh stays in its
    curved range for LN-normalised inputs), s uniform in [0.5, 1.5]. mHC: phi normal with std
    1/sqrt(nd), the biases b uniform in [-0.5, 0.5], the scales a uniform in [0.5, 1.5].
    """
    params = ref.init_params(_pre_norm_cfg(cfg), seed, dtype=torch.float64)
    init = paper_init(cfg)
    d = cfg["d_model"]
    for name, shape in param_shapes(cfg).items():
        if name in params:
            continue
        g = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
        if name.endswith("phi"):
            t = torch.randn(shape, generator=g, dtype=torch.float64) / math.sqrt(shape[0])
        elif name.endswith(("b_pre", "b_post", "b_res")):
            t = torch.rand(shape, generator=g, dtype=torch.float64) - 0.5
        elif name.endswith(("static_alpha", "static_beta")):
            t = init[name] + 0.4 * (torch.rand(shape, generator=g, dtype=torch.float64) - 0.5)
        elif name.endswith(("w_alpha", "w_beta")):
            t = torch.randn(shape, generator=g, dtype=torch.float64) / math.sqrt(d)
        else:
            t = 0.5 + torch.rand(shape, generator=g, dtype=torch.float64)
        params[name] = t
    return {n: params[n].to(torch.float32).to(dtype) for n in param_shapes(cfg)}


def stream_layer_norm(H, eps):
    """Non-affine LayerNorm of each stream of each token over d."""
    mean = H.mean(dim=-1, keepdim=True)
    var = (H - mean).pow(2).mean(dim=-1, keepdim=True)
    return (H - mean) / torch.sqrt(var + eps)


def connections(P, prefix, H, cfg):
    """alpha = [A_m | A_r] and beta of one HC layer for the state H (B, T, n, d)."""
    alpha, beta = P[f"{prefix}.static_alpha"], P[f"{prefix}.static_beta"]
    if not cfg["hyper_dynamic"]:
        return alpha, beta                                      # (n, n+1), (n)
    Hb = stream_layer_norm(H, cfg["norm_eps"])
    a = Hb @ P[f"{prefix}.w_alpha"]                             # (B, T, n, n+1)
    b = Hb @ P[f"{prefix}.w_beta"]                              # (B, T, n)
    if cfg["hyper_tanh"]:
        a, b = torch.tanh(a), torch.tanh(b)
    return P[f"{prefix}.s_alpha"] * a + alpha, P[f"{prefix}.s_beta"] * b + beta


def sinkhorn_knopp(M, iterations=SINKHORN_ITERATIONS):
    """Alternate row and column normalisation of the positive matrices M (..., n, n)."""
    for _ in range(iterations):
        M = M / M.sum(dim=-1, keepdim=True)
        M = M / M.sum(dim=-2, keepdim=True)
    return M


def mhc_layer(P, prefix, x, cfg, branch):
    """One mHC layer: x_{l+1} = H_res x_l + H_post^T F(H_pre x_l), x (B, T, n, d)."""
    n = cfg["hyper_n"]
    v = x.reshape(*x.shape[:-2], -1)                                # vec(x): (B, T, n d)
    xt = v / torch.sqrt(v.pow(2).mean(dim=-1, keepdim=True) + cfg["norm_eps"])
    proj = xt @ P[f"{prefix}.phi"]
    H_pre = torch.sigmoid(P[f"{prefix}.a_pre"] * proj[..., :n] + P[f"{prefix}.b_pre"])
    H_post = 2 * torch.sigmoid(P[f"{prefix}.a_post"] * proj[..., n:2 * n] + P[f"{prefix}.b_post"])
    res = P[f"{prefix}.a_res"] * proj[..., 2 * n:].reshape(*proj.shape[:-1], n, n) + P[f"{prefix}.b_res"]
    H_res = sinkhorn_knopp(torch.exp(res))
    o = branch(torch.einsum("...i,...id->...d", H_pre, x))          # F(H_pre x)
    return torch.einsum("...ji,...id->...jd", H_res, x) + torch.einsum("...j,...d->...jd", H_post, o)


def hc_layer(P, prefix, H, cfg, branch):
    """One HC layer around `branch` (the Pre-Norm branch with its norm)."""
    if cfg["hyper_variant"] == "mhc":
        return mhc_layer(P, prefix, H, cfg, branch)
    alpha, beta = connections(P, prefix, H, cfg)
    A_m, A_r = alpha[..., :, 0], alpha[..., :, 1:]
    h_in = torch.einsum("...i,...id->...d", A_m, H)             # A_m^T H
    o = branch(h_in)
    carried = torch.einsum("...ij,...id->...jd", A_r, H)        # A_r^T H
    return torch.einsum("...j,...d->...jd", beta, o) + carried  # B^T o^T + A_r^T H


def forward_hyper(P, cfg, E):
    qn = ref.qkv_norm_on(cfg)
    n = cfg["hyper_n"]
    H = torch.stack([E] * n, dim=-2)                            # n copies: (B, T, n, d)
    trace = {"H0": H}
    for l in range(cfg["n_layers"]):
        b = f"blocks.{l}"
        H = hc_layer(P, f"{b}.attn_hc", H, cfg,
                     lambda h: ref.attention(P, f"{b}.attn", ref.norm(P, f"{b}.attn_norm", h, cfg), cfg, qn))
        H = hc_layer(P, f"{b}.mlp_hc", H, cfg,
                     lambda h: ref.mlp(P, f"{b}.mlp", ref.norm(P, f"{b}.mlp_norm", h, cfg), cfg))
    trace["HL"] = H
    return ref.norm(P, "final_norm", H.sum(dim=-2), cfg), trace


def model_forward(P, cfg, tokens, return_trace=False):
    """tokens: (B, T+1) int64. Returns (logits (B, T, V), loss scalar[, trace])."""
    expected = set(param_shapes(cfg))
    if set(P) != expected:
        raise KeyError(f"parameter mismatch: missing {sorted(expected - set(P))}, "
                       f"extra {sorted(set(P) - expected)}")
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    Z, trace = forward_hyper(P, cfg, P["embed.weight"][inputs])
    W_head = P["embed.weight"] if cfg["tie_embeddings"] else P["head.weight"]
    logits = Z @ W_head.t()
    V = logits.shape[-1]
    loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
    if cfg["z_loss"] > 0:
        loss = loss + cfg["z_loss"] * torch.logsumexp(logits, dim=-1).pow(2).mean()
    return (logits, loss, trace) if return_trace else (logits, loss)


def below_rounding(cfg, grads):
    """mHC gradients that are zero but for float64 rounding, by name: at most 1e-14 of the
    largest gradient. They arise where H_res cannot change what the head reads: at the last
    sub-layer the columns of H_res sum to 1 (Sinkhorn-Knopp ends on a column normalisation), so
    sum_j (H_res x)_j = sum_i x_i, the streams' sum the head reads (exactly 0); at the first
    sub-layer the n input streams are equal, so (H_res x)_j = (row sum j) x, and where the 20
    iterations have converged the row sums are 1 to float64 precision. No relative bound can
    compare such noise (1e-17 of the largest gradient); they are stored as exact zeros, and the
    C++ test requires its own to be as small."""
    if cfg["hyper_variant"] != "mhc":
        return []
    largest = max(g.abs().max().item() for g in grads.values())
    return [n for n, g in grads.items() if g.abs().max().item() <= 1e-14 * largest]


def logits_loss_grads(P32, cfg, tokens):
    """Float64 forward/backward from float32 weights: (logits, loss, name -> gradient)."""
    P = {n: t.detach().to(torch.float64).requires_grad_(True) for n, t in P32.items()}
    logits, loss = model_forward(P, cfg, tokens)
    names = list(P)
    grads = dict(zip(names, torch.autograd.grad(loss, [P[n] for n in names])))
    for n in below_rounding(cfg, grads):
        grads[n] = torch.zeros_like(grads[n])
    return logits.detach(), loss.detach(), grads

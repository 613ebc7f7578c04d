"""SiameseNorm x Hyper-Connections in the independent PyTorch reference.

Written from the update rules of docs/schemes.md ("SiameseNorm x Hyper-Connections"), which
compose two papers' equations: SiameseNorm (arXiv 2602.08064, Algorithm 1; the two streams and
their end fusion, normlab_ref.forward_siamese / forward_siamese_hybrid) and Hyper-Connections
(Zhu et al., arXiv 2409.19606, Algorithm 2; the HC layer, hyper_ref.hc_layer). Not translated
from the C++ sources.

The Pre-Norm-like stream Y of SiameseNorm becomes n hyper-streams, Y of shape (B, T, n, d);
the Post-Norm-like stream X, the shared attention and MLP and every norm stay as they are.
Each sub-layer s (attention k = 2l, MLP k = 2l + 1) is one HC layer on Y whose branch is
SiameseNorm's shared branch with Y's input replaced by the HC branch input:

    h    = A_m^T Y                      the HC layer's branch input (mHC: H_pre Y)
    O    = F_s(fuse_s(X, N_y[s](h)))    siamese:        fuse = N_in(N_post(X) + N_y(h))
                                        siamese_hybrid: attention c1 X + N_y(h) (no N_in),
                                                        MLP N_in(N_mlp(X) + N_y(h))
    X    = as in SiameseNorm, with this O
    Y    = B^T O^T + A_r^T Y            (mHC: H_res Y + H_post^T O)

After the embedding X = E and Y = n copies of E; at the end the n streams of Y are summed and
the sum takes Y's place in SiameseNorm's fusion: Z = N(N_x(X) + N_y(sum_i Y_i)) (code form) or
N_x(X) + N_y(sum_i Y_i) (paper form).

Config: normlab_ref's keys for the scheme ("siamese" or "siamese_hybrid") plus hyper_ref's
hyper_variant, hyper_n, hyper_dynamic, hyper_tanh (the C++ reads them as model.siamese.hyper).
Parameters: the SiameseNorm model's plus, per HC layer blocks.<l>.attn_hc / blocks.<l>.mlp_hc,
hyper_ref's (static_alpha, static_beta, w_alpha, w_beta, s_alpha, s_beta; or mHC's).
"""

import torch
import torch.nn.functional as F

import hyper_ref
import normlab_ref as ref

SCHEMES = ("siamese", "siamese_hybrid")


def make_config(scheme, **overrides):
    if scheme not in SCHEMES:
        raise ValueError(f"siamese_hyper_ref models siamese and siamese_hybrid, not {scheme}")
    cfg = dict(ref.DEFAULT_CONFIG)
    cfg.update(hyper_ref.HYPER_KEYS)
    cfg["scheme"] = scheme
    for key, value in overrides.items():
        if key not in cfg:
            raise KeyError(f"unknown config key {key}")
        cfg[key] = value
    if cfg["hyper_variant"] not in ("hc", "mhc") or cfg["hyper_n"] not in (1, 2, 4, 8):
        raise ValueError(f"hyper_variant {cfg['hyper_variant']}, hyper_n {cfg['hyper_n']}")
    return cfg


def _siamese_cfg(cfg):
    return {k: v for k, v in cfg.items() if k not in hyper_ref.HYPER_KEYS}


def _hc_only(named):
    return {k: v for k, v in named.items() if "_hc." in k}


def param_shapes(cfg):
    """The SiameseNorm model's parameters plus hyper_ref's HC layers (two per block)."""
    shapes = ref.param_shapes(_siamese_cfg(cfg))
    shapes.update(_hc_only(hyper_ref.param_shapes(dict(cfg, scheme="hyper"))))
    return shapes


def paper_init(cfg):
    """The HC paper's init of the HC parameters (hyper_ref.paper_init), float64."""
    return hyper_ref.paper_init(cfg)


def init_params(cfg, seed, dtype=torch.float32):
    """normlab_ref's SiameseNorm weights for the seed, and hyper_ref's HC parameters (moved away
    from the paper's init so that every term matters), rounded to float32, cast to `dtype`."""
    params = ref.init_params(_siamese_cfg(cfg), seed, dtype=torch.float64)
    params.update(_hc_only(hyper_ref.init_params(dict(cfg, scheme="hyper"), seed,
                                                 dtype=torch.float64)))
    return {n: params[n].to(torch.float32).to(dtype) for n in param_shapes(cfg)}


def forward_siamese(P, cfg, E):
    """SiameseNorm post-pre with Y as n hyper-streams."""
    qn = ref.qkv_norm_on(cfg)
    X, Y = E, torch.stack([E] * cfg["hyper_n"], dim=-2)
    trace = {"X0": X, "Y0": Y}
    for l in range(cfg["n_layers"]):
        b = f"blocks.{l}"
        c = ref.depth_scale(cfg, l)

        def shared(h, sub, branch):
            nonlocal X
            X = ref.norm(P, f"{b}.{sub}_post_norm", X, cfg)
            H = X + ref.norm(P, f"{b}.{sub}_y_norm", h, cfg)
            if cfg["siamese_input_norm"]:
                H = ref.norm(P, f"{b}.{sub}_in_norm", H, cfg)
            O = branch(H)
            X = X + O / c
            return O

        Y = hyper_ref.hc_layer(P, f"{b}.attn_hc", Y, cfg, lambda h: shared(
            h, "attn", lambda H: ref.attention(P, f"{b}.attn", H, cfg, qn)))
        Y = hyper_ref.hc_layer(P, f"{b}.mlp_hc", Y, cfg, lambda h: shared(
            h, "mlp", lambda H: ref.mlp(P, f"{b}.mlp", H, cfg)))
    trace.update(XL=X, YL=Y)
    return ref._siamese_output(P, cfg, X, Y.sum(dim=-2)), trace


def forward_siamese_hybrid(P, cfg, E):
    """SiameseNorm hybrid-pre with Y as n hyper-streams."""
    X, Y = E, torch.stack([E] * cfg["hyper_n"], dim=-2)
    trace = {"X0": X, "Y0": Y}
    for l in range(cfg["n_layers"]):
        b = f"blocks.{l}"
        c = ref.depth_scale(cfg, l)

        def attention(h):
            nonlocal X
            H = P[f"{b}.c1"] * X + ref.norm(P, f"{b}.attn_y_norm", h, cfg)
            A = ref.attention(P, f"{b}.attn", H, cfg, True)
            X = X + A / c
            return A

        def mlp(h):
            nonlocal X
            Xt = ref.norm(P, f"{b}.mlp_norm", X, cfg)
            H = Xt + ref.norm(P, f"{b}.mlp_y_norm", h, cfg)
            if cfg["siamese_input_norm"]:
                H = ref.norm(P, f"{b}.mlp_in_norm", H, cfg)
            G = ref.mlp(P, f"{b}.mlp", H, cfg)
            X = Xt + G / c
            return G

        Y = hyper_ref.hc_layer(P, f"{b}.attn_hc", Y, cfg, attention)
        Y = hyper_ref.hc_layer(P, f"{b}.mlp_hc", Y, cfg, mlp)
    trace.update(XL=X, YL=Y)
    return ref._siamese_output(P, cfg, X, Y.sum(dim=-2)), trace


FORWARDS = {"siamese": forward_siamese, "siamese_hybrid": forward_siamese_hybrid}


def model_forward(P, cfg, tokens, return_trace=False):
    """tokens: (B, T+1) int64. Returns (logits (B, T, V), loss scalar[, trace])."""
    expected = set(param_shapes(cfg))
    if set(P) != expected:
        raise KeyError(f"parameter mismatch: missing {sorted(expected - set(P))}, "
                       f"extra {sorted(set(P) - expected)}")
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    Z, trace = FORWARDS[cfg["scheme"]](P, cfg, P["embed.weight"][inputs])
    W_head = P["embed.weight"] if cfg["tie_embeddings"] else P["head.weight"]
    logits = Z @ W_head.t()
    V = logits.shape[-1]
    loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
    if cfg["z_loss"] > 0:
        loss = loss + cfg["z_loss"] * torch.logsumexp(logits, dim=-1).pow(2).mean()
    return (logits, loss, trace) if return_trace else (logits, loss)


def logits_loss_grads(P32, cfg, tokens):
    """Float64 forward/backward from float32 weights: (logits, loss, name -> gradient)."""
    P = {n: t.detach().to(torch.float64).requires_grad_(True) for n, t in P32.items()}
    logits, loss = model_forward(P, cfg, tokens)
    names = list(P)
    grads = dict(zip(names, torch.autograd.grad(loss, [P[n] for n in names])))
    for n in hyper_ref.below_rounding(cfg, grads):
        grads[n] = torch.zeros_like(grads[n])
    return logits.detach(), loss.detach(), grads

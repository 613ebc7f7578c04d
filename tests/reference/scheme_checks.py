"""self_check.py's checks of the reference's schemes (schemes_ref.py) and whole model
(normlab_ref.py): structural identities between schemes (a limit in which one equals another,
hand-unrolled blocks), causality, that the schemes differ, the z-loss term, the parameter
overhead and finite-difference gradients.

    run(check, maxdiff, tokens_for)   with self_check.py's reporting helpers
"""

import itertools
import math

import torch
import torch.nn.functional as F

import normlab_ref as ref

DT = torch.float64


def _forward(cfg, P, tok):
    return ref.model_forward(P, cfg, tok, return_trace=True)


def _pre_norm_on_y(P, cfg_p):
    """The parameters of Pre-Norm config cfg_p taken from SiameseNorm weights P: its norms are
    the Y stream's (attn_norm <- attn_y_norm, mlp_norm <- mlp_y_norm, final_norm <- final_norm_y),
    everything else has the same name."""
    Q = {}
    for name in ref.param_shapes(cfg_p):
        src = name
        for a, b in ((".attn_norm.", ".attn_y_norm."), (".mlp_norm.", ".mlp_y_norm."),
                     ("final_norm.", "final_norm_y.")):
            if a in name:
                src = name.replace(a, b)
        Q[name] = P[src]
    return Q


# ---------------------------------------------------------------------------
# Structural identities between schemes
# ---------------------------------------------------------------------------

def siamese_hybrid_zero_x_reduces_to_pre_norm(check, maxdiff, tokens_for):
    for fusion in ("paper",):
        cfg_s = ref.make_config("siamese_hybrid", siamese_input_norm=False, siamese_output_fusion=fusion)
        cfg_p = ref.make_config("pre_norm", qkv_norm=True)
        P = ref.init_params(cfg_s, 7, DT)
        for l in range(cfg_s["n_layers"]):
            P[f"blocks.{l}.c1"] = torch.zeros_like(P[f"blocks.{l}.c1"])
            P[f"blocks.{l}.mlp_norm.weight"] = torch.zeros_like(P[f"blocks.{l}.mlp_norm.weight"])
        P["final_norm_x.weight"] = torch.zeros_like(P["final_norm_x.weight"])
        Q = _pre_norm_on_y(P, cfg_p)
        tok = tokens_for(cfg_s)
        ls, loss_s, _ = _forward(cfg_s, P, tok)
        lp, loss_p, _ = _forward(cfg_p, Q, tok)
        d = maxdiff(ls, lp)
        check(f"siamese_hybrid (input norm off, {fusion} fusion) with zero X-side gains == "
              "pre_norm+qkv_norm on Y", d < 1e-12, f"max logit diff {d:.2e}")


def siamese_zero_x_reduces_to_pre_norm(check, maxdiff, tokens_for):
    for qkv in (False, True):
        cfg_s = ref.make_config("siamese", qkv_norm=qkv, siamese_input_norm=False,
                                siamese_output_fusion="paper")
        cfg_p = ref.make_config("pre_norm", qkv_norm=qkv)
        P = ref.init_params(cfg_s, 8, DT)
        for l in range(cfg_s["n_layers"]):
            for s in ("attn", "mlp"):
                P[f"blocks.{l}.{s}_post_norm.weight"] = torch.zeros(cfg_s["d_model"], dtype=DT)
        P["final_norm_x.weight"] = torch.zeros(cfg_s["d_model"], dtype=DT)
        Q = _pre_norm_on_y(P, cfg_p)
        tok = tokens_for(cfg_s)
        d = maxdiff(_forward(cfg_s, P, tok)[0], _forward(cfg_p, Q, tok)[0])
        check(f"siamese post-pre (input norm off, paper fusion, qkv_norm={qkv}) with zero X-side "
              "gains == pre_norm on Y", d < 1e-12, f"max logit diff {d:.2e}")


def deep_norm_alpha1_is_post_norm(check, maxdiff, tokens_for):
    for qkv in (False, True):
        cfg_d = ref.make_config("deep_norm", deep_norm_alpha=1.0, qkv_norm=qkv)
        cfg_p = ref.make_config("post_norm", qkv_norm=qkv)
        P = ref.init_params(cfg_d, 9, DT)
        tok = tokens_for(cfg_d)
        d = maxdiff(_forward(cfg_d, P, tok)[0], _forward(cfg_p, P, tok)[0])
        check(f"deep_norm alpha=1 == post_norm (qkv_norm={qkv})", d == 0.0, f"max logit diff {d:.2e}")
        cfg_def = ref.make_config("deep_norm", qkv_norm=qkv)
        d = maxdiff(_forward(cfg_def, P, tok)[0], _forward(cfg_p, P, tok)[0])
        check(f"deep_norm default alpha=(2L)^(1/4)={ref.deep_norm_alpha(cfg_def):.4f} differs from post_norm",
              d > 1e-3, f"max logit diff {d:.2e}")


def mix_ln_limits(check, maxdiff, tokens_for):
    cfg_m = ref.make_config("mix_ln", mix_ln_post_layers=0)
    cfg_p = ref.make_config("pre_norm")
    P = ref.init_params(cfg_p, 10, DT)
    tok = tokens_for(cfg_p)
    d = maxdiff(_forward(cfg_m, P, tok)[0], _forward(cfg_p, P, tok)[0])
    check("mix_ln with 0 post layers == pre_norm", d == 0.0, f"max logit diff {d:.2e}")
    check("mix_ln default post layers = floor(0.25 L) = 1 for L=4",
          ref.mix_ln_post_layers(ref.make_config("mix_ln")) == 1)
    # mix_ln with all layers post-norm == post_norm followed by the final norm
    cfg_all = ref.make_config("mix_ln", mix_ln_post_layers=4)
    cfg_post = ref.make_config("post_norm")
    Q = {k: v for k, v in P.items() if k != "final_norm.weight"}
    E = P["embed.weight"][tok[:, :-1]]
    X, _ = ref.forward_post_norm(Q, cfg_post, E)
    Z_expect = ref.norm(P, "final_norm", X, cfg_all)
    Z, _ = ref.forward_mix_ln(P, cfg_all, E)
    d = maxdiff(Z, Z_expect)
    check("mix_ln with all L post layers == post_norm blocks + final norm", d == 0.0, f"max diff {d:.2e}")


def resi_dual_zero_y_is_post_norm(check, maxdiff, tokens_for):
    cfg_r = ref.make_config("resi_dual")
    cfg_p = ref.make_config("post_norm")
    P = ref.init_params(cfg_r, 11, DT)
    P["final_norm_y.weight"] = torch.zeros_like(P["final_norm_y.weight"])
    Q = {k: v for k, v in P.items() if k != "final_norm_y.weight"}
    tok = tokens_for(cfg_r)
    d = maxdiff(_forward(cfg_r, P, tok)[0], _forward(cfg_p, Q, tok)[0])
    check("resi_dual with zero final_norm_y gain == post_norm", d == 0.0, f"max logit diff {d:.2e}")


def hybrid_star_one_layer_is_pre_norm(check, maxdiff, tokens_for):
    cfg_h = ref.make_config("hybrid_norm_star", n_layers=1)
    cfg_p = ref.make_config("pre_norm", n_layers=1, qkv_norm=True)
    P = ref.init_params(cfg_h, 12, DT)
    tok = tokens_for(cfg_h)
    d = maxdiff(_forward(cfg_h, P, tok)[0], _forward(cfg_p, P, tok)[0])
    check("hybrid_norm_star with L=1 == pre_norm with qkv_norm", d == 0.0, f"max logit diff {d:.2e}")
    # blocks >= 1 of hybrid_norm_star are hybrid_norm blocks: with L=2, feed block-0 output
    cfg_h2 = ref.make_config("hybrid_norm_star", n_layers=2)
    P2 = ref.init_params(cfg_h2, 13, DT)
    E = P2["embed.weight"][tok[:, :-1]]
    Z, _ = ref.forward_hybrid_norm_star(P2, cfg_h2, E)
    b = "blocks.0"
    X = E + ref.attention(P2, f"{b}.attn", ref.norm(P2, f"{b}.attn_norm", E, cfg_h2), cfg_h2, True)
    X = X + ref.mlp(P2, f"{b}.mlp", ref.norm(P2, f"{b}.mlp_norm", X, cfg_h2), cfg_h2)
    b = "blocks.1"
    X = X + ref.attention(P2, f"{b}.attn", X, cfg_h2, True)
    Xt = ref.norm(P2, f"{b}.mlp_norm", X, cfg_h2)
    X = Xt + ref.mlp(P2, f"{b}.mlp", Xt, cfg_h2)
    d = maxdiff(Z, ref.norm(P2, "final_norm", X, cfg_h2))
    check("hybrid_norm_star L=2 == Pre-Norm block 0 then HybridNorm block 1 (hand-unrolled)",
          d == 0.0, f"max diff {d:.2e}")


def peri_norm_out_scale_invariance(check, maxdiff, tokens_for):
    # tiny eps so that the output norms are exactly scale invariant up to rounding
    for scheme in ("peri_norm", "reordered_norm"):
        cfg = ref.make_config(scheme, norm_eps=1e-14)
        P = ref.init_params(cfg, 14, DT)
        tok = tokens_for(cfg)
        Q = dict(P)
        for l in range(cfg["n_layers"]):
            Q[f"blocks.{l}.attn.out.weight"] = P[f"blocks.{l}.attn.out.weight"] * 3.0
            Q[f"blocks.{l}.mlp.down.weight"] = P[f"blocks.{l}.mlp.down.weight"] * 0.25
        d = maxdiff(_forward(cfg, P, tok)[0], _forward(cfg, Q, tok)[0])
        check(f"{scheme} output norms make logits invariant to branch output scale (eps=1e-14)",
              d < 1e-9, f"max logit diff {d:.2e}")


def siamese_streams_start_equal(check, maxdiff, tokens_for):
    for scheme in ("siamese", "siamese_hybrid", "resi_dual"):
        cfg = ref.make_config(scheme)
        P = ref.init_params(cfg, 15, DT)
        tok = tokens_for(cfg)
        _, _, tr = _forward(cfg, P, tok)
        E = P["embed.weight"][tok[:, :-1]]
        ok = torch.equal(tr["X0"], tr["Y0"]) and torch.equal(tr["X0"], E)
        check(f"{scheme}: both streams start equal to the token embedding", ok)
        check(f"{scheme}: streams differ at the end", maxdiff(tr["XL"], tr["YL"]) > 1e-3)


def siamese_hybrid_first_block_by_hand(check, maxdiff, tokens_for):
    """Unroll block 0 of siamese_hybrid from the paper's pseudo-code with separately written ops.

    The pseudo-code is in docs/paper.md, "SiameseNorm (hybrid-pre)".
    """
    cfg = ref.make_config("siamese_hybrid", n_layers=1, siamese_output_fusion="code")
    P = ref.init_params(cfg, 16, DT)
    tok = tokens_for(cfg)
    E = P["embed.weight"][tok[:, :-1]]
    eps = cfg["norm_eps"]

    def n(x, w):
        return F.rms_norm(x, (x.shape[-1],), w, eps)

    B, T, d = E.shape
    H, KV, hd = 4, 2, 8
    c = math.sqrt(2.0)
    Hin = P["blocks.0.c1"] * E + n(E, P["blocks.0.attn_y_norm.weight"])
    W = P["blocks.0.attn.qkv.weight"]
    q = n((Hin @ W[:H * hd].t()).view(B, T, H, hd), P["blocks.0.attn.q_norm.weight"])
    k = n((Hin @ W[H * hd:(H + KV) * hd].t()).view(B, T, KV, hd), P["blocks.0.attn.k_norm.weight"])
    v = n((Hin @ W[(H + KV) * hd:].t()).view(B, T, KV, hd), P["blocks.0.attn.v_norm.weight"])
    pos = torch.arange(T, dtype=DT)[:, None]
    freq = 10000.0 ** (-torch.arange(0, hd, 2, dtype=DT) / hd)
    ang = torch.cat([pos * freq, pos * freq], -1)[None, :, None, :]

    def rot(x):
        return x * ang.cos() + torch.cat([-x[..., hd // 2:], x[..., :hd // 2]], -1) * ang.sin()

    o = F.scaled_dot_product_attention(rot(q).transpose(1, 2), rot(k).transpose(1, 2), v.transpose(1, 2),
                                       is_causal=True, enable_gqa=True).transpose(1, 2).reshape(B, T, d)
    A = o @ P["blocks.0.attn.out.weight"].t()
    X = E + A / c
    Y = E + A
    Xt = n(X, P["blocks.0.mlp_norm.weight"])
    Gin = n(Xt + n(Y, P["blocks.0.mlp_y_norm.weight"]), P["blocks.0.mlp_in_norm.weight"])
    u = Gin @ P["blocks.0.mlp.up.weight"].t()
    G = (F.silu(u[..., 48:]) * u[..., :48]) @ P["blocks.0.mlp.down.weight"].t()
    Y = Y + G
    X = Xt + G / c
    Z = n(n(X, P["final_norm_x.weight"]) + n(Y, P["final_norm_y.weight"]), P["final_norm.weight"])
    logits = Z @ P["head.weight"].t()
    d_ = maxdiff(logits, _forward(cfg, P, tok)[0])
    check("siamese_hybrid L=1 == independent hand-unrolled version (SDPA, F.rms_norm)", d_ < 1e-12,
          f"max logit diff {d_:.2e}")


def causality_all_schemes(check, maxdiff, tokens_for):
    worst = 0.0
    for scheme in ref.SCHEMES:
        cfg = ref.make_config(scheme)
        P = ref.init_params(cfg, 17, DT)
        tok = tokens_for(cfg)
        tok2 = tok.clone()
        tok2[:, -2] = (tok2[:, -2] + 1) % cfg["vocab_size"]   # last input token
        a, b = _forward(cfg, P, tok)[0], _forward(cfg, P, tok2)[0]
        worst = max(worst, maxdiff(a[:, :-1], b[:, :-1]))
        if maxdiff(a[:, -1], b[:, -1]) == 0.0:
            worst = float("inf")
    check("all schemes are causal (changing the last input only changes the last position)",
          worst == 0.0, f"max diff at earlier positions {worst:.2e}")


def schemes_differ_on_shared_weights(check, maxdiff, tokens_for):
    tok = tokens_for(ref.make_config("pre_norm"))
    outs = {}
    for scheme in ref.SCHEMES:
        cfg = ref.make_config(scheme)
        P = ref.init_params(cfg, 18, DT)   # same seed: shared names get identical values
        outs[scheme] = _forward(cfg, P, tok)[0]
    worst = min((maxdiff(outs[a], outs[b]), a, b) for a, b in itertools.combinations(outs, 2))
    check(f"all {len(outs)} schemes give different logits on the same shared weights", worst[0] > 1e-3,
          f"closest pair {worst[1]} / {worst[2]}: {worst[0]:.3e}")


def zloss_term(check, tokens_for):
    cfg0 = ref.make_config("pre_norm")
    cfg1 = ref.make_config("pre_norm", z_loss=1e-3)
    P = ref.init_params(cfg0, 19, DT)
    tok = tokens_for(cfg0)
    lg, l0, _ = _forward(cfg0, P, tok)
    _, l1, _ = _forward(cfg1, P, tok)
    expect = 1e-3 * torch.logsumexp(lg, -1).pow(2).mean()
    d = abs((l1 - l0 - expect).item())
    check("z_loss adds z * mean(logsumexp^2)", d < 1e-14, f"diff {d:.2e}")


def tied_head(check):
    cfg = ref.make_config("pre_norm", tie_embeddings=True)
    check("tied config has no head.weight", "head.weight" not in ref.param_shapes(cfg))


def param_overhead(check):
    d, L = 32, 4
    count = lambda cfg: sum(math.prod(s) for s in ref.param_shapes(cfg).values())  # noqa: E731
    over = count(ref.make_config("siamese")) - count(ref.make_config("pre_norm"))
    check("siamese (post-pre) overhead over pre_norm = 4d per block + 2d", over == 4 * d * L + 2 * d,
          f"{over} vs {4 * d * L + 2 * d}")
    over = count(ref.make_config("siamese_hybrid")) - count(ref.make_config("hybrid_norm"))
    check("siamese_hybrid overhead over hybrid_norm = 4d per block + 2d", over == 4 * d * L + 2 * d,
          f"{over} vs {4 * d * L + 2 * d}")


def finite_difference_grads(check, tokens_for):
    worst = 0.0
    for scheme in ("siamese_hybrid", "siamese", "resi_dual", "deep_norm", "peri_norm", "reordered_norm"):
        cfg = ref.make_config(scheme, z_loss=1e-3)
        P32 = ref.init_params(cfg, 20, torch.float32)
        tok = tokens_for(cfg)
        _, _, grads = ref.logits_loss_grads(P32, cfg, tok)
        P = {k: v.to(DT) for k, v in P32.items()}
        g = torch.Generator().manual_seed(21)
        for name in list(P)[::5]:
            idx = tuple(torch.randint(0, s, (1,), generator=g).item() for s in P[name].shape)
            h = 1e-6
            orig = P[name][idx].item()
            P[name][idx] = orig + h
            lp = ref.model_forward(P, cfg, tok)[1].item()
            P[name][idx] = orig - h
            lm = ref.model_forward(P, cfg, tok)[1].item()
            P[name][idx] = orig
            fd = (lp - lm) / (2 * h)
            an = grads[name][idx].item()
            worst = max(worst, abs(fd - an) / max(1e-4, abs(an)))
    check("autograd gradients match central finite differences", worst < 1e-5, f"worst rel err {worst:.2e}")


def run(check, maxdiff, tokens_for):
    siamese_hybrid_zero_x_reduces_to_pre_norm(check, maxdiff, tokens_for)
    siamese_zero_x_reduces_to_pre_norm(check, maxdiff, tokens_for)
    deep_norm_alpha1_is_post_norm(check, maxdiff, tokens_for)
    mix_ln_limits(check, maxdiff, tokens_for)
    resi_dual_zero_y_is_post_norm(check, maxdiff, tokens_for)
    hybrid_star_one_layer_is_pre_norm(check, maxdiff, tokens_for)
    peri_norm_out_scale_invariance(check, maxdiff, tokens_for)
    siamese_streams_start_equal(check, maxdiff, tokens_for)
    siamese_hybrid_first_block_by_hand(check, maxdiff, tokens_for)
    causality_all_schemes(check, maxdiff, tokens_for)
    schemes_differ_on_shared_weights(check, maxdiff, tokens_for)
    zloss_term(check, tokens_for)
    tied_head(check)
    param_overhead(check)
    finite_difference_grads(check, tokens_for)

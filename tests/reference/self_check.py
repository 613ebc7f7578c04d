#!/usr/bin/env python3
"""Sanity checks of the reference itself (no C++ involved).

    python tests/reference/self_check.py [--golden tests/data/golden]

Exits non-zero when any check fails. When the golden directory exists, it must hold exactly
the cases of make_goldens.py, and every golden is reloaded and recomputed from its stored
weights, tokens and config.
"""

import argparse
import itertools
import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_goldens  # noqa: E402  (first: it sets the thread count before torch starts)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import compare_goldens  # noqa: E402
import hyper_checks  # noqa: E402
import normlab_ref as ref  # noqa: E402
import siamese_hyper_checks  # noqa: E402

DT = torch.float64
FAILURES = []


def check(name, ok, detail=""):
    status = "PASS" if ok else "FAIL"
    print(f"[{status}] {name}" + (f"  ({detail})" if detail else ""))
    if not ok:
        FAILURES.append(name)


def maxdiff(a, b):
    return (a - b).abs().max().item()


def tokens_for(cfg, seed=123):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, cfg["vocab_size"], (cfg["batch_size"], cfg["seq_len"] + 1), generator=g)


def run(cfg, P, tok):
    return ref.model_forward(P, cfg, tok, return_trace=True)


# ---------------------------------------------------------------------------
# Building blocks
# ---------------------------------------------------------------------------

def check_norms():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 5, 32, generator=g, dtype=DT) * 3 + 0.7
    w = 0.5 + torch.rand(32, generator=g, dtype=DT)
    d = maxdiff(ref.rms_norm(x, w, 1e-5), F.rms_norm(x, (32,), w, 1e-5))
    check("rms_norm matches torch.nn.functional.rms_norm", d < 1e-12, f"max diff {d:.2e}")
    d = maxdiff(ref.layer_norm(x, w, 1e-5), F.layer_norm(x, (32,), w, None, 1e-5))
    check("layer_norm matches torch.nn.functional.layer_norm (no bias)", d < 1e-12, f"max diff {d:.2e}")
    x32 = x.float()
    y32 = ref.rms_norm(x32.to(torch.bfloat16), w.float(), 1e-5)
    check("rms_norm keeps the input dtype (bf16 in -> bf16 out)", y32.dtype == torch.bfloat16)


def check_attention():
    g = torch.Generator().manual_seed(2)
    B, T, H, KV, hd = 2, 7, 4, 2, 8
    q = torch.randn(B, T, H, hd, generator=g, dtype=DT)
    k = torch.randn(B, T, KV, hd, generator=g, dtype=DT)
    v = torch.randn(B, T, KV, hd, generator=g, dtype=DT)
    mine = ref.causal_attention(q, k, v)
    sdpa = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                          is_causal=True, enable_gqa=True).transpose(1, 2)
    d = maxdiff(mine, sdpa)
    check("causal GQA attention matches torch SDPA (enable_gqa)", d < 1e-12, f"max diff {d:.2e}")


def check_rope():
    g = torch.Generator().manual_seed(3)
    T, hd = 9, 8
    x = torch.randn(1, T, 2, hd, generator=g, dtype=DT)
    r = ref.rope(x, 10000.0)
    d = maxdiff(r.norm(dim=-1), x.norm(dim=-1))
    check("RoPE preserves per-head norms", d < 1e-12, f"max diff {d:.2e}")
    d = maxdiff(r[:, 0], x[:, 0])
    check("RoPE is the identity at position 0", d < 1e-15, f"max diff {d:.2e}")
    # relative position: <rope(q, m), rope(k, n)> depends on m - n only
    q = torch.randn(hd, generator=g, dtype=DT)
    k = torch.randn(hd, generator=g, dtype=DT)
    seq_q = q.expand(1, T, 1, hd)
    seq_k = k.expand(1, T, 1, hd)
    rq, rk = ref.rope(seq_q, 10000.0)[0, :, 0], ref.rope(seq_k, 10000.0)[0, :, 0]
    dots = rq @ rk.t()
    worst = 0.0
    for delta in range(-(T - 1), T):
        diag = torch.diagonal(dots, offset=delta)
        worst = max(worst, (diag - diag[0]).abs().max().item())
    check("RoPE scores depend only on relative position", worst < 1e-12, f"max diff {worst:.2e}")
    # explicit formula at one position/pair
    pos, i = 5, 1
    ang = pos * 10000.0 ** (-2 * i / hd)
    x1, x2 = x[0, pos, 0, i], x[0, pos, 0, i + hd // 2]
    exp_lo = x1 * math.cos(ang) - x2 * math.sin(ang)
    exp_hi = x2 * math.cos(ang) + x1 * math.sin(ang)
    d = max(abs(r[0, pos, 0, i] - exp_lo).item(), abs(r[0, pos, 0, i + hd // 2] - exp_hi).item())
    check("RoPE rotate-half formula at one coordinate pair", d < 1e-12, f"max diff {d:.2e}")


def check_swiglu():
    cfg = ref.make_config("pre_norm")
    g = torch.Generator().manual_seed(4)
    d, d_ff = cfg["d_model"], cfg["d_ff"]
    P = {"m.up.weight": torch.randn(2 * d_ff, d, generator=g, dtype=DT),
         "m.down.weight": torch.randn(d, d_ff, generator=g, dtype=DT)}
    x = torch.randn(2, 3, d, generator=g, dtype=DT)
    W1, W3 = P["m.up.weight"][:d_ff], P["m.up.weight"][d_ff:]   # value rows, gate rows
    expect = (F.silu(x @ W3.t()) * (x @ W1.t())) @ P["m.down.weight"].t()
    dd = maxdiff(ref.mlp(P, "m", x, cfg), expect)
    check("SwiGLU: first half value, second half gate", dd < 1e-12, f"max diff {dd:.2e}")


# ---------------------------------------------------------------------------
# Structural identities between schemes
# ---------------------------------------------------------------------------

def siamese_hybrid_zero_x_reduces_to_pre_norm():
    for fusion in ("paper",):
        cfg_s = ref.make_config("siamese_hybrid", siamese_input_norm=False, siamese_output_fusion=fusion)
        cfg_p = ref.make_config("pre_norm", qkv_norm=True)
        P = ref.init_params(cfg_s, 7, DT)
        for l in range(cfg_s["n_layers"]):
            P[f"blocks.{l}.c1"] = torch.zeros_like(P[f"blocks.{l}.c1"])
            P[f"blocks.{l}.mlp_norm.weight"] = torch.zeros_like(P[f"blocks.{l}.mlp_norm.weight"])
        P["final_norm_x.weight"] = torch.zeros_like(P["final_norm_x.weight"])
        Q = {}
        for name in ref.param_shapes(cfg_p):
            src = name
            for a, b in ((".attn_norm.", ".attn_y_norm."), (".mlp_norm.", ".mlp_y_norm."),
                         ("final_norm.", "final_norm_y.")):
                if a in name:
                    src = name.replace(a, b)
            Q[name] = P[src]
        tok = tokens_for(cfg_s)
        ls, loss_s, _ = run(cfg_s, P, tok)
        lp, loss_p, _ = run(cfg_p, Q, tok)
        d = maxdiff(ls, lp)
        check(f"siamese_hybrid (input norm off, {fusion} fusion) with zero X-side gains == "
              "pre_norm+qkv_norm on Y", d < 1e-12, f"max logit diff {d:.2e}")


def siamese_zero_x_reduces_to_pre_norm():
    for qkv in (False, True):
        cfg_s = ref.make_config("siamese", qkv_norm=qkv, siamese_input_norm=False,
                                siamese_output_fusion="paper")
        cfg_p = ref.make_config("pre_norm", qkv_norm=qkv)
        P = ref.init_params(cfg_s, 8, DT)
        for l in range(cfg_s["n_layers"]):
            for s in ("attn", "mlp"):
                P[f"blocks.{l}.{s}_post_norm.weight"] = torch.zeros(cfg_s["d_model"], dtype=DT)
        P["final_norm_x.weight"] = torch.zeros(cfg_s["d_model"], dtype=DT)
        Q = {}
        for name in ref.param_shapes(cfg_p):
            src = name
            for a, b in ((".attn_norm.", ".attn_y_norm."), (".mlp_norm.", ".mlp_y_norm."),
                         ("final_norm.", "final_norm_y.")):
                if a in name:
                    src = name.replace(a, b)
            Q[name] = P[src]
        tok = tokens_for(cfg_s)
        d = maxdiff(run(cfg_s, P, tok)[0], run(cfg_p, Q, tok)[0])
        check(f"siamese post-pre (input norm off, paper fusion, qkv_norm={qkv}) with zero X-side "
              "gains == pre_norm on Y", d < 1e-12, f"max logit diff {d:.2e}")


def deep_norm_alpha1_is_post_norm():
    for qkv in (False, True):
        cfg_d = ref.make_config("deep_norm", deep_norm_alpha=1.0, qkv_norm=qkv)
        cfg_p = ref.make_config("post_norm", qkv_norm=qkv)
        P = ref.init_params(cfg_d, 9, DT)
        tok = tokens_for(cfg_d)
        d = maxdiff(run(cfg_d, P, tok)[0], run(cfg_p, P, tok)[0])
        check(f"deep_norm alpha=1 == post_norm (qkv_norm={qkv})", d == 0.0, f"max logit diff {d:.2e}")
        cfg_def = ref.make_config("deep_norm", qkv_norm=qkv)
        d = maxdiff(run(cfg_def, P, tok)[0], run(cfg_p, P, tok)[0])
        check(f"deep_norm default alpha=(2L)^(1/4)={ref.deep_norm_alpha(cfg_def):.4f} differs from post_norm",
              d > 1e-3, f"max logit diff {d:.2e}")


def mix_ln_limits():
    cfg_m = ref.make_config("mix_ln", mix_ln_post_layers=0)
    cfg_p = ref.make_config("pre_norm")
    P = ref.init_params(cfg_p, 10, DT)
    tok = tokens_for(cfg_p)
    d = maxdiff(run(cfg_m, P, tok)[0], run(cfg_p, P, tok)[0])
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


def resi_dual_zero_y_is_post_norm():
    cfg_r = ref.make_config("resi_dual")
    cfg_p = ref.make_config("post_norm")
    P = ref.init_params(cfg_r, 11, DT)
    P["final_norm_y.weight"] = torch.zeros_like(P["final_norm_y.weight"])
    Q = {k: v for k, v in P.items() if k != "final_norm_y.weight"}
    tok = tokens_for(cfg_r)
    d = maxdiff(run(cfg_r, P, tok)[0], run(cfg_p, Q, tok)[0])
    check("resi_dual with zero final_norm_y gain == post_norm", d == 0.0, f"max logit diff {d:.2e}")


def hybrid_star_one_layer_is_pre_norm():
    cfg_h = ref.make_config("hybrid_norm_star", n_layers=1)
    cfg_p = ref.make_config("pre_norm", n_layers=1, qkv_norm=True)
    P = ref.init_params(cfg_h, 12, DT)
    tok = tokens_for(cfg_h)
    d = maxdiff(run(cfg_h, P, tok)[0], run(cfg_p, P, tok)[0])
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


def peri_norm_out_scale_invariance():
    # tiny eps so that the output norms are exactly scale invariant up to rounding
    cfg = ref.make_config("peri_norm", norm_eps=1e-14)
    P = ref.init_params(cfg, 14, DT)
    tok = tokens_for(cfg)
    Q = dict(P)
    for l in range(cfg["n_layers"]):
        Q[f"blocks.{l}.attn.out.weight"] = P[f"blocks.{l}.attn.out.weight"] * 3.0
        Q[f"blocks.{l}.mlp.down.weight"] = P[f"blocks.{l}.mlp.down.weight"] * 0.25
    d = maxdiff(run(cfg, P, tok)[0], run(cfg, Q, tok)[0])
    check("peri_norm output norms make logits invariant to branch output scale (eps=1e-14)", d < 1e-9,
          f"max logit diff {d:.2e}")


def siamese_streams_start_equal():
    for scheme in ("siamese", "siamese_hybrid", "resi_dual"):
        cfg = ref.make_config(scheme)
        P = ref.init_params(cfg, 15, DT)
        tok = tokens_for(cfg)
        _, _, tr = run(cfg, P, tok)
        E = P["embed.weight"][tok[:, :-1]]
        ok = torch.equal(tr["X0"], tr["Y0"]) and torch.equal(tr["X0"], E)
        check(f"{scheme}: both streams start equal to the token embedding", ok)
        check(f"{scheme}: streams differ at the end", maxdiff(tr["XL"], tr["YL"]) > 1e-3)


def siamese_hybrid_first_block_by_hand():
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
    d_ = maxdiff(logits, run(cfg, P, tok)[0])
    check("siamese_hybrid L=1 == independent hand-unrolled version (SDPA, F.rms_norm)", d_ < 1e-12,
          f"max logit diff {d_:.2e}")


def causality_all_schemes():
    worst = 0.0
    for scheme in ref.SCHEMES:
        cfg = ref.make_config(scheme)
        P = ref.init_params(cfg, 17, DT)
        tok = tokens_for(cfg)
        tok2 = tok.clone()
        tok2[:, -2] = (tok2[:, -2] + 1) % cfg["vocab_size"]   # last input token
        a, b = run(cfg, P, tok)[0], run(cfg, P, tok2)[0]
        worst = max(worst, maxdiff(a[:, :-1], b[:, :-1]))
        if maxdiff(a[:, -1], b[:, -1]) == 0.0:
            worst = float("inf")
    check("all schemes are causal (changing the last input only changes the last position)",
          worst == 0.0, f"max diff at earlier positions {worst:.2e}")


def schemes_differ_on_shared_weights():
    tok = tokens_for(ref.make_config("pre_norm"))
    outs = {}
    for scheme in ref.SCHEMES:
        cfg = ref.make_config(scheme)
        P = ref.init_params(cfg, 18, DT)   # same seed: shared names get identical values
        outs[scheme] = run(cfg, P, tok)[0]
    worst = min((maxdiff(outs[a], outs[b]), a, b) for a, b in itertools.combinations(outs, 2))
    check("all 10 schemes give different logits on the same shared weights", worst[0] > 1e-3,
          f"closest pair {worst[1]} / {worst[2]}: {worst[0]:.3e}")


def zloss_term():
    cfg0 = ref.make_config("pre_norm")
    cfg1 = ref.make_config("pre_norm", z_loss=1e-3)
    P = ref.init_params(cfg0, 19, DT)
    tok = tokens_for(cfg0)
    lg, l0, _ = run(cfg0, P, tok)
    _, l1, _ = run(cfg1, P, tok)
    expect = 1e-3 * torch.logsumexp(lg, -1).pow(2).mean()
    d = abs((l1 - l0 - expect).item())
    check("z_loss adds z * mean(logsumexp^2)", d < 1e-14, f"diff {d:.2e}")


def tied_head():
    cfg = ref.make_config("pre_norm", tie_embeddings=True)
    check("tied config has no head.weight", "head.weight" not in ref.param_shapes(cfg))


def param_overhead():
    d, L = 32, 4
    count = lambda cfg: sum(math.prod(s) for s in ref.param_shapes(cfg).values())  # noqa: E731
    over = count(ref.make_config("siamese")) - count(ref.make_config("pre_norm"))
    check("siamese (post-pre) overhead over pre_norm = 4d per block + 2d", over == 4 * d * L + 2 * d,
          f"{over} vs {4 * d * L + 2 * d}")
    over = count(ref.make_config("siamese_hybrid")) - count(ref.make_config("hybrid_norm"))
    check("siamese_hybrid overhead over hybrid_norm = 4d per block + 2d", over == 4 * d * L + 2 * d,
          f"{over} vs {4 * d * L + 2 * d}")


def finite_difference_grads():
    worst = 0.0
    for scheme in ("siamese_hybrid", "siamese", "resi_dual", "deep_norm", "peri_norm"):
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


# ---------------------------------------------------------------------------
# Goldens
# ---------------------------------------------------------------------------

def check_golden_file(case, scheme, overrides, T, cfg):
    """Problems with one golden file (an empty list when it is right)."""
    ref = make_goldens.reference_for(scheme, overrides)  # noqa: F811 (hyper_ref for hyper)
    problems = []
    if cfg != ref.make_config(scheme, **overrides):
        problems.append("config differs from make_goldens.py's case")
        return problems
    shapes = ref.param_shapes(cfg)
    expected = ({f"param.{n}" for n in shapes} | {f"grad.{n}" for n in shapes}
                | {"tokens", "logits", "loss"})
    if set(T) != expected:
        problems.append(f"tensor names: missing {sorted(expected - set(T))}, extra {sorted(set(T) - expected)}")
        return problems
    for n, s in shapes.items():
        if tuple(T[f"param.{n}"].shape) != s or tuple(T[f"grad.{n}"].shape) != s:
            problems.append(f"bad shape for {n}")
        if T[f"param.{n}"].dtype != torch.float32 or T[f"grad.{n}"].dtype != torch.float64:
            problems.append(f"bad dtype for {n} (param float32, grad float64)")
        if T[f"grad.{n}"].abs().max().item() == 0.0 and cfg.get("hyper_variant") != "mhc":
            problems.append(f"zero gradient for {n}")  # (mHC stores its rounding noise as 0)
    B, S = cfg["batch_size"], cfg["seq_len"]
    if T["tokens"].dtype != torch.int64 or tuple(T["tokens"].shape) != (B, S + 1):
        problems.append("tokens shape/dtype")
    if tuple(T["logits"].shape) != (B, S, cfg["vocab_size"]) or tuple(T["loss"].shape) != ():
        problems.append("logits/loss shape")
    if T["logits"].dtype != torch.float64 or T["loss"].dtype != torch.float64:
        problems.append("logits/loss dtype (float64)")
    if problems:
        return problems
    P32 = {n: T[f"param.{n}"] for n in shapes}
    logits, loss, grads = ref.logits_loss_grads(P32, cfg, T["tokens"])
    dl = maxdiff(logits, T["logits"]) / logits.abs().max().item()
    dloss = abs(loss.item() - T["loss"].item()) / abs(loss.item())
    gmax = max(grads[n].abs().max().item() for n in shapes)  # the scale compare_goldens uses
    dg = max(maxdiff(grads[n], T[f"grad.{n}"]) / max(grads[n].abs().max().item(), gmax, 1e-300)
             for n in shapes)
    if max(dl, dloss, dg) > compare_goldens.OUTPUT_RTOL:
        problems.append(f"recompute mismatch logits {dl:.1e} loss {dloss:.1e} grads {dg:.1e}")
    if cfg["norm_eps"] >= 1e-2:
        # eps-sensitive: the embedding's mean square is far below eps, and the logits move by
        # percents when eps becomes the default 1e-5.
        ms = P32["embed.weight"].double().pow(2).mean().item()
        P64 = {n: t.double() for n, t in P32.items()}
        moved = maxdiff(ref.model_forward(P64, dict(cfg, norm_eps=1e-5), T["tokens"])[0],
                        logits) / logits.abs().max().item()
        if ms > 0.1 * cfg["norm_eps"] or moved < 1e-2:
            problems.append(f"not eps-sensitive: mean(embed^2) {ms:.1e}, logits move {moved:.1e} "
                            "when eps is 1e-5")
    return problems


def check_goldens(folder):
    from safetensors import safe_open
    from safetensors.torch import load_file

    files = sorted(f[: -len(".safetensors")] for f in os.listdir(folder) if f.endswith(".safetensors"))
    cases = {name: (scheme, overrides) for name, scheme, overrides in make_goldens.CASES}
    check("golden folder holds exactly make_goldens.py's cases", files == sorted(cases),
          f"{len(files)} files, {len(cases)} cases; missing {sorted(set(cases) - set(files))}, "
          f"extra {sorted(set(files) - set(cases))}")
    all_logits = {}
    for case in files:
        if case not in cases:
            continue
        path = os.path.join(folder, case + ".safetensors")
        with safe_open(path, "pt") as h:
            cfg = json.loads(h.metadata()["config"])
        T = load_file(path)
        problems = check_golden_file(case, *cases[case], T, cfg)
        all_logits[case] = T["logits"]
        check(f"golden {case} reloads and recomputes", not problems, "; ".join(problems))
    pairs = [(a, b) for a, b in itertools.combinations(all_logits, 2)
             if all_logits[a].shape == all_logits[b].shape]
    if pairs:
        worst = min((maxdiff(all_logits[a], all_logits[b]), a, b) for a, b in pairs)
        check("golden logits of one shape all pairwise different", worst[0] > 1e-3,
              f"closest pair {worst[1]} / {worst[2]}: {worst[0]:.3e}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--golden", default=os.path.join(HERE, "..", "data", "golden"))
    args = ap.parse_args()
    torch.manual_seed(0)
    check_norms()
    check_attention()
    check_rope()
    check_swiglu()
    siamese_hybrid_zero_x_reduces_to_pre_norm()
    siamese_zero_x_reduces_to_pre_norm()
    deep_norm_alpha1_is_post_norm()
    mix_ln_limits()
    resi_dual_zero_y_is_post_norm()
    hybrid_star_one_layer_is_pre_norm()
    peri_norm_out_scale_invariance()
    siamese_streams_start_equal()
    siamese_hybrid_first_block_by_hand()
    causality_all_schemes()
    schemes_differ_on_shared_weights()
    zloss_term()
    tied_head()
    param_overhead()
    finite_difference_grads()
    hyper_checks.run(check, maxdiff, tokens_for, args.golden if os.path.isdir(args.golden) else None)
    siamese_hyper_checks.run(check, maxdiff, tokens_for)
    if os.path.isdir(args.golden):
        check_goldens(args.golden)
    else:
        print(f"(no golden folder at {args.golden}; skipped golden checks)")
    if FAILURES:
        print(f"\n{len(FAILURES)} check(s) FAILED")
        sys.exit(1)
    print("\nall checks passed")


if __name__ == "__main__":
    main()

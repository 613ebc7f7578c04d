"""self_check.py's checks of the SiameseNorm x Hyper-Connections reference (siamese_hyper_ref.py).

    run(check, maxdiff, tokens_for)   with self_check.py's reporting helpers
"""

import torch

import hyper_ref
import normlab_ref as ref
import siamese_hyper_ref as shr

DT = torch.float64


def _at_paper_init(cfg, seed):
    """Random SiameseNorm weights with the HC parameters at the HC paper's init (float64)."""
    P = {n: t.to(DT) for n, t in shr.init_params(cfg, seed, dtype=DT).items()}
    P.update(shr.paper_init(cfg))
    return P


def at_init_is_siamese(check, maxdiff, tokens_for):
    """At the HC paper's init every Y stream carries plain SiameseNorm's Y (A_r = I, beta = 1,
    A_m one-hot on equal streams), so the branch inputs and X are SiameseNorm's, and the end reads
    N_y(n Y) = g Y / sqrt(ms(Y) + eps / n^2): SiameseNorm with final_norm_y's eps divided by n^2,
    and for n = 1 SiameseNorm itself, exactly."""
    for scheme in shr.SCHEMES:
        for dynamic in (False, True):
            for n in (1, 2, 4):
                cfg = shr.make_config(scheme, hyper_n=n, hyper_dynamic=dynamic, n_layers=3)
                P = _at_paper_init(cfg, seed=4)
                tok = tokens_for(cfg)
                logits, _, trace = shr.model_forward(P, cfg, tok, return_trace=True)
                plain_cfg = ref.make_config(scheme, n_layers=3)
                plain_P = {k: v for k, v in P.items() if k in ref.param_shapes(plain_cfg)}
                plain, _, pt = ref.model_forward(plain_P, plain_cfg, tok, return_trace=True)
                # the plain model's fusion with final_norm_y's eps / n^2, by hand (code form)
                ny = ref.rms_norm(pt["YL"], plain_P["final_norm_y.weight"], cfg["norm_eps"] / n**2)
                nx = ref.norm(plain_P, "final_norm_x", pt["XL"], plain_cfg)
                Z = ref.norm(plain_P, "final_norm", nx + ny, plain_cfg)
                expected = Z @ plain_P["head.weight"].t()
                err = maxdiff(logits, expected) / expected.abs().max().item()
                streams = all(torch.equal(trace["YL"][..., i, :], pt["YL"]) for i in range(n))
                x_same = torch.equal(trace["XL"], pt["XL"])
                name = f"{scheme} x HC n={n} {'DHC' if dynamic else 'SHC'}"
                check(f"{name} at the HC init is {scheme} with final_norm_y's eps / n^2 "
                      "(every Y stream and X exactly the plain model's)",
                      err < 1e-12 and streams and x_same, f"{err:.1e}")
                if n == 1:
                    e1 = maxdiff(logits, plain) / plain.abs().max().item()
                    check(f"{name} at the HC init is {scheme} itself", e1 == 0.0, f"{e1:.1e}")


def moved_connections_matter(check, maxdiff, tokens_for):
    """Away from the init the connections change the model (the check above can fail): A_r
    moved by 1e-3 on one sub-layer moves the logits far above float64 rounding."""
    cfg = shr.make_config("siamese_hybrid", hyper_n=2, hyper_dynamic=False, n_layers=3)
    P = _at_paper_init(cfg, seed=4)
    tok = tokens_for(cfg)
    base = shr.model_forward(P, cfg, tok)[0]
    P["blocks.1.attn_hc.static_alpha"] = P["blocks.1.attn_hc.static_alpha"].clone()
    P["blocks.1.attn_hc.static_alpha"][:, 1:] += 1e-3
    moved = maxdiff(shr.model_forward(P, cfg, tok)[0], base) / base.abs().max().item()
    check("siamese_hybrid x HC: A_r + 1e-3 on one sub-layer moves the logits", moved > 1e-6,
          f"{moved:.1e}")


def param_overhead(check):
    """Over plain SiameseNorm: hyper's 2L HC layers, n(n+2) each, + d(n+2) + 2 when dynamic."""
    count = lambda shapes: sum(torch.Size(s).numel() for s in shapes.values())  # noqa: E731
    ok = True
    for scheme in shr.SCHEMES:
        for n in (1, 2, 4):
            for dynamic in (False, True):
                cfg = shr.make_config(scheme, hyper_n=n, hyper_dynamic=dynamic)
                d, L = cfg["d_model"], cfg["n_layers"]
                extra = count(shr.param_shapes(cfg)) - count(ref.param_shapes(ref.make_config(scheme)))
                ok &= extra == 2 * L * (n * (n + 2) + (d * (n + 2) + 2 if dynamic else 0))
    check("SiameseNorm x HC parameter overhead is 2L (n(n+2) [+ d(n+2) + 2])", ok)


def gradients_and_causality(check, tokens_for):
    """Finite differences of a few parameters (HC and shared) and causality, DHC n = 2."""
    for scheme in shr.SCHEMES:
        cfg = shr.make_config(scheme, hyper_n=2, d_model=8, n_heads=2, n_kv_heads=1, d_ff=8,
                              n_layers=2, vocab_size=16, seq_len=5)
        P = {k: v.to(DT).requires_grad_(True) for k, v in shr.init_params(cfg, 5, dtype=DT).items()}
        tok = tokens_for(cfg)
        loss = shr.model_forward(P, cfg, tok)[1]
        names = ["blocks.0.attn_hc.w_alpha", "blocks.1.mlp_hc.static_beta",
                 "blocks.0.attn_hc.s_beta", "blocks.1.attn_y_norm.weight", "blocks.0.mlp.up.weight"]
        grads = dict(zip(names, torch.autograd.grad(loss, [P[n] for n in names])))
        worst = 0.0
        with torch.no_grad():
            for name in names:
                idx = (0,) * P[name].dim()
                h, orig = 1e-6, P[name][idx].item()
                P[name][idx] = orig + h
                lp = shr.model_forward(P, cfg, tok)[1].item()
                P[name][idx] = orig - h
                lm = shr.model_forward(P, cfg, tok)[1].item()
                P[name][idx] = orig
                worst = max(worst, abs((lp - lm) / (2 * h) - grads[name][idx].item())
                            / max(1e-4, abs(grads[name][idx].item())))
            a = shr.model_forward(P, cfg, tok)[0]
            t2 = tok.clone()
            t2[:, -2] = (t2[:, -2] + 1) % cfg["vocab_size"]
            b = shr.model_forward(P, cfg, t2)[0]
        causal = torch.equal(a[:, :-1], b[:, :-1]) and not torch.equal(a[:, -1], b[:, -1])
        check(f"{scheme} x DHC: finite-difference gradients and causality",
              worst < 1e-5 and causal, f"worst rel err {worst:.1e}")


def run(check, maxdiff, tokens_for):
    at_init_is_siamese(check, maxdiff, tokens_for)
    moved_connections_matter(check, maxdiff, tokens_for)
    param_overhead(check)
    gradients_and_causality(check, tokens_for)

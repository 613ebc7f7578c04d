"""self_check.py's checks of the reference's building blocks (blocks_ref.py): RMSNorm and
LayerNorm against torch, causal GQA attention against SDPA, RoPE's properties and formula, the
SwiGLU split.

    run(check, maxdiff)   with self_check.py's reporting helpers
"""

import math

import torch
import torch.nn.functional as F

import normlab_ref as ref

DT = torch.float64


def check_norms(check, maxdiff):
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


def check_attention(check, maxdiff):
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


def check_rope(check, maxdiff):
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


def check_swiglu(check, maxdiff):
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


def run(check, maxdiff):
    check_norms(check, maxdiff)
    check_attention(check, maxdiff)
    check_rope(check, maxdiff)
    check_swiglu(check, maxdiff)

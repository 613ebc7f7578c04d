"""Causal attention on the CPU at a model's shape, forward and backward, in the forms open to a
trainer built on ATen, side by side in one process: PyTorch's F.scaled_dot_product_attention
(the flash kernel on the CPU; the math kernel with --math), and the same attention written as
batched products (torch.bmm, softmax, the backward by hand) over blocks of queries, each block
against the keys up to its end: 1 block is the full score matrix, N blocks skip the upper
N(N-1)/2 of the N^2 key blocks. Best of --calls after warm-up; each line gives the ratio to
the flash kernel. Checks that every variant's output matches SDPA's.
Usage: python tools/bench/attention_variants.py [--batch 8] [--heads 8] [--seq 256]
       [--head-dim 64] [--blocks 1,2,4] [--rounds 2] [--calls 8]"""
import argparse
import time

import torch
import torch.nn.functional as F


def blocked_attention(nb, seq, scale):
    tb = seq // nb

    class Blocked(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):
            ps, o = [], torch.empty_like(q)
            upper = torch.ones(tb, tb, dtype=torch.bool).triu_(1)
            for i in range(nb):
                n = (i + 1) * tb
                s = torch.bmm(q[:, i * tb:n], k[:, :n].transpose(1, 2)).mul_(scale)
                s[:, :, i * tb:n].masked_fill_(upper, float("-inf"))
                p = torch.softmax(s, -1)
                torch.bmm(p, v[:, :n], out=o[:, i * tb:n])
                ps.append(p)
            ctx.save_for_backward(q, k, v, o, *ps)
            return o

        @staticmethod
        def backward(ctx, do):
            q, k, v, o, *ps = ctx.saved_tensors
            dq, dk, dv = torch.empty_like(q), torch.zeros_like(k), torch.zeros_like(v)
            delta = (do * o).sum(-1, keepdim=True)
            for i in range(nb):
                n, p, doi = (i + 1) * tb, ps[i], do[:, i * tb:(i + 1) * tb]
                dv[:, :n].baddbmm_(p.transpose(1, 2), doi)
                ds = torch.bmm(doi, v[:, :n].transpose(1, 2)).sub_(delta[:, i * tb:n]).mul_(p)
                torch.bmm(ds, k[:, :n], out=dq[:, i * tb:n])
                dk[:, :n].baddbmm_(ds.transpose(1, 2), q[:, i * tb:n])
            return dq.mul_(scale), dk.mul_(scale), dv

    return Blocked.apply


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--blocks", default="1,2,4")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--calls", type=int, default=8)
    ap.add_argument("--math", action="store_true", help="SDPA's math kernel instead of flash")
    a = ap.parse_args()
    b, h, t, d = a.batch, a.heads, a.seq, a.head_dim
    blocks = [int(x) for x in a.blocks.split(",")]
    for nb in blocks:
        if nb < 1 or t % nb:
            ap.error(f"--blocks: {nb} does not divide --seq {t}")
    scale = d ** -0.5
    q, k, v = [torch.randn(b * h, t, d, requires_grad=True) for _ in range(3)]
    go = torch.randn(b * h, t, d)
    four = lambda x: x.view(b, h, t, d)

    def sdpa():
        if a.math:
            with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
                return F.scaled_dot_product_attention(four(q), four(k), four(v), is_causal=True)
        return F.scaled_dot_product_attention(four(q), four(k), four(v), is_causal=True)

    ref = sdpa().detach().reshape(b * h, t, d)
    sides = [("SDPA " + ("math" if a.math else "flash"), lambda: sdpa().backward(four(go)))]
    for nb in blocks:
        fn = blocked_attention(nb, t, scale)
        err = (fn(q, k, v).detach() - ref).abs().max().item()
        if err > 1e-4:
            raise SystemExit(f"attention_variants: {nb} blocks differ from SDPA by {err:.2e}")
        sides.append((f"bmm, {nb} block{'s' if nb > 1 else ''}", lambda fn=fn: fn(q, k, v).backward(go)))

    def best_ms(f):
        for _ in range(2):
            f()
        best = float("inf")
        for _ in range(a.calls):
            t0 = time.perf_counter()
            f()
            best = min(best, time.perf_counter() - t0)
        return best * 1e3

    flops = 4 * b * h * t * t * d * 3 / 2  # QK^T and PV, forward and backward, causal half
    print(f"causal attention ({b} x {h} heads x {t} x {d}), forward + backward, "
          f"{torch.get_num_threads()} threads, best of {a.calls}; {flops / 1e9:.2f} GFLOP causal")
    for r in range(a.rounds):
        base = None
        for name, f in sides:
            ms = best_ms(f)
            base = base or ms
            print(f"  round {r + 1}: {name:16s} {ms:7.2f} ms  {flops / ms / 1e6:6.1f} GFLOP/s  "
                  f"{base / ms:5.2f}x")


if __name__ == "__main__":
    main()

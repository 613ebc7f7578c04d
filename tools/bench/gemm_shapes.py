"""The rate of each GEMM a dense training step runs through its linear layers, timed alone at the
model's shapes, beside the N^3 matmul rate that tools/bench/bf16_bench.sh divides by. It tells
how close the step's GEMMs can come to that rate when nothing else runs: the part of a step's
gap to the rate that the GEMMs themselves account for (tools/bench/step_profile.sh measures the
rest inside a real step).

For each linear (x: tokens x K, weight: N x K) three products, as autograd runs them:
forward x @ W^T, the input gradient dY @ W and the weight gradient dY^T @ x. Best of REPS after
a warm-up; fp32 (or --dtype bf16) on the CPU, ATen's torch.mm and F.linear, so MKL or oneDNN
as in the step. Run under tools/simulate_cpu.sh to see a lower CPU class.

Usage: gemm_shapes.py [--d-model 512] [--d-ff 1376] [--layers 8] [--vocab 4096] [--heads 8]
                      [--kv-heads HEADS] [--tokens 2048] [--n 2048] [--reps 6] [--dtype fp32]
"""
import argparse
import time

import torch
import torch.nn.functional as F


def best_seconds(fn, reps):
    fn()
    fn()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d-model", type=int, default=512)
    ap.add_argument("--d-ff", type=int, default=1376)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=None)
    ap.add_argument("--tokens", type=int, default=2048, help="tokens a step (micro-batch x seq)")
    ap.add_argument("--n", type=int, default=2048, help="the N^3 reference product")
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    a = ap.parse_args()
    dtype = torch.float32 if a.dtype == "fp32" else torch.bfloat16
    d, hd = a.d_model, a.d_model // a.heads
    kv = a.kv_heads or a.heads
    linears = [  # name, K (in), N (out), how many a step
        ("qkv", d, (a.heads + 2 * kv) * hd, a.layers),
        ("out", a.heads * hd, d, a.layers),
        ("up (SwiGLU, both halves)", d, 2 * a.d_ff, a.layers),
        ("down", a.d_ff, d, a.layers),
        ("head", d, a.vocab, 1),
    ]
    m = a.tokens
    x = torch.randn(a.n, a.n, dtype=dtype)
    y = torch.randn(a.n, a.n, dtype=dtype)
    ref = 2 * a.n ** 3 / best_seconds(lambda: x @ y, a.reps)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {a.dtype}; "
          f"{a.n}^3 matmul: {ref / 1e9:.1f} GFLOP/s")
    print(f"{'linear':26s} {'K':>5s} {'N':>5s}  {'forward':>8s} {'dX':>8s} {'dW':>8s}  GFLOP/s")
    total_s = total_f = 0.0
    for name, k, n, count in linears:
        inp = torch.randn(m, k, dtype=dtype)
        w = torch.randn(n, k, dtype=dtype)
        dy = torch.randn(m, n, dtype=dtype)
        flop = 2.0 * m * k * n
        times = [best_seconds(fn, a.reps) for fn in
                 (lambda: F.linear(inp, w), lambda: dy @ w, lambda: dy.t() @ inp)]
        total_s += count * sum(times)
        total_f += count * 3 * flop
        rates = " ".join(f"{flop / t / 1e9:8.1f}" for t in times)
        print(f"{name:26s} {k:5d} {n:5d}  {rates}")
    rate = total_f / total_s
    print(f"all linears of a step: {total_f / 1e9:.1f} GFLOP in {total_s:.3f} s, "
          f"{rate / 1e9:.1f} GFLOP/s, {100 * rate / ref:.0f} % of the {a.n}^3 rate")


if __name__ == "__main__":
    main()

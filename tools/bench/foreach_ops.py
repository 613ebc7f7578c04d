"""LibTorch's multi-tensor operators normlab's optimizer uses (torch._foreach_norm for gradient
clipping, torch._foreach_mul_ for its scaling) against the per-tensor loops of public operators
that would replace them, on the parameter shapes of a model (default: d_model 512, 8 layers,
SwiGLU 1376, vocabulary 4096, untied head), side by side in one process; best of N calls, and
the ratio. Usage: python tools/bench/foreach_ops.py [--d-model 512] [--layers 8] [--rounds 3]
[--device cpu|cuda]"""
import argparse
import time

import torch


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--d-model", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--d-ff", type=int, default=1376)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    d, f = a.d_model, a.d_ff
    shapes = [(a.vocab, d)] + [(3 * d, d), (d, d), (2 * f, d), (d, f), (d,), (d,)] * a.layers
    shapes += [(d,), (a.vocab, d)]
    ps = [torch.randn(s, device=a.device) for s in shapes]
    sync = torch.cuda.synchronize if a.device.startswith("cuda") else (lambda: None)

    def best_ms(fn):
        for _ in range(3):
            fn()
        sync()
        best = float("inf")
        for _ in range(a.calls):
            t0 = time.perf_counter()
            fn()
            sync()
            best = min(best, time.perf_counter() - t0)
        return best * 1e3

    print(f"{len(ps)} tensors, {sum(p.numel() for p in ps) / 1e6:.1f} M elements, {a.device}, "
          f"{torch.get_num_threads()} threads, best of {a.calls} calls")
    for r in range(a.rounds):
        n_f = best_ms(lambda: torch._foreach_norm(ps, 2.0))
        n_l = best_ms(lambda: [torch.linalg.vector_norm(p) for p in ps])
        m_f = best_ms(lambda: torch._foreach_mul_(ps, 1.0))
        m_l = best_ms(lambda: [p.mul_(1.0) for p in ps])
        print(f"round {r + 1}: norm  _foreach {n_f:.3f} ms, loop {n_l:.3f} ms ({n_l / n_f:.2f}x);  "
              f"mul_  _foreach {m_f:.3f} ms, loop {m_l:.3f} ms ({m_l / m_f:.2f}x)")


if __name__ == "__main__":
    main()

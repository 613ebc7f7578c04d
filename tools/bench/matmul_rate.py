"""The dense matmul rate a device reaches now, the denominator of the "measured" MFU that the
GPU benchmark prints beside the nominal one (over the GPU's peak dense bf16 rate, eval/mfu.h).
Same method as normlab's measure_matmul_flops (src/util/device.cpp): the median of timed
(n x n) @ (n x n) products after a warm-up, synchronised; bf16 on CUDA, fp32 on the CPU.

Usage: matmul_rate.py [--device cuda] [--n 8192] [--reps 10] [--dtype bf16|fp32] [--best]
Prints "matmul_flops=<FLOP/s>" (the median call); with --best also "matmul_flops_best=<FLOP/s>"
(the fastest call, for comparing with a best step). --dtype overrides the device's dtype (the CPU's bf16 rate, where
oneDNN may emulate it: tools/bench/cpu_classes.sh).
"""
import argparse
import time

import torch


def measure(device, n=8192, reps=10, dtype=None, best=False):
    dev = torch.device(device)
    if dtype is None:
        dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    a = torch.randn(n, n, device=dev, dtype=dtype)
    b = torch.randn(n, n, device=dev, dtype=dtype)
    c = torch.empty(n, n, device=dev, dtype=dtype)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    for _ in range(3):
        torch.mm(a, b, out=c)
    sync()
    seconds = []
    for _ in range(max(reps, 1)):
        t0 = time.perf_counter()
        torch.mm(a, b, out=c)
        sync()
        seconds.append(time.perf_counter() - t0)
    seconds.sort()
    median = 2.0 * n ** 3 / seconds[len(seconds) // 2]
    return (median, 2.0 * n ** 3 / seconds[0]) if best else median


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--dtype", choices=["bf16", "fp32"], default=None)
    ap.add_argument("--best", action="store_true", help="also the fastest call's rate")
    a = ap.parse_args()
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32, None: None}[a.dtype]
    if a.best:
        median, fastest = measure(a.device, a.n, a.reps, dtype, best=True)
        print(f"matmul_flops={median:.6g}")
        print(f"matmul_flops_best={fastest:.6g}")
    else:
        print(f"matmul_flops={measure(a.device, a.n, a.reps, dtype):.6g}")


if __name__ == "__main__":
    main()

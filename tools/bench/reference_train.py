"""The PyTorch reference trainer of issue 9's GPU benchmark (tools/bench/gpu_bench.sh): the same
model as tools/bench/torch_train.py (every scheme, PAPER.md's update rules) trained the way a
PyTorch user trains on one GPU: bf16 autocast, F.scaled_dot_product_attention (flash/cuDNN),
F.rms_norm, fused AdamW, gradient clipping, optionally torch.compile of the model.

Usage: reference_train.py --shard SHARD.bin --scheme S --d-model D --n-layers L --n-heads H
           --d-ff F --vocab V --seq T --micro M --steps N [--warmup W] [--device cuda]
           [--compile] [--no-bf16] [--threads K]
Prints one line per timed step ("step <seconds>") and at the end
"result tokens_per_s=<mean over timed steps> peak_bytes=<max allocated> loss=<last>".
"""
import argparse
import time

import numpy as np
import torch

from torch_train import LM


def main():
    ap = argparse.ArgumentParser()
    for k in ("shard", "scheme"):
        ap.add_argument("--" + k, required=True)
    for k in ("d-model", "n-layers", "n-heads", "d-ff", "vocab", "seq", "micro", "steps"):
        ap.add_argument("--" + k, type=int, required=True)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--no-bf16", action="store_true")
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    torch.manual_seed(0)
    tokens = np.memmap(a.shard, dtype=np.uint16, mode="r", offset=64)
    model = LM(a.scheme, a.vocab, a.d_model, a.n_layers, a.n_heads, a.d_ff).to(dev)
    step_fn = torch.compile(model) if a.compile else model
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    fused = dev.type == "cuda"
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=fused)
    bf16 = dev.type == "cuda" and not a.no_bf16
    n_samples = (len(tokens) - 1) // a.seq
    rng = np.random.default_rng(0)
    times, loss = [], float("nan")
    for step in range(a.warmup + a.steps):
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        idx = rng.integers(0, n_samples, a.micro)
        batch = torch.from_numpy(np.stack([tokens[i * a.seq:i * a.seq + a.seq + 1].astype(np.int64) for i in idx]))
        batch = batch.to(dev, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
            out = step_fn(batch[:, :-1], batch[:, 1:])
        out.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss = out.item()  # synchronises, as normlab's loss readout does
        dt = time.perf_counter() - t0
        if step >= a.warmup:
            times.append(dt)
            print(f"step {dt:.6f}", flush=True)
    peak = torch.cuda.max_memory_allocated(dev) if dev.type == "cuda" else 0
    tps = a.micro * a.seq * len(times) / sum(times)
    print(f"result tokens_per_s={tps:.1f} peak_bytes={peak} loss={loss:.4f}")


if __name__ == "__main__":
    main()

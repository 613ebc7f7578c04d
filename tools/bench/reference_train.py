"""The PyTorch reference trainer of the GPU benchmark (tools/bench/gpu_bench.sh): the same model
as tools/bench/torch_train.py (every scheme, the update rules of docs/paper.md) trained the way
a PyTorch user trains on one GPU (or, with --device cpu, on the CPU: tools/bench/bf16_bench.sh):
the model built on the device, bf16 autocast unless --no-bf16,
F.scaled_dot_product_attention (flash/cuDNN), F.rms_norm, fused AdamW, gradient clipping,
optionally torch.compile of the model (Inductor, or the backend --compile-backend names).

Usage: reference_train.py --shard SHARD.bin --scheme S --d-model D --n-layers L --n-heads H
           --d-ff F --vocab V --seq T --micro M --steps N [--warmup W] [--device cuda]
           [--compile [--compile-backend B]] [--no-bf16] [--threads K] [--flops-per-token F]
           [--matmul-flops R] [--peak-flops P]
Prints the SDPA backend LibTorch picks ("sdpa <name>"), one line per timed step
("step <seconds>", synchronised before the clock stops) and at the end
"result tokens_per_s=<timed tokens / timed seconds> peak_bytes=<max allocated> loss=<last>
sdpa=<backend>" plus, with --flops-per-token, "mfu_measured=<over R, or the matmul rate measured
here>" and, with --peak-flops (the GPU's peak dense bf16 rate: `normlab mfu --gpu NAME` looks
it up), "mfu=<over P>". gpu_bench.sh instead hands the step lines to `normlab mfu`.
"""
import argparse
import time

import numpy as np
import torch

from matmul_rate import measure
from torch_train import LM

SDPA_NAMES = {0: "math", 1: "flash", 2: "efficient", 3: "cudnn", 4: "overrideable"}


def sdpa_backend(micro, seq, heads, head_dim, dtype, dev):
    """The kernel F.scaled_dot_product_attention dispatches to for the model's causal shape."""
    q = torch.empty(micro, seq, heads, head_dim, dtype=dtype, device=dev).transpose(1, 2)
    choice = torch._fused_sdp_choice(q, q, q, is_causal=True)
    return SDPA_NAMES.get(int(choice), f"none ({int(choice)})")


def main():
    ap = argparse.ArgumentParser()
    for k in ("shard", "scheme"):
        ap.add_argument("--" + k, required=True)
    for k in ("d-model", "n-layers", "n-heads", "d-ff", "vocab", "seq", "micro", "steps"):
        ap.add_argument("--" + k, type=int, required=True)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--compile-backend", default="inductor")
    ap.add_argument("--no-bf16", action="store_true")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--flops-per-token", type=float, default=0.0)
    ap.add_argument("--matmul-flops", type=float, default=0.0)
    ap.add_argument("--peak-flops", type=float, default=0.0)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    torch.manual_seed(0)
    tokens = np.memmap(a.shard, dtype=np.uint16, mode="r", offset=64)
    with torch.device(dev):  # parameters are created (and initialised) on the device
        model = LM(a.scheme, a.vocab, a.d_model, a.n_layers, a.n_heads, a.d_ff)
    step_fn = torch.compile(model, backend=a.compile_backend) if a.compile else model
    if a.compile:
        print(f"compile backend {a.compile_backend}", flush=True)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=cuda)
    bf16 = not a.no_bf16  # CUDA autocast, or CPU autocast (tools/bench/bf16_bench.sh)
    sdpa = sdpa_backend(a.micro, a.seq, a.n_heads, a.d_model // a.n_heads,
                        torch.bfloat16 if bf16 else torch.float32, dev)
    print(f"sdpa {sdpa}", flush=True)
    n_samples = (len(tokens) - 1) // a.seq
    rng = np.random.default_rng(0)
    times, loss = [], float("nan")
    for step in range(a.warmup + a.steps):
        sync()
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
        loss = out.item()
        sync()  # the optimizer's kernels are done before the clock stops
        dt = time.perf_counter() - t0
        if step >= a.warmup:
            times.append(dt)
            print(f"step {dt:.6f}", flush=True)
    peak = torch.cuda.max_memory_allocated(dev) if cuda else 0
    tps = a.micro * a.seq * len(times) / sum(times)
    line = f"result tokens_per_s={tps:.1f} peak_bytes={peak} loss={loss:.4f} sdpa={sdpa}"
    if a.flops_per_token > 0:
        rate = a.matmul_flops if a.matmul_flops > 0 else measure(dev)
        if a.peak_flops > 0:
            line += f" mfu={tps * a.flops_per_token / a.peak_flops:.4f}"
        line += f" mfu_measured={tps * a.flops_per_token / rate:.4f}"
    print(line)


if __name__ == "__main__":
    main()

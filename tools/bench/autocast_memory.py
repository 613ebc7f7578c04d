#!/usr/bin/env python3
"""What bf16 autocast keeps alive under FSDP-style resharding, measured on CPU.

normlab's FSDP (docs/distributed.md) gathers a block's fp32 weights before it runs and frees
them after its forward (reshard_after_forward). Under bf16 autocast every matmul casts its fp32
weight to bf16; this script measures how long those copies live, with the same ATen autocast
(cast cache) and autograd that LibTorch runs on CUDA, on CPU autocast:

  L blocks, each one Linear(d, d) without bias, run like FSDP: the weight's storage is set
  before the block and replaced by an empty tensor after it. The process's resident memory is
  read after the forward (inside the autocast region, and after leaving it), with glibc told
  to serve every allocation above 64 KiB by mmap, so that a freed tensor leaves the resident
  set at once (MALLOC_MMAP_THRESHOLD_ below; the script re-executes itself with it).

Cases: fp32 (no autocast), bf16 autocast with gradients, bf16 autocast in no-grad (what an
activation-checkpointed block's first forward is). Each prints MiB above the state before the
forward and the same in units of one bf16 copy of all L weights (2 L d^2 bytes).

Usage: python tools/bench/autocast_memory.py [L] [d] [tokens]
"""
import os
import sys

if os.environ.get("MALLOC_MMAP_THRESHOLD_") != "65536":
    os.environ["MALLOC_MMAP_THRESHOLD_"] = "65536"
    os.execv(sys.executable, [sys.executable] + sys.argv)

import torch  # noqa: E402

L = int(sys.argv[1]) if len(sys.argv) > 1 else 8
d = int(sys.argv[2]) if len(sys.argv) > 2 else 2048
tokens = int(sys.argv[3]) if len(sys.argv) > 3 else 64
torch.set_num_threads(1)
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


torch.manual_seed(0)
shards = [torch.randn(d, d) / d**0.5 for _ in range(L)]  # the "shards" (here whole, fp32)
layers = [torch.nn.Linear(d, d, bias=False) for _ in range(L)]
for layer in layers:
    layer.weight.data = torch.empty(0)  # freed, as FSDP leaves a module between steps


def forward(x):
    for layer, shard in zip(layers, shards):
        layer.weight.data = shard.clone()  # the gather
        x = layer(x)
        layer.weight.data = torch.empty(0)  # reshard after forward
    return x


def measure(name, autocast, grad):
    x = torch.randn(tokens, d, requires_grad=grad)
    unit = 2 * L * d * d  # one bf16 copy of every weight
    act = tokens * d * (2 if autocast else 4) * L  # the block outputs (kept when grad)
    before = rss()
    with torch.set_grad_enabled(grad):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            y = forward(x)
            inside = rss() - before
        after = rss() - before
    print(f"{name:34s} end of forward, inside autocast: {inside / 2**20:7.1f} MiB"
          f" = {inside / unit:5.2f} x 2Ld^2;  after leaving it: {after / 2**20:7.1f} MiB"
          f" = {after / unit:5.2f} x 2Ld^2  (block outputs: {act / unit:4.2f} x)")
    del y, x  # (no backward: the freed fp32 weights would need gathering again first)


print(f"torch {torch.__version__}, L={L} blocks of Linear({d}, {d}), {tokens} tokens; "
      f"one bf16 copy of all weights (2Ld^2) = {2 * L * d * d / 2**20:.1f} MiB")
measure("fp32, gradients", False, True)
measure("bf16 autocast, gradients", True, True)
measure("bf16 autocast, no grad (recompute)", True, False)

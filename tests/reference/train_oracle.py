#!/usr/bin/env python3
"""An independent PyTorch computation of normlab's training step, to check the trainer against.

    train_oracle.py make  WORK --scheme S   # data, initial weights, the oracle's 3 steps, config
    train_oracle.py check WORK/S METRICS MODEL1 MODEL2 MODEL3
                                            # a run's metrics.jsonl and the model.safetensors of
                                            # its steps 1, 2, 3 against the oracle

`make` writes, under WORK/<scheme>/:
  data/          one token shard of 4 samples of 16 tokens (+1), in normlab's documented shard
                 format (docs/data.md), so that every step trains on all 4 samples;
  init.safetensors   the initial weights (float64), for `normlab train --init-from`;
  oracle.safetensors the weights after each of the 3 steps ("step1.<name>", ...) and each
                 step's mean training loss ("loss.1", ...), computed here in float64;
  config.yaml    the matching `normlab train` configuration.

The step is written from the documented rules (docs/training.md), with PyTorch's own pieces
wherever PyTorch has them: global batch 4 in micro-batches of 2, each micro-batch's loss
weighted 1/2 (cross-entropy plus z-loss), torch.nn.utils.clip_grad_norm_ (the clip is set so
that it is active at every step, and this script fails if it is not), torch.optim.AdamW with
two parameter groups (weight decay on matrices other than the embeddings, none on vectors),
and the learning rate of linear warm-up over 2 steps then cosine decay to 10 % at the last step.
The model's forward is tests/reference/normlab_ref.py.

`check` compares every parameter of the three model files (whole checkpoints: a single
process's, or `normlab checkpoint consolidate` of a sharded one) with the oracle, per element: |ours - oracle| <= TOL * |oracle| + 1e-12 * max|oracle| with TOL 1e-10 (both sides in
float64), and the losses logged in METRICS at 1e-10 relative. Exit 0 and a line
starting with 'agrees' when everything agrees, 1 otherwise (also when torch is missing).
"""

import json
import math
import os
import struct
import sys
import zlib

try:
    import torch
    from safetensors.torch import load_file, save_file
except ImportError as e:  # tools/setup.sh installs torch and safetensors into the venv
    print(f"FAIL: {e} (run tools/setup.sh)")
    sys.exit(1)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import normlab_ref as ref  # noqa: E402

T, SAMPLES, MICRO, STEPS = 16, 4, 2, 3
OPT = dict(lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, grad_clip=0.05)
WARMUP, FINAL_FRACTION, Z_LOSS = 2, 0.1, 1e-3
TOL = 1e-10


def model_config(scheme):
    return ref.make_config(scheme, vocab_size=64, n_layers=2, z_loss=Z_LOSS)


def lr_at(step):
    """Linear warm-up over WARMUP steps, then cosine from the peak down to FINAL_FRACTION of it
    at the last step (docs/training.md)."""
    peak = OPT["lr"]
    if step < WARMUP:
        return peak * (step + 1) / WARMUP
    progress = (step - WARMUP) / (STEPS - 1 - WARMUP) if STEPS - 1 > WARMUP else 1.0
    return peak * (FINAL_FRACTION + (1 - FINAL_FRACTION) * 0.5 * (1 + math.cos(math.pi * progress)))


def write_shards(out, tokens, vocab):
    """One train shard and its index, as docs/data.md describes them."""
    os.makedirs(out, exist_ok=True)
    body = struct.pack(f"<{len(tokens)}H", *tokens)
    crc = zlib.crc32(body) & 0xFFFFFFFF
    header = b"NLSHARD\0" + struct.pack("<IIQIIQ", 1, 2, len(tokens), crc, 0, vocab)
    with open(os.path.join(out, "train-00000.bin"), "wb") as f:
        f.write(header.ljust(64, b"\0") + body)
    index = {
        "format": "normlab-token-shards", "version": 1, "dtype": "uint16",
        "tokenizer": {"file": "", "crc32": 0, "vocab_size": vocab, "eos_id": vocab - 1},
        "inputs": [], "val_fraction": 0.0,
        "splits": {"train": {"documents": 1, "tokens": len(tokens),
                             "shards": [{"file": "train-00000.bin", "tokens": len(tokens),
                                         "crc32": crc}]}},
    }
    with open(os.path.join(out, "index.json"), "w") as f:
        json.dump(index, f, indent=1)


def train_config(cfg, data_dir):
    """The YAML of the `normlab train` run that the oracle describes."""
    sections = {
        "model": {"scheme": cfg["scheme"], "vocab_size": cfg["vocab_size"],
                  "d_model": cfg["d_model"], "n_layers": cfg["n_layers"],
                  "n_heads": cfg["n_heads"], "n_kv_heads": cfg["n_kv_heads"], "d_ff": cfg["d_ff"],
                  "rope_theta": cfg["rope_theta"], "norm_eps": cfg["norm_eps"],
                  "norm_type": cfg["norm_type"], "qkv_norm": cfg["qkv_norm"],
                  "tie_embeddings": cfg["tie_embeddings"]},
        "data": {"train": data_dir, "tokenizer": "", "seq_len": T},
        "train": {"steps": STEPS, "global_batch": SAMPLES, "micro_batch": MICRO,
                  "device": "cpu", "precision": "fp64", "z_loss": Z_LOSS},
        "optimizer": {"lr": OPT["lr"], "beta1": OPT["beta1"], "beta2": OPT["beta2"],
                      "eps": OPT["eps"], "weight_decay": OPT["weight_decay"],
                      "grad_clip": OPT["grad_clip"], "decay_embeddings": False},
        "scheduler": {"kind": "cosine", "warmup_steps": WARMUP,
                      "final_lr_fraction": FINAL_FRACTION},
        "eval": {"every": 0},
        "checkpoint": {"every": 1, "keep": STEPS},
        "logging": {"every": 1},
    }
    lines = []
    for section, keys in sections.items():
        lines.append(f"{section}:")
        for k, v in keys.items():
            v = json.dumps(v) if isinstance(v, (bool, str)) else repr(v)
            lines.append(f"  {k}: {v}")
    return "\n".join(lines) + "\n"


def oracle_steps(cfg, P, tokens):
    """Runs the 3 steps on P (float64 leaves) in place; returns the weights and mean loss of
    each step."""
    samples = torch.stack([tokens[j * T: j * T + T + 1] for j in range(SAMPLES)])
    decay = [p for n, p in P.items() if p.dim() >= 2 and n not in ("embed.weight", "head.weight")]
    no_decay = [p for n, p in P.items() if not (p.dim() >= 2 and n not in ("embed.weight", "head.weight"))]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": OPT["weight_decay"]},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=OPT["lr"], betas=(OPT["beta1"], OPT["beta2"]), eps=OPT["eps"], foreach=False)
    out = {}
    for s in range(STEPS):
        for g in opt.param_groups:
            g["lr"] = lr_at(s)
        opt.zero_grad(set_to_none=True)
        mean_ce = 0.0
        for m in range(SAMPLES // MICRO):
            batch = samples[m * MICRO:(m + 1) * MICRO]
            _, loss = ref.model_forward(P, cfg, batch)
            (loss / (SAMPLES // MICRO)).backward()
            cfg_ce = dict(cfg, z_loss=0.0)  # the logged loss is the cross-entropy alone
            with torch.no_grad():
                mean_ce += ref.model_forward(P, cfg_ce, batch)[1].item() / (SAMPLES // MICRO)
        total = torch.nn.utils.clip_grad_norm_(list(P.values()), OPT["grad_clip"]).item()
        if total <= OPT["grad_clip"]:
            raise SystemExit(f"oracle: gradient norm {total:.3g} at step {s + 1} is under the "
                             f"clip {OPT['grad_clip']}: clipping would not be tested")
        opt.step()
        for n, p in P.items():
            out[f"step{s + 1}.{n}"] = p.detach().clone()
        out[f"loss.{s + 1}"] = torch.tensor(mean_ce, dtype=torch.float64)
    return out


def make(work, scheme):
    cfg = model_config(scheme)
    case = os.path.join(work, scheme)
    g = torch.Generator().manual_seed(2024)
    tokens = torch.randint(0, cfg["vocab_size"], (SAMPLES * T + 1,), generator=g)
    write_shards(os.path.join(case, "data"), tokens.tolist(), cfg["vocab_size"])
    P = ref.init_params(cfg, seed=7, dtype=torch.float64)
    save_file({n: p.contiguous() for n, p in P.items()}, os.path.join(case, "init.safetensors"))
    P = {n: p.clone().requires_grad_(True) for n, p in P.items()}
    save_file(oracle_steps(cfg, P, tokens), os.path.join(case, "oracle.safetensors"))
    with open(os.path.join(case, "config.yaml"), "w") as f:
        f.write(train_config(cfg, os.path.join(case, "data")))
    print(f"oracle: wrote {case}")


def check(work, metrics, models):
    oracle = load_file(os.path.join(work, "oracle.safetensors"))
    failures, worst = [], 0.0
    for s in range(1, STEPS + 1):
        path = models[s - 1]
        ours = load_file(path)
        names = {k[len(f"step{s}."):] for k in oracle if k.startswith(f"step{s}.")}
        if set(ours) != names:
            failures.append(f"{path}: names differ from the oracle's: "
                            f"{sorted(set(ours) ^ names)}")
            continue
        for n in sorted(names):
            a, b = ours[n].to(torch.float64), oracle[f"step{s}.{n}"]
            err = (a - b).abs() / (b.abs() + 1e-12 * b.abs().max())
            worst = max(worst, err.max().item())
            if err.max().item() > TOL:
                i = int(err.argmax())
                failures.append(f"step {s} {n}: element {i} is {a.flatten()[i].item():.17g}, "
                                f"oracle {b.flatten()[i].item():.17g} (relative "
                                f"{err.max().item():.3g})")
    losses = {}
    with open(metrics) as f:
        for line in f:
            j = json.loads(line)
            if "loss" in j and "step" in j:
                losses[j["step"]] = j["loss"]
    worst_loss = 0.0
    for s in range(1, STEPS + 1):
        want = oracle[f"loss.{s}"].item()
        got = losses.get(s)
        rel = abs(got - want) / abs(want) if got is not None else math.inf
        worst_loss = max(worst_loss, rel)
        if rel > TOL:
            failures.append(f"step {s}: logged loss {got}, oracle {want:.17g} (relative {rel:.3g})")
    for f in failures[:20]:
        print("FAIL:", f)
    if failures:
        print(f"FAIL: {len(failures)} disagreements with the oracle in {metrics} and its models")
        return 1
    print(f"agrees: {os.path.basename(work)}: {STEPS} steps, every parameter within {worst:.2g} relative per element "
          f"of the oracle (tolerance {TOL:g}); losses within {worst_loss:.2g}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "make" and sys.argv[3] == "--scheme":
        torch.set_num_threads(1)
        make(sys.argv[2], sys.argv[4])
    elif len(sys.argv) == 4 + STEPS and sys.argv[1] == "check":
        sys.exit(check(sys.argv[2], sys.argv[3], sys.argv[4:]))
    else:
        print(__doc__)
        sys.exit(2)

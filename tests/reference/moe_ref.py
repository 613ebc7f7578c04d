#!/usr/bin/env python3
"""Independent PyTorch reference of normlab's Mixture-of-Experts MLP, and its golden files.

Written from the OLMoE (arXiv 2409.02060) and Switch Transformer (arXiv 2101.03961)
descriptions, not from the C++: in an MoE block the MLP branch becomes

    logits = x W_router^T                      (N, E), no bias
    p      = softmax(logits) over all E experts
    S(x)   = the top_k experts of p            token choice; dropless: every assignment runs
    w_e    = p_e, or p_e / sum_{S(x)} p         (renormalize)
    y      = sum_{e in S(x)} w_e * SwiGLU_e(x)  expert e: experts.up[e] / experts.down[e]

and the training loss adds, averaged over the MoE layers,

    lb_loss_weight * E * sum_e f_e * P_e        f_e: share of the N * top_k assignments on e
                                                P_e: mean over tokens of p_e
    z_loss_weight  * mean_tokens logsumexp(logits)^2.

The experts run here as a loop over experts, each on the tokens that chose it (found with
torch.where), the way the Hugging Face OLMoE block does it. Everything else (attention, norms,
the schemes' update rules) is normlab_ref's, with its `mlp` replaced by the MoE one in the MoE
blocks (blocks 0, every, 2 every, ...). The experts' weights are stacked, as in normlab:
experts.up (E, 2 d_expert, d) and experts.down (E, d, d_expert); expert e is SwiGLU with
up.weight = experts.up[e] and down.weight = experts.down[e].

    python tests/reference/moe_ref.py --out tests/data/golden_moe     # write the goldens

Golden files: normlab_ref's format (README.md) plus `lb` and `router_z` (float64 scalars:
the unweighted aux losses averaged over the MoE layers) and the config keys moe_n_experts,
moe_top_k, moe_d_expert, moe_renormalize, moe_every, moe_lb_loss_weight, moe_z_loss_weight.
"""

import argparse
import contextlib
import fnmatch
import json
import math
import os
import sys
import zlib

os.environ["OMP_NUM_THREADS"] = "1"
os.environ["MKL_NUM_THREADS"] = "1"

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import normlab_ref as ref  # noqa: E402
import schemes_ref  # noqa: E402  (where the forwards look `mlp` up)

MOE_DEFAULTS = {
    "moe_n_experts": 4,
    "moe_top_k": 2,
    "moe_d_expert": 12,
    "moe_renormalize": False,
    "moe_every": 1,
    "moe_lb_loss_weight": 0.01,
    "moe_z_loss_weight": 0.001,
}


def make_config(scheme, **overrides):
    moe = {k: overrides.pop(k) for k in list(overrides) if k.startswith("moe_")}
    cfg = ref.make_config(scheme, **overrides)
    for k, v in moe.items():
        if k not in MOE_DEFAULTS:
            raise KeyError(f"unknown config key {k}")
    cfg.update({**MOE_DEFAULTS, **moe})
    return cfg


def is_moe_block(cfg, l):
    return cfg["moe_n_experts"] > 0 and l % cfg["moe_every"] == 0


def param_shapes(cfg):
    """normlab_ref's names with each MoE block's mlp.up / mlp.down replaced by the router and
    the experts (stacked: experts.up (E, 2 d_expert, d), experts.down (E, d, d_expert))."""
    d, de, E = cfg["d_model"], cfg["moe_d_expert"], cfg["moe_n_experts"]
    shapes = {}
    for name, shape in ref.param_shapes(cfg).items():
        parts = name.split(".")
        if parts[0] == "blocks" and parts[2:] == ["mlp", "up", "weight"] and is_moe_block(cfg, int(parts[1])):
            b = f"blocks.{parts[1]}.mlp"
            shapes[f"{b}.router.weight"] = (E, d)
            shapes[f"{b}.experts.up"] = (E, 2 * de, d)
            shapes[f"{b}.experts.down"] = (E, d, de)
        elif parts[0] == "blocks" and parts[2:] == ["mlp", "down", "weight"] and is_moe_block(cfg, int(parts[1])):
            continue
        else:
            shapes[name] = shape
    return shapes


def draw(seed, name):
    return torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))


def init_params(cfg, seed, dtype=torch.float32):
    """normlab_ref.init_params' rule on these names: a generator per (seed, name); matrices
    normal with std 1/sqrt(fan_in) (the embedding std 1, untied), gains uniform in [0.5, 1.5].
    A stacked expert tensor is drawn expert by expert, each under its per-expert name
    (experts.<e>.up.weight, ...), so the goldens hold the same numbers as before the stacking."""
    params = {}
    for name, shape in param_shapes(cfg).items():
        if name.endswith((".experts.up", ".experts.down")):
            base, which = name.rsplit(".", 1)
            params[name] = torch.stack([
                (torch.randn(shape[1:], generator=draw(seed, f"{base}.{e}.{which}.weight"),
                             dtype=torch.float64) / math.sqrt(shape[2])).to(torch.float32)
                for e in range(shape[0])]).to(dtype)
            continue
        g = draw(seed, name)
        if len(shape) == 1:
            t = 0.5 + torch.rand(shape, generator=g, dtype=torch.float64)
        elif name == "embed.weight" and not cfg["tie_embeddings"]:
            t = torch.randn(shape, generator=g, dtype=torch.float64)
        else:
            t = torch.randn(shape, generator=g, dtype=torch.float64) / math.sqrt(shape[1])
        params[name] = t.to(torch.float32).to(dtype)
    return params


def moe_mlp(P, prefix, x, cfg, aux):
    """The MoE branch of block `prefix` ('blocks.<l>.mlp') on x (B, T, d); appends the layer's
    (load-balancing loss, z-loss, tokens per expert) to aux."""
    E, k = cfg["moe_n_experts"], cfg["moe_top_k"]
    expert_cfg = {**cfg, "d_ff": cfg["moe_d_expert"]}
    h = x.reshape(-1, x.shape[-1])
    N = h.shape[0]
    logits = h @ P[f"{prefix}.router.weight"].t()
    p = torch.softmax(logits, dim=-1)
    w, chosen = torch.topk(p, k, dim=-1)
    if cfg["moe_renormalize"]:
        w = w / w.sum(dim=-1, keepdim=True)
    y = torch.zeros_like(h)
    up, down = P[f"{prefix}.experts.up"], P[f"{prefix}.experts.down"]
    for e in range(E):
        token, slot = torch.where(chosen == e)
        if token.numel() == 0:
            continue
        out = ref.mlp({"expert.up.weight": up[e], "expert.down.weight": down[e]}, "expert",
                      h[token], expert_cfg)
        y = y.index_add(0, token, out * w[token, slot].unsqueeze(-1))
    counts = F.one_hot(chosen, E).sum(dim=(0, 1))
    f = counts.to(p.dtype) / (N * k)
    lb = E * (f * p.mean(dim=0)).sum()
    z = torch.logsumexp(logits, dim=-1).pow(2).mean()
    aux.append((lb, z, counts))
    return y.reshape(x.shape)


@contextlib.contextmanager
def moe_mlps(cfg, aux):
    """normlab_ref's forwards with MoE in the MoE blocks (they look `mlp` up in schemes_ref at
    call time)."""
    dense = schemes_ref.mlp

    def mlp(P, prefix, x, c):
        if f"{prefix}.router.weight" in P:
            return moe_mlp(P, prefix, x, cfg, aux)
        return dense(P, prefix, x, c)

    schemes_ref.mlp = mlp
    try:
        yield
    finally:
        schemes_ref.mlp = dense


def model_forward(P, cfg, tokens):
    """tokens (B, T+1). Returns (logits, loss, lb, router_z, counts per MoE layer); loss is the
    cross-entropy (+ the logit z-loss) + lb_loss_weight * lb + z_loss_weight * router_z."""
    expected = set(param_shapes(cfg))
    if set(P) != expected:
        raise KeyError(f"parameter mismatch: missing {sorted(expected - set(P))}, "
                       f"extra {sorted(set(P) - expected)}")
    aux = []
    with moe_mlps(cfg, aux):
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        Z, _ = ref.FORWARDS[cfg["scheme"]](P, cfg, P["embed.weight"][inputs])
    logits = Z @ (P["embed.weight"] if cfg["tie_embeddings"] else P["head.weight"]).t()
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    if cfg["z_loss"] > 0:
        loss = loss + cfg["z_loss"] * torch.logsumexp(logits, dim=-1).pow(2).mean()
    lb = torch.stack([a[0] for a in aux]).mean()
    router_z = torch.stack([a[1] for a in aux]).mean()
    loss = loss + cfg["moe_lb_loss_weight"] * lb + cfg["moe_z_loss_weight"] * router_z
    return logits, loss, lb, router_z, [a[2] for a in aux]


def outputs(P32, cfg, tokens):
    """Float64 forward/backward from float32 weights: name -> tensor of every stored output
    (logits, loss, lb, router_z, grad.<name>; an expert that got no token has zero gradients)."""
    P = {n: t.detach().to(torch.float64).requires_grad_(True) for n, t in P32.items()}
    logits, loss, lb, router_z, _ = model_forward(P, cfg, tokens)
    names = list(P)
    grads = torch.autograd.grad(loss, [P[n] for n in names], allow_unused=True)
    out = {"logits": logits.detach(), "loss": loss.detach().reshape(()),
           "lb": lb.detach().reshape(()), "router_z": router_z.detach().reshape(())}
    for n, g in zip(names, grads):
        out[f"grad.{n}"] = g if g is not None else torch.zeros_like(P[n])
    return out


COMPACT = {"vocab_size": 32, "d_model": 16, "n_heads": 4, "n_kv_heads": 2, "d_ff": 24}


def case(**overrides):
    return {**COMPACT, **overrides}


# (case name, scheme, overrides); the seed of a case is 5000 + its index. d_expert 12 differs
# from d_ff 24, so a model that used d_ff for the experts would not load the weights.
CASES = [
    ("moe_pre_norm_top1", "pre_norm", case(moe_top_k=1)),
    ("moe_pre_norm_top2", "pre_norm", case(moe_top_k=2)),
    ("moe_pre_norm_top1_renorm", "pre_norm", case(moe_top_k=1, moe_renormalize=True)),
    ("moe_pre_norm_top2_renorm", "pre_norm", case(moe_top_k=2, moe_renormalize=True)),
    ("moe_siamese_hybrid_top1", "siamese_hybrid", case(moe_top_k=1)),
    ("moe_siamese_hybrid_top2", "siamese_hybrid", case(moe_top_k=2)),
    ("moe_siamese_hybrid_top1_renorm", "siamese_hybrid", case(moe_top_k=1, moe_renormalize=True)),
    ("moe_siamese_hybrid_top2_renorm", "siamese_hybrid", case(moe_top_k=2, moe_renormalize=True)),
    # aux weights large enough that their gradients dominate the router's
    ("moe_pre_norm_aux_heavy", "pre_norm", case(moe_lb_loss_weight=1.0, moe_z_loss_weight=0.5)),
    # MoE in blocks 0 and 2 only
    ("moe_pre_norm_every2", "pre_norm", case(moe_every=2)),
    # 4 tokens, 8 experts, top-1: at least 4 experts get no token in every layer
    ("moe_pre_norm_starved", "pre_norm", case(moe_n_experts=8, moe_top_k=1, batch_size=1, seq_len=4)),
    ("moe_siamese_hybrid_starved", "siamese_hybrid",
     case(moe_n_experts=8, moe_top_k=2, moe_renormalize=True, batch_size=1, seq_len=3)),
]


def build_case(index, scheme, overrides):
    seed = 5000 + index
    cfg = make_config(scheme, **overrides)
    params = init_params(cfg, seed)
    g = torch.Generator().manual_seed(10_000 + seed)
    tokens = torch.randint(0, cfg["vocab_size"], (cfg["batch_size"], cfg["seq_len"] + 1),
                           generator=g, dtype=torch.int64)
    tensors = {f"param.{n}": p.to(torch.float32).contiguous() for n, p in params.items()}
    tensors["tokens"] = tokens.contiguous()
    tensors.update({k: v.to(torch.float64).contiguous() for k, v in outputs(params, cfg, tokens).items()})
    return cfg, tensors


def main(argv=None):
    from safetensors.torch import save_file

    torch.set_num_threads(1)
    ap = argparse.ArgumentParser(description="Write the MoE golden files.")
    ap.add_argument("--out", required=True, help="output directory, e.g. tests/data/golden_moe")
    ap.add_argument("--cases", default="*", help="comma-separated shell patterns of case names")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    for index, (name, scheme, overrides) in enumerate(CASES):
        if not any(fnmatch.fnmatchcase(name, p) for p in args.cases.split(",")):
            continue
        cfg, tensors = build_case(index, scheme, overrides)
        path = os.path.join(args.out, f"{name}.safetensors")
        save_file(tensors, path, metadata={"config": json.dumps(cfg, sort_keys=True)})
        P = {k[6:]: v for k, v in tensors.items() if k.startswith("param.")}
        counts = model_forward({n: t.double() for n, t in P.items()}, cfg, tensors["tokens"])[4]
        idle = sum(int((c == 0).sum()) for c in counts)
        print(f"wrote {path}  scheme={scheme} loss={tensors['loss'].item():.6f} "
              f"lb={tensors['lb'].item():.4f} router_z={tensors['router_z'].item():.4f} "
              f"idle expert-layers={idle} bytes={os.path.getsize(path)}")


if __name__ == "__main__":
    main()

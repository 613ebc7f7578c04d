"""The peer of `normlab train` in tools/bench/train_bench.sh: a plain PyTorch (Python) training
loop of the same model and settings, written the way a PyTorch user writes it (nn.Module,
F.scaled_dot_product_attention, F.rms_norm, torch.optim.AdamW with its defaults, gradient
accumulation, clipping, the linear warm-up but not the cosine decay after it: a step's time does
not depend on its learning rate), on the same token shards.

Usage: torch_train.py SHARD.bin SCHEME D_MODEL N_LAYERS N_HEADS D_FF VOCAB SEQ MICRO GLOBAL STEPS THREADS
                      [N_EXPERTS TOP_K D_EXPERT LB_WEIGHT Z_WEIGHT]
       torch_train.py --config RESOLVED.yaml SHARD.bin THREADS
With N_EXPERTS > 0 every block's MLP is a Mixture-of-Experts (tools/bench/moe_bench.sh): the
router's softmax and top-k, the tokens sorted by expert and a loop over the experts on their
slices, the outputs scattered back with their weights; the load-balancing loss and router
z-loss are added with their weights (docs/moe.md).
With --config the model (scheme, shape, model.hyper, model.moe), the batch, the step count and
the optimizer (lr, betas, eps, weight decay, clipping, warmup) come from a config as `normlab
config --config X.yaml [--set ...]` prints it, so the peer trains what `normlab train` trains
with the same arguments (tools/bench/hyper_bench.sh); a setting the peer cannot build (tied
embeddings, LayerNorm, grouped-query attention, q/k/v norms on a scheme without them, mHC) is
an error naming its key. The scheme `hyper` (Hyper-Connections) takes its connections from the
independent reference, tests/reference/hyper_ref.py (written from the HC paper): each sub-layer's
HC layer is that file's `hc_layer` on this model's parameters, around the Pre-Norm branch below,
initialised as the paper says (`paper_init`); the n streams are n copies of the embedding and
are summed before the final norm.
Prints "params <count>" first, then "step <seconds> loss <loss>" per step and "loss <last loss>".
"""
import math
import pathlib
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Norm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return F.rms_norm(x.float(), (x.shape[-1],), self.weight, 1e-5).type_as(x)


def rope(x, cos, sin):
    # The tables in x's dtype (bf16 under autocast), so the product stays in it as normlab's does.
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Attention(nn.Module):
    def __init__(self, d, h, qkv_norm):
        super().__init__()
        self.h, self.hd = h, d // h
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.out = nn.Linear(d, d, bias=False)
        self.qkv_norm = qkv_norm
        if qkv_norm:
            self.q_norm, self.k_norm, self.v_norm = Norm(self.hd), Norm(self.hd), Norm(self.hd)

    def forward(self, x, cos, sin):
        B, T, d = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.h, self.hd).unbind(2)
        if self.qkv_norm:
            q, k, v = self.q_norm(q), self.k_norm(k), self.v_norm(v)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(B, T, d))


class Mlp(nn.Module):
    def __init__(self, d, d_ff):
        super().__init__()
        self.up = nn.Linear(d, 2 * d_ff, bias=False)
        self.down = nn.Linear(d_ff, d, bias=False)

    def forward(self, x):
        v, g = self.up(x).chunk(2, dim=-1)
        return self.down(F.silu(g) * v)


class MoeMlp(nn.Module):
    """Token-choice, dropless MoE of SwiGLU experts, as a PyTorch user writes it: sort the
    (token, expert) assignments by expert, loop over the experts on their contiguous slices."""

    def __init__(self, d, n_experts, top_k, d_expert, aux):
        super().__init__()
        self.router = nn.Linear(d, n_experts, bias=False)
        self.experts = nn.ModuleList(Mlp(d, d_expert) for _ in range(n_experts))
        self.k, self.aux = top_k, aux

    def forward(self, x):
        h = x.reshape(-1, x.shape[-1])
        logits = self.router(h).float()
        p = logits.softmax(-1)
        w, e = p.topk(self.k, dim=-1)
        flat = e.reshape(-1)
        order = flat.argsort(stable=True)
        token = order // self.k
        counts = torch.bincount(flat, minlength=len(self.experts)).tolist()
        rows = h[token]
        outs = [expert(part) for expert, part in zip(self.experts, rows.split(counts))]
        ys = torch.cat(outs) * w.reshape(-1)[order].unsqueeze(-1).to(h.dtype)
        y = torch.zeros_like(h).index_add(0, token, ys)
        f = torch.tensor(counts, dtype=p.dtype) / flat.numel()
        self.aux.append((len(self.experts) * (f * p.mean(0)).sum(), logits.logsumexp(-1).pow(2).mean()))
        return y.view_as(x)


def hyper_reference():
    """tests/reference/hyper_ref.py, imported only when a model has Hyper-Connections."""
    ref_dir = str(pathlib.Path(__file__).resolve().parents[2] / "tests" / "reference")
    if ref_dir not in sys.path:
        sys.path.insert(0, ref_dir)
    import hyper_ref
    return hyper_ref


class HyperConnection(nn.Module):
    """One Hyper-Connections layer (a sub-layer's width and depth connections). The equations are
    the reference's `hc_layer`, called on this module's parameters under the reference's names;
    `init` is the reference's `paper_init` for this layer (float64, kept in float32 here)."""

    def __init__(self, ref_cfg, init):
        super().__init__()
        self.ref_cfg = ref_cfg
        for name, t in init.items():
            self.register_parameter(name, nn.Parameter(t.to(torch.float32)))

    def forward(self, H, branch):
        P = {f"hc.{name}": p for name, p in self.named_parameters()}
        return hyper_reference().hc_layer(P, "hc", H, self.ref_cfg, branch)


class Block(nn.Module):
    """One block of any scheme; forward follows the update rules of docs/paper.md (Hyper-
    Connections: tests/reference/hyper_ref.py)."""

    def __init__(self, scheme, d, h, d_ff, layer, n_layers, moe=None, hyper=None):
        super().__init__()
        self.scheme = scheme
        hybrid = scheme in ("hybrid_norm", "hybrid_norm_star", "siamese_hybrid")
        self.attn = Attention(d, h, hybrid)
        self.mlp = MoeMlp(d, *moe) if moe else Mlp(d, d_ff)
        self.c = math.sqrt(2 * (layer + 1))
        self.alpha = (2 * n_layers) ** 0.25
        self.pre = scheme in ("pre_norm", "peri_norm") or (scheme == "hybrid_norm_star" and layer == 0) or (
            scheme == "mix_ln" and layer >= n_layers // 4)
        names = {"siamese": ["attn_post", "attn_y", "attn_in", "mlp_post", "mlp_y", "mlp_in"],
                 "siamese_hybrid": ["attn_y", "mlp", "mlp_y", "mlp_in"],
                 "peri_norm": ["attn", "attn_out", "mlp", "mlp_out"],
                 "reordered_norm": ["attn_out", "mlp_out"],
                 "hybrid_norm": ["mlp"]}.get(scheme, ["attn", "mlp"])
        if scheme == "hybrid_norm_star" and layer > 0:
            names = ["mlp"]
        self.norms = nn.ModuleDict({n: Norm(d) for n in names})
        if scheme == "siamese_hybrid":
            self.c1 = nn.Parameter(torch.ones(d))
        if scheme == "hyper":  # hyper = (reference config, {parameter name: initial value})
            ref_cfg, init = hyper
            for sub in ("attn", "mlp"):
                prefix = f"blocks.{layer}.{sub}_hc."
                own = {k[len(prefix):]: v for k, v in init.items() if k.startswith(prefix)}
                setattr(self, f"{sub}_hc", HyperConnection(ref_cfg, own))

    def forward(self, x, y, cos, sin):
        n, A, M = self.norms, lambda t: self.attn(t, cos, sin), self.mlp
        s = self.scheme
        if s == "hyper":  # x is the hyper hidden state H (B, T, n, d)
            x = self.attn_hc(x, lambda h: A(n["attn"](h)))
            return self.mlp_hc(x, lambda h: M(n["mlp"](h))), y
        if self.pre and s != "peri_norm":
            x = x + A(n["attn"](x))
            return x + M(n["mlp"](x)), y
        if s == "peri_norm":
            x = x + n["attn_out"](A(n["attn"](x)))
            return x + n["mlp_out"](M(n["mlp"](x))), y
        if s == "reordered_norm":
            x = x + n["attn_out"](A(x))
            return x + n["mlp_out"](M(x)), y
        if s in ("post_norm", "mix_ln"):
            x = n["attn"](x + A(x))
            return n["mlp"](x + M(x)), y
        if s == "deep_norm":
            x = n["attn"](self.alpha * x + A(x))
            return n["mlp"](self.alpha * x + M(x)), y
        if s in ("hybrid_norm", "hybrid_norm_star"):
            x = x + A(x)
            xt = n["mlp"](x)
            return xt + M(xt), y
        if s == "resi_dual":
            o = A(x)
            x, y = n["attn"](x + o), y + o
            o = M(x)
            return n["mlp"](x + o), y + o
        if s == "siamese":
            x = n["attn_post"](x)
            o = A(n["attn_in"](x + n["attn_y"](y)))
            x, y = x + o / self.c, y + o
            x = n["mlp_post"](x)
            o = M(n["mlp_in"](x + n["mlp_y"](y)))
            return x + o / self.c, y + o
        if s == "siamese_hybrid":
            a = A(self.c1 * x + n["attn_y"](y))
            x, y = x + a / self.c, y + a
            xt = n["mlp"](x)
            g = M(n["mlp_in"](xt + n["mlp_y"](y)))
            return xt + g / self.c, y + g
        raise ValueError(s)


class LM(nn.Module):
    def __init__(self, scheme, vocab, d, n_layers, h, d_ff, moe=None, hyper=None):
        """hyper (scheme "hyper"): {"n", "dynamic", "tanh"} of model.hyper."""
        super().__init__()
        self.scheme, self.hd = scheme, d // h
        self.embed = nn.Embedding(vocab, d)
        self.aux, self.aux_weights = [], moe[3:] if moe else None
        moe_args = (*moe[:3], self.aux) if moe else None
        hyper_args, self.n_streams = None, 0
        if scheme == "hyper":
            if not hyper:
                raise ValueError("scheme hyper needs its model.hyper options (n, dynamic, tanh)")
            href = hyper_reference()
            ref_cfg = href.make_config(hyper_variant="hc", hyper_n=hyper["n"], hyper_dynamic=hyper["dynamic"],
                                       hyper_tanh=hyper["tanh"], d_model=d, n_layers=n_layers, norm_eps=1e-5)
            hyper_args, self.n_streams = (ref_cfg, href.paper_init(ref_cfg)), hyper["n"]
        self.blocks = nn.ModuleList(Block(scheme, d, h, d_ff, l, n_layers, moe_args, hyper_args)
                                    for l in range(n_layers))
        self.head = nn.Linear(d, vocab, bias=False)
        two = scheme in ("siamese", "siamese_hybrid")
        self.final = nn.ModuleDict({k: Norm(d) for k in (["x", "y", "z"] if two else ["y"] if scheme == "resi_dual"
                                                          else [] if scheme in ("post_norm", "deep_norm") else ["z"])})

    def forward(self, tokens, targets):
        T, dev = tokens.shape[1], tokens.device  # the RoPE tables on the tokens' device
        inv = 10000.0 ** (-torch.arange(0, self.hd // 2, dtype=torch.float64, device=dev) * 2 / self.hd)
        ang = torch.outer(torch.arange(T, dtype=torch.float64, device=dev), inv)
        ang = torch.cat((ang, ang), dim=-1)
        cos, sin = ang.cos().float(), ang.sin().float()
        x = self.embed(tokens)
        y = x if self.scheme in ("resi_dual", "siamese", "siamese_hybrid") else None
        if self.n_streams:
            x = torch.stack([x] * self.n_streams, dim=-2)  # H: n copies of the embedding
        for b in self.blocks:
            x, y = b(x, y, cos, sin)
        if self.n_streams:
            x = x.sum(dim=-2)  # the streams summed, then the final norm
        f = self.final
        if "x" in f:
            z = f["z"](f["x"](x) + f["y"](y))
        elif self.scheme == "resi_dual":
            z = x + f["y"](y)
        elif "z" in f:
            z = f["z"](x)
        else:
            z = x
        logits = self.head(z)
        loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.reshape(-1))
        if self.aux:
            lb = torch.stack([a[0] for a in self.aux]).mean()
            rz = torch.stack([a[1] for a in self.aux]).mean()
            loss = loss + self.aux_weights[0] * lb + self.aux_weights[1] * rz
            self.aux.clear()
        return loss


def decays(name, p):
    """Weight decay on the matrices (the embedding and head included, as normlab's default
    optimizer.decay_embeddings), not on vectors; Hyper-Connections as the HC paper says: W_alpha
    and W_beta (a vector) decayed, the static alpha (a matrix) not."""
    if name.endswith(("_hc.w_alpha", "_hc.w_beta")):
        return True
    if name.endswith("_hc.static_alpha"):
        return False
    return p.dim() >= 2


def from_config(path):
    """The run a resolved normlab config describes (the output of `normlab config`), as a dict;
    an error names each setting the peer cannot reproduce."""
    import yaml

    c = yaml.safe_load(open(path))
    m, opt, tr = c["model"], c["optimizer"], c["train"]
    required = {"model.norm_type": (m["norm_type"], "rmsnorm"), "model.norm_eps": (float(m["norm_eps"]), 1e-5),
                "model.rope_theta": (float(m["rope_theta"]), 10000.0),
                "model.tie_embeddings": (m["tie_embeddings"], False), "model.qkv_norm": (m["qkv_norm"], False),
                "train.precision": (tr["precision"], "fp32"), "train.z_loss": (float(tr["z_loss"]), 0.0),
                "optimizer.decay_embeddings": (opt["decay_embeddings"], True)}
    if m["n_kv_heads"] not in (0, m["n_heads"]):
        required["model.n_kv_heads"] = (m["n_kv_heads"], 0)
    if m["scheme"] == "hyper":
        required["model.hyper.variant"] = (m["hyper"]["variant"], "hc")
    bad = [f"{k}: {v} (the peer has only {want})" for k, (v, want) in required.items() if v != want]
    if bad:
        raise SystemExit(f"torch_train.py: {path}: " + "; ".join(bad))
    moe = m["moe"]
    return {"scheme": m["scheme"], "vocab": m["vocab_size"], "d": m["d_model"], "L": m["n_layers"],
            "h": m["n_heads"], "d_ff": m["d_ff"], "T": c["data"]["seq_len"], "micro": tr["micro_batch"],
            "glob": tr["global_batch"], "steps": tr["steps"],
            "moe": (moe["n_experts"], moe["top_k"], moe["d_expert"], float(moe["lb_loss_weight"]),
                    float(moe["z_loss_weight"])) if moe["n_experts"] > 0 else None,
            "hyper": {k: m["hyper"][k] for k in ("n", "dynamic", "tanh")} if m["scheme"] == "hyper" else None,
            "lr": float(opt["lr"]), "betas": (float(opt["beta1"]), float(opt["beta2"])), "eps": float(opt["eps"]),
            "weight_decay": float(opt["weight_decay"]), "clip": float(opt["grad_clip"]),
            "warmup": c["scheduler"]["warmup_steps"]}


def parse_args(argv):
    if len(argv) > 1 and argv[1] == "--config":
        if len(argv) != 5:
            raise SystemExit(__doc__)
        run = from_config(argv[2])
        run.update(shard=argv[3], threads=int(argv[4]))
        return run
    if len(argv) < 13:
        raise SystemExit(__doc__)
    d, L, h, d_ff, vocab, T, micro, glob, steps, threads = map(int, argv[3:13])
    moe = None
    if len(argv) > 13 and int(argv[13]) > 0:
        moe = (int(argv[13]), int(argv[14]), int(argv[15]), float(argv[16]), float(argv[17]))
    # configs/small/lm.yaml's optimizer and warm-up.
    return {"shard": argv[1], "scheme": argv[2], "vocab": vocab, "d": d, "L": L, "h": h, "d_ff": d_ff, "T": T,
            "micro": micro, "glob": glob, "steps": steps, "threads": threads, "moe": moe, "hyper": None,
            "lr": 2e-3, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1, "clip": 1.0, "warmup": 20}


def main():
    a = parse_args(sys.argv)
    T, micro = a["T"], a["micro"]
    torch.set_num_threads(a["threads"])
    torch.manual_seed(0)
    tokens = np.memmap(a["shard"], dtype=np.uint16, mode="r", offset=64)
    model = LM(a["scheme"], a["vocab"], a["d"], a["L"], a["h"], a["d_ff"], a["moe"], a["hyper"])
    print(f"params {sum(p.numel() for p in model.parameters())}", flush=True)
    named = list(model.named_parameters())
    decay = [p for n, p in named if decays(n, p)]
    no_decay = [p for n, p in named if not decays(n, p)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a["lr"], betas=a["betas"], eps=a["eps"])
    accum = a["glob"] // micro
    n_samples = (len(tokens) - 1) // T
    rng = np.random.default_rng(0)
    for step in range(a["steps"]):
        t0 = time.perf_counter()
        lr = a["lr"] * min(1.0, (step + 1) / max(1, a["warmup"]))
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for _ in range(accum):
            idx = rng.integers(0, n_samples, micro)
            batch = torch.from_numpy(np.stack([tokens[i * T:i * T + T + 1].astype(np.int64) for i in idx]))
            loss = model(batch[:, :-1], batch[:, 1:])
            (loss / accum).backward()
            total += loss.item() / accum
        torch.nn.utils.clip_grad_norm_(model.parameters(), a["clip"])
        opt.step()
        print(f"step {time.perf_counter() - t0:.6f} loss {total:.4f}", flush=True)
    print(f"loss {total:.4f}")


if __name__ == "__main__":
    main()

"""normlab's decoder-only model family as a Hugging Face transformers model, in plain PyTorch.

Written by `normlab export --format hf` next to config.json and loaded with
`AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True)`. Every normalization scheme
of normlab (docs/schemes.md) follows the update rules of docs/paper.md, as the project's
independent reference (tests/reference/normlab_ref.py; hyper_ref.py for Hyper-Connections,
siamese_hyper_ref.py for SiameseNorm x Hyper-Connections) does; the weights keep normlab's
names under `model.` (`model.blocks.0.attn.qkv.weight`), the untied head is `lm_head.weight`.

Norms compute in float32 (float64 for float64 weights) and return the input's dtype, as
normlab does, so bfloat16 loading works. No KV cache: generate() recomputes the sequence for
every new token (use_cache is ignored).
"""

import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

try:
    from .configuration_normlab import NormlabConfig
except ImportError:  # loaded as a plain module (sys.path), not as a transformers dynamic module
    from configuration_normlab import NormlabConfig


class NormlabNorm(nn.Module):
    """RMSNorm or LayerNorm (no bias) with a gain, computed in float32 (float64 stays)."""

    def __init__(self, size, norm_type, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.norm_type = norm_type
        self.eps = eps

    def forward(self, x):
        xc = x.to(torch.float64 if x.dtype == torch.float64 else torch.float32)
        if self.norm_type == "rmsnorm":
            y = xc * torch.rsqrt(xc.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        else:
            mean = xc.mean(dim=-1, keepdim=True)
            var = (xc - mean).pow(2).mean(dim=-1, keepdim=True)
            y = (xc - mean) * torch.rsqrt(var + self.eps)
        return (self.weight.to(xc.dtype) * y).to(x.dtype)


def rope_tables(positions, head_dim, theta, dtype):
    """cos, sin of rotate-half RoPE for positions (B, T): each (B, T, 1, head_dim)."""
    i = torch.arange(head_dim // 2, dtype=torch.float64, device=positions.device)
    inv_freq = theta ** (-2.0 * i / head_dim)
    angle = positions.to(torch.float64)[..., None] * inv_freq
    angle = torch.cat([angle, angle], dim=-1)[:, :, None, :]
    return angle.cos().to(dtype), angle.sin().to(dtype)


def apply_rope(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class NormlabAttention(nn.Module):
    """Fused qkv projection, optional per-head q/k/v norms or full-width q/k norms before RoPE,
    causal grouped-query attention."""

    def __init__(self, config, qkv_norm):
        super().__init__()
        d, H = config.d_model, config.n_heads
        KV = config.n_kv_heads or H
        self.H, self.KV, self.hd = H, KV, d // H
        self.qkv = nn.Linear(d, (H + 2 * KV) * self.hd, bias=False)
        self.out = nn.Linear(H * self.hd, d, bias=False)
        self.qkv_norm = qkv_norm
        if qkv_norm:
            self.q_norm = NormlabNorm(self.hd, config.norm_type, config.norm_eps)
            self.k_norm = NormlabNorm(self.hd, config.norm_type, config.norm_eps)
            self.v_norm = NormlabNorm(self.hd, config.norm_type, config.norm_eps)
        # full-width q/k norms (OLMo-2, OLMoE): over all heads at once, before the split; v as is
        self.qk_full = getattr(config, "qk_norm", "none") == "full"
        if self.qk_full:
            self.q_norm = NormlabNorm(H * self.hd, config.norm_type, config.norm_eps)
            self.k_norm = NormlabNorm(KV * self.hd, config.norm_type, config.norm_eps)

    def forward(self, x, rope, mask):
        B, T, _ = x.shape
        H, KV, hd = self.H, self.KV, self.hd
        qkv = self.qkv(x)
        q, k = qkv[..., : H * hd], qkv[..., H * hd: (H + KV) * hd]
        if self.qk_full:
            q, k = self.q_norm(q), self.k_norm(k)
        q = q.reshape(B, T, H, hd)
        k = k.reshape(B, T, KV, hd)
        v = qkv[..., (H + KV) * hd:].reshape(B, T, KV, hd)
        if self.qkv_norm:
            q, k, v = self.q_norm(q), self.k_norm(k), self.v_norm(v)
        cos, sin = rope
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        if KV != H:  # query head h reads key/value head h // (H / KV)
            k = k.repeat_interleave(H // KV, dim=2)
            v = v.repeat_interleave(H // KV, dim=2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if mask is None:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out(o.transpose(1, 2).reshape(B, T, H * hd))


class NormlabMlp(nn.Module):
    """SwiGLU: u = up(x); value = u[:d_ff], gate = u[d_ff:]; down(silu(gate) * value)."""

    def __init__(self, config, d_ff=None):
        super().__init__()
        self.d_ff = d_ff or config.d_ff
        self.up = nn.Linear(config.d_model, 2 * self.d_ff, bias=False)
        self.down = nn.Linear(self.d_ff, config.d_model, bias=False)

    def forward(self, x):
        u = self.up(x)
        return self.down(F.silu(u[..., self.d_ff:]) * u[..., : self.d_ff])


class NormlabExperts(nn.Module):
    """The experts' SwiGLU weights, stacked: up (E, 2 d_expert, d), expert e's [value | gate]
    projection as in NormlabMlp, and down (E, d, d_expert)."""

    def __init__(self, config, n_experts, d_expert):
        super().__init__()
        self.d_expert = d_expert
        self.up = nn.Parameter(torch.empty(n_experts, 2 * d_expert, config.d_model))
        self.down = nn.Parameter(torch.empty(n_experts, config.d_model, d_expert))

    def forward(self, e, x):
        u = x @ self.up[e].t()
        return (F.silu(u[..., self.d_expert:]) * u[..., : self.d_expert]) @ self.down[e].t()


class NormlabMoe(nn.Module):
    """Mixture-of-Experts MLP (docs/moe.md): p = softmax(router(x)) over all experts; each
    token's top_k experts, weighted by p (renormalised over the top_k when moe.renormalize);
    token choice, dropless. Inference only: the aux losses are training's."""

    def __init__(self, config):
        super().__init__()
        moe = config.moe
        self.top_k, self.renormalize = moe["top_k"], moe["renormalize"]
        self.n_experts = moe["n_experts"]
        self.router = nn.Linear(config.d_model, moe["n_experts"], bias=False)
        self.experts = NormlabExperts(config, moe["n_experts"], moe["d_expert"] or config.d_ff)

    def forward(self, x):
        h = x.reshape(-1, x.shape[-1])
        logits = self.router(h)
        p = torch.softmax(logits if logits.dtype == torch.float64 else logits.float(), dim=-1)
        w, chosen = torch.topk(p, self.top_k, dim=-1)
        if self.renormalize:
            w = w / w.sum(dim=-1, keepdim=True)
        y = torch.zeros_like(h)
        for e in range(self.n_experts):
            token, slot = torch.where(chosen == e)
            if token.numel():
                out = self.experts(e, h[token])
                y = y.index_add(0, token, out * w[token, slot].unsqueeze(-1).to(h.dtype))
        return y.view_as(x)


class NormlabHyperConnection(nn.Module):
    """One sub-layer's Hyper-Connection (docs/schemes.md, hyper), on the state H (B, T, n, C):
    the streams of scheme hyper, or SiameseNorm's Y with siamese.hyper. width(H) gives the branch
    input h, the carried streams H' and the depth weights beta; the sub-layer's new state is
    beta O + H' for its branch output O (hc_sublayer).

    hc: alpha = [A_m | A_r] (n x (n+1)), beta (n); dynamic (DHC), with Hb = LN(H) (no gain):
    alpha = s_alpha tanh(Hb W_alpha) + static_alpha, beta = s_beta tanh(Hb W_beta) + static_beta
    (tanh optional); h = A_m^T H, H' = A_r^T H.
    mhc: xt = RMSNorm(vec(H)) (no gain), p = xt phi = [pre | post | res];
    H_pre = sigmoid(a_pre p_pre + b_pre), H_post = 2 sigmoid(a_post p_post + b_post),
    H_res = Sinkhorn-Knopp(exp(a_res mat(p_res) + b_res)), 20 row-then-column normalisations;
    h = sum_i H_pre[i] H_i, H'_j = sum_i H_res[j, i] H_i, beta = H_post."""

    def __init__(self, hc, config, sublayer):
        super().__init__()
        d = config.d_model
        n = self.n = hc["n"]
        self.mhc, self.tanh, self.eps = hc["variant"] == "mhc", hc["tanh"], config.norm_eps
        if self.mhc:
            self.phi = nn.Parameter(torch.zeros(n * d, n * n + 2 * n))
            self.b_pre, self.b_post = nn.Parameter(torch.zeros(n)), nn.Parameter(torch.zeros(n))
            self.b_res = nn.Parameter(torch.zeros(n, n))
            for a in ("a_pre", "a_post", "a_res"):
                setattr(self, a, nn.Parameter(torch.full((1,), 0.01)))
            return
        eye = torch.eye(n)
        self.static_alpha = nn.Parameter(torch.cat([eye[:, sublayer % n: sublayer % n + 1], eye], 1))
        self.static_beta = nn.Parameter(torch.ones(n))
        self.dynamic = hc["dynamic"]
        if self.dynamic:
            self.w_alpha = nn.Parameter(torch.zeros(d, n + 1))
            self.w_beta = nn.Parameter(torch.zeros(d))
            self.s_alpha = nn.Parameter(torch.full((1,), 0.01))
            self.s_beta = nn.Parameter(torch.full((1,), 0.01))

    def width(self, H):
        n, dt = self.n, H.dtype
        if self.mhc:
            v = H.flatten(-2)
            xt = v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + self.eps)
            p = xt @ self.phi.to(dt)
            pre = torch.sigmoid(self.a_pre * p[..., :n] + self.b_pre)
            post = 2.0 * torch.sigmoid(self.a_post * p[..., n: 2 * n] + self.b_post)
            res = torch.exp(self.a_res * p[..., 2 * n:].reshape(*p.shape[:-1], n, n) + self.b_res)
            for _ in range(20):
                res = res / res.sum(-1, keepdim=True)
                res = res / res.sum(-2, keepdim=True)
            h = (pre.to(dt).unsqueeze(-2) @ H).squeeze(-2)
            return h, res.to(dt) @ H, post.to(dt)
        alpha, beta = self.static_alpha, self.static_beta
        if self.dynamic:
            hb = F.layer_norm(H, (H.shape[-1],), eps=self.eps)
            a, b = hb @ self.w_alpha.to(dt), hb @ self.w_beta.to(dt)
            if self.tanh:
                a, b = a.tanh(), b.tanh()
            alpha = self.s_alpha * a + self.static_alpha
            beta = self.s_beta * b + self.static_beta
        mix = alpha.transpose(-1, -2).to(dt) @ H
        return mix[..., 0, :], mix[..., 1:, :], beta.to(dt)


def hyper_copies(E, n):
    """The entry of n hyper-streams: n copies of E (B, T, C) as (B, T, n, C)."""
    return E.unsqueeze(-2).expand(*E.shape[:-1], n, E.shape[-1])


def hc_sublayer(hc, Y, branch):
    """One sub-layer around `branch` on a residual stream Y (hc None): (O, Y + O) with
    O = branch(Y); or on hyper-streams Y (B, T, n, C) with their Hyper-Connection hc:
    (O, beta O + H') with O = branch(h) for hc.width(Y) = h, H', beta."""
    if hc is None:
        O = branch(Y)
        return O, Y + O
    h, carry, beta = hc.width(Y)
    O = branch(h)
    return O, beta.unsqueeze(-1) * O.unsqueeze(-2) + carry


def siamese_hyper(config):
    """SiameseNorm's Hyper-Connections options (siamese.hyper), or None where Y is one stream."""
    if config.scheme not in ("siamese", "siamese_hybrid"):
        return None
    hc = config.siamese.get("hyper") or {}
    return hc if hc.get("n", 0) > 0 else None


def deep_norm_alpha(config):
    a = config.deep_norm_alpha
    return a if a is not None else (2.0 * config.n_layers) ** 0.25


def mix_ln_post_layers(config):
    p = config.mix_ln_post_layers
    return p if p is not None else int(math.floor(0.25 * config.n_layers))


class NormlabBlock(nn.Module):
    """Block `layer` of the configured scheme; forward maps the streams (X, Y) to (X, Y)."""

    def __init__(self, config, layer):
        super().__init__()
        scheme = config.scheme
        self.scheme, self.layer = scheme, layer
        siam = config.siamese
        hybrid = scheme in ("hybrid_norm", "hybrid_norm_star", "siamese_hybrid")
        self.attn = NormlabAttention(config, config.qkv_norm or hybrid)
        moe = getattr(config, "moe", None) or {}
        is_moe = moe.get("n_experts", 0) > 0 and layer % moe.get("every", 1) == 0
        self.mlp = NormlabMoe(config) if is_moe else NormlabMlp(config)
        if scheme in ("pre_norm", "post_norm", "deep_norm", "mix_ln", "resi_dual", "hyper"):
            norms = ["attn_norm", "mlp_norm"]
        elif scheme == "hybrid_norm":
            norms = ["mlp_norm"]
        elif scheme == "hybrid_norm_star":
            norms = ["attn_norm", "mlp_norm"] if layer == 0 else ["mlp_norm"]
        elif scheme == "peri_norm":
            norms = ["attn_norm", "attn_out_norm", "mlp_norm", "mlp_out_norm"]
        elif scheme == "reordered_norm":
            norms = ["attn_out_norm", "mlp_out_norm"]
        elif scheme == "siamese":
            norms = []
            for s in ("attn", "mlp"):
                norms += [f"{s}_post_norm", f"{s}_y_norm"] + ([f"{s}_in_norm"] if siam["input_norm"] else [])
        else:  # siamese_hybrid
            self.c1 = nn.Parameter(torch.ones(config.d_model))
            norms = ["attn_y_norm", "mlp_norm", "mlp_y_norm"] + (["mlp_in_norm"] if siam["input_norm"] else [])
        for n in norms:
            setattr(self, n, NormlabNorm(config.d_model, config.norm_type, config.norm_eps))
        # The HC layers: of the streams (hyper) or of SiameseNorm's Y (siamese.hyper.n > 0)
        hc = config.hyper if scheme == "hyper" else siamese_hyper(config)
        self.attn_hc = NormlabHyperConnection(hc, config, 2 * layer) if hc else None
        self.mlp_hc = NormlabHyperConnection(hc, config, 2 * layer + 1) if hc else None
        self.alpha = deep_norm_alpha(config)
        self.post = scheme == "post_norm" or (scheme == "mix_ln" and layer < mix_ln_post_layers(config))
        self.input_norm = siam["input_norm"]
        self.c = math.sqrt(2.0 * (layer + 1)) if siam["depth_scale"] else 1.0

    def forward(self, X, Y, rope, mask):
        s = self.scheme
        a = lambda h: self.attn(h, rope, mask)  # noqa: E731
        if s == "hyper":  # X is the state H (B, T, n, C)
            X = hc_sublayer(self.attn_hc, X, lambda h: a(self.attn_norm(h)))[1]
            return hc_sublayer(self.mlp_hc, X, lambda h: self.mlp(self.mlp_norm(h)))[1], Y
        if s in ("post_norm", "deep_norm", "mix_ln") and (self.post or s == "deep_norm"):
            alpha = self.alpha if s == "deep_norm" else 1.0
            X = self.attn_norm(alpha * X + a(X))
            return self.mlp_norm(alpha * X + self.mlp(X)), Y
        if s in ("pre_norm", "mix_ln") or (s == "hybrid_norm_star" and self.layer == 0):
            X = X + a(self.attn_norm(X))
            return X + self.mlp(self.mlp_norm(X)), Y
        if s in ("hybrid_norm", "hybrid_norm_star"):
            X = X + a(X)
            Xt = self.mlp_norm(X)
            return Xt + self.mlp(Xt), Y
        if s == "peri_norm":
            X = X + self.attn_out_norm(a(self.attn_norm(X)))
            return X + self.mlp_out_norm(self.mlp(self.mlp_norm(X))), Y
        if s == "reordered_norm":  # OLMo 2's: the norm on each branch's output only
            X = X + self.attn_out_norm(a(X))
            return X + self.mlp_out_norm(self.mlp(X)), Y
        if s == "resi_dual":
            O = a(X)
            X, Y = self.attn_norm(X + O), Y + O
            O = self.mlp(X)
            return self.mlp_norm(X + O), Y + O
        # SiameseNorm: Y is one stream, or hyper-streams whose branch input h takes Y's place
        if s == "siamese":
            for sub, branch, hc in (("attn", a, self.attn_hc), ("mlp", self.mlp, self.mlp_hc)):
                X, y_norm = getattr(self, f"{sub}_post_norm")(X), getattr(self, f"{sub}_y_norm")
                # (the lambda runs inside hc_sublayer, before X, sub, y_norm change)
                O, Y = hc_sublayer(hc, Y, lambda h: branch(self.fuse(sub, X + y_norm(h))))  # noqa: B023
                X = X + O / self.c
            return X, Y
        # siamese_hybrid: X is a HybridNorm stream
        A, Y = hc_sublayer(self.attn_hc, Y, lambda h: a(self.c1 * X + self.attn_y_norm(h)))
        Xt = self.mlp_norm(X + A / self.c)
        G, Y = hc_sublayer(self.mlp_hc, Y, lambda h: self.mlp(self.fuse("mlp", Xt + self.mlp_y_norm(h))))
        return Xt + G / self.c, Y

    def fuse(self, sub, H):
        """SiameseNorm's normalized input fusion N_in (siamese.input_norm) of a branch input."""
        return getattr(self, f"{sub}_in_norm")(H) if self.input_norm else H


class NormlabPreTrainedModel(PreTrainedModel):
    config_class = NormlabConfig
    base_model_prefix = "model"
    _no_split_modules = ["NormlabBlock"]
    _supports_sdpa = True

    def _init_weights(self, module):
        # Exports carry every weight; this only fills a model built from a config alone.
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        elif isinstance(module, NormlabExperts):
            nn.init.normal_(module.up, std=0.02)
            nn.init.normal_(module.down, std=0.02)
        elif isinstance(module, NormlabNorm):
            nn.init.ones_(module.weight)
        elif isinstance(module, NormlabBlock) and hasattr(module, "c1"):
            nn.init.ones_(module.c1)


class NormlabModel(NormlabPreTrainedModel):
    """Embedding -> the scheme's streams -> blocks -> the scheme's end of network (Z)."""

    def __init__(self, config):
        super().__init__(config)
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.blocks = nn.ModuleList(NormlabBlock(config, l) for l in range(config.n_layers))
        s, d = config.scheme, config.d_model
        ends = []
        if s in ("pre_norm", "hybrid_norm", "hybrid_norm_star", "peri_norm", "mix_ln", "hyper", "reordered_norm"):
            ends = ["final_norm"]
        elif s == "resi_dual":
            ends = ["final_norm_y"]
        elif s in ("siamese", "siamese_hybrid"):
            ends = ["final_norm_x", "final_norm_y"]
            if config.siamese["output_fusion"] == "code":
                ends.append("final_norm")
        for n in ends:
            setattr(self, n, NormlabNorm(d, config.norm_type, config.norm_eps))
        self.post_init()

    def get_input_embeddings(self):
        return self.embed

    def set_input_embeddings(self, value):
        self.embed = value

    def forward(self, input_ids, attention_mask=None, position_ids=None):
        B, T = input_ids.shape
        mask = None
        if attention_mask is not None and not bool(attention_mask.all()):
            keep = attention_mask.bool()
            causal = torch.ones(T, T, dtype=torch.bool, device=input_ids.device).tril()
            mask = causal[None, None] & keep[:, None, None, :]
            mask = mask | torch.eye(T, dtype=torch.bool, device=input_ids.device)  # padding sees itself
            if position_ids is None:
                position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        if position_ids is None:
            position_ids = torch.arange(T, device=input_ids.device).expand(B, T)
        E = self.embed(input_ids)
        rope = rope_tables(position_ids, self.config.d_model // self.config.n_heads,
                           self.config.rope_theta, E.dtype)
        X, Y = E, E
        s, siamese_hc = self.config.scheme, siamese_hyper(self.config)
        # hyper-streams: n copies of the embedding; at the end the streams are summed
        if s == "hyper":
            X = hyper_copies(E, self.config.hyper["n"])
        elif siamese_hc:
            Y = hyper_copies(E, siamese_hc["n"])
        for block in self.blocks:
            X, Y = block(X, Y, rope, mask)
        if s == "hyper":
            return self.final_norm(X.sum(-2))
        if siamese_hc:
            Y = Y.sum(-2)
        if s in ("post_norm", "deep_norm"):
            return X
        if s == "resi_dual":
            return X + self.final_norm_y(Y)
        if s in ("siamese", "siamese_hybrid"):
            Z = self.final_norm_x(X) + self.final_norm_y(Y)
            return self.final_norm(Z) if self.config.siamese["output_fusion"] == "code" else Z
        return self.final_norm(X)


class NormlabForCausalLM(NormlabPreTrainedModel, GenerationMixin):
    def __init__(self, config):
        super().__init__(config)
        self.model = NormlabModel(config)
        if not config.tie_embeddings:
            self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self):
        return self.model.embed

    def set_input_embeddings(self, value):
        self.model.embed = value

    def get_output_embeddings(self):
        return None if self.config.tie_embeddings else self.lm_head

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, labels=None,
                return_dict=None, **kwargs):
        Z = self.model(input_ids, attention_mask=attention_mask, position_ids=position_ids)
        W = self.model.embed.weight if self.config.tie_embeddings else self.lm_head.weight
        logits = F.linear(Z, W)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].float().reshape(-1, logits.shape[-1]),
                                   labels[:, 1:].reshape(-1), ignore_index=-100)
        return CausalLMOutputWithPast(loss=loss, logits=logits)

    def prepare_inputs_for_generation(self, input_ids, attention_mask=None, **kwargs):
        # No KV cache: the whole sequence every step.
        return {"input_ids": input_ids, "attention_mask": attention_mask}

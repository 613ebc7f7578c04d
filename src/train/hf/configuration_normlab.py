"""The configuration of a normlab model for Hugging Face transformers.

Written by `normlab export --format hf` next to config.json and loaded through its auto_map
(`trust_remote_code=True`). The keys are normlab's model keys (docs/config.md), plus the usual
transformers names as aliases (hidden_size, num_hidden_layers, ...).
"""

from transformers import PretrainedConfig

SCHEMES = (
    "pre_norm",
    "post_norm",
    "deep_norm",
    "hybrid_norm",
    "hybrid_norm_star",
    "peri_norm",
    "mix_ln",
    "resi_dual",
    "siamese",
    "siamese_hybrid",
    "hyper",
    "reordered_norm",
)


def hyper_options(hyper, key, n):
    """The Hyper-Connections options at `key` (hyper, siamese.hyper) with their defaults (n
    streams by default); n = 0, allowed only where the default is 0, turns them off."""
    hyper = dict(hyper or {})
    for name, default in (("variant", "hc"), ("n", n), ("dynamic", True), ("tanh", True)):
        hyper.setdefault(name, default)
    if hyper["variant"] not in ("hc", "mhc"):
        raise ValueError(f"config.json: {key}.variant: '{hyper['variant']}' is not hc or mhc")
    allowed = (0, 1, 2, 4, 8) if n == 0 else (1, 2, 4, 8)
    if hyper["n"] not in allowed:
        raise ValueError(f"config.json: {key}.n {hyper['n']} is not {', '.join(map(str, allowed[:-1]))} or 8")
    return hyper


class NormlabConfig(PretrainedConfig):
    model_type = "normlab"
    keys_to_ignore_at_inference = ["past_key_values"]

    def __init__(
        self,
        scheme="pre_norm",
        vocab_size=50304,
        d_model=2048,
        n_layers=16,
        n_heads=16,
        n_kv_heads=0,
        d_ff=8192,
        rope_theta=10000.0,
        norm_type="rmsnorm",
        norm_eps=1e-5,
        qkv_norm=False,
        qk_norm="none",
        tie_embeddings=False,
        siamese=None,
        deep_norm_alpha=None,
        deep_norm_beta=None,
        mix_ln_post_layers=None,
        moe=None,
        hyper=None,
        max_position_embeddings=2048,
        **kwargs,
    ):
        if scheme not in SCHEMES:
            raise ValueError(f"config.json: scheme: '{scheme}' is not one of {', '.join(SCHEMES)}")
        if norm_type not in ("rmsnorm", "layernorm"):
            raise ValueError(f"config.json: norm_type: '{norm_type}' is not rmsnorm or layernorm")
        if qk_norm not in ("none", "full"):
            raise ValueError(f"config.json: qk_norm: '{qk_norm}' is not none or full")
        if d_model % n_heads != 0 or (d_model // n_heads) % 2 != 0:
            raise ValueError(f"config.json: d_model {d_model} / n_heads {n_heads}: not an even head size")
        siamese = dict(siamese or {})
        siamese.setdefault("depth_scale", True)
        siamese.setdefault("input_norm", True)
        siamese.setdefault("output_fusion", "code")
        if siamese["output_fusion"] not in ("code", "paper"):
            raise ValueError(f"config.json: siamese.output_fusion: '{siamese['output_fusion']}' is not code or paper")
        # SiameseNorm x Hyper-Connections: Y as siamese.hyper.n hyper-streams (0 = off)
        siamese["hyper"] = hyper_options(siamese.get("hyper"), "siamese.hyper", 0)
        self.scheme = scheme
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.n_layers = n_layers
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads
        self.d_ff = d_ff
        self.rope_theta = rope_theta
        self.norm_type = norm_type
        self.norm_eps = norm_eps
        self.qkv_norm = qkv_norm
        self.qk_norm = qk_norm  # full: one norm over all of q, one over all of k (OLMo-2, OLMoE)
        self.tie_embeddings = tie_embeddings
        self.siamese = siamese
        self.deep_norm_alpha = deep_norm_alpha
        self.deep_norm_beta = deep_norm_beta
        self.mix_ln_post_layers = mix_ln_post_layers
        # Mixture-of-Experts MLP (normlab's model.moe; n_experts 0 = dense, docs/moe.md)
        moe = dict(moe or {})
        for key, default in (("n_experts", 0), ("top_k", 8), ("d_expert", 0), ("renormalize", False),
                             ("every", 1), ("lb_loss_weight", 0.01), ("z_loss_weight", 0.001)):
            moe.setdefault(key, default)
        if moe["n_experts"] > 0 and not 1 <= moe["top_k"] <= moe["n_experts"]:
            raise ValueError(f"config.json: moe.top_k {moe['top_k']} is not in [1, moe.n_experts]")
        self.moe = moe
        # Hyper-Connections (normlab's model.hyper, docs/schemes.md); read only by scheme hyper
        self.hyper = hyper_options(hyper, "hyper", 2)
        # The usual transformers names, for tools that read them (lm-eval reads
        # max_position_embeddings). RoPE has no length limit; this is the length normlab trained at
        # or, when unknown, a default.
        self.hidden_size = d_model
        self.num_hidden_layers = n_layers
        self.num_attention_heads = n_heads
        self.num_key_value_heads = n_kv_heads or n_heads
        self.intermediate_size = d_ff
        self.max_position_embeddings = max_position_embeddings
        # The head is tied inside NormlabForCausalLM (no lm_head when tie_embeddings), so the
        # transformers tying machinery stays off.
        kwargs["tie_word_embeddings"] = False
        kwargs.setdefault("use_cache", False)
        kwargs.setdefault("bos_token_id", 2)
        kwargs.setdefault("eos_token_id", 2)
        kwargs.setdefault("pad_token_id", 2)
        super().__init__(**kwargs)

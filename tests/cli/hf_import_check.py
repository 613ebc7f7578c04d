#!/usr/bin/env python3
"""Tiny Hugging Face checkpoints for `normlab import --from hf`, and the check of the imports.

Usage: hf_import_check.py make WORK_DIR
         writes WORK_DIR/<case>/hf (save_pretrained, random weights, nothing downloaded) for every
         case below
       hf_import_check.py check WORK_DIR CASE...
         for each case: the logits of WORK_DIR/<case>/normlab.safetensors (`normlab generate
         --logits-out` of the imported run) and of the export WORK_DIR/<case>/export
         (`normlab export --format hf`, loaded with trust_remote_code) against transformers' own
         forward of WORK_DIR/<case>/hf on the same tokens, fp32
Prints one line per case and PASS; exits 1 on a failure, also when transformers cannot be
imported (tools/setup.sh --tests installs it).
"""
import os
import sys

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
try:
    import torch
    from safetensors.torch import load_file
    import transformers
    from transformers import AutoModelForCausalLM
except ImportError as e:
    print(f"FAIL: {e} (run tools/setup.sh --tests)")
    sys.exit(1)

# Both sides compute in float32 from the same float32 weights and differ only in their kernels'
# order of summation, a few units of float32 rounding (u = 2^-24, 6.0e-8) per operation over
# these two-layer models: 1e-4 relative (max |difference| over max |logit|) is far above that
# (measured: at most 7.6e-7) and far below what a wrong mapping does (measured on these models:
# gate and up swapped in one layer 0.34, one input norm's gain replaced by 1 0.089, one q_norm's
# 0.26; OLMo-2's two output norms swapped in layer 0 0.42, or read as Pre-Norm's input norms
# 0.64).
TOL = 1e-4
VOCAB = 4096  # the built-in corpus's tokenizer
SHAPE = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
             num_attention_heads=4, max_position_embeddings=256)

# case: (config class, keyword arguments, max_shard_size or None)
CASES = {
    "llama_gqa_sharded": ("LlamaConfig", dict(num_key_value_heads=2, rope_theta=500000.0,
                                              rms_norm_eps=1e-5), "60KB"),
    "llama_tied": ("LlamaConfig", dict(num_key_value_heads=1, tie_word_embeddings=True), None),
    "olmoe": ("OlmoeConfig", dict(num_experts=4, num_experts_per_tok=2), None),
    "olmoe_norm_topk_gqa_sharded": ("OlmoeConfig", dict(num_experts=8, num_experts_per_tok=3,
                                                        norm_topk_prob=True, num_key_value_heads=2),
                                    "100KB"),
    # OLMo-2: the reordered norm (normlab's reordered_norm) with full-width q/k norms
    "olmo2_gqa_sharded": ("Olmo2Config", dict(num_key_value_heads=2, rope_theta=500000.0), "60KB"),
    "olmo2_tied": ("Olmo2Config", dict(tie_word_embeddings=True, rms_norm_eps=1e-6), None),
}
MODELS = {"LlamaConfig": "LlamaForCausalLM", "OlmoeConfig": "OlmoeForCausalLM",
          "Olmo2Config": "Olmo2ForCausalLM"}


def build(config_name, kwargs):
    kwargs = dict(kwargs)
    theta = kwargs.pop("rope_theta", 10000.0)
    config = getattr(transformers, config_name)(**SHAPE, **kwargs)
    config.rope_parameters = {"rope_type": "default", "rope_theta": theta}
    model = getattr(transformers, MODELS[config_name])(config).float()
    # Weights far from the init (norm gains not 1, weights of std 0.1), so that every tensor
    # and every norm moves the logits well above the bound.
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(1 + 0.2 * torch.randn_like(p) if p.dim() == 1 else 0.1 * torch.randn_like(p))
    return model.eval()


def make(work):
    torch.manual_seed(0)
    for case, (config_name, kwargs, shard) in CASES.items():
        model = build(config_name, kwargs)
        model.save_pretrained(os.path.join(work, case, "hf"),
                              **({"max_shard_size": shard} if shard else {}))


def relative(got, want):
    return ((got - want).abs().max() / want.abs().max()).item()


def check(work, case):
    d = os.path.join(work, case)
    ref = load_file(os.path.join(d, "normlab.safetensors"))
    ids = ref["tokens"].unsqueeze(0).long()
    hf = AutoModelForCausalLM.from_pretrained(os.path.join(d, "hf"), dtype=torch.float32).eval()
    back, info = AutoModelForCausalLM.from_pretrained(
        os.path.join(d, "export"), trust_remote_code=True, dtype=torch.float32,
        output_loading_info=True)
    if info["missing_keys"] or info["unexpected_keys"] or info["mismatched_keys"]:
        return False, f"export: weights do not load: {info}"
    with torch.no_grad():
        want = hf(ids).logits[0]
        round_trip = back.eval()(ids).logits[0]
    imported = relative(ref["logits"], want)
    exported = relative(round_trip, want)
    ok = imported <= TOL and exported <= TOL and ids.shape[1] > 4
    return ok, (f"{ids.shape[1]} tokens, max rel logit error: imported {imported:.2e}, "
                f"exported back {exported:.2e} (bound {TOL})")


def main():
    if sys.argv[1] == "make":
        make(sys.argv[2])
        return 0
    failed = 0
    for case in sys.argv[3:]:
        ok, msg = check(sys.argv[2], case)
        print(f"{'ok  ' if ok else 'FAIL'} {case}: {msg}")
        failed += not ok
    if failed:
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Load a `normlab export` folder in Python and run it, without normlab.

Usage: load_export.py EXPORT_DIR --prompt TEXT [--max-tokens N]

Reads config.json, model.safetensors and tokenizer.model, builds the model with the
independent PyTorch reference implementation (tests/reference/normlab_ref.py, written from
the paper's equations in docs/paper.md, the same one the unit tests' goldens come from) and
continues the prompt greedily, printing the text. `normlab generate --temperature 0` gives the same text (tests/cli/eval_generate.sh).

As a library: `model = load(EXPORT_DIR)` returns (params, cfg); `logits(model, token_ids)` the
(T, V) logits of one sequence.
"""
import argparse
import json
import os
import sys

import torch
from safetensors.torch import load_file

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
import normlab_ref  # noqa: E402


def load(export_dir):
    meta = json.load(open(os.path.join(export_dir, "config.json")))
    if meta.get("format") != "normlab":
        raise ValueError(f"{export_dir}/config.json: not a normlab export")
    m = meta["model"]
    cfg = normlab_ref.make_config(
        m["scheme"], vocab_size=m["vocab_size"], d_model=m["d_model"], n_layers=m["n_layers"],
        n_heads=m["n_heads"], n_kv_heads=m["n_kv_heads"] or m["n_heads"], d_ff=m["d_ff"],
        rope_theta=m["rope_theta"], norm_eps=m["norm_eps"], norm_type=m["norm_type"],
        tie_embeddings=m["tie_embeddings"], qkv_norm=m["qkv_norm"],
        siamese_depth_scale=m["siamese"]["depth_scale"], siamese_input_norm=m["siamese"]["input_norm"],
        siamese_output_fusion=m["siamese"]["output_fusion"], deep_norm_alpha=m["deep_norm_alpha"],
        mix_ln_post_layers=m["mix_ln_post_layers"])
    params = load_file(os.path.join(export_dir, "model.safetensors"))
    return params, cfg


def logits(model, ids):
    params, cfg = model
    tokens = torch.tensor([list(ids) + [0]], dtype=torch.long)  # model_forward takes T+1 tokens
    with torch.no_grad():
        out, _ = normlab_ref.model_forward(params, cfg, tokens)
    return out[0]


def main():
    ap = argparse.ArgumentParser(description="greedy continuation of a prompt by a normlab export, in Python")
    ap.add_argument("export_dir")
    ap.add_argument("--prompt", required=True)
    ap.add_argument("--max-tokens", type=int, default=24)
    a = ap.parse_args()
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=os.path.join(a.export_dir, "tokenizer.model"))
    model = load(a.export_dir)
    ids = [sp.eos_id()] + sp.encode(a.prompt)  # a document start, as in training
    new = []
    for _ in range(a.max_tokens):
        nxt = int(logits(model, ids + new)[-1].argmax())
        new.append(nxt)
        if nxt == sp.eos_id():
            break
    print(sp.decode(ids[1:] + [t for t in new if t != sp.eos_id()]))


if __name__ == "__main__":
    main()

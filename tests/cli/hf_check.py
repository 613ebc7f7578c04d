#!/usr/bin/env python3
"""Checks `normlab export --format hf` folders against normlab's own numbers, offline.

Usage: hf_check.py CASE_DIR...   (each holds hf/ and normlab.safetensors from
`normlab generate --temperature 0 --logits-out`, and prompt.txt)

For each case: AutoTokenizer encodes the prompt to normlab's ids (EOS first), model.safetensors
loads with no weight missing, unexpected or of another shape, the fp32 logits
of AutoModelForCausalLM (trust_remote_code) equal normlab's to 1e-5 relative (max |difference|
over max |logit|), greedy generate() gives normlab's tokens, and bfloat16 loading gives finite
logits within 5e-2 relative of fp32. Prints one line per case and exits 1 on a failure, also when
transformers cannot be imported (tools/setup.sh --tests installs it).
"""
import os
import sys

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
try:
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer
except ImportError as e:  # tools/setup.sh --tests installs them into the venv
    print(f"FAIL: {e} (run tools/setup.sh --tests)")
    sys.exit(1)

# Both sides compute in float32 from the same float32 weights and differ only in their kernels'
# order of summation (LibTorch's fused CPU ops against PyTorch's), a few units of float32
# rounding (u = 2^-24, 6.0e-8) per operation over the tiny models' few dozen operations: 1e-5 is
# about 170 u, above that (measured: at most 4.3e-7) and below what a changed equation does to
# these 20-step models (SiameseNorm x 2xDHC: 4.9e-4 without the tanh, 1.7e-3 with the branch
# input read from one stream; docs/interop.md). Models this close to their init hide some
# changes (mHC's near-equal streams); hf_model checks every equation on random weights in fp64.
# bfloat16 (u = 2^-8, 3.9e-3) keeps about a dozen u.
FP32_TOL = 1e-5
BF16_TOL = 5e-2


def check(case):
    hf = os.path.join(case, "hf")
    ref = load_file(os.path.join(case, "normlab.safetensors"))
    prompt = open(os.path.join(case, "prompt.txt"), encoding="utf-8").read()
    tok = AutoTokenizer.from_pretrained(hf, trust_remote_code=True)
    ids = tok(prompt, return_tensors="pt")["input_ids"]
    if ids[0].tolist() != ref["tokens"].tolist():
        return False, f"tokenizer: {ids[0].tolist()} != normlab's {ref['tokens'].tolist()}"
    model, info = AutoModelForCausalLM.from_pretrained(hf, trust_remote_code=True, dtype=torch.float32,
                                                       output_loading_info=True)
    # every exported weight has its module, and every module its weight (no random init)
    if info["missing_keys"] or info["unexpected_keys"] or info["mismatched_keys"]:
        return False, (f"weights: missing {sorted(info['missing_keys'])}, unexpected "
                       f"{sorted(info['unexpected_keys'])}, mismatched {info['mismatched_keys']}")
    model.eval()
    with torch.no_grad():
        logits = model(ids).logits[0]
    want = ref["logits"]
    rel = ((logits - want).abs().max() / want.abs().max()).item()
    if not rel <= FP32_TOL:
        return False, f"fp32 logits differ by {rel:.3e} relative (bound {FP32_TOL})"
    new = len(ref["generated"])
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                             do_sample=False, num_beams=1)
    got = out[0, ids.shape[1]:].tolist()
    if got != ref["generated"].tolist():
        return False, f"greedy: {got} != normlab's {ref['generated'].tolist()}"
    bf16 = AutoModelForCausalLM.from_pretrained(hf, trust_remote_code=True, dtype=torch.bfloat16)
    with torch.no_grad():
        lb = bf16(ids).logits[0].float()
    rel16 = ((lb - want).abs().max() / want.abs().max()).item()
    if not torch.isfinite(lb).all() or not rel16 <= BF16_TOL:
        return False, f"bf16 logits: finite {bool(torch.isfinite(lb).all())}, {rel16:.3e} relative (bound {BF16_TOL})"
    return True, (f"fp32 max rel diff {rel:.2e}, greedy {len(got)} tokens equal, "
            f"bf16 max rel diff {rel16:.2e}")


def main():
    failed = 0
    for case in sys.argv[1:]:
        try:
            ok, result = check(case)
        except Exception as e:  # a failure to load is a failure of the case
            ok, result = False, f"error: {type(e).__name__}: {e}"
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {os.path.basename(case)}: {result}", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Converts the official SiameseNorm code's torch.save state dicts (.pt) to safetensors and
back, for `normlab import --from olmo` and `normlab export --format olmo --pt`
(docs/interop.md). Names and values are kept as they are; normlab maps the names.

  olmo_checkpoint.py to-safetensors MODEL.pt OUT.safetensors
  olmo_checkpoint.py to-pt MODEL.safetensors OUT.pt

A .pt may hold the state dict itself or a dict with it under "model" or "state_dict"; the
tensors' dtypes are kept (normlab converts to fp32 when it imports). The output is written to
a temporary name and renamed, so a failed run leaves nothing half-written.
"""
import os
import sys


def state_dict_of(obj, path):
    import torch

    for key in ("model", "state_dict"):
        if isinstance(obj, dict) and key in obj and isinstance(obj[key], dict):
            obj = obj[key]
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise SystemExit("%s: not a state dict of tensors (nor one under 'model' or 'state_dict')" % path)
    return {k: v.detach().cpu().contiguous() for k, v in obj.items()}


def main(argv):
    if len(argv) != 4 or argv[1] not in ("to-safetensors", "to-pt"):
        print(__doc__)
        return 2
    try:
        import torch
        from safetensors.torch import load_file, save_file
    except ImportError as e:
        print("olmo_checkpoint.py needs torch and safetensors (%s)" % e, file=sys.stderr)
        return 1
    mode, src, dst = argv[1:]
    tmp = "%s.tmp-%d" % (dst, os.getpid())
    try:
        if mode == "to-safetensors":
            sd = state_dict_of(torch.load(src, map_location="cpu", weights_only=True), src)
            save_file(sd, tmp, metadata={"format": "pt"})
        else:
            torch.save(load_file(src), tmp)
        os.replace(tmp, dst)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    print("%s -> %s" % (src, dst))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""What the Python peers of `normlab data prepare` (prepare_peer.py, prepare_peer_hf.py) share:
the corpus split into the same documents as `normlab data prepare` splits it, and the token
file it writes (each document's ids, then EOS, as uint16).
"""
import numpy as np


def read_documents(corpus):
    """The documents of the text file `corpus`: its blank-line separated paragraphs, without
    their surrounding newlines, empty ones dropped."""
    with open(corpus, encoding="utf-8") as f:
        text = f.read()
    return [d.strip("\n") for d in text.split("\n\n") if d.strip()]


def write_tokens(ids, eos, out):
    """Writes each document's ids followed by `eos` to `out` as uint16; returns the token count."""
    total = sum(len(x) + 1 for x in ids)
    arr = np.empty(total, dtype=np.uint16)
    at = 0
    for x in ids:
        arr[at:at + len(x)] = x
        arr[at + len(x)] = eos
        at += len(x) + 1
    arr.tofile(out)
    return total

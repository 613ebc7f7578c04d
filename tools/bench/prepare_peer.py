"""The peer of `normlab data prepare` in tools/bench/data_bench.sh: Python sentencepiece encoding
the same documents with the same model, the way a Python preparation script does it (read the
text, split it into the same documents, encode, append EOS, write uint16 tokens).

Usage: prepare_peer.py MODEL CORPUS OUT.bin THREADS
Prints one line: "peer <seconds> <tokens>".
"""
import sys
import time

import numpy as np
import sentencepiece as spm


def main():
    model, corpus, out, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    start = time.perf_counter()
    sp = spm.SentencePieceProcessor(model_file=model)
    with open(corpus, encoding="utf-8") as f:
        text = f.read()
    docs = [d.strip("\n") for d in text.split("\n\n") if d.strip()]
    # Batch encoding with the library's own thread pool (num_threads), the fastest way the
    # Python package offers.
    ids = sp.encode(docs, num_threads=threads)
    eos = sp.eos_id()
    total = sum(len(x) + 1 for x in ids)
    arr = np.empty(total, dtype=np.uint16)
    at = 0
    for x in ids:
        arr[at:at + len(x)] = x
        arr[at + len(x)] = eos
        at += len(x) + 1
    arr.tofile(out)
    print(f"peer {time.perf_counter() - start:.4f} {total}")


if __name__ == "__main__":
    main()

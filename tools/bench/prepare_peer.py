"""The peer of `normlab data prepare` in tools/bench/data_bench.sh: Python sentencepiece encoding
the same documents with the same model, the way a Python preparation script does it (read the
text, split it into the same documents, encode, append EOS, write uint16 tokens).

Usage: prepare_peer.py MODEL CORPUS OUT.bin THREADS
Prints one line: "peer <seconds> <tokens>".
"""
import sys
import time

import sentencepiece as spm

from peer_tokens import read_documents, write_tokens


def main():
    model, corpus, out, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    start = time.perf_counter()
    sp = spm.SentencePieceProcessor(model_file=model)
    docs = read_documents(corpus)
    # Batch encoding with the library's own thread pool (num_threads), the fastest way the
    # Python package offers.
    ids = sp.encode(docs, num_threads=threads)
    total = write_tokens(ids, sp.eos_id(), out)
    print(f"peer {time.perf_counter() - start:.4f} {total}")


if __name__ == "__main__":
    main()

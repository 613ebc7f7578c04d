"""The peer of `normlab data prepare --tokenizer tokenizer.json` in tools/bench/hf_tokenizer_bench.sh:
the Hugging Face `tokenizers` library encoding the same documents with the same tokenizer.json
(read the text, split it into the same documents, encode_batch_fast without the post-processor,
append EOS, write uint16 tokens), on RAYON_NUM_THREADS threads.

Usage: prepare_peer_hf.py train STYLE CORPUS OUT_DIR   (STYLE: neox or llama3; writes
                                                        OUT_DIR/tokenizer.json, 32,000 ids)
       prepare_peer_hf.py encode TOKENIZER_JSON EOS_TOKEN CORPUS OUT.bin
The second prints one line: "peer <seconds> <tokens>".
"""
import os
import sys
import time

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from peer_tokens import read_documents, write_tokens

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
          r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def train(style, corpus, out_dir):
    tok = Tokenizer(models.BPE())
    if style == "neox":  # GPT-NeoX-20B's layout
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        special = ["<|endoftext|>", "<|padding|>"]
    else:  # Llama 3's and dolma2's
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        special = ["<|begin_of_text|>", "<|end_of_text|>"]
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=32000, special_tokens=special, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train([corpus], trainer)
    os.makedirs(out_dir, exist_ok=True)
    tok.save(os.path.join(out_dir, "tokenizer.json"))


def encode(path, eos_token, corpus, out):
    start = time.perf_counter()
    tok = Tokenizer.from_file(path)
    docs = read_documents(corpus)
    # encode_batch_fast (no offsets): the library's fastest path, on its own thread pool
    # (RAYON_NUM_THREADS).
    ids = [e.ids for e in tok.encode_batch_fast(docs, add_special_tokens=False)]
    total = write_tokens(ids, tok.token_to_id(eos_token), out)
    print(f"peer {time.perf_counter() - start:.4f} {total}")


if __name__ == "__main__":
    if sys.argv[1] == "train":
        train(*sys.argv[2:5])
    else:
        encode(*sys.argv[2:6])

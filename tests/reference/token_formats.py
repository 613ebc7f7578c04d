"""Writes small token datasets in the formats other tools produce, independently of normlab, for
the tests of its readers (tests/unit/data/test_token_sources.cpp, tests/distributed/data_formats.sh).

  flat16.bin             nanoGPT's train.bin: numpy uint16 ids, tofile()
  olmo32/part-{0,1}.npy  OLMo's arrays: raw uint32 ids through numpy.memmap (no .npy header)
  mega32.{bin,idx}       a Megatron-LM indexed dataset of int32 ids (dtype code 4)
  mega16.{bin,idx}       the same layout with uint16 ids (dtype code 8), two sequences per document
  mix_a.bin, mix_b.*     two sources for mixtures: ids in [0, 500) (uint16 array) and
                         [500, 1000) (Megatron, int32), so a sample's source shows in its ids
  saved*.npy             numpy.save / numpy.lib.format.write_array files: uint16 (.npy 1.0),
                         int64 2-d in C order (2.0), uint32 (3.0)
  raw_i32.bin            a raw array of int32 ids
  bad_*                  hostile inputs: a truncated array, uint32 ids to be read as uint16, an id
                         beyond the vocabulary, Megatron indexes whose sizes do not add up, .npy files in
                         Fortran order, of floats, big-endian or cut short, a negative id in
                         an int32 .npy, a raw int64 array and an int64 Megatron dataset
  expected.json          per dataset, the ids of each file as written (the ground truth), the
                         document count and, for bad_id, the offset of the bad id

The Megatron writer follows the published layout of the .idx file (Megatron-LM,
megatron/core/datasets/indexed_dataset.py): the 9-byte header b"MMIDIDX\\x00\\x00", a u64
version 1, a u8 dtype code, u64 sequence count, u64 document-index count, then int32 sequence
lengths, int64 byte pointers of the sequences in the .bin, and the int64 document index (0, then
the sequence index that ends each document). Everything is little-endian.

Usage: token_formats.py OUT_DIR [VOCAB]   (fails, naming tools/setup.sh, without numpy)
"""
import json
import os
import struct
import sys

try:
    import numpy as np
except ImportError:  # tools/setup.sh installs numpy into the venv: its absence is a failure
    print(f"FAIL: {sys.executable} has no numpy (run tools/setup.sh, which installs it into the venv)")
    sys.exit(1)

out = sys.argv[1]
vocab = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
eos = 0
os.makedirs(out, exist_ok=True)
os.makedirs(os.path.join(out, "olmo32"), exist_ok=True)
rng = np.random.default_rng(1234)
expected = {}


def documents(n_docs, lo, hi):
    """n_docs documents of 5..60 ids in [lo, hi), each ended by EOS (as the tools write them)."""
    docs = []
    for _ in range(n_docs):
        d = rng.integers(max(lo, 1), hi, size=int(rng.integers(5, 60))).tolist()
        docs.append(d + [eos])
    return docs


def flat(docs):
    return [t for d in docs for t in d]


def megatron(prefix, seqs, doc_ends, code, dtype, lengths=None, pointers=None, bin_extra=0):
    """Writes PREFIX.bin and PREFIX.idx. seqs: lists of ids; doc_ends: the sequence index ending
    each document. lengths/pointers override the true ones (hostile indexes)."""
    itemsize = np.dtype(dtype).itemsize
    with open(prefix + ".bin", "wb") as f:
        for s in seqs:
            f.write(np.asarray(s, dtype=dtype).tobytes())
        f.write(b"\0" * bin_extra)
    true_lengths = [len(s) for s in seqs]
    true_pointers = list(np.cumsum([0] + [n * itemsize for n in true_lengths])[:-1])
    lengths = true_lengths if lengths is None else lengths
    pointers = true_pointers if pointers is None else pointers
    doc_index = [0] + list(doc_ends)
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", code))
        f.write(struct.pack("<Q", len(lengths)))
        f.write(struct.pack("<Q", len(doc_index)))
        f.write(struct.pack("<%di" % len(lengths), *lengths))
        f.write(struct.pack("<%dq" % len(pointers), *[int(p) for p in pointers]))
        f.write(struct.pack("<%dq" % len(doc_index), *doc_index))


# nanoGPT: np.array(ids, dtype=np.uint16).tofile("train.bin")
docs = documents(40, 1, vocab)
np.array(flat(docs), dtype=np.uint16).tofile(os.path.join(out, "flat16.bin"))
expected["flat16"] = {"files": [flat(docs)], "documents": len(docs)}

# OLMo: numpy.memmap(path, dtype=uint32, mode="w+"), several files read in sorted order
files = []
n_docs = 0
for part in range(2):
    docs = documents(25, 1, vocab)
    ids = flat(docs)
    m = np.memmap(os.path.join(out, "olmo32", "part-%d.npy" % part), dtype=np.uint32, mode="w+",
                  shape=(len(ids),))
    m[:] = ids
    m.flush()
    del m
    files.append(ids)
    n_docs += len(docs)
expected["olmo32"] = {"files": files, "documents": n_docs}

# Megatron, int32: one sequence per document
docs = documents(30, 1, vocab)
megatron(os.path.join(out, "mega32"), docs, range(1, len(docs) + 1), 4, np.int32)
expected["mega32"] = {"files": [flat(docs)], "documents": len(docs)}

# Megatron, uint16: each document split into two sequences (as --split-sentences writes)
docs = documents(20, 1, vocab)
seqs, ends = [], []
for d in docs:
    h = len(d) // 2
    seqs += [d[:h], d[h:]]
    ends.append(len(seqs))
megatron(os.path.join(out, "mega16"), seqs, ends, 8, np.uint16)
expected["mega16"] = {"files": [flat(seqs)], "documents": len(docs)}

# Mixture sources: A large (ids < 500), B small (ids >= 500) so that it repeats
docs = documents(200, 1, 500)
np.array(flat(docs), dtype=np.uint16).tofile(os.path.join(out, "mix_a.bin"))
expected["mix_a"] = {"files": [flat(docs)], "documents": len(docs)}
docs = [[t + 500 if t else t for t in d] for d in documents(12, 1, 500)]
megatron(os.path.join(out, "mix_b"), docs, range(1, len(docs) + 1), 4, np.int32)
expected["mix_b"] = {"files": [flat(docs)], "documents": len(docs)}

# Hostile inputs
ids = flat(documents(10, 1, vocab))
with open(os.path.join(out, "bad_truncated.bin"), "wb") as f:
    f.write(np.array(ids, dtype=np.uint16).tobytes()[:-1])  # half an id at the end
np.array(ids, dtype=np.uint32).tofile(os.path.join(out, "bad_uint32.bin"))  # to be read as uint16
bad = list(ids)
bad_offset = len(bad) // 2 + 3
bad[bad_offset] = vocab + 7
np.array(bad, dtype=np.uint16).tofile(os.path.join(out, "bad_id.bin"))
expected["bad_id"] = {"offset": bad_offset, "id": vocab + 7}
docs = documents(6, 1, vocab)
lengths = [len(d) for d in docs]
megatron(os.path.join(out, "bad_pointers"), docs, range(1, 7), 4, np.int32,
         pointers=[0] + [4 * sum(lengths[:i]) + 4 for i in range(1, 6)])  # gaps between sequences
megatron(os.path.join(out, "bad_lengths"), docs, range(1, 7), 4, np.int32, bin_extra=8)  # .bin too long
megatron(os.path.join(out, "bad_docs"), docs, [2, 4, 5], 4, np.int32)  # ends before the last sequence

# NumPy .npy files (numpy.save): the header gives dtype, order and shape. uint16 1-d in a
# version 1.0 header; int64 2-d (rows of 8 ids, C order) in version 2.0 and uint32 1-d in 3.0
# (numpy.lib.format.write_array with an explicit version).
docs = documents(20, 1, vocab)
np.save(os.path.join(out, "saved16.npy"), np.array(flat(docs), dtype=np.uint16))
expected["saved16"] = {"files": [flat(docs)], "documents": len(docs)}
ids = flat(documents(20, 1, vocab))
ids = ids[: len(ids) // 8 * 8]
with open(os.path.join(out, "saved64_v2.npy"), "wb") as f:
    np.lib.format.write_array(f, np.array(ids, dtype=np.int64).reshape(-1, 8), version=(2, 0))
expected["saved64_v2"] = {"files": [ids]}
ids = flat(documents(20, 1, vocab))
with open(os.path.join(out, "saved32_v3.npy"), "wb") as f:
    np.lib.format.write_array(f, np.array(ids, dtype=np.uint32), version=(3, 0))
expected["saved32_v3"] = {"files": [ids]}
# Signed arrays: raw int32 ids, as OLMo-style memmaps of a signed dtype are written
docs = documents(20, 1, vocab)
np.array(flat(docs), dtype=np.int32).tofile(os.path.join(out, "raw_i32.bin"))
expected["raw_i32"] = {"files": [flat(docs)], "documents": len(docs)}

# Hostile .npy files and negative ids in signed arrays
ids = flat(documents(10, 1, vocab))
np.save(os.path.join(out, "bad_npy_fortran.npy"), np.asfortranarray(
    np.array(ids[:40], dtype=np.uint16).reshape(8, 5)))
np.save(os.path.join(out, "bad_npy_float.npy"), np.array(ids, dtype=np.float32))
np.save(os.path.join(out, "bad_npy_big.npy"), np.array(ids, dtype=">u2"))
np.save(os.path.join(out, "bad_npy_cut.npy"), np.array(ids, dtype=np.uint16))
with open(os.path.join(out, "bad_npy_cut.npy"), "r+b") as f:
    f.truncate(os.path.getsize(os.path.join(out, "bad_npy_cut.npy")) - 2)  # one id short
neg = list(ids)
neg_offset = len(neg) // 3
neg[neg_offset] = -3
np.save(os.path.join(out, "bad_neg.npy"), np.array(neg, dtype=np.int32))
np.array(neg, dtype=np.int64).tofile(os.path.join(out, "bad_neg_i64.bin"))
megatron(os.path.join(out, "bad_neg_mega"), [neg], [1], 5, np.int64)
expected["bad_neg"] = {"offset": neg_offset, "id": -3}

with open(os.path.join(out, "expected.json"), "w") as f:
    json.dump({"vocab": vocab, "eos": eos, "datasets": expected}, f)
print("wrote", out)

#!/usr/bin/env python3
"""normlab's tokenizer.json support against the Hugging Face `tokenizers` library itself.

Usage: hf_tokenizer_check.py NORMLAB CORPUS_TXT WORK_DIR

Trains two small byte-level BPE tokenizers with `tokenizers` on the built-in corpus and saves
them as tokenizer.json:
  neox    GPT-NeoX-20B's layout: NFC normalizer, ByteLevel pre-tokenizer with GPT-2's regex,
          special <|endoftext|> and <|padding|>, and runs of spaces as non-special added
          tokens matched after normalization (as GPT-NeoX-20B's);
  llama3  Llama 3's (and dolma2's) layout: no normalizer, Split with Llama 3's regex then
          ByteLevel without regex, ignore_merges, special <|begin_of_text|>, <|end_of_text|>
          and reserved tokens, a TemplateProcessing post-processor that adds BOS.
For each, on varied texts (accents and decomposed accents, contractions, digits, whitespace
runs and Unicode spaces, emoji with joiners and modifiers, CJK, code, special tokens inside
words, control characters) and on 400 random strings drawn from those character classes:
  - `normlab tokenizer encode` gives exactly the ids of encode(text, add_special_tokens=False);
  - `normlab tokenizer decode` gives decode(ids, skip_special_tokens=False), which is the text
    itself where the normalizer leaves it unchanged;
  - `normlab data prepare` on those texts and on the whole corpus writes exactly each
    document's ids followed by the end-of-text token;
  - a tiny model trained on those shards evaluates per byte and generates from a prompt;
  - its `export --format hf` ships the tokenizer.json, which transformers' AutoTokenizer loads
    and encodes as `tokenizers` does (with and without special tokens), and a tokenizer.json
    of the user's in the output folder stops the export.
Then real WordPiece and Unigram tokenizer.json files and a malformed one are refused with one
line naming the file and what is wrong. Prints PASS; exits 1 on a failure, and without
`tokenizers` or numpy (tools/setup.sh --tests installs them).
"""
import json
import os
import random
import subprocess
import sys
import unicodedata

try:
    import numpy as np
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
    from tokenizers import pre_tokenizers, processors, trainers
except ImportError as e:  # tools/setup.sh --tests installs them into the venv
    print(f"FAIL: {e} (run tools/setup.sh --tests)")
    sys.exit(1)

NORMLAB, CORPUS, WORK = sys.argv[1:4]
os.makedirs(WORK, exist_ok=True)
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
          r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def run(*args, ok=True):
    p = subprocess.run([NORMLAB, *args], capture_output=True)  # bytes: keeps \r as it is
    p.stdout, p.stderr = p.stdout.decode("utf-8"), p.stderr.decode("utf-8")
    if ok and p.returncode != 0:
        fail(f"normlab {' '.join(args[:3])} failed: {p.stderr.strip()}")
    return p


# Besides the corpus, lines with runs of one character (spaces, digits, letters, dots), so that
# the vocabularies hold merges of equal pairs, whose order (leftmost first) decides "   ".
EXTRA = f"{WORK}/extra.txt"
with open(EXTRA, "w", encoding="utf-8") as f:
    for n in range(2, 12):
        for c in " 0a.\t":
            f.write(f"x{c * n}y {c * n}\n" * 20)


def train(name, tok, special, added=(), edit=None):
    trainer = trainers.BpeTrainer(vocab_size=1500, min_frequency=2, special_tokens=special,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train([CORPUS, EXTRA], trainer)
    if added:
        tok.add_tokens([AddedToken(a, normalized=True, special=False) for a in added])
    path = f"{WORK}/{name}/tokenizer.json"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tok.save(path)
    if edit:
        with open(path, encoding="utf-8") as f:
            spec = json.load(f)
        edit(spec)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(spec, f, ensure_ascii=False)
    return path


neox = Tokenizer(models.BPE())
neox.normalizer = normalizers.NFC()
neox.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
neox.decoder = decoders.ByteLevel()
neox.post_processor = processors.ByteLevel(trim_offsets=False)
neox_path = train("neox", neox, ["<|endoftext|>", "<|padding|>"], [" " * n for n in (2, 4, 8, 16)])

llama = Tokenizer(models.BPE())
llama.pre_tokenizer = pre_tokenizers.Sequence([
    pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
    pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
llama.decoder = decoders.ByteLevel()
llama_special = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                 "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]


def llama_options(spec):  # Llama 3's model option and post-processor (BOS first)
    spec["model"]["ignore_merges"] = True
    bos = next(a["id"] for a in spec["added_tokens"] if a["content"] == "<|begin_of_text|>")
    spec["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                 {"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>", "ids": [bos],
                                                 "tokens": ["<|begin_of_text|>"]}}}


llama_path = train("llama3", llama, llama_special, edit=llama_options)

TEXTS = [
    "In the beginning God created the heaven and the earth.",
    "Héllo wörld, café naïve — déjà vu; Ångström; cafe\u0301 (decomposed) and café",
    "I'm you're they've he'd we'll it's IT'S DON'T 'tis o'clock rock'n'roll",
    "numbers 1234567 3.14159 1,000,000 ٣٤٥٦ Ⅻ ² ½ 2026-12-04 0x1F",
    "whitespace:   three  two\t\ttabs\n\n\nnewlines    \n  trailing   ",
    "long runs" + " " * 37 + "of spaces" + "\n" * 9 + "and" + "\t" * 5 + "tabs " + " " * 19,
    "emoji 😀👍🏽 👨‍👩‍👧 🇩🇪 ✨ ❤️ done",
    "CJK: 漢字かなカナ 한국어 中文分词测试。「括弧」",
    "code: def f(x):\n    return x**2 + 1  # comment\n\tif (a && b) { c->d[i] = 0; }\r\n",
    "special <|endoftext|> inside<|endoftext|>text, <|padding|>, <|end_of_text|> and "
    "<|begin_of_text|>x<|eot_id|><|eot_id|> <|reserved_special_token_0|>",
    "odd spaces\u00a0nbsp\u2003em\u3000ideographic\u180emongolian\u2028ls\u0085nel\u200bzwsp",
    "control \u0001\u001b[0m bell\u0007 del\u007f and a lone\rcarriage return",
    "Ωmega ≈ ç √∫ µ ≤ ≥ ÷ ﬁ ligature ① Straße ΣΊΣΥΦΟΣ İstanbul",
    "Mixed-script: Привет мир, γειά σου, שלום, مرحبا, नमस्ते, สวัสดี",
    "    leading spaces and a final space ",
]
CLASSES = ["abcXYZéüñ", "ßΩжЖשمनก", "0123456789٣", "漢字かナ한", "😀👍🏽‍❤️🇩", "\u0301\u0308",
           " ", "  ", "\t\n\r", "\u00a0\u2003\u3000\u180e\u2028\u0085", ".,;:!?'\"-_()[]{}<>/\\#@$%^&*+=~`|",
           "'s 'T 'Ll 'd", "<|endoftext|>", "<|eot_id|>"]
rng = random.Random(32)
RANDOM = ["".join(rng.choice(rng.choice(CLASSES)) for _ in range(rng.randint(1, 60)))
          for _ in range(400)]
with open(CORPUS, encoding="utf-8") as f:
    corpus_docs = [d for d in f.read().split("\n\n") if d.strip()]


def check(name, path, eos_name):
    ref = Tokenizer.from_file(path)
    eos = ref.token_to_id(eos_name)
    texts = TEXTS + RANDOM
    jsonl = f"{WORK}/{name}/texts.jsonl"
    with open(jsonl, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({"text": t}) + "\n")
    want = [ref.encode(t, add_special_tokens=False).ids for t in texts]
    got = [[int(x) for x in line.split()] for line in
           run("tokenizer", "encode", "--tokenizer", path, jsonl).stdout.splitlines()]
    if len(got) != len(want):
        fail(f"{name}: {len(got)} encodings for {len(want)} texts")
    for t, g, w in zip(texts, got, want):
        if g != w:
            fail(f"{name}: ids differ on {t!r}:\n normlab    {g}\n tokenizers {w}")
    normalized = 0
    for t, ids in zip(TEXTS, want):
        back = run("tokenizer", "decode", "--tokenizer", path, *map(str, ids)).stdout[:-1]
        if back != ref.decode(ids, skip_special_tokens=False):
            fail(f"{name}: decode differs on {t!r}: {back!r}")
        same = ref.normalizer is None or unicodedata.normalize("NFC", t) == t
        normalized += not same
        if same and back != t:
            fail(f"{name}: decode(encode(text)) is not the text: {t!r} -> {back!r}")
    # data prepare: the documents' ids each followed by EOS, in order (texts and the corpus).
    with open(f"{WORK}/{name}/corpus.jsonl", "w", encoding="utf-8") as f:
        for d in corpus_docs:
            f.write(json.dumps({"text": d}) + "\n")
    out = f"{WORK}/{name}/shards"
    run("data", "prepare", "--tokenizer", path, "--input", jsonl, f"{WORK}/{name}/corpus.jsonl",
        "--out", out, "--val-fraction", "0", "--threads", "2", "--overwrite")
    expect = []
    for ids in want + [e.ids for e in ref.encode_batch(corpus_docs, add_special_tokens=False)]:
        expect += ids + [eos]
    index = json.load(open(f"{out}/index.json"))
    shards = []
    for s in index["splits"]["train"]["shards"]:
        shards += np.fromfile(f"{out}/{s['file']}", dtype=np.uint16, offset=64).tolist()
    if shards != expect:
        fail(f"{name}: data prepare wrote {len(shards)} tokens, tokenizers gives {len(expect)}")
    t = index["tokenizer"]
    if t["eos_id"] != eos or t["vocab_size"] != ref.get_vocab_size():
        fail(f"{name}: index.json eos {t['eos_id']} vocab {t['vocab_size']}")
    print(f"{name}: {len(texts)} texts ({sum(map(len, want))} ids) and {len(corpus_docs)} corpus "
          f"documents ({len(expect)} tokens with EOS {eos}) equal tokenizers; {len(TEXTS)} "
          f"decodes equal, {len(TEXTS) - normalized} of them the text itself")


check("neox", neox_path, "<|endoftext|>")
check("llama3", llama_path, "<|end_of_text|>")

# A model trained on the Llama-3-style shards: `eval` counts bytes through the tokenizer.json
# (perplexity per byte) and `generate` encodes the prompt and decodes with it.
run("train", "--config", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                      "../../configs/tiny/lm.yaml"),
    "--set", f"data.train={WORK}/llama3/shards", "--set", f"data.tokenizer={llama_path}",
    "--set", "model.vocab_size=1536", "--set", "train.steps=4", "--out", f"{WORK}/run")
out = run("eval", "--checkpoint", f"{WORK}/run", "--data", f"{WORK}/llama3/shards", "--split",
          "train", "--batches", "2").stdout
if "; per byte: perplexity" not in out:
    fail(f"eval with a tokenizer.json reported no per-byte numbers:\n{out}")
prompt = "In the beginning 漢字 😀"
out = run("generate", "--checkpoint", f"{WORK}/run", "--prompt", prompt, "--max-tokens", "8",
          "--temperature", "0").stdout
if not out.startswith(prompt) or len(out) <= len(prompt) + 1:
    fail(f"generate with a tokenizer.json: {out!r}")
print(f"tiny model on the llama3 shards: eval per byte, generate {out.strip()!r}")


# `export --format hf` ships the tokenizer.json as it is with a tokenizer_config.json, and
# transformers' AutoTokenizer encodes and decodes as the `tokenizers` library does, with and
# without the special tokens of the file's post-processor.
def check_hf_export():
    try:
        os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TRANSFORMERS_VERBOSITY="error")
        from transformers import AutoTokenizer
    except ImportError as e:
        fail(f"export --format hf: {e} (run tools/setup.sh --tests)")
    hf = f"{WORK}/hf"
    run("export", "--format", "hf", "--checkpoint", f"{WORK}/run", "--out", hf)
    if open(f"{hf}/tokenizer.json", "rb").read() != open(llama_path, "rb").read():
        fail("export --format hf: tokenizer.json is not the run's")
    if os.path.exists(f"{hf}/tokenizer.model"):
        fail("export --format hf: a tokenizer.model beside the tokenizer.json")
    ref = Tokenizer.from_file(llama_path)
    eos = ref.token_to_id("<|end_of_text|>")
    config = json.load(open(f"{hf}/config.json"))
    if (config["eos_token_id"], config["bos_token_id"], config["pad_token_id"]) != (eos,) * 3:
        fail(f"export --format hf: config.json token ids {config['eos_token_id']}, not {eos}")
    tok = AutoTokenizer.from_pretrained(hf, trust_remote_code=True)
    if tok.eos_token_id != eos:
        fail(f"export --format hf: AutoTokenizer's eos is {tok.eos_token_id}, not {eos}")
    for t in TEXTS + RANDOM:
        for special in (False, True):
            got = tok(t, add_special_tokens=special)["input_ids"]
            want = ref.encode(t, add_special_tokens=special).ids
            if got != want:
                fail(f"AutoTokenizer (add_special_tokens={special}) differs on {t!r}:\n"
                     f" transformers {got}\n tokenizers   {want}")
        ids = ref.encode(t, add_special_tokens=False).ids
        if tok.decode(ids) != ref.decode(ids, skip_special_tokens=False):
            fail(f"AutoTokenizer decodes differently: {t!r}")
    # The plain export names it tokenizer.json too, and its HF export ships the same file.
    run("export", "--checkpoint", f"{WORK}/run", "--out", f"{WORK}/plain")
    run("export", "--format", "hf", "--checkpoint", f"{WORK}/plain", "--out", f"{WORK}/hf2")
    if open(f"{WORK}/hf2/tokenizer.json", "rb").read() != open(llama_path, "rb").read():
        fail("export --format hf of a plain export: tokenizer.json is not the run's")
    # A tokenizer.json the export did not write is never replaced (the output contract).
    os.makedirs(f"{WORK}/hf3")
    with open(f"{WORK}/hf3/tokenizer.json", "w") as f:
        f.write("mine")
    p = run("export", "--format", "hf", "--checkpoint", f"{WORK}/run", "--out", f"{WORK}/hf3",
            ok=False)
    if p.returncode == 0 or "tokenizer.json" not in p.stderr or \
            open(f"{WORK}/hf3/tokenizer.json").read() != "mine":
        fail(f"export --format hf over a user's tokenizer.json: {p.stderr.strip()!r}")
    print(f"export --format hf: AutoTokenizer gives the tokenizers library's ids on "
          f"{len(TEXTS) + len(RANDOM)} texts, with and without special tokens")


check_hf_export()

# Refusals: real tokenizer.json files of other model types, and a malformed one.
wp = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
wp.save(f"{WORK}/wordpiece.json")
Tokenizer(models.Unigram([("<unk>", 0.0), ("a", -1.0)], 0)).save(f"{WORK}/unigram.json")
with open(f"{WORK}/broken.json", "w") as f:
    f.write('{"model": {"type": "BPE", "vocab": {"a": 0}')
for file, words in [("wordpiece.json", "model.type WordPiece is not supported"),
                    ("unigram.json", "model.type Unigram is not supported"),
                    ("broken.json", "not valid JSON"),
                    ("missing.json", "File does not exist")]:
    p = run("tokenizer", "encode", "--tokenizer", f"{WORK}/{file}", "--text", "a", ok=False)
    line = p.stderr.strip().split("\n")[0]  # (the command line parser adds a hint to use --help)
    if p.returncode == 0 or words not in line or file not in line:
        fail(f"{file}: expected one error line naming the file with '{words}', got {line!r}")
    print(f"{file}: {line}")
print("PASS")

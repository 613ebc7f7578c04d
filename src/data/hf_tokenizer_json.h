// Reads a Hugging Face tokenizer.json of the byte-level BPE kind and checks it as strictly as
// the `tokenizers` library loads it, for every part normlab reads: the keys it requires, their
// JSON types, merges of tokens in the vocabulary, token ids bounded before anything is sized
// by them, the ids `tokenizers` gives the added tokens, and the pre-tokenizer's regexes
// compiled. Each refusal is a TokenizerError of one line, "FILE: KEY: what is wrong". Internal
// to src/data (hf_tokenizer.cpp); torch-free (tests/fuzz/fuzz_tokenizer.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "data/hf_bpe.h"
#include "data/hf_pretokenizer.h"

namespace normlab::hf {

/// The largest token id normlab reads (2^24 - 1): larger ones are refused before any table is
/// sized by them. Real vocabularies stay below 2^18.
inline constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;

/// An entry of added_tokens, with the id `tokenizers` gives it (the file's, checked).
struct AddedTokenSpec {
  int32_t id = -1;
  std::string content;
  bool single_word = false, lstrip = false, rstrip = false, normalized = true, special = false;
};

struct TokenizerSpec {
  std::unordered_map<std::string, int32_t> vocab;           // model.vocab: distinct ids
  std::vector<std::pair<std::string, std::string>> merges;  // in rank order, all in vocab
  BpeOptions options;
  std::vector<Normalization> normalizers;
  std::vector<SplitStage> splits;                  // the Split stages before ByteLevel, compiled
  bool add_prefix_space = true, use_regex = true;  // ByteLevel's
  std::vector<AddedTokenSpec> added;  // non-empty contents, each once, in the file's order
  int64_t size = 0;                   // the largest id + 1
};

/// `text`: the contents of the file `path`. Throws TokenizerError naming `path` and the key.
TokenizerSpec read_tokenizer_json(const std::string& path, const std::string& text);

}  // namespace normlab::hf

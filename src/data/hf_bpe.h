// The BPE model of a byte-level Hugging Face tokenizer.json: a vocabulary of byte-level
// strings (GPT-2's byte-to-character mapping), ranked merges, and the merge order of the
// `tokenizers` library (lowest rank first, leftmost first among equal ranks). Internal to
// src/data (hf_tokenizer.cpp).
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace normlab::hf {

/// GPT-2's bytes_to_unicode: the UTF-8 of the character that stands for byte `b`.
const std::string& byte_char(uint8_t b);
/// The bytes a byte-level string stands for (tokenizers' ByteLevel decoder): each character's
/// byte, or, when any character is not one of the 256, the string's own UTF-8 bytes.
std::string byte_level_decode(std::string_view token);

struct BpeOptions {
  std::optional<std::string> unk_token;
  bool fuse_unk = false;
  bool byte_fallback = false;  // <0xNN> tokens for characters outside the vocabulary
  bool ignore_merges = false;  // a pre-token that is in the vocabulary is that one token
};

class BpeModel {
 public:
  /// `merges` in rank order. Throws std::invalid_argument naming a merge whose parts or
  /// result are not in the vocabulary.
  BpeModel(std::unordered_map<std::string, int32_t> vocab,
           const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options);

  /// Appends the ids of the pre-token `bytes` (raw UTF-8: the byte-level mapping is applied
  /// here). Thread-safe; encodings of short pre-tokens are cached.
  void encode(std::string_view bytes, std::vector<int32_t>& out) const;

  /// The id of a byte-level string, or -1.
  int32_t id(const std::string& token) const;
  const std::unordered_map<std::string, int32_t>& vocab() const { return vocab_; }

 private:
  void merge_word(const std::string& word, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<uint64_t, std::pair<uint32_t, int32_t>> merges_;  // pair -> rank, new id
  BpeOptions options_;
  std::array<int32_t, 256> byte_ids_{};  // the id of each byte's character, or -1

  // The encodings of pre-tokens up to kCachedBytes, in shards with their own locks.
  static constexpr size_t kCachedBytes = 64, kShards = 64, kShardEntries = 8192;
  struct CacheShard {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>> map;
  };
  mutable std::array<CacheShard, kShards> cache_;
};

}  // namespace normlab::hf

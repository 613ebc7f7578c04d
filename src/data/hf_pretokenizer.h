// The text stages of a Hugging Face tokenizer.json before its BPE model: the normalizer
// (Unicode normalization forms, through utf8proc) and the pre-tokenizer, zero or more Split
// stages (a regex, through PCRE2) followed by ByteLevel (GPT-2's regex, an optional prefix
// space). Internal to src/data (hf_tokenizer.cpp).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace normlab::hf {

enum class Normalization { None, Nfc, Nfd, Nfkc, Nfkd };

/// `text` (valid UTF-8) in the normalization form; None returns it unchanged.
std::string normalize(std::string_view text, Normalization form);

/// The offset of the first byte of `s` that is not part of valid UTF-8 (no surrogates, no
/// overlong forms), or std::string_view::npos.
size_t utf8_invalid_at(std::string_view s);

/// `bytes` as UTF-8, each maximal invalid subsequence replaced by U+FFFD (Rust's
/// String::from_utf8_lossy, as tokenizers' decoders use it).
std::string utf8_lossy(const std::string& bytes);

/// A regex as the `tokenizers` library compiles it (Oniguruma), through PCRE2 in UTF and
/// Unicode-property mode. `\s` and `\S` are rewritten to Oniguruma's Unicode White_Space set
/// (PCRE2 10.42's `\s` also matches U+180E). Throws std::invalid_argument with PCRE2's message
/// and the offset (not the pattern). Matching throws std::runtime_error past PCRE2's limits.
class Regex {
 public:
  /// `literal`: the pattern is a plain string (Split's {"String": ...}).
  Regex(const std::string& pattern, bool literal);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  /// Calls on_piece(piece, matched) for the maximal pieces of `text` (valid UTF-8) that are,
  /// alternately, between matches (matched = false) and matches (true), in order; empty
  /// pieces are left out.
  void split(std::string_view text,
             const std::function<void(std::string_view, bool matched)>& on_piece) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Split's `behavior` for the matches: kept as pieces of their own, or dropped.
enum class SplitBehavior { Isolated, Removed };

struct SplitStage {
  Regex regex;
  SplitBehavior behavior = SplitBehavior::Isolated;
  std::string key;  // where the pattern is in the tokenizer.json, for errors
};

/// Split stages, then ByteLevel. Pieces come out as raw UTF-8 bytes: the byte-to-character
/// mapping of ByteLevel is left to the BPE model (hf_bpe.h), which reads bytes.
class PreTokenizer {
 public:
  PreTokenizer(std::vector<SplitStage> splits, bool add_prefix_space, bool use_regex);

  /// Calls emit(piece) for each pre-token of `text` (valid UTF-8), in order.
  void run(std::string_view text, const std::function<void(std::string_view)>& emit) const;

 private:
  std::vector<SplitStage> splits_;
  bool add_prefix_space_;
  std::unique_ptr<Regex> byte_level_;  // GPT-2's pattern when use_regex
};

}  // namespace normlab::hf

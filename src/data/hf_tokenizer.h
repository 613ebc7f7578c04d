// A Hugging Face tokenizer.json of the byte-level BPE kind (GPT-2, GPT-NeoX, Llama 3, dolma2),
// encoding as the `tokenizers` library does without its post-processor (encode(text,
// add_special_tokens=False)): added tokens matched first (leftmost-longest; those marked
// `normalized` after normalization), then the normalizer (NFC, NFD, NFKC, NFKD), the
// pre-tokenizer (Split stages, then ByteLevel) and the BPE model. Decoding keeps special
// tokens (skip_special_tokens=False). The file is checked as strictly as `tokenizers` loads it
// (hf_tokenizer_json.h); anything else is a TokenizerError naming the file and the key.
// A TokenizerBackend (tokenizer_backend.h): Tokenizer (normlab/data/tokenizer.h) is the
// interface. Internal to src/data.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer_backend.h"

namespace normlab::hf {

class HfTokenizer final : public TokenizerBackend {
 public:
  /// `json`: the contents of the file `path`. The end-of-text and beginning-of-text tokens are
  /// the eos_token and bos_token of a tokenizer_config.json beside it, else the first added
  /// token among <|endoftext|>, <|end_of_text|>, </s>, <eos> (<|begin_of_text|>, <s>, <bos>).
  HfTokenizer(const std::string& path, const std::string& json);
  ~HfTokenizer() override;

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  std::string piece(int32_t id) const override;  // the token's string, "" for an unused id
  int64_t vocab_size() const override;           // the largest id + 1
  int32_t eos_id() const override;               // a TokenizerError when none is known
  int32_t bos_id() const override;               // -1 when none is known
  std::vector<int32_t> token_byte_lengths() const override;  // special tokens count 0
  bool splits_at_whitespace() const override { return false; }
  bool is_tokenizer_json() const override { return true; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace normlab::hf

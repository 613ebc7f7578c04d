// One kind of tokenizer file behind Tokenizer (normlab/data/tokenizer.h): a SentencePiece model
// (sentencepiece_tokenizer.h) or a Hugging Face tokenizer.json (hf_tokenizer.h). Tokenizer owns
// one, chosen by the file, and adds what every kind shares: the path and the file's checksum.
// Adding a kind is one implementation of this interface and its case in Tokenizer's
// constructor. Internal to src/data.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace normlab {

class TokenizerBackend {
 public:
  virtual ~TokenizerBackend() = default;

  /// As Tokenizer's (normlab/data/tokenizer.h); errors are TokenizerErrors naming the file.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  virtual std::string piece(int32_t id) const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int32_t eos_id() const = 0;
  virtual int32_t bos_id() const = 0;
  virtual std::vector<int32_t> token_byte_lengths() const = 0;
  virtual bool splits_at_whitespace() const = 0;
  virtual bool is_tokenizer_json() const = 0;
};

}  // namespace normlab

// Tokenizer: a SentencePiece model (BPE or unigram, byte fallback on) and its training, or a
// Hugging Face tokenizer.json of the byte-level BPE kind (GPT-2, GPT-NeoX, Llama 3, dolma2),
// which encodes as the `tokenizers` library does (docs/data.md). The file chooses: a name
// ending in .json, or JSON contents, is a tokenizer.json.
//
// Special tokens of models trained by normlab: <unk> = 0, <s> (BOS) = 1, </s> (EOS) = 2, no
// padding token; with byte fallback the 256 byte pieces <0x00>..<0xFF> follow, so any UTF-8
// text encodes without <unk>. Documents are separated by EOS in the token shards.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "normlab/util/error.h"

namespace normlab {

class OutputFiles;  // util/output_contract.h

class TokenizerError : public DataError {
 public:
  using DataError::DataError;
};

enum class TokenizerModel { Bpe, Unigram };

struct TokenizerTrainOptions {
  std::vector<std::string> inputs;  // files or globs: .txt, .jsonl (with .gz), as data prepare
  std::string text_field = "text";  // the JSONL field holding the text
  int64_t vocab_size = 4096;
  TokenizerModel model = TokenizerModel::Bpe;
  std::string out_dir;  // gets tokenizer.model and tokenizer.vocab
  int threads = 2;
  double character_coverage = 0.9995;
  int64_t max_sentences = 2'000'000;  // sentences sampled for training (0 = all)
  uint64_t seed = 0;
  /// The command's output contract for out_dir (util/output_contract.h), or none: its earlier
  /// tokenizer is kept as NAME.prev before the new files go in, and they are recorded.
  OutputFiles* contract = nullptr;
};

/// The smallest vocabulary with byte fallback: 3 special pieces, 256 byte pieces, and a piece
/// for each character that covers the text (SentencePiece keeps them whole), the word boundary
/// U+2581 and at least one more. A text of C such characters needs 259 + C.
inline constexpr int64_t kMinVocabSize = 261;

/// Trains a model on the documents of `inputs` (one training sentence per line) and writes
/// out_dir/tokenizer.model and tokenizer.vocab atomically, beside whatever else out_dir holds.
/// A vocab_size below the text's minimum is a TokenizerError stating that minimum; an out_dir
/// that check_output_path refuses (util/output_contract.h) is a FileError, and one holding the
/// tokenizer.model that token shards were prepared with (an index.json in it or in a folder
/// inside it names that file) a TokenizerError, before any work. Returns the model path.
std::string tokenizer_train(const TokenizerTrainOptions& options);

class Tokenizer {
 public:
  /// Loads a SentencePiece .model file or a tokenizer.json; throws TokenizerError naming it
  /// (for a tokenizer.json, also the component normlab does not read).
  explicit Tokenizer(const std::string& model_path);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  /// Token ids of `text` (a whole document). Thread-safe. Text that is not valid UTF-8 is
  /// refused (InputError naming the offset of its first bad byte), with either model.
  std::vector<int32_t> encode(std::string_view text) const;
  std::string decode(const std::vector<int32_t>& ids) const;
  std::string piece(int32_t id) const;

  int64_t vocab_size() const;
  /// A tokenizer.json's: from tokenizer_config.json or a known name (docs/data.md); a
  /// TokenizerError when it has none.
  int32_t eos_id() const;
  int32_t bos_id() const;
  /// For every id, the UTF-8 bytes it stands for in text: a byte piece <0xNN> is 1, the word
  /// marker U+2581 counts as the one space it replaces, control pieces (<unk>, <s>, </s>) 0.
  std::vector<int32_t> token_byte_lengths() const;
  /// CRC-32 of the model file: the identity recorded in shard indexes.
  uint32_t checksum() const;
  const std::string& path() const;
  /// A Hugging Face tokenizer.json (else a SentencePiece model).
  bool is_tokenizer_json() const;

  /// True when encoding a document equals concatenating the encodings of its
  /// whitespace-separated words (the model splits at whitespace, adds the dummy prefix and
  /// collapses whitespace), which lets data prepare cache word encodings.
  bool splits_at_whitespace() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace normlab

// `normlab data prepare`: documents -> tokens (each document followed by EOS) -> shards of a
// train and a validation split, plus index.json (shard.h).
//
// Work is split into chunks of whole documents of a fixed size, encoded by `threads` workers
// and written in input order, so the output is byte-identical for any thread count. A document
// goes to the validation split when a hash of its text falls below val_fraction (stable under
// reordering and thread count). Everything is written into a temporary folder that is renamed
// into place at the end: a failed run leaves no shard behind.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace normlab {

struct PrepareProgress {
  uint64_t bytes_read = 0;
  uint64_t bytes_total = 0;
  uint64_t documents = 0;
  uint64_t tokens = 0;
  double seconds = 0.0;
};

struct PrepareOptions {
  std::string tokenizer;            // SentencePiece model
  std::vector<std::string> inputs;  // files or globs (text_input.h formats)
  std::string out_dir;
  double val_fraction = 0.005;
  int threads = 2;
  std::string text_field = "text";
  uint64_t shard_tokens = 100'000'000;  // tokens per shard file
  bool overwrite = false;               // replace an existing, non-empty out_dir
  bool word_cache = true;  // reuse word encodings when exact (Tokenizer::splits_at_whitespace)
  std::function<void(const PrepareProgress&)> progress;  // called from the calling thread
};

struct PrepareSummary {
  uint64_t documents[2] = {0, 0};  // train, val
  uint64_t tokens[2] = {0, 0};
  uint64_t shards[2] = {0, 0};
  uint64_t bytes = 0;
  double seconds = 0.0;
  bool word_cache = false;  // whether the word cache was used
};

PrepareSummary data_prepare(const PrepareOptions& options);

/// The split a document belongs to: true for validation.
bool is_validation_document(const std::string& text, double val_fraction);

}  // namespace normlab

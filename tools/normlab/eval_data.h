// The tokens `normlab eval --data` and `normlab analyze --data` read: a shard folder (one of
// its splits), a flat token array or a Megatron dataset (--format, --dtype), as data.val takes
// them (docs/data.md).
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "normlab/data/loader.h"

namespace normlab::cli {

/// --format (shards, tokens, megatron) and --dtype on `sub`.
void add_data_format_options(CLI::App& sub, std::string& format, std::string& dtype);

/// Opens `path` for evaluation: a shard folder's `split` (its vocabulary checked against the
/// model's and, when `tokenizer` is given, its tokenizer), or a token array or Megatron
/// dataset whole (every id checked against model_vocab_size). At least one sample of seq_len.
std::shared_ptr<TokenDataset> open_eval_data(const std::string& path, const std::string& format,
                                             const std::string& dtype, const std::string& split,
                                             int64_t seq_len, int64_t model_vocab_size,
                                             const std::string& tokenizer);

}  // namespace normlab::cli

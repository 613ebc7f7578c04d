// The tokens `normlab eval --data` and `normlab analyze --data` read: a shard folder (one of
// its splits), a flat token array or a Megatron dataset (--format, --dtype), as data.val takes
// them (docs/data.md).
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "normlab/data/loader.h"

namespace normlab::cli {

/// --format (a DataFormat by its name) on `sub`, with `help`.
void add_format_option(CLI::App& sub, DataFormat& format, const std::string& help);

/// --format and --dtype on `sub`, for --data.
void add_data_format_options(CLI::App& sub, DataFormat& format, std::string& dtype);

/// Opens `path` for evaluation: a shard folder's `split` (its vocabulary checked against the
/// model's and, when `tokenizer` is given, its tokenizer), or a token array or Megatron
/// dataset whole (every id checked against model_vocab_size). At least one sample of seq_len.
std::shared_ptr<TokenDataset> open_eval_data(const std::string& path, DataFormat format,
                                             const std::string& dtype, const std::string& split,
                                             int64_t seq_len, int64_t model_vocab_size,
                                             const std::string& tokenizer);

}  // namespace normlab::cli

// The formats a TokenDataset opens (DataFormat, normlab/data/source.h), private to src/data/.
// Each format is one file with two free functions: a check of the dtype a source gives, and an
// opener that maps the source's files as token arrays. token_format() is the table from the
// enum to them. Adding a format: its file, its DataFormat row and its row in token_format.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "normlab/data/shard.h"
#include "normlab/data/source.h"
#include "normlab/data/token_array.h"

namespace normlab {

/// What opening a source yields: its token arrays, in order.
struct OpenedTokens {
  std::vector<TokenArray> arrays;
  /// A shard folder's index; for the other formats only dtype, vocab_size (the model's) and
  /// eos_id are set.
  ShardIndex index;
  int64_t documents = -1;     // -1: unknown
  int64_t checked_vocab = 0;  // > 0: every sample read is checked against it
  std::string what;           // names the tokens in errors: "DIR: split 'train'", a path
};

struct TokenFormat {
  /// "" when the format takes `dtype` ("" = not given), else why not, naming the dtypes it takes.
  std::string (*dtype_error)(const std::string& dtype);
  /// Opens `source` (its fields already checked by source_error). `split`: a shard folder's
  /// split; `model_vocab_size` > 0: ids are checked against it. Errors name the file.
  OpenedTokens (*open)(const DataSource& source, const std::string& split,
                       int64_t model_vocab_size);
};

const TokenFormat& token_format(DataFormat format);

/// For formats without a vocabulary of their own: the model's vocabulary must be given and
/// hold the source's eos. Returns an OpenedTokens whose index carries them.
OpenedTokens opened_with_model_vocab(const DataSource& source, int64_t model_vocab_size);

/// Throws ShardError naming `dir` when the shards' vocabulary exceeds the model's.
void check_shard_vocab_size(const ShardIndex& index, const std::string& dir,
                            int64_t model_vocab_size);
std::string shards_dtype_error(const std::string& dtype);
OpenedTokens open_shards(const DataSource& source, const std::string& split,
                         int64_t model_vocab_size);

std::string tokens_dtype_error(const std::string& dtype);
OpenedTokens open_token_arrays(const DataSource& source, const std::string& split,
                               int64_t model_vocab_size);

std::string megatron_dtype_error(const std::string& dtype);
OpenedTokens open_megatron(const DataSource& source, const std::string& split,
                           int64_t model_vocab_size);

}  // namespace normlab

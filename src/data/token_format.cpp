#include "data/token_format.h"

#include "normlab/util/error.h"

namespace normlab {

const TokenFormat& token_format(DataFormat format) {
  static constexpr TokenFormat kShards{shards_dtype_error, open_shards};
  static constexpr TokenFormat kTokens{tokens_dtype_error, open_token_arrays};
  static constexpr TokenFormat kMegatron{megatron_dtype_error, open_megatron};
  switch (format) {
    case DataFormat::Shards: return kShards;
    case DataFormat::Tokens: return kTokens;
    case DataFormat::Megatron: return kMegatron;
  }
  throw DataError("data format " + std::to_string(static_cast<int>(format)) + " has no reader");
}

OpenedTokens opened_with_model_vocab(const DataSource& source, int64_t model_vocab_size) {
  if (model_vocab_size < 1)
    throw DataError(source.path + ": a " + std::string(enum_name(source.format)) +
                    " source needs the model's vocabulary size to check its ids");
  if (source.eos >= model_vocab_size)
    throw DataError(source.path + ": eos " + std::to_string(source.eos) +
                    " is outside the vocabulary of " + std::to_string(model_vocab_size) +
                    " (model.vocab_size)");
  OpenedTokens out;
  out.checked_vocab = model_vocab_size;
  out.index.vocab_size = static_cast<uint64_t>(model_vocab_size);
  out.index.eos_id = source.eos;
  return out;
}

}  // namespace normlab

#include "eval_data.h"

#include <stdexcept>

#include "normlab/data/shard.h"
#include "normlab/data/source.h"

namespace normlab::cli {

void add_data_format_options(CLI::App& sub, std::string& format, std::string& dtype) {
  sub.add_option("--format", format,
                 "--data is a shard folder, a flat token array (tokens: a file or glob) or a "
                 "Megatron dataset (megatron: the .bin/.idx prefix)")
      ->check(CLI::IsMember({"shards", "tokens", "megatron"}))
      ->capture_default_str();
  sub.add_option("--dtype", dtype, "tokens: uint16 or uint32 (megatron: read from the .idx)");
}

std::shared_ptr<TokenDataset> open_eval_data(const std::string& path, const std::string& format,
                                             const std::string& dtype, const std::string& split,
                                             int64_t seq_len, int64_t model_vocab_size,
                                             const std::string& tokenizer) {
  std::shared_ptr<TokenDataset> data;
  if (format == "shards") {
    const ShardIndex index = shard_index_read(path);
    if (!index.splits.count(split))
      throw std::invalid_argument(path + ": no split '" + split + "'");
    check_vocabulary(index, path, model_vocab_size, tokenizer);
    data = std::make_shared<TokenDataset>(path, split, seq_len);
  } else {
    data = std::make_shared<TokenDataset>(DataSource(path, format, dtype), split, seq_len,
                                          model_vocab_size);
  }
  if (data->num_samples() < 1)
    throw std::invalid_argument(path + (format == "shards" ? ": split '" + split + "'" : "") +
                                " holds less than one sequence of " + std::to_string(seq_len + 1) +
                                " tokens");
  return data;
}

}  // namespace normlab::cli

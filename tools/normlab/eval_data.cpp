#include "eval_data.h"

#include <stdexcept>

#include "normlab/data/source.h"

namespace normlab::cli {

void add_format_option(CLI::App& sub, DataFormat& format, const std::string& help) {
  // The name table is the one check: an unknown name is CLI11's usage error, with the names.
  sub.add_option_function<std::string>(
         "--format",
         [&format](const std::string& name) {
           try {
             format = enum_from_name<DataFormat>(name, "data format");
           } catch (const std::invalid_argument& e) {
             throw CLI::ValidationError("--format", e.what());
           }
         },
         help)
      ->default_str(std::string(enum_name(format)));
}

void add_data_format_options(CLI::App& sub, DataFormat& format, std::string& dtype) {
  add_format_option(sub, format,
                    "--data is a shard folder, a flat token array (tokens: a file or glob) or a "
                    "Megatron dataset (megatron: the .bin/.idx prefix)");
  sub.add_option("--dtype", dtype, "tokens: uint16 or uint32 (megatron: read from the .idx)");
}

std::shared_ptr<TokenDataset> open_eval_data(const std::string& path, DataFormat format,
                                             const std::string& dtype, const std::string& split,
                                             int64_t seq_len, int64_t model_vocab_size,
                                             const std::string& tokenizer) {
  // TokenDataset checks the split, the vocabulary and that one sequence fits, naming the path.
  auto data = std::make_shared<TokenDataset>(DataSource(path, format, dtype), split, seq_len,
                                             model_vocab_size);
  if (format == DataFormat::Shards)  // the tokenizer the shards were prepared with
    check_vocabulary(data->index(), path, model_vocab_size, tokenizer);
  return data;
}

}  // namespace normlab::cli

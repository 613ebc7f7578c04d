// A source of training tokens as a run names it: a folder of normlab shards, a flat array of
// token ids (nanoGPT's train.bin, OLMo's memory-mapped arrays) or a Megatron indexed dataset
// (.bin and .idx), with its weight when several sources form a mixture. Plain data: the
// config layer reads it from YAML (data.train, data.val), TokenDataset opens it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "normlab/util/name_table.h"

namespace normlab {

/// How a source's files hold their tokens. Each format is one file of src/data/ (format_*.cpp)
/// and one row of its table (src/data/token_format.cpp).
enum class DataFormat {
  Shards,    // a folder of normlab shards with its index.json (normlab data prepare)
  Tokens,    // flat token arrays: raw (nanoGPT's .bin, OLMo's memmaps) or .npy
  Megatron,  // a Megatron indexed dataset, PREFIX.bin and PREFIX.idx
};
template <>
struct EnumNames<DataFormat> {
  static constexpr NameRow<DataFormat> rows[] = {{DataFormat::Shards, "shards"},
                                                 {DataFormat::Tokens, "tokens"},
                                                 {DataFormat::Megatron, "megatron"}};
};

struct DataSource {
  DataSource() = default;
  DataSource(std::string path_, DataFormat format_ = DataFormat::Shards, std::string dtype_ = "",
             int64_t eos_ = -1, double weight_ = 1.0, bool verify_ = true)
      : path(std::move(path_)),
        format(format_),
        dtype(std::move(dtype_)),
        eos(eos_),
        weight(weight_),
        verify(verify_) {}

  std::string path;  // shards: folder; tokens: file or glob; megatron: prefix
  DataFormat format = DataFormat::Shards;
  std::string dtype;  // tokens: uint16, uint32, int32, int64 (a .npy's header says); megatron: .idx
  int64_t eos = -1;   // the end-of-document id, -1: not given
  double weight = 1.0;  // share of a mixture's samples (normalised over the sources)
  bool verify = true;   // check every token id (shards: every CRC) when opening
};

/// Checks one source's fields (the dtype its format takes, a positive finite weight, a
/// non-negative eos); returns an error message naming the field, or "".
std::string source_error(const DataSource& source);

/// Whether the source is a plain shard folder with every other field at its default (then
/// the configuration writes it as just its path).
bool is_plain_folder(const DataSource& source);

}  // namespace normlab

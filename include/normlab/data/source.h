// A source of training tokens as a run names it: a folder of normlab shards, a flat array of
// token ids (nanoGPT's train.bin, OLMo's memory-mapped arrays) or a Megatron indexed dataset
// (.bin and .idx), with its weight when several sources form a mixture. Plain data: the
// config layer reads it from YAML (data.train, data.val), TokenDataset opens it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace normlab {

struct DataSource {
  DataSource() = default;
  DataSource(std::string path_, std::string format_ = "shards", std::string dtype_ = "",
             int64_t eos_ = -1, double weight_ = 1.0, bool verify_ = true)
      : path(std::move(path_)),
        format(std::move(format_)),
        dtype(std::move(dtype_)),
        eos(eos_),
        weight(weight_),
        verify(verify_) {}

  std::string path;               // shards: folder; tokens: file or glob; megatron: prefix
  std::string format = "shards";  // shards, tokens or megatron
  std::string dtype;  // tokens: uint16, uint32, int32, int64 (a .npy's header says); megatron: .idx
  int64_t eos = -1;   // the end-of-document id, -1: not given
  double weight = 1.0;  // share of a mixture's samples (normalised over the sources)
  bool verify = true;   // check every token id (shards: every CRC) when opening
};

/// Checks one source's fields (a known format, the dtype a format needs, a positive finite
/// weight, a non-negative eos); returns an error message naming the field, or "".
std::string source_error(const DataSource& source);

/// Whether the source is a plain shard folder with every other field at its default (then
/// the configuration writes it as just its path).
bool is_plain_folder(const DataSource& source);

/// One line describing a list of sources: the path of a plain folder, else YAML flow text
/// ({path: ..., format: ...} or a list of them). Empty for an empty list.
std::string sources_text(const std::vector<DataSource>& sources);

}  // namespace normlab

// DataFormat::Shards: a folder written by `normlab data prepare`, one split of it, each shard's
// header checked against index.json (and, with source.verify, its CRC-32 and every token id
// against the shards' vocabulary).
#include <filesystem>
#include <memory>

#include "data/token_format.h"

namespace normlab {

void check_shard_vocab_size(const ShardIndex& index, const std::string& dir,
                            int64_t model_vocab_size) {
  if (static_cast<int64_t>(index.vocab_size) > model_vocab_size)
    throw ShardError(dir + ": the shards use a tokenizer of " + std::to_string(index.vocab_size) +
                     " pieces, more than model.vocab_size = " + std::to_string(model_vocab_size));
}

std::string shards_dtype_error(const std::string& dtype) {
  return dtype.empty() ? "" : "a shard folder records its own dtype; leave dtype out";
}

OpenedTokens open_shards(const DataSource& source, const std::string& split,
                         int64_t model_vocab_size) {
  const std::string& dir = source.path;
  OpenedTokens out;
  out.index = shard_index_read(dir);
  const auto it = out.index.splits.find(split);
  if (it == out.index.splits.end()) throw ShardError(dir + "/index.json: no split '" + split + "'");
  if (model_vocab_size > 0) check_shard_vocab_size(out.index, dir, model_vocab_size);
  for (const ShardEntry& e : it->second.shards) {
    const std::string path = (std::filesystem::path(dir) / e.file).string();
    auto f = std::make_shared<ShardFile>(path);
    if (f->header().tokens != e.tokens || f->header().crc32 != e.crc32 ||
        f->header().token_bytes != out.index.token_bytes ||
        f->header().vocab_size != out.index.vocab_size)
      throw ShardError(path +
                       ": does not match index.json (token count, checksum, width or vocabulary)");
    if (source.verify) f->verify();
    const char* payload = f->payload();
    out.arrays.emplace_back(f, payload, e.tokens,
                            out.index.token_bytes == 2 ? TokenType::U16 : TokenType::U32, path,
                            kShardHeaderBytes);
    // Every id inside the shards' own vocabulary, at open (with the checksums): an id past it
    // in a shard whose checksum matches (written by another tool, or edited and re-summed)
    // would stop a run hours in, at the step that reads it, far from its file and offset.
    if (source.verify && out.index.vocab_size > 0)
      out.arrays.back().check(static_cast<int64_t>(out.index.vocab_size), -1,
                              "the shards' vocabulary, index.json's vocab_size");
  }
  out.documents = static_cast<int64_t>(it->second.documents);
  out.what = dir + ": split '" + split + "'";
  return out;
}

}  // namespace normlab

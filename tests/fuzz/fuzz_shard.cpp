// Fuzz target: the token shard header and the shard index (shard.h), which the loader reads
// before it maps any tokens. Each input goes through both readers: each either rejects it with
// ShardError or returns a header that fits the input's size and an index whose splits add up
// and whose shard names stay inside the index's folder.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "normlab/data/shard.h"
#include "normlab/util/file_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace normlab;
  const char* bytes = reinterpret_cast<const char*>(data);
  try {
    const ShardHeader h = shard_header_parse(bytes, size, "<fuzz input>");
    if ((h.token_bytes != 2 && h.token_bytes != 4) ||
        kShardHeaderBytes + h.tokens * h.token_bytes != size)
      std::abort();
    (void)crc32_of(bytes + kShardHeaderBytes, size - kShardHeaderBytes);  // what verify() reads
  } catch (const ShardError&) {
  }
  try {
    const ShardIndex idx = shard_index_parse(std::string(bytes, size), "<fuzz input>");
    if (idx.token_bytes != 2 && idx.token_bytes != 4) std::abort();
    for (const auto& [name, split] : idx.splits) {
      uint64_t sum = 0;
      for (const ShardEntry& e : split.shards) {
        if (e.file.empty() || e.file == ".." || e.file.find('/') != std::string::npos) std::abort();
        sum += e.tokens;
      }
      if (sum != split.tokens) std::abort();
    }
  } catch (const ShardError&) {
  }
  return 0;
}

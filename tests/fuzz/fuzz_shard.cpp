// Fuzz target: the token shard header and the shard index (shard.h), which the loader reads
// before it maps any tokens, and a Megatron index (megatron_index.h). Each input goes through
// all three readers: each either rejects it (ShardError, DataError) or returns a header that
// fits the input's size, an index whose splits add up and whose shard names stay inside the
// index's folder, and a Megatron index whose counts fill the input and its data file exactly.
// A NumPy .npy header (npy.h) too: accepted, its array fills the rest of the input exactly, at
// an offset aligned to its ids.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "normlab/data/megatron_index.h"
#include "normlab/data/npy.h"
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
  // The data file's size: the input's last 8 bytes read as a count of bytes (any value).
  uint64_t bin_bytes = 0;
  if (size >= 8) std::memcpy(&bin_bytes, bytes + size - 8, 8);
  for (const uint64_t bin : {bin_bytes, uint64_t{size}}) {
    try {
      const MegatronIndex m = megatron_index_parse(bytes, size, "<fuzz>.idx", bin, "<fuzz>.bin");
      if (m.tokens * m.token_bytes != bin || 34 + 12 * m.sequences + 8 * (m.documents + 1) != size)
        std::abort();
    } catch (const DataError&) {
    }
  }
  try {
    const NpyHeader h = npy_parse_header(bytes, size, "<fuzz>.npy");
    const uint64_t width = token_type_bytes(h.type);
    if (h.data_offset % width != 0 || h.data_offset + h.elements * width != size) std::abort();
  } catch (const DataError&) {
  }
  return 0;
}

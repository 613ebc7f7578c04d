// Token shards: the binary files written by `normlab data prepare` and read by the loader.
//
// A shard is a 64-byte little-endian header followed by the tokens:
//   0  char[8] magic "NLSHARD\0"      16 u64 token count
//   8  u32 format version (1)         24 u32 CRC-32 (zlib) of the token bytes, 28 u32 zero
//   12 u32 bytes per token (2 or 4)   32 u64 vocabulary size, 40..63 zero
// Tokens are uint16 when the vocabulary fits (<= 65536), else uint32. A folder of shards has an
// index.json naming, per split ("train", "val"), its shard files with their token counts and
// CRCs, plus the tokenizer's identity (file CRC-32, vocabulary size, EOS id).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "normlab/util/error.h"
#include "normlab/util/file_io.h"

namespace normlab {

class ShardError : public DataError {
 public:
  using DataError::DataError;
};

constexpr uint32_t kShardVersion = 1;
constexpr size_t kShardHeaderBytes = 64;

struct ShardHeader {
  uint32_t version = kShardVersion;
  uint32_t token_bytes = 2;
  uint64_t tokens = 0;
  uint32_t crc32 = 0;
  uint64_t vocab_size = 0;
};

/// Parses and checks a shard header against the file size; ShardError names `path`.
ShardHeader shard_header_parse(const char* data, size_t size, const std::string& path);

/// Writes one shard: tokens are appended, the header is completed by finish().
class ShardWriter {
 public:
  ShardWriter(const std::string& path, uint32_t token_bytes, uint64_t vocab_size);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  void append(const int32_t* ids, size_t n);
  /// Completes the header, fsyncs and closes; returns the final header.
  ShardHeader finish();
  uint64_t tokens() const { return header_.tokens; }

 private:
  std::string path_;
  int fd_ = -1;
  ShardHeader header_;
  std::vector<char> buffer_;
};

/// A memory-mapped shard whose header has been checked.
class ShardFile {
 public:
  explicit ShardFile(const std::string& path);
  const ShardHeader& header() const { return header_; }
  const std::string& path() const { return file_.path(); }
  /// The first token's bytes (inside the mapping, which moves with the object).
  const char* payload() const { return payload_; }
  /// Token i as an integer.
  uint32_t token(uint64_t i) const {
    const char* p = payload_ + i * header_.token_bytes;
    return header_.token_bytes == 2 ? *reinterpret_cast<const uint16_t*>(p)
                                    : *reinterpret_cast<const uint32_t*>(p);
  }
  /// Copies tokens [begin, begin + n) into out as int64.
  void copy(uint64_t begin, uint64_t n, int64_t* out) const;
  /// Recomputes the CRC-32 of the tokens; throws ShardError when it differs from the header.
  void verify() const;

 private:
  MappedFile file_;
  ShardHeader header_;
  const char* payload_ = nullptr;
};

struct ShardEntry {
  std::string file;  // relative to the index's folder
  uint64_t tokens = 0;
  uint32_t crc32 = 0;
};

struct SplitIndex {
  uint64_t documents = 0;
  uint64_t tokens = 0;
  std::vector<ShardEntry> shards;
};

struct ShardIndex {
  uint32_t token_bytes = 2;
  uint64_t vocab_size = 0;
  int64_t eos_id = -1;
  uint32_t tokenizer_crc32 = 0;
  std::string tokenizer_file;
  std::vector<std::string> inputs;
  double val_fraction = 0.0;
  std::map<std::string, SplitIndex> splits;  // "train", "val"
};

void shard_index_write(const std::string& dir, const ShardIndex& index);
/// Reads dir/index.json; ShardError names the file and the defect.
ShardIndex shard_index_read(const std::string& dir);
/// Parses an index's text; `path` names it in errors. Shard names must be plain file names
/// (no folders, no ".."), and each split's token count the sum of its shards'.
ShardIndex shard_index_parse(const std::string& text, const std::string& path);

}  // namespace normlab

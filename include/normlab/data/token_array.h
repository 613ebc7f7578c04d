// A run of token ids inside a memory-mapped file, read in place (no copy of the file): a shard's
// payload, a flat token file, a Megatron .bin. Ids are unsigned 16- or 32-bit or signed 32- or
// 64-bit little-endian integers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace normlab {

enum class TokenType { U16, U32, I32, I64 };

/// "uint16", "uint32", "int32", "int64".
const char* token_type_name(TokenType type);
/// The type named `name` (as token_type_name writes it); false for any other name.
bool token_type_from_name(const std::string& name, TokenType& type);
uint32_t token_type_bytes(TokenType type);

class TokenArray {
 public:
  /// `data` points at `tokens` ids inside a mapping that `owner` keeps alive; `byte_offset` is
  /// where they start in the file `path` (for error messages).
  TokenArray(std::shared_ptr<const void> owner, const char* data, uint64_t tokens, TokenType type,
             std::string path, uint64_t byte_offset);

  uint64_t size() const { return tokens_; }
  TokenType type() const { return type_; }
  const std::string& path() const { return path_; }
  /// Id i as a signed integer.
  int64_t at(uint64_t i) const;
  /// Copies ids [begin, begin + n) into out; with vocab_size > 0, an id outside
  /// [0, vocab_size) is a DataError naming the file and the id's offset.
  void copy(uint64_t begin, uint64_t n, int64_t* out, int64_t vocab_size = 0) const;
  /// Checks every id against [0, vocab_size) (DataError naming the file and the first bad
  /// id's offset); returns how many ids equal `count_id` (documents when it is EOS, -1: none).
  /// `bound` names where vocab_size comes from in the message.
  uint64_t check(int64_t vocab_size, int64_t count_id = -1,
                 const char* bound = "model.vocab_size") const;

 private:
  [[noreturn]] void bad_id(uint64_t i, int64_t vocab_size,
                           const char* bound = "model.vocab_size") const;

  std::shared_ptr<const void> owner_;
  const char* data_;
  uint64_t tokens_;
  TokenType type_;
  std::string path_;
  uint64_t byte_offset_;
};

}  // namespace normlab

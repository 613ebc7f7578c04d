#include "normlab/data/token_array.h"

#include <algorithm>
#include <cstring>

#include "normlab/util/error.h"

namespace normlab {
namespace {

template <class T>
const T* token_as(const char* p) {
  return reinterpret_cast<const T*>(p);  // mappings and payloads are aligned to their width
}

// Calls f(ids, n) with the array's ids as their own type.
template <class F>
void with_token_ids(TokenType type, const char* data, uint64_t begin, uint64_t n, F&& f) {
  switch (type) {
    case TokenType::U16: f(token_as<uint16_t>(data) + begin, n); break;
    case TokenType::U32: f(token_as<uint32_t>(data) + begin, n); break;
    case TokenType::I32: f(token_as<int32_t>(data) + begin, n); break;
    case TokenType::I64: f(token_as<int64_t>(data) + begin, n); break;
  }
}

}  // namespace

const char* token_type_name(TokenType t) {
  switch (t) {
    case TokenType::U16: return "uint16";
    case TokenType::U32: return "uint32";
    case TokenType::I32: return "int32";
    case TokenType::I64: return "int64";
  }
  return "?";
}

bool token_type_from_name(const std::string& name, TokenType& type) {
  for (const TokenType t : {TokenType::U16, TokenType::U32, TokenType::I32, TokenType::I64})
    if (name == token_type_name(t)) {
      type = t;
      return true;
    }
  return false;
}

uint32_t token_type_bytes(TokenType t) {
  return t == TokenType::U16 ? 2 : t == TokenType::I64 ? 8 : 4;
}

TokenArray::TokenArray(std::shared_ptr<const void> owner, const char* data, uint64_t tokens,
                       TokenType type, std::string path, uint64_t byte_offset)
    : owner_(std::move(owner)),
      data_(data),
      tokens_(tokens),
      type_(type),
      path_(std::move(path)),
      byte_offset_(byte_offset) {}

int64_t TokenArray::at(uint64_t i) const {
  int64_t v = 0;
  with_token_ids(type_, data_, i, 1,
                 [&](const auto* p, uint64_t) { v = static_cast<int64_t>(*p); });
  return v;
}

void TokenArray::bad_id(uint64_t i, int64_t vocab_size, const char* bound) const {
  const int64_t v = at(i);
  std::string msg = path_ + ": token id " + std::to_string(v) + " at offset " + std::to_string(i) +
                    " (byte " + std::to_string(byte_offset_ + i * token_type_bytes(type_)) + ") " +
                    (v < 0 ? "is negative; ids are 0 to " + std::to_string(vocab_size - 1)
                           : "is outside the vocabulary of " + std::to_string(vocab_size)) +
                    " (" + bound + ")";
  if (type_ == TokenType::U32 && v > 65535)
    msg += "; ids of a uint16 file read as uint32 look like this: is its dtype uint16?";
  throw DataError(msg);
}

void TokenArray::copy(uint64_t begin, uint64_t n, int64_t* out, int64_t vocab_size) const {
  bool ok = true;
  with_token_ids(type_, data_, begin, n, [&](const auto* p, uint64_t m) {
    for (uint64_t i = 0; i < m; ++i) {
      out[i] = static_cast<int64_t>(p[i]);
      ok &= out[i] >= 0 && (vocab_size <= 0 || out[i] < vocab_size);
    }
  });
  if (ok) return;
  for (uint64_t i = 0; i < n; ++i)
    if (out[i] < 0 || (vocab_size > 0 && out[i] >= vocab_size)) bad_id(begin + i, vocab_size);
}

uint64_t TokenArray::check(int64_t vocab_size, int64_t count_id, const char* bound) const {
  uint64_t count = 0;
  constexpr uint64_t kBlock = 1 << 16;
  for (uint64_t b = 0; b < tokens_; b += kBlock) {
    const uint64_t n = std::min(kBlock, tokens_ - b);
    bool ok = true;
    with_token_ids(type_, data_, b, n, [&](const auto* p, uint64_t m) {
      for (uint64_t i = 0; i < m; ++i) {
        const auto v = static_cast<int64_t>(p[i]);
        ok &= v >= 0 && v < vocab_size;
        count += v == count_id;
      }
    });
    if (!ok)
      for (uint64_t i = b; i < b + n; ++i)
        if (at(i) < 0 || at(i) >= vocab_size) bad_id(i, vocab_size, bound);
  }
  return count;
}

}  // namespace normlab

#include "normlab/data/megatron_index.h"

#include <cstring>

#include "normlab/util/error.h"

namespace normlab {
namespace {

constexpr char kIdxMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr size_t kIdxHeaderBytes = 9 + 8 + 1 + 8 + 8;  // magic, version, dtype, S, D

template <class T>
T idx_get(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);  // little-endian hosts only, as the files
  return v;
}

}  // namespace

std::string megatron_dtype_name(uint8_t code) {
  static const char* const names[] = {"",      "uint8",   "int8",    "int16", "int32",
                                      "int64", "float64", "float32", "uint16"};
  return code >= 1 && code <= 8 ? names[code] : "code " + std::to_string(code);
}

MegatronIndex megatron_index_parse(const char* data, size_t size, const std::string& path,
                                   uint64_t bin_bytes, const std::string& bin_path) {
  auto fail = [&](const std::string& msg) -> DataError { return DataError(path + ": " + msg); };
  if (size < kIdxHeaderBytes || std::memcmp(data, kIdxMagic, 9) != 0)
    throw fail("not a Megatron index (no MMIDIDX header)");
  const auto version = idx_get<uint64_t>(data + 9);
  if (version != 1)
    throw fail("Megatron index version " + std::to_string(version) + ", normlab reads version 1");
  MegatronIndex idx;
  idx.dtype_code = idx_get<uint8_t>(data + 17);
  switch (idx.dtype_code) {
    case 8: idx.token_bytes = 2; break;
    case 4: idx.token_bytes = 4, idx.is_signed = true; break;
    case 5: idx.token_bytes = 8, idx.is_signed = true; break;
    default:
      throw fail("dtype " + megatron_dtype_name(idx.dtype_code) +
                 " does not hold token ids (uint16, int32 or int64)");
  }
  const auto S = idx_get<uint64_t>(data + 18), D = idx_get<uint64_t>(data + 26);
  // 4 + 8 bytes per sequence, 8 per document-index entry, 1 more per sequence if multimodal.
  const uint64_t room = size - kIdxHeaderBytes;
  if (S > room / 12 || D > (room - 12 * S) / 8)
    throw fail("announces " + std::to_string(S) + " sequences and " + std::to_string(D) +
               " document-index entries, more than its " + std::to_string(size) + " bytes hold");
  const uint64_t need = kIdxHeaderBytes + 12 * S + 8 * D;
  if (size == need + S && S > 0)
    throw fail("a multimodal dataset (sequence modes); normlab reads token datasets");
  if (size != need)
    throw fail("is " + std::to_string(size) + " bytes, its counts (" + std::to_string(S) +
               " sequences, " + std::to_string(D) + " document-index entries) need " +
               std::to_string(need) + " (truncated or corrupted)");
  const char* lengths = data + kIdxHeaderBytes;
  const char* pointers = lengths + 4 * S;
  const char* docs = pointers + 8 * S;
  uint64_t offset = 0;
  for (uint64_t i = 0; i < S; ++i) {
    const auto len = idx_get<int32_t>(lengths + 4 * i);
    const auto ptr = idx_get<int64_t>(pointers + 8 * i);
    if (len < 0) throw fail("sequence " + std::to_string(i) + " has length " + std::to_string(len));
    if (ptr < 0 || static_cast<uint64_t>(ptr) != offset)
      throw fail("the sizes do not add up: sequence " + std::to_string(i) + " starts at byte " +
                 std::to_string(ptr) + " of the .bin, its predecessors end at byte " +
                 std::to_string(offset));
    offset += static_cast<uint64_t>(len) * idx.token_bytes;
    idx.tokens += static_cast<uint64_t>(len);
  }
  if (D == 0 || idx_get<int64_t>(docs) != 0) throw fail("the document index must start at 0");
  for (uint64_t i = 1; i < D; ++i) {
    const auto a = idx_get<int64_t>(docs + 8 * (i - 1)), b = idx_get<int64_t>(docs + 8 * i);
    if (b < a || static_cast<uint64_t>(b) > S)
      throw fail("the document index is not a non-decreasing list of sequence indices up to " +
                 std::to_string(S) + " (entry " + std::to_string(i) + " = " + std::to_string(b) +
                 ")");
  }
  if (static_cast<uint64_t>(idx_get<int64_t>(docs + 8 * (D - 1))) != S)
    throw fail("the document index ends at sequence " +
               std::to_string(idx_get<int64_t>(docs + 8 * (D - 1))) +
               ", not at the sequence count " + std::to_string(S));
  idx.sequences = S;
  idx.documents = D - 1;
  if (bin_bytes != offset)
    throw DataError(bin_path + ": the sizes do not add up: " + std::to_string(bin_bytes) +
                    " bytes, the index " + path + " lays out " + std::to_string(offset) + " (" +
                    std::to_string(idx.tokens) + " " + megatron_dtype_name(idx.dtype_code) +
                    " tokens)");
  return idx;
}

}  // namespace normlab

// The index (.idx) of a Megatron-LM indexed dataset, read and checked against its data file.
//
// Layout (little-endian), as Megatron-LM's indexed_dataset.py writes it:
//   char[9] "MMIDIDX\0\0", u64 version (1), u8 dtype code (1 uint8, 2 int8, 3 int16, 4 int32,
//   5 int64, 6 float64, 7 float32, 8 uint16), u64 sequence count S, u64 document-index count D,
//   then int32 lengths[S] (tokens per sequence), int64 pointers[S] (byte offset of each sequence
//   in the .bin), int64 document_index[D] (0, then the sequence index ending each document), and,
//   in a multimodal dataset only, int8 modes[S].
// The .bin holds the sequences' tokens one after another.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace normlab {

struct MegatronIndex {
  uint8_t dtype_code = 0;
  uint32_t token_bytes = 0;  // 2 (uint16), 4 (int32) or 8 (int64)
  bool is_signed = false;
  uint64_t sequences = 0;
  uint64_t documents = 0;  // document-index entries - 1
  uint64_t tokens = 0;     // sum of the sequence lengths
};

/// The name of a dtype code ("uint16"), or "code N" for an unknown one.
std::string megatron_dtype_name(uint8_t code);

/// Parses and checks an index: header, version, a token dtype (uint16, int32, int64), the file's
/// size against its counts, lengths >= 0, pointers that lay the sequences end to end from 0,
/// a document index from 0 to S that never decreases, and a data file of exactly the bytes
/// the sequences need (bin_bytes). Throws DataError naming idx_path (or bin_path) and the defect.
MegatronIndex megatron_index_parse(const char* data, size_t size, const std::string& idx_path,
                                   uint64_t bin_bytes, const std::string& bin_path);

}  // namespace normlab

// The safetensors file layout (https://github.com/huggingface/safetensors), without tensors:
//   u64 little-endian header length N | N bytes of JSON | tensor data
// JSON: {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//        "__metadata__": {"key": "value"}}, offsets relative to the data section.
// safetensors_layout_parse validates everything a reader needs before it allocates: header
// bounds and size (at most 100 MB, within the file), JSON syntax, duplicate names, known dtypes,
// shapes whose byte size matches the offsets without overflow, and offsets that tile the data
// section exactly (no gaps, overlaps or bytes past the end). Torch-free, so that the fuzz
// target (tests/fuzz/) builds it alone; safetensors.h turns a checked layout into tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "normlab/util/error.h"

namespace normlab {

/// A safetensors file that is not one (its header, its layout, a tensor's bytes).
class SafetensorsError : public CheckpointError {
 public:
  using CheckpointError::CheckpointError;
};

using StringDict = std::map<std::string, std::string>;

/// One tensor of a checked header: its bytes are data[data_start + begin, data_start + end).
struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // "F32", "BF16", ...
  uint64_t item_bytes = 0;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

struct SafetensorsLayout {
  std::vector<SafetensorsEntry> tensors;  // in name order
  StringDict metadata;
  uint64_t data_start = 0;  // 8 + header length
};

/// Bytes per element of a safetensors dtype name; 0 for a name this reader does not know.
uint64_t safetensors_dtype_bytes(const std::string& dtype);

/// Checks a whole file's bytes; throws SafetensorsError "<what>: invalid safetensors file: ...".
SafetensorsLayout safetensors_layout_parse(const char* data, size_t size, const std::string& what);

}  // namespace normlab

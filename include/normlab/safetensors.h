// safetensors reader and writer (https://github.com/huggingface/safetensors):
//   u64 little-endian header length N | N bytes of JSON | tensor data
// JSON: {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//        "__metadata__": {"key": "value"}}, offsets relative to the data section.
// The reader validates everything before allocating: header bounds and size, JSON syntax,
// duplicate names, known dtypes, shapes whose byte size matches the offsets, and offsets that
// tile the data section exactly (no gaps, overlaps or bytes past the end). The writer follows
// the reference layout (header padded with spaces to 8 bytes, tensors ordered by descending
// alignment then name) and writes atomically.
#pragma once

#include <torch/types.h>

#include <map>
#include <stdexcept>
#include <string>

namespace normlab {

using TensorDict = std::map<std::string, torch::Tensor>;
using StringDict = std::map<std::string, std::string>;

class SafetensorsError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct SafetensorsContent {
  TensorDict tensors;  // CPU tensors owning their memory
  StringDict metadata;
};

/// Writes CPU or device tensors (copied to CPU, made contiguous) to `path`.
void safetensors_save(const std::string& path, const TensorDict& tensors, const StringDict& metadata = {});

/// Reads a file; throws SafetensorsError naming the file and the defect.
SafetensorsContent safetensors_load(const std::string& path);

/// Parses an in-memory buffer; `what` names it in errors (a path, "<fuzz input>").
SafetensorsContent safetensors_parse(const char* data, size_t size, const std::string& what);

}  // namespace normlab

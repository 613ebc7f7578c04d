// safetensors reader and writer (https://github.com/huggingface/safetensors; the layout and
// its checks: safetensors_format.h). The reader validates the whole header before it
// allocates a tensor. The writer follows the reference layout (header padded with spaces to 8
// bytes, tensors ordered by descending alignment then name) and writes atomically.
#pragma once

#include <torch/types.h>

#include <map>
#include <string>

#include "normlab/util/file_io.h"
#include "normlab/util/safetensors_format.h"

namespace normlab {

using TensorDict = std::map<std::string, torch::Tensor>;

struct SafetensorsContent {
  TensorDict tensors;  // CPU tensors owning their memory
  StringDict metadata;
};

/// Writes CPU or device tensors (copied to CPU, made contiguous) to `path`; returns the
/// written file's digest. `fault` (tests only): file_io.h's WriteFault.
FileDigest safetensors_save(const std::string& path, const TensorDict& tensors,
                            const StringDict& metadata = {}, WriteFault* fault = nullptr);

/// Reads a file; throws SafetensorsError naming the file and the defect.
SafetensorsContent safetensors_load(const std::string& path);

/// Parses an in-memory buffer; `what` names it in errors (a path, "<fuzz input>").
SafetensorsContent safetensors_parse(const char* data, size_t size, const std::string& what);

}  // namespace normlab

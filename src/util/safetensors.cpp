#include "normlab/util/safetensors.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "normlab/util/file_io.h"

namespace normlab {
namespace {

using nlohmann::json;

struct DtypeRow {
  const char* name;
  torch::ScalarType type;
};
// clang-format off
constexpr DtypeRow kDtypes[] = {
  {"F64", torch::kDouble}, {"F32", torch::kFloat}, {"F16", torch::kHalf}, {"BF16", torch::kBFloat16},
  {"I64", torch::kLong},   {"I32", torch::kInt},   {"I16", torch::kShort}, {"I8", torch::kChar},
  {"U8", torch::kByte},    {"BOOL", torch::kBool},
};
// clang-format on

const char* dtype_name(torch::ScalarType t) {
  for (const auto& row : kDtypes)
    if (row.type == t) return row.name;
  throw SafetensorsError(std::string("safetensors: unsupported tensor dtype ") + c10::toString(t));
}

torch::ScalarType dtype_of(const std::string& name) {
  for (const auto& row : kDtypes)
    if (name == row.name) return row.type;
  throw SafetensorsError("safetensors: no tensor type for dtype '" + name + "'");
}

}  // namespace

SafetensorsContent safetensors_parse(const char* data, size_t size, const std::string& what) {
  const SafetensorsLayout layout = safetensors_layout_parse(data, size, what);
  SafetensorsContent out;
  out.metadata = layout.metadata;
  const char* base = data + layout.data_start;
  for (const SafetensorsEntry& e : layout.tensors) {
    torch::Tensor t = torch::empty(e.shape, torch::TensorOptions().dtype(dtype_of(e.dtype)));
    if (e.end > e.begin) std::memcpy(t.data_ptr(), base + e.begin, e.end - e.begin);
    out.tensors.emplace(e.name, std::move(t));
  }
  return out;
}

SafetensorsContent safetensors_load(const std::string& path) {
  MappedFile f(path);
  return safetensors_parse(f.data(), f.size(), path);
}

FileDigest safetensors_save(const std::string& path, const TensorDict& tensors,
                            const StringDict& metadata, WriteFault* fault) {
  // Reference order: descending alignment (element size), then name.
  std::vector<std::pair<std::string, torch::Tensor>> order;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__")
      throw SafetensorsError(path + ": '__metadata__' is not a tensor name");
    order.emplace_back(name, t.detach().to(torch::kCPU).contiguous());
  }
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return a.second.element_size() > b.second.element_size();
  });

  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : order) {
    const uint64_t bytes = static_cast<uint64_t>(t.numel()) * t.element_size();
    header[name] = {{"dtype", dtype_name(t.scalar_type())},
                    {"shape", t.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');

  const auto fill = [&](FileWriter& w) {
    unsigned char len[8];
    uint64_t n = text.size();
    for (int i = 0; i < 8; ++i, n >>= 8) len[i] = static_cast<unsigned char>(n & 0xff);
    w.write(len, 8);
    w.write(text);
    for (const auto& [name, t] : order)
      if (t.numel() > 0) w.write(t.data_ptr(), static_cast<size_t>(t.numel()) * t.element_size());
  };
  return write_file_atomic(path, fill, fault);
}

}  // namespace normlab

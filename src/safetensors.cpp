#include "normlab/safetensors.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "normlab/file_io.h"

namespace normlab {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxHeader = 100'000'000;  // the reference implementation's limit

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

struct Entry {
  std::string name;
  torch::ScalarType type;
  std::vector<int64_t> shape;
  uint64_t begin, end;
};

[[noreturn]] void bad(const std::string& what, const std::string& msg) {
  throw SafetensorsError(what + ": invalid safetensors file: " + msg);
}

uint64_t as_u64(const json& v, const std::string& what, const std::string& ctx) {
  if (!v.is_number_unsigned()) bad(what, ctx + " must be a non-negative integer");
  return v.get<uint64_t>();
}

Entry parse_entry(const std::string& name, const json& v, const std::string& what) {
  const std::string ctx = "tensor '" + name + "'";
  if (!v.is_object()) bad(what, ctx + " is not an object");
  for (const auto& key : {"dtype", "shape", "data_offsets"})
    if (!v.contains(key)) bad(what, ctx + " has no '" + key + "'");
  Entry e{name, torch::kFloat, {}, 0, 0};

  if (!v["dtype"].is_string()) bad(what, ctx + ": dtype must be a string");
  const std::string dt = v["dtype"].get<std::string>();
  const auto* row = std::find_if(std::begin(kDtypes), std::end(kDtypes),
                                 [&](const DtypeRow& r) { return dt == r.name; });
  if (row == std::end(kDtypes)) bad(what, ctx + ": unsupported dtype '" + dt + "'");
  e.type = row->type;

  const json& shape = v["shape"];
  if (!shape.is_array() || shape.size() > 64) bad(what, ctx + ": shape must be an array of at most 64 dims");
  uint64_t numel = 1;
  for (const json& d : shape) {
    const uint64_t n = as_u64(d, what, ctx + " shape entry");
    if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        (n != 0 && numel > std::numeric_limits<uint64_t>::max() / n))
      bad(what, ctx + ": shape overflows");
    numel *= n;
    e.shape.push_back(static_cast<int64_t>(n));
  }
  const json& off = v["data_offsets"];
  if (!off.is_array() || off.size() != 2) bad(what, ctx + ": data_offsets must be [begin, end]");
  e.begin = as_u64(off[0], what, ctx + " data_offsets");
  e.end = as_u64(off[1], what, ctx + " data_offsets");
  if (e.end < e.begin) bad(what, ctx + ": data_offsets end < begin");
  const uint64_t item = c10::elementSize(e.type);
  if (numel > std::numeric_limits<uint64_t>::max() / item || numel * item != e.end - e.begin)
    bad(what, ctx + ": shape and dtype need a different byte size than data_offsets give (" +
                  std::to_string(e.end - e.begin) + " bytes)");
  return e;
}

}  // namespace

SafetensorsContent safetensors_parse(const char* data, size_t size, const std::string& what) {
  if (size < 8) bad(what, "file of " + std::to_string(size) + " bytes has no 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(data[i]);
  if (n > kMaxHeader) bad(what, "header length " + std::to_string(n) + " exceeds the 100 MB limit");
  if (n > size - 8)
    bad(what, "header length " + std::to_string(n) + " runs past the end of the file (" +
                  std::to_string(size) + " bytes)");
  const std::string header(data + 8, n);
  if (header.empty() || header[0] != '{') bad(what, "header does not start with '{'");

  std::set<std::string> seen;
  bool duplicate = false;
  std::string duplicate_name;
  json::parser_callback_t cb = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key) {
      const std::string k = parsed.get<std::string>();
      if (!seen.insert(k).second && !duplicate) {
        duplicate = true;
        duplicate_name = k;
      }
    }
    return true;
  };
  json j;
  try {
    j = json::parse(header, cb);
  } catch (const json::exception& e) {
    bad(what, std::string("header is not valid JSON: ") + e.what());
  }
  if (duplicate) bad(what, "tensor name '" + duplicate_name + "' appears twice");
  if (!j.is_object()) bad(what, "header is not a JSON object");

  SafetensorsContent out;
  std::vector<Entry> entries;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it.value().is_object()) bad(what, "__metadata__ is not an object");
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        if (!m.value().is_string()) bad(what, "__metadata__ value of '" + m.key() + "' is not a string");
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(it.key(), it.value(), what));
  }

  // The tensors must tile the data section exactly.
  const uint64_t data_size = size - 8 - n;
  std::vector<const Entry*> order;
  for (const Entry& e : entries) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t cursor = 0;
  for (const Entry* e : order) {
    if (e->begin != cursor)
      bad(what, "tensor '" + e->name + "' starts at byte " + std::to_string(e->begin) +
                    (e->begin < cursor ? ", overlapping the previous tensor" : ", leaving a gap") +
                    " (expected " + std::to_string(cursor) + ")");
    cursor = e->end;
  }
  if (cursor != data_size)
    bad(what, "tensors cover " + std::to_string(cursor) + " bytes of a " + std::to_string(data_size) +
                  "-byte data section");

  const char* base = data + 8 + n;
  for (const Entry& e : entries) {
    torch::Tensor t = torch::empty(e.shape, torch::TensorOptions().dtype(e.type));
    if (e.end > e.begin) std::memcpy(t.data_ptr(), base + e.begin, e.end - e.begin);
    out.tensors.emplace(e.name, std::move(t));
  }
  return out;
}

SafetensorsContent safetensors_load(const std::string& path) {
  MappedFile f(path);
  return safetensors_parse(f.data(), f.size(), path);
}

void safetensors_save(const std::string& path, const TensorDict& tensors, const StringDict& metadata) {
  // Reference order: descending alignment (element size), then name.
  std::vector<std::pair<std::string, torch::Tensor>> order;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__") throw SafetensorsError(path + ": '__metadata__' is not a tensor name");
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

  write_file_atomic(path, [&](FileWriter& w) {
    unsigned char len[8];
    uint64_t n = text.size();
    for (int i = 0; i < 8; ++i, n >>= 8) len[i] = static_cast<unsigned char>(n & 0xff);
    w.write(len, 8);
    w.write(text);
    for (const auto& [name, t] : order)
      if (t.numel() > 0) w.write(t.data_ptr(), static_cast<size_t>(t.numel()) * t.element_size());
  });
}

}  // namespace normlab

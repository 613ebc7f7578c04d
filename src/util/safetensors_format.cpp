#include "normlab/util/safetensors_format.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

namespace normlab {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxHeader = 100'000'000;  // the reference implementation's limit
constexpr size_t kMaxDims = 64;

struct DtypeSize {
  const char* name;
  uint64_t bytes;
};
constexpr DtypeSize kDtypeSizes[] = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
                                     {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U8", 1},   {"BOOL", 1}};

[[noreturn]] void bad(const std::string& what, const std::string& msg) {
  throw SafetensorsError(what + ": invalid safetensors file: " + msg);
}

uint64_t as_u64(const json& v, const std::string& what, const std::string& ctx) {
  if (!v.is_number_unsigned()) bad(what, ctx + " must be a non-negative integer");
  return v.get<uint64_t>();
}

SafetensorsEntry parse_entry(const std::string& name, const json& v, const std::string& what) {
  const std::string ctx = "tensor '" + name + "'";
  if (!v.is_object()) bad(what, ctx + " is not an object");
  for (const auto& key : {"dtype", "shape", "data_offsets"})
    if (!v.contains(key)) bad(what, ctx + " has no '" + key + "'");
  SafetensorsEntry e;
  e.name = name;

  if (!v["dtype"].is_string()) bad(what, ctx + ": dtype must be a string");
  e.dtype = v["dtype"].get<std::string>();
  e.item_bytes = safetensors_dtype_bytes(e.dtype);
  if (e.item_bytes == 0) bad(what, ctx + ": unsupported dtype '" + e.dtype + "'");

  const json& shape = v["shape"];
  if (!shape.is_array() || shape.size() > kMaxDims)
    bad(what, ctx + ": shape must be an array of at most 64 dims");
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
  if (numel > std::numeric_limits<uint64_t>::max() / e.item_bytes ||
      numel * e.item_bytes != e.end - e.begin)
    bad(what, ctx + ": shape and dtype need a different byte size than data_offsets give (" +
                  std::to_string(e.end - e.begin) + " bytes)");
  return e;
}

}  // namespace

uint64_t safetensors_dtype_bytes(const std::string& dtype) {
  for (const auto& row : kDtypeSizes)
    if (dtype == row.name) return row.bytes;
  return 0;
}

SafetensorsLayout safetensors_layout_parse(const char* data, size_t size, const std::string& what) {
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

  SafetensorsLayout out;
  out.data_start = 8 + n;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it.value().is_object()) bad(what, "__metadata__ is not an object");
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        if (!m.value().is_string())
          bad(what, "__metadata__ value of '" + m.key() + "' is not a string");
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    out.tensors.push_back(parse_entry(it.key(), it.value(), what));
  }

  // The tensors must tile the data section exactly.
  const uint64_t data_size = size - 8 - n;
  std::vector<const SafetensorsEntry*> order;
  for (const SafetensorsEntry& e : out.tensors) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const SafetensorsEntry* a, const SafetensorsEntry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t cursor = 0;
  for (const SafetensorsEntry* e : order) {
    if (e->begin != cursor)
      bad(what, "tensor '" + e->name + "' starts at byte " + std::to_string(e->begin) +
                    (e->begin < cursor ? ", overlapping the previous tensor" : ", leaving a gap") +
                    " (expected " + std::to_string(cursor) + ")");
    cursor = e->end;
  }
  if (cursor != data_size)
    bad(what, "tensors cover " + std::to_string(cursor) + " bytes of a " +
                  std::to_string(data_size) + "-byte data section");
  return out;
}

}  // namespace normlab

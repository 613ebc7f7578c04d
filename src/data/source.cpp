#include "normlab/data/source.h"

#include <cmath>
#include <sstream>

namespace normlab {
namespace {

// A YAML flow scalar: plain when it is safely plain, else double-quoted.
std::string source_yaml_scalar(const std::string& s) {
  const bool plain = !s.empty() &&
                     s.find_first_of(":{}[],&*#?|<>=!%@`'\"\\ \t\n") == std::string::npos &&
                     s.front() != '-';
  if (plain) return s;
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string source_weight_text(double w) {
  std::ostringstream os;
  os.precision(17);
  os << w;
  return os.str();
}

std::string source_flow(const DataSource& s) {
  std::string out = "{path: " + source_yaml_scalar(s.path);
  if (s.format != "shards") out += ", format: " + s.format;
  if (!s.dtype.empty()) out += ", dtype: " + s.dtype;
  if (s.eos >= 0) out += ", eos: " + std::to_string(s.eos);
  if (s.weight != 1.0) out += ", weight: " + source_weight_text(s.weight);
  if (!s.verify) out += ", verify: false";
  return out + "}";
}

}  // namespace

std::string source_error(const DataSource& s) {
  if (s.path.empty()) return "path: empty (a folder, file or prefix is needed)";
  if (s.format != "shards" && s.format != "tokens" && s.format != "megatron")
    return "format: unknown value '" + s.format + "' (valid: shards, tokens, megatron)";
  if (s.format == "tokens" && !s.dtype.empty() && s.dtype != "uint16" && s.dtype != "uint32" &&
      s.dtype != "int32" && s.dtype != "int64")
    return "dtype: token arrays hold uint16, uint32, int32 or int64, got '" + s.dtype + "'";
  if (s.format == "megatron" && !s.dtype.empty() && s.dtype != "uint16" && s.dtype != "int32" &&
      s.dtype != "int64")
    return "dtype: a Megatron dataset of token ids holds uint16, int32 or int64, got '" + s.dtype +
           "'";
  if (s.format == "shards" && !s.dtype.empty())
    return "dtype: a shard folder records its own dtype; leave dtype out";
  if (s.eos < -1) return "eos: expected an id >= 0, got " + std::to_string(s.eos);
  if (!std::isfinite(s.weight) || s.weight <= 0)
    return "weight: expected a positive number, got " + source_weight_text(s.weight);
  return "";
}

bool is_plain_folder(const DataSource& s) {
  const DataSource plain{s.path};
  return s.format == plain.format && s.dtype == plain.dtype && s.eos == plain.eos &&
         s.weight == plain.weight && s.verify == plain.verify;
}

std::string sources_text(const std::vector<DataSource>& sources) {
  if (sources.empty()) return "";
  if (sources.size() == 1)
    return is_plain_folder(sources[0]) ? sources[0].path : source_flow(sources[0]);
  std::string out = "[";
  for (size_t i = 0; i < sources.size(); ++i) out += (i ? ", " : "") + source_flow(sources[i]);
  return out + "]";
}

}  // namespace normlab

#include "config/data_sources_yaml.h"

#include "config/config_codec.h"
#include "normlab/util/name_table.h"

namespace normlab::config_yaml {
namespace {

// (yaml_value.h defines its functions in the header, for its two includers only.)
std::string node_text(const YAML::Node& n) {
  return n.IsScalar() ? "'" + n.Scalar() + "'" : n.IsMap() ? "a map" : "a list";
}

template <class T>
std::string parse_scalar(const YAML::Node& n, T& out) {
  if (!n.IsScalar())
    return "expected " + config_codec::expected_phrase<T>() + ", got " + node_text(n);
  return config_codec::parse_text(n.Scalar(), out);
}

SourcesError decode_one(const YAML::Node& n, const std::string& where, DataSource& s) {
  if (n.IsScalar()) {  // a shard folder
    s.path = n.Scalar();
    return {};
  }
  if (!n.IsMap())
    return {where, "expected a folder or a map of path, format, dtype, eos, weight, verify, got " +
                       node_text(n)};
  static const std::vector<std::string> keys = {"path", "format", "dtype",
                                                "eos",  "weight", "verify"};
  for (auto it = n.begin(); it != n.end(); ++it) {
    const std::string k = it->first.Scalar();
    const YAML::Node v = it->second;  // a copy: it->second belongs to a temporary
    const std::string at = where + "." + k;
    if (v.IsNull()) return {at, "empty (give a value or leave the key out)"};
    std::string err;
    if (k == "path")
      err = parse_scalar(v, s.path);
    else if (k == "format")
      err = parse_scalar(v, s.format);
    else if (k == "dtype")
      err = parse_scalar(v, s.dtype);
    else if (k == "eos")
      err = parse_scalar(v, s.eos);
    else if (k == "weight")
      err = parse_scalar(v, s.weight);
    else if (k == "verify")
      err = parse_scalar(v, s.verify);
    else
      return {at, unknown_key_message(k, keys)};
    if (!err.empty()) return {at, err};
  }
  if (!n["path"]) return {where, "a source needs a path"};
  if (const std::string err = source_error(s); !err.empty()) {
    const auto colon = err.find(':');
    return {where + "." + err.substr(0, colon), err.substr(colon + 2)};
  }
  return {};
}

void encode_one(YAML::Emitter& out, const DataSource& s) {
  out << YAML::Flow << YAML::BeginMap << YAML::Key << "path" << YAML::Value << YAML::DoubleQuoted
      << s.path;
  if (s.format != DataFormat::Shards)
    out << YAML::Key << "format" << YAML::Value << std::string(enum_name(s.format));
  if (!s.dtype.empty()) out << YAML::Key << "dtype" << YAML::Value << s.dtype;
  if (s.eos >= 0) out << YAML::Key << "eos" << YAML::Value << s.eos;
  if (s.weight != 1.0)
    out << YAML::Key << "weight" << YAML::Value << config_codec::to_text(s.weight);
  if (!s.verify) out << YAML::Key << "verify" << YAML::Value << false;
  out << YAML::EndMap;
}

}  // namespace

SourcesError decode_sources(const YAML::Node& n, std::vector<DataSource>& out) {
  out.clear();
  if (n.IsNull() || (n.IsScalar() && n.Scalar().empty())) return {};
  if (!n.IsSequence()) {
    out.emplace_back();
    return decode_one(n, "", out.back());
  }
  if (n.size() == 0) return {"", "an empty list (give a folder, a source or a list of sources)"};
  for (size_t i = 0; i < n.size(); ++i) {
    out.emplace_back();
    if (SourcesError e = decode_one(n[i], "[" + std::to_string(i) + "]", out.back());
        !e.message.empty())
      return e;
  }
  return {};
}

void encode_sources(YAML::Emitter& out, const std::vector<DataSource>& sources) {
  if (sources.empty() || (sources.size() == 1 && is_plain_folder(sources[0]))) {
    out << YAML::DoubleQuoted << (sources.empty() ? std::string() : sources[0].path);
  } else if (sources.size() == 1) {
    encode_one(out, sources[0]);
  } else {
    out << YAML::BeginSeq;
    for (const auto& s : sources) encode_one(out, s);
    out << YAML::EndSeq;
  }
}

std::string sources_text(const std::vector<DataSource>& sources) {
  if (sources.size() == 1 && is_plain_folder(sources[0])) return sources[0].path;
  if (sources.empty()) return "";
  YAML::Emitter out;
  out << YAML::Flow;
  encode_sources(out, sources);
  return out.c_str();
}

}  // namespace normlab::config_yaml

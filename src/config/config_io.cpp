// YAML in and out for run configs: the strict decoder (files, `base:` chains, `--set`
// overrides, unknown keys with the closest valid one), and the encoder of the resolved config,
// both driven by the schema (config_schema.h). yaml-cpp is included here, in sweep_file.cpp and
// in data_sources_yaml.cpp (data.train and data.val) only.
#include "normlab/config/config_io.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>

#include "config/config_schema.h"
#include "config/data_sources_yaml.h"
#include "config/yaml_value.h"

namespace normlab {
namespace {

using config_codec::parse_scalar;
using config_codec::scalar_text;
using config_codec::to_text;
using config_schema::visit;

// ---- decode -----------------------------------------------------------------------------------

// Where each leaf came from: the file (or base file) or the --set override.
using Origins = std::map<std::string, std::string>;

class Decoder {
 public:
  Decoder(const YAML::Node& node, std::string prefix, const Origins& origins,
          const std::string& default_origin)
      : node_(node),
        prefix_(std::move(prefix)),
        origins_(origins),
        default_origin_(default_origin) {}

  template <class T>
  void operator()(const char* key, T& field, const char*) {
    keys_.push_back(key);
    const YAML::Node n = node_[key];
    if (!n.IsDefined()) return;
    decode(n, field, prefix_ + key);
  }

  template <class S>
  void section(const char* key, S& sub, const char*) {
    keys_.push_back(key);
    const YAML::Node n = node_[key];
    if (!n.IsDefined() || n.IsNull()) return;
    if (!n.IsMap())
      fail(prefix_ + key, "expected a section (a map of keys), got " + scalar_text(n));
    Decoder child(n, prefix_ + key + ".", origins_, default_origin_);
    visit(child, sub);
    child.reject_unknown();
  }

  void reject_unknown() const {
    for (auto it = node_.begin(); it != node_.end(); ++it) {
      const std::string k = it->first.Scalar();
      if (std::find(keys_.begin(), keys_.end(), k) != keys_.end()) continue;
      const std::string msg = unknown_key_message(k, keys_, prefix_);
      fail(prefix_ + k, msg);
    }
  }

 private:
  template <class T>
  void decode(const YAML::Node& n, T& field, const std::string& path) {
    if constexpr (std::is_same_v<T, std::string>) {
      if (n.IsNull()) {  // `key:` or --set key= : the empty string
        field.clear();
        return;
      }
    }
    const std::string err = parse_scalar(n, field);
    if (!err.empty()) fail(path, err);
  }

  void decode(const YAML::Node& n, std::vector<DataSource>& field, const std::string& path) {
    const config_yaml::SourcesError e = config_yaml::decode_sources(n, field);
    if (!e.message.empty())  // the origin is the key's: data.train[1].weight is not a leaf of it
      throw ConfigError(origin_of(path) + ": " + path + e.where + ": " + e.message);
  }

  template <class T>
  void decode(const YAML::Node& n, std::optional<T>& field, const std::string& path) {
    if (n.IsNull()) {
      field.reset();
      return;
    }
    T v{};
    decode(n, v, path);
    field = v;
  }

  [[noreturn]] void fail(const std::string& path, const std::string& msg) const {
    throw ConfigError(origin_of(path) + ": " + path + ": " + msg);
  }

  // The file or override that wrote `path`, or a key below it (a map where a value belongs).
  std::string origin_of(const std::string& path) const {
    if (const auto it = origins_.find(path); it != origins_.end()) return it->second;
    if (const auto it = origins_.lower_bound(path + ".");
        it != origins_.end() && it->first.rfind(path + ".", 0) == 0)
      return it->second;
    return default_origin_;
  }

  const YAML::Node node_;
  std::string prefix_;
  const Origins& origins_;
  const std::string& default_origin_;
  std::vector<std::string> keys_;
};

// ---- encode and list ------------------------------------------------------------------------

class Encoder {
 public:
  explicit Encoder(YAML::Emitter& out) : out_(out) {}

  template <class T>
  void operator()(const char* key, T& field, const char*) {
    out_ << YAML::Key << key << YAML::Value;
    if constexpr (config_codec::is_optional<T>::value) {
      if (field)
        out_ << to_text(*field);
      else
        out_ << YAML::Null;
    } else if constexpr (std::is_same_v<T, std::string>) {
      out_ << YAML::DoubleQuoted << field;
    } else if constexpr (std::is_same_v<T, std::vector<DataSource>>) {
      config_yaml::encode_sources(out_, field);
    } else {
      out_ << to_text(field);
    }
  }

  template <class S>
  void section(const char* key, S& sub, const char*) {
    out_ << YAML::Key << key << YAML::Value << YAML::BeginMap;
    visit(*this, sub);
    out_ << YAML::EndMap;
  }

 private:
  YAML::Emitter& out_;
};

// ---- files, bases and overrides ---------------------------------------------------------------

void record_leaves(const YAML::Node& node, const std::string& origin, const std::string& path,
                   Origins& origins) {
  if (!node.IsMap()) {
    origins[path] = origin;
    return;
  }
  for (auto it = node.begin(); it != node.end(); ++it)
    record_leaves(it->second, origin, path + "." + it->first.Scalar(), origins);
}

// Deep-merges `src` over `dst`, recording the origin of every leaf it writes.
void merge(YAML::Node dst, const YAML::Node& src, const std::string& origin,
           const std::string& prefix, Origins& origins) {
  for (auto it = src.begin(); it != src.end(); ++it) {
    const std::string key = it->first.Scalar();
    if (it->second.IsMap() && dst[key].IsMap()) {
      merge(dst[key], it->second, origin, prefix + key + ".", origins);
    } else {
      dst[key] = YAML::Clone(it->second);
      record_leaves(it->second, origin, prefix + key, origins);
    }
  }
}

YAML::Node load_with_bases(const std::string& path, Origins& origins, int depth) {
  if (depth > 8) throw ConfigError(path + ": `base:` chain deeper than 8 files (a cycle?)");
  std::error_code ec;  // the error_code form: a hostile `base:` (a name too long) must not throw
  if (!std::filesystem::is_regular_file(path, ec))
    throw ConfigError(path + ": config file not found" + (ec ? " (" + ec.message() + ")" : ""));
  YAML::Node doc;
  try {
    doc = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw ConfigError(path + ": invalid YAML: " + e.what());
  }
  if (doc.IsNull()) doc = YAML::Node(YAML::NodeType::Map);
  if (!doc.IsMap()) throw ConfigError(path + ": expected a map of sections at the top level");

  YAML::Node merged(YAML::NodeType::Map);
  if (doc["base"]) {
    if (!doc["base"].IsScalar()) throw ConfigError(path + ": base: expected a file name");
    const auto base = std::filesystem::path(path).parent_path() / doc["base"].Scalar();
    merged = load_with_bases(base.string(), origins, depth + 1);
    doc.remove("base");
  }
  merge(merged, doc, path, "", origins);
  return merged;
}

void apply_override(YAML::Node root, const std::string& text, Origins& origins) {
  const std::string origin = "--set " + text;
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    throw ConfigError(origin + ": expected section.key=value");
  const std::string path = text.substr(0, eq);
  YAML::Node value;
  try {
    value = YAML::Load(text.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    throw ConfigError(origin + ": invalid YAML value: " + e.what());
  }
  std::vector<std::string> parts;
  std::stringstream ss(path);
  for (std::string p; std::getline(ss, p, '.');) {
    if (p.empty()) throw ConfigError(origin + ": empty key in '" + path + "'");
    parts.push_back(p);
  }
  // Walk with copies of node handles (yaml-cpp nodes are references into the tree).
  std::vector<YAML::Node> chain = {root};
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    YAML::Node next = chain.back()[parts[i]];
    if (!next.IsDefined() || next.IsNull()) {
      chain.back()[parts[i]] = YAML::Node(YAML::NodeType::Map);
      next = chain.back()[parts[i]];
    }
    if (!next.IsMap()) throw ConfigError(origin + ": '" + parts[i] + "' is not a section");
    chain.push_back(next);
  }
  chain.back()[parts.back()] = value;
  origins[path] = origin;
}

}  // namespace

RunConfig config_load(const std::string& path, const std::vector<std::string>& overrides) {
  Origins origins;
  YAML::Node root =
      path.empty() ? YAML::Node(YAML::NodeType::Map) : load_with_bases(path, origins, 0);
  for (const auto& o : overrides) apply_override(root, o, origins);

  RunConfig cfg;
  const std::string where = path.empty() ? "<defaults>" : path;
  Decoder top(root, "", origins, where);
  visit(top, cfg);
  top.reject_unknown();
  try {
    validate(cfg);
  } catch (const ConfigError& e) {  // the cross-field checks name the key, not the file
    throw ConfigError(where + ": " + e.what());
  }
  return cfg;
}

std::string config_to_yaml(const RunConfig& cfg_in) {
  RunConfig cfg = cfg_in;
  YAML::Emitter out;
  out << YAML::BeginMap;
  Encoder enc(out);
  visit(enc, cfg);
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace normlab

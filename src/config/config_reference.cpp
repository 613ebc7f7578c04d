// The documented keys of the schema (config_schema.h): config_reference(), its markdown table
// (docs/config.md) and config_flatten(), which compares two configs key by key.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "config/config_codec.h"
#include "config/config_schema.h"
#include "config/data_sources_yaml.h"
#include "normlab/config/config_io.h"

namespace normlab {
namespace {

using config_codec::to_text;
using config_codec::type_name;
using config_schema::visit;

class Lister {
 public:
  Lister(std::vector<ConfigKeyDoc>& rows, std::string prefix)
      : rows_(rows), prefix_(std::move(prefix)) {}

  template <class T>
  void operator()(const char* key, T& field, const char* doc) {
    rows_.push_back({prefix_ + key, type_name<T>(), to_text(field), doc});
  }
  template <class T>
  void operator()(const char* key, std::optional<T>& field, const char* doc) {
    rows_.push_back(
        {prefix_ + key, type_name<T>() + " or null", field ? to_text(*field) : "null", doc});
  }
  void operator()(const char* key, std::string& field, const char* doc) {
    rows_.push_back({prefix_ + key, "string", "\"" + field + "\"", doc});
  }
  void operator()(const char* key, std::vector<DataSource>& field, const char* doc) {
    rows_.push_back(
        {prefix_ + key, "sources", "\"" + config_yaml::sources_text(field) + "\"", doc});
  }
  template <class S>
  void section(const char* key, S& sub, const char*) {
    Lister child(rows_, prefix_ + key + ".");
    visit(child, sub);
  }

 private:
  std::vector<ConfigKeyDoc>& rows_;
  std::string prefix_;
};

}  // namespace

std::vector<ConfigKeyDoc> config_reference() {
  RunConfig defaults;
  std::vector<ConfigKeyDoc> rows;
  Lister lister(rows, "");
  visit(lister, defaults);
  return rows;
}

std::vector<std::pair<std::string, std::string>> config_flatten(const RunConfig& cfg_in) {
  RunConfig cfg = cfg_in;
  std::vector<ConfigKeyDoc> rows;
  Lister lister(rows, "");
  visit(lister, cfg);
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& r : rows) out.emplace_back(r.key, r.default_value);
  return out;
}

std::string config_reference_markdown() {
  std::string out = "| key | type | default | meaning |\n|---|---|---|---|\n";
  for (const auto& r : config_reference())
    out += "| `" + r.key + "` | " + r.type + " | `" + r.default_value + "` | " + r.doc + " |\n";
  return out;
}

}  // namespace normlab

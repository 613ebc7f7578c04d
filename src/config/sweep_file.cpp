// Sweep files (configs/sweeps/) into a SweepSpec, and the CLI's replacements of their list keys
// (sweep_set_axis): both parse a scheme, learning-rate or seed list the same way, each item with
// the configuration's codec (config_codec.h). yaml-cpp is included here and in config_io.cpp
// only.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <sstream>

#include "config/yaml_value.h"
#include "normlab/config/config_io.h"

namespace normlab {
namespace {

using config_codec::parse_scalar;
using config_codec::parse_text;
using config_codec::scalar_text;
using Fail = std::function<void(const std::string& key, const std::string& msg)>;

// Comma-separated text as a list of items.
std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string p; std::getline(ss, p, ',');) out.push_back(p);
  return out;
}

// Sets the list key `key` (scheme, lr or seed) of `spec` from its items; `fail` reports an item
// that is not a value of the key. The learning rates are one text (FIRST:LAST:COUNT ranges).
void set_axis(SweepSpec& spec, const std::string& key, const std::vector<std::string>& items,
              const Fail& fail) {
  if (key == "scheme") {
    spec.schemes.clear();
    for (const auto& name : items) {
      Scheme s{};
      const std::string err = parse_text(name, s);
      if (!err.empty()) fail("scheme", err);
      spec.schemes.push_back(s);
    }
  } else if (key == "lr") {
    std::string text;
    for (const auto& v : items) text += (text.empty() ? "" : ",") + v;
    try {
      spec.lrs = parse_lr_list(text);
    } catch (const std::invalid_argument& e) {
      fail("lr", e.what());
    }
  } else if (key == "seed") {
    spec.seeds.clear();
    for (const auto& v : items) {
      uint64_t seed = 0;
      const std::string err = parse_text(v, seed);
      if (!err.empty()) fail("seed", err);
      spec.seeds.push_back(seed);
    }
  } else {
    throw std::invalid_argument("sweep_set_axis: '" + key + "' is not scheme, lr or seed");
  }
}

// A sweep file's early_stop: "none", "asha", or a map {method: asha, min_steps: N,
// reduction: N}.
EarlyStopSpec early_stop_of(const YAML::Node& n, const std::string& path) {
  EarlyStopSpec e;
  auto fail = [&](const std::string& key, const std::string& msg) {
    throw ConfigError(path + ": early_stop" + key + ": " + msg);
  };
  auto method = [&](const std::string& m, const std::string& key) {
    if (m != "asha" && m != "none") fail(key, "expected asha or none, got '" + m + "'");
    e.asha = m == "asha";
  };
  if (n.IsScalar()) {
    method(n.Scalar(), "");
    return e;
  }
  if (!n.IsMap()) fail("", "expected asha, none or a map of method, min_steps, reduction");
  for (auto it = n.begin(); it != n.end(); ++it) {
    const std::string k = it->first.Scalar();
    if (k == "method" && it->second.IsScalar()) {
      method(it->second.Scalar(), ".method");
    } else if (k == "min_steps" || k == "reduction") {
      int64_t v = 0;
      const std::string err = parse_scalar(it->second, v);
      if (!err.empty()) fail("." + k, err);
      if (v < (k == "reduction" ? 2 : 1))
        fail("." + k, "expected at least " + std::string(k == "reduction" ? "2" : "1") + ", got " +
                          std::to_string(v));
      (k == "min_steps" ? e.min_steps : e.reduction) = v;
    } else {
      fail("." + k, unknown_key_message(k, {"method", "min_steps", "reduction"}));
    }
  }
  return e;
}

}  // namespace

SweepSpec sweep_load(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw ConfigError(path + ": sweep file not found" + (ec ? " (" + ec.message() + ")" : ""));
  YAML::Node doc;
  try {
    doc = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    throw ConfigError(path + ": invalid YAML: " + e.what());
  }
  if (!doc.IsMap()) throw ConfigError(path + ": expected a map of sweep keys at the top level");
  static const std::vector<std::string> keys = {"config", "scheme", "lr",           "seed",
                                                "set",    "jobs",   "gpus_per_run", "early_stop"};
  auto fail = [&](const std::string& key, const std::string& msg) -> void {
    throw ConfigError(path + ": " + key + ": " + msg);
  };
  // A list of scalars, from a YAML list or comma-separated text.
  auto items = [&](const std::string& key) {
    std::vector<std::string> out;
    const YAML::Node n = doc[key];
    if (n.IsSequence()) {
      for (const auto& e : n) {
        if (!e.IsScalar()) fail(key, "expected a list of values, got " + scalar_text(e) + " in it");
        out.push_back(e.Scalar());
      }
    } else if (n.IsScalar()) {
      out = split_commas(n.Scalar());
    } else {
      fail(key, "expected a list or comma-separated text, got " + scalar_text(n));
    }
    if (out.empty()) fail(key, "empty list");
    return out;
  };
  SweepSpec spec;
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    const std::string k = it->first.Scalar();
    if (std::find(keys.begin(), keys.end(), k) != keys.end()) continue;
    fail(k, unknown_key_message(k, keys));
  }
  if (!doc["config"] || !doc["config"].IsScalar() || doc["config"].Scalar().empty())
    fail("config", "required: the base run config, relative to this file");
  spec.config = (std::filesystem::path(path).parent_path() / doc["config"].Scalar())
                    .lexically_normal()
                    .string();
  if (doc["scheme"]) set_axis(spec, "scheme", items("scheme"), fail);
  if (doc["lr"])  // text as it is (set_axis joins the items of a list with commas)
    set_axis(spec, "lr", doc["lr"].IsScalar() ? std::vector{doc["lr"].Scalar()} : items("lr"),
             fail);
  if (doc["seed"]) set_axis(spec, "seed", items("seed"), fail);
  if (const YAML::Node n = doc["set"]) {
    if (n.IsMap()) {
      for (auto it = n.begin(); it != n.end(); ++it) {
        if (!it->second.IsScalar())
          fail("set." + it->first.Scalar(), "expected a value, got " + scalar_text(it->second));
        spec.overrides.push_back(it->first.Scalar() + "=" + it->second.Scalar());
      }
    } else if (n.IsSequence()) {
      for (const auto& e : n) {
        if (!e.IsScalar() || e.Scalar().find('=') == std::string::npos)
          fail("set", "expected section.key=value, got " + scalar_text(e));
        spec.overrides.push_back(e.Scalar());
      }
    } else {
      fail("set", "expected a map of section.key: value or a list of section.key=value");
    }
  }
  auto count = [&](const char* key, int& field) {
    if (!doc[key]) return;
    int64_t v = 0;
    const std::string err = parse_scalar(doc[key], v);
    if (!err.empty()) fail(key, err);
    if (v < 0 || v > 4096) fail(key, "expected 0 or more (0: automatic), got " + std::to_string(v));
    field = static_cast<int>(v);
  };
  count("jobs", spec.jobs);
  count("gpus_per_run", spec.gpus_per_run);
  if (doc["early_stop"]) spec.early_stop = early_stop_of(doc["early_stop"], path);
  return spec;
}

void sweep_set_axis(SweepSpec& spec, const std::string& key, const std::string& text,
                    const std::string& origin) {
  const auto list = key == "lr" ? std::vector<std::string>{text} : split_commas(text);
  set_axis(spec, key, list, [&](const std::string&, const std::string& msg) {
    throw ConfigError(origin + ": " + msg);
  });
}

}  // namespace normlab

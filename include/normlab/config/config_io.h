// YAML <-> RunConfig, at the edge of the program, and sweep files. yaml-cpp lives in
// src/config/config_io.cpp and src/config/sweep_file.cpp only.
//
// A config file holds sections model, data, optimizer, scheduler, train, eval, diagnostics,
// checkpoint and logging; a top-level `base: other.yaml` (relative to the file) is loaded first and
// deep-merged under it.
// Overrides "section.key=value" (values in YAML syntax) apply in order after the files.
// Unknown keys, wrong types and invalid values stop with a ConfigError that names the file or
// override, the key path and, for unknown keys, the closest valid key.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "normlab/config/config.h"
#include "normlab/config/sweep_grid.h"
#include "normlab/util/error.h"

namespace normlab {

/// Loads `path` (may be empty: defaults only), applies `overrides`, validates.
RunConfig config_load(const std::string& path, const std::vector<std::string>& overrides = {});

/// A sweep file (configs/sweeps/): keys config (relative to the file), scheme, lr, seed (YAML
/// lists or comma-separated text; lr also FIRST:LAST:COUNT), set (a list of "section.key=value"
/// or a map of them), jobs, gpus_per_run. Errors name the file and the key.
SweepSpec sweep_load(const std::string& path);

/// Replaces the list key `key` of a sweep file (scheme, lr or seed) in `spec` with `text`, parsed
/// as sweep_load parses that key's comma-separated text: the CLI's --scheme, --lr and --seed.
/// A bad item is a ConfigError that begins with `origin` ("--scheme: unknown value ...");
/// another key is std::invalid_argument.
void sweep_set_axis(SweepSpec& spec, const std::string& key, const std::string& text,
                    const std::string& origin);

/// The resolved configuration as YAML (every key); config_load of it gives the same config.
std::string config_to_yaml(const RunConfig& cfg);

/// Every key of `cfg` with its value as YAML text, in schema order ("model.d_model", "2048").
std::vector<std::pair<std::string, std::string>> config_flatten(const RunConfig& cfg);

/// One documented key of the schema.
struct ConfigKeyDoc {
  std::string key;            // "model.d_model"
  std::string type;           // "integer", "float", "bool", "string", "one of: a, b", ...
  std::string default_value;  // as YAML
  std::string doc;
};
std::vector<ConfigKeyDoc> config_reference();

/// The markdown table of config_reference() that docs/config.md embeds.
std::string config_reference_markdown();

}  // namespace normlab

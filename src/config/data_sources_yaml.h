// data.train and data.val in YAML: a folder (a string), one source (a map of path, format,
// dtype, eos, weight, verify) or a list of them (a mixture). Private to src/config/.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

#include "normlab/data/source.h"

namespace normlab::config_yaml {

struct SourcesError {
  std::string where;  // appended to the key: "[1].weight", "" for the whole value
  std::string message;
};

/// Reads `n` into out; returns an error (message empty when none).
SourcesError decode_sources(const YAML::Node& n, std::vector<DataSource>& out);

/// Writes the sources: a plain folder (or none) as a quoted string, one other source as a
/// flow map, several as a list of flow maps.
void encode_sources(YAML::Emitter& out, const std::vector<DataSource>& sources);

/// The sources as one line of YAML flow text for messages and the reference: a plain folder
/// as its path, else what encode_sources writes. Empty for no sources.
std::string sources_text(const std::vector<DataSource>& sources);

}  // namespace normlab::config_yaml

// A YAML node's value through the configuration's codec (config_codec.h): shared by the two
// sources that read YAML, the config loader (config_io.cpp) and the sweep-file parser
// (sweep_file.cpp). Private to src/config/.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>

#include "config/config_codec.h"

namespace normlab::config_codec {

std::string scalar_text(const YAML::Node& n) {
  return n.IsScalar()     ? "'" + n.Scalar() + "'"
         : n.IsMap()      ? "a map"
         : n.IsSequence() ? "a list"
                          : "nothing";
}

// Parses a YAML scalar into T; returns an error message or "".
template <class T>
std::string parse_scalar(const YAML::Node& n, T& out) {
  if (!n.IsScalar()) return "expected " + expected_phrase<T>() + ", got " + scalar_text(n);
  return parse_text(n.Scalar(), out);
}

}  // namespace normlab::config_codec

// Fuzz target: the YAML config loader (config_io.h), through the same entry point as
// `normlab train --config FILE --set KEY=VALUE`. An input whose first line starts with "set:"
// gives that line's rest as one override; the remaining bytes are the config file. A config is
// either rejected with ConfigError or loads, and then its resolved YAML must load back to the
// same resolved YAML (config_to_yaml's promise). Anything else is a finding.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "normlab/config/config_io.h"
#include "normlab/util/file_io.h"

namespace {

std::string scratch_file() {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir && *dir ? dir : "/tmp") + "/normlab-fuzz-config-" +
         std::to_string(::getpid()) + ".yaml";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace normlab;
  std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> overrides;
  if (text.rfind("set:", 0) == 0) {
    const size_t eol = text.find('\n');
    overrides.push_back(text.substr(4, eol == std::string::npos ? std::string::npos : eol - 4));
    text = eol == std::string::npos ? "" : text.substr(eol + 1);
  }
  static const std::string path = scratch_file();
  write_file_atomic(path, [&](FileWriter& w) { w.write(text); });
  std::string resolved;
  try {
    resolved = config_to_yaml(config_load(path, overrides));
  } catch (const ConfigError&) {
    return 0;
  }
  write_file_atomic(path, [&](FileWriter& w) { w.write(resolved); });
  std::string again;
  try {
    again = config_to_yaml(config_load(path));
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "resolved config does not load back: %s\n%s\n", e.what(),
                 resolved.c_str());
    std::abort();
  }
  if (again != resolved) {
    std::fprintf(stderr, "resolved config changes on reload:\n%s\n---\n%s\n", resolved.c_str(),
                 again.c_str());
    std::abort();
  }
  return 0;
}

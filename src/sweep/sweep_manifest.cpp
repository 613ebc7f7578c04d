// sweep.json, read and written (sweep_manifest.h).
#include "normlab/sweep/sweep_manifest.h"

#include <nlohmann/json.hpp>

#include <filesystem>

#include "normlab/util/error.h"
#include "normlab/util/file_io.h"

namespace normlab {
namespace fs = std::filesystem;

std::string sweep_manifest_path(const std::string& sweep_dir) {
  return (fs::path(sweep_dir) / "sweep.json").string();
}

SweepManifest sweep_manifest_read(const std::string& sweep_dir) {
  const std::string path = sweep_manifest_path(sweep_dir);
  const std::string text = read_file(path);
  SweepManifest m;
  try {
    const auto j = nlohmann::json::parse(text);
    m.config = j.value("config", std::string());
    m.overrides = j.value("overrides", std::vector<std::string>());
    for (const auto& p : j.value("points", nlohmann::json::array()))
      m.points.push_back({enum_from_name<Scheme>(p.at("scheme").get<std::string>(), "scheme"),
                          p.at("lr").get<double>(),
                          p.at("seed").get<uint64_t>(),
                          p.at("name").get<std::string>(),
                          {}});
  } catch (const std::exception& e) {  // JSON errors and unknown schemes
    throw ConfigError(path + ": unreadable sweep manifest (" + e.what() + ")");
  }
  return m;
}

void sweep_manifest_write(const std::string& sweep_dir, const SweepSpec& spec,
                          const std::vector<SweepPoint>& points) {
  const std::string path = sweep_manifest_path(sweep_dir);
  const std::string config = fs::weakly_canonical(spec.config).string();
  if (fs::exists(path)) {
    const SweepManifest old = sweep_manifest_read(sweep_dir);
    if (old.config != config || old.overrides != spec.overrides) {
      std::string had;
      for (const auto& o : old.overrides) had += " --set " + o;
      throw ConfigError(sweep_dir + " holds a sweep of " + old.config +
                        (had.empty() ? "" : " with" + had) +
                        "; this one differs (config or --set): choose another --out");
    }
  }
  nlohmann::json j = {{"format", "normlab-sweep"},
                      {"version", 1},
                      {"config", config},
                      {"overrides", spec.overrides}};
  for (const auto& p : points)
    j["points"].push_back({{"name", p.name},
                           {"scheme", std::string(enum_name(p.scheme))},
                           {"lr", p.lr},
                           {"seed", p.seed}});
  const std::string text = j.dump(2) + "\n";
  write_file_atomic(path, [&](FileWriter& w) { w.write(text); });
}

}  // namespace normlab

#include "normlab/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "normlab/file_io.h"

namespace normlab {
namespace fs = std::filesystem;

namespace {

constexpr const char* kPrefix = "step-";

// step-00000100 -> 100; -1 for anything else (temporary folders included).
int64_t step_of(const std::string& name) {
  if (name.rfind(kPrefix, 0) != 0) return -1;
  const std::string digits = name.substr(std::char_traits<char>::length(kPrefix));
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoll(digits);
}

std::vector<std::pair<int64_t, fs::path>> complete_checkpoints(const std::string& run_dir) {
  std::vector<std::pair<int64_t, fs::path>> out;
  const fs::path dir = fs::path(run_dir) / "checkpoints";
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const int64_t s = step_of(e.path().filename().string());
    if (s >= 0 && fs::exists(e.path() / "state.json")) out.emplace_back(s, e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::string checkpoint_save(const std::string& run_dir, const Checkpoint& c, int64_t keep) {
  const fs::path dir = fs::path(run_dir) / "checkpoints";
  fs::create_directories(dir);
  char name[32];
  std::snprintf(name, sizeof name, "%s%08lld", kPrefix, static_cast<long long>(c.state.step));
  const fs::path final_dir = dir / name;
  const fs::path tmp = dir / (std::string(name) + ".tmp-" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  try {
    safetensors_save((tmp / "model.safetensors").string(), c.model, {{"format", "pt"}});
    safetensors_save((tmp / "optimizer.safetensors").string(), c.optimizer);
    const nlohmann::json j = {{"step", c.state.step},
                              {"tokens", c.state.tokens},
                              {"wall_seconds", c.state.wall_seconds},
                              {"max_grad_norm", c.state.max_grad_norm},
                              {"skipped_steps", c.state.skipped_steps},
                              {"spikes", c.state.spikes},
                              {"spike_window", c.state.spike_window},
                              {"last_loss", c.state.last_loss},
                              {"last_val_loss", c.state.last_val_loss}};
    const std::string text = j.dump(2) + "\n";
    write_file_atomic((tmp / "config.yaml").string(), [&](FileWriter& w) { w.write(c.config_yaml); });
    write_file_atomic((tmp / "state.json").string(), [&](FileWriter& w) { w.write(text); });  // last
    fsync_directory(tmp.string());
    fs::remove_all(final_dir);  // an older checkpoint of the same step (a rerun) is replaced
    fs::rename(tmp, final_dir);
    fsync_directory(dir.string());
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  auto all = complete_checkpoints(run_dir);
  for (size_t i = 0; i + static_cast<size_t>(std::max<int64_t>(keep, 1)) < all.size(); ++i) fs::remove_all(all[i].second);
  return final_dir.string();
}

std::optional<std::string> checkpoint_latest(const std::string& run_dir) {
  const auto all = complete_checkpoints(run_dir);
  if (all.empty()) return std::nullopt;
  return all.back().second.string();
}

Checkpoint checkpoint_load(const std::string& dir) {
  Checkpoint c;
  c.path = dir;
  c.model = safetensors_load((fs::path(dir) / "model.safetensors").string()).tensors;
  c.optimizer = safetensors_load((fs::path(dir) / "optimizer.safetensors").string()).tensors;
  c.config_yaml = read_file((fs::path(dir) / "config.yaml").string());
  const std::string state_path = (fs::path(dir) / "state.json").string();
  try {
    const auto j = nlohmann::json::parse(read_file(state_path));
    c.state.step = j.at("step");
    c.state.tokens = j.at("tokens");
    c.state.wall_seconds = j.at("wall_seconds");
    c.state.max_grad_norm = j.at("max_grad_norm");
    c.state.skipped_steps = j.at("skipped_steps");
    c.state.spikes = j.at("spikes");
    c.state.spike_window = j.at("spike_window").get<std::vector<double>>();
    c.state.last_loss = j.at("last_loss");
    c.state.last_val_loss = j.at("last_val_loss");
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(state_path + ": malformed checkpoint state: " + e.what());
  }
  return c;
}

}  // namespace normlab

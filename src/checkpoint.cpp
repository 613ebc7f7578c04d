#include "normlab/checkpoint.h"

#include <torch/torch.h>
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

std::string step_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "%s%08lld", kPrefix, static_cast<long long>(step));
  return name;
}

std::string rank_file(const std::string& what, int64_t rank, int64_t world) {
  char name[96];
  std::snprintf(name, sizeof name, "%s.rank-%05lld-of-%05lld.safetensors", what.c_str(), static_cast<long long>(rank),
                static_cast<long long>(world));
  return name;
}

std::string state_json(const TrainState& s, int64_t world) {
  nlohmann::json j = {{"step", s.step},
                      {"tokens", s.tokens},
                      {"wall_seconds", s.wall_seconds},
                      {"max_grad_norm", s.max_grad_norm},
                      {"skipped_steps", s.skipped_steps},
                      {"spikes", s.spikes},
                      {"spike_window", s.spike_window},
                      {"last_loss", s.last_loss},
                      {"last_val_loss", s.last_val_loss}};
  if (world > 1) j["world_size"] = world;
  return j.dump(2) + "\n";
}

// Deletes all but the newest `keep` complete checkpoints.
void prune(const std::string& run_dir, int64_t keep) {
  auto all = complete_checkpoints(run_dir);
  for (size_t i = 0; i + static_cast<size_t>(std::max<int64_t>(keep, 1)) < all.size(); ++i) fs::remove_all(all[i].second);
}

nlohmann::json read_state_json(const std::string& dir) {
  const std::string path = (fs::path(dir) / "state.json").string();
  try {
    return nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + ": malformed checkpoint state: " + e.what());
  }
}

}  // namespace

std::string checkpoint_save(const std::string& run_dir, const Checkpoint& c, int64_t keep) {
  const fs::path dir = fs::path(run_dir) / "checkpoints";
  fs::create_directories(dir);
  const std::string name = step_name(c.state.step);
  const fs::path final_dir = dir / name;
  const fs::path tmp = dir / (name + ".tmp-" + std::to_string(::getpid()));
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  try {
    safetensors_save((tmp / "model.safetensors").string(), c.model, {{"format", "pt"}});
    safetensors_save((tmp / "optimizer.safetensors").string(), c.optimizer);
    const std::string text = state_json(c.state, 1);
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
  prune(run_dir, keep);
  return final_dir.string();
}

std::string checkpoint_save_sharded(const std::string& run_dir, const Checkpoint& c, int64_t keep,
                                    const std::function<void()>& barrier) {
  const fs::path dir = fs::path(run_dir) / "checkpoints";
  const std::string name = step_name(c.state.step);
  const fs::path final_dir = dir / name;
  const fs::path tmp = dir / (name + ".tmp-sharded");
  if (c.rank == 0) {
    fs::create_directories(dir);
    fs::remove_all(tmp);
    fs::create_directories(tmp);
  }
  barrier();
  nlohmann::json layout = nlohmann::json::object();
  for (const auto& [param, start] : c.starts) {
    layout[param]["start"] = start;
    layout[param]["shape"] = c.shapes.at(param);
  }
  const StringDict meta = {{"format", "pt"},
                           {"rank", std::to_string(c.rank)},
                           {"world_size", std::to_string(c.world)},
                           {"pieces", layout.dump()}};
  safetensors_save((tmp / rank_file("model", c.rank, c.world)).string(), c.model, meta);
  safetensors_save((tmp / rank_file("optimizer", c.rank, c.world)).string(), c.optimizer);
  barrier();
  if (c.rank == 0) {
    write_file_atomic((tmp / "config.yaml").string(), [&](FileWriter& w) { w.write(c.config_yaml); });
    write_file_atomic((tmp / "state.json").string(), [&](FileWriter& w) { w.write(state_json(c.state, c.world)); });
    fsync_directory(tmp.string());
    fs::remove_all(final_dir);
    fs::rename(tmp, final_dir);
    fsync_directory(dir.string());
    prune(run_dir, keep);
  }
  barrier();
  return final_dir.string();
}

int64_t checkpoint_world(const std::string& dir) { return read_state_json(dir).value("world_size", int64_t{1}); }

std::optional<std::string> checkpoint_latest(const std::string& run_dir) {
  const auto all = complete_checkpoints(run_dir);
  if (all.empty()) return std::nullopt;
  return all.back().second.string();
}

Checkpoint checkpoint_load(const std::string& dir, int64_t rank) {
  Checkpoint c;
  c.path = dir;
  c.world = checkpoint_world(dir);
  if (c.world == 1) {
    c.model = safetensors_load((fs::path(dir) / "model.safetensors").string()).tensors;
    c.optimizer = safetensors_load((fs::path(dir) / "optimizer.safetensors").string()).tensors;
  } else {
    if (rank < 0 || rank >= c.world)
      throw std::invalid_argument(dir + " was written by " + std::to_string(c.world) + " ranks: it has no rank " +
                                  std::to_string(rank));
    c.rank = rank;
    const std::string model_path = (fs::path(dir) / rank_file("model", rank, c.world)).string();
    SafetensorsContent m = safetensors_load(model_path);
    c.model = std::move(m.tensors);
    try {
      const nlohmann::json layout = nlohmann::json::parse(m.metadata.at("pieces"));
      for (const auto& [param, e] : layout.items()) {
        c.starts[param] = e.at("start");
        c.shapes[param] = e.at("shape").get<std::vector<int64_t>>();
      }
    } catch (const std::exception& e) {
      throw std::runtime_error(model_path + ": malformed piece layout in the metadata: " + e.what());
    }
    c.optimizer = safetensors_load((fs::path(dir) / rank_file("optimizer", rank, c.world)).string()).tensors;
  }
  c.config_yaml = read_file((fs::path(dir) / "config.yaml").string());
  const std::string state_path = (fs::path(dir) / "state.json").string();
  try {
    const auto j = read_state_json(dir);
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

Checkpoint checkpoint_consolidate(const std::string& dir) {
  const int64_t world = checkpoint_world(dir);
  if (world == 1) return checkpoint_load(dir);
  std::vector<Checkpoint> ranks;
  for (int64_t r = 0; r < world; ++r) ranks.push_back(checkpoint_load(dir, r));
  Checkpoint out;
  out.path = dir;
  out.state = ranks[0].state;
  out.config_yaml = ranks[0].config_yaml;
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& c : ranks) shapes.insert(c.shapes.begin(), c.shapes.end());
  // The pieces of `key` (a piece of parameter `param`) in rank order, joined and reshaped.
  auto join = [&](const std::string& key, const std::string& param, bool from_model) {
    std::vector<torch::Tensor> parts;
    int64_t next = 0;
    for (const auto& c : ranks) {
      const TensorDict& d = from_model ? c.model : c.optimizer;
      const auto it = d.find(key);
      if (it == d.end()) continue;
      const auto start = c.starts.find(param);
      if (start == c.starts.end() || start->second != next)
        throw std::runtime_error(dir + ": the pieces of '" + key + "' do not follow each other (rank " +
                                 std::to_string(c.rank) + ")");
      next += it->second.numel();
      parts.push_back(it->second.reshape(-1));
    }
    const auto& shape = shapes.at(param);
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    if (next != numel)
      throw std::runtime_error(dir + ": the pieces of '" + key + "' hold " + std::to_string(next) + " of " +
                               std::to_string(numel) + " elements");
    return torch::cat(parts).reshape(shape);
  };
  for (const auto& [param, shape] : shapes) out.model[param] = join(param, param, true);
  for (const auto& c : ranks)
    for (const auto& [key, t] : c.optimizer) {
      if (out.optimizer.count(key)) continue;
      const size_t dot = key.find('.');
      const std::string prefix = key.substr(0, dot), param = dot == std::string::npos ? "" : key.substr(dot + 1);
      if ((prefix == "exp_avg" || prefix == "exp_avg_sq") && shapes.count(param))
        out.optimizer[key] = join(key, param, false);
      else
        out.optimizer[key] = t;
    }
  return out;
}

}  // namespace normlab

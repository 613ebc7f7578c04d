#include "normlab/train/checkpoint.h"

#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "normlab/nn/experts.h"
#include "normlab/nn/weights.h"
#include "normlab/train/optimizer.h"
#include "normlab/util/file_io.h"

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
  std::snprintf(name, sizeof name, "%s.rank-%05lld-of-%05lld.safetensors", what.c_str(),
                static_cast<long long>(rank), static_cast<long long>(world));
  return name;
}

using Digests = std::map<std::string, FileDigest>;

// The CRC-32 of a state.json's content without its own "crc32" key, as written.
uint64_t state_crc(nlohmann::json j) {
  j.erase("crc32");
  const std::string text = j.dump(2);
  return crc32_of(text.data(), text.size());
}

std::string state_json(const TrainState& s, int64_t world, const Digests& files) {
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
  if (!s.precision.empty()) j["precision"] = s.precision;
  nlohmann::json listed = nlohmann::json::object();
  for (const auto& [name, d] : files) listed[name] = {{"bytes", d.bytes}, {"crc32", d.crc32}};
  j["files"] = listed;
  j["crc32"] = state_crc(j);
  return j.dump(2) + "\n";
}

// The files a checkpoint of `world` ranks must list.
std::vector<std::string> required_files(int64_t world) {
  if (world == 1) return {"config.yaml", "model.safetensors", "optimizer.safetensors"};
  std::vector<std::string> out = {"config.yaml"};
  for (int64_t r = 0; r < world; ++r) {
    out.push_back(rank_file("model", r, world));
    out.push_back(rank_file("optimizer", r, world));
  }
  return out;
}

std::string digests_file(int64_t rank, int64_t world) {
  char name[96];
  std::snprintf(name, sizeof name, "digests.rank-%05lld-of-%05lld.json",
                static_cast<long long>(rank), static_cast<long long>(world));
  return name;
}

// Leftovers of killed saves (step-N.tmp-PID, .tmp-sharded, .old-PID): stale under the run's lock.
void remove_stale_temporaries(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(kPrefix, 0) == 0 &&
        (name.find(".tmp-") != std::string::npos || name.find(".old-") != std::string::npos))
      fs::remove_all(e.path(), ec);
  }
}

// Deletes all but the newest `keep` complete checkpoints.
void prune(const std::string& run_dir, int64_t keep) {
  auto all = complete_checkpoints(run_dir);
  for (size_t i = 0; i + static_cast<size_t>(std::max<int64_t>(keep, 1)) < all.size(); ++i)
    fs::remove_all(all[i].second);
}

// Numbers from state.json, read only from JSON numbers of the right kind: nlohmann's get<>
// would convert 1e30 to an integer with undefined behaviour.
int64_t int_field(const nlohmann::json& j, const char* key, const std::string& path, int64_t min,
                  int64_t max) {
  const nlohmann::json& v = j.at(key);
  const bool ok = v.is_number_integer() &&
                  !(v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)) &&
                  v.get<int64_t>() >= min && v.get<int64_t>() <= max;
  if (!ok)
    throw CheckpointError(path + ": " + key + " = " + v.dump() + " is not an integer from " +
                          std::to_string(min) + " to " + std::to_string(max));
  return v.get<int64_t>();
}

double real_field(const nlohmann::json& v, const char* key, const std::string& path) {
  if (v.is_null()) return std::numeric_limits<double>::quiet_NaN();  // how JSON writes a NaN
  if (!v.is_number())
    throw CheckpointError(path + ": " + key + " = " + v.dump() + " is not a number");
  return v.get<double>();
}

constexpr int64_t kMaxWorld = 99999;  // rank files are numbered with five digits

int64_t world_of(const nlohmann::json& state, const std::string& dir) {
  if (!state.contains("world_size")) return 1;
  return int_field(state, "world_size", (fs::path(dir) / "state.json").string(), 1, kMaxWorld);
}

// state.json, its own checksum checked when it has one.
nlohmann::json read_state_json(const std::string& dir) {
  const std::string path = (fs::path(dir) / "state.json").string();
  const std::string text = read_file(path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(path + ": malformed checkpoint state (corrupted?): " + e.what());
  }
  if (!j.is_object())
    throw CheckpointError(path + ": malformed checkpoint state (not a JSON object)");
  // With a checksum, the file must also be exactly as written (a flipped bit in the white
  // space changes no value, but still means the storage corrupts data).
  if (j.contains("files") != j.contains("crc32"))  // written together; one alone is a damaged key
    throw CheckpointError(path + ": checksum mismatch: the file is corrupted");
  if (j.contains("crc32") &&
      (!j["crc32"].is_number_unsigned() || j["crc32"].get<uint64_t>() != state_crc(j) ||
       text != j.dump(2) + "\n"))
    throw CheckpointError(path + ": checksum mismatch: the file is corrupted");
  return j;
}

// state.json's "precision": absent (older checkpoints) is "", else one of the three names.
std::string precision_field(const nlohmann::json& j, const std::string& path) {
  const nlohmann::json v = j.value("precision", nlohmann::json(""));
  if (v != "" && v != "bf16" && v != "fp32" && v != "fp64")
    throw CheckpointError(path + ": precision is " + v.dump() + ", not bf16, fp32 or fp64");
  return v.get<std::string>();
}

// The "files" of a state.json: name -> digest; empty for checkpoints written without them.
Digests listed_files(const nlohmann::json& state, const std::string& dir) {
  Digests out;
  if (!state.contains("files")) return out;
  const std::string path = (fs::path(dir) / "state.json").string();
  const nlohmann::json& files = state["files"];
  if (!files.is_object()) throw CheckpointError(path + ": \"files\" is not an object");
  for (const auto& [name, d] : files.items()) {
    const fs::path file(name);
    if (name.empty() || file.has_parent_path() || file.is_absolute() || name == "." || name == "..")
      throw CheckpointError(path + ": lists '" + name +
                            "', which is not a file name in the checkpoint folder");
    if (!d.is_object() || !d.contains("bytes") || !d.contains("crc32") ||
        !d["bytes"].is_number_unsigned() || !d["crc32"].is_number_unsigned() ||
        d["crc32"].get<uint64_t>() > 0xffffffffull)
      throw CheckpointError(path + ": malformed entry for '" + name + "' in \"files\"");
    out[name] = {d["bytes"].get<uint64_t>(), static_cast<uint32_t>(d["crc32"].get<uint64_t>())};
  }
  return out;
}

// Maps dir/name and checks it against its listed digest (when the checkpoint has digests).
MappedFile open_checked(const std::string& dir, const std::string& name, const Digests& files) {
  const std::string path = (fs::path(dir) / name).string();
  MappedFile f(path);
  if (files.empty()) return f;
  const auto it = files.find(name);
  if (it == files.end()) throw CheckpointError(path + ": not listed in state.json's checksums");
  if (f.size() != it->second.bytes)
    throw CheckpointError(path + ": " + std::to_string(f.size()) + " bytes, state.json says " +
                          std::to_string(it->second.bytes) + " (truncated or corrupted)");
  const uint32_t crc = crc32_of(f.data(), f.size());
  if (crc != it->second.crc32)
    throw CheckpointError(path + ": checksum mismatch (CRC-32 " + std::to_string(crc) +
                          ", state.json says " + std::to_string(it->second.crc32) +
                          "): the file is corrupted");
  return f;
}

SafetensorsContent load_checked(const std::string& dir, const std::string& name,
                                const Digests& files) {
  const MappedFile f = open_checked(dir, name, files);
  return safetensors_parse(f.data(), f.size(), f.path());
}

}  // namespace

std::string checkpoint_save(const std::string& run_dir, const Checkpoint& c, int64_t keep,
                            WriteFault* fault) {
  const fs::path dir = fs::path(run_dir) / "checkpoints";
  fs::create_directories(dir);
  const std::string name = step_name(c.state.step);
  const fs::path final_dir = dir / name;
  remove_stale_temporaries(dir);
  {
    AtomicFolder folder(final_dir.string());  // an older checkpoint of the same step is replaced
    const fs::path tmp = folder.path();
    Digests files;
    files["model.safetensors"] =
        safetensors_save((tmp / "model.safetensors").string(), c.model, {{"format", "pt"}}, fault);
    files["optimizer.safetensors"] =
        safetensors_save((tmp / "optimizer.safetensors").string(), c.optimizer, {}, fault);
    files["config.yaml"] = write_file_atomic((tmp / "config.yaml").string(),
                                             [&](FileWriter& w) { w.write(c.config_yaml); }, fault);
    const std::string text = state_json(c.state, 1, files);
    write_file_atomic((tmp / "state.json").string(), [&](FileWriter& w) { w.write(text); },
                      fault);  // last
    folder.commit();
  }
  prune(run_dir, keep);
  return final_dir.string();
}

std::string checkpoint_save_sharded(const std::string& run_dir, const Checkpoint& c, int64_t keep,
                                    const std::function<void()>& barrier, WriteFault* fault) {
  const fs::path dir = fs::path(run_dir) / "checkpoints";
  const std::string name = step_name(c.state.step);
  const fs::path final_dir = dir / name;
  if (c.rank == 0) {
    fs::create_directories(dir);
    remove_stale_temporaries(dir);
  }
  // Rank 0 creates and commits the one temporary folder all ranks write into.
  AtomicFolder folder(final_dir.string(), name + ".tmp-sharded", /*create=*/c.rank == 0);
  const fs::path tmp = folder.path();
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
  // Each rank lists its own files' digests; rank 0 gathers them into state.json.
  nlohmann::json mine = nlohmann::json::object();
  for (const std::string what : {"model", "optimizer"}) {
    const std::string file = rank_file(what, c.rank, c.world);
    const FileDigest d = what == "model"
                             ? safetensors_save((tmp / file).string(), c.model, meta, fault)
                             : safetensors_save((tmp / file).string(), c.optimizer, {}, fault);
    mine[file] = {{"bytes", d.bytes}, {"crc32", d.crc32}};
  }
  const std::string mine_text = mine.dump();
  write_file_atomic((tmp / digests_file(c.rank, c.world)).string(),
                    [&](FileWriter& w) { w.write(mine_text); }, fault);
  barrier();
  if (c.rank == 0) {
    Digests files;
    for (int64_t r = 0; r < c.world; ++r) {
      const fs::path part = tmp / digests_file(r, c.world);
      const nlohmann::json listed = nlohmann::json::parse(read_file(part.string()));
      for (const auto& [file, d] : listed.items())
        files[file] = {d.at("bytes").get<uint64_t>(), d.at("crc32").get<uint32_t>()};
      fs::remove(part);
    }
    files["config.yaml"] = write_file_atomic((tmp / "config.yaml").string(),
                                             [&](FileWriter& w) { w.write(c.config_yaml); }, fault);
    const std::string text = state_json(c.state, c.world, files);
    write_file_atomic((tmp / "state.json").string(), [&](FileWriter& w) { w.write(text); }, fault);
    folder.commit();
    prune(run_dir, keep);
  }
  barrier();
  return final_dir.string();
}

int64_t checkpoint_world(const std::string& dir) { return world_of(read_state_json(dir), dir); }

std::string checkpoint_precision(const std::string& dir) {
  return precision_field(read_state_json(dir), (fs::path(dir) / "state.json").string());
}

std::string checkpoint_folder_of(const std::string& source) {
  if (fs::exists(fs::path(source) / "state.json")) return source;
  const auto latest = checkpoint_latest(source);
  if (!latest)
    throw CheckpointError(source +
                          ": neither a checkpoint folder nor a run folder with checkpoints");
  return *latest;
}

std::optional<std::string> checkpoint_latest(const std::string& run_dir) {
  const auto all = complete_checkpoints(run_dir);
  if (all.empty()) return std::nullopt;
  return all.back().second.string();
}

std::vector<std::string> checkpoint_verify(const std::string& dir) {
  const nlohmann::json state = read_state_json(dir);
  const Digests files = listed_files(state, dir);
  std::vector<std::string> checked;
  if (files.empty()) return checked;
  for (const std::string& name : required_files(world_of(state, dir)))
    if (!files.count(name))
      throw CheckpointError((fs::path(dir) / "state.json").string() + ": has no checksum for " +
                            name);
  for (const auto& [name, digest] : files) {
    open_checked(dir, name, files);
    checked.push_back(name);
  }
  return checked;
}

void checkpoint_check_values(const std::string& dir) {
  for (int64_t r = 0, world = checkpoint_world(dir); r < world; ++r) checkpoint_load(dir, r);
}

IntactCheckpoint checkpoint_latest_intact(const std::string& run_dir) {
  IntactCheckpoint out;
  auto all = complete_checkpoints(run_dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      checkpoint_verify(it->second.string());
      out.dir = it->second.string();
      break;
    } catch (const std::exception& e) {
      out.corrupted.emplace_back(it->second.string(), e.what());
    }
  }
  return out;
}

std::string checkpoint_set_aside(const std::string& dir) {
  std::string target = dir + ".corrupted";
  for (int k = 1; fs::exists(target); ++k) target = dir + ".corrupted-" + std::to_string(k);
  fs::rename(dir, target);
  fsync_directory(fs::path(dir).parent_path().string());
  return target;
}

Checkpoint checkpoint_load(const std::string& dir, int64_t rank) {
  Checkpoint c;
  c.path = dir;
  const nlohmann::json state = read_state_json(dir);
  const Digests files = listed_files(state, dir);
  c.world = world_of(state, dir);
  if (c.world == 1) {  // per-expert MoE weights and moments are stacked (experts.h)
    c.model = stack_legacy_experts(load_checked(dir, "model.safetensors", files).tensors);
    check_finite_weights(c.model, (fs::path(dir) / "model.safetensors").string());
    c.optimizer = stack_legacy_experts(load_checked(dir, "optimizer.safetensors", files).tensors);
    check_optimizer_state(c.optimizer, (fs::path(dir) / "optimizer.safetensors").string());
  } else {
    if (rank < 0 || rank >= c.world)
      throw CheckpointError(dir + " was written by " + std::to_string(c.world) +
                            " ranks: it has no rank " + std::to_string(rank));
    c.rank = rank;
    const std::string model_path = (fs::path(dir) / rank_file("model", rank, c.world)).string();
    SafetensorsContent m = load_checked(dir, rank_file("model", rank, c.world), files);
    c.model = std::move(m.tensors);
    try {
      const nlohmann::json layout = nlohmann::json::parse(m.metadata.at("pieces"));
      for (const auto& [param, e] : layout.items()) {
        c.starts[param] = int_field(e, "start", model_path, 0, INT64_MAX);
        std::vector<int64_t>& shape = c.shapes[param];
        for (const auto& d : e.at("shape")) {
          if (!d.is_number_unsigned() || d.get<uint64_t>() > uint64_t(INT64_MAX))
            throw CheckpointError(model_path + ": shape of '" + param + "' is not a list of sizes");
          shape.push_back(d.get<int64_t>());
        }
      }
    } catch (const std::exception& e) {
      throw CheckpointError(model_path + ": malformed piece layout in the metadata: " + e.what());
    }
    c.optimizer = load_checked(dir, rank_file("optimizer", rank, c.world), files).tensors;
    check_finite_weights(c.model, model_path);
    check_optimizer_state(c.optimizer,
                          (fs::path(dir) / rank_file("optimizer", rank, c.world)).string());
  }
  {
    const MappedFile f = open_checked(dir, "config.yaml", files);
    c.config_yaml.assign(f.data() ? f.data() : "", f.size());
  }
  const std::string state_path = (fs::path(dir) / "state.json").string();
  try {
    const auto& j = state;
    c.state.step = int_field(j, "step", state_path, 0, INT64_MAX);
    if (!j.at("tokens").is_number_unsigned())
      throw CheckpointError(state_path + ": tokens is not a count");
    c.state.tokens = j.at("tokens").get<uint64_t>();
    c.state.wall_seconds = real_field(j.at("wall_seconds"), "wall_seconds", state_path);
    c.state.max_grad_norm = real_field(j.at("max_grad_norm"), "max_grad_norm", state_path);
    c.state.skipped_steps = int_field(j, "skipped_steps", state_path, 0, INT64_MAX);
    c.state.spikes = int_field(j, "spikes", state_path, 0, INT64_MAX);
    for (const auto& v : j.at("spike_window"))
      c.state.spike_window.push_back(real_field(v, "spike_window", state_path));
    c.state.last_loss = real_field(j.at("last_loss"), "last_loss", state_path);
    c.state.last_val_loss = real_field(j.at("last_val_loss"), "last_val_loss", state_path);
    c.state.precision = precision_field(j, state_path);
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(state_path + ": malformed checkpoint state: " + e.what());
  }
  return c;
}

TensorDict checkpoint_load_model(const std::string& dir) {
  const nlohmann::json state = read_state_json(dir);
  if (world_of(state, dir) > 1) return checkpoint_consolidate(dir).model;
  const Digests files = listed_files(state, dir);
  open_checked(dir, "config.yaml", files);
  TensorDict model = stack_legacy_experts(load_checked(dir, "model.safetensors", files).tensors);
  check_finite_weights(model, (fs::path(dir) / "model.safetensors").string());
  return model;
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
        throw CheckpointError(dir + ": the pieces of '" + key +
                              "' do not follow each other (rank " + std::to_string(c.rank) + ")");
      next += it->second.numel();
      parts.push_back(it->second.reshape(-1));
    }
    const auto& shape = shapes.at(param);
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    if (next != numel)
      throw CheckpointError(dir + ": the pieces of '" + key + "' hold " + std::to_string(next) +
                            " of " + std::to_string(numel) + " elements");
    return torch::cat(parts).reshape(shape);
  };
  for (const auto& [param, shape] : shapes) out.model[param] = join(param, param, true);
  for (const auto& c : ranks)
    for (const auto& [key, t] : c.optimizer) {
      if (out.optimizer.count(key)) continue;
      const size_t dot = key.find('.');
      const std::string prefix = key.substr(0, dot),
                        param = dot == std::string::npos ? "" : key.substr(dot + 1);
      if ((prefix == "exp_avg" || prefix == "exp_avg_sq") && shapes.count(param))
        out.optimizer[key] = join(key, param, false);
      else
        out.optimizer[key] = t;
    }
  out.model = stack_legacy_experts(std::move(out.model));
  out.optimizer = stack_legacy_experts(std::move(out.optimizer));
  return out;
}

}  // namespace normlab

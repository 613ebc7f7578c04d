#include "normlab/train/export.h"

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "normlab/config/config_io.h"
#include "normlab/data/tokenizer.h"
#include "normlab/nn/weights.h"
#include "normlab/train/checkpoint.h"
#include "normlab/util/file_io.h"
#include "train/model_json.h"

namespace normlab {
namespace fs = std::filesystem;

namespace {

// The weights must build the configured model.
void check_weights(const ModelConfig& cfg, const TensorDict& weights, const std::string& where) {
  DecoderLM check(cfg, torch::kMeta);
  for (const auto& p : check->named_parameters()) {
    const auto it = weights.find(p.key());
    if (it == weights.end() || it->second.sizes() != p.value().sizes())
      throw CheckpointError(where + ": model.safetensors does not match config.yaml at " + p.key());
  }
}

}  // namespace

// A YAML scalar from config_flatten as a JSON value of the right type.
static nlohmann::json yaml_scalar_json(const std::string& text) {
  if (text == "~" || text == "null") return nullptr;
  if (text == "true") return true;
  if (text == "false") return false;
  if (text.size() >= 2 && text.front() == '"') return text.substr(1, text.size() - 2);
  char* end = nullptr;
  const long long i = std::strtoll(text.c_str(), &end, 10);
  if (end && *end == '\0' && !text.empty()) return i;
  const double d = std::strtod(text.c_str(), &end);
  if (end && *end == '\0' && !text.empty()) return d;
  return text;
}

nlohmann::json model_keys_json(const ModelConfig& model) {
  RunConfig cfg;
  cfg.model = model;
  nlohmann::json keys = nlohmann::json::object();
  for (const auto& [key, value] : config_flatten(cfg)) {
    if (key.rfind("model.", 0) != 0) continue;
    nlohmann::json* at = &keys;  // model.siamese.depth_scale -> {"siamese": {"depth_scale": ...}}
    std::string rest = key.substr(6);
    for (size_t dot; (dot = rest.find('.')) != std::string::npos; rest = rest.substr(dot + 1))
      at = &(*at)[rest.substr(0, dot)];
    (*at)[rest] = yaml_scalar_json(value);
  }
  return keys;
}

std::string export_model(const std::string& source, const std::string& out_dir, WriteFault* fault,
                         std::vector<std::string>* written, OutputFiles* contract) {
  const std::string ckpt_dir = checkpoint_folder_of(source);
  const Checkpoint ck = checkpoint_consolidate(ckpt_dir);  // a whole checkpoint loads as it is
  const std::string config_path = (fs::path(ckpt_dir) / "config.yaml").string();
  const RunConfig cfg = config_load(config_path);
  check_weights(cfg.model, ck.model, ckpt_dir);

  const nlohmann::json config = {{"format", "normlab"},
                                 {"version", 1},
                                 {"architecture", "DecoderLM"},
                                 {"model", model_keys_json(cfg.model)},
                                 {"checkpoint", fs::absolute(ckpt_dir).string()},
                                 {"step", ck.state.step}};

  StagedFiles folder(out_dir, contract);  // beside what the folder holds; files replaced one by one
  const fs::path tmp = folder.path();
  safetensors_save((tmp / "model.safetensors").string(), ck.model, {{"format", "pt"}}, fault);
  const std::string text = config.dump(2) + "\n";
  write_file_atomic((tmp / "config.json").string(), [&](FileWriter& w) { w.write(text); }, fault);
  if (!cfg.data.tokenizer.empty() && fs::exists(cfg.data.tokenizer))
    fs::copy_file(cfg.data.tokenizer,
                  tmp / (Tokenizer(cfg.data.tokenizer).is_tokenizer_json() ? "tokenizer.json"
                                                                           : "tokenizer.model"));
  const std::vector<std::string> names = folder.commit();
  if (written) *written = names;
  return ckpt_dir;
}

ModelConfig export_config(const std::string& dir) {
  const std::string path = (fs::path(dir) / "config.json").string();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(path + ": invalid JSON: " + e.what());
  }
  if (j.value("format", "") != "normlab" || !j.contains("model"))
    throw CheckpointError(path + ": not a normlab export (no format/model)");
  // The model keys become --set overrides, so they go through the same strict checks.
  std::vector<std::string> overrides;
  std::function<void(const nlohmann::json&, const std::string&)> walk =
      [&](const nlohmann::json& v, const std::string& key) {
        if (v.is_object()) {
          for (auto it = v.begin(); it != v.end(); ++it) walk(it.value(), key + "." + it.key());
        } else {
          overrides.push_back(key + "=" + v.dump());  // JSON scalars are valid YAML
        }
      };
  walk(j["model"], "model");
  try {
    return config_load("", overrides).model;
  } catch (const ConfigError& e) {
    throw CheckpointError(path + ": " + e.what());
  }
}

DecoderLM import_model(const std::string& dir, torch::Device device) {
  DecoderLM model(export_config(dir), device);
  const std::string weights = (fs::path(dir) / "model.safetensors").string();
  load_weights(*model, read_weight_file(weights), weights);
  return model;
}

LoadedModel load_model(const std::string& source, torch::Device device) {
  LoadedModel m;
  if (fs::exists(fs::path(source) / "config.json")) {
    m.model = import_model(source, device);
    m.from = source;
    for (const char* name : {"tokenizer.model", "tokenizer.json"})
      if (fs::exists(fs::path(source) / name)) m.tokenizer = (fs::path(source) / name).string();
    try {
      m.step = nlohmann::json::parse(read_file((fs::path(source) / "config.json").string()))
                   .value("step", int64_t{-1});
    } catch (const nlohmann::json::exception&) {
      // import_model has read it already; a missing step is fine
    }
    return m;
  }
  m.from = checkpoint_folder_of(source);
  const RunConfig cfg = config_load((fs::path(m.from) / "config.yaml").string());
  const bool sharded = checkpoint_world(m.from) > 1;
  const std::string weights = sharded ? m.from : (fs::path(m.from) / "model.safetensors").string();
  const TensorDict tensors = checkpoint_load_model(m.from);  // checksums checked
  check_weights(cfg.model, tensors, m.from);
  m.model = DecoderLM(cfg.model, device);
  load_weights(*m.model, tensors, weights);
  m.tokenizer = cfg.data.tokenizer;
  m.seq_len = cfg.data.seq_len;
  try {
    m.step = nlohmann::json::parse(read_file((fs::path(m.from) / "state.json").string()))
                 .value("step", int64_t{-1});
  } catch (const nlohmann::json::exception&) {
    m.step = -1;
  }
  return m;
}

}  // namespace normlab

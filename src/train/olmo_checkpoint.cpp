#include "normlab/train/olmo_checkpoint.h"

#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <regex>
#include <stdexcept>
#include <vector>

#include "normlab/config/config_io.h"
#include "normlab/nn/model.h"
#include "normlab/nn/weights.h"
#include "normlab/train/checkpoint.h"
#include "normlab/train/imported_run.h"
#include "normlab/util/file_io.h"

namespace normlab {
namespace fs = std::filesystem;

namespace {

// normlab module path (inside a block, or at the top) -> the official one.
const std::map<std::string, std::string>& top_names() {
  static const std::map<std::string, std::string> names = {
      {"embed.weight", "transformer.wte.weight"},
      {"head.weight", "transformer.ff_out.weight"},
      {"final_norm_x.weight", "transformer.ln_f.weight"},
      {"final_norm_y.weight", "transformer.ln_y_f.weight"},
      {"final_norm.weight", "transformer.ln_final_f.weight"}};
  return names;
}

const std::map<std::string, std::string>& block_names() {
  static const std::map<std::string, std::string> names = {
      {"attn.qkv.weight", "att_proj.weight"},       {"attn.out.weight", "attn_out.weight"},
      {"attn.q_norm.weight", "q_norm.weight"},      {"attn.k_norm.weight", "k_norm.weight"},
      {"attn.v_norm.weight", "v_norm.weight"},      {"mlp.up.weight", "ff_proj.weight"},
      {"mlp.down.weight", "ff_out.weight"},         {"c1", "c1"},
      {"attn_y_norm.weight", "attn_y_norm.weight"}, {"mlp_norm.weight", "ff_norm.weight"},
      {"mlp_y_norm.weight", "ff_y_norm.weight"},    {"mlp_in_norm.weight", "ff_input_norm.weight"}};
  return names;
}

}  // namespace

void olmo_check_config(const ModelConfig& cfg) {
  if (cfg.scheme == Scheme::Hyper)
    throw ConfigError(
        "model.scheme = hyper: the official SiameseNorm code's checkpoints have no names for "
        "Hyper-Connections' parameters (its hc model type is not in its published code), so "
        "the OLMo format cannot hold this model; use --format normlab or --format hf");
  if (cfg.scheme != Scheme::SiameseHybrid)
    throw ConfigError("model.scheme = " + std::string(enum_name(cfg.scheme)) +
                      ": the official SiameseNorm code's checkpoints hold siamese_hybrid "
                      "(hybrid-pre) models only");
  if (cfg.siamese.hyper.enabled())
    throw ConfigError("model.siamese.hyper.n = " + std::to_string(cfg.siamese.hyper.n) +
                      ": the official SiameseNorm code has no Hyper-Connections, so the OLMo "
                      "format cannot hold this model; use --format normlab or --format hf");
  if (cfg.tie_embeddings)
    throw ConfigError(
        "model.tie_embeddings = true: the official SiameseNorm code's hybrid-pre model has an "
        "untied head (transformer.ff_out.weight)");
  if (cfg.moe.enabled())
    throw ConfigError("model.moe.n_experts = " + std::to_string(cfg.moe.n_experts) +
                      ": the official SiameseNorm code's checkpoints hold dense models only");
}

std::string olmo_name(const std::string& name) {
  const auto top = top_names().find(name);
  if (top != top_names().end()) return top->second;
  static const std::regex block(R"(blocks\.([0-9]+)\.(.+))");
  std::smatch m;
  if (std::regex_match(name, m, block)) {
    const auto it = block_names().find(m[2].str());
    if (it != block_names().end()) return "transformer.blocks." + m[1].str() + "." + it->second;
  }
  throw std::invalid_argument("'" + name + "' has no name in the official SiameseNorm code");
}

TensorDict olmo_from_normlab(const TensorDict& weights) {
  TensorDict out;
  for (const auto& [name, t] : weights) out[olmo_name(name)] = t;
  return out;
}

TensorDict olmo_to_normlab(const TensorDict& olmo, const ModelConfig& cfg,
                           const std::string& what) {
  olmo_check_config(cfg);
  DecoderLM model(cfg, torch::kMeta);
  std::map<std::string, std::pair<std::string, torch::Tensor>> wanted;  // official -> ours
  for (const auto& p : model->named_parameters()) wanted[olmo_name(p.key())] = {p.key(), p.value()};
  std::vector<std::string> unknown, missing, shapes;
  for (const auto& [name, t] : olmo)
    if (!wanted.count(name)) unknown.push_back(name);
  TensorDict out;
  for (const auto& [name, ours] : wanted) {
    const auto it = olmo.find(name);
    if (it == olmo.end()) {
      missing.push_back(name);
    } else if (it->second.sizes() != ours.second.sizes()) {
      shapes.push_back(name + " (" + ours.first + "): " + imported_shape_text(it->second) +
                       " in the file, " + imported_shape_text(ours.second) +
                       " in the configured model");
    } else {
      out[ours.first] = it->second.to(torch::kCPU, torch::kFloat).contiguous();
    }
  }
  if (unknown.empty() && missing.empty() && shapes.empty()) return out;
  std::string msg = what + " does not hold the configured siamese_hybrid model (" +
                    std::to_string(cfg.n_layers) + " layers, d_model " +
                    std::to_string(cfg.d_model) + "):";
  if (!unknown.empty()) msg += "\n  names the model does not have:" + imported_name_lines(unknown);
  if (!missing.empty())
    msg += "\n  names the model needs and the file lacks:" + imported_name_lines(missing);
  if (!shapes.empty()) msg += "\n  shapes that differ:" + imported_name_lines(shapes);
  msg +=
      "\n  (check the config's model section: n_layers, d_model, n_heads, n_kv_heads, d_ff, "
      "vocab_size, model.siamese.input_norm for ff_input_norm, model.siamese.output_fusion for "
      "ln_final_f)";
  throw CheckpointError(msg);
}

TensorDict olmo_read(const std::string& file_or_dir) {
  std::string file = file_or_dir;
  if (fs::is_directory(file_or_dir)) {
    std::vector<std::string> found;
    for (const auto& e : fs::directory_iterator(file_or_dir))
      if (e.path().extension() == ".safetensors") found.push_back(e.path().string());
    const std::string model = (fs::path(file_or_dir) / "model.safetensors").string();
    if (fs::exists(model))
      file = model;
    else if (found.size() == 1)
      file = found[0];
    else
      throw CheckpointError(file_or_dir + ": expected model.safetensors or a single .safetensors " +
                            "file, found " + std::to_string(found.size()));
  } else if (!fs::exists(file_or_dir)) {
    throw CheckpointError(file_or_dir + ": no such file or folder");
  }
  return read_weight_file(file);
}

std::string olmo_import(const std::string& file_or_dir, const RunConfig& cfg,
                        const std::string& run_dir, int64_t step) {
  olmo_check_config(cfg.model);
  if (checkpoint_latest(run_dir))
    throw CheckpointError(run_dir + " already holds checkpoints: choose another --out");
  const TensorDict weights = olmo_to_normlab(olmo_read(file_or_dir), cfg.model, file_or_dir);
  return imported_run_save(weights, cfg, run_dir, step, file_or_dir);
}

std::string olmo_export(const std::string& source, const std::string& out_dir,
                        std::vector<std::string>* written, OutputFiles* contract) {
  const std::string ckpt_dir = checkpoint_folder_of(source);
  const RunConfig cfg = config_load((fs::path(ckpt_dir) / "config.yaml").string());
  olmo_check_config(cfg.model);
  const TensorDict weights = checkpoint_load_model(ckpt_dir);
  StagedFiles folder(out_dir, contract);  // beside what the folder holds (export.h)
  safetensors_save((fs::path(folder.path()) / "model.safetensors").string(),
                   olmo_from_normlab(weights), {{"format", "pt"}});
  write_file_atomic((fs::path(folder.path()) / "normlab_config.yaml").string(),
                    [&](FileWriter& w) { w.write(config_to_yaml(cfg)); });
  const std::vector<std::string> names = folder.commit();
  if (written) *written = names;
  return ckpt_dir;
}

}  // namespace normlab

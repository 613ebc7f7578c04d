#include "normlab/train/hf_import.h"

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <stdexcept>

#include "normlab/nn/model.h"
#include "normlab/nn/weights.h"
#include "normlab/train/checkpoint.h"
#include "normlab/train/imported_run.h"
#include "normlab/util/error.h"

namespace normlab {
namespace fs = std::filesystem;

namespace {

// The experts of one MoE MLP, `rest` being the name below blocks.<l>.mlp. (experts.up, stacked
// (E, 2 d_expert, C), or experts.down, (E, C, d_expert)); `hf` the Hugging Face prefix
// model.layers.<l>.mlp., whose experts are one module each -- the one place that knows how
// normlab stores experts. Expert by expert, up's value half (up_proj) before its gate.
std::vector<std::string> hf_expert_sources(const std::string& rest, const std::string& hf,
                                           int64_t n_experts) {
  if (rest != "experts.up" && rest != "experts.down") return {};
  std::vector<std::string> out;
  for (int64_t e = 0; e < n_experts; ++e) {
    const std::string x = hf + "experts." + std::to_string(e) + ".";
    if (rest == "experts.up")
      out.insert(out.end(), {x + "up_proj.weight", x + "gate_proj.weight"});
    else
      out.push_back(x + "down_proj.weight");
  }
  return out;
}

// normlab name inside block l -> the Hugging Face names (below model.layers.<l>.).
const std::map<std::string, std::vector<std::string>>& hf_block_sources() {
  static const std::map<std::string, std::vector<std::string>> names = {
      {"attn_norm.weight", {"input_layernorm.weight"}},
      {"mlp_norm.weight", {"post_attention_layernorm.weight"}},
      // OLMo-2 (reordered_norm): the norms after attention and after the MLP
      {"attn_out_norm.weight", {"post_attention_layernorm.weight"}},
      {"mlp_out_norm.weight", {"post_feedforward_layernorm.weight"}},
      {"attn.qkv.weight",
       {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"}},
      {"attn.out.weight", {"self_attn.o_proj.weight"}},
      {"attn.q_norm.weight", {"self_attn.q_norm.weight"}},
      {"attn.k_norm.weight", {"self_attn.k_norm.weight"}},
      {"mlp.up.weight", {"mlp.up_proj.weight", "mlp.gate_proj.weight"}},
      {"mlp.down.weight", {"mlp.down_proj.weight"}},
      {"mlp.router.weight", {"mlp.gate.weight"}}};
  return names;
}

std::string hf_joined(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : " + ") + n;
  return s;
}

// The sources joined along dim 0 as the parameter `want`, or "" and `error` set when their shapes
// do not make it. A parameter with one more dimension than its sources (experts stacked) takes
// them stacked.
torch::Tensor hf_join_sources(const std::vector<torch::Tensor>& parts, const torch::Tensor& want,
                              std::string& error) {
  std::string shapes;
  bool same_rank = true;
  for (const torch::Tensor& p : parts) {
    shapes += (shapes.empty() ? "" : " + ") + imported_shape_text(p);
    same_rank =
        same_rank && p.dim() == parts[0].dim() && p.sizes().slice(1) == parts[0].sizes().slice(1);
  }
  if (same_rank) {
    const torch::Tensor t = torch::cat(parts, 0);
    if (t.sizes() == want.sizes()) return t;
    if (want.dim() == t.dim() + 1 && t.numel() == want.numel() && t.size(-1) == want.size(-1))
      return t.view(want.sizes());
  }
  error =
      shapes + " in the file, " + imported_shape_text(want) + " in the model config.json describes";
  return {};
}

// Names in a checkpoint that are not weights: RoPE tables some versions saved.
bool hf_ignorable(const std::string& name) {
  return name.size() >= 9 && name.compare(name.size() - 9, 9, ".inv_freq") == 0;
}

// lm_head.weight of a tied model, saved anyway as the embedding's copy.
bool hf_tied_copy(const TensorDict& hf, const std::string& name, const ModelConfig& cfg) {
  const auto embed = hf.find("model.embed_tokens.weight");
  return cfg.tie_embeddings && name == "lm_head.weight" && embed != hf.end() &&
         embed->second.sizes() == hf.at(name).sizes() && torch::equal(embed->second, hf.at(name));
}

}  // namespace

std::vector<std::string> hf_sources(const std::string& name, const ModelConfig& cfg) {
  if (name == "embed.weight") return {"model.embed_tokens.weight"};
  if (name == "head.weight") return {"lm_head.weight"};
  if (name == "final_norm.weight") return {"model.norm.weight"};
  static const std::regex block(R"(blocks\.([0-9]+)\.(.+))");
  std::smatch m;
  if (std::regex_match(name, m, block)) {
    const std::string hf = "model.layers." + m[1].str() + ".";
    const auto it = hf_block_sources().find(m[2].str());
    if (it != hf_block_sources().end()) {
      std::vector<std::string> out;
      for (const std::string& s : it->second) out.push_back(hf + s);
      return out;
    }
    const std::string rest = m[2].str();
    if (rest.rfind("mlp.", 0) == 0) {
      std::vector<std::string> out =
          hf_expert_sources(rest.substr(4), hf + "mlp.", cfg.moe.n_experts);
      if (!out.empty()) return out;
    }
  }
  throw std::invalid_argument("'" + name + "' has no Hugging Face name");
}

TensorDict hf_read(const std::string& dir) {
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  const fs::path single = fs::path(dir) / "model.safetensors";
  if (!fs::exists(index)) {
    if (!fs::exists(single))
      throw CheckpointError(dir +
                            ": no model.safetensors or model.safetensors.index.json (a "
                            "save_pretrained folder with safetensors weights is needed)");
    return read_weight_file(single.string());
  }
  std::map<std::string, std::vector<std::string>> shards;  // file -> names the index puts there
  try {
    std::ifstream in(index);
    const nlohmann::json j = nlohmann::json::parse(in);
    for (const auto& [name, file] : j.at("weight_map").items())
      shards[file.get<std::string>()].push_back(name);
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(index.string() + ": not a safetensors index (" + e.what() + ")");
  }
  TensorDict out;
  for (const auto& [file, names] : shards) {
    const fs::path path = fs::path(dir) / file;
    if (!fs::exists(path))
      throw CheckpointError(path.string() + ": no such file (listed in " + index.string() + ")");
    TensorDict shard = read_weight_file(path.string());
    for (const std::string& name : names) {
      if (!shard.count(name))
        throw CheckpointError(path.string() + ": has no " + name + " (" + index.string() +
                              " puts it there)");
      out[name] = shard[name];
    }
  }
  return out;
}

TensorDict hf_to_normlab(const TensorDict& hf, const ModelConfig& cfg, const std::string& what) {
  DecoderLM model(cfg, torch::kMeta);
  std::set<std::string> used;
  std::vector<std::string> missing, shapes;
  TensorDict out;
  for (const auto& p : model->named_parameters()) {
    const std::vector<std::string> sources = hf_sources(p.key(), cfg);
    std::vector<torch::Tensor> parts;
    for (const std::string& s : sources) {
      const auto it = hf.find(s);
      if (it == hf.end())
        missing.push_back(s);
      else
        parts.push_back(it->second.to(torch::kCPU, torch::kFloat));
      used.insert(s);
    }
    if (parts.size() != sources.size()) continue;
    std::string error;
    const torch::Tensor t = hf_join_sources(parts, p.value(), error);
    if (!error.empty())
      shapes.push_back(hf_joined(sources) + " (" + p.key() + "): " + error);
    else
      out[p.key()] = t.contiguous();
  }
  std::vector<std::string> unknown;
  for (const auto& [name, t] : hf)
    if (!used.count(name) && !hf_ignorable(name) && !hf_tied_copy(hf, name, cfg))
      unknown.push_back(name);
  if (unknown.empty() && missing.empty() && shapes.empty()) return out;
  std::string msg = what + " does not hold the model its config.json describes:";
  if (!unknown.empty()) msg += "\n  names the model does not have:" + imported_name_lines(unknown);
  if (!missing.empty())
    msg += "\n  names the model needs and the files lack:" + imported_name_lines(missing);
  if (!shapes.empty()) msg += "\n  shapes that differ:" + imported_name_lines(shapes);
  throw CheckpointError(msg);
}

std::string hf_import(const std::string& dir, const RunConfig& cfg, const std::string& run_dir,
                      int64_t step) {
  if (checkpoint_latest(run_dir))
    throw CheckpointError(run_dir + " already holds checkpoints: choose another --out");
  const TensorDict weights = hf_to_normlab(hf_read(dir), cfg.model, dir);
  return imported_run_save(weights, cfg, run_dir, step, dir);
}

}  // namespace normlab

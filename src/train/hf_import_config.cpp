// config.json of a Hugging Face save_pretrained folder -> normlab's model section
// (hf_import.h). Every key that changes what the model computes is either mapped or refused by
// name; keys that only matter to transformers (use_cache, token ids, dtype, ...) are ignored.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "normlab/train/hf_import.h"
#include "normlab/util/error.h"

namespace normlab {
namespace fs = std::filesystem;

namespace {

using Json = nlohmann::json;

// config.json with its path, for errors that name the file, the key and the value.
class HfConfig {
 public:
  explicit HfConfig(const std::string& dir) : path_((fs::path(dir) / "config.json").string()) {
    std::ifstream in(path_);
    if (!in) throw ConfigError(path_ + ": no such file (a save_pretrained folder has one)");
    try {
      j_ = Json::parse(in);
    } catch (const Json::exception& e) {
      throw ConfigError(path_ + ": not JSON (" + e.what() + ")");
    }
    if (!j_.is_object()) throw ConfigError(path_ + ": not a JSON object");
  }

  [[noreturn]] void refuse(const std::string& key, const std::string& why) const {
    throw ConfigError(path_ + ": " + key + " = " + value(key) + ": " + why);
  }
  std::string value(const std::string& key) const {
    return j_.contains(key) ? j_[key].dump() : "(absent)";
  }
  bool has(const std::string& key) const { return j_.contains(key) && !j_[key].is_null(); }
  const Json& at(const std::string& key) const { return j_.at(key); }

  int64_t integer(const std::string& key) const {
    if (!has(key) || !j_[key].is_number_integer() || j_[key].get<int64_t>() <= 0)
      refuse(key, "a positive integer is needed");
    return j_[key].get<int64_t>();
  }
  int64_t integer(const std::string& key, int64_t absent) const {
    return has(key) ? integer(key) : absent;
  }
  double number(const std::string& key, double absent) const {
    if (!has(key)) return absent;
    if (!j_[key].is_number()) refuse(key, "a number is needed");
    return j_[key].get<double>();
  }
  bool flag(const std::string& key, bool absent) const {
    if (!has(key)) return absent;
    if (!j_[key].is_boolean()) refuse(key, "true or false is needed");
    return j_[key].get<bool>();
  }
  std::string text(const std::string& key, const std::string& absent) const {
    if (!has(key)) return absent;
    if (!j_[key].is_string()) refuse(key, "a string is needed");
    return j_[key].get<std::string>();
  }

 private:
  std::string path_;
  Json j_;
};

// The one architecture, Llama, OLMoE or OLMo-2; the others refused by name.
std::string hf_architecture(const HfConfig& c) {
  const std::string key = "architectures";
  if (!c.has(key) || !c.at(key).is_array() || c.at(key).size() != 1 || !c.at(key)[0].is_string())
    c.refuse(key, "one architecture name is needed");
  const std::string arch = c.at(key)[0].get<std::string>();
  if (arch != "LlamaForCausalLM" && arch != "OlmoeForCausalLM" && arch != "Olmo2ForCausalLM")
    c.refuse(key, "normlab imports LlamaForCausalLM, OlmoeForCausalLM and Olmo2ForCausalLM");
  return arch;
}

// RoPE as normlab computes it (default, all of head_dim): its theta, or a refusal.
double hf_rope_theta(const HfConfig& c) {
  if (c.has("rope_scaling"))
    c.refuse("rope_scaling", "normlab's RoPE has no scaling (null is the default RoPE)");
  if (c.number("partial_rotary_factor", 1.0) != 1.0)
    c.refuse("partial_rotary_factor", "normlab rotates all of head_dim");
  if (!c.has("rope_parameters")) return c.number("rope_theta", 10000.0);
  const Json& p = c.at("rope_parameters");
  if (!p.is_object()) c.refuse("rope_parameters", "an object is needed");
  for (const auto& [key, v] : p.items()) {
    const bool default_type = (key == "rope_type" || key == "type") && v == "default";
    const bool theta = key == "rope_theta" && v.is_number();
    if (!default_type && !theta && !(key == "partial_rotary_factor" && v == 1.0))
      c.refuse("rope_parameters",
               "\"" + key + "\": " + v.dump() +
                   " is not normlab's RoPE (rope_type \"default\" and rope_theta only)");
  }
  return p.contains("rope_theta") ? p["rope_theta"].get<double>() : 10000.0;
}

// Options of the branches normlab has no form of.
void hf_refuse_unsupported(const HfConfig& c) {
  if (c.text("hidden_act", "silu") != "silu")
    c.refuse("hidden_act", "normlab's MLP is SwiGLU (silu)");
  if (c.flag("attention_bias", false))
    c.refuse("attention_bias", "normlab's attention has no biases");
  if (c.flag("mlp_bias", false)) c.refuse("mlp_bias", "normlab's MLP has no biases");
  if (c.has("clip_qkv")) c.refuse("clip_qkv", "normlab does not clip q, k and v");
  if (c.number("attention_dropout", 0.0) != 0.0)
    c.refuse("attention_dropout", "normlab's attention has no dropout");
  if (c.has("quantization_config"))
    c.refuse("quantization_config", "normlab reads unquantized weights only");
  if (c.has("sliding_window") && c.flag("use_sliding_window", true))
    c.refuse("sliding_window", "normlab's attention is full causal attention");
}

void hf_set_shape(const HfConfig& c, ModelConfig& m) {
  m.vocab_size = c.integer("vocab_size");
  m.d_model = c.integer("hidden_size");
  m.n_layers = c.integer("num_hidden_layers");
  m.n_heads = c.integer("num_attention_heads");
  m.n_kv_heads = c.integer("num_key_value_heads", m.n_heads);
  m.d_ff = c.integer("intermediate_size");
  if (m.d_model % m.n_heads != 0)
    c.refuse("num_attention_heads",
             "normlab needs hidden_size (" + std::to_string(m.d_model) + ") divisible by it");
  if (c.integer("head_dim", m.d_model / m.n_heads) != m.d_model / m.n_heads)
    c.refuse("head_dim", "normlab's head_dim is hidden_size / num_attention_heads = " +
                             std::to_string(m.d_model / m.n_heads));
}

void hf_set_moe(const HfConfig& c, ModelConfig& m) {
  m.moe.n_experts = c.integer("num_experts");
  m.moe.top_k = c.integer("num_experts_per_tok");
  m.moe.d_expert = m.d_ff;
  m.moe.every = 1;
  m.moe.renormalize = c.flag("norm_topk_prob", false);
  m.moe.lb_loss_weight = c.number("router_aux_loss_coef", m.moe.lb_loss_weight);
}

}  // namespace

RunConfig hf_run_config(const std::string& dir, const RunConfig& base) {
  const HfConfig c(dir);
  const std::string arch = hf_architecture(c);
  hf_refuse_unsupported(c);
  RunConfig cfg = base;
  ModelConfig& m = cfg.model;
  m = ModelConfig{};
  m.init = base.model.init;
  m.init_std = base.model.init_std;
  m.moe.z_loss_weight = base.model.moe.z_loss_weight;
  m.moe.dispatch = base.model.moe.dispatch;
  // OLMo-2 normalises each sub-layer's output and not its input (the reordered norm).
  m.scheme = arch == "Olmo2ForCausalLM" ? Scheme::ReorderedNorm : Scheme::PreNorm;
  m.norm_type = NormType::RmsNorm;
  hf_set_shape(c, m);
  // Absent: the default of transformers' config class.
  m.norm_eps = c.number("rms_norm_eps", arch == "LlamaForCausalLM" ? 1e-6 : 1e-5);
  m.rope_theta = hf_rope_theta(c);
  m.tie_embeddings = c.flag("tie_word_embeddings", false);
  if (arch != "LlamaForCausalLM") m.qk_norm = QkNorm::Full;
  if (arch == "OlmoeForCausalLM") hf_set_moe(c, m);
  const int64_t max_pos = c.integer("max_position_embeddings", cfg.data.seq_len);
  if (cfg.data.seq_len > max_pos)
    c.refuse("max_position_embeddings",
             "data.seq_len = " + std::to_string(cfg.data.seq_len) +
                 " goes beyond the positions the model was trained for; set data.seq_len <= " +
                 std::to_string(max_pos));
  validate(cfg);
  return cfg;
}

}  // namespace normlab

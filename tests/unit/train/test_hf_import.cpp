// Hugging Face checkpoints (train/hf_import.h): the Hugging Face names of every parameter of a
// Llama, an OLMoE and an OLMo-2 model, pinned with their order; the joined tensors; the model
// section a config.json gives; the options it cannot express, refused by key; the errors of a
// folder that does not hold its model, and a tied head saved anyway. tests/cli/hf_import.sh checks
// the logits against transformers.
#include <torch/torch.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <vector>

#include "normlab/config/config.h"
#include "normlab/nn/model.h"
#include "normlab/train/hf_import.h"
#include "normlab/util/error.h"
#include "support.h"

using namespace normlab;
namespace fs = std::filesystem;

namespace {

using Sources = std::map<std::string, std::vector<std::string>>;

// normlab name -> the Hugging Face names joined into it, written out independently of the
// library's table.
Sources hf_names(int layers, bool tied, int experts) {
  Sources n = {{"embed.weight", {"model.embed_tokens.weight"}},
               {"final_norm.weight", {"model.norm.weight"}}};
  if (!tied) n["head.weight"] = {"lm_head.weight"};
  for (int l = 0; l < layers; ++l) {
    const std::string ours = "blocks." + std::to_string(l) + ".";
    const std::string hf = "model.layers." + std::to_string(l) + ".";
    n[ours + "attn_norm.weight"] = {hf + "input_layernorm.weight"};
    n[ours + "mlp_norm.weight"] = {hf + "post_attention_layernorm.weight"};
    n[ours + "attn.qkv.weight"] = {hf + "self_attn.q_proj.weight", hf + "self_attn.k_proj.weight",
                                   hf + "self_attn.v_proj.weight"};
    n[ours + "attn.out.weight"] = {hf + "self_attn.o_proj.weight"};
    if (experts == 0) {
      n[ours + "mlp.up.weight"] = {hf + "mlp.up_proj.weight", hf + "mlp.gate_proj.weight"};
      n[ours + "mlp.down.weight"] = {hf + "mlp.down_proj.weight"};
      continue;
    }
    n[ours + "attn.q_norm.weight"] = {hf + "self_attn.q_norm.weight"};
    n[ours + "attn.k_norm.weight"] = {hf + "self_attn.k_norm.weight"};
    n[ours + "mlp.router.weight"] = {hf + "mlp.gate.weight"};
    for (int e = 0; e < experts; ++e) {
      const std::string x = hf + "mlp.experts." + std::to_string(e) + ".";
      n[ours + "mlp.experts.up"].push_back(x + "up_proj.weight");
      n[ours + "mlp.experts.up"].push_back(x + "gate_proj.weight");
      n[ours + "mlp.experts.down"].push_back(x + "down_proj.weight");
    }
  }
  return n;
}

// OLMo-2: the reordered norm's two output norms in place of Llama's two input norms, and the
// full-width q/k norms.
Sources olmo2_hf_names(int layers) {
  Sources n = hf_names(layers, false, 0);
  for (int l = 0; l < layers; ++l) {
    const std::string ours = "blocks." + std::to_string(l) + ".";
    const std::string hf = "model.layers." + std::to_string(l) + ".";
    n.erase(ours + "attn_norm.weight");
    n.erase(ours + "mlp_norm.weight");
    n[ours + "attn_out_norm.weight"] = {hf + "post_attention_layernorm.weight"};
    n[ours + "mlp_out_norm.weight"] = {hf + "post_feedforward_layernorm.weight"};
    n[ours + "attn.q_norm.weight"] = {hf + "self_attn.q_norm.weight"};
    n[ours + "attn.k_norm.weight"] = {hf + "self_attn.k_norm.weight"};
  }
  return n;
}

ModelConfig olmo2_config() {
  ModelConfig cfg = test::tiny_config(Scheme::ReorderedNorm);
  cfg.qk_norm = QkNorm::Full;
  return cfg;
}

ModelConfig olmoe_config() {
  ModelConfig cfg = test::tiny_config(Scheme::PreNorm);
  cfg.qk_norm = QkNorm::Full;
  cfg.moe.n_experts = 3;
  cfg.moe.top_k = 2;
  return cfg;
}

// A folder holding config.json with `json`, removed with the object.
struct HfFolder {
  explicit HfFolder(const std::string& json) {
    path =
        (fs::temp_directory_path() / ("normlab_hf_import_" + std::to_string(::getpid()))).string();
    fs::create_directories(path);
    test::write_text(path + "/config.json", json);
  }
  ~HfFolder() { fs::remove_all(path); }
  std::string path;
};

const char* const kOlmo2 = R"({"architectures": ["Olmo2ForCausalLM"], "vocab_size": 96,
  "hidden_size": 32, "intermediate_size": 24, "num_hidden_layers": 3, "num_attention_heads": 4,
  "num_key_value_heads": 2, "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"},
  "tie_word_embeddings": false, "max_position_embeddings": 4096, "attention_bias": false,
  "attention_dropout": 0.0, "hidden_act": "silu"})";

const char* const kOlmoe = R"({"architectures": ["OlmoeForCausalLM"], "vocab_size": 96,
  "hidden_size": 32, "intermediate_size": 24, "num_hidden_layers": 3, "num_attention_heads": 4,
  "num_key_value_heads": 2, "rms_norm_eps": 1e-05, "rope_parameters": {"rope_theta": 5000.0,
  "rope_type": "default"}, "tie_word_embeddings": false, "max_position_embeddings": 4096,
  "num_experts": 6, "num_experts_per_tok": 2, "norm_topk_prob": true, "clip_qkv": null,
  "router_aux_loss_coef": 0.02, "attention_bias": false, "hidden_act": "silu"})";

std::string hf_error_of(const std::string& json) {
  try {
    hf_run_config(HfFolder(json).path, RunConfig{});
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// kOlmoe with `key` set to `value` (JSON text).
std::string olmoe_with(const std::string& key, const std::string& value) {
  nlohmann::json j = nlohmann::json::parse(kOlmoe);
  j[key] = nlohmann::json::parse(value);
  return j.dump();
}

// Random tensors under the Hugging Face names of the model cfg builds, each of its own shape.
TensorDict random_hf(const ModelConfig& cfg) {
  TensorDict hf;
  torch::manual_seed(0);
  for (const auto& p : DecoderLM(cfg, torch::kMeta)->named_parameters()) {
    const std::vector<std::string> src = hf_sources(p.key(), cfg);
    std::vector<int64_t> shape = p.value().sizes().vec();
    if (shape.size() == 3) shape.erase(shape.begin());  // stacked experts: one tensor each
    const int64_t per_tensor = p.value().dim() == 3 ? p.value().size(0) : 1;
    std::vector<int64_t> rows(src.size(), shape[0] * per_tensor / static_cast<int64_t>(src.size()));
    if (p.key().find("attn.qkv") != std::string::npos)
      rows = {cfg.n_heads * cfg.head_dim(), cfg.kv_heads() * cfg.head_dim(),
              cfg.kv_heads() * cfg.head_dim()};
    for (size_t i = 0; i < src.size(); ++i) {
      shape[0] = rows[i];
      hf[src[i]] = torch::randn(shape);
    }
  }
  return hf;
}

}  // namespace

TEST(HfImportTest, EveryParameterHasItsHuggingFaceNamesInOrder) {
  for (const bool tied : {false, true}) {
    ModelConfig cfg = test::tiny_config(Scheme::PreNorm);
    cfg.tie_embeddings = tied;
    Sources got;
    for (const auto& p : DecoderLM(cfg, torch::kMeta)->named_parameters())
      got[p.key()] = hf_sources(p.key(), cfg);
    EXPECT_EQ(got, hf_names(2, tied, 0));
  }
  Sources got;
  const ModelConfig moe = olmoe_config();
  for (const auto& p : DecoderLM(moe, torch::kMeta)->named_parameters())
    got[p.key()] = hf_sources(p.key(), moe);
  EXPECT_EQ(got, hf_names(2, false, 3));
  got.clear();
  const ModelConfig olmo2 = olmo2_config();
  for (const auto& p : DecoderLM(olmo2, torch::kMeta)->named_parameters())
    got[p.key()] = hf_sources(p.key(), olmo2);
  EXPECT_EQ(got, olmo2_hf_names(2));
  EXPECT_THROW(hf_sources("blocks.0.attn_y_norm.weight", moe), std::invalid_argument);
}

// OLMo-2's config.json is the reordered norm with full-width q/k norms; rms_norm_eps absent is
// Olmo2Config's default, 1e-5.
TEST(HfImportTest, Olmo2ConfigJsonGivesTheReorderedNormWithFullQkNorms) {
  const ModelConfig m = hf_run_config(HfFolder(kOlmo2).path, RunConfig{}).model;
  EXPECT_EQ(m.scheme, Scheme::ReorderedNorm);
  EXPECT_EQ(m.qk_norm, QkNorm::Full);
  EXPECT_FALSE(m.qkv_norm);
  EXPECT_FALSE(m.moe.enabled());
  EXPECT_EQ(m.d_model, 32);
  EXPECT_EQ(m.n_kv_heads, 2);
  EXPECT_DOUBLE_EQ(m.norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(m.rope_theta, 500000.0);
}

// A Llama-shaped folder (input norms, no post-feedforward norm) is not an OLMo-2 model: the
// error lists both sides of the difference.
TEST(HfImportTest, Olmo2WeightsAreTheOutputNorms) {
  const ModelConfig cfg = olmo2_config();
  TensorDict hf = random_hf(cfg);
  const TensorDict w = hf_to_normlab(hf, cfg, "test");
  EXPECT_TRUE(torch::equal(w.at("blocks.1.attn_out_norm.weight"),
                           hf["model.layers.1.post_attention_layernorm.weight"]));
  EXPECT_TRUE(torch::equal(w.at("blocks.1.mlp_out_norm.weight"),
                           hf["model.layers.1.post_feedforward_layernorm.weight"]));
  hf["model.layers.0.input_layernorm.weight"] =
      hf["model.layers.0.post_feedforward_layernorm.weight"];
  hf.erase("model.layers.0.post_feedforward_layernorm.weight");
  try {
    hf_to_normlab(hf, cfg, "DIR");
    FAIL() << "no error";
  } catch (const CheckpointError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("does not have:\n    model.layers.0.input_layernorm.weight"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("the files lack:\n    model.layers.0.post_feedforward_layernorm.weight"),
              std::string::npos)
        << msg;
  }
}

TEST(HfImportTest, JoinsTheTensorsRowWise) {
  const ModelConfig cfg = olmoe_config();
  TensorDict hf = random_hf(cfg);
  const TensorDict w = hf_to_normlab(hf, cfg, "test");
  const std::string l = "model.layers.1.";
  EXPECT_TRUE(
      torch::equal(w.at("blocks.1.attn.qkv.weight"),
                   torch::cat({hf[l + "self_attn.q_proj.weight"], hf[l + "self_attn.k_proj.weight"],
                               hf[l + "self_attn.v_proj.weight"]})));
  EXPECT_TRUE(torch::equal(w.at("blocks.1.mlp.experts.up")[2],
                           torch::cat({hf[l + "mlp.experts.2.up_proj.weight"],
                                       hf[l + "mlp.experts.2.gate_proj.weight"]})));
  EXPECT_TRUE(
      torch::equal(w.at("blocks.1.mlp.experts.down")[1], hf[l + "mlp.experts.1.down_proj.weight"]));
  EXPECT_TRUE(torch::equal(w.at("blocks.1.mlp.router.weight"), hf[l + "mlp.gate.weight"]));

  hf["model.layers.0.mlp.shared_expert.weight"] = torch::zeros({2, 2});
  hf.erase(l + "self_attn.k_norm.weight");
  hf[l + "mlp.down_proj.weight"] = hf[l + "mlp.experts.0.down_proj.weight"];
  hf[l + "self_attn.o_proj.weight"] = torch::zeros({3, 3});
  try {
    hf_to_normlab(hf, cfg, "DIR");
    FAIL() << "no error";
  } catch (const CheckpointError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("names the model does not have:\n    model.layers.0.mlp.shared_expert"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("model.layers.1.mlp.down_proj.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("the files lack:\n    model.layers.1.self_attn.k_norm.weight"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("model.layers.1.self_attn.o_proj.weight (blocks.1.attn.out.weight): [3, 3] "
                       "in the file, [16, 16] in the model"),
              std::string::npos)
        << msg;
  }
}

TEST(HfImportTest, ConfigJsonGivesTheModelSection) {
  RunConfig base;
  base.model.init_std = 0.01;
  base.model.d_model = 4096;  // replaced by config.json's
  base.data.seq_len = 64;
  const RunConfig cfg = hf_run_config(HfFolder(kOlmoe).path, base);
  const ModelConfig& m = cfg.model;
  EXPECT_EQ(m.scheme, Scheme::PreNorm);
  EXPECT_EQ(m.vocab_size, 96);
  EXPECT_EQ(m.d_model, 32);
  EXPECT_EQ(m.d_ff, 24);
  EXPECT_EQ(m.n_layers, 3);
  EXPECT_EQ(m.n_heads, 4);
  EXPECT_EQ(m.n_kv_heads, 2);
  EXPECT_EQ(m.norm_type, NormType::RmsNorm);
  EXPECT_DOUBLE_EQ(m.norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(m.rope_theta, 5000.0);
  EXPECT_EQ(m.qk_norm, QkNorm::Full);
  EXPECT_FALSE(m.qkv_norm);
  EXPECT_FALSE(m.tie_embeddings);
  EXPECT_EQ(m.moe.n_experts, 6);
  EXPECT_EQ(m.moe.top_k, 2);
  EXPECT_EQ(m.moe.d_expert, 24);
  EXPECT_EQ(m.moe.every, 1);
  EXPECT_TRUE(m.moe.renormalize);
  EXPECT_DOUBLE_EQ(m.moe.lb_loss_weight, 0.02);
  EXPECT_DOUBLE_EQ(m.init_std, 0.01);
  EXPECT_EQ(cfg.data.seq_len, 64);
}

TEST(HfImportTest, RefusesWhatNormlabCannotExpressByKey) {
  EXPECT_EQ(hf_error_of(kOlmoe), "");
  EXPECT_EQ(hf_error_of(kOlmo2), "");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {olmoe_with("clip_qkv", "8.0"), "clip_qkv = 8.0: "},
      {olmoe_with("attention_bias", "true"), "attention_bias = true: "},
      {olmoe_with("mlp_bias", "true"), "mlp_bias = true: "},
      {olmoe_with("hidden_act", "\"gelu\""), "hidden_act = \"gelu\": "},
      {olmoe_with("attention_dropout", "0.1"), "attention_dropout = 0.1: "},
      {olmoe_with("rope_scaling", "{\"type\": \"linear\", \"factor\": 2}"), "rope_scaling = "},
      {olmoe_with("partial_rotary_factor", "0.5"), "partial_rotary_factor = 0.5: "},
      {olmoe_with("head_dim", "16"), "head_dim = 16: "},
      {olmoe_with("max_position_embeddings", "32"), "max_position_embeddings = 32: "},
      {olmoe_with("quantization_config", "{}"), "quantization_config = {}: "},
      {R"({"architectures": ["GPT2LMHeadModel"]})", "architectures = [\"GPT2LMHeadModel\"]: "},
      {R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 32})", "vocab_size = (absent)"}};
  for (const auto& [json, want] : cases) {
    const std::string got = hf_error_of(json);
    EXPECT_NE(got.find(want), std::string::npos) << "want '" << want << "' in: " << got;
    EXPECT_NE(got.find("config.json: "), std::string::npos) << got;
  }
  EXPECT_NE(hf_error_of(olmoe_with("rope_parameters", R"({"rope_type": "yarn", "factor": 4})"))
                .find("rope_parameters = "),
            std::string::npos);
}

TEST(HfImportTest, TiedHeadSavedAnywayMustBeTheEmbedding) {
  ModelConfig cfg = test::tiny_config(Scheme::PreNorm);
  cfg.tie_embeddings = true;
  TensorDict hf = random_hf(cfg);
  hf["lm_head.weight"] = hf["model.embed_tokens.weight"].clone();
  EXPECT_EQ(hf_to_normlab(hf, cfg, "DIR").count("head.weight"), 0u);
  hf["lm_head.weight"] = hf["lm_head.weight"] + 1;
  EXPECT_THROW(hf_to_normlab(hf, cfg, "DIR"), CheckpointError);
}

// A Hugging Face checkpoint with one NaN or infinity in a weight is refused as it is read, naming
// the file, the Hugging Face tensor and its first bad index: one file and a sharded one.
TEST(HfImportTest, NonFiniteWeightsAreRefusedNamingTheTensor) {
  const ModelConfig cfg = test::tiny_config(Scheme::PreNorm);
  test::ScratchDir dir("hf_nonfinite");
  TensorDict hf = random_hf(cfg);
  hf["lm_head.weight"][3][7] = std::numeric_limits<float>::quiet_NaN();
  const std::string one = (dir.path / "one").string();
  fs::create_directories(one);
  safetensors_save(one + "/model.safetensors", hf);
  const auto error_of = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const CheckpointError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error_of([&] { hf_read(one); }),
            one +
                "/model.safetensors: tensor 'lm_head.weight' holds NaN at [3, 7] (its first "
                "non-finite element; 1 in all): weights must be finite numbers");
  // sharded: the bad tensor in the second file
  hf["lm_head.weight"][3][7] = 0.0;
  hf["model.norm.weight"][5] = -std::numeric_limits<float>::infinity();
  const std::string two = (dir.path / "two").string();
  fs::create_directories(two);
  TensorDict first, second;
  nlohmann::json index;
  for (const auto& [name, t] : hf) {
    const bool late = name.rfind("model.norm", 0) == 0 || name == "lm_head.weight";
    (late ? second : first)[name] = t;
    index["weight_map"][name] = late ? "model-2.safetensors" : "model-1.safetensors";
  }
  safetensors_save(two + "/model-1.safetensors", first);
  safetensors_save(two + "/model-2.safetensors", second);
  std::ofstream(two + "/model.safetensors.index.json") << index.dump();
  EXPECT_NE(error_of([&] {
              hf_read(two);
            }).find(two + "/model-2.safetensors: tensor 'model.norm.weight' holds -inf at [5]"),
            std::string::npos);
}

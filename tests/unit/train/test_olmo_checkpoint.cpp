// Checkpoints of the official SiameseNorm code (train/olmo_checkpoint.h): the official name of
// every siamese_hybrid parameter, pinned; the round trip through those names bitwise; the
// errors for other models; an imported run folder giving the same logits as the original.
// tests/cli/olmo_checkpoint.sh does the same through the CLI, .pt files included.
#include <torch/torch.h>

#include <map>
#include <vector>

#include "normlab/config/config.h"
#include "normlab/nn/model.h"
#include "normlab/nn/weights.h"
#include "normlab/train/export.h"
#include "normlab/train/olmo_checkpoint.h"
#include "support.h"

using namespace normlab;

namespace {

// normlab name -> official name, written out independently of the library's table.
std::map<std::string, std::string> official_names(int layers, bool input_norm, bool final_norm) {
  std::map<std::string, std::string> n = {{"embed.weight", "transformer.wte.weight"},
                                          {"head.weight", "transformer.ff_out.weight"},
                                          {"final_norm_x.weight", "transformer.ln_f.weight"},
                                          {"final_norm_y.weight", "transformer.ln_y_f.weight"}};
  if (final_norm) n["final_norm.weight"] = "transformer.ln_final_f.weight";
  for (int l = 0; l < layers; ++l) {
    const std::string ours = "blocks." + std::to_string(l) + ".";
    const std::string theirs = "transformer.blocks." + std::to_string(l) + ".";
    for (const auto& [a, b] : std::vector<std::pair<std::string, std::string>>{
             {"attn.qkv.weight", "att_proj.weight"},
             {"attn.out.weight", "attn_out.weight"},
             {"attn.q_norm.weight", "q_norm.weight"},
             {"attn.k_norm.weight", "k_norm.weight"},
             {"attn.v_norm.weight", "v_norm.weight"},
             {"mlp.up.weight", "ff_proj.weight"},
             {"mlp.down.weight", "ff_out.weight"},
             {"c1", "c1"},
             {"attn_y_norm.weight", "attn_y_norm.weight"},
             {"mlp_norm.weight", "ff_norm.weight"},
             {"mlp_y_norm.weight", "ff_y_norm.weight"}})
      n[ours + a] = theirs + b;
    if (input_norm) n[ours + "mlp_in_norm.weight"] = theirs + "ff_input_norm.weight";
  }
  return n;
}

// Distinct random values everywhere (norm gains and c1 included), so that a swapped name
// changes the logits.
DecoderLM random_model(const ModelConfig& cfg) {
  torch::manual_seed(3);
  DecoderLM m(cfg, torch::kCPU);
  torch::NoGradGuard no_grad;
  for (auto& p : m->parameters()) p.copy_(torch::randn_like(p) * 0.3 + 1.0);
  return m;
}

}  // namespace

TEST(OlmoCheckpointTest, EveryParameterHasItsOfficialName) {
  for (const bool input_norm : {true, false})
    for (const OutputFusion fusion : {OutputFusion::Code, OutputFusion::Paper}) {
      ModelConfig cfg = test::tiny_config(Scheme::SiameseHybrid);
      cfg.siamese.input_norm = input_norm;
      cfg.siamese.output_fusion = fusion;
      std::map<std::string, std::string> got;
      for (const auto& p : DecoderLM(cfg, torch::kMeta)->named_parameters())
        got[p.key()] = olmo_name(p.key());
      EXPECT_EQ(got, official_names(2, input_norm, fusion == OutputFusion::Code));
    }
  EXPECT_THROW(olmo_name("blocks.0.attn_norm.weight"), std::invalid_argument);
}

TEST(OlmoCheckpointTest, RoundTripIsBitwise) {
  const ModelConfig cfg = test::tiny_config(Scheme::SiameseHybrid);
  const TensorDict w = weights_of(*random_model(cfg));
  const TensorDict back = olmo_to_normlab(olmo_from_normlab(w), cfg, "test");
  ASSERT_EQ(back.size(), w.size());
  for (const auto& [name, t] : w) {
    ASSERT_TRUE(back.count(name)) << name;
    EXPECT_TRUE(torch::equal(back.at(name), t)) << name;
  }
  // bf16 weights come in as fp32.
  TensorDict bf16 = olmo_from_normlab(w);
  for (auto& [name, t] : bf16) t = t.to(torch::kBFloat16);
  EXPECT_EQ(olmo_to_normlab(bf16, cfg, "test").at("embed.weight").scalar_type(), torch::kFloat);
}

TEST(OlmoCheckpointTest, ErrorsNameWhatDoesNotFit) {
  ModelConfig cfg = test::tiny_config(Scheme::SiameseHybrid);
  TensorDict olmo = olmo_from_normlab(weights_of(*DecoderLM(cfg, torch::kCPU)));
  TensorDict bad = olmo;
  bad.erase("transformer.blocks.1.c1");
  bad["transformer.blocks.0.ff_proj.bias"] = torch::zeros({48});
  bad["transformer.blocks.0.att_proj.weight"] = torch::zeros({48, 16});
  const std::string e = test::error_message([&] { olmo_to_normlab(bad, cfg, "ckpt.pt"); });
  EXPECT_NE(e.find("ckpt.pt"), std::string::npos) << e;
  EXPECT_NE(e.find("does not have:\n    transformer.blocks.0.ff_proj.bias"), std::string::npos)
      << e;
  EXPECT_NE(e.find("file lacks:\n    transformer.blocks.1.c1"), std::string::npos) << e;
  EXPECT_NE(e.find("transformer.blocks.0.att_proj.weight (blocks.0.attn.qkv.weight): [48, 16] in "
                   "the file, [32, 16] in the configured model"),
            std::string::npos)
      << e;
  cfg.tie_embeddings = true;
  EXPECT_NE(test::error_message([&] { olmo_check_config(cfg); }).find("model.tie_embeddings"),
            std::string::npos);
  EXPECT_THROW(olmo_to_normlab(olmo, cfg, "x"), ConfigError);
  for (const Scheme s : {Scheme::PreNorm, Scheme::Siamese, Scheme::HybridNorm})
    EXPECT_NE(
        test::error_message([&] { olmo_check_config(test::tiny_config(s)); }).find("model.scheme"),
        std::string::npos);
  ModelConfig siamese_hyper = test::tiny_config(Scheme::SiameseHybrid);  // Y as hyper-streams
  siamese_hyper.siamese.hyper.n = 2;
  const std::string sh = test::error_message([&] { olmo_check_config(siamese_hyper); });
  EXPECT_NE(sh.find("model.siamese.hyper.n = 2"), std::string::npos) << sh;
  EXPECT_NE(sh.find("no Hyper-Connections"), std::string::npos) << sh;
  EXPECT_NE(sh.find("--format hf"), std::string::npos) << sh;  // the export that holds it
  // Hyper-Connections: refused with the scheme and the reason named
  const std::string hyper =
      test::error_message([&] { olmo_check_config(test::tiny_config(Scheme::Hyper)); });
  EXPECT_NE(hyper.find("model.scheme = hyper"), std::string::npos) << hyper;
  EXPECT_NE(hyper.find("no names for Hyper-Connections' parameters"), std::string::npos) << hyper;
}

TEST(OlmoCheckpointTest, ImportedRunGivesTheSameLogits) {
  test::ScratchDir dir("olmo");
  RunConfig cfg;
  cfg.model = test::tiny_config(Scheme::SiameseHybrid);
  DecoderLM original = random_model(cfg.model);
  original->eval();
  safetensors_save(dir / "official.safetensors", olmo_from_normlab(weights_of(*original)));
  const std::string ckpt = olmo_import(dir / "official.safetensors", cfg, dir / "run", 7);
  EXPECT_NE(ckpt.find("step-00000007"), std::string::npos) << ckpt;
  LoadedModel loaded = load_model(dir / "run");
  loaded.model->eval();
  EXPECT_EQ(loaded.step, 7);
  const torch::Tensor tokens = torch::randint(0, 32, {2, 9}, torch::kLong);
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::equal(loaded.model->forward(tokens), original->forward(tokens)));
  // A second import into the same run folder is refused; nothing there changes.
  EXPECT_THROW(olmo_import(dir / "official.safetensors", cfg, dir / "run"), CheckpointError);
}

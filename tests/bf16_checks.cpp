#include "bf16_checks.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "normlab/nn/autocast.h"
#include "normlab/nn/model.h"
#include "normlab/nn/moe.h"
#include "support.h"

namespace normlab::test {

namespace {

// The residual stream the forward reports as `stream` stays fp32 under autocast on `device`.
void expect_stream_fp32(const ModelConfig& c, std::string_view stream, torch::Device device) {
  torch::manual_seed(3);
  DecoderLM m(c);
  m->to(device);
  torch::NoGradGuard g;
  const torch::Tensor tokens = torch::randint(32, {2, 12}, torch::kLong).to(device);
  const torch::Tensor fp32 = m->forward(tokens);
  torch::Tensor state, bf16;
  {
    AutocastGuard autocast(device.type(), true);
    bf16 = m->forward(tokens, [&](std::string_view name, int64_t, const torch::Tensor& t) {
      if (name == stream) state = t;
    });
  }
  ASSERT_TRUE(state.defined()) << stream;
  EXPECT_EQ(state.dim(), 4);
  EXPECT_EQ(state.scalar_type(), torch::kFloat);
  EXPECT_TRUE(close(bf16.to(torch::kFloat).cpu(), fp32.cpu(), 5e-2));
}

}  // namespace

void expect_hyper_streams_fp32_under_bf16_autocast(torch::Device device) {
  for (const HyperVariant v : {HyperVariant::Hc, HyperVariant::Mhc}) {
    SCOPED_TRACE(enum_name(v));
    ModelConfig hyper = tiny_config(Scheme::Hyper);
    hyper.hyper.n = 4;
    hyper.hyper.variant = v;
    expect_stream_fp32(hyper, "x", device);
    ModelConfig siamese = tiny_config(Scheme::SiameseHybrid);
    siamese.siamese.hyper.n = 4;
    siamese.siamese.hyper.variant = v;
    expect_stream_fp32(siamese, "y", device);
  }
}

void expect_chunked_loss_matches_plain_under_bf16(torch::Device device) {
  const ModelConfig cfg = tiny_config(Scheme::SiameseHybrid);
  torch::manual_seed(3);
  const torch::Tensor tokens = torch::randint(cfg.vocab_size, {3, 16}, torch::kLong).to(device);
  double losses[2];
  std::map<std::string, torch::Tensor> grads[2];
  for (int chunked = 0; chunked < 2; ++chunked) {
    torch::manual_seed(5);
    DecoderLM model(cfg);
    model->to(device);
    LossOutput out;
    {
      AutocastGuard autocast(device.type(), true);
      out = model->loss(tokens, tokens.roll(-1, 1), 1e-4, nullptr, chunked ? 7 : 0);
    }
    out.loss.backward();
    losses[chunked] = out.loss.item<double>();
    for (const auto& p : model->named_parameters())
      grads[chunked][p.key()] = p.value().grad().cpu();
  }
  EXPECT_NEAR(losses[1], losses[0], 1e-3 * losses[0]);
  for (const auto& [name, g] : grads[0]) EXPECT_TRUE(close(grads[1].at(name), g, 3e-2)) << name;
}

void expect_grouped_dispatch_matches_loop(torch::Device device) {
  ModelConfig cfg = tiny_config(Scheme::PreNorm);
  cfg.n_layers = 1;
  cfg.moe.n_experts = 4;
  cfg.moe.top_k = 2;
  cfg.moe.d_expert = 16;
  torch::manual_seed(3);
  DecoderLM model(cfg);
  model->to(device);
  const torch::Tensor tokens = torch::randint(cfg.vocab_size, {4, 32}, torch::kLong).to(device);
  for (const bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16 autocast" : "float32");
    std::vector<torch::Tensor> got[2];
    for (const MoeDispatch d : {MoeDispatch::Loop, MoeDispatch::Grouped}) {
      for (MoeImpl* m : moe_layers(*model)) m->dispatch = d;
      model->zero_grad();
      LossOutput out;
      {
        AutocastGuard autocast(device.type(), bf16);
        out = model->loss(tokens, tokens.roll(-1, 1));
      }
      out.loss.backward();
      auto& g = got[d == MoeDispatch::Grouped];
      g.push_back(out.loss.detach().cpu());
      for (const auto& p : model->parameters()) g.push_back(p.grad().cpu());
      g.push_back(model->router_log->last(0).counts.cpu());
    }
    for (size_t i = 0; i < got[0].size(); ++i)
      EXPECT_TRUE(
          close(got[1][i].to(torch::kDouble), got[0][i].to(torch::kDouble), bf16 ? 3e-2 : 1e-3))
          << i;
  }
}

}  // namespace normlab::test

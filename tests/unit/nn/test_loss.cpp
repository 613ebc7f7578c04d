// The chunked linear cross-entropy (loss.h) against cross_entropy(h W^T): loss, z-loss and the
// gradients of h and W, for chunk sizes that divide the rows, do not, and exceed them; and the
// model's loss through it, which takes the CPU's one-pass cross-entropy (kernels::cross_entropy;
// against torch::cross_entropy_loss in tests/unit/kernels/test_ops.cpp).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "normlab/nn/loss.h"
#include "normlab/nn/model.h"
#include "support.h"

namespace normlab {
namespace {

TEST(ChunkedLoss, EqualsTheWholeLogitsLossAndGradients) {
  torch::manual_seed(4);
  const int64_t N = 37, C = 16, V = 50;
  const torch::Tensor h0 = torch::randn({N, C}, torch::kDouble),
                      w0 = torch::randn({V, C}, torch::kDouble);
  const torch::Tensor t = torch::randint(V, {N}, torch::kLong);
  for (const double z_loss : {0.0, 1e-2}) {
    const torch::Tensor h = h0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
    const torch::Tensor logits = torch::mm(h, w.t());
    torch::Tensor ref = torch::cross_entropy_loss(logits, t);
    const torch::Tensor ref_z = torch::logsumexp(logits, 1).pow(2).mean();
    if (z_loss > 0) ref = ref + z_loss * ref_z;
    ref.backward();
    for (const int64_t chunk : {1, 8, 37, 100}) {
      SCOPED_TRACE("z_loss " + std::to_string(z_loss) + ", chunk " + std::to_string(chunk));
      const torch::Tensor hc = h0.clone().requires_grad_(true),
                          wc = w0.clone().requires_grad_(true);
      const ChunkedLoss c = linear_cross_entropy(hc, wc, t, z_loss, chunk);
      (c.loss * 3.0).backward();  // the incoming gradient scales the stored ones
      EXPECT_NEAR(c.loss.item<double>(), ref.item<double>(), 1e-6);
      if (z_loss > 0) {
        EXPECT_NEAR(c.z.item<double>(), ref_z.item<double>(), 1e-5);
      }
      EXPECT_TRUE(test::close(hc.grad(), 3.0 * h.grad(), 1e-6));
      EXPECT_TRUE(test::close(wc.grad(), 3.0 * w.grad(), 1e-6));
    }
  }
}

TEST(ChunkedLoss, ModelLossThroughChunksMatchesThePlainOne) {
  for (const bool tied : {false, true}) {
    ModelConfig cfg = test::tiny_config(Scheme::SiameseHybrid);
    cfg.tie_embeddings = tied;
    torch::manual_seed(2);
    const torch::Tensor tokens = torch::randint(cfg.vocab_size, {3, 9}, torch::kLong);
    std::map<std::string, torch::Tensor> grads[2];
    double losses[2];
    for (int chunked = 0; chunked < 2; ++chunked) {
      torch::manual_seed(8);
      DecoderLM model(cfg);
      const LossOutput out =
          model->loss(tokens, tokens.roll(-1, 1), 1e-3, nullptr, chunked ? 5 : 0);
      out.loss.backward();
      losses[chunked] = out.loss.item<double>();
      for (const auto& p : model->named_parameters())
        grads[chunked][p.key()] = p.value().grad().clone();
    }
    EXPECT_NEAR(losses[1], losses[0], 1e-6 * losses[0]);
    for (const auto& [name, g] : grads[0])
      EXPECT_TRUE(test::close(grads[1].at(name), g, 1e-5)) << name << tied;
  }
}

TEST(ChunkedLoss, WithoutGradientsItIsJustTheLoss) {
  torch::manual_seed(1);
  const torch::Tensor h = torch::randn({10, 8}), w = torch::randn({30, 8}),
                      t = torch::randint(30, {10}, torch::kLong);
  torch::NoGradGuard no_grad;
  const ChunkedLoss c = linear_cross_entropy(h, w, t, 0.0, 4);
  EXPECT_NEAR(c.ce.item<double>(), torch::cross_entropy_loss(torch::mm(h, w.t()), t).item<double>(),
              1e-5);
  EXPECT_THROW(linear_cross_entropy(h, w, t.narrow(0, 0, 9), 0.0, 4), c10::Error);
}

// Rows of logits with a spread of scales (one far from zero, where only the row's maximum keeps
// the exponentials finite), and targets with two rows left out (-100).
TEST(KernelsCrossEntropy, IsTheModelsLoss) {
  ModelConfig cfg = test::tiny_config(Scheme::PreNorm);
  torch::manual_seed(3);
  const torch::Tensor tokens = torch::randint(cfg.vocab_size, {2, 11}, torch::kLong);
  DecoderLM model(cfg);
  const LossOutput out = model->loss(tokens, tokens.roll(-1, 1), 0.0, nullptr, 0);
  const torch::Tensor ref = torch::cross_entropy_loss(
      out.logits.detach().reshape({-1, cfg.vocab_size}), tokens.roll(-1, 1).reshape({-1}));
  EXPECT_NEAR(out.ce.item<double>(), ref.item<double>(), 1e-6);
  EXPECT_NE(out.ce.grad_fn()->name().find("CrossEntropyFn"), std::string::npos)
      << out.ce.grad_fn()->name();
}

}  // namespace
}  // namespace normlab

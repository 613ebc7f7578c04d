// The trainer's CUDA paths (skipped without a GPU): bf16 autocast training, the fused AdamW
// kernel against the reference loop, and agreement of a CUDA forward with the CPU one.
#include <gmock/gmock.h>
#include <torch/torch.h>

#include "bf16_checks.h"
#include "normlab/config/config_io.h"
#include "normlab/data/data_prepare.h"
#include "normlab/nn/attention.h"
#include "normlab/nn/model.h"
#include "normlab/train/optimizer.h"
#include "normlab/train/trainer.h"
#include "normlab/util/device.h"
#include "support.h"

using namespace normlab;

TEST(GpuTraining, FusedAdamWOnCudaMatchesTheReferenceLoop) {
  NORMLAB_REQUIRE_CUDA();
  torch::manual_seed(0);
  const auto w0 = torch::randn({64, 32}, torch::kCUDA);
  auto run = [&](bool fused) {
    torch::Tensor w = w0.clone().requires_grad_();
    OptimizerConfig c;
    c.fused = fused;
    AdamW opt({{"w", w}}, c);
    for (int s = 0; s < 4; ++s) {
      w.mutable_grad() = torch::sin(w0 * (s + 1));
      opt.step(1e-2);
    }
    return w.detach().cpu();
  };
  EXPECT_TRUE(test::close(run(true), run(false), 1e-5));
}

TEST(GpuTraining, CudaForwardMatchesCpuInFp32) {
  NORMLAB_REQUIRE_CUDA();
  for (Scheme s : enum_values<Scheme>()) {
    torch::manual_seed(1);
    DecoderLM cpu(test::tiny_config(s));
    DecoderLM gpu(test::tiny_config(s));
    torch::NoGradGuard g;
    for (auto& p : gpu->named_parameters()) p.value().copy_(cpu->named_parameters()[p.key()]);
    gpu->to(torch::kCUDA);
    const torch::Tensor tokens = torch::randint(32, {2, 12}, torch::kLong);
    EXPECT_TRUE(test::close(gpu->forward(tokens.cuda()).cpu(), cpu->forward(tokens), 1e-4))
        << enum_name(s);
  }
}

// Hyper-Connections (hyper, SiameseNorm x HC) mix their streams outside autocast: under bf16
// autocast the n residual streams stay fp32 (the branches run in bf16).
TEST(GpuTraining, HyperStreamsStayFp32UnderBf16Autocast) {
  NORMLAB_REQUIRE_CUDA();
  test::expect_hyper_streams_fp32_under_bf16_autocast(torch::kCUDA);
}

// At the 1.3B model's head shape in bf16, SDPA runs a fused kernel, not the unfused math path;
// the matmul rate is positive and below any GPU's (a broken timer would give 0 or absurd).
TEST(GpuTraining, AttentionRunsAFusedKernelAndTheMatmulRateIsPlausible) {
  NORMLAB_REQUIRE_CUDA();
  AttentionOptions o(2048, 16);
  o.device(torch::Device(torch::kCUDA, 0));
  EXPECT_THAT(attention_backend(o, 2, 2048, torch::kBFloat16),
              testing::AnyOf("flash", "cudnn", "efficient"));
  const double flops = measure_matmul_flops(torch::Device(torch::kCUDA, 0), 4096, 5);
  EXPECT_GT(flops, 1e12);
  EXPECT_LT(flops, 1e16);
}

TEST(GpuTraining, Bf16AutocastRunCompletesWithFiniteLosses) {
  NORMLAB_REQUIRE_CUDA();
  test::ScratchDir dir("gpu_train");
  test::write_text(dir / "a.txt", test::synthetic_corpus(300, 41));
  PrepareOptions p;
  p.tokenizer = test::test_tokenizer_path();
  p.inputs = {dir / "a.txt"};
  p.out_dir = dir / "shards";
  p.val_fraction = 0.1;
  data_prepare(p);
  const RunConfig cfg = config_load(
      "", {"model.scheme=siamese_hybrid", "model.vocab_size=400", "model.d_model=64",
           "model.n_layers=2", "model.n_heads=4", "model.d_ff=128", "data.train=" + dir / "shards",
           "data.seq_len=32", "train.steps=6", "train.global_batch=8", "train.micro_batch=4",
           "train.device=cuda", "train.precision=bf16", "eval.every=3", "eval.batches=2"});
  TrainOptions o;
  o.run_dir = dir / "run";
  const RunSummary s = train(cfg, o);
  EXPECT_EQ(s.status, RunStatus::Completed);
  EXPECT_TRUE(std::isfinite(s.final_train_loss));
  EXPECT_GT(s.final_val_loss, 0.0);
}

TEST(GpuTraining, ChunkedLossMatchesThePlainOneUnderBf16Autocast) {
  NORMLAB_REQUIRE_CUDA();
  test::expect_chunked_loss_matches_plain_under_bf16(torch::kCUDA);
}

// model.moe.dispatch on CUDA: the grouped GEMMs (what auto picks there) and the loop agree in
// float32 and under bf16 autocast.
TEST(GpuTraining, MoeGroupedDispatchMatchesTheLoop) {
  NORMLAB_REQUIRE_CUDA();
  test::expect_grouped_dispatch_matches_loop(torch::kCUDA);
}

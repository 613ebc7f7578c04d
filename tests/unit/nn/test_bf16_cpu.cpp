// bf16 on the CPU (nn/autocast.h): the precision policy under ATen's CPU autocast, at tiny sizes
// so that CPUs without native bf16 (emulated by oneDNN) stay fast. Matmuls run in bf16; norms,
// residual streams, Hyper-Connections' connections and the MoE router stay fp32; activation
// checkpointing recomputes under the forward's autocast. The same checks run on CUDA in
// tests/gpu/test_gpu_training.cpp.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

#include <atomic>
#include <cstring>
#include <map>
#include <string>

#include "bf16_checks.h"
#include "nn/schemes/hyper_connection.h"
#include "normlab/eval/info.h"
#include "normlab/kernels/capabilities.h"
#include "normlab/kernels/ops.h"
#include "normlab/nn/activation_checkpointing.h"
#include "normlab/nn/attention.h"
#include "normlab/nn/autocast.h"
#include "normlab/nn/model.h"
#include "normlab/nn/moe.h"
#include "support.h"

namespace normlab {
namespace {

// The CPU allocator with a count of the bytes it has handed out and not taken back: exact live
// memory of tensors, whatever the C library does with freed pages. Installed for a scope. A
// simple allocator (data pointer = context, one raw deleter), as some ATen kernels require: each
// block keeps its size in a 64-byte header in front of the data.
class CountingCpuAllocator final : public c10::Allocator {
 public:
  CountingCpuAllocator() : base_(c10::GetCPUAllocator()) { c10::SetCPUAllocator(this, kPriority); }
  ~CountingCpuAllocator() override { c10::SetCPUAllocator(base_, kPriority); }
  static int64_t live() { return live_bytes().load(); }

  c10::DataPtr allocate(size_t n) override {
    auto* block = static_cast<char*>(c10::alloc_cpu(n + kHeader));
    std::memcpy(block, &n, sizeof n);
    live_bytes() += static_cast<int64_t>(n);
    void* data = block + kHeader;  // 64-byte aligned, as alloc_cpu's own
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

 private:
  static constexpr uint8_t kPriority = 200;  // above LibTorch's own registrations
  static constexpr size_t kHeader = 64;
  static std::atomic<int64_t>& live_bytes() {
    static std::atomic<int64_t> live{0};  // test-local: blocks may outlive the scope
    return live;
  }
  static void release(void* data) {
    char* block = static_cast<char*>(data) - kHeader;
    size_t n = 0;
    std::memcpy(&n, block, sizeof n);
    live_bytes() -= static_cast<int64_t>(n);
    c10::free_cpu(block);
  }
  c10::Allocator* base_;
};

TEST(Bf16Cpu, LinearComputesInBf16UnderCpuAutocast) {
  torch::manual_seed(0);
  const torch::Tensor x = torch::randn({5, 32}), w = torch::randn({24, 32});
  const torch::Tensor fp32 = kernels::linear(x, w);
  EXPECT_EQ(fp32.scalar_type(), torch::kFloat);
  torch::Tensor bf16;
  {
    AutocastGuard autocast(at::kCPU, true);
    bf16 = kernels::linear(x, w);
  }
  EXPECT_EQ(bf16.scalar_type(), torch::kBFloat16);
  // The product of the operands rounded to bf16, accumulated in fp32.
  const torch::Tensor want = torch::mm(x.to(torch::kBFloat16).to(torch::kFloat),
                                       w.to(torch::kBFloat16).to(torch::kFloat).t());
  EXPECT_TRUE(test::close(bf16.to(torch::kFloat), want, 1e-2));
  EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU));  // the guard restored the state
}

// Attention at a size where the CPU's flash kernel packs bf16 for AMX (64 positions of 16): it
// runs forward and backward under CPU autocast with ATen's kernels at any level (.ci/run lowers
// them to AVX2 and to the portable ones, where PyTorch's kernel would throw on an AMX CPU), and
// agrees with fp32 within bf16 precision.
TEST(Bf16Cpu, AttentionRunsUnderCpuAutocastAtEveryKernelLevel) {
  torch::manual_seed(4);
  Attention attn(AttentionOptions(64, 4));
  const torch::Tensor x = torch::randn({2, 64, 64}, torch::requires_grad());
  const torch::Tensor fp32 = attn(x);
  torch::Tensor bf16;
  {
    AutocastGuard autocast(at::kCPU, true);
    bf16 = attn(x);
  }
  EXPECT_EQ(bf16.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(test::close(bf16.to(torch::kFloat), fp32, 5e-2));
  bf16.to(torch::kFloat).pow(2).sum().backward();
  EXPECT_TRUE(x.grad().isfinite().all().item<bool>());
}

// Every scheme under CPU autocast: the residual streams the forward reports stay fp32 (a bf16
// branch output added to an fp32 stream), and the logits stay within bf16 precision of fp32's.
TEST(Bf16Cpu, EverySchemeKeepsItsStreamsFp32AndMatchesFp32) {
  for (const auto& row : EnumNames<Scheme>::rows) {
    SCOPED_TRACE(row.name);
    ModelConfig c = test::tiny_config(row.value);
    torch::manual_seed(3);
    DecoderLM m(c);
    torch::NoGradGuard g;
    const torch::Tensor tokens = torch::randint(c.vocab_size, {2, 12}, torch::kLong);
    const torch::Tensor fp32 = m->forward(tokens);
    std::map<std::string, torch::ScalarType> dtypes;
    torch::Tensor bf16;
    {
      AutocastGuard autocast(at::kCPU, true);
      bf16 = m->forward(tokens, [&](std::string_view name, int64_t layer, const torch::Tensor& t) {
        dtypes[std::string(name) + std::to_string(layer)] = t.scalar_type();
      });
    }
    ASSERT_FALSE(dtypes.empty());
    for (const auto& [name, dtype] : dtypes) EXPECT_EQ(dtype, torch::kFloat) << name;
    EXPECT_FALSE(bf16.equal(fp32.to(bf16.scalar_type())));  // autocast did change the compute
    EXPECT_TRUE(test::close(bf16.to(torch::kFloat), fp32, 5e-2));
  }
}

// The connections of Hyper-Connections and mHC run outside autocast: under CPU autocast they give
// bitwise what they give in fp32 (with random weights, so that the dynamic parts contribute).
TEST(Bf16Cpu, HyperConnectionsComputeInFp32UnderBf16Autocast) {
  struct Case {
    HyperVariant variant;
    bool dynamic;
  };
  for (const Case k : {Case{HyperVariant::Hc, false}, Case{HyperVariant::Hc, true},
                       Case{HyperVariant::Mhc, true}}) {
    SCOPED_TRACE(std::string(enum_name(k.variant)) + (k.dynamic ? " dynamic" : " static"));
    HyperOptions o;
    o.variant = k.variant;
    o.dynamic = k.dynamic;
    o.n = 4;
    torch::manual_seed(2);
    const auto hc = schemes::make_connection(o, 32, 1e-5, 1, torch::kCPU);
    torch::NoGradGuard g;
    for (auto& p : hc->parameters()) p.add_(torch::randn_like(p) * 0.3);
    const torch::Tensor H = torch::randn({2, 5, 4, 32});
    const schemes::ConnectionImpl::Width fp32 = hc->width(H);
    schemes::ConnectionImpl::Width bf16;
    {
      AutocastGuard autocast(at::kCPU, true);
      bf16 = hc->width(H);
    }
    EXPECT_TRUE(bf16.h.equal(fp32.h));
    EXPECT_TRUE(bf16.carry.equal(fp32.carry));
    EXPECT_TRUE(bf16.beta.equal(fp32.beta));
  }
}

// The n hyper-streams of `hyper` and of SiameseNorm x HC stay fp32 (the branches run in bf16).
TEST(Bf16Cpu, HyperStreamsStayFp32UnderBf16Autocast) {
  test::expect_hyper_streams_fp32_under_bf16_autocast(torch::kCPU);
}

TEST(Bf16Cpu, ChunkedLossMatchesThePlainOneUnderBf16Autocast) {
  test::expect_chunked_loss_matches_plain_under_bf16(torch::kCPU);
}

TEST(Bf16Cpu, MoeGroupedDispatchMatchesTheLoop) {
  test::expect_grouped_dispatch_matches_loop(torch::kCPU);
}

// The router runs in fp32 under autocast: its logits equal the fp32 model's exactly (a bf16
// router would round them to 8 bits of mantissa).
TEST(Bf16Cpu, MoeRouterStaysFp32UnderBf16Autocast) {
  ModelConfig cfg = test::tiny_config(Scheme::PreNorm);
  cfg.moe.n_experts = 4;
  cfg.moe.top_k = 2;
  cfg.moe.d_expert = 16;
  torch::manual_seed(3);
  Moe moe(cfg);
  torch::NoGradGuard g;
  moe->router->weight.normal_();  // the router starts at zero: logits exact in any precision
  const torch::Tensor rows = torch::randn({40, cfg.d_model});
  const Routing fp32 = moe->route(rows);
  Routing bf16;
  {
    AutocastGuard autocast(at::kCPU, true);
    bf16 = moe->route(rows);
  }
  EXPECT_EQ(bf16.logits.scalar_type(), torch::kFloat);
  EXPECT_TRUE(bf16.logits.equal(fp32.logits));
  EXPECT_TRUE(bf16.experts.equal(fp32.experts));
}

// A checkpointed block is recomputed under the autocast of its forward (CPU autocast included):
// the loss and every gradient equal the plain model's under bf16 autocast, as they do in fp32.
TEST(Bf16Cpu, ActivationCheckpointingRecomputesUnderTheForwardsAutocast) {
  for (const Scheme scheme : {Scheme::PreNorm, Scheme::SiameseHybrid}) {
    SCOPED_TRACE(enum_name(scheme));
    const ModelConfig cfg = test::tiny_config(scheme);
    torch::manual_seed(1);
    const torch::Tensor tokens = torch::randint(cfg.vocab_size, {3, 7}, torch::kLong);
    std::map<std::string, torch::Tensor> grads[2];
    double losses[2];
    for (int every = 0; every < 2; ++every) {
      torch::manual_seed(9);
      DecoderLM model(cfg);
      ActivationCheckpointedBlocks hooks(every);
      if (every > 0) model->hooks = &hooks;
      LossOutput out;
      {
        AutocastGuard autocast(at::kCPU, true);
        out = model->loss(tokens, tokens.roll(-1, 1));
      }
      out.loss.backward();  // outside autocast, as the trainer runs it
      model->hooks = nullptr;
      losses[every] = out.loss.item<double>();
      for (const auto& p : model->named_parameters()) grads[every][p.key()] = p.value().grad();
    }
    EXPECT_EQ(losses[0], losses[1]);
    for (const auto& [name, g] : grads[0])
      EXPECT_TRUE(test::close(grads[1].at(name), g, 1e-6)) << name;
  }
}

// The memory accounting of bf16 autocast (eval/info.h: `working` counts a bf16 copy of every
// weight matrix, docs/distributed.md "What autocast keeps alive"), measured on CPU autocast with
// the allocator's exact byte count: ATen's cast cache keeps the bf16 cast of every weight a
// matmul reads (attention, MLP and head; not the embedding, whose lookup is not cast, nor the
// norms) until the autocast region ends, even without gradients; with gradients autograd keeps
// them at least to the end of the forward. Leaving the region frees exactly those copies.
TEST(Bf16Cpu, AutocastKeepsOneBf16CopyOfEveryMatmulWeightAsTheMemoryEstimateCounts) {
  const ModelConfig cfg = test::tiny_config(Scheme::PreNorm);
  torch::manual_seed(4);
  DecoderLM model(cfg);
  const torch::Tensor tokens = torch::randint(cfg.vocab_size, {2, 9}, torch::kLong);
  int64_t matmul_weights = 0, all = 0;
  for (const auto& p : model->named_parameters()) {
    all += p.value().numel();
    if (p.value().dim() == 2 && p.key() != "embed.weight") matmul_weights += p.value().numel();
  }
  ASSERT_GT(matmul_weights, 0);
  const int64_t copies = 2 * matmul_weights;
  CountingCpuAllocator counting;
  {
    torch::NoGradGuard no_grad;  // the first forward of an activation-checkpointed block
    torch::Tensor logits;
    int64_t inside = 0;
    const int64_t before = counting.live();
    {
      AutocastGuard autocast(at::kCPU, true);
      logits = model->forward(tokens);
      inside = counting.live() - before;
    }
    const int64_t after = counting.live() - before;
    EXPECT_EQ(inside - after, copies) << "inside " << inside << ", after " << after;
  }
  {
    const int64_t before = counting.live();
    torch::Tensor loss;
    int64_t end_of_forward = 0;
    {
      AutocastGuard autocast(at::kCPU, true);
      loss = model->loss(tokens, tokens.roll(-1, 1)).loss;
      end_of_forward = counting.live() - before;
    }
    EXPECT_GE(end_of_forward, copies);
    loss.backward();
    loss = torch::Tensor();
    // What stays is the gradients (fp32, one per parameter) and nothing of the forward.
    EXPECT_EQ(counting.live() - before, 4 * all);
    for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
  }
  // The estimate counts the copies of every parameter, 2 bytes each: at least the measured ones.
  MemoryPlan plan;
  plan.bf16 = true;
  const double working = estimate_memory(cfg, plan).working;
  EXPECT_GE(working, static_cast<double>(copies));
  EXPECT_LE(working, 2.0 * static_cast<double>(all));
}

}  // namespace
}  // namespace normlab

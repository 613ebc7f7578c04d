// MFU (eval/mfu.h): the peak table's name matching and the steady-state window.
#include <gtest/gtest.h>

#include "normlab/eval/mfu.h"

namespace normlab {
namespace {

TEST(Mfu, PeakByGpuName) {
  const auto peak = [](const std::string& name) {
    const auto p = gpu_peak_bf16(name);
    return p ? p->model + " " + std::to_string(static_cast<int>(p->flops / 1e12)) : "unknown";
  };
  EXPECT_EQ(peak("NVIDIA H100 80GB HBM3"), "H100 SXM 989");
  EXPECT_EQ(peak("NVIDIA H100 SXM5 80GB"), "H100 SXM 989");
  EXPECT_EQ(peak("NVIDIA H100 PCIe"), "H100 PCIe 756");
  EXPECT_EQ(peak("NVIDIA H100 NVL"), "H100 NVL 835");
  EXPECT_EQ(peak("NVIDIA H200"), "H200 SXM 989");
  EXPECT_EQ(peak("NVIDIA H200 NVL"), "H200 NVL 835");
  EXPECT_EQ(peak("NVIDIA GH200 480GB"), "GH200 989");
  EXPECT_EQ(peak("NVIDIA A100-SXM4-80GB"), "A100 312");
  EXPECT_EQ(peak("NVIDIA A100-PCIE-40GB"), "A100 312");
  EXPECT_EQ(peak("NVIDIA A100 80GB PCIe"), "A100 312");
  EXPECT_EQ(peak("NVIDIA L40S"), "L40S 362");
  EXPECT_EQ(peak("nvidia h100 pcie"), "H100 PCIe 756");  // case does not matter
  for (const std::string unknown :
       {"NVIDIA L40", "NVIDIA GeForce RTX 4090", "Tesla V100-SXM2-16GB", "NVIDIA B200", "", "cpu"})
    EXPECT_EQ(peak(unknown), "unknown") << unknown;
}

TEST(Mfu, AnOverrideWinsAndAnUnknownGpuHasNoMfu) {
  EXPECT_EQ(mfu_peak("NVIDIA GeForce RTX 4090", 0), std::nullopt);
  const auto given = mfu_peak("NVIDIA GeForce RTX 4090", 165e12);
  ASSERT_TRUE(given);
  EXPECT_EQ(given->model, "given");
  EXPECT_DOUBLE_EQ(given->flops, 165e12);
  EXPECT_DOUBLE_EQ(mfu_peak("NVIDIA H100 80GB HBM3", 500e12)->flops, 500e12);
  const SteadyState s = steady_state({1, 1, 1}, 100, 1);
  EXPECT_EQ(mfu(s, 1e10, 0), std::nullopt);
}

TEST(Mfu, TheWindowDropsWarmUpSteps) {
  // Two slow warm-up steps, then 1.0 s, 2.0 s, 1.0 s, 1.0 s with 1000 tokens each.
  const std::vector<double> secs = {9.0, 5.0, 1.0, 2.0, 1.0, 1.0};
  const SteadyState s = steady_state(secs, 1000, 2);
  EXPECT_EQ(s.warmup, 2);
  EXPECT_EQ(s.steps, 4);
  EXPECT_DOUBLE_EQ(s.seconds, 5.0);
  EXPECT_DOUBLE_EQ(s.tokens_per_s, 4000.0 / 5.0);  // total over total, not a mean of rates
  EXPECT_DOUBLE_EQ(s.step_mean, (1000 + 500 + 1000 + 1000) / 4.0);
  EXPECT_DOUBLE_EQ(s.step_min, 500);
  EXPECT_DOUBLE_EQ(s.step_max, 1000);
  EXPECT_NEAR(s.step_std, std::sqrt(3.0) / 4.0 * 500.0, 1e-9);  // {1,.5,1,1} x 1000
  const auto m = mfu(s, 2e9, 1e12);
  ASSERT_TRUE(m);
  EXPECT_DOUBLE_EQ(m->mean, 800.0 * 2e9 / 1e12);
  EXPECT_NEAR(m->spread, s.step_std * 2e9 / 1e12, 1e-15);
  EXPECT_DOUBLE_EQ(m->min, 500 * 2e-3);
  EXPECT_DOUBLE_EQ(m->max, 1000 * 2e-3);
  EXPECT_DOUBLE_EQ(m->peak_flops, 1e12);
  // A window of 2 steps after the warm-up; steady steps only (no spread).
  const SteadyState w = steady_state(secs, 1000, 2, 2);
  EXPECT_EQ(w.steps, 2);
  EXPECT_DOUBLE_EQ(w.seconds, 3.0);
  const SteadyState flat = steady_state({3.0, 0.5, 0.5, 0.5}, 100, 1);
  EXPECT_DOUBLE_EQ(flat.tokens_per_s, 200.0);
  EXPECT_DOUBLE_EQ(flat.step_std, 0.0);
}

TEST(Mfu, NothingLeftAfterTheWarmUpIsNoMfu) {
  const SteadyState s = steady_state({1.0, 1.0}, 100, 3);
  EXPECT_EQ(s.steps, 0);
  EXPECT_EQ(s.warmup, 2);
  EXPECT_EQ(mfu(s, 1e9, 1e12), std::nullopt);
  EXPECT_EQ(steady_state({}, 100, 0).steps, 0);
}

}  // namespace
}  // namespace normlab
